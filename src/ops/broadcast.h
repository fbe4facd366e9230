/*
 * broadcast.h - what the op files share to reach the backend's element
 * work on any device: numpy broadcasting of shapes, PyTorch's float type
 * promotion, a pointwise formula over broadcast operands (op_pointwise),
 * sums over a set of dims (op_reduce_sum), and the sum that brings a
 * broadcast gradient back to its input's shape (sum_to_shape).
 *
 * The backends compute in f32 and round once into the result's dtype;
 * sums accumulate in double, in a fixed order, so results do not depend
 * on the number of threads.
 *
 * Defines: bcast_shapes, promote_float / promote_tensors, ew_arg,
 * op_pointwise, op_reduce_sum, sum_to_shape, fail_status.
 */
#ifndef AMPC_BROADCAST_H
#define AMPC_BROADCAST_H

#include "backend/backend.h"
#include "ops/ops.h"

/* Most operands a pointwise formula takes. */
#define EW_MAX_IN BE_PW_MAX_IN

/* The numpy broadcast of a and b (dims aligned from the right, each pair
 * equal or one of them 1) into *out; false when they do not broadcast. */
bool bcast_shapes(amp_shape a, amp_shape b, amp_shape *out);

/* PyTorch's result dtype for two float dtypes: the same dtype when they
 * match, else f32 (f32 wins over f16/bf16; f16 with bf16 gives f32). */
amp_dtype promote_float(amp_dtype a, amp_dtype b);
/* The result dtype of a binary op on float tensors a and b, as PyTorch's
 * type promotion: a 0-d tensor ranks below a dimensioned one, so f16[3] *
 * f32[] stays f16 (what the scaler's scale() relies on). */
amp_dtype promote_tensors(const amp_tensor *a, const amp_tensor *b);

/* An operand: contiguous data of a float dtype, read as if broadcast to
 * the result's shape. The shape may differ from the tensor's own (e.g. a
 * keepdim view of a reduced gradient) as long as numel matches. */
typedef struct {
    const void *data;
    amp_dtype dt;
    amp_shape shape;
} ew_arg;

static inline ew_arg ew_arg_of(const amp_tensor *t) { return (ew_arg){tensor_ptr(t), t->dtype, t->shape}; }

/* A new tensor (shape, dt) on dev = formula op (backend/pointwise.h) of
 * the operands in[0..nin) (on dev) broadcast to shape, s0 the scalar: the
 * backend's pointwise primitive over the broadcast plan. NULL with the
 * error set. */
amp_tensor *op_pointwise(amp_pw_op op, amp_shape shape, amp_dtype dt, amp_device dev, const ew_arg *in, int nin,
                         float s0);

/* scale * the sum of x (on dev) over the dims whose bit is set in mask
 * (bit i = dim i of x->shape), rounded once into a new tensor of out_shape
 * and dt; out_shape holds the kept dims' elements in order (keepdim or
 * not). The backend's reduce_sum: accumulated in double, in a fixed order.
 * NULL with the error set. */
amp_tensor *op_reduce_sum(const ew_arg *x, amp_device dev, unsigned mask, double scale, amp_shape out_shape,
                          amp_dtype dt);

/* scale * g summed over the dims along which small was broadcast to reach
 * g's shape, as a new tensor of shape small and dtype dt on g's device:
 * the gradient of a broadcast input. */
amp_tensor *sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale);

/* A status that is not AMP_OK for a failure already reported (the
 * thread's error), AMP_ERR_MEMORY when none was. */
static inline amp_status fail_status(void)
{
    return amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_MEMORY;
}

#endif
