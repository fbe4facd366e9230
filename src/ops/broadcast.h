/*
 * broadcast.h - what the elementwise, reduction and loss ops share:
 * numpy broadcasting of shapes, PyTorch's float type promotion, a blocked
 * elementwise map over broadcast operands of any float dtype, and sums
 * over a set of dims (which also bring a broadcast gradient back to the
 * shape of the input it was broadcast from).
 *
 * Every kernel here computes in f32 and rounds once into the result's
 * dtype; sums accumulate in double. Results do not depend on the number
 * of threads: work is split at fixed boundaries and partial sums are
 * combined in a fixed order.
 *
 * Defines: OMP_PRAGMA, bcast_shapes, promote_float, ew_arg, ew_map,
 * ew_new, ew_scale / ew_divide, ew_convert, reduce_sum, sum_to_shape.
 */
#ifndef AMPC_BROADCAST_H
#define AMPC_BROADCAST_H

#include "backend/backend.h"
#include "ops/ops.h"

/* Most operands an elementwise kernel takes. */
#define EW_MAX_IN 4

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

/* A kernel over n contiguous f32 values: out[j] = f(in[0][j], in[1][j], ...).
 * out never aliases an input. ctx carries the op's scalars. */
typedef void (*ew_fn)(float *out, const float *const *in, int64_t n, const void *ctx);

/* out = fn(in...), each input broadcast to out's shape (callers check that
 * they broadcast). Works in blocks that stay in cache: 16-bit operands
 * are widened block by block, results rounded once into out's dtype. */
void ew_map(amp_tensor *out, const ew_arg *in, int nin, ew_fn fn, const void *ctx);

/* A new tensor of shape and dtype dt filled by ew_map; NULL (error set)
 * when out of memory. */
amp_tensor *ew_new(amp_shape shape, amp_dtype dt, const ew_arg *in, int nin, ew_fn fn, const void *ctx);

/* Generic one-input kernels; ctx points to a float s. */
void ew_scale(float *out, const float *const *in, int64_t n, const void *ctx);  /* in * s */
void ew_divide(float *out, const float *const *in, int64_t n, const void *ctx); /* in / s */

/* t's values in dtype dt as a new tensor (a copy when dt matches), the
 * conversion spread over threads for big tensors: what autocast's casts
 * and their gradients cost. NULL (error set) when out of memory. */
amp_tensor *ew_convert(const amp_tensor *t, amp_dtype dt);

/* Sums x over the dims whose bit is set in mask (bit i = dim i of
 * x->shape), multiplies by scale (in double) and rounds into a new tensor
 * of out_shape and dtype dt. out_shape must hold the kept dims' elements
 * in order (keepdim or not, or any reshape of that). Accumulates in
 * double. NULL (error set) when out of memory. */
amp_tensor *reduce_sum(const ew_arg *x, unsigned mask, double scale, amp_shape out_shape, amp_dtype dt);

/* scale * g summed over the dims along which small was broadcast to reach
 * g's shape, as a new tensor of shape small and dtype dt on g's device:
 * the gradient of a broadcast input. */
amp_tensor *sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale);

/* ---- device-neutral building blocks (issue 12), over the backend ------- */

/* A new tensor (shape, dt) on dev = formula op (backend/pointwise.h) of
 * the operands in[0..nin) (on dev) broadcast to shape, s0 the scalar;
 * NULL with the error set. */
amp_tensor *op_pointwise(amp_pw_op op, amp_shape shape, amp_dtype dt, amp_device dev, const ew_arg *in, int nin,
                         float s0);
/* reduce_sum on dev's backend: scale * the sum of x (on dev) over the dims
 * whose bit is set in mask, into a new tensor of out_shape and dt. */
amp_tensor *op_reduce_sum(const ew_arg *x, amp_device dev, unsigned mask, double scale, amp_shape out_shape,
                          amp_dtype dt);

/* A status that is not AMP_OK for a failure already reported (the
 * thread's error), AMP_ERR_MEMORY when none was. */
static inline amp_status fail_status(void)
{
    return amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_MEMORY;
}

#endif
