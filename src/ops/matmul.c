/*
 * matmul.c - matmul and linear, forward and backward, on any device: the
 * shapes (infer.c), the products as the backend's gemm primitive, what is
 * saved for backward.
 *
 * matmul follows torch.matmul for the shapes ampc supports:
 *   a [.., M, K] @ b [K, N]       leading dims of a fold into M (one GEMM)
 *   a [B.., M, K] @ b [B.., K, N] identical batch dims (one GEMM per batch)
 *   a [M, K] @ b [B.., K, N]      a shared by every batch
 *   a 1-D [K] acts as [1, K] and b 1-D [K] as [K, 1]; the added dim is
 *   dropped from the result, as PyTorch does.
 * Anything else (batch dims that would need broadcasting) is an error that
 * names both shapes. Both inputs must have the same dtype, as in PyTorch
 * outside autocast (autocast casts them first).
 *
 * linear(x [.., in], w [out, in], bias [out]) = x w^T + bias, optionally
 * followed by a fused relu (nn's Linear + ReLU pairs) or gelu (tanh; the
 * GPT's fc1): one gemm with the bias and the activation as its epilogue,
 * a 16-bit result rounded once. The relu's backward masks by the output
 * (saved); the gelu's reads the pre-activation, which the gemm writes
 * beside the result (aux). Each backend applies the activation as the
 * relu / gelu op computes it, so the CPU's values and gradients are those
 * of the two ops bit for bit (on CUDA the gelu is a cuBLASLt epilogue,
 * within rounding of ampc's kernel).
 *
 * 16-bit tensors accumulate in f32 with one rounding per output. Every
 * gradient comes out in its input's dtype; a shared a's gradient sums over
 * the batches in f32 before its one rounding; the bias gradient is the
 * backend's bias_grad (column sums of dY).
 */
#include "backend/backend.h"
#include "ops/broadcast.h"
#include "ops/infer.h"

#include <stdio.h>

/* ------------------------------------------------------- the public ops */

amp_tensor *amp_matmul(amp_tensor *a, amp_tensor *b)
{
    amp_tensor *in[2] = {a, b};
    return op_apply(OP_MATMUL, in, 2, NULL);
}

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

/* ------------------------------------------------------------ matmul */

static const char *at(const amp_tensor *t, int64_t elem)
{
    return (const char *)tensor_ptr(t) + (size_t)elem * amp_dtype_size(t->dtype);
}

/* A plain product, C = op(A) op(B) (alpha 1, beta 0), batch of them at
 * strides sa, sb, sc; A and B in dt, C in cdt. */
static be_gemm_desc product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                            int64_t sa, const void *B, int64_t ldb, int64_t sb, void *C, int64_t ldc, int64_t sc,
                            int64_t batch, amp_dtype dt, amp_dtype cdt)
{
    return (be_gemm_desc){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .batch = batch, .alpha = 1.0f, .beta = 0.0f,
                          .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc, .sa = sa, .sb = sb, .sc = sc,
                          .adt = dt, .bdt = dt, .cdt = cdt, .ep = BE_EPI_NONE};
}

/* The product on the backend of n's inputs; a failure's message names the
 * op first. */
static amp_status gemm_on(const node *n, const be_gemm_desc *g)
{
    const amp_backend *be = backend_of(tensor_device(n->in[0]));
    if (!be->gemm)
        return backend_missing(be, op_name(n), "gemm");
    if (be->gemm(g) != AMP_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", amp_last_error());
        return amp_set_error(fail_status(), "%s: %s", op_name(n), why);
    }
    return AMP_OK;
}

