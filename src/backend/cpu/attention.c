/*
 * attention.c (CPU) - the CPU backend's attention and attention_backward
 * primitives: scaled dot-product attention one head at a time, on
 * gemm_lowp. The op itself (shapes, what is saved) is src/ops/attention.c.
 *
 * Precision: the scores, the mask and the softmax live in f32 whatever the
 * inputs' dtype. The GEMMs read 16-bit q, k, v directly (gemm_lowp widens
 * while packing and accumulates in f32) and write the scores in f32, so a
 * score like 300 * 300 * 64 / 8 (past f16's 65504) stays finite; the
 * probabilities P are in [0, 1] and each output row is a convex
 * combination of rows of v, so the one rounding to q's dtype cannot
 * overflow either.
 *
 * Forward writes each row's log-sum-exp (f32) when asked; backward
 * rebuilds P exactly as P = exp(S - lse) from one more q kᵀ GEMM. Per head
 * (S the scaled scores, P = softmax(S), dO = gout):
 *   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - rowsum(P ∘ dP)),
 *   dQ = scale · dS K,  dK = scale · dSᵀ Q,
 * with dP and dS in f32 and each gradient rounded once to the inputs'
 * dtype. Masked entries have P = 0, so they get no gradient.
 *
 * Threads: one head per OpenMP iteration; the GEMMs inside then run on one
 * thread each. A single head runs outside a parallel region so that its
 * GEMMs can thread themselves, and tiny problems (below ATTN_PAR_MIN) run
 * on the calling thread.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "base/base.h"
#include "backend/cpu/simd.h"

#include <math.h>

/* Multiply-adds below which the heads run on one thread. */
#define ATTN_PAR_MIN 65536.0

/* Entries of row i that the mask keeps: all T, or 0..i when causal. */
static inline int64_t row_len(const be_attn_desc *a, int64_t i) { return a->causal ? i + 1 : a->T; }

/* Head h of a [heads, T, D] operand of dtype dt. */
static const void *head_at(const void *t, int64_t h, const be_attn_desc *a)
{
    return (const char *)t + (size_t)(h * a->T * a->D) * amp_dtype_size(a->dt);
}

static void *head_out(void *t, int64_t h, const be_attn_desc *a)
{
    return (char *)t + (size_t)(h * a->T * a->D) * amp_dtype_size(a->dt);
}

/* S [T, T] = scale · q kᵀ for head h, in f32. */
static amp_status scores(const be_attn_desc *a, int64_t h, float *S)
{
    return gemm_lowp(false, true, a->T, a->T, a->D, a->scale, head_at(a->q, h, a), a->dt, a->D,
                     head_at(a->k, h, a), a->dt, a->D, 0.0f, S, AMP_F32, a->T);
}

/* Turns the scores into probabilities in place (masked entries 0) and
 * stores each row's log-sum-exp in lse (may be NULL). The sum is kept in
 * double, as the softmax op does. */
