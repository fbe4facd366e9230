/*
 * transpose_x86.h - the 16 x 16 in-register transpose of 32-bit words that
 * the GEMM packers share (f32 panels in gemm_x86.c, bf16 pair words in
 * gemm_bf16_x86.c). Included only by x86 files built with AVX-512 targets.
 */
#ifndef AMPC_TRANSPOSE_X86_H
#define AMPC_TRANSPOSE_X86_H

#include <immintrin.h>

/* Transposes a 16 x 16 block of 32-bit words in place: r[i] lane j <- r[j]
 * lane i (unpack within 128-bit lanes, then move whole lanes). */
__attribute__((target("avx512f"))) static inline void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* r[4g + j], 128-bit lane L: column 4L + j of rows 4g .. 4g+3. */
    for (int j = 0; j < 4; j++) {
        __m512i u0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
        __m512i u1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
        __m512i u2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
        __m512i u3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
        t[j] = _mm512_shuffle_i32x4(u0, u2, 0x88);
        t[4 + j] = _mm512_shuffle_i32x4(u1, u3, 0x88);
        t[8 + j] = _mm512_shuffle_i32x4(u0, u2, 0xdd);
        t[12 + j] = _mm512_shuffle_i32x4(u1, u3, 0xdd);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

#endif
