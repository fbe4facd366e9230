/*
 * linalg.c (CUDA) - matmul, linear and scaled_dot_product_attention on
 * CUDA tensors, forward and backward, as cuBLASLt GEMMs (cuda_gemm) with
 * src/ops/matmul.c's and attention.c's shapes, checks and messages.
 *
 * Precision as on the CPU: 16-bit inputs accumulate in f32 and round once;
 * linear's bias is a cuBLASLt epilogue (BIAS) where cuBLASLt takes it,
 * and otherwise bias rows written first, the GEMM adding onto them (beta
 * 1); its fused relu (op_linear_relu) is ampc's relu pass in place after
 * that. Its fused gelu (op_linear_gelu) is one GEMM with the GELU_AUX_BIAS
 * (GELU_AUX) epilogue, the pre-activation written to the aux buffer for
 * backward (GELU_BIAS / GELU without aux when no gradient is needed); when
 * cuBLASLt refuses, the plain linear into the pre-activation, then ampc's
 * gelu kernel. A shared a's gradient sums over the batches in f32 before
 * rounding.
 *
 * Attention runs all heads as strided batches: S = scale q kᵀ in f32 for
 * every head at once, the masked softmax (and log-sum-exp, saved) in f32,
 * then P v. One difference from the CPU: for 16-bit inputs P (forward),
 * and P and dS (backward), are rounded to the inputs' dtype before their
 * GEMM, so that every GEMM runs on tensor cores with one input dtype (as
 * PyTorch's fused CUDA attention does); the CPU keeps them in f32. The
 * scores themselves never leave f32, so f16 cannot overflow there. The
 * [heads, T, T] scratch is allocated per call (flash-style tiling that
 * avoids it is future work).
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------- matmul */

static const char *at(const amp_tensor *t, int64_t elem)
{
    return (const char *)tensor_ptr(t) + (size_t)elem * amp_dtype_size(t->dtype);
}

