/*
 * optim.c - SGD, Adam and AdamW, step for step as torch.optim's
 * single-tensor implementations (torch/optim/sgd.py _single_tensor_sgd,
 * torch/optim/adam.py _single_tensor_adam; AdamW is Adam with
 * decoupled_weight_decay=True), plus the optimizer's bookkeeping.
 *
 * Every parameter is updated in f32: f32 parameters in place, f16/bf16
 * ones loaded to f32, updated, and rounded once on store. State buffers
 * are f32 whatever the parameter's dtype. The element loops follow
 * PyTorch's order of operations so f32 results agree to rounding.
 */
#include "optim/optim.h"

#include "base/base.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#define PAR_MIN_WORK 32768
#endif

/* ------------------------------------------------------------ options */

amp_sgd_opts amp_sgd_defaults(void)
{
    return (amp_sgd_opts){.lr = 0.01, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false};
}

/* torch.optim.Adam's defaults. */
amp_adam_opts amp_adam_defaults(void)
{
    return (amp_adam_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .amsgrad = false};
}

/* torch.optim.AdamW's defaults: Adam's with weight_decay 0.01. */
amp_adam_opts amp_adamw_defaults(void)
{
    amp_adam_opts o = amp_adam_defaults();
    o.weight_decay = 1e-2;
    return o;
}

/* The checks torch.optim's constructors make, with the same wording. */
static amp_status check_nonneg(const char *opt, const char *what, double v)
{
    if (!(v >= 0) || isinf(v))
        return amp_set_error(AMP_ERR_ARG, "%s: invalid %s value: %g (must be finite and >= 0)", opt, what, v);
    return AMP_OK;
}

static amp_status check_sgd(amp_sgd_opts o)
{
    amp_status st;
    if ((st = check_nonneg("sgd", "learning rate (lr)", o.lr)) || (st = check_nonneg("sgd", "momentum", o.momentum)) ||
        (st = check_nonneg("sgd", "weight_decay", o.weight_decay)))
        return st;
    if (isnan(o.dampening) || isinf(o.dampening))
        return amp_set_error(AMP_ERR_ARG, "sgd: invalid dampening value: %g", o.dampening);
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        return amp_set_error(AMP_ERR_ARG,
                             "sgd: nesterov momentum requires a momentum > 0 and zero dampening "
                             "(momentum %g, dampening %g)",
                             o.momentum, o.dampening);
    return AMP_OK;
}

static amp_status check_adam(const char *opt, amp_adam_opts o)
{
    amp_status st;
    if ((st = check_nonneg(opt, "learning rate (lr)", o.lr)) || (st = check_nonneg(opt, "epsilon (eps)", o.eps)) ||
        (st = check_nonneg(opt, "weight_decay", o.weight_decay)))
        return st;
    if (!(o.beta1 >= 0 && o.beta1 < 1))
        return amp_set_error(AMP_ERR_ARG, "%s: invalid beta1 value: %g (must be in [0, 1))", opt, o.beta1);
    if (!(o.beta2 >= 0 && o.beta2 < 1))
        return amp_set_error(AMP_ERR_ARG, "%s: invalid beta2 value: %g (must be in [0, 1))", opt, o.beta2);
    return AMP_OK;
}

/* ------------------------------------------------------- construction */

static amp_optim *optim_new(optim_kind kind, const char *name, amp_tensor *const *params, int n)
{
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
    }
    if (!o || !o->params || !o->state || !o->param_steps) {
        if (o) {
            free(o->params);
            free(o->state);
            free(o->param_steps);
            free(o);
        }
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", name);
    }
    o->kind = kind;
    o->name = name;
    o->n = n;
    for (int i = 0; i < n; i++)
        o->params[i] = amp_tensor_retain(params[i]);
    return o;
}

amp_optim *amp_optim_sgd(amp_tensor *const *params, int n, amp_sgd_opts opts)
{
    if (check_sgd(opts) != AMP_OK)
        return NULL;
    amp_optim *o = optim_new(OPTIM_SGD, "sgd", params, n);
    if (o) {
        o->sgd = opts;
        o->lr = opts.lr;
    }
    return o;
}

