/*
 * linalg.c (CPU) - the CPU backend's gemm and bias_grad primitives, over
 * the GEMMs of gemm.h (oneDNN, AMX, AVX-512 behind them).
 *
 * gemm: a product with a bias or an epilogue is one gemm_batched call,
 * where oneDNN adds the bias (ampc's own GEMM adds onto bias rows, beta 1)
 * and cpu_relu_rows applies the relu after; either way a 16-bit result is
 * rounded once. The gelu epilogue is fused into the GEMM: the product
 * goes into the pre-activation (aux, or C itself), and as each output tile
 * becomes final (rounded to C's dtype) the gelu formula runs over it while
 * it is in cache (the SIMD kernel where the CPU has it, as the pointwise
 * primitive), so values are those of linear followed by gelu bit for bit.
 * A plain product is gemm_lowp (batch 1), or gemm_batched, which spreads
 * the batch over the threads.
 *
 * Each gradient keeps the bits of the code it came from (src/ops/matmul.c):
 * a linear layer's f16 dW (weight_grad) widens and transposes dY up front
 * unless the f16 split kernel runs the product, and bias_grad sums f32
 * blocks of rows, added in double in block order.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm/gemm.h"
#include "base/base.h"
#include "dtype/dtype.h"
#include "record/profile.h"
#include "backend/cpu/simd.h"
#include "backend/pointwise.h"

#include "base/parallel.h"

#include <string.h>

/* ------------------------------------------------------------- gelu */

/* Elements of a gelu block (widened, then rounded, through the stack). */
#define GELU_BLOCK 1024

/* y[r, :] = gelu_tanh(x[r, :]) for rows x cols on this thread, x and y of
 * dtype dt at row strides ldx and ldy (in place when they are the same):
 * f32 values, one rounding. */
static void gelu_block(const void *x, int64_t ldx, void *y, int64_t ldy, amp_dtype dt, int64_t rows, int64_t cols)
{
    const size_t es = amp_dtype_size(dt);
    const simd_gelu_tanh_fn f = simd_pick_gelu_tanh();
    for (int64_t r = 0; r < rows; r++) {
        float in[GELU_BLOCK], out[GELU_BLOCK];
        for (int64_t c0 = 0; c0 < cols; c0 += GELU_BLOCK) {
            const int64_t nc = cols - c0 < GELU_BLOCK ? cols - c0 : GELU_BLOCK;
            const char *xs = (const char *)x + (size_t)(r * ldx + c0) * es;
            char *ys = (char *)y + (size_t)(r * ldy + c0) * es;
            const float *xf = (const float *)xs;
            float *yf = dt == AMP_F32 ? (float *)ys : out;
            if (dt != AMP_F32) {
                amp_convert(xs, dt, in, AMP_F32, (size_t)nc);
                xf = in;
            }
            if (f)
                f(xf, yf, nc);
            else
                for (int64_t j = 0; j < nc; j++)
                    yf[j] = pw_gelu_tanh_of(xf[j]);
            if (dt != AMP_F32)
                amp_convert(out, AMP_F32, ys, dt, (size_t)nc);
        }
    }
}

/* The gelu epilogue: pre-activation pre (ldp) -> y (ldy), both of dt. */
typedef struct {
    const char *pre;
    char *y;
    int64_t ldp, ldy;
    amp_dtype dt;
} gelu_ep;

/* One output tile of the GEMM, final in pre: its gelu into y. */
static void gelu_tile(void *ctx, int64_t i0, int64_t j0, int mr, int nr)
{
    const gelu_ep *e = ctx;
    const size_t es = amp_dtype_size(e->dt);
    gelu_block(e->pre + (size_t)(i0 * e->ldp + j0) * es, e->ldp, e->y + (size_t)(i0 * e->ldy + j0) * es, e->ldy, e->dt,
               mr, nr);
}

/* ------------------------------------------------------------- gemm */

/* C = gelu_tanh(op(A) op(B) + bias), with the pre-activation (rounded to
 * C's dtype) into aux when there is one: the GEMM's epilogue applies the
 * gelu to each output tile as soon as the tile is final, from the rounded
 * pre-activation, so the values are those of linear followed by gelu bit
 * for bit. Without aux the pre-activation is C itself and the gelu runs in
 * place. */
