/*
 * anomaly_cli.c - train's --detect-anomaly: the library's anomaly check
 * (amp_anomaly_*, src/amp/anomaly.c) on for the training steps, one pass
 * per micro-batch (its step and micro-batch, 1-based, in the reports).
 *
 * Without --anomaly-continue the first op whose result or gradient holds
 * inf/NaN fails, the step stops there (no optimizer step: the weights are
 * the last good step's) and train exits 1 after saving them to --save.
 * With the grad scaler this is PyTorch's detect_anomaly too: an inf
 * gradient at a too-large scale stops the run. --anomaly-continue lets the
 * scaler skip such steps: each op is reported once, and a skipped step
 * names the op its first inf/NaN came from.
 *
 * Each report is a line on stderr ("anomaly: op=... module=... ...") and,
 * with --log, a flat JSON object {"event":"anomaly","step":..,...} (flat:
 * the log's lines hold no nested values; `ampc plot` skips events).
 */
#include "anomaly_cli.h"

#include "cli.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool on, keep_going;
static log_file *events;
static int shown;                       /* reports shown so far */
static amp_anomaly_report step_first;   /* the step's first inf/NaN, over its micro-batches */
static bool step_has;
static bool halted;                     /* a report stopped the run */

int anomaly_cli_begin(const train_opts *o, log_file *lf)
{
    on = o->detect_anomaly || o->anomaly_continue;
    if (!on)
        return -1;
    keep_going = o->anomaly_continue;
    events = lf;
    shown = 0;
    if (amp_anomaly_enable(true) != AMP_OK) {
        fprintf(stderr, "ampc: --detect-anomaly: %s\n", amp_last_error());
        on = false;
        return 1;
    }
    amp_anomaly_set_continue(keep_going);
    return -1;
}

void anomaly_cli_end(void)
{
    if (on)
        amp_anomaly_enable(false);
    on = false;
}

void anomaly_cli_pass(int64_t step, int64_t j)
{
    if (!on)
        return;
    if (j == 0)
        step_has = false;
    amp_anomaly_set_context(step + 1, j + 1);
}

/* printf into buf at *at (n bytes), never past its end. */
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
    if (*at >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *at, n - *at, fmt, ap);
    va_end(ap);
    *at = k < 0 ? n : *at + (size_t)k;
}

/* s as a JSON string's content (quotes, backslashes and controls escaped). */
static void put_str(char *buf, size_t n, size_t *at, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            put(buf, n, at, "\\%c", ch);
        else if (ch < 0x20)
            put(buf, n, at, "\\u%04x", ch);
        else
            put(buf, n, at, "%c", ch);
    }
}

/* Tensor p's keys: p_dtype, p_shape (a string, "2x16": the line stays
 * flat), p_min, p_max, p_absmax (null when no element is finite),
 * p_nonfinite. */
static void put_tensor(char *buf, size_t n, size_t *at, const char *p, const amp_anomaly_tensor *d)
{
    char num[32];
    put(buf, n, at, ",\"%s_dtype\":\"%s\",\"%s_shape\":\"", p, amp_dtype_name(d->dtype), p);
    for (int i = 0; i < d->shape.ndim; i++)
        put(buf, n, at, "%s%lld", i ? "x" : "", (long long)d->shape.d[i]);
    put(buf, n, at, "\",\"%s_min\":%s", p, log_number(num, sizeof num, d->min, 9));
    put(buf, n, at, ",\"%s_max\":%s", p, log_number(num, sizeof num, d->max, 9));
    put(buf, n, at, ",\"%s_absmax\":%s", p, log_number(num, sizeof num, d->absmax, 9));
    put(buf, n, at, ",\"%s_nonfinite\":%lld", p, (long long)d->nonfinite);
}

