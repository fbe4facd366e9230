/*
 * gemm_bf16_x86.c - the x86 kernels behind gemm_bf16.c: a VDPBF16PS
 * micro-kernel (AVX512-BF16), an AMX-BF16 one, and AVX-512 packers that
 * build the pair-interleaved panels both multiply.
 *
 * Every function is compiled for its ISA with a target attribute, so the
 * library builds with default flags and dispatch.c picks a kernel only when
 * amp_cpu_features() (and, for AMX, the OS) allows it.
 *
 * VDPBF16PS kernel, 12 x 32: acc[i][j] += A[i][2p] B[2p][j] + A[i][2p+1]
 * B[2p+1][j] for 16 j per instruction. 12 rows x 2 vectors = 24
 * accumulators (enough independent chains to cover the instruction's
 * latency at two per cycle), 2 registers of B, one broadcast pair of A:
 * per pair of k, 24 dot products for 2 vector loads and 12 broadcasts.
 *
 * AMX kernel, 32 x 32: four 16 x 16 f32 C tiles, two A tiles (16 rows x
 * 32 k) and two B tiles (16 pairs of k x 16 columns), all eight tile
 * registers; each A and B tile feeds two TDPBF16PS. C tiles are loaded
 * from and stored to C directly when alpha is 1 and beta 0 or 1 (the
 * case of every matmul), through a scratch tile otherwise. The same
 * tiles run f16 products split into bf16 (gemm_f16_split.c, whose packers
 * lay the panels out): there each B tile feeds four TDPBF16PS, two with
 * A's hi tiles and two with its lo tiles, and C always goes through the
 * scratch tile.
 *
 * Both kernels share the B packer and the 16-bit C finish; they differ in
 * A's layout (pair-major for broadcasts, row-major for tile rows).
 */
#include "backend/cpu/gemm/gemm_kernels.h"

#if defined(__x86_64__)

#include <cpuid.h>
#include <immintrin.h>
#include "backend/cpu/gemm/rowdot_walk.h"
#include "backend/cpu/gemm/tile_x86.h"
#include "backend/cpu/gemm/transpose_x86.h"
#include "dtype/bf16_x86.h"
#include <stdatomic.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10)
#define HAVE_BF16_TARGET 1
#endif
#if defined(__linux__) && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define HAVE_AMX_TARGET 1
#endif

#define TGT_BW __attribute__((target("avx512f,avx512bw,avx512vl")))
#define TGT_DOT __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))
#define TGT_AMX __attribute__((target("avx512f,avx512bw,amx-tile,amx-bf16")))

/* ------------------------------------------------------------- packers */

/* transpose16: src/backend/cpu/gemm/transpose_x86.h */

static __mmask32 mask32(int64_t n) { return n >= 32 ? 0xFFFFFFFFu : ((__mmask32)1 << n) - 1; }
static __mmask16 mask16(int64_t n) { return n >= 16 ? 0xFFFF : (__mmask16)(((unsigned)1 << n) - 1); }

/* Pair-major, k contiguous: line q starts at s + q * rs, and its pair p is
 * the 32-bit word at bf16 offset 2p. 16 lines x 16 pairs are loaded
 * (masked at the edges of w and kc, so nothing past the operand is read
 * and an odd kc gets a zero partner), transposed, and stored as 16 rows
 * of dst[p * R + q]. */
TGT_BW static void pack_pairs_kcontig(const uint16_t *s, int64_t rs, int w, int R, int64_t kc, int64_t kp,
                                      uint32_t *dst)
{
    for (int q0 = 0; q0 < R; q0 += 16) {
        const __mmask16 lanes = mask16(R - q0);
        for (int64_t p0 = 0; p0 < kp; p0 += 16) {
            __m512i v[16];
            const __mmask32 m = 2 * p0 < kc ? mask32(kc - 2 * p0) : 0;
            for (int i = 0; i < 16; i++)
                v[i] = q0 + i < w && m ? _mm512_maskz_loadu_epi16(m, s + (q0 + i) * rs + 2 * p0)
                                       : _mm512_setzero_si512();
            transpose16(v);
            int64_t np = kp - p0 < 16 ? kp - p0 : 16;
            for (int64_t j = 0; j < np; j++)
                _mm512_mask_storeu_epi32(dst + (p0 + j) * R + q0, lanes, v[j]);
        }
    }
}

