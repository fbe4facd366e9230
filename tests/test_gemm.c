/*
 * test_gemm.c - the CPU GEMM against a naive triple loop in double: every
 * transpose combination, odd sizes around the kernels' tile and block
 * sizes, alpha / beta, padded leading dimensions, every kernel this CPU
 * has (via amp_cpu_limit), thread counts, and the 16-bit entry point.
 */
#include "backend/cpu/gemm.h"
#include "base/base.h"
#include "gemm_ref.h"
#include "harness.h"

#include <stdlib.h>

static uint64_t rng_state = 42;
static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* A stored rows x cols with row stride ld (ld >= cols), padding set to a
 * value that would show if it were read. */
static float *matrix(int64_t rows, int64_t cols, int64_t ld)
{
    float *m = malloc(sizeof(float) * (size_t)(rows * ld + 1));
    for (int64_t i = 0; i < rows * ld + 1; i++)
        m[i] = 1e30f;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            m[i * ld + j] = frand();
    return m;
}

/* Runs one case through gemm_f32 and checks every element and that the
 * padding of C is untouched. Returns the number of bad elements. */
static int check_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    float *A = matrix(ar, ac, lda), *B = matrix(br, bc, ldb), *C = matrix(M, N, ldc);
    if (beta == 0)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = NAN; /* beta == 0 must not read C */
    double *ref = malloc(sizeof(double) * (size_t)(M * N + 1));
    double *bound = malloc(sizeof(double) * (size_t)(M * N + 1));
    naive(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ref, bound);
    CHECK_OK(gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double got = C[i * ldc + j], tol = 1e-6 * (double)(K + 2) * bound[i * N + j] + 1e-30;
            if (!(fabs(got - ref[i * N + j]) <= tol) && bad++ < 3)
                CHECK_MSG(0, "%s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g: C[%lld,%lld] = %.9g, want %.9g",
                          gemm_kernel_name(), ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta,
                          (long long)i, (long long)j, got, ref[i * N + j]);
            for (int64_t j2 = N; j2 < ldc && j == N - 1; j2++)
                if (C[i * ldc + j2] != 1e30f && bad++ < 3)
                    CHECK_MSG(0, "padding of C row %lld written", (long long)i);
        }
    free(A);
    free(B);
    free(C);
    free(ref);
    free(bound);
    return bad;
}

static const int64_t odd[][3] = {
    {1, 1, 1},    {7, 1, 33},   {1, 33, 7},   {33, 7, 1},  {13, 37, 29},
    {33, 65, 257}, {257, 33, 19}, {12, 32, 256}, {25, 97, 300}, {6, 16, 5},
};

/* All four transposes over the sizes, with padded leading dims. */
static void run_all_shapes(void)
{
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++)
            check_case(t & 1, t & 2, odd[s][0], odd[s][1], odd[s][2], 1.0f, 0.0f, (int)(s % 3) * 5);
}

static void test_every_transpose_and_odd_size(void) { run_all_shapes(); }

static void test_alpha_and_beta(void)
{
    const float ab[][2] = {{0.5f, 0.0f}, {1.0f, 1.0f}, {-2.0f, 0.75f}, {0.0f, 0.5f}, {0.0f, 0.0f}};
    for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++)
        for (int t = 0; t < 4; t++) {
            check_case(t & 1, t & 2, 29, 45, 70, ab[i][0], ab[i][1], 3);
            check_case(t & 1, t & 2, 3, 5, 300, ab[i][0], ab[i][1], 0); /* beta across K blocks */
        }
}

static void test_empty_k_scales_c(void)
{
    float C[6] = {1, 2, 3, 4, 5, 6};
    CHECK_OK(gemm_f32(false, false, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, 0.5f, C, 3));
    CHECK_NEAR(C[5], 3.0, 0);
    C[0] = NAN;
    CHECK_OK(gemm_f32(false, false, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, 0.0f, C, 3));
    CHECK_NEAR(C[0], 0.0, 0);
    CHECK_OK(gemm_f32(false, false, 0, 3, 4, 1.0f, NULL, 4, NULL, 3, 0.0f, C, 3)); /* nothing to do */
}

