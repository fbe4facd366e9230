/*
 * test_onednn_gemm.c - the GEMMs that run through oneDNN (when it is built
 * in), the batched entry point with bias and relu epilogues on both
 * backends, the fused linear + relu op that nn's sequential uses, and the
 * fused linear + gelu (tanh) op of the GPT's fc1.
 *
 * Results are checked against products in double; the fused ops against
 * the two ops in sequence (bit for bit on ampc's own kernels, where the
 * same GEMM runs either way; linear + gelu bit for bit with oneDNN too,
 * since its GEMM is plain linear's). Without oneDNN every case still runs, on
 * ampc's kernels, and the "taken" checks expect oneDNN to decline.
 */
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/onednn/onednn.h"
#include "base/base.h"
#include "gemm_ref.h"
#include "harness.h"
#include "ops/fused.h"

#include <stdlib.h>

static uint64_t rng_state = 1234;
static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* rows x cols at row stride ld, values exact in bf16 when bf16 is set
 * (in f16 with matrix16); the padding holds 1e30 (it would show if read). */
static amp_dtype round_to = AMP_BF16;
static float *matrix(int64_t rows, int64_t cols, int64_t ld, bool bf16)
{
    float *m = malloc(sizeof(float) * (size_t)(rows * ld + 1));
    for (int64_t i = 0; i < rows * ld + 1; i++)
        m[i] = 1e30f;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float v = frand();
            if (bf16) {
                uint16_t h;
                amp_convert(&v, AMP_F32, &h, round_to, 1);
                amp_convert(&h, round_to, &v, AMP_F32, 1);
            }
            m[i * ld + j] = v;
        }
    return m;
}

static uint16_t *to_bf16(const float *f, int64_t n)
{
    uint16_t *h = malloc(2 * (size_t)(n + 1));
    amp_convert(f, AMP_F32, h, round_to, (size_t)n);
    return h;
}

/* One product on oneDNN (mode ONEDNN), f32 or bf16 inputs with an f32 or
 * bf16 C, checked element by element; C's padding must stay untouched and
 * with beta == 0 a NaN in C must not leak. */
static void check_product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad,
                          amp_dtype in_dt, amp_dtype c_dt)
{
    const bool half = in_dt != AMP_F32;
    round_to = half ? in_dt : c_dt == AMP_F32 ? AMP_BF16 : c_dt;
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    float *A = matrix(ar, ac, lda, half), *B = matrix(br, bc, ldb, half), *C = matrix(M, N, ldc, c_dt != AMP_F32);
    if (beta == 0)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = NAN;
    double *ref = malloc(sizeof(double) * (size_t)(M * N)), *bound = malloc(sizeof(double) * (size_t)(M * N));
    naive(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ref, bound);
    uint16_t *Ah = half ? to_bf16(A, ar * lda) : NULL, *Bh = half ? to_bf16(B, br * ldb) : NULL;
    uint16_t *Ch = c_dt != AMP_F32 ? to_bf16(C, M * ldc) : NULL;
    amp_status st = AMP_ERR_STATE;
    bool taken = onednn_gemm(ta, tb, 1, M, N, K, alpha, half ? (void *)Ah : (void *)A, in_dt, lda, 0,
                             half ? (void *)Bh : (void *)B, in_dt, ldb, 0, beta, Ch ? (void *)Ch : (void *)C, c_dt,
                             ldc, 0, NULL, AMP_F32, CPU_ACT_NONE, &st);
    /* oneDNN 2.6 has no kernel that accumulates (beta != 0) into a C with
     * padded rows: it may decline those; everything else it must take. */
    bool must_take = onednn_available() && (beta == 0 || pad == 0);
    CHECK_MSG(taken == must_take || (taken && !must_take && onednn_available()),
              "oneDNN %s a %s x %s -> %s product ta=%d tb=%d %lldx%lldx%lld alpha=%g beta=%g pad=%d (available: %d)",
              taken ? "took" : "declined", amp_dtype_name(in_dt), amp_dtype_name(in_dt), amp_dtype_name(c_dt), ta, tb,
              (long long)M, (long long)N, (long long)K, alpha, beta, pad, onednn_available());
    if (!taken)
        st = gemm_lowp(ta, tb, M, N, K, alpha, half ? (void *)Ah : (void *)A, in_dt, lda,
                       half ? (void *)Bh : (void *)B, in_dt, ldb, beta, Ch ? (void *)Ch : (void *)C, c_dt, ldc);
    CHECK_OK(st);
    if (Ch)
        amp_convert(Ch, c_dt, C, AMP_F32, (size_t)(M * ldc));
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double want = ref[i * N + j], got = C[i * ldc + j];
            /* f32 accumulation; a bf16 C adds one rounding (2^-8 relative) */
            double tol = 1e-6 * (double)(K + 2) * bound[i * N + j] + 1e-30;
            tol += c_dt == AMP_BF16 ? fabs(want) / 256 : c_dt == AMP_F16 ? fabs(want) / 2048 + 6e-8 : 0;
            if (!(fabs(got - want) <= tol) && bad++ < 3)
                CHECK_MSG(0, "%s->%s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g: C[%lld,%lld] = %.9g, want %.9g",
                          amp_dtype_name(in_dt), amp_dtype_name(c_dt), ta, tb, (long long)M, (long long)N,
                          (long long)K, alpha, beta, (long long)i, (long long)j, got, want);
            if (j == N - 1)
                for (int64_t j2 = N; j2 < ldc; j2++)
                    if (!(C[i * ldc + j2] >= 1e29f) && bad++ < 3)
                        CHECK_MSG(0, "padding of C row %lld written", (long long)i);
        }
    free(A), free(B), free(C), free(ref), free(bound), free(Ah), free(Bh), free(Ch);
}