/* The 16 words of pair p for lines q0 .. q0+15 when lines are contiguous
 * (k row k at s + k * ks): the even row zero-extended, the odd row shifted
 * into the high halves; lines from w on and rows from kc on are zero. */
TGT_BW static inline __m512i pair_words(const uint16_t *s, int64_t ks, int64_t p, int q0, int w, int64_t kc)
{
    const uint16_t *e = s + 2 * p * ks + q0, *o = e + ks;
    if (q0 + 16 <= w && 2 * p + 1 < kc) /* the common case, unmasked */
        return _mm512_or_si512(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)e)),
                               _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)o)), 16));
    const __mmask16 m = q0 < w ? mask16(w - q0) : 0;
    __m512i lo = 2 * p < kc && m ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, e)) : _mm512_setzero_si512();
    __m512i hi = 2 * p + 1 < kc && m ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, o)) : _mm512_setzero_si512();
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* Pair-major panel, dst[p * R + q] (both kernels' B, VDPBF16PS's A). */
TGT_BW static bool pack_pairs(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                              uint32_t *dst)
{
    if (ks == 1) {
        pack_pairs_kcontig(s, rs, w, R, kc, kp, dst);
        return false;
    }
    for (int64_t p = 0; p < kp; p++)
        for (int q0 = 0; q0 < R; q0 += 16)
            _mm512_mask_storeu_epi32(dst + p * R + q0, mask16(R - q0), pair_words(s, ks, p, q0, w, kc));
    return false;
}

/* Row-major panel, dst[q * kp + p] (AMX's A tiles). With k contiguous a
 * line is already its row of pairs; with lines contiguous, 16 pairs x 16
 * lines are built pair-major and transposed. */
TGT_BW static bool pack_rows(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                             uint32_t *dst)
{
    if (ks == 1) {
        for (int q = 0; q < R; q++) {
            uint32_t *d = dst + q * kp;
            int64_t n = q < w ? kc : 0;
            memcpy(d, s + q * rs, (size_t)n * sizeof(uint16_t));
            memset((uint16_t *)d + n, 0, (size_t)(2 * kp - n) * sizeof(uint16_t));
        }
        return false;
    }
    for (int q0 = 0; q0 < R; q0 += 16)
        for (int64_t p0 = 0; p0 < kp; p0 += 16) {
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = pair_words(s, ks, p0 + i, q0, w, kc);
            transpose16(v);
            const __mmask16 m = mask16(kp - p0);
            for (int i = 0; i < 16 && q0 + i < R; i++)
                _mm512_mask_storeu_epi32(dst + (q0 + i) * kp + p0, m, v[i]);
        }
    return false;
}

/* ---------------------------------------------------- 16-bit C rows */

/* f32 -> bf16 as the dtype layer's reference rounds (bf16_x86.h): nearest
 * even at bit 16, NaNs quieted as (x >> 16) | 0x40, subnormals rounded
 * rather than flushed. Integer operations only. */
TGT_BW static inline __m256i round_bf16(__m512 v) { return _mm512_cvtepi32_epi16(bf16_round_512(v)); }

#ifdef HAVE_BF16_TARGET
/* VCVTNEPS2BF16 rounds as the reference does except that it flushes
 * subnormal inputs; a vector holding one is redone with integer rounding
 * (the dtype layer's AVX512-BF16 path does the same). */
TGT_DOT static inline __m256i to_bf16(__m512 v)
{
    __m512i x = _mm512_castps_si512(v);
    __mmask16 sub = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7F800000)) &
                    _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007FFFFF));
    return sub ? round_bf16(v) : (__m256i)_mm512_cvtneps_pbh(v);
}
#define TGT_FINISH TGT_DOT
#else
#define to_bf16 round_bf16
#define TGT_FINISH TGT_BW
#endif

/* One 16-column chunk of a tile row (m: the valid columns): beta * C
 * added (fused, as the f32 kernels do) and/or rounded into C. */
