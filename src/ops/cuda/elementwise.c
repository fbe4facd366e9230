/*
 * elementwise.c (CUDA) - the pointwise ops on CUDA tensors: add, sub, mul,
 * div with broadcasting and type promotion, the scalar forms and the
 * activations, forward and backward; and the two helpers every CUDA op
 * file uses, cu_ew (a pointwise formula over broadcast operands) and
 * cu_reduce (sums over a set of dims).
 *
 * As on the CPU (src/ops/broadcast.c), the shape is first simplified the
 * way PyTorch's TensorIterator does (size-1 dims dropped, neighbours every
 * operand walks contiguously merged), so a same-shape op is one flat run
 * on the device. The formulas and what each backward reads (input or saved
 * output) are those of src/ops/elementwise.c.
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"

/* TRANSITION (issue 12): the helpers the remaining src/ops/cuda files
 * share, now thin calls of the device-neutral building blocks. */

amp_tensor *cu_ew(cuda_ew_op op, amp_shape shape, amp_dtype dt, const cu_arg *in, int nin, float s0)
{
    return op_pointwise((amp_pw_op)op, shape, dt, AMP_CUDA, in, nin, s0);
}

amp_tensor *cu_reduce(const cu_arg *x, unsigned mask, double scale, amp_shape out_shape, amp_dtype dt)
{
    return op_reduce_sum(x, AMP_CUDA, mask, scale, out_shape, dt);
}

amp_tensor *cu_sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale)
{
    return sum_to_shape(g, small, dt, scale);
}

#else
typedef int ampc_ops_cuda_elementwise_unused; /* ISO C wants a declaration in every file */
#endif
