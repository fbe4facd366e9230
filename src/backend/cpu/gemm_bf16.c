/*
 * gemm_bf16.c - bf16 x bf16 GEMM on native 16-bit dot products: the
 * driver and the choice of kernel. The kernels, with the packers that lay
 * panels out for them, live in gemm_bf16_x86.c.
 *
 * The loop nest is gemm.c's (B block of kc x nc packed once and shared by
 * the threads, A packed one MR-row panel at a time, one MR x NR tile per
 * micro call), with two differences:
 *   - panels stay bf16, packed as 32-bit words that each hold a pair of
 *     consecutive k values (even k in the low half), the layout VDPBF16PS
 *     and TDPBF16PS multiply; an odd K gets a zero partner, so the padded
 *     products add exactly nothing;
 *   - a 16-bit C is written by the tile's last K block straight from the
 *     f32 tile, rounded once, while it is still in L1: no f32 copy of C
 *     when K fits one block, and no separate rounding pass otherwise.
 * Accumulation is f32 across all of K (partial sums of earlier K blocks
 * wait in C itself when C is f32, else in an f32 workspace), so a 16-bit
 * output is rounded exactly once, as gemm_lowp promises.
 *
 * The same driver runs f16 x f16 products split into bf16 (gemm_f16_split.c,
 * through gemm_bf16_drive): its kernel's packers lay each k out as two
 * words of A and one of B instead of half a word of each (a_words2k,
 * b_words2k), which only changes how k maps to packed words here.
 *
 * Numerics: the dot instructions round after each product pair like an
 * FMA chain, but (as in oneDNN and PyTorch) treat bf16 subnormal inputs
 * (below 2^-126) as zero and flush subnormal partial sums to zero; the
 * widening path keeps them. Results do not depend on the thread count:
 * every tile runs the same sequence whatever thread computes it.
 *
 * Which kernel (GEMM_BF16_AUTO):
 *   - AMX-BF16 where the CPU has it and Linux grants the tile state
 *     (Intel Sapphire Rapids and later): 1024 bf16 flops per cycle and core;
 *   - VDPBF16PS on AMD (Zen 4, Zen 5), where it runs at twice the f32 FMA
 *     rate;
 *   - otherwise the f32 widening path. Intel cores run VDPBF16PS at half
 *     the FMA rate (measured on this project's Xeon: 0.5 per cycle, 109
 *     GFLOP/s a core against 200 for f32 FMA), so there it would be slower
 *     than widening.
 */
#include "backend/cpu/gemm.h"
#include "base/base.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Pairs of k per B-packing work item when B's rows are contiguous. */
#define B_PAIRS 8

static _Atomic int forced_mode = GEMM_BF16_AUTO;

void gemm_bf16_set_mode(gemm_bf16_mode mode) { atomic_store(&forced_mode, (int)mode); }

/* ------------------------------------------------------------- choice */

#if defined(__x86_64__)
static bool has_dot(unsigned f)
{
    unsigned need = AMP_CPU_AVX512F | AMP_CPU_AVX512BW | AMP_CPU_AVX512BF16;
    return (f & need) == need;
}

static bool dot_beats_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
}
#endif

/* The native kernel for bf16 x bf16 now, or NULL for the widening path. */
static const gemm_bf16_kernel *pick_bf16(void)
{
#if defined(__x86_64__)
    unsigned f = amp_cpu_features();
    int mode = atomic_load(&forced_mode);
    if (mode == GEMM_BF16_WIDEN)
        return NULL;
    /* AMX-BF16 ships with AVX512-BF16 on every CPU that has it (and the
     * packers need AVX-512), so masking AVX512BF16 turns AMX off too. */
    const bool dot = has_dot(f) && gemm_bf16_kernel_dot.micro;
    const bool amx = dot && gemm_bf16_kernel_amx.micro && gemm_amx_usable();
    if (mode == GEMM_BF16_DOT && dot)
        return &gemm_bf16_kernel_dot;
    if (amx)
        return &gemm_bf16_kernel_amx;
    if (dot && dot_beats_fma())
        return &gemm_bf16_kernel_dot;
#endif
    return NULL;
}

