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
 *                bf16 x bf16 runs on the CPU's bf16 dot products instead
 *                (AMX or AVX512-BF16, gemm_bf16.c) where they are faster:
 *                still f32 accumulation and one rounding, but bf16
 *                subnormal inputs count as zero there. Big f16 x f16
 *                products run on AMX too, each f16 split exactly into two
 *                bf16 (gemm_f16_split.c): the same exact products, f32
 *                accumulation in another order, one rounding.
 *   gemm_kernel_name - which micro-kernel this CPU runs (tests, logs).
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

amp_status gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc);

amp_status gemm_lowp(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const void *A, amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt,
                     int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc);

/*
 * A tile epilogue: fn(ctx, i0, j0, mr, nr) is called for every block of
 * output (rows i0 .. i0+mr, columns j0 .. j0+nr of C: one strip of
 * micro-tiles, MR rows by up to a B block's width) as soon as its values
 * in C are final (summed over all of K and rounded to C's dtype), on the
 * thread that computed it, while it is still in cache.
 * Tiles are disjoint and cover C once; fn must touch only its tile's
 * elements (of C or of other M x N arrays) and must not call into a
 * parallel loop. Where oneDNN or a trivial path (K = 0, alpha = 0) runs
 * the product, fn runs after it over blocks of rows instead
 * (gemm_epilogue_all). The CPU linear's fused gelu is one.
 */
typedef struct {
    void (*fn)(void *ctx, int64_t i0, int64_t j0, int mr, int nr);
    void *ctx;
} gemm_epilogue;

/* gemm_lowp with a tile epilogue (NULL: none). */
amp_status gemm_lowp_ep(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const void *A, amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt,
                        int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep);

/* ep over all of an M x N C, in blocks of rows spread over the threads. */
void gemm_epilogue_all(const gemm_epilogue *ep, int64_t M, int64_t N);

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
#include "backend/cpu/onednn/onednn.h"
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

/* relu in place over C's batch x M rows of N (row stride ldc, batch
 * stride sc elements), as amp_relu computes it: NaN stays NaN, -0 becomes
 * +0. Every CPU path applies the fused relu this way, oneDNN's too: its
 * relu post-op turns NaN into 0, which would hide a NaN input from the
 * loss (PyTorch's relu propagates it). */
void cpu_relu_rows(void *C, amp_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t ldc, int64_t sc);

/* "avx512 12x32", "avx2 6x16" or "portable 4x16", honouring amp_cpu_limit. */
const char *gemm_kernel_name(void);

/* The path the calling thread's last product took, for the profiler's
 * kernel events (cpu_gemm): "oneDNN matmul", or the name of ampc's own
 * micro-kernel that ran ("amx-bf16 32x32", "avx512bf16 12x32", "amx-bf16
 * split 32x32" for f16, "avx512 12x32" ..., "avx512bf16 gemv" for bf16
 * products of at most 8 rows with B transposed); a static string, NULL before
 * any. A batch of products spread over threads sets it on each; the
 * calling thread runs a share of them, so it sees the path too. */
extern _Thread_local const char *gemm_path;

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

/* ---- bf16 x bf16 on native 16-bit dot products (gemm_bf16.c) ---- */

/* Which path gemm_lowp takes when both A and B are bf16:
 *   AUTO  the fastest this CPU has (see gemm_bf16.c for the choice)
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

/* Whether bf16 products here run on the VDPBF16PS kernel (AMD's
 * AVX512-BF16 without AMX), where onednn_gemm_policy keeps every bf16
 * product on ampc's kernels. */
bool gemm_bf16_prefers_own(void);

/* The path a bf16 x bf16 product takes now: "avx512bf16 12x32",
 * "amx-bf16 32x32" or "widen: " followed by gemm_kernel_name(). */
const char *gemm_bf16_kernel_name(void);

/* gemm_lowp for bf16 A and B on a native kernel. Returns false without
 * touching anything when this CPU has none (the caller widens instead);
 * otherwise true with *st the status. c_dt: f32, f16 or bf16. */
bool gemm_bf16_native(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, void *C,
                      amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep, amp_status *st);

/* gemm_lowp's product (M, N, K > 0, alpha != 0) on the given kernel,
 * whose packers read the 16-bit A and B (gemm_bf16_native's and
 * gemm_f16_split's common driver). */
typedef struct gemm_bf16_kernel gemm_bf16_kernel;
amp_status gemm_bf16_drive(const gemm_bf16_kernel *kern, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                           float beta, void *C, amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep);

/* One MR x NR tile over kp pairs of k, all in f32: C = alpha * acc + beta
 * * C, beta == 0 not reading C. Each 32-bit word of a packed panel holds a
 * pair of bf16 along k, the even k in the low half. b is always pair-major,
 * b[p * NR + j] = (B[2p][j], B[2p+1][j]); a is pair-major, a[p * MR + r]
 * (VDPBF16PS), or row-major, a[r * kp + p] (AMX tiles). kp is a multiple
 * of the kernel's kpair. Panels are 64-byte aligned. */
