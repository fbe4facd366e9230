/*
 * test_ops_softmax.c - softmax and log_softmax along any dim, cross_entropy
 * (ignore_index, label checks) and mse_loss: values against double
 * references and against PyTorch (tests/reference/softmax_ref.h, made by
 * gen_softmax.py), finite-difference gradients, large logits, 16-bit
 * dtypes and the errors.
 */
#include "harness.h"
#include "op_check.h"
#include "reference/softmax_ref.h"

#include <stdlib.h>
#include <string.h>

/* softmax (or log_softmax) of x along dim, in double. */
static void ref_softmax(const amp_tensor *x, int dim, bool log_form, double *out)
{
    amp_shape s = amp_tensor_shape(x);
    if (dim < 0)
        dim += s.ndim;
    int64_t outer = 1, len = s.d[dim], inner = 1;
    for (int i = 0; i < dim; i++)
        outer *= s.d[i];
    for (int i = dim + 1; i < s.ndim; i++)
        inner *= s.d[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            double m = -INFINITY, z = 0;
            for (int64_t d = 0; d < len; d++)
                m = fmax(m, amp_tensor_get(x, base + d * inner));
            for (int64_t d = 0; d < len; d++)
                z += exp(amp_tensor_get(x, base + d * inner) - m);
            for (int64_t d = 0; d < len; d++) {
                double v = amp_tensor_get(x, base + d * inner) - m;
                out[base + d * inner] = log_form ? v - log(z) : exp(v) / z;
            }
        }
}

static void test_softmax_values_along_each_dim(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 4, 5), AMP_F32, -4, 4, 1);
    double ref[60];
    static const int dims[] = {0, 1, 2, -1, -3};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        char what[32];
        ref_softmax(x, dims[k], false, ref);
        snprintf(what, sizeof what, "softmax dim %d", dims[k]);
        amp_tensor *y = amp_softmax(x, dims[k]);
        CHECK(y && amp_tensor_dtype(y) == AMP_F32 && amp_tensor_ndim(y) == 3);
        check_close(what, y, ref, 60, 0, 1e-6);
        ref_softmax(x, dims[k], true, ref);
        snprintf(what, sizeof what, "log_softmax dim %d", dims[k]);
        check_close(what, amp_log_softmax(x, dims[k]), ref, 60, 1e-6, 1e-6);
    }
    amp_tensor_free(x);
}

/* A 0-d input has one element along dim 0 / -1: softmax 1, log_softmax 0. */
static void test_softmax_of_0d_is_one(void)
{
    amp_tensor *x = amp_full(AMP_SHAPE(), AMP_F32, 3.5);
    CHECK(amp_item(amp_softmax(x, 0)) == 1.0);
    CHECK(amp_item(amp_log_softmax(x, -1)) == 0.0);
    amp_tensor_free(x);
}

typedef struct {
    int dim;
    bool log_form;
} sm_ctx;

static amp_tensor *gc_softmax(amp_tensor **in, void *ctx)
{
    sm_ctx *c = ctx;
    return c->log_form ? amp_log_softmax(in[0], c->dim) : amp_softmax(in[0], c->dim);
}

static void test_softmax_gradcheck(void)
{
    static const sm_ctx cases[] = {{0, false}, {-1, false}, {1, false}, {0, true}, {-1, true}, {1, true}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(3, 4, 2), AMP_F32, -2, 2, 10 + k);
        amp_tensor_set_requires_grad(x, true);
        char what[48];
        snprintf(what, sizeof what, "%s dim %d", cases[k].log_form ? "log_softmax" : "softmax", cases[k].dim);
        gradcheck(what, gc_softmax, &x, 1, (void *)&cases[k], 1e-3, 1e-3, 1e-2);
        amp_tensor_free(x);
    }
}

