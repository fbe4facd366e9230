/*
 * attention.c - scaled_dot_product_attention, forward and backward, on any
 * device: out = softmax(q kᵀ / sqrt(d) [+ causal mask]) v for q, k, v
 * [.., T, d] of one shape and dtype, as
 * torch.nn.functional.scaled_dot_product_attention (no dropout, no
 * explicit mask, default scale). The leading dims are the heads; the
 * work is the backend's attention / attention_backward primitives.
 *
 * Precision (every backend): the scores, the mask and the softmax live in
 * f32 whatever the inputs' dtype, so a score like 300 * 300 * 64 / 8 (past
 * f16's 65504) stays finite; the probabilities are in [0, 1] and each
 * output row is a convex combination of rows of v, so the one rounding to
 * q's dtype cannot overflow either. That is why autocast may lower this op
 * to f16 (its category is "lower" on both devices, as in PyTorch).
 *
 * Saved for backward: each row's log-sum-exp (f32, [.., T]), not the
 * probabilities P. P is T x T per head (at T = 1024, 12 heads, batch 8
 * that is 384 MiB per layer); the log-sum-exp is T floats, and backward
 * rebuilds P exactly as P = exp(S - lse) from one more q kᵀ GEMM, which
 * costs about a sixth of the attention's GEMM work. This is what
 * PyTorch's fused CPU/CUDA kernels (flash, memory-efficient) save too.
 * q, k, v are already kept by the node, and so is the output (the CPU's
 * backward takes D_i = rowsum(dO ∘ O) from it; no copy, a reference).
 *
 * Layouts (attn_layout): amp_attention's [.., T, d] (every leading dim a
 * head), and op_attention_bthd's [B, T, H, d] (ATTN_BTHD; heads B * H), which is how
 * a linear's [B, T, H * d] result splits into heads without a permute
 * copy. The CPU backend reads and writes that layout in place; on any
 * other backend this op permutes to [B, H, T, d] and back around the
 * backend's call. op_attention_cached (ATTN_CACHED: q [B, T, H, d], k and
 * v a KV cache [Tk, B, H, d]) is the generating model's forward-only
 * form: every backend reads the cache in place, causal with the queries
 * as the last T of the Tk positions. op_attention_qkv (ATTN_QKV: one
 * input qkv [B, T, 3, H, d], a fused projection's result reshaped; out [B,
 * T, H, d]) reads q, k, v as its thirds in place on the CPU (row stride 3
 * H d) and writes their gradients into one d(qkv), so a split into three
 * (narrow copies forward, a zero-fill and copies backward) disappears;
 * elsewhere it permutes qkv to [3, B, H, T, d] and back in one copy each.
 * Its values are op_attention_bthd's on the three thirds, bit for bit.
 */
#include "backend/backend.h"
#include "ops/broadcast.h"
#include "ops/infer.h"

#include "ops/fused.h"

#include <stdio.h>

static amp_tensor *attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal, attn_layout layout)
{
    amp_tensor *in[3] = {q, k, v};
    const op_params p = {.attention = {.causal = causal, .layout = layout}};
    return op_apply(OP_ATTENTION, in, 3, &p);
}

amp_tensor *amp_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal)
{
    return attention(q, k, v, causal, ATTN_HEADS_FIRST);
}

amp_tensor *op_attention_bthd(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal)
{
    return attention(q, k, v, causal, ATTN_BTHD);
}

amp_tensor *op_attention_cached(amp_tensor *q, amp_tensor *k, amp_tensor *v)
{
    return attention(q, k, v, true, ATTN_CACHED);
}

amp_tensor *op_attention_qkv(amp_tensor *qkv, bool causal)
{
    const op_params p = {.attention = {.causal = causal, .layout = ATTN_QKV}};
    return op_apply(OP_ATTENTION, &qkv, 1, &p);
}

/* Third i (q, k, v) of a [B, T, 3, H, d] tensor at base: H d elements in. */
static void *third(const void *base, const attn_plan *pl, amp_dtype dt, int i)
{
    return (char *)base + (size_t)(i * pl->hgroup * pl->d) * amp_dtype_size(dt);
}