static void softmax_rows(const be_attn_desc *a, float *S, float *lse)
{
    const simd_row_fns *v = simd_pick_rows();
    for (int64_t i = 0; i < a->T; i++) {
        float *r = S + i * a->T;
        int64_t len = row_len(a, i);
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
        for (int64_t j = len; j < a->T; j++)
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
static int64_t scratch_floats(const be_attn_desc *a, int mats)
{
    int64_t tt = a->T * a->T;
    return mats * tt + (reduced(a->dt) ? (tt + 1) / 2 : 0);
}

/* Runs fn(a, h, scratch) for every head, one head per OpenMP iteration,
 * each with its own scratch of `floats` floats. Returns AMP_OK or the
 * first failure (set on this thread). */
typedef amp_status (*head_fn)(const be_attn_desc *a, int64_t h, float *scratch);

static amp_status for_each_head(const be_attn_desc *a, head_fn fn, int64_t floats)
{
    int failed = 0;
    /* Tiny heads are not worth a thread team (waking it costs more). */
    const double work = (double)a->heads * (double)(a->T * a->T) * (double)(a->D + 4);
    const bool par = a->heads > 1 && work >= ATTN_PAR_MIN;
    (void)par; /* read only by the pragma, which a build without OpenMP drops */
#pragma omp parallel for num_threads(amp_threads()) if (par) schedule(dynamic, 1) reduction(| : failed)
    for (int64_t h = 0; h < a->heads; h++) {
        float *scratch = amp_alloc((size_t)floats * sizeof(float));
        failed |= !scratch || fn(a, h, scratch) != AMP_OK;
        amp_free(scratch);
    }
    /* The error may have been set on a worker thread: say it here too. */
    if (failed)
        return amp_set_error(AMP_ERR_MEMORY, "attention: out of memory for %lld x %lld scores", (long long)a->T,
                             (long long)a->T);
    return AMP_OK;
}

/* ---------------------------------------------------------------- forward */

static amp_status forward_head(const be_attn_desc *a, int64_t h, float *S)
{
    amp_status st = scores(a, h, S);
    if (st != AMP_OK)
        return st;
    softmax_rows(a, S, a->lse ? a->lse + h * a->T : NULL);
    /* out = P v, accumulated in f32 and rounded once to the output dtype. */
    amp_dtype pdt;
    const void *P = stage(S, a->T, a->dt, (uint16_t *)(S + a->T * a->T), &pdt);
    return gemm_lowp(false, false, a->T, a->D, a->T, 1.0f, P, pdt, a->T, head_at(a->v, h, a), a->dt, a->D, 0.0f,
                     head_out(a->out, h, a), a->dt, a->D);
}

amp_status cpu_attention(const be_attn_desc *a)
{
    if (a->heads <= 0 || a->T <= 0 || a->D <= 0)
        return AMP_OK;
    return for_each_head(a, forward_head, scratch_floats(a, 1));
}

/* --------------------------------------------------------------- backward */

/* scratch: P [T, T], dP / dS [T, T], then the bf16 staging buffer. */
static amp_status backward_head(const be_attn_desc *a, int64_t h, float *scratch)
{
    const int64_t T = a->T, d = a->D;
    const amp_dtype dt = a->dt;
    float *P = scratch, *dS = scratch + T * T;
    uint16_t *buf = (uint16_t *)(scratch + 2 * T * T);
    const void *g = head_at(a->gout, h, a);
    const simd_row_fns *v = simd_pick_rows();
    amp_dtype mdt;

    /* P = exp(S - lse), rebuilt from the saved log-sum-exp. */
    amp_status st = scores(a, h, P);
    if (st != AMP_OK)
        return st;
    const float *lse = a->lse + h * T;
    for (int64_t i = 0; i < T; i++) {
        float *r = P + i * T;
        int64_t len = row_len(a, i);
        if (v)
            v->exp_sum(r, len, lse[i]);
        else
            for (int64_t j = 0; j < len; j++)
                r[j] = expf(r[j] - lse[i]);
        for (int64_t j = len; j < T; j++)
            r[j] = 0.0f;
    }
    if (a->gv) {
        /* dV [T, d] = Pᵀ dO */
        const void *Pm = stage(P, T, dt, buf, &mdt);
        st = gemm_lowp(true, false, T, d, T, 1.0f, Pm, mdt, T, g, dt, d, 0.0f, head_out(a->gv, h, a), dt, d);
        if (st != AMP_OK)
            return st;
    }
    if (!a->gq && !a->gk)
        return AMP_OK;
    /* dP [T, T] = dO Vᵀ, then dS = scale · P ∘ (dP - rowsum(P ∘ dP)). The
     * scale of S = scale · q kᵀ is folded in here once for dQ and dK. */
    st = gemm_lowp(false, true, T, T, d, 1.0f, g, dt, d, head_at(a->v, h, a), dt, d, 0.0f, dS, AMP_F32, T);
    if (st != AMP_OK)
        return st;
    for (int64_t i = 0; i < T; i++) {
        const float *p = P + i * T;
        float *r = dS + i * T;
        int64_t len = row_len(a, i);
        double dot = 0;
        if (v)
            dot = v->dot(p, r, len);
        else
            for (int64_t j = 0; j < len; j++)
                dot += (double)p[j] * r[j];
        for (int64_t j = 0; j < len; j++)
            r[j] = a->scale * p[j] * (r[j] - (float)dot);
        for (int64_t j = len; j < T; j++)
            r[j] = 0.0f;
    }
    const void *dSm = stage(dS, T, dt, buf, &mdt);
    if (a->gq) {
        /* dQ [T, d] = dS K */
        st = gemm_lowp(false, false, T, d, T, 1.0f, dSm, mdt, T, head_at(a->k, h, a), dt, d, 0.0f,
                       head_out(a->gq, h, a), dt, d);
        if (st != AMP_OK)
            return st;
    }
    if (a->gk) {
        /* dK [T, d] = dSᵀ Q */
        st = gemm_lowp(true, false, T, d, T, 1.0f, dSm, mdt, T, head_at(a->q, h, a), dt, d, 0.0f,
                       head_out(a->gk, h, a), dt, d);
    }
    return st;
}

amp_status cpu_attention_backward(const be_attn_desc *a)
{
    if (a->heads <= 0 || a->T <= 0 || a->D <= 0)
        return AMP_OK;
    if (!a->lse)
        return amp_set_error(AMP_ERR_ARG, "attention_backward: no log-sum-exp to rebuild the probabilities from");
    return for_each_head(a, backward_head, scratch_floats(a, 2));
}