/* Without subtracting the max, exp(1e4) is inf in every float dtype. */
static void test_large_logits_stay_finite(void)
{
    static const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    float v[8] = {1e4f, -1e4f, 9000.0f, 0.0f, -1e4f, -9000.0f, -1e4f, -9000.0f};
    for (int k = 0; k < 3; k++) {
        amp_tensor *x = make(AMP_SHAPE(2, 4), dts[k], v);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *y = amp_softmax(x, 1), *ly = amp_log_softmax(x, 1);
        CHECK(y && ly);
        for (int r = 0; y && ly && r < 2; r++) {
            double s = 0;
            for (int c = 0; c < 4; c++) {
                CHECK(isfinite(amp_tensor_get(y, r * 4 + c)) && isfinite(amp_tensor_get(ly, r * 4 + c)));
                s += amp_tensor_get(y, r * 4 + c);
            }
            CHECK_NEAR(s, 1.0, 1e-2);
        }
        /* The row max gets log-probability 0 (the rest is < e^-1000), the
         * tied pair in row 1 log(1/2) each. */
        CHECK(ly && amp_tensor_get(ly, 0) == 0 && fabs(amp_tensor_get(ly, 5) + log(2.0)) < 1e-2);
        amp_tensor *labels = amp_from_data(AMP_SHAPE(2), AMP_I64, (int64_t[]){1, 3});
        amp_tensor *loss = amp_cross_entropy(x, labels);
        CHECK(loss && isfinite(amp_item(loss)));
        /* Row 0 pays 2e4 for label 1, row 1 log 2. */
        CHECK(loss && fabs(amp_item(loss) - (2e4 + log(2.0)) / 2) < 1e-2 * 1e4);
        CHECK_OK(amp_backward(loss));
        amp_tensor *g = amp_tensor_grad(x);
        for (int i = 0; g && i < 8; i++)
            CHECK(isfinite(amp_tensor_get(g, i)));
        amp_tensor_free(labels);
        amp_tensor_free(x);
    }
}

/* ---------------------------------------------------- against PyTorch */

static void test_pytorch_reference_cross_entropy_and_log_softmax(void)
{
    amp_tensor *x = make(AMP_SHAPE(4, 5), AMP_F32, sm_x);
    amp_tensor_set_requires_grad(x, true);
    /* Default ignore_index, i64 labels. */
    int64_t lab[4];
    for (int i = 0; i < 4; i++)
        lab[i] = ce_labels[i];
    amp_tensor *labels = amp_from_data(AMP_SHAPE(4), AMP_I64, lab);
    amp_tensor *loss = amp_cross_entropy(x, labels);
    CHECK(loss && amp_tensor_ndim(loss) == 0 && amp_tensor_dtype(loss) == AMP_F32);
    CHECK_NEAR(amp_item(loss), ce_loss, 2e-6 * ce_loss);
    CHECK_OK(amp_backward(loss));
    check_close_f("ce grad", amp_tensor_grad(x), ce_grad, 20, 1e-7, 1e-5);
    amp_tensor_clear_grad(x);

    /* ignore_index = 2, i32 labels, gout 0.5. */
    int32_t lab2[4];
    for (int i = 0; i < 4; i++)
        lab2[i] = (int32_t)ce2_labels[i];
    amp_tensor *labels2 = amp_from_data(AMP_SHAPE(4), AMP_I32, lab2);
    amp_tensor *loss2 = amp_cross_entropy_ignore(x, labels2, 2);
    CHECK_NEAR(amp_item(loss2), ce2_loss, 2e-6 * ce2_loss);
    CHECK_OK(amp_backward(amp_mul_scalar(loss2, 0.5)));
    check_close_f("ce2 grad", amp_tensor_grad(x), ce2_grad, 20, 1e-7, 1e-5);
    amp_tensor_clear_grad(x);

    /* log_softmax along dim 1, gradient of sum(w * y). */
    amp_tensor *w = make(AMP_SHAPE(4, 5), AMP_F32, sm_w);
    amp_tensor *ls = amp_log_softmax(x, 1);
    check_close_f("log_softmax", ls, ls1_y, 20, 1e-6, 1e-6);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(ls, w))));
    check_close_f("log_softmax grad", amp_tensor_grad(x), ls1_grad, 20, 1e-6, 1e-5);

    /* softmax along dim 0. */
    amp_tensor *x0 = make(AMP_SHAPE(3, 4), AMP_F32, sm0_x), *w0 = make(AMP_SHAPE(3, 4), AMP_F32, sm0_w);
    amp_tensor_set_requires_grad(x0, true);
    amp_tensor *sm = amp_softmax(x0, 0);
    check_close_f("softmax dim 0", sm, sm0_y, 12, 1e-7, 1e-6);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(sm, w0))));
    check_close_f("softmax dim 0 grad", amp_tensor_grad(x0), sm0_grad, 12, 1e-7, 1e-5);
    amp_tensor *own[6] = {x, labels, labels2, w, x0, w0};
    for (int i = 0; i < 6; i++)
        amp_tensor_free(own[i]);
}

