/*
 * sgd.c - SGD with momentum, dampening, weight decay and Nesterov, step
 * for step as torch.optim's single-tensor implementation
 * (torch/optim/sgd.py _single_tensor_sgd): its options, its one state
 * buffer ("momentum_buffer", only with momentum) and its step, the
 * backend's multi-tensor sgd_step.
 */
#include "optim/optim.h"

#include "base/base.h"

#include <math.h>
#include <stdio.h>

amp_sgd_opts amp_sgd_defaults(void)
{
    return (amp_sgd_opts){.lr = 0.01, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false};
}

/* The checks torch.optim.SGD's constructor makes, with the same wording. */
static amp_status check_sgd(amp_sgd_opts o)
{
    amp_status st;
    if ((st = optim_check_nonneg("sgd", "learning rate (lr)", o.lr)) ||
        (st = optim_check_nonneg("sgd", "momentum", o.momentum)) ||
        (st = optim_check_nonneg("sgd", "weight_decay", o.weight_decay)))
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

static bool sgd_has_state(const amp_optim *o, int k) { return k == 0 && o->opts.sgd.momentum != 0; }

/* The update runs in f32: the constants as sgd.py's f32 tensors see them. */
static amp_status sgd_step(const amp_optim *o, const amp_backend *be, const be_optim_param *ps, int n,
                           int64_t *steps, int n_counters, const float *found_inf)
{
    const amp_sgd_opts *s = &o->opts.sgd;
    be_sgd_opts bo = {(float)o->lr,      (float)s->momentum, (float)(1.0 - s->dampening),
                      s->nesterov,       o->state_sr,        o->weight_sr};
    BACKEND_CALL(be, "sgd", sgd_step, ps, n, steps, n_counters, found_inf, bo);
    return AMP_OK;
}

static void sgd_describe(const amp_optim *o, optim_put_fn put, void *ctx)
{
    const amp_sgd_opts *s = &o->opts.sgd;
    optim_put_number(put, ctx, "momentum", s->momentum);
    optim_put_number(put, ctx, "dampening", s->dampening);
    optim_put_number(put, ctx, "weight_decay", s->weight_decay);
    put(ctx, "nesterov", s->nesterov ? "true" : "false");
}

const optim_def optim_def_sgd = {
    .name = "sgd",
    .state_names = {"momentum_buffer"},
    .has_state = sgd_has_state,
    .step = sgd_step,
    .describe = sgd_describe,
};

amp_optim *amp_optim_sgd(amp_tensor *const *params, int n, amp_sgd_opts opts)
{
    if (check_sgd(opts) != AMP_OK)
        return NULL;
    amp_optim *o = optim_new(&optim_def_sgd, params, n, opts.lr, opts.weight_decay);
    if (o)
        o->opts.sgd = opts;
    return o;
}
