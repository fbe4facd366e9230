/*
 * log.c - the training log's writer: one flat JSON object per optimizer
 * step, one per line, flushed at once (the format is in log.h).
 *
 * printf's %g is locale-dependent only in its decimal point, and the
 * program never calls setlocale, so it prints '.' as JSON needs.
 */
#include "log.h"

#include "base/base.h"
#include "io/file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct log_file {
    FILE *f;
    char *path;
};

const char *log_number(char *buf, size_t n, double v, int digits)
{
    if (!isfinite(v))
        snprintf(buf, n, "null");
    else
        snprintf(buf, n, "%.*g", digits, v == 0 ? 0.0 : v); /* no "-0" */
    return buf;
}

log_file *log_open(const char *path, bool append)
{
    if (!path)
        return amp_fail_null(AMP_ERR_ARG, "log: NULL path");
    log_file *l = calloc(1, sizeof *l);
    char *copy = strdup(path);
    if (!l || !copy) {
        free(l);
        free(copy);
        return amp_fail_null(AMP_ERR_MEMORY, "log: %s: out of memory", path);
    }
    char why[160];
    l->f = file_fopen_write(path, append, why, sizeof why); /* a FIFO would block */
    if (!l->f) {
        amp_set_error(AMP_ERR_IO, "log: %s: %s", path, why);
        free(copy);
        free(l);
        return NULL;
    }
    l->path = copy;
    return l;
}

amp_status log_step(log_file *l, const log_record *r)
{
    if (!l || !r)
        return amp_set_error(AMP_ERR_ARG, "log_step: NULL %s", !l ? "log" : "record");
    char loss[32], lr[32], scale[32], gn[32], ms[32], num[32];
    fprintf(l->f, "{\"step\":%lld", (long long)r->step);
    if (r->epoch > 0)
        fprintf(l->f, ",\"epoch\":%lld", (long long)r->epoch);
    fprintf(l->f, ",\"loss\":%s,\"lr\":%s,\"scale\":%s,\"skipped\":%s,\"grad_norm\":%s,\"step_ms\":%s",
                  log_number(loss, sizeof loss, r->loss, 9), log_number(lr, sizeof lr, r->lr, 9),
                  log_number(scale, sizeof scale, r->scale, 17), r->skipped ? "true" : "false",
                  log_number(gn, sizeof gn, r->grad_norm, 9), log_number(ms, sizeof ms, r->step_ms, 6));
    if (r->has_val)
        fprintf(l->f, ",\"val_loss\":%s", log_number(num, sizeof num, r->val_loss, 9));
    if (r->tokens_per_s > 0)
        fprintf(l->f, ",\"tokens_per_s\":%s", log_number(num, sizeof num, r->tokens_per_s, 6));
    if (r->samples_per_s > 0)
        fprintf(l->f, ",\"samples_per_s\":%s", log_number(num, sizeof num, r->samples_per_s, 6));
    if (r->world_size > 1)
        fprintf(l->f, ",\"world_size\":%lld", (long long)r->world_size);
    if (r->health) {
        const amp_f16_health *h = r->health;
        double n = h->numel > 0 ? (double)h->numel : 1;
        fprintf(l->f, ",\"f16_zero\":%s", log_number(num, sizeof num, (double)h->zero / n, 6));
        fprintf(l->f, ",\"f16_flush\":%s", log_number(num, sizeof num, (double)h->underflow / n, 6));
        fprintf(l->f, ",\"f16_subnormal\":%s", log_number(num, sizeof num, (double)h->subnormal / n, 6));
        fprintf(l->f, ",\"f16_overflow\":%s",
                log_number(num, sizeof num, (double)(h->overflow + h->nonfinite) / n, 6));
    }
    if (r->health_scaled) {
        const amp_f16_health *h = r->health_scaled;
        double n = h->numel > 0 ? (double)h->numel : 1;
        fprintf(l->f, ",\"f16_flush_scaled\":%s", log_number(num, sizeof num, (double)h->underflow / n, 6));
        fprintf(l->f, ",\"f16_subnormal_scaled\":%s", log_number(num, sizeof num, (double)h->subnormal / n, 6));
        fprintf(l->f, ",\"f16_overflow_scaled\":%s",
                log_number(num, sizeof num, (double)(h->overflow + h->nonfinite) / n, 6));
    }
    if (r->has_stall) {
        fprintf(l->f, ",\"stalled\":%s", log_number(num, sizeof num, r->stalled, 6));
        if (r->stalled_worst) /* (a module path: letters, digits, '.', '_') */
            fprintf(l->f, ",\"stalled_worst\":\"%s\"", r->stalled_worst);
        else
            fputs(",\"stalled_worst\":null", l->f);
        fprintf(l->f, ",\"stalled_worst_fraction\":%s", log_number(num, sizeof num, r->stalled_worst_fraction, 6));
    }
    fputs("}\n", l->f);
    /* A failed fprintf sets the stream's error flag: one check covers all. */
    if (fflush(l->f) != 0 || ferror(l->f))
        return amp_set_error(AMP_ERR_IO, "log: cannot write %s: %s", l->path, strerror(errno));
    return AMP_OK;
}

amp_status log_event(log_file *l, const char *json)
{
    if (!l || !json)
        return amp_set_error(AMP_ERR_ARG, "log_event: NULL %s", !l ? "log" : "line");
    fputs(json, l->f);
    fputc('\n', l->f);
    if (fflush(l->f) != 0 || ferror(l->f))
        return amp_set_error(AMP_ERR_IO, "log: cannot write %s: %s", l->path, strerror(errno));
    return AMP_OK;
}

amp_status log_close(log_file *l)
{
    if (!l)
        return AMP_OK;
    amp_status st = AMP_OK;
    if (fclose(l->f) != 0)
        st = amp_set_error(AMP_ERR_IO, "log: cannot close %s: %s", l->path, strerror(errno));
    free(l->path);
    free(l);
    return st;
}