amp_tensor *cu_matmul_forward(node *n)
{
    mm_plan pl;
    if (!same_float_dtypes(n) || !matmul_infer(n, &pl))
        return NULL;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    amp_tensor *out = cu_new(pl.out, a->dtype);
    if (out && cuda_gemm(false, false, pl.M, pl.N, pl.K, 1.0f, tensor_ptr(a), pl.K, pl.sa, tensor_ptr(b), pl.N,
                         pl.sb, 0.0f, tensor_ptr(out), pl.N, pl.M * pl.N, pl.batch, a->dtype, a->dtype) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

amp_status cu_matmul_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    mm_plan pl;
    if (!matmul_infer(n, &pl))
        return amp_last_status();
    const amp_tensor *a = n->in[0], *b = n->in[1];
    const amp_dtype dt = a->dtype;
    if (in_needs_grad(n, 0)) {
        if (!(gin[0] = cu_new(a->shape, dt)))
            return fail_status();
        amp_status st;
        if (pl.sa == 0 && pl.batch > 1) {
            /* dA = sum_k dC_k B_kᵀ, summed in f32, rounded once. */
            amp_tensor *acc = cu_new(a->shape, AMP_F32);
            if (!acc)
                return fail_status();
            st = AMP_OK;
            for (int64_t k = 0; k < pl.batch && st == AMP_OK; k++)
                st = cuda_gemm(false, true, pl.M, pl.K, pl.N, 1.0f, at(gout, k * pl.M * pl.N), pl.N, 0,
                               at(b, k * pl.sb), pl.N, 0, k ? 1.0f : 0.0f, tensor_ptr(acc), pl.K, 0, 1, dt, AMP_F32);
            if (st == AMP_OK)
                st = cuda_convert(tensor_ptr(acc), AMP_F32, tensor_ptr(gin[0]), dt, acc->numel);
            amp_tensor_free(acc);
        } else {
            st = cuda_gemm(false, true, pl.M, pl.K, pl.N, 1.0f, tensor_ptr(gout), pl.N, pl.M * pl.N, tensor_ptr(b),
                           pl.N, pl.sb, 0.0f, tensor_ptr(gin[0]), pl.K, pl.sa, pl.batch, dt, dt);
        }
        if (st != AMP_OK)
            return st;
    }
    if (in_needs_grad(n, 1)) {
        if (!(gin[1] = cu_new(b->shape, dt)))
            return fail_status();
        amp_status st = cuda_gemm(true, false, pl.K, pl.N, pl.M, 1.0f, tensor_ptr(a), pl.K, pl.sa, tensor_ptr(gout),
                                  pl.N, pl.M * pl.N, 0.0f, tensor_ptr(gin[1]), pl.N, pl.sb, pl.batch, dt, dt);
        if (st != AMP_OK)
            return st;
    }
    return AMP_OK;
}

/* ------------------------------------------------------------- linear */

/* p.i[1] == 1: a relu fused after the bias (op_linear_relu, nn's Linear +
 * ReLU pairs); p.i[1] == 2: a gelu, tanh approximation (op_linear_gelu,
 * the GPT's fc1 + gelu). */
static bool lin_relu(const node *n) { return n->p.i[1] == 1; }
static bool lin_gelu(const node *n) { return n->p.i[1] == 2; }

/* The whole tensor t as one flat run (in-place elementwise passes). */
static cuda_ew_plan flat_plan(int64_t numel, int nin)
{
    cuda_ew_plan p;
    memset(&p, 0, sizeof p);
    p.nd = 1;
    p.d[0] = numel;
    for (int k = 0; k < nin; k++)
        p.st[k][0] = 1;
    return p;
}

/* y = op(x) elementwise over the whole tensor (x may be y: in place),
 * with the relu or gelu op's own kernel (relu keeps NaN). */
static amp_status pointwise(cuda_ew_op op, amp_tensor *y, const amp_tensor *x)
{
    const void *in[1] = {tensor_ptr(x)};
    const amp_dtype dt[1] = {x->dtype};
    cuda_ew_plan p = flat_plan(y->numel, 1);
    return cuda_ew((amp_pw_op)op, tensor_ptr(y), y->dtype, y->numel, 1, in, dt, &p, 0.0f);
}

/* t [rows, out] = x wᵀ + bias: the bias as a cuBLASLt epilogue (one
 * rounding); when cuBLASLt refuses it, bias rows + beta 1, the same values
 * up to the GEMM's own summation order. */
static amp_status linear_into(const node *n, const lin_plan *pl, amp_tensor *t)
{
    const amp_tensor *x = n->in[0], *w = n->in[1];
    const bool has_bias = lin_has_bias(n);
    bool taken = false;
    amp_status st = AMP_OK;
    if (has_bias)
        st = cuda_gemm_epilogue(false, true, pl->rows, pl->out, pl->in, tensor_ptr(x), pl->in, tensor_ptr(w), pl->in,
                                tensor_ptr(t), pl->out, x->dtype, t->dtype, CUDA_EPI_BIAS, tensor_ptr(n->in[2]), NULL,
                                0, &taken);
    if (st == AMP_OK && !taken) {
        if (has_bias) /* every row starts as the bias; the GEMM adds x wᵀ onto it */
            st = cuda_copy_2d(tensor_ptr(n->in[2]), x->dtype, 0, 0, tensor_ptr(t), t->dtype, pl->out, 0, pl->rows,
                              pl->out);
        if (st == AMP_OK)
            st = cuda_gemm(false, true, pl->rows, pl->out, pl->in, 1.0f, tensor_ptr(x), pl->in, 0, tensor_ptr(w),
                           pl->in, 0, has_bias ? 1.0f : 0.0f, tensor_ptr(t), pl->out, 0, 1, x->dtype, t->dtype);
    }
    return st;
}

/* The fused gelu: y = gelu(x wᵀ + bias), the pre-activation into *pre
 * (made here) when backward needs it. First as one cuBLASLt GEMM whose
 * epilogue applies GELU to the f32 sum and writes the sum itself, rounded
 * to y's dtype, into pre (the aux buffer: laid out as y, row stride out);
 * then, when cuBLASLt refuses, the plain linear into pre (or y) and ampc's
 * gelu kernel after it. */
static amp_status linear_gelu_into(const node *n, const lin_plan *pl, amp_tensor *y, amp_tensor **pre)
{
    const amp_tensor *x = n->in[0], *w = n->in[1];
    const bool has_bias = lin_has_bias(n);
    if (n->needs_grad && !(*pre = cu_new(y->shape, y->dtype)))
        return fail_status();
    const cuda_epilogue ep = *pre ? (has_bias ? CUDA_EPI_GELU_AUX_BIAS : CUDA_EPI_GELU_AUX)
                                  : (has_bias ? CUDA_EPI_GELU_BIAS : CUDA_EPI_GELU);
    bool taken = false;
    amp_status st = cuda_gemm_epilogue(false, true, pl->rows, pl->out, pl->in, tensor_ptr(x), pl->in, tensor_ptr(w),
                                       pl->in, tensor_ptr(y), pl->out, x->dtype, y->dtype, ep,
                                       has_bias ? tensor_ptr(n->in[2]) : NULL, *pre ? tensor_ptr(*pre) : NULL,
                                       pl->out, &taken);
    if (st != AMP_OK || taken)
        return st;
    amp_tensor *t = *pre ? *pre : y; /* without a gradient, gelu in place */
    st = linear_into(n, pl, t);
    return st == AMP_OK ? pointwise(CEW_GELU_TANH, y, t) : st;
}

amp_tensor *cu_linear_forward(node *n)
{
    lin_plan pl;
    if (!same_float_dtypes(n) || !linear_infer(n, &pl))
        return NULL;
    if (n->p.i[1] != 0 && !lin_relu(n) && !lin_gelu(n))
        return op_fail_shapes(n, "unknown fused activation");
    const amp_tensor *x = n->in[0];
    const bool relu = lin_relu(n);
    amp_shape os = x->shape;
    os.d[os.ndim - 1] = pl.out;
    amp_tensor *y = cu_new(os, x->dtype), *pre = NULL;
    if (!y)
        return NULL;
    amp_status st;
    if (lin_gelu(n)) {
        st = linear_gelu_into(n, &pl, y, &pre);
    } else {
        /* The relu is ampc's own kernel, not cuBLASLt's RELU epilogue:
         * that one is documented as max(x, 0) and may turn a NaN into 0,
         * where relu (PyTorch's and ampc's) keeps it. */
        st = linear_into(n, &pl, y);
        if (st == AMP_OK && relu)
            st = pointwise(CEW_RELU, y, y);
        /* The relu's backward masks by the output, as the CPU's. */
        if (st == AMP_OK && relu && n->needs_grad)
            st = op_save(n, 0, y);
    }
    if (st != AMP_OK) {
        amp_tensor_free(y);
        amp_tensor_free(pre);
        return NULL;
    }
    if (pre) /* the gelu's pre-activation, owned by the node */
        n->saved[0] = pre;
    return y;
}

amp_status cu_linear_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    lin_plan pl;
    if (!linear_infer(n, &pl))
        return amp_last_status();
    const amp_tensor *x = n->in[0], *w = n->in[1];
    const amp_dtype dt = x->dtype;
    amp_tensor *masked = NULL;
    if (lin_relu(n) || lin_gelu(n)) {
        /* Through the fused activation first, with its op's backward
         * kernel: relu masks dY where the saved output is > 0; gelu takes
         * dY * gelu'(pre) on the saved pre-activation. */
        const amp_tensor *y = n->saved[0];
        if (!y)
            return amp_set_error(AMP_ERR_STATE, "%s: the fused %s was not saved", op_name(n),
                                 lin_relu(n) ? "relu's output" : "gelu's pre-activation");
        if (y->numel != gout->numel)
            return amp_set_error(AMP_ERR_STATE, "%s: gradient of %lld elements for an output of %lld", op_name(n),
                                 (long long)gout->numel, (long long)y->numel);
        cu_arg args[2] = {cu_arg_of(gout), cu_arg_of(y)};
        args[1].shape = gout->shape;
        if (!(masked = cu_ew(lin_relu(n) ? CEW_RELU_GRAD : CEW_GELU_TANH_GRAD, gout->shape, gout->dtype, args, 2,
                             0.0f)))
            return fail_status();
        gout = masked;
    }
    amp_status st = AMP_OK;
    if (in_needs_grad(n, 0)) {
        /* dX [rows, in] = dY [rows, out] W [out, in] */
        if (!(gin[0] = cu_new(x->shape, dt)) ||
            cuda_gemm(false, false, pl.rows, pl.in, pl.out, 1.0f, tensor_ptr(gout), pl.out, 0, tensor_ptr(w), pl.in, 0,
                      0.0f, tensor_ptr(gin[0]), pl.in, 0, 1, dt, dt) != AMP_OK)
            st = fail_status();
    }
    if (st == AMP_OK && in_needs_grad(n, 1)) {
        /* dW [out, in] = dYᵀ [out, rows] X [rows, in] */
        if (!(gin[1] = cu_new(w->shape, dt)) ||
            cuda_gemm(true, false, pl.out, pl.in, pl.rows, 1.0f, tensor_ptr(gout), pl.out, 0, tensor_ptr(x), pl.in, 0,
                      0.0f, tensor_ptr(gin[1]), pl.in, 0, 1, dt, dt) != AMP_OK)
            st = fail_status();
    }
    if (st == AMP_OK && lin_has_bias(n) && in_needs_grad(n, 2)) {
        /* db = column sums of dY [rows, out] */
        cu_arg g = {tensor_ptr(gout), gout->dtype, {2, {pl.rows, pl.out}}};
        if (!(gin[2] = cu_reduce(&g, 1u, 1.0, n->in[2]->shape, n->in[2]->dtype)))
            st = fail_status();
    }
    amp_tensor_free(masked);
    return st;
}

