/*
 * test_ops_elementwise.c - add, sub, mul, div (broadcasting, 0-d operands,
 * type promotion) and the scalar and unary ops: values against double
 * references, finite-difference gradients, 16-bit results within ulps of
 * the rounded double result, 16-bit gradients against f32, and errors.
 */
#include "harness.h"
#include "op_check.h"

#include <stdlib.h>
#include <string.h>

typedef amp_tensor *(*bin_op)(amp_tensor *, amp_tensor *);

static const bin_op BIN[4] = {amp_add, amp_sub, amp_mul, amp_div};
static const char *const BIN_NAME[4] = {"add", "sub", "mul", "div"};

static double bin_ref(int op, double a, double b)
{
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    default: return a / b;
    }
}

/* The flat index into a tensor of shape in of the element that broadcasting
 * reads for flat index i of shape out: the test's own statement of numpy's
 * rule, independent of the library's. */
static int64_t bcast_index(amp_shape out, int64_t i, amp_shape in)
{
    int64_t idx = 0, stride = 1;
    for (int d = out.ndim - 1, j = in.ndim - 1; d >= 0; d--, j--) {
        int64_t c = i % out.d[d];
        i /= out.d[d];
        if (j >= 0) {
            if (in.d[j] != 1)
                idx += c * stride;
            stride *= in.d[j];
        }
    }
    return idx;
}

static bool same_shape(amp_shape a, amp_shape b)
{
    if (a.ndim != b.ndim)
        return false;
    for (int i = 0; i < a.ndim; i++)
        if (a.d[i] != b.d[i])
            return false;
    return true;
}

static uint16_t to16(amp_dtype dt, float f) { return dt == AMP_F16 ? amp_f32_to_f16(f) : amp_f32_to_bf16(f); }

/* Distance in units in the last place of dt between got and the double
 * ref rounded to dt. */
static int ulps16(amp_dtype dt, double got, double ref)
{
    uint16_t g = to16(dt, (float)got), r = to16(dt, (float)ref);
    int og = (g & 0x8000) ? -(int)(g & 0x7fff) : (int)g, orf = (r & 0x8000) ? -(int)(r & 0x7fff) : (int)r;
    return abs(og - orf);
}

/* Checks every element of the binary op's result against the double
 * reference: exactly for f32 (one IEEE operation: (float)(double op) is
 * the correctly rounded f32 result), within max_ulps for 16-bit. */
static void check_binary(int op, amp_tensor *a, amp_tensor *b, amp_shape want, amp_dtype want_dt,
                         int max_ulps)
{
    amp_tensor *y = BIN[op](a, b);
    CHECK_MSG(y != NULL, "%s failed: %s", BIN_NAME[op], amp_last_error());
    if (!y)
        return;
    CHECK_MSG(same_shape(amp_tensor_shape(y), want), "%s: wrong result shape", BIN_NAME[op]);
    CHECK_EQ_INT(amp_tensor_dtype(y), want_dt);
    int bad = 0;
    for (int64_t i = 0; i < amp_tensor_numel(y) && bad < 4; i++) {
        double av = amp_tensor_get(a, bcast_index(want, i, amp_tensor_shape(a)));
        double bv = amp_tensor_get(b, bcast_index(want, i, amp_tensor_shape(b)));
        double ref = bin_ref(op, av, bv), got = amp_tensor_get(y, i);
        bool ok = want_dt == AMP_F32 ? got == (double)(float)ref : ulps16(want_dt, got, ref) <= max_ulps;
        if (!ok) {
            harness_fail(__FILE__, __LINE__, "%s[%lld] = %.9g, expected %.9g", BIN_NAME[op], (long long)i,
                         got, ref);
            bad++;
        }
    }
}

static void test_binary_same_shape_values_exact(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(4, 5), AMP_F32, -3, 3, 1);
    amp_tensor *b = test_uniform(AMP_SHAPE(4, 5), AMP_F32, 0.5, 2, 2);
    for (int op = 0; op < 4; op++)
        check_binary(op, a, b, AMP_SHAPE(4, 5), AMP_F32, 0);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_broadcast_3d_with_2d(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(3, 1, 4), AMP_F32, -2, 2, 3);
    amp_tensor *b = test_uniform(AMP_SHAPE(2, 4), AMP_F32, 0.5, 2, 4);
    for (int op = 0; op < 4; op++) {
        check_binary(op, a, b, AMP_SHAPE(3, 2, 4), AMP_F32, 0);
        check_binary(op, b, a, AMP_SHAPE(3, 2, 4), AMP_F32, 0);
    }
    amp_tensor *c = test_uniform(AMP_SHAPE(4, 1), AMP_F32, -2, 2, 5);
    amp_tensor *d = test_uniform(AMP_SHAPE(1, 3), AMP_F32, 0.5, 2, 6);
    for (int op = 0; op < 4; op++)
        check_binary(op, c, d, AMP_SHAPE(4, 3), AMP_F32, 0);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_tensor_free(c);
    amp_tensor_free(d);
}