static amp_optim *adam_new(optim_kind kind, const char *name, amp_tensor *const *params, int n, amp_adam_opts opts)
{
    if (check_adam(name, opts) != AMP_OK)
        return NULL;
    amp_optim *o = optim_new(kind, name, params, n);
    if (o) {
        o->adam = opts;
        o->lr = opts.lr;
    }
    return o;
}

amp_optim *amp_optim_adam(amp_tensor *const *params, int n, amp_adam_opts o)
{
    return adam_new(OPTIM_ADAM, "adam", params, n, o);
}

amp_optim *amp_optim_adamw(amp_tensor *const *params, int n, amp_adam_opts o)
{
    return adam_new(OPTIM_ADAMW, "adamw", params, n, o);
}

void amp_optim_free(amp_optim *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n; i++)
        amp_tensor_free(o->params[i]);
    for (int k = 0; k < o->n * OPTIM_MAX_STATE; k++)
        amp_tensor_free(o->state[k]);
    free(o->params);
    free(o->state);
    free(o->param_steps);
    free(o);
}

/* ---------------------------------------------------------------- state */

/* The name of state slot k, or NULL when this optimizer does not use it. */
static const char *slot_name(const amp_optim *o, int k)
{
    if (o->kind == OPTIM_SGD)
        return (k == 0 && o->sgd.momentum != 0) ? "momentum_buffer" : NULL;
    static const char *const adam[OPTIM_MAX_STATE] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return (k < 2 || o->adam.amsgrad) ? adam[k] : NULL;
}

/* Creates parameter i's state buffers (zeros) where missing. */
static amp_status ensure_state(amp_optim *o, int i)
{
    for (int k = 0; k < OPTIM_MAX_STATE; k++) {
        amp_tensor **s = &o->state[i * OPTIM_MAX_STATE + k];
        if (slot_name(o, k) && !*s && !(*s = tensor_zeros(o->params[i]->shape, AMP_F32)))
            return amp_last_status();
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

static float *state_f32(const amp_optim *o, int i, int k)
{
    amp_tensor *t = o->state[i * OPTIM_MAX_STATE + k];
    return t ? tensor_f32(t) : NULL;
}

amp_tensor *amp_optim_state_tensor(const amp_optim *o, int i, const char *name)
{
    if (!o || !name || i < 0 || i >= o->n)
        return amp_fail_null(AMP_ERR_ARG, "optim_state_tensor: bad optimizer, index %d or name", i);
    for (int k = 0; k < OPTIM_MAX_STATE; k++)
        if (slot_name(o, k) && strcmp(slot_name(o, k), name) == 0)
            return o->state[i * OPTIM_MAX_STATE + k];
    return amp_fail_null(AMP_ERR_ARG, "optim_state_tensor: %s with these options has no state \"%s\"", o->name,
                         name);
}

int64_t amp_optim_param_steps(const amp_optim *o, int i)
{
    return (o && i >= 0 && i < o->n) ? o->param_steps[i] : 0;
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
    o->param_steps[i] = steps;
    return AMP_OK;
}

amp_status amp_optim_set_steps(amp_optim *o, int64_t steps)
{
    if (!o || steps < 0)
        return amp_set_error(AMP_ERR_ARG, "optim_set_steps: bad optimizer or steps %lld", (long long)steps);
    o->steps = steps;
    return AMP_OK;
}

/* --------------------------------------------------------------- updates */

/* One SGD update of n elements (sgd.py: weight decay into the gradient,
 * momentum buffer = the first gradient, then buf*momentum +
 * (1-dampening)*g, nesterov g + momentum*buf, p -= lr*g). */
static void sgd_update(const amp_sgd_opts *s, float lr, bool first, float *p, const float *g, float *buf, int64_t n)
{
    const float wd = (float)s->weight_decay, mom = (float)s->momentum;
    const float damp1 = (float)(1.0 - s->dampening), neg_lr = -lr;
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (n > PAR_MIN_WORK)
#endif
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j];
        if (wd != 0)
            gj = gj + wd * p[j];
        if (buf) {
            buf[j] = first ? gj : buf[j] * mom + damp1 * gj;
            gj = s->nesterov ? gj + mom * buf[j] : buf[j];
        }
        p[j] = p[j] + neg_lr * gj;
    }
}

/* One Adam / AdamW update at (1-based) step t of parameter i's n elements
 * (adam.py _single_tensor_adam). */
