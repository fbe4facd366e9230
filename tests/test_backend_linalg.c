/*
 * test_backend_linalg.c - the CPU backend's linalg primitives called
 * directly (backend/backend.h), for what the ops do not reach: the gemm
 * descriptor's contract (a bias or an epilogue only with alpha 1, beta 0,
 * batch 1), a scaled batch, the gelu epilogue with and without aux (also
 * fused across the GEMM's blocks, threads and bf16 paths), the
 * bias gradient's column sums, and empty attention.
 */
#include "backend/backend.h"
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/onednn/onednn.h"
#include "harness.h"

#include <string.h>

static const amp_backend *cpu(void) { return backend_of(AMP_CPU); }

static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    return amp_tensor_numel(a) == amp_tensor_numel(b) && amp_tensor_dtype(a) == amp_tensor_dtype(b) &&
           memcmp(amp_tensor_cdata(a), amp_tensor_cdata(b),
                  (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a))) == 0;
}

/* C [M, N] = A [M, K] B [K, N], f32, alpha 1, beta 0. */
static be_gemm_desc plain(const amp_tensor *A, const amp_tensor *B, amp_tensor *C, int64_t M, int64_t N, int64_t K)
{
    amp_dtype dt = amp_tensor_dtype(A);
    return (be_gemm_desc){.M = M, .N = N, .K = K, .batch = 1, .alpha = 1.0f, .A = amp_tensor_cdata(A),
                          .B = amp_tensor_cdata(B), .C = amp_tensor_data(C), .lda = K, .ldb = N, .ldc = N,
                          .adt = dt, .bdt = dt, .cdt = amp_tensor_dtype(C)};
}

static void test_gemm_bias_needs_beta_zero(void)
{
    amp_tensor *A = test_uniform(AMP_SHAPE(4, 3), AMP_F32, -1, 1, 1);
    amp_tensor *B = test_uniform(AMP_SHAPE(3, 5), AMP_F32, -1, 1, 2);
    amp_tensor *C = amp_zeros(AMP_SHAPE(4, 5), AMP_F32), *bias = test_uniform(AMP_SHAPE(5), AMP_F32, -1, 1, 3);
    be_gemm_desc g = plain(A, B, C, 4, 5, 3);
    g.bias = amp_tensor_cdata(bias);
    g.beta = 1.0f;
    CHECK_EQ_INT(cpu()->gemm(&g), AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "gemm: a bias or an epilogue needs alpha 1, beta 0 and batch 1");
    g.beta = 0.0f;
    g.ep = BE_EPI_RELU;
    g.batch = 2;
    CHECK_EQ_INT(cpu()->gemm(&g), AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "batch 1");
    amp_tensor_free(A), amp_tensor_free(B), amp_tensor_free(C), amp_tensor_free(bias);
}

/* alpha != 1 over a batch: each product as the single call would give it. */
static void test_gemm_scaled_batch_is_each_product(void)
{
    const int64_t M = 6, N = 7, K = 5, nb = 3;
    amp_tensor *A = test_uniform(AMP_SHAPE(nb, M, K), AMP_BF16, -1, 1, 4);
    amp_tensor *B = test_uniform(AMP_SHAPE(nb, K, N), AMP_BF16, -1, 1, 5);
    amp_tensor *C = amp_zeros(AMP_SHAPE(nb, M, N), AMP_F32), *one = amp_zeros(AMP_SHAPE(M, N), AMP_F32);
    be_gemm_desc g = plain(A, B, C, M, N, K);
    g.alpha = 0.375f;
    g.batch = nb, g.sa = M * K, g.sb = K * N, g.sc = M * N;
    CHECK_OK(cpu()->gemm(&g));
    for (int64_t b = 0; b < nb; b++) {
        be_gemm_desc s = plain(A, B, one, M, N, K);
        s.alpha = 0.375f;
        s.A = (const uint16_t *)s.A + b * M * K;
        s.B = (const uint16_t *)s.B + b * K * N;
        CHECK_OK(cpu()->gemm(&s));
        CHECK(memcmp((const float *)amp_tensor_cdata(C) + b * M * N, amp_tensor_cdata(one),
                     (size_t)(M * N) * sizeof(float)) == 0);
    }
    amp_tensor_free(A), amp_tensor_free(B), amp_tensor_free(C), amp_tensor_free(one);
}

/* The gelu epilogue: aux holds the plain product + bias, C the gelu op of
 * it, bit for bit; without aux, the same C. */
