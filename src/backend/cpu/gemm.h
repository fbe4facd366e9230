/*
 * gemm.h - the CPU matrix multiply every dense op (matmul, linear, conv2d)
 * runs on.
 *
 * Row-major throughout: C[M x N] = alpha * op(A) * op(B) + beta * C, where
 * op(A) is M x K (A is stored K x M when trans_a), op(B) is K x N (B is
 * stored N x K when trans_b), and lda / ldb / ldc are row strides in
 * elements. beta == 0 never reads C (NaN in C does not leak through).
 *
 * Defines:
 *   gemm_f32   - float32 in, float32 out.
 *   gemm_lowp  - any float dtypes in and out (f32 / f16 / bf16): panels are
 *                widened to f32 while packing, every product is accumulated
 *                in f32, and each output is rounded to C's dtype once.
 *   gemm_kernel_name - which micro-kernel this CPU runs (tests, logs).
 *
 * Both return AMP_OK, or AMP_ERR_MEMORY with the error set when a packing
 * buffer cannot be allocated. They thread with OpenMP (amp_threads()),
 * and run on one thread when called inside a parallel region.
 */
#ifndef AMPC_GEMM_H
#define AMPC_GEMM_H

#include "ampc.h"

amp_status gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc);

amp_status gemm_lowp(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const void *A, amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt,
                     int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc);

/* "avx512 12x32", "avx2 6x16" or "portable 4x16", honouring amp_cpu_limit. */
const char *gemm_kernel_name(void);

/* ---- between gemm.c and its per-ISA micro-kernels (gemm_x86.c) ---- */

/* One MR x NR tile: C = alpha * (a . b) + beta * C over kc steps, where a
 * is a packed panel a[k * MR + r] and b a packed panel b[k * NR + j]
 * (64-byte aligned). beta == 0 must not read C. */
typedef void (*gemm_micro_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                              float alpha, float beta);

typedef struct {
    int mr, nr;
    gemm_micro_fn micro;
    const char *name;
} gemm_kernel;

#if defined(__x86_64__)
extern const gemm_kernel gemm_kernel_avx512; /* 12 x 32, AVX-512F + FMA */
extern const gemm_kernel gemm_kernel_avx2;   /* 6 x 16, AVX2 + FMA */
#endif

#endif
