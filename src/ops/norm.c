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
 * Params (layer_norm_params): k = normalized_ndim, has_weight, has_bias,
 * eps. Inputs: x, then weight if given, then bias if given. weight and bias may
 * have a dtype other than x's (PyTorch's CPU mixed-dtype layer_norm); the
 * output takes x's dtype and each gradient its input's.
 *
 * The residual add fused with layer_norm (op_add_layer_norm, fused.h):
 * s = x + res and y = layer_norm(s) are still two ops and two nodes (an
 * add and a layer_norm, recorded, profiled and differentiated as always),
 * but where the backend has add_layer_norm the add's forward computes
 * both in one pass over the rows and hands y and the statistics to the
 * layer_norm that follows, which then has nothing left to do. Backward:
 * when x's producer holds a gradient already (the residual stream's later
 * consumers ran first), layer_norm's backward adds dx into it in the same
 * pass (the backend's layer_norm_backward_add) instead of returning a dx
 * that autograd would add in another pass. Both give the unfused ops'
 * bits.
 */
#include "ops/broadcast.h"
#include "ops/fused.h"
#include "ops/infer.h"
#include "ops/scope.h"

/* ------------------------------------------------------- the public ops */

/* Inputs: x, then weight if given, then bias if given. */
amp_tensor *amp_layer_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, amp_tensor *bias,
                           double eps)
{
    if (!(eps >= 0))
        return amp_fail_null(AMP_ERR_ARG, "layer_norm: eps %g is negative", eps);
    amp_tensor *in[3] = {x};
    int n = 1;
    if (weight)
        in[n++] = weight;
    if (bias)
        in[n++] = bias;
    const op_params p = {.layer_norm = {.normalized_ndim = normalized_ndim,
                                        .has_weight = weight != NULL,
                                        .has_bias = bias != NULL,
                                        .eps = eps}};
    return op_apply(OP_LAYER_NORM, in, n, &p);
}

/* Between op_add_layer_norm's two ops, on this thread: what the add's
 * forward should fuse (asked, the layer_norm's weight, bias and eps) and
 * what it computed for the layer_norm (sum: the add's result; y, mean,
 * rstd: layer_norm(sum) and its row statistics). */
static _Thread_local struct {
    bool asked;
    const amp_tensor *w, *b;
    double eps;
    const amp_tensor *sum;
    amp_tensor *y, *mean, *rstd;
} fused;

static void fused_drop(void)
{
    amp_tensor_free(fused.y);
    amp_tensor_free(fused.mean);
    amp_tensor_free(fused.rstd);
    fused.sum = NULL;
    fused.y = fused.mean = fused.rstd = NULL;
}

/* Whether t is NULL or a float vector [N] on dev. */
static bool fusable_param(const amp_tensor *t, int64_t N, amp_device dev)
{
    return !t || (t->shape.ndim == 1 && t->shape.d[0] == N && amp_dtype_is_float(t->dtype) &&
                  tensor_device(t) == dev);
}

bool add_layer_norm_try(node *n, amp_tensor **out)
{
    const amp_tensor *x = n->in[0], *r = n->in[1];
    const amp_device dev = tensor_device(x);
    const amp_backend *be = backend_of(dev);
    const int64_t N = x->shape.ndim ? x->shape.d[x->shape.ndim - 1] : 0;
    if (!fused.asked || fused.sum || !be->add_layer_norm || n->n_in != 2 || !shape_equal(x->shape, r->shape) ||
        N < 1 || !amp_dtype_is_float(x->dtype) || !amp_dtype_is_float(r->dtype) ||
        !fusable_param(fused.w, N, dev) || !fusable_param(fused.b, N, dev))
        return false; /* the plain add; layer_norm runs on its own */
    amp_shape s;
    amp_dtype dt;
    if (!binary_infer(n, &s, &dt))
        return false;
    const int64_t M = x->numel / N;
    amp_tensor *sum = tensor_new_on(s, dt, dev), *y = tensor_new_on(s, dt, dev);
    amp_tensor *mean = tensor_new_on(AMP_SHAPE(M), AMP_F32, dev), *rstd = tensor_new_on(AMP_SHAPE(M), AMP_F32, dev);
    const amp_tensor *w = fused.w, *b = fused.b;
    amp_status st = !sum || !y || !mean || !rstd
                        ? amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", op_name(n))
                        : be->add_layer_norm(tensor_ptr(x), x->dtype, tensor_ptr(r), r->dtype,
                                             w ? tensor_ptr(w) : NULL, w ? w->dtype : AMP_F32,
                                             b ? tensor_ptr(b) : NULL, b ? b->dtype : AMP_F32, M, N, fused.eps,
                                             tensor_ptr(sum), dt, tensor_ptr(y), dt, tensor_f32(mean),
                                             tensor_f32(rstd));
    if (st != AMP_OK) {
        amp_tensor_free(sum);
        amp_tensor_free(y);
        amp_tensor_free(mean);
        amp_tensor_free(rstd);
        *out = NULL;
        return true;
    }
    fused.sum = sum;
    fused.y = y;
    fused.mean = mean;
    fused.rstd = rstd;
    *out = sum;
    return true;
}

