/*
 * attention_kv.c - the CPU attention's two products for a few queries over
 * a KV cache read where it lies (attention_kv.h): a decode step's one
 * query per head against every cached key and value.
 *
 * The packed path (attention.c) copies each call's keys and values into
 * f32 tiles (K transposed, V padded) before its products: for one query
 * that copy is most of the attention's time, and it grows with the
 * context (at 128 cached positions, a fifth of a bf16 decode step of the
 * width-384 gpt). Here the scores read 16 key rows of 16 values at a
 * time, widen them (exactly: bf16 and f16 to f32 are exact), transpose
 * them in registers and run the packed kernel's FMA chain over d; the
 * values' product adds each row, widened, onto O as the packed kernel
 * does, key by key. So the results are the packed path's bits, and the
 * cached forward stays bit for bit the full attention's rows.
 */
#include "backend/cpu/attention_kv.h"
#include "base/base.h"

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10))
#define KV_X86 1
#include <immintrin.h>
#include "backend/cpu/gemm/transpose_x86.h"
#endif

bool attn_kv_direct_available(void)
{
#if defined(KV_X86)
    const unsigned need = AMP_CPU_AVX512F | AMP_CPU_AVX512BW;
    return (amp_cpu_features() & need) == need;
#else
    return false;
#endif
}

#if defined(KV_X86)
#define TGT_KV __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Elements [0, n) of a row of dt as f32 (n <= 16; zeros past n). */
TGT_KV static inline __m512 widen(const void *src, amp_dtype dt, int64_t n)
{
    const __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    if (dt == AMP_F32)
        return _mm512_maskz_loadu_ps(m, src);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src);
    if (dt == AMP_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

TGT_KV void attn_kv_scores(int64_t nq, int64_t nk, int64_t D, const float *q, int64_t ldq, const void *k,
                           int64_t kv_ld, amp_dtype dt, float *S, int64_t lds)
{
    const size_t es = amp_dtype_size(dt);
    for (int64_t c0 = 0; c0 < nk; c0 += 16) {
        __m512 acc[ATTN_KV_MAX_Q];
        for (int64_t r = 0; r < nq; r++)
            acc[r] = _mm512_setzero_ps();
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            const int64_t nd = D - d0 < 16 ? D - d0 : 16;
            __m512i t[16];
            for (int i = 0; i < 16; i++) /* key c0 + i's values d0 .. d0 + 15 */
                t[i] = c0 + i < nk ? _mm512_castps_si512(widen((const char *)k + (size_t)((c0 + i) * kv_ld + d0) * es,
                                                               dt, nd))
                                   : _mm512_setzero_si512();
            transpose16(t); /* t[j]: value d0 + j of the 16 keys */
            for (int64_t j = 0; j < nd; j++)
                for (int64_t r = 0; r < nq; r++)
                    acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d0 + j]), _mm512_castsi512_ps(t[j]), acc[r]);
        }
        for (int64_t r = 0; r < nq; r++)
            _mm512_storeu_ps(S + r * lds + c0, acc[r]);
    }
}

TGT_KV void attn_kv_values(int64_t nq, int64_t nk, int64_t D, const float *p, int64_t ldp, const void *v,
                           int64_t kv_ld, amp_dtype dt, float *O, int64_t ldo)
{
    const size_t es = amp_dtype_size(dt);
    for (int64_t d0 = 0; d0 < D; d0 += 64) { /* 4 vectors of O per query at a time */
        const int nv = (int)((D - d0 < 64 ? D - d0 + 15 : 64) / 16);
        __m512 acc[ATTN_KV_MAX_Q][4];
        for (int64_t r = 0; r < nq; r++)
            for (int u = 0; u < nv; u++)
                acc[r][u] = _mm512_loadu_ps(O + r * ldo + d0 + 16 * u);
        for (int64_t c = 0; c < nk; c++) {
            const char *row = (const char *)v + (size_t)(c * kv_ld + d0) * es;
            __m512 x[4];
            for (int u = 0; u < nv; u++)
                x[u] = widen(row + (size_t)(16 * u) * es, dt, D - d0 - 16 * u);
            for (int64_t r = 0; r < nq; r++) {
                const __m512 pr = _mm512_set1_ps(p[r * ldp + c]);
                for (int u = 0; u < nv; u++)
                    acc[r][u] = _mm512_fmadd_ps(pr, x[u], acc[r][u]);
            }
        }
        for (int64_t r = 0; r < nq; r++)
            for (int u = 0; u < nv; u++)
                _mm512_storeu_ps(O + r * ldo + d0 + 16 * u, acc[r][u]);
    }
}
#else
void attn_kv_scores(int64_t nq, int64_t nk, int64_t D, const float *q, int64_t ldq, const void *k, int64_t kv_ld,
                    amp_dtype dt, float *S, int64_t lds)
{
    (void)nq, (void)nk, (void)D, (void)q, (void)ldq, (void)k, (void)kv_ld, (void)dt, (void)S, (void)lds;
}

void attn_kv_values(int64_t nq, int64_t nk, int64_t D, const float *p, int64_t ldp, const void *v, int64_t kv_ld,
                    amp_dtype dt, float *O, int64_t ldo)
{
    (void)nq, (void)nk, (void)D, (void)p, (void)ldp, (void)v, (void)kv_ld, (void)dt, (void)O, (void)ldo;
}
#endif
