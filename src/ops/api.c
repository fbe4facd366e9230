/*
 * api.c - the public op functions: each packs its arguments into the
 * table's uniform form and calls op_apply. Argument checks that need the
 * tensors live in the forwards; those that need only the scalars live here.
 */
#include "ops/ops.h"

static amp_tensor *unary(int op, amp_tensor *a) { return op_apply(op, &a, 1, NULL); }

static amp_tensor *binary(int op, amp_tensor *a, amp_tensor *b)
{
    amp_tensor *in[2] = {a, b};
    return op_apply(op, in, 2, NULL);
}

static amp_tensor *with_scalar(int op, amp_tensor *a, double s)
{
    op_params p = {.f = {s}};
    return op_apply(op, &a, 1, &p);
}

amp_tensor *amp_add(amp_tensor *a, amp_tensor *b) { return binary(OP_ADD, a, b); }
amp_tensor *amp_sub(amp_tensor *a, amp_tensor *b) { return binary(OP_SUB, a, b); }
amp_tensor *amp_mul(amp_tensor *a, amp_tensor *b) { return binary(OP_MUL, a, b); }
amp_tensor *amp_div(amp_tensor *a, amp_tensor *b) { return binary(OP_DIV, a, b); }
amp_tensor *amp_add_scalar(amp_tensor *a, double s) { return with_scalar(OP_ADD_SCALAR, a, s); }
/* a - s and a + (-s) are the same IEEE operation. */
amp_tensor *amp_sub_scalar(amp_tensor *a, double s) { return with_scalar(OP_ADD_SCALAR, a, -s); }
amp_tensor *amp_mul_scalar(amp_tensor *a, double s) { return with_scalar(OP_MUL_SCALAR, a, s); }
amp_tensor *amp_div_scalar(amp_tensor *a, double s) { return with_scalar(OP_DIV_SCALAR, a, s); }
amp_tensor *amp_neg(amp_tensor *a) { return unary(OP_NEG, a); }
amp_tensor *amp_relu(amp_tensor *a) { return unary(OP_RELU, a); }
amp_tensor *amp_tanh(amp_tensor *a) { return unary(OP_TANH, a); }
amp_tensor *amp_sigmoid(amp_tensor *a) { return unary(OP_SIGMOID, a); }
amp_tensor *amp_silu(amp_tensor *a) { return unary(OP_SILU, a); }
amp_tensor *amp_exp(amp_tensor *a) { return unary(OP_EXP, a); }
amp_tensor *amp_log(amp_tensor *a) { return unary(OP_LOG, a); }
amp_tensor *amp_pow_scalar(amp_tensor *a, double p) { return with_scalar(OP_POW_SCALAR, a, p); }

amp_tensor *amp_gelu(amp_tensor *a, amp_gelu_approx approx)
{
    if (approx != AMP_GELU_EXACT && approx != AMP_GELU_TANH)
        return amp_fail_null(AMP_ERR_ARG, "gelu: unknown approximation %d", (int)approx);
    op_params p = {.i = {approx}};
    return op_apply(OP_GELU, &a, 1, &p);
}

amp_tensor *amp_matmul(amp_tensor *a, amp_tensor *b) { return binary(OP_MATMUL, a, b); }

/* i[0] = 1 when a bias is given (it is then input 2); i[1]: the
 * activation fused after the product, 1 = relu (op_linear_relu), 2 = gelu
 * with the tanh approximation (op_linear_gelu). */
amp_tensor *amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *bias)
{
    amp_tensor *in[3] = {x, w, bias};
    op_params p = {.i = {bias != NULL}};
    return op_apply(OP_LINEAR, in, bias ? 3 : 2, &p);
}

amp_tensor *op_linear_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias)
{
    amp_tensor *in[3] = {x, w, bias};
    op_params p = {.i = {bias != NULL, 1}};
    return op_apply(OP_LINEAR, in, bias ? 3 : 2, &p);
}