/* Crosses both the K block (256) and the N block (1024). */
static void test_crosses_blocks(void)
{
    check_case(false, false, 20, 1100, 300, 1.0f, 0.0f, 0);
    check_case(true, true, 14, 1030, 513, 0.5f, 1.0f, 2);
}

static void test_every_kernel(void)
{
    const unsigned masks[] = {~0u, AMP_CPU_AVX2 | AMP_CPU_F16C, 0u};
    for (size_t m = 0; m < 3; m++) {
        amp_cpu_limit(masks[m]);
        printf("    kernel: %s\n", gemm_kernel_name());
        run_all_shapes();
        check_case(true, false, 30, 70, 300, -1.5f, 0.25f, 1);
    }
    amp_cpu_limit(~0u);
    /* dispatch takes the widest kernel the CPU has */
    unsigned f = amp_cpu_features();
    const char *want = (f & AMP_CPU_AVX512F) ? "avx512" : (f & AMP_CPU_AVX2) ? "avx2" : "portable";
    CHECK_MSG(strstr(gemm_kernel_name(), want), "kernel %s, expected %s", gemm_kernel_name(), want);
}

/* Each C tile is computed by the same sequence of operations whatever the
 * thread count, so results are bit-identical. */
static void test_threads_do_not_change_results(void)
{
    int64_t M = 100, N = 130, K = 270;
    float *A = matrix(M, K, K), *B = matrix(K, N, N), *C1 = matrix(M, N, N), *C2 = matrix(M, N, N);
    int old = amp_get_num_threads();
    amp_set_num_threads(1);
    CHECK_OK(gemm_f32(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N));
    amp_set_num_threads(2);
    CHECK_OK(gemm_f32(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C2, N));
    amp_set_num_threads(old);
    CHECK(memcmp(C1, C2, sizeof(float) * (size_t)(M * N)) == 0);
    free(A);
    free(B);
    free(C1);
    free(C2);
}

/* Rounds a float array to dt in place (so the reference sees the inputs
 * the 16-bit GEMM sees) and returns the dt copy. */
static void *narrow(float *v, int64_t n, amp_dtype dt)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    amp_convert(v, AMP_F32, h, dt, (size_t)n);
    amp_convert(h, dt, v, AMP_F32, (size_t)n);
    return h;
}

/* 16-bit in, 16-bit out: every output is the f32-accumulated sum rounded
 * once, so it is within half a unit in the last place of the exact value
 * (plus the tiny f32 error). Rounding after each K block would not be. */
static void test_lowp_rounds_once(void)
{
    const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = dts[d];
        double half_ulp = dt == AMP_BF16 ? 0x1p-8 : 0x1p-11; /* relative to the value */
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t M = 19, N = 37, K = 600;
            int64_t lda = ta ? M : K, ldb = tb ? K : N;
            float *A = matrix(ta ? K : M, lda, lda), *B = matrix(tb ? N : K, ldb, ldb), *C = matrix(M, N, N);
            void *Ah = narrow(A, M * K, dt), *Bh = narrow(B, K * N, dt), *Ch = narrow(C, M * N, dt);
            double *ref = malloc(sizeof(double) * (size_t)(M * N));
            double *bound = malloc(sizeof(double) * (size_t)(M * N));
            naive(ta, tb, M, N, K, 1.0, A, lda, B, ldb, 0.5, C, N, ref, bound);
            CHECK_OK(gemm_lowp(ta, tb, M, N, K, 1.0f, Ah, dt, lda, Bh, dt, ldb, 0.5f, Ch, dt, N));
            int bad = 0;
            for (int64_t i = 0; i < M * N; i++) {
                uint16_t h = ((uint16_t *)Ch)[i];
                double got = dt == AMP_BF16 ? amp_bf16_to_f32(h) : amp_f16_to_f32(h);
                double tol = half_ulp * fabs(ref[i]) + 1e-6 * bound[i];
                if (!(fabs(got - ref[i]) <= tol) && bad++ < 3)
                    CHECK_MSG(0, "%s ta=%d tb=%d: C[%lld] = %.6g, want %.6g within %.3g",
                              amp_dtype_name(dt), ta, tb, (long long)i, got, ref[i], tol);
            }
            free(A), free(B), free(C), free(Ah), free(Bh), free(Ch), free(ref), free(bound);
        }
    }
}

