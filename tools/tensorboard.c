/*
 * tensorboard.c - `ampc train --tensorboard DIR`: the event file's life
 * (what it holds is in tensorboard.h, its bytes in tb_encode.c). Every
 * event is one fwrite of a whole record and a flush; after the first
 * failure the writer says why, once, and writes nothing more.
 */
#include "tensorboard.h"
#include "tb_encode.h"

#include "base/base.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct tb_writer {
    FILE *f;
    char *path;
    bool failed;
    tb_buf sum, ev, rec; /* the summary being built, its event, the record: reused */
};

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir -p: 0 or the errno of the component that could not be made. */
static int make_dirs(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return errno;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return errno;
    return 0;
}

int tb_dir_check(const char *dir)
{
    struct stat st;
    int err = *dir ? make_dirs(dir) : ENOENT;
    if (!err && stat(dir, &st) != 0)
        err = errno;
    if (!err && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ampc train: --tensorboard %s: exists and is not a directory (nothing was trained)\n", dir);
        return EXIT_USAGE;
    }
    if (err) {
        fprintf(stderr, "ampc train: --tensorboard %s: cannot create the directory: %s (nothing was trained)\n", dir,
                strerror(err));
        return EXIT_USAGE;
    }
    /* The probe: a file created, written and removed, as the event file
     * will be (a read-only or full disk is said now). */
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/.ampc-tensorboard-check.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd >= 0) {
        err = write(fd, "ampc", 4) == 4 ? 0 : errno ? errno : EIO;
        if (close(fd) != 0 && !err)
            err = errno;
        if (unlink(probe) != 0 && !err)
            err = errno;
    } else {
        err = errno;
    }
    if (err) {
        fprintf(stderr, "ampc train: --tensorboard %s: cannot write a file there: %s (nothing was trained)\n", dir,
                strerror(err));
        return EXIT_USAGE;
    }
    return -1;
}

/* The first failure: said once, and nothing more is written. */
static void tb_fail(tb_writer *w, const char *why)
{
    if (w->failed)
        return;
    w->failed = true;
    fprintf(stderr, "ampc: --tensorboard: cannot write %s: %s; no more TensorBoard events are written (the training "
                    "goes on)\n", w->path, why);
}

/* Frames the file_version event, or an event of the summary built in
 * w->sum at step, writes it whole and flushes it. NULL, or why not. */
static const char *write_event(tb_writer *w, int64_t step, bool version)
{
    w->ev.n = w->rec.n = 0;
    if (version)
        tb_event_file_version(&w->ev, wall_time());
    else
        tb_event_summary(&w->ev, wall_time(), step, &w->sum);
    tb_record(&w->rec, w->ev.p, w->ev.n);
    bool oom = w->sum.oom || w->ev.oom || w->rec.oom;
    w->sum.n = 0;
    w->sum.oom = w->ev.oom = w->rec.oom = false;
    if (oom)
        return "out of memory";
    errno = 0;
    if (fwrite(w->rec.p, 1, w->rec.n, w->f) != w->rec.n || fflush(w->f) != 0)
        return strerror(errno ? errno : EIO);
    return NULL;
}

/* write_event at step, its failure said (once). */
static void emit(tb_writer *w, int64_t step)
{
    const char *why = w->failed ? NULL : write_event(w, step, false);
    w->sum.n = 0;
    if (why)
        tb_fail(w, why);
}

tb_writer *tb_open(const char *dir)
{
    tb_writer *w = calloc(1, sizeof *w);
    char host[256] = "localhost";
    if (!w)
        return amp_fail_null(AMP_ERR_MEMORY, "--tensorboard %s: out of memory", dir);
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    for (char *c = host; *c; c++) /* a file name's part */
        if (*c == '/' || *c < ' ')
            *c = '_';
    /* TensorFlow's name; <n> tells apart files one process opens within a
     * second (and a stale file of a recycled pid). */
    const long long now = (long long)time(NULL);
    int fd = -1, err = 0;
    char path[PATH_MAX + 512];
    for (int n = 0; fd < 0 && n < 1000; n++) {
        snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, now, host, (long)getpid(), n);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && (err = errno) != EEXIST)
            break;
    }
    if (fd >= 0 && !(w->f = fdopen(fd, "wb"))) {
        err = errno;
        close(fd);
    }
    if (!w->f || !(w->path = strdup(path))) {
        if (w->f)
            fclose(w->f);
        free(w);
        return amp_fail_null(AMP_ERR_IO, "cannot create %s: %s", path, strerror(err ? err : ENOMEM));
    }
    const char *why = write_event(w, 0, true);
    if (why) {
        amp_set_error(AMP_ERR_IO, "cannot write %s: %s", path, why);
        fclose(w->f);
        unlink(path);
        free(w->path);
        tb_buf_free(&w->ev);
        tb_buf_free(&w->rec);
        free(w);
        return NULL;
    }
    return w;
}

/* A scalar into the summary being built; a non-finite value is left out
 * (the log writes null). */
static void scalar(tb_writer *w, const char *tag, double v)
{
    if (isfinite(v))
        tb_summary_scalar(&w->sum, tag, (float)v);
}

