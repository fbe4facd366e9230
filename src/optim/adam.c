/*
 * adam.c - Adam and AdamW, step for step as torch.optim's single-tensor
 * implementation (torch/optim/adam.py _single_tensor_adam; AdamW is Adam
 * with decoupled_weight_decay=True): their options, their state
 * ("exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad) and their
 * step, the backend's multi-tensor adam_step.
 */
#include "optim/optim.h"

#include "base/base.h"

#include <stdio.h>

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

/* The checks torch.optim.Adam's constructor makes, with the same wording. */
static amp_status check_adam(const char *opt, amp_adam_opts o)
{
    amp_status st;
    if ((st = optim_check_nonneg(opt, "learning rate (lr)", o.lr)) ||
        (st = optim_check_nonneg(opt, "epsilon (eps)", o.eps)) ||
        (st = optim_check_nonneg(opt, "weight_decay", o.weight_decay)))
        return st;
    if (!(o.beta1 >= 0 && o.beta1 < 1))
        return amp_set_error(AMP_ERR_ARG, "%s: invalid beta1 value: %g (must be in [0, 1))", opt, o.beta1);
    if (!(o.beta2 >= 0 && o.beta2 < 1))
        return amp_set_error(AMP_ERR_ARG, "%s: invalid beta2 value: %g (must be in [0, 1))", opt, o.beta2);
    return AMP_OK;
}

static bool adam_has_state(const amp_optim *o, int k) { return k < 2 || (k == 2 && o->opts.adam.amsgrad); }

/* Adam or AdamW (o's def says which: AdamW's weight decay is decoupled,
 * applied to the parameter). */
static amp_status adam_step(const amp_optim *o, const amp_backend *be, const be_optim_param *ps, int n,
                            int64_t *steps, int n_counters, const float *found_inf)
{
    const amp_adam_opts *a = &o->opts.adam;
    const bool decoupled = o->def == &optim_def_adamw;
    be_adam_opts bo = {o->lr, a->beta1, a->beta2, a->eps, decoupled, a->amsgrad, o->state_sr, o->weight_sr};
    BACKEND_CALL(be, o->name, adam_step, ps, n, steps, n_counters, found_inf, bo);
    return AMP_OK;
}

static void adam_describe(const amp_optim *o, optim_put_fn put, void *ctx)
{
    const amp_adam_opts *a = &o->opts.adam;
    optim_put_number(put, ctx, "beta1", a->beta1);
    optim_put_number(put, ctx, "beta2", a->beta2);
    optim_put_number(put, ctx, "eps", a->eps);
    optim_put_number(put, ctx, "weight_decay", a->weight_decay);
    put(ctx, "amsgrad", a->amsgrad ? "true" : "false");
}

/* Adam and AdamW: the same state and options, one step. */
#define ADAM_DEF(nm)                                                                                            \
    {                                                                                                           \
        .name = nm, .state_names = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, .has_state = adam_has_state,   \
        .step = adam_step, .describe = adam_describe,                                                           \
    }
const optim_def optim_def_adam = ADAM_DEF("adam");
const optim_def optim_def_adamw = ADAM_DEF("adamw");
#undef ADAM_DEF

static amp_optim *adam_new(const optim_def *def, amp_tensor *const *params, int n, amp_adam_opts opts)
{
    if (check_adam(def->name, opts) != AMP_OK)
        return NULL;
    amp_optim *o = optim_new(def, params, n, opts.lr, opts.weight_decay);
    if (o)
        o->opts.adam = opts;
    return o;
}

amp_optim *amp_optim_adam(amp_tensor *const *params, int n, amp_adam_opts o)
{
    return adam_new(&optim_def_adam, params, n, o);
}

amp_optim *amp_optim_adamw(amp_tensor *const *params, int n, amp_adam_opts o)
{
    return adam_new(&optim_def_adamw, params, n, o);
}
