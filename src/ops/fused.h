/*
 * fused.h - ops that run two table ops as one, for nn's layers.
 *
 * Kept apart from ops.h so that the nn layer can call them without the op
 * table's declarations (whose forward names it reuses for its modules).
 */
#ifndef AMPC_FUSED_H
#define AMPC_FUSED_H

#include "ampc.h"

/* linear / conv2d followed by relu as one op (the relu is an epilogue of
 * the GEMM or convolution: a oneDNN post-op, or a pass over the result of
 * ampc's own kernels). The values and gradients equal those of the two ops
 * in sequence. op_linear_relu runs on the CPU and on CUDA (the bias as a
 * cuBLASLt epilogue there, the relu ampc's kernel); op_conv2d_relu on the
 * CPU only. nn's sequential uses
 * them for Linear / Conv2d followed by ReLU. */
amp_tensor *op_linear_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias);
amp_tensor *op_conv2d_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding);

#endif
