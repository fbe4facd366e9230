/*
 * norm.c - layer_norm, forward and backward, on any device: the checks,
 * result dtypes and saved statistics here, the row kernels in the inputs'
 * backend (backend.h's nn section).
 *
 * x is seen as M rows of N elements (N = the product of the last k dims).
 * Each row is normalised with its mean and biased variance (as PyTorch),
 * then scaled by weight and shifted by bias, both shaped as the last k
 * dims; statistics are summed in double, 16-bit values computed in f32
 * and rounded once.
 *
 * Saved for backward (only when a gradient is needed): the mean and rstd
 * = 1/sqrt(var + eps) of each row, f32 [M], in n->saved[0] and [1]; x and
 * weight are the node's inputs already.
 *
 * Params (api.c): i[0] = k, i[1] = has weight, i[2] = has bias, f[0] = eps.
 * Inputs: x, then weight if given, then bias if given. weight and bias may
 * have a dtype other than x's (PyTorch's CPU mixed-dtype layer_norm); the
 * output takes x's dtype and each gradient its input's.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

static amp_status layer_norm_run(const node *n, const ln_args *a, amp_tensor *out, amp_tensor *mean,
                                 amp_tensor *rstd)
{
    BACKEND_CALL(backend_of(tensor_device(a->x)), op_name(n), layer_norm, tensor_ptr(a->x), a->x->dtype,
                 a->w ? tensor_ptr(a->w) : NULL, a->w ? a->w->dtype : AMP_F32, a->b ? tensor_ptr(a->b) : NULL,
                 a->b ? a->b->dtype : AMP_F32, a->rows, a->cols, n->p.f[0], tensor_ptr(out), out->dtype,
                 mean ? tensor_f32(mean) : NULL, rstd ? tensor_f32(rstd) : NULL);
    return AMP_OK;
}

amp_tensor *layer_norm_forward(node *n)
{
    ln_args a;
    if (!layer_norm_infer(n, &a))
        return NULL;
    const amp_device dev = tensor_device(a.x);
    amp_tensor *out = tensor_new_on(a.x->shape, a.x->dtype, dev);
    amp_tensor *mean = n->needs_grad ? tensor_new_on(AMP_SHAPE(a.rows), AMP_F32, dev) : NULL;
    amp_tensor *rstd = n->needs_grad ? tensor_new_on(AMP_SHAPE(a.rows), AMP_F32, dev) : NULL;
    if (!out || (n->needs_grad && (!mean || !rstd)) || layer_norm_run(n, &a, out, mean, rstd) != AMP_OK) {
        amp_tensor_free(out);
        amp_tensor_free(mean);
        amp_tensor_free(rstd);
        return NULL;
    }
    n->saved[0] = mean;
    n->saved[1] = rstd;
    return out;
}

static amp_status layer_norm_grad_run(const node *n, const amp_tensor *gout, const amp_tensor *w, int64_t M,
                                      int64_t N, amp_tensor *dx, amp_tensor *dw, amp_tensor *db)
{
    const amp_tensor *x = n->in[0];
    BACKEND_CALL(backend_of(tensor_device(x)), op_name(n), layer_norm_backward, tensor_ptr(gout), gout->dtype,
                 tensor_ptr(x), x->dtype, w ? tensor_ptr(w) : NULL, w ? w->dtype : AMP_F32,
                 tensor_f32(n->saved[0]), tensor_f32(n->saved[1]), M, N, dx ? tensor_ptr(dx) : NULL, x->dtype,
                 dw ? tensor_ptr(dw) : NULL, dw ? dw->dtype : AMP_F32, db ? tensor_ptr(db) : NULL,
                 db ? db->dtype : AMP_F32);
    return AMP_OK;
}

amp_status layer_norm_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const int hw = n->p.i[1] != 0, hb = n->p.i[2] != 0, iw = 1, ib = 1 + hw;
    const amp_tensor *x = n->in[0], *w = hw ? n->in[iw] : NULL;
    const bool need_x = in_needs_grad(n, 0), need_w = hw && in_needs_grad(n, iw),
               need_b = hb && in_needs_grad(n, ib);
    if (!n->saved[0] || !n->saved[1])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved statistics", op_name(n));
    int64_t N = 1;
    for (int d = x->shape.ndim - (int)n->p.i[0]; d < x->shape.ndim; d++)
        N *= x->shape.d[d];
    const int64_t M = n->saved[0]->numel;
    const amp_device dev = tensor_device(x);
    amp_tensor *dx = need_x ? tensor_new_on(x->shape, x->dtype, dev) : NULL;
    amp_tensor *dw = need_w ? tensor_new_on(n->in[iw]->shape, n->in[iw]->dtype, dev) : NULL;
    amp_tensor *db = need_b ? tensor_new_on(n->in[ib]->shape, n->in[ib]->dtype, dev) : NULL;
    amp_status st = (need_x && !dx) || (need_w && !dw) || (need_b && !db)
                        ? amp_set_error(AMP_ERR_MEMORY, "%s: backward out of memory", op_name(n))
                        : layer_norm_grad_run(n, gout, w, M, N, dx, dw, db);
    if (st != AMP_OK) {
        amp_tensor_free(dx);
        amp_tensor_free(dw);
        amp_tensor_free(db);
        return st;
    }
    gin[0] = dx;
    if (hw)
        gin[iw] = dw;
    if (hb)
        gin[ib] = db;
    return AMP_OK;
}