/* -------------------------------------------------------- cross_entropy */

/* mean over rows with label != ignore of logsumexp(row) - row[label]. */
static double ref_cross_entropy(const amp_tensor *x, const int64_t *labels, int64_t ignore)
{
    int64_t N = amp_tensor_dim(x, 0), C = amp_tensor_dim(x, 1), count = 0;
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        if (labels[i] == ignore)
            continue;
        double m = -INFINITY, z = 0;
        for (int64_t c = 0; c < C; c++)
            m = fmax(m, amp_tensor_get(x, i * C + c));
        for (int64_t c = 0; c < C; c++)
            z += exp(amp_tensor_get(x, i * C + c) - m);
        total += m + log(z) - amp_tensor_get(x, i * C + labels[i]);
        count++;
    }
    return total / (double)count;
}

static void test_cross_entropy_values(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(6, 9), AMP_F32, -5, 5, 20);
    int64_t lab[6] = {0, 8, 3, -100, 3, 5};
    amp_tensor *labels = amp_from_data(AMP_SHAPE(6), AMP_I64, lab);
    double ref = ref_cross_entropy(x, lab, -100);
    CHECK_NEAR(amp_item(amp_cross_entropy(x, labels)), ref, 1e-6 * ref);
    int64_t lab3[6] = {0, 8, 3, 2, 3, 5};
    amp_tensor *labels3 = amp_from_data(AMP_SHAPE(6), AMP_I64, lab3);
    ref = ref_cross_entropy(x, lab3, 3);
    CHECK_NEAR(amp_item(amp_cross_entropy_ignore(x, labels3, 3)), ref, 1e-6 * ref);
    amp_tensor_free(labels3);
    amp_tensor_free(x);
    amp_tensor_free(labels);
}

typedef struct {
    amp_tensor *labels;
    int64_t ignore;
} ce_ctx;

static amp_tensor *gc_ce(amp_tensor **in, void *ctx)
{
    ce_ctx *c = ctx;
    return amp_cross_entropy_ignore(in[0], c->labels, c->ignore);
}

static void test_cross_entropy_gradcheck_with_ignore_index(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(5, 4), AMP_F32, -2, 2, 21);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *l1 = amp_from_data(AMP_SHAPE(5), AMP_I64, (int64_t[]){0, -100, 3, 1, -100});
    amp_tensor *l2 = amp_from_data(AMP_SHAPE(5), AMP_I32, (int32_t[]){2, 1, 2, 3, 0});
    ce_ctx c1 = {l1, AMP_IGNORE_INDEX}, c2 = {l2, 2};
    gradcheck("cross_entropy ignore -100", gc_ce, &x, 1, &c1, 1e-3, 1e-3, 1e-2);
    gradcheck("cross_entropy ignore 2", gc_ce, &x, 1, &c2, 1e-3, 1e-3, 1e-2);
    /* Ignored rows get exactly zero gradient. */
    CHECK_OK(amp_backward(amp_cross_entropy_ignore(x, l2, 2)));
    amp_tensor *g = amp_tensor_grad(x);
    for (int c = 0; g && c < 4; c++)
        CHECK(amp_tensor_get(g, c) == 0 && amp_tensor_get(g, 8 + c) == 0);
    amp_tensor_free(x);
    amp_tensor_free(l1);
    amp_tensor_free(l2);
}

/* PyTorch: mean over zero counted labels is 0/0 = NaN; the gradient is 0. */
static void test_cross_entropy_all_ignored_is_nan(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 3), AMP_F32, -1, 1, 22);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *l = amp_from_data(AMP_SHAPE(2), AMP_I64, (int64_t[]){-100, -100});
    amp_tensor *loss = amp_cross_entropy(x, l);
    CHECK(loss && isnan(amp_item(loss)));
    CHECK_OK(amp_backward(loss));
    amp_tensor *g = amp_tensor_grad(x), *zero = amp_zeros(AMP_SHAPE(2, 3), AMP_F32);
    CHECK(g && max_abs_diff(g, zero) == 0);
    amp_tensor_free(zero);
    amp_tensor_free(x);
    amp_tensor_free(l);
}

