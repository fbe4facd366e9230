/*
 * gemm.h - the CPU matrix multiply every dense op (matmul, linear, conv2d)
 * runs on: the GEMM module's entry (src/backend/cpu/gemm/).
 *
 * Row-major throughout: C[M x N] = alpha * op(A) * op(B) + beta * C, where
 * op(A) is M x K (A is stored K x M when trans_a), op(B) is K x N (B is
 * stored N x K when trans_b), and lda / ldb / ldc are row strides in
 * elements. beta == 0 never reads C (NaN in C does not leak through).
 *
 * The module: dispatch.c defines what this header declares and chooses,
 * per product, who runs it (oneDNN's matmul, ampc's native bf16 kernels,
 * the f16 split on AMX, or the widening f32 kernels); the drivers and
 * kernels below it (gemm_kernels.h) run what they are handed and never
 * call back up; gemm_common.h holds what both sides share. The module
 * calls out only to oneDNN's (src/backend/cpu/onednn/) and to base and
 * dtype.
 *
 * Defines:
 *   gemm_f32   - float32 in, float32 out.
 *   gemm_lowp  - any float dtypes in and out (f32 / f16 / bf16): panels are
 *                widened to f32 while packing, every product is accumulated
 *                in f32, and each output is rounded to C's dtype once.
 *                bf16 x bf16 runs on the CPU's bf16 dot products instead
 *                (AMX or AVX512-BF16, gemm_bf16.c) where they are faster:
 *                still f32 accumulation and one rounding, but bf16
 *                subnormal inputs count as zero there. Big f16 x f16
 *                products run on AMX too, each f16 split exactly into two
 *                bf16 (gemm_f16_split.c): the same exact products, f32
 *                accumulation in another order, one rounding.
 *   gemm_batched - a batch of products with a bias and an activation.
 *   the paths' names and modes, for tests, benchmarks and logs.
 *
 * Both run on oneDNN's matmul instead where it is built in and faster for
 * the shape (onednn.h), else on ampc's kernels below.
 * Both return AMP_OK, or AMP_ERR_MEMORY with the error set when a packing
 * buffer cannot be allocated. They thread with amp_parallel_for
 * (amp_threads()), and run on one thread when called inside one.
 */
#ifndef AMPC_GEMM_H
#define AMPC_GEMM_H

#include "ampc.h"
#include "backend/cpu/gemm/gemm_common.h"
#include "backend/cpu/onednn/onednn.h"

amp_status gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc);

amp_status gemm_lowp(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const void *A, amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt,
                     int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc);

/* gemm_lowp with a tile epilogue (gemm_common.h; NULL: none). */
amp_status gemm_lowp_ep(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const void *A, amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt,
                        int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep);

/*
 * A batch of products with an epilogue, for matmul and linear: for
 * b = 0..batch-1, with A, B, C advanced by sa, sb, sc elements (sa or sb 0:
 * that operand is shared),
 *     C_b = act(op(A_b) op(B_b) + bias + beta * C_b)
 * in gemm_lowp's dtypes; bias is NULL or N values of C's dtype, added to
 * every row (only with beta = 0: an AMP_ERR_ARG error otherwise). oneDNN runs it in one call where it takes it (bias
 * fused, the relu applied after by cpu_relu_rows); otherwise each product runs on gemm_lowp, spread
 * over the threads when there are several, with the bias written into C
 * first and the activation applied after (the same values: relu commutes
 * with rounding).
 */
amp_status gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                        const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                        int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                        const void *bias, cpu_act act);

/* gemm_batched with a tile epilogue (NULL: none) applied after the bias:
 * batch 1 and CPU_ACT_NONE only (AMP_ERR_ARG otherwise). */
amp_status gemm_batched_ep(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                           const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                           int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                           const void *bias, cpu_act act, const gemm_epilogue *ep);

/* "avx512 12x32", "avx2 6x16" or "portable 4x16", honouring amp_cpu_limit:
 * the widening path's micro-kernel (gemm.c). */
const char *gemm_kernel_name(void);

