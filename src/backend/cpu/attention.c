/*
 * attention.c (CPU) - the CPU backend's attention and attention_backward
 * primitives: fused, tiled scaled dot-product attention (flash-attention
 * style). The op itself (shapes, what is saved) is src/ops/attention.c.
 *
 * Forward, per head and tile of BQ query rows: for each tile of BK keys
 * (tiles wholly past the causal diagonal skipped) S = scale · Q Kᵀ in f32,
 * then an online softmax: each row keeps its running max m and sum l, the
 * tile's probabilities are exp(S - m_new), the f32 output accumulator is
 * rescaled by exp(m_old - m_new) and gets P V added. At the end out = O / l,
 * rounded once to the output dtype, and lse = m + log l. No T x T matrix
 * exists: the scratch is a BQ x BK tile per thread.
 *
 * Backward, per head: D_i = rowsum(dO_i ∘ O_i) (O the forward's output),
 * then for each query tile and each key tile (causal ones skipped):
 *   S = scale · Q_i K_jᵀ, P = exp(S - lse_i), dP = dO_i V_jᵀ,
 *   dS = scale · P ∘ (dP - D_i),
 *   dV_j += Pᵀ dO_i,  dK_j += dSᵀ Q_i,  dQ_i += dS K_j,
 * all accumulated in f32 and each gradient rounded once to the inputs'
 * dtype. Masked entries have P = 0, so they get no gradient. A head is one
 * task (its dK, dV accumulate over every query tile), so the per-head f32
 * dK, dV accumulators need no atomics. The tiles are computed transposed
 * (see the backward section), so that nothing is transposed per tile.
 *
 * Precision: the scores, the mask and the softmax live in f32 whatever the
 * inputs' dtype, so a score like 300 * 300 * 64 / 8 (past f16's 65504)
 * stays finite; the row sums are in f32 lanes (double in the plain C
 * path). exp is Cephes' expf as in simd_x86.c. bf16 inputs on an AMD CPU
 * with AVX512-BF16 run every product on VDPBF16PS (bf16 pairs, f32
 * accumulation; bf16 subnormal inputs count as zero there), with P and dS
 * rounded to bf16 before their products, as PyTorch's CPU flash attention
 * does; everything else (f32, f16, bf16 elsewhere: pick_ctype says why)
 * is widened to f32 and runs on f32 FMA (AVX-512, or plain C).
 *
 * Masking: masked entries of P are set to exactly 0, so finite values in
 * the future never reach a row. A non-finite v (forward) or q, k
 * (backward) in a row's own 64-key tile but past the diagonal does: 0 * inf
 * is NaN in that tile's product (the unfused kernel did that over all T
 * keys).
 *
 * Layout (be_attn_desc): q, k, v, out and the gradients may be [B, H, T,
 * D] (contiguous heads) or [B, T, H, D] (row stride H * D), so the GPT
 * need not permute its heads; q, k, v and their gradients may also be the
 * thirds of one fused [B, T, 3, H, D] projection (row stride 3 H D, out
 * and gout keeping H D: out_ld), so it need not split them either.
 *
 * Threads: amp_parallel_for over (head, query tile) pairs forward, over
 * heads backward, with per-thread scratch; K and V are packed once per
 * call forward (a first parallel pass) and once per head backward. A
 * cached forward of at most ATTN_KV_MAX_Q queries on f32 FMA (a decode
 * step) packs nothing: attention_kv.c reads the cache in place, with the
 * packed products' bits.
 */
#include "backend/cpu/attention_kv.h"
#include "backend/cpu/cpu_backend.h"
#include "base/base.h"
#include "base/parallel.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include "backend/cpu/exp_x86.h"
#include "backend/cpu/gemm/transpose_x86.h"
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10)
#define ATTN_X86 1
#endif
#endif

/* Query and key tile sizes (equal, so that a causal diagonal tile has no
 * row without a key; BK a multiple of 16 and even). */
#define BQ 64
#define BK 64

/* Multiply-adds below which the work runs on the calling thread alone. */
#define ATTN_PAR_MIN 65536.0

/* How products are computed: bf16 pairs on VDPBF16PS, f32 on AVX-512 FMA,
 * or f32 in plain C. A-operands are row-major (bf16: pairs along k in one
 * 32-bit word, low half the even k), B-operands k-major with columns
 * padded to a multiple of 16. */
typedef enum { CT_PLAIN, CT_F32V, CT_DOT } ctype;

static _Atomic int bf16_dot = CPU_ATTN_DOT_AUTO;

void cpu_attention_set_bf16_dot(cpu_attn_dot mode) { bf16_dot = (int)mode; }

/* bf16 products run on VDPBF16PS only where it outruns f32 FMA: AMD's
 * cores (Zen 4, Zen 5) run it at twice the FMA rate, Intel's at half
 * (measured on the Xeon of docs/benchmarks.md: 182 GFLOP/s on 2 cores
 * against 415 for f32 FMA), so there bf16 is widened to f32 and runs on
 * FMA, P and dS staying f32 (GPT-2 124M's attention at T = 1024 took 0.6 s
 * less of a 9 s step so); the GEMM dispatch (gemm/dispatch.c) has the
 * same rule. */
static ctype pick_ctype(amp_dtype dt)
{
#if defined(ATTN_X86)
    unsigned f = amp_cpu_features();
    unsigned dot = AMP_CPU_AVX512F | AMP_CPU_AVX512BW | AMP_CPU_AVX512BF16;
    const int mode = bf16_dot;
    __builtin_cpu_init();
    if (dt == AMP_BF16 && (f & dot) == dot &&
        (mode == CPU_ATTN_DOT_ON || (mode == CPU_ATTN_DOT_AUTO && __builtin_cpu_is("amd"))))
        return CT_DOT;
    if (f & AMP_CPU_AVX512F)
        return CT_F32V;
#else
    (void)dt;
#endif
    return CT_PLAIN;
}

/* k-steps of a reduction of length K: pairs for bf16, else K. */
static inline int64_t ksteps(ctype ct, int64_t K) { return ct == CT_DOT ? (K + 1) / 2 : K; }
static inline int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

/* ----------------------------------------------------------- micro-kernels */

/* C[m x 16 nvt] (f32, row stride ldc) = (acc ? C : 0) + A B over ks k-steps:
 * A a[r * lda + s], B b[s * ldb + j] (32-bit words: f32, or bf16 pairs). */