static void test_products_match_double(void)
{
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 129}, {64, 10, 300}, {100, 3, 17}};
    const float ab[][2] = {{1, 0}, {0.5f, 1}, {-2, 0.25f}};
    onednn_set_mode(CPU_LIB_ONEDNN);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (size_t a = 0; a < 3; a++) {
                int pad = (int)((s + a) % 2) * 3;
                check_product(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], ab[a][0], ab[a][1], pad,
                              AMP_F32, AMP_F32);
                check_product(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], ab[a][0], ab[a][1], pad,
                              AMP_BF16, AMP_F32);
                check_product(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], ab[a][0], ab[a][1], pad,
                              AMP_BF16, AMP_BF16);
                /* f16: native where this oneDNN has it, else widened to f32 */
                check_product(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], ab[a][0], ab[a][1], pad,
                              AMP_F16, AMP_F16);
                check_product(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], ab[a][0], ab[a][1], pad,
                              AMP_F16, AMP_F32);
            }
    onednn_set_mode(CPU_LIB_AUTO);
}

/* What oneDNN must decline, so that ampc's kernels run it. */
static void test_declines_what_it_cannot_do(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4], bias[2] = {1, 1};
    uint16_t h[4] = {0};
    amp_status st = AMP_OK;
    onednn_set_mode(CPU_LIB_ONEDNN);
    CHECK(!onednn_gemm(false, false, 1, 2, 2, 2, 1, a, AMP_F32, 2, 0, h, AMP_BF16, 2, 0, 0, c, AMP_F32, 2, 0, NULL,
                       AMP_F32, CPU_ACT_NONE, &st)); /* mixed inputs */
    CHECK(!onednn_gemm(false, false, 1, 2, 2, 2, 1, a, AMP_I32, 2, 0, b, AMP_I32, 2, 0, 0, c, AMP_F32, 2, 0, NULL,
                       AMP_F32, CPU_ACT_NONE, &st)); /* integers */
    CHECK(!onednn_gemm(false, false, 1, 2, 2, 2, 0.5f, a, AMP_F32, 2, 0, b, AMP_F32, 2, 0, 0, c, AMP_F32, 2, 0, bias,
                       AMP_F32, CPU_ACT_NONE, &st)); /* alpha with a bias: ampc's order of operations */
    CHECK(!onednn_gemm(false, false, 1, 0, 2, 2, 1, a, AMP_F32, 2, 0, b, AMP_F32, 2, 0, 0, c, AMP_F32, 2, 0, NULL,
                       AMP_F32, CPU_ACT_NONE, &st)); /* empty */
    onednn_set_mode(CPU_LIB_OWN);
    CHECK(!onednn_gemm(false, false, 1, 2, 2, 2, 1, a, AMP_F32, 2, 0, b, AMP_F32, 2, 0, 0, c, AMP_F32, 2, 0, NULL,
                       AMP_F32, CPU_ACT_NONE, &st)); /* told not to */
    CHECK_EQ_INT(st, AMP_OK); /* a declined call leaves the status alone */
    /* gemm_batched takes a bias only onto a fresh C */
    CHECK_EQ_INT(gemm_batched(false, false, 1, 2, 2, 2, a, AMP_F32, 2, 0, b, AMP_F32, 2, 0, 1.0f, c, AMP_F32, 2, 0,
                              bias, CPU_ACT_NONE),
                 AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "bias with beta");
    onednn_set_mode(CPU_LIB_AUTO);
}

