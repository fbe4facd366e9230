/*
 * optim.c - what every optimizer shares: the registry of kinds, the
 * parameters and their state buffers, the step counters, and the step
 * itself, which checks the gradients, makes missing state and hands every
 * parameter with a gradient to the kind's step function (sgd.c, adam.c)
 * in one multi-tensor call to the parameters' backend.
 *
 * Every parameter is updated in f32 by the backend: f32 parameters in
 * place, f16/bf16 ones loaded to f32, updated, and rounded once on store -
 * or, with master weights on, updated on their f32 master copy, which the
 * parameter receives rounded (Apex O2: small updates accumulate in the
 * master instead of rounding away). State buffers are f32 (or bf16 after
 * amp_optim_set_state_dtype: widened, updated in f32 and rounded on
 * store) whatever the parameter's dtype, on the parameters' device (one
 * optimizer per device). The step counters live in the same
 * backend's memory and are counted by the backend's step, so a step the
 * grad scaler skips on the device (found_inf) needs no host
 * synchronisation; the getters copy them to the host.
 */
#include "optim/optim.h"

#include "base/base.h"
#include "ops/ops.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ registry */

/* One line per optimizer kind. */
static const optim_def *const optim_registry[] = {
    &optim_def_sgd,
    &optim_def_adam,
    &optim_def_adamw,
};

const optim_def *optim_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof optim_registry / sizeof *optim_registry; i++)
        if (strcmp(optim_registry[i]->name, name) == 0)
            return optim_registry[i];
    return NULL;
}

amp_status optim_check_nonneg(const char *opt, const char *what, double v)
{
    if (!(v >= 0) || isinf(v))
        return amp_set_error(AMP_ERR_ARG, "%s: invalid %s value: %g (must be finite and >= 0)", opt, what, v);
    return AMP_OK;
}

/* ------------------------------------------------------- construction */

amp_optim *optim_new(const optim_def *def, amp_tensor *const *params, int n, double lr, double wd)
{
    const char *name = def->name;
    if (n < 1 || !params)
        return amp_fail_null(AMP_ERR_ARG, "%s: got an empty parameter list (n = %d)", name, n);
    for (int i = 0; i < n; i++) {
        if (!params[i])
            return amp_fail_null(AMP_ERR_ARG, "%s: parameter %d is NULL", name, i);
        if (!amp_dtype_is_float(params[i]->dtype))
            return amp_fail_null(AMP_ERR_DTYPE, "%s: parameter %d has dtype %s (float types only)", name, i,
                                 amp_dtype_name(params[i]->dtype));
        if (params[i]->grad_fn)
            return amp_fail_null(AMP_ERR_ARG, "%s: parameter %d is not a leaf tensor", name, i);
        for (int j = 0; j < i; j++)
            if (params[j] == params[i])
                return amp_fail_null(AMP_ERR_ARG, "%s: parameters %d and %d are the same tensor", name, j, i);
    }
    amp_optim *o = calloc(1, sizeof *o);
    if (o) {
        o->params = calloc((size_t)n, sizeof *o->params);
        o->state = calloc((size_t)n * OPTIM_MAX_STATE, sizeof *o->state);
        o->param_steps = calloc((size_t)n, sizeof *o->param_steps);
        o->ps = calloc((size_t)n, sizeof *o->ps);
        o->master = calloc((size_t)n, sizeof *o->master);
        o->master_version = calloc((size_t)n, sizeof *o->master_version);
        o->shard_lo = calloc((size_t)n, sizeof *o->shard_lo);
        o->shard_hi = calloc((size_t)n, sizeof *o->shard_hi);
        o->weight_decay = calloc((size_t)n, sizeof *o->weight_decay);
    }
    if (!o || !o->params || !o->state || !o->param_steps || !o->ps || !o->master || !o->master_version ||
        !o->shard_lo || !o->shard_hi || !o->weight_decay) {
        amp_optim_free(o); /* (n is still 0: only the arrays are freed) */
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", name);
    }
    o->def = def;
    o->name = name;
    o->n = n;
    o->lr = lr;
    o->state_dt = AMP_F32;
    for (int i = 0; i < n; i++) {
        o->params[i] = amp_tensor_retain(params[i]);
        o->shard_hi[i] = params[i]->numel;
        o->weight_decay[i] = wd;
    }
    return o;
}