static void mm_plain(int64_t m, int64_t nvt, int64_t ks, const float *a, int64_t lda, const float *b, int64_t ldb,
                     float *c, int64_t ldc, bool acc)
{
    const int64_t n = 16 * nvt;
    for (int64_t r = 0; r < m; r++) {
        float *cr = c + r * ldc;
        if (!acc)
            memset(cr, 0, (size_t)n * sizeof(float));
        for (int64_t s = 0; s < ks; s++) {
            const float av = a[r * lda + s];
            const float *br = b + s * ldb;
            for (int64_t j = 0; j < n; j++)
                cr[j] += av * br[j];
        }
    }
}

#if defined(ATTN_X86)
#define TGT_F __attribute__((target("avx512f")))
#define TGT_DOT __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))
#define MR 6

/* One mr x (16 nv) block; constant mr and nv unroll it into registers. */
#define BLOCK_BODY(INIT_B, STEP)                                                                             \
    __m512 s_[MR][4];                                                                                        \
    for (int r = 0; r < mr; r++)                                                                             \
        for (int v = 0; v < nv; v++)                                                                         \
            s_[r][v] = acc ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();                    \
    for (int64_t s = 0; s < ks; s++) {                                                                       \
        INIT_B;                                                                                              \
        for (int r = 0; r < mr; r++) {                                                                       \
            STEP;                                                                                            \
        }                                                                                                    \
    }                                                                                                        \
    for (int r = 0; r < mr; r++)                                                                             \
        for (int v = 0; v < nv; v++)                                                                         \
            _mm512_storeu_ps(c + r * ldc + 16 * v, s_[r][v]);

static inline __attribute__((always_inline)) TGT_F void blk_f32(const int mr, const int nv, int64_t ks,
                                                                const float *a, int64_t lda, const float *b,
                                                                int64_t ldb, float *c, int64_t ldc, bool acc)
{
    BLOCK_BODY(__m512 b_[4]; for (int v = 0; v < nv; v++) b_[v] = _mm512_loadu_ps(b + s * ldb + 16 * v),
               const __m512 x_ = _mm512_set1_ps(a[r * lda + s]);
               for (int v = 0; v < nv; v++) s_[r][v] = _mm512_fmadd_ps(x_, b_[v], s_[r][v]))
}

static inline __attribute__((always_inline)) TGT_DOT void blk_dot(const int mr, const int nv, int64_t ks,
                                                                  const uint32_t *a, int64_t lda, const uint32_t *b,
                                                                  int64_t ldb, float *c, int64_t ldc, bool acc)
{
    BLOCK_BODY(__m512bh b_[4];
               for (int v = 0; v < nv; v++) b_[v] = (__m512bh)_mm512_loadu_si512(b + s * ldb + 16 * v),
               const __m512bh x_ = (__m512bh)_mm512_set1_epi32((int)a[r * lda + s]);
               for (int v = 0; v < nv; v++) s_[r][v] = _mm512_dpbf16_ps(s_[r][v], x_, b_[v]))
}

#define NV_SWITCH(FN, MR_, A, C)                                                                              \
    switch (nv) {                                                                                            \
    case 1: FN(MR_, 1, ks, A, lda, bb, ldb, C, ldc, acc); break;                                             \
    case 2: FN(MR_, 2, ks, A, lda, bb, ldb, C, ldc, acc); break;                                             \
    case 3: FN(MR_, 3, ks, A, lda, bb, ldb, C, ldc, acc); break;                                             \
    default: FN(MR_, 4, ks, A, lda, bb, ldb, C, ldc, acc); break;                                            \
    }

#define MM_DRIVER(NAME, TGT, T, FN)                                                                           \
    static TGT void NAME(int64_t m, int64_t nvt, int64_t ks, const T *a, int64_t lda, const T *b, int64_t ldb, \
                         float *c, int64_t ldc, bool acc)                                                    \
    {                                                                                                        \
        for (int64_t v0 = 0; v0 < nvt; v0 += 4) {                                                            \
            const int nv = nvt - v0 < 4 ? (int)(nvt - v0) : 4;                                               \
            const T *bb = b + 16 * v0;                                                                       \
            float *cc = c + 16 * v0;                                                                         \
            int64_t r = 0;                                                                                   \
            for (; r + MR <= m; r += MR)                                                                     \
                NV_SWITCH(FN, MR, a + r * lda, cc + r * ldc)                                                 \
            switch (m - r) {                                                                                 \
            case 0: break;                                                                                   \
            case 1: NV_SWITCH(FN, 1, a + r * lda, cc + r * ldc) break;                                       \
            case 2: NV_SWITCH(FN, 2, a + r * lda, cc + r * ldc) break;                                       \
            case 3: NV_SWITCH(FN, 3, a + r * lda, cc + r * ldc) break;                                       \
            case 4: NV_SWITCH(FN, 4, a + r * lda, cc + r * ldc) break;                                       \
            default: NV_SWITCH(FN, 5, a + r * lda, cc + r * ldc) break;                                      \
            }                                                                                                \
        }                                                                                                    \
    }

MM_DRIVER(mm_f32v, TGT_F, float, blk_f32)
MM_DRIVER(mm_dot, TGT_DOT, uint32_t, blk_dot)
#endif

/* The product in the call's compute type; a and b are 32-bit words. */
static void mm(ctype ct, int64_t m, int64_t n, int64_t ks, const void *a, int64_t lda, const void *b, int64_t ldb,
               float *c, int64_t ldc, bool acc)
{
    const int64_t nvt = (n + 15) / 16;
    if (m <= 0 || nvt <= 0)
        return;
#if defined(ATTN_X86)
    if (ct == CT_DOT) {
        mm_dot(m, nvt, ks, a, lda, b, ldb, c, ldc, acc);
        return;
    }
    if (ct == CT_F32V) {
        mm_f32v(m, nvt, ks, a, lda, b, ldb, c, ldc, acc);
        return;
    }
#endif
    mm_plain(m, nvt, ks, a, lda, b, ldb, c, ldc, acc);
}

/* ---------------------------------------------------------------- packers */

/* Bits lo .. hi-1 of a 16-lane mask (empty when hi <= lo). */
static inline unsigned lanes(int64_t lo, int64_t hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    if (hi <= lo)
        return 0;
    return (unsigned)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

#if defined(ATTN_X86)
/* m rows of `words` 32-bit words, src rows `lds` bytes apart, dst rows ldd
 * words apart: AVX-512 16-word steps, the tail masked. */
TGT_F static void copy_words_v(const char *src, int64_t lds, int64_t m, int64_t words, uint32_t *dst, int64_t ldd)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < words; c += 16) {
            const __mmask16 k = (__mmask16)lanes(0, words - c);
            _mm512_mask_storeu_epi32(dst + r * ldd + c, k, _mm512_maskz_loadu_epi32(k, src + r * lds + 4 * c));
        }
}

