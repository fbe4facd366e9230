/*
 * linalg.c (CUDA) - the CUDA backend's linalg primitives (gemm, bias_grad,
 * attention, attention_backward; backend/backend.h), composed of the
 * kernels of cuda_backend.h.
 *
 * gemm: a plain product is one cuda_gemm (cuBLASLt, strided batches). A
 * bias is a cuBLASLt epilogue (BIAS) where cuBLASLt takes it, otherwise
 * bias rows written first and the GEMM adding onto them (beta 1). The
 * relu epilogue is ampc's relu kernel in place after that, not cuBLASLt's
 * RELU: that one is documented as max(x, 0) and may turn a NaN into 0,
 * where relu (PyTorch's and ampc's) keeps it. The gelu epilogue is one
 * GEMM with GELU_AUX_BIAS (GELU_AUX, or GELU_BIAS / GELU without aux),
 * the pre-activation rounded into aux; when cuBLASLt refuses, the plain
 * product into aux (or C) and ampc's gelu kernel after it.
 *
 * Attention runs all heads as strided batches: S = scale q kᵀ in f32 for
 * every head at once, the masked softmax (and log-sum-exp) in f32, then
 * P v. One difference from the CPU: for 16-bit inputs P (forward), and P
 * and dS (backward), are rounded to the inputs' dtype before their GEMM,
 * so that every GEMM runs on tensor cores with one input dtype (as
 * PyTorch's fused CUDA attention does); the CPU keeps them in f32 (bf16:
 * rounded too). The scores themselves never leave f32, so f16 cannot
 * overflow there. The [heads, T, T] scratch is allocated per call
 * (flash-style tiling that avoids it is future work).
 */
#ifdef AMPC_HAVE_CUDA

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "base/base.h"

#include <string.h>

/* ----------------------------------------------------------------- gemm */

/* y = op(x) elementwise over n contiguous elements (x may be y: in place),
 * with the relu or gelu op's own kernel. */
static amp_status flat_ew(amp_pw_op op, void *y, const void *x, amp_dtype dt, int64_t n)
{
    be_pw_plan p;
    memset(&p, 0, sizeof p);
    p.nd = 1;
    p.d[0] = n;
    p.st[0][0] = 1;
    const void *in[1] = {x};
    const amp_dtype idt[1] = {dt};
    return cuda_ew(op, y, dt, n, 1, in, idt, &p, 0.0f);
}

/* t [M, N] (row stride ldt) = op(A) op(B) + bias: the bias as a cuBLASLt
 * epilogue (one rounding); when cuBLASLt refuses it, bias rows + beta 1,
 * the same values up to the GEMM's own summation order. */
static amp_status product_into(const be_gemm_desc *g, void *t, int64_t ldt)
{
    bool taken = false;
    amp_status st = AMP_OK;
    if (g->bias)
        st = cuda_gemm_epilogue(g->ta, g->tb, g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb, t, ldt, g->adt, g->cdt,
                                CUDA_EPI_BIAS, g->bias, NULL, 0, &taken);
    if (st != AMP_OK || taken)
        return st;
    if (g->bias) /* every row starts as the bias; the GEMM adds the product onto it */
        st = cuda_copy_2d(g->bias, g->cdt, 0, 0, t, g->cdt, ldt, 0, g->M, g->N);
    if (st == AMP_OK)
        st = cuda_gemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->lda, 0, g->B, g->ldb, 0, g->bias ? 1.0f : 0.0f,
                       t, ldt, 0, 1, g->adt, g->cdt);
    return st;
}

/* C = gelu(op(A) op(B) + bias), the pre-activation into aux when given:
 * first as one cuBLASLt GEMM whose epilogue applies GELU to the f32 sum
 * and writes the sum itself, rounded to C's dtype, into aux; when
 * cuBLASLt refuses, the plain product into aux (or C: gelu in place) and
 * ampc's gelu kernel after it. */
