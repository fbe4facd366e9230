/*
 * reduce.c (CUDA) - sum and mean over a list of dims, mse_loss, and argmax
 * on CUDA tensors, with src/ops/reduce.c's and softmax.c's checks,
 * messages and results (sums in double, one rounding).
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"

/* Which dims a reduction covers, from p.i[0] = keepdim, p.i[1] = number of
 * dims (0 = all), p.i[2..] = the dims (src/ops/reduce.c's parse_dims). */
typedef struct {
    unsigned mask;
    amp_shape out, keep;
    int64_t count;
} reduce_dims;

static bool parse_dims(const node *n, reduce_dims *r)
{
    const amp_tensor *x = n->in[0];
    int nd = x->shape.ndim, ndims = (int)n->p.i[1];
    bool keepdim = n->p.i[0] != 0;
    int range = nd > 0 ? nd : 1;
    r->mask = ndims == 0 ? (1u << nd) - 1u : 0;
    for (int k = 0; k < ndims; k++) {
        int64_t d = n->p.i[2 + k];
        if (d < -range || d >= range) {
            amp_fail_null(AMP_ERR_ARG, "%s: dim %lld is out of range for a tensor of %d dims", op_name(n),
                          (long long)d, nd);
            return false;
        }
        int dd = (int)(d < 0 ? d + range : d);
        if (r->mask & (1u << dd)) {
            amp_fail_null(AMP_ERR_ARG, "%s: dim %d appears more than once in the list of dims", op_name(n), dd);
            return false;
        }
        r->mask |= 1u << dd;
    }
    if (nd == 0)
        r->mask = 0;
    r->out.ndim = 0;
    r->keep = x->shape;
    r->count = 1;
    for (int i = 0; i < nd; i++) {
        bool red = (r->mask >> i) & 1u;
        if (red) {
            r->count *= x->shape.d[i];
            r->keep.d[i] = 1;
        }
        if (!red || keepdim)
            r->out.d[r->out.ndim++] = red ? 1 : x->shape.d[i];
    }
    return true;
}

static amp_tensor *reduce_forward(node *n, bool mean)
{
    if (!op_require_float(n, 0))
        return NULL;
    reduce_dims r;
    if (!parse_dims(n, &r))
        return NULL;
    cu_arg a = cu_arg_of(n->in[0]);
    return cu_reduce(&a, r.mask, mean ? 1.0 / (double)r.count : 1.0, r.out, n->in[0]->dtype);
}

static amp_status reduce_backward(node *n, const amp_tensor *gout, amp_tensor **gin, bool mean)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    reduce_dims r;
    if (!parse_dims(n, &r))
        return fail_status();
    const amp_tensor *x = n->in[0];
    cu_arg g = {tensor_ptr(gout), gout->dtype, r.keep};
    gin[0] = mean ? cu_ew(CEW_DIV_S, x->shape, x->dtype, &g, 1, (float)r.count)
                  : cu_ew(CEW_MUL_S, x->shape, x->dtype, &g, 1, 1.0f);
    return gin[0] ? AMP_OK : fail_status();
}

amp_tensor *cu_sum_forward(node *n) { return reduce_forward(n, false); }
amp_tensor *cu_mean_forward(node *n) { return reduce_forward(n, true); }

amp_status cu_sum_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return reduce_backward(n, gout, gin, false);
}

amp_status cu_mean_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return reduce_backward(n, gout, gin, true);
}

/* ------------------------------------------------------------- mse_loss */

amp_tensor *cu_mse_loss_forward(node *n)
{
    if (!op_require_float(n, 0) || !op_require_float(n, 1))
        return NULL;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    if (!shape_equal(a->shape, b->shape))
        return op_fail_shapes(n, "input and target must have the same shape");
    cu_arg args[2] = {cu_arg_of(a), cu_arg_of(b)};
    amp_tensor *sq = cu_ew(CEW_SQDIFF, a->shape, AMP_F32, args, 2, 0.0f);
    if (!sq)
        return NULL;
    cu_arg s = cu_arg_of(sq);
    unsigned all = (1u << a->shape.ndim) - 1u;
    amp_tensor *out = cu_reduce(&s, all, 1.0 / (double)a->numel, (amp_shape){0, {0}},
                                promote_float(a->dtype, b->dtype));
    amp_tensor_free(sq);
    return out;
}

/* d/da = 2/numel * (a - b) * g, with g read on the device. */
amp_status cu_mse_loss_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *a = n->in[0];
    const float norm = (float)(2.0 / (double)a->numel);
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        cu_arg args[3] = {cu_arg_of(n->in[i]), cu_arg_of(n->in[1 - i]), {tensor_ptr(gout), gout->dtype, {0, {0}}}};
        if (!(gin[i] = cu_ew(CEW_MSE_GRAD, a->shape, n->in[i]->dtype, args, 3, norm)))
            return fail_status();
    }
    return AMP_OK;
}

/* --------------------------------------------------------------- argmax */

bool cu_view_along(const node *n, cu_dim_view *v)
{
    const amp_tensor *x = n->in[0];
    int nd = x->shape.ndim, range = nd > 0 ? nd : 1;
    int64_t d = n->p.i[0];
    if (d < -range || d >= range) {
        amp_fail_null(AMP_ERR_ARG, "%s: dim %lld is out of range for a tensor of %d dims", op_name(n),
                      (long long)d, nd);
        return false;
    }
    int dim = (int)(d < 0 ? d + range : d);
    *v = (cu_dim_view){1, nd > 0 ? x->shape.d[dim] : 1, 1};
    for (int i = 0; i < nd; i++) {
        if (i < dim)
            v->outer *= x->shape.d[i];
        if (i > dim)
            v->inner *= x->shape.d[i];
    }
    return true;
}

amp_tensor *cu_argmax_forward(node *n)
{
    const amp_tensor *x = n->in[0];
    cu_dim_view v;
    if (!cu_view_along(n, &v))
        return NULL;
    if (v.len == 0)
        return op_fail_shapes(n, "cannot take argmax over a dim of size 0");
    int nd = x->shape.ndim, dim = (int)(n->p.i[0] < 0 ? n->p.i[0] + (nd > 0 ? nd : 1) : n->p.i[0]);
    amp_shape os = {0, {0}};
    for (int i = 0; i < nd; i++)
        if (i != dim)
            os.d[os.ndim++] = x->shape.d[i];
    amp_tensor *out = cu_new(os, AMP_I64);
    if (out && cuda_argmax(tensor_ptr(x), x->dtype, v.outer, v.len, v.inner, tensor_ptr(out)) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

#else
typedef int ampc_ops_cuda_reduce_unused; /* ISO C wants a declaration in every file */
#endif