/* B-form pairs of K bf16 rows (ld elements apart) of n columns: dst[s * ldb
 * + j] = row 2s | row 2s + 1 << 16 (an odd K's last high half 0), columns
 * n .. pad16(n) zero. */
TGT_DOT static void pairs_bf16_v(const uint16_t *src, int64_t ld, int64_t K, int64_t n, uint32_t *dst, int64_t ldb)
{
    for (int64_t s = 0; s < (K + 1) / 2; s++)
        for (int64_t c = 0; c < n; c += 16) {
            const __mmask16 k = (__mmask16)lanes(0, n - c);
            __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src + 2 * s * ld + c));
            if (2 * s + 1 < K)
                w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
                                                             k, src + (2 * s + 1) * ld + c)),
                                                         16));
            _mm512_storeu_si512(dst + s * ldb + c, w);
        }
}
#endif

#if defined(ATTN_X86)
/* len bf16 values widened to f32 (exact: the 16 bits go on top), 16 at a
 * time in registers. */
TGT_F static void widen_bf16_v(const uint16_t *src, int64_t len, float *dst)
{
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + j)));
        _mm512_storeu_ps(dst + j, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    for (; j < len; j++) {
        const uint32_t u = (uint32_t)src[j] << 16;
        memcpy(dst + j, &u, sizeof u);
    }
}
#endif

/* len elements of src (dtype dt) as f32 into f: bf16 widened inline on the
 * vector kernels (a short row through amp_convert costs its dispatch and
 * tails each time: a fifth of a bf16 attention's time once), the rest by
 * amp_convert. The same values either way. */
static void widen_row(ctype ct, const void *src, amp_dtype dt, int64_t len, float *f)
{
#if defined(ATTN_X86)
    if (ct != CT_PLAIN && dt == AMP_BF16) {
        widen_bf16_v(src, len, f);
        return;
    }
#endif
    (void)ct;
    amp_convert(src, dt, f, AMP_F32, (size_t)len);
}

/* Row `len` elements of src (dtype dt) as the compute type's row: f32
 * into f (len floats), or bf16 into h (len values, then a zero when len is
 * odd). */
static void load_row(ctype ct, const void *src, amp_dtype dt, int64_t len, float *f, uint16_t *h)
{
    if (ct == CT_DOT) {
        if (dt == AMP_BF16)
            memcpy(h, src, (size_t)len * 2);
        else
            amp_convert(src, dt, h, AMP_BF16, (size_t)len);
        if (len & 1)
            h[len] = 0;
    } else {
        if (dt == AMP_F32)
            memcpy(f, src, (size_t)len * sizeof(float));
        else
            widen_row(ct, src, dt, len, f);
    }
}

/* A-form of m rows of K elements (row r at src + r * ld elements of dt):
 * dst row r at dst + r * ksteps(K) words. */
static void pack_a(ctype ct, const void *src, amp_dtype dt, int64_t ld, int64_t m, int64_t K, uint32_t *dst)
{
    const size_t es = amp_dtype_size(dt);
    const int64_t ks = ksteps(ct, K);
#if defined(ATTN_X86)
    if ((ct == CT_DOT && dt == AMP_BF16 && !(K & 1) && !(ld & 1)) || (ct == CT_F32V && dt == AMP_F32)) {
        copy_words_v(src, ld * (int64_t)es, m, ks, dst, ks);
        return;
    }
#endif
    for (int64_t r = 0; r < m; r++)
        load_row(ct, (const char *)src + (size_t)(r * ld) * es, dt, K, (float *)(dst + r * ks),
                 (uint16_t *)(dst + r * ks));
}

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (32-bit
 * words): 16 x 16 blocks in registers where the CPU has AVX-512. */
#if defined(ATTN_X86)
TGT_F static void transpose_v(const uint32_t *src, int64_t lds, int64_t rows, int64_t cols, uint32_t *dst,
                              int64_t ldd)
{
    int64_t r0 = 0;
    for (; r0 + 16 <= rows; r0 += 16) {
        int64_t c0 = 0;
        for (; c0 + 16 <= cols; c0 += 16) {
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = _mm512_loadu_si512(src + (r0 + i) * lds + c0);
            transpose16(v);
            for (int i = 0; i < 16; i++)
                _mm512_storeu_si512(dst + (c0 + i) * ldd + r0, v[i]);
        }
        for (int64_t c = c0; c < cols; c++)
            for (int64_t r = r0; r < r0 + 16; r++)
                dst[c * ldd + r] = src[r * lds + c];
    }
    for (int64_t r = r0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * ldd + r] = src[r * lds + c];
}
#endif

static void transpose_words(const uint32_t *src, int64_t lds, int64_t rows, int64_t cols, uint32_t *dst, int64_t ldd)
{
#if defined(ATTN_X86)
    if (amp_cpu_features() & AMP_CPU_AVX512F) {
        transpose_v(src, lds, rows, cols, dst, ldd);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * ldd + r] = src[r * lds + c];
}

/* m rows of K elements (row r at src + r * ld elements of dt) as A-form
 * rows: the source itself where it already is one, contiguous (f32 for
 * f32 kernels; bf16 with K even and 4-byte aligned for the bf16 one), else
 * packed into buf (m * ksteps(K) words). *lda: the rows' stride in words.
 * Strided rows ([B, T, H, d]: ld = H * d) are packed into contiguous ones
 * (the A operand is read once per column block). */
static const uint32_t *rows_of(ctype ct, const void *src, amp_dtype dt, int64_t ld, int64_t m, int64_t K,
                               uint32_t *buf, int64_t *lda)
{
    if (ld == K && ct != CT_DOT && dt == AMP_F32) {
        *lda = ld;
        return src;
    }
    if (ld == K && ct == CT_DOT && dt == AMP_BF16 && !(K & 1) && !((uintptr_t)src & 3)) {
        *lda = ld / 2;
        return src;
    }
    pack_a(ct, src, dt, ld, m, K, buf);
    *lda = ksteps(ct, K);
    return buf;
}

/* B-form of the transpose of n rows of K elements (row j at src + j * ld):
 * b[s * ldb + j], zero past n (ldb >= n). buf: n * ksteps(K) words. */
static void pack_bt(ctype ct, const void *src, amp_dtype dt, int64_t ld, int64_t n, int64_t K, uint32_t *dst,
                    int64_t ldb, uint32_t *buf)
{
    const int64_t ks = ksteps(ct, K);
    int64_t lda;
    const uint32_t *A = rows_of(ct, src, dt, ld, n, K, buf, &lda);
    memset(dst, 0, (size_t)(ks * ldb) * 4);
    transpose_words(A, lda, n, ks, dst, ldb);
}