static void test_zero_dim_scalar_operands(void)
{
    float sv = 1.75f;
    amp_tensor *s = make(AMP_SHAPE(), AMP_F32, &sv);
    amp_tensor *t = make(AMP_SHAPE(), AMP_F32, (float[]){-0.5f});
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 3), AMP_F32, -2, 2, 7);
    for (int op = 0; op < 4; op++) {
        check_binary(op, s, x, AMP_SHAPE(2, 3), AMP_F32, 0);
        check_binary(op, x, s, AMP_SHAPE(2, 3), AMP_F32, 0);
        check_binary(op, s, t, AMP_SHAPE(), AMP_F32, 0);
    }
    amp_tensor *y = amp_add(s, t);
    CHECK(y && amp_tensor_ndim(y) == 0);
    amp_tensor_free(s);
    amp_tensor_free(t);
    amp_tensor_free(x);
}

/* [rows, cols] + [cols], big enough to take the threaded path, and its
 * gradients: the bias gets the column sums of the incoming gradient. */
static void test_bias_row_vector_forward_and_column_sum_grad(void)
{
    const int R = 300, C = 130;
    amp_tensor *x = test_uniform(AMP_SHAPE(R, C), AMP_F32, -2, 2, 8);
    amp_tensor *b = test_uniform(AMP_SHAPE(C), AMP_F32, -1, 1, 9);
    amp_tensor *g = test_uniform(AMP_SHAPE(R, C), AMP_F32, -1, 1, 10);
    check_binary(0, x, b, AMP_SHAPE(R, C), AMP_F32, 0);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(b, true);
    CHECK_OK(amp_backward_with(amp_add(x, b), g));
    amp_tensor *gb = amp_tensor_grad(b), *gx = amp_tensor_grad(x);
    CHECK(gb && gx);
    if (gb && gx) {
        CHECK(max_abs_diff(gx, g) == 0);
        double worst = 0;
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int i = 0; i < R; i++)
                s += amp_tensor_get(g, (int64_t)i * C + j);
            double e = fabs(amp_tensor_get(gb, j) - s) / fmax(fabs(s), 1e-3);
            worst = fmax(worst, e);
        }
        CHECK_MSG(worst <= 1e-6, "bias gradient: worst relative error %.3g", worst);
    }
    amp_tensor_free(x);
    amp_tensor_free(b);
    amp_tensor_free(g);
}

static void test_empty_tensor_broadcasts_to_empty(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(0, 3), AMP_F32), *b = amp_ones(AMP_SHAPE(3), AMP_F32);
    amp_tensor *y = amp_mul(a, b);
    CHECK(y && amp_tensor_numel(y) == 0 && amp_tensor_ndim(y) == 2 && amp_tensor_dim(y, 1) == 3);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* ------------------------------------------------------------ gradients */

typedef struct {
    int op;
} bin_ctx;

static amp_tensor *gc_binary(amp_tensor **in, void *ctx) { return BIN[((bin_ctx *)ctx)->op](in[0], in[1]); }

