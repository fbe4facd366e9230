/*
 * reduce.c - sum and mean over a list of dims (keepdim or not), and
 * argmax along one dim.
 *
 * Sums accumulate in double (the backend's reduce_sum), so an f32 sum of
 * millions of elements is the correctly rounded sum in practice, and the
 * result does not depend on the thread count. The result has the input's
 * dtype, rounded once. Backward broadcasts the gradient back over the
 * reduced dims (divided by the count for mean).
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

/* ------------------------------------------------------- the public ops */

/* sum, mean: reduce_params, the dims as given (ndims == 0 reduces over
 * all dims). */
static amp_tensor *reduce(int op, amp_tensor *a, int ndims, const int *dims, bool keepdim)
{
    if (ndims < 0 || ndims > AMP_MAX_DIMS || (ndims > 0 && !dims))
        return amp_fail_null(AMP_ERR_ARG, "%s: bad list of %d dims", op_table[op].name, ndims);
    op_params p = {.reduce = {.dims = {.n = ndims}, .keepdim = keepdim}};
    for (int k = 0; k < ndims; k++)
        p.reduce.dims.d[k] = dims[k];
    return op_apply(op, &a, 1, &p);
}

amp_tensor *amp_sum(amp_tensor *a, int ndims, const int *dims, bool keepdim)
{
    if (ndims == 0)
        return amp_fail_null(AMP_ERR_ARG, "sum: no dims given (use amp_sum_all)");
    return reduce(OP_SUM, a, ndims, dims, keepdim);
}

amp_tensor *amp_mean(amp_tensor *a, int ndims, const int *dims, bool keepdim)
{
    if (ndims == 0)
        return amp_fail_null(AMP_ERR_ARG, "mean: no dims given (use amp_mean_all)");
    return reduce(OP_MEAN, a, ndims, dims, keepdim);
}

amp_tensor *amp_sum_all(amp_tensor *a) { return reduce(OP_SUM, a, 0, NULL, false); }
amp_tensor *amp_mean_all(amp_tensor *a) { return reduce(OP_MEAN, a, 0, NULL, false); }

amp_tensor *amp_argmax(amp_tensor *a, int dim)
{
    const op_params p = {.dim = {.dim = dim}};
    return op_apply(OP_ARGMAX, &a, 1, &p);
}

/* sum and mean (the node's row says which). */
amp_tensor *reduce_forward(node *n, const reduce_params *p)
{
    const bool mean = n->op == OP_MEAN;
    if (!op_require_float(n, 0))
        return NULL;
    reduce_dims r;
    if (!reduce_infer(n, p, &r))
        return NULL;
    ew_arg a = ew_arg_of(n->in[0]);
    /* mean of nothing is 0 * inf = NaN, as PyTorch's. */
    double scale = mean ? 1.0 / (double)r.count : 1.0;
    return op_reduce_sum(&a, tensor_device(n->in[0]), r.mask, scale, r.out, n->in[0]->dtype);
}

/* gout (shaped as the kept dims) broadcast back over the reduced dims,
 * divided by the count for mean (PyTorch divides, in the grad's dtype). */
amp_status reduce_backward(node *n, const reduce_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    const bool mean = n->op == OP_MEAN;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    reduce_dims r;
    if (!reduce_infer(n, p, &r))
        return fail_status();
    const amp_tensor *x = n->in[0];
    ew_arg g = {tensor_ptr(gout), gout->dtype, r.keep};
    float s = mean ? (float)r.count : 1.0f;
    gin[0] = op_pointwise(mean ? AMP_PW_DIV_S : AMP_PW_MUL_S, x->shape, x->dtype, tensor_device(x), &g, 1, s);
    return gin[0] ? AMP_OK : fail_status();
}

/* sum, mean: 1 FLOP per input element (the adds; mean's one scale per
 * result is not counted); backward 1 per input element (the broadcast
 * gradient). */
op_cost reduce_cost(const node *n, const reduce_params *p, bool backward)
{
    (void)p;
    return (op_cost){(double)n->in[0]->numel, cost_bytes(n, backward)};
}

/* ----------------------------------------------------------------- argmax */

/* The index of the largest element along p->dim; the result drops that
 * dim and is i64. */
amp_tensor *argmax_forward(node *n, const dim_params *p)
{
    const amp_tensor *x = n->in[0];
    int nd = x->shape.ndim;
    int64_t d = p->dim;
    int range = nd > 0 ? nd : 1;
    if (d < -range || d >= range)
        return amp_fail_null(AMP_ERR_ARG, "argmax: dim %lld is out of range for a tensor of %d dims",
                             (long long)d, nd);
    int dim = (int)(d < 0 ? d + range : d);
    int64_t len = nd > 0 ? x->shape.d[dim] : 1, outer = 1, inner = 1;
    if (len == 0)
        return op_fail_shapes(n, "cannot take argmax over a dim of size 0");
    amp_shape os = {0, {0}};
    for (int i = 0; i < nd; i++) {
        if (i < dim)
            outer *= x->shape.d[i];
        if (i > dim)
            inner *= x->shape.d[i];
        if (i != dim)
            os.d[os.ndim++] = x->shape.d[i];
    }
    amp_tensor *out = tensor_new_on(os, AMP_I64, tensor_device(x));
    if (!out)
        return NULL;
    const amp_backend *be = backend_of(tensor_device(x));
    amp_status st = be->argmax ? be->argmax(tensor_ptr(x), x->dtype, outer, len, inner, tensor_ptr(out))
                               : backend_missing(be, "argmax", "argmax");
    if (st != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* Never called: an i64 result records no node (op_run). */
amp_status argmax_backward(node *n, const dim_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p, (void)gout, (void)gin;
    return amp_set_error(AMP_ERR_STATE, "%s: has no gradient", op_name(n));
}

/* argmax: counted with the rows that move data (cost.c): 0 FLOPs. */
OP_COST_IS(argmax_cost, dim, cost_moves_data)
