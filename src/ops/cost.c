/*
 * cost.c - what an op call costs, for the profiler: the floating-point
 * operations of a node's forward or backward, from its inputs' shapes,
 * written once per row of the op table (ops/op_list.h). op_run stores
 * op_flops in the node (node->flops), so that the backward engine, a layer
 * below this one, can ask for a backward's count without calling up.
 *
 * The counts follow the usual conventions (torch.utils.flop_counter for
 * the products: a multiply-add is 2 FLOPs); they are the work the op asks
 * for, not what a kernel happens to do (a GEMM's zero padding, a causal
 * mask's skipped blocks). Notation: n = elements of the result (forward) or
 * of the input (reductions, normalisations), "needs(i)" = input i needs a
 * gradient (backward counts only the gradients it makes).
 *
 *   matmul        a [.., M, K] @ b [.., K, N] -> [B.., M, N]:
 *                 forward 2*B*M*N*K (= 2 * numel(out) * K);
 *                 backward 2*B*M*N*K per input that needs a gradient
 *                 (dA = dC B^T, dB = A^T dC), so 4*B*M*N*K when both do.
 *   linear        x [R, in], w [out, in] (+ bias [out]), R = rows of x:
 *                 forward 2*R*in*out, + R*out for the bias, + R*out for a
 *                 fused relu / gelu epilogue; backward 2*R*in*out for dx
 *                 and for dW when they need it, R*out for dbias, + R*out
 *                 through a fused activation.
 *   conv2d        x [N, C, H, W], w [O, C, kh, kw] -> [N, O, Ho, Wo]:
 *                 forward 2*N*O*Ho*Wo*C*kh*kw, + N*O*Ho*Wo for the bias and
 *                 for a fused relu; backward the product's count again for
 *                 dx and for dW when needed, N*O*Ho*Wo for dbias and the relu.
 *   scaled_dot_product_attention  q, k, v [H.., T, d], H = the product
 *                 of the leading dims: forward 4*H*T*T*d (S = q k^T and
 *                 O = P v; the full T x T, causal or not, and the softmax
 *                 in between not counted, as flop_counter does); backward
 *                 10*H*T*T*d (ampc's backward rebuilds S = q k^T from the
 *                 saved log-sum-exp, then dV = P^T dO, dP = dO v^T,
 *                 dq = dS k, dk = dS^T q).
 *   pointwise     add, sub, mul, div, the *_scalar ops, neg, relu, gelu,
 *                 tanh, sigmoid, silu, exp, log, pow, dropout: 1 per
 *                 element of the result; backward 1 per element of each
 *                 gradient made.
 *   sum, mean     1 per input element; backward 1 per input element.
 *   softmax, log_softmax  5 per element (max, subtract, exp, sum,
 *                 normalise); backward 4 per element (dy*y, its sum,
 *                 subtract, scale).
 *   layer_norm    8 per element of x (mean 1, variance 3, normalise 2,
 *                 weight and bias 2); backward 12 per element of x (dx 9,
 *                 dweight and dbias 3), whatever inputs need a gradient.
 *   cross_entropy logits [N, C]: 5 per logit (log_softmax) + 1 per row
 *                 (the label's term and the mean); backward 3 per logit
 *                 (exp(x - lse), minus the one-hot, times 1/N).
 *   mse_loss      3 per element (subtract, square, sum); backward 3 per
 *                 element of each gradient made.
 *   max_pool2d, avg_pool2d  k*k per output element (compares or adds);
 *                 backward k*k per output element.
 *   embedding     0 forward (a gather); backward 1 per element of the
 *                 result (the scatter-add into dW).
 *   reshape, permute, cat, to, argmax  0: moving data, not arithmetic
 *                 (their bytes are still counted by the hooks).
 *
 * Bytes moved are counted by the hooks themselves from the tensors
 * (forward: every input read plus the output written; backward: gout,
 * every input and every gradient made), not here.
 */
#include "ops/infer.h"

static double numel_of(const amp_tensor *t) { return t ? (double)t->numel : 0.0; }

static int64_t last_dim(const amp_tensor *t) { return t->shape.ndim > 0 ? t->shape.d[t->shape.ndim - 1] : 1; }

static bool needs(const node *n, int i) { return i < n->n_in && in_needs_grad(n, i); }

