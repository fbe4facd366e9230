/*
 * scaler.c - the grad scaler: torch.amp.GradScaler's semantics in C.
 *
 * The scale is an f32 value; scale(loss) multiplies by it; unscale divides
 * an optimizer's gradients by it (multiplying by the f32 inverse computed
 * in double, as PyTorch) in one fused pass per dtype that also records any
 * inf/NaN; step skips the optimizer when one was found; update backs off
 * or grows the scale. Each optimizer goes READY -> UNSCALED -> STEPPED and
 * back to READY at update, and each misuse gets PyTorch's message.
 *
 * Opt-in extras (off by default): min_scale, max_scale, hysteresis.
 *
 * On CUDA (the loss given to scale() is a CUDA tensor) the state lives on
 * the device and scaler_cuda.c runs unscale, step and update there; this
 * file keeps the host's logic (stages, messages) and reads the device
 * state back in the getters.
 */
#include "amp/scaler_impl.h"
#include "base/base.h"
#include "dtype/dtype.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>

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
    s->hysteresis_left = o.hysteresis > 1 ? o.hysteresis : 1;
    return s;
}

void amp_scaler_free(amp_scaler *s)
{
    if (!s)
        return;
    amp_tensor_free(s->scale_t);
    cuda_free(s->dev);
    free(s->recs);
    free(s);
}

static bool on_cuda(const amp_scaler *s) { return s->dev != NULL; }

/* The scale (on CUDA: copied to the host, which waits for the GPU). */
static float scale_value(const amp_scaler *s)
{
    return on_cuda(s) ? scaler_cuda_get_scale(s) : tensor_f32(s->scale_t)[0];
}

static void set_scale(amp_scaler *s, float v)
{
    if (on_cuda(s))
        scaler_cuda_set_scale(s, v);
    else
        tensor_f32(s->scale_t)[0] = v;
    tensor_bump(s->scale_t);
}

/* The lazy start of PyTorch's _scale: made from init_scale at first use,
 * on the loss's device. */
static amp_status ensure_scale(amp_scaler *s, amp_device dev)
{
    if (s->scale_t) {
        if (tensor_device(s->scale_t) != dev)
            return amp_set_error(AMP_ERR_DEVICE, "scaler: its scale lives on %s but the loss is on %s (use one "
                                 "scaler per device)", amp_device_name(tensor_device(s->scale_t)),
                                 amp_device_name(dev));
        return AMP_OK;
    }
    if (dev == AMP_CUDA)
        return scaler_cuda_start(s);
    s->scale_t = amp_full(AMP_SHAPE(), AMP_F32, s->o.init_scale);
    return s->scale_t ? AMP_OK : amp_last_status();
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

static opt_record *record_for(amp_scaler *s, amp_optim *o)
{
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

/* g *= inv (skipped when inv is exactly 1), returning whether any input
 * element was inf or NaN. The check reads the exponent bits, an integer OR
 * that the compiler vectorises. */
static bool unscale_f32(float *g, size_t n, float inv)
{
    uint32_t bad = 0;
    if (inv == 1.0f) {
        for (size_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &g[i], 4);
            bad |= (uint32_t)((b & 0x7F800000u) == 0x7F800000u);
        }
        return bad != 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &g[i], 4);
        bad |= (uint32_t)((b & 0x7F800000u) == 0x7F800000u);
        g[i] *= inv;
    }
    return bad != 0;
}

static bool unscale_bf16(uint16_t *g, size_t n, float inv)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= (uint32_t)((g[i] & 0x7F80u) == 0x7F80u);
        if (inv != 1.0f)
            g[i] = amp_f32_to_bf16(amp_bf16_to_f32(g[i]) * inv);
    }
    return bad != 0;
}

