/*
 * table.c (CUDA) - the op table's CUDA column: each op's forward and
 * backward on CUDA tensors (NULL: no CUDA kernel yet, an AMP_ERR_DEVICE
 * error naming the op), and op_cuda_backward, the bridge between the
 * backward engine and CUDA nodes.
 *
 * The engine (src/autograd/graph.c) accumulates gradients with CPU loops.
 * Its first store of a gradient only keeps or converts the tensor, which is
 * device-neutral (tensor_convert follows the tensor's device); adding a
 * second gradient into the first is not. So op_cuda_backward adds every
 * gradient that meets an existing one on the device itself and hands the
 * engine none of those: a tensor used twice (a residual, a tied weight,
 * mul(x, x)) accumulates on the GPU. It also uploads the gradient it is
 * given when that lives on the CPU (the engine seeds the loss's gradient
 * with a CPU tensor of ones).
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"

const op_device_fns op_cuda_fns[OP_COUNT] = {
    [OP_ADD] = {cu_add_forward, cu_add_backward},
    [OP_SUB] = {cu_sub_forward, cu_sub_backward},
    [OP_MUL] = {cu_mul_forward, cu_mul_backward},
    [OP_DIV] = {cu_div_forward, cu_div_backward},
    [OP_ADD_SCALAR] = {cu_add_scalar_forward, cu_add_scalar_backward},
    [OP_MUL_SCALAR] = {cu_mul_scalar_forward, cu_mul_scalar_backward},
    [OP_DIV_SCALAR] = {cu_div_scalar_forward, cu_div_scalar_backward},
    [OP_NEG] = {cu_neg_forward, cu_neg_backward},
    [OP_RELU] = {cu_relu_forward, cu_relu_backward},
    [OP_GELU] = {cu_gelu_forward, cu_gelu_backward},
    [OP_TANH] = {cu_tanh_forward, cu_tanh_backward},
    [OP_SIGMOID] = {cu_sigmoid_forward, cu_sigmoid_backward},
    [OP_EXP] = {cu_exp_forward, cu_exp_backward},
    [OP_LOG] = {cu_log_forward, cu_log_backward},
    [OP_POW_SCALAR] = {cu_pow_scalar_forward, cu_pow_scalar_backward},
    [OP_MATMUL] = {cu_matmul_forward, cu_matmul_backward},
    [OP_LINEAR] = {cu_linear_forward, cu_linear_backward},
    [OP_SUM] = {cu_sum_forward, cu_sum_backward},
    [OP_MEAN] = {cu_mean_forward, cu_mean_backward},
    [OP_MSE_LOSS] = {cu_mse_loss_forward, cu_mse_loss_backward},
    [OP_CONV2D] = {cu_conv2d_forward, cu_conv2d_backward},
    [OP_MAX_POOL2D] = {cu_max_pool2d_forward, cu_max_pool2d_backward},
    [OP_AVG_POOL2D] = {cu_avg_pool2d_forward, cu_avg_pool2d_backward},
    [OP_RESHAPE] = {cu_reshape_forward, cu_reshape_backward},
    [OP_PERMUTE] = {cu_permute_forward, cu_permute_backward},
    [OP_CAT] = {cu_cat_forward, cu_cat_backward},
    [OP_TO] = {cu_to_forward, cu_to_backward},
    [OP_ARGMAX] = {cu_argmax_forward, no_backward},
    [OP_ATTENTION] = {cu_attention_forward, cu_attention_backward},
};

amp_status op_cuda_backward(node *n, op_backward_fn backward, const amp_tensor *gout, amp_tensor **gin)
{
    amp_tensor *up = NULL;
    if (!tensor_on_cuda(gout)) {
        if (!(up = amp_to_device(gout, AMP_CUDA)))
            return fail_status();
        gout = up;
    }
    amp_status st = backward(n, gout, gin);
    amp_tensor_free(up); /* a gradient that is a view of it keeps the storage */
    for (int i = 0; i < n->n_in && st == AMP_OK; i++) {
        amp_tensor *x = n->in[i];
        if (!gin[i] || !x->requires_grad)
            continue;
        /* The same tensor as an earlier input: fold into that gradient (a
         * new tensor: the earlier one may be a view of gout). */
        int j = 0;
        while (j < i && !(n->in[j] == x && gin[j]))
            j++;
        if (j < i) {
            amp_tensor *sum = tensor_convert(gin[j], x->dtype);
            st = sum ? cuda_accumulate(tensor_ptr(sum), sum->dtype, tensor_ptr(gin[i]), gin[i]->dtype, sum->numel)
                     : fail_status();
            amp_tensor_free(gin[j]);
            amp_tensor_free(gin[i]);
            gin[j] = sum;
            gin[i] = NULL;
            continue;
        }
        /* A gradient already there (the engine's target): add on the GPU. */
        amp_tensor *dst = x->grad_fn ? x->grad_fn->grad : x->grad;
        if (!dst)
            continue;
        if (!tensor_on_cuda(dst) || dst->numel != gin[i]->numel) {
            st = amp_set_error(AMP_ERR_DEVICE, "%s: backward: a gradient on %s cannot be added to one on cuda",
                               op_name(n), amp_device_name(tensor_device(dst)));
            break;
        }
        st = cuda_accumulate(tensor_ptr(dst), dst->dtype, tensor_ptr(gin[i]), gin[i]->dtype, dst->numel);
        amp_tensor_free(gin[i]);
        gin[i] = NULL;
    }
    return st;
}

#else
typedef int ampc_ops_cuda_table_unused; /* ISO C wants a declaration in every file */
#endif
