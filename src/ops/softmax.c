/*
 * softmax.c - softmax and log_softmax along any dim, and the two losses:
 * cross_entropy (fused log_softmax + NLL, mean over non-ignored labels)
 * and mse_loss (mean squared error), on any device: the checks, result
 * shapes and dtypes and the saved tensors here, the element work in the
 * inputs' backend (backend.h's nn and pointwise sections).
 *
 * All of them compute in f32 (16-bit inputs are widened, results rounded
 * once) and subtract the running max before exponentiating, so logits of
 * any magnitude stay finite; sums accumulate in double. softmax and
 * log_softmax save their output for backward, as PyTorch does;
 * cross_entropy saves each row's max and log-sum-exp ([N, 2] f32) so its
 * fused backward, (softmax - onehot) * g / count, needs no second pass
 * over the row, and the number of counted rows ([1] f32, on the device:
 * backward divides by it without reading the labels again).
 *
 * Labels out of range: the CPU backend fails with an error naming the
 * label; a GPU cannot check without waiting for it and gives a NaN loss.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

/* ------------------------------------------------------- the public ops */

/* softmax, log_softmax: dim_params. */
static amp_tensor *along(int op, amp_tensor *a, int dim)
{
    const op_params p = {.dim = {.dim = dim}};
    return op_apply(op, &a, 1, &p);
}

amp_tensor *amp_softmax(amp_tensor *a, int dim) { return along(OP_SOFTMAX, a, dim); }
amp_tensor *amp_log_softmax(amp_tensor *a, int dim) { return along(OP_LOG_SOFTMAX, a, dim); }

amp_tensor *amp_cross_entropy_ignore(amp_tensor *logits, amp_tensor *labels, int64_t ignore_index)
{
    amp_tensor *in[2] = {logits, labels};
    const op_params p = {.cross_entropy = {.ignore_index = ignore_index}};
    return op_apply(OP_CROSS_ENTROPY, in, 2, &p);
}

amp_tensor *amp_cross_entropy(amp_tensor *logits, amp_tensor *labels)
{
    return amp_cross_entropy_ignore(logits, labels, AMP_IGNORE_INDEX);
}

amp_tensor *amp_mse_loss(amp_tensor *a, amp_tensor *b)
{
    amp_tensor *in[2] = {a, b};
    return op_apply(OP_MSE_LOSS, in, 2, NULL);
}

/* ---------------------------------------------------------------- softmax */

static amp_status softmax_run(const node *n, const amp_tensor *x, amp_tensor *y, dim_view v, bool log)
{
    BACKEND_CALL(backend_of(tensor_device(x)), op_name(n), softmax, tensor_ptr(x), x->dtype, tensor_ptr(y),
                 y->dtype, v.outer, v.len, v.inner, log);
    return AMP_OK;
}

static amp_status softmax_grad_run(const node *n, const amp_tensor *g, const amp_tensor *y, amp_tensor *gx,
                                   dim_view v, bool log)
{
    BACKEND_CALL(backend_of(tensor_device(g)), op_name(n), softmax_backward, tensor_ptr(g), g->dtype,
                 tensor_ptr(y), y->dtype, tensor_ptr(gx), gx->dtype, v.outer, v.len, v.inner, log);
    return AMP_OK;
}

/* softmax and log_softmax (the node's row says which). */
amp_tensor *softmax_forward(node *n, const dim_params *p)
{
    const bool log = n->op == OP_LOG_SOFTMAX;
    dim_view v;
    if (!op_require_float(n, 0) || !dim_view_infer(n, p->dim, &v))
        return NULL;
    const amp_tensor *x = n->in[0];
    amp_tensor *out = tensor_new_on(x->shape, x->dtype, tensor_device(x));
    if (!out)
        return NULL;
    if (softmax_run(n, x, out, v, log) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    if (n->needs_grad && op_save(n, 0, out) != AMP_OK) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    return out;
}

amp_status softmax_backward(node *n, const dim_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    const bool log = n->op == OP_LOG_SOFTMAX;
    dim_view v;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!dim_view_infer(n, p->dim, &v))
        return fail_status();
    const amp_tensor *x = n->in[0];
    amp_tensor *gx = tensor_new_on(x->shape, x->dtype, tensor_device(x));
    if (!gx)
        return fail_status();
    amp_status st = softmax_grad_run(n, gout, n->saved[0], gx, v, log);
    if (st != AMP_OK) {
        amp_tensor_free(gx);
        return st;
    }
    gin[0] = gx;
    return AMP_OK;
}

/* softmax, log_softmax: 5 FLOPs per element (max, subtract, exp, sum,
 * normalise); backward 4 per element (dy*y, its sum, subtract, scale). */
op_cost softmax_cost(const node *n, const dim_params *p, bool backward)
{
    (void)p;
    return (op_cost){(backward ? 4.0 : 5.0) * (double)n->in[0]->numel, cost_bytes(n, backward)};
}

/* ---------------------------------------------------------- cross_entropy */

static amp_status cross_entropy_run(const node *n, const cross_entropy_params *p, amp_tensor *stats,
                                    amp_tensor *count, amp_tensor *out)
{
    const amp_tensor *x = n->in[0], *t = n->in[1];
    BACKEND_CALL(backend_of(tensor_device(x)), "cross_entropy", cross_entropy, tensor_ptr(x), x->dtype,
                 tensor_ptr(t), t->dtype, x->shape.d[0], x->shape.d[1], p->ignore_index,
                 stats ? tensor_f32(stats) : NULL, tensor_f32(count), tensor_ptr(out), out->dtype);
    return AMP_OK;
}

