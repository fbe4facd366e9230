/*
 * test_optim_multi.c - the CPU optimizer step over all parameters at once
 * (the multi-tensor loop of src/backend/cpu/optim.c): one step of an
 * optimizer over 40 parameters of mixed sizes and dtypes gives, bit for
 * bit, what 40 single-parameter optimizers give stepping one parameter
 * each, for every optimizer variant, on 1 and 2 threads and on the AVX2
 * and scalar loops; per-parameter step counts (and so Adam's bias corrections) stay per
 * parameter when some parameters miss a step. test_optim.c checks the
 * values themselves against PyTorch.
 */
#include "harness.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

enum { NP = 40, STEPS = 3, VARIANTS = 7 };

/* Sizes around the block size (16384): single elements, a short vector
 * tail, a block plus a tail, several blocks. */
static int64_t param_size(int i)
{
    static const int64_t sizes[8] = {1, 7, 16384 + 3, 300, 1, 7, 5000, 100000};
    return sizes[i % 8];
}

static amp_dtype param_dtype(int i) { return i % 10 == 5 ? AMP_BF16 : i % 10 == 9 ? AMP_F16 : AMP_F32; }

/* Mostly the parameter's dtype; a few f32 parameters get bf16 gradients. */
static amp_dtype grad_dtype(int i) { return i % 10 == 2 ? AMP_BF16 : param_dtype(i); }

/* Parameter i misses step s (no gradient) now and then, parameter 0 its
 * first one, so the step counts differ between parameters. */
static bool has_grad(int i, int s) { return (i + s) % 7 != 0; }

typedef struct {
    amp_tensor *init[NP];
    amp_tensor *grad[STEPS][NP];
} inputs;

static void make_inputs(inputs *in)
{
    for (int i = 0; i < NP; i++) {
        amp_tensor *f = test_uniform(AMP_SHAPE(param_size(i)), AMP_F32, -1, 1, 100 + (uint64_t)i);
        in->init[i] = tensor_convert(f, param_dtype(i));
        amp_tensor_free(f);
        for (int s = 0; s < STEPS; s++) {
            /* Later steps smaller, and one step large, for Adam's max. */
            double r = s == 1 ? 3.0 : 1.0 / (1 + s);
            f = test_uniform(AMP_SHAPE(param_size(i)), AMP_F32, -r, r, 1000 + 50 * (uint64_t)s + (uint64_t)i);
            in->grad[s][i] = tensor_convert(f, grad_dtype(i));
            amp_tensor_free(f);
        }
    }
}

static void free_inputs(inputs *in)
{
    for (int i = 0; i < NP; i++) {
        amp_tensor_free(in->init[i]);
        for (int s = 0; s < STEPS; s++)
            amp_tensor_free(in->grad[s][i]);
    }
}

static const char *const variant_names[VARIANTS] = {
    "sgd", "sgd momentum dampening wd", "sgd nesterov wd", "adam wd", "adamw", "adam amsgrad beta1 0.3",
    "adamw amsgrad"};

static amp_optim *make_optim(int variant, amp_tensor **ps, int n)
{
    if (variant < 3) {
        amp_sgd_opts so = amp_sgd_defaults();
        so.lr = 0.05;
        so.momentum = variant ? 0.9 : 0;
        so.dampening = variant == 1 ? 0.25 : 0;
        so.weight_decay = variant ? 0.01 : 0;
        so.nesterov = variant == 2;
        return amp_optim_sgd(ps, n, so);
    }
    bool decoupled = variant == 4 || variant == 6;
    amp_adam_opts ao = decoupled ? amp_adamw_defaults() : amp_adam_defaults();
    ao.lr = 0.01;
    ao.weight_decay = variant == 3 ? 0.05 : ao.weight_decay;
    ao.amsgrad = variant >= 5;
    ao.beta1 = variant == 5 ? 0.3 : 0.9; /* the other side of ATen's lerp */
    return decoupled ? amp_optim_adamw(ps, n, ao) : amp_optim_adam(ps, n, ao);
}

/* Everything a step sequence leaves, parameter by parameter: the values
 * (as f32), each state slot (a presence flag, then its values) and the
 * step count. Parameter i is opts[0]'s i-th (multi) or opts[i]'s only. */
static float *snapshot(amp_tensor **ps, amp_optim **opts, bool multi, size_t *len)
{
    size_t cap = 0;
    for (int i = 0; i < NP; i++)
        cap += (size_t)ps[i]->numel * (1 + OPTIM_MAX_STATE) + OPTIM_MAX_STATE + 1;
    float *buf = malloc(cap * sizeof *buf);
    size_t n = 0;
    for (int i = 0; i < NP; i++) {
        amp_tensor_copy_out(ps[i], buf + n, AMP_F32);
        n += (size_t)ps[i]->numel;
        const amp_optim *o = multi ? opts[0] : opts[i];
        int idx = multi ? i : 0;
        for (int k = 0; k < OPTIM_MAX_STATE; k++) {
            const amp_tensor *t = o->state[idx * OPTIM_MAX_STATE + k];
            buf[n++] = t ? 1.0f : 0.0f;
            if (t) {
                memcpy(buf + n, tensor_f32(t), (size_t)t->numel * sizeof *buf);
                n += (size_t)t->numel;
            }
        }
        buf[n++] = (float)amp_optim_param_steps(o, idx);
    }
    *len = n;
    return buf;
}

