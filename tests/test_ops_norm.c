/*
 * test_ops_norm.c - layer_norm: values and gradients against PyTorch
 * (tests/reference/norm_ref.h, made by gen_norm.py) and against a double
 * reference, finite-difference gradients with and without weight and bias
 * over one and two dims, 16-bit and mixed dtypes, and the errors.
 */
#include "harness.h"
#include "op_check.h"
#include "reference/norm_ref.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const float *x, *w, *b, *g, *y, *dx, *dw, *db;
    amp_shape xs, ns;
    int k;
    double eps;
} ln_case;

/* Runs one PyTorch case in dt and compares forward and all gradients. */
static void run_case(const char *name, const ln_case *c, amp_dtype dt, double atol, double rtol)
{
    amp_tensor *x = make(c->xs, dt, c->x), *g = make(c->xs, dt, c->g);
    amp_tensor *w = c->w ? make(c->ns, dt, c->w) : NULL, *b = c->b ? make(c->ns, dt, c->b) : NULL;
    amp_tensor_set_requires_grad(x, true);
    if (w)
        amp_tensor_set_requires_grad(w, true);
    if (b)
        amp_tensor_set_requires_grad(b, true);
    amp_tensor *y = amp_layer_norm(x, c->k, w, b, c->eps);
    CHECK(y != NULL);
    if (y) {
        CHECK_EQ_INT(amp_tensor_dtype(y), dt);
        char what[64];
        snprintf(what, sizeof what, "%s y", name);
        check_close_f(what, y, c->y, amp_tensor_numel(x), atol, rtol);
        CHECK_OK(amp_backward_with(y, g));
        snprintf(what, sizeof what, "%s dx", name);
        check_close_f(what, amp_tensor_grad(x), c->dx, amp_tensor_numel(x), atol, rtol);
        CHECK_EQ_INT(amp_tensor_dtype(amp_tensor_grad(x)), dt);
        if (w) {
            snprintf(what, sizeof what, "%s dw", name);
            check_close_f(what, amp_tensor_grad(w), c->dw, amp_tensor_numel(w), atol, rtol);
            CHECK_EQ_INT(amp_tensor_dtype(amp_tensor_grad(w)), dt);
        }
        if (b) {
            snprintf(what, sizeof what, "%s db", name);
            check_close_f(what, amp_tensor_grad(b), c->db, amp_tensor_numel(b), atol, rtol);
            CHECK_EQ_INT(amp_tensor_dtype(amp_tensor_grad(b)), dt);
        }
    }
    amp_tensor_free(x);
    amp_tensor_free(g);
    amp_tensor_free(w);
    amp_tensor_free(b);
}

static void test_layer_norm_matches_pytorch_f32(void)
{
    ln_case a = {ln3d_x, ln3d_w, ln3d_b, ln3d_g, ln3d_y, ln3d_dx, ln3d_dw, ln3d_db,
                 AMP_SHAPE(2, 3, 4), AMP_SHAPE(3, 4), 2, 1e-5};
    run_case("ln3d", &a, AMP_F32, 2e-6, 2e-6);
    /* Rows centred at 50 with std 2: a one-pass variance would lose digits. */
    ln_case b = {ln2d_x, ln2d_w, NULL, ln2d_g, ln2d_y, ln2d_dx, ln2d_dw, NULL,
                 AMP_SHAPE(5, 8), AMP_SHAPE(8), 1, 1e-3};
    run_case("ln2d", &b, AMP_F32, 1e-5, 1e-5);
    ln_case c = {lnplain_x, NULL, NULL, lnplain_g, lnplain_y, lnplain_dx, NULL, NULL,
                 AMP_SHAPE(3, 7), AMP_SHAPE(7), 1, 1e-5};
    run_case("lnplain", &c, AMP_F32, 2e-6, 2e-6);
}

/* PyTorch computes 16-bit layer_norm in f32 and rounds once, as ampc
 * does: results agree to about one unit in the last place. */
