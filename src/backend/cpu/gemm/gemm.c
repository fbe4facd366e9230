/*
 * gemm.c - the widening GEMM driver (gemm_widen in gemm_kernels.h): the
 * blocked, packed, threaded product on f32 FMA micro-kernels, for every
 * product the dispatcher (dispatch.c) does not hand to oneDNN or to a
 * native 16-bit kernel.
 *
 * The loop nest is the classic BLIS one, written for row-major C:
 *
 *   for jc in N, step NC                 B block of KC x NC stays in L2
 *     for pc in K, step KC
 *       pack B[pc.., jc..] into NR-wide panels      (threads share it)
 *       for each MR-row panel of A (split across threads)
 *         pack A[i.., pc..] into one MR x KC panel  (stays in L1)
 *         for each NR-wide panel of B in the block
 *           micro-kernel: one MR x NR tile of C
 *
 * Packing lays each panel out in the order the micro-kernel reads it
 * (k-major, MR or NR values per k, zero-padded at the edges), so the
 * kernel does only aligned unit-stride loads whatever the transposes and
 * leading dimensions. The packers are also where dtypes are handled: they
 * widen f16 / bf16 panels to f32, so one set of f32 kernels serves every
 * dtype. (bf16 x bf16 products run on native 16-bit dot products instead,
 * where the CPU runs them faster than f32 FMA: gemm_bf16.c, the same loops
 * over panels kept in bf16 with pairs of k interleaved; so do big f16 x
 * f16 products, each f16 split exactly into two bf16.)
 *
 * Threads (amp_parallel_for): the work items are (A panel, slice of the B
 * block) pairs, handed out dynamically, so a thread that gets less of its
 * core takes fewer; each thread keeps its last packed A panel, so a run of
 * items of one panel packs it once. When M is small the B block is sliced
 * too, so a [1 x K] @ [K x N] product still spreads over the threads.
 * Each phase (pack B, multiply) is one parallel loop, whose end is the
 * barrier the next phase needs.
 */
#include "backend/cpu/gemm/gemm_kernels.h"
#include "base/base.h"
#include "base/parallel.h"

#include <stdatomic.h>
#include <string.h>

/* KC x NC floats of packed B (1 MiB) fit in a 2 MiB L2 with room for C;
 * NC is a multiple of every kernel's NR. */
#define GEMM_KC 256
#define GEMM_NC 1024
/* Below this many multiply-adds a parallel region costs more than it saves. */
#define GEMM_PARALLEL_MIN (1 << 17)

/* ----------------------------------------------------- portable kernel */

#define PORT_MR 4
#define PORT_NR 16

/* Plain C for any CPU. One row of the tile at a time, so the 16
 * accumulators stay in vector registers of the baseline ISA and the inner
 * loop vectorises cleanly; the B panel is re-read from L1 per row. */
static void micro_portable(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                           float alpha, float beta)
{
    for (int r = 0; r < PORT_MR; r++) {
        float acc[PORT_NR] = {0};
        for (int64_t k = 0; k < kc; k++) {
            const float av = a[k * PORT_MR + r], *bk = b + k * PORT_NR;
            for (int j = 0; j < PORT_NR; j++)
                acc[j] += av * bk[j];
        }
        float *row = c + r * ldc;
        for (int j = 0; j < PORT_NR; j++)
            row[j] = beta != 0.0f ? alpha * acc[j] + beta * row[j] : alpha * acc[j];
    }
}

static const gemm_kernel kernel_portable = {PORT_MR, PORT_NR, micro_portable, "portable 4x16"};

static const gemm_kernel *pick_kernel(void)
{
#if defined(__x86_64__)
    unsigned f = amp_cpu_features();
    if (f & AMP_CPU_AVX512F)
        return &gemm_kernel_avx512;
    if (f & AMP_CPU_AVX2)
        return &gemm_kernel_avx2;
#endif
    return &kernel_portable;
}

