/*
 * test_optim.c - SGD, Adam, AdamW, clip_grad_norm (and its 0-d tensor
 * variant) and the LR schedules against PyTorch
 * (tests/reference/optim_ref.h, made by gen_optim.py), plus what PyTorch
 * does not show: untouched parameters without a gradient, 16-bit
 * parameters with f32 state, option checks, accessors.
 */
#include "harness.h"
#include "optim/optim.h"
#include "reference/optim_ref.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

/* Replaces p's gradient by the values g (converted to p's dtype), the way
 * backward leaves one. */
static void set_grad(amp_tensor *p, const float *g)
{
    amp_tensor_clear_grad(p);
    amp_tensor *f = amp_from_data(p->shape, AMP_F32, g);
    p->grad = tensor_convert(f, p->dtype);
    amp_tensor_free(f);
}

static amp_optim *make_case(const oref_case *c, amp_tensor **ps)
{
    if (c->kind == 0) {
        amp_sgd_opts o = {c->lr[0], c->momentum, c->dampening, c->weight_decay, c->nesterov};
        return amp_optim_sgd(ps, OREF_NPARAM, o);
    }
    amp_adam_opts o = {c->lr[0], c->beta1, c->beta2, c->eps, c->weight_decay, c->amsgrad};
    return c->kind == 1 ? amp_optim_adam(ps, OREF_NPARAM, o) : amp_optim_adamw(ps, OREF_NPARAM, o);
}

static void make_params(amp_tensor **ps, amp_dtype dt)
{
    int off = 0;
    for (int i = 0; i < OREF_NPARAM; i++) {
        amp_shape s = {oref_ndim[i], {oref_dims[i][0], oref_dims[i][1]}};
        amp_tensor *f = amp_from_data(s, AMP_F32, oref_init + off);
        ps[i] = tensor_convert(f, dt);
        amp_tensor_free(f);
        amp_tensor_set_requires_grad(ps[i], true);
        off += oref_numel[i];
    }
}

static void free_params(amp_tensor **ps, int n)
{
    for (int i = 0; i < n; i++)
        amp_tensor_free(ps[i]);
}

/* Runs a reference case; checks every parameter after every step to 1e-6
 * relative (plus 1e-7 absolute for values near 0). */
static void run_reference_case(const oref_case *c)
{
    amp_tensor *ps[OREF_NPARAM];
    make_params(ps, AMP_F32);
    amp_optim *o = make_case(c, ps);
    CHECK(o != NULL);
    if (!o)
        return;
    double worst = 0;
    for (int s = 0; s < OREF_STEPS; s++) {
        int off = 0;
        for (int i = 0; i < OREF_NPARAM; i++) {
            if (oref_has_grad[s][i])
                set_grad(ps[i], oref_grad[s] + off);
            else
                amp_tensor_clear_grad(ps[i]);
            off += oref_numel[i];
        }
        amp_optim_set_lr(o, c->lr[s]);
        CHECK_OK(amp_optim_step(o));
        off = 0;
        for (int i = 0; i < OREF_NPARAM; i++)
            for (int j = 0; j < oref_numel[i]; j++, off++) {
                double got = amp_tensor_get(ps[i], j), want = c->expect[s][off];
                double err = fabs(got - want) / (fabs(want) + 0.1);
                worst = fmax(worst, err);
                CHECK_MSG(fabs(got - want) <= 1e-6 * fabs(want) + 1e-7,
                          "%s step %d param %d[%d]: got %.9g, PyTorch %.9g", c->name, s, i, j, got, want);
            }
    }
    CHECK_EQ_INT(amp_optim_steps(o), OREF_STEPS);
    int with_grad = 0;
    for (int s = 0; s < OREF_STEPS; s++)
        with_grad += oref_has_grad[s][2];
    CHECK_EQ_INT(amp_optim_param_steps(o, 2), with_grad);
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), OREF_STEPS);
    printf("    %-28s worst relative difference to PyTorch %.2g\n", c->name, worst);
    amp_optim_free(o);
    free_params(ps, OREF_NPARAM);
}

static void test_optimizers_match_pytorch(void)
{
    for (int k = 0; k < OREF_NCASES; k++)
        run_reference_case(&oref_cases[k]);
}

static void test_parameter_without_grad_is_untouched(void)
{
    /* Step 0 of the reference runs has no gradient for parameter 2. */
    CHECK(oref_has_grad[0][2] == 0);
    for (int k = 0; k < OREF_NCASES; k++) {
        amp_tensor *ps[OREF_NPARAM];
        make_params(ps, AMP_F32);
        amp_optim *o = make_case(&oref_cases[k], ps);
        set_grad(ps[0], oref_grad[0]);
        set_grad(ps[1], oref_grad[0] + oref_numel[0]);
        CHECK_OK(amp_optim_step(o));
        const float *p2 = tensor_f32(ps[2]);
        for (int j = 0; j < oref_numel[2]; j++)
            CHECK(p2[j] == oref_init[oref_numel[0] + oref_numel[1] + j]);
        CHECK_EQ_INT(amp_optim_param_steps(o, 2), 0);
        const char *st = oref_cases[k].kind == 0 ? "momentum_buffer" : "exp_avg";
        if (oref_cases[k].kind != 0 || oref_cases[k].momentum != 0) {
            CHECK(amp_optim_state_tensor(o, 0, st) != NULL);
            CHECK(amp_optim_state_tensor(o, 2, st) == NULL);
            CHECK_EQ_INT(amp_last_status(), AMP_OK);
        }
        amp_optim_free(o);
        free_params(ps, OREF_NPARAM);
    }
}

