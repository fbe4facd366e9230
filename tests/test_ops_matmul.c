/*
 * test_ops_matmul.c - matmul and linear: values against double loops for
 * every supported shape form (2-D, folded leading dims, batched, shared a,
 * 1-D), finite-difference gradients, 16-bit results and gradient dtypes,
 * and errors that name the op, shapes and dtypes.
 */
#include "harness.h"

#include <stdlib.h>

static amp_tensor *grad_leaf(amp_shape s, uint64_t seed)
{
    amp_tensor *t = test_uniform(s, AMP_F32, -1, 1, seed);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

/* out[b][i][j] = sum_k a[b*sa + i*K + k] * b[b*sb + k*N + j], in double. */
static void check_batched(const amp_tensor *out, const amp_tensor *a, const amp_tensor *b, int64_t batch,
                          int64_t M, int64_t N, int64_t K, int64_t sa, int64_t sb, double tol)
{
    CHECK_EQ_INT(amp_tensor_numel(out), batch * M * N);
    for (int64_t q = 0; q < batch; q++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += amp_tensor_get(a, q * sa + i * K + k) * amp_tensor_get(b, q * sb + k * N + j);
                CHECK_NEAR(amp_tensor_get(out, (q * M + i) * N + j), s, tol);
            }
}

static void check_shape(const amp_tensor *t, amp_shape want)
{
    amp_shape s = amp_tensor_shape(t);
    char a[96], b[96];
    CHECK_MSG(s.ndim == want.ndim && memcmp(s.d, want.d, sizeof(int64_t) * (size_t)s.ndim) == 0,
              "shape %s, expected %s", amp_shape_str(s, a, sizeof a), amp_shape_str(want, b, sizeof b));
}

static void test_matmul_2d_matches_double(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(5, 7), AMP_F32, -1, 1, 1);
    amp_tensor *b = test_uniform(AMP_SHAPE(7, 3), AMP_F32, -1, 1, 2);
    amp_tensor *c = amp_matmul(a, b);
    CHECK(c != NULL);
    check_shape(c, AMP_SHAPE(5, 3));
    CHECK_EQ_INT(amp_tensor_dtype(c), AMP_F32);
    check_batched(c, a, b, 1, 5, 3, 7, 0, 0, 1e-5);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_matmul_folds_leading_dims(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(2, 3, 4), AMP_F32, -1, 1, 3);
    amp_tensor *b = test_uniform(AMP_SHAPE(4, 5), AMP_F32, -1, 1, 4);
    amp_tensor *c = amp_matmul(a, b);
    check_shape(c, AMP_SHAPE(2, 3, 5));
    check_batched(c, a, b, 1, 6, 5, 4, 0, 0, 1e-5);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_matmul_batched(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(2, 3, 4, 5), AMP_F32, -1, 1, 5);
    amp_tensor *b = test_uniform(AMP_SHAPE(2, 3, 5, 6), AMP_F32, -1, 1, 6);
    amp_tensor *c = amp_matmul(a, b);
    check_shape(c, AMP_SHAPE(2, 3, 4, 6));
    check_batched(c, a, b, 6, 4, 6, 5, 20, 30, 1e-5);
    /* a 2-D a is shared by every batch */
    amp_tensor *a2 = test_uniform(AMP_SHAPE(4, 5), AMP_F32, -1, 1, 7);
    amp_tensor *c2 = amp_matmul(a2, b);
    check_shape(c2, AMP_SHAPE(2, 3, 4, 6));
    check_batched(c2, a2, b, 6, 4, 6, 5, 0, 30, 1e-5);
    amp_tensor_free(a);
    amp_tensor_free(a2);
    amp_tensor_free(b);
}