const char *gemm_widen_kernel_name(void) { return pick_kernel()->name; }

/* ------------------------------------------------------------- packing */

/* One operand as the packer sees it: element (r, k), where r runs along
 * C's rows (for A) or columns (for B), sits at element r * rs + k * ks.
 * One of rs, ks is 1 (operand_a / operand_b below make them so). */
typedef struct {
    const void *p;
    amp_dtype dt;
    int64_t rs, ks;
} operand;

/* Packs lines r0 .. r0+w (w <= R) over k0 .. k0+kc into dst[k * R + r],
 * as f32, zero-filling lines w .. R so edge tiles need no special kernel.
 * Runs are short (<= KC along k, <= R across), so plain loops beat
 * memcpy calls. */
static void pack_panel(const operand *o, int64_t r0, int w, int R, int64_t k0, int64_t kc, float *dst)
{
#if defined(__x86_64__)
    /* AVX-512: lines stored along k are a transpose, done 16 x 16 in
     * registers; 16-bit values are widened 16 at a time in the same pass
     * (per-line amp_convert calls on runs this short cost more than the
     * conversion itself). */
    if (R <= 32 && (amp_cpu_features() & AMP_CPU_AVX512F)) {
        const bool bf16 = o->dt == AMP_BF16;
        if (o->ks == 1 && o->dt == AMP_F32) {
            gemm_pack_lines_avx512((const float *)o->p + r0 * o->rs + k0, o->rs, w, R, kc, dst);
            return;
        }
        if (o->ks == 1) {
            gemm_pack_lines16_avx512((const uint16_t *)o->p + r0 * o->rs + k0, bf16, o->rs, w, R, kc, dst);
            return;
        }
        if (o->dt != AMP_F32) {
            gemm_pack_cols16_avx512((const uint16_t *)o->p + k0 * o->ks + r0, bf16, o->ks, w, R, kc, dst);
            return;
        }
    }
#endif
    if (o->dt == AMP_F32) {
        const float *s = (const float *)o->p;
        if (o->ks == 1) {
            for (int r = 0; r < w; r++) {
                const float *line = s + (r0 + r) * o->rs + k0;
                for (int64_t k = 0; k < kc; k++)
                    dst[k * R + r] = line[k];
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const float *col = s + (k0 + k) * o->ks + r0;
                float *d = dst + k * R;
                for (int r = 0; r < w; r++)
                    d[r] = col[r];
            }
        }
    } else {
        /* Widen contiguous runs with amp_convert (vectorised where the CPU
         * allows), then place them. This is where a native 16-bit kernel
         * would keep the values narrow instead. */
        const char *s = (const char *)o->p;
        size_t es = amp_dtype_size(o->dt);
        if (o->ks == 1) {
            float run[GEMM_KC];
            for (int r = 0; r < w; r++) {
                amp_convert(s + (size_t)((r0 + r) * o->rs + k0) * es, o->dt, run, AMP_F32, (size_t)kc);
                for (int64_t k = 0; k < kc; k++)
                    dst[k * R + r] = run[k];
            }
        } else {
            for (int64_t k = 0; k < kc; k++)
                amp_convert(s + (size_t)((k0 + k) * o->ks + r0) * es, o->dt, dst + k * R, AMP_F32,
                            (size_t)w);
        }
    }
    if (w < R)
        for (int64_t k = 0; k < kc; k++)
            for (int r = w; r < R; r++)
                dst[k * R + r] = 0.0f;
}

/* -------------------------------------------------------------- driver */

