/*
 * pointwise.h - the pointwise formulas, once, for every backend: the enum
 * of formulas (amp_pw_op) the `pointwise` primitive takes, and each
 * formula as an inline function of f32 values that the C compiler and
 * nvcc both compile (PW_FN marks them __host__ __device__ under nvcc).
 *
 * Operands: a = input 0, b = input 1, c = input 2, s = the scalar s0.
 * Every formula takes (a, b, c, s) and ignores what it does not use, so a
 * backend can call any of them the same way; pw_eval picks one by enum.
 * The formulas and what each backward reads (input or saved output)
 * follow PyTorch's CPU kernels and derivatives.yaml; the libm functions
 * (expf, tanhf, erfcf ...) may differ by an ulp between the host's libm
 * and CUDA's, which the tests' tolerances allow.
 */
#ifndef AMPC_POINTWISE_H
#define AMPC_POINTWISE_H

#include <math.h>

#if defined(__CUDACC__)
#define PW_FN static __host__ __device__ __forceinline__
#else
#define PW_FN static inline
#endif

/* 1/sqrt(2), 1/sqrt(2 pi), sqrt(2/pi) and the cubic coefficient: the
 * constants of PyTorch's GELU kernels. */
#define PW_SQRT1_2 0.70710678118654752440f
#define PW_INV_SQRT_2PI 0.39894228040143267794f
#define PW_SQRT_2_PI 0.79788456080286535588f
#define PW_KAPPA 0.044715f

/* x^p with the exponents PyTorch computes exactly special-cased. */
PW_FN float pw_pow(float x, float p)
{
    if (p == 2.0f)
        return x * x;
    if (p == 1.0f)
        return x;
    if (p == 0.0f)
        return 1.0f;
    if (p == 3.0f)
        return x * x * x;
    if (p == 0.5f)
        return sqrtf(x);
    if (p == -1.0f)
        return 1.0f / x;
    return powf(x, p);
}

/* GELU written as x * Phi(x) with Phi = erfc(-x/sqrt2)/2: the same
 * function as PyTorch's 0.5x(1+erf(x/sqrt2)), without its cancellation for
 * negative x. The tanh form uses 1 + tanh(u) = 2 sigmoid(2u) likewise. */
PW_FN float pw_gelu_exact_of(float x) { return x * 0.5f * erfcf(-x * PW_SQRT1_2); }

PW_FN float pw_gelu_tanh_of(float x)
{
    float u = PW_SQRT_2_PI * (x + PW_KAPPA * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

PW_FN float pw_gelu_exact_grad_of(float x)
{
    return 0.5f * erfcf(-x * PW_SQRT1_2) + x * PW_INV_SQRT_2PI * expf(-0.5f * x * x);
}

/* PyTorch's GeluBackward (tanh): 0.5(1+t) + 0.5x(1-t^2) sqrt(2/pi)(1+3k x^2). */
PW_FN float pw_gelu_tanh_grad_of(float x)
{
    float t = tanhf(PW_SQRT_2_PI * (x + PW_KAPPA * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * PW_SQRT_2_PI * (1.0f + 3.0f * PW_KAPPA * x * x);
}

/* silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x), PyTorch's form. */
PW_FN float pw_silu_grad_of(float x)
{
    float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
}

/* The table: one line per formula, (enum suffix, lower-case name,
 * operands read, expression of a, b, c, s). A new formula is one line
 * here; every backend picks it up. */
#define AMP_PW_FORMULAS(X)                                                            \
    X(COPY, copy, 1, a)                                                              \
    X(ADD, add, 2, a + b)                                                            \
    X(SUB, sub, 2, a - b)                                                            \
    X(MUL, mul, 2, a * b)                                                            \
    X(DIV, div, 2, a / b)                                                            \
    X(ADD_S, add_s, 1, a + s)                                                        \
    X(MUL_S, mul_s, 1, a * s)                                                        \
    X(DIV_S, div_s, 1, a / s)                                                        \
    X(NEG, neg, 1, -a)                                                               \
    X(RELU, relu, 1, a > 0.0f ? a : (a == a ? 0.0f : a)) /* NaN stays NaN */         \
    X(GELU_EXACT, gelu_exact, 1, pw_gelu_exact_of(a))                                \
    X(GELU_TANH, gelu_tanh, 1, pw_gelu_tanh_of(a))                                   \
    X(TANH, tanh, 1, tanhf(a))                                                       \
    X(SIGMOID, sigmoid, 1, 1.0f / (1.0f + expf(-a)))                                 \
    X(EXP, exp, 1, expf(a))                                                          \
    X(LOG, log, 1, logf(a))                                                          \
    X(POW_S, pow_s, 1, pw_pow(a, s))                                                 \
    X(DIV_B_GRAD, div_b_grad, 3, -a * ((b / c) / c))                                 \
    X(RELU_GRAD, relu_grad, 2, b > 0.0f ? a : 0.0f) /* threshold_backward */         \
    X(GELU_EXACT_GRAD, gelu_exact_grad, 2, a * pw_gelu_exact_grad_of(b))             \
    X(GELU_TANH_GRAD, gelu_tanh_grad, 2, a * pw_gelu_tanh_grad_of(b))                \
    X(TANH_GRAD, tanh_grad, 2, a * (1.0f - b * b))                                   \
    X(SIGMOID_GRAD, sigmoid_grad, 2, a * (1.0f - b) * b)                             \
    X(POW_GRAD, pow_grad, 2, s == 0.0f ? 0.0f : a * (s * pw_pow(b, s - 1.0f)))       \
    X(SQDIFF, sqdiff, 2, (a - b) * (a - b))                                        \
    X(MSE_GRAD, mse_grad, 3, s * (a - b) * c)                                        \
    X(SILU, silu, 1, a / (1.0f + expf(-a)))                                          \
    X(SILU_GRAD, silu_grad, 2, a * pw_silu_grad_of(b))

/* AMP_PW_COPY, AMP_PW_ADD, ...: the formulas, in the table's order. */
typedef enum {
#define PW_ENUM(E, name, nin, expr) AMP_PW_##E,
    AMP_PW_FORMULAS(PW_ENUM)
#undef PW_ENUM
    AMP_PW_COUNT
} amp_pw_op;

/* pw_<name>(a, b, c, s): each formula as a function. */
#define PW_DEFINE(E, name, nin, expr)                                                 \
    PW_FN float pw_##name(float a, float b, float c, float s)                         \
    {                                                                                 \
        (void)a, (void)b, (void)c, (void)s;                                           \
        return (expr);                                                                \
    }
AMP_PW_FORMULAS(PW_DEFINE)
#undef PW_DEFINE

/* The number of operands formula op reads (0 for an invalid op). */
PW_FN int pw_arity(int op)
{
    switch (op) {
#define PW_ARITY(E, name, nin, expr) \
    case AMP_PW_##E:                 \
        return nin;
        AMP_PW_FORMULAS(PW_ARITY)
#undef PW_ARITY
    default:
        return 0;
    }
}

/* Formula op at one element (a backend with one kernel for every formula). */
PW_FN float pw_eval(int op, float a, float b, float c, float s)
{
    switch (op) {
#define PW_CASE(E, name, nin, expr) \
    case AMP_PW_##E:                \
        return pw_##name(a, b, c, s);
        AMP_PW_FORMULAS(PW_CASE)
#undef PW_CASE
    default:
        return 0.0f;
    }
}

#endif