amp_tensor *op_add_layer_norm(amp_tensor *x, amp_tensor *res, amp_tensor *weight, amp_tensor *bias, double eps,
                              amp_tensor **y)
{
    return op_add_layer_norm_in(x, res, weight, bias, eps, y, NULL);
}

amp_tensor *op_add_layer_norm_in(amp_tensor *x, amp_tensor *res, amp_tensor *weight, amp_tensor *bias,
                                 double eps, amp_tensor **y, const char *ln_scope)
{
    if (!y)
        return amp_fail_null(AMP_ERR_ARG, "add_layer_norm: no place for the normalised result (y is NULL)");
    *y = NULL;
    if (!(eps >= 0))
        return amp_fail_null(AMP_ERR_ARG, "add_layer_norm: eps %g is negative", eps);
    fused_drop();
    fused.asked = true;
    fused.w = weight;
    fused.b = bias;
    fused.eps = eps;
    amp_tensor *in[2] = {x, res};
    const op_params p = {.add = {.fused_layer_norm = true}};
    amp_tensor *s = op_apply(OP_ADD, in, 2, &p);
    fused.asked = false;
    if (s) {
        op_scope sc;
        op_scope_enter(&sc, ln_scope ? ln_scope : op_scope_current());
        *y = amp_layer_norm(s, 1, weight, bias, eps);
        op_scope_leave(&sc);
    }
    fused_drop(); /* what the layer_norm did not take (an error, a cast) */
    return s && *y ? s : NULL;
}

static amp_status layer_norm_run(const node *n, const layer_norm_params *p, const ln_args *a, amp_tensor *out,
                                 amp_tensor *mean, amp_tensor *rstd)
{
    BACKEND_CALL(backend_of(tensor_device(a->x)), op_name(n), layer_norm, tensor_ptr(a->x), a->x->dtype,
                 a->w ? tensor_ptr(a->w) : NULL, a->w ? a->w->dtype : AMP_F32, a->b ? tensor_ptr(a->b) : NULL,
                 a->b ? a->b->dtype : AMP_F32, a->rows, a->cols, p->eps, tensor_ptr(out), out->dtype,
                 mean ? tensor_f32(mean) : NULL, rstd ? tensor_f32(rstd) : NULL);
    return AMP_OK;
}

amp_tensor *layer_norm_forward(node *n, const layer_norm_params *p)
{
    ln_args a;
    if (!layer_norm_infer(n, p, &a))
        return NULL;
    const amp_device dev = tensor_device(a.x);
    if (fused.sum && fused.sum == a.x && p->normalized_ndim == 1 && fused.w == a.w && fused.b == a.b &&
        p->eps == fused.eps && fused.y->dtype == a.x->dtype) {
        /* op_add_layer_norm's add computed this already. */
        amp_tensor *out = fused.y;
        n->saved[0] = n->needs_grad ? fused.mean : NULL;
        n->saved[1] = n->needs_grad ? fused.rstd : NULL;
        if (!n->needs_grad) {
            amp_tensor_free(fused.mean);
            amp_tensor_free(fused.rstd);
        }
        fused.sum = NULL;
        fused.y = fused.mean = fused.rstd = NULL;
        return out;
    }
    amp_tensor *out = tensor_new_on(a.x->shape, a.x->dtype, dev);
    amp_tensor *mean = n->needs_grad ? tensor_new_on(AMP_SHAPE(a.rows), AMP_F32, dev) : NULL;
    amp_tensor *rstd = n->needs_grad ? tensor_new_on(AMP_SHAPE(a.rows), AMP_F32, dev) : NULL;
    if (!out || (n->needs_grad && (!mean || !rstd)) || layer_norm_run(n, p, &a, out, mean, rstd) != AMP_OK) {
        amp_tensor_free(out);
        amp_tensor_free(mean);
        amp_tensor_free(rstd);
        return NULL;
    }
    n->saved[0] = mean;
    n->saved[1] = rstd;
    return out;
}

