/*
 * conv.c - conv2d (and op_conv2d_relu, conv2d with a relu fused in),
 * forward and backward, once for every device: the shapes (conv2d_infer),
 * the result on the inputs' device, what backward keeps, and backward's
 * composition. The convolutions themselves are the backend's conv2d and
 * conv2d_backward primitives (CPU: backend/cpu/conv.c, im2col + GEMMs or
 * oneDNN; CUDA: backend/cuda/conv.c, im2col + cuBLASLt).
 *
 * A relu can be fused (act OP_ACT_RELU): y = relu(conv + bias), applied before
 * the one rounding (relu commutes with it, so the bits equal conv2d then
 * amp_relu). y is saved, and backward masks dY with y > 0 first, as
 * relu's backward would. Pooling lives in pool.c.
 */
#include "backend/backend.h"
#include "ops/broadcast.h"
#include "ops/infer.h"

/* ------------------------------------------------------- the public ops */

/* Inputs: x, w[, bias]; act: none, or a relu fused into the epilogue
 * (op_conv2d_relu). */
static amp_tensor *conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding, op_act act)
{
    if (stride < 1 || padding < 0)
        return amp_fail_null(AMP_ERR_ARG, "conv2d: stride %d must be >= 1 and padding %d >= 0", stride,
                             padding);
    amp_tensor *in[3] = {x, w, bias};
    const op_params p = {.conv2d = {.stride = stride, .padding = padding, .has_bias = bias != NULL, .act = act}};
    return op_apply(OP_CONV2D, in, bias ? 3 : 2, &p);
}

amp_tensor *amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding)
{
    return conv2d(x, w, bias, stride, padding, OP_ACT_NONE);
}

amp_tensor *op_conv2d_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding)
{
    return conv2d(x, w, bias, stride, padding, OP_ACT_RELU);
}

static be_conv_geom geom_of(const conv2d_shape *s)
{
    return (be_conv_geom){.N = s->N, .C = s->C, .H = s->H, .W = s->W, .O = s->O, .kh = s->kh, .kw = s->kw,
                          .stride = s->s, .pad = s->p, .Ho = s->Ho, .Wo = s->Wo};
}

static amp_status run_forward(const node *n, const conv2d_shape *s, amp_tensor *y)
{
    const be_conv_geom g = geom_of(s);
    BACKEND_CALL(backend_of(tensor_device(y)), "conv2d", conv2d, &g, tensor_ptr(n->in[0]), tensor_ptr(n->in[1]),
                 s->bias ? tensor_ptr(n->in[2]) : NULL, y->dtype, s->relu ? BE_EPI_RELU : BE_EPI_NONE,
                 tensor_ptr(y));
    return AMP_OK;
}

amp_tensor *conv2d_forward(node *n, const conv2d_params *p)
{
    conv2d_shape s;
    if (!same_float_dtypes(n) || !conv2d_infer(n, p, &s))
        return NULL;
    const amp_tensor *x = n->in[0];
    amp_tensor *y = tensor_new_on(AMP_SHAPE(s.N, s.O, s.Ho, s.Wo), x->dtype, tensor_device(x));
    if (!y)
        return NULL;
    amp_status st = run_forward(n, &s, y);
    /* The fused relu's backward reads the output. */
    if (st == AMP_OK && s.relu && n->needs_grad && op_save(n, 0, y) != AMP_OK)
        st = amp_set_error(AMP_ERR_MEMORY, "conv2d: out of memory");
    if (st != AMP_OK) {
        amp_tensor_free(y);
        return NULL;
    }
    return y;
}

/* The gradients the non-NULL pointers of d ask for, from dY (the inputs'
 * dtype, already through the fused relu). */
static amp_status run_backward(const node *n, const conv2d_shape *s, const amp_tensor *gy, void *const d[3])
{
    const be_conv_geom g = geom_of(s);
    BACKEND_CALL(backend_of(tensor_device(gy)), "conv2d", conv2d_backward, &g, tensor_ptr(gy),
                 tensor_ptr(n->in[0]), tensor_ptr(n->in[1]), gy->dtype, d[0], d[1], d[2]);
    return AMP_OK;
}

amp_status conv2d_backward(node *n, const conv2d_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    conv2d_shape s;
    if (!conv2d_infer(n, p, &s))
        return amp_last_status();
    const bool need[3] = {in_needs_grad(n, 0), in_needs_grad(n, 1), s.bias && in_needs_grad(n, 2)};
    const amp_dtype dt = n->in[0]->dtype;
    void *d[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        if (need[i]) {
            if (!(gin[i] = tensor_new_on(n->in[i]->shape, dt, tensor_device(n->in[0]))))
                return fail_status();
            d[i] = tensor_ptr(gin[i]);
        }
    if (s.relu && !n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: the fused relu's output was not saved", op_name(n));
    /* The kernels take dY in the inputs' dtype (the engine hands it so),
     * through the fused relu first: dY where the output is > 0. */
    amp_tensor *conv = gout->dtype == dt ? NULL : tensor_convert(gout, dt), *masked = NULL;
    amp_status st;
    if (gout->dtype != dt && !(gout = conv))
        st = fail_status();
    else if (s.relu && !(gout = masked = relu_grad_from_output(gout, n->saved[0])))
        st = fail_status();
    else
        st = run_backward(n, &s, gout, d);
    amp_tensor_free(masked);
    amp_tensor_free(conv);
    return st;
}

/* conv2d, x [N, C, H, W], w [O, C, kh, kw] -> [N, O, Ho, Wo]: forward
 * 2*N*O*Ho*Wo*C*kh*kw, + N*O*Ho*Wo for the bias and for a fused relu;
 * backward the product's count again for dx and for dW when they need
 * it, N*O*Ho*Wo for dbias and through the relu. */
op_cost conv2d_cost(const node *n, const conv2d_params *p, bool backward)
{
    const amp_tensor *w = n->in[1];
    const double ckk = (double)(w->shape.d[1] * w->shape.d[2] * w->shape.d[3]);
    const double on = (double)shape_numel(n->out_shape), prod = 2.0 * on * ckk;
    return cost_product(n, backward, prod, on, p->has_bias && n->n_in > 2, p->act == OP_ACT_RELU);
}