static amp_status gemm_gelu(const be_gemm_desc *g)
{
    const cuda_epilogue ep = g->aux ? (g->bias ? CUDA_EPI_GELU_AUX_BIAS : CUDA_EPI_GELU_AUX)
                                    : (g->bias ? CUDA_EPI_GELU_BIAS : CUDA_EPI_GELU);
    bool taken = false;
    amp_status st = cuda_gemm_epilogue(g->ta, g->tb, g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb, g->C, g->ldc,
                                       g->adt, g->cdt, ep, g->bias, g->aux, g->ldaux, &taken);
    if (st != AMP_OK || taken)
        return st;
    if (g->aux && g->ldaux != g->N)
        return amp_set_error(AMP_ERR_ARG, "gemm: the gelu's unfused path wants a contiguous aux (ldaux %lld, N %lld)",
                             (long long)g->ldaux, (long long)g->N);
    void *t = g->aux ? g->aux : g->C;
    st = product_into(g, t, g->N);
    return st == AMP_OK ? flat_ew(AMP_PW_GELU_TANH, g->C, t, g->cdt, g->M * g->N) : st;
}

amp_status cuda_linalg_gemm(const be_gemm_desc *g)
{
    if (g->adt != g->bdt)
        return amp_set_error(AMP_ERR_DTYPE, "gemm: the cuda backend multiplies one dtype (got %s x %s)",
                             amp_dtype_name(g->adt), amp_dtype_name(g->bdt));
    if (!g->bias && g->ep == BE_EPI_NONE)
        return cuda_gemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->sa, g->B, g->ldb, g->sb, g->beta,
                         g->C, g->ldc, g->sc, g->batch, g->adt, g->cdt);
    if (g->alpha != 1.0f || g->beta != 0.0f || g->batch != 1)
        return amp_set_error(AMP_ERR_ARG, "gemm: a bias or an epilogue needs alpha 1, beta 0 and batch 1 "
                                          "(got %g, %g, %lld)",
                             g->alpha, g->beta, (long long)g->batch);
    if (g->ep != BE_EPI_NONE && g->ldc != g->N)
        return amp_set_error(AMP_ERR_ARG, "gemm: an epilogue wants a contiguous C (ldc %lld, N %lld)",
                             (long long)g->ldc, (long long)g->N);
    if (g->ep == BE_EPI_GELU)
        return gemm_gelu(g);
    amp_status st = product_into(g, g->C, g->ldc);
    if (st == AMP_OK && g->ep == BE_EPI_RELU)
        st = flat_ew(AMP_PW_RELU, g->C, g->C, g->cdt, g->M * g->N);
    return st;
}

/* db = the column sums of dy [rows, cols]. */
amp_status cuda_linalg_bias_grad(const void *dy, amp_dtype dt, int64_t rows, int64_t cols, void *db, amp_dtype dbdt)
{
    cuda_reduce_plan p;
    memset(&p, 0, sizeof p);
    p.nk = 1;
    p.kd[0] = cols;
    p.ks[0] = 1;
    p.nr = 1;
    p.rd[0] = rows;
    p.rs[0] = cols;
    return cuda_reduce_sum(dy, dt, &p, 1.0, db, dbdt);
}

/* ------------------------------------------------------------ attention */

/* Device scratch of n elements of dt, or NULL with the error set. */
static void *scratch(int64_t n, amp_dtype dt) { return cuda_malloc((size_t)n * amp_dtype_size(dt)); }

/* S [heads, T, T] f32 = scale q kᵀ. */
static amp_status scores(const be_attn_desc *a, float *S)
{
    const int64_t T = a->T, d = a->D;
    return cuda_gemm(false, true, T, T, d, a->scale, a->q, d, T * d, a->k, d, T * d, 0.0f, S, T, T * T, a->heads,
                     a->dt, AMP_F32);
}

