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

#include <stdio.h>

/* -------------------------------------------------------------- reshape */

/* src/ops/shape.c's reshape_target: the shape from n->p (i[0] = ndim,
 * i[1..] = sizes, one may be -1). */
static bool reshape_target(node *n, amp_shape *out)
{
    const amp_tensor *x = n->in[0];
    amp_shape req = {(int)n->p.i[0], {0}};
    int infer = -1;
    int64_t known = 1;
    const char *why = NULL;
    for (int k = 0; k < req.ndim; k++) {
        req.d[k] = n->p.i[1 + k];
        if (req.d[k] == -1) {
            if (infer >= 0)
                why = "only one dim can be -1";
            infer = k;
        } else if (req.d[k] < 0) {
            why = "sizes must be >= 0 or -1";
        } else {
            known *= req.d[k];
        }
    }
    if (!why && infer >= 0) {
        if (known == 0)
            why = "the -1 dim is ambiguous beside a zero-sized dim";
        else if (x->numel % known != 0)
            why = "the element counts do not match";
        else
            req.d[infer] = x->numel / known;
    }
    if (!why && shape_numel(req) != x->numel)
        why = "the element counts do not match";
    if (why) {
        char a[96], b[96];
        amp_shape shown = {(int)n->p.i[0], {0}};
        for (int k = 0; k < shown.ndim; k++)
            shown.d[k] = n->p.i[1 + k];
        amp_set_error(AMP_ERR_SHAPE, "%s: cannot view shape %s (%lld elements) as %s: %s", op_name(n),
                      amp_shape_str(x->shape, a, sizeof a), (long long)x->numel, amp_shape_str(shown, b, sizeof b),
                      why);
        return false;
    }
    *out = req;
    return true;
}

amp_tensor *cu_reshape_forward(node *n)
{
    amp_shape s;
    if (!reshape_target(n, &s))
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

static bool perm_of(node *n, int *perm)
{
    const int nd = n->in[0]->shape.ndim;
    bool seen[AMP_MAX_DIMS] = {false}, ok = true;
    for (int k = 0; k < nd; k++) {
        int d = (n->p.i[k] >= -nd && n->p.i[k] < nd) ? shape_dim(nd, (int)n->p.i[k]) : -1;
        if (d < 0 || seen[d])
            ok = false;
        else
            seen[d] = true;
        perm[k] = d;
    }
    if (ok)
        return true;
    char why[200];
    size_t len = (size_t)snprintf(why, sizeof why, "dims (");
    for (int k = 0; k < nd && len < sizeof why; k++)
        len += (size_t)snprintf(why + len, sizeof why - len, k ? ", %lld" : "%lld", (long long)n->p.i[k]);
    if (len < sizeof why)
        snprintf(why + len, sizeof why - len, ") are not a permutation of 0..%d", nd - 1);
    op_fail_shapes(n, why);
    return false;
}

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
    if (!perm_of(n, perm))
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
    if (!perm_of(n, perm))
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
    const amp_tensor *t0 = n->in[0];
    const int nd = t0->shape.ndim;
    if (nd == 0)
        return op_fail_shapes(n, "zero-dimensional tensors cannot be concatenated");
    const int dim = shape_dim(nd, (int)n->p.i[0]);
    if (dim < 0)
        return amp_fail_null(AMP_ERR_ARG, "%s: dim %lld out of range for %d dims", op_name(n), (long long)n->p.i[0],
                             nd);
    amp_dtype dt = t0->dtype;
    amp_shape s = t0->shape;
    for (int i = 1; i < n->n_in; i++) {
        const amp_tensor *t = n->in[i];
        if (t->dtype != dt) {
            if (!amp_dtype_is_float(t->dtype) || !amp_dtype_is_float(dt))
                return amp_fail_null(AMP_ERR_DTYPE,
                                     "%s: tensor %d has dtype %s but tensor 0 has %s (integer tensors must all "
                                     "have the same dtype)",
                                     op_name(n), i, amp_dtype_name(t->dtype), amp_dtype_name(t0->dtype));
            dt = AMP_F32;
        }
        bool fits = t->shape.ndim == nd;
        for (int d = 0; fits && d < nd; d++)
            fits = d == dim || t->shape.d[d] == t0->shape.d[d];
        if (!fits) {
            char a[96], b[96];
            return amp_fail_null(AMP_ERR_SHAPE,
                                 "%s: tensor %d has shape %s but tensor 0 has %s (sizes must match except in dim %d)",
                                 op_name(n), i, amp_shape_str(t->shape, a, sizeof a),
                                 amp_shape_str(t0->shape, b, sizeof b), dim);
        }
        s.d[dim] += t->shape.d[dim];
    }
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