const char *gemm_bf16_kernel_name(void)
{
    static _Thread_local char buf[64];
    const gemm_bf16_kernel *k = pick_bf16();
    if (k)
        return k->name;
    snprintf(buf, sizeof buf, "widen: %s", gemm_kernel_name());
    return buf;
}

/* ------------------------------------------------------------- packing */

/* One bf16 operand as the packers see it: element (r, k), r along C's rows
 * (A) or columns (B), at p[r * rs + k * ks]; one of rs, ks is 1. */
typedef struct {
    const uint16_t *p;
    int64_t rs, ks;
} operand;

/* Lines r0 .. r0+w (of R) over k0 .. k0+kc into kp pairs at dst; the
 * packer's answer (an inf needing pack_a_inf). */
static bool pack(gemm_bf16_pack_fn fn, const operand *o, int64_t r0, int w, int R, int64_t k0, int64_t kc,
                 int64_t kp, uint32_t *dst)
{
    return fn(o->p + r0 * o->rs + k0 * o->ks, o->rs, o->ks, w, R, kc, kp, dst);
}

/* 32-bit words per 2 k in the kernel's packed A and B lines (gemm.h). */
static int a_words2k(const gemm_bf16_kernel *kern) { return kern->a_words2k ? kern->a_words2k : 1; }
static int b_words2k(const gemm_bf16_kernel *kern) { return kern->b_words2k ? kern->b_words2k : 1; }

/* Words [p0, p1) of every NR-line panel of a B block (nc columns from j0,
 * panels kp words apart at bp; p0 a whole number of k). For B's rows
 * contiguous (B not transposed): a thread then reads whole rows of B,
 * which the hardware prefetchers follow, rather than 64 bytes from each of
 * kc rows. */
static bool pack_b_rows(const gemm_bf16_kernel *kern, const operand *o, int64_t j0, int64_t nc, int64_t k0,
                        int64_t kc, int64_t kp, int64_t p0, int64_t p1, uint32_t *bp)
{
    const int NR = kern->nr;
    const int64_t k_off = 2 * p0 / b_words2k(kern) < kc ? 2 * p0 / b_words2k(kern) : kc;
    bool inf = false;
    for (int64_t jp = 0; jp * NR < nc; jp++) {
        int w = nc - jp * NR < NR ? (int)(nc - jp * NR) : NR;
        inf |= pack(kern->pack_b, o, j0 + jp * NR, w, NR, k0 + k_off, kc - k_off, p1 - p0,
                    bp + jp * NR * kp + p0 * NR);
    }
    return inf;
}

/* -------------------------------------------------------------- driver */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Where results go. C of dtype c_dt (ldc); f32 partial sums in acc (ld
 * acc_ld): C itself when f32, a workspace when C is 16-bit and K spans
 * several blocks, NULL when neither (each tile then lives in scratch). */
typedef struct {
    void *c;
    amp_dtype c_dt;
    int64_t ldc;
    float *acc;
    int64_t acc_ld;
    float alpha, beta;
} target;