TGT_FINISH static inline void finish16(float *tr, uint16_t *cr, __mmask16 m, bool full, bool is_bf16, bool add_beta,
                                       __m512 vb, bool store)
{
    __m512 x = full ? _mm512_loadu_ps(tr) : _mm512_maskz_loadu_ps(m, tr);
    if (add_beta) {
        __m256i h = full ? _mm256_loadu_si256((const __m256i *)cr) : _mm256_maskz_loadu_epi16(m, cr);
        __m512 cv = is_bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
        x = _mm512_fmadd_ps(vb, cv, x);
        if (!store)
            _mm512_mask_storeu_ps(tr, m, x);
    }
    if (store) {
        __m256i h = is_bf16 ? to_bf16(x) : _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (full)
            _mm256_storeu_si256((__m256i *)cr, h);
        else
            _mm256_mask_storeu_epi16(cr, m, h);
    }
}

/* One tile's 16-bit C (gemm_bf16_finish_fn): t (mr x nr f32, row stride
 * tl) first gets beta * C added when add_beta, then is rounded into C when
 * store, bit for bit as amp_convert rounds: VCVTPS2PH with the rounding in
 * the immediate and VCVTPH2PS are exact matches of the f16 reference (see
 * convert_x86.c), and bf16 goes through to_bf16 above. */
TGT_FINISH static void finish16_tile(float *t, int64_t tl, int mr, int nr, uint16_t *c, int64_t ldc, bool is_bf16,
                                     bool add_beta, float beta, bool store)
{
    const __m512 vb = _mm512_set1_ps(beta);
    for (int r = 0; r < mr; r++) {
        float *tr = t + r * tl;
        uint16_t *cr = c + r * ldc;
        int j = 0;
        for (; j + 16 <= nr; j += 16)
            finish16(tr + j, cr + j, 0xFFFF, true, is_bf16, add_beta, vb, store);
        if (j < nr)
            finish16(tr + j, cr + j, mask16(nr - j), false, is_bf16, add_beta, vb, store);
    }
}

/* ------------------------------------------------------ VDPBF16PS 12x32 */

#define DOT_MR 12
#define DOT_NR 32

#ifdef HAVE_BF16_TARGET
#define DOT_DECL(i) TILE_DECL(__m512, _mm512_, i)
#define DOT_STEP(i)                                                                     \
    do {                                                                                \
        __m512bh a_ = (__m512bh)_mm512_set1_epi32((int)a[i]);                           \
        c##i##0 = _mm512_dpbf16_ps(c##i##0, a_, b0);                                    \
        c##i##1 = _mm512_dpbf16_ps(c##i##1, a_, b1);                                    \
    } while (0)
#define DOT_STORE(i) TILE_STORE(__m512, _mm512_, 16, i)

TGT_DOT static void micro_dot(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                              float alpha, float beta)
{
    DOT_DECL(0) DOT_DECL(1) DOT_DECL(2) DOT_DECL(3) DOT_DECL(4) DOT_DECL(5)
    DOT_DECL(6) DOT_DECL(7) DOT_DECL(8) DOT_DECL(9) DOT_DECL(10) DOT_DECL(11)
    for (int64_t p = 0; p < kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
        _mm_prefetch((const char *)(b + 8 * DOT_NR), _MM_HINT_T0);
        DOT_STEP(0); DOT_STEP(1); DOT_STEP(2); DOT_STEP(3); DOT_STEP(4); DOT_STEP(5);
        DOT_STEP(6); DOT_STEP(7); DOT_STEP(8); DOT_STEP(9); DOT_STEP(10); DOT_STEP(11);
        a += DOT_MR;
        b += DOT_NR;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    DOT_STORE(0); DOT_STORE(1); DOT_STORE(2); DOT_STORE(3); DOT_STORE(4); DOT_STORE(5);
    DOT_STORE(6); DOT_STORE(7); DOT_STORE(8); DOT_STORE(9); DOT_STORE(10); DOT_STORE(11);
}
#else
#define micro_dot NULL /* the compiler cannot build it: never picked */
#endif

/* ------------------------------------------- few rows: no packing */

/* The few-row path (gemm_bf16_rowdot_fn, gemm_bf16.c's gemv): out[i * ldo
 * + j] = sum over k of a[i * lda + k] * b[j * ldb + k] for M rows of A and
 * NJ lines of B, both k-contiguous and read where they lie (no packing:
 * a decode step's linear multiplies one row by a weight it would
 * otherwise re-pack whole). Each (row, line) pair keeps one f32 vector of
 * 16 partial sums over 32 k per VDPBF16PS (lane l sums the pairs p with p
 * % 16 == l, each chain in k order), reduced to one value at the end; a K
 * not a multiple of 32 ends with masked loads (zeros past K, so the
 * padded products add exactly nothing). M and NJ are constants in each
 * inlined copy, so the M x NJ accumulators stay in registers. */
#ifdef HAVE_BF16_TARGET
TGT_DOT static inline __attribute__((always_inline)) void rowdot_block(const int M, const int NJ, int64_t K,
                                                                       const uint16_t *a, int64_t lda,
                                                                       const uint16_t *b, int64_t ldb, float *out,
                                                                       int64_t ldo)
{
    __m512 acc[4][8];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NJ; j++)
            acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        /* The next NJ lines at the same k (prefetches past B's end are
         * dropped, never faults): short lines read side by side are no
         * stream the hardware prefetcher follows; 12% more bandwidth on
         * the width-384 gpt's weights (L3-resident, one core). */
        for (int j = 0; j < NJ; j++)
            _mm_prefetch((const char *)(b + (j + NJ) * ldb + k), _MM_HINT_T0);
        __m512bh bv[8];
        for (int j = 0; j < NJ; j++)
            bv[j] = (__m512bh)_mm512_loadu_si512(b + j * ldb + k);
        for (int i = 0; i < M; i++) {
            __m512bh av = (__m512bh)_mm512_loadu_si512(a + i * lda + k);
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
        }
    }
    if (k < K) {
        const __mmask32 m = mask32(K - k);
        __m512bh bv[8];
        for (int j = 0; j < NJ; j++)
            bv[j] = (__m512bh)_mm512_maskz_loadu_epi16(m, b + j * ldb + k);
        for (int i = 0; i < M; i++) {
            __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(m, a + i * lda + k);
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
        }
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NJ; j++)
            out[i * ldo + j] = _mm512_reduce_add_ps(acc[i][j]);
}