static void test_sgd_momentum_buffer_starts_as_the_gradient(void)
{
    float p0[3] = {1, 2, 3}, g[3] = {0.5f, -1, 2};
    amp_tensor *p = amp_from_data(AMP_SHAPE(3), AMP_F32, p0);
    amp_tensor_set_requires_grad(p, true);
    amp_sgd_opts so = {.lr = 0.1, .momentum = 0.9, .dampening = 0.5};
    amp_optim *o = amp_optim_sgd(&p, 1, so);
    set_grad(p, g);
    CHECK_OK(amp_optim_step(o));
    amp_tensor *buf = amp_optim_state_tensor(o, 0, "momentum_buffer");
    CHECK(buf != NULL);
    for (int j = 0; j < 3; j++) {
        CHECK_NEAR(amp_tensor_get(buf, j), g[j], 0); /* not (1 - dampening) * g */
        CHECK_NEAR(amp_tensor_get(p, j), p0[j] - 0.1f * g[j], 1e-7);
    }
    /* Second step: buf = 0.9 buf + 0.5 g. */
    CHECK_OK(amp_optim_step(o));
    for (int j = 0; j < 3; j++)
        CHECK_NEAR(amp_tensor_get(buf, j), 0.9 * g[j] + 0.5 * g[j], 1e-6);
    amp_optim_free(o);
    amp_tensor_free(p);
}

/* ---------------------------------------------------------------- 16-bit */

/* Adam in double with f32 state, the parameter rounded to dt after each
 * step (what ampc promises for 16-bit parameters). */
static double round_to(double x, amp_dtype dt)
{
    float f = (float)x;
    return dt == AMP_BF16 ? amp_bf16_to_f32(amp_f32_to_bf16(f)) : amp_f16_to_f32(amp_f32_to_f16(f));
}

static void check_16bit_adam(amp_dtype dt)
{
    enum { N = 64, STEPS = 5 };
    amp_tensor *init = test_uniform(AMP_SHAPE(N), AMP_F32, -2, 2, 11);
    amp_tensor *p = tensor_convert(init, dt);
    amp_tensor_set_requires_grad(p, true);
    double ref[N], m[N] = {0}, v[N] = {0};
    for (int j = 0; j < N; j++)
        ref[j] = amp_tensor_get(p, j);
    amp_adam_opts ao = amp_adamw_defaults();
    ao.lr = 0.05;
    ao.weight_decay = 0.1;
    amp_optim *o = amp_optim_adamw(&p, 1, ao);
    CHECK(o != NULL);
    double worst_state = 0;
    for (int s = 1; s <= STEPS; s++) {
        amp_tensor *g = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 100 + (uint64_t)s);
        set_grad(p, tensor_f32(g));
        CHECK(amp_tensor_dtype(amp_tensor_grad(p)) == dt);
        CHECK_OK(amp_optim_step(o));
        double bc1 = 1 - pow(0.9, s), bc2 = 1 - pow(0.999, s);
        for (int j = 0; j < N; j++) {
            double gj = amp_tensor_get(amp_tensor_grad(p), j); /* the 16-bit gradient's value */
            double pj = ref[j] * (1 - 0.05 * 0.1);
            m[j] = 0.9 * m[j] + 0.1 * gj;
            v[j] = 0.999 * v[j] + 0.001 * gj * gj;
            ref[j] = round_to(pj - 0.05 / bc1 * m[j] / (sqrt(v[j]) / sqrt(bc2) + 1e-8), dt);
        }
        amp_tensor *ea = amp_optim_state_tensor(o, 0, "exp_avg");
        CHECK(ea && amp_tensor_dtype(ea) == AMP_F32);
        for (int j = 0; j < N; j++) {
            double got = amp_tensor_get(p, j);
            /* One unit in the last place of the 16-bit type: f32 and double
             * arithmetic may round a near-tie differently. */
            double mag = fmax(fabs(ref[j]), 1e-30);
            double ulp = ldexp(1.0, ilogb(mag) - (dt == AMP_BF16 ? 7 : 10));
            CHECK_MSG(fabs(got - ref[j]) <= ulp, "%s step %d [%d]: got %.9g, want %.9g", amp_dtype_name(dt), s, j,
                      got, ref[j]);
            worst_state = fmax(worst_state, fabs(amp_tensor_get(ea, j) - m[j]) / (fabs(m[j]) + 1e-3));
        }
        amp_tensor_free(g);
    }
    /* State kept in f32: far finer than a 16-bit buffer could hold. */
    CHECK_MSG(worst_state < 1e-5, "%s: exp_avg off by %.3g relative", amp_dtype_name(dt), worst_state);
    amp_optim_free(o);
    amp_tensor_free(p);
    amp_tensor_free(init);
}