static void test_matmul_vectors_as_pytorch(void)
{
    amp_tensor *v = test_uniform(AMP_SHAPE(4), AMP_F32, -1, 1, 8);
    amp_tensor *m = test_uniform(AMP_SHAPE(4, 3), AMP_F32, -1, 1, 9);
    amp_tensor *mt = test_uniform(AMP_SHAPE(3, 4), AMP_F32, -1, 1, 10);
    amp_tensor *bm = test_uniform(AMP_SHAPE(2, 4, 3), AMP_F32, -1, 1, 11);
    amp_tensor *vm = amp_matmul(v, m); /* [4] @ [4, 3] -> [3] */
    check_shape(vm, AMP_SHAPE(3));
    check_batched(vm, v, m, 1, 1, 3, 4, 0, 0, 1e-5);
    amp_tensor *mv = amp_matmul(mt, v); /* [3, 4] @ [4] -> [3] */
    check_shape(mv, AMP_SHAPE(3));
    check_batched(mv, mt, v, 1, 3, 1, 4, 0, 0, 1e-5);
    amp_tensor *vv = amp_matmul(v, v); /* [4] @ [4] -> [] */
    check_shape(vv, AMP_SHAPE());
    check_batched(vv, v, v, 1, 1, 1, 4, 0, 0, 1e-5);
    amp_tensor *vb = amp_matmul(v, bm); /* [4] @ [2, 4, 3] -> [2, 3] */
    check_shape(vb, AMP_SHAPE(2, 3));
    check_batched(vb, v, bm, 2, 1, 3, 4, 0, 12, 1e-5);
    amp_tensor_free(v);
    amp_tensor_free(m);
    amp_tensor_free(mt);
    amp_tensor_free(bm);
}

static amp_tensor *mm_fn(amp_tensor **in, void *ctx)
{
    (void)ctx;
    return amp_matmul(in[0], in[1]);
}

static void gradcheck_matmul(const char *what, amp_shape sa, amp_shape sb)
{
    amp_tensor *in[2] = {grad_leaf(sa, 21), grad_leaf(sb, 22)};
    CHECK(gradcheck(what, mm_fn, in, 2, NULL, 1e-2, 2e-3, 1e-2));
    amp_tensor_free(in[0]);
    amp_tensor_free(in[1]);
}

static void test_matmul_gradients(void)
{
    gradcheck_matmul("matmul 2-D", AMP_SHAPE(4, 6), AMP_SHAPE(6, 5));
    gradcheck_matmul("matmul folded", AMP_SHAPE(2, 3, 4), AMP_SHAPE(4, 3));
    gradcheck_matmul("matmul batched", AMP_SHAPE(2, 3, 4), AMP_SHAPE(2, 4, 5));
    gradcheck_matmul("matmul shared a", AMP_SHAPE(3, 4), AMP_SHAPE(3, 4, 2));
    gradcheck_matmul("matmul vector @ matrix", AMP_SHAPE(4), AMP_SHAPE(4, 3));
    gradcheck_matmul("matmul matrix @ vector", AMP_SHAPE(3, 4), AMP_SHAPE(4));
    gradcheck_matmul("matmul vector @ batch", AMP_SHAPE(4), AMP_SHAPE(2, 4, 3));
}

/* ------------------------------------------------------------ linear */

static void check_linear(const amp_tensor *y, const amp_tensor *x, const amp_tensor *w, const amp_tensor *b,
                         int64_t rows, int64_t in, int64_t out, double tol)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? amp_tensor_get(b, o) : 0;
            for (int64_t k = 0; k < in; k++)
                s += amp_tensor_get(x, r * in + k) * amp_tensor_get(w, o * in + k);
            CHECK_NEAR(amp_tensor_get(y, r * out + o), s, tol);
        }
}

static void test_linear_matches_double(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 3, 5), AMP_F32, -1, 1, 31);
    amp_tensor *w = test_uniform(AMP_SHAPE(4, 5), AMP_F32, -1, 1, 32);
    amp_tensor *b = test_uniform(AMP_SHAPE(4), AMP_F32, -1, 1, 33);
    amp_tensor *y = amp_linear(x, w, b);
    check_shape(y, AMP_SHAPE(2, 3, 4));
    check_linear(y, x, w, b, 6, 5, 4, 1e-5);
    amp_tensor *y0 = amp_linear(x, w, NULL);
    check_linear(y0, x, w, NULL, 6, 5, 4, 1e-5);
    amp_tensor *x1 = test_uniform(AMP_SHAPE(5), AMP_F32, -1, 1, 34);
    amp_tensor *y1 = amp_linear(x1, w, b);
    check_shape(y1, AMP_SHAPE(4));
    check_linear(y1, x1, w, b, 1, 5, 4, 1e-5);
    amp_tensor_free(x);
    amp_tensor_free(x1);
    amp_tensor_free(w);
    amp_tensor_free(b);
}

