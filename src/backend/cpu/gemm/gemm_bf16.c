/*
 * gemm_bf16.c - the drivers of 16-bit products on native dot products
 * (gemm_bf16_drive, gemm_bf16_gemv in gemm_kernels.h): bf16 x bf16, and
 * f16 x f16 split into bf16. They run the kernel they are given; which
 * one, and whether at all, is the dispatcher's choice (dispatch.c). The
 * kernels, with the packers that lay panels out for them, live in
 * gemm_bf16_x86.c (and the split's packers in gemm_f16_split.c).
 *
 * The loop nest is gemm.c's (B block of kc x nc packed once and shared by
 * the threads, A packed one MR-row panel at a time, one MR x NR tile per
 * micro call; K blocks outer, N blocks inner, and over several N blocks
 * all of A's panels and all of B for the K block packed once, in one
 * parallel loop, instead of A once per N block), with two differences:
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
 * The same driver runs f16 x f16 products split into bf16
 * (gemm_f16_kernel_amx, with gemm_f16_split.c's packers): its kernel's packers lay each k out as two
 * words of A and one of B instead of half a word of each (a_words2k,
 * b_words2k), which only changes how k maps to packed words here.
 *
 * Threads: every phase (pack A, pack B, multiply) is an amp_parallel_for
 * over small items handed out dynamically (a thread that gets less of its
 * core takes fewer); the end of each loop is the barrier the next phase
 * needs. Products under the kernel's par_min run on the calling thread.
 *
 * Products of at most 8 rows with B transposed go to the gemv below
 * instead (no packing; the same exact products, another f32 summation
 * order, so such a product is not bit for bit a row slice of a bigger
 * one).
 *
 * Numerics: the dot instructions round after each product pair like an
 * FMA chain, but (as in oneDNN and PyTorch) treat bf16 subnormal inputs
 * (below 2^-126) as zero and flush subnormal partial sums to zero; the
 * widening path keeps them. Results do not depend on the thread count:
 * every tile runs the same sequence whatever thread computes it.
 */
#include "backend/cpu/gemm/gemm_kernels.h"
#include "base/base.h"
#include "base/parallel.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* Pairs of k per B-packing work item when B's rows are contiguous. */
#define B_PAIRS 8

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

/* 32-bit words per 2 k in the kernel's packed A and B lines (gemm_kernels.h). */
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
    const gemm_epilogue *ep; /* per tile, when it is final */
} target;

/* One (N block, K block) of a product, shared by the parallel loops that
 * pack its B block and multiply it. */
typedef struct {
    const gemm_bf16_kernel *kern;
    const operand *a, *b;
    int64_t M, N;
    const target *g;
    uint32_t *bp, *ap;          /* the B block; the per-thread scratch */
    uint32_t *apk;              /* every A panel of the K block, packed once; or NULL */
    bool wide;                  /* apk: B packed for all of N too, items over (N block, A panel) */
    int64_t m_panels, NC, b_panels;
    int64_t per_thread, a_words;
    int64_t *packed;            /* per thread: the A panel its scratch holds (-1: none) */
    int64_t jc, nc, pc, kc, kp, kpb, n_panels, chunks;
    bool first, last;
    float beta_k;
    _Atomic int inf;            /* the B block holds an inf (pack_a_inf kernels) */
} block;

/* Packs B's words [lo, hi) * B_PAIRS * wb of every panel (rows contiguous)
 * or panels [lo, hi) (B transposed). */
static void pack_b_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    block *k = ctx;
    const gemm_bf16_kernel *kern = k->kern;
    bool inf = false;
    if (k->b->rs == 1) {
        const int64_t bw = B_PAIRS * b_words2k(kern);
        const int64_t p0 = lo * bw, p1 = hi * bw < k->kpb ? hi * bw : k->kpb;
        inf = pack_b_rows(kern, k->b, k->jc, k->nc, k->pc, k->kc, k->kpb, p0, p1, k->bp);
    } else {
        const int NR = kern->nr;
        for (int64_t jp = lo; jp < hi; jp++) {
            int64_t w = k->nc - jp * NR < NR ? k->nc - jp * NR : NR;
            inf |= pack(kern->pack_b, k->b, k->jc + jp * NR, (int)w, NR, k->pc, k->kc, k->kpb, k->bp + jp * NR * k->kpb);
        }
    }
    if (inf && kern->pack_a_inf)
        atomic_store(&k->inf, 1);
}

