/*
 * gemm_x86.c - the x86 micro-kernels behind gemm.c: one register-blocked
 * MR x NR tile of C per call, over packed panels of A and B.
 *
 * Each kernel is compiled for its ISA with a target attribute, so the
 * library builds with the compiler's default flags and gemm.c picks the
 * kernel at run time from amp_cpu_features(). The tile shapes follow the
 * register files: AVX-512 has 32 zmm registers, so 12 rows x 2 vectors of
 * 16 = 24 accumulators, 2 for the B row and the broadcasts of A; AVX2 has
 * 16 ymm registers, so 6 rows x 2 vectors of 8 = 12 accumulators.
 * Per k step the AVX-512 tile does 24 FMAs for 2 vector loads and 12
 * broadcasts, which keeps both FMA ports busy from L1/L2.
 */
#include "backend/cpu/gemm.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include "backend/cpu/transpose_x86.h"

/* ------------------------------------------------------------- AVX-512 */

#define A512_MR 12
#define A512_NR 32

#define A512_DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define A512_FMA(i)                                                                     \
    do {                                                                                \
        __m512 a_ = _mm512_set1_ps(a[i]);                                               \
        c##i##0 = _mm512_fmadd_ps(a_, b0, c##i##0);                                     \
        c##i##1 = _mm512_fmadd_ps(a_, b1, c##i##1);                                     \
    } while (0)
/* Stores row i: alpha * acc (+ beta * C when beta != 0). */
#define A512_STORE(i)                                                                   \
    do {                                                                                \
        float *r_ = c + (i) * ldc;                                                      \
        __m512 x0 = _mm512_mul_ps(va, c##i##0), x1 = _mm512_mul_ps(va, c##i##1);        \
        if (beta != 0.0f) {                                                             \
            x0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(r_), x0);                          \
            x1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(r_ + 16), x1);                     \
        }                                                                               \
        _mm512_storeu_ps(r_, x0);                                                       \
        _mm512_storeu_ps(r_ + 16, x1);                                                  \
    } while (0)

__attribute__((target("avx512f,fma"))) static void micro_avx512(int64_t kc, const float *a,
                                                                 const float *b, float *c,
                                                                 int64_t ldc, float alpha,
                                                                 float beta)
{
    A512_DECL(0) A512_DECL(1) A512_DECL(2) A512_DECL(3) A512_DECL(4) A512_DECL(5)
    A512_DECL(6) A512_DECL(7) A512_DECL(8) A512_DECL(9) A512_DECL(10) A512_DECL(11)
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        /* The B panel is read once per tile; fetch a few steps ahead. */
        _mm_prefetch((const char *)(b + 8 * A512_NR), _MM_HINT_T0);
        A512_FMA(0); A512_FMA(1); A512_FMA(2); A512_FMA(3); A512_FMA(4); A512_FMA(5);
        A512_FMA(6); A512_FMA(7); A512_FMA(8); A512_FMA(9); A512_FMA(10); A512_FMA(11);
        a += A512_MR;
        b += A512_NR;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    A512_STORE(0); A512_STORE(1); A512_STORE(2); A512_STORE(3); A512_STORE(4); A512_STORE(5);
    A512_STORE(6); A512_STORE(7); A512_STORE(8); A512_STORE(9); A512_STORE(10); A512_STORE(11);
}

const gemm_kernel gemm_kernel_avx512 = {A512_MR, A512_NR, micro_avx512, "avx512 12x32"};

/* The shared integer transpose (transpose_x86.h) on float bits: the casts
 * cost nothing. */
__attribute__((target("avx512f"))) static inline void transpose16_ps(__m512 v[16])
{
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_castps_si512(v[i]);
    transpose16(r);
    for (int i = 0; i < 16; i++)
        v[i] = _mm512_castsi512_ps(r[i]);
}

/* The packer for operands stored along k (see gemm.c): 16 lines x 16 k at
 * a time are loaded (masked at the k edge, zeros past line w), transposed
 * in registers and stored as 16 k-rows of up to 16 lines, instead of one
 * strided store per element. Only moves data, so the panel is the same
 * bits as the scalar packer's. */
__attribute__((target("avx512f"))) void gemm_pack_lines_avx512(const float *s, int64_t rs, int w, int R,
                                                              int64_t kc, float *dst)
{
    for (int64_t kb = 0; kb < kc; kb += 16) {
        const int kn = kc - kb < 16 ? (int)(kc - kb) : 16;
        const __mmask16 km = (__mmask16)((1u << kn) - 1);
        for (int rg = 0; rg < R; rg += 16) {
            const int rn = R - rg < 16 ? R - rg : 16;
            const __mmask16 rm = (__mmask16)((1u << rn) - 1);
            __m512 v[16];
            for (int i = 0; i < 16; i++)
                v[i] = rg + i < w ? _mm512_maskz_loadu_ps(km, s + (rg + i) * rs + kb) : _mm512_setzero_ps();
            transpose16_ps(v);
            float *d = dst + kb * R + rg;
            for (int k = 0; k < kn; k++)
                _mm512_mask_storeu_ps(d + k * R, rm, v[k]);
        }
    }
}

/* ---------------------------------------------------------------- AVX2 */

#define A256_MR 6
#define A256_NR 16

#define A256_DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
#define A256_FMA(i)                                                                     \
    do {                                                                                \
        __m256 a_ = _mm256_broadcast_ss(a + (i));                                       \
        c##i##0 = _mm256_fmadd_ps(a_, b0, c##i##0);                                     \
        c##i##1 = _mm256_fmadd_ps(a_, b1, c##i##1);                                     \
    } while (0)
#define A256_STORE(i)                                                                   \
    do {                                                                                \
        float *r_ = c + (i) * ldc;                                                      \
        __m256 x0 = _mm256_mul_ps(va, c##i##0), x1 = _mm256_mul_ps(va, c##i##1);        \
        if (beta != 0.0f) {                                                             \
            x0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(r_), x0);                          \
            x1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(r_ + 8), x1);                      \
        }                                                                               \
        _mm256_storeu_ps(r_, x0);                                                       \
        _mm256_storeu_ps(r_ + 8, x1);                                                   \
    } while (0)

__attribute__((target("avx2,fma"))) static void micro_avx2(int64_t kc, const float *a,
                                                            const float *b, float *c, int64_t ldc,
                                                            float alpha, float beta)
{
    A256_DECL(0) A256_DECL(1) A256_DECL(2) A256_DECL(3) A256_DECL(4) A256_DECL(5)
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        A256_FMA(0); A256_FMA(1); A256_FMA(2); A256_FMA(3); A256_FMA(4); A256_FMA(5);
        a += A256_MR;
        b += A256_NR;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    A256_STORE(0); A256_STORE(1); A256_STORE(2); A256_STORE(3); A256_STORE(4); A256_STORE(5);
}

const gemm_kernel gemm_kernel_avx2 = {A256_MR, A256_NR, micro_avx2, "avx2 6x16"};

#else
/* ISO C wants at least one declaration in a translation unit. */
typedef int gemm_x86_unused;
#endif