typedef void (*gemm_bf16_micro_fn)(int64_t kp, const uint32_t *a, const uint32_t *b, float *c,
                                   int64_t ldc, float alpha, float beta);

/* Packs lines 0 .. w-1 (of R) over k 0 .. kc-1 of an operand whose element
 * (line q, k) is s[q * rs + k * ks] (rs or ks is 1) into kp pairs, in the
 * kernel's layout; zero words pad lines w .. R-1, an odd kc's last pair
 * and the pairs past kc. Returns whether the panel holds an infinity that
 * needs the kernel's pack_a_inf for A (only the f16 split's B packer says
 * so; every other packer returns false). */
typedef bool (*gemm_bf16_pack_fn)(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc,
                                  int64_t kp, uint32_t *dst);

/* A 16-bit C tile: the f32 tile t (mr x nr, row stride tl) gets beta * C
 * added first when add_beta, then is rounded into C (c, row stride ldc,
 * bf16 or f16) when store; bit-identical to amp_convert of the sum. */
typedef void (*gemm_bf16_finish_fn)(float *t, int64_t tl, int mr, int nr, uint16_t *c, int64_t ldc,
                                    bool is_bf16, bool add_beta, float beta, bool store);

/* Few rows without packing (gemm_bf16.c's gemv path): out[i * ldo + j] =
 * sum_k a[i * lda + k] * b[j * ldb + k] in f32 for rows i < M (1 .. 4) of
 * a and lines j < n of b, both contiguous along k, on the kernel's dot
 * instruction (same exact products and subnormal flushing, another
 * summation order). */
typedef void (*gemm_bf16_rowdot_fn)(int M, int64_t K, const uint16_t *a, int64_t lda, const uint16_t *b,
                                    int64_t ldb, int64_t n, float *out, int64_t ldo);

struct gemm_bf16_kernel {
    int mr, nr;
    int kpair;              /* kp is padded (with zero pairs) to a multiple of this */
    int kc, nc;             /* the blocking: k per B block (even), columns per B block */
    int a_words2k, b_words2k; /* 32-bit words per 2 k in packed A and B lines: 1 (0 reads
                             * as 1) for bf16 pairs; the f16 split (gemm_f16_split.c) packs
                             * 2 words per k of A (4) and 1 of B (2). kp counts A's words;
                             * B panels hold kp * b_words2k / a_words2k words per line. */
    double par_min;         /* multiply-adds below which one thread is faster */
    gemm_bf16_micro_fn micro;
    gemm_bf16_pack_fn pack_a, pack_b;
    gemm_bf16_pack_fn pack_a_inf; /* A for K blocks whose B panels hold an inf, or NULL */
    gemm_bf16_finish_fn finish16;
    gemm_bf16_rowdot_fn rowdot; /* the few-row path, or NULL (never for the f16 split) */
    void (*enter)(void);    /* per thread, before its first micro call (AMX tile config) */
    void (*leave)(void);    /* per thread, after its last one */
    const char *name;
};

#if defined(__x86_64__)
extern const gemm_bf16_kernel gemm_bf16_kernel_dot; /* 12 x 32, AVX512-BF16 */
extern const gemm_bf16_kernel gemm_bf16_kernel_amx; /* 32 x 32, AMX-BF16 */
/* AMX-BF16 on f16 operands split into bf16 (gemm_f16_split.c's packers):
 * 32 x 32, each B tile multiplied by the hi and the lo A tile. */
extern const gemm_bf16_kernel gemm_f16_kernel_amx;
/* Whether this CPU and OS let the process use AMX tiles (asks Linux for
 * the permission once). */
bool gemm_amx_usable(void);
/* gemm_f16_split.c's packers (gemm_bf16_pack_fn over f16 bits): AMX's
 * row-major A panel (nearest split, or the one for B blocks holding an
 * inf) and pair-major B panel of the split operands. */
bool gemm_f16_pack_a_split(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                           uint32_t *dst);
bool gemm_f16_pack_a_split_inf(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                               uint32_t *dst);
bool gemm_f16_pack_b_split(const uint16_t *s, int64_t rs, int64_t ks, int w, int R, int64_t kc, int64_t kp,
                           uint32_t *dst);
#endif

/* ---- f16 x f16 as exact bf16 splits on AMX (gemm_f16_split.c) ---- */

/* Which path gemm_lowp takes when both A and B are f16:
 *   AUTO   the split on AMX where the CPU has it and the product is big
 *          enough to gain (gemm_f16_split.c), else widening
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

/* gemm_lowp for f16 A and B on the split AMX kernel. Returns false without
 * touching anything when the mode, the CPU or the size says widening
 * (the caller widens); otherwise true with *st the status. c_dt: f32, f16
 * or bf16. */
bool gemm_f16_split(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                    int64_t lda, const uint16_t *B, int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc,
                    const gemm_epilogue *ep, amp_status *st);

#endif
