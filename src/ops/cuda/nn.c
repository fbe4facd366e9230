/*
 * nn.c (CUDA) - softmax, log_softmax, cross_entropy, layer_norm, embedding
 * and dropout on CUDA tensors, forward and backward, with the checks,
 * messages, result dtypes and saved tensors of src/ops/softmax.c, norm.c
 * and embedding.c. Saved on the device: softmax's output; cross_entropy's
 * per-row max and log-sum-exp ([N, 2] f32) and its count of counted rows
 * ([1] f32, so backward divides by it without a host read); layer_norm's
 * per-row mean and rstd ([M] f32).
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"


/* ------------------------------------------------------------- softmax */

static amp_tensor *softmax_like_forward(node *n, bool log)
{
    dim_view v;
    if (!op_require_float(n, 0) || !dim_view_infer(n, &v))
        return NULL;
    const amp_tensor *x = n->in[0];
    amp_tensor *out = cu_new(x->shape, x->dtype);
    if (!out)
        return NULL;
    if (cuda_softmax(tensor_ptr(x), x->dtype, tensor_ptr(out), out->dtype, v.outer, v.len, v.inner, log) != AMP_OK ||
        (n->needs_grad && op_save(n, 0, out) != AMP_OK)) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

static amp_status softmax_like_backward(node *n, const amp_tensor *gout, amp_tensor **gin, bool log)
{
    dim_view v;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!dim_view_infer(n, &v))
        return fail_status();
    const amp_tensor *x = n->in[0], *y = n->saved[0];
    gin[0] = cu_new(x->shape, x->dtype);
    if (!gin[0])
        return fail_status();
    return cuda_softmax_backward(tensor_ptr(gout), gout->dtype, tensor_ptr(y), y->dtype, tensor_ptr(gin[0]),
                                 x->dtype, v.outer, v.len, v.inner, log);
}

amp_tensor *cu_softmax_forward(node *n) { return softmax_like_forward(n, false); }
amp_tensor *cu_log_softmax_forward(node *n) { return softmax_like_forward(n, true); }

amp_status cu_softmax_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return softmax_like_backward(n, gout, gin, false);
}

amp_status cu_log_softmax_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return softmax_like_backward(n, gout, gin, true);
}

/* ------------------------------------------------------- cross_entropy */

amp_tensor *cu_cross_entropy_forward(node *n)
{
    if (!cross_entropy_infer(n))
        return NULL;
    const amp_tensor *x = n->in[0], *t = n->in[1];
    const int64_t N = x->shape.d[0], C = x->shape.d[1];
    amp_tensor *out = cu_new((amp_shape){0, {0}}, x->dtype);
    amp_tensor *count = cu_new(AMP_SHAPE(1), AMP_F32);
    amp_tensor *stats = n->needs_grad ? cu_new((amp_shape){2, {N, 2}}, AMP_F32) : NULL;
    if (!out || !count || (n->needs_grad && !stats) ||
        cuda_cross_entropy(tensor_ptr(x), x->dtype, tensor_ptr(t), t->dtype, N, C, n->p.i[0],
                           stats ? tensor_f32(stats) : NULL, tensor_f32(count), tensor_ptr(out),
                           out->dtype) != AMP_OK) {
        amp_tensor_free(out);
        amp_tensor_free(count);
        amp_tensor_free(stats);
        return NULL;
    }
    if (n->needs_grad) {
        n->saved[0] = stats;
        n->saved[1] = count;
    } else {
        amp_tensor_free(count);
    }
    return out;
}

amp_status cu_cross_entropy_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!n->saved[0] || !n->saved[1])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved statistics", op_name(n));
    const amp_tensor *x = n->in[0], *t = n->in[1];
    const int64_t N = x->shape.d[0], C = x->shape.d[1];
    gin[0] = cu_new(x->shape, x->dtype);
    if (!gin[0])
        return fail_status();
    return cuda_cross_entropy_backward(tensor_ptr(x), x->dtype, tensor_ptr(t), t->dtype, N, C, n->p.i[0],
                                       tensor_f32(n->saved[0]), tensor_f32(n->saved[1]), tensor_ptr(gout),
                                       gout->dtype, tensor_ptr(gin[0]), x->dtype);
}

/* ---------------------------------------------------------- layer_norm */

