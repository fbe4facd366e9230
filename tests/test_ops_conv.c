/*
 * test_ops_conv.c - conv2d, max_pool2d and avg_pool2d: PyTorch reference
 * values (tests/reference/gen_conv.py), values against double loops,
 * finite-difference gradients over strides / padding / bias, PyTorch's
 * pooling rules (padding never wins, first max wins, NaN propagates,
 * padding counted in the average), 16-bit results and gradient dtypes,
 * the image-group paths (many small groups, "same" padding shortcuts), the
 * vector 2x2 max pool against the scalar one, and errors that name the op
 * and shapes.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn/onednn.h"
#include "harness.h"
#include "reference/conv_ref.h"

#include <stdlib.h>

static amp_tensor *from(amp_shape s, const float *v)
{
    amp_tensor *t = amp_from_data(s, AMP_F32, v);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

static void check_values(const char *what, const amp_tensor *t, const float *want, int64_t n, double tol)
{
    CHECK_MSG(t && amp_tensor_numel(t) == n, "%s: %lld elements, expected %lld", what,
              t ? (long long)amp_tensor_numel(t) : -1LL, (long long)n);
    if (!t || amp_tensor_numel(t) != n)
        return;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double got = amp_tensor_get(t, i);
        if (!(fabs(got - want[i]) <= tol * (1 + fabs(want[i]))) && bad++ < 3)
            CHECK_MSG(0, "%s[%lld] = %.8g, PyTorch %.8g", what, (long long)i, got, (double)want[i]);
    }
}

#define N_OF(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

static void test_conv_pool_match_pytorch_case_a(void)
{
    amp_tensor *x = from(AMP_SHAPE(2, 2, 6, 6), a_x), *w = from(AMP_SHAPE(3, 2, 3, 3), a_w);
    amp_tensor *b = from(AMP_SHAPE(3), a_b);
    amp_tensor *gz = amp_from_data(AMP_SHAPE(2, 3, 3, 3), AMP_F32, a_gz);
    amp_tensor *y = amp_conv2d(x, w, b, 1, 1);
    amp_tensor *z = amp_max_pool2d(y, 2, 2, 0);
    check_values("y", y, a_y, N_OF(a_y), 1e-5);
    check_values("z", z, a_z, N_OF(a_z), 1e-5);
    CHECK_OK(amp_backward_with(z, gz));
    check_values("dx", amp_tensor_grad(x), a_dx, N_OF(a_dx), 1e-5);
    check_values("dw", amp_tensor_grad(w), a_dw, N_OF(a_dw), 1e-5);
    check_values("db", amp_tensor_grad(b), a_db, N_OF(a_db), 1e-5);
    amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b), amp_tensor_free(gz);
}

static void test_conv_pools_match_pytorch_case_b(void)
{
    amp_tensor *x = from(AMP_SHAPE(1, 3, 7, 7), b_x), *w = from(AMP_SHAPE(2, 3, 3, 3), b_w);
    amp_tensor *gz = amp_from_data(AMP_SHAPE(1, 2, 2, 2), AMP_F32, b_gz);
    amp_tensor *gv = amp_from_data(AMP_SHAPE(1, 2, 4, 4), AMP_F32, b_gv);
    amp_tensor *y = amp_conv2d(x, w, NULL, 2, 0);
    amp_tensor *z = amp_max_pool2d(y, 3, 2, 1), *v = amp_avg_pool2d(y, 2, 1, 1);
    check_values("y", y, b_y, N_OF(b_y), 1e-5);
    check_values("z", z, b_z, N_OF(b_z), 1e-5);
    check_values("v", v, b_v, N_OF(b_v), 1e-5);
    amp_tensor *loss = amp_add(amp_sum_all(amp_mul(z, gz)), amp_sum_all(amp_mul(v, gv)));
    CHECK_OK(amp_backward(loss));
    check_values("dx", amp_tensor_grad(x), b_dx, N_OF(b_dx), 1e-5);
    check_values("dw", amp_tensor_grad(w), b_dw, N_OF(b_dw), 1e-5);
    amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(gz), amp_tensor_free(gv);
}

/* y[n][o][oy][ox] in double, for any stride / padding / kernel shape. */
static void test_conv2d_matches_double(void)
{
    const int64_t N = 2, C = 3, H = 7, W = 6, O = 4, kh = 3, kw = 2, s = 2, p = 1;
    const int64_t Ho = (H + 2 * p - kh) / s + 1, Wo = (W + 2 * p - kw) / s + 1;
    amp_tensor *x = test_uniform(AMP_SHAPE(N, C, H, W), AMP_F32, -1, 1, 1);
    amp_tensor *w = test_uniform(AMP_SHAPE(O, C, kh, kw), AMP_F32, -1, 1, 2);
    amp_tensor *b = test_uniform(AMP_SHAPE(O), AMP_F32, -1, 1, 3);
    amp_tensor *y = amp_conv2d(x, w, b, (int)s, (int)p);
    CHECK(y != NULL);
    CHECK_EQ_INT(amp_tensor_dim(y, 2), Ho);
    CHECK_EQ_INT(amp_tensor_dim(y, 3), Wo);
    for (int64_t n = 0; y && n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double acc = amp_tensor_get(b, o);
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t iy = oy * s - p + i, ix = ox * s - p + j;
                                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                    acc += amp_tensor_get(x, ((n * C + c) * H + iy) * W + ix) *
                                           amp_tensor_get(w, ((o * C + c) * kh + i) * kw + j);
                            }
                    CHECK_NEAR(amp_tensor_get(y, ((n * O + o) * Ho + oy) * Wo + ox), acc, 1e-5);
                }
    amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b);
}