amp_tensor *matmul_forward(node *n, const none_params *p)
{
    (void)p;
    mm_plan pl;
    if (!same_float_dtypes(n) || !matmul_infer(n, &pl))
        return NULL;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    amp_tensor *out = tensor_new_on(pl.out, a->dtype, tensor_device(a));
    if (!out)
        return NULL;
    be_gemm_desc g = product(false, false, pl.M, pl.N, pl.K, tensor_ptr(a), pl.K, pl.sa, tensor_ptr(b), pl.N, pl.sb,
                             tensor_ptr(out), pl.N, pl.M * pl.N, pl.batch, a->dtype, a->dtype);
    if (gemm_on(n, &g) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* dA = dC B^T and dB = A^T dC per batch; a shared a (sa == 0, batch > 1)
 * sums its gradient over the batches in f32 before rounding. */
amp_status matmul_backward(node *n, const none_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    mm_plan pl;
    if (!matmul_infer(n, &pl))
        return amp_last_status();
    const amp_tensor *a = n->in[0], *b = n->in[1];
    const amp_dtype dt = a->dtype;
    const amp_device dev = tensor_device(a);
    if (in_needs_grad(n, 0)) {
        if (!(gin[0] = tensor_new_on(a->shape, dt, dev)))
            return fail_status();
        amp_status st = AMP_OK;
        if (pl.sa == 0 && pl.batch > 1) {
            amp_tensor *acc = tensor_new_on(a->shape, AMP_F32, dev);
            if (!acc)
                return fail_status();
            for (int64_t k = 0; k < pl.batch && st == AMP_OK; k++) {
                be_gemm_desc g = product(false, true, pl.M, pl.K, pl.N, at(gout, k * pl.M * pl.N), pl.N, 0,
                                         at(b, k * pl.sb), pl.N, 0, tensor_ptr(acc), pl.K, 0, 1, dt, AMP_F32);
                g.beta = k ? 1.0f : 0.0f;
                st = gemm_on(n, &g);
            }
            if (st == AMP_OK) {
                const amp_backend *be = backend_of(dev);
                st = be->convert ? be->convert(tensor_ptr(acc), AMP_F32, tensor_ptr(gin[0]), dt, acc->numel)
                                 : backend_missing(be, op_name(n), "convert");
            }
            amp_tensor_free(acc);
        } else {
            be_gemm_desc g = product(false, true, pl.M, pl.K, pl.N, tensor_ptr(gout), pl.N, pl.M * pl.N, tensor_ptr(b),
                                     pl.N, pl.sb, tensor_ptr(gin[0]), pl.K, pl.sa, pl.batch, dt, dt);
            st = gemm_on(n, &g);
        }
        if (st != AMP_OK)
            return st;
    }
    if (in_needs_grad(n, 1)) {
        if (!(gin[1] = tensor_new_on(b->shape, dt, dev)))
            return fail_status();
        be_gemm_desc g = product(true, false, pl.K, pl.N, pl.M, tensor_ptr(a), pl.K, pl.sa, tensor_ptr(gout), pl.N,
                                 pl.M * pl.N, tensor_ptr(gin[1]), pl.N, pl.sb, pl.batch, dt, dt);
        amp_status st = gemm_on(n, &g);
        if (st != AMP_OK)
            return st;
    }
    return AMP_OK;
}

/* ------------------------------------------------------------ linear */

/* The activation fused after the product: relu (op_linear_relu, nn's
 * Linear + ReLU pairs) or gelu with the tanh approximation
 * (op_linear_gelu, the GPT's fc1 + gelu). */
static bool lin_relu(const linear_params *p) { return p->act == OP_ACT_RELU; }
static bool lin_gelu(const linear_params *p) { return p->act == OP_ACT_GELU_TANH; }

amp_tensor *linear_forward(node *n, const linear_params *p)
{
    lin_plan pl;
    if (!same_float_dtypes(n) || !linear_infer(n, p, &pl))
        return NULL;
    if (p->act != OP_ACT_NONE && !lin_relu(p) && !lin_gelu(p))
        return op_fail_shapes(n, "unknown fused activation");
    const amp_tensor *x = n->in[0], *w = n->in[1];
    const amp_device dev = tensor_device(x);
    amp_shape os = x->shape;
    os.d[os.ndim - 1] = pl.out;
    amp_tensor *y = tensor_new_on(os, x->dtype, dev), *pre = NULL;
    if (!y)
        return NULL;
    /* The gelu's pre-activation, for backward. */
    if (lin_gelu(p) && n->needs_grad && !(pre = tensor_new_on(os, x->dtype, dev))) {
        amp_tensor_free(y);
        return NULL;
    }
    be_gemm_desc g = product(false, true, pl.rows, pl.out, pl.in, tensor_ptr(x), pl.in, 0, tensor_ptr(w), pl.in, 0,
                             tensor_ptr(y), pl.out, 0, 1, x->dtype, y->dtype);
    g.bias = lin_has_bias(n, p) ? tensor_ptr(n->in[2]) : NULL;
    g.ep = lin_relu(p) ? BE_EPI_RELU : lin_gelu(p) ? BE_EPI_GELU : BE_EPI_NONE;
    g.aux = pre ? tensor_ptr(pre) : NULL;
    g.ldaux = pl.out;
    /* The relu's backward masks by the output, which is kept. */
    if (gemm_on(n, &g) != AMP_OK || (lin_relu(p) && n->needs_grad && op_save(n, 0, y) != AMP_OK)) {
        amp_tensor_free(y);
        amp_tensor_free(pre);
        return NULL;
    }
    if (pre) /* owned by the node */
        n->saved[0] = pre;
    return y;
}

/* dY through the fused activation, with its op's backward formula: relu
 * keeps dY where the saved output is > 0; gelu takes dY * gelu'(pre) on
 * the saved pre-activation. A new tensor in gout's dtype, on its device. */
static amp_tensor *through_activation(const node *n, const linear_params *p, const amp_tensor *gout)
{
    const bool relu = lin_relu(p);
    const amp_tensor *y = n->saved[0];
    if (!y)
        return amp_fail_null(AMP_ERR_STATE, "%s: the fused %s was not saved", op_name(n),
                             relu ? "relu's output" : "gelu's pre-activation");
    if (y->numel != gout->numel || y->dtype != gout->dtype)
        return amp_fail_null(AMP_ERR_STATE, "%s: gradient %s [%lld] for a saved %s %s [%lld]", op_name(n),
                             amp_dtype_name(gout->dtype), (long long)gout->numel,
                             relu ? "output" : "pre-activation", amp_dtype_name(y->dtype), (long long)y->numel);
    ew_arg args[2] = {ew_arg_of(gout), ew_arg_of(y)};
    args[1].shape = gout->shape;
    return op_pointwise(relu ? AMP_PW_RELU_GRAD : AMP_PW_GELU_TANH_GRAD, gout->shape, gout->dtype,
                        tensor_device(gout), args, 2, 0.0f);
}

/* *out = a new tensor of shape on n's device in g's C dtype, then g into it. */
static amp_status grad_product(const node *n, be_gemm_desc *g, amp_shape shape, amp_tensor **out)
{
    if (!(*out = tensor_new_on(shape, g->cdt, tensor_device(n->in[0]))))
        return fail_status();
    g->C = tensor_ptr(*out);
    return gemm_on(n, g);
}

amp_status linear_backward(node *n, const linear_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    lin_plan pl;
    if (!linear_infer(n, p, &pl))
        return amp_last_status();
    const amp_tensor *x = n->in[0], *w = n->in[1];
    const amp_dtype dt = x->dtype;
    const amp_device dev = tensor_device(x);
    amp_tensor *masked = NULL;
    if (lin_relu(p) || lin_gelu(p)) {
        if (!(masked = through_activation(n, p, gout)))
            return fail_status();
        gout = masked;
    }
    amp_status st = AMP_OK;
    if (in_needs_grad(n, 0)) {
        /* dX [rows, in] = dY [rows, out] W [out, in] */
        be_gemm_desc g = product(false, false, pl.rows, pl.in, pl.out, tensor_ptr(gout), pl.out, 0, tensor_ptr(w),
                                 pl.in, 0, NULL, pl.in, 0, 1, dt, dt);
        st = grad_product(n, &g, x->shape, &gin[0]);
    }
    if (st == AMP_OK && in_needs_grad(n, 1)) {
        /* dW [out, in] = dY^T [out, rows] X [rows, in]; for a 16-bit cast
         * of an f32 weight, made in f32 with the 16-bit rounding where the
         * backend can (autograd_grad_dtype): the cast's widening pass goes */
        const bool widened = dt != AMP_F32 && autograd_grad_dtype(n, 1) == AMP_F32 &&
                             backend_of(dev)->gemm_rounds_c;
        be_gemm_desc g = product(true, false, pl.out, pl.in, pl.rows, tensor_ptr(gout), pl.out, 0, tensor_ptr(x),
                                 pl.in, 0, NULL, pl.in, 0, 1, dt, widened ? AMP_F32 : dt);
        g.weight_grad = true;
        g.c_rounded = widened;
        st = grad_product(n, &g, w->shape, &gin[1]);
    }
    if (st == AMP_OK && lin_has_bias(n, p) && in_needs_grad(n, 2)) {
        /* db [out] = the column sums of dY [rows, out] */
        const amp_tensor *bias = n->in[2];
        const amp_backend *be = backend_of(dev);
        if (!(gin[2] = tensor_new_on(bias->shape, bias->dtype, dev)))
            st = fail_status();
        else if (!be->bias_grad)
            st = backend_missing(be, op_name(n), "bias_grad");
        else
            st = be->bias_grad(tensor_ptr(gout), gout->dtype, pl.rows, pl.out, tensor_ptr(gin[2]), bias->dtype);
    }
    amp_tensor_free(masked);
    return st;
}

/* ----------------------------------------------------------------- cost */

/* matmul, a [.., M, K] @ b [.., K, N] -> [B.., M, N]: forward 2*B*M*N*K
 * (= 2 * numel(out) * K); backward 2*B*M*N*K per input that needs a
 * gradient (dA = dC B^T, dB = A^T dC): 4*B*M*N*K when both do. */
op_cost matmul_cost(const node *n, const none_params *p, bool backward)
{
    (void)p;
    const amp_tensor *a = n->in[0];
    const double K = a->shape.ndim > 0 ? (double)a->shape.d[a->shape.ndim - 1] : 0.0;
    const double f = 2.0 * (double)shape_numel(n->out_shape) * K;
    return (op_cost){backward ? f * (cost_needs(n, 0) + cost_needs(n, 1)) : f, cost_bytes(n, backward)};
}

/* linear, x [R, in] (R = the rows of x), w [out, in] (+ bias [out]):
 * forward 2*R*in*out, + R*out for the bias, + R*out for a fused
 * activation; backward 2*R*in*out for dx and for dW when they need it,
 * R*out for dbias, + R*out through the fused activation. */
op_cost linear_cost(const node *n, const linear_params *p, bool backward)
{
    const amp_tensor *x = n->in[0], *w = n->in[1];
    const double in = x->shape.ndim > 0 ? (double)x->shape.d[x->shape.ndim - 1] : 0.0;
    const double out = w->shape.ndim > 0 ? (double)w->shape.d[0] : 0.0;
    const double rows = in > 0 ? (double)x->numel / in : 0.0;
    const double prod = 2.0 * rows * in * out, ew = rows * out;
    return cost_product(n, backward, prod, ew, lin_has_bias(n, p), p->act != OP_ACT_NONE);
}
