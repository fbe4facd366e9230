/*
 * anomaly.c - PyTorch's detect_anomaly, naming the op (ampc.h's
 * amp_anomaly_*): the node observer (autograd/graph.h) checks each op's
 * result after its forward and each gradient after a node's backward for
 * inf/NaN with the backend's count (one pass over what the kernel just
 * wrote). Only when one is found does it read the inputs (on the host, a
 * copy from a GPU first) for their statistics: the common case costs one
 * pass per result.
 *
 * State is the process's, as the observer is: set between steps.
 *   reports    one per distinct (phase, op, module), first occurrence
 *   pass       the current pass's first anomaly (an index into reports)
 */
#include "autograd/graph.h"
#include "backend/backend.h"
#include "base/base.h"
#include "dtype/dtype.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool enabled, keep_going;
static int64_t ctx_step = -1, ctx_micro = -1;
static amp_anomaly_report *reports; /* grows: a run can meet many distinct ops */
static int n_reports, cap_reports;
static int pass_index = -1;         /* reports[pass_index]: the pass's first anomaly */
static amp_anomaly_report pass_report;
static bool pass_has;

/* Inf/NaN in t (0 for integer dtypes); -1 with the error set. */
static int64_t count_bad(const amp_tensor *t)
{
    if (!amp_dtype_is_float(t->dtype) || t->numel == 0)
        return 0;
    const amp_backend *be = backend_of(tensor_device(t));
    if (!be->count_nonfinite)
        return backend_missing(be, "anomaly check", "count_nonfinite"), -1;
    int64_t n = -1;
    if (tensor_device(t) == AMP_CPU) /* the backend's memory is the host's: no copy */
        return be->count_nonfinite(tensor_ptr(t), t->dtype, t->numel, &n) == AMP_OK ? n : -1;
    return amp_tensor_count_nonfinite(t);
}

/* t's statistics into *d (min / max / absmax over its finite elements),
 * read on the host. */
static amp_status describe(const amp_tensor *t, amp_anomaly_tensor *d)
{
    *d = (amp_anomaly_tensor){.dtype = t->dtype, .shape = t->shape, .min = NAN, .max = NAN, .absmax = NAN};
    if (t->numel == 0)
        return AMP_OK;
    size_t nbytes = (size_t)t->numel * amp_dtype_size(t->dtype);
    void *host = amp_alloc(nbytes);
    if (!host)
        return amp_set_error(AMP_ERR_MEMORY, "anomaly check: out of memory (%zu bytes)", nbytes);
    amp_status st = backend_of(tensor_device(t))->copy(host, AMP_CPU, tensor_ptr(t), tensor_device(t), nbytes);
    if (st == AMP_OK) {
        double lo = INFINITY, hi = -INFINITY, am = 0;
        bool any = false;
        for (int64_t i = 0; i < t->numel; i++) {
            double v = t->dtype == AMP_I64 ? (double)((const int64_t *)host)[i] : load_f32(host, t->dtype, (size_t)i);
            if (!isfinite(v)) {
                d->nonfinite++;
                continue;
            }
            any = true;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            am = fabs(v) > am ? fabs(v) : am;
        }
        if (any) {
            d->min = lo;
            d->max = hi;
            d->absmax = am;
        }
    }
    amp_free(host);
    return st;
}

