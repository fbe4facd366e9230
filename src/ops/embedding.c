/*
 * embedding.c - embedding (a row gather) and dropout (a random mask), the
 * two ops that pick elements rather than compute them, on any device: the
 * checks and result shapes here, the element work in the inputs' backend
 * (backend.h's nn section).
 *
 * embedding: weight [V, D] (float), indices (i32/i64, any shape) ->
 * [indices.., D] in weight's dtype. Backward scatter-adds gout's rows into
 * an f32 dweight of weight's shape, rounded once into weight's dtype, so a
 * 16-bit table's repeated indices do not lose their small contributions.
 * Indices out of range: the CPU backend fails with an error naming the
 * index; a GPU cannot check without waiting for it and gives NaN rows.
 *
 * dropout: element j is kept when the uniform drawn from Philox word
 * j % 4 of counter (first + j / 4) is >= p, and then scaled by 1/(1-p).
 * The counters were reserved by amp_dropout, so backward replays the same
 * words and rebuilds the mask instead of keeping it in memory.
 * Params (dropout_params): p (0 also in eval mode), seed, counter (the
 * first).
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

/* ------------------------------------------------------- the public ops */

amp_tensor *amp_embedding(amp_tensor *weight, amp_tensor *indices)
{
    amp_tensor *in[2] = {weight, indices};
    return op_apply(OP_EMBEDDING, in, 2, NULL);
}

/* The seed and the first Philox counter of the mask are reserved here, so
 * backward can make the same mask again. */
amp_tensor *amp_dropout(amp_tensor *a, double p, bool training)
{
    if (!(p >= 0 && p <= 1))
        return amp_fail_null(AMP_ERR_ARG, "dropout: probability %g is not in [0, 1]", p);
    if (!training || p == 0)
        p = 0;
    op_params prm = {.dropout = {.p = p}};
    if (p > 0 && a)
        prm.dropout.counter = amp_rng_reserve(((uint64_t)a->numel + 3) / 4, &prm.dropout.seed);
    return op_apply(OP_DROPOUT, &a, 1, &prm);
}

/* ------------------------------------------------------------ embedding */

static amp_status embedding_run(const node *n, amp_tensor *out)
{
    const amp_tensor *w = n->in[0], *idx = n->in[1];
    BACKEND_CALL(backend_of(tensor_device(w)), op_name(n), embedding, tensor_ptr(w), w->dtype, tensor_ptr(idx),
                 idx->dtype, idx->numel, w->shape.d[0], w->shape.d[1], tensor_ptr(out));
    return AMP_OK;
}

amp_tensor *embedding_forward(node *n, const none_params *p)
{
    (void)p;
    const amp_tensor *w = n->in[0];
    amp_shape s;
    if (!embedding_infer(n, &s))
        return NULL;
    amp_tensor *out = tensor_new_on(s, w->dtype, tensor_device(w));
    if (out && embedding_run(n, out) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

static amp_status embedding_grad_run(const node *n, const amp_tensor *gout, amp_tensor *dw)
{
    const amp_tensor *w = n->in[0], *idx = n->in[1];
    BACKEND_CALL(backend_of(tensor_device(w)), op_name(n), embedding_backward, tensor_ptr(gout), gout->dtype,
                 tensor_ptr(idx), idx->dtype, idx->numel, w->shape.d[0], w->shape.d[1], tensor_f32(dw));
    return AMP_OK;
}

amp_status embedding_backward(node *n, const none_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    const amp_tensor *w = n->in[0];
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    amp_tensor *dw = tensor_zeros_on(w->shape, AMP_F32, tensor_device(w));
    if (!dw)
        return amp_set_error(AMP_ERR_MEMORY, "%s: backward out of memory", op_name(n));
    amp_status st = embedding_grad_run(n, gout, dw);
    if (st != AMP_OK) {
        amp_tensor_free(dw);
        return st;
    }
    if (w->dtype != AMP_F32) {
        amp_tensor *r = tensor_convert(dw, w->dtype);
        amp_tensor_free(dw);
        if (!r)
            return fail_status();
        dw = r;
    }
    gin[0] = dw;
    return AMP_OK;
}

/* -------------------------------------------------------------- dropout */

static amp_status dropout_apply(const node *n, const dropout_params *p, const amp_tensor *src, amp_tensor *dst)
{
    BACKEND_CALL(backend_of(tensor_device(src)), op_name(n), dropout, tensor_ptr(src), tensor_ptr(dst),
                 src->dtype, src->numel, p->p, p->seed, p->counter);
    return AMP_OK;
}

/* The forward and backward kernel: src through the mask of (seed, first
 * counter), into a new tensor on src's device. */
static amp_tensor *dropout_run(const node *n, const dropout_params *p, const amp_tensor *src)
{
    if (p->p <= 0)
        return tensor_convert(src, src->dtype);
    if (p->p >= 1)
        return tensor_zeros_on(src->shape, src->dtype, tensor_device(src));
    amp_tensor *dst = tensor_new_on(src->shape, src->dtype, tensor_device(src));
    if (dst && dropout_apply(n, p, src, dst) != AMP_OK) {
        amp_tensor_free(dst);
        return NULL;
    }
    return dst;
}

amp_tensor *dropout_forward(node *n, const dropout_params *p)
{
    if (!op_require_float(n, 0))
        return NULL;
    return dropout_run(n, p, n->in[0]);
}

amp_status dropout_backward(node *n, const dropout_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = dropout_run(n, p, gout);
    return gin[0] ? AMP_OK : fail_status();
}

/* ----------------------------------------------------------------- cost */

/* embedding: 0 FLOPs forward (a gather); backward 1 per element of the
 * result when the weight needs a gradient (the scatter-add into dW). */
op_cost embedding_cost(const node *n, const none_params *p, bool backward)
{
    (void)p;
    const double f = backward && cost_needs(n, 0) ? (double)shape_numel(n->out_shape) : 0.0;
    return (op_cost){f, cost_bytes(n, backward)};
}

/* dropout: pointwise (cost.c), 1 FLOP per element. */
OP_COST_IS(dropout_cost, dropout, cost_pointwise)
