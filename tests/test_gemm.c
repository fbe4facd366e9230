/*
 * test_gemm.c - the CPU GEMM against a naive triple loop in double: every
 * transpose combination, odd sizes around the kernels' tile and block
 * sizes, alpha / beta, padded leading dimensions, every kernel this CPU
 * has (via amp_cpu_limit), thread counts, and the 16-bit entry point:
 * bf16 on its native paths (and their few-row gemv), f16 widened and
 * split into bf16 on AMX.
 */
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/gemm/gemm_kernels.h"
#include "base/base.h"
#include "gemm_operands.h"
#include "gemm_ref.h"
#include "harness.h"

#include <stdlib.h>

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
    gemm_f16_set_mode(GEMM_F16_WIDEN);
    gemm_f32_set_gemv_rows(0); /* f32 operands with few rows would take the f32 gemv, not the widening driver */
    for (size_t m = 0; m < 3; m++) {
        amp_cpu_limit(masks[m]);
        for (int d = 0; d < 2; d++)
            for (int c = 0; c < 2; c++)
                for (int t = 0; t < 4; t++)
                    for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++)
                        same_bits_case(t & 1, t & 2, odd[s][0], odd[s][1], odd[s][2], s % 2 ? 0.75f : 1.0f,
                                       s % 2 ? 0.5f : 0.0f, (int)(s % 3) * 3, dts[d], c ? dts[d] : AMP_F32);
    }
    gemm_f32_set_gemv_rows(GEMM_F32_GEMV_MAX_M);
    amp_cpu_limit(~0u);
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    gemm_f16_set_mode(GEMM_F16_AUTO);
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
 * 32-k steps; the K blocks (AMX 384, VDPBF16PS 1024) are crossed below. */
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
        /* across the N block (256 dot, 1024 AMX) and an odd K */
        check_bf16(false, false, 20, 1100, 301, 1.0f, 0.0f, 0, AMP_BF16);
        check_bf16(true, true, 14, 1030, 513, 0.5f, 1.0f, 2, AMP_F32);
        /* several N blocks over three K blocks (A packed once per K block) */
        check_bf16(false, true, 27, 600, 2100, 1.0f, 0.0f, 1, AMP_BF16);
        check_bf16(true, false, 27, 600, 2100, -0.5f, 0.75f, 0, AMP_F32);
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
/* The blocking's promise of summation order: every C tile meets K's
 * blocks in order, whatever N block or thread it falls to, so a product
 * over several N blocks (A's panels packed once per K block and shared)
 * gives, bit for bit, its column slices computed as separate products
 * (one N block each, A packed per panel), and its row slices too. Three K
 * blocks, odd M, N and K (edge tiles), every transpose, every bf16 path,
 * f32 and bf16 C, 1 and 2 threads. Slices start at multiples of 96 rows
 * and 256 columns, so the tiles are the same ones. The promise is the
 * blocked path's: a slice of 8 rows or fewer with B transposed would take
 * the gemv (another summation order; test_bf16_few_rows), so it is off. */
