/*
 * scaler.c - the grad scaler: torch.amp.GradScaler's semantics in C, the
 * same on every device.
 *
 * The scale is an f32 value; scale(loss) multiplies by it; unscale divides
 * an optimizer's gradients by it (multiplying by the f32 inverse computed
 * in double, as PyTorch) in one fused pass that also records any inf/NaN;
 * step skips the optimizer when one was found; update backs off or grows
 * the scale. Each optimizer goes READY -> UNSCALED -> STEPPED and back to
 * READY at update, and each misuse gets PyTorch's message.
 *
 * Opt-in extras (off by default): min_scale, max_scale, hysteresis.
 *
 * Where the state lives: the first scale() makes the scale, a 0-d f32
 * tensor, on the loss's device, and beside it a be_scaler_state (tracker,
 * hysteresis, history, counts, each optimizer's found_inf) in the memory
 * of that device's backend. unscale, the guarded step and update are
 * backend primitives on that state (backend.h, section amp), so an
 * iteration never waits for the device; the getters, update_to and the
 * loaders copy it to the host with the backend's copy (on a GPU, a
 * synchronisation point, as scaler.get_scale()). Before the first scale()
 * the state is a host copy in the scaler itself.
 *
 * Across ranks (data parallelism): unscale's found_inf is reduced with
 * MAX over the ranks before the step decision (scaler_unscale), after the
 * ranks agreed that each could prepare its part.
 *
 * This file keeps the host's logic: stages, messages, getters; the f16
 * health diagnostics are in health.c.
 */
#include "amp/amp.h"
#include "backend/backend.h"
#include "backend/scaler_rule.h"
#include "base/base.h"
#include "comm/comm.h"
#include "dtype/dtype.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { STAGE_READY = 0, STAGE_UNSCALED, STAGE_STEPPED };

/* Each optimizer the scaler meets in an iteration gets a record: its
 * stage and whether unscale saw a gradient; its found_inf is the state's
 * found_inf at the record's index. Records are dropped at update. */
typedef struct {
    amp_optim *opt;
    int stage;
    bool recorded; /* unscale saw at least one gradient */
} opt_record;

struct amp_scaler {
    amp_scaler_opts o;
    bool started;          /* scale() has been called: _scale is not None */
    amp_tensor *scale_t;   /* 0-d f32, the scale scale() multiplies by */
    const amp_backend *be; /* the backend of scale_t's device */
    be_scaler_state *st;   /* in be's memory, made with scale_t */
    be_scaler_state host;  /* the state until scale_t exists */
    opt_record *recs;
    int n_recs, cap_recs;
    be_buf *bufs; /* unscale's list of gradients, kept between steps */
    int cap_bufs;
};

amp_scaler_opts amp_scaler_defaults(void)
{
    /* torch.amp.GradScaler's defaults. */
    return (amp_scaler_opts){.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                             .growth_interval = 2000, .enabled = true};
}

