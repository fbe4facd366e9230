/*
 * gemm_f16_split.c - f16 x f16 products on AMX-BF16 tiles: each f16 split
 * exactly into two bf16 and the product run as a bf16 product four times
 * as long in K, on gemm_bf16.c's driver and the AMX micro-kernel of
 * gemm_bf16_x86.c (gemm_f16_kernel_amx); here the packers that write the
 * split panels. When a product takes this path rather than widening to
 * f32 (gemm.c) is the dispatcher's choice (dispatch.c, "f16").
 *
 * The split. An f16 x is hi + lo with hi = bf16(x) (nearest even) and
 * lo = x - hi, both exact bf16: x has 11 significant bits and hi its top
 * 8, so lo is a multiple of x's f16 ulp below 8 of them (<= 3 significant
 * bits), and |x| >= 2^-24 keeps every nonzero part far above bf16's
 * subnormals (2^-126). So a b = ah bh + ah bl + al bh + al bl exactly;
 * each product of two bf16 is exact in f32, and AMX sums them in f32.
 * Per k, A's line holds the words (ah, ah) and (al, al) (a word: the two
 * bf16 TDPBF16PS multiplies and adds, the even one in the low half) and
 * B's the one word (bh, bl): the micro-kernel multiplies each B tile by
 * A's hi tile and by its lo tile, so B, streamed from L2, costs what a
 * bf16 product's does per k while the tiles do 4 K products.
 *
 * Three terms (dropping al bl, |al bl| <= 2^-16 |a b|) would cost a
 * quarter less: measured against double (K = 256-4096, 96 x 100 outputs,
 * uniform, log-uniform and positive values), the dropped sum alone is
 * 3-15 f32 ulps of sum |a b| at its worst, against 0.5-16 for the
 * widening path and 0.3-5 for the four-term split, so three terms would
 * make f16 products less accurate than they are today; four it is.
 *
 * inf and NaN. hi of inf is inf but inf - inf is NaN, and a zero lo meeting
 * an inf would make inf * 0 = NaN where a b is inf. So a non-finite value
 * packs as (x, 0) (each A word, and B's word): it meets only the other
 * side's hi. An inf in B meets both of A's words, so for K blocks where
 * the B packer saw one, A is packed with lo nonzero and of x's sign for
 * every nonzero x (hi one bf16 toward zero where nearest rounding leaves
 * lo zero or of the other sign; still exact): inf then meets ah and al of
 * one sign. Every k contributes what the f32 path's a * b does: inf * 0 =
 * NaN, inf * finite = inf of the product's sign, NaN stays NaN. Only
 * there, because that split gives a value exact in bf16 (a small integer,
 * say) a hi and lo with bits below its own ulp: each term stays exact, but
 * partial sums that were exact in f32 (integer data) may then round.
 *
 * AMX numerics (measured with a probe on this project's Xeon): TDPBF16PS
 * treats bf16 subnormal inputs as zero, flushes subnormal results and also
 * an f32 subnormal already in the C tile, and adds a word's two products
 * before they join the accumulator (its sums are not an in-order FMA
 * chain, but stay within f32 rounding of the sum of |products|). None of
 * that touches this path: the parts are multiples of 2^-32 (A) and 2^-24
 * (B), so products and their sums are never subnormal, and the split
 * micro-kernel never loads C into a tile: each K block's sum starts from
 * zero tiles and joins C (alpha, beta, earlier blocks) in AVX-512
 * registers. That blocking also keeps the f32 summation as short as the
 * widening path's (one chain per K block, then one addition per block):
 * accumulating all of K in the tiles measured 3.5x the widening path's
 * error on positive data at K = 4096.
 */
#include "backend/cpu/gemm/gemm_kernels.h"

#include <string.h>

/* ------------------------------------------------------------- packers */

#if defined(__x86_64__)

#include <immintrin.h>
#include "backend/cpu/gemm/transpose_x86.h"

#define TGT_BW __attribute__((target("avx512f,avx512bw,avx512vl")))

static __mmask16 mask16(int64_t n) { return n >= 16 ? 0xFFFF : n <= 0 ? 0 : (__mmask16)(((unsigned)1 << n) - 1); }

