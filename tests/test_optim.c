/*
 * test_optim.c - SGD, Adam, AdamW and the LR schedules against PyTorch
 * (tests/reference/optim_ref.h, made by gen_optim.py), Adam / AdamW /
 * amsgrad bit for bit against PyTorch on random cases (optim_adam_ref.h),
 * on the CPU's vector and scalar loops and on CUDA where there is one
 * (cudaemu too), plus what PyTorch does not show: untouched parameters without a gradient, 16-bit
 * parameters with f32 state, option checks, accessors. clip_grad_norm is
 * test_clip.c's.
 */
#include "harness.h"
#include "optim/optim.h"
#include "optim_rig.h"
#include "reference/optim_adam_ref.h"
#include "reference/optim_ref.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

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

/* Runs a reference case; checks every parameter after every step to 1e-6
 * relative (plus 1e-7 absolute for values near 0), and SGD's bit for bit
 * (PyTorch's CPU SGD has no sqrt: every rounding is reproduced; Adam's
 * bits are test_adam_bitwise_against_pytorch's). */
static void run_reference_case(const oref_case *c, amp_device dev)
{
    amp_tensor *ps[OREF_NPARAM];
    make_params(ps, AMP_F32);
    for (int i = 0; i < OREF_NPARAM; i++)
        CHECK_OK(amp_tensor_move(ps[i], dev));
    amp_optim *o = make_case(c, ps);
    CHECK(o != NULL);
    if (!o)
        return;
    double worst = 0;
    for (int s = 0; s < OREF_STEPS; s++) {
        int off = 0;
        for (int i = 0; i < OREF_NPARAM; i++) {
            if (oref_has_grad[s][i]) {
                set_grad(ps[i], oref_grad[s] + off);
                CHECK_OK(amp_tensor_move(ps[i]->grad, dev));
            } else {
                amp_tensor_clear_grad(ps[i]);
            }
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
                if (c->kind == 0)
                    CHECK_MSG((float)got == c->expect[s][off], "%s step %d param %d[%d]: got %.9g, PyTorch %.9g (bits)",
                              c->name, s, i, j, got, want);
            }
    }
    CHECK_EQ_INT(amp_optim_steps(o), OREF_STEPS);
    int with_grad = 0;
    for (int s = 0; s < OREF_STEPS; s++)
        with_grad += oref_has_grad[s][2];
    CHECK_EQ_INT(amp_optim_param_steps(o, 2), with_grad);
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), OREF_STEPS);
    printf("    %-28s %s worst relative difference to PyTorch %.2g\n", c->name, amp_device_name(dev), worst);
    amp_optim_free(o);
    free_params(ps, OREF_NPARAM);
}

static void test_optimizers_match_pytorch(void)
{
    for (int k = 0; k < OREF_NCASES; k++)
        run_reference_case(&oref_cases[k], AMP_CPU);
}

/* ------------------------------------------- Adam, bitwise, random cases */

/* The splitmix64 stream and values of gen_optim.py's SplitMix64 and
 * arand_value: exact floats in [-1, 1) times 2^-(z mod (max_shift + 1)). */
static uint64_t arand_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void arand_fill(uint64_t seed, int max_shift, float *out)
{
    for (int j = 0; j < AREF_TOTAL; j++) {
        uint64_t z = arand_next(&seed);
        int k = (int)((z & 0xFFFF) % (uint64_t)(max_shift + 1));
        out[j] = ldexpf((float)((int64_t)(z >> 40) - (1 << 23)), -23 - k);
    }
}

/* Distance in units in the last place between two f32 bit patterns (0:
 * the same bits; the two zeros are 1 apart). */
static int64_t ulp_distance(uint32_t a, uint32_t b)
{
    int64_t ia = a & 0x80000000u ? -(int64_t)(a & 0x7FFFFFFFu) - 1 : (int64_t)a;
    int64_t ib = b & 0x80000000u ? -(int64_t)(b & 0x7FFFFFFFu) - 1 : (int64_t)b;
    return ia > ib ? ia - ib : ib - ia;
}

/* What one run of a case leaves: the parameters after the steps
 * aref_save, the state after the last step. */