/* The report's event line (one flat JSON object) into buf. */
static void event_json(const amp_anomaly_report *r, char *buf, size_t n)
{
    size_t at = 0;
    put(buf, n, &at, "{\"event\":\"anomaly\",\"step\":%lld,\"micro_batch\":%lld,\"phase\":\"%s\",\"op\":\"",
        (long long)r->step, (long long)r->micro_batch, r->backward ? "backward" : "forward");
    put_str(buf, n, &at, r->op);
    put(buf, n, &at, "\",\"module\":\"");
    put_str(buf, n, &at, r->module);
    put(buf, n, &at, "\",\"category\":\"%s\",\"dtype\":\"%s\",\"nonfinite\":%lld,\"numel\":%lld,"
        "\"inputs_finite\":%s,\"recompute\":%s,\"continued\":%s",
        amp_cast_category_name(r->category), amp_dtype_name(r->dtype), (long long)r->nonfinite,
        (long long)r->numel, r->inputs_finite ? "true" : "false", r->recompute ? "true" : "false",
        keep_going ? "true" : "false");
    if (r->backward)
        put(buf, n, &at, ",\"grad_of_input\":%d", r->result);
    put(buf, n, &at, ",\"inputs\":%d", r->n_inputs);
    for (int i = 0; i < r->n_inputs && i < AMP_ANOMALY_INPUTS; i++) {
        char p[8];
        snprintf(p, sizeof p, "in%d", i);
        put_tensor(buf, n, &at, p, &r->in[i]);
    }
    if (r->backward && r->grad.dtype != AMP_DTYPE_COUNT)
        put_tensor(buf, n, &at, "grad_out", &r->grad);
    put(buf, n, &at, "}");
}

/* The report on stderr and in the log. -1, or 1 when the log fails. */
static int show(const amp_anomaly_report *r)
{
    char line[2048];
    amp_anomaly_format(r, line, sizeof line);
    fprintf(stderr, "%s\n", line);
    if (!events)
        return -1;
    char json[8192];
    event_json(r, json, sizeof json);
    if (log_event(events, json) != AMP_OK) {
        fprintf(stderr, "ampc: --log: %s\n", amp_last_error());
        return 1;
    }
    return -1;
}

int anomaly_cli_after_pass(void)
{
    if (!on)
        return -1;
    amp_anomaly_report r;
    if (!step_has && amp_anomaly_last(&r)) {
        step_first = r;
        step_has = true;
    }
    int rc = -1;
    for (; shown < amp_anomaly_count() && rc < 0; shown++)
        if (amp_anomaly_get(shown, &r) == AMP_OK)
            rc = show(&r);
    return rc;
}

bool anomaly_cli_stopped(void)
{
    amp_anomaly_report r;
    if (!on || keep_going || !amp_anomaly_last(&r))
        return false;
    halted = true;
    show(&r); /* (the run stops either way: a log that fails was said) */
    shown = amp_anomaly_count();
    const char *why = !r.inputs_finite ? "its inputs already held inf/NaN (see the non-finite counts)"
                      : r.dtype == AMP_F16 ? "the op overflowed f16 (largest 65504) from finite inputs"
                      : r.dtype == AMP_BF16 ? "the op made inf/NaN in bf16 from finite inputs"
                                            : "the op made inf/NaN from finite inputs";
    fprintf(stderr, "ampc: --detect-anomaly stopped the run at step %lld, micro-batch %lld (%s); no optimizer "
                    "step was taken%s\n",
            (long long)r.step, (long long)r.micro_batch, why,
            r.backward ? "; with the grad scaler an inf gradient at a large scale is usual: --anomaly-continue "
                         "reports it once and lets the scaler skip the step"
                       : "");
    return true;
}

bool anomaly_cli_halted(void) { return halted; }

void anomaly_cli_skipped(int64_t step)
{
    if (!on)
        return;
    if (step_has)
        fprintf(stderr, "ampc: step %lld skipped by the grad scaler; its first inf/NaN: op=%s module=%s phase=%s "
                        "micro_batch=%lld\n",
                (long long)step + 1, step_first.op, step_first.module[0] ? step_first.module : "(root)",
                step_first.backward ? "backward" : "forward", (long long)step_first.micro_batch);
    else
        fprintf(stderr, "ampc: step %lld skipped by the grad scaler; no op's result or gradient held inf/NaN "
                        "(the gradients overflowed where they are summed or unscaled)\n",
                (long long)step + 1);
}
