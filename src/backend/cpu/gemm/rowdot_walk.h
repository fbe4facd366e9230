/*
 * rowdot_walk.h - the walk over B's lines that the few-row kernels share
 * (gemm_bf16_x86.c's rowdot on bf16 pairs, gemv_f32.c's on f32): blocks
 * of lines whose M x NJ accumulators stay in registers, then the last
 * lines one at a time. Macros, so that M and NJ are constants in each
 * inlined copy of the kernel's block function.
 */
#ifndef AMPC_ROWDOT_WALK_H
#define AMPC_ROWDOT_WALK_H

#define ROWDOT_LINES_(BLOCK, M_, NJ_)                                                   \
    do {                                                                                \
        for (; j + (NJ_) <= n; j += (NJ_))                                              \
            BLOCK(M_, NJ_, K, a, lda, b + j * ldb, ldb, out + j, ldo);                  \
        for (; j < n; j++)                                                              \
            BLOCK(M_, 1, K, a, lda, b + j * ldb, ldb, out + j, ldo);                    \
    } while (0)

/* The body of a kernel whose parameters are (M, K, a, lda, b, ldb, n,
 * out, ldo): BLOCK(M, NJ, K, a, lda, b, ldb, out, ldo) over blocks of NJ1
 * lines for one row of A, NJN lines for 2 to 4 rows (M > 4 is taken as 4). */
#define ROWDOT_WALK(BLOCK, NJ1, NJN)                                                    \
    do {                                                                                \
        int64_t j = 0;                                                                  \
        switch (M) {                                                                    \
        case 1: ROWDOT_LINES_(BLOCK, 1, NJ1); break;                                    \
        case 2: ROWDOT_LINES_(BLOCK, 2, NJN); break;                                    \
        case 3: ROWDOT_LINES_(BLOCK, 3, NJN); break;                                    \
        default: ROWDOT_LINES_(BLOCK, 4, NJN); break;                                   \
        }                                                                               \
    } while (0)

#endif