static void test_bf16_product_is_its_slices(void)
{
    const int64_t M = 101, N = 700, K = 2501;
    const int64_t cuts_n[] = {0, 256, 512, N}, cuts_m[] = {0, 96, M};
    int old = amp_get_num_threads();
    gemm_bf16_set_gemv_rows(0);
    for (size_t p = 0; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        if (!use_bf16_path(p))
            continue;
        for (int t = 0; t < 4; t++) {
            const bool ta = t & 1, tb = t & 2;
            const int64_t lda = ta ? M : K, ldb = tb ? K : N;
            uint16_t *Ah, *Bh;
            float *A = bf16_matrix(ta ? K : M, ta ? M : K, lda, &Ah), *B = bf16_matrix(tb ? N : K, tb ? K : N, ldb, &Bh);
            for (int c = 0; c < 2; c++) {
                const amp_dtype cdt = c ? AMP_BF16 : AMP_F32;
                const size_t es = amp_dtype_size(cdt);
                char *full = malloc(es * (size_t)(M * N)), *part = malloc(es * (size_t)(M * N));
                for (int nt = 1; nt <= 2; nt++) {
                    amp_set_num_threads(nt);
                    CHECK_OK(gemm_lowp(ta, tb, M, N, K, 1.0f, Ah, AMP_BF16, lda, Bh, AMP_BF16, ldb, 0.0f, full, cdt, N));
                    for (int i = 0; i < 3; i++) { /* column slices */
                        const int64_t j0 = cuts_n[i], w = cuts_n[i + 1] - j0;
                        const uint16_t *Bs = tb ? Bh + j0 * ldb : Bh + j0;
                        CHECK_OK(gemm_lowp(ta, tb, M, w, K, 1.0f, Ah, AMP_BF16, lda, Bs, AMP_BF16, ldb, 0.0f,
                                           part + es * (size_t)j0, cdt, N));
                    }
                    CHECK_MSG(memcmp(full, part, es * (size_t)(M * N)) == 0,
                              "%s ta %d tb %d %s C, %d threads: not its column slices", bf16_paths[p].name, ta, tb,
                              amp_dtype_name(cdt), nt);
                    for (int i = 0; i < 2; i++) { /* row slices */
                        const int64_t i0 = cuts_m[i], h = cuts_m[i + 1] - i0;
                        const uint16_t *As = ta ? Ah + i0 : Ah + i0 * lda;
                        CHECK_OK(gemm_lowp(ta, tb, h, N, K, 1.0f, As, AMP_BF16, lda, Bh, AMP_BF16, ldb, 0.0f,
                                           part + es * (size_t)(i0 * N), cdt, N));
                    }
                    CHECK_MSG(memcmp(full, part, es * (size_t)(M * N)) == 0,
                              "%s ta %d tb %d %s C, %d threads: not its row slices", bf16_paths[p].name, ta, tb,
                              amp_dtype_name(cdt), nt);
                }
                free(full), free(part);
            }
            free(A), free(B), free(Ah), free(Bh);
        }
    }
    amp_set_num_threads(old);
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    gemm_bf16_set_gemv_rows(8);
}

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

/* ------------------------------------------- bf16 with few rows (gemv) */

/* Products of 1 to 8 rows with B transposed (a linear's x W^T, a decode
 * step) skip the packing on the native paths (gemm_bf16.c's gemv): against
 * the double reference for M = 1..8 (the kernel's 4 rows, then two calls), every transpose (the untransposed B
 * keeps the blocked path, checked here too), odd N and K, K not a multiple
 * of 32 (the masked tail) and over the dot kernel's K block, padded
 * leading dimensions, every C dtype, alpha / beta. The path taken is
 * checked by name (gemm_path). */
static void test_bf16_few_rows(void)
{
    const int64_t ns[] = {1, 7, 33, 67}, ks[] = {1, 2, 31, 33, 64, 95, 1030};
    const float ab[][2] = {{1.0f, 0.0f}, {-0.5f, 0.75f}};
    const amp_dtype cdts[] = {AMP_F32, AMP_BF16, AMP_F16};
    one_thread();
    for (size_t p = 1; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        if (!use_bf16_path(p)) {
            printf("    (no %s path on this CPU)\n", bf16_paths[p].name);
            continue;
        }
        int cases = 0;
        for (int64_t M = 1; M <= 8; M++)
            for (int t = 0; t < 4; t++)
                for (size_t n = 0; n < sizeof ns / sizeof ns[0]; n++)
                    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
                        const size_t v = (size_t)M + n + k; /* spread alpha/beta, C dtype, padding */
                        check_bf16(t & 1, t & 2, M, ns[n], ks[k], ab[v % 2][0], ab[v % 2][1], (int)(v % 3) * 3,
                                   cdts[(v + (size_t)t) % 3]);
                        const bool gemv = strstr(gemm_path, "gemv") != NULL;
                        CHECK_MSG(gemv == ((t & 2) != 0), "%s M=%lld tb=%d: path %s", bf16_paths[p].name,
                                  (long long)M, (t & 2) != 0, gemm_path);
                        cases++;
                    }
        /* nine rows take the blocked kernel again */
        check_bf16(false, true, 9, 33, 95, 1.0f, 0.0f, 1, AMP_BF16);
        CHECK_MSG(!strstr(gemm_path, "gemv"), "M=9: path %s", gemm_path);
        /* and so does one row with the gemv turned off (benchmarks compare) */
        gemm_bf16_set_gemv_rows(0);
        check_bf16(false, true, 1, 33, 95, 1.0f, 0.0f, 1, AMP_BF16);
        CHECK_MSG(!strstr(gemm_path, "gemv"), "gemv off: path %s", gemm_path);
        gemm_bf16_set_gemv_rows(8);
        printf("    %s: %d few-row cases\n", bf16_paths[p].name, cases);
    }
    restore_threads();
}