static void test_gemm_gelu_epilogue(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int d = 0; d < 3; d++) {
        const int64_t M = 9, N = 1100, K = 12; /* N past one gelu block */
        amp_tensor *A = test_uniform(AMP_SHAPE(M, K), dts[d], -1, 1, 6);
        amp_tensor *B = test_uniform(AMP_SHAPE(K, N), dts[d], -1, 1, 7);
        amp_tensor *bias = test_uniform(AMP_SHAPE(N), dts[d], -1, 1, 8);
        amp_tensor *C = amp_zeros(AMP_SHAPE(M, N), dts[d]), *C2 = amp_zeros(AMP_SHAPE(M, N), dts[d]);
        amp_tensor *aux = amp_zeros(AMP_SHAPE(M, N), dts[d]), *pre = amp_zeros(AMP_SHAPE(M, N), dts[d]);
        be_gemm_desc g = plain(A, B, pre, M, N, K);
        g.bias = amp_tensor_cdata(bias);
        CHECK_OK(cpu()->gemm(&g));
        g.C = amp_tensor_data(C), g.ep = BE_EPI_GELU, g.aux = amp_tensor_data(aux), g.ldaux = N;
        CHECK_OK(cpu()->gemm(&g));
        g.C = amp_tensor_data(C2), g.aux = NULL;
        CHECK_OK(cpu()->gemm(&g));
        amp_tensor *want = amp_gelu(pre, AMP_GELU_TANH);
        CHECK_MSG(same_bits(aux, pre), "%s: aux is not the pre-activation", amp_dtype_name(dts[d]));
        CHECK_MSG(want && same_bits(C, want), "%s: C is not gelu of the pre-activation", amp_dtype_name(dts[d]));
        CHECK_MSG(same_bits(C2, C), "%s: C differs without aux", amp_dtype_name(dts[d]));
        amp_temps_free();
        amp_tensor_free(A), amp_tensor_free(B), amp_tensor_free(bias), amp_tensor_free(C), amp_tensor_free(C2);
        amp_tensor_free(aux), amp_tensor_free(pre);
    }
}

/* The fused gelu across the GEMM's blocking, on ampc's own kernels: K
 * over several K blocks (an f32 C summing in place, a 16-bit one in the
 * f32 workspace), N over several N blocks, odd M, N and K (edge tiles),
 * both transposes, 1 and 2 threads, the bf16 product on each of its
 * paths: C and aux bit for bit the plain product + bias and then the gelu
 * op, with and without aux (in place in C). */
static void test_gemm_gelu_epilogue_across_blocks(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    const int64_t M = 37, N = 1061, K = 1093;
    onednn_set_mode(CPU_LIB_OWN);
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 4; t++) {
            const bool ta = t & 1, tb = t & 2;
            amp_tensor *A = test_uniform(ta ? AMP_SHAPE(K, M) : AMP_SHAPE(M, K), dts[d], -1, 1, 16 + t);
            amp_tensor *B = test_uniform(tb ? AMP_SHAPE(N, K) : AMP_SHAPE(K, N), dts[d], -1, 1, 26 + t);
            amp_tensor *bias = test_uniform(AMP_SHAPE(N), dts[d], -1, 1, 36 + t);
            amp_tensor *pre = amp_zeros(AMP_SHAPE(M, N), dts[d]);
            for (int path = 0; path < (dts[d] == AMP_BF16 ? 2 : 1); path++)
                for (int nt = 1; nt <= 2; nt++) {
                    gemm_bf16_set_mode(path ? GEMM_BF16_WIDEN : GEMM_BF16_AUTO);
                    amp_set_num_threads(nt);
                    be_gemm_desc g = plain(A, B, pre, M, N, K);
                    g.ta = ta, g.tb = tb, g.lda = ta ? M : K, g.ldb = tb ? K : N;
                    g.bias = t & 1 ? amp_tensor_cdata(bias) : NULL;
                    CHECK_OK(cpu()->gemm(&g));
                    amp_tensor *want = amp_gelu(pre, AMP_GELU_TANH);
                    amp_tensor *C = amp_zeros(AMP_SHAPE(M, N), dts[d]), *aux = amp_zeros(AMP_SHAPE(M, N), dts[d]);
                    amp_tensor *C2 = amp_zeros(AMP_SHAPE(M, N), dts[d]);
                    g.C = amp_tensor_data(C), g.ep = BE_EPI_GELU, g.aux = amp_tensor_data(aux), g.ldaux = N;
                    CHECK_OK(cpu()->gemm(&g));
                    g.C = amp_tensor_data(C2), g.aux = NULL;
                    CHECK_OK(cpu()->gemm(&g));
                    CHECK_MSG(same_bits(aux, pre), "%s ta %d tb %d path %d, %d threads: aux is not the pre-activation",
                              amp_dtype_name(dts[d]), ta, tb, path, nt);
                    CHECK_MSG(want && same_bits(C, want), "%s ta %d tb %d path %d, %d threads: C is not gelu of it",
                              amp_dtype_name(dts[d]), ta, tb, path, nt);
                    CHECK_MSG(same_bits(C2, want), "%s ta %d tb %d path %d, %d threads: C differs without aux",
                              amp_dtype_name(dts[d]), ta, tb, path, nt);
                    amp_temps_free();
                    amp_tensor_free(C), amp_tensor_free(C2), amp_tensor_free(aux);
                }
            amp_tensor_free(A), amp_tensor_free(B), amp_tensor_free(bias), amp_tensor_free(pre);
        }
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    onednn_set_mode(CPU_LIB_AUTO);
    amp_set_num_threads(0);
}