static void test_16bit_parameters_update_in_f32_and_round_once(void)
{
    check_16bit_adam(AMP_BF16);
    check_16bit_adam(AMP_F16);

    /* SGD on bf16: one step, p = round(p - lr g). */
    float p0[4] = {1.0f, -0.5f, 3.0f, 0.25f}, g[4] = {0.3f, 0.7f, -1.1f, 0.05f};
    amp_tensor *f = amp_from_data(AMP_SHAPE(4), AMP_F32, p0);
    amp_tensor *p = tensor_convert(f, AMP_BF16);
    amp_tensor_set_requires_grad(p, true);
    amp_optim *o = amp_optim_sgd(&p, 1, amp_sgd_defaults());
    set_grad(p, g);
    CHECK_OK(amp_optim_step(o));
    CHECK(amp_tensor_dtype(p) == AMP_BF16);
    for (int j = 0; j < 4; j++) {
        double gj = amp_tensor_get(amp_tensor_grad(p), j);
        CHECK_NEAR(amp_tensor_get(p, j), round_to((double)p0[j] - 0.01 * gj, AMP_BF16), 0);
    }
    amp_optim_free(o);
    amp_tensor_free(p);
    amp_tensor_free(f);
}

/* A parameter large enough for the threaded loops: same update as the
 * closed form in double, element by element; clip's threaded sum too. */
static void test_large_parameter_threaded_update(void)
{
    enum { N = 100003 };
    amp_tensor *p = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 21);
    amp_tensor *p0 = amp_clone(p);
    amp_tensor *g = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 22);
    amp_adam_opts ao = amp_adam_defaults();
    ao.lr = 0.1;
    ao.weight_decay = 0.01;
    amp_optim *o = amp_optim_adam(&p, 1, ao);
    set_grad(p, tensor_f32(g));
    double ss = 0;
    for (int j = 0; j < N; j++)
        ss += (double)tensor_f32(g)[j] * tensor_f32(g)[j];
    double norm = amp_clip_grad_norm(&p, 1, 1e9);
    CHECK_NEAR(norm, sqrt(ss), 1e-12 * sqrt(ss));
    CHECK_OK(amp_optim_step(o));
    double worst = 0;
    for (int j = 0; j < N; j++) {
        double pj = tensor_f32(p0)[j], gj = tensor_f32(g)[j] + 0.01 * pj;
        double m = 0.1 * gj, v = 0.001 * gj * gj;
        double want = pj - 0.1 / 0.1 * m / (sqrt(v) / sqrt(0.001) + 1e-8);
        worst = fmax(worst, fabs(tensor_f32(p)[j] - want));
    }
    CHECK_MSG(worst < 1e-6, "worst |diff| %.3g", worst);
    amp_optim_free(o);
    amp_tensor_free(p);
    amp_tensor_free(p0);
    amp_tensor_free(g);
}


/* The update loops run on AVX-512 where the CPU has it, with the scalar
 * loops' operations in the same order: three steps of every optimizer
 * variant give the same bits either way (amp_cpu_limit(0) forces the
 * scalar loops), over a size with whole vectors, blocks and a tail. */
static void test_vector_update_matches_scalar_bits(void)
{
    enum { N = 40000 + 13 };
    amp_tensor *p0 = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 31);
    amp_tensor *gs[3] = {test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 32), test_uniform(AMP_SHAPE(N), AMP_F32, -2, 2, 33),
                         test_uniform(AMP_SHAPE(N), AMP_F32, -1e-3, 1e-3, 34)};
    for (int variant = 0; variant < 6; variant++) {
        float *out[2];
        for (int pass = 0; pass < 2; pass++) {
            amp_cpu_limit(pass ? 0u : ~0u);
            amp_tensor *p = amp_clone(p0);
            amp_optim *o;
            if (variant < 3) {
                amp_sgd_opts so = amp_sgd_defaults();
                so.lr = 0.05;
                so.momentum = variant ? 0.9 : 0;
                so.weight_decay = variant == 2 ? 0.01 : 0;
                so.nesterov = variant == 2;
                o = amp_optim_sgd(&p, 1, so);
            } else {
                amp_adam_opts ao = variant == 4 ? amp_adamw_defaults() : amp_adam_defaults();
                ao.lr = 0.01;
                ao.weight_decay = variant == 3 ? 0.0 : 0.1;
                ao.amsgrad = variant == 5;
                ao.beta1 = variant == 5 ? 0.3 : 0.9; /* the other side of ATen's lerp */
                o = variant == 4 ? amp_optim_adamw(&p, 1, ao) : amp_optim_adam(&p, 1, ao);
            }
            for (int step = 0; step < 3; step++) {
                set_grad(p, tensor_f32(gs[step]));
                CHECK_OK(amp_optim_step(o));
            }
            out[pass] = malloc((size_t)N * sizeof(float));
            memcpy(out[pass], tensor_f32(p), (size_t)N * sizeof(float));
            amp_optim_free(o);
            amp_tensor_free(p);
        }
        amp_cpu_limit(~0u);
        /* A build for an FMA target (-march=native) may fuse the scalar
         * loops' multiply-adds: allow them a rounding there. */
#ifdef __FMA__
        const double ulps = 0x1p-22;
#else
        const double ulps = 0;
#endif
        int64_t first = -1;
        for (int64_t j = 0; j < N && first < 0; j++)
            if (memcmp(&out[0][j], &out[1][j], sizeof(float)) != 0 &&
                !(fabs((double)out[0][j] - out[1][j]) <= ulps * fabs((double)out[1][j])))
                first = j;
        CHECK_MSG(first < 0, "variant %d: vector and scalar differ at %lld: %.9g vs %.9g", variant, (long long)first,
                  first < 0 ? 0.0 : out[0][first], first < 0 ? 0.0 : out[1][first]);
        free(out[0]);
        free(out[1]);
    }
    amp_tensor_free(p0);
    for (int i = 0; i < 3; i++)
        amp_tensor_free(gs[i]);
}