/* The gemv spread over 2 threads gives 1 thread's bits (each column is
 * one thread's sequence), and its epilogue covers C exactly once, each
 * call after its block is final. */
typedef struct {
    const uint16_t *c;
    int64_t ldc;
    int *seen;
    int64_t n;
    const uint16_t *want;
    int bad;
} ep_probe;

static void ep_probe_fn(void *ctx, int64_t i0, int64_t j0, int mr, int nr)
{
    ep_probe *e = ctx;
    for (int64_t i = i0; i < i0 + mr; i++)
        for (int64_t j = j0; j < j0 + nr; j++) {
            __atomic_add_fetch(&e->seen[i * e->n + j], 1, __ATOMIC_RELAXED);
            if (e->c[i * e->ldc + j] != e->want[i * e->n + j])
                __atomic_add_fetch(&e->bad, 1, __ATOMIC_RELAXED);
        }
}

static void test_bf16_few_rows_threads_and_epilogue(void)
{
    const int64_t M = 6, N = 3001, K = 801;
    int old = amp_get_num_threads();
    for (size_t p = 1; p < sizeof bf16_paths / sizeof bf16_paths[0]; p++) {
        if (!use_bf16_path(p))
            continue;
        uint16_t *Ah, *Bh, *c[2];
        float *A = bf16_matrix(M, K, K, &Ah), *B = bf16_matrix(N, K, K, &Bh);
        for (int nt = 1; nt <= 2; nt++) {
            amp_set_num_threads(nt);
            c[nt - 1] = malloc(sizeof(uint16_t) * (size_t)(M * N));
            CHECK_OK(gemm_lowp(false, true, M, N, K, 1.0f, Ah, AMP_BF16, K, Bh, AMP_BF16, K, 0.0f, c[nt - 1],
                               AMP_BF16, N));
            CHECK_MSG(strstr(gemm_path, "gemv"), "path %s", gemm_path);
        }
        CHECK_MSG(memcmp(c[0], c[1], sizeof(uint16_t) * (size_t)(M * N)) == 0, "%s: 1 and 2 threads differ",
                  bf16_paths[p].name);
        uint16_t *out = malloc(sizeof(uint16_t) * (size_t)(M * N));
        int *seen = calloc((size_t)(M * N), sizeof(int));
        ep_probe e = {out, N, seen, N, c[0], 0};
        const gemm_epilogue ep = {ep_probe_fn, &e};
        CHECK_OK(gemm_lowp_ep(false, true, M, N, K, 1.0f, Ah, AMP_BF16, K, Bh, AMP_BF16, K, 0.0f, out, AMP_BF16, N,
                              &ep));
        int twice = 0;
        for (int64_t i = 0; i < M * N; i++)
            twice += seen[i] != 1;
        CHECK_MSG(twice == 0 && e.bad == 0, "%s epilogue: %d elements not seen once, %d not final", bf16_paths[p].name,
                  twice, e.bad);
        free(A), free(B), free(Ah), free(Bh), free(c[0]), free(c[1]), free(out), free(seen);
    }
    amp_set_num_threads(old);
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
}

/* ------------------------------------------- f16 split into bf16 on AMX */

/* The f16 paths: forced widening, and the split where the CPU has AMX. */
static const struct {
    gemm_f16_mode mode;
    const char *name;
} f16_paths[] = {{GEMM_F16_WIDEN, "widen"}, {GEMM_F16_SPLIT, "split"}};

static bool use_f16_path(size_t i)
{
    gemm_f16_set_mode(f16_paths[i].mode);
    if (strstr(gemm_f16_kernel_name(), f16_paths[i].name) && !strstr(gemm_f16_kernel_name(), "else"))
        return true;
    gemm_f16_set_mode(GEMM_F16_AUTO);
    return false;
}

/* An f16 matrix (rows x cols, stride ld, NaN padding) and its exact float
 * copy. ints > 0: random integers in [-ints, ints] times `scale` (a power
 * of two), so that products and all their partial sums are exact in f32
 * when K ints^2 < 2^24; ints = 0: lowp_matrix's values (random, zeros,
 * f16 subnormals, x8). */