/* K = 0: the product is empty, so C is gelu(bias) on every row (the
 * GEMM's trivial path runs the epilogue over all of C), and aux the bias. */
static void test_gemm_gelu_epilogue_empty_k(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int d = 0; d < 3; d++) {
        const int64_t M = 70, N = 1030;
        amp_tensor *A = amp_zeros(AMP_SHAPE(M, 1), dts[d]), *B = amp_zeros(AMP_SHAPE(1, N), dts[d]);
        amp_tensor *bias = test_uniform(AMP_SHAPE(N), dts[d], -3, 3, 46);
        amp_tensor *C = amp_zeros(AMP_SHAPE(M, N), dts[d]), *aux = amp_zeros(AMP_SHAPE(M, N), dts[d]);
        be_gemm_desc g = plain(A, B, C, M, N, 0);
        g.lda = 1, g.bias = amp_tensor_cdata(bias), g.ep = BE_EPI_GELU, g.aux = amp_tensor_data(aux), g.ldaux = N;
        CHECK_OK(cpu()->gemm(&g));
        amp_tensor *want = amp_gelu(bias, AMP_GELU_TANH);
        const size_t es = amp_dtype_size(dts[d]);
        bool ok = want != NULL;
        for (int64_t r = 0; ok && r < M; r++)
            ok = memcmp((const char *)amp_tensor_cdata(C) + (size_t)(r * N) * es, amp_tensor_cdata(want), (size_t)N * es) ==
                     0 &&
                 memcmp((const char *)amp_tensor_cdata(aux) + (size_t)(r * N) * es, amp_tensor_cdata(bias), (size_t)N * es) ==
                     0;
        CHECK_MSG(ok, "%s: K = 0 is not gelu(bias) on every row", amp_dtype_name(dts[d]));
        amp_temps_free();
        amp_tensor_free(A), amp_tensor_free(B), amp_tensor_free(bias), amp_tensor_free(C), amp_tensor_free(aux);
    }
}

static void test_bias_grad_sums_columns(void)
{
    const int64_t rows = 300, cols = 7;
    amp_tensor *g = test_uniform(AMP_SHAPE(rows, cols), AMP_F16, -1, 1, 9), *db = amp_zeros(AMP_SHAPE(cols), AMP_F32);
    CHECK_OK(cpu()->bias_grad(amp_tensor_cdata(g), AMP_F16, rows, cols, amp_tensor_data(db), AMP_F32));
    for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t r = 0; r < rows; r++)
            s += amp_tensor_get(g, r * cols + j);
        CHECK_NEAR(amp_tensor_get(db, j), s, 1e-4);
    }
    amp_tensor_free(g), amp_tensor_free(db);
}

static void test_attention_of_nothing_is_ok(void)
{
    be_attn_desc a = {.heads = 0, .T = 4, .D = 2, .scale = 1.0f, .dt = AMP_F32};
    CHECK_OK(cpu()->attention(&a));
    CHECK_OK(cpu()->attention_backward(&a));
}

int main(void)
{
    RUN(test_gemm_bias_needs_beta_zero);
    RUN(test_gemm_scaled_batch_is_each_product);
    RUN(test_gemm_gelu_epilogue);
    RUN(test_gemm_gelu_epilogue_across_blocks);
    RUN(test_gemm_gelu_epilogue_empty_k);
    RUN(test_bias_grad_sums_columns);
    RUN(test_attention_of_nothing_is_ok);
    return harness_done();
}