/* gemm_batched: batch products with a shared A or B, a bias row and a
 * relu, against double, on both backends. */
static void check_batched(cpu_lib_mode mode, amp_dtype dt, bool share_a, bool share_b, bool bias, cpu_act act,
                          float beta)
{
    round_to = AMP_BF16;
    const int64_t batch = 3, M = 9, N = 20, K = 33;
    const bool half = dt == AMP_BF16;
    const int64_t sa = share_a ? 0 : M * K, sb = share_b ? 0 : K * N, sc = M * N;
    float *A = matrix(share_a ? M : batch * M, K, K, half), *B = matrix(share_b ? K : batch * K, N, N, half);
    float *C = matrix(batch * M, N, N, half), *bv = matrix(1, N, N, half);
    double *ref = malloc(sizeof(double) * (size_t)(batch * M * N)), *bound = malloc(sizeof(double) * (size_t)(batch * M * N));
    for (int64_t k = 0; k < batch; k++) {
        naive(false, false, M, N, K, 1.0, A + k * sa, K, B + k * sb, N, beta, C + k * sc, N, ref + k * sc,
              bound + k * sc);
        for (int64_t i = 0; i < M * N; i++) {
            double v = ref[k * sc + i] + (bias ? bv[i % N] : 0);
            bound[k * sc + i] += bias ? fabs(bv[i % N]) : 0;
            ref[k * sc + i] = act == CPU_ACT_RELU && v < 0 ? 0 : v;
        }
    }
    uint16_t *Ah = NULL, *Bh = NULL, *Ch = NULL, *bh = NULL;
    if (half) {
        Ah = to_bf16(A, (share_a ? M : batch * M) * K), Bh = to_bf16(B, (share_b ? K : batch * K) * N);
        Ch = to_bf16(C, batch * M * N), bh = to_bf16(bv, N);
    }
    onednn_set_mode(mode);
    CHECK_OK(gemm_batched(false, false, batch, M, N, K, half ? (void *)Ah : (void *)A, dt, K, sa,
                          half ? (void *)Bh : (void *)B, dt, N, sb, beta, half ? (void *)Ch : (void *)C, dt, N, sc,
                          bias ? (half ? (void *)bh : (void *)bv) : NULL, act));
    onednn_set_mode(CPU_LIB_AUTO);
    if (half)
        amp_convert(Ch, AMP_BF16, C, AMP_F32, (size_t)(batch * M * N));
    int bad = 0;
    for (int64_t i = 0; i < batch * M * N; i++) {
        double tol = 1e-6 * (double)(K + 3) * bound[i] + (half ? fabs(ref[i]) / 256 : 0) + 1e-30;
        if (!(fabs(C[i] - ref[i]) <= tol) && bad++ < 3)
            CHECK_MSG(0, "%s %s share_a=%d share_b=%d bias=%d relu=%d beta=%g: C[%lld] = %.9g, want %.9g",
                      mode == CPU_LIB_OWN ? "own" : "onednn", amp_dtype_name(dt), share_a, share_b, bias,
                      act == CPU_ACT_RELU, beta, (long long)i, C[i], ref[i]);
    }
    free(A), free(B), free(C), free(bv), free(ref), free(bound), free(Ah), free(Bh), free(Ch), free(bh);
}

static void test_batched_with_bias_and_relu(void)
{
    const cpu_lib_mode modes[2] = {CPU_LIB_OWN, CPU_LIB_ONEDNN};
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int m = 0; m < 2; m++)
        for (int d = 0; d < 2; d++)
            for (int c = 0; c < 8; c++) {
                check_batched(modes[m], dts[d], c == 1, c == 2, c & 4, (c & 1) ? CPU_ACT_RELU : CPU_ACT_NONE,
                              c == 3 ? 1.0f : 0.0f);
            }
}