/* The report of bad (result index `result`, nonfinite elements) of node n. */
static amp_status build(const node *n, bool backward, const amp_tensor *bad, int result, int64_t nonfinite,
                        amp_anomaly_report *r)
{
    *r = (amp_anomaly_report){.step = ctx_step,
                              .micro_batch = ctx_micro,
                              .backward = backward,
                              .recompute = !backward && autograd_in_backward(),
                              .device = tensor_device(bad),
                              .category = AMP_CAST_NONE,
                              .dtype = bad->dtype,
                              .result = result,
                              .nonfinite = nonfinite,
                              .numel = bad->numel,
                              .inputs_finite = true,
                              .n_inputs = n->n_in,
                              .grad = {.dtype = AMP_DTYPE_COUNT, .min = NAN, .max = NAN, .absmax = NAN}};
    snprintf(r->op, sizeof r->op, "%s", n->name ? n->name : "?");
    snprintf(r->module, sizeof r->module, "%s", n->scope ? n->scope : "");
    if (n->op >= 0) /* (the checkpoint node, op -1, has no row) */
        r->category = amp_autocast_category(n->name, r->device);
    for (int i = 0; i < n->n_in; i++) {
        amp_anomaly_tensor d, *dst = i < AMP_ANOMALY_INPUTS ? &r->in[i] : &d;
        amp_status st = describe(n->in[i], dst);
        if (st != AMP_OK)
            return st;
        r->inputs_finite &= dst->nonfinite == 0;
    }
    if (backward && n->grad) {
        amp_status st = describe(n->grad, &r->grad);
        if (st != AMP_OK)
            return st;
        r->inputs_finite &= r->grad.nonfinite == 0;
    }
    return AMP_OK;
}

/* The index of the report of (phase, op, module); -1 when none. */
static int find(const node *n, bool backward)
{
    const char *scope = n->scope ? n->scope : "";
    for (int i = 0; i < n_reports; i++)
        if (reports[i].backward == backward && strcmp(reports[i].op, n->name) == 0 &&
            strcmp(reports[i].module, scope) == 0)
            return i;
    return -1;
}

static amp_status push(const amp_anomaly_report *r)
{
    if (n_reports == cap_reports) {
        int cap = cap_reports ? 2 * cap_reports : 16;
        amp_anomaly_report *p = realloc(reports, (size_t)cap * sizeof *p);
        if (!p)
            return amp_set_error(AMP_ERR_MEMORY, "anomaly check: out of memory");
        reports = p;
        cap_reports = cap;
    }
    reports[n_reports++] = *r;
    return AMP_OK;
}

/* A non-finite `bad` (result `result` of node n): recorded, and, unless
 * continuing, the op fails with the report's line. */
static amp_status found(const node *n, bool backward, const amp_tensor *bad, int result, int64_t nonfinite)
{
    int i = find(n, backward);
    amp_anomaly_report r;
    if (i >= 0 && keep_going) { /* reported before: its statistics stand */
        r = reports[i];
    } else {
        amp_status st = build(n, backward, bad, result, nonfinite, &r);
        if (st != AMP_OK)
            return st;
        if (i < 0 && (st = push(&r)) != AMP_OK)
            return st;
        if (i < 0)
            i = n_reports - 1;
    }
    r.step = ctx_step;
    r.micro_batch = ctx_micro;
    pass_index = i;
    pass_report = r;
    pass_has = true;
    if (keep_going)
        return AMP_OK;
    char line[1024];
    amp_anomaly_format(&r, line, sizeof line);
    return amp_set_error(AMP_ERR_STATE, "%s", line);
}

static amp_status observe(void *ctx, const node *n, bool backward, amp_tensor *const *t, int n_t)
{
    (void)ctx;
    if (keep_going && pass_has) /* the rest of the pass follows from its first inf/NaN */
        return AMP_OK;
    for (int i = 0; i < n_t; i++) {
        if (!t[i])
            continue;
        int64_t bad = count_bad(t[i]);
        if (bad < 0)
            return amp_last_status();
        if (bad > 0)
            return found(n, backward, t[i], i, bad);
    }
    return AMP_OK;
}

static void clear_reports(void)
{
    free(reports);
    reports = NULL;
    n_reports = cap_reports = 0;
    pass_index = -1;
    pass_has = false;
}