static amp_status gemm_gelu(const be_gemm_desc *g)
{
    void *pre = g->aux ? g->aux : g->C;
    const int64_t ldp = g->aux ? g->ldaux : g->ldc;
    gelu_ep e = {pre, g->C, ldp, g->ldc, g->cdt};
    const gemm_epilogue ep = {gelu_tile, &e};
    return gemm_batched_ep(g->ta, g->tb, 1, g->M, g->N, g->K, g->A, g->adt, g->lda, 0, g->B, g->bdt, g->ldb, 0, 0.0f,
                           pre, g->cdt, ldp, 0, g->bias, CPU_ACT_NONE, &ep);
}

/* dst [cols, rows] (f32) = the transpose of src [rows, cols] (dtype dt),
 * in tiles that keep both sides in cache. */
enum { TW_TILE = 32 };

typedef struct {
    const void *src;
    amp_dtype dt;
    int64_t rows, cols;
    float *dst;
} tw_job;

static void transpose_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const tw_job *j = ctx;
    enum { TILE = TW_TILE };
    const void *src = j->src;
    const amp_dtype dt = j->dt;
    const int64_t rows = j->rows, cols = j->cols;
    float *dst = j->dst;
    const size_t es = amp_dtype_size(dt);
    for (int64_t bi = lo; bi < hi; bi++) {
        float tile[TILE][TILE];
        const int64_t r0 = bi * TILE, nr = rows - r0 < TILE ? rows - r0 : TILE;
        for (int64_t c0 = 0; c0 < cols; c0 += TILE) {
            const int64_t nc = cols - c0 < TILE ? cols - c0 : TILE;
            for (int64_t r = 0; r < nr; r++)
                amp_convert((const char *)src + (size_t)((r0 + r) * cols + c0) * es, dt, tile[r], AMP_F32,
                            (size_t)nc);
            for (int64_t c = 0; c < nc; c++)
                for (int64_t r = 0; r < nr; r++)
                    dst[(c0 + c) * rows + r0 + r] = tile[r][c];
        }
    }
}

static void transpose_widen(const void *src, amp_dtype dt, int64_t rows, int64_t cols, float *dst)
{
    tw_job j = {src, dt, rows, cols, dst};
    const int64_t rt = (rows + TW_TILE - 1) / TW_TILE;
    /* one grain under 64K elements: the calling thread alone */
    const int64_t grain = rows * cols >= 65536 ? 1 : rt;
    amp_parallel_for(rt, grain, transpose_range, &j);
}

/* dW [M, N] = dYᵀ X with an f16 dY [K, M]: widened and transposed up
 * front (the widening GEMM would widen its transposed panels a dozen
 * elements at a time), unless the product runs on the f16 split kernel,
 * which packs dY as it is. Returns false when the plain product applies. */
static bool weight_grad_widened(const be_gemm_desc *g, amp_status *st)
{
    if (!g->weight_grad || !g->ta || g->tb || g->adt != AMP_F16 || g->batch != 1 || g->lda != g->M ||
        gemm_f16_split_active(g->M, g->N, g->K))
        return false;
    float *gt = amp_alloc((size_t)(g->K * g->M) * sizeof(float));
    if (!gt) {
        *st = amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for a %lld x %lld transposed gradient",
                            (long long)g->M, (long long)g->K);
        return true;
    }
    transpose_widen(g->A, AMP_F16, g->K, g->M, gt);
    *st = gemm_lowp(false, false, g->M, g->N, g->K, g->alpha, gt, AMP_F32, g->K, g->B, g->bdt, g->ldb, g->beta, g->C,
                    g->cdt, g->ldc);
    amp_free(gt);
    return true;
}

static amp_status gemm_run_desc(const be_gemm_desc *g);

/* c_rounded's epilogue: each row of a final tile of the f32 C rounded to
 * dt (16-bit) and widened back in place, while the tile is in cache. */
typedef struct {
    float *C;
    int64_t ldc;
    amp_dtype dt;
} round_ep;

enum { ROUND_CHUNK = 256 };

static void round_tile(void *ctx, int64_t i0, int64_t j0, int mr, int nr)
{
    const round_ep *e = ctx;
    uint16_t h[ROUND_CHUNK];
    for (int r = 0; r < mr; r++) {
        float *row = e->C + (i0 + r) * e->ldc + j0;
        for (int c0 = 0; c0 < nr; c0 += ROUND_CHUNK) {
            const size_t nc = (size_t)(nr - c0 < ROUND_CHUNK ? nr - c0 : ROUND_CHUNK);
            amp_convert(row + c0, AMP_F32, h, e->dt, nc);
            amp_convert(h, e->dt, row + c0, AMP_F32, nc);
        }
    }
}

