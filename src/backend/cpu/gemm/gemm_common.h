/*
 * gemm_common.h - what the GEMM's dispatcher (dispatch.c) and the drivers
 * below it (gemm.c, gemm_bf16.c) share; it includes nothing of theirs.
 *
 * Defines:
 *   gemm_epilogue      - a callback over each block of C as it becomes final;
 *   gemm_epilogue_all  - that callback over all of C, after a product run
 *                        by oneDNN or a trivial path;
 *   gemm_path          - the path the calling thread's last product took;
 *   gemm_row_grain     - rows per grain of a parallel loop over rows.
 */
#ifndef AMPC_GEMM_COMMON_H
#define AMPC_GEMM_COMMON_H

#include "ampc.h"

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

/* ep over all of an M x N C, in blocks of rows spread over the threads
 * (nothing when ep is NULL). */
void gemm_epilogue_all(const gemm_epilogue *ep, int64_t M, int64_t N);

/* The path the calling thread's last product took, for the profiler's
 * kernel events (cpu_gemm): "oneDNN matmul", or the name of ampc's own
 * micro-kernel that ran ("amx-bf16 32x32", "avx512bf16 12x32", "amx-bf16
 * split 32x32" for f16, "avx512 12x32" ..., "avx512bf16 gemv" for bf16
 * products of at most 8 rows with B transposed, "avx512 gemv" / "c gemv"
 * for f32 ones of at most 4); a static string, NULL before
 * any. A batch of products spread over threads sets it on each; the
 * calling thread runs a share of them, so it sees the path too. Set by
 * the dispatcher for the paths it hands a product to, and by the widening
 * driver (gemm.c) when its micro-kernel runs. */
extern _Thread_local const char *gemm_path;

/* Rows per grain of a parallel loop over rows of n elements: 32K
 * elements, so that a loop of under 64K elements runs on the calling
 * thread alone. */
static inline int64_t gemm_row_grain(int64_t n) { return n >= 32768 ? 1 : (32768 + n - 1) / (n > 0 ? n : 1); }

#endif