typedef struct {
    uint32_t param[AREF_NSAVE][AREF_TOTAL], exp_avg[AREF_TOTAL], exp_avg_sq[AREF_TOTAL];
} aref_run;

/* Copies the AREF_NPARAM tensors ps (on any device) or state `key` out
 * as f32 bits. */
static void aref_copy_out(amp_tensor **ps, amp_optim *o, const char *key, uint32_t *dst)
{
    int off = 0;
    for (int i = 0; i < AREF_NPARAM; i++) {
        amp_tensor *t = key ? amp_optim_state_tensor(o, i, key) : ps[i];
        CHECK(t != NULL);
        if (t)
            CHECK_OK(amp_tensor_copy_out(t, dst + off, AMP_F32));
        off += (int)(aref_dims[i][0] * (aref_ndim[i] > 1 ? aref_dims[i][1] : 1));
    }
}

/* Runs case c's AREF_STEPS steps on dev; returns false where the device
 * could not be used. */
static bool aref_run_case(const aref_case *c, amp_device dev, aref_run *r)
{
    float init[AREF_TOTAL], grad[AREF_TOTAL];
    arand_fill(AREF_SEED_INIT, 2, init);
    amp_tensor *ps[AREF_NPARAM];
    int off = 0;
    for (int i = 0; i < AREF_NPARAM; i++) {
        amp_shape s = {aref_ndim[i], {aref_dims[i][0], aref_dims[i][1]}};
        ps[i] = amp_from_data(s, AMP_F32, init + off);
        off += (int)amp_tensor_numel(ps[i]);
        CHECK_OK(amp_tensor_move(ps[i], dev));
        amp_tensor_set_requires_grad(ps[i], true);
    }
    amp_adam_opts ao = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, c->amsgrad != 0};
    amp_optim *o = c->kind == 1 ? amp_optim_adam(ps, AREF_NPARAM, ao) : amp_optim_adamw(ps, AREF_NPARAM, ao);
    CHECK(o != NULL);
    for (int s = 0, saved = 0; o && s < AREF_STEPS; s++) {
        arand_fill(AREF_SEED_GRAD + (uint64_t)s, 15, grad);
        off = 0;
        for (int i = 0; i < AREF_NPARAM; i++) {
            amp_tensor_clear_grad(ps[i]);
            amp_tensor *g = amp_from_data(ps[i]->shape, AMP_F32, grad + off);
            ps[i]->grad = amp_to_device(g, dev);
            amp_tensor_free(g);
            off += (int)amp_tensor_numel(ps[i]);
        }
        amp_optim_set_lr(o, s < 10 ? c->lr : c->lr_from_10);
        CHECK_OK(amp_optim_step(o));
        if (saved < AREF_NSAVE && s == aref_save[saved])
            aref_copy_out(ps, o, NULL, r->param[saved++]);
    }
    if (o) {
        aref_copy_out(ps, o, "exp_avg", r->exp_avg);
        aref_copy_out(ps, o, "exp_avg_sq", r->exp_avg_sq);
    }
    amp_optim_free(o);
    free_params(ps, AREF_NPARAM);
    return o != NULL;
}

/* How many of n values are want's bits, and the largest distance in ulps. */
static void aref_compare(const uint32_t *got, const uint32_t *want, int n, int *same, int64_t *worst)
{
    for (int j = 0; j < n; j++) {
        int64_t d = ulp_distance(got[j], want[j]);
        *same += d == 0;
        *worst = d > *worst ? d : *worst;
    }
}

/* Checks one run of case k against PyTorch's _single_tensor_adam with a
 * correctly rounded sqrt: every parameter at every stored step and the
 * state after the last, bit for bit. Measures it against stock PyTorch
 * too (whose float32 CPU sqrt, MKL's vsSqrt, is an ulp off in about one
 * value in five: the update moves by an ulp of its own size there, and
 * now and then the parameter's rounding with it); adds the parameter
 * values compared to *n, those bit-identical to the first reference to
 * *exact, to stock PyTorch's to *same, and the largest distance to stock
 * PyTorch's in ulps to *worst. */