/* A panels [lo, hi) of the K block into apk (a_words apart). */
static void pack_a_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    block *k = ctx;
    const int MR = k->kern->mr;
    for (int64_t mp = lo; mp < hi; mp++) {
        const int64_t i0 = mp * MR;
        const int mr = k->M - i0 < MR ? (int)(k->M - i0) : MR;
        pack(k->kern->pack_a, k->a, i0, mr, MR, k->pc, k->kc, k->kp, k->apk + mp * k->a_words);
    }
}

/* Wide mode, items [lo, hi): A panels 0 .. m_panels-1 into apk, then B's
 * NR-column panels (all of N) into bp, one parallel loop for both. */
static void pack_ab_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    block *k = ctx;
    const int NR = k->kern->nr;
    if (lo < k->m_panels)
        pack_a_range(ctx, lo, hi < k->m_panels ? hi : k->m_panels, tid);
    for (int64_t it = lo > k->m_panels ? lo : k->m_panels; it < hi; it++) {
        const int64_t jp = it - k->m_panels;
        const int64_t w = k->N - jp * NR < NR ? k->N - jp * NR : NR;
        pack(k->kern->pack_b, k->b, jp * NR, (int)w, NR, k->pc, k->kc, k->kpb, k->bp + jp * NR * k->kpb);
    }
}

/* Work items [lo, hi): item it is A panel it / chunks times the it % chunks
 * share of the B block's panels. The thread's scratch keeps its last
 * packed A panel, so consecutive items of one panel pack it once. */