/* Mixed operands: bf16 A, f32 B, f32 C, as backward passes may use. */
static void test_lowp_mixed_dtypes_to_f32(void)
{
    int64_t M = 9, N = 40, K = 33;
    float *A = matrix(M, K, K), *B = matrix(K, N, N), *C = matrix(M, N, N);
    void *Ah = narrow(A, M * K, AMP_BF16);
    double ref[9 * 40], bound[9 * 40];
    naive(false, false, M, N, K, 2.0, A, K, B, N, 0.0, C, N, ref, bound);
    CHECK_OK(gemm_lowp(false, false, M, N, K, 2.0f, Ah, AMP_BF16, K, B, AMP_F32, N, 0.0f, C, AMP_F32, N));
    for (int64_t i = 0; i < M * N; i++)
        CHECK_NEAR(C[i], ref[i], 1e-5 * bound[i]);
    CHECK(gemm_lowp(false, false, 1, 1, 1, 1.0f, A, AMP_I32, 1, B, AMP_F32, 1, 0.0f, C, AMP_F32, 1) == AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "gemm: dtypes i32 x f32");
    free(A), free(B), free(C), free(Ah);
}

/* A rows x cols matrix (stride ld) of dt values and its exact f32 copy.
 * Every 7th value is zero, every 7th a subnormal of dt and every 7th
 * scaled up, so widening is checked beyond plain normals; padding is NaN
 * in dt (1e30 in the copy), so a stray read shows in the results. */
static float *lowp_matrix(int64_t rows, int64_t cols, int64_t ld, amp_dtype dt, uint16_t **h)
{
    float *m = matrix(rows, cols, ld);
    *h = malloc(sizeof(uint16_t) * (size_t)(rows * ld + 1));
    for (int64_t i = 0; i < rows * ld + 1; i++) {
        if (i % ld >= cols || i == rows * ld) {
            (*h)[i] = dt == AMP_F16 ? 0x7E01 : 0x7FC1;
            continue;
        }
        float v = m[i];
        if (i % 7 == 0)
            v = i % 2 ? 0.0f : -0.0f;
        else if (i % 7 == 3)
            v *= dt == AMP_F16 ? 0x1p-15f : 0x1p-127f; /* below dt's smallest normal */
        else if (i % 7 == 5)
            v *= 8.0f;
        amp_convert(&v, AMP_F32, &(*h)[i], dt, 1);
        amp_convert(&(*h)[i], dt, &m[i], AMP_F32, 1);
    }
    return m;
}

/* One case of test_lowp_same_bits_as_f32: op(A) op(B) with dt operands
 * (both, and dt A with f32 B) against the same values as f32 operands,
 * into a C of c_dt (beta != 0 reads it), compared bit for bit, padding
 * included. Returns the number of mismatching runs. */