static float *f16_matrix(int64_t rows, int64_t cols, int64_t ld, int ints, float scale, uint16_t **h)
{
    if (!ints)
        return lowp_matrix(rows, cols, ld, AMP_F16, h);
    float *m = matrix(rows, cols, ld);
    *h = malloc(sizeof(uint16_t) * (size_t)(rows * ld + 1));
    for (int64_t i = 0; i < rows * ld + 1; i++) {
        bool padding = i % ld >= cols || i == rows * ld;
        m[i] = padding ? m[i] : (float)(int)(m[i] * (float)ints) * scale;
        (*h)[i] = padding ? 0x7E01 : amp_f32_to_f16(m[i]);
    }
    return m;
}

/* gemm_lowp(f16, f16 -> c_dt) on the forced f16 path against the double
 * reference of the same inputs. ints: f16_matrix's exact integers (A
 * scaled by a_scale, B by 1), where every order of f32 summation is exact,
 * so C must be the reference (rounded once for a 16-bit C) bit for bit;
 * else within f32 summation of 4 K products (the split's; the widening
 * path does K) plus the final rounding. Padding of C untouched. Returns
 * the largest |error| / sum |terms| over C (for comparing paths). */
static double check_f16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad,
                        amp_dtype c_dt, int ints, float a_scale)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    uint16_t *Ah, *Bh, *Ch = NULL;
    float *A = f16_matrix(ar, ac, lda, ints, a_scale, &Ah), *B = f16_matrix(br, bc, ldb, ints, 1.0f, &Bh);
    float *C = c_dt == AMP_F32 ? f16_matrix(M, N, ldc, ints, 1.0f, &Ch) : NULL;
    if (c_dt != AMP_F32) { /* C's dtype bits, and the values they hold for the reference */
        free(Ch);
        C = c_dt == AMP_F16 ? f16_matrix(M, N, ldc, ints, 1.0f, &Ch) : bf16_matrix(M, N, ldc, &Ch);
    }
    const uint16_t pad16 = c_dt == AMP_BF16 ? 0x7FC1 : 0x7E01;
    if (beta == 0) /* beta == 0 must not read C */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = NAN, Ch[i * ldc + j] = pad16;
    double *ref = malloc(sizeof(double) * (size_t)(M * N + 1)), *bound = malloc(sizeof(double) * (size_t)(M * N + 1));
    naive(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ref, bound);
    void *out = c_dt == AMP_F32 ? (void *)C : (void *)Ch;
    CHECK_OK(gemm_lowp(ta, tb, M, N, K, alpha, Ah, AMP_F16, lda, Bh, AMP_F16, ldb, beta, out, c_dt, ldc));
    double half_ulp = c_dt == AMP_BF16 ? 0x1p-9 : c_dt == AMP_F16 ? 0x1p-12 : 0, worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const int64_t o = i * ldc + j;
            double got = c_dt == AMP_F32 ? C[o] : c_dt == AMP_BF16 ? amp_bf16_to_f32(Ch[o]) : amp_f16_to_f32(Ch[o]);
            double r = ref[i * N + j], b = bound[i * N + j], tol;
            if (ints) { /* exact: the reference rounded once to C's dtype */
                float rf = (float)r;
                uint16_t r16 = 0;
                if (c_dt != AMP_F32)
                    amp_convert(&rf, AMP_F32, &r16, c_dt, 1);
                tol = 0;
                r = c_dt == AMP_F32 ? rf : c_dt == AMP_BF16 ? amp_bf16_to_f32(r16) : amp_f16_to_f32(r16);
            } else {
                tol = 0x1p-24 * (double)(4 * K + 2) * 1.02 * b * (1 + half_ulp) + 2 * half_ulp * fabs(r) +
                      (c_dt == AMP_F16 ? 0x1p-25 : 1e-30);
            }
            double err = fabs(got - r);
            if (b > 0 && c_dt == AMP_F32 && err / b > worst)
                worst = err / b;
            if (!(err <= tol) && bad++ < 3)
                CHECK_MSG(0, "%s -> %s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g%s: C[%lld,%lld] = %.9g, "
                             "want %.9g (tol %.3g)",
                          gemm_f16_kernel_name(), amp_dtype_name(c_dt), ta, tb, (long long)M, (long long)N,
                          (long long)K, alpha, beta, ints ? " (exact ints)" : "", (long long)i, (long long)j, got, r,
                          tol);
        }
    for (int64_t i = 0; i < M * ldc + 1; i++)
        if ((i % ldc >= N || i == M * ldc) && !(c_dt == AMP_F32 ? C[i] == 1e30f : Ch[i] == pad16) && bad++ < 3)
            CHECK_MSG(0, "%s: C padding at %lld written", gemm_f16_kernel_name(), (long long)i);
    free(A), free(B), free(C), free(Ah), free(Bh), free(Ch), free(ref), free(bound);
    return worst;
}

