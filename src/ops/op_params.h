/*
 * op_params.h - each op's parameters, by name: one plain struct per
 * family of ops, which the op's row in op_list.h names.
 *
 * A family's fields are listed once, in FIELDS_<family>(X) as
 * X(KIND, name); the list makes the struct (PARAM_FIELD below gives each
 * kind its C type) and, in op_table.c, the profiler's names and values of
 * the fields for the trace's "args". The kinds:
 *
 *   INT    int64_t          BOOL    bool             FLOAT  double
 *   U64    uint64_t         DTYPE   amp_dtype        GELU   amp_gelu_approx
 *   ACT    op_act           LAYOUT  attn_layout      DIMS   op_dims
 *
 * A node holds its op's parameters in an op_params, the union of the
 * families (op_node in ops.h); the row says which member is live, and the
 * forward, backward and cost of the row take a pointer to that member,
 * typed (ops.h's declarations come from the rows, so a function that
 * reads another family's struct does not compile).
 *
 * Plain C structs that C++ (nvcc) also reads: no flexible members, no
 * empty structs (none_params holds one unused byte).
 */
#ifndef AMPC_OP_PARAMS_H
#define AMPC_OP_PARAMS_H

#include "ampc.h"

#include <stdbool.h>
#include <stdint.h>

/* An activation fused after a linear's or a conv2d's product (its
 * epilogue). conv2d takes none or relu. */
typedef enum { OP_ACT_NONE = 0, OP_ACT_RELU, OP_ACT_GELU_TANH } op_act;

/* The layout of attention's q, k, v: [.., T, d] with every leading dim a
 * head (amp_attention); [B, T, H, d] (op_attention_bthd: a linear's
 * result split into heads without a copy); q [B, T, H, d] over a KV cache
 * k, v [Tk, B, H, d] (op_attention_cached, forward only); one input qkv
 * [B, T, 3, H, d] whose thirds are q, k, v (op_attention_qkv: a fused
 * projection read in place, its gradient written as one tensor). */
typedef enum { ATTN_HEADS_FIRST = 0, ATTN_BTHD, ATTN_CACHED, ATTN_QKV } attn_layout;

/* A list of dims or sizes: d[0..n). */
typedef struct op_dims {
    int64_t n;
    int64_t d[AMP_MAX_DIMS];
} op_dims;

#define PARAM_TYPE_INT int64_t
#define PARAM_TYPE_BOOL bool
#define PARAM_TYPE_FLOAT double
#define PARAM_TYPE_U64 uint64_t
#define PARAM_TYPE_DTYPE amp_dtype
#define PARAM_TYPE_GELU amp_gelu_approx
#define PARAM_TYPE_ACT op_act
#define PARAM_TYPE_LAYOUT attn_layout
#define PARAM_TYPE_DIMS op_dims
#define PARAM_FIELD(kind, name) PARAM_TYPE_##kind name;

/* No parameters: sub, mul, div, neg, the activations without one, matmul,
 * mse_loss, embedding. */
#define FIELDS_none(X)
typedef struct none_params {
    char unused;
} none_params;

/* add: fused_layer_norm when op_add_layer_norm asked for the layer_norm
 * after it in the same pass (norm.c). */
#define FIELDS_add(X) X(BOOL, fused_layer_norm)
typedef struct add_params {
    FIELDS_add(PARAM_FIELD)
} add_params;

/* add_scalar, mul_scalar, div_scalar: the Python number. */
#define FIELDS_scalar(X) X(FLOAT, scalar)
typedef struct scalar_params {
    FIELDS_scalar(PARAM_FIELD)
} scalar_params;

/* pow: x ** exponent. */
#define FIELDS_pow_scalar(X) X(FLOAT, exponent)
typedef struct pow_scalar_params {
    FIELDS_pow_scalar(PARAM_FIELD)
} pow_scalar_params;

/* gelu: exact (erf) or the tanh approximation, PyTorch's approximate=. */
#define FIELDS_gelu(X) X(GELU, approximate)
typedef struct gelu_params {
    FIELDS_gelu(PARAM_FIELD)
} gelu_params;

/* linear: x w^T (+ bias, then input 2), then the fused activation (relu:
 * op_linear_relu; gelu_tanh: op_linear_gelu). */