/* ---------------------------------------------------------- attention */

/* S [heads, T, T] f32 = scale q kᵀ. */
static amp_tensor *scores(const node *n, const attn_plan *pl)
{
    const amp_dtype dt = n->in[0]->dtype;
    amp_tensor *S = cu_new((amp_shape){3, {pl->heads, pl->T, pl->T}}, AMP_F32);
    if (S && cuda_gemm(false, true, pl->T, pl->T, pl->d, pl->scale, tensor_ptr(n->in[0]), pl->d, pl->T * pl->d,
                       tensor_ptr(n->in[1]), pl->d, pl->T * pl->d, 0.0f, tensor_ptr(S), pl->T, pl->T * pl->T,
                       pl->heads, dt, AMP_F32) != AMP_OK) {
        amp_tensor_free(S);
        return NULL;
    }
    return S;
}

amp_tensor *cu_attention_forward(node *n)
{
    attn_plan pl;
    if (!attention_infer(n, &pl))
        return NULL;
    const amp_tensor *q = n->in[0];
    const amp_dtype dt = q->dtype;
    if (q->numel == 0)
        return cu_zeros(q->shape, dt);
    amp_tensor *out = cu_new(q->shape, dt), *lse = NULL, *S = NULL, *P = NULL;
    if (out && n->needs_grad) {
        amp_shape ls = q->shape;
        ls.ndim--;
        lse = cu_new(ls, AMP_F32);
    }
    bool ok = out && (!n->needs_grad || lse) && (S = scores(n, &pl)) != NULL;
    /* f32: the probabilities overwrite the scores; 16-bit: their own copy. */
    if (ok && dt != AMP_F32)
        ok = (P = cu_new(S->shape, dt)) != NULL;
    const amp_tensor *Pv = P ? P : S;
    ok = ok && cuda_attn_softmax(tensor_f32(S), pl.heads, pl.T, pl.causal, tensor_ptr(Pv), dt,
                                 lse ? tensor_f32(lse) : NULL) == AMP_OK;
    ok = ok && cuda_gemm(false, false, pl.T, pl.d, pl.T, 1.0f, tensor_ptr(Pv), pl.T, pl.T * pl.T, tensor_ptr(n->in[2]),
                         pl.d, pl.T * pl.d, 0.0f, tensor_ptr(out), pl.d, pl.T * pl.d, pl.heads, dt, dt) == AMP_OK;
    amp_tensor_free(S);
    amp_tensor_free(P);
    if (!ok) {
        amp_tensor_free(out);
        amp_tensor_free(lse);
        return NULL;
    }
    n->saved[0] = lse;
    return out;
}

