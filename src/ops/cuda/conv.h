/*
 * conv.h (CUDA) - conv2d, max_pool2d and avg_pool2d on CUDA tensors
 * (conv.c), for the CUDA column of the op table (table.c).
 *
 * Kept apart from cuda_ops.h only because this file was added by a
 * different change; the declarations are of the same kind and may move
 * there.
 *
 * Compiled only with CUDA (AMPC_HAVE_CUDA).
 */
#ifndef AMPC_OPS_CUDA_CONV_H
#define AMPC_OPS_CUDA_CONV_H

#include "ops/ops.h"

amp_tensor *cu_conv2d_forward(node *n);
amp_status cu_conv2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_max_pool2d_forward(node *n);
amp_status cu_max_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_avg_pool2d_forward(node *n);
amp_status cu_avg_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin);

#endif
