/*
 * convert_x86.c - the vector paths behind amp_convert for f32 <-> f16 and
 * f32 <-> bf16, and the run-time choice among them.
 *
 * Every path gives the same bits as the scalar reference in convert.c for
 * every input (tests/test_dtype_exhaustive.c checks all 2^32 f32 patterns):
 *   f32 -> f16   AVX-512F or F16C VCVTPS2PH with the rounding fixed to
 *                nearest-even by the immediate (MXCSR.RC is not consulted;
 *                DAZ cannot matter because every f32 subnormal rounds to a
 *                signed zero in f16 anyway). NaNs come out as the reference
 *                makes them: quiet bit set, top 9 payload bits kept.
 *   f16 -> f32   AVX-512F or F16C VCVTPH2PS: exact, and it quiets
 *                signalling NaNs (0x7C01 -> 0x7FC02000) as the reference does.
 *   f32 -> bf16  integer rounding (x + 0x7FFF + lsb) on AVX-512F or AVX2,
 *                NaNs quieted by a blend. The AVX512-BF16 instruction
 *                VCVTNEPS2BF16 always treats f32 subnormals as zero (the
 *                reference rounds them: 0x007FFFFF -> 0x0080), so its path
 *                redoes any vector holding a subnormal with the integer
 *                rounding; normals, infinities and NaNs it gets right.
 *   bf16 -> f32  a zero-extend and shift on AVX-512F or AVX2 (bf16 is the
 *                top half of an f32; signalling NaNs stay signalling, as in
 *                the reference and PyTorch).
 * Tails shorter than a vector go to the scalar reference (f16 -> f32 on
 * AVX-512F: all but an odd last value in one masked vector). No result
 * depends on MXCSR: the f16 instructions take their rounding from the
 * immediate and ignore FTZ/DAZ for these conversions, the bf16 paths are
 * integer code or VCVTNEPS2BF16, which ignores MXCSR (test_dtype checks all
 * paths under FTZ+DAZ and other rounding modes). The f16 instructions do
 * set MXCSR status flags (invalid on a signalling NaN, precision), which the
 * scalar code does not; with exceptions masked, the default, that is all.
 *
 * Each path is a function compiled for its ISA with target attributes, so
 * the file needs no -march flag and a path runs only when amp_cpu_features()
 * (which honours amp_cpu_limit) reports its features. On other
 * architectures the pickers return the scalar reference.
 */
#include "dtype/dtype.h"
#include "base/base.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "dtype/bf16_x86.h"

/* GCC 10 and clang 9 know the avx512bf16 target; older compilers build
 * without that path. */
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10)
#define HAVE_BF16_TARGET 1
#endif

#define TGT_F16C __attribute__((target("avx,f16c")))
#define TGT_AVX2 __attribute__((target("avx2")))
#define TGT_AVX512 __attribute__((target("avx512f")))
#define TGT_BF16 __attribute__((target("avx512f,avx512bf16")))

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ------------------------------------------------------------------ f16 */

TGT_F16C static void f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), RNE);
        __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), RNE);
        _mm_storeu_si128((__m128i *)(dst + i), a);
        _mm_storeu_si128((__m128i *)(dst + i + 8), b);
    }
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), RNE));
    cvt_f32_to_f16_scalar(src + i, dst + i, n - i);
}

TGT_F16C static void f16_to_f32_f16c(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        _mm256_storeu_ps(dst + i, a);
        _mm256_storeu_ps(dst + i + 8, b);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    cvt_f16_to_f32_scalar(src + i, dst + i, n - i);
}

TGT_AVX512 static void f32_to_f16_avx512(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), RNE));
    cvt_f32_to_f16_scalar(src + i, dst + i, n - i);
}

TGT_AVX512 static void f16_to_f32_avx512(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, a);
        _mm512_storeu_ps(dst + i + 16, b);
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    /* Tail: short runs (a 12-wide panel line) are common, so the pairs go
     * through one masked vector; masks of 32-bit words keep this AVX-512F
     * only (16-bit masks need BW), and an odd last value goes scalar so no
     * byte past the end is read. */
    size_t pairs = (n - i) / 2;
    if (pairs) {
        __m512i h = _mm512_maskz_loadu_epi32((__mmask16)((1u << pairs) - 1), src + i);
        _mm512_mask_storeu_ps(dst + i, (__mmask16)((1u << (2 * pairs)) - 1),
                              _mm512_cvtph_ps(_mm512_castsi512_si256(h)));
        i += 2 * pairs;
    }
    cvt_f16_to_f32_scalar(src + i, dst + i, n - i);
}

/* ----------------------------------------------------------------- bf16 */