/* B-form of K rows of n elements (row k at src + k * ld): b[s * ldb + j],
 * ldb = pad16(n); bf16 pairs rows 2s and 2s + 1 (an odd K's last pair
 * has a zero high half). row: 2 * (n + 1) scratch words. */
static void pack_bn(ctype ct, const void *src, amp_dtype dt, int64_t ld, int64_t K, int64_t n, uint32_t *dst,
                    uint32_t *row)
{
    const size_t es = amp_dtype_size(dt);
    const int64_t ks = ksteps(ct, K), ldb = pad16(n);
    memset(dst, 0, (size_t)(ks * ldb) * 4);
#if defined(ATTN_X86)
    if (ct == CT_DOT && dt == AMP_BF16) {
        pairs_bf16_v(src, ld, K, n, dst, ldb);
        return;
    }
    if (ct == CT_F32V && dt == AMP_F32) {
        copy_words_v(src, ld * 4, K, n, dst, ldb);
        return;
    }
#endif
    for (int64_t k = 0; k < K; k++) {
        const void *s = (const char *)src + (size_t)(k * ld) * es;
        if (ct != CT_DOT) {
            load_row(ct, s, dt, n, (float *)(dst + k * ldb), (uint16_t *)row);
            continue;
        }
        uint16_t *h = (uint16_t *)row;
        load_row(ct, s, dt, n, (float *)row, h);
        uint32_t *d = dst + (k / 2) * ldb;
        const int shift = (k & 1) ? 16 : 0;
        for (int64_t j = 0; j < n; j++)
            d[j] |= (uint32_t)h[j] << shift;
    }
}

/* ------------------------------------------------------------------ layout */

/* Element offset of row t of head h in a [.., T, D] tensor of the desc
 * whose rows are ld apart. */
static inline int64_t row_ld(const be_attn_desc *a, int64_t ld, int64_t h, int64_t t)
{
    const int64_t hg = a->hgroup > 0 ? a->hgroup : 1;
    return (h / hg) * a->T * ld + (h % hg) * a->D + t * ld;
}
/* The row strides of q, k, v, gq, gk, gv (ld) and of out, gout (out_ld). */
static inline int64_t ld_of(const be_attn_desc *a) { return a->ld > 0 ? a->ld : a->D; }
static inline int64_t out_ld_of(const be_attn_desc *a) { return a->out_ld > 0 ? a->out_ld : ld_of(a); }
static inline int64_t row_at(const be_attn_desc *a, int64_t h, int64_t t) { return row_ld(a, ld_of(a), h, t); }
static inline int64_t out_row_at(const be_attn_desc *a, int64_t h, int64_t t)
{
    return row_ld(a, out_ld_of(a), h, t);
}

static const void *at(const void *base, const be_attn_desc *a, int64_t h, int64_t t)
{
    return (const char *)base + (size_t)row_at(a, h, t) * amp_dtype_size(a->dt);
}
static const void *at_out(const void *base, const be_attn_desc *a, int64_t h, int64_t t)
{
    return (const char *)base + (size_t)out_row_at(a, h, t) * amp_dtype_size(a->dt);
}

/* Keys per head, and key / value row t of head h (a cache's [Tk, heads,
 * D] layout when a->Tk > 0, else q's). */
static inline int64_t keys_of(const be_attn_desc *a) { return a->Tk > 0 ? a->Tk : a->T; }
static inline int64_t kv_ld_of(const be_attn_desc *a) { return a->Tk > 0 ? a->kv_ld : ld_of(a); }
static const void *at_kv(const void *base, const be_attn_desc *a, int64_t h, int64_t t)
{
    if (a->Tk <= 0)
        return at(base, a, h, t);
    return (const char *)base + (size_t)(h * a->D + t * a->kv_ld) * amp_dtype_size(a->dt);
}

/* Keys row i of the query tile may see in the key tile [j0, j0 + nk): the
 * queries are the last T of the Tk positions. */
static inline int64_t keys_seen(const be_attn_desc *a, int64_t i, int64_t j0, int64_t nk)
{
    if (!a->causal)
        return nk;
    int64_t len = i + (keys_of(a) - a->T) - j0 + 1;
    return len < 0 ? 0 : len > nk ? nk : len;
}

/* Per-tile sizes in 32-bit words of the packed K (Kᵀ form over D) and V
 * (over BK keys) tiles. */
static int64_t ktile_words(ctype ct, int64_t D) { return ksteps(ct, D) * BK; }
static int64_t vtile_words(ctype ct, int64_t D) { return ksteps(ct, BK) * pad16(D); }

/* --------------------------------------------------------------- forward */

typedef struct {
    const be_attn_desc *a;
    ctype ct;
    int64_t ntiles;   /* query tiles per head */
    int64_t nkt;      /* key tiles per head (ntiles unless cached) */
    uint32_t *kpack;  /* [heads][nkt] K tiles, then V tiles */
    uint32_t *vpack;
    bool direct;      /* a few queries over a cache: K and V read in place (attention_kv.c), no packs */
    char *scratch;    /* per thread */
    size_t slot;      /* bytes per thread */
} fwd_ctx;

static void pack_kv_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    fwd_ctx *c = vc;
    const be_attn_desc *a = c->a;
    uint32_t *row = (uint32_t *)(c->scratch + (size_t)tid * c->slot);
    const int64_t kw = ktile_words(c->ct, a->D), vw = vtile_words(c->ct, a->D);
    for (int64_t x = lo; x < hi; x++) {
        const int64_t h = x / c->nkt, j0 = (x % c->nkt) * BK, Tk = keys_of(a);
        const int64_t nk = Tk - j0 < BK ? Tk - j0 : BK;
        pack_bt(c->ct, at_kv(a->k, a, h, j0), a->dt, kv_ld_of(a), nk, a->D, c->kpack + x * kw, BK, row);
        pack_bn(c->ct, at_kv(a->v, a, h, j0), a->dt, kv_ld_of(a), nk, a->D, c->vpack + x * vw, row);
    }
}

/* Forward scratch per thread, in floats. */
static size_t fwd_slot_floats(int64_t D)
{
    const int64_t Dp = pad16(D);
    return (size_t)(BQ * (D + 2)      /* Q tile */
                    + BQ * BK         /* S / P */
                    + BQ * BK         /* P as bf16 pairs */
                    + BQ * Dp         /* O */
                    + 4 * BQ          /* m, l (double) */
                    + 2 * (Dp + BK) + 32); /* a row */
}