/* The cache keys primitives by thread count: a change of
 * amp_set_num_threads gets a primitive made for it, and right results. */
static void test_thread_count_changes(void)
{
    int before = amp_get_num_threads();
    onednn_set_mode(CPU_LIB_ONEDNN);
    for (int nt = 1; nt <= 2; nt++) {
        amp_set_num_threads(nt);
        check_product(false, true, 96, 80, 200, 1, 0, 0, AMP_F32, AMP_F32);
        check_product(false, true, 96, 80, 200, 1, 0, 0, AMP_BF16, AMP_BF16);
    }
    amp_set_num_threads(before);
    onednn_set_mode(CPU_LIB_AUTO);
}

/* oneDNN's scratchpad comes from ampc's caching allocator: repeating a
 * product takes no fresh memory after the first call. */
static void test_steady_state_takes_no_fresh_memory(void)
{
#ifdef AMPC_NO_CACHE
    harness_skip("the caching allocator is off (sanitizer build)");
#else
    const int64_t M = 128, N = 256, K = 512;
    float *A = matrix(M, K, K, true), *B = matrix(K, N, N, true);
    uint16_t *Ah = to_bf16(A, M * K), *Bh = to_bf16(B, K * N), *C = malloc(2 * (size_t)(M * N));
    onednn_set_mode(CPU_LIB_ONEDNN);
    /* Warm-up: on several threads the product runs in chunks, each with
     * its own scratchpad, and how many run at once in a call depends on
     * when the workers arrive; a few calls reach the most. */
    for (int r = 0; r < 10; r++)
        CHECK_OK(gemm_lowp(false, false, M, N, K, 1, Ah, AMP_BF16, K, Bh, AMP_BF16, N, 0, C, AMP_BF16, N));
    size_t before = amp_memory_get_stats().os_allocs;
    for (int r = 0; r < 5; r++)
        CHECK_OK(gemm_lowp(false, false, M, N, K, 1, Ah, AMP_BF16, K, Bh, AMP_BF16, N, 0, C, AMP_BF16, N));
    CHECK_EQ_INT(amp_memory_get_stats().os_allocs, before);
    onednn_set_mode(CPU_LIB_AUTO);
    free(A), free(B), free(Ah), free(Bh), free(C);
#endif
}

/* ---------------------------------------------------- fused linear + relu */

static amp_tensor *leaf(amp_shape s, amp_dtype dt)
{
    amp_tensor *t = amp_randn(s, AMP_F32, 0.0, 1.0), *c = amp_to(t, dt), *l = amp_clone(c);
    amp_tensor_free(t);
    amp_temps_free();
    amp_tensor_set_requires_grad(l, true);
    return l;
}

static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    return a && b && amp_tensor_numel(a) == amp_tensor_numel(b) && amp_tensor_dtype(a) == amp_tensor_dtype(b) &&
           memcmp(amp_tensor_data((amp_tensor *)a), amp_tensor_data((amp_tensor *)b),
                  (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a))) == 0;
}

/* Largest |a - b| relative to max |b| (both copied out as f32). */
static double rel_diff(const amp_tensor *a, const amp_tensor *b)
{
    int64_t n = amp_tensor_numel(a);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    amp_tensor_copy_out(a, x, AMP_F32);
    amp_tensor_copy_out(b, y, AMP_F32);
    double d = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)x[i] - y[i]));
        m = fmax(m, fabs((double)y[i]));
    }
    free(x), free(y);
    return d / m;
}