/* The primitive's description for n's inputs (outputs filled by the caller). */
static be_attn_desc desc_of(const node *n, const attn_plan *pl)
{
    const amp_dtype dt = n->in[0]->dtype;
    const bool fused = pl->out_ld > 0;
    return (be_attn_desc){.heads = pl->heads, .T = pl->T, .D = pl->d, .hgroup = pl->hgroup, .ld = pl->ld,
                          .out_ld = pl->out_ld, .Tk = pl->Tk, .kv_ld = pl->kv_ld,
                          .causal = pl->causal, .scale = pl->scale, .dt = dt,
                          .q = tensor_ptr(n->in[0]),
                          .k = fused ? third(tensor_ptr(n->in[0]), pl, dt, 1) : tensor_ptr(n->in[1]),
                          .v = fused ? third(tensor_ptr(n->in[0]), pl, dt, 2) : tensor_ptr(n->in[2])};
}

/* The result's shape: q's, or [B, T, H, d] for a fused qkv. */
static amp_shape out_shape(const node *n, const attn_plan *pl)
{
    const amp_shape s = n->in[0]->shape;
    return pl->out_ld > 0 ? AMP_SHAPE(s.d[0], s.d[1], s.d[3], s.d[4]) : s;
}

/* Whether dev's backend reads the [B, T, H, d] layout in place (the CPU's);
 * the others get contiguous heads. */
static bool takes_bthd(amp_device dev) { return dev == AMP_CPU; }

/* Contiguous heads for a backend that needs them: the copies of a [B, T,
 * H, d] layout, made and unmade around its call. */
typedef struct {
    amp_tensor *t[8];
    int n;
} head_copies;

static void copies_free(head_copies *c)
{
    for (int i = 0; i < c->n; i++)
        amp_tensor_free(c->t[i]);
    c->n = 0;
}

/* A new tensor of `parts` [B, H, T, d] blocks (the plan's sizes, the
 * input's dtype and device), holding x's [B, T, H, d] values when x is not
 * NULL (parts 1), or qkv's [B, T, 3, H, d] ones as q, k, v (parts 3); NULL
 * on failure (error set). */
static void *heads_copy_of(head_copies *c, const node *n, const attn_plan *pl, const amp_tensor *x, int parts)
{
    const amp_tensor *in = n->in[0];
    const amp_device dev = tensor_device(in);
    const int64_t H = pl->hgroup, B = pl->heads / H, T = pl->T, D = pl->d;
    amp_tensor *t = tensor_new_on(AMP_SHAPE(parts, B, H, T, D), in->dtype, dev);
    if (!t)
        return NULL;
    c->t[c->n++] = t;
    if (x) {
        const int64_t ld = parts * H * D;
        const int64_t od[5] = {parts, B, H, T, D}, ist[5] = {H * D, T * ld, D, ld, 1};
        if (backend_of(dev)->permute(tensor_ptr(x), tensor_ptr(t), amp_dtype_size(in->dtype), 5, od, ist) != AMP_OK)
            return NULL;
    }
    return tensor_ptr(t);
}

static void *heads_copy(head_copies *c, const node *n, const attn_plan *pl, const amp_tensor *x)
{
    return heads_copy_of(c, n, pl, x, 1);
}

/* Bytes of one [B, H, T, d] block. */
static size_t heads_bytes(const attn_plan *pl, amp_dtype dt)
{
    return (size_t)(pl->heads * pl->T * pl->d) * amp_dtype_size(dt);
}

/* q, k, v of a fused qkv as contiguous heads, from one copy; false on
 * failure (error set). */
static bool qkv_copy(head_copies *c, const node *n, const attn_plan *pl, be_attn_desc *a)
{
    char *t = heads_copy_of(c, n, pl, n->in[0], 3);
    if (!t)
        return false;
    const size_t part = heads_bytes(pl, n->in[0]->dtype);
    a->q = t;
    a->k = t + part;
    a->v = t + 2 * part;
    return true;
}

/* dst [B, T, parts, H, d] = src [parts, B, H, T, d] (parts 1: an output
 * or a gradient; 3: the gradients of q, k, v into d(qkv)). */
static amp_status heads_uncopy(const node *n, const attn_plan *pl, const void *src, void *dst, int parts)
{
    const amp_tensor *in = n->in[0];
    const int64_t H = pl->hgroup, B = pl->heads / H, T = pl->T, D = pl->d;
    const int64_t od[5] = {B, T, parts, H, D}, ist[5] = {H * T * D, D, B * H * T * D, T * D, 1};
    return backend_of(tensor_device(in))->permute(src, dst, amp_dtype_size(in->dtype), 5, od, ist);
}