/* A product whose f32 C gets each output rounded to A's 16-bit dtype
 * (be_gemm_desc.c_rounded). On ampc's own kernels the rounding is the
 * tile epilogue; where oneDNN (or the f16 weight-gradient path) would run
 * it, the product goes into a 16-bit buffer that is then widened into C,
 * the two passes the caller would otherwise make. */
static amp_status gemm_rounded(const be_gemm_desc *g)
{
    if (g->cdt != AMP_F32 || (g->adt != AMP_BF16 && g->adt != AMP_F16) || g->batch != 1 || g->bias ||
        g->ep != BE_EPI_NONE || g->beta != 0.0f)
        return amp_set_error(AMP_ERR_ARG, "gemm: a rounded f32 C needs 16-bit A, one product, beta 0, no bias "
                                          "and no epilogue");
    const bool f16_widened = g->weight_grad && g->adt == AMP_F16 && !gemm_f16_split_active(g->M, g->N, g->K);
    if (!f16_widened && gemm_lowp_runs_own(g->ta, g->tb, g->M, g->N, g->K, g->adt)) {
        round_ep e = {g->C, g->ldc, g->adt};
        const gemm_epilogue ep = {round_tile, &e};
        return gemm_lowp_ep(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->adt, g->lda, g->B, g->bdt, g->ldb,
                            0.0f, g->C, AMP_F32, g->ldc, &ep);
    }
    void *tmp = amp_alloc((size_t)(g->M * g->N) * amp_dtype_size(g->adt));
    if (!tmp)
        return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for a %lld x %lld product",
                             (long long)g->M, (long long)g->N);
    be_gemm_desc h = *g;
    h.c_rounded = false;
    h.C = tmp;
    h.cdt = g->adt;
    h.ldc = g->N;
    amp_status st = gemm_run_desc(&h);
    if (st == AMP_OK)
        cvt_rows(tmp, g->adt, g->N, g->C, AMP_F32, g->ldc, g->M, g->N, gemm_row_grain(g->N));
    amp_free(tmp);
    return st;
}

/* The product as a PROF_KERNEL event when the profiler is on, named by
 * the path it took (gemm_path), with its dtypes, sizes and FLOPs. */
amp_status cpu_gemm(const be_gemm_desc *g)
{
    prof_event *e = prof_begin(PROF_KERNEL, "gemm");
    if (!e)
        return gemm_run_desc(g);
    gemm_path = NULL;
    amp_status st = gemm_run_desc(g);
    e->name = gemm_path ? gemm_path : "gemm";
    e->device = AMP_CPU;
    const int64_t a[3] = {g->batch, g->M, g->K}, b[3] = {g->batch, g->K, g->N}, c[3] = {g->batch, g->M, g->N};
    const int skip = g->batch > 1 ? 0 : 1; /* [M, K] for one product, [batch, M, K] for several */
    prof_set_tensor(&e->in[0], g->adt, a + skip, 3 - skip);
    prof_set_tensor(&e->in[1], g->bdt, b + skip, 3 - skip);
    prof_set_tensor(&e->out, g->cdt, c + skip, 3 - skip);
    e->n_in = 2;
    e->flops = 2.0 * (double)g->batch * (double)g->M * (double)g->N * (double)g->K;
    e->bytes = (double)g->batch * ((double)(g->M * g->K) * (double)amp_dtype_size(g->adt) +
                                   (double)(g->K * g->N) * (double)amp_dtype_size(g->bdt) +
                                   (double)(g->M * g->N) * (double)amp_dtype_size(g->cdt));
    prof_end(e);
    return st;
}

