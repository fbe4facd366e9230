/*
 * elementwise.c - the pointwise ops: add, sub, mul, div with broadcasting
 * and type promotion, the scalar forms, and the activations (relu, gelu,
 * tanh, sigmoid, exp, log, pow), forward and backward.
 *
 * Each op is a small kernel over contiguous f32 runs handed to ew_map
 * (broadcast.h), which does the broadcasting, the blocking and the dtype
 * conversions, so 16-bit tensors compute in f32 and round once, as
 * PyTorch's CPU kernels do. Formulas and the choice of what backward
 * reads (input or saved output) follow PyTorch's derivatives.yaml.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"
#include "ops/simd.h"

#include <math.h>

/* A kernel body over out[j] with a = in[0][j], b = in[1][j], s = *ctx. */
#define KERNEL(name, expr)                                                            \
    static void name(float *out, const float *const *in, int64_t n, const void *ctx) \
    {                                                                                 \
        const float *restrict A = in[0];                                              \
        const float *restrict B = in[1];                                              \
        const float *restrict C = in[2];                                              \
        float *restrict o = out;                                                      \
        const float s = ctx ? *(const float *)ctx : 0.0f;                             \
        (void)B;                                                                      \
        (void)C;                                                                      \
        (void)s;                                                                      \
        for (int64_t j = 0; j < n; j++) {                                             \
            float a = A[j];                                                           \
            (void)a;                                                                  \
            o[j] = (expr);                                                            \
        }                                                                             \
    }

/* 1/sqrt(2), 2/sqrt(pi) * 1/sqrt(2) / 2 = 1/sqrt(2 pi), sqrt(2/pi): the
 * constants of PyTorch's GELU kernels. */
#define K_SQRT1_2 0.70710678118654752440f
#define K_INV_SQRT_2PI 0.39894228040143267794f
#define K_SQRT_2_PI 0.79788456080286535588f
#define K_KAPPA 0.044715f

/* x^p with the exponents PyTorch computes exactly special-cased. */
static inline float pow_p(float x, float p)
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
static inline float gelu_exact(float x) { return x * 0.5f * erfcf(-x * K_SQRT1_2); }