static void test_binary_gradcheck_broadcasting(void)
{
    static const struct {
        amp_shape a, b;
    } cases[] = {
        {{3, {3, 1, 4}}, {2, {2, 4}}}, {{2, {2, 4}}, {3, {3, 1, 4}}}, {{2, {2, 3}}, {0, {0}}},
        {{0, {0}}, {2, {2, 3}}},       {{2, {2, 3}}, {2, {2, 3}}},    {{2, {4, 1}}, {2, {1, 3}}},
        {{2, {5, 3}}, {1, {3}}},       {{0, {0}}, {0, {0}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int op = 0; op < 4; op++) {
            amp_tensor *in[2] = {test_uniform(cases[c].a, AMP_F32, -2, 2, 20 + c),
                                 test_uniform(cases[c].b, AMP_F32, 0.6, 2, 40 + c)};
            amp_tensor_set_requires_grad(in[0], true);
            amp_tensor_set_requires_grad(in[1], true);
            bin_ctx ctx = {op};
            char what[64];
            snprintf(what, sizeof what, "%s case %zu", BIN_NAME[op], c);
            gradcheck(what, gc_binary, in, 2, &ctx, 1e-3, 1e-3, 1e-2);
            amp_tensor_free(in[0]);
            amp_tensor_free(in[1]);
        }
    }
}

/* Only the input that asks for a gradient gets one. */
static void test_gradient_only_where_required(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(2, 3), AMP_F32, -1, 1, 50);
    amp_tensor *b = test_uniform(AMP_SHAPE(3), AMP_F32, 1, 2, 51);
    amp_tensor_set_requires_grad(b, true);
    CHECK_OK(amp_backward(amp_sum_all(amp_div(a, b))));
    CHECK(amp_tensor_grad(a) == NULL);
    CHECK(amp_tensor_grad(b) != NULL);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* --------------------------------------------------------------- unary */

enum { U_NEG, U_RELU, U_GELU, U_GELU_TANH, U_TANH, U_SIGMOID, U_SILU, U_EXP, U_LOG, U_POW,
       U_ADDS, U_MULS, U_DIVS, U_COUNT };
static const char *const U_NAME[U_COUNT] = {"neg", "relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "silu",
                                            "exp", "log",  "pow",  "add_scalar", "mul_scalar", "div_scalar"};

static amp_tensor *unary(int op, amp_tensor *x, double s)
{
    switch (op) {
    case U_NEG: return amp_neg(x);
    case U_RELU: return amp_relu(x);
    case U_GELU: return amp_gelu(x, AMP_GELU_EXACT);
    case U_GELU_TANH: return amp_gelu(x, AMP_GELU_TANH);
    case U_TANH: return amp_tanh(x);
    case U_SIGMOID: return amp_sigmoid(x);
    case U_SILU: return amp_silu(x);
    case U_EXP: return amp_exp(x);
    case U_LOG: return amp_log(x);
    case U_POW: return amp_pow_scalar(x, s);
    case U_ADDS: return amp_add_scalar(x, s);
    case U_MULS: return amp_mul_scalar(x, s);
    default: return amp_div_scalar(x, s);
    }
}

/* The definitions, in double; s is the scalar operand where there is one
 * (PyTorch hands it to a float kernel as a float). */
static double unary_ref(int op, double x, double s)
{
    const double k = sqrt(2.0 / M_PI);
    s = (double)(float)s;
    switch (op) {
    case U_NEG: return -x;
    case U_RELU: return x > 0 ? x : 0;
    case U_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case U_GELU_TANH: return 0.5 * x * (1 + tanh(k * (x + 0.044715 * x * x * x)));
    case U_TANH: return tanh(x);
    case U_SIGMOID: return 1 / (1 + exp(-x));
    case U_SILU: return x / (1 + exp(-x));
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_POW: return pow(x, s);
    case U_ADDS: return x + s;
    case U_MULS: return x * s;
    default: return x / s;
    }
}

/* Inputs where each op is defined and smooth (log and fractional pow need
 * x > 0; relu's kink at 0 stays clear of the finite differences). */
static amp_tensor *unary_input(int op, amp_shape s, amp_dtype dt, uint64_t seed)
{
    if (op == U_LOG || op == U_POW)
        return test_uniform(s, dt, 0.2, 3, seed);
    amp_tensor *x = test_uniform(s, dt, -3, 3, seed);
    if (op == U_RELU) { /* move values off the kink */
        for (int64_t i = 0; i < amp_tensor_numel(x); i++) {
            float v = (float)amp_tensor_get(x, i);
            if (fabsf(v) < 0.05f) {
                v = v < 0 ? -0.5f : 0.5f;
                amp_convert(&v, AMP_F32, (char *)amp_tensor_data(x) + i * (int64_t)amp_dtype_size(dt), dt, 1);
            }
        }
    }
    return x;
}

static const double U_SCALAR[U_COUNT] = {[U_POW] = 2.5, [U_ADDS] = -1.25, [U_MULS] = 0.3, [U_DIVS] = 3.0};

static void test_unary_values_f32(void)
{
    for (int op = 0; op < U_COUNT; op++) {
        amp_tensor *x = unary_input(op, AMP_SHAPE(6, 7), AMP_F32, 60 + (uint64_t)op);
        amp_tensor *y = unary(op, x, U_SCALAR[op]);
        CHECK_MSG(y != NULL, "%s failed: %s", U_NAME[op], amp_last_error());
        if (y) {
            CHECK_EQ_INT(amp_tensor_dtype(y), AMP_F32);
            double worst = 0;
            for (int64_t i = 0; i < amp_tensor_numel(x); i++) {
                double ref = unary_ref(op, amp_tensor_get(x, i), U_SCALAR[op]);
                double e = fabs(amp_tensor_get(y, i) - ref) / fmax(fabs(ref), 1e-30);
                if (fabs(ref) < 1e-6)
                    e = fabs(amp_tensor_get(y, i) - ref) * 1e6; /* near 0: absolute 1e-12 */
                worst = fmax(worst, e);
            }
            CHECK_MSG(worst <= 1e-6, "%s: worst relative error %.3g", U_NAME[op], worst);
        }
        amp_tensor_free(x);
    }
}

typedef struct {
    int op;
} un_ctx;

static amp_tensor *gc_unary(amp_tensor **in, void *ctx)
{
    int op = ((un_ctx *)ctx)->op;
    return unary(op, in[0], U_SCALAR[op]);
}

static void test_unary_gradcheck(void)
{
    for (int op = 0; op < U_COUNT; op++) {
        amp_tensor *x = unary_input(op, AMP_SHAPE(3, 5), AMP_F32, 80 + (uint64_t)op);
        amp_tensor_set_requires_grad(x, true);
        un_ctx ctx = {op};
        gradcheck(U_NAME[op], gc_unary, &x, 1, &ctx, 1e-3, 1e-3, 1e-2);
        amp_tensor_free(x);
    }
}

static void test_relu_gradient_is_zero_at_zero(void)
{
    amp_tensor *x = make(AMP_SHAPE(4), AMP_F32, (float[]){-1.0f, 0.0f, 2.0f, -0.0f});
    amp_tensor_set_requires_grad(x, true);
    CHECK_OK(amp_backward(amp_sum_all(amp_relu(x))));
    amp_tensor *g = amp_tensor_grad(x);
    CHECK(g != NULL);
    if (g) {
        CHECK_EQ_INT(amp_tensor_get(g, 0), 0);
        CHECK_EQ_INT(amp_tensor_get(g, 1), 0);
        CHECK_EQ_INT(amp_tensor_get(g, 2), 1);
        CHECK_EQ_INT(amp_tensor_get(g, 3), 0);
    }
    amp_tensor_free(x);
}

/* pow at the exponents PyTorch treats specially, and its p == 0 rule: the
 * gradient is 0 (even at x = 0, where p * x^(p-1) would be 0 * inf). */
static void test_pow_scalar_exponents(void)
{
    amp_tensor *x = make(AMP_SHAPE(4), AMP_F32, (float[]){0.0f, 1.5f, -2.0f, 4.0f});
    amp_tensor_set_requires_grad(x, true);
    static const double ps[] = {0, 1, 2, 3, 0.5, -1};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        amp_tensor *y = amp_pow_scalar(x, ps[k]);
        CHECK(y != NULL);
        for (int64_t i = 0; y && i < 4; i++) {
            double xv = amp_tensor_get(x, i), ref = pow(xv, ps[k]);
            double got = amp_tensor_get(y, i);
            CHECK_MSG(got == (double)(float)ref || (isnan(got) && isnan(ref)),
                      "pow(%g, %g) = %.9g, expected %.9g", xv, ps[k], got, ref);
        }
        CHECK_OK(amp_backward(amp_sum_all(y)));
        amp_tensor *g = amp_tensor_grad(x);
        for (int64_t i = 0; g && i < 4; i++) {
            double xv = amp_tensor_get(x, i);
            double ref = ps[k] == 0 ? 0 : ps[k] * pow(xv, ps[k] - 1);
            double got = amp_tensor_get(g, i);
            CHECK_MSG(got == (double)(float)ref || (isnan(got) && isnan(ref)),
                      "d pow(%g, %g)/dx = %.9g, expected %.9g", xv, ps[k], got, ref);
        }
        amp_tensor_clear_grad(x);
    }
    /* A negative base with a fractional exponent is NaN, as in PyTorch. */
    CHECK(isnan(amp_tensor_get(amp_pow_scalar(x, 2.5), 2)));
    amp_tensor_free(x);
}

