/*
 * pool.c - max_pool2d and avg_pool2d, forward and backward, once for
 * every device; the pooling itself is the backend's pool2d and
 * pool2d_backward primitives (CPU: backend/cpu/pool.c; CUDA: conv.cu).
 *
 * Pooling follows PyTorch (ceil_mode=False): Ho = (H + 2p - k) / s + 1.
 * Padding never wins a max; avg_pool2d divides by k*k, padding included
 * (count_include_pad=True). max_pool2d saves the argmax of each window
 * (an i32 tensor of offsets within the H x W plane, on the input's
 * device) for backward; the first maximum wins ties and a NaN wins over
 * numbers, as in PyTorch.
 */
#include "backend/backend.h"
#include "ops/broadcast.h"
#include "ops/infer.h"

/* ------------------------------------------------------- the public ops */

/* max_pool2d, avg_pool2d: pool2d_params (stride 0: the kernel). */
static amp_tensor *pool(int op, amp_tensor *x, int kernel, int stride, int padding)
{
    if (stride == 0)
        stride = kernel;
    if (kernel < 1 || stride < 1 || padding < 0 || padding * 2 > kernel)
        return amp_fail_null(AMP_ERR_ARG,
                             "%s: kernel %d, stride %d, padding %d (need kernel >= 1, stride >= 1, "
                             "0 <= padding <= kernel/2)",
                             op_table[op].name, kernel, stride, padding);
    const op_params p = {.pool2d = {.kernel = kernel, .stride = stride, .padding = padding}};
    return op_apply(op, &x, 1, &p);
}

amp_tensor *amp_max_pool2d(amp_tensor *x, int kernel, int stride, int padding)
{
    return pool(OP_MAX_POOL2D, x, kernel, stride, padding);
}

amp_tensor *amp_avg_pool2d(amp_tensor *x, int kernel, int stride, int padding)
{
    return pool(OP_AVG_POOL2D, x, kernel, stride, padding);
}

/* The shared geometry (src/ops/infer.c) in the backend's form. */
static bool pool_geom(const node *n, const pool2d_params *p, be_pool_geom *g)
{
    pool_shape s;
    if (!pool_infer(n, p, &s))
        return false;
    *g = (be_pool_geom){s.planes, s.H, s.W, s.k, s.s, s.p, s.Ho, s.Wo};
    return true;
}

static amp_status run_forward(const node *n, const be_pool_geom *g, bool is_max, amp_tensor *y, amp_tensor *idx)
{
    const amp_tensor *x = n->in[0];
    BACKEND_CALL(backend_of(tensor_device(x)), op_name(n), pool2d, g, is_max, tensor_ptr(x), x->dtype,
                 tensor_ptr(y), idx ? (int32_t *)tensor_ptr(idx) : NULL);
    return AMP_OK;
}

/* The forward of max_pool2d (saving the argmax when a gradient is
 * needed) and of avg_pool2d: the node's row says which. */
amp_tensor *pool2d_forward(node *n, const pool2d_params *p)
{
    const bool is_max = n->op == OP_MAX_POOL2D;
    be_pool_geom g;
    if (!pool_geom(n, p, &g))
        return NULL;
    const amp_tensor *x = n->in[0];
    amp_shape os = x->shape;
    os.d[os.ndim - 2] = g.Ho;
    os.d[os.ndim - 1] = g.Wo;
    amp_tensor *y = tensor_new_on(os, x->dtype, tensor_device(x));
    amp_tensor *idx = is_max && n->needs_grad ? tensor_new_on(os, AMP_I32, tensor_device(x)) : NULL;
    if (!y || (is_max && n->needs_grad && !idx) || run_forward(n, &g, is_max, y, idx) != AMP_OK) {
        amp_tensor_free(y);
        amp_tensor_free(idx);
        return NULL;
    }
    if (idx)
        n->saved[0] = idx;
    return y;
}

/* The backward of either pool. */
amp_status pool2d_backward(node *n, const pool2d_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    const bool is_max = n->op == OP_MAX_POOL2D;
    be_pool_geom g;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!pool_geom(n, p, &g))
        return amp_last_status();
    if (is_max && !n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved indices", op_name(n));
    const amp_tensor *x = n->in[0];
    if (!(gin[0] = tensor_new_on(x->shape, x->dtype, tensor_device(x))))
        return fail_status();
    BACKEND_CALL(backend_of(tensor_device(x)), op_name(n), pool2d_backward, &g, tensor_ptr(gout), gout->dtype,
                 is_max ? (const int32_t *)tensor_ptr(n->saved[0]) : NULL, tensor_ptr(gin[0]), x->dtype);
    return AMP_OK;
}

/* max_pool2d, avg_pool2d: kernel * kernel FLOPs per output element
 * (compares or adds); backward the same (the result's shape is
 * n->out_shape either way). */
op_cost pool2d_cost(const node *n, const pool2d_params *p, bool backward)
{
    const double k = (double)p->kernel;
    return (op_cost){k * k * (double)shape_numel(n->out_shape), cost_bytes(n, backward)};
}
