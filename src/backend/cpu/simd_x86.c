/*
 * simd_x86.c - AVX-512 versions of the ops' hottest inner loops (see
 * simd.h), compiled with target attributes and picked at run time.
 *
 * exp is Cephes' expf (exp_x86.h: ~1 ulp, overflow inf, underflow 0,
 * NaN kept). GELU (tanh form) is then x / (1 + exp(-2u)), the same
 * expression as the C kernel, and its derivative uses 1 + tanh(u) = 2s,
 * 1 - tanh(u)^2 = 4s(1 - s) with s = 1 / (1 + exp(-2u)) and
 * 1 - s = exp(-2u) s, which avoids the cancellation of 1 - t*t near
 * |t| = 1.
 */
#include "backend/cpu/simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>

#include "backend/cpu/exp_x86.h"

#define TGT __attribute__((target("avx512f")))

#define K_SQRT_2_PI 0.79788456080286535588f
#define K_KAPPA 0.044715f

/* u = sqrt(2/pi) (x + kappa x^3), as the C kernel computes it. */
TGT static inline __m512 gelu_u(__m512 x)
{
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(K_KAPPA), x), x), x);
    return _mm512_mul_ps(_mm512_set1_ps(K_SQRT_2_PI), _mm512_add_ps(x, x3));
}

TGT static inline __m512 gelu16(__m512 x)
{
    __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), gelu_u(x)));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

TGT static inline __m512 gelu_grad16(__m512 x)
{
    /* exp capped below overflow so that 1 - s = e s stays finite */
    __m512 a = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_mul_ps(_mm512_set1_ps(-2.0f), gelu_u(x)));
    __m512 e = exp16(a);
    __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    __m512 one_minus_s = _mm512_mul_ps(e, s);
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 du = _mm512_mul_ps(_mm512_set1_ps(K_SQRT_2_PI),
                              _mm512_fmadd_ps(_mm512_set1_ps(3.0f * K_KAPPA), x2, _mm512_set1_ps(1.0f)));
    /* 0.5 (1 + t) + 0.5 x (1 - t^2) du = s + 2 x s (1 - s) du */
    __m512 second = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), s), one_minus_s), du);
    /* Where du overflows (|x| past ~1e12, or infinite) the C formula's
     * 1 - t^2 is exactly 0 and 0 * inf gives NaN: give the same. */
    __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(du), _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
    return _mm512_mask_mov_ps(_mm512_add_ps(s, second), big, _mm512_set1_ps(NAN));
}

TGT static void gelu_tanh_avx512(const float *x, float *out, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(out + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

TGT static void gelu_tanh_grad_avx512(const float *g, const float *x, float *out, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(g + i), gelu_grad16(_mm512_loadu_ps(x + i))));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, g + i), gelu_grad16(_mm512_maskz_loadu_ps(m, x + i)));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

/* 2x2 max pool row: even / odd lanes split with a two-source permute. */
TGT static void max2x2_avx512(const float *r0, const float *r1, int64_t wo, int32_t base, int32_t W, float *y,
                              int32_t *idx)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i lane2 = _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
    for (int64_t k = 0; k < wo; k += 16) {
        int64_t cnt = wo - k < 16 ? wo - k : 16;
        __mmask16 m = (__mmask16)((1u << cnt) - 1u);
        /* 2*cnt inputs per row: the first 16 and the rest */
        __mmask16 mlo = cnt >= 8 ? (__mmask16)0xFFFF : (__mmask16)((1u << (2 * cnt)) - 1u);
        __mmask16 mhi = cnt > 8 ? (__mmask16)((1u << (2 * cnt - 16)) - 1u) : (__mmask16)0;
        const float *a = r0 + 2 * k, *b = r1 + 2 * k;
        __m512 a0 = _mm512_maskz_loadu_ps(mlo, a), a1 = _mm512_maskz_loadu_ps(mhi, a + 16);
        __m512 b0 = _mm512_maskz_loadu_ps(mlo, b), b1 = _mm512_maskz_loadu_ps(mhi, b + 16);
        __m512 best = _mm512_permutex2var_ps(a0, even, a1);
        __m512i off = _mm512_setzero_si512();
        __m512 cand[3] = {_mm512_permutex2var_ps(a0, odd, a1), _mm512_permutex2var_ps(b0, even, b1),
                          _mm512_permutex2var_ps(b0, odd, b1)};
        const int32_t offs[3] = {1, W, W + 1};
        for (int c = 0; c < 3; c++) {
            __mmask16 take = _mm512_cmp_ps_mask(cand[c], best, _CMP_GT_OQ) |
                             _mm512_cmp_ps_mask(cand[c], cand[c], _CMP_UNORD_Q);
            best = _mm512_mask_mov_ps(best, take, cand[c]);
            off = _mm512_mask_mov_epi32(off, take, _mm512_set1_epi32(offs[c]));
        }
        _mm512_mask_storeu_ps(y + k, m, best);
        if (idx) {
            __m512i at = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * (int32_t)k), _mm512_add_epi32(lane2, off));
            _mm512_mask_storeu_epi32(idx + k, m, at);
        }
    }
}