typedef struct {
    int stride, padding, kernel;
    bool bias;
} conv_args;

static amp_tensor *conv_fn(amp_tensor **in, void *ctx)
{
    conv_args *a = ctx;
    return amp_conv2d(in[0], in[1], a->bias ? in[2] : NULL, a->stride, a->padding);
}

static void gradcheck_conv(amp_shape xs, amp_shape ws, conv_args a)
{
    amp_tensor *in[3] = {test_uniform(xs, AMP_F32, -1, 1, 11), test_uniform(ws, AMP_F32, -1, 1, 12),
                         test_uniform(AMP_SHAPE(ws.d[0]), AMP_F32, -1, 1, 13)};
    for (int i = 0; i < 3; i++)
        amp_tensor_set_requires_grad(in[i], true);
    char what[96];
    snprintf(what, sizeof what, "conv2d N=%lld stride %d padding %d%s", (long long)xs.d[0], a.stride,
             a.padding, a.bias ? " bias" : "");
    CHECK(gradcheck(what, conv_fn, in, a.bias ? 3 : 2, &a, 1e-2, 2e-3, 1e-2));
    for (int i = 0; i < 3; i++)
        amp_tensor_free(in[i]);
}

static void test_conv2d_gradients(void)
{
    for (int stride = 1; stride <= 2; stride++)
        for (int padding = 0; padding <= 1; padding++)
            for (int bias = 0; bias <= 1; bias++)
                gradcheck_conv(AMP_SHAPE(2, 2, 5, 4), AMP_SHAPE(3, 2, 3, 3), (conv_args){stride, padding, 0, bias});
    /* one image (the GEMM gets the threads), an odd batch, a 1x1 kernel */
    gradcheck_conv(AMP_SHAPE(1, 2, 4, 5), AMP_SHAPE(3, 2, 2, 3), (conv_args){1, 1, 0, true});
    gradcheck_conv(AMP_SHAPE(3, 2, 4, 4), AMP_SHAPE(2, 2, 3, 3), (conv_args){2, 1, 0, true});
    gradcheck_conv(AMP_SHAPE(2, 3, 4, 4), AMP_SHAPE(5, 3, 1, 1), (conv_args){1, 0, 0, true});
}

/* ------------------------------------------------------------ pooling */

/* Distinct values at least 2/n apart, so a finite-difference step cannot
 * change which element is a window's maximum. */
