/*
 * test_gemv.c - the few-row products a decode step runs (x W^T, B
 * transposed): the f32 gemv (gemv_f32.c) against the double reference and
 * against the blocked GEMM it replaces, on odd sizes (N not a multiple of
 * 16, K odd and past the vector's 16), alpha / beta, padded leading
 * dimensions, its portable kernel, threads; the bf16 gemv against the
 * widening GEMM on the same sizes; and generation through the KV cache
 * drawing the same tokens with the gemvs as without them.
 */
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/gemm/gemm_kernels.h"
#include "base/base.h"
#include "gemm_operands.h"
#include "gemm_ref.h"
#include "harness.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static const int64_t ns[] = {1, 15, 17, 63, 65, 1153}, ks[] = {1, 3, 15, 17, 31, 385, 1537};

/* An f32 sum of K products in 16 lanes then a tree: its error is at most
 * about (K / 16 + 5) units of rounding of the terms' magnitudes. */
static double f32_tol(int64_t K, double bound) { return 2.0 * (double)(K / 16 + 6) * FLT_EPSILON * bound + 1e-30; }

/* gemm_f32 of M x N x K with B transposed into C (row stride ldc, beta
 * over C's values c0): the number of outputs off the double reference,
 * with the path taken in *path. */
static int f32_case(int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad, const char **path)
{
    const int64_t lda = K + pad, ldb = K + pad, ldc = N + pad;
    float *A = matrix(M, K, lda), *B = matrix(N, K, ldb), *C = matrix(M, N, ldc), *C0 = malloc(sizeof(float) * (size_t)(M * ldc));
    memcpy(C0, C, sizeof(float) * (size_t)(M * ldc));
    double *ref = malloc(sizeof(double) * (size_t)(M * N)), *bound = malloc(sizeof(double) * (size_t)(M * N));
    naive(false, true, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc, ref, bound);
    CHECK_OK(gemm_f32(false, true, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    *path = gemm_path;
    int bad = 0;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++)
            if (fabs(C[i * ldc + j] - ref[i * N + j]) > f32_tol(K, bound[i * N + j]))
                bad++;
        for (int64_t j = N; j < ldc; j++) /* the padding stays */
            bad += C[i * ldc + j] != 1e30f;
    }
    free(A), free(B), free(C), free(C0), free(ref), free(bound);
    return bad;
}

static void one_thread(int *saved)
{
    *saved = amp_get_num_threads();
    amp_set_num_threads(1);
}

/* M = 1 .. 4 rows take the gemv; its outputs are within an f32 sum's
 * rounding of the double reference on every odd size; 5 rows do not. */
static void test_f32_gemv_matches_the_reference_on_odd_sizes(void)
{
    int saved, cases = 0;
    one_thread(&saved);
    const float ab[][2] = {{1.0f, 0.0f}, {-0.5f, 0.75f}};
    for (int64_t M = 1; M <= 4; M++)
        for (size_t n = 0; n < sizeof ns / sizeof ns[0]; n++)
            for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
                const size_t v = (size_t)M + n + k;
                const char *path;
                const int bad = f32_case(M, ns[n], ks[k], ab[v % 2][0], ab[v % 2][1], (int)(v % 3) * 3, &path);
                CHECK_MSG(bad == 0, "M %lld N %lld K %lld: %d outputs off", (long long)M, (long long)ns[n],
                          (long long)ks[k], bad);
                CHECK_MSG(strstr(path, "gemv") != NULL, "M %lld: path %s", (long long)M, path);
                cases++;
            }
    const char *path;
    CHECK_EQ_INT(f32_case(5, 33, 95, 1.0f, 0.0f, 1, &path), 0);
    CHECK_MSG(!strstr(path, "gemv"), "M=5: path %s", path);
    printf("    %s: %d cases\n", gemm_f32_gemv_name(), cases);
    amp_set_num_threads(saved);
}

/* The gemv against the GEMM it replaces (the gemv off: oneDNN or ampc's
 * blocked kernel), output for output, within both sums' rounding. */
static void test_f32_gemv_agrees_with_the_blocked_gemm(void)
{
    const int64_t M = 1, N = 1153, K = 385;
    float *A = matrix(M, K, K), *B = matrix(N, K, K), *c1 = malloc(sizeof(float) * N), *c2 = malloc(sizeof(float) * N);
    double *ref = malloc(sizeof(double) * N), *bound = malloc(sizeof(double) * N);
    naive(false, true, M, N, K, 1.0, A, K, B, K, 0.0, NULL, N, ref, bound);
    CHECK_OK(gemm_f32(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, c1, N));
    CHECK(strstr(gemm_path, "gemv") != NULL);
    gemm_f32_set_gemv_rows(0);
    CHECK_OK(gemm_f32(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, c2, N));
    CHECK_MSG(!strstr(gemm_path, "gemv"), "gemv off: path %s", gemm_path);
    gemm_f32_set_gemv_rows(GEMM_F32_GEMV_MAX_M);
    int bad = 0;
    for (int64_t j = 0; j < N; j++)
        bad += fabs((double)c1[j] - c2[j]) > 2 * f32_tol(K, bound[j]);
    CHECK_MSG(bad == 0, "%d of %lld outputs differ by more than the rounding", bad, (long long)N);
    free(A), free(B), free(c1), free(c2), free(ref), free(bound);
}