/* The online softmax of one S tile, row by row (row r is query i0 + r,
 * column c key j0 + c): S ← exp(scale S - m_new) on the keys the row sees,
 * 0 elsewhere up to BK; l and O rescaled by exp(m_old - m_new), l gets the
 * row's sum. A NaN score makes the row's max (and so the row) NaN. */
static void online_plain(const be_attn_desc *a, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float *S, float *m,
                         double *l, float *O, int64_t Dp)
{
    for (int64_t r = 0; r < nq; r++) {
        float *row = S + r * BK;
        const int64_t len = keys_seen(a, i0 + r, j0, nk);
        if (len > 0) {
            float mx = -INFINITY;
            for (int64_t j = 0; j < len; j++) {
                row[j] *= a->scale;
                if (row[j] > mx || row[j] != row[j])
                    mx = row[j];
            }
            const float mold = m[r], mnew = (mx > mold || mx != mx) ? mx : mold;
            const float sub = mnew == -INFINITY ? 0.0f : mnew;
            double sum = 0;
            for (int64_t j = 0; j < len; j++) {
                row[j] = expf(row[j] - sub);
                sum += row[j];
            }
            if (mold != mnew || mold != mold) {
                const float alpha = mold == -INFINITY ? 0.0f : expf(mold - sub);
                l[r] *= alpha;
                for (int64_t d = 0; d < Dp; d++)
                    O[r * Dp + d] *= alpha;
            }
            l[r] += sum;
            m[r] = mnew;
        }
        for (int64_t j = len; j < BK; j++)
            row[j] = 0.0f;
    }
}

/* Scalar P and dS of a transposed backward tile (row c key j0 + c, column r
 * query i0 + r, row stride BQ, rows < nk): PT = exp(scale ST - lse[r]) and
 * dST = scale PT ∘ (dPT - Di[r]) where the mask keeps (key, query) and
 * r < nq, 0 elsewhere up to BQ. dPT NULL: P only. */
static void bwd_tile_plain(const be_attn_desc *a, int64_t i0, int64_t nq, int64_t j0, int64_t nk, const float *lse,
                           const float *Di, float *PT, float *dPT)
{
    for (int64_t c = 0; c < nk; c++) {
        const int64_t rlo = a->causal ? (j0 + c - i0 > 0 ? j0 + c - i0 : 0) : 0;
        float *p = PT + c * BQ, *g = dPT ? dPT + c * BQ : NULL;
        for (int64_t r = 0; r < BQ; r++) {
            const bool keep = r >= rlo && r < nq;
            if (!g)
                p[r] = keep ? expf(p[r] * a->scale - lse[r]) : 0.0f;
            else
                g[r] = keep ? a->scale * p[r] * (g[r] - Di[r]) : 0.0f;
        }
    }
}

#if defined(ATTN_X86)
/* online_plain on AVX-512 (f32 lanes summed in float per row). */
TGT_F static void online_v(const be_attn_desc *a, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float *S, float *m,
                           double *l, float *O, int64_t Dp)
{
    const __m512 vs = _mm512_set1_ps(a->scale);
    for (int64_t r = 0; r < nq; r++) {
        float *row = S + r * BK;
        const int64_t len = keys_seen(a, i0 + r, j0, nk);
        int64_t c0 = 0;
        if (len > 0) {
            __m512 vmax = _mm512_set1_ps(-INFINITY);
            __mmask16 nan = 0;
            for (c0 = 0; c0 < len; c0 += 16) {
                const __mmask16 k = (__mmask16)lanes(0, len - c0);
                const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + c0), vs);
                _mm512_storeu_ps(row + c0, x);
                vmax = _mm512_mask_max_ps(vmax, k, vmax, x);
                nan |= _mm512_mask_cmp_ps_mask(k, x, x, _CMP_UNORD_Q);
            }
            const float mx = nan ? NAN : _mm512_reduce_max_ps(vmax);
            const float mold = m[r], mnew = (mx > mold || mx != mx) ? mx : mold;
            const float sub = mnew == -INFINITY ? 0.0f : mnew;
            const __m512 vsub = _mm512_set1_ps(sub);
            __m512 vsum = _mm512_setzero_ps();
            for (c0 = 0; c0 < len; c0 += 16) {
                const __mmask16 k = (__mmask16)lanes(0, len - c0);
                const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_loadu_ps(row + c0), vsub)));
                _mm512_storeu_ps(row + c0, e);
                vsum = _mm512_add_ps(vsum, e);
            }
            if (mold != mnew || mold != mold) {
                const float alpha = mold == -INFINITY ? 0.0f : expf(mold - sub);
                l[r] *= alpha;
                const __m512 va = _mm512_set1_ps(alpha);
                for (int64_t d = 0; d < Dp; d += 16)
                    _mm512_storeu_ps(O + r * Dp + d, _mm512_mul_ps(va, _mm512_loadu_ps(O + r * Dp + d)));
            }
            l[r] += _mm512_reduce_add_ps(vsum);
            m[r] = mnew;
        }
        for (; c0 < BK; c0 += 16)
            _mm512_storeu_ps(row + c0, _mm512_setzero_ps());
    }
}

/* bwd_tile_plain on AVX-512. */
TGT_F static void bwd_tile_v(const be_attn_desc *a, int64_t i0, int64_t nq, int64_t j0, int64_t nk, const float *lse,
                             const float *Di, float *PT, float *dPT)
{
    const __m512 vs = _mm512_set1_ps(a->scale);
    for (int64_t c = 0; c < nk; c++) {
        const int64_t rlo = a->causal ? (j0 + c - i0 > 0 ? j0 + c - i0 : 0) : 0;
        float *p = PT + c * BQ;
        for (int64_t r0 = 0; r0 < BQ; r0 += 16) {
            const __mmask16 k = (__mmask16)lanes(rlo - r0, nq - r0);
            __m512 y;
            if (!dPT)
                y = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(p + r0), vs, _mm512_loadu_ps(lse + r0)));
            else
                y = _mm512_mul_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(p + r0)),
                                  _mm512_sub_ps(_mm512_loadu_ps(dPT + c * BQ + r0), _mm512_loadu_ps(Di + r0)));
            _mm512_storeu_ps((dPT ? dPT + c * BQ : p) + r0, _mm512_maskz_mov_ps(k, y));
        }
    }
}

/* dst rows (row stride ldh halves) = src rows (stride ld floats) rounded to
 * bf16 (VCVTNEPS2BF16), n a multiple of 16 columns. */