/* The backend's verdict on a call; a failure's message names the op first. */
static amp_status named(const node *n, amp_status st)
{
    if (st == AMP_OK)
        return st;
    char why[256];
    snprintf(why, sizeof why, "%s", amp_last_error());
    return amp_set_error(fail_status(), "%s: %s", op_name(n), why);
}

amp_tensor *attention_forward(node *n, const attention_params *p)
{
    attn_plan pl;
    if (!attention_infer(n, p, &pl))
        return NULL;
    const amp_tensor *q = n->in[0];
    const amp_device dev = tensor_device(q);
    const amp_shape os = out_shape(n, &pl);
    if (q->numel == 0)
        return tensor_zeros_on(os, q->dtype, dev);
    const amp_backend *be = backend_of(dev);
    if (!be->attention) {
        backend_missing(be, op_name(n), "attention");
        return NULL;
    }
    amp_tensor *out = tensor_new_on(os, q->dtype, dev);
    amp_tensor *lse = NULL;
    if (out && n->needs_grad) {
        amp_shape ls = os;
        ls.ndim--; /* [.., T] */
        lse = tensor_new_on(ls, AMP_F32, dev);
    }
    if (!out || (n->needs_grad && !lse)) {
        amp_tensor_free(out);
        return NULL;
    }
    be_attn_desc a = desc_of(n, &pl);
    a.out = tensor_ptr(out);
    a.lse = lse ? tensor_f32(lse) : NULL;
    head_copies hc = {.n = 0};
    amp_status st = AMP_OK;
    if (pl.hgroup && !takes_bthd(dev)) {
        a.hgroup = a.ld = a.out_ld = 0;
        /* A KV cache's keys and values stay where they are: every
         * backend reads its [Tk, B * H, d] layout (be_attn_desc). */
        if (pl.out_ld ? !qkv_copy(&hc, n, &pl, &a)
                      : !(a.q = heads_copy(&hc, n, &pl, n->in[0])) ||
                            (!pl.Tk && (!(a.k = heads_copy(&hc, n, &pl, n->in[1])) ||
                                        !(a.v = heads_copy(&hc, n, &pl, n->in[2])))))
            st = fail_status();
        if (st == AMP_OK && !(a.out = heads_copy(&hc, n, &pl, NULL)))
            st = fail_status();
    }
    if (st == AMP_OK)
        st = named(n, be->attention(&a));
    if (st == AMP_OK && hc.n)
        st = heads_uncopy(n, &pl, a.out, tensor_ptr(out), 1);
    copies_free(&hc);
    if (st != AMP_OK) {
        amp_tensor_free(out);
        amp_tensor_free(lse);
        return NULL;
    }
    n->saved[0] = lse;
    if (lse && op_save(n, 1, out) != AMP_OK) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    return out;
}