/* The 2x2 max pool on 16-bit rows. 16 windows' inputs in a row are 32
 * values = 16 words, word i holding columns 2i (low half) and 2i + 1
 * (high half). A bf16 widens to f32 by moving it to a word's high half,
 * so the even columns are the words shifted up and the odd ones the words
 * with the low half cleared: no permutes; f16 halves are narrowed out of
 * the words and converted (F16C's VCVTPH2PS, exact). */
#define TGT_BW __attribute__((target("avx512f,avx512bw")))

static inline __mmask32 mask_cols(int64_t cols) { return cols >= 32 ? (__mmask32)~0u : (__mmask32)((1u << cols) - 1u); }

/* The low (odd: high) halves of the words of w, widened to f32. */
TGT_BW static inline __m512 widen_half(const bool F16, const bool odd, __m512i w)
{
    if (!F16)
        return _mm512_castsi512_ps(odd ? _mm512_and_si512(w, _mm512_set1_epi32((int)0xFFFF0000u))
                                       : _mm512_slli_epi32(w, 16));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(odd ? _mm512_srli_epi32(w, 16) : w));
}

/* max2x2_avx512 for 16-bit rows: the same candidates in the same order,
 * the winners widened (exact). */
TGT_BW static inline __attribute__((always_inline)) void max2x2_half(const bool F16, const uint16_t *r0,
                                                                     const uint16_t *r1, int64_t wo, int32_t base,
                                                                     int32_t W, float *y, int32_t *idx)
{
    const __m512i lane2 = _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
    for (int64_t k = 0; k < wo; k += 16) {
        const int64_t cnt = wo - k < 16 ? wo - k : 16;
        const __mmask16 m = (__mmask16)((1u << cnt) - 1u);
        const __mmask32 mc = mask_cols(2 * cnt);
        const __m512i a = _mm512_maskz_loadu_epi16(mc, r0 + 2 * k), b = _mm512_maskz_loadu_epi16(mc, r1 + 2 * k);
        __m512 best = widen_half(F16, false, a);
        __m512i off = _mm512_setzero_si512();
        const __m512 cand[3] = {widen_half(F16, true, a), widen_half(F16, false, b), widen_half(F16, true, b)};
        const int32_t offs[3] = {1, W, W + 1};
        for (int c = 0; c < 3; c++) {
            const __mmask16 take = _mm512_cmp_ps_mask(cand[c], best, _CMP_GT_OQ) |
                                   _mm512_cmp_ps_mask(cand[c], cand[c], _CMP_UNORD_Q);
            best = _mm512_mask_mov_ps(best, take, cand[c]);
            off = _mm512_mask_mov_epi32(off, take, _mm512_set1_epi32(offs[c]));
        }
        _mm512_mask_storeu_ps(y + k, m, best);
        if (idx)
            _mm512_mask_storeu_epi32(
                idx + k, m, _mm512_add_epi32(_mm512_set1_epi32(base + 2 * (int32_t)k), _mm512_add_epi32(lane2, off)));
    }
}

TGT_BW static void max2x2_bf16_avx512(const uint16_t *r0, const uint16_t *r1, int64_t wo, int32_t base, int32_t W,
                                      float *y, int32_t *idx)
{
    max2x2_half(false, r0, r1, wo, base, W, y, idx);
}

TGT_BW static void max2x2_f16_avx512(const uint16_t *r0, const uint16_t *r1, int64_t wo, int32_t base, int32_t W,
                                     float *y, int32_t *idx)
{
    max2x2_half(true, r0, r1, wo, base, W, y, idx);
}

/* The 2x2 max pool's backward for one row of windows, 16-bit: dx rows d0,
 * d1 (columns 0 .. 2 wo - 1) get 0.0f + g (g widened, the sum rounded
 * back: exact, -0 to +0, a NaN quieted, a subnormal f32 flushed when the
 * thread flushes them) at each window's argmax idx (an offset in the
 * plane, the window's top left at base + 2k), +0 elsewhere. bf16: the
 * sum's bits shifted down are its bf16 (it is a widened bf16, or a NaN
 * whose quiet bit the add set: the rounding's own result); f16: the sum
 * converted back (VCVTPS2PH, exact on it). */
