/*
 * test_weight_sr.c - stochastic rounding of bf16 weights without masters
 * (amp_optim_set_weight_stochastic_rounding; src/backend/round_rule.h).
 *
 *   - The stall it fixes: SGD updates of a sixteenth to an eighth of a
 *     bf16 unit in the last place leave every weight where it was at nearest-even; with
 *     stochastic rounding each stored weight is one of the two bf16 values
 *     around the f32 update (the reference's, bit for bit in f32), rounded
 *     away from zero as often as the discarded fractions say (within 4
 *     standard deviations).
 *   - Its bits are a function of (parameter, step, element): the same on
 *     one thread and on all, and on CUDA as on the CPU (when a GPU is here,
 *     or under cudaemu), for SGD and Adam.
 *   - No effect where it does not apply: f32 parameters, and bf16 ones
 *     with f32 masters (the master keeps the bits; the weight is its
 *     nearest-even rounding).
 */
#include "harness.h"
#include "optim/optim.h"
#include "sr_tally.h"
#include "tensor/tensor.h"

#include <math.h>
#include <string.h>

enum { N = 20000 + 7 }; /* a block (16384) and a tail, and a vector tail */

/* SGD without momentum, lr such that |update| = lr g is a sixteenth to an
 * eighth of the unit in the last place of weights in [1, 2) (2^-7 for
 * bf16): g in [0.5, 1). */
#define LR 0x1p-10

static amp_optim *sgd_over(amp_tensor *p)
{
    amp_sgd_opts s = amp_sgd_defaults();
    s.lr = LR;
    s.momentum = 0;
    return amp_optim_sgd(&p, 1, s);
}

/* Weights in [1, 2), gradients in [0.5, 1): each a bf16. */
static amp_tensor *into(amp_tensor *t, amp_dtype dt)
{
    amp_tensor *c = tensor_convert(t, dt);
    amp_tensor_free(t);
    return c;
}
static amp_tensor *weights(void) { return into(test_uniform(AMP_SHAPE(N), AMP_F32, 1, 2, 3), AMP_BF16); }
static amp_tensor *grads(int step)
{
    return into(test_uniform(AMP_SHAPE(N), AMP_F32, 0.5, 1, 100 + (uint64_t)step), AMP_BF16);
}

static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    return a && b && a->dtype == b->dtype && a->numel == b->numel &&
           memcmp(tensor_ptr(a), tensor_ptr(b), (size_t)a->numel * amp_dtype_size(a->dtype)) == 0;
}

/* Steps of p (bf16, stochastic rounding when sr) against an f32
 * reference started from the same values: each step, the reference
 * restarts from p's stored values, so its f32 result is exactly what p's
 * update computed before rounding. Counts the stored elements that
 * rounded up (away from zero), those expected to (the discarded
 * fractions' sum) and its variance, and elements outside the two bf16
 * neighbours; *unchanged: elements that stayed at their old value. */
static void run(bool sr, int steps, sr_tally *t, int64_t *unchanged)
{
    amp_tensor *p = weights();
    amp_optim *o = sgd_over(p);
    CHECK_OK(amp_optim_set_weight_stochastic_rounding(o, sr));
    CHECK(amp_optim_weight_stochastic_rounding(o) == sr);
    *t = (sr_tally){0};
    *unchanged = 0;
    for (int s = 0; s < steps; s++) {
        amp_tensor *ref = tensor_convert(p, AMP_F32), *old = amp_clone(p);
        amp_optim *r = sgd_over(ref);
        amp_tensor *g = grads(s);
        p->grad = g;
        ref->grad = tensor_convert(g, AMP_F32);
        CHECK_OK(amp_optim_step(o));
        CHECK_OK(amp_optim_step(r));
        const float *want = tensor_f32(ref);
        const uint16_t *got = tensor_ptr(p), *was = tensor_ptr(old);
        sr_tally_add(t, want, got, N);
        for (int64_t j = 0; j < N; j++)
            *unchanged += got[j] == was[j];
        amp_optim_zero_grad(o);
        amp_optim_free(r);
        amp_tensor_free(ref);
        amp_tensor_free(old);
    }
    amp_optim_free(o);
    amp_tensor_free(p);
}

static void test_nearest_even_stalls_and_sr_moves_in_expectation(void)
{
    sr_tally t;
    int64_t unchanged;
    const int steps = 3;
    run(false, steps, &t, &unchanged);
    /* |update| <= an eighth of a unit: nearest-even keeps every weight */
    CHECK_MSG(unchanged == (int64_t)steps * N, "nearest-even: %lld of %lld weights moved",
              (long long)((int64_t)steps * N - unchanged), (long long)steps * N);
    run(true, steps, &t, &unchanged);
    CHECK_MSG(t.outside == 0, "%lld stored weights are not a bf16 neighbour of the f32 update", (long long)t.outside);
    CHECK_MSG(fabs(t.ups - t.expected) < 4 * sqrt(t.var), "rounded up %g times, expected %g (sd %g)", t.ups,
              t.expected, sqrt(t.var));
    /* the updates are 1/16 to 1/8 of a unit, so about as many of the
     * weights move a step */
    const double moved = 1 - (double)unchanged / ((double)steps * N);
    CHECK_MSG(moved > 0.05 && moved < 0.14, "sr moved %.3f of the weights a step", moved);
}

