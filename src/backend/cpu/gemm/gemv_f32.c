/*
 * gemv_f32.c - f32 products of a few rows with B transposed (gemm_f32_gemv,
 * gemm_kernels.h): C = alpha * A B^T + beta * C for M <= GEMM_F32_GEMV_MAX_M
 * rows of A, B [N x K] read where it lies.
 *
 * This is a linear's x W^T at decode time (`ampc generate`, batch 1): one
 * row against the whole weight. Such a product is bound by reading W
 * once, so the blocked paths lose: the widening driver packs all of W for
 * one row, and oneDNN's matmul (measured on this project's Xeon) reads an
 * f32 weight at about a third of the core's L3 bandwidth. Here each output
 * is a dot product of A's row with one of W's rows where they lie, 16
 * rows of W per block (16 chains of FMAs cover their latency; one row of
 * A is loaded once per 16 of W), the 16 sums reduced together by one
 * transposing tree. Parallel over N in items of GEMV_COLS columns; each
 * output is one thread's sum in a fixed order, so any thread count gives
 * the same bits. Without AVX-512 a portable loop runs the same product.
 */
#include "backend/cpu/gemm/gemm_kernels.h"
#include "base/base.h"
#include "base/parallel.h"

#include <math.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include "backend/cpu/gemm/rowdot_walk.h"
#endif

/* Columns per work item: 64 rows of W (96 KiB at K = 384) per item. */
#define GEMV_COLS 64
/* Multiply-adds from which the threads share the product: reading W
 * (256 KiB at this size, some 10 us on one core) outlasts waking the
 * pool's workers. */
#define GEMV_PAR_MIN (1 << 16)

/* ---------------------------------------------------------- kernels */

/* out[i * ldo + j] = sum_k a[i * lda + k] * b[j * ldb + k], rows i < M of
 * a, lines j < n of b. */
typedef void (*rowdot_f32_fn)(int M, int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb,
                              int64_t n, float *out, int64_t ldo);

static void rowdot_c(int M, int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t n,
                     float *out, int64_t ldo)
{
    for (int i = 0; i < M; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s = fmaf(a[i * lda + k], b[j * ldb + k], s);
            out[i * ldo + j] = s;
        }
}

#if defined(__x86_64__)
#define TGT_F32 __attribute__((target("avx512f,fma")))

/* The sums of 16 vectors, lane j of the result being the sum of v[j]'s
 * 16 lanes: pairs of vectors are halved and added (512 -> 256 -> 128 bits
 * per vector), then the 128-bit quarters are transposed and added. */
TGT_F32 static inline __m512 sum16(__m512 *v)
{
    __m512 h[8], q[4];
    for (int i = 0; i < 8; i++) /* [v0 lo 256 + hi 256, v1 lo + hi] */
        h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* quarters: 4 partial sums of v[4i .. 4i+3] */
        q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xDD));
    __m512 x0 = _mm512_add_ps(_mm512_unpacklo_ps(q[0], q[1]), _mm512_unpackhi_ps(q[0], q[1]));
    __m512 x1 = _mm512_add_ps(_mm512_unpacklo_ps(q[2], q[3]), _mm512_unpackhi_ps(q[2], q[3]));
    __m512 r = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x0), _mm512_castps_pd(x1))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x0), _mm512_castps_pd(x1))));
    /* lane 4c + t of r holds v[4t + c]'s sum */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, r);
}

/* M rows of a against NJ lines of b: M x NJ accumulators of 16 partial
 * sums, K in steps of 16 with a masked tail (zeros past K add nothing).
 * M and NJ are constants in each inlined copy. */