/* ------------------------------------------------------------- options */

static void test_option_validation_names_option_and_value(void)
{
    amp_tensor *p = amp_zeros(AMP_SHAPE(2), AMP_F32);
    amp_sgd_opts s = amp_sgd_defaults();
    s.lr = -1;
    CHECK(amp_optim_sgd(&p, 1, s) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "learning rate (lr) value: -1");
    s = amp_sgd_defaults();
    s.momentum = -0.5;
    CHECK(amp_optim_sgd(&p, 1, s) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "momentum value: -0.5");
    s = amp_sgd_defaults();
    s.weight_decay = -0.1;
    CHECK(amp_optim_sgd(&p, 1, s) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "weight_decay value: -0.1");
    s = amp_sgd_defaults();
    s.nesterov = true; /* momentum 0 */
    CHECK(amp_optim_sgd(&p, 1, s) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nesterov");
    s.momentum = 0.9;
    s.dampening = 0.1;
    CHECK(amp_optim_sgd(&p, 1, s) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "dampening 0.1");
    s.dampening = 0;
    amp_optim *ok = amp_optim_sgd(&p, 1, s);
    CHECK(ok != NULL);
    amp_optim_free(ok);

    amp_adam_opts a = amp_adam_defaults();
    a.beta1 = 1.0;
    CHECK(amp_optim_adam(&p, 1, a) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "adam: invalid beta1 value: 1");
    a = amp_adam_defaults();
    a.beta2 = -0.1;
    CHECK(amp_optim_adamw(&p, 1, a) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "adamw: invalid beta2 value: -0.1");
    a = amp_adam_defaults();
    a.eps = -1e-8;
    CHECK(amp_optim_adam(&p, 1, a) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "epsilon (eps) value: -1e-08");
    a = amp_adam_defaults();
    a.weight_decay = -1;
    CHECK(amp_optim_adam(&p, 1, a) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "weight_decay value: -1");
    a = amp_adam_defaults();
    a.lr = NAN;
    CHECK(amp_optim_adam(&p, 1, a) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "learning rate (lr) value: nan");

    /* The parameter list. */
    CHECK(amp_optim_adam(&p, 0, amp_adam_defaults()) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "empty parameter list");
    amp_tensor *two[2] = {p, p};
    CHECK(amp_optim_adam(two, 2, amp_adam_defaults()) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "parameters 0 and 1 are the same tensor");
    amp_tensor *withnull[2] = {p, NULL};
    CHECK(amp_optim_sgd(withnull, 2, amp_sgd_defaults()) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "parameter 1 is NULL");
    amp_tensor *ints = amp_zeros(AMP_SHAPE(2), AMP_I32);
    CHECK(amp_optim_sgd(&ints, 1, amp_sgd_defaults()) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "i32");
    amp_tensor_free(ints);
    amp_tensor_free(p);
}

static void test_defaults_are_pytorchs(void)
{
    amp_adam_opts a = amp_adam_defaults(), w = amp_adamw_defaults();
    CHECK(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 && a.weight_decay == 0 && !a.amsgrad);
    CHECK(w.lr == 1e-3 && w.beta1 == 0.9 && w.beta2 == 0.999 && w.eps == 1e-8 && w.weight_decay == 0.01);
    amp_sgd_opts s = amp_sgd_defaults();
    CHECK(s.lr == 0.01 && s.momentum == 0 && s.dampening == 0 && s.weight_decay == 0 && !s.nesterov);
}

/* ------------------------------------------------------------ bookkeeping */

static void test_zero_grad_lr_params_and_steps(void)
{
    amp_tensor *a = amp_ones(AMP_SHAPE(2, 2), AMP_F32), *b = amp_ones(AMP_SHAPE(3), AMP_F32);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *ps[2] = {a, b};
    amp_optim *o = amp_optim_adam(ps, 2, amp_adam_defaults());
    CHECK_EQ_INT(amp_optim_num_params(o), 2);
    CHECK(amp_optim_param(o, 1) == b);
    CHECK(amp_optim_param(o, 2) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "index 2");
    CHECK_NEAR(amp_optim_get_lr(o), 1e-3, 0);
    amp_optim_set_lr(o, 0.5);
    CHECK_NEAR(amp_optim_get_lr(o), 0.5, 0);
    amp_optim_set_lr(o, -1);
    CHECK_ERROR(AMP_ERR_ARG, "invalid learning rate -1");
    CHECK_NEAR(amp_optim_get_lr(o), 0.5, 0);

    float g[4] = {1, 1, 1, 1};
    set_grad(a, g);
    set_grad(b, g);
    CHECK_EQ_INT(amp_optim_steps(o), 0);
    CHECK_OK(amp_optim_step(o));
    CHECK_EQ_INT(amp_optim_steps(o), 1);
    amp_optim_zero_grad(o);
    CHECK(amp_tensor_grad(a) == NULL && amp_tensor_grad(b) == NULL);
    /* A step with no gradients moves nothing but still counts. */
    double a0 = amp_tensor_get(a, 0);
    CHECK_OK(amp_optim_step(o));
    CHECK_EQ_INT(amp_optim_steps(o), 2);
    CHECK_NEAR(amp_tensor_get(a, 0), a0, 0);
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 1);

    /* The optimizer holds its own references. */
    amp_tensor_free(a);
    amp_tensor_free(b);
    CHECK_EQ_INT(amp_tensor_numel(amp_optim_param(o, 0)), 4);
    amp_optim_free(o);
    amp_optim_free(NULL);
}