void amp_optim_free(amp_optim *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n; i++) {
        amp_tensor_free(o->params[i]);
        amp_tensor_free(o->master[i]);
    }
    for (int k = 0; k < o->n * OPTIM_MAX_STATE; k++)
        amp_tensor_free(o->state[k]);
    free(o->params);
    free(o->state);
    free(o->param_steps);
    free(o->ps);
    free(o->master);
    free(o->master_version);
    free(o->shard_lo);
    free(o->shard_hi);
    free(o->weight_decay);
    if (o->counters)
        backend_of(o->counters_dev)->free(o->counters);
    free(o);
}

/* ---------------------------------------------------------------- state */

/* The name of state slot k, or NULL when this optimizer does not use it. */
static const char *slot_name(const amp_optim *o, int k)
{
    return o->def->has_state(o, k) ? o->def->state_names[k] : NULL;
}

/* Creates parameter i's state buffers (zeros, on its device) where missing:
 * shaped like it, or 1-D over its shard (none for an empty shard). */
static amp_status ensure_state(amp_optim *o, int i)
{
    const bool sharded = optim_is_sharded(o, i);
    const int64_t len = o->shard_hi[i] - o->shard_lo[i];
    for (int k = 0; k < OPTIM_MAX_STATE; k++) {
        amp_tensor **s = &o->state[i * OPTIM_MAX_STATE + k];
        if (slot_name(o, k) && !*s && len > 0) {
            if (!(*s = tensor_zeros_on(sharded ? AMP_SHAPE(len) : o->params[i]->shape, o->state_dt,
                                       tensor_device(o->params[i]))))
                return amp_last_status();
            tensor_set_category(*s, AMP_MEM_OPTIMIZER);
        }
    }
    return AMP_OK;
}

static void drop_state(amp_optim *o, int i)
{
    for (int k = 0; k < OPTIM_MAX_STATE; k++) {
        amp_tensor_free(o->state[i * OPTIM_MAX_STATE + k]);
        o->state[i * OPTIM_MAX_STATE + k] = NULL;
    }
}

static void *state_ptr(const amp_optim *o, int i, int k)
{
    amp_tensor *t = o->state[i * OPTIM_MAX_STATE + k];
    return t ? tensor_ptr(t) : NULL;
}

amp_tensor *amp_optim_state_tensor(const amp_optim *o, int i, const char *name)
{
    if (!o || !name || i < 0 || i >= o->n)
        return amp_fail_null(AMP_ERR_ARG, "optim_state_tensor: bad optimizer, index %d or name", i);
    if (optim_is_sharded(o, i))
        return amp_fail_null(AMP_ERR_STATE, "optim_state_tensor: parameter %d's %s state is sharded over the ranks "
                             "(ZeRO-1): amp_zero_gather_state first", i, o->name);
    for (int k = 0; k < OPTIM_MAX_STATE; k++)
        if (slot_name(o, k) && strcmp(slot_name(o, k), name) == 0) {
            amp_tensor *t = o->state[i * OPTIM_MAX_STATE + k];
            /* The buffers are made (zeros) before the step that found_inf
             * may skip, as PyTorch's fused optimizers do; at 0 steps they
             * are never read, and are no state yet. */
            return t && amp_optim_param_steps(o, i) > 0 ? t : NULL;
        }
    return amp_fail_null(AMP_ERR_ARG, "optim_state_tensor: %s with these options has no state \"%s\"", o->name,
                         name);
}

/* ------------------------------------------------------------- counters */

/* Counter k (o->n: the optimizer's own) as the host sees it. */
static int64_t counter_get(const amp_optim *o, int k)
{
    if (!o->counters)
        return k == o->n ? o->steps : o->param_steps[k];
    int64_t v = 0;
    const amp_backend *be = backend_of(o->counters_dev);
    return be->copy(&v, AMP_CPU, o->counters + k, o->counters_dev, sizeof v) == AMP_OK ? v : 0;
}