static void test_cross_entropy_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(4, 5), AMP_F32);
    amp_tensor *bad = amp_from_data(AMP_SHAPE(4), AMP_I64, (int64_t[]){0, 1, 7, 2});
    CHECK(amp_cross_entropy(x, bad) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "cross_entropy: label 7 at index 2 is out of range [0, 5)");
    amp_tensor *neg = amp_from_data(AMP_SHAPE(4), AMP_I32, (int32_t[]){0, -1, 1, 2});
    CHECK(amp_cross_entropy(x, neg) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "label -1 at index 1");
    /* A label equal to a custom ignore_index is skipped even out of range. */
    CHECK(amp_cross_entropy_ignore(x, bad, 7) != NULL);
    amp_tensor *fl = amp_zeros(AMP_SHAPE(4), AMP_F32);
    CHECK(amp_cross_entropy(x, fl) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "cross_entropy: input 1 has dtype f32");
    amp_tensor *short_l = amp_zeros(AMP_SHAPE(3), AMP_I64);
    CHECK(amp_cross_entropy(x, short_l) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "cross_entropy: expected logits [N, C] and labels [N] ([4, 5] f32, [3] i64)");
    amp_tensor *x1 = amp_zeros(AMP_SHAPE(5), AMP_F32);
    CHECK(amp_cross_entropy(x1, short_l) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "cross_entropy: expected logits [N, C]");
    amp_tensor *own[6] = {x, bad, neg, fl, short_l, x1};
    for (int i = 0; i < 6; i++)
        amp_tensor_free(own[i]);
}

/* 16-bit logits: the loss comes back in their dtype, computed in f32 (one
 * rounding of the f32 result), and the gradient matches f32's. */
static void test_cross_entropy_16bit(void)
{
    static const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int k = 0; k < 2; k++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(8, 10), dts[k], -4, 4, 23);
        amp_tensor *x32 = f32_copy(x);
        amp_tensor *l = test_uniform(AMP_SHAPE(8), AMP_I64, 0, 10, 24);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor_set_requires_grad(x32, true);
        amp_tensor *loss = amp_cross_entropy(x, l), *loss32 = amp_cross_entropy(x32, l);
        CHECK(loss && amp_tensor_dtype(loss) == dts[k]);
        float want = (float)amp_item(loss32);
        uint16_t h = dts[k] == AMP_F16 ? amp_f32_to_f16(want) : amp_f32_to_bf16(want);
        double want16 = dts[k] == AMP_F16 ? amp_f16_to_f32(h) : amp_bf16_to_f32(h);
        CHECK_MSG(amp_item(loss) == want16, "%s loss %.6g, f32 loss rounded %.6g", amp_dtype_name(dts[k]),
                  amp_item(loss), want16);
        CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_backward(loss32));
        amp_tensor *g = amp_tensor_grad(x), *g32 = amp_tensor_grad(x32);
        CHECK(g && amp_tensor_dtype(g) == dts[k]);
        double tol = dts[k] == AMP_BF16 ? 4e-3 : 5e-4; /* half an ulp of |g| <= 1/8 */
        CHECK_MSG(g && g32 && max_abs_diff(g, g32) <= tol, "%s grad differs from f32 by %.3g",
                  amp_dtype_name(dts[k]), max_abs_diff(g, g32));
        amp_tensor_free(x);
        amp_tensor_free(x32);
        amp_tensor_free(l);
    }
}

/* ------------------------------------------------------------ mse_loss */

static amp_tensor *gc_mse(amp_tensor **in, void *ctx)
{
    (void)ctx;
    return amp_mse_loss(in[0], in[1]);
}

static void test_mse_loss_values_and_gradients(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(3, 7), AMP_F32, -2, 2, 30);
    amp_tensor *b = test_uniform(AMP_SHAPE(3, 7), AMP_F32, -2, 2, 31);
    double ref = 0;
    for (int i = 0; i < 21; i++) {
        double d = amp_tensor_get(a, i) - amp_tensor_get(b, i);
        ref += d * d;
    }
    ref /= 21;
    amp_tensor *loss = amp_mse_loss(a, b);
    CHECK(loss && amp_tensor_ndim(loss) == 0 && amp_tensor_dtype(loss) == AMP_F32);
    CHECK_NEAR(amp_item(loss), ref, 1e-6 * ref);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *in[2] = {a, b};
    gradcheck("mse_loss", gc_mse, in, 2, NULL, 1e-3, 1e-3, 1e-2);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* f16 input with an f32 target: an f32 loss, each gradient in its input's
 * dtype, 2/n * (a - b) and its negation. */