static amp_status check_opts(const amp_scaler_opts *o)
{
    if (!o->enabled)
        return AMP_OK;
    /* PyTorch checks only these two; the rest would fail silently there. */
    if (!(o->growth_factor > 1.0))
        return amp_set_error(AMP_ERR_ARG, "scaler: the growth factor must be > 1.0 (got %g)",
                             o->growth_factor);
    if (!(o->backoff_factor < 1.0))
        return amp_set_error(AMP_ERR_ARG, "scaler: the backoff factor must be < 1.0 (got %g)",
                             o->backoff_factor);
    if (!(o->backoff_factor > 0.0))
        return amp_set_error(AMP_ERR_ARG, "scaler: the backoff factor must be > 0 (got %g)",
                             o->backoff_factor);
    /* The scale is an f32, scale * factor rounded to f32: a factor within
     * half an f32 ulp of 1 would leave a power-of-two scale where it is,
     * forever (growth: 1 + 2^-24 or less, which rounds to 1 in f32;
     * backoff: above 1 - 2^-24). Every factor past those bounds moves
     * every normal scale by at least one ulp. */
    if (!(o->growth_factor > 1.0 + 0x1p-24))
        return amp_set_error(AMP_ERR_ARG,
                             "scaler: the growth factor %.17g rounds to 1 in fp32, so the scale (an fp32) would never "
                             "grow; give one above 1 + 2^-24 (1.0000001 or more)",
                             o->growth_factor);
    if (!(o->backoff_factor <= 1.0 - 0x1p-24))
        return amp_set_error(AMP_ERR_ARG,
                             "scaler: the backoff factor %.17g is within 2^-24 of 1, so the scale (an fp32) would "
                             "never back off; give one of at most 1 - 2^-24 (0.99999994)",
                             o->backoff_factor);
    /* The scale is kept as an f32: 1e300 would become inf (every step
     * skipped, forever), 1e-50 zero (every gradient zero). */
    if (!((float)o->init_scale > 0.0f) || !isfinite((float)o->init_scale))
        return amp_set_error(AMP_ERR_ARG, "scaler: init_scale must be positive and finite as an f32 (got %g)",
                             o->init_scale);
    if (o->growth_interval < 1)
        return amp_set_error(AMP_ERR_ARG, "scaler: growth_interval must be >= 1 (got %lld)",
                             (long long)o->growth_interval);
    if (o->min_scale < 0 || o->max_scale < 0 || o->hysteresis < 0)
        return amp_set_error(AMP_ERR_ARG,
                             "scaler: min_scale %g, max_scale %g and hysteresis %d must be >= 0",
                             o->min_scale, o->max_scale, o->hysteresis);
    if (o->max_scale > 0 && o->min_scale > o->max_scale)
        return amp_set_error(AMP_ERR_ARG, "scaler: min_scale %g is above max_scale %g", o->min_scale,
                             o->max_scale);
    return AMP_OK;
}


amp_scaler *amp_scaler_new(amp_scaler_opts o)
{
    if (check_opts(&o) != AMP_OK)
        return NULL;
    amp_scaler *s = calloc(1, sizeof *s);
    if (!s)
        return amp_fail_null(AMP_ERR_MEMORY, "scaler: out of memory");
    s->o = o;
    s->host.hysteresis_left = o.hysteresis > 1 ? o.hysteresis : 1;
    return s;
}

void amp_scaler_free(amp_scaler *s)
{
    if (!s)
        return;
    amp_tensor_free(s->scale_t);
    if (s->st)
        s->be->free(s->st);
    free(s->recs);
    free(s->bufs);
    free(s);
}

/* ------------------------------------------------ the state, host side */

/* The state copied to the host (from the backend once it lives there). */
static amp_status pull(const amp_scaler *s, be_scaler_state *st)
{
    if (!s->st) {
        *st = s->host;
        return AMP_OK;
    }
    return s->be->copy(st, AMP_CPU, s->st, s->be->device, sizeof *st);
}

/* st back to where the state lives. */
static amp_status push(amp_scaler *s, const be_scaler_state *st)
{
    if (!s->st) {
        s->host = *st;
        return AMP_OK;
    }
    return s->be->copy(s->st, s->be->device, st, AMP_CPU, sizeof *st);
}

/* The scale, copied to the host (NaN if the copy failed). */
static float scale_value(const amp_scaler *s)
{
    float v = NAN;
    if (s->be->copy(&v, AMP_CPU, tensor_ptr(s->scale_t), s->be->device, sizeof v) != AMP_OK)
        return NAN;
    return v;
}

static amp_status set_scale(amp_scaler *s, float v)
{
    tensor_bump(s->scale_t);
    return s->be->copy(tensor_ptr(s->scale_t), s->be->device, &v, AMP_CPU, sizeof v);
}

/* The lazy start of PyTorch's _scale: made from init_scale at first use,
 * on the loss's device, with the state (which a state_load may have set
 * before) copied into that device's backend. */
