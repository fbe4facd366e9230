/*
 * attention.c - scaled_dot_product_attention, forward and backward:
 * out = softmax(q kᵀ / sqrt(d) [+ causal mask]) v for q, k, v [.., T, d]
 * of one shape and dtype, as torch.nn.functional.scaled_dot_product_attention
 * (no dropout, no explicit mask, default scale).
 *
 * Precision: the scores, the mask and the softmax live in f32 whatever the
 * inputs' dtype. The GEMMs read 16-bit q, k, v directly (gemm_lowp widens
 * while packing and accumulates in f32) and write the scores in f32, so a
 * score like 300 * 300 * 64 / 8 (past f16's 65504) stays finite; the
 * probabilities P are in [0, 1] and each output row is a convex
 * combination of rows of v, so the one rounding to q's dtype cannot
 * overflow either. That is why autocast may lower this op to f16 (its
 * category is "lower" on both devices, as in PyTorch).
 *
 * Saved for backward: each row's log-sum-exp (f32, [.., T]), not P. P is
 * T x T per head (at T = 1024, 12 heads, batch 8 that is 384 MiB per
 * layer); the log-sum-exp is T floats, and backward rebuilds P exactly as
 * P = exp(S - lse) from one more q kᵀ GEMM, which costs about a sixth of
 * the attention's GEMM work. This is what PyTorch's fused CPU/CUDA
 * kernels (flash, memory-efficient) save too. q, k, v are already kept
 * by the node.
 *
 * Backward, per head (S the scaled scores, P = softmax(S), dO = gout):
 *   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - rowsum(P ∘ dP)),
 *   dQ = scale · dS K,  dK = scale · dSᵀ Q,
 * with dP and dS in f32 and each gradient rounded once to the inputs'
 * dtype. Masked entries have P = 0, so they get no gradient.
 *
 * Threads: one head (one [T, d] slice of the leading dims) per OpenMP
 * iteration; the GEMMs inside then run on one thread each. A single head
 * runs outside a parallel region so that its GEMMs can thread themselves,
 * and tiny problems (below ATTN_PAR_MIN) run on the calling thread.
 */
#include "backend/cpu/gemm.h"
#include "ops/infer.h"
#include "ops/simd.h"

#include <math.h>

/* Multiply-adds below which the heads run on one thread. */
#define ATTN_PAR_MIN 65536.0

/* i[0] = causal */
amp_tensor *amp_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal)
{
    amp_tensor *in[3] = {q, k, v};
    op_params p = {.i = {causal}};
    return op_apply(OP_ATTENTION, in, 3, &p);
}

/* Entries of row i that the mask keeps: all T, or 0..i when causal. */
static inline int64_t row_len(const attn_plan *pl, int64_t i) { return pl->causal ? i + 1 : pl->T; }

static const void *head_at(const amp_tensor *t, int64_t h, const attn_plan *pl)
{
    return (const char *)tensor_ptr(t) + (size_t)(h * pl->T * pl->d) * amp_dtype_size(t->dtype);
}

static void *head_out(amp_tensor *t, int64_t h, const attn_plan *pl)
{
    return (char *)tensor_ptr(t) + (size_t)(h * pl->T * pl->d) * amp_dtype_size(t->dtype);
}

/* S [T, T] = scale · q kᵀ for head h, in f32. */
static amp_status scores(const node *n, const attn_plan *pl, int64_t h, float *S)
{
    amp_dtype dt = n->in[0]->dtype;
    return gemm_lowp(false, true, pl->T, pl->T, pl->d, pl->scale, head_at(n->in[0], h, pl), dt, pl->d,
                     head_at(n->in[1], h, pl), dt, pl->d, 0.0f, S, AMP_F32, pl->T);
}

/* Turns the scores into probabilities in place (masked entries 0) and
 * stores each row's log-sum-exp in lse (may be NULL). The sum is kept in
 * double, as the softmax op does. */
static void softmax_rows(const attn_plan *pl, float *S, float *lse)
{
    const simd_row_fns *v = simd_pick_rows();
    for (int64_t i = 0; i < pl->T; i++) {
        float *r = S + i * pl->T;
        int64_t len = row_len(pl, i);
        float mx = -INFINITY;
        double sum = 0;
        if (v) {
            mx = v->max(r, len);
            sum = v->exp_sum(r, len, mx);
        } else {
            for (int64_t j = 0; j < len; j++)
                if (r[j] > mx || r[j] != r[j]) /* a NaN makes the row NaN */
                    mx = r[j];
            for (int64_t j = 0; j < len; j++) {
                r[j] = expf(r[j] - mx);
                sum += r[j];
            }
        }
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < len; j++)
            r[j] *= inv;
        for (int64_t j = len; j < pl->T; j++)
            r[j] = 0.0f;
        if (lse)
            lse[i] = mx + (float)log(sum);
    }
}

