/*
 * shape.c (CUDA) - reshape (a view), permute, cat and to (the dtype cast
 * autocast relies on) on CUDA tensors, with src/ops/shape.c's checks and
 * messages. reshape and to need no kernel of their own (a view, and
 * tensor_convert, which follows the tensor's device), but they have their
 * own functions here so the CUDA table never depends on how the CPU ones
 * do their work.
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"

/* -------------------------------------------------------------- reshape */

amp_tensor *cu_reshape_forward(node *n)
{
    amp_shape s;
    if (!reshape_infer(n, &s))
        return NULL;
    return tensor_view(n->in[0], s);
}

amp_status cu_reshape_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = tensor_view(gout, n->in[0]->shape);
    return gin[0] ? AMP_OK : fail_status();
}

/* ------------------------------------------------------------------- to */

amp_tensor *cu_to_forward(node *n)
{
    const amp_dtype dt = (amp_dtype)n->p.i[0];
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "%s: invalid dtype %d", op_name(n), (int)dt);
    return tensor_convert(n->in[0], dt);
}

/* The gradient in the input's dtype; none through an integer dtype. */
amp_status cu_to_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *x = n->in[0];
    if (!in_needs_grad(n, 0) || !amp_dtype_is_float(x->dtype) || !amp_dtype_is_float(gout->dtype))
        return AMP_OK;
    gin[0] = tensor_convert(gout, x->dtype);
    return gin[0] ? AMP_OK : fail_status();
}

/* -------------------------------------------------------------- permute */

/* dst (shape in permuted: dst dim k is src dim perm[k]) from src. */
static amp_tensor *permuted(const amp_tensor *src, amp_shape in, const int *perm, amp_shape out_shape)
{
    amp_tensor *out = cu_new(out_shape, src->dtype);
    if (!out)
        return NULL;
    int64_t istr[AMP_MAX_DIMS], od[AMP_MAX_DIMS], ist[AMP_MAX_DIMS], s = 1;
    for (int d = in.ndim - 1; d >= 0; d--) {
        istr[d] = s;
        s *= in.d[d];
    }
    for (int k = 0; k < in.ndim; k++) {
        od[k] = in.d[perm[k]];
        ist[k] = istr[perm[k]];
    }
    if (cuda_permute(tensor_ptr(src), tensor_ptr(out), amp_dtype_size(src->dtype), in.ndim, od, ist) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

amp_tensor *cu_permute_forward(node *n)
{
    const amp_tensor *x = n->in[0];
    int perm[AMP_MAX_DIMS];
    if (!permute_infer(n, perm))
        return NULL;
    amp_shape s = x->shape;
    for (int k = 0; k < s.ndim; k++)
        s.d[k] = x->shape.d[perm[k]];
    return permuted(x, x->shape, perm, s);
}

amp_status cu_permute_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    int perm[AMP_MAX_DIMS], inv[AMP_MAX_DIMS];
    if (!permute_infer(n, perm))
        return amp_last_status();
    for (int k = 0; k < gout->shape.ndim; k++)
        inv[perm[k]] = k;
    gin[0] = permuted(gout, gout->shape, inv, n->in[0]->shape);
    return gin[0] ? AMP_OK : fail_status();
}

/* ------------------------------------------------------------------ cat */

static int64_t inner_from(const amp_tensor *t, int d)
{
    int64_t s = 1;
    for (int k = d; k < t->shape.ndim; k++)
        s *= t->shape.d[k];
    return s;
}

amp_tensor *cu_cat_forward(node *n)
{
    amp_shape s;
    amp_dtype dt;
    int dim;
    if (!cat_infer(n, &s, &dt, &dim))
        return NULL;
    amp_tensor *out = cu_new(s, dt);
    if (!out)
        return NULL;
    const int64_t inner_out = inner_from(out, dim);
    const int64_t outer = out->numel && inner_out ? out->numel / inner_out : 0;
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        const amp_tensor *t = n->in[i];
        const int64_t inner = inner_from(t, dim);
        if (cuda_copy_2d(tensor_ptr(t), t->dtype, inner, 0, tensor_ptr(out), dt, inner_out, off, outer, inner) !=
            AMP_OK) {
            amp_tensor_free(out);
            return NULL;
        }
        off += inner;
    }
    return out;
}

amp_status cu_cat_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const int dim = shape_dim(gout->shape.ndim, (int)n->p.i[0]);
    const int64_t inner_out = inner_from(gout, dim);
    const int64_t outer = inner_out ? gout->numel / inner_out : 0;
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        const amp_tensor *t = n->in[i];
        const int64_t inner = inner_from(t, dim);
        if (in_needs_grad(n, i)) {
            if (!(gin[i] = cu_new(t->shape, t->dtype)) ||
                cuda_copy_2d(tensor_ptr(gout), gout->dtype, inner_out, off, tensor_ptr(gin[i]), t->dtype, inner, 0,
                             outer, inner) != AMP_OK)
                return fail_status();
        }
        off += inner;
    }
    return AMP_OK;
}

#else
typedef int ampc_ops_cuda_shape_unused; /* ISO C wants a declaration in every file */
#endif