static int same_bits_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad,
                          amp_dtype dt, amp_dtype c_dt)
{
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    uint16_t *Ah, *Bh, *Ch;
    float *A = lowp_matrix(ta ? K : M, ta ? M : K, lda, dt, &Ah), *B = lowp_matrix(tb ? N : K, tb ? K : N, ldb, dt, &Bh);
    float *Cf = lowp_matrix(M, N, ldc, c_dt == AMP_F32 ? AMP_F16 : c_dt, &Ch);
    size_t bytes = (size_t)(M * ldc) * amp_dtype_size(c_dt);
    void *C0 = c_dt == AMP_F32 ? (void *)Cf : (void *)Ch, *want = malloc(bytes), *got = malloc(bytes);
    memcpy(want, C0, bytes);
    CHECK_OK(gemm_lowp(ta, tb, M, N, K, alpha, A, AMP_F32, lda, B, AMP_F32, ldb, beta, want, c_dt, ldc));
    int bad = 0;
    if (c_dt != AMP_F32) { /* a 16-bit C holds the f32-C result (from the same C values) rounded once */
        float *row = malloc(sizeof(float) * (size_t)(M * ldc));
        uint16_t *r16 = malloc(sizeof(uint16_t) * (size_t)N);
        memcpy(row, Cf, sizeof(float) * (size_t)(M * ldc));
        CHECK_OK(gemm_lowp(ta, tb, M, N, K, alpha, A, AMP_F32, lda, B, AMP_F32, ldb, beta, row, AMP_F32, ldc));
        for (int64_t i = 0; i < M; i++) {
            amp_convert(row + i * ldc, AMP_F32, r16, c_dt, (size_t)N);
            if (memcmp(r16, (uint16_t *)want + i * ldc, sizeof(uint16_t) * (size_t)N) != 0 && bad++ < 3)
                CHECK_MSG(0, "%s -> %s ta=%d tb=%d M=%lld N=%lld K=%lld beta=%g: row %lld not the f32 C rounded",
                          gemm_kernel_name(), amp_dtype_name(c_dt), ta, tb, (long long)M, (long long)N,
                          (long long)K, beta, (long long)i);
        }
        free(row), free(r16);
    }
    for (int v = 0; v < 2; v++) {
        memcpy(got, C0, bytes);
        CHECK_OK(gemm_lowp(ta, tb, M, N, K, alpha, Ah, dt, lda, v ? (void *)B : (void *)Bh, v ? AMP_F32 : dt, ldb,
                           beta, got, c_dt, ldc));
        if (memcmp(got, want, bytes) != 0 && bad++ < 3)
            CHECK_MSG(0, "%s %s x %s -> %s ta=%d tb=%d M=%lld N=%lld K=%lld beta=%g: not the f32 inputs' bits",
                      gemm_kernel_name(), amp_dtype_name(dt), amp_dtype_name(v ? AMP_F32 : dt),
                      amp_dtype_name(c_dt), ta, tb, (long long)M, (long long)N, (long long)K, beta);
    }
    free(A), free(B), free(Cf), free(Ah), free(Bh), free(Ch), free(want), free(got);
    return bad;
}

/* 16-bit operands are widened exactly while packing, and the kernels and
 * summation order are those of f32, so f16 (or bf16, on the widening
 * path) inputs give exactly the bits the same values as f32 inputs give:
 * every transpose, odd sizes across tiles and K blocks, padded leading
 * dimensions, every kernel, f32 and 16-bit C, beta 0 and not. A 16-bit C
 * is also checked to be the f32 C's result rounded once, on both of its
 * paths (one K block: finished per tile; more: an f32 accumulator). */
static void test_lowp_same_bits_as_f32(void)
{
    const unsigned masks[] = {~0u, AMP_CPU_AVX2 | AMP_CPU_F16C, 0u};
    const amp_dtype dts[] = {AMP_F16, AMP_BF16};
    gemm_bf16_set_mode(GEMM_BF16_WIDEN);
    for (size_t m = 0; m < 3; m++) {
        amp_cpu_limit(masks[m]);
        for (int d = 0; d < 2; d++)
            for (int c = 0; c < 2; c++)
                for (int t = 0; t < 4; t++)
                    for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++)
                        same_bits_case(t & 1, t & 2, odd[s][0], odd[s][1], odd[s][2], s % 2 ? 0.75f : 1.0f,
                                       s % 2 ? 0.5f : 0.0f, (int)(s % 3) * 3, dts[d], c ? dts[d] : AMP_F32);
    }
    amp_cpu_limit(~0u);
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    /* K = 0: C = beta * C, rounded (and beta = 0 clears a NaN C) */
    uint16_t c[3] = {0x3C00, 0xC500, 0x7E00}; /* 1, -5, NaN */
    CHECK_OK(gemm_lowp(false, false, 1, 2, 0, 1.0f, NULL, AMP_F16, 1, NULL, AMP_F16, 2, 0.5f, c, AMP_F16, 2));
    CHECK(c[0] == 0x3800 && c[1] == 0xC100 && c[2] == 0x7E00); /* 0.5, -2.5, padding untouched */
    c[0] = 0x7E00;
    CHECK_OK(gemm_lowp(false, false, 1, 2, 0, 1.0f, NULL, AMP_F16, 1, NULL, AMP_F16, 2, 0.0f, c, AMP_F16, 2));
    CHECK(c[0] == 0 && c[1] == 0);
}

