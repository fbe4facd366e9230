/*
 * api.c - the public op functions: each puts its arguments in its row's
 * params struct (op_params.h) and calls op_apply. Argument checks that
 * need the tensors live in the forwards; those that need only the scalars
 * live here.
 */
#include "ops/ops.h"

static amp_tensor *unary(int op, amp_tensor *a) { return op_apply(op, &a, 1, NULL); }

static amp_tensor *binary(int op, amp_tensor *a, amp_tensor *b)
{
    amp_tensor *in[2] = {a, b};
    return op_apply(op, in, 2, NULL);
}

/* add_scalar, mul_scalar, div_scalar: scalar_params. */
static amp_tensor *with_scalar(int op, amp_tensor *a, double s)
{
    const op_params p = {.scalar = {.scalar = s}};
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
amp_tensor *amp_pow_scalar(amp_tensor *a, double exponent)
{
    const op_params p = {.pow_scalar = {.exponent = exponent}};
    return op_apply(OP_POW_SCALAR, &a, 1, &p);
}

amp_tensor *amp_gelu(amp_tensor *a, amp_gelu_approx approx)
{
    if (approx != AMP_GELU_EXACT && approx != AMP_GELU_TANH)
        return amp_fail_null(AMP_ERR_ARG, "gelu: unknown approximation %d", (int)approx);
    const op_params p = {.gelu = {.approximate = approx}};
    return op_apply(OP_GELU, &a, 1, &p);
}

amp_tensor *amp_matmul(amp_tensor *a, amp_tensor *b) { return binary(OP_MATMUL, a, b); }

/* The bias, when given, is input 2; act: the activation fused after the
 * product (op_linear_relu, op_linear_gelu). */
static amp_tensor *linear(amp_tensor *x, amp_tensor *w, amp_tensor *bias, op_act act)
{
    amp_tensor *in[3] = {x, w, bias};
    const op_params p = {.linear = {.has_bias = bias != NULL, .act = act}};
    return op_apply(OP_LINEAR, in, bias ? 3 : 2, &p);
}

amp_tensor *amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *bias) { return linear(x, w, bias, OP_ACT_NONE); }

amp_tensor *op_linear_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias)
{
    return linear(x, w, bias, OP_ACT_RELU);
}

amp_tensor *op_linear_gelu(amp_tensor *x, amp_tensor *w, amp_tensor *bias)
{
    return linear(x, w, bias, OP_ACT_GELU_TANH);
}

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

/* softmax, log_softmax, argmax: dim_params. */
static amp_tensor *along(int op, amp_tensor *a, int dim)
{
    const op_params p = {.dim = {.dim = dim}};
    return op_apply(op, &a, 1, &p);
}

amp_tensor *amp_softmax(amp_tensor *a, int dim) { return along(OP_SOFTMAX, a, dim); }
amp_tensor *amp_log_softmax(amp_tensor *a, int dim) { return along(OP_LOG_SOFTMAX, a, dim); }
amp_tensor *amp_argmax(amp_tensor *a, int dim) { return along(OP_ARGMAX, a, dim); }

amp_tensor *amp_cross_entropy_ignore(amp_tensor *logits, amp_tensor *labels, int64_t ignore_index)
{
    amp_tensor *in[2] = {logits, labels};
    const op_params p = {.cross_entropy = {.ignore_index = ignore_index}};
    return op_apply(OP_CROSS_ENTROPY, in, 2, &p);
}

amp_tensor *amp_cross_entropy(amp_tensor *logits, amp_tensor *labels)
{
    return amp_cross_entropy_ignore(logits, labels, AMP_IGNORE_INDEX);
}

amp_tensor *amp_mse_loss(amp_tensor *a, amp_tensor *b) { return binary(OP_MSE_LOSS, a, b); }

/* Inputs: x, then weight if given, then bias if given. */
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
    const op_params p = {.layer_norm = {.normalized_ndim = normalized_ndim,
                                        .has_weight = weight != NULL,
                                        .has_bias = bias != NULL,
                                        .eps = eps}};
    return op_apply(OP_LAYER_NORM, in, n, &p);
}

amp_tensor *amp_embedding(amp_tensor *weight, amp_tensor *indices) { return binary(OP_EMBEDDING, weight, indices); }

/* The seed and the first Philox counter of the mask are reserved here, so
 * backward can make the same mask again. */
amp_tensor *amp_dropout(amp_tensor *a, double p, bool training)
{
    if (!(p >= 0 && p <= 1))
        return amp_fail_null(AMP_ERR_ARG, "dropout: probability %g is not in [0, 1]", p);
    if (!training || p == 0)
        p = 0;
    op_params prm = {.dropout = {.p = p}};
    if (p > 0 && a)
        prm.dropout.counter = amp_rng_reserve(((uint64_t)a->numel + 3) / 4, &prm.dropout.seed);
    return op_apply(OP_DROPOUT, &a, 1, &prm);
}

/* Inputs: x, w[, bias]; act: none, or a relu fused into the epilogue
 * (op_conv2d_relu). */
static amp_tensor *conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding, op_act act)
{
    if (stride < 1 || padding < 0)
        return amp_fail_null(AMP_ERR_ARG, "conv2d: stride %d must be >= 1 and padding %d >= 0", stride,
                             padding);
    amp_tensor *in[3] = {x, w, bias};
    const op_params p = {.conv2d = {.stride = stride, .padding = padding, .has_bias = bias != NULL, .act = act}};
    return op_apply(OP_CONV2D, in, bias ? 3 : 2, &p);
}

amp_tensor *amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding)
{
    return conv2d(x, w, bias, stride, padding, OP_ACT_NONE);
}

amp_tensor *op_conv2d_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding)
{
    return conv2d(x, w, bias, stride, padding, OP_ACT_RELU);
}

/* max_pool2d, avg_pool2d: pool2d_params (stride 0: the kernel). */
static amp_tensor *pool(int op, amp_tensor *x, int kernel, int stride, int padding)
{
    if (stride == 0)
        stride = kernel;
    if (kernel < 1 || stride < 1 || padding < 0 || padding * 2 > kernel)
        return amp_fail_null(AMP_ERR_ARG,
                             "%s: kernel %d, stride %d, padding %d (need kernel >= 1, stride >= 1, "
                             "0 <= padding <= kernel/2)",
                             op_table[op].name, kernel, stride, padding);
    const op_params p = {.pool2d = {.kernel = kernel, .stride = stride, .padding = padding}};
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