static amp_tensor *lin_fn(amp_tensor **in, void *ctx)
{
    return amp_linear(in[0], in[1], *(bool *)ctx ? in[2] : NULL);
}

static void test_linear_gradients(void)
{
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        bool has = with_bias;
        amp_tensor *in[3] = {grad_leaf(AMP_SHAPE(2, 3, 5), 41), grad_leaf(AMP_SHAPE(4, 5), 42),
                             grad_leaf(AMP_SHAPE(4), 43)};
        CHECK(gradcheck(has ? "linear 3-D with bias" : "linear 3-D", lin_fn, in, has ? 3 : 2, &has, 1e-2,
                        2e-3, 1e-2));
        amp_tensor *in2[3] = {grad_leaf(AMP_SHAPE(7, 5), 44), in[1], in[2]};
        CHECK(gradcheck(has ? "linear 2-D with bias" : "linear 2-D", lin_fn, in2, has ? 3 : 2, &has, 1e-2,
                        2e-3, 1e-2));
        for (int i = 0; i < 3; i++)
            amp_tensor_free(in[i]);
        amp_tensor_free(in2[0]);
    }
}

/* db is the sum of dY over every leading position. */
static void test_linear_bias_grad_sums_rows(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 3, 5), AMP_F32, -1, 1, 51);
    amp_tensor *w = test_uniform(AMP_SHAPE(4, 5), AMP_F32, -1, 1, 52);
    amp_tensor *b = grad_leaf(AMP_SHAPE(4), 53);
    CHECK_OK(amp_backward(amp_sum_all(amp_linear(x, w, b))));
    amp_tensor *g = amp_tensor_grad(b);
    CHECK(g != NULL);
    for (int o = 0; o < 4 && g; o++)
        CHECK_NEAR(amp_tensor_get(g, o), 6.0, 0);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
}

/* ------------------------------------------------------------ 16-bit */

/* The 16-bit op against the f32 op on the same (rounded) values: within
 * one rounding of the result, plus f32 accumulation noise. */
static void test_16bit_matches_f32(void)
{
    const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = dts[d];
        double rel = dt == AMP_BF16 ? 0x1p-8 : 0x1p-11;
        amp_tensor *a = test_uniform(AMP_SHAPE(2, 9, 40), dt, -1, 1, 61);
        amp_tensor *b = test_uniform(AMP_SHAPE(2, 40, 11), dt, -1, 1, 62);
        amp_tensor *w = test_uniform(AMP_SHAPE(11, 40), dt, -1, 1, 63);
        amp_tensor *bias = test_uniform(AMP_SHAPE(11), dt, -1, 1, 64);
        amp_tensor *a32 = amp_to(a, AMP_F32), *b32 = amp_to(b, AMP_F32), *w32 = amp_to(w, AMP_F32);
        amp_tensor *bias32 = amp_to(bias, AMP_F32);
        amp_tensor *pairs[2][2] = {{amp_matmul(a, b), amp_matmul(a32, b32)},
                                   {amp_linear(a, w, bias), amp_linear(a32, w32, bias32)}};
        for (int p = 0; p < 2; p++) {
            amp_tensor *lo = pairs[p][0], *hi = pairs[p][1];
            CHECK(lo && hi);
            if (!lo || !hi)
                continue;
            CHECK_EQ_INT(amp_tensor_dtype(lo), dt);
            for (int64_t i = 0; i < amp_tensor_numel(hi); i++) {
                double ref = amp_tensor_get(hi, i);
                CHECK_NEAR(amp_tensor_get(lo, i), ref, rel * fabs(ref) + 1e-5);
            }
        }
        amp_tensor_free(a), amp_tensor_free(b), amp_tensor_free(w), amp_tensor_free(bias);
    }
}