static void test_mse_loss_mixed_dtypes(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(4, 2), AMP_F16, -1, 1, 32);
    amp_tensor *b = test_uniform(AMP_SHAPE(4, 2), AMP_F32, -1, 1, 33);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *loss = amp_mse_loss(a, b);
    CHECK(loss && amp_tensor_dtype(loss) == AMP_F32);
    CHECK_OK(amp_backward(loss));
    amp_tensor *ga = amp_tensor_grad(a), *gb = amp_tensor_grad(b);
    CHECK(ga && amp_tensor_dtype(ga) == AMP_F16);
    CHECK(gb && amp_tensor_dtype(gb) == AMP_F32);
    for (int i = 0; ga && gb && i < 8; i++) {
        double d = 0.25 * (amp_tensor_get(a, i) - amp_tensor_get(b, i));
        CHECK_NEAR(amp_tensor_get(ga, i), d, 1e-3 * fabs(d) + 1e-7);
        CHECK_NEAR(amp_tensor_get(gb, i), -d, 1e-6 * fabs(d) + 1e-9);
    }
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* --------------------------------------------------------- 16-bit softmax */

static void test_16bit_softmax_matches_f32(void)
{
    static const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int k = 0; k < 2; k++) {
        for (int log_form = 0; log_form < 2; log_form++) {
            for (int dim = 0; dim < 2; dim++) {
                amp_tensor *x = test_uniform(AMP_SHAPE(6, 5), dts[k], -3, 3, 40 + (uint64_t)dim);
                amp_tensor *x32 = f32_copy(x);
                amp_tensor *w = test_uniform(AMP_SHAPE(6, 5), AMP_F32, -1, 1, 42);
                amp_tensor_set_requires_grad(x, true);
                amp_tensor_set_requires_grad(x32, true);
                amp_tensor *y = log_form ? amp_log_softmax(x, dim) : amp_softmax(x, dim);
                amp_tensor *y32 = log_form ? amp_log_softmax(x32, dim) : amp_softmax(x32, dim);
                CHECK(y && amp_tensor_dtype(y) == dts[k]);
                /* forward: the f32 result rounded once */
                for (int i = 0; y && y32 && i < 30; i++) {
                    float v = (float)amp_tensor_get(y32, i);
                    uint16_t h = dts[k] == AMP_F16 ? amp_f32_to_f16(v) : amp_f32_to_bf16(v);
                    double want = dts[k] == AMP_F16 ? amp_f16_to_f32(h) : amp_bf16_to_f32(h);
                    CHECK_MSG(amp_tensor_get(y, i) == want, "%s %s[%d] = %.6g, want %.6g",
                              amp_dtype_name(dts[k]), log_form ? "log_softmax" : "softmax", i,
                              amp_tensor_get(y, i), want);
                }
                CHECK_OK(amp_backward(amp_sum_all(amp_mul(y, w))));
                CHECK_OK(amp_backward(amp_sum_all(amp_mul(y32, w))));
                amp_tensor *g = amp_tensor_grad(x), *g32 = amp_tensor_grad(x32);
                CHECK(g && amp_tensor_dtype(g) == dts[k]);
                double tol = dts[k] == AMP_BF16 ? 3e-2 : 4e-3;
                CHECK_MSG(g && g32 && max_abs_diff(g, g32) <= tol, "%s grad differs from f32 by %.3g",
                          amp_dtype_name(dts[k]), max_abs_diff(g, g32));
                amp_tensor_free(x);
                amp_tensor_free(x32);
                amp_tensor_free(w);
            }
        }
    }
}

/* ------------------------------------------------------------------ errors */