static amp_status counter_set(amp_optim *o, int k, int64_t v)
{
    if (k == o->n)
        o->steps = v;
    else
        o->param_steps[k] = v;
    if (!o->counters)
        return AMP_OK;
    return backend_of(o->counters_dev)->copy(o->counters + k, o->counters_dev, &v, AMP_CPU, sizeof v);
}

/* Makes the counters in dev's memory from the host's (moving them back
 * first when they were made on another device). */
static amp_status counters_on(amp_optim *o, amp_device dev)
{
    if (o->counters && o->counters_dev == dev)
        return AMP_OK;
    const size_t nb = (size_t)(o->n + 1) * sizeof *o->counters;
    int64_t *host = malloc(nb);
    if (!host)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", o->name);
    for (int k = 0; k <= o->n; k++)
        host[k] = counter_get(o, k);
    const amp_backend *be = backend_of(dev);
    int64_t *c = be->alloc(nb);
    if (c && be->mem_retag)
        be->mem_retag(c, AMP_MEM_OPTIMIZER);
    amp_status st = c ? be->copy(c, dev, host, AMP_CPU, nb) : amp_last_status();
    if (st != AMP_OK) {
        if (c)
            be->free(c);
        free(host);
        return st;
    }
    memcpy(o->param_steps, host, (size_t)o->n * sizeof *host);
    o->steps = host[o->n];
    free(host);
    if (o->counters)
        backend_of(o->counters_dev)->free(o->counters);
    o->counters = c;
    o->counters_dev = dev;
    return AMP_OK;
}

int64_t amp_optim_param_steps(const amp_optim *o, int i)
{
    if (!o || i < 0 || i >= o->n)
        return 0;
    return counter_get(o, i);
}

amp_status amp_optim_set_param_steps(amp_optim *o, int i, int64_t steps)
{
    if (!o || i < 0 || i >= o->n || steps < 0)
        return amp_set_error(AMP_ERR_ARG, "optim_set_param_steps: bad optimizer, index %d or steps %lld", i,
                             (long long)steps);
    if (steps == 0) {
        drop_state(o, i);
    } else {
        amp_status st = ensure_state(o, i);
        if (st != AMP_OK)
            return st;
    }
    return counter_set(o, i, steps);
}

amp_status amp_optim_set_steps(amp_optim *o, int64_t steps)
{
    if (!o || steps < 0)
        return amp_set_error(AMP_ERR_ARG, "optim_set_steps: bad optimizer or steps %lld", (long long)steps);
    return counter_set(o, o->n, steps);
}

int64_t amp_optim_steps(const amp_optim *o) { return o ? counter_get(o, o->n) : 0; }

/* --------------------------------------------------------------- updates */

/* Checks every parameter, gradient and state buffer before anything
 * changes, so a failed step leaves parameters and state as they were. */
static amp_status check_step(const amp_optim *o)
{
    const amp_device dev = tensor_device(o->params[0]);
    for (int i = 0; i < o->n; i++) {
        const amp_tensor *p = o->params[i], *g = p->grad;
        if (tensor_device(p) != dev)
            return amp_set_error(AMP_ERR_DEVICE, "%s: parameter 0 is on %s but parameter %d on %s (one optimizer per "
                                 "device)", o->name, amp_device_name(dev), i, amp_device_name(tensor_device(p)));
        if (g && tensor_device(g) != dev)
            return amp_set_error(AMP_ERR_DEVICE, "%s: parameter %d is on %s but its gradient on %s", o->name, i,
                                 amp_device_name(dev), amp_device_name(tensor_device(g)));
        if (g && (!shape_equal(g->shape, p->shape) || !amp_dtype_is_float(g->dtype))) {
            char a[96], b[96];
            return amp_set_error(AMP_ERR_SHAPE, "%s: parameter %d is %s %s but its gradient is %s %s", o->name, i,
                                 amp_shape_str(p->shape, a, sizeof a), amp_dtype_name(p->dtype),
                                 amp_shape_str(g->shape, b, sizeof b), amp_dtype_name(g->dtype));
        }
        for (int k = 0; g && k < OPTIM_MAX_STATE; k++) {
            const amp_tensor *t = o->state[i * OPTIM_MAX_STATE + k];
            if (t && tensor_device(t) != dev)
                return amp_set_error(AMP_ERR_DEVICE,
                                     "%s: parameter %d is on %s but its state is on %s (move parameters before the "
                                     "first step)",
                                     o->name, i, amp_device_name(dev), amp_device_name(tensor_device(t)));
        }
    }
    return AMP_OK;
}