static inline float gelu_tanh(float x)
{
    float u = K_SQRT_2_PI * (x + K_KAPPA * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

static inline float gelu_exact_grad(float x)
{
    return 0.5f * erfcf(-x * K_SQRT1_2) + x * K_INV_SQRT_2PI * expf(-0.5f * x * x);
}

/* PyTorch's GeluBackward (tanh): 0.5(1+t) + 0.5x(1-t^2) sqrt(2/pi)(1+3k x^2). */
static inline float gelu_tanh_grad(float x)
{
    float t = tanhf(K_SQRT_2_PI * (x + K_KAPPA * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * K_SQRT_2_PI * (1.0f + 3.0f * K_KAPPA * x * x);
}

KERNEL(k_add, a + B[j])
KERNEL(k_sub, a - B[j])
KERNEL(k_mul, a * B[j])
KERNEL(k_div, a / B[j])
KERNEL(k_add_s, a + s)
KERNEL(k_mul_s, a * s)
KERNEL(k_div_s, a / s)
KERNEL(k_neg, -a)
KERNEL(k_relu, a > 0.0f ? a : (a == a ? 0.0f : a)) /* NaN stays NaN */
KERNEL(k_gelu_exact, gelu_exact(a))
KERNEL(k_gelu_tanh_c, gelu_tanh(a))
KERNEL(k_tanh, tanhf(a))
KERNEL(k_sigmoid, 1.0f / (1.0f + expf(-a)))
KERNEL(k_exp, expf(a))
KERNEL(k_log, logf(a))
KERNEL(k_pow, pow_p(a, s))

/* Backward kernels: a is the incoming gradient, B the input or output. */
KERNEL(k_div_b_grad, -a * ((B[j] / C[j]) / C[j])) /* -g * ((x / y) / y) */
KERNEL(k_relu_grad, B[j] > 0.0f ? a : 0.0f)     /* threshold_backward on the output */
KERNEL(k_gelu_exact_grad, a * gelu_exact_grad(B[j]))
KERNEL(k_gelu_tanh_grad_c, a * gelu_tanh_grad(B[j]))

/* GELU (tanh) is a transformer's costliest pointwise op; libm's expf and
 * tanhf keep the C loops scalar, so a vector version runs where the CPU
 * has one (simd.h). */
static void k_gelu_tanh(float *out, const float *const *in, int64_t n, const void *ctx)
{
    simd_gelu_tanh_fn f = simd_pick_gelu_tanh();
    if (f)
        f(in[0], out, n);
    else
        k_gelu_tanh_c(out, in, n, ctx);
}

static void k_gelu_tanh_grad(float *out, const float *const *in, int64_t n, const void *ctx)
{
    simd_gelu_tanh_grad_fn f = simd_pick_gelu_tanh_grad();
    if (f)
        f(in[0], in[1], out, n);
    else
        k_gelu_tanh_grad_c(out, in, n, ctx);
}
KERNEL(k_tanh_grad, a * (1.0f - B[j] * B[j]))
KERNEL(k_sigmoid_grad, a * (1.0f - B[j]) * B[j])
KERNEL(k_pow_grad, s == 0.0f ? 0.0f : a * (s * pow_p(B[j], s - 1.0f)))

/* ------------------------------------------------------------- binary */

static amp_tensor *binary_forward(node *n, ew_fn fn)
{
    const amp_tensor *a = n->in[0], *b = n->in[1];
    amp_shape s;
    amp_dtype dt;
    if (!binary_infer(n, &s, &dt))
        return NULL;
    ew_arg args[2] = {ew_arg_of(a), ew_arg_of(b)};
    return ew_new(s, dt, args, 2, fn, NULL);
}

/* The gradient of input i: fn(args) over the output's shape, summed back
 * to input i's shape, in input i's dtype. */
static amp_tensor *input_grad(const node *n, int i, const ew_arg *args, int nargs, ew_fn fn)
{
    const amp_tensor *x = n->in[i];
    if (shape_equal(x->shape, n->out_shape))
        return ew_new(x->shape, x->dtype, args, nargs, fn, NULL);
    amp_tensor *full = ew_new(n->out_shape, AMP_F32, args, nargs, fn, NULL);
    if (!full)
        return NULL;
    amp_tensor *g = sum_to_shape(full, x->shape, x->dtype, 1.0);
    amp_tensor_free(full);
    return g;
}

/* add and sub: each gradient is +-gout summed to the input's shape. */
static amp_status additive_backward(node *n, const amp_tensor *gout, amp_tensor **gin, double sign_b)
{
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        gin[i] = sum_to_shape(gout, n->in[i]->shape, n->in[i]->dtype, i ? sign_b : 1.0);
        if (!gin[i])
            return fail_status();
    }
    return AMP_OK;
}

amp_tensor *add_forward(node *n) { return binary_forward(n, k_add); }
amp_tensor *sub_forward(node *n) { return binary_forward(n, k_sub); }
amp_tensor *mul_forward(node *n) { return binary_forward(n, k_mul); }
amp_tensor *div_forward(node *n) { return binary_forward(n, k_div); }

amp_status add_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return additive_backward(n, gout, gin, 1.0);
}

amp_status sub_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return additive_backward(n, gout, gin, -1.0);
}

/* d(a*b)/da = g * b, d(a*b)/db = g * a. */
amp_status mul_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        ew_arg args[2] = {ew_arg_of(gout), ew_arg_of(n->in[1 - i])};
        if (!(gin[i] = input_grad(n, i, args, 2, k_mul)))
            return fail_status();
    }
    return AMP_OK;
}

/* d(a/b)/da = g / b, d(a/b)/db = -g * ((a / b) / b), as PyTorch writes it. */
amp_status div_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    ew_arg g = ew_arg_of(gout), a = ew_arg_of(n->in[0]), b = ew_arg_of(n->in[1]);
    if (in_needs_grad(n, 0)) {
        ew_arg args[2] = {g, b};
        if (!(gin[0] = input_grad(n, 0, args, 2, k_div)))
            return fail_status();
    }
    if (in_needs_grad(n, 1)) {
        ew_arg args[3] = {g, a, b};
        if (!(gin[1] = input_grad(n, 1, args, 3, k_div_b_grad)))
            return fail_status();
    }
    return AMP_OK;
}

/* -------------------------------------------------------------- unary */