static amp_status ensure_scale(amp_scaler *s, amp_device dev)
{
    if (s->scale_t) {
        if (tensor_device(s->scale_t) != dev)
            return amp_set_error(AMP_ERR_DEVICE, "scaler: its scale lives on %s but the loss is on %s (use one "
                                 "scaler per device)", amp_device_name(tensor_device(s->scale_t)),
                                 amp_device_name(dev));
        return AMP_OK;
    }
    const amp_backend *be = backend_of(dev);
    amp_tensor *t = tensor_new_on(AMP_SHAPE(), AMP_F32, dev);
    if (!t)
        return amp_last_status();
    amp_status rc = amp_tensor_fill(t, s->o.init_scale);
    be_scaler_state *d = NULL;
    if (rc == AMP_OK && !(d = be->alloc(sizeof *d)))
        rc = amp_set_error(AMP_ERR_MEMORY, "scaler: out of %s memory for its state", be->name);
    if (rc == AMP_OK)
        rc = be->copy(d, dev, &s->host, AMP_CPU, sizeof *d);
    if (rc != AMP_OK) {
        amp_tensor_free(t);
        if (d)
            be->free(d);
        return rc;
    }
    s->scale_t = t;
    s->be = be;
    s->st = d;
    return AMP_OK;
}


static amp_status check_started(const amp_scaler *s, const char *fn)
{
    if (s->started)
        return AMP_OK;
    return amp_set_error(AMP_ERR_STATE,
                         "Attempted %s but _scale is None. This may indicate your script did not use "
                         "amp_scaler_scale(loss) earlier in the iteration.",
                         fn);
}

/* o's record for this iteration (a new one at its first unscale_ or
 * step), once the loss was scaled; NULL with the error set. */
static opt_record *record_for(amp_scaler *s, amp_optim *o, const char *fn)
{
    if (check_started(s, fn) != AMP_OK)
        return NULL;
    for (int i = 0; i < s->n_recs; i++)
        if (s->recs[i].opt == o)
            return &s->recs[i];
    if (s->n_recs == s->cap_recs) {
        int cap = s->cap_recs ? s->cap_recs * 2 : 4;
        opt_record *r = realloc(s->recs, (size_t)cap * sizeof *r);
        if (!r)
            return amp_fail_null(AMP_ERR_MEMORY, "scaler: out of memory");
        s->recs = r;
        s->cap_recs = cap;
    }
    s->recs[s->n_recs] = (opt_record){.opt = o};
    return &s->recs[s->n_recs++];
}

amp_tensor *amp_scaler_scale(amp_scaler *s, amp_tensor *loss)
{
    if (!s)
        return amp_fail_null(AMP_ERR_ARG, "scaler_scale: NULL scaler");
    if (!loss)
        return NULL;
    if (!s->o.enabled)
        return loss;
    if (ensure_scale(s, tensor_device(loss)) != AMP_OK)
        return NULL;
    s->started = true;
    return amp_mul(loss, s->scale_t);
}

/* ---------------------------------------------------------- unscale */

/* The backend's unscale of bufs[0..k) into found_inf (zeroed first).
 * *divided is set once the gradients are divided. */
static amp_status run_unscale(const amp_scaler *s, const be_buf *bufs, int k, float *found_inf, bool *divided)
{
    const float zero = 0.0f; /* a one-element fill: no copy from the host */
    BACKEND_CALL(s->be, "scaler_unscale", fill, found_inf, 1, &zero, sizeof zero);
    if (k > 0)
        BACKEND_CALL(s->be, "scaler_unscale", unscale, bufs, k, tensor_f32(s->scale_t), found_inf);
    *divided = true;
    return AMP_OK;
}

/* amp_scaler_unscale's work, in the unscale phase. */
static amp_status scaler_unscale(amp_scaler *s, amp_optim *o);

amp_status amp_scaler_unscale(amp_scaler *s, amp_optim *o)
{
    amp_phase_begin(AMP_PHASE_UNSCALE);
    amp_status st = scaler_unscale(s, o);
    amp_phase_end(AMP_PHASE_UNSCALE);
    return st;
}

/* This rank's part before anything is divided: the record's slot, every
 * gradient checked (f16 ones need master weights, all on the scale's
 * device), the buffer list in s->bufs (f16 gradients with f32 masters
 * widened first); *kp: how many buffers. */