amp_status amp_scaler_unscale(amp_scaler *s, amp_optim *o)
{
    if (!s || !o)
        return amp_set_error(AMP_ERR_ARG, "scaler_unscale: NULL %s", s ? "optimizer" : "scaler");
    if (!s->o.enabled)
        return AMP_OK;
    if (check_started(s, "unscale_") != AMP_OK)
        return AMP_ERR_STATE;
    opt_record *r = record_for(s, o);
    if (!r)
        return AMP_ERR_MEMORY;
    if (r->stage == STAGE_UNSCALED)
        return amp_set_error(AMP_ERR_STATE,
                             "unscale_() has already been called on this optimizer since the last "
                             "update().");
    if (r->stage == STAGE_STEPPED)
        return amp_set_error(AMP_ERR_STATE, "unscale_() is being called after step().");

    int n = amp_optim_num_params(o);
    for (int i = 0; i < n; i++) {
        amp_tensor *g = amp_tensor_grad(amp_optim_param(o, i));
        if (g && g->dtype == AMP_F16)
            return amp_set_error(AMP_ERR_DTYPE,
                                 "Attempting to unscale FP16 gradients. (parameter %d has an f16 "
                                 "gradient; keep f32 master parameters and let autocast cast them)",
                                 i);
        if (g && tensor_on_cuda(g) != on_cuda(s))
            return amp_set_error(AMP_ERR_DEVICE,
                                 "scaler: parameter %d's gradient is on %s but the scale was made on %s (one "
                                 "scaler per device)",
                                 i, amp_device_name(tensor_device(g)), amp_device_name(tensor_device(s->scale_t)));
    }
    if (on_cuda(s))
        return scaler_cuda_unscale(s, o, r);
    /* FP32 division can be imprecise; PyTorch takes the reciprocal in FP64. */
    float inv = (float)(1.0 / (double)scale_value(s));
    bool found = false, any = false;
    /* One pass per dtype group (f32, then bf16), as the fused kernel runs. */
    for (int pass = 0; pass < 2; pass++) {
        amp_dtype want = pass == 0 ? AMP_F32 : AMP_BF16;
        for (int i = 0; i < n; i++) {
            amp_tensor *g = amp_tensor_grad(amp_optim_param(o, i));
            if (!g || g->dtype != want)
                continue;
            any = true;
            if (want == AMP_F32)
                found |= unscale_f32(tensor_f32(g), (size_t)g->numel, inv);
            else
                found |= unscale_bf16(tensor_ptr(g), (size_t)g->numel, inv);
        }
    }
    r->recorded = any;
    r->found_inf = found;
    r->stage = STAGE_UNSCALED;
    return AMP_OK;
}

/* ------------------------------------------------------------ step */

amp_status amp_scaler_step(amp_scaler *s, amp_optim *o, bool *skipped)
{
    if (skipped)
        *skipped = false;
    if (!s || !o)
        return amp_set_error(AMP_ERR_ARG, "scaler_step: NULL %s", s ? "optimizer" : "scaler");
    if (!s->o.enabled)
        return amp_optim_step(o);
    if (check_started(s, "step") != AMP_OK)
        return AMP_ERR_STATE;
    opt_record *r = record_for(s, o);
    if (!r)
        return AMP_ERR_MEMORY;
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
    amp_status st = AMP_OK;
    if (on_cuda(s)) {
        st = scaler_cuda_step(s, o, r, skipped);
    } else if (r->found_inf) {
        s->counts.skipped++;
        if (skipped)
            *skipped = true;
    } else {
        st = amp_optim_step(o);
        s->counts.steps++;
    }
    r->stage = STAGE_STEPPED;
    return st;
}

/* ----------------------------------------------------------- update */

static void remember(amp_scaler *s, float old, float now)
{
    if (old == now)
        return;
    if (s->hist_len == HISTORY) {
        memmove(s->hist, s->hist + 1, (HISTORY - 1) * sizeof s->hist[0]);
        s->hist_len--;
    }
    s->hist[s->hist_len++] = (amp_scale_change){s->updates, old, now};
}

static void reset_records(amp_scaler *s) { s->n_recs = 0; }

amp_status amp_scaler_update(amp_scaler *s)
{
    if (!s)
        return amp_set_error(AMP_ERR_ARG, "scaler_update: NULL scaler");
    if (!s->o.enabled)
        return AMP_OK;
    if (check_started(s, "update") != AMP_OK)
        return AMP_ERR_STATE;
    bool any = false, found = false;
    for (int i = 0; i < s->n_recs; i++) {
        any |= s->recs[i].recorded;
        found |= s->recs[i].recorded && s->recs[i].found_inf;
    }
    if (!any)
        return amp_set_error(AMP_ERR_STATE,
                             "No inf checks were recorded prior to update. (call "
                             "amp_scaler_step or amp_scaler_unscale first)");
    if (on_cuda(s)) {
        amp_status st = scaler_cuda_update(s);
        tensor_bump(s->scale_t);
        reset_records(s);
        return st;
    }
    float old = scale_value(s), now = old;
    /* The rule of PyTorch's _amp_update_scale_: products in double,
     * stored as f32. */
    if (found) {
        s->tracker = 0;
        if (--s->hysteresis_left <= 0) {
            double b = (double)old * s->o.backoff_factor;
            if (s->o.min_scale > 0 && b < s->o.min_scale)
                b = s->o.min_scale;
            now = (float)b;
            s->hysteresis_left = 1; /* keep backing off until the scale grows again */
        }
    } else if (++s->tracker == s->o.growth_interval) {
        double g = (double)old * s->o.growth_factor;
        if (s->o.max_scale > 0 && g > s->o.max_scale)
            g = s->o.max_scale;
        float gf = (float)g;
        if (isfinite(gf))
            now = gf;
        s->tracker = 0;
        s->hysteresis_left = s->o.hysteresis > 1 ? s->o.hysteresis : 1;
    }
    set_scale(s, now);
    remember(s, old, now);
    s->updates++;
    reset_records(s);
    return AMP_OK;
}