/* bf16 inputs: the probabilities and dS go into the second-stage GEMMs
 * rounded to bf16, so that those GEMMs also run on the CPU's bf16 dot
 * products, as PyTorch's CPU flash attention does (its qk_reduced and
 * grad_attn_reduced buffers). Other dtypes keep them in f32. */
static bool reduced(amp_dtype dt) { return dt == AMP_BF16; }

/* A [T, T] f32 matrix as the GEMM reads it: itself, or rounded to bf16
 * into buf. */
static const void *stage(const float *m, int64_t T, amp_dtype dt, uint16_t *buf, amp_dtype *mdt)
{
    if (!reduced(dt)) {
        *mdt = AMP_F32;
        return m;
    }
    amp_convert(m, AMP_F32, buf, AMP_BF16, (size_t)(T * T));
    *mdt = AMP_BF16;
    return buf;
}

/* Floats of per-head scratch: `mats` f32 [T, T] matrices plus one bf16
 * [T, T] staging buffer when dt is reduced. */
static int64_t scratch_floats(const attn_plan *pl, int mats, amp_dtype dt)
{
    int64_t tt = pl->T * pl->T;
    return mats * tt + (reduced(dt) ? (tt + 1) / 2 : 0);
}

/* Runs fn(ctx, h, scratch) for every head, one head per OpenMP iteration,
 * each with its own scratch of `floats` floats. Returns AMP_OK or the
 * first failure (set on this thread). */
typedef amp_status (*head_fn)(void *ctx, int64_t h, float *scratch);

static amp_status for_each_head(const node *n, const attn_plan *pl, head_fn fn, void *ctx, int64_t floats)
{
    int failed = 0;
    /* Tiny heads are not worth a thread team (waking it costs more). */
    const double work = (double)pl->heads * (double)(pl->T * pl->T) * (double)(pl->d + 4);
    const bool par = pl->heads > 1 && work >= ATTN_PAR_MIN;
    (void)par; /* read only by the pragma, which a build without OpenMP drops */
#pragma omp parallel for num_threads(amp_threads()) if (par) schedule(dynamic, 1) reduction(| : failed)
    for (int64_t h = 0; h < pl->heads; h++) {
        float *scratch = amp_alloc((size_t)floats * sizeof(float));
        failed |= !scratch || fn(ctx, h, scratch) != AMP_OK;
        amp_free(scratch);
    }
    /* The error may have been set on a worker thread: say it here too. */
    if (failed)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory for %lld x %lld scores", op_name(n),
                             (long long)pl->T, (long long)pl->T);
    return AMP_OK;
}

/* ---------------------------------------------------------------- forward */

typedef struct {
    const node *n;
    const attn_plan *pl;
    amp_tensor *out;
    float *lse; /* [heads, T] or NULL when no backward will run */
} fwd_ctx;

static amp_status forward_head(void *vc, int64_t h, float *S)
{
    const fwd_ctx *c = vc;
    const attn_plan *pl = c->pl;
    amp_status st = scores(c->n, pl, h, S);
    if (st != AMP_OK)
        return st;
    softmax_rows(pl, S, c->lse ? c->lse + h * pl->T : NULL);
    /* out = P v, accumulated in f32 and rounded once to the output dtype. */
    amp_dtype dt = c->out->dtype, pdt;
    const void *P = stage(S, pl->T, dt, (uint16_t *)(S + pl->T * pl->T), &pdt);
    return gemm_lowp(false, false, pl->T, pl->d, pl->T, 1.0f, P, pdt, pl->T, head_at(c->n->in[2], h, pl), dt,
                     pl->d, 0.0f, head_out(c->out, h, pl), dt, pl->d);
}

amp_tensor *attention_forward(node *n)
{
    attn_plan pl;
    if (!attention_infer(n, &pl))
        return NULL;
    const amp_tensor *q = n->in[0];
    if (q->numel == 0)
        return tensor_zeros(q->shape, q->dtype);
    amp_tensor *out = tensor_new(q->shape, q->dtype);
    amp_tensor *lse = NULL;
    if (out && n->needs_grad) {
        amp_shape ls = q->shape;
        ls.ndim--; /* [.., T] */
        lse = tensor_new(ls, AMP_F32);
    }
    if (!out || (n->needs_grad && !lse)) {
        amp_tensor_free(out);
        return NULL;
    }
    fwd_ctx c = {n, &pl, out, lse ? tensor_f32(lse) : NULL};
    if (for_each_head(n, &pl, forward_head, &c, scratch_floats(&pl, 1, q->dtype)) != AMP_OK) {
        amp_tensor_free(out);
        amp_tensor_free(lse);
        return NULL;
    }
    n->saved[0] = lse;
    return out;
}

