/*
 * pointwise.h - the pointwise formulas, once, for every backend: the enum
 * of formulas (amp_pw_op) the `pointwise` primitive takes, and each
 * formula as an inline function of f32 values that the C compiler and
 * nvcc both compile (PW_FN marks them __host__ __device__ under nvcc).
 *
 * Operands: a = input 0, b = input 1, c = input 2, s = the scalar s0.
 * (The pointwise helper fills in the formulas: pw_eval.)
 */
#ifndef AMPC_POINTWISE_H
#define AMPC_POINTWISE_H

#if defined(__CUDACC__)
#define PW_FN static __host__ __device__ __forceinline__
#else
#define PW_FN static inline
#endif

typedef enum {
    AMP_PW_COPY = 0, /* a (a dtype conversion) */
    AMP_PW_ADD, AMP_PW_SUB, AMP_PW_MUL, AMP_PW_DIV,
    AMP_PW_ADD_S,    /* a + s */
    AMP_PW_MUL_S,    /* a * s */
    AMP_PW_DIV_S,    /* a / s */
    AMP_PW_NEG, AMP_PW_RELU, AMP_PW_GELU_EXACT, AMP_PW_GELU_TANH, AMP_PW_TANH, AMP_PW_SIGMOID, AMP_PW_EXP,
    AMP_PW_LOG,
    AMP_PW_POW_S,    /* a ^ s */
    AMP_PW_DIV_B_GRAD,   /* -a * ((b / c) / c) */
    AMP_PW_RELU_GRAD,    /* b > 0 ? a : 0 */
    AMP_PW_GELU_EXACT_GRAD, AMP_PW_GELU_TANH_GRAD, /* a * gelu'(b) */
    AMP_PW_TANH_GRAD,    /* a * (1 - b^2) */
    AMP_PW_SIGMOID_GRAD, /* a * (1 - b) * b */
    AMP_PW_POW_GRAD,     /* s == 0 ? 0 : a * (s * b^(s-1)) */
    AMP_PW_SQDIFF,       /* (a - b)^2 */
    AMP_PW_MSE_GRAD,     /* s * (a - b) * c */
    AMP_PW_COUNT
} amp_pw_op;

#endif