amp_status cu_attention_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    attn_plan pl;
    if (!attention_infer(n, &pl))
        return amp_last_status();
    const amp_tensor *q = n->in[0];
    const amp_dtype dt = q->dtype;
    for (int i = 0; i < 3; i++) {
        if (!in_needs_grad(n, i))
            continue;
        gin[i] = q->numel ? cu_new(q->shape, dt) : cu_zeros(q->shape, dt);
        if (!gin[i])
            return fail_status();
    }
    if (q->numel == 0)
        return AMP_OK;
    if (!n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without the saved log-sum-exp", op_name(n));
    const int64_t T = pl.T, d = pl.d, H = pl.heads;
    amp_tensor *S = NULL, *Pc = NULL, *dP = NULL, *dSc = NULL;
    bool ok = (S = scores(n, &pl)) != NULL;
    if (ok && dt != AMP_F32)
        ok = (Pc = cu_new(S->shape, dt)) != NULL;
    /* P = exp(S - lse) in f32 (in S), and in dt for the GEMMs. */
    ok = ok && cuda_attn_probs(tensor_f32(S), H, T, pl.causal, tensor_f32(n->saved[0]), Pc ? tensor_ptr(Pc) : NULL,
                               dt) == AMP_OK;
    const amp_tensor *P = Pc ? Pc : S;
    if (ok && gin[2]) /* dV = Pᵀ dO */
        ok = cuda_gemm(true, false, T, d, T, 1.0f, tensor_ptr(P), T, T * T, tensor_ptr(gout), d, T * d, 0.0f,
                       tensor_ptr(gin[2]), d, T * d, H, dt, dt) == AMP_OK;
    if (ok && (gin[0] || gin[1])) {
        /* dP = dO Vᵀ (f32), then dS = scale P (dP - rowsum(P dP)) in place. */
        ok = (dP = cu_new(S->shape, AMP_F32)) != NULL &&
             cuda_gemm(false, true, T, T, d, 1.0f, tensor_ptr(gout), d, T * d, tensor_ptr(n->in[2]), d, T * d, 0.0f,
                       tensor_ptr(dP), T, T * T, H, dt, AMP_F32) == AMP_OK &&
             cuda_attn_dscores(tensor_f32(S), tensor_f32(dP), H, T, pl.causal, pl.scale) == AMP_OK;
        if (ok && dt != AMP_F32)
            ok = (dSc = tensor_convert(dP, dt)) != NULL;
        const amp_tensor *dS = dSc ? dSc : dP;
        if (ok && gin[0]) /* dQ = dS K */
            ok = cuda_gemm(false, false, T, d, T, 1.0f, tensor_ptr(dS), T, T * T, tensor_ptr(n->in[1]), d, T * d, 0.0f,
                           tensor_ptr(gin[0]), d, T * d, H, dt, dt) == AMP_OK;
        if (ok && gin[1]) /* dK = dSᵀ Q */
            ok = cuda_gemm(true, false, T, d, T, 1.0f, tensor_ptr(dS), T, T * T, tensor_ptr(q), d, T * d, 0.0f,
                           tensor_ptr(gin[1]), d, T * d, H, dt, dt) == AMP_OK;
    }
    amp_tensor_free(S);
    amp_tensor_free(Pc);
    amp_tensor_free(dP);
    amp_tensor_free(dSc);
    return ok ? AMP_OK : fail_status();
}

#else
typedef int ampc_ops_cuda_linalg_unused; /* ISO C wants a declaration in every file */
#endif