/* 16 f16 values widened (exact) and rounded to bf16 bits, nearest even
 * (in the low half of each 32-bit lane); nonfinite: the inf and NaN
 * lanes, whose bf16 bits are the value's (a NaN kept quiet). */
TGT_BW static inline __m512 hi16(__m256i h, __m512i *hi, __mmask16 *nonfinite)
{
    const __m512 x = _mm512_cvtph_ps(h);
    const __m512i xi = _mm512_castps_si512(x);
    const __m512i absx = _mm512_and_si512(xi, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 sp = _mm512_cmpge_epu32_mask(absx, _mm512_set1_epi32(0x7F800000));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(absx, _mm512_set1_epi32(0x7F800000));
    const __m512i top = _mm512_srli_epi32(xi, 16);
    /* nearest even at bit 16 on the sign-magnitude bits (|x| <= 65504:
     * no carry reaches the sign) */
    const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(xi, lsb), _mm512_set1_epi32(0x7FFF)), 16);
    *hi = _mm512_mask_mov_epi32(r, sp, _mm512_mask_or_epi32(top, nan, top, _mm512_set1_epi32(0x40)));
    *nonfinite = sp;
    return x;
}

/* x - hi as bf16 bits (low half of each lane): exact, and a bf16, so its
 * low 16 bits are zero. */
TGT_BW static inline __m512 residual(__m512 x, __m512i hi)
{
    return _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
}

/* A's words for 16 values of k: hw = (hi, hi), lw = (lo, lo); inf and NaN
 * (x, 0) in both. With `signed_lo` (for K blocks where B holds an inf),
 * lo is nonzero and of x's sign for every nonzero x: where nearest
 * rounding leaves it zero or of the other sign, hi steps one bf16 toward
 * zero (the sign-magnitude bits minus one). So an inf in B meets ah and al
 * of one sign and gives inf, not inf * 0 (top comment). */
TGT_BW static inline void a_words(__m256i h, bool signed_lo, __m512i *hw, __m512i *lw)
{
    __m512i hi;
    __mmask16 sp;
    const __m512 x = hi16(h, &hi, &sp);
    __m512i lo = _mm512_castps_si512(residual(x, hi));
    if (signed_lo) {
        const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
        const __mmask16 nonzero = _mm512_test_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
        const __mmask16 lo_zero = _mm512_testn_epi32_mask(lo, _mm512_set1_epi32(0x7FFFFFFF));
        const __mmask16 lo_other = _mm512_test_epi32_mask(_mm512_xor_si512(lo, _mm512_castps_si512(x)), sign);
        const __mmask16 step = nonzero & (lo_zero | lo_other) & (__mmask16)~sp;
        hi = _mm512_mask_sub_epi32(hi, step, hi, _mm512_set1_epi32(1));
        lo = _mm512_castps_si512(residual(x, hi));
    }
    lo = _mm512_maskz_srli_epi32((__mmask16)~sp, lo, 16);
    *hw = _mm512_mask_mov_epi32(_mm512_or_si512(hi, _mm512_slli_epi32(hi, 16)), sp, hi);
    *lw = _mm512_mask_mov_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(lo, 16)), sp, hi);
}

/* B's word for 16 values of k: (hi, lo), nearest rounding; inf and NaN
 * (x, 0). *inf gets the lanes holding an infinity or'ed in. */
TGT_BW static inline __m512i b_word(__m256i h, __mmask16 *inf)
{
    __m512i hi;
    __mmask16 sp;
    const __m512 x = hi16(h, &hi, &sp);
    const __m512i lo = _mm512_maskz_srli_epi32((__mmask16)~sp, _mm512_castps_si512(residual(x, hi)), 16);
    *inf |= _mm512_mask_cmpeq_epi32_mask(sp, _mm512_and_si512(hi, _mm512_set1_epi32(0x7FFF)),
                                         _mm512_set1_epi32(0x7F80));
    return _mm512_or_si512(hi, _mm512_slli_epi32(lo, 16));
}

/* Up to 16 f16 at p (n of them, the rest zero). */
TGT_BW static inline __m256i load16(const uint16_t *p, int64_t n)
{
    if (n >= 16)
        return _mm256_loadu_si256((const __m256i *)p);
    return n > 0 ? _mm256_maskz_loadu_epi16(mask16(n), p) : _mm256_setzero_si256();
}

