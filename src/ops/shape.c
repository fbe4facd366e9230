/*
 * shape.c - ops that move elements without computing on them: reshape (a
 * view), permute (a copy in the new order; transpose is a permute),
 * cat, narrow (a slice of one dim: the gpt's fused qkv split in three),
 * and to (the differentiable dtype cast autocast relies on).
 *
 * Every tensor is contiguous, so reshape can share its input's storage,
 * while permute must copy (the backend's permute, given the output's dims
 * and each one's stride into the input) and cat and narrow copy slices
 * (the backend's copy_2d, converting dtypes on the way).
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

/* ------------------------------------------------------- the public ops */

/* The sizes asked for; one may be -1. */
amp_tensor *amp_reshape(amp_tensor *a, amp_shape shape)
{
    if (shape.ndim < 0 || shape.ndim > AMP_MAX_DIMS)
        return amp_fail_null(AMP_ERR_SHAPE, "reshape: %d dims (at most %d)", shape.ndim, AMP_MAX_DIMS);
    op_params p = {.reshape = {.shape = {.n = shape.ndim}}};
    for (int k = 0; k < shape.ndim; k++)
        p.reshape.shape.d[k] = shape.d[k];
    return op_apply(OP_RESHAPE, &a, 1, &p);
}

/* dims[k]: the input dim that becomes output dim k, one per dim of a. */
amp_tensor *amp_permute(amp_tensor *a, const int *dims)
{
    if (!dims)
        return amp_fail_null(AMP_ERR_ARG, "permute: NULL dims");
    if (!a)
        return NULL;
    op_params p = {.permute = {.dims = {.n = a->shape.ndim}}};
    for (int k = 0; k < a->shape.ndim; k++)
        p.permute.dims.d[k] = dims[k];
    return op_apply(OP_PERMUTE, &a, 1, &p);
}

amp_tensor *amp_transpose(amp_tensor *a, int dim0, int dim1)
{
    if (!a)
        return NULL;
    int nd = a->shape.ndim, d0 = shape_dim(nd, dim0), d1 = shape_dim(nd, dim1);
    if (d0 < 0 || d1 < 0)
        return amp_fail_null(AMP_ERR_ARG, "transpose: dims %d, %d out of range for %d dims", dim0, dim1,
                             nd);
    int perm[AMP_MAX_DIMS];
    for (int k = 0; k < nd; k++)
        perm[k] = k;
    perm[d0] = d1;
    perm[d1] = d0;
    return amp_permute(a, perm);
}

amp_tensor *amp_cat(amp_tensor *const *ts, int n, int dim)
{
    if (!ts || n < 1)
        return amp_fail_null(AMP_ERR_ARG, "cat: needs at least one tensor");
    const op_params p = {.dim = {.dim = dim}};
    return op_apply(OP_CAT, ts, n, &p);
}

amp_tensor *amp_narrow(amp_tensor *a, int dim, int64_t start, int64_t length)
{
    const op_params p = {.narrow = {.dim = dim, .start = start, .length = length}};
    return op_apply(OP_NARROW, &a, 1, &p);
}

amp_tensor *amp_to(amp_tensor *a, amp_dtype dt)
{
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "to: invalid dtype %d", (int)dt);
    const op_params p = {.to = {.dtype = dt}};
    return op_apply(OP_TO, &a, 1, &p);
}

/* -------------------------------------------------------------- reshape */

amp_tensor *reshape_forward(node *n, const reshape_params *p)
{
    amp_shape s;
    if (!reshape_infer(n, p, &s))
        return NULL;
    return tensor_view(n->in[0], s);
}

/* A view of gout: the engine owns gout until this node's backward is done,
 * and the gradient it accumulates is a tensor object of its own. */
amp_status reshape_backward(node *n, const reshape_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = tensor_view(gout, n->in[0]->shape);
    return gin[0] ? AMP_OK : amp_last_status();
}

/* -------------------------------------------------------------- permute */

/* dst (x's shape permuted by perm: dst dim k is x's dim perm[k]) from x,
 * on x's device. */