static amp_tensor *spread(amp_shape s, int64_t mult)
{
    amp_tensor *t = amp_empty(s, AMP_F32);
    int64_t n = amp_tensor_numel(t);
    float *v = amp_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((double)((i * mult) % n) * 2.0 / (double)n - 1.0);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

static amp_tensor *max_fn(amp_tensor **in, void *ctx)
{
    conv_args *a = ctx;
    return amp_max_pool2d(in[0], a->kernel, a->stride, a->padding);
}

static amp_tensor *avg_fn(amp_tensor **in, void *ctx)
{
    conv_args *a = ctx;
    return amp_avg_pool2d(in[0], a->kernel, a->stride, a->padding);
}

static void test_pool_gradients(void)
{
    const conv_args cases[] = {{2, 0, 2, 0}, {1, 1, 3, 0}, {2, 1, 3, 0}, {3, 1, 2, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        conv_args a = cases[c];
        amp_tensor *x = spread(AMP_SHAPE(2, 2, 7, 6), 97); /* 168 values, 97 coprime */
        char what[64];
        snprintf(what, sizeof what, "max_pool2d k%d s%d p%d", a.kernel, a.stride, a.padding);
        CHECK(gradcheck(what, max_fn, &x, 1, &a, 1e-3, 1e-3, 1e-3));
        snprintf(what, sizeof what, "avg_pool2d k%d s%d p%d", a.kernel, a.stride, a.padding);
        CHECK(gradcheck(what, avg_fn, &x, 1, &a, 1e-2, 1e-3, 1e-3));
        amp_tensor_free(x);
    }
}

/* Pooling against double loops, on a 3-D input, with the rules PyTorch
 * uses: padding is not a candidate for the max but counts in the average. */
static void test_pools_match_double(void)
{
    const int k = 3, s = 2, p = 1, H = 6, W = 5, Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
    amp_tensor *x = test_uniform(AMP_SHAPE(2, H, W), AMP_F32, -3, -1, 21); /* all negative */
    amp_tensor *mx = amp_max_pool2d(x, k, s, p), *av = amp_avg_pool2d(x, k, s, p);
    CHECK(mx && av);
    if (!mx || !av)
        return;
    CHECK_EQ_INT(amp_tensor_dim(mx, 1), Ho);
    CHECK_EQ_INT(amp_tensor_dim(mx, 2), Wo);
    for (int c = 0; c < 2; c++)
        for (int oy = 0; oy < Ho; oy++)
            for (int ox = 0; ox < Wo; ox++) {
                double best = -INFINITY, sum = 0;
                for (int i = 0; i < k; i++)
                    for (int j = 0; j < k; j++) {
                        int iy = oy * s - p + i, ix = ox * s - p + j;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                            continue;
                        double v = amp_tensor_get(x, (c * H + iy) * W + ix);
                        best = v > best ? v : best;
                        sum += v;
                    }
                int64_t o = (c * Ho + oy) * Wo + ox;
                CHECK_NEAR(amp_tensor_get(mx, o), best, 0);
                CHECK_NEAR(amp_tensor_get(av, o), sum / (k * k), 1e-6);
            }
    amp_tensor_free(x);
}

/* Ties go to the first maximum in the window (row-major), and NaN wins. */
static void test_max_pool_ties_and_nan(void)
{
    float v[16] = {1, 1, 0, 2, 1, 1, 2, 2, 0, 0, 5, NAN, 0, 0, 1, 1};
    amp_tensor *x = amp_from_data(AMP_SHAPE(1, 1, 4, 4), AMP_F32, v);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *y = amp_max_pool2d(x, 2, 2, 0);
    CHECK_NEAR(amp_tensor_get(y, 0), 1, 0);
    CHECK_NEAR(amp_tensor_get(y, 1), 2, 0);
    CHECK_NEAR(amp_tensor_get(y, 2), 0, 0);
    CHECK(isnan(amp_tensor_get(y, 3))); /* after a larger number, still NaN */
    CHECK_OK(amp_backward(amp_sum_all(y)));
    amp_tensor *g = amp_tensor_grad(x);
    const float want[16] = {1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0};
    for (int i = 0; g && i < 16; i++)
        CHECK_NEAR(amp_tensor_get(g, i), want[i], 0);
    amp_tensor_free(x);
}

/* ------------------------------------------------------------ 16-bit */

static void test_16bit_conv_and_pools(void)
{
    const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = dts[d];
        double rel = dt == AMP_BF16 ? 0x1p-8 : 0x1p-11;
        amp_tensor *lo[3] = {test_uniform(AMP_SHAPE(2, 3, 6, 6), dt, -1, 1, 31),
                             test_uniform(AMP_SHAPE(4, 3, 3, 3), dt, -1, 1, 32),
                             test_uniform(AMP_SHAPE(4), dt, -1, 1, 33)};
        amp_tensor *hi[3];
        for (int i = 0; i < 3; i++) {
            hi[i] = amp_clone(amp_to(lo[i], AMP_F32));
            amp_tensor_set_requires_grad(lo[i], true);
            amp_tensor_set_requires_grad(hi[i], true);
        }
        amp_tensor *yl = amp_conv2d(lo[0], lo[1], lo[2], 1, 1), *yh = amp_conv2d(hi[0], hi[1], hi[2], 1, 1);
        CHECK(yl && yh);
        if (!yl || !yh)
            continue;
        CHECK_EQ_INT(amp_tensor_dtype(yl), dt);
        for (int64_t i = 0; i < amp_tensor_numel(yh); i++)
            CHECK_NEAR(amp_tensor_get(yl, i), amp_tensor_get(yh, i), rel * fabs(amp_tensor_get(yh, i)) + 1e-5);
        amp_tensor *pl = amp_avg_pool2d(amp_max_pool2d(yl, 2, 1, 1), 2, 2, 0);
        amp_tensor *ph = amp_avg_pool2d(amp_max_pool2d(yh, 2, 1, 1), 2, 2, 0);
        CHECK_EQ_INT(amp_tensor_dtype(pl), dt);
        CHECK_OK(amp_backward(amp_sum_all(pl)));
        CHECK_OK(amp_backward(amp_sum_all(ph)));
        double tol = dt == AMP_BF16 ? 3e-2 : 4e-3;
        for (int i = 0; i < 3; i++) {
            amp_tensor *gl = amp_tensor_grad(lo[i]), *gh = amp_tensor_grad(hi[i]);
            CHECK(gl && gh);
            if (!gl || !gh)
                continue;
            CHECK_EQ_INT(amp_tensor_dtype(gl), dt);
            /* Near-ties in max_pool2d may route differently after rounding
             * the conv output; nearly all positions must still agree. */
            int64_t off = 0;
            for (int64_t k = 0; k < amp_tensor_numel(gh); k++)
                off += !(fabs(amp_tensor_get(gl, k) - amp_tensor_get(gh, k)) <= tol * (1 + fabs(amp_tensor_get(gh, k))));
            CHECK_MSG(off * 20 <= amp_tensor_numel(gh), "%s grad %d: %lld of %lld elements differ",
                      amp_dtype_name(dt), i, (long long)off, (long long)amp_tensor_numel(gh));
        }
        for (int i = 0; i < 3; i++)
            amp_tensor_free(lo[i]), amp_tensor_free(hi[i]);
        amp_temps_free();
    }
}


/* ------------------------------------------------------ image groups */

/* y in double for x [N, C, H, W], w [O, C, kh, kw], b [O], stride s, padding p. */
static double conv_ref_at(const amp_tensor *x, const amp_tensor *w, const amp_tensor *b, int s, int p, int64_t n,
                          int64_t o, int64_t oy, int64_t ox)
{
    amp_shape xs = amp_tensor_shape(x), ws = amp_tensor_shape(w);
    int64_t C = xs.d[1], H = xs.d[2], W = xs.d[3], kh = ws.d[2], kw = ws.d[3];
    double acc = b ? amp_tensor_get(b, o) : 0;
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++) {
                int64_t iy = oy * s - p + i, ix = ox * s - p + j;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                    acc += amp_tensor_get(x, ((n * C + c) * H + iy) * W + ix) *
                           amp_tensor_get(w, ((o * C + c) * kh + i) * kw + j);
            }
    return acc;
}