static amp_status run(const gemm_bf16_kernel *kern, const operand *a, const operand *b, int64_t M,
                      int64_t N, int64_t K, const target *g)
{
    const int MR = kern->mr, NR = kern->nr, wa = a_words2k(kern), wb = b_words2k(kern);
    /* K in equal blocks of at most kern->kc (whole tile steps): 512 as
     * 256 + 256 rather than 384 + 128, whose short second block would pay
     * a tile's fixed costs for little work. */
    const int64_t step = 2 * kern->kpair / wa, nb = ceil_div(K, kern->kc);
    const int64_t KC = ceil_div(ceil_div(K, nb), step) * step, NC = kern->nc;
    const int64_t kc_max = K < KC ? K : KC;
    /* kp: words per line of an A panel; B's lines hold kp * wb / wa */
    const int64_t kp_max = ceil_div(ceil_div(kc_max * wa, 2), kern->kpair) * kern->kpair;
    const int64_t kpb_max = kp_max * wb / wa;
    /* B packing work items when B's rows are contiguous: 16 k */
    const int64_t b_words = B_PAIRS * wb;
    const int64_t nc_max = N < NC ? ceil_div(N, NR) * NR : NC;
    const int64_t m_panels = ceil_div(M, MR);
    const bool c16 = g->c_dt != AMP_F32;

    int nt = amp_threads();
#ifdef _OPENMP
    if (omp_in_parallel())
        nt = 1;
#endif
    if ((double)M * (double)N * (double)K < kern->par_min)
        nt = 1;
    int64_t tiles = m_panels * ceil_div(nc_max, NR);
    if (nt > tiles)
        nt = (int)tiles;

    /* Per thread (in 64-byte steps): an A panel and an MR x NR f32 tile. */
    const int64_t a_words = ceil_div(MR * kp_max, 16) * 16;
    const int64_t per_thread = a_words + ceil_div(MR * NR, 16) * 16;
    /* Per (N block, K block) with pack_a_inf: whether its packed B holds an
     * inf, set while B is packed and read after the barrier that follows. */
    const int64_t n_kblocks = ceil_div(K, KC), n_blocks = ceil_div(N, NC) * n_kblocks;
    int *b_inf = kern->pack_a_inf ? amp_alloc((size_t)n_blocks * sizeof(int)) : NULL;
    uint32_t *bp = amp_alloc((size_t)(kpb_max * nc_max) * sizeof(uint32_t));
    uint32_t *ap = amp_alloc((size_t)(per_thread * nt) * sizeof(uint32_t));
    if (b_inf)
        memset(b_inf, 0, (size_t)n_blocks * sizeof(int));
    if (!bp || !ap || (kern->pack_a_inf && !b_inf)) {
        amp_free(b_inf);
        amp_free(bp);
        amp_free(ap);
        return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for packing buffers (%lld x %lld x %lld)",
                             (long long)M, (long long)N, (long long)K);
    }

#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#ifdef _OPENMP
        int tid = omp_get_thread_num();
#else
        int tid = 0;