/* Without AVX-512 the portable kernel runs the same product. */
static void test_f32_gemv_portable_kernel(void)
{
    int saved;
    one_thread(&saved);
    amp_cpu_limit(~(unsigned)AMP_CPU_AVX512F);
    CHECK_MSG(strcmp(gemm_f32_gemv_name(), "c gemv") == 0, "kernel %s", gemm_f32_gemv_name());
    for (int64_t M = 1; M <= 4; M += 3)
        for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
            const char *path;
            CHECK_EQ_INT(f32_case(M, 17, ks[k], -0.5f, 0.75f, 2, &path), 0);
            CHECK_MSG(strcmp(path, "c gemv") == 0, "path %s", path);
        }
    amp_cpu_limit(~0u);
    amp_set_num_threads(saved);
}

/* Each output is one thread's sum in a fixed order: 2 threads give 1
 * thread's bits; a linear's fused epilogue sees every column once. */
typedef struct {
    int64_t N;
    int *seen;
} cover_ctx;

static void cover(void *ctx, int64_t i0, int64_t j0, int mr, int nr)
{
    cover_ctx *c = ctx;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            __atomic_fetch_add(&c->seen[(i0 + i) * c->N + j0 + j], 1, __ATOMIC_RELAXED);
}

static void test_f32_gemv_threads_give_the_same_bits(void)
{
    const int64_t M = 3, N = 1153, K = 1537;
    float *A = matrix(M, K, K), *B = matrix(N, K, K), *c[2];
    int saved = amp_get_num_threads();
    for (int nt = 1; nt <= 2; nt++) {
        amp_set_num_threads(nt);
        c[nt - 1] = calloc((size_t)(M * N), sizeof(float));
        CHECK_OK(gemm_f32(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, c[nt - 1], N));
    }
    CHECK(memcmp(c[0], c[1], sizeof(float) * (size_t)(M * N)) == 0);
    cover_ctx cc = {N, calloc((size_t)(M * N), sizeof(int))};
    const gemm_epilogue ep = {cover, &cc};
    CHECK_OK(gemm_lowp_ep(false, true, M, N, K, 1.0f, A, AMP_F32, K, B, AMP_F32, K, 0.0f, c[1], AMP_F32, N, &ep));
    CHECK(strstr(gemm_path, "gemv") != NULL);
    int off = 0;
    for (int64_t i = 0; i < M * N; i++)
        off += cc.seen[i] != 1;
    CHECK_MSG(off == 0, "%d outputs not seen exactly once by the epilogue", off);
    amp_set_num_threads(saved);
    free(A), free(B), free(c[0]), free(c[1]), free(cc.seen);
}

/* bf16 operands: the gemv (where this CPU has one) against the widening
 * GEMM on the same odd sizes; both sum exact products in f32. */