TGT_AVX512 static void f32_to_bf16_avx512(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(bf16_round_512(_mm512_loadu_ps(src + i))));
    cvt_f32_to_bf16_scalar(src + i, dst + i, n - i);
}

TGT_AVX512 static void bf16_to_f32_avx512(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512((void *)(dst + i), _mm512_slli_epi32(h, 16));
    }
    cvt_bf16_to_f32_scalar(src + i, dst + i, n - i);
}

/* AVX2 twin of bf16_round_512 (bf16_x86.h) on 8 lanes (a signed compare is enough:
 * |x| fits in 31 bits). */
TGT_AVX2 static inline __m256i bf16_round_256(__m256 v)
{
    __m256i x = _mm256_castps_si256(v);
    __m256i absx = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i nan = _mm256_cmpgt_epi32(absx, _mm256_set1_epi32(0x7F800000));
    __m256i hi = _mm256_srli_epi32(x, 16);
    __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, lsb), _mm256_set1_epi32(0x7FFF)), 16);
    __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, nan);
}

TGT_AVX2 static void f32_to_bf16_avx2(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = bf16_round_256(_mm256_loadu_ps(src + i));
        __m256i b = bf16_round_256(_mm256_loadu_ps(src + i + 8));
        /* Lanes hold 0..0xFFFF, so the unsigned-saturating pack is exact;
         * it interleaves 128-bit halves, which the permute undoes. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    cvt_f32_to_bf16_scalar(src + i, dst + i, n - i);
}

TGT_AVX2 static void bf16_to_f32_avx2(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    cvt_bf16_to_f32_scalar(src + i, dst + i, n - i);
}

#ifdef HAVE_BF16_TARGET
/* VCVTNEPS2BF16 rounds to nearest even and quiets NaNs as the reference
 * does, but flushes subnormal inputs to a signed zero. A vector with any
 * subnormal lane (exponent 0, mantissa not 0) is redone with the integer
 * rounding; real data rarely has one, so the branch is almost never taken. */
TGT_BF16 static void f32_to_bf16_avx512bf16(const float *src, uint16_t *dst, size_t n)
{
    const __m512i exp_bits = _mm512_set1_epi32(0x7F800000);
    const __m512i mant_bits = _mm512_set1_epi32(0x007FFFFF);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(src + i);
        __m512i x = _mm512_castps_si512(v);
        __mmask16 sub = _mm512_testn_epi32_mask(x, exp_bits) & _mm512_test_epi32_mask(x, mant_bits);
        __m256i out = (__m256i)_mm512_cvtneps_pbh(v);
        if (sub)
            out = _mm512_cvtepi32_epi16(bf16_round_512(v));
        _mm256_storeu_si256((__m256i *)(dst + i), out);
    }
    cvt_f32_to_bf16_scalar(src + i, dst + i, n - i);
}
#endif

#endif /* __x86_64__ */

/* ------------------------------------------------------------- pickers */

cvt_narrow_fn cvt_pick_f32_to_f16(void)
{
#if defined(__x86_64__)
    unsigned f = amp_cpu_features();
    if (f & AMP_CPU_AVX512F)
        return f32_to_f16_avx512;
    if (f & AMP_CPU_F16C)
        return f32_to_f16_f16c;
#endif
    return cvt_f32_to_f16_scalar;
}

cvt_widen_fn cvt_pick_f16_to_f32(void)
{
#if defined(__x86_64__)
    unsigned f = amp_cpu_features();
    if (f & AMP_CPU_AVX512F)
        return f16_to_f32_avx512;
    if (f & AMP_CPU_F16C)
        return f16_to_f32_f16c;
#endif
    return cvt_f16_to_f32_scalar;
}

cvt_narrow_fn cvt_pick_f32_to_bf16(void)
{
#if defined(__x86_64__)
    unsigned f = amp_cpu_features();
#ifdef HAVE_BF16_TARGET
    if ((f & AMP_CPU_AVX512BF16) && (f & AMP_CPU_AVX512F))
        return f32_to_bf16_avx512bf16;
#endif
    if (f & AMP_CPU_AVX512F)
        return f32_to_bf16_avx512;
    if (f & AMP_CPU_AVX2)
        return f32_to_bf16_avx2;
#endif
    return cvt_f32_to_bf16_scalar;
}

cvt_widen_fn cvt_pick_bf16_to_f32(void)
{
#if defined(__x86_64__)
    unsigned f = amp_cpu_features();
    if (f & AMP_CPU_AVX512F)
        return bf16_to_f32_avx512;
    if (f & AMP_CPU_AVX2)
        return bf16_to_f32_avx2;
#endif
    return cvt_bf16_to_f32_scalar;
}