static void scale_c(int64_t M, int64_t N, float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++) {
        float *row = C + i * ldc;
        for (int64_t j = 0; j < N; j++)
            row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* A 16-bit C (gemm_widen) seen by gemm_run: c, row stride ldc, dtype dt. */
typedef struct {
    uint16_t *c;
    int64_t ldc;
    amp_dtype dt;
} c16_out;

/* One mr x nr tile between a 16-bit C and its f32 working copy t (row
 * stride tl): widen (exact) or round to nearest even, the bits amp_convert
 * gives; full-width AVX-512 tiles without its per-call overhead. */
static void tile16_move(const c16_out *o, int64_t i0, int64_t j0, int mr, int nr, float *t, int64_t tl, bool widen)
{
    uint16_t *c = o->c + i0 * o->ldc + j0;
#if defined(__x86_64__)
    if (nr % 16 == 0 && (amp_cpu_features() & AMP_CPU_AVX512F)) {
        if (widen)
            gemm_c16_widen_avx512(c, o->ldc, o->dt == AMP_BF16, mr, nr, t, tl);
        else
            gemm_c16_round_avx512(t, tl, mr, nr, o->dt == AMP_BF16, c, o->ldc);
        return;
    }
#endif
    for (int r = 0; r < mr; r++) {
        if (widen)
            amp_convert(c + r * o->ldc, o->dt, t + r * tl, AMP_F32, (size_t)nr);
        else
            amp_convert(t + r * tl, AMP_F32, c + r * o->ldc, o->dt, (size_t)nr);
    }
}

/* One (N block, K block) of gemm_run's product, shared by the parallel
 * loops that pack its B block and multiply it. */
typedef struct {
    const gemm_kernel *kern;
    const operand *a, *b;
    int64_t M, N, K;
    float alpha, beta;
    float *C;
    int64_t ldc;
    const c16_out *c16;
    const gemm_epilogue *ep;
    float *bp, *ap;      /* the B block; the per-thread scratch */
    int64_t per_thread, kc_max;
    int64_t *packed;     /* per thread: the A panel its scratch holds (-1: none) */
    int64_t jc, nc, pc, kc, n_panels, chunks;
    float beta_k;
} f32_block;

static void f32_pack_b(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    f32_block *k = ctx;
    const int NR = k->kern->nr;
    for (int64_t jp = lo; jp < hi; jp++) {
        int64_t w = k->nc - jp * NR < NR ? k->nc - jp * NR : NR;
        pack_panel(k->b, k->jc + jp * NR, (int)w, NR, k->pc, k->kc, k->bp + jp * NR * k->kc);
    }
}

/* Work items [lo, hi): item it is A panel it / chunks times the it % chunks
 * share of the B block's panels; the thread's scratch keeps its last
 * packed A panel. */
static void f32_multiply(void *ctx, int64_t lo, int64_t hi, int tid)
{
    f32_block *k = ctx;
    const gemm_kernel *kern = k->kern;
    const int MR = kern->mr, NR = kern->nr;
    float *my_a = k->ap + tid * k->per_thread;
    float *tile = my_a + MR * k->kc_max, *ctile = tile + MR * NR;
    const c16_out *c16 = k->c16;
    for (int64_t it = lo; it < hi; it++) {
        const int64_t mp = it / k->chunks, ch = it % k->chunks;
        const int64_t i0 = mp * MR;
        const int mr = k->M - i0 < MR ? (int)(k->M - i0) : MR;
        if (k->packed[tid] != mp) {
            pack_panel(k->a, i0, mr, MR, k->pc, k->kc, my_a);
            k->packed[tid] = mp;
        }
        const int64_t jp_end = (ch + 1) * k->n_panels / k->chunks;
        for (int64_t jp = ch * k->n_panels / k->chunks; jp < jp_end; jp++) {
            const int64_t j0 = k->jc + jp * NR;
            const int nr = k->N - j0 < NR ? (int)(k->N - j0) : NR;
            const float *bpan = k->bp + jp * NR * k->kc;
            float *cp = k->C ? k->C + i0 * k->ldc + j0 : ctile;
            const int64_t ldcp = k->C ? k->ldc : NR;
            if (c16 && k->pc == 0 && k->beta != 0.0f)
                tile16_move(c16, i0, j0, mr, nr, cp, ldcp, true);
            if (mr == MR && nr == NR) {
                kern->micro(k->kc, my_a, bpan, cp, ldcp, k->alpha, k->beta_k);
            } else {
                /* Edge tile: full tile into scratch, then the valid part. */
                kern->micro(k->kc, my_a, bpan, tile, NR, 1.0f, 0.0f);
                for (int r = 0; r < mr; r++)
                    for (int j = 0; j < nr; j++) {
                        float v = k->alpha * tile[r * NR + j];
                        cp[r * ldcp + j] = k->beta_k != 0.0f ? v + k->beta_k * cp[r * ldcp + j] : v;
                    }
            }
            if (c16 && k->pc + k->kc == k->K)
                tile16_move(c16, i0, j0, mr, nr, cp, ldcp, false);
        }
        /* The item's strip of tiles is final: the epilogue over it at once
         * (one call per strip, not per tile: fewer, longer rows). */
        if (k->ep && k->pc + k->kc == k->K) {
            const int64_t j0 = k->jc + ch * k->n_panels / k->chunks * NR, j1 = k->jc + jp_end * NR;
            if (j0 < j1)
                k->ep->fn(k->ep->ctx, i0, j0, mr, (int)((j1 < k->N ? j1 : k->N) - j0));
        }
    }
}

/* fn over [0, n) in grains: on the threads, or on this one alone when the
 * product is too small to pay for waking them. */
static void gemm_loop(bool par, int64_t n, int64_t grain, amp_range_fn fn, void *ctx)
{
    if (par)
        amp_parallel_for(n, grain, fn, ctx);
    else if (n > 0)
        fn(ctx, 0, n, 0);
}

/* C = alpha * A B + beta * C with A, B described as operands, C f32.
 * With c16, the result goes to that 16-bit C instead, rounded once: C is
 * then an M x N f32 working copy (ldc = N) that c16's values are widened
 * into tile by tile on the first K block and rounded from on the last, or
 * NULL when K is one block (each tile then lives in per-thread scratch).
 * Either way each tile sees the same operations as an f32 C holding the
 * widened values, without separate passes over all of C. */
static amp_status gemm_run(const operand *a, const operand *b, int64_t M, int64_t N, int64_t K, float alpha,
                           float beta, float *C, int64_t ldc, const c16_out *c16, const gemm_epilogue *ep)
{
    if (M <= 0 || N <= 0)
        return AMP_OK;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        gemm_epilogue_all(ep, M, N);
        return AMP_OK;
    }
    const gemm_kernel *kern = pick_kernel();
    const int MR = kern->mr, NR = kern->nr;
    gemm_path = kern->name;
    /* K in equal blocks of at most GEMM_KC (K = 288 as 2 x 144, not 256 +
     * a 32-step block that barely amortises its C loads and stores). */
    const int64_t kc_max = ceil_div(K, ceil_div(K, GEMM_KC));
    const int64_t nc_max = N < GEMM_NC ? ceil_div(N, NR) * NR : GEMM_NC;
    const int64_t m_panels = ceil_div(M, MR);

    /* Threads: the parallel loops below, unless the product is too small
     * to pay for them (or this already runs inside one: they then run
     * inline, on tid 0). */
    const bool par = (double)M * (double)N * (double)K >= GEMM_PARALLEL_MIN && amp_threads() > 1 && !amp_in_parallel();
    const int nt = par ? amp_threads() : 1;

    /* Per thread: one A panel, an MR x NR edge tile, a 16-bit C's tile. */
    const int64_t per_thread = ceil_div(MR * kc_max + 2 * MR * NR, 16) * 16; /* 64-byte steps */
    float *bp = amp_alloc((size_t)(kc_max * nc_max) * sizeof(float));
    float *ap = amp_alloc((size_t)(per_thread * nt) * sizeof(float));
    int64_t *packed = amp_alloc((size_t)nt * sizeof(int64_t));
    if (!bp || !ap || !packed) {
        amp_free(bp);
        amp_free(ap);
        amp_free(packed);
        return gemm_packing_failed(M, N, K);
    }
    f32_block k = {.kern = kern, .a = a, .b = b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .C = C,
                   .ldc = ldc, .c16 = c16, .ep = ep, .bp = bp, .ap = ap, .per_thread = per_thread, .kc_max = kc_max,
                   .packed = packed};
    for (int64_t jc = 0; jc < N; jc += GEMM_NC) {
        k.jc = jc;
        k.nc = N - jc < GEMM_NC ? N - jc : GEMM_NC;
        k.n_panels = ceil_div(k.nc, NR);
        k.chunks = gemm_b_slices(k.n_panels, m_panels, nt);
        for (int64_t pc = 0; pc < K; pc += kc_max) {
            k.pc = pc;
            k.kc = K - pc < kc_max ? K - pc : kc_max;
            k.beta_k = pc == 0 ? beta : 1.0f;
            for (int t = 0; t < nt; t++)
                packed[t] = -1;
            gemm_loop(par, k.n_panels, 1, f32_pack_b, &k);
            /* (the loop's end: B is packed before anyone reads it, and
             * nobody still reads it when the next block repacks it) */
            gemm_loop(par, m_panels * k.chunks, k.chunks > 1 ? ceil_div(k.chunks, 2) : 1, f32_multiply, &k);
        }
    }
    amp_free(bp);
    amp_free(ap);
    amp_free(packed);
    return AMP_OK;
}