/* Sizes around AMX's 32 x 32 tiles, its 16-k steps and its K block (384). */
static const int64_t f16_sizes[][3] = {
    {1, 1, 1}, {7, 1, 33}, {1, 33, 7}, {33, 7, 17}, {31, 33, 3}, {32, 32, 16}, {13, 37, 29}, {45, 70, 64},
};

/* Exactness: integer operands whose products and every partial sum are
 * exact in f32 (the sum of |terms| below 2^24, for the split's 4 K terms
 * too), so any correct path gives the reference's bits and a wrong split
 * term (a dropped al bl is up to 16 here) shows. Values to +-500 have 9
 * significant bits (a nonzero lo); f16 subnormals (A times 2^-24) too.
 * Every transpose, odd sizes, padded strides, alpha / beta, f32 and f16
 * C, and K across the K block with smaller values. */
static void test_f16_split_exact_products(void)
{
    one_thread();
    for (size_t p = 0; p < sizeof f16_paths / sizeof f16_paths[0]; p++) {
        if (!use_f16_path(p)) {
            printf("    (no %s path for f16 on this CPU)\n", f16_paths[p].name);
            continue;
        }
        printf("    f16 path: %s\n", gemm_f16_kernel_name());
        for (int t = 0; t < 4; t++)
            for (size_t s = 0; s < sizeof f16_sizes / sizeof f16_sizes[0]; s++) {
                const int64_t *z = f16_sizes[s];
                check_f16(t & 1, t & 2, z[0], z[1], z[2], 1.0f, 0.0f, (int)(s % 3) * 5, AMP_F32, 500, 1.0f);
                check_f16(t & 1, t & 2, z[0], z[1], z[2], 0.5f, s % 2 ? 1.0f : -2.0f, 1, s % 2 ? AMP_F16 : AMP_F32,
                          s % 2 ? 63 : 500, 0x1p-24f);
            }
        /* K = 800: three K blocks; |terms| < 2^24 / 800 */
        check_f16(false, false, 40, 50, 800, 1.0f, 1.0f, 0, AMP_F32, 140, 1.0f);
        check_f16(true, true, 33, 65, 800, 1.0f, 0.0f, 3, AMP_F32, 140, 0x1p-24f);
    }
    restore_threads();
    gemm_f16_set_mode(GEMM_F16_AUTO);
}

/* Real-valued f16 (random, zeros, subnormals, x8): every path within f32
 * summation error of the double reference, into f32, f16 and bf16 C with
 * alpha / beta and several K blocks; and the split no less accurate than
 * widening on the same products (a three-term split, dropping al bl,
 * measured 6-10x the widening path's worst error here). */
static void test_f16_split_matches_double(void)
{
    const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-2.0f, 0.75f}};
    const amp_dtype cdts[] = {AMP_F32, AMP_F16, AMP_BF16};
    double worst[2] = {0, 0};
    bool have[2] = {false, false};
    one_thread();
    for (size_t p = 0; p < sizeof f16_paths / sizeof f16_paths[0]; p++) {
        if (!(have[p] = use_f16_path(p)))
            continue;
        for (int t = 0; t < 4; t++)
            for (size_t s = 0; s < sizeof f16_sizes / sizeof f16_sizes[0]; s++)
                check_f16(t & 1, t & 2, f16_sizes[s][0], f16_sizes[s][1], f16_sizes[s][2], ab[s % 3][0], ab[s % 3][1],
                          (int)(s % 3) * 2, cdts[(s + (size_t)t) % 3], 0, 1.0f);
        for (int c = 0; c < 3; c++)
            check_f16(c & 1, !(c & 1), 37, 45, 1101, ab[c][0], ab[c][1], 1, cdts[c], 0, 1.0f);
        rng_state = 1234; /* the same operands for both paths */
        worst[p] = check_f16(false, false, 64, 64, 1000, 1.0f, 0.0f, 0, AMP_F32, 0, 1.0f);
    }
    if (have[0] && have[1])
        CHECK_MSG(worst[1] <= 2 * worst[0] + 0x1p-24, "split's worst error %.3g x sum|ab|, widening's %.3g", worst[1],
                  worst[0]);
    restore_threads();
    gemm_f16_set_mode(GEMM_F16_AUTO);
}

