/*
 * gemm.cu - matrix products through cuBLASLt.
 *
 * ampc's tensors are row-major; cuBLASLt is column-major. A row-major C
 * [M, N] is the column-major [N, M] matrix Cᵀ = op(B)ᵀ op(A)ᵀ, so the call
 * swaps the operands (B first) and their transpose flags' meanings: a
 * row-major B [K, N] read as column-major is already [N, K], untransposed.
 *
 * Precision: f16 and bf16 inputs run with CUBLAS_COMPUTE_32F (f32
 * accumulation on tensor cores) into a 16-bit or an f32 C; f32 runs with
 * CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 when TF32 was allowed
 * (amp_cuda_allow_tf32), as PyTorch's allow_tf32 switch. beta = 1 makes the
 * GEMM add onto C (linear's bias rows), still with one rounding.
 *
 * Epilogues (cuda_gemm_epilogue): bias, relu, gelu, bias then relu or
 * gelu, applied by cuBLASLt to the f32 result before its one rounding into
 * C; the GELU_AUX forms also store the GELU's input (the pre-activation
 * backward needs) into an aux matrix laid out as C. They are an
 * optimisation only: whenever cuBLASLt refuses one (no algorithm from the
 * heuristic, NOT_SUPPORTED) the entry reports "not taken" and the caller
 * runs the unfused path (bias rows + beta 1, then a relu or gelu pass).
 *
 * cuBLASLt is opened with dlopen at the first product (lt_load), so a
 * CPU-only program never maps it; when it is missing the product fails
 * with an error naming the library.
 *
 * One handle and one 32 MiB workspace for the process; the heuristic picks
 * the algorithm per call (cheap next to the GEMMs ampc runs); when it has
 * none for a layout, a plain kernel does the product. A batch with
 * a shared operand (stride 0) runs as a loop of single GEMMs: cuBLASLt's
 * strided batches are not documented to accept a zero stride.
 */
#include "backend/cuda/cuda_common.cuh"

#include <atomic>
#include <cublasLt.h>
#include <dlfcn.h>
#include <mutex>
#include <stdio.h>

#define WORKSPACE ((size_t)32 << 20)

static std::once_flag lt_once;
static cublasLtHandle_t lt;
static void *workspace;
static cublasStatus_t lt_status = CUBLAS_STATUS_NOT_INITIALIZED;
/* cuda_gemm_epilogues_taken's counts, per cuda_epilogue. */
static std::atomic<uint64_t> epilogues_taken[CUDA_EPI_COUNT];

/* cuBLASLt is opened (dlopen) at the first product, not linked: a program
 * that never uses a CUDA device never maps it (hundreds of MiB, and its
 * start-up runs at load time otherwise). cudaemu links its emulation in:
 * the table points at it. */
#define LT_FUNCS(X)                                                                                            \
    X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescSetAttribute)                            \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutSetAttribute)             \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceSetAttribute)   \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

static struct {
#define LT_MEMBER(f) decltype(&::f) f;
    LT_FUNCS(LT_MEMBER)
#undef LT_MEMBER
} api;
static char lt_missing[512]; /* why cuBLASLt could not be opened; "" when it was */

#define LT_STR2(x) #x
#define LT_STR(x) LT_STR2(x)

static bool lt_load(void)
{
#ifdef CUDAEMU_CUBLASLT_H
#define LT_BIND(f) api.f = &::f;
    LT_FUNCS(LT_BIND)
#undef LT_BIND
    return true;
#else
    /* The soname of the toolkit ampc was built with, then the unversioned name. */
    static const char *const names[] = {"libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR), "libcublasLt.so"};
    void *h = NULL;
    for (const char *n : names)
        if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL)))
            break;
    if (!h) {
        const char *e = dlerror();
        snprintf(lt_missing, sizeof lt_missing,
                 "cuBLASLt could not be loaded (%s: %s); install CUDA %d's cuBLASLt or add its directory to "
                 "LD_LIBRARY_PATH",
                 names[0], e ? e : "not found", CUBLAS_VER_MAJOR);
        return false;
    }
