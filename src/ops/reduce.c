/*
 * reduce.c - sum and mean over a list of dims (keepdim or not), and
 * argmax along one dim.
 *
 * Sums accumulate in double (reduce_sum in broadcast.c), so an f32 sum of
 * millions of elements is the correctly rounded sum in practice, and the
 * result does not depend on the thread count. The result has the input's
 * dtype, rounded once. Backward broadcasts the gradient back over the
 * reduced dims (divided by the count for mean).
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

static amp_tensor *reduce_forward(node *n, bool mean)
{
    if (!op_require_float(n, 0))
        return NULL;
    reduce_dims r;
    if (!reduce_infer(n, &r))
        return NULL;
    ew_arg a = ew_arg_of(n->in[0]);
    /* mean of nothing is 0 * inf = NaN, as PyTorch's. */
    double scale = mean ? 1.0 / (double)r.count : 1.0;
    return reduce_sum(&a, r.mask, scale, r.out, n->in[0]->dtype);
}

/* gout (shaped as the kept dims) broadcast back over the reduced dims,
 * divided by the count for mean (PyTorch divides, in the grad's dtype). */
static amp_status reduce_backward(node *n, const amp_tensor *gout, amp_tensor **gin, bool mean)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    reduce_dims r;
    if (!reduce_infer(n, &r))
        return fail_status();
    const amp_tensor *x = n->in[0];
    ew_arg g = {tensor_ptr(gout), gout->dtype, r.keep};
    float s = mean ? (float)r.count : 1.0f;
    gin[0] = ew_new(x->shape, x->dtype, &g, 1, mean ? ew_divide : ew_scale, &s);
    return gin[0] ? AMP_OK : fail_status();
}

amp_tensor *sum_forward(node *n) { return reduce_forward(n, false); }
amp_tensor *mean_forward(node *n) { return reduce_forward(n, true); }

amp_status sum_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return reduce_backward(n, gout, gin, false);
}

amp_status mean_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return reduce_backward(n, gout, gin, true);
}

/* ----------------------------------------------------------------- argmax */

/* The first index of the largest value in each run of len values spaced
 * stride apart; a NaN counts as larger than anything (PyTorch's rule), so
 * the first NaN wins. */
static int64_t argmax_float(const float *x, int64_t len, int64_t stride)
{
    int64_t best = 0;
    float bv = x[0];
    for (int64_t k = 1; k < len && bv == bv; k++) {
        float v = x[k * stride];
        if (v > bv || v != v) {
            bv = v;
            best = k;
        }
    }
    return best;
}

static int64_t argmax_int(const void *x, amp_dtype dt, int64_t base, int64_t len, int64_t stride)
{
    int64_t best = 0, bv = load_i64(x, dt, (size_t)base);
    for (int64_t k = 1; k < len; k++) {
        int64_t v = load_i64(x, dt, (size_t)(base + k * stride));
        if (v > bv) {
            bv = v;
            best = k;
        }
    }
    return best;
}

/* p.i[0] = dim. The result drops that dim and is i64. */
amp_tensor *argmax_forward(node *n)
{
    const amp_tensor *x = n->in[0];
    int nd = x->shape.ndim;
    int64_t d = n->p.i[0];
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
    amp_tensor *out = tensor_new(os, AMP_I64);
    if (!out)
        return NULL;
    int64_t *o = tensor_ptr(out);
    bool is_float = amp_dtype_is_float(x->dtype);
    float *tmp = NULL;
    const float *xf = is_float ? tensor_as_f32(x, &tmp) : NULL;
    if (is_float && !xf) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "argmax: out of memory");
    }
    int64_t m = outer * inner;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (m * len >= EW_PARALLEL_MIN) schedule(static))
    for (int64_t j = 0; j < m; j++) {
        int64_t base = (j / inner) * len * inner + j % inner;
        o[j] = is_float ? argmax_float(xf + base, len, inner)
                        : argmax_int(tensor_ptr(x), x->dtype, base, len, inner);
    }
    amp_free(tmp);
    return out;
}