static void test_layer_norm_matches_pytorch_16bit(void)
{
    ln_case a = {lnbf16_x, lnbf16_w, lnbf16_b, lnbf16_g, lnbf16_y, lnbf16_dx, lnbf16_dw, lnbf16_db,
                 AMP_SHAPE(2, 3, 4), AMP_SHAPE(3, 4), 2, 1e-5};
    run_case("lnbf16", &a, AMP_BF16, 1e-2, 1.0 / 128);
    ln_case b = {lnf16_x, lnf16_w, lnf16_b, lnf16_g, lnf16_y, lnf16_dx, lnf16_dw, lnf16_db,
                 AMP_SHAPE(4, 16), AMP_SHAPE(16), 1, 1e-5};
    run_case("lnf16", &b, AMP_F16, 2e-3, 1.0 / 1024);
}

/* The forward against a double computation: mean and biased variance per
 * row of a [6, 5, 4] tensor normalised over the last two dims, offset far
 * from zero. */
static void test_layer_norm_forward_matches_double(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(6, 5, 4), AMP_F32, 995, 1005, 1);
    amp_tensor *w = test_uniform(AMP_SHAPE(5, 4), AMP_F32, -2, 2, 2);
    amp_tensor *b = test_uniform(AMP_SHAPE(5, 4), AMP_F32, -1, 1, 3);
    amp_tensor *y = amp_layer_norm(x, 2, w, b, 1e-5);
    CHECK(y != NULL);
    const float *xv = amp_tensor_cdata(x), *wv = amp_tensor_cdata(w), *bv = amp_tensor_cdata(b);
    double worst = 0;
    for (int r = 0; y && r < 6; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < 20; j++)
            m += xv[r * 20 + j];
        m /= 20;
        for (int j = 0; j < 20; j++)
            v += (xv[r * 20 + j] - m) * (xv[r * 20 + j] - m);
        v /= 20;
        for (int j = 0; j < 20; j++) {
            double ref = (xv[r * 20 + j] - m) / sqrt(v + 1e-5) * wv[j] + bv[j];
            worst = fmax(worst, fabs(amp_tensor_get(y, r * 20 + j) - ref));
        }
    }
    CHECK_MSG(worst < 5e-5, "max |y - double reference| = %g", worst);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
}

/* A long row with a huge mean: the output still has mean 0 and variance 1
 * (a one-pass f32 variance, E[x^2] - E[x]^2, would be noise here). */
static void test_layer_norm_long_row_is_standardised(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 4096), AMP_F32, 1e4 - 1, 1e4 + 1, 4);
    amp_tensor *y = amp_layer_norm(x, 1, NULL, NULL, 0.0);
    CHECK(y != NULL);
    for (int r = 0; y && r < 2; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < 4096; j++)
            m += amp_tensor_get(y, r * 4096 + j);
        m /= 4096;
        for (int j = 0; j < 4096; j++)
            v += pow(amp_tensor_get(y, r * 4096 + j) - m, 2);
        v /= 4096;
        /* f32 resolves x near 1e4 only to ~1e-3 (0.0017 of its std), and
         * the f32 mean carries that error, as in PyTorch. */
        CHECK_NEAR(m, 0.0, 2e-3);
        CHECK_NEAR(v, 1.0, 1e-3);
    }
    amp_tensor_free(x);
}

typedef struct {
    int k;
    bool w, b;
} ln_ctx;

static amp_tensor *ln_fn(amp_tensor **in, void *ctx)
{
    const ln_ctx *c = ctx;
    return amp_layer_norm(in[0], c->k, c->w ? in[1] : NULL, c->b ? in[1 + c->w] : NULL, 1e-5);
}