#define LT_BIND(f)                                                                                             \
    if (!(api.f = (decltype(&::f))dlsym(h, #f))) {                                                             \
        snprintf(lt_missing, sizeof lt_missing, "cuBLASLt (%s) lacks %s", names[0], #f);                       \
        return false;                                                                                          \
    }
    LT_FUNCS(LT_BIND)
#undef LT_BIND
    return true; /* kept open for the process's life, as CUDA's own libraries */
#endif
}

static void lt_init(void)
{
    if (!lt_load())
        return;
    lt_status = api.cublasLtCreate(&lt);
    if (lt_status == CUBLAS_STATUS_SUCCESS)
        workspace = cuda_malloc(WORKSPACE);
}

static amp_status lt_check(cublasStatus_t s, const char *what)
{
    if (lt_missing[0])
        return amp_set_error(AMP_ERR_DEVICE, "cuda: %s", lt_missing);
    if (s == CUBLAS_STATUS_SUCCESS)
        return AMP_OK;
    return amp_set_error(s == CUBLAS_STATUS_ALLOC_FAILED ? AMP_ERR_MEMORY : AMP_ERR_DEVICE,
                         "cublasLt: %s failed with status %d", what, (int)s);
}

/* The alignment (bytes, at most 256) every matrix of a batch starting at
 * p, stride_bytes apart, has: the heuristic assumes 256 unless told, and
 * would pick kernels that fault on a less aligned operand (an offset view,
 * one batch of a loop). */
static uint32_t alignment(const void *p, size_t stride_bytes, int64_t batch)
{
    uintptr_t v = (uintptr_t)p | (uintptr_t)256;
    if (batch > 1)
        v |= (uintptr_t)stride_bytes;
    return (uint32_t)(v & (~v + 1));
}

static cudaDataType_t cuda_type(amp_dtype dt)
{
    return dt == AMP_F16 ? CUDA_R_16F : dt == AMP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The fallback when cuBLASLt has no algorithm for a shape / layout (odd
 * leading dims in 16 bits, tiny matrices): one thread per output element,
 * f32 accumulation, one rounding. Slow but always right. */
__global__ void k_gemm_naive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                             int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, void *C,
                             int64_t ldc, int64_t sc, int64_t batch, int abdt, int cdt)
{
    const int64_t total = batch * M * N;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = e / (M * N), i = (e / N) % M, j = e % N;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float a = ld_f32(A, abdt, b * sa + (ta ? k * lda + i : i * lda + k));
            float v = ld_f32(B, abdt, b * sb + (tb ? j * ldb + k : k * ldb + j));
            acc += a * v;
        }
        const int64_t c = b * sc + i * ldc + j;
        float r = alpha * acc;
        if (beta != 0.0f)
            r += beta * ld_f32(C, cdt, c);
        st_f32(C, cdt, c, r);
    }
}

/* The profiler's name of a cuBLASLt product (PROF_KERNEL), by input dtype
 * and whether an epilogue is fused. */
static const char *lt_name(amp_dtype abdt, bool tf32, bool epi)
{
    static const char *const names[2][4] = {
        {"cublasLt gemm f32", "cublasLt gemm f16", "cublasLt gemm bf16", "cublasLt gemm tf32"},
        {"cublasLt gemm f32 +epilogue", "cublasLt gemm f16 +epilogue", "cublasLt gemm bf16 +epilogue",
         "cublasLt gemm tf32 +epilogue"},
    };
    int k = tf32 ? 3 : abdt == AMP_F16 ? 1 : abdt == AMP_BF16 ? 2 : 0;
    return names[epi ? 1 : 0][k];
}

static amp_status naive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                        int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, void *C, int64_t ldc,
                        int64_t sc, int64_t batch, amp_dtype abdt, amp_dtype cdt)
{
    k_gemm_naive<<<cuda_blocks(batch * M * N), CUDA_THREADS, 0, cuda_stream()>>>(
        ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, abdt, cdt);
    return cuda_launched("fallback GEMM kernel");
}