/* x / 3 rounds differently from x * (1/3) for some x: the op must divide. */
static void test_div_scalar_is_true_division(void)
{
    enum { N = 64 };
    float v[N];
    for (int i = 0; i < N; i++)
        v[i] = 1.0f + (float)i * 0.37f;
    amp_tensor *x = make(AMP_SHAPE(N), AMP_F32, v);
    amp_tensor *y = amp_div_scalar(x, 3.0);
    int differs = 0;
    for (int i = 0; y && i < N; i++) {
        float want = v[i] / 3.0f;
        CHECK_MSG((float)amp_tensor_get(y, i) == want, "%.9g / 3 = %.9g, expected %.9g", v[i],
                  amp_tensor_get(y, i), want);
        differs += (v[i] * (1.0f / 3.0f)) != want;
    }
    CHECK_MSG(differs > 0, "no input tells x / 3 from x * (1/3); the test cannot fail");
    amp_tensor_free(x);
}

static void test_sub_scalar_is_add_of_negation(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(5), AMP_F32, -2, 2, 90);
    amp_tensor *y = amp_sub_scalar(x, 0.75);
    for (int i = 0; y && i < 5; i++)
        CHECK(amp_tensor_get(y, i) == (double)((float)amp_tensor_get(x, i) - 0.75f));
    amp_tensor_free(x);
}

/* ---------------------------------------------------------- 16-bit dtypes */

static const amp_dtype HALF[2] = {AMP_BF16, AMP_F16};

static void test_16bit_binary_within_one_ulp(void)
{
    for (int k = 0; k < 2; k++) {
        amp_tensor *a = test_uniform(AMP_SHAPE(3, 1, 4), HALF[k], -2, 2, 100);
        amp_tensor *b = test_uniform(AMP_SHAPE(2, 4), HALF[k], 0.5, 2, 101);
        for (int op = 0; op < 4; op++)
            check_binary(op, a, b, AMP_SHAPE(3, 2, 4), HALF[k], 1);
        amp_tensor_free(a);
        amp_tensor_free(b);
    }
}

static void test_16bit_unary_within_two_ulps(void)
{
    for (int k = 0; k < 2; k++) {
        for (int op = 0; op < U_COUNT; op++) {
            amp_tensor *x = unary_input(op, AMP_SHAPE(40), HALF[k], 110 + (uint64_t)op);
            amp_tensor *y = unary(op, x, U_SCALAR[op]);
            CHECK(y != NULL);
            if (!y)
                continue;
            CHECK_EQ_INT(amp_tensor_dtype(y), HALF[k]);
            for (int64_t i = 0; i < 40; i++) {
                double ref = unary_ref(op, amp_tensor_get(x, i), U_SCALAR[op]), got = amp_tensor_get(y, i);
                CHECK_MSG(ulps16(HALF[k], got, ref) <= 2, "%s %s(%.6g) = %.6g, expected %.6g",
                          amp_dtype_name(HALF[k]), U_NAME[op], amp_tensor_get(x, i), got, ref);
            }
            amp_tensor_free(x);
        }
    }
}