/* Gradients come back in each leaf's dtype, close to the f32 ones. */
static void test_16bit_gradients_keep_dtype(void)
{
    const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = dts[d];
        amp_tensor *x = test_uniform(AMP_SHAPE(3, 8), dt, -1, 1, 71), *w = test_uniform(AMP_SHAPE(5, 8), dt, -1, 1, 72);
        amp_tensor *b = test_uniform(AMP_SHAPE(5), dt, -1, 1, 73), *m = test_uniform(AMP_SHAPE(5, 4), dt, -1, 1, 74);
        amp_tensor *lo[4] = {x, w, b, m}, *hi[4];
        for (int i = 0; i < 4; i++) {
            hi[i] = amp_clone(amp_to(lo[i], AMP_F32));
            amp_tensor_set_requires_grad(lo[i], true);
            amp_tensor_set_requires_grad(hi[i], true);
        }
        CHECK_OK(amp_backward(amp_sum_all(amp_matmul(amp_linear(x, w, b), m))));
        CHECK_OK(amp_backward(amp_sum_all(amp_matmul(amp_linear(hi[0], hi[1], hi[2]), hi[3]))));
        double tol = dt == AMP_BF16 ? 3e-2 : 4e-3;
        for (int i = 0; i < 4; i++) {
            amp_tensor *gl = amp_tensor_grad(lo[i]), *gh = amp_tensor_grad(hi[i]);
            CHECK(gl && gh);
            if (!gl || !gh)
                continue;
            CHECK_EQ_INT(amp_tensor_dtype(gl), dt);
            for (int64_t k = 0; k < amp_tensor_numel(gh); k++)
                CHECK_NEAR(amp_tensor_get(gl, k), amp_tensor_get(gh, k), tol * (1 + fabs(amp_tensor_get(gh, k))));
        }
        for (int i = 0; i < 4; i++) {
            amp_tensor_free(lo[i]);
            amp_tensor_free(hi[i]);
        }
        amp_temps_free();
    }
}


/* Many rows: the bias gradient sums fixed blocks of rows and then the
 * blocks, each column still the exact sum (small integers); in bf16 the
 * rows are widened one at a time. */
static void test_linear_bias_grad_many_rows(void)
{
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int d = 0; d < 2; d++) {
        const int64_t rows = 5000, in = 3, out = 37;
        amp_tensor *x = test_uniform(AMP_SHAPE(rows, in), dts[d], -1, 1, 81);
        amp_tensor *w = test_uniform(AMP_SHAPE(out, in), dts[d], -1, 1, 82);
        amp_tensor *b = test_uniform(AMP_SHAPE(out), dts[d], -1, 1, 83);
        amp_tensor_set_requires_grad(b, true);
        amp_tensor *g = amp_empty(AMP_SHAPE(rows, out), AMP_F32);
        float *gv = amp_tensor_data(g);
        for (int64_t i = 0; i < rows * out; i++)
            gv[i] = (float)((i * 7) % 5) - 2.0f; /* sums stay exact in f32 */
        CHECK_OK(amp_backward_with(amp_linear(x, w, b), amp_to(g, dts[d])));
        amp_tensor *db = amp_tensor_grad(b);
        CHECK(db && amp_tensor_dtype(db) == dts[d]);
        for (int64_t j = 0; db && j < out; j++) {
            double want = 0;
            for (int64_t r = 0; r < rows; r++)
                want += gv[r * out + j];
            float wf = (float)want, wr;
            uint16_t w16;
            amp_convert(&wf, AMP_F32, &w16, AMP_BF16, 1);
            amp_convert(&w16, AMP_BF16, &wr, AMP_F32, 1);
            CHECK_NEAR(amp_tensor_get(db, j), dts[d] == AMP_F32 ? wf : wr, 0);
        }
        amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b), amp_tensor_free(g);
        amp_temps_free();
    }
}

/* An f16 linear's weight gradient transposes and widens dY once before
 * its GEMM: against the f32 op on the same values, over shapes that are
 * not multiples of the transpose tile. */