static void multiply_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    block *k = ctx;
    const gemm_bf16_kernel *kern = k->kern;
    const target *g = k->g;
    const int MR = kern->mr, NR = kern->nr;
    const bool c16 = g->c_dt != AMP_F32;
    uint32_t *my_a = k->ap + tid * k->per_thread;
    float *tile = (float *)(my_a + k->a_words);
    const gemm_bf16_pack_fn pack_a = atomic_load(&k->inf) ? kern->pack_a_inf : kern->pack_a;
    if (kern->enter)
        kern->enter();
    for (int64_t it = lo; it < hi; it++) {
        /* the item's N block (jc, n_panels panels at bblk) and share of it */
        int64_t jc = k->jc, n_panels = k->n_panels, chunks = k->chunks, mp, ch;
        const uint32_t *bblk = k->bp;
        if (k->wide) { /* it = N block * m_panels + A panel, whole blocks */
            mp = it % k->m_panels, ch = 0, chunks = 1;
            jc = it / k->m_panels * k->NC;
            n_panels = ceil_div(k->N - jc < k->NC ? k->N - jc : k->NC, NR);
            bblk = k->bp + jc * k->kpb; /* panel jc / NR, NR * kpb words each */
        } else {
            mp = it / chunks, ch = it % chunks;
        }
        const int64_t i0 = mp * MR;
        const int mr = k->M - i0 < MR ? (int)(k->M - i0) : MR;
        const uint32_t *pa = my_a;
        if (k->apk) {
            pa = k->apk + mp * k->a_words;
        } else if (k->packed[tid] != mp) {
            pack(pack_a, k->a, i0, mr, MR, k->pc, k->kc, k->kp, my_a);
            k->packed[tid] = mp;
        }
        const int64_t jp_end = (ch + 1) * n_panels / chunks;
        for (int64_t jp = ch * n_panels / chunks; jp < jp_end; jp++) {
            const int64_t j0 = jc + jp * NR;
            const int nr = k->N - j0 < NR ? (int)(k->N - j0) : NR;
            const uint32_t *bpan = bblk + jp * NR * k->kpb;
            float *t = tile;
            int64_t tl = NR;
            if (mr == MR && nr == NR && g->acc) {
                t = g->acc + i0 * g->acc_ld + j0;
                tl = g->acc_ld;
                kern->micro(k->kp, pa, bpan, t, tl, g->alpha, k->beta_k);
            } else if (g->acc) {
                /* Edge tile: the full tile in scratch, then the valid part. */
                kern->micro(k->kp, pa, bpan, tile, NR, 1.0f, 0.0f);
                t = g->acc + i0 * g->acc_ld + j0;
                tl = g->acc_ld;
                for (int r = 0; r < mr; r++)
                    for (int j = 0; j < nr; j++) {
                        float v = g->alpha * tile[r * NR + j];
                        t[r * tl + j] = k->beta_k != 0.0f ? v + k->beta_k * t[r * tl + j] : v;
                    }
            } else {
                kern->micro(k->kp, pa, bpan, tile, NR, g->alpha, 0.0f);
            }
            /* A 16-bit C: beta * C joins on the first K block, the one
             * rounding happens on the last. */
            if (c16)
                kern->finish16(t, tl, mr, nr, (uint16_t *)g->c + i0 * g->ldc + j0, g->ldc, g->c_dt == AMP_BF16,
                               k->first && g->beta != 0.0f, g->beta, k->last);
        }
        /* The item's strip of tiles is final: the epilogue over it at
         * once (one call per strip, not per tile: fewer, longer rows). */
        if (k->last && g->ep) {
            const int64_t j0 = jc + ch * n_panels / chunks * NR, j1 = jc + jp_end * NR;
            if (j0 < j1)
                g->ep->fn(g->ep->ctx, i0, j0, mr, (int)((j1 < k->N ? j1 : k->N) - j0));
        }
    }
    if (kern->leave)
        kern->leave();
}

/* Runs fn over [0, n) in grains: on the threads, or on this one alone
 * when the product is too small to pay for waking them. */