TGT_BW static inline __attribute__((always_inline)) void unpool2x2_half(const bool F16, const uint16_t *g,
                                                                        const int32_t *idx, int64_t wo, int32_t base,
                                                                        int32_t W, uint16_t *d0, uint16_t *d1)
{
    const __m512i lane2 = _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t k = 0; k < wo; k += 16) {
        const int64_t cnt = wo - k < 16 ? wo - k : 16;
        const __mmask16 m = (__mmask16)((1u << cnt) - 1u);
        const __mmask32 mc = mask_cols(2 * cnt);
        /* the gradients in the words' low halves */
        const __m512i gv = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16((__mmask32)m, g + k)));
        const __m512 sum = _mm512_add_ps(zero, widen_half(F16, false, gv));
        const __m512i lo = F16 ? _mm512_cvtepu16_epi32(_mm512_cvtps_ph(sum, _MM_FROUND_TO_NEAREST_INT))
                               : _mm512_srli_epi32(_mm512_castps_si512(sum), 16);
        const __m512i at = _mm512_maskz_loadu_epi32(m, idx + k);
        const __m512i p = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * (int32_t)k), lane2);
        const __mmask16 e0 = _mm512_cmpeq_epi32_mask(at, p);
        const __mmask16 o0 = _mm512_cmpeq_epi32_mask(at, _mm512_add_epi32(p, _mm512_set1_epi32(1)));
        const __mmask16 e1 = _mm512_cmpeq_epi32_mask(at, _mm512_add_epi32(p, _mm512_set1_epi32(W)));
        const __mmask16 o1 = _mm512_cmpeq_epi32_mask(at, _mm512_add_epi32(p, _mm512_set1_epi32(W + 1)));
        const __m512i hi = _mm512_slli_epi32(lo, 16);
        _mm512_mask_storeu_epi16(d0 + 2 * k, mc,
                                 _mm512_or_si512(_mm512_maskz_mov_epi32(e0, lo), _mm512_maskz_mov_epi32(o0, hi)));
        _mm512_mask_storeu_epi16(d1 + 2 * k, mc,
                                 _mm512_or_si512(_mm512_maskz_mov_epi32(e1, lo), _mm512_maskz_mov_epi32(o1, hi)));
    }
}

TGT_BW static void unpool2x2_bf16_avx512(const uint16_t *g, const int32_t *idx, int64_t wo, int32_t base, int32_t W,
                                         uint16_t *d0, uint16_t *d1)
{
    unpool2x2_half(false, g, idx, wo, base, W, d0, d1);
}

TGT_BW static void unpool2x2_f16_avx512(const uint16_t *g, const int32_t *idx, int64_t wo, int32_t base, int32_t W,
                                        uint16_t *d0, uint16_t *d1)
{
    unpool2x2_half(true, g, idx, wo, base, W, d0, d1);
}

/* The upper 8 lanes. */
TGT static inline __m256 hi256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

TGT static float rowmax_avx512(const float *x, int64_t n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, v);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, v);
    }
    return nan ? NAN : _mm512_reduce_max_ps(mx);
}

TGT static double exp_sum_avx512(float *x, int64_t n, float sub)
{
    const __m512 s = _mm512_set1_ps(sub);
    __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
        _mm512_storeu_ps(x + i, e);
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(hi256(e)));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
        _mm512_mask_storeu_ps(x + i, m, e);
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(hi256(e)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}

TGT static double dot_avx512(const float *a, const float *b, int64_t n)
{
    __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        __m512 x = _mm512_maskz_loadu_ps(m, a + i), y = _mm512_maskz_loadu_ps(m, b + i);
        acc0 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), _mm512_cvtps_pd(_mm512_castps512_ps256(y)),
                               acc0);
        acc1 = _mm512_fmadd_pd(_mm512_cvtps_pd(hi256(x)), _mm512_cvtps_pd(hi256(y)), acc1);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}

static const simd_row_fns rows_avx512 = {rowmax_avx512, exp_sum_avx512, dot_avx512};

static bool have_avx512(void) { return (amp_cpu_features() & AMP_CPU_AVX512F) != 0; }

simd_max2x2_fn simd_pick_max2x2(void) { return have_avx512() ? max2x2_avx512 : NULL; }

static bool have_avx512bw(void)
{
    const unsigned need = AMP_CPU_AVX512F | AMP_CPU_AVX512BW;
    return (amp_cpu_features() & need) == need;
}

simd_max2x2_half_fn simd_pick_max2x2_half(amp_dtype dt)
{
    if (!have_avx512bw())
        return NULL;
    return dt == AMP_BF16 ? max2x2_bf16_avx512 : dt == AMP_F16 ? max2x2_f16_avx512 : NULL;
}

simd_unpool2x2_half_fn simd_pick_unpool2x2_half(amp_dtype dt)
{
    if (!have_avx512bw())
        return NULL;
    return dt == AMP_BF16 ? unpool2x2_bf16_avx512 : dt == AMP_F16 ? unpool2x2_f16_avx512 : NULL;
}
simd_gelu_tanh_fn simd_pick_gelu_tanh(void) { return have_avx512() ? gelu_tanh_avx512 : NULL; }
simd_gelu_tanh_grad_fn simd_pick_gelu_tanh_grad(void) { return have_avx512() ? gelu_tanh_grad_avx512 : NULL; }
const simd_row_fns *simd_pick_rows(void) { return have_avx512() ? &rows_avx512 : NULL; }

#else

simd_max2x2_fn simd_pick_max2x2(void) { return NULL; }
simd_max2x2_half_fn simd_pick_max2x2_half(amp_dtype dt)
{
    (void)dt;
    return NULL;
}

simd_unpool2x2_half_fn simd_pick_unpool2x2_half(amp_dtype dt)
{
    (void)dt;
    return NULL;
}
simd_gelu_tanh_fn simd_pick_gelu_tanh(void) { return NULL; }
simd_gelu_tanh_grad_fn simd_pick_gelu_tanh_grad(void) { return NULL; }
const simd_row_fns *simd_pick_rows(void) { return NULL; }

#endif