static void test_step_rejects_mismatched_gradient_and_changes_nothing(void)
{
    amp_tensor *a = amp_ones(AMP_SHAPE(3), AMP_F32), *b = amp_ones(AMP_SHAPE(2), AMP_F32);
    amp_tensor *ps[2] = {a, b};
    amp_optim *o = amp_optim_sgd(ps, 2, amp_sgd_defaults());
    float g[3] = {1, 2, 3};
    set_grad(a, g);
    amp_tensor_clear_grad(b);
    b->grad = amp_ones(AMP_SHAPE(1, 2), AMP_F32); /* wrong shape */
    CHECK(amp_optim_step(o) == AMP_ERR_SHAPE);
    CHECK_ERROR(AMP_ERR_SHAPE, "sgd: parameter 1 is [2]");
    CHECK_NEAR(amp_tensor_get(a, 0), 1.0, 0);
    CHECK_EQ_INT(amp_optim_steps(o), 0);
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 0);
    amp_optim_free(o);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_state_accessors_for_checkpoints(void)
{
    amp_tensor *p = amp_zeros(AMP_SHAPE(2, 3), AMP_F32);
    amp_adam_opts ao = amp_adam_defaults();
    ao.amsgrad = true;
    amp_optim *o = amp_optim_adam(&p, 1, ao);
    CHECK(amp_optim_state_tensor(o, 0, "exp_avg") == NULL);
    CHECK_EQ_INT(amp_last_status(), AMP_OK);
    CHECK(amp_optim_state_tensor(o, 0, "momentum_buffer") == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "no state \"momentum_buffer\"");
    CHECK_OK(amp_optim_set_param_steps(o, 0, 7));
    CHECK_OK(amp_optim_set_steps(o, 9));
    CHECK_EQ_INT(amp_optim_steps(o), 9);
    const char *names[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    for (int k = 0; k < 3; k++) {
        amp_tensor *s = amp_optim_state_tensor(o, 0, names[k]);
        CHECK(s && amp_tensor_dtype(s) == AMP_F32 && amp_tensor_numel(s) == 6 && amp_tensor_dim(s, 0) == 2);
        CHECK_NEAR(amp_tensor_get(s, 5), 0, 0);
    }
    /* A loaded step count drives the bias correction: with m = v = vmax = 1
     * at step 7 and a zero gradient, Adam moves p by -lr * m_hat / (sqrt(v_hat) + eps). */
    for (int k = 0; k < 3; k++)
        amp_tensor_fill(amp_optim_state_tensor(o, 0, names[k]), 1.0);
    float g[6] = {0};
    set_grad(p, g);
    CHECK_OK(amp_optim_step(o));
    double m = 0.9, bc1 = 1 - pow(0.9, 8), bc2 = 1 - pow(0.999, 8);
    CHECK_NEAR(amp_tensor_get(p, 0), -1e-3 * (m / bc1) / (sqrt(1.0 / bc2) + 1e-8), 1e-9); /* vmax stays 1 */
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 8);
    CHECK_OK(amp_optim_set_param_steps(o, 0, 0));
    CHECK(amp_optim_state_tensor(o, 0, "exp_avg") == NULL);
    CHECK(amp_optim_set_param_steps(o, 1, 3) == AMP_ERR_ARG);
    amp_clear_error();
    amp_optim_free(o);
    amp_tensor_free(p);
}

/* ---------------------------------------------------------------- clip */

static bool same_value(double a, double b, double rtol)
{
    if (isnan(b))
        return isnan(a);
    if (isinf(b))
        return a == b;
    return fabs(a - b) <= rtol * fabs(b) + 1e-12;
}