/* One (possibly strided-batched) GEMM in cuBLASLt's column-major terms.
 * With taken NULL (plain GEMMs) a layout cuBLASLt has no algorithm for
 * goes to the naive kernel. With taken non-NULL (an epilogue, epi, bias
 * and aux set as it needs) anything cuBLASLt refuses - the attribute, the
 * heuristic, the launch - sets *taken = false and returns AMP_OK with C
 * untouched, so that the caller runs its unfused path instead. */
static amp_status lt_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                            int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, void *C,
                            int64_t ldc, int64_t sc, int64_t batch, amp_dtype abdt, amp_dtype cdt,
                            cublasLtEpilogue_t epi, const void *bias, void *aux, int64_t ldaux, bool *taken)
{
    bool refused = false; /* an epilogue cuBLASLt would not take */
    if (taken)
        *taken = false;
    cublasComputeType_t ct = abdt == AMP_F32 && cuda_get_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t at = cuda_type(abdt), ctp = cuda_type(cdt);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    /* Column-major: first operand is B (rows x cols as stored: [N, K] when
     * B is [K, N] row-major and not transposed), second is A. */
    cublasOperation_t op1 = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t r1 = tb ? (uint64_t)K : (uint64_t)N, c1 = tb ? (uint64_t)N : (uint64_t)K;
    uint64_t r2 = ta ? (uint64_t)M : (uint64_t)K, c2 = ta ? (uint64_t)K : (uint64_t)M;
    amp_status st = lt_check(api.cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F), "MatmulDescCreate");
    if (st == AMP_OK)
        st = lt_check(api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1),
                      "TRANSA");
    if (st == AMP_OK)
        st = lt_check(api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2),
                      "TRANSB");
    /* The epilogue and its bias. Column-major D is [N, M] (row-major C
     * [M, N] read column-major), so the bias - one value per D row, the
     * same for every column - runs along N, a row-major row of C. Its
     * elements have D's type (BIAS_DATA_TYPE left at its default, -1). */
    if (st == AMP_OK && taken && epi != CUBLASLT_EPILOGUE_DEFAULT) {
        refused = api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) !=
                  CUBLAS_STATUS_SUCCESS;
        if (!refused && bias)
            refused = api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
                      CUBLAS_STATUS_SUCCESS;
        /* The GELU's input, as D: column-major [N, M] with ld ldaux (in
         * elements; a multiple of 8, >= D's N rows, cublasLt.h's
         * EPILOGUE_AUX_LD). Its type is left at the default (-1: D's type,
         * EPILOGUE_AUX_DATA_TYPE). Set before the heuristic, which reads
         * the alignment from the pointer, as the bias's. */
        if (!refused && aux)
            refused = api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                     sizeof aux) != CUBLAS_STATUS_SUCCESS ||
                      api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux,
                                                     sizeof ldaux) != CUBLAS_STATUS_SUCCESS;
    }
    if (st == AMP_OK && !refused)
        st = lt_check(api.cublasLtMatrixLayoutCreate(&la, at, r1, c1, ldb), "layout of B");
    if (st == AMP_OK && !refused)
        st = lt_check(api.cublasLtMatrixLayoutCreate(&lb, at, r2, c2, lda), "layout of A");
    if (st == AMP_OK && !refused)
        st = lt_check(api.cublasLtMatrixLayoutCreate(&lc, ctp, (uint64_t)N, (uint64_t)M, ldc), "layout of C");
    if (st == AMP_OK && !refused && batch > 1) {
        int32_t bc = (int32_t)batch;
        cublasLtMatrixLayout_t ls[3] = {la, lb, lc};
        int64_t strides[3] = {sb, sa, sc};
        for (int k = 0; k < 3 && st == AMP_OK; k++) {
            st = lt_check(
                api.cublasLtMatrixLayoutSetAttribute(ls[k], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc),
                "BATCH_COUNT");
            if (st == AMP_OK)
                st = lt_check(api.cublasLtMatrixLayoutSetAttribute(ls[k], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                               &strides[k], sizeof strides[k]),
                              "STRIDED_BATCH_OFFSET");
        }
    }
    size_t ws = workspace ? WORKSPACE : 0;
    if (st == AMP_OK && !refused)
        st = lt_check(api.cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    if (st == AMP_OK && !refused)
        st = lt_check(api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof ws),
                      "MAX_WORKSPACE_BYTES");
    const size_t ea = amp_dtype_size(abdt), ec = amp_dtype_size(cdt);
    const uint32_t align[4] = {alignment(B, (size_t)sb * ea, batch), alignment(A, (size_t)sa * ea, batch),
                               alignment(C, (size_t)sc * ec, batch), alignment(C, (size_t)sc * ec, batch)};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int k = 0; k < 4 && st == AMP_OK && !refused; k++)
        st = lt_check(api.cublasLtMatmulPreferenceSetAttribute(pref, which[k], &align[k], sizeof align[k]),
                      "MIN_ALIGNMENT");
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    /* No algorithm is NOT_SUPPORTED (or a count of 0): the plain kernel. */
    cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
    if (st == AMP_OK && !refused) {
        hs = api.cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found);
        /* For an epilogue any refusal (an unsupported combination may come
         * back as INVALID_VALUE as well) means the unfused path. */
        if (taken)
            refused = hs != CUBLAS_STATUS_SUCCESS || found < 1;
        else if (hs != CUBLAS_STATUS_NOT_SUPPORTED)
            st = lt_check(hs, "AlgoGetHeuristic");
    }
    if (st == AMP_OK && !refused && !taken && (hs == CUBLAS_STATUS_NOT_SUPPORTED || found < 1)) {
        void *pe = cuda_prof_kernel_begin("ampc gemm kernel (no cuBLASLt algorithm)");
        st = naive(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, abdt, cdt);
        cuda_prof_gemm_end(pe, M, N, K, batch, abdt, cdt);
    } else if (st == AMP_OK && !refused) {
        cuda_note_launch();
        void *pe = cuda_prof_kernel_begin(
            lt_name(abdt, ct == CUBLAS_COMPUTE_32F_FAST_TF32, taken && epi != CUBLASLT_EPILOGUE_DEFAULT));
        cublasStatus_t ms = api.cublasLtMatmul(lt, desc, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &heur.algo,
                                           workspace, ws, cuda_stream());
        cuda_prof_gemm_end(pe, M, N, K, batch, abdt, cdt);
        if (taken && ms == CUBLAS_STATUS_NOT_SUPPORTED)
            refused = true; /* refused before launching: C is untouched */
        else
            st = lt_check(ms, "Matmul");
    }
    if (taken)
        *taken = st == AMP_OK && !refused;
    if (pref)
        api.cublasLtMatmulPreferenceDestroy(pref);
    if (lc)
        api.cublasLtMatrixLayoutDestroy(lc);
    if (lb)
        api.cublasLtMatrixLayoutDestroy(lb);
    if (la)
        api.cublasLtMatrixLayoutDestroy(la);
    if (desc)
        api.cublasLtMatmulDescDestroy(desc);
    return st;
}

