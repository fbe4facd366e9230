/*
 * gemm_operands.h - the random operands test_gemm and test_gemv share:
 * uniform in [-1, 1) from a fixed LCG (rng_state may be reset to repeat
 * them), and matrices with padding that shows if it is read.
 */
#ifndef AMPC_TESTS_GEMM_OPERANDS_H
#define AMPC_TESTS_GEMM_OPERANDS_H

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state = 42;
static inline float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* A stored rows x cols with row stride ld (ld >= cols), padding set to a
 * value that would show if it were read. */
static inline float *matrix(int64_t rows, int64_t cols, int64_t ld)
{
    float *m = malloc(sizeof(float) * (size_t)(rows * ld + 1));
    for (int64_t i = 0; i < rows * ld + 1; i++)
        m[i] = 1e30f;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            m[i * ld + j] = frand();
    return m;
}

#endif