/* fused(x) against relu(linear(x)): values and the three gradients. */
static void check_fused_linear(cpu_lib_mode mode, amp_dtype dt)
{
    amp_tensor *x = leaf(AMP_SHAPE(6, 5, 40), dt), *w = leaf(AMP_SHAPE(24, 40), dt), *b = leaf(AMP_SHAPE(24), dt);
    amp_tensor *g = amp_randn(AMP_SHAPE(6, 5, 24), dt, 0.0, 1.0);
    amp_tensor *got[4], *want[4];
    onednn_set_mode(mode);
    for (int fused = 0; fused < 2; fused++) {
        amp_tensor **out = fused ? got : want;
        amp_tensor *y = fused ? op_linear_relu(x, w, b) : amp_relu(amp_linear(x, w, b));
        out[0] = amp_clone(y);
        CHECK_OK(amp_backward_with(y, g));
        amp_tensor *ts[3] = {x, w, b};
        for (int i = 0; i < 3; i++) {
            out[i + 1] = amp_clone(amp_tensor_grad(ts[i]));
            amp_tensor_clear_grad(ts[i]);
        }
        amp_temps_free();
    }
    onednn_set_mode(CPU_LIB_AUTO);
    const char *names[4] = {"output", "dx", "dw", "db"};
    for (int i = 0; i < 4; i++) {
        /* ampc's kernels: the same GEMM either way, so the same bits. With
         * oneDNN the sums' order may differ by primitive (the relu is
         * ampc's, after it, on both): the same values up to that. */
        if (mode == CPU_LIB_OWN)
            CHECK_MSG(same_bits(got[i], want[i]), "own %s: fused linear+relu %s differs from linear then relu",
                      amp_dtype_name(dt), names[i]);
        else
            CHECK_MSG(rel_diff(got[i], want[i]) <= (dt == AMP_F32 ? 1e-5 : 2e-2), "onednn %s: fused %s off by %g",
                      amp_dtype_name(dt), names[i], rel_diff(got[i], want[i]));
        amp_tensor_free(got[i]);
        amp_tensor_free(want[i]);
    }
    amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b), amp_tensor_free(g);
}

static void test_fused_linear_relu_equals_the_two_ops(void)
{
    check_fused_linear(CPU_LIB_OWN, AMP_F32);
    check_fused_linear(CPU_LIB_OWN, AMP_BF16);
    check_fused_linear(CPU_LIB_ONEDNN, AMP_F32);
    check_fused_linear(CPU_LIB_ONEDNN, AMP_BF16);
}

/* A NaN in x reaches the output through the fused relu, on ampc's kernels
 * and on oneDNN's, as through amp_relu (PyTorch's relu propagates NaN):
 * oneDNN's relu post-op turned it into 0, so an fp32 mlp given NaN inputs
 * produced finite logits. Row 0 of x holds a NaN, so row 0 of the output
 * is NaN everywhere; the other rows are finite. */
static void test_fused_linear_relu_keeps_a_nan_input(void)
{
    const cpu_lib_mode modes[2] = {CPU_LIB_OWN, CPU_LIB_ONEDNN};
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int m = 0; m < 2; m++)
        for (int d = 0; d < 2; d++) {
            amp_tensor *x = amp_randn(AMP_SHAPE(4, 40), AMP_F32, 0.0, 1.0);
            ((float *)amp_tensor_data(x))[3] = NAN;
            amp_tensor *xd = amp_to(x, dts[d]), *w = amp_randn(AMP_SHAPE(24, 40), dts[d], 0.0, 1.0);
            amp_tensor *b = amp_randn(AMP_SHAPE(24), dts[d], 0.0, 1.0);
            onednn_set_mode(modes[m]);
            amp_tensor *y = amp_to(op_linear_relu(xd, w, b), AMP_F32);
            onednn_set_mode(CPU_LIB_AUTO);
            CHECK(y != NULL);
            if (y) {
                const float *v = amp_tensor_cdata(y);
                int nan0 = 0, nan_rest = 0;
                for (int i = 0; i < 4 * 24; i++)
                    *(i < 24 ? &nan0 : &nan_rest) += isnan(v[i]);
                CHECK_MSG(nan0 == 24 && nan_rest == 0, "%s %s: %d of row 0's 24 outputs NaN, %d of the rest",
                          m ? "onednn" : "own", amp_dtype_name(dts[d]), nan0, nan_rest);
            }
            amp_temps_free();
            amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b);
        }
}

static amp_tensor *fused_fn(amp_tensor **in, void *ctx)
{
    (void)ctx;
    return op_linear_relu(in[0], in[1], in[2]);
}

static void test_fused_linear_relu_gradcheck(void)
{
    /* Inputs away from the kink (|pre-activation| not tiny) so that the
     * finite differences see one side of the relu. */
    amp_tensor *in[3] = {leaf(AMP_SHAPE(4, 7), AMP_F32), leaf(AMP_SHAPE(5, 7), AMP_F32), leaf(AMP_SHAPE(5), AMP_F32)};
    for (int m = 0; m < 2; m++) {
        onednn_set_mode(m ? CPU_LIB_ONEDNN : CPU_LIB_OWN);
        CHECK(gradcheck(m ? "linear_relu onednn" : "linear_relu own", fused_fn, in, 3, NULL, 1e-3, 2e-3, 2e-3));
    }
    onednn_set_mode(CPU_LIB_AUTO);
    for (int i = 0; i < 3; i++)
        amp_tensor_free(in[i]);
}