/* ------------------------------------------- bf16 on native dot products */

/* The bf16 paths this CPU can take, by name fragment. */
static const struct {
    gemm_bf16_mode mode;
    const char *name;
} bf16_paths[] = {{GEMM_BF16_WIDEN, "widen"}, {GEMM_BF16_DOT, "avx512bf16"}, {GEMM_BF16_AMX, "amx"}};

/* Forces path i; false (and AUTO again) when the CPU lacks it. */
static bool use_bf16_path(size_t i)
{
    gemm_bf16_set_mode(bf16_paths[i].mode);
    if (strstr(gemm_bf16_kernel_name(), bf16_paths[i].name))
        return true;
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    return false;
}

/* A matrix of bf16-rounded random values: the float copy (for the
 * reference) and the bf16 one, both rows x cols with stride ld, padding
 * set to values that would show if read (NaN in bf16). */
static float *bf16_matrix(int64_t rows, int64_t cols, int64_t ld, uint16_t **h)
{
    float *m = matrix(rows, cols, ld);
    *h = malloc(sizeof(uint16_t) * (size_t)(rows * ld + 1));
    for (int64_t i = 0; i < rows * ld + 1; i++) {
        (*h)[i] = i % ld >= cols || i == rows * ld ? 0x7FC1 : amp_f32_to_bf16(m[i]);
        m[i] = amp_bf16_to_f32((*h)[i]);
    }
    return m;
}

/* gemm_lowp(bf16, bf16 -> c_dt) against the double reference of the same
 * bf16 inputs. Every product of two bf16 values is exact in f32, so the
 * only error is the f32 accumulation (at most one rounding of the running
 * sum per k, for any order: K f32 ulps of the sum of |products|) plus, for
 * a 16-bit C, the one final rounding (half an ulp of the result). */
