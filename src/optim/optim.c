/*
 * optim.c - SGD, Adam and AdamW, step for step as torch.optim's
 * single-tensor implementations (torch/optim/sgd.py _single_tensor_sgd,
 * torch/optim/adam.py _single_tensor_adam; AdamW is Adam with
 * decoupled_weight_decay=True), plus the optimizer's bookkeeping.
 *
 * Every parameter is updated in f32: f32 parameters in place, f16/bf16
 * ones loaded to f32, updated, and rounded once on store. State buffers
 * are f32 whatever the parameter's dtype. The element loops (update.c)
 * follow PyTorch's order of operations so f32 results agree to rounding.
 * A CPU step updates all parameters at once: one parallel region over the
 * blocks of every parameter with a gradient (multi-tensor, like PyTorch's
 * foreach), with the per-parameter scalars worked out before it.
 *
 * An optimizer over CUDA parameters (all of them on CUDA: one optimizer
 * per device) keeps its state buffers on the device and steps every
 * parameter in one fused multi-tensor launch (src/backend/cuda/amp.cu,
 * the same formulas), with the step counts on the device too, so the
 * grad scaler's skipped steps need no host synchronisation.
 */
#include "optim/optim.h"
#include "optim/update.h"

#include "backend/cuda/cuda_backend.h"
#include "base/base.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    cuda_free(o->dev_steps);
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
        if (slot_name(o, k) && !*s &&
            !(*s = tensor_zeros_on(o->params[i]->shape, AMP_F32, tensor_device(o->params[i]))))
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
        if (slot_name(o, k) && strcmp(slot_name(o, k), name) == 0) {
            amp_tensor *t = o->state[i * OPTIM_MAX_STATE + k];
            /* On CUDA the buffers are made (zeros) before the fused launch
             * that found_inf may skip, as PyTorch's fused optimizers do;
             * at 0 steps they are never read, and are no state yet. */
            return t && amp_optim_param_steps(o, i) > 0 ? t : NULL;
        }
    return amp_fail_null(AMP_ERR_ARG, "optim_state_tensor: %s with these options has no state \"%s\"", o->name,
                         name);
}

/* Counter k of the device's step counters (0 when it cannot be read). */
static int64_t dev_counter(const amp_optim *o, int k)
{
    int64_t v = 0;
    return cuda_copy(&v, AMP_CPU, o->dev_steps + k, AMP_CUDA, sizeof v) == AMP_OK ? v : 0;
}

static amp_status dev_counter_set(amp_optim *o, int k, int64_t v)
{
    return o->dev_steps ? cuda_copy(o->dev_steps + k, AMP_CUDA, &v, AMP_CPU, sizeof v) : AMP_OK;
}

int64_t amp_optim_param_steps(const amp_optim *o, int i)
{
    if (!o || i < 0 || i >= o->n)
        return 0;
    return o->dev_steps ? dev_counter(o, i) : o->param_steps[i];
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
    return dev_counter_set(o, i, steps);
}

amp_status amp_optim_set_steps(amp_optim *o, int64_t steps)
{
    if (!o || steps < 0)
        return amp_set_error(AMP_ERR_ARG, "optim_set_steps: bad optimizer or steps %lld", (long long)steps);
    o->steps = steps;
    return dev_counter_set(o, o->n, steps);
}

/* --------------------------------------------------------------- updates */

/* Checks every gradient before anything changes, so a failed step leaves
 * parameters and state as they were. */
static amp_status check_grads(const amp_optim *o)
{
    for (int i = 0; i < o->n; i++) {
        const amp_tensor *p = o->params[i], *g = p->grad;
        if (tensor_device(p) != tensor_device(o->params[0]))
            return amp_set_error(AMP_ERR_DEVICE, "%s: parameter 0 is on %s but parameter %d on %s (one optimizer per "
                                 "device)", o->name, amp_device_name(tensor_device(o->params[0])), i,
                                 amp_device_name(tensor_device(p)));
        if (g && tensor_device(g) != tensor_device(p))
            return amp_set_error(AMP_ERR_DEVICE, "%s: parameter %d is on %s but its gradient on %s", o->name, i,
                                 amp_device_name(tensor_device(p)), amp_device_name(tensor_device(g)));
        if (g && (!shape_equal(g->shape, p->shape) || !amp_dtype_is_float(g->dtype))) {
            char a[96], b[96];
            return amp_set_error(AMP_ERR_SHAPE, "%s: parameter %d is %s %s but its gradient is %s %s", o->name, i,
                                 amp_shape_str(p->shape, a, sizeof a), amp_dtype_name(p->dtype),
                                 amp_shape_str(g->shape, b, sizeof b), amp_dtype_name(g->dtype));
        }
    }
    return AMP_OK;
}

/* Every parameter with a gradient in one multi-tensor pass (update.c):
 * one parallel region over the blocks of all of them, each parameter at
 * its own step count. Parameters and counters change only when the whole
 * step succeeds. */