amp_status amp_anomaly_enable(bool on)
{
    if (on && autograd_observer && autograd_observer != observe)
        return amp_set_error(AMP_ERR_STATE, "anomaly_enable: another node observer is set (one per process)");
    if (!on && autograd_observer != observe) {
        enabled = false;
        return AMP_OK;
    }
    clear_reports();
    autograd_set_observer(on ? observe : NULL, NULL);
    enabled = on;
    return AMP_OK;
}

bool amp_anomaly_enabled(void) { return enabled; }

void amp_anomaly_set_continue(bool on) { keep_going = on; }

void amp_anomaly_set_context(int64_t step, int64_t micro_batch)
{
    ctx_step = step;
    ctx_micro = micro_batch;
    pass_index = -1;
    pass_has = false;
}

int amp_anomaly_count(void) { return n_reports; }

amp_status amp_anomaly_get(int i, amp_anomaly_report *out)
{
    if (!out || i < 0 || i >= n_reports)
        return amp_set_error(AMP_ERR_ARG, "anomaly_get: %s (%d reports)", out ? "index out of range" : "NULL out",
                             n_reports);
    *out = reports[i];
    return AMP_OK;
}

bool amp_anomaly_last(amp_anomaly_report *out)
{
    if (out && pass_has)
        *out = pass_report;
    return pass_has;
}

/* The rest of buf from at, as snprintf's two first arguments: NULL and 0
 * once at has passed the end (a pointer past it would be undefined), so
 * the calls go on counting the whole line's length. */
#define TAIL(buf, n, at) ((size_t)(at) < (n) ? (buf) + (at) : NULL), ((size_t)(at) < (n) ? (n) - (size_t)(at) : 0)

/* " name=dtype[d0,d1] min=.. max=.. absmax=.. nonfinite=N" at buf + at. */
static int put_tensor(char *buf, size_t n, int at, const char *name, const amp_anomaly_tensor *d)
{
    char shape[96] = "[";
    size_t k = 1;
    for (int i = 0; i < d->shape.ndim && k < sizeof shape; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", i ? "," : "", (long long)d->shape.d[i]);
    if (k < sizeof shape - 1)
        snprintf(shape + k, sizeof shape - k, "]");
    return snprintf(TAIL(buf, n, at), " %s=%s%s min=%.6g max=%.6g absmax=%.6g nonfinite=%lld",
                    name, amp_dtype_name(d->dtype), shape, d->min, d->max, d->absmax, (long long)d->nonfinite);
}

int amp_anomaly_format(const amp_anomaly_report *r, char *buf, size_t n)
{
    if (!r)
        return snprintf(buf, n, "anomaly: (no report)");
    int at = snprintf(buf, n, "anomaly: op=%s module=%s phase=%s", r->op, r->module[0] ? r->module : "(root)",
                      r->backward ? "backward" : "forward");
    if (r->step >= 0)
        at += snprintf(TAIL(buf, n, at), " step=%lld", (long long)r->step);
    if (r->micro_batch >= 0)
        at += snprintf(TAIL(buf, n, at), " micro_batch=%lld", (long long)r->micro_batch);
    at += snprintf(TAIL(buf, n, at),
                   " dtype=%s category=%s %s=%lld/%lld inputs_finite=%s%s", amp_dtype_name(r->dtype),
                   amp_cast_category_name(r->category), r->backward ? "grad_nonfinite" : "nonfinite",
                   (long long)r->nonfinite, (long long)r->numel,
                   r->inputs_finite ? "true" : "false", r->recompute ? " recompute=true" : "");
    if (r->backward)
        at += snprintf(TAIL(buf, n, at), " grad_of_input=%d", r->result);
    for (int i = 0; i < r->n_inputs && i < AMP_ANOMALY_INPUTS; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        at += put_tensor(buf, n, at, name, &r->in[i]);
    }
    if (r->backward && r->grad.dtype != AMP_DTYPE_COUNT)
        at += put_tensor(buf, n, at, "grad_out", &r->grad);
    return at;
}