/* The result is 0-d in the logits' dtype: the mean over counted rows (a
 * label other than p->ignore_index) of logsumexp(row) - row[label]; NaN
 * when every label is ignored (0 / 0, as PyTorch). Saves the row
 * statistics ([N, 2] f32) and the count ([1] f32) when a gradient is
 * needed. */
amp_tensor *cross_entropy_forward(node *n, const cross_entropy_params *p)
{
    if (!cross_entropy_infer(n))
        return NULL;
    const amp_tensor *x = n->in[0];
    const amp_device dev = tensor_device(x);
    amp_tensor *out = tensor_new_on((amp_shape){0, {0}}, x->dtype, dev);
    amp_tensor *count = tensor_new_on(AMP_SHAPE(1), AMP_F32, dev);
    amp_tensor *stats = n->needs_grad ? tensor_new_on((amp_shape){2, {x->shape.d[0], 2}}, AMP_F32, dev) : NULL;
    if (!out || !count || (n->needs_grad && !stats) || cross_entropy_run(n, p, stats, count, out) != AMP_OK) {
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

static amp_status cross_entropy_grad_run(const node *n, const cross_entropy_params *p, const amp_tensor *gout,
                                         amp_tensor *gx)
{
    const amp_tensor *x = n->in[0], *t = n->in[1];
    BACKEND_CALL(backend_of(tensor_device(x)), "cross_entropy", cross_entropy_backward, tensor_ptr(x), x->dtype,
                 tensor_ptr(t), t->dtype, x->shape.d[0], x->shape.d[1], p->ignore_index, tensor_f32(n->saved[0]),
                 tensor_f32(n->saved[1]), tensor_ptr(gout), gout->dtype, tensor_ptr(gx), gx->dtype);
    return AMP_OK;
}

/* d/dx[i, c] = (softmax(x_i)[c] - [c == label_i]) * g / count; 0 for
 * ignored rows. */
amp_status cross_entropy_backward(node *n, const cross_entropy_params *p, const amp_tensor *gout,
                                  amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!n->saved[0] || !n->saved[1])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved statistics", op_name(n));
    const amp_tensor *x = n->in[0];
    amp_tensor *gx = tensor_new_on(x->shape, x->dtype, tensor_device(x));
    if (!gx)
        return amp_set_error(AMP_ERR_MEMORY, "cross_entropy: out of memory in backward");
    amp_status st = cross_entropy_grad_run(n, p, gout, gx);
    if (st != AMP_OK) {
        amp_tensor_free(gx);
        return st;
    }
    gin[0] = gx;
    return AMP_OK;
}

/* --------------------------------------------------------------- mse_loss */

/* mean((a - b)^2) as a 0-d tensor of the promoted dtype; the squares are
 * f32, their sum double. */
amp_tensor *mse_loss_forward(node *n, const none_params *p)
{
    (void)p;
    if (!mse_loss_infer(n))
        return NULL;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    const amp_device dev = tensor_device(a);
    ew_arg args[2] = {ew_arg_of(a), ew_arg_of(b)};
    amp_tensor *sq = op_pointwise(AMP_PW_SQDIFF, a->shape, AMP_F32, dev, args, 2, 0.0f);
    if (!sq)
        return NULL;
    ew_arg s = ew_arg_of(sq);
    unsigned all = (1u << a->shape.ndim) - 1u;
    amp_tensor *out = op_reduce_sum(&s, dev, all, 1.0 / (double)a->numel, (amp_shape){0, {0}},
                                    promote_float(a->dtype, b->dtype));
    amp_tensor_free(sq);
    return out;
}

/* d/da = 2/numel * (a - b) * g, d/db = 2/numel * (b - a) * g (PyTorch's
 * mse_loss_backward), each in its input's dtype; g, the loss's 0-d
 * gradient, is read where it lives. */
amp_status mse_loss_backward(node *n, const none_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    const amp_tensor *a = n->in[0];
    const float norm = (float)(2.0 / (double)a->numel);
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        ew_arg args[3] = {ew_arg_of(n->in[i]), ew_arg_of(n->in[1 - i]), {tensor_ptr(gout), gout->dtype, {0, {0}}}};
        if (!(gin[i] = op_pointwise(AMP_PW_MSE_GRAD, a->shape, n->in[i]->dtype, tensor_device(a), args, 3, norm)))
            return fail_status();
    }
    return AMP_OK;
}

/* cross_entropy, logits [N, C]: 5 FLOPs per logit (log_softmax) + 1 per
 * row (the label's term and the mean); backward 3 per logit (exp(x - lse),
 * minus the one-hot, times 1/N). */
op_cost cross_entropy_cost(const node *n, const cross_entropy_params *p, bool backward)
{
    (void)p;
    const amp_tensor *x = n->in[0];
    const double xn = (double)x->numel, rows = x->shape.ndim > 0 ? (double)x->shape.d[0] : 1.0;
    return (op_cost){backward ? 3.0 * xn : 5.0 * xn + rows, cost_bytes(n, backward)};
}

/* mse_loss: 3 FLOPs per element (subtract, square, sum); backward 3 per
 * element of each gradient made. */
op_cost mse_loss_cost(const node *n, const none_params *p, bool backward)
{
    (void)p;
    const double xn = (double)n->in[0]->numel;
    return (op_cost){backward ? 3.0 * xn * (cost_needs(n, 0) + cost_needs(n, 1)) : 3.0 * xn,
                     cost_bytes(n, backward)};
}