static amp_status gemm_run_desc(const be_gemm_desc *g)
{
    if (g->batch < 0)
        return amp_set_error(AMP_ERR_ARG, "gemm: a batch of %lld products", (long long)g->batch);
    if (g->c_rounded)
        return gemm_rounded(g);
    if (g->bias || g->ep != BE_EPI_NONE) {
        if (g->alpha != 1.0f || g->beta != 0.0f || g->batch != 1)
            return amp_set_error(AMP_ERR_ARG, "gemm: a bias or an epilogue needs alpha 1, beta 0 and batch 1 "
                                              "(got %g, %g, %lld)",
                                 g->alpha, g->beta, (long long)g->batch);
        if (g->ep == BE_EPI_GELU)
            return gemm_gelu(g);
        return gemm_batched(g->ta, g->tb, 1, g->M, g->N, g->K, g->A, g->adt, g->lda, 0, g->B, g->bdt, g->ldb, 0, 0.0f,
                            g->C, g->cdt, g->ldc, 0, g->bias, g->ep == BE_EPI_RELU ? CPU_ACT_RELU : CPU_ACT_NONE);
    }
    amp_status st;
    if (weight_grad_widened(g, &st))
        return st;
    if (g->batch == 1) /* gemm_batched's single product, with any alpha */
        return gemm_lowp(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->adt, g->lda, g->B, g->bdt, g->ldb,
                         g->beta, g->C, g->cdt, g->ldc);
    if (g->alpha == 1.0f)
        return gemm_batched(g->ta, g->tb, g->batch, g->M, g->N, g->K, g->A, g->adt, g->lda, g->sa, g->B, g->bdt,
                            g->ldb, g->sb, g->beta, g->C, g->cdt, g->ldc, g->sc, NULL, CPU_ACT_NONE);
    /* A scaled batch: one product after the other, each threading itself. */
    const size_t ea = amp_dtype_size(g->adt), eb = amp_dtype_size(g->bdt), ec = amp_dtype_size(g->cdt);
    for (int64_t k = 0; k < g->batch; k++) {
        st = gemm_lowp(g->ta, g->tb, g->M, g->N, g->K, g->alpha, (const char *)g->A + (size_t)(k * g->sa) * ea,
                       g->adt, g->lda, (const char *)g->B + (size_t)(k * g->sb) * eb, g->bdt, g->ldb, g->beta,
                       (char *)g->C + (size_t)(k * g->sc) * ec, g->cdt, g->ldc);
        if (st != AMP_OK)
            return st;
    }
    return AMP_OK;
}

/* ------------------------------------------------------------ bias_grad */

/* bias_grad's blocks of rows, each summed into its own row of part. */
typedef struct {
    const char *g;
    amp_dtype dt;
    size_t es;
    int64_t rows, out, rb;
    float *part, *rowbuf;
} bg_job;

static void bias_grad_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    const bg_job *j = ctx;
    const int64_t out = j->out;
    for (int64_t b = lo; b < hi; b++) {
        float *restrict acc = j->part + b * out;
        memset(acc, 0, (size_t)out * sizeof(float));
        const int64_t r1 = (b + 1) * j->rb < j->rows ? (b + 1) * j->rb : j->rows;
        for (int64_t r = b * j->rb; r < r1; r++) {
            const float *restrict row = (const float *)(j->g + (size_t)(r * out) * j->es);
            if (j->rowbuf) {
                float *mine = j->rowbuf + (size_t)tid * (size_t)out;
                amp_convert(j->g + (size_t)(r * out) * j->es, j->dt, mine, AMP_F32, (size_t)out);
                row = mine;
            }
            for (int64_t c = 0; c < out; c++)
                acc[c] += row[c];
        }
    }
}

/* db[j] = sum over rows of dY[r, j]: f32 sums over fixed blocks of rows
 * (vectorisable, and the same whatever the thread count), added in block
 * order in double. 16-bit rows are widened one at a time. */
amp_status cpu_bias_grad(const void *dy, amp_dtype dt, int64_t rows, int64_t cols, void *db, amp_dtype dbdt)
{
    const int64_t out = cols;
    const int64_t rb = rows / 64 > 32 ? rows / 64 : 32, nrb = rows > 0 ? (rows + rb - 1) / rb : 0;
    /* one grain (this thread alone) under 64K elements */
    const int64_t grain = rows * out >= 65536 ? 1 : (nrb > 0 ? nrb : 1);
    const int nt = amp_parallel_width(nrb, grain);
    const size_t es = amp_dtype_size(dt);
    float *part = amp_alloc((size_t)(nrb * out + out) * sizeof(float));
    float *rowbuf = dt == AMP_F32 ? NULL : amp_alloc((size_t)nt * (size_t)out * sizeof(float));
    if (!part || (dt != AMP_F32 && !rowbuf)) {
        amp_free(part);
        amp_free(rowbuf);
        return amp_set_error(AMP_ERR_MEMORY, "bias_grad: out of memory for %lld x %lld partial sums",
                             (long long)nrb, (long long)out);
    }
    bg_job j = {dy, dt, es, rows, out, rb, part, rowbuf};
    amp_parallel_for(nrb, grain, bias_grad_range, &j);
    float *sum = part + nrb * out;
    for (int64_t j = 0; j < out; j++) {
        double s = 0;
        for (int64_t b = 0; b < nrb; b++)
            s += part[b * out + j];
        sum[j] = (float)s;
    }
    amp_convert(sum, AMP_F32, db, dbdt, (size_t)out);
    amp_free(part);
    amp_free(rowbuf);
    return AMP_OK;
}