/* inf and NaN: each output is non-finite exactly when, and as, the f32
 * path's (widening) is: inf * 0 = NaN, inf * x = inf of the product's sign
 * also where x is exact in bf16 (a zero lo), inf meeting -inf = NaN, NaN
 * stays NaN. One-element cases, then matrices with a few of each. */
static void test_f16_split_special_values(void)
{
    if (!use_f16_path(1)) {
        printf("    (no split path for f16 on this CPU)\n");
        return;
    }
    const uint16_t inf = 0x7C00, ninf = 0xFC00, nan = 0x7E00, one = 0x3C00, half = 0x3800, zero = 0,
                   v257 = 0x5C04 /* 257: a nonzero lo */, tiny = 0x0001 /* 2^-24 */, big = 0x7BFF /* 65504 */;
    const struct {
        uint16_t a[2], b[2];
        float want; /* NAN: any NaN */
    } cases[] = {
        {{inf, zero}, {half, zero}, INFINITY}, {{half, zero}, {inf, zero}, INFINITY},
        {{v257, zero}, {ninf, zero}, -INFINITY}, {{ninf, zero}, {v257, zero}, -INFINITY},
        {{inf, zero}, {inf, zero}, INFINITY},    {{inf, zero}, {ninf, zero}, -INFINITY},
        {{inf, zero}, {zero, zero}, NAN},        {{zero, zero}, {inf, zero}, NAN},
        {{nan, zero}, {one, zero}, NAN},         {{one, zero}, {nan, zero}, NAN},
        {{inf, one}, {one, ninf}, NAN},          {{tiny, inf}, {tiny, one}, INFINITY},
        {{big, big}, {big, 0xFBFF}, 0.0f},       {{tiny, tiny}, {tiny, 0x8001}, 0.0f},
        {{big, tiny}, {tiny, big}, 2 * 65504.0f * 0x1p-24f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float c = 0;
        CHECK_OK(gemm_lowp(false, false, 1, 1, 2, 1.0f, cases[i].a, AMP_F16, 2, cases[i].b, AMP_F16, 1, 0.0f, &c,
                           AMP_F32, 1));
        float w = cases[i].want;
        CHECK_MSG(isnan(w) ? isnan(c) : c == w, "case %zu: %g, want %g", i, c, w);
    }
    /* 40 x 50 x 70, operands of lowp_matrix's mix with bf16-exact values
     * (lo = 0) and a few infs and NaNs, transposed and not */
    int classes[4] = {0}; /* finite, +inf, -inf, NaN among the outputs */
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        const int64_t M = 40, N = 50, K = 70, lda = ta ? M : K, ldb = tb ? K : N;
        uint16_t *Ah, *Bh;
        float *A = lowp_matrix(ta ? K : M, lda, lda, AMP_F16, &Ah);
        float *B = lowp_matrix(tb ? N : K, ldb, ldb, AMP_F16, &Bh);
        for (int64_t i = 0; i < M * K; i += 5)
            Ah[i] = (uint16_t)(one + (i % 3) * 0x400); /* 1, 2, 4: exact in bf16 */
        for (int64_t i = 0; i < K * N; i += 3)
            Bh[i] = (uint16_t)(half | (i % 2 ? 0x8000 : 0));
        const int64_t ai[] = {7, 100, 101, 1200, 2001}, bi[] = {3, 50, 51, 2600, 3000};
        const uint16_t av[] = {inf, ninf, inf, nan, inf}, bv[] = {ninf, inf, inf, nan, zero};
        for (int i = 0; i < 5; i++)
            Ah[ai[i]] = av[i], Bh[bi[i]] = bv[i];
        float *c[2];
        for (int p = 0; p < 2; p++) {
            c[p] = malloc(sizeof(float) * (size_t)(M * N));
            gemm_f16_set_mode(f16_paths[p].mode);
            CHECK_OK(gemm_lowp(ta, tb, M, N, K, 1.0f, Ah, AMP_F16, lda, Bh, AMP_F16, ldb, 0.0f, c[p], AMP_F32, N));
        }
        int bad = 0;
        for (int64_t i = 0; i < M * N; i++) {
            float w = c[0][i], g = c[1][i];
            int cw = isnan(w) ? 3 : isinf(w) ? (w > 0 ? 1 : 2) : 0, cg = isnan(g) ? 3 : isinf(g) ? (g > 0 ? 1 : 2) : 0;
            classes[cw]++;
            if ((cw != cg || (cw == 0 && fabsf(g - w) > 1e-3f * (1 + fabsf(w)))) && bad++ < 3)
                CHECK_MSG(0, "ta=%d tb=%d C[%lld] split %g, widen %g", ta, tb, (long long)i, g, w);
        }
        free(A), free(B), free(Ah), free(Bh), free(c[0]), free(c[1]);
    }
    CHECK_MSG(classes[0] && classes[1] && classes[2] && classes[3], "outputs: %d finite, %d inf, %d -inf, %d NaN",
              classes[0], classes[1], classes[2], classes[3]);
    gemm_f16_set_mode(GEMM_F16_AUTO);
}