static void adam_update(const amp_adam_opts *a, bool decoupled, double lr, int64_t t, float *p, const float *g,
                        float *m, float *v, float *vmax, int64_t n)
{
    const double bc1 = 1.0 - pow(a->beta1, (double)t), bc2 = 1.0 - pow(a->beta2, (double)t);
    const float neg_step = (float)(-(lr / bc1)), bc2_sqrt = (float)sqrt(bc2), eps = (float)a->eps;
    const float wd = (float)a->weight_decay, decay = (float)(1.0 - lr * a->weight_decay);
    const float w1 = (float)(1.0 - a->beta1), b2 = (float)a->beta2, w2 = (float)(1.0 - a->beta2);
    const bool l2 = !decoupled && a->weight_decay != 0, dec = decoupled && a->weight_decay != 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (n > PAR_MIN_WORK)
#endif
    for (int64_t j = 0; j < n; j++) {
        float pj = p[j], gj = g[j];
        if (dec)
            pj = pj * decay;
        if (l2)
            gj = gj + wd * pj;
        /* exp_avg.lerp_(grad, 1 - beta1), with ATen's two-sided lerp */
        float d = gj - m[j];
        m[j] = w1 < 0.5f ? m[j] + w1 * d : gj - d * (1.0f - w1);
        v[j] = v[j] * b2 + w2 * gj * gj;
        float vv = v[j];
        if (vmax) {
            if (!(vmax[j] >= vv)) /* torch.maximum: NaN wins */
                vmax[j] = vv;
            vv = vmax[j];
        }
        float denom = sqrtf(vv) / bc2_sqrt + eps;
        p[j] = pj + neg_step * (m[j] / denom);
    }
}

/* Checks every gradient before anything changes, so a failed step leaves
 * parameters and state as they were. */
static amp_status check_grads(const amp_optim *o)
{
    for (int i = 0; i < o->n; i++) {
        const amp_tensor *p = o->params[i], *g = p->grad;
        if (g && (!shape_equal(g->shape, p->shape) || !amp_dtype_is_float(g->dtype))) {
            char a[96], b[96];
            return amp_set_error(AMP_ERR_SHAPE, "%s: parameter %d is %s %s but its gradient is %s %s", o->name, i,
                                 amp_shape_str(p->shape, a, sizeof a), amp_dtype_name(p->dtype),
                                 amp_shape_str(g->shape, b, sizeof b), amp_dtype_name(g->dtype));
        }
    }
    return AMP_OK;
}

static amp_status step_param(amp_optim *o, int i)
{
    amp_tensor *p = o->params[i];
    float *gtmp = NULL, *ptmp = NULL;
    const float *g = tensor_as_f32(p->grad, &gtmp);
    float *pv = p->dtype == AMP_F32 ? tensor_f32(p) : (float *)tensor_as_f32(p, &ptmp);
    if (!g || !pv) {
        amp_free(gtmp);
        amp_free(ptmp);
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", o->name);
    }
    bool first = o->param_steps[i] == 0;
    o->param_steps[i]++;
    tensor_bump(p); /* an in-place write: stale autocast casts must go */
    if (o->kind == OPTIM_SGD)
        sgd_update(&o->sgd, (float)o->lr, first, pv, g, state_f32(o, i, 0), p->numel);
    else
        adam_update(&o->adam, o->kind == OPTIM_ADAMW, o->lr, o->param_steps[i], pv, g, state_f32(o, i, 0),
                    state_f32(o, i, 1), state_f32(o, i, 2), p->numel);
    if (ptmp)
        tensor_store_f32(p, ptmp);
    amp_free(gtmp);
    amp_free(ptmp);
    return AMP_OK;
}

amp_status amp_optim_step(amp_optim *o)
{
    if (!o)
        return amp_set_error(AMP_ERR_ARG, "optim_step: NULL optimizer");
    amp_status st = check_grads(o);
    for (int i = 0; i < o->n && st == AMP_OK; i++)
        if (o->params[i]->grad)
            st = ensure_state(o, i);
    for (int i = 0; i < o->n && st == AMP_OK; i++)
        if (o->params[i]->grad)
            st = step_param(o, i);
    if (st == AMP_OK)
        o->steps++;
    return st;
}

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

int64_t amp_optim_steps(const amp_optim *o) { return o ? o->steps : 0; }