/* Adam at an lr of a few units in the weights' last place. */
static amp_optim *adam_over(amp_tensor *p)
{
    amp_adam_opts a = amp_adam_defaults();
    a.lr = 0x1p-9;
    return amp_optim_adam(&p, 1, a);
}

/* The weights after `steps` steps of SGD (or Adam) with sr on `threads`
 * threads. */
static amp_tensor *after(int steps, int threads, amp_device dev, bool adam)
{
    int was = amp_get_num_threads();
    amp_set_num_threads(threads);
    amp_tensor *h = weights(), *p = dev == AMP_CPU ? h : amp_to_device(h, dev);
    amp_optim *o = adam ? adam_over(p) : sgd_over(p);
    CHECK_OK(amp_optim_set_weight_stochastic_rounding(o, true));
    for (int s = 0; s < steps; s++) {
        amp_tensor *g = grads(s);
        p->grad = dev == AMP_CPU ? g : amp_to_device(g, dev);
        if (dev != AMP_CPU)
            amp_tensor_free(g);
        CHECK_OK(amp_optim_step(o));
        amp_optim_zero_grad(o);
    }
    amp_optim_free(o);
    amp_set_num_threads(was);
    if (dev == AMP_CPU)
        return p;
    amp_tensor *back = amp_to_device(p, AMP_CPU);
    amp_tensor_free(p);
    amp_tensor_free(h);
    return back;
}

static void test_sr_bits_do_not_depend_on_threads(void)
{
    for (int adam = 0; adam < 2; adam++) {
        amp_tensor *a = after(4, 1, AMP_CPU, adam), *b = after(4, 0, AMP_CPU, adam);
        CHECK_MSG(same_bits(a, b), "%s", adam ? "adam" : "sgd");
        amp_tensor_free(a);
        amp_tensor_free(b);
    }
}

static bool gpu(void)
{
    if (amp_cuda_available())
        return true;
    harness_skip("no CUDA device");
    return false;
}

static void test_sr_on_cuda_is_the_cpu_bits(void)
{
    for (int adam = 0; adam < 2; adam++) {
        amp_tensor *a = after(4, 0, AMP_CPU, adam), *b = after(4, 0, AMP_CUDA, adam);
        CHECK_MSG(same_bits(a, b), "%s", adam ? "adam" : "sgd");
        amp_tensor_free(a);
        amp_tensor_free(b);
    }
}

/* With f32 masters the weight is the master's nearest-even rounding, sr
 * or not; an f32 weight is the f32 update. */
static void test_no_effect_with_masters_or_f32(void)
{
    amp_tensor *p[2], *m[2];
    for (int k = 0; k < 2; k++) {
        p[k] = weights();
        amp_optim *o = sgd_over(p[k]);
        CHECK_OK(amp_optim_set_master_weights(o, true));
        CHECK_OK(amp_optim_set_weight_stochastic_rounding(o, k == 1));
        for (int s = 0; s < 3; s++) {
            p[k]->grad = grads(s);
            CHECK_OK(amp_optim_step(o));
            amp_optim_zero_grad(o);
        }
        m[k] = tensor_convert(amp_optim_master(o, 0), AMP_BF16);
        amp_optim_free(o);
    }
    CHECK(same_bits(p[0], p[1]));
    CHECK(same_bits(p[1], m[1]));
    for (int k = 0; k < 2; k++) {
        amp_tensor_free(p[k]);
        amp_tensor_free(m[k]);
    }
    amp_tensor *f[2];
    for (int k = 0; k < 2; k++) {
        f[k] = into(weights(), AMP_F32);
        amp_optim *o = sgd_over(f[k]);
        CHECK_OK(amp_optim_set_weight_stochastic_rounding(o, k == 1));
        f[k]->grad = into(grads(0), AMP_F32);
        CHECK_OK(amp_optim_step(o));
        amp_optim_free(o);
    }
    CHECK(same_bits(f[0], f[1]));
    amp_tensor_free(f[0]);
    amp_tensor_free(f[1]);
}

int main(void)
{
    RUN(test_nearest_even_stalls_and_sr_moves_in_expectation);
    RUN(test_sr_bits_do_not_depend_on_threads);
    RUN(test_no_effect_with_masters_or_f32);
    RUN_IF(gpu, test_sr_on_cuda_is_the_cpu_bits);
    return harness_done();
}