/* The f16 health fractions, tags f16/<what><suffix>. */
static void health(tb_writer *w, const amp_f16_health *h, const char *suffix, bool with_zero)
{
    const double n = h->numel > 0 ? (double)h->numel : 1;
    const struct {
        const char *what;
        int64_t count;
    } rows[] = {{"zero", h->zero}, {"flush", h->underflow}, {"subnormal", h->subnormal},
                {"overflow", h->overflow + h->nonfinite}};
    for (size_t i = with_zero ? 0 : 1; i < sizeof rows / sizeof rows[0]; i++) {
        char tag[64];
        snprintf(tag, sizeof tag, "f16/%s%s", rows[i].what, suffix);
        scalar(w, tag, (double)rows[i].count / n);
    }
}

void tb_step(tb_writer *w, const log_record *r, bool scaled, int64_t skipped_total)
{
    if (!w || w->failed)
        return;
    scalar(w, "train/loss", r->loss);
    scalar(w, "train/lr", r->lr);
    if (scaled) {
        scalar(w, "amp/loss_scale", r->scale);
        scalar(w, "amp/skipped_steps", (double)skipped_total);
    }
    scalar(w, "train/grad_norm", r->grad_norm);
    scalar(w, "train/step_ms", r->step_ms);
    if (r->tokens_per_s > 0)
        scalar(w, "train/tokens_per_s", r->tokens_per_s);
    if (r->samples_per_s > 0)
        scalar(w, "train/samples_per_s", r->samples_per_s);
    if (r->has_val)
        scalar(w, "eval/val_loss", r->val_loss);
    if (r->health)
        health(w, r->health, "", true);
    if (r->health_scaled)
        health(w, r->health_scaled, "_scaled", false);
    if (r->has_stall && !isnan(r->stalled)) { /* (a skipped step: nothing to draw) */
        scalar(w, "amp/stalled", r->stalled);
        scalar(w, "amp/stalled_worst", r->stalled_worst_fraction);
    }
    emit(w, r->step);
}

typedef struct {
    int index;
    double lost; /* the share of elements flushed, subnormal or overflowing in f16 */
} param_rank;

static int worst_first(const void *a, const void *b)
{
    const param_rank *x = a, *y = b;
    if (x->lost != y->lost)
        return x->lost < y->lost ? 1 : -1;
    return x->index - y->index;
}

/* Adds the histogram of params[i]'s gradient, tagged grad/<its name>. */
static bool grad_histo(tb_writer *w, const amp_module *m, amp_tensor *p, int i)
{
    const amp_tensor *g = amp_tensor_grad(p);
    int64_t n = amp_tensor_numel(g);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v || amp_tensor_copy_out(g, v, AMP_F32) != AMP_OK) {
        free(v);
        return false;
    }
    const char *name = NULL;
    if (amp_module_param(m, i, &name) != p || !name) /* (the trainer's list is the module's) */
        name = NULL;
    char tag[512];
    if (name)
        snprintf(tag, sizeof tag, "grad/%s", name);
    else
        snprintf(tag, sizeof tag, "grad/param%d", i);
    tb_histo h;
    if (tb_histo_of(v, n, &h)) /* (no finite element: nothing to draw) */
        tb_summary_histo(&w->sum, tag, &h);
    free(v);
    return true;
}

void tb_grads(tb_writer *w, int64_t step, const amp_module *m, amp_tensor *const *params, int n, double scale)
{
    if (!w || w->failed || n <= 0)
        return;
    param_rank *rk = malloc(sizeof *rk * (size_t)n);
    int k = 0;
    const bool mem = rk != NULL;
    bool ok = mem;
    for (int i = 0; ok && i < n; i++) {
        amp_f16_health at;
        if (!amp_tensor_grad(params[i]))
            continue;
        if (!(ok = amp_grad_f16_health(&params[i], 1, scale, &at, NULL) == AMP_OK))
            break;
        double lost = (double)(at.underflow + at.subnormal + at.overflow + at.nonfinite);
        rk[k++] = (param_rank){i, at.numel > 0 ? lost / (double)at.numel : 0};
    }
    if (ok)
        qsort(rk, (size_t)k, sizeof *rk, worst_first);
    for (int j = 0; ok && j < k && j < TB_WORST_PARAMS; j++)
        ok = grad_histo(w, m, params[rk[j].index], rk[j].index);
    free(rk);
    if (!ok) {
        char why[600];
        snprintf(why, sizeof why, "reading the gradients at step %lld: %s", (long long)step,
                 mem ? amp_last_error() : "out of memory");
        w->sum.n = 0;
        tb_fail(w, why);
        return;
    }
    if (w->sum.n)
        emit(w, step);
}

void tb_eval(tb_writer *w, int64_t step, const char *tag, double v)
{
    if (!w || w->failed)
        return;
    scalar(w, tag, v);
    if (w->sum.n)
        emit(w, step);
}

bool tb_close(tb_writer *w)
{
    if (!w)
        return true;
    if (fclose(w->f) != 0)
        tb_fail(w, strerror(errno));
    bool ok = !w->failed;
    free(w->path);
    tb_buf_free(&w->sum);
    tb_buf_free(&w->ev);
    tb_buf_free(&w->rec);
    free(w);
    return ok;
}