amp_status amp_scaler_update_to(amp_scaler *s, double new_scale)
{
    if (!s)
        return amp_set_error(AMP_ERR_ARG, "scaler_update: NULL scaler");
    if (!s->o.enabled)
        return AMP_OK;
    if (check_started(s, "update") != AMP_OK)
        return AMP_ERR_STATE;
    if (!((float)new_scale > 0) || !isfinite((float)new_scale))
        return amp_set_error(AMP_ERR_ARG, "scaler_update: new_scale %g must be positive and finite as an f32",
                             new_scale);
    if (on_cuda(s) && scaler_cuda_to_host(s) != AMP_OK)
        return amp_last_status();
    float old = scale_value(s);
    set_scale(s, (float)new_scale);
    remember(s, old, (float)new_scale);
    s->updates++;
    reset_records(s);
    return on_cuda(s) ? scaler_cuda_from_host(s) : AMP_OK;
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
    if (s && s->o.enabled && on_cuda(s)) {
        cuda_scaler_state st;
        return scaler_cuda_pull(s, &st) == AMP_OK ? st.tracker : 0;
    }
    return s && s->o.enabled ? s->tracker : 0;
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
    if (!s)
        return amp_set_error(AMP_ERR_ARG, "scaler_state_load: NULL scaler");
    if (!s->o.enabled)
        return AMP_OK;
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
    if (on_cuda(s) && scaler_cuda_to_host(s) != AMP_OK)
        return amp_last_status();
    s->o = o;
    s->tracker = st.growth_tracker;
    if (s->scale_t)
        set_scale(s, (float)st.scale);
    return on_cuda(s) ? scaler_cuda_from_host(s) : AMP_OK;
}

amp_status scaler_counts_load(amp_scaler *s, amp_scaler_counts c)
{
    if (!s)
        return amp_set_error(AMP_ERR_ARG, "scaler_counts_load: NULL scaler");
    if (c.steps < 0 || c.skipped < 0)
        return amp_set_error(AMP_ERR_ARG, "scaler_counts_load: steps %lld and skipped %lld must be >= 0",
                             (long long)c.steps, (long long)c.skipped);
    if (on_cuda(s) && scaler_cuda_to_host(s) != AMP_OK)
        return amp_last_status();
    s->counts = c;
    return on_cuda(s) ? scaler_cuda_from_host(s) : AMP_OK;
}

amp_scaler_counts amp_scaler_get_counts(const amp_scaler *s)
{
    if (s && on_cuda(s)) {
        cuda_scaler_state st;
        if (scaler_cuda_pull(s, &st) != AMP_OK)
            return (amp_scaler_counts){0, 0};
        return (amp_scaler_counts){st.steps, st.skipped};
    }
    return s ? s->counts : (amp_scaler_counts){0, 0};
}

int amp_scaler_history(const amp_scaler *s, amp_scale_change *out, int max)
{
    if (!s || !out || max <= 0)
        return 0;
    if (on_cuda(s)) {
        cuda_scaler_state st;
        if (scaler_cuda_pull(s, &st) != AMP_OK)
            return 0;
        int len = (int)st.hist_len, n = len < max ? len : max;
        for (int k = 0; k < n; k++) {
            int j = len - n + k;
            out[k] = (amp_scale_change){st.hist_update[j], st.hist_old[j], st.hist_new[j]};
        }
        return n;
    }
    int n = s->hist_len < max ? s->hist_len : max;
    memcpy(out, s->hist + (s->hist_len - n), (size_t)n * sizeof *out);
    return n;
}

amp_status amp_scaler_f16_health(const amp_scaler *s, const amp_tensor *param, int64_t *underflow,
                                 int64_t *overflow)
{
    if (!s || !param || !underflow || !overflow)
        return amp_set_error(AMP_ERR_ARG, "scaler_f16_health: NULL argument");
    *underflow = *overflow = 0;
    const amp_tensor *g = param->grad;
    if (!g)
        return AMP_OK;
    amp_tensor *host = tensor_on_cuda(g) ? amp_to_device(g, AMP_CPU) : NULL; /* a diagnostic: may wait */
    if (tensor_on_cuda(g) && !host)
        return amp_last_status();
    if (host)
        g = host;
    double scale = amp_scaler_get_scale(s);
    for (int64_t i = 0; i < g->numel; i++) {
        double v = fabs((double)load_f32(tensor_ptr(g), g->dtype, (size_t)i) * scale);
        if (v != 0 && v <= 0x1p-25)
            (*underflow)++;
        else if (v >= 65520.0)
            (*overflow)++;
    }
    amp_tensor_free(host);
    return AMP_OK;
}