/* Lines in blocks of NJ (8 for one row, 4 for more: enough independent
 * chains to cover VDPBF16PS's latency, at most 16 accumulators), then one
 * at a time. */
TGT_DOT static void rowdot(int M, int64_t K, const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                           int64_t n, float *out, int64_t ldo)
{
    ROWDOT_WALK(rowdot_block, 8, 4);
}
#else
#define rowdot NULL
#endif

/* kc 1024 x nc 256 of bf16 is a 512 KiB B block: it stays in a 1 MiB L2
 * (Zen 4 / Zen 5) next to the C tiles; the A panel (24 KiB) stays in a
 * 32-48 KiB L1. kc 1024 rather than 512: a K up to 1024 (every benchmark
 * model's but the mlp's dW) is one block, so a 16-bit C needs no f32
 * workspace and each C tile is loaded and stored once; gemm_bf16.c packs
 * A once per K block when N spans several blocks, so the narrower nc
 * costs no repacking. Half a million multiply-adds (~5 us) pay for a
 * parallel region. */
const gemm_bf16_kernel gemm_bf16_kernel_dot = {
    .mr = DOT_MR, .nr = DOT_NR, .kpair = 1, .kc = 1024, .nc = 256, .par_min = 1 << 19,
    .micro = micro_dot, .pack_a = pack_pairs, .pack_b = pack_pairs, .finish16 = finish16_tile,
    .rowdot = rowdot, .name = "avx512bf16 12x32"};

/* --------------------------------------------------------- AMX 32 x 32 */

#define AMX_MR 32
#define AMX_NR 32

#ifdef HAVE_AMX_TARGET
/* The 64-byte tile configuration (palette 1): tiles 0-3 C, 4-5 A, 6-7 B,
 * each 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

TGT_AMX static void amx_enter(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* (GCC 12 drops the stores before _tile_loadconfig as dead: the
     * builtin does not tell it the configuration is read. The asm does.) */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

TGT_AMX static void amx_leave(void) { _tile_release(); }

/* The k loop over tiles already holding C (or zero): A rows 0-15 / 16-31
 * at a (row stride kp words), B columns 0-15 / 16-31 at b (pair stride
 * 32 words), 16 pairs of k per step. Each step also prefetches B two
 * steps ahead into L1 (panels are consecutive, so this runs on into the
 * next call's panel; past the last one it is a harmless no-op): a tile
 * load that misses L1 stalls the tile pipeline. */