amp_status attention_backward(node *n, const attention_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    attn_plan pl;
    if (!attention_infer(n, p, &pl))
        return amp_last_status();
    const amp_tensor *q = n->in[0];
    const amp_device dev = tensor_device(q);
    for (int i = 0; i < n->n_in; i++) {
        if (!in_needs_grad(n, i))
            continue;
        /* An empty input (or d = 0) has an empty, all-zero gradient. */
        gin[i] = q->numel ? tensor_new_on(q->shape, q->dtype, dev) : tensor_zeros_on(q->shape, q->dtype, dev);
        if (!gin[i])
            return fail_status();
    }
    if (q->numel == 0)
        return AMP_OK;
    if (pl.Tk)
        return amp_set_error(AMP_ERR_STATE, "%s: cached attention (a KV cache, for inference) has no backward: "
                             "run it with grad disabled", op_name(n));
    if (!n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without the saved log-sum-exp", op_name(n));
    const amp_backend *be = backend_of(dev);
    if (!be->attention_backward)
        return backend_missing(be, op_name(n), "attention_backward");
    be_attn_desc a = desc_of(n, &pl);
    a.lse = tensor_f32(n->saved[0]);
    a.out = n->saved[1] ? tensor_ptr(n->saved[1]) : NULL;
    a.gout = tensor_ptr(gout);
    const bool fused = pl.out_ld > 0;
    if (fused && !gin[0])
        return AMP_OK;
    /* The fused qkv's gradient: dq, dk, dv as the thirds of d(qkv). */
    a.gq = gin[0] ? tensor_ptr(gin[0]) : NULL;
    a.gk = fused ? third(a.gq, &pl, q->dtype, 1) : gin[1] ? tensor_ptr(gin[1]) : NULL;
    a.gv = fused ? third(a.gq, &pl, q->dtype, 2) : gin[2] ? tensor_ptr(gin[2]) : NULL;
    if (!pl.hgroup || takes_bthd(dev))
        return named(n, be->attention_backward(&a));
    /* Contiguous heads in and out around the backend's call. */
    head_copies hc = {.n = 0};
    amp_status st = AMP_OK;
    void *g[3] = {NULL, NULL, NULL};
    a.hgroup = a.ld = a.out_ld = 0;
    if ((fused ? !qkv_copy(&hc, n, &pl, &a)
               : !(a.q = heads_copy(&hc, n, &pl, n->in[0])) || !(a.k = heads_copy(&hc, n, &pl, n->in[1])) ||
                     !(a.v = heads_copy(&hc, n, &pl, n->in[2]))) ||
        !(a.gout = heads_copy(&hc, n, &pl, gout)) || (a.out && !(a.out = heads_copy(&hc, n, &pl, n->saved[1]))))
        st = fail_status();
    if (fused && st == AMP_OK) { /* one [3, B, H, T, d] block, permuted back into d(qkv) at once */
        if (!(g[0] = heads_copy_of(&hc, n, &pl, NULL, 3)))
            st = fail_status();
        else
            for (int i = 1; i < 3; i++)
                g[i] = (char *)g[0] + (size_t)i * heads_bytes(&pl, q->dtype);
    }
    for (int i = 0; i < 3 && st == AMP_OK && !fused; i++)
        if (gin[i] && !(g[i] = heads_copy(&hc, n, &pl, NULL)))
            st = fail_status();
    a.gq = g[0];
    a.gk = g[1];
    a.gv = g[2];
    if (st == AMP_OK)
        st = named(n, be->attention_backward(&a));
    if (fused && st == AMP_OK)
        st = heads_uncopy(n, &pl, g[0], tensor_ptr(gin[0]), 3);
    for (int i = 0; i < 3 && st == AMP_OK && !fused; i++)
        if (g[i])
            st = heads_uncopy(n, &pl, g[i], tensor_ptr(gin[i]), 1);
    copies_free(&hc);
    return st;
}

/* ----------------------------------------------------------------- cost */

/* Heads H (the product of the leading dims), query rows T, key rows Tk (T,
 * or a KV cache's), width d: forward 4*H*T*Tk*d (S = q k^T and O = P v;
 * the full T x Tk, causal or not, and the softmax in between not counted,
 * as torch.utils.flop_counter's sdpa_flop_count); backward 10*H*T*Tk*d
 * (the backward rebuilds S = q k^T from the saved log-sum-exp, then
 * dV = P^T dO, dP = dO v^T, dq = dS k, dk = dS^T q: flop_counter's
 * sdpa_backward_flop_count, five products). */
op_cost attention_cost(const node *n, const attention_params *p, bool backward)
{
    const amp_tensor *q = n->in[0];
    const int nd = q->shape.ndim;
    const bool bthd = ((p->layout == ATTN_BTHD || p->layout == ATTN_CACHED) && nd == 4) ||
                      (p->layout == ATTN_QKV && nd == 5);
    const double T = nd >= 2 ? (double)q->shape.d[bthd ? 1 : nd - 2] : 0.0;
    const double d = nd >= 1 ? (double)q->shape.d[nd - 1] : 0.0;
    const double Tk = p->layout == ATTN_CACHED && n->in[1]->shape.ndim == 4 ? (double)n->in[1]->shape.d[0] : T;
    const double parts = p->layout == ATTN_QKV ? 3.0 : 1.0; /* a fused qkv holds q, k and v */
    const double heads = T * d > 0 ? (double)q->numel / (parts * T * d) : 0.0;
    return (op_cost){(backward ? 10.0 : 4.0) * heads * T * Tk * d, cost_bytes(n, backward)};
}