amp_status amp_optim_step(amp_optim *o)
{
    amp_phase_begin(AMP_PHASE_OPTIMIZER);
    amp_status st = optim_step_guarded(o, NULL);
    amp_phase_end(AMP_PHASE_OPTIMIZER);
    return st;
}

/* Every parameter with a gradient in one multi-tensor call to the
 * parameters' backend, each at its own step count; the backend counts the
 * step (or skips it all when *found_inf is non-zero). */
amp_status optim_step_guarded(amp_optim *o, const float *found_inf)
{
    if (!o)
        return amp_set_error(AMP_ERR_ARG, "optim_step: NULL optimizer");
    amp_status st = check_step(o);
    for (int i = 0; i < o->n && st == AMP_OK; i++)
        if (o->params[i]->grad && (st = ensure_state(o, i)) == AMP_OK)
            st = optim_sync_master(o, i);
    const amp_device dev = tensor_device(o->params[0]);
    if (st == AMP_OK)
        st = counters_on(o, dev);
    if (st != AMP_OK)
        return st;
    be_optim_param *ps = o->ps;
    const amp_backend *be = backend_of(dev);
    int k = 0;
    for (int i = 0; i < o->n; i++) {
        amp_tensor *p = o->params[i];
        /* autocast's kept 16-bit copy of the weight, when the step can
         * write the next cast in the same pass (ops.h)
         * (not for a shard: the all-gather rewrites the weight anyway) */
        const bool sharded = optim_is_sharded(o, i);
        amp_tensor *cast = p->grad && be->optim_writes_cast && !o->master[i] && !sharded
                               ? autocast_kept_for_update(p)
                               : NULL;
        /* a shard: p and g from element lo, the state and master are the
         * shard's own (n = 0 for an empty one: the step still counts) */
        const int64_t lo = o->shard_lo[i];
        if (p->grad)
            ps[k++] = (be_optim_param){(char *)tensor_ptr(p) + (size_t)lo * amp_dtype_size(p->dtype),
                                       (const char *)tensor_ptr(p->grad) + (size_t)lo * amp_dtype_size(p->grad->dtype),
                                       state_ptr(o, i, 0),
                                       state_ptr(o, i, 1),
                                       state_ptr(o, i, 2),
                                       o->master[i] ? tensor_f32(o->master[i]) : NULL,
                                       o->shard_hi[i] - lo,
                                       p->dtype,
                                       p->grad->dtype,
                                       o->state_dt,
                                       i,
                                       cast ? tensor_ptr(cast) : NULL,
                                       cast ? cast->dtype : AMP_F32,
                                       o->weight_decay[i]};
    }
    st = o->def->step(o, be, ps, k, o->counters, o->n, found_inf);
    /* an in-place write, even a step that failed part way: stale autocast
     * casts must go, unless the step wrote them (a skipped step left the
     * parameter and its cast as they were) */
    for (int i = 0; i < o->n; i++)
        if (o->params[i]->grad) {
            tensor_bump(o->params[i]);
            if (st == AMP_OK && o->master[i]) /* ... but the master wrote it: still in step */
                o->master_version[i] = o->params[i]->storage->version;
        }
    for (int j = 0; j < k && st == AMP_OK; j++)
        if (ps[j].cast)
            autocast_kept_updated(o->params[ps[j].index]);
    return st;
}

/* --------------------------------------------------- master weights */

static bool is_16bit(const amp_tensor *t) { return t->dtype == AMP_F16 || t->dtype == AMP_BF16; }

bool optim_wants_master(const amp_optim *o, int i) { return o->masters && is_16bit(o->params[i]); }

