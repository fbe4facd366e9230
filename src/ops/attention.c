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
 * q, k, v are already kept by the node.
 */
#include "backend/backend.h"
#include "ops/broadcast.h"
#include "ops/infer.h"

#include <stdio.h>

/* i[0] = causal */
amp_tensor *amp_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal)
{
    amp_tensor *in[3] = {q, k, v};
    op_params p = {.i = {causal}};
    return op_apply(OP_ATTENTION, in, 3, &p);
}

/* The primitive's description for n's inputs (outputs filled by the caller). */
static be_attn_desc desc_of(const node *n, const attn_plan *pl)
{
    return (be_attn_desc){.heads = pl->heads, .T = pl->T, .D = pl->d, .causal = pl->causal, .scale = pl->scale,
                          .dt = n->in[0]->dtype, .q = tensor_ptr(n->in[0]), .k = tensor_ptr(n->in[1]),
                          .v = tensor_ptr(n->in[2])};
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

amp_tensor *attention_forward(node *n)
{
    attn_plan pl;
    if (!attention_infer(n, &pl))
        return NULL;
    const amp_tensor *q = n->in[0];
    const amp_device dev = tensor_device(q);
    if (q->numel == 0)
        return tensor_zeros_on(q->shape, q->dtype, dev);
    const amp_backend *be = backend_of(dev);
    if (!be->attention) {
        backend_missing(be, op_name(n), "attention");
        return NULL;
    }
    amp_tensor *out = tensor_new_on(q->shape, q->dtype, dev);
    amp_tensor *lse = NULL;
    if (out && n->needs_grad) {
        amp_shape ls = q->shape;
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
    if (named(n, be->attention(&a)) != AMP_OK) {
        amp_tensor_free(out);
        amp_tensor_free(lse);
        return NULL;
    }
    n->saved[0] = lse;
    return out;
}

amp_status attention_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    attn_plan pl;
    if (!attention_infer(n, &pl))
        return amp_last_status();
    const amp_tensor *q = n->in[0];
    const amp_device dev = tensor_device(q);
    for (int i = 0; i < 3; i++) {
        if (!in_needs_grad(n, i))
            continue;
        /* An empty input (or d = 0) has an empty, all-zero gradient. */
        gin[i] = q->numel ? tensor_new_on(q->shape, q->dtype, dev) : tensor_zeros_on(q->shape, q->dtype, dev);
        if (!gin[i])
            return fail_status();
    }
    if (q->numel == 0)
        return AMP_OK;
    if (!n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without the saved log-sum-exp", op_name(n));
    const amp_backend *be = backend_of(dev);
    if (!be->attention_backward)
        return backend_missing(be, op_name(n), "attention_backward");
    be_attn_desc a = desc_of(n, &pl);
    a.lse = tensor_f32(n->saved[0]);
    a.gout = tensor_ptr(gout);
    a.gq = gin[0] ? tensor_ptr(gin[0]) : NULL;
    a.gk = gin[1] ? tensor_ptr(gin[1]) : NULL;
    a.gv = gin[2] ? tensor_ptr(gin[2]) : NULL;
    return named(n, be->attention_backward(&a));
}