/* Checks conv2d(x, w, b) against double loops within tol * (1 + |ref|). */
static void check_conv_ref(const char *what, amp_tensor *x, amp_tensor *w, amp_tensor *b, int s, int p, double tol)
{
    amp_tensor *y = amp_conv2d(x, w, b, s, p);
    CHECK_MSG(y != NULL, "%s: %s", what, amp_last_error());
    if (!y)
        return;
    amp_shape ys = amp_tensor_shape(y);
    int bad = 0;
    for (int64_t n = 0; n < ys.d[0]; n++)
        for (int64_t o = 0; o < ys.d[1]; o++)
            for (int64_t oy = 0; oy < ys.d[2]; oy++)
                for (int64_t ox = 0; ox < ys.d[3]; ox++) {
                    double ref = conv_ref_at(x, w, b, s, p, n, o, oy, ox);
                    double got = amp_tensor_get(y, ((n * ys.d[1] + o) * ys.d[2] + oy) * ys.d[3] + ox);
                    if (!(fabs(got - ref) <= tol * (1 + fabs(ref))) && bad++ < 3)
                        CHECK_MSG(0, "%s: y[%lld,%lld,%lld,%lld] = %.8g, want %.8g", what, (long long)n,
                                  (long long)o, (long long)oy, (long long)ox, got, ref);
                }
}