#endif
        uint32_t *my_a = ap + tid * per_thread;
        float *tile = (float *)(my_a + a_words);
        if (kern->enter)
            kern->enter();
        for (int64_t jc = 0; jc < N; jc += NC) {
            const int64_t nc = N - jc < NC ? N - jc : NC;
            const int64_t n_panels = ceil_div(nc, NR);
            int64_t chunks = m_panels >= 8 * (int64_t)nt ? 1 : ceil_div(8 * (int64_t)nt, m_panels);
            if (chunks > n_panels)
                chunks = n_panels;
            const int64_t items = m_panels * chunks;
            for (int64_t pc = 0; pc < K; pc += KC) {
                const int64_t kc = K - pc < KC ? K - pc : KC;
                const int64_t kp = ceil_div(ceil_div(kc * wa, 2), kern->kpair) * kern->kpair;
                const int64_t kpb = kp * wb / wa;
                const bool first = pc == 0, last = pc + KC >= K;
                /* A 16-bit C takes beta in finish16, from C itself. */
                const float beta_k = !first ? 1.0f : c16 ? 0.0f : g->beta;
                int *inf = b_inf ? b_inf + jc / NC * n_kblocks + pc / KC : NULL;
                if (b->rs == 1) {
#pragma omp for schedule(static)
                    for (int64_t p0 = 0; p0 < kpb; p0 += b_words) {
                        const int64_t p1 = p0 + b_words < kpb ? p0 + b_words : kpb;
                        if (pack_b_rows(kern, b, jc, nc, pc, kc, kpb, p0, p1, bp) && inf) {
#pragma omp atomic write
                            *inf = 1;
                        }
                    }
                } else {
#pragma omp for schedule(static)
                    for (int64_t jp = 0; jp < n_panels; jp++) {
                        int64_t w = nc - jp * NR < NR ? nc - jp * NR : NR;
                        if (pack(kern->pack_b, b, jc + jp * NR, (int)w, NR, pc, kc, kpb, bp + jp * NR * kpb) && inf) {
#pragma omp atomic write
                            *inf = 1;
                        }
                    }
                }
                /* (the implied barrier: B and its flag are complete) */
                const gemm_bf16_pack_fn pack_a = inf && *inf ? kern->pack_a_inf : kern->pack_a;
                int64_t packed = -1;
#pragma omp for schedule(static)
                for (int64_t it = 0; it < items; it++) {
                    const int64_t mp = it / chunks, ch = it % chunks;
                    const int64_t i0 = mp * MR;
                    const int mr = M - i0 < MR ? (int)(M - i0) : MR;
                    if (mp != packed) {
                        pack(pack_a, a, i0, mr, MR, pc, kc, kp, my_a);
                        packed = mp;
                    }
                    const int64_t jp_end = (ch + 1) * n_panels / chunks;
                    for (int64_t jp = ch * n_panels / chunks; jp < jp_end; jp++) {
                        const int64_t j0 = jc + jp * NR;
                        const int nr = N - j0 < NR ? (int)(N - j0) : NR;
                        const uint32_t *bpan = bp + jp * NR * kpb;
                        float *t = tile;
                        int64_t tl = NR;
                        if (mr == MR && nr == NR && g->acc) {
                            t = g->acc + i0 * g->acc_ld + j0;
                            tl = g->acc_ld;
                            kern->micro(kp, my_a, bpan, t, tl, g->alpha, beta_k);
                        } else if (g->acc) {
                            /* Edge tile: the full tile in scratch, then the valid part. */
                            kern->micro(kp, my_a, bpan, tile, NR, 1.0f, 0.0f);
                            t = g->acc + i0 * g->acc_ld + j0;
                            tl = g->acc_ld;
                            for (int r = 0; r < mr; r++)
                                for (int j = 0; j < nr; j++) {
                                    float v = g->alpha * tile[r * NR + j];
                                    t[r * tl + j] = beta_k != 0.0f ? v + beta_k * t[r * tl + j] : v;
                                }
                        } else {
                            kern->micro(kp, my_a, bpan, tile, NR, g->alpha, 0.0f);
                        }
                        /* A 16-bit C: beta * C joins on the first K block,
                         * the one rounding happens on the last. */
                        if (c16)
                            kern->finish16(t, tl, mr, nr, (uint16_t *)g->c + i0 * g->ldc + j0, g->ldc,
                                           g->c_dt == AMP_BF16, first && g->beta != 0.0f, g->beta, last);
                    }
                }
            }
        }
        if (kern->leave)
            kern->leave();
    }
    amp_free(b_inf);
    amp_free(bp);
    amp_free(ap);
    return AMP_OK;
}

amp_status gemm_bf16_drive(const gemm_bf16_kernel *kern, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                           float beta, void *C, amp_dtype c_dt, int64_t ldc)
{
    /* element (i, k) of op(A); element (j, k) of op(B) */
    operand a = trans_a ? (operand){A, 1, lda} : (operand){A, lda, 1};
    operand b = trans_b ? (operand){B, ldb, 1} : (operand){B, 1, ldb};
    target g = {C, c_dt, ldc, NULL, 0, alpha, beta};
    float *work = NULL;
    if (c_dt == AMP_F32) {
        g.acc = C;
        g.acc_ld = ldc;
    } else {
        if (K > kern->kc) {
            work = amp_alloc((size_t)(M * N) * sizeof(float));
            if (!work)
                return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for a %lld x %lld f32 accumulator",
                                     (long long)M, (long long)N);
            g.acc = work;
            g.acc_ld = N;
        }
    }
    amp_status st = run(kern, &a, &b, M, N, K, &g);
    amp_free(work);
    return st;
}

bool gemm_bf16_native(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, void *C,
                      amp_dtype c_dt, int64_t ldc, amp_status *st)
{
    const gemm_bf16_kernel *kern = pick_bf16();
    if (!kern || M <= 0 || N <= 0 || K <= 0 || alpha == 0.0f)
        return false; /* gemm_lowp's general path handles the trivial cases */
    gemm_path = kern->name;
    *st = gemm_bf16_drive(kern, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dt, ldc);
    return true;
}