static void gc_case(const char *what, amp_shape xs, int k, bool hw, bool hb)
{
    amp_shape ns = {k, {0}};
    for (int d = 0; d < k; d++)
        ns.d[d] = xs.d[xs.ndim - k + d];
    amp_tensor *in[3] = {test_uniform(xs, AMP_F32, -2, 2, 10)};
    int n = 1;
    if (hw)
        in[n++] = test_uniform(ns, AMP_F32, 0.5, 1.5, 11);
    if (hb)
        in[n++] = test_uniform(ns, AMP_F32, -1, 1, 12);
    for (int i = 0; i < n; i++)
        amp_tensor_set_requires_grad(in[i], true);
    ln_ctx c = {k, hw, hb};
    CHECK_MSG(gradcheck(what, ln_fn, in, n, &c, 1e-2, 2e-3, 2e-2), "%s", what);
    for (int i = 0; i < n; i++)
        amp_tensor_free(in[i]);
}

static void test_layer_norm_gradcheck(void)
{
    gc_case("ln k=1 weight+bias", AMP_SHAPE(3, 5), 1, true, true);
    gc_case("ln k=1 plain", AMP_SHAPE(4, 6), 1, false, false);
    gc_case("ln k=2 weight+bias", AMP_SHAPE(2, 3, 4), 2, true, true);
    gc_case("ln k=2 weight only", AMP_SHAPE(2, 3, 4), 2, true, false);
    gc_case("ln k=2 bias only", AMP_SHAPE(3, 2, 3), 2, false, true);
    gc_case("ln k=3 whole tensor", AMP_SHAPE(2, 3, 2), 3, true, true);
}

/* bf16/f16 layer_norm against f32 run on the same (rounded) values: the
 * gap is the final rounding, plus the rounding of the 16-bit gout. */
static void test_layer_norm_16bit_close_to_f32(void)
{
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    const double tol[2] = {1.0 / 64, 1.0 / 512};
    for (int t = 0; t < 2; t++) {
        amp_tensor *x16 = test_uniform(AMP_SHAPE(8, 24), dts[t], -3, 3, 20 + t);
        amp_tensor *w16 = test_uniform(AMP_SHAPE(24), dts[t], 0.5, 1.5, 30 + t);
        amp_tensor *b16 = test_uniform(AMP_SHAPE(24), dts[t], -1, 1, 40 + t);
        amp_tensor *g16 = test_uniform(AMP_SHAPE(8, 24), dts[t], -1, 1, 50 + t);
        amp_tensor *x32 = amp_clone(amp_to(x16, AMP_F32)), *w32 = amp_clone(amp_to(w16, AMP_F32));
        amp_tensor *b32 = amp_clone(amp_to(b16, AMP_F32)), *g32 = amp_clone(amp_to(g16, AMP_F32));
        amp_tensor *all[6] = {x16, w16, b16, x32, w32, b32};
        for (int i = 0; i < 6; i++)
            amp_tensor_set_requires_grad(all[i], true);
        amp_tensor *y16 = amp_layer_norm(x16, 1, w16, b16, 1e-5);
        amp_tensor *y32 = amp_layer_norm(x32, 1, w32, b32, 1e-5);
        CHECK(y16 && y32);
        CHECK_EQ_INT(amp_tensor_dtype(y16), dts[t]);
        CHECK_OK(amp_backward_with(y16, g16));
        CHECK_OK(amp_backward_with(y32, g32));
        CHECK_MSG(max_abs_diff(y16, y32) < tol[t] * 4, "%s y: %g", amp_dtype_name(dts[t]),
                  max_abs_diff(y16, y32));
        for (int i = 0; i < 3; i++) {
            amp_tensor *ga = amp_tensor_grad(all[i]), *gb = amp_tensor_grad(all[i + 3]);
            CHECK(ga && gb);
            CHECK_EQ_INT(amp_tensor_dtype(ga), dts[t]);
            double scale = 0;
            for (int64_t j = 0; gb && j < amp_tensor_numel(gb); j++)
                scale = fmax(scale, fabs(amp_tensor_get(gb, j)));
            CHECK_MSG(max_abs_diff(ga, gb) <= tol[t] * (scale + 1), "%s grad %d: %g (scale %g)",
                      amp_dtype_name(dts[t]), i, max_abs_diff(ga, gb), scale);
        }
        for (int i = 0; i < 6; i++)
            amp_tensor_free(all[i]);
        amp_tensor_free(g16);
        amp_tensor_free(g32);
        amp_temps_free();
    }
}