static amp_status prepare(amp_scaler *s, amp_optim *o, const opt_record *r, int *kp)
{
    const int rec = (int)(r - s->recs);
    if (rec >= BE_SCALER_MAX_RECORDS)
        return amp_set_error(AMP_ERR_ARG, "scaler: more than %d optimizers in one iteration", BE_SCALER_MAX_RECORDS);

    int n = amp_optim_num_params(o), k = 0;
    for (int i = 0; i < n; i++) {
        amp_tensor *g = amp_tensor_grad(amp_optim_param(o, i));
        if (g && g->dtype == AMP_F16 && !optim_wants_master(o, i))
            return amp_set_error(AMP_ERR_DTYPE,
                                 "Attempting to unscale FP16 gradients. (parameter %d has an f16 "
                                 "gradient; keep f32 master parameters and let autocast cast them, or give "
                                 "the optimizer master weights: amp_optim_set_master_weights)",
                                 i);
        if (g && tensor_device(g) != tensor_device(s->scale_t))
            return amp_set_error(AMP_ERR_DEVICE,
                                 "scaler: parameter %d's gradient is on %s but the scale was made on %s (one "
                                 "scaler per device)",
                                 i, amp_device_name(tensor_device(g)), amp_device_name(tensor_device(s->scale_t)));
    }
    if (n > s->cap_bufs) {
        be_buf *b = realloc(s->bufs, (size_t)n * sizeof *b);
        if (!b)
            return amp_set_error(AMP_ERR_MEMORY, "scaler: out of memory");
        s->bufs = b;
        s->cap_bufs = n;
    }
    /* An f16 gradient of a parameter with an f32 master (Apex O2) is
     * unscaled into f32: in place in f16 every value below 2^-14 after
     * unscaling would lose bits and below 2^-24 vanish - the underflow the
     * scale is there to prevent. bf16 ones (f32's range; the scale is a
     * power of two) unscale exactly in place. (Widening is exact: a failure
     * half-way leaves some gradients f32 with the same values.) */
    for (int i = 0; i < n; i++) {
        amp_tensor *p = amp_optim_param(o, i), *g = p->grad;
        if (g && g->dtype == AMP_F16) {
            amp_tensor *w = tensor_convert(g, AMP_F32);
            if (!w)
                return amp_last_status();
            tensor_set_category(w, AMP_MEM_GRADIENTS);
            amp_tensor_free(g);
            p->grad = g = w;
        }
        if (g && (g->dtype == AMP_F32 || g->dtype == AMP_BF16))
            s->bufs[k++] = (be_buf){tensor_ptr(g), g->numel, g->dtype};
    }
    *kp = k;
    return AMP_OK;
}

static amp_status scaler_unscale(amp_scaler *s, amp_optim *o)
{
    if (!s || !o)
        return amp_set_error(AMP_ERR_ARG, "scaler_unscale: NULL %s", s ? "optimizer" : "scaler");
    if (!s->o.enabled)
        return AMP_OK;
    /* The refusals of the call sequence (no scale, then unscale twice or
     * after step) are the same on every rank of a data-parallel run (the
     * same program): none issues the collective. */
    if (check_started(s, "unscale_") != AMP_OK)
        return amp_last_status();
    opt_record *r = record_for(s, o, "unscale_"); /* NULL: out of memory */
    if (r && r->stage == STAGE_UNSCALED)
        return amp_set_error(AMP_ERR_STATE,
                             "unscale_() has already been called on this optimizer since the last "
                             "update().");
    if (r && r->stage == STAGE_STEPPED)
        return amp_set_error(AMP_ERR_STATE, "unscale_() is being called after step().");
    int k = 0;
    amp_status st = r ? prepare(s, o, r, &k) : amp_last_status();
    /* In a data-parallel run (more than one rank) found_inf becomes the
     * MAX over the ranks, in place in the state's memory (NCCL on a GPU:
     * no host synchronisation), so every rank skips or steps together and
     * the scales stay identical; every rank takes part, with gradients or
     * not. A rank whose own part failed says so first: every rank then
     * returns its error, naming it, and no rank divides anything. */
    const bool ranks = comm_size() > 1;
    if (ranks)
        st = comm_agree(st, "scaler_unscale");
    if (st != AMP_OK)
        return st;
    bool divided = false;
    float *found_inf = &s->st->found_inf[r - s->recs];
    st = run_unscale(s, s->bufs, k, found_inf, &divided);
    if (ranks && st != AMP_OK) /* the others are on their way into the all-reduce */
        st = comm_fail("scaler_unscale, after the ranks agreed to reduce found_inf");
    else if (ranks)
        st = comm_allreduce(found_inf, 1, AMP_F32, AMP_REDUCE_MAX, s->be->device, NULL);
    /* Divided (even if the all-reduce then failed): the gradients are
     * unscaled, so the stage says so and a retry is refused rather than
     * dividing them twice. */
    if (divided) {
        r->recorded = k > 0;
        r->stage = STAGE_UNSCALED;
    }
    return st;
}

