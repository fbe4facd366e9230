/*
 * gemm_x86.c - the x86 micro-kernels behind gemm.c (the widening driver):
 * one register-blocked MR x NR tile of C per call, over packed panels of
 * A and B.
 *
 * Each kernel is compiled for its ISA with a target attribute, so the
 * library builds with the compiler's default flags and gemm.c picks the
 * kernel at run time from amp_cpu_features(). The tile shapes follow the
 * register files: AVX-512 has 32 zmm registers, so 12 rows x 2 vectors of
 * 16 = 24 accumulators, 2 for the B row and the broadcasts of A; AVX2 has
 * 16 ymm registers, so 6 rows x 2 vectors of 8 = 12 accumulators.
 * Per k step the AVX-512 tile does 24 FMAs for 2 vector loads and 12
 * broadcasts, which keeps both FMA ports busy from L1/L2.
 *
 * Also the AVX-512 packers (gemm.c's pack_panel) and a 16-bit C's tile
 * moves: f16 / bf16 values are widened to f32 16 at a time inside the
 * packing loops (VCVTPH2PS, or a shift for bf16), exactly, so a 16-bit
 * operand costs no more to pack than an f32 one and gives the same bits.
 */
#include "backend/cpu/gemm/gemm_kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/gemm/tile_x86.h"
#include "backend/cpu/gemm/transpose_x86.h"

/* ------------------------------------------------------------- AVX-512 */

#define A512_MR 12
#define A512_NR 32

#define A512_DECL(i) TILE_DECL(__m512, _mm512_, i)
#define A512_FMA(i)                                                                     \
    do {                                                                                \
        __m512 a_ = _mm512_set1_ps(a[i]);                                               \
        c##i##0 = _mm512_fmadd_ps(a_, b0, c##i##0);                                     \
        c##i##1 = _mm512_fmadd_ps(a_, b1, c##i##1);                                     \
    } while (0)
#define A512_STORE(i) TILE_STORE(__m512, _mm512_, 16, i)

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

/* n <= 16 16-bit values at p (zeros after them) widened to f32: f16 by
 * VCVTPH2PS, bf16 by a shift; both exact, the same bits as amp_convert.
 * Whole pairs load as masked 32-bit words (16-bit masks would need
 * AVX512BW, and masked-off words are never touched); an odd count goes
 * through a small zeroed buffer so no byte past p[n-1] is read. */