amp_tensor *cu_layer_norm_forward(node *n)
{
    ln_args a;
    if (!layer_norm_infer(n, &a))
        return NULL;
    amp_tensor *out = cu_new(a.x->shape, a.x->dtype);
    amp_tensor *mean = n->needs_grad ? cu_new(AMP_SHAPE(a.rows), AMP_F32) : NULL;
    amp_tensor *rstd = n->needs_grad ? cu_new(AMP_SHAPE(a.rows), AMP_F32) : NULL;
    if (!out || (n->needs_grad && (!mean || !rstd)) ||
        cuda_layer_norm(tensor_ptr(a.x), a.x->dtype, a.w ? tensor_ptr(a.w) : NULL, a.w ? a.w->dtype : AMP_F32,
                        a.b ? tensor_ptr(a.b) : NULL, a.b ? a.b->dtype : AMP_F32, a.rows, a.cols, n->p.f[0],
                        tensor_ptr(out), out->dtype, mean ? tensor_f32(mean) : NULL,
                        rstd ? tensor_f32(rstd) : NULL) != AMP_OK) {
        amp_tensor_free(out);
        amp_tensor_free(mean);
        amp_tensor_free(rstd);
        return NULL;
    }
    n->saved[0] = mean;
    n->saved[1] = rstd;
    return out;
}

amp_status cu_layer_norm_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const int hw = n->p.i[1] != 0, hb = n->p.i[2] != 0, iw = 1, ib = 1 + hw;
    const amp_tensor *x = n->in[0], *w = hw ? n->in[iw] : NULL;
    const bool need_x = in_needs_grad(n, 0), need_w = hw && in_needs_grad(n, iw), need_b = hb && in_needs_grad(n, ib);
    if (!n->saved[0] || !n->saved[1])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved statistics", op_name(n));
    int64_t N = 1;
    for (int d = x->shape.ndim - (int)n->p.i[0]; d < x->shape.ndim; d++)
        N *= x->shape.d[d];
    const int64_t M = n->saved[0]->numel;
    amp_tensor *dx = need_x ? cu_new(x->shape, x->dtype) : NULL;
    amp_tensor *dw = need_w ? cu_new(n->in[iw]->shape, n->in[iw]->dtype) : NULL;
    amp_tensor *db = need_b ? cu_new(n->in[ib]->shape, n->in[ib]->dtype) : NULL;
    if ((need_x && !dx) || (need_w && !dw) || (need_b && !db)) {
        amp_tensor_free(dx);
        amp_tensor_free(dw);
        amp_tensor_free(db);
        return fail_status();
    }
    gin[0] = dx;
    if (hw)
        gin[iw] = dw;
    if (hb)
        gin[ib] = db;
    return cuda_layer_norm_backward(tensor_ptr(gout), gout->dtype, tensor_ptr(x), x->dtype, w ? tensor_ptr(w) : NULL,
                                    w ? w->dtype : AMP_F32, tensor_f32(n->saved[0]), tensor_f32(n->saved[1]), M, N,
                                    dx ? tensor_ptr(dx) : NULL, x->dtype, dw ? tensor_ptr(dw) : NULL,
                                    dw ? dw->dtype : AMP_F32, db ? tensor_ptr(db) : NULL, db ? db->dtype : AMP_F32);
}

/* ----------------------------------------------------------- embedding */

amp_tensor *cu_embedding_forward(node *n)
{
    const amp_tensor *w = n->in[0], *idx = n->in[1];
    amp_shape s;
    if (!embedding_infer(n, &s))
        return NULL;
    const int64_t V = w->shape.d[0], D = w->shape.d[1];
    amp_tensor *out = cu_new(s, w->dtype);
    if (out && cuda_embedding(tensor_ptr(w), w->dtype, tensor_ptr(idx), idx->dtype, idx->numel, V, D,
                              tensor_ptr(out)) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

amp_status cu_embedding_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *w = n->in[0], *idx = n->in[1];
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    amp_tensor *dw = cu_zeros(w->shape, AMP_F32);
    if (!dw || cuda_embedding_backward(tensor_ptr(gout), gout->dtype, tensor_ptr(idx), idx->dtype, idx->numel,
                                       w->shape.d[0], w->shape.d[1], tensor_f32(dw)) != AMP_OK) {
        amp_tensor_free(dw);
        return fail_status();
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

/* ------------------------------------------------------------- dropout */

/* src through the mask of (seed, first counter) in n->p: the same
 * elements as the CPU's dropout drops. */
static amp_tensor *dropout_run(const node *n, const amp_tensor *src)
{
    const double p = n->p.f[0];
    if (p <= 0)
        return tensor_convert(src, src->dtype);
    if (p >= 1)
        return cu_zeros(src->shape, src->dtype);
    amp_tensor *dst = cu_new(src->shape, src->dtype);
    if (dst && cuda_dropout(tensor_ptr(src), tensor_ptr(dst), src->dtype, src->numel, p, (uint64_t)n->p.i[0],
                            (uint64_t)n->p.i[1]) != AMP_OK) {
        amp_tensor_free(dst);
        return NULL;
    }
    return dst;
}

amp_tensor *cu_dropout_forward(node *n)
{
    if (!op_require_float(n, 0))
        return NULL;
    return dropout_run(n, n->in[0]);
}

amp_status cu_dropout_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = dropout_run(n, gout);
    return gin[0] ? AMP_OK : fail_status();
}

#else
typedef int ampc_ops_cuda_nn_unused; /* ISO C wants a declaration in every file */
#endif
