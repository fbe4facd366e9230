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

/* Empty: every row now runs its own device-neutral forward and backward
 * (op_table.c); the table goes with src/ops/cuda. */
const op_device_fns op_cuda_fns[OP_COUNT] = {{NULL, NULL}};

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