static amp_status step_cpu(amp_optim *o)
{
    optim_param *ps = calloc((size_t)o->n, sizeof *ps);
    if (!ps)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", o->name);
    int k = 0;
    for (int i = 0; i < o->n; i++) {
        amp_tensor *p = o->params[i];
        if (!p->grad)
            continue;
        for (int j = 0; j < OPTIM_MAX_STATE; j++) {
            amp_tensor *t = o->state[i * OPTIM_MAX_STATE + j];
            if (t && tensor_on_cuda(t)) {
                free(ps);
                return amp_set_error(AMP_ERR_DEVICE, "%s: parameter %d is on the cpu but its state is on cuda",
                                     o->name, i);
            }
        }
        ps[k++] = (optim_param){tensor_ptr(p), tensor_ptr(p->grad), p->dtype, p->grad->dtype,
                                {state_f32(o, i, 0), state_f32(o, i, 1), state_f32(o, i, 2)}, p->numel,
                                o->param_steps[i] + 1};
    }
    amp_status st = o->kind == OPTIM_SGD
                        ? optim_sgd_step(&o->sgd, (float)o->lr, ps, k)
                        : optim_adam_step(&o->adam, o->kind == OPTIM_ADAMW, o->lr, ps, k);
    free(ps);
    if (st != AMP_OK)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", o->name);
    for (int i = 0; i < o->n; i++)
        if (o->params[i]->grad) {
            o->param_steps[i]++;
            tensor_bump(o->params[i]); /* an in-place write: stale autocast casts must go */
        }
    return AMP_OK;
}

/* Every parameter with a gradient in one fused launch, guarded by
 * found_inf; the counters go up on the device. */
static amp_status step_cuda(amp_optim *o, const float *found_inf)
{
    if (!o->dev_steps) {
        int64_t *init = malloc((size_t)(o->n + 1) * sizeof *init);
        if (!init)
            return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", o->name);
        memcpy(init, o->param_steps, (size_t)o->n * sizeof *init);
        init[o->n] = o->steps;
        o->dev_steps = cuda_malloc((size_t)(o->n + 1) * sizeof *init);
        amp_status st = o->dev_steps ? cuda_copy(o->dev_steps, AMP_CUDA, init, AMP_CPU,
                                                 (size_t)(o->n + 1) * sizeof *init)
                                     : amp_last_status();
        free(init);
        if (st != AMP_OK) {
            cuda_free(o->dev_steps);
            o->dev_steps = NULL;
            return st;
        }
    }
    cuda_param *ps = calloc((size_t)o->n, sizeof *ps);
    if (!ps)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", o->name);
    int k = 0;
    for (int i = 0; i < o->n; i++) {
        amp_tensor *p = o->params[i];
        if (!p->grad)
            continue;
        float *st[OPTIM_MAX_STATE];
        for (int j = 0; j < OPTIM_MAX_STATE; j++) {
            amp_tensor *t = o->state[i * OPTIM_MAX_STATE + j];
            if (t && !tensor_on_cuda(t)) {
                free(ps);
                return amp_set_error(AMP_ERR_DEVICE,
                                     "%s: parameter %d is on cuda but its state is on the cpu (move parameters "
                                     "before the first step)",
                                     o->name, i);
            }
            st[j] = t ? tensor_f32(t) : NULL;
        }
        ps[k++] = (cuda_param){tensor_ptr(p), tensor_ptr(p->grad), st[0], st[1], st[2], p->numel, p->dtype,
                               p->grad->dtype, i};
        tensor_bump(p); /* an in-place write: stale autocast casts must go */
    }
    amp_status st;
    if (o->kind == OPTIM_SGD) {
        const amp_sgd_opts *s = &o->sgd;
        cuda_sgd_opts so = {(float)o->lr, (float)s->weight_decay, (float)s->momentum, (float)(1.0 - s->dampening),
                            s->nesterov};
        st = cuda_sgd_step(ps, k, o->dev_steps, o->n, found_inf, so);
    } else {
        const amp_adam_opts *a = &o->adam;
        cuda_adam_opts ao = {o->lr, a->beta1, a->beta2, a->eps, a->weight_decay, o->kind == OPTIM_ADAMW, a->amsgrad};
        st = cuda_adam_step(ps, k, o->dev_steps, o->n, found_inf, ao);
    }
    free(ps);
    return st;
}

amp_status amp_optim_step(amp_optim *o) { return optim_step_guarded(o, NULL); }

amp_status optim_step_guarded(amp_optim *o, const float *found_inf)
{
    if (!o)
        return amp_set_error(AMP_ERR_ARG, "optim_step: NULL optimizer");
    amp_status st = check_grads(o);
    for (int i = 0; i < o->n && st == AMP_OK; i++)
        if (o->params[i]->grad)
            st = ensure_state(o, i);
    if (st == AMP_OK && tensor_on_cuda(o->params[0]))
        return step_cuda(o, found_inf);
    if (st == AMP_OK)
        st = step_cpu(o);
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

int64_t amp_optim_steps(const amp_optim *o)
{
    if (!o)
        return 0;
    return o->dev_steps ? dev_counter(o, o->n) : o->steps;
}