/* A gradient computed in dt (inputs rounded to dt) against the same
 * computation in f32 on the same rounded values. */
static void check_grad_vs_f32(const char *what, amp_tensor *g16, amp_tensor *g32, amp_dtype dt, double rtol)
{
    CHECK_MSG(g16 && g32, "%s: missing gradient", what);
    if (!g16 || !g32)
        return;
    CHECK_EQ_INT(amp_tensor_dtype(g16), dt);
    for (int64_t i = 0; i < amp_tensor_numel(g32); i++) {
        double a = amp_tensor_get(g16, i), b = amp_tensor_get(g32, i);
        /* The absolute part covers outputs saved in dt: tanh's 1 - y^2 at
         * y ~ 1 loses what rounding y to dt lost, in PyTorch too. */
        if (!(fabs(a - b) <= rtol * (fabs(b) + 0.25))) {
            harness_fail(__FILE__, __LINE__, "%s %s grad[%lld] = %.6g, f32 gives %.6g", amp_dtype_name(dt),
                         what, (long long)i, a, b);
            return;
        }
    }
}

static void test_16bit_backward_matches_f32(void)
{
    for (int k = 0; k < 2; k++) {
        amp_dtype dt = HALF[k];
        double rtol = dt == AMP_BF16 ? 2e-2 : 4e-3;
        for (int op = 0; op < 4; op++) {
            amp_tensor *a = test_uniform(AMP_SHAPE(3, 1, 4), dt, -2, 2, 120);
            amp_tensor *b = test_uniform(AMP_SHAPE(2, 4), dt, 0.6, 2, 121);
            amp_tensor *g = test_uniform(AMP_SHAPE(3, 2, 4), dt, -1, 1, 122);
            amp_tensor *c[3] = {f32_copy(a), f32_copy(b), f32_copy(g)};
            amp_tensor *all[4] = {a, b, c[0], c[1]};
            for (int j = 0; j < 4; j++)
                amp_tensor_set_requires_grad(all[j], true);
            amp_tensor *y16 = BIN[op](a, b);
            CHECK(y16 && amp_tensor_dtype(y16) == dt);
            CHECK_OK(amp_backward_with(y16, g));
            CHECK_OK(amp_backward_with(BIN[op](c[0], c[1]), c[2]));
            check_grad_vs_f32(BIN_NAME[op], amp_tensor_grad(a), amp_tensor_grad(c[0]), dt, rtol);
            check_grad_vs_f32(BIN_NAME[op], amp_tensor_grad(b), amp_tensor_grad(c[1]), dt, rtol);
            amp_tensor *own[6] = {a, b, g, c[0], c[1], c[2]};
            for (int j = 0; j < 6; j++)
                amp_tensor_free(own[j]);
        }
        for (int op = 0; op < U_COUNT; op++) {
            amp_tensor *x = unary_input(op, AMP_SHAPE(24), dt, 130 + (uint64_t)op);
            amp_tensor *x32 = f32_copy(x);
            amp_tensor_set_requires_grad(x, true);
            amp_tensor_set_requires_grad(x32, true);
            CHECK_OK(amp_backward(amp_sum_all(amp_mul_scalar(unary(op, x, U_SCALAR[op]), 0.5))));
            CHECK_OK(amp_backward(amp_sum_all(amp_mul_scalar(unary(op, x32, U_SCALAR[op]), 0.5))));
            check_grad_vs_f32(U_NAME[op], amp_tensor_grad(x), amp_tensor_grad(x32), dt, rtol);
            amp_tensor_free(x);
            amp_tensor_free(x32);
        }
    }
}

/* f16 + f32 gives f32 (PyTorch's promotion); each input's gradient comes
 * back in its own dtype. */
static void test_type_promotion_and_gradient_dtypes(void)
{
    amp_tensor *h = test_uniform(AMP_SHAPE(2, 3), AMP_F16, -1, 1, 140);
    amp_tensor *f = test_uniform(AMP_SHAPE(3), AMP_F32, 0.5, 1.5, 141);
    amp_tensor *bh = test_uniform(AMP_SHAPE(3), AMP_BF16, -1, 1, 142);
    amp_tensor_set_requires_grad(h, true);
    amp_tensor_set_requires_grad(f, true);
    amp_tensor *y = amp_mul(h, f);
    CHECK(y && amp_tensor_dtype(y) == AMP_F32);
    check_binary(2, h, f, AMP_SHAPE(2, 3), AMP_F32, 0);
    CHECK_OK(amp_backward(amp_sum_all(y)));
    amp_tensor *gh = amp_tensor_grad(h), *gf = amp_tensor_grad(f);
    CHECK(gh && amp_tensor_dtype(gh) == AMP_F16);
    CHECK(gf && amp_tensor_dtype(gf) == AMP_F32);
    for (int i = 0; gh && gf && i < 6; i++) {
        double want = amp_tensor_get(f, i % 3); /* d(h*f)/dh = f, rounded to f16 */
        CHECK(amp_tensor_get(gh, i) == (double)amp_f16_to_f32(amp_f32_to_f16((float)want)));
    }
    for (int j = 0; gf && j < 3; j++) {
        double want = amp_tensor_get(h, j) + amp_tensor_get(h, 3 + j);
        CHECK_NEAR(amp_tensor_get(gf, j), want, 1e-6);
    }
    CHECK(amp_tensor_dtype(amp_add(h, bh)) == AMP_F32);   /* f16 with bf16 -> f32 */
    CHECK(amp_tensor_dtype(amp_add(bh, bh)) == AMP_BF16); /* same stays */
    amp_tensor_free(h);
    amp_tensor_free(f);
    amp_tensor_free(bh);
}