TGT_DOT static void rows_bf16(const float *src, int64_t ld, int64_t rows, int64_t n, uint16_t *dst, int64_t ldh)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < n; c += 16)
            _mm256_storeu_si256((__m256i *)(dst + r * ldh + c),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + r * ld + c)));
}

/* B-form of K f32 rows (stride ld) of n columns (a multiple of 16): dst[s *
 * ldb + j] = (bf16 row 2s, bf16 row 2s + 1), an odd K's last high half 0. */
TGT_DOT static void rows_pairs(const float *src, int64_t ld, int64_t K, int64_t n, uint32_t *dst, int64_t ldb)
{
    for (int64_t s = 0; s < (K + 1) / 2; s++)
        for (int64_t c = 0; c < n; c += 16) {
            const __m512i lo = _mm512_cvtepu16_epi32(
                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + 2 * s * ld + c)));
            __m512i w = lo;
            if (2 * s + 1 < K)
                w = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
                                                              _mm512_loadu_ps(src + (2 * s + 1) * ld + c))),
                                                          16));
            _mm512_storeu_si512(dst + s * ldb + c, w);
        }
}
#endif

/* The online softmax of one S tile on the call's kernels. */
static void online_tile(const fwd_ctx *c, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float *S, float *m,
                        double *l, float *O, int64_t Dp)
{
#if defined(ATTN_X86)
    if (c->ct != CT_PLAIN) {
        online_v(c->a, i0, nq, j0, nk, S, m, l, O, Dp);
        return;
    }
#endif
    online_plain(c->a, i0, nq, j0, nk, S, m, l, O, Dp);
}

/* One backward tile (bwd_tile_plain's contract) on the call's kernels. */
static void bwd_tile(ctype ct, const be_attn_desc *a, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                     const float *lse, const float *Di, float *PT, float *dPT)
{
#if defined(ATTN_X86)
    if (ct != CT_PLAIN) {
        bwd_tile_v(a, i0, nq, j0, nk, lse, Di, PT, dPT);
        return;
    }
#endif
    (void)ct;
    bwd_tile_plain(a, i0, nq, j0, nk, lse, Di, PT, dPT);
}

/* The A operand of P (the S tile after online_tile): S itself in f32, or
 * its rows rounded to bf16 pairs in buf (BK / 2 words a row). */
static const uint32_t *p_operand(ctype ct, float *S, int64_t nq, uint32_t *buf, int64_t *lda)
{
#if defined(ATTN_X86)
    if (ct == CT_DOT) {
        rows_bf16(S, BK, nq, BK, (uint16_t *)buf, BK);
        *lda = BK / 2;
        return buf;
    }
#endif
    (void)nq;
    (void)buf;
    *lda = BK;
    return (const uint32_t *)S;
}

static void fwd_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    const fwd_ctx *c = vc;
    const be_attn_desc *a = c->a;
    const ctype ct = c->ct;
    const int64_t D = a->D, Dp = pad16(D), T = a->T, ldx = ld_of(a);
    const int64_t kw = ktile_words(ct, D), vw = vtile_words(ct, D), ksd = ksteps(ct, D);
    float *base = (float *)(c->scratch + (size_t)tid * c->slot);
    uint32_t *Qa = (uint32_t *)base;
    float *S = base + BQ * (D + 2);
    uint32_t *Pbuf = (uint32_t *)(S + BQ * BK);
    float *O = (float *)(Pbuf + BQ * BK);
    double *l = (double *)(O + BQ * Dp);
    float *m = (float *)(l + BQ);
    float *rowbuf = m + BQ;
    const size_t es = amp_dtype_size(a->dt);
    for (int64_t x = lo; x < hi; x++) {
        const int64_t h = x / c->ntiles, i0 = (x % c->ntiles) * BQ;
        const int64_t nq = T - i0 < BQ ? T - i0 : BQ;
        int64_t ldq;
        const uint32_t *Qr = rows_of(ct, at(a->q, a, h, i0), a->dt, ldx, nq, D, Qa, &ldq);
        for (int64_t r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
        }
        memset(O, 0, (size_t)(nq * Dp) * sizeof(float));
        const int64_t Tk = keys_of(a), jend = a->causal ? i0 + nq + (Tk - T) : Tk;
        for (int64_t j0 = 0; j0 < jend; j0 += BK) {
            const int64_t nk = Tk - j0 < BK ? Tk - j0 : BK, jt = j0 / BK;
            const uint32_t *Kt = c->kpack + (h * c->nkt + jt) * kw;
            const uint32_t *Vt = c->vpack + (h * c->nkt + jt) * vw;
            if (c->direct)
                attn_kv_scores(nq, nk, D, (const float *)Qr, ldq, at_kv(a->k, a, h, j0), kv_ld_of(a), a->dt, S, BK);
            else
                mm(ct, nq, nk, ksd, Qr, ldq, Kt, BK, S, BK, false);
            online_tile(c, i0, nq, j0, nk, S, m, l, O, Dp);
            int64_t lda;
            const uint32_t *P = p_operand(ct, S, nq, Pbuf, &lda);
            if (c->direct)
                attn_kv_values(nq, nk, D, (const float *)P, lda, at_kv(a->v, a, h, j0), kv_ld_of(a), a->dt, O, Dp);
            else
                mm(ct, nq, D, ksteps(ct, nk), P, lda, Vt, Dp, O, Dp, true);
        }
        for (int64_t r = 0; r < nq; r++) {
            const float inv = (float)(1.0 / l[r]);
            float *o = O + r * Dp;
            for (int64_t d = 0; d < D; d++)
                rowbuf[d] = o[d] * inv;
            amp_convert(rowbuf, AMP_F32, (char *)a->out + (size_t)out_row_at(a, h, i0 + r) * es, a->dt, (size_t)D);
            if (a->lse)
                a->lse[h * T + i0 + r] = m[r] + (float)log(l[r]);
        }
    }
}

/* The grain of n tasks each about `work` multiply-adds: all on the
 * calling thread when the whole is small. */
static int64_t grain_for(int64_t n, double work)
{
    return (double)n * work < ATTN_PAR_MIN ? n : 1;
}

