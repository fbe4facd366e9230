/*
 * bf16_x86.h - f32 -> bf16 on 16 AVX-512 lanes, bit for bit as the
 * reference (convert.c's amp_f32_to_bf16) rounds, for amp_convert's
 * vector paths (convert_x86.c) and the GEMM's 16-bit C tiles
 * (gemm_bf16_x86.c). Included only by x86 files built with AVX-512
 * targets.
 */
#ifndef AMPC_BF16_X86_H
#define AMPC_BF16_X86_H

#include <immintrin.h>

/* The reference's rounding: round to nearest even at bit 16 (a carry into
 * the exponent gives the next binade or inf, as it should), NaNs become
 * (x >> 16) | 0x40. Result in the low half of each lane. Integer
 * operations only, so like the reference it sets no MXCSR flag (a float
 * compare would flag invalid on a signalling NaN). */
__attribute__((target("avx512f"))) static inline __m512i bf16_round_512(__m512 v)
{
    __m512i x = _mm512_castps_si512(v);
    __m512i absx = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(absx, _mm512_set1_epi32(0x7F800000));
    __m512i hi = _mm512_srli_epi32(x, 16);
    __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, lsb), _mm512_set1_epi32(0x7FFF)), 16);
    return _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
}

#endif
