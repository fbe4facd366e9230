/*
 * cuda_ops.h - the ops' CUDA side: what the files of src/ops/cuda share,
 * and their forwards and backwards (the CUDA column of the op table,
 * table.c).
 *
 * Each function here is the CUDA twin of the CPU one in src/ops: the same
 * checks and error messages (they run on the host, on shapes and dtypes),
 * the same result shapes and dtypes, the same saved tensors' meaning; the
 * element work goes to src/backend/cuda through cuda_backend.h.
 *
 * Compiled only with CUDA (AMPC_HAVE_CUDA).
 */
#ifndef AMPC_OPS_CUDA_H
#define AMPC_OPS_CUDA_H

#include "backend/cuda/cuda_backend.h"
#include "ops/broadcast.h"
#include "ops/infer.h"

/* New CUDA tensors (one reference, no pool). */
static inline amp_tensor *cu_new(amp_shape s, amp_dtype dt) { return tensor_new_on(s, dt, AMP_CUDA); }
static inline amp_tensor *cu_zeros(amp_shape s, amp_dtype dt) { return tensor_zeros_on(s, dt, AMP_CUDA); }

/* An operand read as broadcast to the output's shape; shape may differ
 * from the tensor's own (same numel). */
typedef struct {
    const void *data;
    amp_dtype dt;
    amp_shape shape;
} cu_arg;

static inline cu_arg cu_arg_of(const amp_tensor *t) { return (cu_arg){tensor_ptr(t), t->dtype, t->shape}; }

/* A new tensor (shape, dt) = op(in...) with broadcasting; NULL + error. */
amp_tensor *cu_ew(cuda_ew_op op, amp_shape shape, amp_dtype dt, const cu_arg *in, int nin, float s0);
/* scale * the sum of x over the dims whose bit is set in mask, into a new
 * tensor (out_shape: the kept dims' elements in order, dt). */
amp_tensor *cu_reduce(const cu_arg *x, unsigned mask, double scale, amp_shape out_shape, amp_dtype dt);
/* scale * g summed back to shape small (a broadcast input's gradient). */
amp_tensor *cu_sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale);

/* elementwise.c */
amp_tensor *cu_add_forward(node *n);
amp_tensor *cu_sub_forward(node *n);
amp_tensor *cu_mul_forward(node *n);
amp_tensor *cu_div_forward(node *n);
amp_status cu_add_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_sub_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_mul_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_div_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_add_scalar_forward(node *n);
amp_tensor *cu_mul_scalar_forward(node *n);
amp_tensor *cu_div_scalar_forward(node *n);
amp_status cu_add_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_mul_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_div_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_neg_forward(node *n);
amp_tensor *cu_relu_forward(node *n);
amp_tensor *cu_gelu_forward(node *n);
amp_tensor *cu_tanh_forward(node *n);
amp_tensor *cu_sigmoid_forward(node *n);
amp_tensor *cu_exp_forward(node *n);
amp_tensor *cu_log_forward(node *n);
amp_tensor *cu_pow_scalar_forward(node *n);
amp_status cu_neg_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_relu_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_gelu_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_tanh_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_sigmoid_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_exp_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_log_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_pow_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin);

/* reduce.c */
amp_tensor *cu_sum_forward(node *n);
amp_tensor *cu_mean_forward(node *n);
amp_status cu_sum_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_status cu_mean_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_mse_loss_forward(node *n);
amp_status cu_mse_loss_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_argmax_forward(node *n);

/* linalg.c */
amp_tensor *cu_matmul_forward(node *n);
amp_status cu_matmul_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_linear_forward(node *n);
amp_status cu_linear_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_attention_forward(node *n);
amp_status cu_attention_backward(node *n, const amp_tensor *gout, amp_tensor **gin);

/* shape.c */
amp_tensor *cu_reshape_forward(node *n);
amp_status cu_reshape_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_to_forward(node *n);
amp_status cu_to_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_permute_forward(node *n);
amp_status cu_permute_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_cat_forward(node *n);
amp_status cu_cat_backward(node *n, const amp_tensor *gout, amp_tensor **gin);

/* conv.c */
amp_tensor *cu_conv2d_forward(node *n);
amp_status cu_conv2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_max_pool2d_forward(node *n);
amp_status cu_max_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin);
amp_tensor *cu_avg_pool2d_forward(node *n);
amp_status cu_avg_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin);

#endif