extern "C" amp_status cuda_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                                int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, void *C,
                                int64_t ldc, int64_t sc, int64_t batch, amp_dtype abdt, amp_dtype cdt)
{
    if (M <= 0 || N <= 0 || batch <= 0)
        return AMP_OK;
    if (!(abdt == AMP_F32 || abdt == AMP_F16 || abdt == AMP_BF16) || !(cdt == abdt || cdt == AMP_F32))
        return amp_set_error(AMP_ERR_DTYPE, "cuda gemm: %s inputs into %s output", amp_dtype_name(abdt),
                             amp_dtype_name(cdt));
    if (K <= 0) {
        /* An empty sum: C = beta * C: unchanged (beta 1), zeros (beta 0,
         * C not read), or scaled by the plain kernel (its sum is empty). */
        if (beta == 1.0f)
            return AMP_OK;
        if (beta != 0.0f)
            return naive(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, abdt, cdt);
        size_t es = amp_dtype_size(cdt);
        for (int64_t b = 0; b < batch; b++) {
            amp_status st = cuda_check(cudaMemset2DAsync((char *)C + (size_t)(b * sc) * es, (size_t)ldc * es, 0,
                                                         (size_t)N * es, (size_t)M, cuda_stream()),
                                       "cudaMemset2DAsync");
            if (st != AMP_OK || sc == 0)
                return st;
        }
        return AMP_OK;
    }
    std::call_once(lt_once, lt_init);
    if (lt_status != CUBLAS_STATUS_SUCCESS)
        return lt_check(lt_status, "cublasLtCreate");
    if (batch > 1 && (sa == 0 || sb == 0 || sc == 0)) {
        size_t ea = amp_dtype_size(abdt), ec = amp_dtype_size(cdt);
        for (int64_t b = 0; b < batch; b++) {
            amp_status st = lt_matmul(ta, tb, M, N, K, alpha, (const char *)A + (size_t)(b * sa) * ea, lda, 0,
                                      (const char *)B + (size_t)(b * sb) * ea, ldb, 0, beta,
                                      (char *)C + (size_t)(b * sc) * ec, ldc, 0, 1, abdt, cdt,
                                      CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, NULL);
            if (st != AMP_OK)
                return st;
        }
        return AMP_OK;
    }
    return lt_matmul(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, abdt, cdt,
                     CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, NULL);
}