/* fn(x) in x's dtype; saves an alias of the result when backward reads it. */
static amp_tensor *unary_forward(node *n, ew_fn fn, const void *ctx, bool save_out)
{
    if (!op_require_float(n, 0))
        return NULL;
    const amp_tensor *x = n->in[0];
    ew_arg a = ew_arg_of(x);
    amp_tensor *out = ew_new(x->shape, x->dtype, &a, 1, fn, ctx);
    if (out && save_out && n->needs_grad && op_save(n, 0, out) != AMP_OK) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    return out;
}

/* gin[0] = fn(gout, other) in the input's dtype (other may be NULL). */
static amp_status unary_backward(node *n, const amp_tensor *gout, amp_tensor **gin, const amp_tensor *other,
                                 ew_fn fn, const void *ctx)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    const amp_tensor *x = n->in[0];
    ew_arg args[2] = {ew_arg_of(gout), ew_arg_of(other ? other : gout)};
    gin[0] = ew_new(x->shape, x->dtype, args, other ? 2 : 1, fn, ctx);
    return gin[0] ? AMP_OK : fail_status();
}

/* The op's float scalar, as PyTorch converts a Python number for a float
 * tensor's kernel. */
static float scalar_of(const node *n) { return (float)n->p.f[0]; }

amp_tensor *add_scalar_forward(node *n)
{
    float s = scalar_of(n);
    return unary_forward(n, k_add_s, &s, false);
}

amp_status add_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = ew_convert(gout, n->in[0]->dtype);
    return gin[0] ? AMP_OK : fail_status();
}

amp_tensor *mul_scalar_forward(node *n)
{
    float s = scalar_of(n);
    return unary_forward(n, k_mul_s, &s, false);
}

amp_status mul_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    float s = scalar_of(n);
    return unary_backward(n, gout, gin, NULL, k_mul_s, &s);
}

/* True division, x / s, as PyTorch's div_true_kernel (not x * (1/s)). */
amp_tensor *div_scalar_forward(node *n)
{
    float s = scalar_of(n);
    return unary_forward(n, k_div_s, &s, false);
}

amp_status div_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    float s = scalar_of(n);
    return unary_backward(n, gout, gin, NULL, k_div_s, &s);
}

amp_tensor *neg_forward(node *n) { return unary_forward(n, k_neg, NULL, false); }

amp_status neg_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, NULL, k_neg, NULL);
}

/* relu and its gradient straight on f16 / bf16 bits: both only select
 * between an input and +0, so widening to f32 and rounding back (what
 * ew_map does, bit for bit the same result) is pure overhead. A NaN comes
 * out quieted, as that round trip leaves it. */
typedef struct {
    uint16_t inf, quiet; /* |bits| of inf; the quiet bit of a NaN */
} half_fmt;

static half_fmt half_of(amp_dtype dt) { return dt == AMP_BF16 ? (half_fmt){0x7F80, 0x0040} : (half_fmt){0x7C00, 0x0200}; }

/* Elements per task of the 16-bit loops. */
#define HALF_BLOCK 16384

static void relu_half(const uint16_t *restrict x, uint16_t *restrict y, int64_t n, half_fmt f)
{
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (n >= 4 * HALF_BLOCK) schedule(static))
    for (int64_t b = 0; b < n; b += HALF_BLOCK) {
        int64_t e = n - b < HALF_BLOCK ? n : b + HALF_BLOCK;
        for (int64_t j = b; j < e; j++) {
            uint16_t v = x[j], a = v & 0x7FFF;
            y[j] = a > f.inf ? (uint16_t)(v | f.quiet) : (v & 0x8000) ? 0 : v;
        }
    }
}

/* dx = g where y > 0 (not NaN), else +0. */
static void relu_grad_half(const uint16_t *restrict g, const uint16_t *restrict y, uint16_t *restrict dx, int64_t n,
                           half_fmt f)
{
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (n >= 4 * HALF_BLOCK) schedule(static))
    for (int64_t b = 0; b < n; b += HALF_BLOCK) {
        int64_t e = n - b < HALF_BLOCK ? n : b + HALF_BLOCK;
        for (int64_t j = b; j < e; j++) {
            uint16_t yv = y[j], ya = yv & 0x7FFF, gv = g[j];
            bool pos = !(yv & 0x8000) && ya != 0 && ya <= f.inf;
            uint16_t gq = (gv & 0x7FFF) > f.inf ? (uint16_t)(gv | f.quiet) : gv;
            dx[j] = pos ? gq : 0;
        }
    }
}

static bool is_half(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16; }