amp_status optim_sync_master(const amp_optim *o, int i)
{
    amp_tensor *p = o->params[i], **m = &o->master[i];
    if (!optim_wants_master(o, i)) { /* (a parameter made f32 since drops its master) */
        amp_tensor_free(*m);
        *m = NULL;
        return AMP_OK;
    }
    /* a shard's master holds the shard's elements only (none when empty) */
    const int64_t lo = o->shard_lo[i], len = o->shard_hi[i] - lo;
    const void *src = (const char *)tensor_ptr(p) + (size_t)lo * amp_dtype_size(p->dtype);
    if (len == 0) {
        amp_tensor_free(*m);
        *m = NULL;
        o->master_version[i] = p->storage->version;
        return AMP_OK;
    }
    const bool fits = *m && tensor_device(*m) == tensor_device(p) && (*m)->numel == len;
    if (fits && o->master_version[i] == p->storage->version)
        return AMP_OK;
    if (fits) {
        /* Re-seed in place: the widening is exact. */
        amp_status st = backend_of(tensor_device(p))->convert(src, p->dtype, tensor_ptr(*m), AMP_F32, len);
        if (st != AMP_OK)
            return st;
    } else if (optim_is_sharded(o, i)) {
        amp_tensor *c = tensor_new_on(AMP_SHAPE(len), AMP_F32, tensor_device(p));
        amp_status st = c ? backend_of(tensor_device(p))->convert(src, p->dtype, tensor_ptr(c), AMP_F32, len)
                          : amp_last_status();
        if (st != AMP_OK) {
            amp_tensor_free(c);
            return st;
        }
        tensor_set_category(c, AMP_MEM_PARAMETERS);
        amp_tensor_free(*m);
        *m = c;
    } else {
        amp_tensor *c = tensor_convert(p, AMP_F32);
        if (!c)
            return amp_last_status();
        tensor_set_category(c, AMP_MEM_PARAMETERS);
        amp_tensor_free(*m);
        *m = c;
    }
    o->master_version[i] = p->storage->version;
    return AMP_OK;
}

amp_tensor *optim_master(const amp_optim *o, int i) { return o->master[i]; }

amp_status amp_optim_set_master_weights(amp_optim *o, bool on)
{
    if (!o)
        return amp_set_error(AMP_ERR_ARG, "optim_set_master_weights: NULL optimizer");
    o->masters = on;
    for (int i = 0; i < o->n; i++) {
        if (!on) {
            amp_tensor_free(o->master[i]);
            o->master[i] = NULL;
            continue;
        }
        amp_status st = optim_sync_master(o, i);
        if (st != AMP_OK) {
            amp_optim_set_master_weights(o, false);
            return st;
        }
    }
    return AMP_OK;
}

bool amp_optim_master_weights(const amp_optim *o) { return o && o->masters; }

amp_tensor *amp_optim_master(const amp_optim *o, int i)
{
    if (!o || i < 0 || i >= o->n)
        return amp_fail_null(AMP_ERR_ARG, "optim_master: bad optimizer or index %d", i);
    if (optim_is_sharded(o, i))
        return amp_fail_null(AMP_ERR_STATE, "optim_master: parameter %d's master is sharded over the ranks "
                             "(ZeRO-1): amp_zero_gather_state first", i);
    if (optim_sync_master(o, i) != AMP_OK)
        return NULL;
    return o->master[i];
}

/* ---------------------------------------------------------- shards */

bool optim_is_sharded(const amp_optim *o, int i)
{
    return o->shard_lo[i] != 0 || o->shard_hi[i] != o->params[i]->numel;
}

int optim_first_sharded(const amp_optim *o)
{
    for (int i = 0; o && i < o->n; i++)
        if (optim_is_sharded(o, i))
            return i;
    return -1;
}

/* Elements [lo, lo + len) of the whole tensor t as a new 1-D tensor on its
 * device (NULL + error; len > 0). */