/* x's producer's gradient when layer_norm's backward can add dx into it
 * (the backend can, and the other consumers of x have given theirs), else
 * NULL. Adding there is what autograd's accumulate would do next. */
static amp_tensor *grad_to_add_into(const node *n)
{
    const amp_tensor *x = n->in[0];
    node *px = x->grad_fn;
    amp_tensor *g = px ? px->grad : NULL;
    return g && x->requires_grad && backend_of(tensor_device(x))->layer_norm_backward_add &&
                   g->dtype == x->dtype && g->numel == x->numel && tensor_device(g) == tensor_device(x)
               ? g
               : NULL;
}

static amp_status layer_norm_grad_run(const node *n, const amp_tensor *gout, const amp_tensor *w, int64_t M,
                                      int64_t N, amp_tensor *dx, amp_tensor *dw, amp_tensor *db, amp_tensor *acc)
{
    const amp_tensor *x = n->in[0];
    if (acc) {
        BACKEND_CALL(backend_of(tensor_device(x)), op_name(n), layer_norm_backward_add, tensor_ptr(gout),
                     gout->dtype, tensor_ptr(x), x->dtype, w ? tensor_ptr(w) : NULL, w ? w->dtype : AMP_F32,
                     tensor_f32(n->saved[0]), tensor_f32(n->saved[1]), M, N, tensor_ptr(acc), acc->dtype,
                     dw ? tensor_ptr(dw) : NULL, dw ? dw->dtype : AMP_F32, db ? tensor_ptr(db) : NULL,
                     db ? db->dtype : AMP_F32);
        return AMP_OK;
    }
    BACKEND_CALL(backend_of(tensor_device(x)), op_name(n), layer_norm_backward, tensor_ptr(gout), gout->dtype,
                 tensor_ptr(x), x->dtype, w ? tensor_ptr(w) : NULL, w ? w->dtype : AMP_F32,
                 tensor_f32(n->saved[0]), tensor_f32(n->saved[1]), M, N, dx ? tensor_ptr(dx) : NULL, x->dtype,
                 dw ? tensor_ptr(dw) : NULL, dw ? dw->dtype : AMP_F32, db ? tensor_ptr(db) : NULL,
                 db ? db->dtype : AMP_F32);
    return AMP_OK;
}

amp_status layer_norm_backward(node *n, const layer_norm_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    const int hw = p->has_weight, hb = p->has_bias, iw = 1, ib = 1 + hw;
    const amp_tensor *x = n->in[0], *w = hw ? n->in[iw] : NULL;
    const bool need_x = in_needs_grad(n, 0), need_w = hw && in_needs_grad(n, iw),
               need_b = hb && in_needs_grad(n, ib);
    if (!n->saved[0] || !n->saved[1])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved statistics", op_name(n));
    int64_t N = 1;
    for (int d = x->shape.ndim - (int)p->normalized_ndim; d < x->shape.ndim; d++)
        N *= x->shape.d[d];
    const int64_t M = n->saved[0]->numel;
    const amp_device dev = tensor_device(x);
    amp_tensor *acc = need_x ? grad_to_add_into(n) : NULL;
    amp_tensor *dx = need_x && !acc ? tensor_new_on(x->shape, x->dtype, dev) : NULL;
    amp_tensor *dw = need_w ? tensor_new_on(n->in[iw]->shape, n->in[iw]->dtype, dev) : NULL;
    amp_tensor *db = need_b ? tensor_new_on(n->in[ib]->shape, n->in[ib]->dtype, dev) : NULL;
    amp_status st = (need_x && !dx && !acc) || (need_w && !dw) || (need_b && !db)
                        ? amp_set_error(AMP_ERR_MEMORY, "%s: backward out of memory", op_name(n))
                        : layer_norm_grad_run(n, gout, w, M, N, dx, dw, db, acc);
    if (st != AMP_OK) {
        amp_tensor_free(dx);
        amp_tensor_free(dw);
        amp_tensor_free(db);
        return st;
    }
    gin[0] = dx; /* NULL when added into x's producer's gradient already */
    if (hw)
        gin[iw] = dw;
    if (hb)
        gin[ib] = db;
    return AMP_OK;
}

/* layer_norm: 8 FLOPs per element of x (mean 1, variance 3, normalise 2,
 * weight and bias 2); backward 12 per element of x (dx 9, dweight and
 * dbias 3), whatever inputs need a gradient. */
op_cost layer_norm_cost(const node *n, const layer_norm_params *p, bool backward)
{
    (void)p;
    return (op_cost){(backward ? 12.0 : 8.0) * (double)n->in[0]->numel, cost_bytes(n, backward)};
}
