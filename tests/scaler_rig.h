/*
 * scaler_rig.h - the grad scaler's test rig, shared by test_scaler.c (the
 * conformance cases on the CPU) and test_cuda.c (a set of them again on
 * CUDA):
 *
 *   rig, rig_on, make_rig, free_rig   one parameter of n ones and its
 *                         optimizer (SGD lr 0.5 momentum 0.9, or Adam), on
 *                         a device (make_rig: on the CPU)
 *   backward_with_grad    a backward whose gradient is g times the scale
 *   iteration             zero, backward, step, update: one training step
 *   scaler_with           a scaler with the four options the cases vary
 *   scaler_case_*         the conformance cases (AMP_SPEC.md, "Conformance
 *                         cases") both devices run, given the device
 *
 * Gradients are made by a real backward: loss = sum(p * c) has gradient c,
 * and amp_scaler_scale multiplies it by the scale, as in a training loop.
 * Header-only (static inline), as tests/cuda_rig.h.
 */
#ifndef AMPC_TEST_SCALER_RIG_H
#define AMPC_TEST_SCALER_RIG_H

#include "harness.h"

typedef struct {
    amp_tensor *p;
    amp_optim *opt;
} rig;

static inline rig rig_on(amp_device dev, int n, bool adam)
{
    rig r;
    r.p = amp_full(AMP_SHAPE(n), AMP_F32, 1.0);
    if (dev != AMP_CPU)
        CHECK_OK(amp_tensor_move(r.p, dev));
    amp_tensor_set_requires_grad(r.p, true);
    if (adam) {
        r.opt = amp_optim_adam(&r.p, 1, amp_adam_defaults());
    } else {
        amp_sgd_opts o = amp_sgd_defaults();
        o.lr = 0.5;
        o.momentum = 0.9;
        r.opt = amp_optim_sgd(&r.p, 1, o);
    }
    return r;
}

static inline rig make_rig(int n, bool adam) { return rig_on(AMP_CPU, n, adam); }

static inline void free_rig(rig r)
{
    amp_optim_free(r.opt);
    amp_tensor_free(r.p);
}

/* Backward of scale * sum(p * c), with c[i] = g (g may be inf or NaN), c
 * on p's device. */
static inline void backward_with_grad(amp_scaler *s, rig r, double g)
{
    amp_tensor *c = amp_full(amp_tensor_shape(r.p), AMP_F32, g);
    if (amp_tensor_device(r.p) != AMP_CPU)
        CHECK_OK(amp_tensor_move(c, amp_tensor_device(r.p)));
    amp_tensor *loss = amp_sum_all(amp_mul(r.p, c));
    CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
    amp_tensor_free(c);
    amp_temps_free();
}

/* One iteration: zero, backward, step, update; returns whether it skipped. */
static inline bool iteration(amp_scaler *s, rig r, double g)
{
    bool skipped = false;
    amp_optim_zero_grad(r.opt);
    backward_with_grad(s, r, g);
    CHECK_OK(amp_scaler_step(s, r.opt, &skipped));
    CHECK_OK(amp_scaler_update(s));
    return skipped;
}

static inline amp_scaler *scaler_with(double init, double growth, double backoff, int64_t interval)
{
    amp_scaler_opts o = amp_scaler_defaults();
    o.init_scale = init;
    o.growth_factor = growth;
    o.backoff_factor = backoff;
    o.growth_interval = interval;
    return amp_scaler_new(o);
}

/* Case 3: growth after `interval` clean steps, backoff on an overflow,
 * the tracker reset by both. */
static inline void scaler_case_small_interval_sequence(amp_device dev)
{
    amp_scaler *s = scaler_with(4, 2, 0.25, 2);
    rig r = rig_on(dev, 3, false);
    CHECK(!iteration(s, r, 1.0));
    CHECK(amp_scaler_get_scale(s) == 4.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 1);
    CHECK(!iteration(s, r, 1.0));
    CHECK(amp_scaler_get_scale(s) == 8.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 0);
    CHECK(iteration(s, r, INFINITY));
    CHECK(amp_scaler_get_scale(s) == 2.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 0);
    free_rig(r);
    amp_scaler_free(s);
}

/* Case 5: twenty overflows halve the default scale twenty times. */
static inline void scaler_case_no_floor(amp_device dev)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = rig_on(dev, 1, false);
    for (int k = 0; k < 20; k++)
        CHECK(iteration(s, r, INFINITY));
    CHECK(amp_scaler_get_scale(s) == 0.0625);
    free_rig(r);
    amp_scaler_free(s);
}

/* Case 8: growth interval 1 with a skip in the middle; the counts and the
 * history of scale changes say so, and the optimizer took the 3 steps. */
static inline void scaler_case_interval_one_with_a_skip(amp_device dev)
{
    amp_scaler *s = scaler_with(128, 2, 0.5, 1);
    rig r = rig_on(dev, 1, false);
    CHECK(!iteration(s, r, 1.0));
    CHECK(!iteration(s, r, 1.0));
    CHECK(iteration(s, r, INFINITY));
    CHECK(!iteration(s, r, 1.0));
    CHECK(amp_scaler_get_scale(s) == 512.0);
    amp_scaler_counts c = amp_scaler_get_counts(s);
    CHECK_EQ_INT(c.steps, 3);
    CHECK_EQ_INT(c.skipped, 1);
    amp_scale_change h[8];
    int n = amp_scaler_history(s, h, 8);
    CHECK_EQ_INT(n, 4); /* 256, 512, 256, 512 */
    CHECK(n == 4 && h[2].old_scale == 512.0 && h[2].new_scale == 256.0 && h[2].update == 2);
    CHECK_EQ_INT(amp_optim_steps(r.opt), 3);
    free_rig(r);
    amp_scaler_free(s);
}

/* Case 11: a step skipped for the gradient value bad changes no parameter
 * and no optimizer state (SGD's momentum, or Adam's moments). */
static inline void scaler_case_skip_preserves(amp_device dev, bool adam, double bad)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = rig_on(dev, 3, adam);
    CHECK(!iteration(s, r, 0.25)); /* one real step, so state exists */
    amp_tensor *before = amp_clone(r.p);
    int64_t steps = amp_optim_steps(r.opt);
    double scale = amp_scaler_get_scale(s);
    CHECK(iteration(s, r, bad));
    CHECK(max_abs_diff(before, r.p) == 0.0);
    CHECK_EQ_INT(amp_optim_steps(r.opt), steps);
    CHECK_EQ_INT(amp_optim_param_steps(r.opt, 0), steps);
    CHECK(amp_scaler_get_scale(s) == scale / 2);
    /* The momentum / moments survived too: the next clean step equals the
     * one a run without the bad step takes. */
    amp_scaler *s2 = amp_scaler_new(amp_scaler_defaults());
    rig r2 = rig_on(dev, 3, adam);
    iteration(s2, r2, 0.25);
    iteration(s2, r2, 0.125);
    iteration(s, r, 0.125);
    CHECK(max_abs_diff(r.p, r2.p) < 1e-7);
    amp_tensor_free(before);
    free_rig(r);
    free_rig(r2);
    amp_scaler_free(s);
    amp_scaler_free(s2);
}

#endif