static void aref_check(const char *where, int k, const aref_run *r, int *n, int *exact, int *same, int64_t *worst)
{
    const aref_case *c = &aref_cases[k];
    static uint32_t stock[AREF_NSAVE][AREF_TOTAL];
    memcpy(stock, c->param, sizeof stock);
    for (int d = 0; d < AREF_NDIFF; d++)
        if (aref_stock_diff[d].case_index == k)
            stock[aref_stock_diff[d].save][aref_stock_diff[d].index] = aref_stock_diff[d].bits;
    for (int s = 0; s < AREF_NSAVE; s++) {
        int sk = 0;
        int64_t wk = 0;
        aref_compare(r->param[s], c->param[s], AREF_TOTAL, &sk, &wk);
        CHECK_MSG(sk == AREF_TOTAL, "%s, %s, step %d: %d of %d parameters bit-identical to PyTorch's, worst %lld ulp",
                  where, c->name, aref_save[s] + 1, sk, AREF_TOTAL, (long long)wk);
        *n += AREF_TOTAL;
        *exact += sk;
        aref_compare(r->param[s], stock[s], AREF_TOTAL, same, worst);
    }
    int ms = 0, vs = 0;
    int64_t mw = 0, vw = 0;
    aref_compare(r->exp_avg, c->exp_avg, AREF_TOTAL, &ms, &mw);
    aref_compare(r->exp_avg_sq, c->exp_avg_sq, AREF_TOTAL, &vs, &vw);
    CHECK_MSG(ms == AREF_TOTAL && vs == AREF_TOTAL,
              "%s, %s: exp_avg %d, exp_avg_sq %d of %d bit-identical to PyTorch's (worst %lld, %lld ulp)", where,
              c->name, ms, vs, AREF_TOTAL, (long long)mw, (long long)vw);
}

/* Adam, AdamW and amsgrad against PyTorch's _single_tensor_adam, bit for
 * bit (above), on the AVX-512, AVX2 and scalar loops (those the CPU has);
 * prints how close stock PyTorch (its own sqrt) comes. */
static void test_adam_bitwise_against_pytorch(void)
{
    static aref_run r;
    const unsigned masks[3] = {~0u, AMP_CPU_AVX2, 0u};
    const char *names[3] = {"cpu", "cpu, avx2 loops", "cpu, scalar loops"};
    for (int pass = 0; pass < 3; pass++) {
        amp_cpu_limit(masks[pass]);
        const char *where = names[pass];
        int n_all = 0, exact_all = 0, same_all = 0;
        for (int k = 0; k < AREF_NCASES; k++) {
            if (!aref_run_case(&aref_cases[k], AMP_CPU, &r))
                continue;
            int n = 0, exact = 0, same = 0;
            int64_t worst = 0;
            aref_check(where, k, &r, &n, &exact, &same, &worst);
            n_all += n;
            exact_all += exact;
            same_all += same;
            if (pass == 0)
                printf("    %-26s vs stock PyTorch: %6.2f%% bit-identical (steps 1, 10, 20), worst %lld ulp\n",
                       aref_cases[k].name, 100.0 * same / n, (long long)worst);
        }
        printf("    %s: parameters %.2f%% bit-identical to PyTorch's Adam with a correctly rounded sqrt, %.2f%% to "
               "stock PyTorch's\n",
               where, 100.0 * exact_all / (n_all ? n_all : 1), 100.0 * same_all / (n_all ? n_all : 1));
    }
    amp_cpu_limit(~0u);
}

/* The CUDA backend's optimizers give the CPU's bits: SGD's PyTorch's
 * (the reference cases), Adam's parameters and state those of the CPU (so
 * the same agreement with PyTorch) on the random cases in f32, and with
 * bf16 parameters and f32 masters. Skipped without a CUDA device. */