/* AMX's A panel (gemm_bf16_pack_fn, kp a multiple of 32): row-major,
 * dst[q * kp + p]; per 16 k from k0, line q's words 2 k0 .. 2 k0+15 are
 * the hi words and 2 k0+16 .. 2 k0+31 the lo words. Zero words for k from
 * kc on and in lines w .. R-1. */
TGT_BW static inline void pack_a(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                                 uint32_t *dst, bool signed_lo)
{
    if (ks == 1) { /* each line is a run along k */
        for (int q = 0; q < R; q++) {
            uint32_t *d = dst + q * kp;
            if (q >= w) {
                memset(d, 0, (size_t)kp * sizeof(uint32_t));
                continue;
            }
            for (int64_t k0 = 0; 2 * k0 < kp; k0 += 16) {
                __m512i hw, lw;
                a_words(k0 < kc ? load16(s + q * rs + k0, kc - k0) : _mm256_setzero_si256(), signed_lo, &hw, &lw);
                _mm512_storeu_si512(d + 2 * k0, hw);
                _mm512_storeu_si512(d + 2 * k0 + 16, lw);
            }
        }
        return;
    }
    /* lines contiguous: 16 k x 16 lines, transposed into 16 lines' words */
    for (int q0 = 0; q0 < R; q0 += 16) {
        const int64_t nl = w - q0;
        for (int64_t k0 = 0; 2 * k0 < kp; k0 += 16) {
            __m512i hv[16], lv[16];
            for (int j = 0; j < 16; j++)
                a_words(k0 + j < kc && nl > 0 ? load16(s + (k0 + j) * ks + q0, nl) : _mm256_setzero_si256(),
                        signed_lo, &hv[j], &lv[j]);
            transpose16(hv);
            transpose16(lv);
            for (int i = 0; i < 16 && q0 + i < R; i++) {
                _mm512_storeu_si512(dst + (q0 + i) * kp + 2 * k0, hv[i]);
                _mm512_storeu_si512(dst + (q0 + i) * kp + 2 * k0 + 16, lv[i]);
            }
        }
    }
}

TGT_BW bool gemm_f16_pack_a_split(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                                  uint32_t *dst)
{
    pack_a(s, rs, ks, w, R, kc, kp, dst, false);
    return false;
}

TGT_BW bool gemm_f16_pack_a_split_inf(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc,
                                      int64_t kp, uint32_t *dst)
{
    pack_a(s, rs, ks, w, R, kc, kp, dst, true);
    return false;
}

/* The pair-major B panel (gemm_bf16_pack_fn, kp here B's words, a
 * multiple of 16): one word per k, dst[k * R + q]; zero words for k from
 * kc on and in lines w .. R-1. True when it holds an infinity. */
TGT_BW bool gemm_f16_pack_b_split(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                                  uint32_t *dst)
{
    __mmask16 inf = 0;
    if (rs == 1) { /* lines contiguous (B not transposed): a row of B per k */
        for (int64_t k = 0; k < kp; k++)
            for (int q0 = 0; q0 < R; q0 += 16)
                _mm512_mask_storeu_epi32(dst + k * R + q0, mask16(R - q0),
                                         b_word(k < kc && q0 < w ? load16(s + k * ks + q0, w - q0)
                                                                 : _mm256_setzero_si256(),
                                                &inf));
        return inf != 0;
    }
    /* k contiguous: 16 lines x 16 k, transposed into 16 k's words */
    for (int q0 = 0; q0 < R; q0 += 16)
        for (int64_t k0 = 0; k0 < kp; k0 += 16) {
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = b_word(q0 + i < w && k0 < kc ? load16(s + (q0 + i) * rs + k0, kc - k0) : _mm256_setzero_si256(),
                              &inf);
            transpose16(v);
            const __mmask16 lanes = mask16(R - q0);
            for (int j = 0; j < 16; j++)
                _mm512_mask_storeu_epi32(dst + (k0 + j) * R + q0, lanes, v[j]);
        }
    return inf != 0;
}

#else
/* ISO C wants at least one declaration in a translation unit. */
typedef int gemm_f16_split_unused;
#endif