amp_status cpu_attention(const be_attn_desc *a)
{
    if (a->heads <= 0 || a->T <= 0 || a->D <= 0)
        return AMP_OK;
    if (a->Tk > 0 && a->Tk < a->T)
        return amp_set_error(AMP_ERR_SHAPE, "attention: %lld cached keys for %lld queries (need at least as many)",
                             (long long)a->Tk, (long long)a->T);
    fwd_ctx c = {.a = a, .ct = pick_ctype(a->dt), .ntiles = (a->T + BQ - 1) / BQ};
    c.nkt = (keys_of(a) + BK - 1) / BK;
    /* A decode step's few queries over a cache: packing every cached key
     * and value per call would cost more than the products themselves. */
    c.direct = a->Tk > 0 && a->T <= ATTN_KV_MAX_Q && c.ct == CT_F32V && attn_kv_direct_available();
    const int64_t tasks = a->heads * c.ntiles, ktasks = a->heads * c.nkt;
    const int64_t grain = grain_for(tasks, (double)BQ * (double)keys_of(a) * (double)(a->D + 4));
    const int64_t kgrain = a->Tk > 0 ? grain_for(ktasks, (double)BK * (double)(a->D + 4)) : grain;
    const int width = amp_parallel_width(tasks, grain), kwidth = amp_parallel_width(ktasks, kgrain);
    c.slot = (fwd_slot_floats(a->D) * sizeof(float) + 63) / 64 * 64;
    const size_t packs = c.direct ? 0 : (size_t)(ktasks * (ktile_words(c.ct, a->D) + vtile_words(c.ct, a->D))) * 4;
    const size_t slots = (size_t)(width > kwidth ? width : kwidth) * c.slot;
    char *mem = amp_alloc(packs + slots);
    if (!mem)
        return amp_set_error(AMP_ERR_MEMORY, "attention: out of memory for the packed keys and values (%zu bytes)",
                             packs + slots);
    c.kpack = (uint32_t *)mem;
    c.vpack = c.kpack + ktasks * ktile_words(c.ct, a->D);
    c.scratch = mem + packs;
    if (!c.direct)
        amp_parallel_for(ktasks, kgrain, pack_kv_range, &c);
    amp_parallel_for(tasks, grain, fwd_range, &c);
    amp_free(mem);
    return AMP_OK;
}

/* --------------------------------------------------------------- backward */

/* Backward runs on transposed tiles (row c key j0 + c, column r query
 * i0 + r), so that every operand it rounds is a row and no tile is
 * transposed:
 *   STᵀ = K_j Q_iᵀ, Pᵀ = exp(scale Sᵀ - lse), dPᵀ = V_j dO_iᵀ,
 *   dSᵀ = scale Pᵀ ∘ (dPᵀ - D), dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i,
 *   dQ_iᵀ += K_jᵀ dSᵀ (dQ_i transposed back once per query tile). */
typedef struct {
    const be_attn_desc *a;
    ctype ct;
    int64_t ntiles;
    char *scratch;
    size_t slot;
} bwd_ctx;

/* A-form of the transpose of nk rows of D elements (row j at src + j * ld):
 * D rows of nk keys, row stride lda words (bf16: key pairs, an odd nk's
 * last high half 0, zero past nk). tmp: ksteps(nk) * pad16(D) words; row:
 * 2 (D + 1) scratch words. */
static void pack_at_src(ctype ct, const void *src, amp_dtype dt, int64_t ld, int64_t nk, int64_t D, uint32_t *dst,
                        int64_t lda, uint32_t *tmp, uint32_t *row)
{
    pack_bn(ct, src, dt, ld, nk, D, tmp, row);
    memset(dst, 0, (size_t)(D * lda) * 4);
    transpose_words(tmp, pad16(D), ksteps(ct, nk), D, dst, lda);
}

/* Backward scratch per thread, in 32-bit words. */
static size_t bwd_slot_words(ctype ct, int64_t T, int64_t D)
{
    const int64_t Dp = pad16(D), ksd = ksteps(ct, D), nt = (T + BK - 1) / BK;
    return (size_t)(2 * nt * BK * ksd              /* K, V rows (A) */
                    + nt * D * ksteps(ct, BK)      /* Kᵀ (A) */
                    + 2 * ksd * BQ                 /* Q, dO as Bᵀ */
                    + 2 * ksteps(ct, BQ) * Dp      /* Q, dO as B */
                    + 2 * BK * BQ                  /* Pᵀ, dPᵀ / dSᵀ */
                    + 2 * BK * BQ / 2              /* Pᵀ, dSᵀ in bf16 (A) */
                    + ksteps(ct, BK) * BQ          /* dSᵀ in bf16 (B) */
                    + D * BQ                       /* dQᵀ */
                    + ksteps(ct, BK) * Dp + BQ * (ksd + 1) /* packing */
                    + 2 * T * Dp                   /* dK, dV */
                    + 2 * BQ                       /* lse, D_i */
                    + 2 * (Dp + BK) + 32);         /* a row */
}