/* ------------------------------------------------------------ step */

/* o's step, skipped by the optimizer itself when record rec's found_inf
 * (in the backend's memory) is set, then counted there; *skipped needs
 * the flag on the host (on a GPU, a synchronisation). */
static amp_status guarded_step(amp_scaler *s, amp_optim *o, int rec, bool *skipped)
{
    float *found = &s->st->found_inf[rec];
    amp_status st = optim_step_guarded(o, found);
    if (st != AMP_OK)
        return st;
    BACKEND_CALL(s->be, "scaler_step", scaler_count, s->st, rec);
    if (skipped) {
        float f = 0;
        if ((st = s->be->copy(&f, AMP_CPU, found, s->be->device, sizeof f)) != AMP_OK)
            return st;
        *skipped = f != 0.0f;
    }
    return AMP_OK;
}

amp_status amp_scaler_step(amp_scaler *s, amp_optim *o, bool *skipped)
{
    if (skipped)
        *skipped = false;
    if (!s || !o)
        return amp_set_error(AMP_ERR_ARG, "scaler_step: NULL %s", s ? "optimizer" : "scaler");
    if (!s->o.enabled)
        return amp_optim_step(o);
    opt_record *r = record_for(s, o, "step");
    if (!r)
        return amp_last_status();
    if (r->stage == STAGE_STEPPED)
        return amp_set_error(AMP_ERR_STATE,
                             "step() has already been called since the last update(). Call "
                             "amp_scaler_update() once per iteration, after the optimizers' steps.");
    if (r->stage == STAGE_READY) {
        amp_status st = amp_scaler_unscale(s, o);
        if (st != AMP_OK)
            return st;
    }
    if (!r->recorded)
        return amp_set_error(AMP_ERR_STATE,
                             "No inf checks were recorded for this optimizer. (none of its "
                             "parameters has a gradient: did backward run?)");
    /* The unscale above is its own phase; the step proper is the optimizer's. */
    amp_phase_begin(AMP_PHASE_OPTIMIZER);
    amp_status st = guarded_step(s, o, (int)(r - s->recs), skipped);
    amp_phase_end(AMP_PHASE_OPTIMIZER);
    r->stage = STAGE_STEPPED;
    return st;
}

/* ----------------------------------------------------------- update */

static void reset_records(amp_scaler *s) { s->n_recs = 0; }

/* The backend's update rule over the records that unscale saw. */
static amp_status run_update(amp_scaler *s, uint64_t records)
{
    be_scaler_opts co = {s->o.growth_factor, s->o.backoff_factor, s->o.min_scale, s->o.max_scale,
                         s->o.growth_interval, s->o.hysteresis};
    BACKEND_CALL(s->be, "scaler_update", scaler_update, tensor_f32(s->scale_t), s->st, records, co);
    return AMP_OK;
}

/* amp_scaler_update's work, in the scaler update phase. */
static amp_status scaler_update(amp_scaler *s);

amp_status amp_scaler_update(amp_scaler *s)
{
    amp_phase_begin(AMP_PHASE_SCALER_UPDATE);
    amp_status st = scaler_update(s);
    amp_phase_end(AMP_PHASE_SCALER_UPDATE);
    return st;
}

/* Whether `who` has work to do on s: not for a NULL s (*rc the error) nor
 * for a disabled one (*rc AMP_OK: a disabled scaler does nothing, as
 * PyTorch's). */