/* Runs STEPS steps of variant on fresh parameters, either with one
 * optimizer over all of them (multi) or with one optimizer per parameter,
 * each stepped in turn; returns the snapshot. */
static float *run(const inputs *in, int variant, bool multi, int threads, unsigned cpu, size_t *len)
{
    amp_set_num_threads(threads);
    amp_cpu_limit(cpu);
    amp_tensor *ps[NP];
    amp_optim *opts[NP] = {0};
    for (int i = 0; i < NP; i++) {
        ps[i] = amp_clone(in->init[i]);
        amp_tensor_set_requires_grad(ps[i], true);
    }
    if (multi)
        opts[0] = make_optim(variant, ps, NP);
    else
        for (int i = 0; i < NP; i++)
            opts[i] = make_optim(variant, &ps[i], 1);
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < NP; i++) {
            amp_tensor_clear_grad(ps[i]);
            if (has_grad(i, s))
                ps[i]->grad = amp_clone(in->grad[s][i]);
        }
        if (multi) {
            CHECK_OK(amp_optim_step(opts[0]));
        } else {
            for (int i = 0; i < NP; i++)
                CHECK_OK(amp_optim_step(opts[i]));
        }
    }
    float *snap = snapshot(ps, opts, multi, len);
    for (int i = 0; i < NP; i++) {
        amp_optim_free(opts[i]);
        amp_tensor_free(ps[i]);
    }
    amp_cpu_limit(~0u);
    amp_set_num_threads(0);
    return snap;
}

static void expect_same_bits(const char *what, int variant, const float *want, size_t wlen, const float *got,
                             size_t glen)
{
    CHECK_MSG(wlen == glen, "%s, %s: snapshot lengths %zu vs %zu", variant_names[variant], what, glen, wlen);
    if (wlen != glen)
        return;
    size_t first = wlen;
    for (size_t j = 0; j < wlen && first == wlen; j++)
        if (memcmp(&want[j], &got[j], sizeof(float)) != 0)
            first = j;
    CHECK_MSG(first == wlen, "%s, %s: first difference at snapshot element %zu: %.9g vs one at a time %.9g",
              variant_names[variant], what, first, first < wlen ? got[first] : 0.0, first < wlen ? want[first] : 0.0);
}

/* The multi-tensor step equals the one-parameter-at-a-time step, bit for
 * bit, whatever the thread count. */
static void test_all_at_once_equals_one_at_a_time(void)
{
    inputs in;
    make_inputs(&in);
    for (int variant = 0; variant < VARIANTS; variant++) {
        size_t wlen, glen;
        float *want = run(&in, variant, false, 1, ~0u, &wlen);
        float *got = run(&in, variant, true, 1, ~0u, &glen);
        expect_same_bits("all at once, 1 thread", variant, want, wlen, got, glen);
        free(got);
        got = run(&in, variant, true, 2, ~0u, &glen);
        expect_same_bits("all at once, 2 threads", variant, want, wlen, got, glen);
        free(got);
        got = run(&in, variant, false, 2, ~0u, &glen);
        expect_same_bits("one at a time, 2 threads", variant, want, wlen, got, glen);
        free(got);
        got = run(&in, variant, true, 2, 0u, &glen);
        expect_same_bits("all at once, scalar loops, 2 threads", variant, want, wlen, got, glen);
        free(got);
        got = run(&in, variant, true, 2, AMP_CPU_AVX2, &glen);
        expect_same_bits("all at once, avx2 loops, 2 threads", variant, want, wlen, got, glen);
        free(got);
        free(want);
    }
    free_inputs(&in);
}

/* Step counts stay per parameter in one optimizer: a parameter that missed
 * steps is at its own count, and Adam's bias correction follows it. One
 * step of a parameter first stepping at optimizer step 3 equals the first
 * step of a fresh optimizer (the update of a first Adam step is
 * lr * sign(g) up to eps). */