static int check_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad,
                      amp_dtype c_dt)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    uint16_t *Ah, *Bh, *Ch;
    float *A = bf16_matrix(ar, ac, lda, &Ah), *B = bf16_matrix(br, bc, ldb, &Bh);
    float *C = c_dt == AMP_F32 ? matrix(M, N, ldc) : bf16_matrix(M, N, ldc, &Ch);
    if (c_dt == AMP_F16) /* f16 bits, and the values they hold for the reference */
        for (int64_t i = 0; i < M * ldc + 1; i++) {
            bool padding = i % ldc >= N || i == M * ldc;
            Ch[i] = padding ? 0x7E01 : amp_f32_to_f16(C[i]);
            C[i] = padding ? C[i] : amp_f16_to_f32(Ch[i]);
        }
    if (beta == 0) /* beta == 0 must not read C */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                C[i * ldc + j] = NAN;
                if (c_dt != AMP_F32)
                    Ch[i * ldc + j] = c_dt == AMP_BF16 ? 0x7FC1 : 0x7E01;
            }
    double *ref = malloc(sizeof(double) * (size_t)(M * N + 1));
    double *bound = malloc(sizeof(double) * (size_t)(M * N + 1));
    naive(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ref, bound);
    void *out = c_dt == AMP_F32 ? (void *)C : (void *)Ch;
    CHECK_OK(gemm_lowp(ta, tb, M, N, K, alpha, Ah, AMP_BF16, lda, Bh, AMP_BF16, ldb, beta, out, c_dt, ldc));
    double half_ulp = c_dt == AMP_BF16 ? 0x1p-9 : c_dt == AMP_F16 ? 0x1p-12 : 0; /* relative, RNE */
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double got = c_dt == AMP_F32    ? C[i * ldc + j]
                         : c_dt == AMP_BF16 ? amp_bf16_to_f32(Ch[i * ldc + j])
                                            : amp_f16_to_f32(Ch[i * ldc + j]);
            double r = ref[i * N + j];
            double tol = 0x1p-24 * (double)(K + 2) * bound[i * N + j] * (1 + half_ulp) + 2 * half_ulp * fabs(r) +
                         (c_dt == AMP_F16 ? 0x1p-25 : 1e-30); /* f16 subnormal spacing */
            if (!(fabs(got - r) <= tol) && bad++ < 3)
                CHECK_MSG(0, "%s -> %s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g: C[%lld,%lld] = %.9g, want %.9g (tol %.3g)",
                          gemm_bf16_kernel_name(), amp_dtype_name(c_dt), ta, tb, (long long)M, (long long)N,
                          (long long)K, alpha, beta, (long long)i, (long long)j, got, r, tol);
        }
    /* the padding of C and the element after it are untouched */
    for (int64_t i = 0; i < M * ldc + 1; i++)
        if (i % ldc >= N || i == M * ldc) {
            bool same = c_dt == AMP_F32 ? C[i] == 1e30f : Ch[i] == (c_dt == AMP_BF16 ? 0x7FC1 : 0x7E01);
            if (!same && bad++ < 3)
                CHECK_MSG(0, "%s: C padding at %lld written", gemm_bf16_kernel_name(), (long long)i);
        }
    free(A), free(B), free(C), free(Ah), free(Bh), free(ref), free(bound);
    if (c_dt != AMP_F32)
        free(Ch);
    return bad;
}

/* Sizes around the tiles (12 x 32, 32 x 32), pairs (odd K) and AMX's
 * 32-k steps; the K blocks (AMX 384, VDPBF16PS 512) are crossed below. */
static const int64_t bf16_sizes[][3] = {
    {1, 1, 1},    {7, 1, 33},    {1, 33, 7},    {33, 7, 1},    {31, 33, 3},   {13, 37, 29},
    {32, 32, 32}, {12, 32, 64},  {33, 65, 257}, {257, 33, 19}, {25, 97, 300}, {6, 16, 5},
};

static void bf16_all_shapes(amp_dtype c_dt)
{
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof bf16_sizes / sizeof bf16_sizes[0]; s++)
            check_bf16(t & 1, t & 2, bf16_sizes[s][0], bf16_sizes[s][1], bf16_sizes[s][2], 1.0f, 0.0f,
                       (int)(s % 3) * 5, c_dt);
}

/* The bf16 shape tests run on one thread: tiles and results are the same
 * on any number (test_bf16_threads_do_not_change_results), and on a
 * shared machine hundreds of small parallel regions are slow. */
static int saved_threads;
static void one_thread(void)
{
    saved_threads = amp_get_num_threads();
    amp_set_num_threads(1);
}
static void restore_threads(void)
{
    amp_set_num_threads(saved_threads);
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
}

/* Every transpose, the odd sizes, every C dtype, on every bf16 path. */
static void test_bf16_every_path_transpose_and_size(void)
{
    one_thread();
    for (size_t p = 0; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        if (!use_bf16_path(p)) {
            printf("    (no %s path on this CPU)\n", bf16_paths[p].name);
            continue;
        }
        printf("    bf16 path: %s\n", gemm_bf16_kernel_name());
        bf16_all_shapes(AMP_F32);
        bf16_all_shapes(AMP_BF16);
        bf16_all_shapes(AMP_F16);
    }
    restore_threads();
}