amp_tensor *op_linear_gelu(amp_tensor *x, amp_tensor *w, amp_tensor *bias)
{
    amp_tensor *in[3] = {x, w, bias};
    op_params p = {.i = {bias != NULL, 2}};
    return op_apply(OP_LINEAR, in, bias ? 3 : 2, &p);
}

/* i[0] = keepdim, i[1] = number of dims, i[2..] = the dims (unnormalised;
 * ndims == 0 reduces over all dims). */
static amp_tensor *reduce(int op, amp_tensor *a, int ndims, const int *dims, bool keepdim)
{
    if (ndims < 0 || ndims > AMP_MAX_DIMS - 2 || (ndims > 0 && !dims))
        return amp_fail_null(AMP_ERR_ARG, "%s: bad list of %d dims", op_table[op].name, ndims);
    op_params p = {.i = {keepdim, ndims}};
    for (int k = 0; k < ndims; k++)
        p.i[2 + k] = dims[k];
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

/* i[0] = dim */
amp_tensor *amp_softmax(amp_tensor *a, int dim)
{
    op_params p = {.i = {dim}};
    return op_apply(OP_SOFTMAX, &a, 1, &p);
}

amp_tensor *amp_log_softmax(amp_tensor *a, int dim)
{
    op_params p = {.i = {dim}};
    return op_apply(OP_LOG_SOFTMAX, &a, 1, &p);
}

amp_tensor *amp_argmax(amp_tensor *a, int dim)
{
    op_params p = {.i = {dim}};
    return op_apply(OP_ARGMAX, &a, 1, &p);
}

/* i[0] = ignore_index */
amp_tensor *amp_cross_entropy_ignore(amp_tensor *logits, amp_tensor *labels, int64_t ignore_index)
{
    amp_tensor *in[2] = {logits, labels};
    op_params p = {.i = {ignore_index}};
    return op_apply(OP_CROSS_ENTROPY, in, 2, &p);
}

amp_tensor *amp_cross_entropy(amp_tensor *logits, amp_tensor *labels)
{
    return amp_cross_entropy_ignore(logits, labels, AMP_IGNORE_INDEX);
}

amp_tensor *amp_mse_loss(amp_tensor *a, amp_tensor *b) { return binary(OP_MSE_LOSS, a, b); }

/* i[0] = normalized_ndim, i[1] = has weight, i[2] = has bias; f[0] = eps.
 * Inputs: x, then weight if given, then bias if given. */
amp_tensor *amp_layer_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, amp_tensor *bias,
                           double eps)
{
    if (!(eps >= 0))
        return amp_fail_null(AMP_ERR_ARG, "layer_norm: eps %g is negative", eps);
    amp_tensor *in[3] = {x};
    int n = 1;
    if (weight)
        in[n++] = weight;
    if (bias)
        in[n++] = bias;
    op_params p = {.i = {normalized_ndim, weight != NULL, bias != NULL}, .f = {eps}};
    return op_apply(OP_LAYER_NORM, in, n, &p);
}

amp_tensor *amp_embedding(amp_tensor *weight, amp_tensor *indices) { return binary(OP_EMBEDDING, weight, indices); }

/* f[0] = p; i[0] = RNG seed, i[1] = first Philox counter (reserved here so
 * backward can regenerate the same mask). */
amp_tensor *amp_dropout(amp_tensor *a, double p, bool training)
{
    if (!(p >= 0 && p <= 1))
        return amp_fail_null(AMP_ERR_ARG, "dropout: probability %g is not in [0, 1]", p);
    if (!training || p == 0)
        p = 0;
    op_params prm = {.f = {p}};
    if (p > 0 && a) {
        uint64_t seed;
        uint64_t ctr = amp_rng_reserve(((uint64_t)a->numel + 3) / 4, &seed);
        prm.i[0] = (int64_t)seed;
        prm.i[1] = (int64_t)ctr;
    }
    return op_apply(OP_DROPOUT, &a, 1, &prm);
}