/* op_linear_gelu against gelu_tanh(linear(...)): the output and the
 * gradients of x, w and the bias bit for bit, with and without a bias, in
 * the inputs' dtype or under autocast (f32 leaves, the op in ad; the
 * gradients come back to the f32 leaves through the casts), on ampc's
 * kernels and on oneDNN's (the same GEMM either way: the fused op's GEMM
 * is plain linear's). Without grad the result is the same and nothing is
 * kept (ASan would see a leaked pre-activation). */
static void check_fused_linear_gelu(cpu_lib_mode mode, amp_dtype dt, bool bias, amp_dtype ad)
{
    const amp_dtype leaf_dt = ad != AMP_F32 ? AMP_F32 : dt, out_dt = ad != AMP_F32 ? ad : dt;
    amp_tensor *x = leaf(AMP_SHAPE(3, 5, 40), leaf_dt), *w = leaf(AMP_SHAPE(24, 40), leaf_dt);
    amp_tensor *b = bias ? leaf(AMP_SHAPE(24), leaf_dt) : NULL;
    amp_tensor *g = amp_randn(AMP_SHAPE(3, 5, 24), out_dt, 0.0, 1.0);
    amp_tensor *got[5] = {0}, *want[5] = {0};
    onednn_set_mode(mode);
    for (int fused = 0; fused < 2; fused++) {
        amp_tensor **out = fused ? got : want;
        if (ad != AMP_F32)
            CHECK_OK(amp_autocast_begin(AMP_CPU, ad));
        amp_tensor *y = fused ? op_linear_gelu(x, w, b) : amp_gelu(amp_linear(x, w, b), AMP_GELU_TANH);
        if (ad != AMP_F32)
            CHECK_OK(amp_autocast_end());
        CHECK_MSG(y != NULL, "%s", amp_last_error());
        if (!y)
            break;
        out[0] = amp_clone(y);
        CHECK_OK(amp_backward_with(y, g));
        amp_tensor *ts[3] = {x, w, b};
        for (int i = 0; i < (bias ? 3 : 2); i++) {
            out[i + 1] = amp_clone(amp_tensor_grad(ts[i]));
            amp_tensor_clear_grad(ts[i]);
        }
        amp_no_grad_begin();
        if (ad != AMP_F32)
            CHECK_OK(amp_autocast_begin(AMP_CPU, ad));
        out[4] = amp_clone(fused ? op_linear_gelu(x, w, b) : amp_gelu(amp_linear(x, w, b), AMP_GELU_TANH));
        if (ad != AMP_F32)
            CHECK_OK(amp_autocast_end());
        amp_no_grad_end();
        amp_temps_free();
    }
    onednn_set_mode(CPU_LIB_AUTO);
    const char *names[5] = {"output", "dx", "dw", "db", "output without grad"};
    for (int i = 0; i < 5; i++) {
        if (i == 3 && !bias)
            continue;
        const amp_dtype want_dt = i == 0 || i == 4 ? out_dt : leaf_dt;
        CHECK_MSG(got[i] && amp_tensor_dtype(got[i]) == want_dt && same_bits(got[i], want[i]),
                  "%s %s%s%s%s: fused linear+gelu %s differs from linear then gelu",
                  mode == CPU_LIB_OWN ? "own" : "onednn", amp_dtype_name(dt), bias ? " with bias" : " without bias",
                  ad != AMP_F32 ? ", autocast " : "", ad != AMP_F32 ? amp_dtype_name(ad) : "", names[i]);
        amp_tensor_free(got[i]);
        amp_tensor_free(want[i]);
    }
    amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(b), amp_tensor_free(g);
}

static void test_fused_linear_gelu_equals_the_two_ops(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int m = 0; m < 2; m++)
        for (int bias = 0; bias < 2; bias++) {
            const cpu_lib_mode mode = m ? CPU_LIB_ONEDNN : CPU_LIB_OWN;
            for (int d = 0; d < 3; d++)
                check_fused_linear_gelu(mode, dts[d], bias, AMP_F32);
            check_fused_linear_gelu(mode, AMP_F32, bias, AMP_BF16);
            check_fused_linear_gelu(mode, AMP_F32, bias, AMP_F16);
        }
}

