/*
 * infer.h - each op's argument checks and result shape and dtype, once:
 * the op's forward (src/ops) calls them before any backend work, so every
 * device rejects the same inputs with the same messages and gives the
 * same result shapes and dtypes. Each function runs on the host, on
 * shapes, dtypes and the op's params only (never on tensor data); the bool ones set
 * the error and return false when the inputs do not fit (bcast_plan and
 * sum_to_shape_mask are shape arithmetic that cannot fail).
 */
#ifndef AMPC_OPS_INFER_H
#define AMPC_OPS_INFER_H

#include "ops/ops.h"

/* add, sub, mul, div: both inputs float, their broadcast shape and
 * promoted dtype. */
bool binary_infer(const node *n, amp_shape *out, amp_dtype *dt);

/* sum, mean: which dims a reduction covers (p->dims; none: all). */
typedef struct {
    unsigned mask;    /* bit i: dim i is reduced */
    amp_shape out;    /* the result's shape */
    amp_shape keep;   /* the input's shape with reduced dims set to 1 */
    int64_t count;    /* elements summed into each result element */
} reduce_dims;
bool reduce_infer(const node *n, const reduce_params *p, reduce_dims *r);

/* layer_norm: its inputs (weight and bias NULL when absent), rows and the
 * normalised width (the last p->normalized_ndim dims). */
typedef struct {
    const amp_tensor *x, *w, *b;
    int64_t rows, cols;
} ln_args;
bool layer_norm_infer(const node *n, const layer_norm_params *p, ln_args *a);
/* add's forward when op_add_layer_norm asked for the fused pass (add's
 * fused_layer_norm; norm.c): true with *out the sum (or NULL on an error)
 * when it ran, false when the plain add should run. */
bool add_layer_norm_try(node *n, amp_tensor **out);

/* softmax, log_softmax: a tensor seen as [outer, len, inner] around the
 * dim an op works along (negative counts from the end; a 0-d tensor takes
 * 0 or -1, as in PyTorch). */
typedef struct {
    int64_t outer, len, inner;
} dim_view;
bool dim_view_infer(const node *n, int64_t dim, dim_view *v);

/* cross_entropy: float logits [N, C] and i32/i64 labels [N] (the labels'
 * values are checked by the CPU backend only: it reads them on the host). */
bool cross_entropy_infer(const node *n);

/* mse_loss: input and target float, of one shape. */
bool mse_loss_infer(const node *n);

/* embedding: a float weight [V, D] and i32/i64 indices, the result's shape
 * (the indices' shape and D). */
bool embedding_infer(const node *n, amp_shape *out);

/* An elementwise kernel's plan: the output's shape simplified the way
 * PyTorch's TensorIterator does it (size-1 dims dropped, neighbours that
 * every operand walks contiguously merged) into nd dims of d, and each of
 * the nin (at most EW_MAX_IN) operands' element strides along them in st
 * (0 where it is broadcast). Returns nd, at least 1. */
int bcast_plan(amp_shape out, const amp_shape *in, int nin, int64_t *d, int64_t (*st)[AMP_MAX_DIMS]);

/* The dims of big that summing it back to small (a shape it was
 * broadcast from) reduces: bit i for dim i of big. */
unsigned sum_to_shape_mask(amp_shape big, amp_shape small);

/* reshape: the target shape (p->shape; one size may be -1). */
bool reshape_infer(const node *n, const reshape_params *p, amp_shape *out);

/* permute: the normalised permutation (negative dims count from the end). */
bool permute_infer(const node *n, const permute_params *p, int *perm);

/* cat along p->dim: the result's shape and dtype, and the normalised dim. */
bool cat_infer(const node *n, const dim_params *p, amp_shape *out, amp_dtype *dt, int *dim);

/* narrow: the result's shape (dim cut to length elements from start) and
 * the normalised dim. */
bool narrow_infer(const node *n, const narrow_params *p, amp_shape *out, int *dim);

/* matmul: how it maps onto GEMMs, batch products of [M, K] @ [K, N],
 * where batch k reads a at k * sa and b at k * sb (elements; 0 = shared),
 * and the result's shape. */
typedef struct {
    int64_t batch, M, N, K, sa, sb;
    amp_shape out;
} mm_plan;
bool matmul_infer(const node *n, mm_plan *pl);

/* Every input float and all of one dtype (matmul, linear). */
bool same_float_dtypes(const node *n);

/* linear: whether a bias was given; it is then input 2. */
static inline bool lin_has_bias(const node *n, const linear_params *p) { return p->has_bias && n->n_in > 2; }

/* linear: rows of x (its leading dims folded), in and out features. */
typedef struct {
    int64_t rows, in, out;
} lin_plan;
bool linear_infer(const node *n, const linear_params *p, lin_plan *pl);

/* attention: heads (the product of the leading dims), rows T, head width
 * d, the softmax scale and whether the mask is causal. */
typedef struct {
    int64_t heads, T, d;
    int64_t hgroup, ld; /* [B, T, H, d] (ATTN_BTHD, ATTN_CACHED): H and H * d; ATTN_QKV: H, 3 H d; else 0 */
    int64_t out_ld;     /* ATTN_QKV: the output's row stride H * d; else 0 (ld) */
    int64_t Tk, kv_ld;  /* ATTN_CACHED, k and v a KV cache [Tk, B, H, d]: Tk and B * H * d; else 0 */
    float scale;
    bool causal;
} attn_plan;
bool attention_infer(const node *n, const attention_params *p, attn_plan *pl);

/* conv2d: x [N, C, H, W], weight [O, C, kh, kw], bias [O] when given; the
 * output size and the GEMM sizes of the lowering. */
typedef struct {
    int64_t N, C, H, W, O, kh, kw, s, p, Ho, Wo;
    int64_t ckk, l; /* C*kh*kw and Ho*Wo */
    bool bias, relu;
} conv2d_shape;
bool conv2d_infer(const node *n, const conv2d_params *p, conv2d_shape *g);

/* max_pool2d, avg_pool2d: a [.., H, W] tensor (3-D or 4-D) pooled plane
 * by plane. */
typedef struct {
    int64_t planes, H, W, k, s, p, Ho, Wo;
} pool_shape;
bool pool_infer(const node *n, const pool2d_params *p, pool_shape *g);

#endif