/* "Same" padding along x (stride 1, Wo == W) takes the shifted-plane
 * im2col / col2im; these shapes cover kh != kw, Ho != H, wide kernels and
 * a plane narrower than the kernel's reach. */
static void test_conv2d_same_padding_shortcut(void)
{
    const struct {
        int64_t N, C, H, W, O, kh, kw;
        int p;
    } cases[] = {{3, 2, 5, 6, 4, 3, 3, 1}, {2, 3, 4, 7, 2, 5, 5, 2}, {2, 2, 3, 5, 3, 1, 5, 2},
                 {1, 2, 2, 3, 2, 7, 7, 3}, {2, 1, 6, 1, 2, 3, 1, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(cases[k].N, cases[k].C, cases[k].H, cases[k].W), AMP_F32, -1, 1, 41);
        amp_tensor *w = test_uniform(AMP_SHAPE(cases[k].O, cases[k].C, cases[k].kh, cases[k].kw), AMP_F32, -1, 1, 42);
        amp_tensor *b = test_uniform(AMP_SHAPE(cases[k].O), AMP_F32, -1, 1, 43);
        char what[64];
        snprintf(what, sizeof what, "same case %zu", k);
        check_conv_ref(what, x, w, b, 1, cases[k].p, 1e-5);
        amp_tensor *in[3] = {x, w, b};
        for (int i = 0; i < 3; i++)
            amp_tensor_set_requires_grad(in[i], true);
        conv_args a = {1, cases[k].p, 0, true};
        CHECK(gradcheck(what, conv_fn, in, 3, &a, 1e-2, 2e-3, 1e-2));
        amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b);
    }
}

/* A column budget so small that every image is its own group (and the
 * groups outnumber the threads), then one that leaves a partial last
 * group: values and gradients still match double loops / differences. */
static void test_conv2d_small_groups(void)
{
    const size_t budgets[2] = {1, 3 * 4 * 9 * 36 * 8};
    for (int bi = 0; bi < 2; bi++) {
        size_t old = conv_set_cols_budget(budgets[bi]);
        amp_tensor *x = test_uniform(AMP_SHAPE(5, 3, 6, 6), AMP_F32, -1, 1, 51);
        amp_tensor *w = test_uniform(AMP_SHAPE(4, 3, 3, 3), AMP_F32, -1, 1, 52);
        amp_tensor *b = test_uniform(AMP_SHAPE(4), AMP_F32, -1, 1, 53);
        check_conv_ref("small groups s1 p1", x, w, b, 1, 1, 1e-5);
        check_conv_ref("small groups s2 p0", x, w, NULL, 2, 0, 1e-5);
        amp_tensor *in[3] = {x, w, b};
        for (int i = 0; i < 3; i++)
            amp_tensor_set_requires_grad(in[i], true);
        for (int s = 1; s <= 2; s++) {
            conv_args a = {s, 1, 0, true};
            CHECK(gradcheck(s == 1 ? "small groups grad s1" : "small groups grad s2", conv_fn, in, 3, &a, 1e-2,
                            2e-3, 1e-2));
        }
        amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b);
        conv_set_cols_budget(old);
    }
}

/* bf16 runs its GEMMs on bf16 columns (the CPU's bf16 dot products where
 * it has them), f16 on columns widened once to f32: over several groups
 * both must stay within a few 16-bit ulps of the f32 conv of the same
 * (rounded) values, gradients included. */