static operand operand_a(bool trans, const void *A, amp_dtype dt, int64_t lda)
{
    /* element (i, p) of op(A) */
    return trans ? (operand){A, dt, 1, lda} : (operand){A, dt, lda, 1};
}

static operand operand_b(bool trans, const void *B, amp_dtype dt, int64_t ldb)
{
    /* element (j, p) of op(B), i.e. op(B)[p][j] */
    return trans ? (operand){B, dt, ldb, 1} : (operand){B, dt, 1, ldb};
}

amp_status gemm_widen(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                      amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt, int64_t ldb, float beta, void *C,
                      amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep)
{
    operand a = operand_a(trans_a, A, a_dt, lda), b = operand_b(trans_b, B, b_dt, ldb);
    if (c_dt == AMP_F32)
        return gemm_run(&a, &b, M, N, K, alpha, beta, (float *)C, ldc, NULL, ep);
    if (M <= 0 || N <= 0)
        return AMP_OK;
    const c16_out out = {C, ldc, c_dt};
    if (K <= 0 || alpha == 0.0f) { /* C = beta * C, rounded */
        float *row = amp_alloc((size_t)N * sizeof(float));
        if (!row)
            return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for a row of %lld", (long long)N);
        for (int64_t i = 0; i < M; i++) {
            if (beta != 0.0f)
                amp_convert((const uint16_t *)C + i * ldc, c_dt, row, AMP_F32, (size_t)N);
            scale_c(1, N, beta, row, N);
            amp_convert(row, AMP_F32, (uint16_t *)C + i * ldc, c_dt, (size_t)N);
        }
        amp_free(row);
        gemm_epilogue_all(ep, M, N);
        return AMP_OK;
    }
    if (K <= GEMM_KC) /* one K block: no f32 copy of C at all */
        return gemm_run(&a, &b, M, N, K, alpha, beta, NULL, 0, &out, ep);
    /* Over several K blocks each output accumulates in an f32 working
     * copy, so it is rounded once, at the end. */
    float *cf = amp_alloc((size_t)(M * N) * sizeof(float));
    if (!cf)
        return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for a %lld x %lld f32 accumulator",
                             (long long)M, (long long)N);
    amp_status st = gemm_run(&a, &b, M, N, K, alpha, beta, cf, N, &out, ep);
    amp_free(cf);
    return st;
}