static void test_softmax_and_mse_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 3), AMP_F32), *y = amp_zeros(AMP_SHAPE(3, 2), AMP_F32);
    amp_tensor *i = amp_zeros(AMP_SHAPE(2, 3), AMP_I32);
    CHECK(amp_softmax(x, 2) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "softmax: dim 2 is out of range for a tensor of 2 dims");
    CHECK(amp_log_softmax(x, -3) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "log_softmax: dim -3 is out of range");
    CHECK(amp_softmax(i, 0) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "softmax: input 0 has dtype i32");
    CHECK(amp_mse_loss(x, y) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE,
                "mse_loss: input and target must have the same shape ([2, 3] f32, [3, 2] f32)");
    /* NULL in: NULL out, the first error kept. */
    CHECK(amp_cross_entropy(amp_softmax(x, 5), i) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "softmax: dim 5");
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_tensor_free(i);
}


/* 16-bit logits are widened a row at a time and each result rounded once:
 * the loss and every gradient element are the f32 op's on the same values,
 * rounded, bit for bit; big enough for several threads, with ignored rows,
 * and the same again on the scalar path (amp_cpu_limit(0)) to f32 rounding. */
static void test_cross_entropy_16bit_rows_round_once(void)
{
    const int64_t N = 300, C = 97;
    amp_tensor *lab = amp_empty(AMP_SHAPE(N), AMP_I64);
    int64_t *lv = amp_tensor_data(lab);
    for (int64_t i = 0; i < N; i++)
        lv[i] = i % 17 == 3 ? -100 : (i * 31) % C;
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(N, C), dts[d], -8, 8, 171);
        amp_tensor *x32 = amp_clone(amp_to(x, AMP_F32));
        amp_tensor_set_requires_grad(x, true);
        amp_tensor_set_requires_grad(x32, true);
        amp_tensor *l = amp_cross_entropy(x, lab), *l32 = amp_cross_entropy(x32, lab);
        CHECK(l && l32 && amp_tensor_dtype(l) == dts[d]);
        CHECK_OK(amp_backward(l));
        CHECK_OK(amp_backward(l32));
        uint16_t want;
        float lf = (float)amp_tensor_get(l32, 0);
        amp_convert(&lf, AMP_F32, &want, dts[d], 1);
        CHECK(l && *(const uint16_t *)amp_tensor_data(l) == want);
        amp_tensor *g = amp_tensor_grad(x), *g32 = amp_tensor_grad(x32);
        uint16_t *gw = malloc((size_t)(N * C) * sizeof(uint16_t));
        amp_convert(amp_tensor_data(g32), AMP_F32, gw, dts[d], (size_t)(N * C));
        CHECK(g && memcmp(amp_tensor_data(g), gw, (size_t)(N * C) * sizeof(uint16_t)) == 0);
        free(gw);
        /* the scalar loops (libm expf, serial sums) agree to f32 rounding */
        amp_cpu_limit(0);
        amp_tensor *xs = amp_clone(x32);
        amp_tensor_set_requires_grad(xs, true);
        amp_tensor *ls = amp_cross_entropy(xs, lab);
        CHECK_OK(amp_backward(ls));
        amp_cpu_limit(~0u);
        CHECK_NEAR(amp_tensor_get(ls, 0), amp_tensor_get(l32, 0), 1e-6 * fabs(amp_tensor_get(l32, 0)));
        double worst = 0;
        for (int64_t i = 0; i < N * C; i++)
            worst = fmax(worst, fabs(amp_tensor_get(amp_tensor_grad(xs), i) - amp_tensor_get(g32, i)));
        CHECK_MSG(worst <= 1e-8, "scalar and vector cross_entropy grads differ by %g", worst);
        amp_tensor_free(x), amp_tensor_free(x32), amp_tensor_free(xs);
        amp_temps_free();
    }
    amp_tensor_free(lab);
}

int main(void)
{
    RUN(test_softmax_values_along_each_dim);
    RUN(test_softmax_of_0d_is_one);
    RUN(test_softmax_gradcheck);
    RUN(test_large_logits_stay_finite);
    RUN(test_pytorch_reference_cross_entropy_and_log_softmax);
    RUN(test_cross_entropy_values);
    RUN(test_cross_entropy_gradcheck_with_ignore_index);
    RUN(test_cross_entropy_all_ignored_is_nan);
    RUN(test_cross_entropy_errors);
    RUN(test_cross_entropy_16bit);
    RUN(test_cross_entropy_16bit_rows_round_once);
    RUN(test_mse_loss_values_and_gradients);
    RUN(test_mse_loss_mixed_dtypes);
    RUN(test_16bit_softmax_matches_f32);
    RUN(test_softmax_and_mse_errors);
    return harness_done();
}
