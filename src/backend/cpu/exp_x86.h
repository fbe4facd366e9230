/*
 * exp_x86.h - e^x on 16 f32 lanes (AVX-512), shared by the ops' vector
 * loops (simd_x86.c) and attention's softmax tiles (attention.c).
 * Included only by x86 files built with AVX-512 targets.
 *
 * Cephes' expf: a degree-7 polynomial on [-ln2/2, ln2/2] after a
 * two-part ln2 reduction (~1 ulp), scaled with VSCALEFPS so overflow
 * gives inf and underflow 0 as libm's expf does; NaN propagates.
 */
#ifndef AMPC_EXP_X86_H
#define AMPC_EXP_X86_H

#include <immintrin.h>

__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x)
{
    /* min(c, x) / max(c, x) return x when x is NaN, so NaN propagates. */
    x = _mm512_min_ps(_mm512_set1_ps(88.8f), x); /* above ln(FLT_MAX): inf */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); /* below: 0 */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

#endif
