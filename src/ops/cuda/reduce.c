/*
 * reduce.c (CUDA) - sum and mean over a list of dims, mse_loss, and argmax
 * on CUDA tensors, with src/ops/reduce.c's and softmax.c's checks,
 * messages and results (sums in double, one rounding).
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"

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

#else
typedef int ampc_ops_cuda_reduce_unused; /* ISO C wants a declaration in every file */
#endif