static amp_tensor *fused_gelu_fn(amp_tensor **in, void *ctx)
{
    return op_linear_gelu(in[0], in[1], ctx ? in[2] : NULL);
}

/* The gradients themselves, by finite differences (not only equal to the
 * two ops'), with and without a bias. */
static void test_fused_linear_gelu_gradcheck(void)
{
    amp_tensor *in[3] = {leaf(AMP_SHAPE(2, 3, 7), AMP_F32), leaf(AMP_SHAPE(5, 7), AMP_F32), leaf(AMP_SHAPE(5), AMP_F32)};
    int with_bias = 1;
    CHECK(gradcheck("linear_gelu with bias", fused_gelu_fn, in, 3, &with_bias, 1e-3, 2e-3, 2e-3));
    CHECK(gradcheck("linear_gelu without bias", fused_gelu_fn, in, 2, NULL, 1e-3, 2e-3, 2e-3));
    for (int i = 0; i < 3; i++)
        amp_tensor_free(in[i]);
}

/* A sequential of Linear, ReLU, Linear, ReLU, Linear runs the fused op for
 * each pair and gives what the layers' ops give one by one. */
static void test_sequential_fuses_linear_relu(void)
{
    amp_module *seq = amp_nn_sequential();
    amp_module *l1 = amp_nn_linear(12, 16, true), *l2 = amp_nn_linear(16, 8, true), *l3 = amp_nn_linear(8, 3, false);
    amp_sequential_add(seq, l1);
    amp_sequential_add(seq, amp_nn_relu());
    amp_sequential_add(seq, l2);
    amp_sequential_add(seq, amp_nn_relu());
    amp_sequential_add(seq, l3);
    amp_tensor *x = amp_randn(AMP_SHAPE(5, 12), AMP_F32, 0.0, 1.0);
    onednn_set_mode(CPU_LIB_OWN);
    amp_tensor *got = amp_module_forward(seq, x);
    amp_tensor *h = amp_relu(amp_linear(x, amp_module_param(l1, 0, NULL), amp_module_param(l1, 1, NULL)));
    h = amp_relu(amp_linear(h, amp_module_param(l2, 0, NULL), amp_module_param(l2, 1, NULL)));
    amp_tensor *want = amp_linear(h, amp_module_param(l3, 0, NULL), NULL);
    CHECK(same_bits(got, want));
    onednn_set_mode(CPU_LIB_AUTO);
    amp_temps_free();
    amp_tensor_free(x);
    amp_module_free(seq);
}

/* amp_cpu_kernels says who runs the products, and follows the mode. */
static void test_cpu_kernels_string(void)
{
    const char *k = amp_cpu_kernels();
    CHECK(strstr(k, "ampc f32 ") != NULL && strstr(k, ", bf16 ") != NULL);
    CHECK_MSG((strstr(k, "oneDNN ") != NULL) == onednn_available(), "\"%s\" (oneDNN available: %d)", k,
              onednn_available());
    onednn_set_mode(CPU_LIB_OWN);
    CHECK(!onednn_available() || strstr(amp_cpu_kernels(), "AMPC_CPU_LIB=own") != NULL);
    onednn_set_mode(CPU_LIB_AUTO);
    CHECK(!onednn_available() || strstr(amp_cpu_kernels(), "AMPC_CPU_LIB=auto") != NULL);
}

int main(void)
{
    printf("%s, available: %d\n", onednn_version(), onednn_available());
    RUN(test_products_match_double);
    RUN(test_declines_what_it_cannot_do);
    RUN(test_batched_with_bias_and_relu);
    RUN(test_thread_count_changes);
    RUN(test_steady_state_takes_no_fresh_memory);
    RUN(test_fused_linear_relu_equals_the_two_ops);
    RUN(test_fused_linear_relu_keeps_a_nan_input);
    RUN(test_fused_linear_relu_gradcheck);
    RUN(test_sequential_fuses_linear_relu);
    RUN(test_fused_linear_gelu_equals_the_two_ops);
    RUN(test_fused_linear_gelu_gradcheck);
    RUN(test_cpu_kernels_string);
    return harness_done();
}