/* ------------------------------------------------------------------ errors */

static void test_broadcast_error_names_op_and_shapes(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 3), AMP_F32), *b = amp_zeros(AMP_SHAPE(4), AMP_F32);
    CHECK(amp_add(a, b) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "add: shapes [2, 3] and [4] cannot broadcast");
    CHECK(amp_div(b, a) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "div: shapes [4] and [2, 3] cannot broadcast");
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_integer_inputs_are_dtype_errors(void)
{
    amp_tensor *i = amp_zeros(AMP_SHAPE(3), AMP_I32), *f = amp_zeros(AMP_SHAPE(3), AMP_F32);
    CHECK(amp_mul(f, i) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "mul: input 1 has dtype i32");
    CHECK(amp_relu(i) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "relu: input 0 has dtype i32");
    CHECK(amp_mul_scalar(i, 2.0) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "mul_scalar");
    amp_tensor_free(i);
    amp_tensor_free(f);
}

/* A chain fed a NULL keeps the error of the op that failed first. */
static void test_null_input_keeps_first_error(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 3), AMP_F32), *b = amp_zeros(AMP_SHAPE(5), AMP_F32);
    amp_tensor *y = amp_exp(amp_mul(amp_relu(amp_sub(a, b)), a));
    CHECK(y == NULL);
    CHECK(amp_div_scalar(NULL, 2) == NULL && amp_add(a, NULL) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "sub: shapes [2, 3] and [5] cannot broadcast");
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* --------------------------------------------------------- larger tensors */

/* Large enough for several threads and blocks: every element still matches
 * the reference, in bf16 with a row vector and in f32 with a 0-d scalar. */
static void test_large_inputs_match_reference(void)
{
    amp_tensor *a = test_uniform(AMP_SHAPE(300, 257), AMP_BF16, -4, 4, 150);
    amp_tensor *b = test_uniform(AMP_SHAPE(257), AMP_BF16, -4, 4, 151);
    check_binary(2, a, b, AMP_SHAPE(300, 257), AMP_BF16, 1);
    amp_tensor *x = test_uniform(AMP_SHAPE(5, 20000), AMP_F32, -4, 4, 152);
    amp_tensor *s = amp_full(AMP_SHAPE(), AMP_F32, 0.3);
    check_binary(3, x, s, AMP_SHAPE(5, 20000), AMP_F32, 0);
    check_binary(1, s, x, AMP_SHAPE(5, 20000), AMP_F32, 0);
    amp_tensor *t = amp_tanh(x);
    int bad = 0;
    for (int64_t i = 0; t && i < amp_tensor_numel(x) && bad < 3; i++)
        if (fabs(amp_tensor_get(t, i) - tanh(amp_tensor_get(x, i))) > 2e-7)
            bad++;
    CHECK(t && bad == 0);
    amp_tensor *own[4] = {a, b, x, s};
    for (int j = 0; j < 4; j++)
        amp_tensor_free(own[j]);
}


/* ------------------------------------------------------ vector kernels */

/* GELU (tanh) runs on a vector kernel where the CPU has one: over a wide
 * range, specials included, it stays within 1e-6 (relative, or absolute
 * near 0) of the double definition, its gradient within 2e-6 of the
 * double derivative, and both agree with the scalar path (amp_cpu_limit)
 * on infinities and NaN. */