#define FIELDS_linear(X) X(BOOL, has_bias) X(ACT, act)
typedef struct linear_params {
    FIELDS_linear(PARAM_FIELD)
} linear_params;

/* sum, mean: the dims reduced (as given: negative counts from the end;
 * none listed: every dim), and whether they stay as size 1. */
#define FIELDS_reduce(X) X(DIMS, dims) X(BOOL, keepdim)
typedef struct reduce_params {
    FIELDS_reduce(PARAM_FIELD)
} reduce_params;

/* softmax, log_softmax, argmax: the dim they work along; cat: the dim it
 * joins along (negative counts from the end). */
#define FIELDS_dim(X) X(INT, dim)
typedef struct dim_params {
    FIELDS_dim(PARAM_FIELD)
} dim_params;

/* cross_entropy: rows whose label is ignore_index count for nothing. */
#define FIELDS_cross_entropy(X) X(INT, ignore_index)
typedef struct cross_entropy_params {
    FIELDS_cross_entropy(PARAM_FIELD)
} cross_entropy_params;

/* layer_norm over the last normalized_ndim dims; inputs x, then the
 * weight and the bias when given. */
#define FIELDS_layer_norm(X) X(INT, normalized_ndim) X(BOOL, has_weight) X(BOOL, has_bias) X(FLOAT, eps)
typedef struct layer_norm_params {
    FIELDS_layer_norm(PARAM_FIELD)
} layer_norm_params;

/* dropout: the probability p, and the Philox seed and first counter
 * reserved for its mask (amp_dropout), so backward makes the same one. */
#define FIELDS_dropout(X) X(FLOAT, p) X(U64, seed) X(U64, counter)
typedef struct dropout_params {
    FIELDS_dropout(PARAM_FIELD)
} dropout_params;

/* conv2d: one stride and one zero padding for H and W; the bias is input
 * 2 when given; act none or relu (op_conv2d_relu). */
#define FIELDS_conv2d(X) X(INT, stride) X(INT, padding) X(BOOL, has_bias) X(ACT, act)
typedef struct conv2d_params {
    FIELDS_conv2d(PARAM_FIELD)
} conv2d_params;

/* max_pool2d, avg_pool2d: a kernel x kernel window. */
#define FIELDS_pool2d(X) X(INT, kernel) X(INT, stride) X(INT, padding)
typedef struct pool2d_params {
    FIELDS_pool2d(PARAM_FIELD)
} pool2d_params;

/* reshape: the sizes asked for (one may be -1). */
#define FIELDS_reshape(X) X(DIMS, shape)
typedef struct reshape_params {
    FIELDS_reshape(PARAM_FIELD)
} reshape_params;

/* permute: output dim k is input dim dims.d[k]; dims.n = the input's ndim. */
#define FIELDS_permute(X) X(DIMS, dims)
typedef struct permute_params {
    FIELDS_permute(PARAM_FIELD)
} permute_params;

/* narrow: length elements of dim from start. */
#define FIELDS_narrow(X) X(INT, dim) X(INT, start) X(INT, length)
typedef struct narrow_params {
    FIELDS_narrow(PARAM_FIELD)
} narrow_params;

/* to: the dtype; from_kept_copy when autocast reuses a weight's kept
 * 16-bit copy (the forward returns a view of it: autocast.c). */
#define FIELDS_to(X) X(DTYPE, dtype) X(BOOL, from_kept_copy)
typedef struct to_params {
    FIELDS_to(PARAM_FIELD)
} to_params;

/* scaled_dot_product_attention: the causal mask, and the layout. */
#define FIELDS_attention(X) X(BOOL, causal) X(LAYOUT, layout)
typedef struct attention_params {
    FIELDS_attention(PARAM_FIELD)
} attention_params;

/* Every family, for the union and the profiler's names. */
#define OP_PARAM_FAMILIES(T)                                                                  \
    T(none) T(add) T(scalar) T(pow_scalar) T(gelu) T(linear) T(reduce) T(dim) T(cross_entropy) \
    T(layer_norm) T(dropout) T(conv2d) T(pool2d) T(reshape) T(permute) T(narrow) T(to) T(attention)

/* A node's parameters: the member its row names. */
typedef union op_params {
#define OP_PARAMS_MEMBER(family) family##_params family;
    OP_PARAM_FAMILIES(OP_PARAMS_MEMBER)
#undef OP_PARAMS_MEMBER
} op_params;

#endif