/* The split's tiles are the same whatever thread runs them: 1 and 2
 * threads give the same bits (f32 and f16 C, the B block sliced when M is
 * small); an f16 C is the f32 C rounded once, over several K blocks. */
static void test_f16_split_threads_and_rounding(void)
{
    if (!use_f16_path(1))
        return;
    const int64_t shapes[][3] = {{100, 130, 1030}, {3, 2000, 801}};
    int old = amp_get_num_threads();
    for (size_t s = 0; s < 2; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        uint16_t *Ah, *Bh, *ch[2];
        float *A = lowp_matrix(M, K, K, AMP_F16, &Ah), *B = lowp_matrix(K, N, N, AMP_F16, &Bh), *cf[2];
        for (int nt = 1; nt <= 2; nt++) {
            amp_set_num_threads(nt);
            cf[nt - 1] = malloc(sizeof(float) * (size_t)(M * N));
            ch[nt - 1] = malloc(sizeof(uint16_t) * (size_t)(M * N));
            CHECK_OK(gemm_lowp(false, false, M, N, K, 1.0f, Ah, AMP_F16, K, Bh, AMP_F16, N, 0.0f, cf[nt - 1],
                               AMP_F32, N));
            CHECK_OK(gemm_lowp(false, false, M, N, K, 1.0f, Ah, AMP_F16, K, Bh, AMP_F16, N, 0.0f, ch[nt - 1],
                               AMP_F16, N));
        }
        CHECK(memcmp(cf[0], cf[1], sizeof(float) * (size_t)(M * N)) == 0);
        CHECK(memcmp(ch[0], ch[1], sizeof(uint16_t) * (size_t)(M * N)) == 0);
        amp_convert(cf[0], AMP_F32, ch[1], AMP_F16, (size_t)(M * N));
        CHECK_MSG(memcmp(ch[0], ch[1], sizeof(uint16_t) * (size_t)(M * N)) == 0, "f16 C is not the f32 C rounded");
        free(A), free(B), free(Ah), free(Bh), free(cf[0]), free(cf[1]), free(ch[0]), free(ch[1]);
    }
    amp_set_num_threads(old);
    gemm_f16_set_mode(GEMM_F16_AUTO);
}

/* Which path runs: the names follow the mode and the CPU; AUTO gives
 * widening's bits on a small product and the split's on a big one; with
 * AVX512-BF16 masked only widening is left. */