static void test_clip_grad_norm_matches_pytorch(void)
{
    for (int k = 0; k < CREF_NCASES; k++) {
        const cref_case *c = &cref_cases[k];
        amp_tensor *ps[CREF_NPARAM + 1];
        int off = 0;
        for (int i = 0; i < CREF_NPARAM; i++) {
            ps[i] = amp_zeros(AMP_SHAPE(cref_numel[i]), AMP_F32);
            set_grad(ps[i], c->grad + off);
            off += cref_numel[i];
        }
        ps[CREF_NPARAM] = amp_zeros(AMP_SHAPE(2), AMP_F32); /* no gradient: skipped */
        double norm = amp_clip_grad_norm(ps, CREF_NPARAM + 1, c->max_norm);
        CHECK_MSG(same_value(norm, c->norm, 1e-6), "%s: norm %.9g, PyTorch %.9g", c->name, norm, c->norm);
        off = 0;
        for (int i = 0; i < CREF_NPARAM; i++)
            for (int j = 0; j < cref_numel[i]; j++, off++) {
                double got = amp_tensor_get(amp_tensor_grad(ps[i]), j);
                CHECK_MSG(same_value(got, c->expect[off], 1e-6), "%s: grad %d[%d] %.9g, PyTorch %.9g", c->name, i,
                          j, got, c->expect[off]);
            }
        CHECK(amp_tensor_grad(ps[CREF_NPARAM]) == NULL);
        free_params(ps, CREF_NPARAM + 1);
    }
}

static void test_clip_grad_norm_16bit_and_errors(void)
{
    /* bf16 gradients: the norm of their (rounded) values, in double. */
    amp_tensor *p = amp_zeros(AMP_SHAPE(100), AMP_BF16);
    float g[100];
    double ss = 0;
    for (int j = 0; j < 100; j++)
        g[j] = (float)sin(j + 1.0) * 3.0f;
    set_grad(p, g);
    for (int j = 0; j < 100; j++)
        ss += pow(amp_tensor_get(amp_tensor_grad(p), j), 2);
    double before = amp_tensor_get(amp_tensor_grad(p), 7);
    double norm = amp_clip_grad_norm(&p, 1, 1.0);
    CHECK_NEAR(norm, sqrt(ss), 1e-9 * sqrt(ss));
    CHECK(amp_tensor_dtype(amp_tensor_grad(p)) == AMP_BF16);
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(p), 7), before / (sqrt(ss) + 1e-6), fabs(before) / sqrt(ss) / 128);
    amp_tensor_free(p);

    CHECK_NEAR(amp_clip_grad_norm(NULL, 0, 1.0), 0, 0); /* nothing to clip */
    CHECK(isnan(amp_clip_grad_norm(NULL, 2, 1.0)));
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm");
    amp_tensor *q = amp_zeros(AMP_SHAPE(1), AMP_F32);
    CHECK(isnan(amp_clip_grad_norm(&q, 1, -1.0)));
    CHECK_ERROR(AMP_ERR_ARG, "max_norm -1");
    amp_tensor_free(q);
}

/* clip_grad_norm_tensor: the same clipping, the norm in a 0-d tensor. */

/* Whether a and b hold the same bits (dtype, shape and every byte). */
static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    return a && b && amp_tensor_dtype(a) == amp_tensor_dtype(b) && amp_tensor_numel(a) == amp_tensor_numel(b) &&
           memcmp(amp_tensor_cdata(a), amp_tensor_cdata(b),
                  (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a))) == 0;
}

/* t is a caller-owned 0-d f32 CPU tensor without history holding the bits
 * of (float)want (any NaN for a NaN). */
static void check_norm_tensor(const char *what, const amp_tensor *t, double want)
{
    CHECK_MSG(t != NULL, "%s: NULL (%s)", what, amp_last_error());
    if (!t)
        return;
    CHECK_MSG(amp_tensor_dtype(t) == AMP_F32 && amp_tensor_ndim(t) == 0 && amp_tensor_numel(t) == 1 &&
                  amp_tensor_device(t) == AMP_CPU,
              "%s: %s, %d dims, %lld elements, on %s", what, amp_dtype_name(amp_tensor_dtype(t)), amp_tensor_ndim(t),
              (long long)amp_tensor_numel(t), amp_device_name(amp_tensor_device(t)));
    CHECK(!amp_tensor_requires_grad(t) && amp_tensor_is_leaf(t));
    const float got = *(const float *)amp_tensor_cdata(t), f = (float)want;
    CHECK_MSG(isnan(f) ? isnan(got) : memcmp(&got, &f, sizeof f) == 0, "%s: tensor %.9g, (float) of the double %.9g",
              what, got, f);
}

/* Every PyTorch case (not clipped, clipped, to 0, inf and NaN gradients),
 * in f32 and with 16-bit gradients: the tensor holds (float) of
 * amp_clip_grad_norm's double, and leaves the gradients it leaves, bit for
 * bit; against PyTorch's (f32) norm to 1e-6. The result is the caller's,
 * not an op temporary: amp_temps_free leaves it. */