static amp_tensor *slice_of(const amp_tensor *t, int64_t lo, int64_t len)
{
    amp_tensor *c = tensor_new_on(AMP_SHAPE(len), t->dtype, tensor_device(t));
    if (!c)
        return NULL;
    const size_t es = amp_dtype_size(t->dtype);
    const amp_backend *be = backend_of(tensor_device(t));
    if (be->copy(tensor_ptr(c), tensor_device(t), (const char *)tensor_ptr(t) + (size_t)lo * es, tensor_device(t),
                 (size_t)len * es) != AMP_OK) {
        amp_tensor_free(c);
        return NULL;
    }
    tensor_set_category(c, (amp_mem_category)t->storage->category);
    return c;
}

amp_status optim_set_shard(amp_optim *o, int i, int64_t lo, int64_t hi)
{
    if (!o || i < 0 || i >= o->n)
        return amp_set_error(AMP_ERR_ARG, "optim_set_shard: bad optimizer or index %d", i);
    const int64_t numel = o->params[i]->numel;
    if (lo < 0 || lo > hi || hi > numel)
        return amp_set_error(AMP_ERR_ARG, "%s: shard [%lld, %lld) of parameter %d (%lld elements) is out of range",
                             o->name, (long long)lo, (long long)hi, i, (long long)numel);
    if (lo == o->shard_lo[i] && hi == o->shard_hi[i])
        return AMP_OK;
    amp_tensor **st = &o->state[i * OPTIM_MAX_STATE];
    bool has = o->master[i] != NULL;
    for (int k = 0; k < OPTIM_MAX_STATE; k++)
        has = has || st[k];
    if (has && optim_is_sharded(o, i))
        return amp_set_error(AMP_ERR_STATE, "%s: parameter %d's state is sharded as [%lld, %lld); it must be "
                             "gathered before it is sharded as [%lld, %lld)", o->name, i,
                             (long long)o->shard_lo[i], (long long)o->shard_hi[i], (long long)lo, (long long)hi);
    if (has && (lo != 0 || hi != numel)) {
        /* whole -> [lo, hi): every piece made before any is replaced */
        amp_tensor *cut[OPTIM_MAX_STATE + 1] = {NULL};
        for (int k = 0; k <= OPTIM_MAX_STATE; k++) {
            amp_tensor *t = k < OPTIM_MAX_STATE ? st[k] : o->master[i];
            if (t && hi > lo && !(cut[k] = slice_of(t, lo, hi - lo))) {
                for (int j = 0; j < k; j++)
                    amp_tensor_free(cut[j]);
                return amp_last_status();
            }
        }
        for (int k = 0; k < OPTIM_MAX_STATE; k++) {
            amp_tensor_free(st[k]);
            st[k] = cut[k];
        }
        amp_tensor_free(o->master[i]);
        o->master[i] = cut[OPTIM_MAX_STATE];
    }
    o->shard_lo[i] = lo;
    o->shard_hi[i] = hi;
    return AMP_OK;
}

void optim_unshard(amp_optim *o, int i, amp_tensor *const state[OPTIM_MAX_STATE], amp_tensor *master)
{
    for (int k = 0; k < OPTIM_MAX_STATE; k++) {
        amp_tensor_free(o->state[i * OPTIM_MAX_STATE + k]);
        o->state[i * OPTIM_MAX_STATE + k] = state[k];
    }
    amp_tensor_free(o->master[i]);
    o->master[i] = master;
    o->shard_lo[i] = 0;
    o->shard_hi[i] = o->params[i]->numel;
    o->master_version[i] = o->params[i]->storage->version;
}

void optim_master_current(amp_optim *o, int i)
{
    if (o->master[i])
        o->master_version[i] = o->params[i]->storage->version;
}

/* ------------------------------------------------------ state dtype */

