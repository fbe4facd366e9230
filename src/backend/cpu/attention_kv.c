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
 * time (bf16: of 32, two to a 32-bit word), widen them (exactly: bf16 and
 * f16 to f32 are exact), transpose them in registers and run the packed
 * kernel's FMA chain over d; the
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

/* Key c0 + i's values d0 .. d0 + nd - 1 for i < 16 (zeros past nk),
 * widened, transposed: t[j] holds value d0 + j of the 16 keys. FULL: all
 * 16 keys and 16 values are there (no checks, no masks). */
TGT_KV static inline __attribute__((always_inline)) void key_columns(const bool FULL, const amp_dtype DT,
                                                                     const void *k, int64_t kv_ld, int64_t c0,
                                                                     int64_t nk, int64_t d0, int64_t nd, __m512i t[16])
{
    const size_t es = DT == AMP_F32 ? 4 : 2;
    for (int i = 0; i < 16; i++)
        t[i] = FULL || c0 + i < nk
                   ? _mm512_castps_si512(widen((const char *)k + (size_t)((c0 + i) * kv_ld + d0) * es, DT,
                                               FULL ? 16 : nd))
                   : _mm512_setzero_si512();
    transpose16(t);
}

/* The scores of NQ queries against NB blocks of 16 keys from c0: NQ x NB
 * FMA chains, one per query and block, each over d in order. NQ, NB, the
 * dtype and FULL (every block whole, D a multiple of 16) are constants in
 * each inlined copy, so the chains stay in registers and the loops have
 * no checks; the NB blocks' chains are independent, so one block's FMAs
 * run while the next block's keys are widened and transposed (a single
 * chain of D dependent FMAs per 16 keys was the kernel's bound). */
TGT_KV static inline __attribute__((always_inline)) void
score_blocks(const int NQ, const int NB, const amp_dtype DT, const bool FULL, int64_t c0, int64_t nk, int64_t D,
             const float *q, int64_t ldq, const void *k, int64_t kv_ld, float *S, int64_t lds)
{
    __m512 acc[4][ATTN_KV_MAX_Q];
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < NQ; r++)
            acc[b][r] = _mm512_setzero_ps();
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
        const int64_t nd = FULL ? 16 : D - d0 < 16 ? D - d0 : 16;
        for (int b = 0; b < NB; b++) {
            __m512i t[16];
            key_columns(FULL, DT, k, kv_ld, c0 + 16 * b, nk, d0, nd, t);
            for (int64_t j = 0; j < nd; j++)
                for (int r = 0; r < NQ; r++)
                    acc[b][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d0 + j]), _mm512_castsi512_ps(t[j]),
                                                acc[b][r]);
        }
    }
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < NQ; r++)
            _mm512_storeu_ps(S + r * lds + c0 + 16 * b, acc[b][r]);
}

/* score_blocks for whole bf16 blocks, D a multiple of 32: a key's 32
 * values d0 .. d0 + 31 are 16 words of (d, d + 1) pairs, so one
 * transpose of 16 keys' words gives 32 columns (a bf16 widens to f32 by
 * moving it to the word's high half: the even value shifted up, the odd
 * one masked), half the shuffles of widening first. The FMA order over d
 * is score_blocks'. */
TGT_KV static inline __attribute__((always_inline)) void score_blocks_bf16(const int NQ, const int NB, int64_t c0,
                                                                           int64_t D, const float *q, int64_t ldq,
                                                                           const void *k, int64_t kv_ld, float *S,
                                                                           int64_t lds)
{
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 acc[4][ATTN_KV_MAX_Q];
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < NQ; r++)
            acc[b][r] = _mm512_setzero_ps();
    for (int64_t d0 = 0; d0 < D; d0 += 32) {
        for (int b = 0; b < NB; b++) {
            __m512i t[16];
            for (int i = 0; i < 16; i++)
                t[i] = _mm512_loadu_si512((const uint16_t *)k + (size_t)((c0 + 16 * b + i) * kv_ld + d0));
            transpose16(t); /* t[j]: the pair (d0 + 2j, d0 + 2j + 1) of the 16 keys */
            for (int j = 0; j < 16; j++) {
                const __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(t[j], 16));
                const __m512 od = _mm512_castsi512_ps(_mm512_and_si512(t[j], hi));
                for (int r = 0; r < NQ; r++)
                    acc[b][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d0 + 2 * j]), ev, acc[b][r]);
                for (int r = 0; r < NQ; r++)
                    acc[b][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d0 + 2 * j + 1]), od, acc[b][r]);
            }
        }
    }
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < NQ; r++)
            _mm512_storeu_ps(S + r * lds + c0 + 16 * b, acc[b][r]);
}

/* NQ queries: whole groups of 4 blocks of 16 keys at a time (2 for 3 or 4
 * queries, to stay within the 32 vector registers), then the rest one
 * block each. */