static void test_per_parameter_step_counts(void)
{
    float g[3] = {0.5f, -2.0f, 1e-3f};
    amp_tensor *a = amp_zeros(AMP_SHAPE(3), AMP_F32), *b = amp_zeros(AMP_SHAPE(20000), AMP_F32);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *ps[2] = {b, a};
    amp_adam_opts ao = amp_adam_defaults();
    ao.lr = 0.1;
    amp_optim *o = amp_optim_adam(ps, 2, ao);
    amp_tensor *gb = amp_full(AMP_SHAPE(20000), AMP_F32, 0.25);
    for (int s = 0; s < 3; s++) {
        amp_tensor_clear_grad(a);
        amp_tensor_clear_grad(b);
        b->grad = amp_clone(gb);
        if (s == 2)
            a->grad = amp_from_data(AMP_SHAPE(3), AMP_F32, g);
        CHECK_OK(amp_optim_step(o));
    }
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 3);
    CHECK_EQ_INT(amp_optim_param_steps(o, 1), 1);
    CHECK_EQ_INT(amp_optim_steps(o), 3);
    for (int j = 0; j < 3; j++) {
        /* m / bc1 = g and sqrt(v / bc2) = |g| at step 1; at step 3 the
         * update would be about 0.64 lr. */
        double want = -0.1 * g[j] / (fabs((double)g[j]) + 1e-8);
        CHECK_NEAR(amp_tensor_get(a, j), want, 1e-6 * fabs(want));
    }
    /* b stepped three times with the same gradient: m / sqrt(v), bias
     * corrected, stays 1, so p = -3 lr (to eps). */
    CHECK_NEAR(amp_tensor_get(b, 0), -0.3, 1e-6);
    CHECK_NEAR(amp_tensor_get(b, 19999), -0.3, 1e-6);
    amp_optim_free(o);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_tensor_free(gb);
}

/* A step in which no parameter has a gradient changes nothing but the
 * optimizer's own count; tiny parameters only (the one-thread path). */
static void test_step_without_gradients(void)
{
    amp_tensor *ps[3] = {amp_full(AMP_SHAPE(1), AMP_F32, 1.5), amp_full(AMP_SHAPE(5), AMP_BF16, -2),
                         amp_full(AMP_SHAPE(0), AMP_F32, 0)};
    for (int i = 0; i < 3; i++)
        amp_tensor_set_requires_grad(ps[i], true);
    amp_sgd_opts so = amp_sgd_defaults();
    so.momentum = 0.9;
    amp_optim *o = amp_optim_sgd(ps, 3, so);
    CHECK(o != NULL);
    if (!o)
        return;
    CHECK_OK(amp_optim_step(o));
    CHECK_EQ_INT(amp_optim_steps(o), 1);
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 0);
    CHECK(amp_optim_state_tensor(o, 0, "momentum_buffer") == NULL);
    CHECK_NEAR(amp_tensor_get(ps[0], 0), 1.5, 0);
    /* With gradients (an empty parameter included): p -= lr g. */
    for (int i = 0; i < 3; i++)
        ps[i]->grad = amp_full(ps[i]->shape, ps[i]->dtype, 1.0);
    CHECK_OK(amp_optim_step(o));
    CHECK_NEAR(amp_tensor_get(ps[0], 0), 1.5f - 0.01f, 0);
    CHECK_NEAR(amp_tensor_get(ps[1], 4), amp_bf16_to_f32(amp_f32_to_bf16(-2.0f - 0.01f)), 0); /* rounded once */
    CHECK_EQ_INT(amp_optim_param_steps(o, 2), 1);
    amp_optim_free(o);
    for (int i = 0; i < 3; i++)
        amp_tensor_free(ps[i]);
}

/* optim_step_guarded with a non-zero found_inf (a host float on the CPU)
 * changes nothing, counters included; with zero it is a plain step. */
static void test_guarded_step_skips(void)
{
    amp_tensor *p = amp_full(AMP_SHAPE(4), AMP_F32, 1.0);
    amp_tensor_set_requires_grad(p, true);
    amp_optim *o = amp_optim_adamw(&p, 1, amp_adamw_defaults());
    p->grad = amp_full(AMP_SHAPE(4), AMP_F32, 0.5);
    float inf = 1, ok = 0;
    CHECK_OK(optim_step_guarded(o, &inf));
    CHECK_EQ_INT(amp_optim_steps(o), 0);
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 0);
    CHECK_NEAR(amp_tensor_get(p, 3), 1.0, 0);
    CHECK(amp_optim_state_tensor(o, 0, "exp_avg") == NULL);
    CHECK_OK(optim_step_guarded(o, &ok));
    CHECK_EQ_INT(amp_optim_steps(o), 1);
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 1);
    CHECK(amp_tensor_get(p, 3) < 1.0);
    CHECK(amp_optim_state_tensor(o, 0, "exp_avg") != NULL);
    amp_optim_free(o);
    amp_tensor_free(p);
}

/* The registry knows each kind by name, with its state keys. */
static void test_registry(void)
{
    CHECK(optim_find("sgd") == &optim_def_sgd);
    CHECK(optim_find("adam") == &optim_def_adam);
    CHECK(optim_find("adamw") == &optim_def_adamw);
    CHECK(optim_find("lion") == NULL);
    CHECK(strcmp(optim_find("adamw")->state_names[2], "max_exp_avg_sq") == 0);
    CHECK(strcmp(optim_find("sgd")->state_names[0], "momentum_buffer") == 0);
}

int main(void)
{
    RUN(test_all_at_once_equals_one_at_a_time);
    RUN(test_per_parameter_step_counts);
    RUN(test_step_without_gradients);
    RUN(test_guarded_step_skips);
    RUN(test_registry);
    return harness_done();
}