static void loop(bool par, int64_t n, int64_t grain, amp_range_fn fn, void *ctx)
{
    if (par)
        amp_parallel_for(n, grain, fn, ctx);
    else if (n > 0)
        fn(ctx, 0, n, 0);
}

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
    const int64_t nc_max = N < NC ? ceil_div(N, NR) * NR : NC;
    const int64_t m_panels = ceil_div(M, MR);

    /* Threads: the parallel loops below, unless the product is too small
     * to pay for them (or this already runs inside one: they then run
     * inline, on tid 0). */
    const bool par = (double)M * (double)N * (double)K >= kern->par_min && amp_threads() > 1 && !amp_in_parallel();
    const int nt = par ? amp_threads() : 1;

    /* Per thread (in 64-byte steps): an A panel and an MR x NR f32 tile. */
    const int64_t a_words = ceil_div(MR * kp_max, 16) * 16;
    const int64_t per_thread = a_words + ceil_div(MR * NR, 16) * 16;
    /* Over several N blocks (and A's panels not depending on B's block:
     * no pack_a_inf), "wide": per K block, all of A's panels and all of B
     * are packed in one parallel loop and multiplied in another, over
     * (N block, A panel) items, N block by N block, so that the threads
     * share one B block in cache at a time; two loops per K block rather
     * than three per N block, each loop's end a wake-up and a barrier. */
    const bool prepack = N > NC && !kern->pack_a_inf;
    const int64_t b_panels = ceil_div(N, NR);
    uint32_t *bp = amp_alloc((size_t)(kpb_max * (prepack ? b_panels * NR : nc_max)) * sizeof(uint32_t));
    uint32_t *ap = amp_alloc((size_t)(per_thread * nt) * sizeof(uint32_t));
    int64_t *packed = amp_alloc((size_t)nt * sizeof(int64_t));
    uint32_t *apk = prepack ? amp_alloc((size_t)(a_words * m_panels) * sizeof(uint32_t)) : NULL;
    if (!bp || !ap || !packed || (prepack && !apk)) {
        amp_free(bp);
        amp_free(ap);
        amp_free(packed);
        amp_free(apk);
        return gemm_packing_failed(M, N, K);
    }
    block k = {.kern = kern, .a = a, .b = b, .M = M, .N = N, .g = g, .bp = bp, .ap = ap, .apk = apk,
               .per_thread = per_thread, .a_words = a_words, .packed = packed, .wide = prepack,
               .m_panels = m_panels, .NC = NC, .b_panels = b_panels};
    /* K blocks outer, N blocks inner: each tile still meets the K blocks
     * in order, whichever N block it is in. */
    for (int64_t pc = 0; pc < K; pc += KC) {
        k.pc = pc;
        k.kc = K - pc < KC ? K - pc : KC;
        k.kp = ceil_div(ceil_div(k.kc * wa, 2), kern->kpair) * kern->kpair;
        k.kpb = k.kp * wb / wa;
        k.first = pc == 0;
        k.last = pc + KC >= K;
        /* A 16-bit C takes beta in finish16, from C itself. */
        k.beta_k = !k.first ? 1.0f : g->c_dt != AMP_F32 ? 0.0f : g->beta;
        if (prepack) {
            loop(par, m_panels + b_panels, 1, pack_ab_range, &k);
            /* (the loop's end: A and B are packed) */
            loop(par, ceil_div(N, NC) * m_panels, 1, multiply_range, &k);
            continue;
        }
        for (int64_t jc = 0; jc < N; jc += NC) {
            k.jc = jc;
            k.nc = N - jc < NC ? N - jc : NC;
            k.n_panels = ceil_div(k.nc, NR);
            k.chunks = gemm_b_slices(k.n_panels, m_panels, nt);
            atomic_store(&k.inf, 0);
            for (int t = 0; t < nt; t++)
                packed[t] = -1;
            /* B's rows contiguous: threads take runs of B_PAIRS pairs of
             * every panel (whole rows of B, which the hardware prefetchers
             * follow, rather than 64 bytes from each of kc rows). */
            if (b->rs == 1)
                loop(par, ceil_div(k.kpb, B_PAIRS * wb), 4, pack_b_range, &k);
            else
                loop(par, k.n_panels, 1, pack_b_range, &k);
            /* (the loop's end: B and its flag are complete) */
            /* Items one at a time (a thread that gets less of its core
             * takes fewer), or half an A panel's slices at a time when the
             * B block is sliced, so a panel is packed by at most two. */
            const int64_t items = m_panels * k.chunks;
            loop(par, items, k.chunks > 1 ? ceil_div(k.chunks, 2) : 1, multiply_range, &k);
        }
    }
    amp_free(apk);
    amp_free(bp);
    amp_free(ap);
    amp_free(packed);
    return AMP_OK;
}