TGT_F32 static inline __attribute__((always_inline)) void
rowdot_block(const int M, const int NJ, int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb,
             float *out, int64_t ldo)
{
    __m512 acc[4][16];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NJ; j++)
            acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        /* The next NJ lines at the same k (prefetches past B's end are
         * dropped, never faults): short lines read side by side are no
         * stream the hardware prefetcher follows (best of 15 passes over
         * the width-384 gpt's f32 weights, one core: 26.5 GB/s with, 21
         * without). */
        for (int j = 0; j < NJ; j++)
            _mm_prefetch((const char *)(b + (j + NJ) * ldb + k), _MM_HINT_T0);
        for (int i = 0; i < M; i++) {
            const __m512 av = _mm512_loadu_ps(a + i * lda + k);
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + j * ldb + k), acc[i][j]);
        }
    }
    if (k < K) {
        const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        for (int i = 0; i < M; i++) {
            const __m512 av = _mm512_maskz_loadu_ps(m, a + i * lda + k);
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, b + j * ldb + k), acc[i][j]);
        }
    }
    for (int i = 0; i < M; i++) {
        if (NJ == 16)
            _mm512_storeu_ps(out + i * ldo, sum16(acc[i]));
        else
            for (int j = 0; j < NJ; j++)
                out[i * ldo + j] = _mm512_reduce_add_ps(acc[i][j]);
    }
}

/* Lines in blocks of 16 for one row, 4 for more (at most 16
 * accumulators), then one at a time. */
TGT_F32 static void rowdot_avx512(int M, int64_t K, const float *a, int64_t lda, const float *b, int64_t ldb,
                                  int64_t n, float *out, int64_t ldo)
{
    ROWDOT_WALK(rowdot_block, 16, 4);
}
#endif

static rowdot_f32_fn pick(void)
{
#if defined(__x86_64__)
    if (amp_cpu_features() & AMP_CPU_AVX512F)
        return rowdot_avx512;
#endif
    return rowdot_c;
}

const char *gemm_f32_gemv_name(void) { return pick() == rowdot_c ? "c gemv" : "avx512 gemv"; }

/* ----------------------------------------------------------- driver */

typedef struct {
    rowdot_f32_fn dot;
    const float *a, *b;
    int64_t lda, ldb, N, K, ldc;
    int M;
    float alpha, beta;
    float *c;
    const gemm_epilogue *ep;
} gemv_job;

static void gemv_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const gemv_job *v = ctx;
    _Alignas(64) float t[GEMM_F32_GEMV_MAX_M * GEMV_COLS];
    for (int64_t it = lo; it < hi; it++) {
        const int64_t j0 = it * GEMV_COLS;
        const int nr = v->N - j0 < GEMV_COLS ? (int)(v->N - j0) : GEMV_COLS;
        v->dot(v->M, v->K, v->a, v->lda, v->b + j0 * v->ldb, v->ldb, nr, t, GEMV_COLS);
        for (int i = 0; i < v->M; i++) {
            const float *tr = t + i * GEMV_COLS;
            float *cr = v->c + i * v->ldc + j0;
            if (v->beta != 0.0f)
                for (int j = 0; j < nr; j++)
                    cr[j] = fmaf(v->beta, cr[j], v->alpha * tr[j]);
            else
                for (int j = 0; j < nr; j++)
                    cr[j] = v->alpha * tr[j];
        }
        if (v->ep)
            v->ep->fn(v->ep->ctx, 0, j0, v->M, nr);
    }
}

amp_status gemm_f32_gemv(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const gemm_epilogue *ep)
{
    if (M < 1 || M > GEMM_F32_GEMV_MAX_M || N < 1 || K < 1)
        return amp_set_error(AMP_ERR_ARG, "gemm gemv: %lld x %lld x %lld is not 1 .. %d rows of a non-empty product",
                             (long long)M, (long long)N, (long long)K, GEMM_F32_GEMV_MAX_M);
    const gemv_job v = {pick(), A, B, lda, ldb, N, K, ldc, (int)M, alpha, beta, C, ep};
    const int64_t items = (N + GEMV_COLS - 1) / GEMV_COLS;
    if ((double)M * (double)N * (double)K >= GEMV_PAR_MIN && items > 1 && amp_threads() > 1 && !amp_in_parallel())
        amp_parallel_for(items, 1, gemv_range, (void *)&v);
    else
        gemv_range((void *)&v, 0, items, 0);
    return AMP_OK;
}