static void test_gelu_tanh_vector_kernel(void)
{
    const int64_t n = 4099; /* several vector widths and a tail */
    amp_tensor *x = amp_empty(AMP_SHAPE(n), AMP_F32);
    float *v = amp_tensor_data(x);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(-20.0 + 40.0 * (double)i / (double)(n - 1));
    const float special[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, -1e-30f, 1e20f, -1e20f, -12.0f, 90.0f};
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++)
        v[k * 37] = special[k];
    const double c = sqrt(2.0 / M_PI), kap = 0.044715;
    amp_tensor *ys[2] = {0}, *gs[2] = {0};
    for (int pass = 0; pass < 2; pass++) {
        amp_cpu_limit(pass ? 0u : ~0u);
        amp_tensor *xi = amp_clone(x);
        amp_tensor_set_requires_grad(xi, true);
        amp_tensor *y = amp_gelu(xi, AMP_GELU_TANH);
        CHECK_OK(amp_backward(amp_sum_all(y)));
        ys[pass] = amp_clone(y);
        gs[pass] = amp_clone(amp_tensor_grad(xi));
        amp_tensor_free(xi);
        amp_temps_free();
    }
    amp_cpu_limit(~0u);
    double worst = 0, worst_g = 0;
    for (int64_t i = 0; i < n; i++) {
        double xv = v[i], y = amp_tensor_get(ys[0], i), g = amp_tensor_get(gs[0], i);
        double ys_ = amp_tensor_get(ys[1], i), gs_ = amp_tensor_get(gs[1], i);
        if (!isfinite(xv) || fabs(xv) > 1e10) { /* specials: as the scalar path */
            CHECK_MSG((isnan(y) && isnan(ys_)) || y == ys_, "gelu(%g) = %g, scalar %g", xv, y, ys_);
            CHECK_MSG((isnan(g) && isnan(gs_)) || g == gs_ || fabs(g - gs_) < 1e-30, "gelu'(%g) = %g, scalar %g",
                      xv, g, gs_);
            continue;
        }
        double u = c * (xv + kap * xv * xv * xv), t = tanh(u);
        double ref = 0.5 * xv * (1 + t);
        double dref = 0.5 * (1 + t) + 0.5 * xv * (1 - t * t) * c * (1 + 3 * kap * xv * xv);
        /* u itself carries f32 rounding, which exp(-2u) amplifies by |2u|
         * (the C kernel has the same error): scale the allowance. */
        double e = fabs(ref) < 1e-6 ? fabs(y - ref) * 1e6 : fabs(y - ref) / fabs(ref);
        worst = fmax(worst, e / (1 + 2 * fabs(u)));
        worst_g = fmax(worst_g, fabs(g - dref) / fmax(fabs(dref), 1.0) / (1 + 2 * fabs(u)));
    }
    CHECK_MSG(worst <= 1e-6, "gelu_tanh: worst scaled relative error %.3g", worst);
    CHECK_MSG(worst_g <= 1e-6, "gelu_tanh grad: worst scaled error %.3g", worst_g);
    for (int pass = 0; pass < 2; pass++)
        amp_tensor_free(ys[pass]), amp_tensor_free(gs[pass]);
    amp_tensor_free(x);
}

/* relu and its gradient on f16 / bf16 select bits without widening: bit
 * for bit what widening to f32, applying relu and rounding back gives,
 * for every 16-bit pattern (NaNs come out quieted, -0 as +0); on the
 * vector loops and, with amp_cpu_limit lowered, the plain ones. */
static void test_relu_16bit_bits_match_widened(void)
{
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 4; d++) {
        amp_cpu_limit(d < 2 ? ~0u : 0u);
        amp_dtype dt = dts[d % 2];
        const int64_t n = 65536 + 13; /* (a vector loop's masked tail too) */
        amp_tensor *x = amp_empty(AMP_SHAPE(n), dt), *g = amp_empty(AMP_SHAPE(n), dt);
        uint16_t *xv = amp_tensor_data(x), *gv = amp_tensor_data(g);
        for (int64_t i = 0; i < n; i++) {
            xv[i] = (uint16_t)i;
            gv[i] = (uint16_t)(i * 40503u + 12345u); /* every pattern too, shuffled */
        }
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *y = amp_relu(x);
        CHECK_OK(amp_backward_with(y, g));
        amp_tensor *dx = amp_tensor_grad(x);
        CHECK(y && dx && amp_tensor_dtype(y) == dt && amp_tensor_dtype(dx) == dt);
        int bad = 0;
        for (int64_t i = 0; y && dx && i < n && bad < 3; i++) {
            float xf, gf, yf, dxf;
            uint16_t want_y, want_dx;
            amp_convert(&xv[i], dt, &xf, AMP_F32, 1);
            amp_convert(&gv[i], dt, &gf, AMP_F32, 1);
            yf = xf > 0.0f ? xf : (xf == xf ? 0.0f : xf);
            amp_convert(&yf, AMP_F32, &want_y, dt, 1);
            float ywf; /* the saved output, as the widened path reads it */
            amp_convert(&want_y, dt, &ywf, AMP_F32, 1);
            dxf = ywf > 0.0f ? gf : 0.0f;
            amp_convert(&dxf, AMP_F32, &want_dx, dt, 1);
            uint16_t got_y = ((const uint16_t *)amp_tensor_data(y))[i];
            uint16_t got_dx = ((const uint16_t *)amp_tensor_data(dx))[i];
            if (got_y != want_y || got_dx != want_dx) {
                bad++;
                CHECK_MSG(0, "%s relu(0x%04x) = 0x%04x (want 0x%04x), grad(0x%04x) = 0x%04x (want 0x%04x)",
                          amp_dtype_name(dt), xv[i], got_y, want_y, gv[i], got_dx, want_dx);
            }
        }
        amp_tensor_free(x);
        amp_tensor_free(g);
        amp_temps_free();
    }
    amp_cpu_limit(~0u);
}