#define AMX_LOOP()                                                                      \
    for (int64_t p = 0; p < kp; p += 16) {                                              \
        const char *pf_ = (const char *)(b + (p + 32) * AMX_NR);                        \
        for (int l_ = 0; l_ < 32; l_++)                                                 \
            _mm_prefetch(pf_ + 64 * l_, _MM_HINT_T0);                                   \
        _tile_loadd(4, a + p, kp * 4);                                                  \
        _tile_loadd(6, b + p * AMX_NR, AMX_NR * 4);                                     \
        _tile_dpbf16ps(0, 4, 6);                                                        \
        _tile_loadd(7, b + p * AMX_NR + 16, AMX_NR * 4);                                \
        _tile_dpbf16ps(1, 4, 7);                                                        \
        _tile_loadd(5, a + 16 * kp + p, kp * 4);                                        \
        _tile_dpbf16ps(2, 5, 6);                                                        \
        _tile_dpbf16ps(3, 5, 7);                                                        \
    }

/* The f16 split's k loop (gemm_f16_split.c): per 16 k, A's line holds 16
 * hi words (ah, ah) then 16 lo words (al, al), B one word (bh, bl) per k,
 * so each B tile meets the hi and then the lo A tile: 8 TDPBF16PS per 2 B
 * tile loads (B streams from L2, and bounds this kernel) and 4 of A. */
#define AMX_SPLIT_LOOP()                                                                \
    for (int64_t p = 0; p < kp; p += 32) {                                              \
        const uint32_t *bk_ = b + p / 2 * AMX_NR;                                       \
        const char *pf_ = (const char *)(bk_ + 32 * AMX_NR);                            \
        for (int l_ = 0; l_ < 32; l_++)                                                 \
            _mm_prefetch(pf_ + 64 * l_, _MM_HINT_T0);                                   \
        _tile_loadd(6, bk_, AMX_NR * 4);                                                \
        _tile_loadd(4, a + p, kp * 4);                                                  \
        _tile_dpbf16ps(0, 4, 6);                                                        \
        _tile_loadd(7, bk_ + 16, AMX_NR * 4);                                           \
        _tile_dpbf16ps(1, 4, 7);                                                        \
        _tile_loadd(5, a + 16 * kp + p, kp * 4);                                        \
        _tile_dpbf16ps(2, 5, 6);                                                        \
        _tile_dpbf16ps(3, 5, 7);                                                        \
        _tile_loadd(4, a + p + 16, kp * 4);                                             \
        _tile_dpbf16ps(0, 4, 6);                                                        \
        _tile_dpbf16ps(1, 4, 7);                                                        \
        _tile_loadd(5, a + 16 * kp + p + 16, kp * 4);                                   \
        _tile_dpbf16ps(2, 5, 6);                                                        \
        _tile_dpbf16ps(3, 5, 7);                                                        \
    }

/* One 32 x 32 tile. bf16 (!split): C's tiles accumulate in place when
 * alpha is 1 and beta 0 or 1, else through a scratch tile added to beta *
 * C in AVX-512 registers. The f16 split always takes the scratch tile:
 * each call's sum starts from zero tiles and joins C in registers, so K is
 * summed in blocks (one f32 chain per K block, then one addition per
 * block, as the f32 kernels sum) rather than in one chain as long as K,
 * and C never enters a tile (TDPBF16PS would flush its f32 subnormals). */
TGT_AMX static inline void amx_tile(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                                    float alpha, float beta, bool split)
{
    const int64_t cs = ldc * 4; /* bytes */
    if (!split && alpha == 1.0f && (beta == 0.0f || beta == 1.0f)) {
        if (beta == 0.0f) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        } else {
            _tile_loadd(0, c, cs);
            _tile_loadd(1, c + 16, cs);
            _tile_loadd(2, c + 16 * ldc, cs);
            _tile_loadd(3, c + 16 * ldc + 16, cs);
        }
        AMX_LOOP();
        _tile_stored(0, c, cs);
        _tile_stored(1, c + 16, cs);
        _tile_stored(2, c + 16 * ldc, cs);
        _tile_stored(3, c + 16 * ldc + 16, cs);
        return;
    }
    _Alignas(64) float t[AMX_MR * AMX_NR];
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    if (split) {
        AMX_SPLIT_LOOP();
    } else {
        AMX_LOOP();
    }
    _tile_stored(0, t, AMX_NR * 4);
    _tile_stored(1, t + 16, AMX_NR * 4);
    _tile_stored(2, t + 16 * AMX_NR, AMX_NR * 4);
    _tile_stored(3, t + 16 * AMX_NR + 16, AMX_NR * 4);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < AMX_MR; r++)
        for (int j = 0; j < AMX_NR; j += 16) {
            __m512 x = _mm512_mul_ps(va, _mm512_load_ps(t + r * AMX_NR + j));
            if (beta != 0.0f)
                x = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c + r * ldc + j), x);
            _mm512_storeu_ps(c + r * ldc + j, x);
        }
}