/* i[0] = stride, i[1] = padding, i[2] = has bias, i[3] = 1: a relu fused
 * into the epilogue (op_conv2d_relu). Inputs: x, w[, bias]. */
static amp_tensor *conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding, int act)
{
    if (stride < 1 || padding < 0)
        return amp_fail_null(AMP_ERR_ARG, "conv2d: stride %d must be >= 1 and padding %d >= 0", stride,
                             padding);
    amp_tensor *in[3] = {x, w, bias};
    op_params p = {.i = {stride, padding, bias != NULL, act}};
    return op_apply(OP_CONV2D, in, bias ? 3 : 2, &p);
}

amp_tensor *amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding)
{
    return conv2d(x, w, bias, stride, padding, 0);
}

amp_tensor *op_conv2d_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding)
{
    return conv2d(x, w, bias, stride, padding, 1);
}

/* i[0] = kernel, i[1] = stride, i[2] = padding */
static amp_tensor *pool(int op, amp_tensor *x, int kernel, int stride, int padding)
{
    if (stride == 0)
        stride = kernel;
    if (kernel < 1 || stride < 1 || padding < 0 || padding * 2 > kernel)
        return amp_fail_null(AMP_ERR_ARG,
                             "%s: kernel %d, stride %d, padding %d (need kernel >= 1, stride >= 1, "
                             "0 <= padding <= kernel/2)",
                             op_table[op].name, kernel, stride, padding);
    op_params p = {.i = {kernel, stride, padding}};
    return op_apply(op, &x, 1, &p);
}

amp_tensor *amp_max_pool2d(amp_tensor *x, int kernel, int stride, int padding)
{
    return pool(OP_MAX_POOL2D, x, kernel, stride, padding);
}

amp_tensor *amp_avg_pool2d(amp_tensor *x, int kernel, int stride, int padding)
{
    return pool(OP_AVG_POOL2D, x, kernel, stride, padding);
}

/* i[0] = ndim, i[1..] = the requested sizes (one may be -1). */
amp_tensor *amp_reshape(amp_tensor *a, amp_shape shape)
{
    if (shape.ndim < 0 || shape.ndim > AMP_MAX_DIMS - 1)
        return amp_fail_null(AMP_ERR_SHAPE, "reshape: %d dims (at most %d)", shape.ndim,
                             AMP_MAX_DIMS - 1);
    op_params p = {.i = {shape.ndim}};
    for (int k = 0; k < shape.ndim; k++)
        p.i[1 + k] = shape.d[k];
    return op_apply(OP_RESHAPE, &a, 1, &p);
}

/* i[k] = the input dim that becomes output dim k. */
amp_tensor *amp_permute(amp_tensor *a, const int *dims)
{
    if (!dims)
        return amp_fail_null(AMP_ERR_ARG, "permute: NULL dims");
    if (!a)
        return NULL;
    op_params p = {0};
    for (int k = 0; k < a->shape.ndim; k++)
        p.i[k] = dims[k];
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

/* i[0] = dim */
amp_tensor *amp_cat(amp_tensor *const *ts, int n, int dim)
{
    if (!ts || n < 1)
        return amp_fail_null(AMP_ERR_ARG, "cat: needs at least one tensor");
    op_params p = {.i = {dim}};
    return op_apply(OP_CAT, ts, n, &p);
}

/* i[0] = dim, i[1] = start, i[2] = length */
amp_tensor *amp_narrow(amp_tensor *a, int dim, int64_t start, int64_t length)
{
    op_params p = {.i = {dim, start, length}};
    return op_apply(OP_NARROW, &a, 1, &p);
}

/* i[0] = target dtype */
amp_tensor *amp_to(amp_tensor *a, amp_dtype dt)
{
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "to: invalid dtype %d", (int)dt);
    op_params p = {.i = {dt}};
    return op_apply(OP_TO, &a, 1, &p);
}