static void bwd_head(const bwd_ctx *c, int64_t h, uint32_t *w)
{
    const be_attn_desc *a = c->a;
    const ctype ct = c->ct;
    const int64_t T = a->T, D = a->D, Dp = pad16(D), ldx = ld_of(a), ldo = out_ld_of(a), nt = c->ntiles;
    const int64_t ksd = ksteps(ct, D), kbk = ksteps(ct, BK), kbq = ksteps(ct, BQ);
    const size_t es = amp_dtype_size(a->dt);
    const bool want_qk = a->gq || a->gk;
    uint32_t *Ka = w, *Va = Ka + nt * BK * ksd, *KTa = Va + nt * BK * ksd;
    uint32_t *Qt = KTa + nt * D * kbk, *dOt = Qt + ksd * BQ;
    uint32_t *Qn = dOt + ksd * BQ, *dOn = Qn + kbq * Dp;
    float *PT = (float *)(dOn + kbq * Dp), *dPT = PT + BK * BQ;
    uint32_t *PTh = (uint32_t *)(dPT + BK * BQ), *dSTh = PTh + BK * BQ / 2, *dSTn = dSTh + BK * BQ / 2;
    float *dQT = (float *)(dSTn + kbk * BQ), *dK = dQT + D * BQ, *dV = dK + T * Dp;
    uint32_t *tmp = (uint32_t *)(dV + T * Dp);
    float *lse = (float *)(tmp + kbk * Dp + BQ * (ksd + 1)), *Di = lse + BQ;
    float *rowbuf = Di + BQ;
    uint32_t *row = (uint32_t *)rowbuf;

    int64_t ldk, ldv = 0;
    const uint32_t *Kr = rows_of(ct, at(a->k, a, h, 0), a->dt, ldx, T, D, Ka, &ldk), *Vr = NULL;
    if (want_qk) {
        Vr = rows_of(ct, at(a->v, a, h, 0), a->dt, ldx, T, D, Va, &ldv);
        for (int64_t jt = 0; jt < nt; jt++) {
            const int64_t j0 = jt * BK, nk = T - j0 < BK ? T - j0 : BK;
            pack_at_src(ct, at(a->k, a, h, j0), a->dt, ldx, nk, D, KTa + jt * D * kbk, kbk, tmp, row);
        }
    }
    memset(dK, 0, (size_t)(T * Dp) * sizeof(float));
    memset(dV, 0, (size_t)(T * Dp) * sizeof(float));

    for (int64_t i0 = 0; i0 < T; i0 += BQ) {
        const int64_t nq = T - i0 < BQ ? T - i0 : BQ;
        pack_bt(ct, at(a->q, a, h, i0), a->dt, ldx, nq, D, Qt, BQ, tmp);
        pack_bn(ct, at_out(a->gout, a, h, i0), a->dt, ldo, nq, D, dOn, row);
        for (int64_t r = 0; r < BQ; r++) {
            lse[r] = r < nq ? a->lse[h * T + i0 + r] : 0.0f;
            Di[r] = 0.0f;
        }
        if (want_qk) {
            pack_bt(ct, at_out(a->gout, a, h, i0), a->dt, ldo, nq, D, dOt, BQ, tmp);
            pack_bn(ct, at(a->q, a, h, i0), a->dt, ldx, nq, D, Qn, row);
            /* D_i = rowsum(dO ∘ O), O the forward's rounded output. */
            for (int64_t r = 0; r < nq; r++) {
                float *o = rowbuf, *g = rowbuf + Dp;
                widen_row(ct, at_out(a->out, a, h, i0 + r), a->dt, D, o);
                widen_row(ct, at_out(a->gout, a, h, i0 + r), a->dt, D, g);
                double sum = 0;
                for (int64_t d = 0; d < D; d++)
                    sum += (double)o[d] * g[d];
                Di[r] = (float)sum;
            }
            memset(dQT, 0, (size_t)(D * BQ) * sizeof(float));
        }
        const int64_t jend = a->causal ? i0 + nq : T;
        for (int64_t j0 = 0; j0 < jend; j0 += BK) {
            const int64_t nk = T - j0 < BK ? T - j0 : BK, jt = j0 / BK;
            /* Pᵀ = exp(scale K_j Q_iᵀ - lse), masked entries 0 */
            mm(ct, nk, nq, ksd, Kr + j0 * ldk, ldk, Qt, BQ, PT, BQ, false);
            bwd_tile(ct, a, i0, nq, j0, nk, lse, Di, PT, NULL);
            /* dV_j += Pᵀ dO_i */
            const uint32_t *A = (const uint32_t *)PT;
            int64_t lda = BQ;
#if defined(ATTN_X86)
            if (ct == CT_DOT) {
                rows_bf16(PT, BQ, nk, BQ, (uint16_t *)PTh, BQ);
                A = PTh;
                lda = BQ / 2;
            }
#endif
            mm(ct, nk, D, ksteps(ct, nq), A, lda, dOn, Dp, dV + j0 * Dp, Dp, true);
            if (!want_qk)
                continue;
            /* dPᵀ = V_j dO_iᵀ; dSᵀ = scale Pᵀ ∘ (dPᵀ - D_i) */
            mm(ct, nk, nq, ksd, Vr + j0 * ldv, ldv, dOt, BQ, dPT, BQ, false);
            bwd_tile(ct, a, i0, nq, j0, nk, lse, Di, PT, dPT);
            const uint32_t *dSa = (const uint32_t *)dPT, *dSb = (const uint32_t *)dPT;
#if defined(ATTN_X86)
            if (ct == CT_DOT) {
                rows_bf16(dPT, BQ, nk, BQ, (uint16_t *)dSTh, BQ);
                rows_pairs(dPT, BQ, nk, BQ, dSTn, BQ);
                dSa = dSTh;
                dSb = dSTn;
            }
#endif
            if (a->gk) /* dK_j += dSᵀ Q_i */
                mm(ct, nk, D, ksteps(ct, nq), dSa, lda, Qn, Dp, dK + j0 * Dp, Dp, true);
            if (a->gq) /* dQ_iᵀ += K_jᵀ dSᵀ */
                mm(ct, D, nq, ksteps(ct, nk), KTa + jt * D * kbk, kbk, dSb, BQ, dQT, BQ, true);
        }
        if (a->gq)
            for (int64_t r = 0; r < nq; r++) {
                for (int64_t d = 0; d < D; d++)
                    rowbuf[d] = dQT[d * BQ + r];
                amp_convert(rowbuf, AMP_F32, (char *)a->gq + (size_t)row_at(a, h, i0 + r) * es, a->dt, (size_t)D);
            }
    }
    for (int64_t t = 0; t < T; t++) {
        if (a->gk)
            amp_convert(dK + t * Dp, AMP_F32, (char *)a->gk + (size_t)row_at(a, h, t) * es, a->dt, (size_t)D);
        if (a->gv)
            amp_convert(dV + t * Dp, AMP_F32, (char *)a->gv + (size_t)row_at(a, h, t) * es, a->dt, (size_t)D);
    }
}

static void bwd_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    const bwd_ctx *c = vc;
    uint32_t *w = (uint32_t *)(c->scratch + (size_t)tid * c->slot);
    for (int64_t h = lo; h < hi; h++)
        bwd_head(c, h, w);
}

amp_status cpu_attention_backward(const be_attn_desc *a)
{
    if (a->heads <= 0 || a->T <= 0 || a->D <= 0)
        return AMP_OK;
    if (!a->lse)
        return amp_set_error(AMP_ERR_ARG, "attention_backward: no log-sum-exp to rebuild the probabilities from");
    if (!a->out && (a->gq || a->gk))
        return amp_set_error(AMP_ERR_ARG, "attention_backward: no forward output to take rowsum(dO * O) from");
    if (a->Tk > 0)
        return amp_set_error(AMP_ERR_STATE, "attention_backward: cached attention (a KV cache) has no backward");
    bwd_ctx c = {.a = a, .ct = pick_ctype(a->dt), .ntiles = (a->T + BQ - 1) / BQ};
    const int64_t grain = grain_for(a->heads, (double)a->T * (double)a->T * (double)(a->D + 4));
    const int width = amp_parallel_width(a->heads, grain);
    c.slot = (bwd_slot_words(c.ct, a->T, a->D) * 4 + 63) / 64 * 64;
    c.scratch = amp_alloc((size_t)width * c.slot);
    if (!c.scratch)
        return amp_set_error(AMP_ERR_MEMORY, "attention_backward: out of memory for %d x %zu bytes of scratch", width,
                             c.slot);
    amp_parallel_for(a->heads, grain, bwd_range, &c);
    amp_free(c.scratch);
    return AMP_OK;
}