static bool enabled_for(const amp_scaler *s, const char *who, amp_status *rc)
{
    *rc = s ? AMP_OK : amp_set_error(AMP_ERR_ARG, "%s: NULL scaler", who);
    return s && s->o.enabled;
}

/* Whether an update (amp_scaler_update, _update_to) has work to do on s:
 * enabled_for, and the loss was scaled this iteration (else *rc the
 * error). */
static bool update_wanted(const amp_scaler *s, amp_status *rc)
{
    return enabled_for(s, "scaler_update", rc) && (*rc = check_started(s, "update")) == AMP_OK;
}

static amp_status scaler_update(amp_scaler *s)
{
    amp_status rc;
    if (!update_wanted(s, &rc))
        return rc;
    uint64_t records = 0; /* unscale refuses records past BE_SCALER_MAX_RECORDS */
    for (int i = 0; i < s->n_recs && i < BE_SCALER_MAX_RECORDS; i++)
        if (s->recs[i].recorded)
            records |= 1ull << i;
    if (!records)
        return amp_set_error(AMP_ERR_STATE,
                             "No inf checks were recorded prior to update. (call "
                             "amp_scaler_step or amp_scaler_unscale first)");
    amp_status st = run_update(s, records);
    tensor_bump(s->scale_t);
    reset_records(s);
    return st;
}

amp_status amp_scaler_update_to(amp_scaler *s, double new_scale)
{
    amp_status rc;
    if (!update_wanted(s, &rc))
        return rc;
    if (!((float)new_scale > 0) || !isfinite((float)new_scale))
        return amp_set_error(AMP_ERR_ARG, "scaler_update: new_scale %g must be positive and finite as an f32",
                             new_scale);
    be_scaler_state st;
    if ((rc = pull(s, &st)) != AMP_OK)
        return rc;
    float old = scale_value(s);
    if ((rc = set_scale(s, (float)new_scale)) != AMP_OK)
        return rc;
    be_scaler_remember(&st, old, (float)new_scale);
    st.updates++;
    reset_records(s);
    return push(s, &st);
}

/* -------------------------------------------------------- accessors */

double amp_scaler_get_scale(const amp_scaler *s)
{
    if (!s || !s->o.enabled)
        return 1.0;
    return s->scale_t ? (double)scale_value(s) : s->o.init_scale;
}

double amp_scaler_get_growth_factor(const amp_scaler *s) { return s ? s->o.growth_factor : 0; }
double amp_scaler_get_backoff_factor(const amp_scaler *s) { return s ? s->o.backoff_factor : 0; }
int64_t amp_scaler_get_growth_interval(const amp_scaler *s) { return s ? s->o.growth_interval : 0; }
int64_t amp_scaler_get_growth_tracker(const amp_scaler *s)
{
    be_scaler_state st;
    if (!s || !s->o.enabled || pull(s, &st) != AMP_OK)
        return 0;
    return st.tracker;
}
void amp_scaler_set_growth_factor(amp_scaler *s, double f)
{
    if (s)
        s->o.growth_factor = f;
}
void amp_scaler_set_backoff_factor(amp_scaler *s, double f)
{
    if (s)
        s->o.backoff_factor = f;
}
void amp_scaler_set_growth_interval(amp_scaler *s, int64_t n)
{
    if (s)
        s->o.growth_interval = n;
}
bool amp_scaler_is_enabled(const amp_scaler *s) { return s && s->o.enabled; }

int amp_scaler_get_hysteresis_left(const amp_scaler *s)
{
    be_scaler_state st;
    if (!s || !s->o.enabled || pull(s, &st) != AMP_OK)
        return 0;
    return st.hysteresis_left;
}

int scaler_hysteresis_most(const amp_scaler *s) { return s && s->o.hysteresis > 1 ? s->o.hysteresis : 1; }

