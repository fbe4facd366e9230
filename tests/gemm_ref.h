/*
 * gemm_ref.h - the tests' reference product: C = alpha op(A) op(B) + beta C
 * in double, row-major as gemm.h describes it (A stored [K x M] when ta, B
 * stored [N x K] when tb), with the sum of the terms' magnitudes beside
 * each result: the scale of an f32 summation's rounding error, which the
 * tolerances multiply.
 */
#ifndef AMPC_TESTS_GEMM_REF_H
#define AMPC_TESTS_GEMM_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

static inline void naive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, double beta, const float *C, int64_t ldc,
                         double *ref, double *bound)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
                sa += fabs(a * b);
            }
            double c = beta != 0 ? C[i * ldc + j] : 0;
            ref[i * N + j] = alpha * s + beta * c;
            bound[i * N + j] = fabs(alpha) * sa + fabs(beta * c);
        }
}

#endif