static void test_16bit_conv_over_groups(void)
{
    const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    size_t old = conv_set_cols_budget(1);
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = dts[d];
        double tol = dt == AMP_BF16 ? 2e-2 : 3e-3;
        amp_tensor *lo[3] = {test_uniform(AMP_SHAPE(3, 4, 7, 7), dt, -1, 1, 61),
                             test_uniform(AMP_SHAPE(5, 4, 3, 3), dt, -1, 1, 62),
                             test_uniform(AMP_SHAPE(5), dt, -1, 1, 63)};
        amp_tensor *hi[3];
        for (int i = 0; i < 3; i++) {
            hi[i] = amp_clone(amp_to(lo[i], AMP_F32));
            amp_tensor_set_requires_grad(lo[i], true);
            amp_tensor_set_requires_grad(hi[i], true);
        }
        amp_tensor *yl = amp_conv2d(lo[0], lo[1], lo[2], 1, 1), *yh = amp_conv2d(hi[0], hi[1], hi[2], 1, 1);
        CHECK(yl && yh);
        if (yl && yh) {
            double worst = 0;
            for (int64_t i = 0; i < amp_tensor_numel(yh); i++)
                worst = fmax(worst, fabs(amp_tensor_get(yl, i) - amp_tensor_get(yh, i)) /
                                        (1 + fabs(amp_tensor_get(yh, i))));
            CHECK_MSG(worst <= tol, "%s conv over groups: y differs by %g", amp_dtype_name(dt), worst);
            amp_tensor *gz = test_uniform(amp_tensor_shape(yh), AMP_F32, -1, 1, 64);
            CHECK_OK(amp_backward_with(yl, amp_to(gz, dt)));
            CHECK_OK(amp_backward_with(yh, gz));
            for (int i = 0; i < 3; i++) {
                amp_tensor *gl = amp_tensor_grad(lo[i]), *gh = amp_tensor_grad(hi[i]);
                CHECK(gl && gh && amp_tensor_dtype(gl) == dt);
                double gw = 0, scale = 0;
                for (int64_t k = 0; gl && gh && k < amp_tensor_numel(gh); k++) {
                    gw = fmax(gw, fabs(amp_tensor_get(gl, k) - amp_tensor_get(gh, k)));
                    scale = fmax(scale, fabs(amp_tensor_get(gh, k)));
                }
                CHECK_MSG(gw <= 2 * tol * (1 + scale), "%s grad %d over groups differs by %g (scale %g)",
                          amp_dtype_name(dt), i, gw, scale);
            }
            amp_tensor_free(gz);
        }
        for (int i = 0; i < 3; i++)
            amp_tensor_free(lo[i]), amp_tensor_free(hi[i]);
        amp_temps_free();
    }
    conv_set_cols_budget(old);
}

/* The vector 2x2 max pool against the scalar loop (amp_cpu_limit(0)):
 * the same maxima and argmax (through the gradient), bit for bit, with
 * ties, -inf, NaN, and row widths around the vector width. */
static void test_max_pool_2x2_vector_matches_scalar(void)
{
    const int64_t widths[] = {2, 14, 30, 32, 34, 66};
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        int64_t W = widths[k], H = 6, n = 2 * 3 * H * W;
        amp_tensor *x = test_uniform(AMP_SHAPE(2, 3, H, W), AMP_F32, -2, 2, 70 + (uint64_t)k);
        float *v = amp_tensor_data(x);
        for (int64_t i = 0; i < n; i += 7)
            v[i] = v[(i + 1) % n]; /* ties */
        for (int64_t i = 3; i < n; i += 23)
            v[i] = -INFINITY;
        for (int64_t i = 5; i < n; i += 37)
            v[i] = NAN;
        float *ys[2], *gs[2];
        for (int pass = 0; pass < 2; pass++) {
            amp_cpu_limit(pass ? 0u : ~0u);
            amp_tensor *xi = amp_clone(x);
            amp_tensor_set_requires_grad(xi, true);
            amp_tensor *y = amp_max_pool2d(xi, 2, 2, 0);
            CHECK_OK(amp_backward(amp_sum_all(y)));
            int64_t ny = amp_tensor_numel(y);
            ys[pass] = malloc((size_t)ny * sizeof(float));
            gs[pass] = malloc((size_t)n * sizeof(float));
            memcpy(ys[pass], amp_tensor_data(y), (size_t)ny * sizeof(float));
            memcpy(gs[pass], amp_tensor_data(amp_tensor_grad(xi)), (size_t)n * sizeof(float));
            if (pass)
                CHECK_MSG(memcmp(ys[0], ys[1], (size_t)ny * sizeof(float)) == 0 &&
                              memcmp(gs[0], gs[1], (size_t)n * sizeof(float)) == 0,
                          "width %lld: vector and scalar max pools differ", (long long)W);
            amp_tensor_free(xi);
            amp_temps_free();
        }
        amp_cpu_limit(~0u);
        for (int pass = 0; pass < 2; pass++)
            free(ys[pass]), free(gs[pass]);
        amp_tensor_free(x);
    }
}