amp_status cuda_attention(const be_attn_desc *a)
{
    const int64_t T = a->T, d = a->D, H = a->heads;
    if (H <= 0 || T <= 0 || d <= 0)
        return AMP_OK;
    /* Keys per head, and k / v's row stride and head stride: q's layout,
     * or a KV cache's [Tk, heads, d] (be_attn_desc). */
    const int64_t Tk = a->Tk > 0 ? a->Tk : T, kld = a->Tk > 0 ? a->kv_ld : d, ks = a->Tk > 0 ? d : T * d;
    if (Tk < T)
        return amp_set_error(AMP_ERR_SHAPE, "attention: %lld cached keys for %lld queries (need at least as many)",
                             (long long)Tk, (long long)T);
    const amp_dtype dt = a->dt;
    float *S = scratch(H * T * Tk, AMP_F32);
    /* f32: the probabilities overwrite the scores; 16-bit: their own copy. */
    void *P = S && dt != AMP_F32 ? scratch(H * T * Tk, dt) : NULL;
    amp_status st = !S || (dt != AMP_F32 && !P) ? AMP_ERR_MEMORY : AMP_OK;
    void *Pv = P ? P : (void *)S;
    if (st == AMP_OK && a->Tk > 0) /* S [heads, T, Tk] = scale q kᵀ */
        st = cuda_gemm(false, true, T, Tk, d, a->scale, a->q, d, T * d, a->k, kld, ks, 0.0f, S, Tk, T * Tk, H, dt,
                       AMP_F32);
    else if (st == AMP_OK)
        st = scores(a, S);
    if (st == AMP_OK)
        st = cuda_attn_softmax(S, H, T, Tk, a->causal, Pv, dt, a->lse);
    if (st == AMP_OK)
        st = cuda_gemm(false, false, T, d, Tk, 1.0f, Pv, Tk, T * Tk, a->v, kld, ks, 0.0f, a->out, d, T * d, H, dt,
                       dt);
    cuda_free(S);
    cuda_free(P);
    return st;
}

amp_status cuda_attention_backward(const be_attn_desc *a)
{
    const int64_t T = a->T, d = a->D, H = a->heads;
    if (H <= 0 || T <= 0 || d <= 0)
        return AMP_OK;
    if (!a->lse)
        return amp_set_error(AMP_ERR_ARG, "attention_backward: no log-sum-exp to rebuild the probabilities from");
    if (a->Tk > 0)
        return amp_set_error(AMP_ERR_STATE, "attention_backward: cached attention (a KV cache) has no backward");
    const amp_dtype dt = a->dt;
    void *Pc = NULL, *dSc = NULL;
    float *dP = NULL, *S = scratch(H * T * T, AMP_F32);
    amp_status st = S ? AMP_OK : AMP_ERR_MEMORY;
    if (st == AMP_OK && dt != AMP_F32 && !(Pc = scratch(H * T * T, dt)))
        st = AMP_ERR_MEMORY;
    if (st == AMP_OK)
        st = scores(a, S);
    /* P = exp(S - lse) in f32 (in S), and in dt for the GEMMs. */
    if (st == AMP_OK)
        st = cuda_attn_probs(S, H, T, a->causal, a->lse, Pc, dt);
    const void *P = Pc ? Pc : (const void *)S;
    if (st == AMP_OK && a->gv) /* dV = Pᵀ dO */
        st = cuda_gemm(true, false, T, d, T, 1.0f, P, T, T * T, a->gout, d, T * d, 0.0f, a->gv, d, T * d, H, dt, dt);
    if (st == AMP_OK && (a->gq || a->gk)) {
        /* dP = dO Vᵀ (f32), then dS = scale P (dP - rowsum(P dP)) in place. */
        if (!(dP = scratch(H * T * T, AMP_F32)))
            st = AMP_ERR_MEMORY;
        if (st == AMP_OK)
            st = cuda_gemm(false, true, T, T, d, 1.0f, a->gout, d, T * d, a->v, d, T * d, 0.0f, dP, T, T * T, H, dt,
                           AMP_F32);
        if (st == AMP_OK)
            st = cuda_attn_dscores(S, dP, H, T, a->causal, a->scale);
        if (st == AMP_OK && dt != AMP_F32) {
            if (!(dSc = scratch(H * T * T, dt)))
                st = AMP_ERR_MEMORY;
            if (st == AMP_OK)
                st = cuda_convert(dP, AMP_F32, dSc, dt, H * T * T);
        }
        const void *dS = dSc ? dSc : (const void *)dP;
        if (st == AMP_OK && a->gq) /* dQ = dS K */
            st = cuda_gemm(false, false, T, d, T, 1.0f, dS, T, T * T, a->k, d, T * d, 0.0f, a->gq, d, T * d, H, dt, dt);
        if (st == AMP_OK && a->gk) /* dK = dSᵀ Q */
            st = cuda_gemm(true, false, T, d, T, 1.0f, dS, T, T * T, a->q, d, T * d, 0.0f, a->gk, d, T * d, H, dt, dt);
    }
    cuda_free(S);
    cuda_free(Pc);
    cuda_free(dP);
    cuda_free(dSc);
    return st;
}

#else
typedef int ampc_backend_cuda_linalg_unused; /* ISO C wants a declaration in every file */
#endif