/* Gradients node n makes (backward): the inputs that need one. */
static int grads_made(const node *n)
{
    int k = 0;
    for (int i = 0; i < n->n_in; i++)
        k += needs(n, i);
    return k;
}

double op_flops(const node *n, const amp_shape *out, bool backward)
{
    if (!n || n->n_in < 1 || !n->in[0])
        return 0;
    const amp_tensor *x = n->in[0];
    const double on = out ? (double)shape_numel(*out) : 0.0, xn = numel_of(x);
    switch (n->op) {
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_ADD_SCALAR:
    case OP_MUL_SCALAR:
    case OP_DIV_SCALAR:
    case OP_NEG:
    case OP_RELU:
    case OP_GELU:
    case OP_TANH:
    case OP_SIGMOID:
    case OP_SILU:
    case OP_EXP:
    case OP_LOG:
    case OP_POW_SCALAR:
    case OP_DROPOUT:
        if (!backward)
            return on;
        {
            double g = 0;
            for (int i = 0; i < n->n_in; i++)
                if (needs(n, i))
                    g += numel_of(n->in[i]);
            return g;
        }
    case OP_MATMUL: {
        if (n->n_in < 2 || !n->in[1])
            return 0;
        const double f = 2.0 * on * (double)last_dim(x);
        return backward ? f * (needs(n, 0) + needs(n, 1)) : f;
    }
    case OP_LINEAR: {
        if (n->n_in < 2 || !n->in[1] || n->in[1]->shape.ndim < 1)
            return 0;
        const double in = (double)last_dim(x), outf = (double)n->in[1]->shape.d[0];
        const double rows = in > 0 ? xn / in : 0, prod = 2.0 * rows * in * outf, ew = rows * outf;
        const bool bias = lin_has_bias(n), act = n->p.i[1] != 0;
        if (!backward)
            return prod + (bias ? ew : 0) + (act ? ew : 0);
        return prod * (needs(n, 0) + needs(n, 1)) + (bias && needs(n, 2) ? ew : 0) + (act ? ew : 0);
    }
    case OP_CONV2D: {
        if (n->n_in < 2 || !n->in[1] || n->in[1]->shape.ndim != 4)
            return 0;
        const amp_tensor *w = n->in[1];
        const double ckk = (double)(w->shape.d[1] * w->shape.d[2] * w->shape.d[3]);
        const double prod = 2.0 * on * ckk; /* on = N*O*Ho*Wo */
        const bool bias = n->p.i[2] != 0 && n->n_in > 2, relu = n->p.i[3] != 0;
        if (!backward)
            return prod + (bias ? on : 0) + (relu ? on : 0);
        return prod * (needs(n, 0) + needs(n, 1)) + (bias && needs(n, 2) ? on : 0) + (relu ? on : 0);
    }
    case OP_ATTENTION: {
        if (x->shape.ndim < 2)
            return 0;
        /* p.i[1] = 1: [B, T, H, d] */
        const double T = (double)x->shape.d[n->p.i[1] == 1 && x->shape.ndim == 4 ? 1 : x->shape.ndim - 2];
        const double d = (double)last_dim(x);
        const double heads = T * d > 0 ? xn / (T * d) : 0;
        return (backward ? 10.0 : 4.0) * heads * T * T * d;
    }
    case OP_SUM:
    case OP_MEAN:
        return xn;
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
        return (backward ? 4.0 : 5.0) * xn;
    case OP_LAYER_NORM:
        return (backward ? 12.0 : 8.0) * xn;
    case OP_CROSS_ENTROPY: {
        const double rows = x->shape.ndim > 0 ? (double)x->shape.d[0] : 1.0;
        return backward ? 3.0 * xn : 5.0 * xn + rows;
    }
    case OP_MSE_LOSS:
        return backward ? 3.0 * xn * grads_made(n) : 3.0 * xn;
    case OP_MAX_POOL2D:
    case OP_AVG_POOL2D: {
        const double k = (double)n->p.i[0];
        return k * k * on; /* backward: on from node->out_shape, the same result */
    }
    case OP_EMBEDDING:
        return backward && needs(n, 0) ? on : 0;
    default: /* reshape, permute, cat, narrow, to, argmax */
        return 0;
    }
}