static void test_clip_grad_norm_tensor_is_the_double_rounded_once(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < CREF_NCASES; k++) {
            const cref_case *c = &cref_cases[k];
            amp_tensor *a[CREF_NPARAM + 1], *b[CREF_NPARAM + 1];
            int off = 0;
            for (int i = 0; i < CREF_NPARAM; i++) {
                a[i] = amp_zeros(AMP_SHAPE(cref_numel[i]), dts[d]);
                b[i] = amp_zeros(AMP_SHAPE(cref_numel[i]), dts[d]);
                set_grad(a[i], c->grad + off);
                set_grad(b[i], c->grad + off);
                off += cref_numel[i];
            }
            a[CREF_NPARAM] = amp_zeros(AMP_SHAPE(2), AMP_F32); /* no gradient: skipped */
            b[CREF_NPARAM] = amp_zeros(AMP_SHAPE(2), AMP_F32);
            char what[64];
            snprintf(what, sizeof what, "%s, %s gradients", c->name, amp_dtype_name(dts[d]));
            amp_clear_error();
            const double norm = amp_clip_grad_norm(a, CREF_NPARAM + 1, c->max_norm);
            const size_t temps = amp_temps_count();
            amp_tensor *t = amp_clip_grad_norm_tensor(b, CREF_NPARAM + 1, c->max_norm);
            CHECK_MSG(amp_last_status() == AMP_OK, "%s: %s", what, amp_last_error());
            CHECK_EQ_INT((long long)amp_temps_count(), (long long)temps);
            amp_temps_free();
            check_norm_tensor(what, t, norm);
            if (d == 0 && t)
                CHECK_MSG(same_value(amp_item(t), c->norm, 1e-6), "%s: norm %.9g, PyTorch %.9g", what, amp_item(t),
                          c->norm);
            for (int i = 0; i < CREF_NPARAM; i++)
                CHECK_MSG(same_bits(amp_tensor_grad(a[i]), amp_tensor_grad(b[i])), "%s: gradient %d differs", what,
                          i);
            CHECK(amp_tensor_grad(b[CREF_NPARAM]) == NULL);
            amp_tensor_free(t);
            free_params(a, CREF_NPARAM + 1);
            free_params(b, CREF_NPARAM + 1);
        }
}

/* A norm past FLT_MAX: the double is finite and clips (to max_norm), the
 * f32 tensor reads inf - it is the double rounded once. */
static void test_clip_grad_norm_tensor_past_flt_max(void)
{
    const float big[4] = {3e38f, -3e38f, 3e38f, 3e38f}; /* norm 6e38 */
    amp_tensor *p = amp_zeros(AMP_SHAPE(4), AMP_F32), *q = amp_zeros(AMP_SHAPE(4), AMP_F32);
    set_grad(p, big);
    set_grad(q, big);
    const double norm = amp_clip_grad_norm(&p, 1, 1.0);
    amp_tensor *t = amp_clip_grad_norm_tensor(&q, 1, 1.0);
    CHECK_NEAR(norm, 2.0 * (double)3e38f, 1e-15 * norm); /* sqrt(4 * big^2), in double */
    check_norm_tensor("norm 6e38", t, norm);
    CHECK(t && isinf(amp_item(t)) && amp_item(t) > 0);
    CHECK(same_bits(amp_tensor_grad(p), amp_tensor_grad(q)));
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(q), 1), -0.5, 1e-6); /* 3e38 / 6e38 */
    amp_tensor_free(t);
    amp_tensor_free(p);
    amp_tensor_free(q);
}

/* No gradient: a 0-d f32 zero, no error - on the CPU for an empty list
 * (as PyTorch's torch.tensor(0.0)), and for CPU parameters. */
static void test_clip_grad_norm_tensor_without_gradients(void)
{
    amp_clear_error();
    amp_tensor *t = amp_clip_grad_norm_tensor(NULL, 0, 1.0);
    check_norm_tensor("empty list", t, 0.0);
    CHECK_OK(amp_last_status());
    amp_tensor_free(t);

    amp_tensor *ps[2] = {amp_ones(AMP_SHAPE(3), AMP_F32), amp_ones(AMP_SHAPE(2, 2), AMP_BF16)};
    amp_tensor_set_requires_grad(ps[0], true);
    t = amp_clip_grad_norm_tensor(ps, 2, 0.0);
    check_norm_tensor("no gradients", t, 0.0);
    CHECK_OK(amp_last_status());
    CHECK(!amp_tensor_grad(ps[0]) && !amp_tensor_grad(ps[1]) && amp_tensor_get(ps[0], 0) == 1.0);
    amp_tensor_free(t);
    free_params(ps, 2);
}

/* Bad arguments: NULL with the error (named for this function), and no
 * gradient changed. */