/* ------------------------------------------------------------ errors */

static void test_errors_name_op_and_shapes(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(1, 2, 5, 5), AMP_F32), *w = amp_zeros(AMP_SHAPE(3, 4, 3, 3), AMP_F32);
    amp_tensor *w2 = amp_zeros(AMP_SHAPE(3, 2, 7, 7), AMP_F32), *wh = amp_zeros(AMP_SHAPE(3, 2, 3, 3), AMP_F16);
    amp_tensor *w3 = amp_zeros(AMP_SHAPE(3, 2, 3, 3), AMP_F32), *b = amp_zeros(AMP_SHAPE(4), AMP_F32);
    amp_tensor *flat = amp_zeros(AMP_SHAPE(5, 5), AMP_F32), *xi = amp_zeros(AMP_SHAPE(1, 2, 5, 5), AMP_I32);

    CHECK(amp_conv2d(x, w, NULL, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "conv2d: input channels of x and weight differ ([1, 2, 5, 5] f32, [3, 4, 3, 3] f32)");
    CHECK(amp_conv2d(x, w2, NULL, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "conv2d: the padded input is smaller than the kernel ([1, 2, 5, 5] f32, [3, 2, 7, 7] f32)");
    CHECK(amp_conv2d(x, w2, NULL, 1, 1) != NULL); /* 5 + 2 >= 7 fits */
    CHECK(amp_conv2d(x, w3, b, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "conv2d: the bias must be [out_channels]");
    CHECK(amp_conv2d(x, wh, NULL, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "conv2d: dtypes f32 and f16 differ");
    CHECK(amp_conv2d(flat, w3, NULL, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "conv2d: need x [N, C, H, W] and weight [O, C, kh, kw] ([5, 5] f32");
    CHECK(amp_max_pool2d(x, 6, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "max_pool2d: the padded input is smaller than the 6x6 window ([1, 2, 5, 5] f32)");
    CHECK(amp_avg_pool2d(flat, 2, 2, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "avg_pool2d: need x [N, C, H, W] or [C, H, W] ([5, 5] f32)");
    CHECK(amp_max_pool2d(xi, 2, 2, 0) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "max_pool2d: input 0 has dtype i32");

    amp_tensor *all[] = {x, w, w2, wh, w3, b, flat, xi};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        amp_tensor_free(all[k]);
}

/* An empty batch gives an empty result (PyTorch: shape [0, O, H', W']),
 * on every path, not a crash. */
static void test_conv2d_empty_batch(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(0, 2, 5, 5), AMP_F32), *w = amp_ones(AMP_SHAPE(3, 2, 3, 3), AMP_F32);
    for (int mode = 0; mode < 3; mode++) {
        onednn_set_mode((cpu_lib_mode)mode);
        amp_tensor *y = amp_conv2d(x, w, NULL, 1, 1);
        CHECK(y != NULL);
        if (y) {
            amp_shape s = amp_tensor_shape(y);
            CHECK_EQ_INT(s.ndim, 4);
            CHECK_EQ_INT(s.d[0], 0);
            CHECK_EQ_INT(s.d[1], 3);
            CHECK_EQ_INT(s.d[2], 5);
        }
    }
    onednn_set_mode(CPU_LIB_AUTO);
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
}

int main(void)
{
    RUN(test_conv2d_empty_batch);
    RUN(test_conv_pool_match_pytorch_case_a);
    RUN(test_conv_pools_match_pytorch_case_b);
    RUN(test_conv2d_matches_double);
    RUN(test_conv2d_gradients);
    RUN(test_pool_gradients);
    RUN(test_pools_match_double);
    RUN(test_max_pool_ties_and_nan);
    RUN(test_16bit_conv_and_pools);
    RUN(test_conv2d_same_padding_shortcut);
    RUN(test_conv2d_small_groups);
    RUN(test_16bit_conv_over_groups);
    RUN(test_max_pool_2x2_vector_matches_scalar);
    RUN(test_errors_name_op_and_shapes);
    return harness_done();
}