extern "C" amp_status cuda_gemm_epilogue(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                                         int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc,
                                         amp_dtype abdt, amp_dtype cdt, cuda_epilogue ep, const void *bias,
                                         void *aux, int64_t ldaux, bool *taken)
{
    *taken = false;
    cublasLtEpilogue_t epi;
    switch (ep) {
    case CUDA_EPI_BIAS: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case CUDA_EPI_RELU: epi = CUBLASLT_EPILOGUE_RELU; break;
    case CUDA_EPI_RELU_BIAS: epi = CUBLASLT_EPILOGUE_RELU_BIAS; break;
    case CUDA_EPI_GELU: epi = CUBLASLT_EPILOGUE_GELU; break;
    case CUDA_EPI_GELU_BIAS: epi = CUBLASLT_EPILOGUE_GELU_BIAS; break;
    case CUDA_EPI_GELU_AUX: epi = CUBLASLT_EPILOGUE_GELU_AUX; break;
    case CUDA_EPI_GELU_AUX_BIAS: epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;
    default: return AMP_OK; /* none: nothing to fuse */
    }
    const bool with_bias = ep == CUDA_EPI_BIAS || ep == CUDA_EPI_RELU_BIAS || ep == CUDA_EPI_GELU_BIAS ||
                           ep == CUDA_EPI_GELU_AUX_BIAS;
    const bool with_aux = ep == CUDA_EPI_GELU_AUX || ep == CUDA_EPI_GELU_AUX_BIAS;
    /* Empty products, odd dtypes, a missing bias or aux: the caller's path
     * knows what to do with those. So does it with an aux ld cuBLASLt
     * does not accept (not a multiple of 8, fewer than D's N rows): asking
     * would be an INVALID_VALUE, not a refusal. */
    if (M <= 0 || N <= 0 || K <= 0 || (with_bias && !bias))
        return AMP_OK;
    if (!(abdt == AMP_F32 || abdt == AMP_F16 || abdt == AMP_BF16) || !(cdt == abdt || cdt == AMP_F32))
        return AMP_OK;
    if (with_aux && (!aux || ldaux < N || ldaux % 8 != 0 || (uintptr_t)aux % amp_dtype_size(cdt) != 0))
        return AMP_OK;
    std::call_once(lt_once, lt_init);
    if (lt_status != CUBLAS_STATUS_SUCCESS)
        return lt_check(lt_status, "cublasLtCreate");
    amp_status st = lt_matmul(ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1, abdt, cdt, epi,
                              with_bias ? bias : NULL, with_aux ? aux : NULL, with_aux ? ldaux : 0, taken);
    if (*taken)
        epilogues_taken[ep]++;
    return st;
}

extern "C" uint64_t cuda_gemm_epilogues_taken(cuda_epilogue ep)
{
    return (int)ep >= 0 && (int)ep < (int)CUDA_EPI_COUNT ? epilogues_taken[ep].load() : 0;
}