/* alpha / beta, including AMX's direct (alpha 1, beta 0 or 1) and general
 * stores, and K over several K blocks (beta applies once, at the start). */
static void test_bf16_alpha_beta_and_k_blocks(void)
{
    const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 0.0f}, {-2.0f, 0.75f}, {1.0f, -1.0f}};
    const amp_dtype cdts[] = {AMP_F32, AMP_BF16, AMP_F16};
    one_thread();
    for (size_t p = 0; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        if (!use_bf16_path(p))
            continue;
        for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++)
            for (int t = 0; t < 4; t++)
                for (int c = 0; c < 3; c++) {
                    check_bf16(t & 1, t & 2, 29, 45, 70, ab[i][0], ab[i][1], 3, cdts[c]);
                    if ((size_t)(t + c) % 5 == i) /* a few over three K blocks */
                        check_bf16(t & 1, t & 2, 35, 33, 1101, ab[i][0], ab[i][1], 1, cdts[c]);
                }
        /* across the N block (512 dot, 1024 AMX) and an odd K */
        check_bf16(false, false, 20, 1100, 301, 1.0f, 0.0f, 0, AMP_BF16);
        check_bf16(true, true, 14, 1030, 513, 0.5f, 1.0f, 2, AMP_F32);
    }
    restore_threads();
}

/* A 16-bit C holds exactly the f32 result rounded once (amp_convert's
 * rounding): same tiles, same sums, one rounding at the end, whether K
 * fits one block or partial sums wait in an f32 workspace. */
static void test_bf16_16bit_c_is_the_f32_result_rounded(void)
{
    const int64_t shapes[][3] = {{45, 70, 33}, {37, 64, 1100}};
    one_thread();
    for (size_t p = 0; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        if (!use_bf16_path(p))
            continue;
        for (size_t s = 0; s < 2; s++)
            for (int d = 0; d < 2; d++) {
                amp_dtype dt = d ? AMP_F16 : AMP_BF16;
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                uint16_t *Ah, *Bh, *got = malloc(sizeof(uint16_t) * (size_t)(M * N)),
                                   *want = malloc(sizeof(uint16_t) * (size_t)(M * N));
                float *A = bf16_matrix(M, K, K, &Ah), *B = bf16_matrix(N, K, K, &Bh);
                float *C = malloc(sizeof(float) * (size_t)(M * N));
                CHECK_OK(gemm_lowp(false, true, M, N, K, 0.75f, Ah, AMP_BF16, K, Bh, AMP_BF16, K, 0.0f, C, AMP_F32, N));
                CHECK_OK(gemm_lowp(false, true, M, N, K, 0.75f, Ah, AMP_BF16, K, Bh, AMP_BF16, K, 0.0f, got, dt, N));
                amp_convert(C, AMP_F32, want, dt, (size_t)(M * N));
                CHECK_MSG(memcmp(got, want, sizeof(uint16_t) * (size_t)(M * N)) == 0, "%s -> %s, K = %lld",
                          gemm_bf16_kernel_name(), amp_dtype_name(dt), (long long)K);
                free(A), free(B), free(C), free(Ah), free(Bh), free(got), free(want);
            }
    }
    restore_threads();
}

/* amp_cpu_limit without AVX512BF16 leaves only the widening path (AMX
 * included); with it, AUTO takes AMX where usable, VDPBF16PS on AMD, and
 * widening on other CPUs. Results are right either way. */