amp_status amp_optim_set_state_dtype(amp_optim *o, amp_dtype dt)
{
    if (!o)
        return amp_set_error(AMP_ERR_ARG, "optim_set_state_dtype: NULL optimizer");
    if (dt != AMP_F32 && dt != AMP_BF16)
        return amp_set_error(AMP_ERR_DTYPE,
                             "%s: optimizer state dtype %s is not supported (f32 or bf16 only: f16's range cannot "
                             "hold Adam's squared gradients)",
                             o->name, (unsigned)dt < AMP_DTYPE_COUNT ? amp_dtype_name(dt) : "(invalid)");
    if (dt == o->state_dt)
        return AMP_OK;
    /* Existing buffers are converted (rounded to nearest-even), all made
     * before any is replaced, so a failure changes nothing. */
    const int nb = o->n * OPTIM_MAX_STATE;
    amp_tensor **c = calloc((size_t)nb, sizeof *c);
    if (!c)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", o->name);
    for (int k = 0; k < nb; k++) {
        if (!o->state[k])
            continue;
        if (!(c[k] = tensor_convert(o->state[k], dt))) {
            for (int j = 0; j < k; j++)
                amp_tensor_free(c[j]);
            free(c);
            return amp_last_status();
        }
        tensor_set_category(c[k], AMP_MEM_OPTIMIZER);
    }
    for (int k = 0; k < nb; k++) {
        if (c[k]) {
            amp_tensor_free(o->state[k]);
            o->state[k] = c[k];
        }
    }
    free(c);
    o->state_dt = dt;
    return AMP_OK;
}

amp_dtype amp_optim_state_dtype(const amp_optim *o) { return o ? o->state_dt : AMP_F32; }

amp_status amp_optim_set_state_stochastic_rounding(amp_optim *o, bool on)
{
    if (!o)
        return amp_set_error(AMP_ERR_ARG, "optim_set_state_stochastic_rounding: NULL optimizer");
    o->state_sr = on;
    return AMP_OK;
}

bool amp_optim_state_stochastic_rounding(const amp_optim *o) { return o && o->state_sr; }

amp_status amp_optim_set_weight_stochastic_rounding(amp_optim *o, bool on)
{
    if (!o)
        return amp_set_error(AMP_ERR_ARG, "optim_set_weight_stochastic_rounding: NULL optimizer");
    o->weight_sr = on;
    return AMP_OK;
}

bool amp_optim_weight_stochastic_rounding(const amp_optim *o) { return o && o->weight_sr; }

/* ------------------------------------------------------------ accessors */

void amp_optim_zero_grad(amp_optim *o)
{
    for (int i = 0; o && i < o->n; i++)
        amp_tensor_clear_grad(o->params[i]);
}

double amp_optim_get_lr(const amp_optim *o) { return o ? o->lr : NAN; }

void amp_optim_set_lr(amp_optim *o, double lr)
{
    if (!o)
        return;
    if (!(lr >= 0) || isinf(lr)) {
        amp_set_error(AMP_ERR_ARG, "optim_set_lr: invalid learning rate %g (kept %g)", lr, o->lr);
        return;
    }
    o->lr = lr;
}

int amp_optim_num_params(const amp_optim *o) { return o ? o->n : 0; }

amp_tensor *amp_optim_param(const amp_optim *o, int i)
{
    if (!o || i < 0 || i >= o->n)
        return amp_fail_null(AMP_ERR_ARG, "optim_param: index %d out of range (%d parameters)", i, o ? o->n : 0);
    return o->params[i];
}

amp_status amp_optim_set_weight_decay(amp_optim *o, int i, double weight_decay)
{
    if (!o || i < 0 || i >= o->n)
        return amp_set_error(AMP_ERR_ARG, "optim_set_weight_decay: index %d out of range (%d parameters)", i,
                             o ? o->n : 0);
    amp_status st = optim_check_nonneg(o->name, "weight_decay", weight_decay);
    if (st == AMP_OK)
        o->weight_decay[i] = weight_decay;
    return st;
}

double amp_optim_weight_decay(const amp_optim *o, int i)
{
    if (!o || i < 0 || i >= o->n) {
        amp_set_error(AMP_ERR_ARG, "optim_weight_decay: index %d out of range (%d parameters)", i, o ? o->n : 0);
        return NAN;
    }
    return o->weight_decay[i];
}

void optim_put_number(optim_put_fn put, void *ctx, const char *key, double v)
{
    char text[64];
    snprintf(text, sizeof text, "%.17g", v);
    put(ctx, key, text);
}