TGT_AMX static void micro_amx(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                              float alpha, float beta)
{
    amx_tile(kp, a, b, c, ldc, alpha, beta, false);
}

TGT_AMX static void micro_amx_split(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                                    float alpha, float beta)
{
    amx_tile(kp, a, b, c, ldc, alpha, beta, true);
}

bool gemm_amx_usable(void)
{
    /* 0 not asked yet, 1 usable, -1 not */
    static _Atomic int state = 0;
    int s = atomic_load(&state);
    if (s == 0) {
        unsigned a, b, c, d, xlo = 0, xhi = 0;
        /* CPUID: OSXSAVE (leaf 1), AMX-BF16 and AMX-TILE (leaf 7) */
        bool ok = __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1);
        ok = ok && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1);
        if (ok) {
            __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
            ok = (xlo & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA enabled */
        }
        /* Linux hands out the 8 KiB tile state only on request
         * (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, kernel 5.16+). */
        ok = ok && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
        s = ok ? 1 : -1;
        atomic_store(&state, s);
    }
    return s == 1;
}

/* 16 pairs (32 k) per tile step. Each call pays for draining and refilling
 * the tile pipeline around its C loads and stores, so the longer its k
 * loop the better, but the A panel (32 rows x kc) must stay in L1 while B
 * streams past it from L2: kc 384 (a 24 KiB panel) measured best against
 * 256 and 512 on a Xeon with 48 KiB L1. nc 1024: a 768 KiB B block in a
 * 2 MiB L2. At ~1 TFLOP/s a core, a parallel region pays from about 4M
 * multiply-adds. */
const gemm_bf16_kernel gemm_bf16_kernel_amx = {
    .mr = AMX_MR, .nr = AMX_NR, .kpair = 16, .kc = 384, .nc = 1024, .par_min = 1 << 22,
    .micro = micro_amx, .pack_a = pack_rows, .pack_b = pack_pairs, .finish16 = finish16_tile,
    .rowdot = rowdot, .enter = amx_enter, .leave = amx_leave, .name = "amx-bf16 32x32"};

/* The f16 split (gemm_f16_split.c): 16 k per tile step as 32 words of A
 * and 16 of B. kc 384 makes a 96 KiB A panel (in L2, not L1) and a 1.5 MiB
 * B block, yet measured 1.2-1.3x faster than kc 96 (the panel in L1) on
 * 256-row products: the split micro-kernel adds every K block into C
 * through registers, and short blocks made C's round trips dominate. A
 * parallel region pays from a quarter of bf16's multiply-adds, each
 * being four. */
const gemm_bf16_kernel gemm_f16_kernel_amx = {
    .mr = AMX_MR, .nr = AMX_NR, .kpair = 32, .kc = 384, .nc = 1024, .a_words2k = 4, .b_words2k = 2,
    .par_min = 1 << 20, .micro = micro_amx_split, .pack_a = gemm_f16_pack_a_split, .pack_b = gemm_f16_pack_b_split,
    .pack_a_inf = gemm_f16_pack_a_split_inf,
    .finish16 = finish16_tile, .enter = amx_enter, .leave = amx_leave, .name = "amx-bf16 split 32x32"};
#else
bool gemm_amx_usable(void) { return false; }
const gemm_bf16_kernel gemm_bf16_kernel_amx = {.mr = AMX_MR, .nr = AMX_NR, .name = "amx-bf16 32x32"};
const gemm_bf16_kernel gemm_f16_kernel_amx = {.mr = AMX_MR, .nr = AMX_NR, .name = "amx-bf16 split 32x32"};
#endif

#else
/* ISO C wants at least one declaration in a translation unit. */
typedef int gemm_bf16_x86_unused;
#endif
