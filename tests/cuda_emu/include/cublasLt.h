/*
 * cublasLt.h - cudaemu's stand-in for NVIDIA's cuBLASLt header: the part of
 * the API that ampc's CUDA backend (src/backend/cuda/gemm.cu) calls, with
 * NVIDIA's names, types, signatures and enum values, implemented on the
 * CPU by tests/cuda_emu/cublaslt.cc. See that file for what is emulated,
 * what is checked, and the data-type combinations accepted.
 *
 * Conventions (as cuBLASLt's): matrices are column-major; a layout gives
 * rows, cols and ld (elements from one column to the next, >= rows);
 * cublasLtMatmul computes D = epilogue(alpha op(A) op(B) + beta C).
 */
#ifndef CUDAEMU_CUBLASLT_H
#define CUDAEMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_runtime.h" /* cudaStream_t */
#include "library_types.h"

#if defined(__cplusplus)
extern "C" {
#endif

/* ---- Shared with the classic cuBLAS API (cublas_api.h in the toolkit) ---- */
#ifndef CUDAEMU_CUBLAS_COMMON_TYPES
#define CUDAEMU_CUBLAS_COMMON_TYPES

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

typedef enum {
    CUBLAS_OP_N = 0, /* as stored */
    CUBLAS_OP_T = 1, /* transposed */
    CUBLAS_OP_C = 2, /* conjugate transposed */
    CUBLAS_OP_HERMITAN = 2,
    CUBLAS_OP_CONJG = 3,
} cublasOperation_t;

typedef enum {
    CUBLAS_POINTER_MODE_HOST = 0,
    CUBLAS_POINTER_MODE_DEVICE = 1,
} cublasPointerMode_t;

typedef enum {
    CUBLAS_FILL_MODE_LOWER = 0,
    CUBLAS_FILL_MODE_UPPER = 1,
    CUBLAS_FILL_MODE_FULL = 2,
} cublasFillMode_t;

/* How products are accumulated: 32F is an f32 accumulator; the FAST_
 * variants let f32 inputs be rounded to a narrower type first (TF32: 10
 * explicit mantissa bits) for tensor cores. */
typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73,
} cublasComputeType_t;

#endif /* CUDAEMU_CUBLAS_COMMON_TYPES */

/* ---- Opaque objects ---- */

/* The library context (cublasLtCreate / cublasLtDestroy). */
typedef struct cublasLtContext *cublasLtHandle_t;

/* Descriptors are pointers to "semi-opaque" blocks, as in NVIDIA's header;
 * only the Create functions make them here. */
typedef struct {
    uint64_t data[8];
} cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;

typedef struct {
    uint64_t data[32];
} cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;

typedef struct {
    uint64_t data[8];
} cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;

/* An algorithm as the heuristic chose it: a value, copied freely. */
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

/* ---- Matrix layouts ---- */

typedef enum {
    CUBLASLT_ORDER_COL = 0, /* ld = elements between column starts */
    CUBLASLT_ORDER_ROW = 1, /* ld = elements between row starts */
    CUBLASLT_ORDER_COL32 = 2,
    CUBLASLT_ORDER_COL4_4R2_8C = 3,
    CUBLASLT_ORDER_COL32_2R_4R4 = 4,
} cublasLtOrder_t;

/* Attribute (value type, default). */
typedef enum {
    CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                 /* uint32_t (cudaDataType) */
    CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                /* int32_t, CUBLASLT_ORDER_COL */
    CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                 /* uint64_t */
    CUBLASLT_MATRIX_LAYOUT_COLS = 3,                 /* uint64_t */
    CUBLASLT_MATRIX_LAYOUT_LD = 4,                   /* int64_t */
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,          /* int32_t, 1 */
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6, /* int64_t elements, 0 */
    CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET = 7,         /* int64_t bytes, 0 */
} cublasLtMatrixLayoutAttribute_t;

/* ---- Matmul descriptor ---- */

typedef enum {
    CUBLASLT_POINTER_MODE_HOST = CUBLAS_POINTER_MODE_HOST,
    CUBLASLT_POINTER_MODE_DEVICE = CUBLAS_POINTER_MODE_DEVICE,
    CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2,
    CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3,
    CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4,
} cublasLtPointerMode_t;

/* What is applied to alpha op(A) op(B) + beta C before it is stored. The
 * _BIAS forms first add a bias vector (one value per row of D, the same
 * for every column). GELU_AUX and GELU_AUX_BIAS also store the GELU's
 * input into the aux matrix (EPILOGUE_AUX_POINTER, _LD, _BATCH_STRIDE,
 * _DATA_TYPE); the RELU_AUX and gradient (D*, BGRAD*) forms are not
 * emulated. */
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_RELU_AUX = 130,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_RELU_BIAS = 6,
    CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 134,
    CUBLASLT_EPILOGUE_DRELU = 136,
    CUBLASLT_EPILOGUE_DRELU_BGRAD = 152,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_DGELU = 192,
    CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
    CUBLASLT_EPILOGUE_BGRADA = 256,
    CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

/* Attribute (value type, default). */
typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,               /* int32_t */
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,                 /* int32_t (cudaDataType) */
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,               /* int32_t, HOST */
    CUBLASLT_MATMUL_DESC_TRANSA = 3,                     /* int32_t, CUBLAS_OP_N */
    CUBLASLT_MATMUL_DESC_TRANSB = 4,                     /* int32_t, CUBLAS_OP_N */
    CUBLASLT_MATMUL_DESC_TRANSC = 5,                     /* int32_t, CUBLAS_OP_N */
    CUBLASLT_MATMUL_DESC_FILL_MODE = 6,                  /* int32_t, FULL */
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,                   /* uint32_t, DEFAULT */
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,               /* const void *, NULL */
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,         /* int64_t elements, 0 */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,      /* void *, NULL */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,           /* int64_t elements, 0 */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13, /* int64_t elements, 0 */
    CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE = 14, /* int64_t */
    CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,           /* int32_t */
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,           /* const void * */
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,           /* const void * */
    CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19,           /* const void * */
    CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,           /* const void * */
    CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21,            /* void * */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,    /* int32_t (cudaDataType), -1: D's type */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER = 23,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER = 24,
    CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,     /* int8_t */
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26, /* int32_t, -1: D's type */
} cublasLtMatmulDescAttributes_t;

/* ---- Heuristic preferences and results ---- */

/* Attribute (value type, default). */
typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,           /* uint32_t */
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,   /* uint64_t, 0 */
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* uint32_t, 256 */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, /* uint32_t, 256 */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, /* uint32_t, 256 */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8, /* uint32_t, 256 */
    CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT = 9,       /* float */
    CUBLASLT_MATMUL_PREF_IMPL_MASK = 12,            /* uint64_t */
} cublasLtMatmulPreferenceAttributes_t;

/* One algorithm the heuristic proposes; the other fields mean something
 * only when state is CUBLAS_STATUS_SUCCESS. */
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize; /* bytes cublasLtMatmul needs with this algo */
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

/* ---- Functions ---- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

#if defined(__cplusplus)
}
#endif

#endif
