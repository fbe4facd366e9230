/*
 * reduce.c (CUDA) - sum and mean over a list of dims, mse_loss, and argmax
 * on CUDA tensors, with src/ops/reduce.c's and softmax.c's checks,
 * messages and results (sums in double, one rounding).
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"

static amp_tensor *reduce_forward(node *n, bool mean)
{
    if (!op_require_float(n, 0))
        return NULL;
    reduce_dims r;
    if (!reduce_infer(n, &r))
        return NULL;
    cu_arg a = cu_arg_of(n->in[0]);
    return cu_reduce(&a, r.mask, mean ? 1.0 / (double)r.count : 1.0, r.out, n->in[0]->dtype);
}

static amp_status reduce_backward(node *n, const amp_tensor *gout, amp_tensor **gin, bool mean)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    reduce_dims r;
    if (!reduce_infer(n, &r))
        return fail_status();
    const amp_tensor *x = n->in[0];
    cu_arg g = {tensor_ptr(gout), gout->dtype, r.keep};
    gin[0] = mean ? cu_ew(CEW_DIV_S, x->shape, x->dtype, &g, 1, (float)r.count)
                  : cu_ew(CEW_MUL_S, x->shape, x->dtype, &g, 1, 1.0f);
    return gin[0] ? AMP_OK : fail_status();
}

amp_tensor *cu_sum_forward(node *n) { return reduce_forward(n, false); }
amp_tensor *cu_mean_forward(node *n) { return reduce_forward(n, true); }

amp_status cu_sum_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return reduce_backward(n, gout, gin, false);
}

amp_status cu_mean_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return reduce_backward(n, gout, gin, true);
}

/* ------------------------------------------------------------- mse_loss */

amp_tensor *cu_mse_loss_forward(node *n)
{
    if (!mse_loss_infer(n))
        return NULL;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    cu_arg args[2] = {cu_arg_of(a), cu_arg_of(b)};
    amp_tensor *sq = cu_ew(CEW_SQDIFF, a->shape, AMP_F32, args, 2, 0.0f);
    if (!sq)
        return NULL;
    cu_arg s = cu_arg_of(sq);
    unsigned all = (1u << a->shape.ndim) - 1u;
    amp_tensor *out = cu_reduce(&s, all, 1.0 / (double)a->numel, (amp_shape){0, {0}},
                                promote_float(a->dtype, b->dtype));
    amp_tensor_free(sq);
    return out;
}

/* d/da = 2/numel * (a - b) * g, with g read on the device. */
amp_status cu_mse_loss_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *a = n->in[0];
    const float norm = (float)(2.0 / (double)a->numel);
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        cu_arg args[3] = {cu_arg_of(n->in[i]), cu_arg_of(n->in[1 - i]), {tensor_ptr(gout), gout->dtype, {0, {0}}}};
        if (!(gin[i] = cu_ew(CEW_MSE_GRAD, a->shape, n->in[i]->dtype, args, 3, norm)))
            return fail_status();
    }
    return AMP_OK;
}

/* --------------------------------------------------------------- argmax */

amp_tensor *cu_argmax_forward(node *n)
{
    const amp_tensor *x = n->in[0];
    dim_view v;
    if (!dim_view_infer(n, &v))
        return NULL;
    if (v.len == 0)
        return op_fail_shapes(n, "cannot take argmax over a dim of size 0");
    int nd = x->shape.ndim, dim = (int)(n->p.i[0] < 0 ? n->p.i[0] + (nd > 0 ? nd : 1) : n->p.i[0]);
    amp_shape os = {0, {0}};
    for (int i = 0; i < nd; i++)
        if (i != dim)
            os.d[os.ndim++] = x->shape.d[i];
    amp_tensor *out = cu_new(os, AMP_I64);
    if (out && cuda_argmax(tensor_ptr(x), x->dtype, v.outer, v.len, v.inner, tensor_ptr(out)) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

#else
typedef int ampc_ops_cuda_reduce_unused; /* ISO C wants a declaration in every file */
#endif
