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

/* An operand read as broadcast to the output's shape (broadcast.h). */
typedef ew_arg cu_arg;
static inline cu_arg cu_arg_of(const amp_tensor *t) { return ew_arg_of(t); }

/* A new tensor (shape, dt) = op(in...) with broadcasting; NULL + error. */
amp_tensor *cu_ew(cuda_ew_op op, amp_shape shape, amp_dtype dt, const cu_arg *in, int nin, float s0);
/* scale * the sum of x over the dims whose bit is set in mask, into a new
 * tensor (out_shape: the kept dims' elements in order, dt). */
amp_tensor *cu_reduce(const cu_arg *x, unsigned mask, double scale, amp_shape out_shape, amp_dtype dt);
/* scale * g summed back to shape small (a broadcast input's gradient). */
amp_tensor *cu_sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale);

/* elementwise.c */


/* shape.c */

#endif