amp_status amp_scaler_set_hysteresis_left(amp_scaler *s, int left)
{
    amp_status rc;
    if (!enabled_for(s, "scaler_set_hysteresis_left", &rc))
        return rc;
    int most = scaler_hysteresis_most(s);
    if (left < 1 || left > most)
        return amp_set_error(AMP_ERR_ARG, "scaler_set_hysteresis_left: %d is outside 1..%d (the hysteresis)", left,
                             most);
    be_scaler_state st;
    if ((rc = pull(s, &st)) != AMP_OK)
        return rc;
    st.hysteresis_left = left;
    return push(s, &st);
}

amp_scaler_state amp_scaler_state_get(const amp_scaler *s)
{
    amp_scaler_state st = {0};
    if (!s || !s->o.enabled)
        return st;
    st.valid = true;
    st.scale = amp_scaler_get_scale(s);
    st.growth_factor = s->o.growth_factor;
    st.backoff_factor = s->o.backoff_factor;
    st.growth_interval = s->o.growth_interval;
    st.growth_tracker = amp_scaler_get_growth_tracker(s);
    return st;
}

amp_status amp_scaler_state_load(amp_scaler *s, amp_scaler_state st)
{
    amp_status rc;
    if (!enabled_for(s, "scaler_state_load", &rc))
        return rc;
    if (!st.valid)
        return amp_set_error(AMP_ERR_STATE,
                             "scaler_state_load: the source state is empty, possibly because it was "
                             "saved from a disabled scaler");
    amp_scaler_opts o = s->o;
    o.init_scale = st.scale;
    o.growth_factor = st.growth_factor;
    o.backoff_factor = st.backoff_factor;
    o.growth_interval = st.growth_interval;
    if (check_opts(&o) != AMP_OK)
        return amp_last_status();
    if (st.growth_tracker < 0)
        return amp_set_error(AMP_ERR_ARG, "scaler_state_load: growth tracker %lld is negative",
                             (long long)st.growth_tracker);
    /* update() grows the scale when the tracker reaches the interval: one
     * already past it would never grow it again (and count on forever). */
    if (st.growth_tracker >= st.growth_interval)
        return amp_set_error(AMP_ERR_ARG,
                             "scaler_state_load: growth tracker %lld is not below the growth interval %lld",
                             (long long)st.growth_tracker, (long long)st.growth_interval);
    be_scaler_state cur;
    if ((rc = pull(s, &cur)) != AMP_OK)
        return rc;
    s->o = o;
    cur.tracker = st.growth_tracker;
    if (s->scale_t && (rc = set_scale(s, (float)st.scale)) != AMP_OK)
        return rc;
    return push(s, &cur);
}

amp_status scaler_counts_load(amp_scaler *s, amp_scaler_counts c)
{
    if (!s)
        return amp_set_error(AMP_ERR_ARG, "scaler_counts_load: NULL scaler");
    if (c.steps < 0 || c.skipped < 0 || c.skipped_in_a_row < 0 || c.skipped_in_a_row > c.skipped)
        return amp_set_error(AMP_ERR_ARG,
                             "scaler_counts_load: steps %lld and skipped %lld must be >= 0, and skipped in a row "
                             "%lld within 0..skipped",
                             (long long)c.steps, (long long)c.skipped, (long long)c.skipped_in_a_row);
    be_scaler_state st;
    amp_status rc = pull(s, &st);
    if (rc != AMP_OK)
        return rc;
    st.steps = c.steps;
    st.skipped = c.skipped;
    st.skip_streak = c.skipped_in_a_row;
    return push(s, &st);
}

amp_scaler_counts amp_scaler_get_counts(const amp_scaler *s)
{
    be_scaler_state st;
    if (!s || pull(s, &st) != AMP_OK)
        return (amp_scaler_counts){0, 0, 0};
    return (amp_scaler_counts){st.steps, st.skipped, st.skip_streak};
}

int amp_scaler_history(const amp_scaler *s, amp_scale_change *out, int max)
{
    be_scaler_state st;
    if (!s || !out || max <= 0 || pull(s, &st) != AMP_OK)
        return 0;
    int len = (int)st.hist_len, n = len < max ? len : max;
    for (int k = 0; k < n; k++) {
        int j = len - n + k;
        out[k] = (amp_scale_change){st.hist_update[j], st.hist_old[j], st.hist_new[j]};
    }
    return n;
}
