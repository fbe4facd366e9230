/*
 * tile_x86.h - the pieces of a register-blocked f32 tile two vectors wide
 * that the x86 micro-kernels share (the f32 FMA kernels in gemm_x86.c, the
 * VDPBF16PS kernel in gemm_bf16_x86.c): row i's accumulators c<i>0 and
 * c<i>1, and the store of row i. T is the vector type (__m512, __m256),
 * P its intrinsics' prefix (_mm512_, _mm256_), W its floats.
 */
#ifndef AMPC_TILE_X86_H
#define AMPC_TILE_X86_H

#include <immintrin.h>

/* Declares row i's two accumulators, zeroed. */
#define TILE_DECL(T, P, i) T c##i##0 = P##setzero_ps(), c##i##1 = P##setzero_ps();

/* Stores row i of the tile at c (row stride ldc): alpha * acc (+ beta * C
 * when beta != 0), with va and vb alpha and beta broadcast. */
#define TILE_STORE(T, P, W, i)                                                          \
    do {                                                                                \
        float *r_ = c + (i) * ldc;                                                      \
        T x0 = P##mul_ps(va, c##i##0), x1 = P##mul_ps(va, c##i##1);                     \
        if (beta != 0.0f) {                                                             \
            x0 = P##fmadd_ps(vb, P##loadu_ps(r_), x0);                                  \
            x1 = P##fmadd_ps(vb, P##loadu_ps(r_ + (W)), x1);                            \
        }                                                                               \
        P##storeu_ps(r_, x0);                                                           \
        P##storeu_ps(r_ + (W), x1);                                                     \
    } while (0)

#endif