static void test_bf16_gemv_agrees_with_the_widening_gemm(void)
{
    int saved, cases = 0;
    one_thread(&saved);
    for (int64_t M = 1; M <= 4; M += 3)
        for (size_t n = 0; n < sizeof ns / sizeof ns[0]; n++)
            for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
                const int64_t N = ns[n], K = ks[k];
                uint16_t *a = malloc(2 * (size_t)(M * K)), *b = malloc(2 * (size_t)(N * K));
                float *fa = malloc(4 * (size_t)(M * K)), *fb = malloc(4 * (size_t)(N * K));
                float *c1 = malloc(4 * (size_t)(M * N)), *c2 = malloc(4 * (size_t)(M * N));
                double *ref = malloc(8 * (size_t)(M * N)), *bound = malloc(8 * (size_t)(M * N));
                for (int64_t i = 0; i < M * K; i++)
                    fa[i] = frand();
                for (int64_t i = 0; i < N * K; i++)
                    fb[i] = frand();
                amp_convert(fa, AMP_F32, a, AMP_BF16, (size_t)(M * K));
                amp_convert(fb, AMP_F32, b, AMP_BF16, (size_t)(N * K));
                amp_convert(a, AMP_BF16, fa, AMP_F32, (size_t)(M * K));
                amp_convert(b, AMP_BF16, fb, AMP_F32, (size_t)(N * K));
                naive(false, true, M, N, K, 1.0, fa, K, fb, K, 0.0, NULL, N, ref, bound);
                CHECK_OK(gemm_lowp(false, true, M, N, K, 1.0f, a, AMP_BF16, K, b, AMP_BF16, K, 0.0f, c1, AMP_F32, N));
                const bool gemv = strstr(gemm_path, "gemv") != NULL;
                gemm_bf16_set_mode(GEMM_BF16_WIDEN);
                CHECK_OK(gemm_lowp(false, true, M, N, K, 1.0f, a, AMP_BF16, K, b, AMP_BF16, K, 0.0f, c2, AMP_F32, N));
                gemm_bf16_set_mode(GEMM_BF16_AUTO);
                int bad = 0;
                for (int64_t i = 0; i < M * N; i++)
                    bad += fabs((double)c1[i] - c2[i]) > 2 * f32_tol(K, bound[i]) ||
                           fabs(c1[i] - ref[i]) > f32_tol(K, bound[i]);
                CHECK_MSG(bad == 0, "M %lld N %lld K %lld (%s): %d outputs off", (long long)M, (long long)N,
                          (long long)K, gemv ? "gemv" : "no gemv here", bad);
                cases += gemv;
                free(a), free(b), free(fa), free(fb), free(c1), free(c2), free(ref), free(bound);
            }
    printf("    bf16: %d cases on the gemv (%s)\n", cases, gemm_bf16_kernel_name());
    amp_set_num_threads(saved);
}

/* ------------------------------------------------ generation */

/* n tokens drawn (temperature 1, seed 11) after a 3-token prompt through
 * the KV cache of a gpt whose widths are not multiples of 16 (40, mlp
 * 100, vocab 37), in f32 or under bf16 autocast. */
static void draw(amp_module *m, bool bf16, int64_t n, int64_t *seq)
{
    const int64_t np = 3;
    for (int64_t i = 0; i < np; i++)
        seq[i] = (i * 7 + 2) % 37;
    amp_gpt_cache *c = amp_gpt_cache_new(m, 1);
    CHECK(c != NULL);
    if (bf16)
        CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
    for (int64_t len = np; len < np + n && c; len++) {
        const int64_t lo = amp_gpt_cache_len(c);
        amp_tensor *idx = amp_from_data(AMP_SHAPE(1, len - lo), AMP_I64, seq + lo);
        amp_tensor *y = amp_gpt_forward_cached(m, c, idx);
        CHECK_OK(amp_sample_next(y, 1.0, 0, 11, (uint64_t)len, &seq[len]));
        amp_tensor_free(idx);
        amp_temps_free();
    }
    if (bf16)
        amp_autocast_end();
    amp_gpt_cache_free(c);
}

static void test_generation_draws_the_same_tokens_with_and_without_the_gemv(void)
{
    amp_manual_seed(5);
    amp_module *m = amp_model_gpt(
        (amp_gpt_config){.vocab = 37, .context = 48, .width = 40, .layers = 2, .heads = 5, .mlp = 100});
    CHECK(m != NULL);
    amp_module_train(m, false);
    enum { N = 44 };
    for (int bf16 = 0; bf16 < 2; bf16++) {
        int64_t a[3 + N], b[3 + N];
        draw(m, bf16, N, a);
        gemm_f32_set_gemv_rows(0);
        gemm_bf16_set_gemv_rows(0);
        draw(m, bf16, N, b);
        gemm_f32_set_gemv_rows(GEMM_F32_GEMV_MAX_M);
        gemm_bf16_set_gemv_rows(GEMM_GEMV_MAX_M);
        int64_t first = -1, distinct = 0;
        for (int64_t i = 0; i < 3 + N; i++) {
            if (a[i] != b[i] && first < 0)
                first = i;
            distinct += i > 0 && a[i] != a[i - 1];
        }
        CHECK_MSG(first < 0, "%s: tokens differ from position %lld", bf16 ? "bf16" : "f32", (long long)first);
        CHECK_MSG(distinct > 10, "%s: %lld changes of token in %d: not a real draw", bf16 ? "bf16" : "f32",
                  (long long)distinct, 3 + N);
    }
    amp_module_free(m);
}

int main(void)
{
    RUN(test_f32_gemv_matches_the_reference_on_odd_sizes);
    RUN(test_f32_gemv_agrees_with_the_blocked_gemm);
    RUN(test_f32_gemv_portable_kernel);
    RUN(test_f32_gemv_threads_give_the_same_bits);
    RUN(test_bf16_gemv_agrees_with_the_widening_gemm);
    RUN(test_generation_draws_the_same_tokens_with_and_without_the_gemv);
    return harness_done();
}