static void test_clip_grad_norm_tensor_errors_change_nothing(void)
{
    const float g[3] = {3, 4, 12};
    amp_tensor *ps[2] = {amp_zeros(AMP_SHAPE(3), AMP_F32), NULL};
    set_grad(ps[0], g);
    amp_tensor *before = amp_clone(amp_tensor_grad(ps[0]));

    CHECK(amp_clip_grad_norm_tensor(ps, -1, 1.0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm_tensor: bad parameter list (n = -1)");
    CHECK(amp_clip_grad_norm_tensor(NULL, 2, 1.0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm_tensor: bad parameter list (n = 2)");
    CHECK(amp_clip_grad_norm_tensor(ps, 2, 1.0) == NULL); /* ps[1] is NULL, after one to clip */
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm_tensor: parameter 1 is NULL");
    CHECK(amp_clip_grad_norm_tensor(ps, 1, -1.0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "max_norm -1 must be >= 0");
    CHECK(amp_clip_grad_norm_tensor(ps, 1, NAN) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "max_norm nan must be >= 0");
    CHECK(same_bits(amp_tensor_grad(ps[0]), before));

    /* and then it works: norm 13, clipped to 1 */
    amp_tensor *t = amp_clip_grad_norm_tensor(ps, 1, 1.0);
    check_norm_tensor("3 4 12", t, 13.0);
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(ps[0]), 2), 12.0 / (13.0 + 1e-6), 1e-6);
    amp_tensor_free(t);
    amp_tensor_free(before);
    amp_tensor_free(ps[0]);
}

/* ----------------------------------------------------------- schedules */

static void test_schedules_match_pytorch(void)
{
    for (int k = 0; k < SREF_NCASES; k++) {
        const sref_case *c = &sref_cases[k];
        amp_sched s = {(amp_sched_kind)c->kind, c->base_lr, c->step_size, c->gamma,
                       c->total_steps, c->min_lr, c->warmup_steps, c->warmup_start_factor};
        for (int t = 0; t < c->n; t++) {
            double lr = amp_sched_lr(&s, t);
            CHECK_MSG(fabs(lr - c->lr[t]) <= 1e-12 * fabs(c->lr[t]) + 1e-15, "%s t=%d: %.17g, PyTorch %.17g",
                      c->name, t, lr, c->lr[t]);
        }
    }
    amp_sched cst = {.kind = AMP_SCHED_CONSTANT, .base_lr = 0.25};
    CHECK_NEAR(amp_sched_lr(&cst, 0), 0.25, 0);
    CHECK_NEAR(amp_sched_lr(&cst, 1000000), 0.25, 0);
    /* Warm-up from 0 (LinearLR forbids it; the closed form does not need to). */
    amp_sched w0 = {.kind = AMP_SCHED_CONSTANT, .base_lr = 1.0, .warmup_steps = 4, .warmup_start_factor = 0};
    CHECK_NEAR(amp_sched_lr(&w0, 0), 0, 0);
    CHECK_NEAR(amp_sched_lr(&w0, 2), 0.5, 1e-15);
    CHECK_NEAR(amp_sched_lr(&w0, 4), 1.0, 0);
}

static void test_schedule_errors(void)
{
    CHECK(isnan(amp_sched_lr(NULL, 0)));
    CHECK_ERROR(AMP_ERR_ARG, "NULL schedule");
    amp_sched s = {.kind = AMP_SCHED_STEP, .base_lr = 0.1, .step_size = 0, .gamma = 0.5};
    CHECK(isnan(amp_sched_lr(&s, 3)));
    CHECK_ERROR(AMP_ERR_ARG, "step_size must be >= 1, got 0");
    s.step_size = 2;
    CHECK(isnan(amp_sched_lr(&s, -1)));
    CHECK_ERROR(AMP_ERR_ARG, "step must be >= 0, got -1");
    s.warmup_steps = 3;
    s.warmup_start_factor = 1.5;
    CHECK(isnan(amp_sched_lr(&s, 0)));
    CHECK_ERROR(AMP_ERR_ARG, "warmup_start_factor must be in [0, 1], got 1.5");
    amp_sched c = {.kind = AMP_SCHED_COSINE, .base_lr = 0.1, .total_steps = 0};
    CHECK(isnan(amp_sched_lr(&c, 0)));
    CHECK_ERROR(AMP_ERR_ARG, "T_max) must be >= 1, got 0");
    c.total_steps = 5;
    c.base_lr = -0.1;
    CHECK(isnan(amp_sched_lr(&c, 0)));
    CHECK_ERROR(AMP_ERR_ARG, "base_lr must be finite and >= 0, got -0.1");
    amp_sched bad = {.kind = (amp_sched_kind)7, .base_lr = 0.1};
    CHECK(isnan(amp_sched_lr(&bad, 0)));
    CHECK_ERROR(AMP_ERR_ARG, "unknown schedule kind 7");
}

int main(void)
{
    RUN(test_optimizers_match_pytorch);
    RUN(test_parameter_without_grad_is_untouched);
    RUN(test_sgd_momentum_buffer_starts_as_the_gradient);
    RUN(test_16bit_parameters_update_in_f32_and_round_once);
    RUN(test_large_parameter_threaded_update);
    RUN(test_vector_update_matches_scalar_bits);
    RUN(test_option_validation_names_option_and_value);
    RUN(test_defaults_are_pytorchs);
    RUN(test_zero_grad_lr_params_and_steps);
    RUN(test_step_rejects_mismatched_gradient_and_changes_nothing);
    RUN(test_state_accessors_for_checkpoints);
    RUN(test_clip_grad_norm_matches_pytorch);
    RUN(test_clip_grad_norm_16bit_and_errors);
    RUN(test_clip_grad_norm_tensor_is_the_double_rounded_once);
    RUN(test_clip_grad_norm_tensor_past_flt_max);
    RUN(test_clip_grad_norm_tensor_without_gradients);
    RUN(test_clip_grad_norm_tensor_errors_change_nothing);
    RUN(test_schedules_match_pytorch);
    RUN(test_schedule_errors);
    return harness_done();
}