static void test_f16_path_choice(void)
{
    gemm_f16_set_mode(GEMM_F16_WIDEN);
    CHECK(strncmp(gemm_f16_kernel_name(), "widen: ", 7) == 0);
    gemm_f16_set_mode(GEMM_F16_AUTO);
    const char *auto_name = gemm_f16_kernel_name();
    printf("    f16 path by default: %s\n", auto_name);
    bool amx = false;
#if defined(__x86_64__)
    amx = (amp_cpu_features() & AMP_CPU_AVX512BF16) && (amp_cpu_features() & AMP_CPU_AVX512BW) && gemm_amx_usable();
#endif
    CHECK_MSG(!amx == !strstr(auto_name, "split"), "AMX %d: %s", amx, auto_name);
    amp_cpu_limit(~(unsigned)AMP_CPU_AVX512BF16);
    gemm_f16_set_mode(GEMM_F16_SPLIT);
    CHECK_MSG(strncmp(gemm_f16_kernel_name(), "widen: ", 7) == 0, "masked: %s", gemm_f16_kernel_name());
    check_f16(false, true, 33, 40, 77, 1.0f, 0.0f, 1, AMP_F16, 0, 1.0f);
    amp_cpu_limit(~0u);
    const int64_t shapes[][3] = {{20, 30, 40}, {256, 160, 128}}; /* below and above 2^22 multiply-adds */
    for (size_t s = 0; s < 2 && amx; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        uint16_t *Ah, *Bh;
        float *A = lowp_matrix(M, K, K, AMP_F16, &Ah), *B = lowp_matrix(K, N, N, AMP_F16, &Bh);
        float *c[2] = {malloc(sizeof(float) * (size_t)(M * N)), malloc(sizeof(float) * (size_t)(M * N))};
        gemm_f16_set_mode(s ? GEMM_F16_SPLIT : GEMM_F16_WIDEN);
        CHECK_OK(gemm_lowp(false, false, M, N, K, 1.0f, Ah, AMP_F16, K, Bh, AMP_F16, N, 0.0f, c[0], AMP_F32, N));
        gemm_f16_set_mode(GEMM_F16_AUTO);
        CHECK_OK(gemm_lowp(false, false, M, N, K, 1.0f, Ah, AMP_F16, K, Bh, AMP_F16, N, 0.0f, c[1], AMP_F32, N));
        CHECK_MSG(memcmp(c[0], c[1], sizeof(float) * (size_t)(M * N)) == 0, "AUTO at %lld x %lld x %lld is not %s",
                  (long long)M, (long long)N, (long long)K, s ? "the split" : "widening");
        free(A), free(B), free(Ah), free(Bh), free(c[0]), free(c[1]);
    }
    gemm_f16_set_mode(GEMM_F16_AUTO);
}

/* cpu_relu_rows (the relu after a oneDNN product or convolution) keeps
 * amp_relu's semantics on every dtype: NaN stays NaN (either sign), -0 and
 * every negative down to -inf become +0, +0 / positives / +inf stay, and
 * only the [M, N] rows inside ldc and the batch stride are touched. */
static void test_relu_rows_special_values(void)
{
    const uint32_t f32_bits[] = {0x00000000u, 0x80000000u, 0x3F800000u, 0xBF800000u, 0x7F800000u, 0xFF800000u,
                                 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x00000001u, 0x80000001u,
                                 0x7F7FFFFFu, 0xFF7FFFFFu};
    const uint16_t h_bits[2][14] = {
        {0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x0001, 0x8001, 0x7F7F, 0xFF7F},
        {0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x0001, 0x8001, 0x7BFF, 0xFBFF}};
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    enum { B = 2, M = 3, N = 37, LDC = 41, SC = M * LDC + 5, TOTAL = B * SC };
    for (int d = 0; d < 3; d++) {
        uint32_t c32[TOTAL], want32[TOTAL];
        uint16_t c16[TOTAL], want16[TOTAL];
        for (int i = 0; i < TOTAL; i++) {
            int64_t b = i / SC, r = (i % SC) / LDC, col = (i % SC) % LDC;
            bool inside = b < B && r < M && col < N;
            if (d == 0) {
                uint32_t v = f32_bits[(i * 5) % 14];
                bool neg = (v >> 31) && (v & 0x7FFFFFFFu) <= 0x7F800000u;
                c32[i] = v, want32[i] = inside && neg ? 0u : v;
            } else {
                uint16_t v = h_bits[d - 1][(i * 5) % 14], inf = d == 1 ? 0x7F80 : 0x7C00;
                bool neg = (v >> 15) && (v & 0x7FFF) <= inf;
                c16[i] = v, want16[i] = inside && neg ? 0 : v;
            }
        }
        cpu_relu_rows(d == 0 ? (void *)c32 : (void *)c16, dts[d], B, M, N, LDC, SC);
        for (int i = 0; i < TOTAL; i++)
            CHECK_MSG(d == 0 ? c32[i] == want32[i] : c16[i] == want16[i], "%s element %d: 0x%x, want 0x%x",
                      amp_dtype_name(dts[d]), i, d == 0 ? c32[i] : c16[i], d == 0 ? want32[i] : want16[i]);
    }
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
    RUN(test_bf16_product_is_its_slices);
    RUN(test_bf16_few_rows);
    RUN(test_bf16_few_rows_threads_and_epilogue);
    RUN(test_f16_split_exact_products);
    RUN(test_f16_split_matches_double);
    RUN(test_f16_split_special_values);
    RUN(test_f16_split_threads_and_rounding);
    RUN(test_f16_path_choice);
    RUN(test_relu_rows_special_values);
    return harness_done();
}