/* add's gradient for an input of gout's shape and dtype is gout itself,
 * taken without a copy: the values exact (x + x: 2 g; x - y: g, -g; a
 * broadcast input: the column sums), and the backward of 2 (x + y) (4
 * MiB each) holding, beside the seed and 2 g, one copy of 2 g (x's; y
 * keeps 2 g itself), not two. */
static void test_add_gradient_is_gout_without_a_copy(void)
{
    const int64_t n = 1 << 20;
    amp_tensor *x = test_uniform(AMP_SHAPE(n), AMP_F32, -1, 1, 41), *y = test_uniform(AMP_SHAPE(n), AMP_F32, -1, 1, 42);
    amp_tensor *g = test_uniform(AMP_SHAPE(n), AMP_F32, -1, 1, 43);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(y, true);
    amp_tensor *s = amp_mul_scalar(amp_add(x, y), 2.0);
    amp_memory_reset_peak();
    const size_t before = amp_memory_get_stats().current;
    CHECK_OK(amp_backward_with(s, g));
    const size_t extra = amp_memory_get_stats().peak - before, mb = (size_t)n * sizeof(float);
    CHECK_MSG(extra < 3 * mb + mb / 2, "backward of 2 (x + y) took %zu bytes more at its peak (g is %zu)", extra,
              mb);
    const float *gp = amp_tensor_data(g);
    for (int t = 0; t < 2; t++) {
        const float *d = amp_tensor_grad(t ? y : x) ? amp_tensor_data(amp_tensor_grad(t ? y : x)) : NULL;
        int64_t bad = d ? -1 : 0;
        for (int64_t i = 0; d && i < n && bad < 0; i++)
            if (d[i] != 2 * gp[i])
                bad = i;
        CHECK_MSG(bad < 0, "2 (x + y): d%c wrong at %lld", "xy"[t], (long long)bad);
    }
    for (int op = 0; op < 2; op++) { /* x + x, then x - y */
        amp_tensor_clear_grad(x);
        amp_tensor_clear_grad(y);
        amp_tensor *r = op ? amp_sub(x, y) : amp_add(x, x);
        CHECK_OK(amp_backward_with(r, g));
        const float *dx = amp_tensor_data(amp_tensor_grad(x)), *dy = amp_tensor_data(amp_tensor_grad(y));
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (op ? dx[i] != gp[i] || dy[i] != -gp[i] : dx[i] != 2 * gp[i])
                bad = i;
        CHECK_MSG(bad < 0, "%s: gradient wrong at %lld", op ? "x - y" : "x + x", (long long)bad);
    }
    amp_tensor *a = test_uniform(AMP_SHAPE(3, 4), AMP_F32, -1, 1, 44), *b = test_uniform(AMP_SHAPE(4), AMP_F32, -1, 1, 45);
    amp_tensor *ga = test_uniform(AMP_SHAPE(3, 4), AMP_F32, -1, 1, 46);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    CHECK_OK(amp_backward_with(amp_add(a, b), ga));
    for (int64_t j = 0; j < 4; j++) {
        const float want = ((float)amp_tensor_get(ga, j) + (float)amp_tensor_get(ga, 4 + j)) + (float)amp_tensor_get(ga, 8 + j);
        CHECK_NEAR(amp_tensor_get(amp_tensor_grad(b), j), want, 1e-6);
        CHECK(amp_tensor_get(amp_tensor_grad(a), j) == amp_tensor_get(ga, j));
    }
    amp_tensor_free(x), amp_tensor_free(y), amp_tensor_free(g);
    amp_tensor_free(a), amp_tensor_free(b), amp_tensor_free(ga);
    amp_temps_free();
}

int main(void)
{
    RUN(test_binary_same_shape_values_exact);
    RUN(test_broadcast_3d_with_2d);
    RUN(test_zero_dim_scalar_operands);
    RUN(test_bias_row_vector_forward_and_column_sum_grad);
    RUN(test_empty_tensor_broadcasts_to_empty);
    RUN(test_binary_gradcheck_broadcasting);
    RUN(test_gradient_only_where_required);
    RUN(test_unary_values_f32);
    RUN(test_unary_gradcheck);
    RUN(test_relu_gradient_is_zero_at_zero);
    RUN(test_pow_scalar_exponents);
    RUN(test_div_scalar_is_true_division);
    RUN(test_sub_scalar_is_add_of_negation);
    RUN(test_16bit_binary_within_one_ulp);
    RUN(test_16bit_unary_within_two_ulps);
    RUN(test_16bit_backward_matches_f32);
    RUN(test_type_promotion_and_gradient_dtypes);
    RUN(test_broadcast_error_names_op_and_shapes);
    RUN(test_integer_inputs_are_dtype_errors);
    RUN(test_null_input_keeps_first_error);
    RUN(test_large_inputs_match_reference);
    RUN(test_gelu_tanh_vector_kernel);
    RUN(test_relu_16bit_bits_match_widened);
    RUN(test_add_gradient_is_gout_without_a_copy);
    return harness_done();
}