static void test_optimizers_on_cuda_give_the_cpus_bits(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    for (int k = 0; k < OREF_NCASES; k++)
        run_reference_case(&oref_cases[k], AMP_CUDA);
    static aref_run cpu, cuda;
    for (int k = 0; k < AREF_NCASES; k++) {
        const aref_case *c = &aref_cases[k];
        if (!aref_run_case(c, AMP_CPU, &cpu) || !aref_run_case(c, AMP_CUDA, &cuda))
            continue;
        CHECK_MSG(memcmp(&cpu, &cuda, sizeof cpu) == 0, "%s: cuda and cpu differ", c->name);
        int n = 0, exact = 0, same = 0;
        int64_t worst = 0;
        aref_check("cuda", k, &cuda, &n, &exact, &same, &worst);
    }
    /* bf16 parameters with f32 masters, AdamW with amsgrad. */
    enum { N = 1000 + 7 };
    uint16_t out[2][N];
    float master[2][N];
    for (int d = 0; d < 2; d++) {
        amp_device dev = d ? AMP_CUDA : AMP_CPU;
        amp_tensor *f = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 41);
        amp_tensor *p = tensor_convert(f, AMP_BF16);
        amp_tensor_free(f);
        CHECK_OK(amp_tensor_move(p, dev));
        amp_tensor_set_requires_grad(p, true);
        amp_adam_opts ao = amp_adamw_defaults();
        ao.lr = 0.01;
        ao.amsgrad = true;
        amp_optim *o = amp_optim_adamw(&p, 1, ao);
        CHECK_OK(amp_optim_set_master_weights(o, true));
        for (int s = 0; s < 5; s++) {
            amp_tensor *g = test_uniform(AMP_SHAPE(N), AMP_BF16, -1, 1, 50 + (uint64_t)s);
            amp_tensor_clear_grad(p);
            p->grad = amp_to_device(g, dev);
            amp_tensor_free(g);
            CHECK_OK(amp_optim_step(o));
        }
        CHECK_OK(amp_tensor_copy_out(p, out[d], AMP_BF16));
        CHECK_OK(amp_tensor_copy_out(amp_optim_master(o, 0), master[d], AMP_F32));
        amp_optim_free(o);
        amp_tensor_free(p);
    }
    CHECK_MSG(memcmp(out[0], out[1], sizeof out[0]) == 0, "bf16 parameters: cuda and cpu differ");
    CHECK_MSG(memcmp(master[0], master[1], sizeof master[0]) == 0, "f32 masters: cuda and cpu differ");
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

/* The update loops run on AVX-512 or AVX2 where the CPU has it, with the
 * scalar loops' operations in the same order: three steps of every
 * optimizer variant give the same bits each way (amp_cpu_limit(AVX2)
 * forces the 8-lane loops, amp_cpu_limit(0) the scalar ones), over a size
 * with whole vectors, blocks and a tail. */
static void test_vector_update_matches_scalar_bits(void)
{
    enum { N = 40000 + 13 };
    amp_tensor *p0 = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 31);
    amp_tensor *gs[3] = {test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 32), test_uniform(AMP_SHAPE(N), AMP_F32, -2, 2, 33),
                         test_uniform(AMP_SHAPE(N), AMP_F32, -1e-3, 1e-3, 34)};
    for (int variant = 0; variant < 6; variant++) {
        float *out[3];
        const unsigned masks[3] = {~0u, AMP_CPU_AVX2, 0u};
        for (int pass = 0; pass < 3; pass++) {
            amp_cpu_limit(masks[pass]);
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
        /* The scalar loops call fmaf where the vector ones fuse and hold
         * no other multiply-add a compiler could fuse: the same bits on
         * any target (-march=native included). */
        for (int v = 0; v < 2; v++) {
            int64_t first = -1;
            for (int64_t j = 0; j < N && first < 0; j++)
                if (memcmp(&out[v][j], &out[2][j], sizeof(float)) != 0)
                    first = j;
            CHECK_MSG(first < 0, "variant %d: %s and scalar differ at %lld: %.9g vs %.9g", variant,
                      v ? "avx2" : "avx-512", (long long)first, first < 0 ? 0.0 : out[v][first],
                      first < 0 ? 0.0 : out[2][first]);
        }
        for (int v = 0; v < 3; v++)
            free(out[v]);
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
    RUN(test_adam_bitwise_against_pytorch);
    RUN(test_optimizers_on_cuda_give_the_cpus_bits);
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
    RUN(test_schedules_match_pytorch);
    RUN(test_schedule_errors);
    return harness_done();
}