/* bf16 activations with f32 weight and bias (PyTorch's CPU mixed case):
 * the output is bf16 and each gradient comes back in its input's dtype. */
static void test_layer_norm_mixed_dtypes(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 8), AMP_BF16, -2, 2, 60);
    amp_tensor *w = test_uniform(AMP_SHAPE(8), AMP_F32, 0.5, 1.5, 61);
    amp_tensor *b = test_uniform(AMP_SHAPE(8), AMP_F32, -1, 1, 62);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *y = amp_layer_norm(x, 1, w, b, 1e-5);
    CHECK(y != NULL);
    CHECK_EQ_INT(amp_tensor_dtype(y), AMP_BF16);
    amp_tensor *g = amp_ones(AMP_SHAPE(3, 8), AMP_BF16);
    CHECK_OK(amp_backward_with(y, g));
    CHECK_EQ_INT(amp_tensor_dtype(amp_tensor_grad(x)), AMP_BF16);
    CHECK_EQ_INT(amp_tensor_dtype(amp_tensor_grad(w)), AMP_F32);
    CHECK_EQ_INT(amp_tensor_dtype(amp_tensor_grad(b)), AMP_F32);
    /* dbias = the column sums of a gout of ones = the row count. */
    for (int j = 0; j < 8; j++)
        CHECK_NEAR(amp_tensor_get(amp_tensor_grad(b), j), 3.0, 0);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
    amp_tensor_free(g);
}