__attribute__((target("avx512f"))) static inline __m512 widen16(const uint16_t *p, int n, bool bf16)
{
    __m256i h;
    if (n == 16) {
        h = _mm256_loadu_si256((const __m256i *)p);
    } else if (!(n & 1)) {
        h = _mm512_castsi512_si256(_mm512_maskz_loadu_epi32((__mmask16)((1u << (n / 2)) - 1), p));
    } else {
        uint16_t t[16] = {0};
        memcpy(t, p, sizeof(uint16_t) * (size_t)n);
        h = _mm256_loadu_si256((const __m256i *)t);
    }
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

enum { EL_F32, EL_F16, EL_BF16 };

/* The packer for operands stored along k (see gemm.c): 16 lines x 16 k at
 * a time are loaded (masked at the k edge, zeros past line w; 16-bit lines
 * widened to f32 on the way in), transposed in registers and stored as 16
 * k-rows of up to 16 lines, instead of one strided store per element.
 * Only moves (and exactly widens) data, so the panel is the same bits as
 * the scalar packer's. el is a constant in each caller, so each dtype gets
 * its own loop. */
__attribute__((target("avx512f"), always_inline)) static inline void
pack_lines(const void *s, int el, int64_t rs, int w, int R, int64_t kc, float *dst)
{
    for (int64_t kb = 0; kb < kc; kb += 16) {
        const int kn = kc - kb < 16 ? (int)(kc - kb) : 16;
        const __mmask16 km = (__mmask16)((1u << kn) - 1);
        for (int rg = 0; rg < R; rg += 16) {
            const int rn = R - rg < 16 ? R - rg : 16;
            const __mmask16 rm = (__mmask16)((1u << rn) - 1);
            __m512 v[16];
            for (int i = 0; i < 16; i++) {
                const int64_t off = (rg + i) * rs + kb;
                if (rg + i >= w)
                    v[i] = _mm512_setzero_ps();
                else if (el == EL_F32)
                    v[i] = _mm512_maskz_loadu_ps(km, (const float *)s + off);
                else
                    v[i] = widen16((const uint16_t *)s + off, kn, el == EL_BF16);
            }
            transpose16_ps(v);
            float *d = dst + kb * R + rg;
            for (int k = 0; k < kn; k++)
                _mm512_mask_storeu_ps(d + k * R, rm, v[k]);
        }
    }
}

__attribute__((target("avx512f"))) void gemm_pack_lines_avx512(const float *s, int64_t rs, int w, int R,
                                                              int64_t kc, float *dst)
{
    pack_lines(s, EL_F32, rs, w, R, kc, dst);
}

__attribute__((target("avx512f"))) void gemm_pack_lines16_avx512(const uint16_t *s, bool bf16, int64_t rs, int w,
                                                                int R, int64_t kc, float *dst)
{
    if (bf16)
        pack_lines(s, EL_BF16, rs, w, R, kc, dst);
    else
        pack_lines(s, EL_F16, rs, w, R, kc, dst);
}

/* The packer for 16-bit operands stored along the lines (element (r, k) at
 * s[r + k * ks]): each k-row of the panel is up to R contiguous values,
 * widened 16 at a time straight into place, zeros past line w. */
__attribute__((target("avx512f"))) void gemm_pack_cols16_avx512(const uint16_t *s, bool bf16, int64_t ks, int w,
                                                               int R, int64_t kc, float *dst)
{
    for (int64_t k = 0; k < kc; k++) {
        const uint16_t *col = s + k * ks;
        float *d = dst + k * R;
        for (int rg = 0; rg < R; rg += 16) {
            const int rn = R - rg < 16 ? R - rg : 16;
            const int n = w - rg < 0 ? 0 : w - rg < rn ? w - rg : rn;
            __m512 v = n == 0 ? _mm512_setzero_ps() : bf16 ? widen16(col + rg, n, true) : widen16(col + rg, n, false);
            if (rn == 16)
                _mm512_storeu_ps(d + rg, v);
            else
                _mm512_mask_storeu_ps(d + rg, (__mmask16)((1u << rn) - 1), v);
        }
    }
}

/* A full-width 16-bit C tile (nr a multiple of 16) to and from an f32
 * tile t (row stride tl): widened exactly, rounded to nearest even as
 * amp_convert rounds (bf16 NaNs quieted as (x >> 16) | 0x40), so the
 * bits are those of the f32 accumulator path. */
__attribute__((target("avx512f"))) void gemm_c16_widen_avx512(const uint16_t *c, int64_t ldc, bool bf16, int mr,
                                                             int nr, float *t, int64_t tl)
{
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j += 16)
            _mm512_storeu_ps(t + r * tl + j, widen16(c + r * ldc + j, 16, bf16));
}

__attribute__((target("avx512f"))) void gemm_c16_round_avx512(const float *t, int64_t tl, int mr, int nr, bool bf16,
                                                             uint16_t *c, int64_t ldc)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF), quiet = _mm512_set1_epi32(0x40);
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j += 16) {
            __m512 v = _mm512_loadu_ps(t + r * tl + j);
            __m256i h;
            if (!bf16) {
                h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            } else { /* integer rounding, as convert_x86.c: no MXCSR flags */
                __m512i x = _mm512_castps_si512(v);
                __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
                __m512i hi = _mm512_srli_epi32(x, 16);
                __m512i rnd = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_and_si512(hi, one)), half), 16);
                h = _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rnd, nan, hi, quiet));
            }
            _mm256_storeu_si256((__m256i *)(c + r * ldc + j), h);
        }
}

/* ---------------------------------------------------------------- AVX2 */

#define A256_MR 6
#define A256_NR 16

#define A256_DECL(i) TILE_DECL(__m256, _mm256_, i)
#define A256_FMA(i)                                                                     \
    do {                                                                                \
        __m256 a_ = _mm256_broadcast_ss(a + (i));                                       \
        c##i##0 = _mm256_fmadd_ps(a_, b0, c##i##0);                                     \
        c##i##1 = _mm256_fmadd_ps(a_, b1, c##i##1);                                     \
    } while (0)
#define A256_STORE(i) TILE_STORE(__m256, _mm256_, 8, i)

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