static void test_bf16_cpu_limit(void)
{
    amp_cpu_limit(~(unsigned)AMP_CPU_AVX512BF16);
    for (size_t p = 0; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        gemm_bf16_set_mode(bf16_paths[p].mode);
        CHECK_MSG(strstr(gemm_bf16_kernel_name(), "widen"), "masked: %s", gemm_bf16_kernel_name());
        check_bf16(false, true, 33, 40, 77, 1.0f, 0.0f, 1, AMP_BF16);
    }
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    amp_cpu_limit(~0u);
    const char *auto_name = gemm_bf16_kernel_name();
    printf("    bf16 path by default: %s\n", auto_name);
    if (!(amp_cpu_features() & AMP_CPU_AVX512BF16))
        CHECK(strstr(auto_name, "widen"));
#if defined(__x86_64__)
    else if (gemm_amx_usable())
        CHECK(strstr(auto_name, "amx"));
#endif
    bool dot = (amp_cpu_features() & AMP_CPU_AVX512BF16) && (amp_cpu_features() & AMP_CPU_AVX512BW);
    gemm_bf16_set_mode(GEMM_BF16_DOT);
    CHECK_MSG(!dot == !strstr(gemm_bf16_kernel_name(), "avx512bf16"), "forced dot: %s", gemm_bf16_kernel_name());
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
}

/* Bit-identical results on 1 and 2 threads, on every path, for f32 and
 * bf16 C. Both shapes are big enough to use the threads (AMX wants 4M
 * multiply-adds); the second is small in M, so the B block is sliced
 * between them, and spans several N blocks. */
static void test_bf16_threads_do_not_change_results(void)
{
    const int64_t shapes[][3] = {{100, 130, 1030}, {3, 2000, 801}};
    int old = amp_get_num_threads();
    for (size_t p = 0; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        if (!use_bf16_path(p))
            continue;
        for (size_t s = 0; s < 2; s++) {
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            uint16_t *Ah, *Bh, *ch[2];
            float *A = bf16_matrix(M, K, K, &Ah), *B = bf16_matrix(K, N, N, &Bh), *cf[2];
            for (int nt = 1; nt <= 2; nt++) {
                amp_set_num_threads(nt);
                cf[nt - 1] = malloc(sizeof(float) * (size_t)(M * N));
                ch[nt - 1] = malloc(sizeof(uint16_t) * (size_t)(M * N));
                CHECK_OK(gemm_lowp(false, false, M, N, K, 1.0f, Ah, AMP_BF16, K, Bh, AMP_BF16, N, 0.0f, cf[nt - 1],
                                   AMP_F32, N));
                CHECK_OK(gemm_lowp(false, false, M, N, K, 1.0f, Ah, AMP_BF16, K, Bh, AMP_BF16, N, 0.0f, ch[nt - 1],
                                   AMP_BF16, N));
            }
            CHECK_MSG(memcmp(cf[0], cf[1], sizeof(float) * (size_t)(M * N)) == 0, "%s: f32 C differs",
                      bf16_paths[p].name);
            CHECK_MSG(memcmp(ch[0], ch[1], sizeof(uint16_t) * (size_t)(M * N)) == 0, "%s: bf16 C differs",
                      bf16_paths[p].name);
            free(A), free(B), free(Ah), free(Bh), free(cf[0]), free(cf[1]), free(ch[0]), free(ch[1]);
        }
    }
    amp_set_num_threads(old);
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
}

int main(void)
{
    /* ampc's own kernels, each path forced in turn; oneDNN's matmul has
     * its own tests (test_onednn_gemm.c). */
    onednn_set_mode(CPU_LIB_OWN);
    printf("gemm kernel: %s\n", gemm_kernel_name());
    RUN(test_every_transpose_and_odd_size);
    RUN(test_alpha_and_beta);
    RUN(test_empty_k_scales_c);
    RUN(test_crosses_blocks);
    RUN(test_every_kernel);
    RUN(test_threads_do_not_change_results);
    RUN(test_lowp_rounds_once);
    RUN(test_lowp_mixed_dtypes_to_f32);
    RUN(test_lowp_same_bits_as_f32);
    RUN(test_bf16_every_path_transpose_and_size);
    RUN(test_bf16_alpha_beta_and_k_blocks);
    RUN(test_bf16_16bit_c_is_the_f32_result_rounded);
    RUN(test_bf16_cpu_limit);
    RUN(test_bf16_threads_do_not_change_results);
    return harness_done();
}