static void test_layer_norm_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 4), AMP_F32);
    amp_tensor *w = amp_ones(AMP_SHAPE(5), AMP_F32);
    amp_tensor *w2 = amp_ones(AMP_SHAPE(2, 4), AMP_F32);
    amp_tensor *xi = amp_zeros(AMP_SHAPE(2, 4), AMP_I32);

    CHECK(amp_layer_norm(x, 1, w, NULL, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "weight must have the normalized shape [4]");
    CHECK(amp_layer_norm(x, 1, w, NULL, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "[5] f32"); /* the offending shape is named too */
    CHECK(amp_layer_norm(x, 1, NULL, w, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "bias must have the normalized shape [4]");
    CHECK(amp_layer_norm(x, 1, w2, NULL, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "layer_norm");
    CHECK(amp_layer_norm(x, 3, NULL, NULL, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "normalized_ndim 3 must be in [1, 2]");
    CHECK(amp_layer_norm(x, 0, NULL, NULL, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "normalized_ndim 0");
    CHECK(amp_layer_norm(xi, 1, NULL, NULL, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "i32");
    CHECK(amp_layer_norm(x, 1, NULL, NULL, -1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "eps");
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(w2);
    amp_tensor_free(xi);
}

/* An empty batch is no error and gives an empty result. */
static void test_layer_norm_empty_batch(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(0, 4), AMP_F32);
    amp_tensor *w = amp_ones(AMP_SHAPE(4), AMP_F32);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor *y = amp_layer_norm(x, 1, w, NULL, 1e-5);
    CHECK(y != NULL);
    CHECK_EQ_INT(amp_tensor_numel(y), 0);
    amp_tensor *g = amp_zeros(AMP_SHAPE(0, 4), AMP_F32);
    CHECK_OK(amp_backward_with(y, g));
    CHECK(amp_tensor_grad(w) != NULL);
    for (int j = 0; amp_tensor_grad(w) && j < 4; j++)
        CHECK_NEAR(amp_tensor_get(amp_tensor_grad(w), j), 0.0, 0);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(g);
}


/* y, dx, dweight, dbias of a layer_norm over [rows, cols] with loss
 * sum(y * g), as fresh tensors in out[0..3]. */
static void ln_run(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor *g, amp_tensor **out)
{
    amp_tensor *xi = amp_clone(x), *wi = amp_clone(w), *bi = amp_clone(b);
    amp_tensor_set_requires_grad(xi, true);
    amp_tensor_set_requires_grad(wi, true);
    amp_tensor_set_requires_grad(bi, true);
    amp_tensor *y = amp_layer_norm(xi, 1, wi, bi, 1e-5);
    CHECK_OK(amp_backward_with(y, g));
    out[0] = amp_clone(y);
    out[1] = amp_clone(amp_tensor_grad(xi));
    out[2] = amp_clone(amp_tensor_grad(wi));
    out[3] = amp_clone(amp_tensor_grad(bi));
    amp_tensor_free(xi), amp_tensor_free(wi), amp_tensor_free(bi);
    amp_temps_free();
}

/* Rows run on vector kernels where the CPU has them and on any number of
 * threads: the vector results stay within f32 rounding of the scalar
 * ones (amp_cpu_limit(0)), and one thread gives the same bits as two
 * (the weight / bias sums add fixed blocks of rows in a fixed order). */
static void test_layer_norm_vector_and_threads(void)
{
    const int64_t shapes[2][2] = {{300, 77}, {70, 1000}};
    for (int k = 0; k < 2; k++) {
        const int64_t M = shapes[k][0], N = shapes[k][1];
        amp_tensor *x = test_uniform(AMP_SHAPE(M, N), AMP_F32, -2, 3, 101);
        amp_tensor *w = test_uniform(AMP_SHAPE(N), AMP_F32, 0.5, 1.5, 102);
        amp_tensor *b = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 103);
        amp_tensor *g = test_uniform(AMP_SHAPE(M, N), AMP_F32, -1, 1, 104);
        amp_tensor *r[3][4];
        int saved = amp_get_num_threads();
        ln_run(x, w, b, g, r[0]); /* vector, default threads */
        amp_set_num_threads(1);
        ln_run(x, w, b, g, r[1]); /* vector, one thread */
        amp_set_num_threads(2);
        amp_tensor *two[4];
        ln_run(x, w, b, g, two);
        amp_set_num_threads(saved);
        amp_cpu_limit(0);
        ln_run(x, w, b, g, r[2]); /* scalar */
        amp_cpu_limit(~0u);
        const char *names[4] = {"y", "dx", "dw", "db"};
        for (int t = 0; t < 4; t++) {
            int64_t n = amp_tensor_numel(r[0][t]);
            CHECK_MSG(memcmp(amp_tensor_data(r[1][t]), amp_tensor_data(two[t]), (size_t)n * sizeof(float)) == 0,
                      "%lldx%lld %s: one and two threads differ", (long long)M, (long long)N, names[t]);
            double worst = 0, scale = 0;
            for (int64_t i = 0; i < n; i++) {
                worst = fmax(worst, fabs(amp_tensor_get(r[0][t], i) - amp_tensor_get(r[2][t], i)));
                scale = fmax(scale, fabs(amp_tensor_get(r[2][t], i)));
            }
            CHECK_MSG(worst <= 1e-5 * (1 + scale), "%lldx%lld %s: vector and scalar differ by %g (scale %g)",
                      (long long)M, (long long)N, names[t], worst, scale);
        }
        for (int t = 0; t < 4; t++) {
            for (int v = 0; v < 3; v++)
                amp_tensor_free(r[v][t]);
            amp_tensor_free(two[t]);
        }
        amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b), amp_tensor_free(g);
    }
}

int main(void)
{
    RUN(test_layer_norm_matches_pytorch_f32);
    RUN(test_layer_norm_matches_pytorch_16bit);
    RUN(test_layer_norm_forward_matches_double);
    RUN(test_layer_norm_long_row_is_standardised);
    RUN(test_layer_norm_gradcheck);
    RUN(test_layer_norm_16bit_close_to_f32);
    RUN(test_layer_norm_mixed_dtypes);
    RUN(test_layer_norm_errors);
    RUN(test_layer_norm_empty_batch);
    RUN(test_layer_norm_vector_and_threads);
    return harness_done();
}