static amp_status permute_into(const amp_tensor *x, const int *perm, amp_tensor *dst, const char *who)
{
    int64_t istr[AMP_MAX_DIMS], od[AMP_MAX_DIMS], ist[AMP_MAX_DIMS], s = 1;
    for (int d = x->shape.ndim - 1; d >= 0; d--) {
        istr[d] = s;
        s *= x->shape.d[d];
    }
    for (int k = 0; k < x->shape.ndim; k++) {
        od[k] = x->shape.d[perm[k]];
        ist[k] = istr[perm[k]];
    }
    BACKEND_CALL(backend_of(tensor_device(x)), who, permute, tensor_ptr(x), tensor_ptr(dst),
                 amp_dtype_size(x->dtype), x->shape.ndim, od, ist);
    return AMP_OK;
}

amp_tensor *permute_forward(node *n, const permute_params *p)
{
    const amp_tensor *x = n->in[0];
    int perm[AMP_MAX_DIMS];
    if (!permute_infer(n, p, perm))
        return NULL;
    amp_shape s = x->shape;
    for (int k = 0; k < s.ndim; k++)
        s.d[k] = x->shape.d[perm[k]];
    amp_tensor *out = tensor_new_on(s, x->dtype, tensor_device(x));
    if (out && permute_into(x, perm, out, op_name(n)) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* The inverse permutation applied to gout. */
amp_status permute_backward(node *n, const permute_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    int perm[AMP_MAX_DIMS], inv[AMP_MAX_DIMS];
    if (!permute_infer(n, p, perm))
        return amp_last_status();
    for (int k = 0; k < gout->shape.ndim; k++)
        inv[perm[k]] = k;
    gin[0] = tensor_new_on(n->in[0]->shape, gout->dtype, tensor_device(gout));
    if (!gin[0])
        return amp_last_status();
    return permute_into(gout, inv, gin[0], op_name(n));
}

/* ------------------------------------------------------------------ cat */

/* The product of t's sizes from dim d on. */
static int64_t inner_from(const amp_tensor *t, int d)
{
    int64_t s = 1;
    for (int k = d; k < t->shape.ndim; k++)
        s *= t->shape.d[k];
    return s;
}

amp_tensor *cat_forward(node *n, const dim_params *p)
{
    amp_shape s;
    amp_dtype dt;
    int dim;
    if (!cat_infer(n, p, &s, &dt, &dim))
        return NULL;
    amp_device dev = tensor_device(n->in[0]);
    const amp_backend *be = backend_of(dev);
    amp_tensor *out = tensor_new_on(s, dt, dev);
    if (!out)
        return NULL;
    const int64_t inner_out = inner_from(out, dim);
    const int64_t outer = out->numel ? out->numel / inner_out : 0;
    int64_t off = 0;
    amp_status st = be->copy_2d ? AMP_OK : backend_missing(be, op_name(n), "copy_2d");
    for (int i = 0; i < n->n_in && st == AMP_OK; i++) {
        const amp_tensor *t = n->in[i];
        const int64_t inner = inner_from(t, dim);
        if (outer > 0 && inner > 0)
            st = be->copy_2d(tensor_ptr(t), t->dtype, inner, 0, tensor_ptr(out), dt, inner_out, off, outer, inner);
        off += inner;
    }
    if (st != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* Each input's slice of gout, in that input's dtype. */
amp_status cat_backward(node *n, const dim_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    const int dim = shape_dim(gout->shape.ndim, (int)p->dim);
    const int64_t inner_out = inner_from(gout, dim);
    const int64_t outer = inner_out ? gout->numel / inner_out : 0;
    const amp_backend *be = backend_of(tensor_device(gout));
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        const amp_tensor *t = n->in[i];
        const int64_t inner = inner_from(t, dim);
        if (in_needs_grad(n, i)) {
            amp_tensor *g = tensor_new_on(t->shape, t->dtype, tensor_device(gout));
            if (!g)
                return amp_last_status();
            gin[i] = g;
            if (outer > 0 && inner > 0)
                BACKEND_CALL(be, op_name(n), copy_2d, tensor_ptr(gout), gout->dtype, inner_out, off, tensor_ptr(g),
                             t->dtype, inner, 0, outer, inner);
        }
        off += inner;
    }
    return AMP_OK;
}

/* --------------------------------------------------------------- narrow */

/* narrow(x, dim, start, len) as rows: outer rows of the input, each
 * x.d[dim] * inner elements long, of which len * inner from start * inner
 * are the result's row. */
typedef struct {
    int64_t outer, in_row, out_row, off;
} narrow_rows;

static narrow_rows narrow_rows_of(const amp_tensor *x, int dim, int64_t start, int64_t len)
{
    const int64_t inner = inner_from(x, dim + 1);
    narrow_rows r = {0, x->shape.d[dim] * inner, len * inner, start * inner};
    r.outer = r.in_row ? x->numel / r.in_row : 0;
    return r;
}

amp_tensor *narrow_forward(node *n, const narrow_params *p)
{
    amp_shape s;
    int dim;
    if (!narrow_infer(n, p, &s, &dim))
        return NULL;
    const amp_tensor *x = n->in[0];
    amp_tensor *out = tensor_new_on(s, x->dtype, tensor_device(x));
    if (!out)
        return NULL;
    const narrow_rows r = narrow_rows_of(x, dim, p->start, p->length);
    const amp_backend *be = backend_of(tensor_device(x));
    amp_status st = be->copy_2d ? AMP_OK : backend_missing(be, op_name(n), "copy_2d");
    if (st == AMP_OK && r.outer > 0 && r.out_row > 0)
        st = be->copy_2d(tensor_ptr(x), x->dtype, r.in_row, r.off, tensor_ptr(out), x->dtype, r.out_row, 0, r.outer,
                         r.out_row);
    if (st != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* gout in its slice of a zero tensor of the input's shape. */
amp_status narrow_backward(node *n, const narrow_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    const amp_tensor *x = n->in[0];
    const int dim = shape_dim(x->shape.ndim, (int)p->dim);
    amp_tensor *g = tensor_zeros_on(x->shape, gout->dtype, tensor_device(gout));
    if (!g)
        return amp_last_status();
    gin[0] = g;
    const narrow_rows r = narrow_rows_of(x, dim, p->start, p->length);
    if (r.outer > 0 && r.out_row > 0)
        BACKEND_CALL(backend_of(tensor_device(gout)), op_name(n), copy_2d, tensor_ptr(gout), gout->dtype, r.out_row,
                     0, tensor_ptr(g), gout->dtype, r.in_row, r.off, r.outer, r.out_row);
    return AMP_OK;
}

/* ------------------------------------------------------------------- to */

amp_tensor *to_forward(node *n, const to_params *p)
{
    const amp_dtype dt = p->dtype;
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "%s: invalid dtype %d", op_name(n), (int)dt);
    const amp_tensor *kept = p->from_kept_copy ? autocast_kept_copy() : NULL;
    if (kept && kept->dtype == dt && shape_equal(kept->shape, n->in[0]->shape))
        return tensor_view(kept, kept->shape); /* autocast's kept cast of this weight */
    return tensor_convert(n->in[0], dt);
}

/* The gradient goes back in the input's dtype; a cast to or from an
 * integer dtype carries none. */
amp_status to_backward(node *n, const to_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    const amp_tensor *x = n->in[0];
    if (!in_needs_grad(n, 0) || !amp_dtype_is_float(x->dtype) || !amp_dtype_is_float(gout->dtype))
        return AMP_OK;
    if (gout->dtype == x->dtype) { /* made widened already (autograd_grad_dtype): handed on */
        gin[0] = amp_tensor_retain((amp_tensor *)gout);
        return AMP_OK;
    }
    gin[0] = tensor_convert(gout, x->dtype);
    return gin[0] ? AMP_OK : amp_last_status();
}

/* ----------------------------------------------------------------- cost */

/* Every op here moves data (cost.c): 0 FLOPs, the bytes read and written. */
OP_COST_IS(reshape_cost, reshape, cost_moves_data)
OP_COST_IS(permute_cost, permute, cost_moves_data)
OP_COST_IS(cat_cost, dim, cost_moves_data)
OP_COST_IS(narrow_cost, narrow, cost_moves_data)
OP_COST_IS(to_cost, to, cost_moves_data)