static void test_f16_linear_weight_grad(void)
{
    const int64_t shapes[3][3] = {{70, 33, 45}, {1, 5, 3}, {64, 32, 32}}; /* rows, in, out */
    for (int k = 0; k < 3; k++) {
        const int64_t rows = shapes[k][0], in = shapes[k][1], out = shapes[k][2];
        amp_tensor *x = test_uniform(AMP_SHAPE(rows, in), AMP_F16, -1, 1, 91);
        amp_tensor *w = test_uniform(AMP_SHAPE(out, in), AMP_F16, -1, 1, 92);
        amp_tensor *g = test_uniform(AMP_SHAPE(rows, out), AMP_F16, -1, 1, 93);
        amp_tensor *w32 = amp_clone(amp_to(w, AMP_F32));
        amp_tensor_set_requires_grad(w, true);
        amp_tensor_set_requires_grad(w32, true);
        CHECK_OK(amp_backward_with(amp_linear(x, w, NULL), g));
        CHECK_OK(amp_backward_with(amp_linear(amp_to(x, AMP_F32), w32, NULL), amp_to(g, AMP_F32)));
        amp_tensor *gl = amp_tensor_grad(w), *gh = amp_tensor_grad(w32);
        CHECK(gl && gh && amp_tensor_dtype(gl) == AMP_F16);
        for (int64_t i = 0; gl && gh && i < out * in; i++) {
            double ref = amp_tensor_get(gh, i);
            CHECK_NEAR(amp_tensor_get(gl, i), ref, 0x1p-11 * fabs(ref) + 1e-5);
        }
        amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(g), amp_tensor_free(w32);
        amp_temps_free();
    }
}

/* ------------------------------------------------------------ errors */

static void test_errors_name_op_and_shapes(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 3), AMP_F32), *b = amp_zeros(AMP_SHAPE(4, 5), AMP_F32);
    amp_tensor *h = amp_zeros(AMP_SHAPE(3, 5), AMP_F16), *i = amp_zeros(AMP_SHAPE(3, 5), AMP_I32);
    amp_tensor *b1 = amp_zeros(AMP_SHAPE(2, 3, 4), AMP_F32), *b2 = amp_zeros(AMP_SHAPE(3, 4, 5), AMP_F32);
    amp_tensor *s = amp_zeros(AMP_SHAPE(), AMP_F32);

    CHECK(amp_matmul(a, b) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "matmul: the last dim of a and the contracted dim of b differ ([2, 3] f32, [4, 5] f32)");
    CHECK(amp_matmul(h, a) == NULL);
    CHECK(amp_matmul(a, h) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "matmul: dtypes f32 and f16 differ");
    amp_tensor *f52 = amp_zeros(AMP_SHAPE(5, 2), AMP_F32), *f53 = amp_zeros(AMP_SHAPE(5, 3), AMP_F32);
    amp_tensor *h53 = amp_zeros(AMP_SHAPE(5, 3), AMP_BF16);
    CHECK(amp_matmul(h, f52) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "matmul: dtypes f16 and f32 differ");
    CHECK(amp_matmul(a, i) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "i32");
    CHECK(amp_matmul(b1, b2) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "matmul: batch dims differ (broadcasting them is not supported) ([2, 3, 4] f32, [3, 4, 5] f32)");
    CHECK(amp_matmul(s, a) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "matmul: both inputs need at least one dim");

    amp_tensor *x = amp_zeros(AMP_SHAPE(4, 3), AMP_F32), *w = amp_zeros(AMP_SHAPE(5, 2), AMP_F32);
    amp_tensor *bias = amp_zeros(AMP_SHAPE(4), AMP_F32);
    CHECK(amp_linear(x, w, NULL) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "linear: the last dim of x and the weight's in_features differ ([4, 3] f32, [5, 2] f32)");
    CHECK(amp_linear(x, f53, bias) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "linear: the bias must be [out_features] ([4, 3] f32, [5, 3] f32, [4] f32)");
    CHECK(amp_linear(x, h53, NULL) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "linear: dtypes f32 and bf16 differ");
    CHECK(amp_linear(x, b1, NULL) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "linear: need x [.., in] and weight [out, in]");
    CHECK(amp_linear(NULL, w, NULL) == NULL); /* a NULL input keeps the first error */

    amp_tensor *all[] = {a, b, h, i, b1, b2, s, x, w, bias, f52, f53, h53};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        amp_tensor_free(all[k]);
}

int main(void)
{
    RUN(test_matmul_2d_matches_double);
    RUN(test_matmul_folds_leading_dims);
    RUN(test_matmul_batched);
    RUN(test_matmul_vectors_as_pytorch);
    RUN(test_matmul_gradients);
    RUN(test_linear_matches_double);
    RUN(test_linear_gradients);
    RUN(test_linear_bias_grad_sums_rows);
    RUN(test_16bit_matches_f32);
    RUN(test_16bit_gradients_keep_dtype);
    RUN(test_linear_bias_grad_many_rows);
    RUN(test_f16_linear_weight_grad);
    RUN(test_errors_name_op_and_shapes);
    return harness_done();
}