TGT_KV static inline __attribute__((always_inline)) void scores_q(const int NQ, const amp_dtype DT, int64_t nk,
                                                                  int64_t D, const float *q, int64_t ldq,
                                                                  const void *k, int64_t kv_ld, float *S, int64_t lds)
{
    const int NB = NQ <= 2 ? 4 : 2;
    int64_t c0 = 0;
    if (DT == AMP_BF16 && D % 32 == 0)
        for (; c0 + 16 * NB <= nk; c0 += 16 * NB)
            score_blocks_bf16(NQ, NB, c0, D, q, ldq, k, kv_ld, S, lds);
    else if (D % 16 == 0)
        for (; c0 + 16 * NB <= nk; c0 += 16 * NB)
            score_blocks(NQ, NB, DT, true, c0, nk, D, q, ldq, k, kv_ld, S, lds);
    for (; c0 < nk; c0 += 16)
        score_blocks(NQ, 1, DT, false, c0, nk, D, q, ldq, k, kv_ld, S, lds);
}

#define KV_BY_Q(F, DT, ...)                                                                                         \
    do {                                                                                                            \
        switch (nq) {                                                                                               \
        case 1: F(1, DT, __VA_ARGS__); break;                                                                       \
        case 2: F(2, DT, __VA_ARGS__); break;                                                                       \
        case 3: F(3, DT, __VA_ARGS__); break;                                                                       \
        case 4: F(4, DT, __VA_ARGS__); break;                                                                       \
        default: break; /* no query, or more than the contract's ATTN_KV_MAX_Q */                                   \
        }                                                                                                           \
    } while (0)
#define KV_BY_DT_Q(F, ...)                                                                                          \
    do {                                                                                                            \
        if (dt == AMP_BF16)                                                                                         \
            KV_BY_Q(F, AMP_BF16, __VA_ARGS__);                                                                      \
        else if (dt == AMP_F16)                                                                                     \
            KV_BY_Q(F, AMP_F16, __VA_ARGS__);                                                                       \
        else                                                                                                        \
            KV_BY_Q(F, AMP_F32, __VA_ARGS__);                                                                       \
    } while (0)

TGT_KV void attn_kv_scores(int64_t nq, int64_t nk, int64_t D, const float *q, int64_t ldq, const void *k,
                           int64_t kv_ld, amp_dtype dt, float *S, int64_t lds)
{
    KV_BY_DT_Q(scores_q, nk, D, q, ldq, k, kv_ld, S, lds);
}

/* O's columns d0 .. d0 + 16 * NV - 1 for NQ queries, key by key. NQ, NV
 * and the dtype are constants in each inlined copy: the NQ x NV sums stay
 * in registers across the keys. */
TGT_KV static inline __attribute__((always_inline)) void value_strip(const int NQ, const int NV, const amp_dtype DT,
                                                                     int64_t d0, int64_t nk, int64_t D, const float *p,
                                                                     int64_t ldp, const void *v, int64_t kv_ld,
                                                                     float *O, int64_t ldo)
{
    const size_t es = DT == AMP_F32 ? 4 : 2;
    __m512 acc[ATTN_KV_MAX_Q][4];
    for (int r = 0; r < NQ; r++)
        for (int u = 0; u < NV; u++)
            acc[r][u] = _mm512_loadu_ps(O + r * ldo + d0 + 16 * u);
    for (int64_t c = 0; c < nk; c++) {
        const char *row = (const char *)v + (size_t)(c * kv_ld + d0) * es;
        __m512 x[4];
        for (int u = 0; u < NV; u++)
            x[u] = widen(row + (size_t)(16 * u) * es, DT, D - d0 - 16 * u);
        for (int r = 0; r < NQ; r++) {
            const __m512 pr = _mm512_set1_ps(p[r * ldp + c]);
            for (int u = 0; u < NV; u++)
                acc[r][u] = _mm512_fmadd_ps(pr, x[u], acc[r][u]);
        }
    }
    for (int r = 0; r < NQ; r++)
        for (int u = 0; u < NV; u++)
            _mm512_storeu_ps(O + r * ldo + d0 + 16 * u, acc[r][u]);
}

TGT_KV static inline __attribute__((always_inline)) void values_q(const int NQ, const amp_dtype DT, int64_t nk,
                                                                  int64_t D, const float *p, int64_t ldp,
                                                                  const void *v, int64_t kv_ld, float *O, int64_t ldo)
{
    int64_t d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) /* 4 vectors of O per query at a time */
        value_strip(NQ, 4, DT, d0, nk, D, p, ldp, v, kv_ld, O, ldo);
    for (; d0 < D; d0 += 16)
        value_strip(NQ, 1, DT, d0, nk, D, p, ldp, v, kv_ld, O, ldo);
}

TGT_KV void attn_kv_values(int64_t nq, int64_t nk, int64_t D, const float *p, int64_t ldp, const void *v,
                           int64_t kv_ld, amp_dtype dt, float *O, int64_t ldo)
{
    KV_BY_DT_Q(values_q, nk, D, p, ldp, v, kv_ld, O, ldo);
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
