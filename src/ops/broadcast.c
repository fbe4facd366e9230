/*
 * broadcast.c - broadcasting, type promotion, and the op layer's way to
 * the backend's pointwise and reduce_sum primitives (see broadcast.h).
 *
 * The pointwise plan simplifies the shape the way PyTorch's
 * TensorIterator does (bcast_plan, infer.c): size-1 dims are dropped and
 * neighbouring dims that every operand walks contiguously are merged, so
 * a same-shape op is one flat run and a bias is rows against one row.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

#include <stdlib.h>
#include <string.h>

bool bcast_shapes(amp_shape a, amp_shape b, amp_shape *out)
{
    int nd = a.ndim > b.ndim ? a.ndim : b.ndim;
    amp_shape s = {nd, {0}};
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a.ndim), ib = i - (nd - b.ndim);
        int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        s.d[i] = da == 1 ? db : da;
    }
    *out = s;
    return true;
}

amp_dtype promote_float(amp_dtype a, amp_dtype b) { return a == b ? a : AMP_F32; }

amp_dtype promote_tensors(const amp_tensor *a, const amp_tensor *b)
{
    bool a0 = a->shape.ndim == 0, b0 = b->shape.ndim == 0;
    if (a0 != b0) /* a 0-d float tensor does not widen a dimensioned one */
        return a0 ? b->dtype : a->dtype;
    return promote_float(a->dtype, b->dtype);
}

/* ------------------------------------------------- over the backend */

/* out when st is AMP_OK, else NULL with out freed (the error is set). */
static amp_tensor *kept_if(amp_tensor *out, amp_status st)
{
    if (st == AMP_OK)
        return out;
    amp_tensor_free(out);
    return NULL;
}

static amp_status pointwise_into(amp_tensor *out, amp_pw_op op, const ew_arg *in, int nin, float s0)
{
    be_pw_plan p;
    amp_shape shapes[BE_PW_MAX_IN];
    const void *ptr[BE_PW_MAX_IN];
    amp_dtype dts[BE_PW_MAX_IN];
    for (int k = 0; k < nin; k++) {
        shapes[k] = in[k].shape;
        ptr[k] = in[k].data;
        dts[k] = in[k].dt;
    }
    memset(&p, 0, sizeof p);
    p.nd = bcast_plan(out->shape, shapes, nin, p.d, p.st);
    if (out->numel > 0)
        BACKEND_CALL(backend_of(tensor_device(out)), "pointwise", pointwise, op, tensor_ptr(out), out->dtype,
                     out->numel, nin, ptr, dts, &p, s0);
    return AMP_OK;
}

amp_tensor *op_pointwise(amp_pw_op op, amp_shape shape, amp_dtype dt, amp_device dev, const ew_arg *in, int nin,
                         float s0)
{
    amp_tensor *out = tensor_new_on(shape, dt, dev);
    return out ? kept_if(out, pointwise_into(out, op, in, nin, s0)) : NULL;
}

static amp_status reduce_into(amp_tensor *out, const ew_arg *x, unsigned mask, double scale)
{
    BACKEND_CALL(backend_of(tensor_device(out)), "sum", reduce_sum, x->data, x->dt, x->shape, mask, scale,
                 tensor_ptr(out), out->dtype, out->numel);
    return AMP_OK;
}

amp_tensor *op_reduce_sum(const ew_arg *x, amp_device dev, unsigned mask, double scale, amp_shape out_shape,
                          amp_dtype dt)
{
    amp_tensor *out = tensor_new_on(out_shape, dt, dev);
    return out ? kept_if(out, reduce_into(out, x, mask, scale)) : NULL;
}

amp_tensor *sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale)
{
    ew_arg a = ew_arg_of(g);
    if (shape_equal(g->shape, small)) {
        if (scale == 1.0)
            return tensor_convert(g, dt);
        return op_pointwise(AMP_PW_MUL_S, small, dt, tensor_device(g), &a, 1, (float)scale);
    }
    const unsigned mask = sum_to_shape_mask(g->shape, small);
    return op_reduce_sum(&a, tensor_device(g), mask, scale, small, dt);
}