amp_status gemm_bf16_drive(const gemm_bf16_kernel *kern, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                           float beta, void *C, amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep)
{
    /* element (i, k) of op(A); element (j, k) of op(B) */
    operand a = trans_a ? (operand){A, 1, lda} : (operand){A, lda, 1};
    operand b = trans_b ? (operand){B, ldb, 1} : (operand){B, 1, ldb};
    target g = {C, c_dt, ldc, NULL, 0, alpha, beta, ep};
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

/* ------------------------------------------------- few rows: gemv */

/* Products of at most GEMM_GEMV_MAX_M rows with B transposed (a linear's
 * x W^T, W [N x K] rows contiguous along k: every decode step of `ampc
 * generate`, batch 1) skip the packing: the blocked path would re-pack all
 * of W for a row or two of A (measured: half of a bf16 decode step). The
 * kernel's rowdot instead takes each output as dot products of A's rows
 * with W's rows where they lie, GEMV_COLS columns per work item, parallel
 * over N; C is finished per item as the blocked path finishes a tile
 * (alpha * sum, plus beta * C fused; a 16-bit C rounded once by the
 * kernel's finish16) and the epilogue runs on each item's strip. A
 * transposed A (K x M) is first copied into rows (M x K, small). How
 * many rows take it (8 at most) is the dispatcher's choice (dispatch.c). */
#define GEMV_COLS 64
/* Multiply-adds from which the gemv spreads over the threads: it streams
 * B once from memory or L3 (128 KiB of bf16 at this size: some 5 us on
 * one core, past the cost of waking the pool's workers), so threads pay
 * off far sooner than for the blocked kernels; the f32 gemv's threshold
 * (gemv_f32.c). At 1 << 18 the width-384 gpt's attention projection
 * (147K) ran on one thread. */
#define GEMV_PAR_MIN (1 << 16)

typedef struct {
    const gemm_bf16_kernel *kern;
    const uint16_t *a, *b;
    int64_t lda, ldb, N, K;
    int M;
    const target *g;
} gemv_job;

static void gemv_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const gemv_job *v = ctx;
    const target *g = v->g;
    _Alignas(64) float t[GEMM_GEMV_MAX_M * GEMV_COLS];
    for (int64_t it = lo; it < hi; it++) {
        const int64_t j0 = it * GEMV_COLS;
        const int nr = v->N - j0 < GEMV_COLS ? (int)(v->N - j0) : GEMV_COLS;
        for (int i0 = 0; i0 < v->M; i0 += 4) /* the kernel takes up to 4 rows at a time */
            v->kern->rowdot(v->M - i0 < 4 ? v->M - i0 : 4, v->K, v->a + i0 * v->lda, v->lda, v->b + j0 * v->ldb,
                            v->ldb, nr, t + i0 * GEMV_COLS, GEMV_COLS);
        for (int i = 0; i < v->M; i++) {
            float *tr = t + i * GEMV_COLS;
            if (g->c_dt == AMP_F32) {
                float *cr = (float *)g->c + i * g->ldc + j0;
                for (int j = 0; j < nr; j++)
                    cr[j] = g->beta != 0.0f ? fmaf(g->beta, cr[j], g->alpha * tr[j]) : g->alpha * tr[j];
            } else {
                for (int j = 0; j < nr; j++)
                    tr[j] *= g->alpha;
            }
        }
        if (g->c_dt != AMP_F32)
            v->kern->finish16(t, GEMV_COLS, v->M, nr, (uint16_t *)g->c + j0, g->ldc, g->c_dt == AMP_BF16,
                              g->beta != 0.0f, g->beta, true);
        if (g->ep)
            g->ep->fn(g->ep->ctx, 0, j0, v->M, nr);
    }
}

amp_status gemm_bf16_gemv(const gemm_bf16_kernel *kern, bool trans_a, int64_t M, int64_t N, int64_t K, float alpha,
                          const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, void *C,
                          amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep)
{
    uint16_t *rows = NULL;
    if (trans_a) { /* A is K x M: its M columns become rows */
        rows = amp_alloc((size_t)(M * K) * sizeof(uint16_t));
        if (!rows)
            return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for %lld x %lld rows of A", (long long)M,
                                 (long long)K);
        for (int64_t k = 0; k < K; k++)
            for (int64_t i = 0; i < M; i++)
                rows[i * K + k] = A[k * lda + i];
        A = rows;
        lda = K;
    }
    const target g = {C, c_dt, ldc, NULL, 0, alpha, beta, ep};
    const gemv_job v = {kern, A, B, lda, ldb, N, K, (int)M, &g};
    const bool par = (double)M * (double)N * (double)K >= GEMV_PAR_MIN && amp_threads() > 1 && !amp_in_parallel();
    loop(par, ceil_div(N, GEMV_COLS), 1, gemv_range, (void *)&v);
    amp_free(rows);
    return AMP_OK;
}