/* --------------------------------------------------------------- backward */

typedef struct {
    const node *n;
    const attn_plan *pl;
    const amp_tensor *gout;
    const float *lse;
    amp_tensor *gq, *gk, *gv; /* NULL when not needed */
} bwd_ctx;

/* scratch: P [T, T], dP / dS [T, T], then the bf16 staging buffer. */
static amp_status backward_head(void *vc, int64_t h, float *scratch)
{
    const bwd_ctx *c = vc;
    const attn_plan *pl = c->pl;
    const int64_t T = pl->T, d = pl->d;
    const amp_dtype dt = c->n->in[0]->dtype;
    float *P = scratch, *dS = scratch + T * T;
    uint16_t *buf = (uint16_t *)(scratch + 2 * T * T);
    const void *g = head_at(c->gout, h, pl);
    const simd_row_fns *v = simd_pick_rows();
    amp_dtype mdt;

    /* P = exp(S - lse), rebuilt from the saved log-sum-exp. */
    amp_status st = scores(c->n, pl, h, P);
    if (st != AMP_OK)
        return st;
    const float *lse = c->lse + h * T;
    for (int64_t i = 0; i < T; i++) {
        float *r = P + i * T;
        int64_t len = row_len(pl, i);
        if (v)
            v->exp_sum(r, len, lse[i]);
        else
            for (int64_t j = 0; j < len; j++)
                r[j] = expf(r[j] - lse[i]);
        for (int64_t j = len; j < T; j++)
            r[j] = 0.0f;
    }
    if (c->gv) {
        /* dV [T, d] = Pᵀ dO */
        const void *Pm = stage(P, T, dt, buf, &mdt);
        st = gemm_lowp(true, false, T, d, T, 1.0f, Pm, mdt, T, g, dt, d, 0.0f, head_out(c->gv, h, pl), dt, d);
        if (st != AMP_OK)
            return st;
    }
    if (!c->gq && !c->gk)
        return AMP_OK;
    /* dP [T, T] = dO Vᵀ, then dS = scale · P ∘ (dP - rowsum(P ∘ dP)). The
     * scale of S = scale · q kᵀ is folded in here once for dQ and dK. */
    st = gemm_lowp(false, true, T, T, d, 1.0f, g, dt, d, head_at(c->n->in[2], h, pl), dt, d, 0.0f, dS,
                   AMP_F32, T);
    if (st != AMP_OK)
        return st;
    for (int64_t i = 0; i < T; i++) {
        const float *p = P + i * T;
        float *r = dS + i * T;
        int64_t len = row_len(pl, i);
        double dot = 0;
        if (v)
            dot = v->dot(p, r, len);
        else
            for (int64_t j = 0; j < len; j++)
                dot += (double)p[j] * r[j];
        for (int64_t j = 0; j < len; j++)
            r[j] = pl->scale * p[j] * (r[j] - (float)dot);
        for (int64_t j = len; j < T; j++)
            r[j] = 0.0f;
    }
    const void *dSm = stage(dS, T, dt, buf, &mdt);
    if (c->gq) {
        /* dQ [T, d] = dS K */
        st = gemm_lowp(false, false, T, d, T, 1.0f, dSm, mdt, T, head_at(c->n->in[1], h, pl), dt, d, 0.0f,
                       head_out(c->gq, h, pl), dt, d);
        if (st != AMP_OK)
            return st;
    }
    if (c->gk) {
        /* dK [T, d] = dSᵀ Q */
        st = gemm_lowp(true, false, T, d, T, 1.0f, dSm, mdt, T, head_at(c->n->in[0], h, pl), dt, d, 0.0f,
                       head_out(c->gk, h, pl), dt, d);
    }
    return st;
}

amp_status attention_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    attn_plan pl;
    if (!attention_infer(n, &pl))
        return amp_last_status();
    const amp_tensor *q = n->in[0];
    for (int i = 0; i < 3; i++) {
        if (!in_needs_grad(n, i))
            continue;
        /* An empty input (or d = 0) has an empty, all-zero gradient. */
        gin[i] = q->numel ? tensor_new(q->shape, q->dtype) : tensor_zeros(q->shape, q->dtype);
        if (!gin[i])
            return amp_last_status();
    }
    if (q->numel == 0)
        return AMP_OK;
    if (!n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without the saved log-sum-exp", op_name(n));
    bwd_ctx c = {n, &pl, gout, tensor_f32(n->saved[0]), gin[0], gin[1], gin[2]};
    return for_each_head(n, &pl, backward_head, &c, scratch_floats(&pl, 2, q->dtype));
}