/* AUTO mode's rule for one product (whether oneDNN runs it when it can):
 * exposed for the benchmark's table. */
bool gemm_onednn_policy(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, amp_dtype dt);

/* Whether gemm_lowp runs this product (A's dtype dt) on ampc's own
 * kernels, where a tile epilogue runs on each tile while it is in cache,
 * rather than on oneDNN, after which it runs over all of C. */
bool gemm_lowp_runs_own(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, amp_dtype dt);

/* ---- bf16 x bf16 on native 16-bit dot products ---- */

/* Which path gemm_lowp takes when both A and B are bf16:
 *   AUTO  the fastest this CPU has (see dispatch.c for the choice)
 *   WIDEN widen to f32 while packing, f32 FMA kernels (as for f16)
 *   DOT   AVX512-BF16 VDPBF16PS kernel
 *   AMX   AMX-BF16 TDPBF16PS tiles
 * A forced path the CPU lacks (or amp_cpu_limit masks) falls back to AUTO's
 * choice among the rest. For tests and benchmarks. */
typedef enum { GEMM_BF16_AUTO, GEMM_BF16_WIDEN, GEMM_BF16_DOT, GEMM_BF16_AMX } gemm_bf16_mode;
void gemm_bf16_set_mode(gemm_bf16_mode mode);

/* The most rows (0 .. 8; default 8) for which a bf16 product with B
 * transposed takes the few-row gemv path on the native paths instead of
 * the blocked kernel (gemm_bf16.c); 0 turns it off. For tests and
 * benchmarks. */
void gemm_bf16_set_gemv_rows(int max_m);

/* The most rows (0 .. 4; default 4) for which an f32 product with B
 * transposed (A not) takes the f32 gemv (gemv_f32.c) instead of oneDNN
 * or the blocked kernel; 0 turns it off. For tests and benchmarks. */
void gemm_f32_set_gemv_rows(int max_m);

/* Whether bf16 products here run on the VDPBF16PS kernel (AMD's
 * AVX512-BF16 without AMX), where gemm_onednn_policy can keep every bf16
 * product on ampc's kernels. */
bool gemm_bf16_prefers_own(void);

/* The path a bf16 x bf16 product takes now: "avx512bf16 12x32",
 * "amx-bf16 32x32" or "widen: " followed by gemm_kernel_name(). */
const char *gemm_bf16_kernel_name(void);

/* ---- f16 x f16 as exact bf16 splits on AMX ---- */

/* Which path gemm_lowp takes when both A and B are f16:
 *   AUTO   the split on AMX where the CPU has it and the product is big
 *          enough to gain (dispatch.c), else widening
 *   WIDEN  widen to f32 while packing, f32 FMA kernels
 *   SPLIT  the split on AMX whatever the size (where the CPU has it)
 * The environment variable AMPC_GEMM_F16=widen|split|auto, read once,
 * sets the starting mode (for comparing whole training steps). For tests
 * and benchmarks. */
typedef enum { GEMM_F16_AUTO, GEMM_F16_WIDEN, GEMM_F16_SPLIT } gemm_f16_mode;
void gemm_f16_set_mode(gemm_f16_mode mode);

/* The path f16 x f16 products take now: "widen: avx512 12x32", "amx-bf16
 * split 32x32" (forced), or in AUTO with AMX "amx-bf16 split 32x32 from
 * 2^22 multiply-adds, else widen: avx512 12x32" (products with a side
 * under 32 widen too). */
const char *gemm_f16_kernel_name(void);

/* Whether AUTO takes the split for an M x N x K product where AMX is
 * usable (the measured threshold; for bench_gemm's tables). */
bool gemm_f16_split_policy(int64_t M, int64_t N, int64_t K);

/* Whether gemm_lowp runs an f16 x f16 product of this size on the split
 * now (mode, CPU, AUTO's threshold; alpha != 0): callers that would
 * otherwise widen an f16 operand to f32 up front (matmul's dW) keep it
 * f16 then, so the product stays f16 x f16. */
bool gemm_f16_split_active(int64_t M, int64_t N, int64_t K);

#endif