amp_tensor *relu_forward(node *n)
{
    const amp_tensor *x = n->in[0];
    if (!op_require_float(n, 0) || !is_half(x->dtype))
        return unary_forward(n, k_relu, NULL, true);
    amp_tensor *out = tensor_new(x->shape, x->dtype);
    if (!out)
        return NULL;
    relu_half(tensor_ptr(x), tensor_ptr(out), x->numel, half_of(x->dtype));
    if (n->needs_grad && op_save(n, 0, out) != AMP_OK) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    return out;
}

/* threshold_backward(g, y, 0): g where y > 0, else 0 (so 0 at x = 0). */
amp_status relu_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *x = n->in[0], *y = n->saved[0];
    if (!in_needs_grad(n, 0) || !y || !is_half(x->dtype) || gout->dtype != x->dtype || y->dtype != x->dtype ||
        gout->numel != x->numel || y->numel != x->numel)
        return unary_backward(n, gout, gin, y, k_relu_grad, NULL);
    gin[0] = tensor_new(x->shape, x->dtype);
    if (!gin[0])
        return fail_status();
    relu_grad_half(tensor_ptr(gout), tensor_ptr(y), tensor_ptr(gin[0]), x->numel, half_of(x->dtype));
    return AMP_OK;
}

amp_tensor *relu_grad_from_output(const amp_tensor *gout, const amp_tensor *y)
{
    if (gout->dtype != y->dtype || gout->numel != y->numel || !amp_dtype_is_float(y->dtype))
        return amp_fail_null(AMP_ERR_STATE, "relu gradient: gradient %s [%lld] does not match the output %s [%lld]",
                             amp_dtype_name(gout->dtype), (long long)gout->numel, amp_dtype_name(y->dtype),
                             (long long)y->numel);
    amp_tensor *g = tensor_new(y->shape, y->dtype);
    if (!g)
        return NULL;
    if (is_half(y->dtype)) {
        relu_grad_half(tensor_ptr(gout), tensor_ptr(y), tensor_ptr(g), y->numel, half_of(y->dtype));
        return g;
    }
    const float *restrict gp = tensor_ptr(gout), *restrict yp = tensor_ptr(y);
    float *restrict o = tensor_ptr(g);
    const int64_t n = y->numel;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (n >= 4 * HALF_BLOCK) schedule(static))
    for (int64_t b = 0; b < n; b += HALF_BLOCK) {
        const int64_t e = n - b < HALF_BLOCK ? n : b + HALF_BLOCK;
        for (int64_t j = b; j < e; j++) {
            float v = gp[j]; /* read unconditionally: a select, not a branch (10x here) */
            o[j] = yp[j] > 0.0f ? v : 0.0f;
        }
    }
    return g;
}

/* p.i[0] = AMP_GELU_EXACT or AMP_GELU_TANH. */
amp_tensor *gelu_forward(node *n)
{
    return unary_forward(n, n->p.i[0] == AMP_GELU_TANH ? k_gelu_tanh : k_gelu_exact, NULL, false);
}

amp_status gelu_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->in[0],
                          n->p.i[0] == AMP_GELU_TANH ? k_gelu_tanh_grad : k_gelu_exact_grad, NULL);
}

amp_tensor *tanh_forward(node *n) { return unary_forward(n, k_tanh, NULL, true); }

amp_status tanh_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->saved[0], k_tanh_grad, NULL);
}

amp_tensor *sigmoid_forward(node *n) { return unary_forward(n, k_sigmoid, NULL, true); }

amp_status sigmoid_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->saved[0], k_sigmoid_grad, NULL);
}

amp_tensor *exp_forward(node *n) { return unary_forward(n, k_exp, NULL, true); }

amp_status exp_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->saved[0], k_mul, NULL);
}

amp_tensor *log_forward(node *n) { return unary_forward(n, k_log, NULL, false); }

amp_status log_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->in[0], k_div, NULL);
}

/* f[0] = the exponent. */
amp_tensor *pow_scalar_forward(node *n)
{
    float p = scalar_of(n);
    return unary_forward(n, k_pow, &p, false);
}

/* g * p * x^(p-1); 0 when p == 0 (PyTorch's pow_backward), even at x = 0. */
amp_status pow_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    float p = scalar_of(n);
    return unary_backward(n, gout, gin, n->in[0], k_pow_grad, &p);
}
