/*
 * test_backend_ops.c - every op on every backend, from one table (in the
 * spirit of ggml's test-backend-ops).
 *
 * CASES lists, per row of src/ops/op_list.h (by its name), how to make the
 * inputs (shapes; value ranges that keep the op well-conditioned: positive
 * for log / pow, away from relu's kink, distinct values for max_pool2d and
 * argmax, labels in range; an f32 input beside 16-bit ones for type
 * promotion), how to call the op through the public API, and
 * whether it has a gradient. A row without a case fails the test, naming
 * the row: a new op cannot land untested. A row whose cost function counts
 * nothing on its first case fails too (test_every_row_has_a_cost).
 *
 * For each case and each backend present (the CPU always; CUDA when
 * amp_cuda_available(), cudaemu included; any later device that
 * amp_to_device reaches):
 *   - the CPU in f32: the gradients (amp_backward of sum(out * w), w fixed
 *     weights) against central finite differences, and the result made by
 *     the case's row (its grad_fn) - a case cannot test another op by
 *     mistake;
 *   - the CPU in bf16 / f16: against the CPU in f32 on the same (rounded)
 *     inputs, forward and gradients, at twice the dtype's tolerance (the
 *     CPU is everyone's reference, so its 16-bit paths are checked too);
 *   - another backend: forward and gradients against the CPU on the same
 *     inputs (copied with amp_to_device), in f32, bf16 and f16;
 *   - a row that is LOWER under autocast on that device: f32 inputs under
 *     autocast (the device's default dtype) against the CPU under autocast
 *     to the same dtype (on the CPU: against the op on inputs rounded to
 *     that dtype, which autocast must reproduce);
 *   - supports: where op_supported (src/ops/ops.h) says a backend does not
 *     run a row (or these dtypes), the call must fail with AMP_ERR_DEVICE
 *     (reported "unsup"); where it says yes, the op must run. A backend
 *     that lacks an op without saying so fails here.
 * It prints one table line per case and backend: op, case, backend, then
 * per dtype "ok <max error>", "FAIL <max error>", "unsup" or "-".
 *
 * Tolerances (|got - ref| <= tol * (1 + |ref|), element by element):
 * f32 2e-5 (about 1e-5 relative; the sums run in another order), bf16
 * 1.6e-2 and f16 2e-3 (two units in the last place: a 16-bit result may
 * round the other way when the f32 values before rounding differ in their
 * last bits). Cases that sum many products (matmul, linear, conv2d,
 * attention, layer_norm, the reductions) take a multiple, written in the
 * table. Finite differences: steps h = 1e-2 * max(1, |x|) and 2h in f32
 * (Richardson: the h^2 error terms cancel), the weighted sum taken in
 * double; |analytic - numeric| <= 3e-4 * (1 + |numeric|). Measured on
 * main: at most 2e-5 for every case; a 1% error in tanh's derivative gives
 * 9e-3, gelu's exact derivative swapped for the tanh approximation's 5e-4.
 *
 * Small shapes: the CPU runs it in under a second (Release), cudaemu in
 * about 10 s. AMPC_TEST_QUICK=1 (the sanitizer builds) checks fewer elements
 * by finite differences.
 */
#include "harness.h"
#include "record/profile.h"
#include "ops/fused.h"
#include "ops/ops.h"
#include "tensor/tensor.h"

#include <stdlib.h>

#define MAXIN 4

/* How an input's values are made. */
enum {
    V_UNIFORM, /* uniform in [lo, hi) */
    V_AWAY0,   /* |x| uniform in [lo, hi), random sign: away from a kink at 0 */
    V_DISTINCT,/* a shuffled ramp over [lo, hi): no ties; keep the gaps above the fd step */
    V_LABELS,  /* i64 integers in [lo, hi) */
    V_F32,     /* uniform in [lo, hi), f32 whatever the case's dtype (promotion) */
};

typedef struct {
    int values;
    amp_shape shape;
    double lo, hi;
} in_spec;

/* Case flags. */
enum {
    NO_GRAD = 1 << 0, /* the op has no gradient (argmax) */
    NO_FD = 1 << 1,   /* no finite differences (the result is rounded to 16 bits, or a fused relu's
                       * kink lies within a step of some pre-activation) */
};

typedef struct op_case op_case;
typedef amp_tensor *(*case_fn)(amp_tensor **in, const op_case *c);

struct op_case {
    const char *op;    /* the op_list.h row it exercises */
    const char *what;  /* the variant, for the table */
    case_fn call;
    int n_in;
    in_spec in[MAXIN];
    unsigned flags;
    double tol_mul; /* tolerance multiple (0 = 1): long sums */
    int iarg;       /* a parameter for call */
    double farg;
};

/* ------------------------------------------------------------- calls */

static amp_tensor *c_add(amp_tensor **x, const op_case *c) { (void)c; return amp_add(x[0], x[1]); }
static amp_tensor *c_sub(amp_tensor **x, const op_case *c) { (void)c; return amp_sub(x[0], x[1]); }
static amp_tensor *c_mul(amp_tensor **x, const op_case *c) { (void)c; return amp_mul(x[0], x[1]); }
static amp_tensor *c_div(amp_tensor **x, const op_case *c) { (void)c; return amp_div(x[0], x[1]); }
static amp_tensor *c_add_scalar(amp_tensor **x, const op_case *c) { return amp_add_scalar(x[0], c->farg); }
static amp_tensor *c_sub_scalar(amp_tensor **x, const op_case *c) { return amp_sub_scalar(x[0], c->farg); }
static amp_tensor *c_mul_scalar(amp_tensor **x, const op_case *c) { return amp_mul_scalar(x[0], c->farg); }
static amp_tensor *c_div_scalar(amp_tensor **x, const op_case *c) { return amp_div_scalar(x[0], c->farg); }
static amp_tensor *c_neg(amp_tensor **x, const op_case *c) { (void)c; return amp_neg(x[0]); }
static amp_tensor *c_relu(amp_tensor **x, const op_case *c) { (void)c; return amp_relu(x[0]); }
static amp_tensor *c_gelu(amp_tensor **x, const op_case *c) { return amp_gelu(x[0], (amp_gelu_approx)c->iarg); }
static amp_tensor *c_tanh(amp_tensor **x, const op_case *c) { (void)c; return amp_tanh(x[0]); }
static amp_tensor *c_sigmoid(amp_tensor **x, const op_case *c) { (void)c; return amp_sigmoid(x[0]); }
static amp_tensor *c_silu(amp_tensor **x, const op_case *c) { (void)c; return amp_silu(x[0]); }
static amp_tensor *c_exp(amp_tensor **x, const op_case *c) { (void)c; return amp_exp(x[0]); }
static amp_tensor *c_log(amp_tensor **x, const op_case *c) { (void)c; return amp_log(x[0]); }
static amp_tensor *c_pow(amp_tensor **x, const op_case *c) { return amp_pow_scalar(x[0], c->farg); }
static amp_tensor *c_matmul(amp_tensor **x, const op_case *c) { (void)c; return amp_matmul(x[0], x[1]); }
static amp_tensor *c_linear(amp_tensor **x, const op_case *c) { return amp_linear(x[0], x[1], c->n_in > 2 ? x[2] : NULL); }
/* The fused forms nn's layers use (ops/fused.h): the same row, an
 * activation in the GEMM's epilogue. */
static amp_tensor *c_linear_relu(amp_tensor **x, const op_case *c)
{
    return op_linear_relu(x[0], x[1], c->n_in > 2 ? x[2] : NULL);
}
static amp_tensor *c_linear_gelu(amp_tensor **x, const op_case *c)
{
    return op_linear_gelu(x[0], x[1], c->n_in > 2 ? x[2] : NULL);
}

static amp_tensor *c_sum(amp_tensor **x, const op_case *c)
{
    static const int d02[2] = {0, 2};
    return c->iarg ? amp_sum(x[0], 2, d02, true) : amp_sum_all(x[0]);
}

static amp_tensor *c_mean(amp_tensor **x, const op_case *c)
{
    static const int d1[1] = {1};
    return c->iarg ? amp_mean(x[0], 1, d1, false) : amp_mean_all(x[0]);
}

static amp_tensor *c_softmax(amp_tensor **x, const op_case *c) { return amp_softmax(x[0], c->iarg); }
static amp_tensor *c_log_softmax(amp_tensor **x, const op_case *c) { return amp_log_softmax(x[0], c->iarg); }

static amp_tensor *c_cross_entropy(amp_tensor **x, const op_case *c)
{
    return c->iarg ? amp_cross_entropy_ignore(x[0], x[1], c->iarg) : amp_cross_entropy(x[0], x[1]);
}

static amp_tensor *c_mse(amp_tensor **x, const op_case *c) { (void)c; return amp_mse_loss(x[0], x[1]); }

static amp_tensor *c_layer_norm(amp_tensor **x, const op_case *c)
{
    return amp_layer_norm(x[0], c->iarg, c->n_in > 1 ? x[1] : NULL, c->n_in > 2 ? x[2] : NULL, 1e-5);
}

static amp_tensor *c_embedding(amp_tensor **x, const op_case *c) { (void)c; return amp_embedding(x[0], x[1]); }

/* A fixed seed, so every backend (and every finite-difference evaluation)
 * draws the same mask. */
static amp_tensor *c_dropout(amp_tensor **x, const op_case *c)
{
    amp_manual_seed((uint64_t)c->iarg);
    return amp_dropout(x[0], c->farg, true);
}

/* iarg: stride * 10 + padding. */
static amp_tensor *c_conv2d(amp_tensor **x, const op_case *c)
{
    return amp_conv2d(x[0], x[1], c->n_in > 2 ? x[2] : NULL, c->iarg / 10, c->iarg % 10);
}

static amp_tensor *c_conv2d_relu(amp_tensor **x, const op_case *c)
{
    return op_conv2d_relu(x[0], x[1], c->n_in > 2 ? x[2] : NULL, c->iarg / 10, c->iarg % 10);
}

/* iarg: kernel * 100 + stride * 10 + padding. */
static amp_tensor *c_max_pool(amp_tensor **x, const op_case *c)
{
    return amp_max_pool2d(x[0], c->iarg / 100, c->iarg / 10 % 10, c->iarg % 10);
}

static amp_tensor *c_avg_pool(amp_tensor **x, const op_case *c)
{
    return amp_avg_pool2d(x[0], c->iarg / 100, c->iarg / 10 % 10, c->iarg % 10);
}

static amp_tensor *c_reshape(amp_tensor **x, const op_case *c) { (void)c; return amp_reshape(x[0], AMP_SHAPE(-1, 4)); }

static amp_tensor *c_permute(amp_tensor **x, const op_case *c)
{
    static const int perm[3] = {2, 0, 1};
    return c->iarg ? amp_transpose(x[0], 0, 1) : amp_permute(x[0], perm);
}

static amp_tensor *c_cat(amp_tensor **x, const op_case *c) { return amp_cat(x, c->n_in, c->iarg); }
/* iarg: dim * 100 + start * 10 + length. */
static amp_tensor *c_narrow(amp_tensor **x, const op_case *c)
{
    return amp_narrow(x[0], c->iarg / 100, c->iarg / 10 % 10, c->iarg % 10);
}
static amp_tensor *c_to(amp_tensor **x, const op_case *c) { return amp_to(x[0], (amp_dtype)c->iarg); }
static amp_tensor *c_argmax(amp_tensor **x, const op_case *c) { return amp_argmax(x[0], c->iarg); }
static amp_tensor *c_attention(amp_tensor **x, const op_case *c) { return amp_attention(x[0], x[1], x[2], c->iarg); }
static amp_tensor *c_attention_qkv(amp_tensor **x, const op_case *c) { return op_attention_qkv(x[0], c->iarg); }

/* ------------------------------------------------------------- the table */

#define U(lo, hi, ...) {V_UNIFORM, AMP_SHAPE(__VA_ARGS__), lo, hi}
#define A0(lo, hi, ...) {V_AWAY0, AMP_SHAPE(__VA_ARGS__), lo, hi}
#define D(lo, hi, ...) {V_DISTINCT, AMP_SHAPE(__VA_ARGS__), lo, hi}
#define L(hi, ...) {V_LABELS, AMP_SHAPE(__VA_ARGS__), 0, hi}
#define F32U(lo, hi, ...) {V_F32, AMP_SHAPE(__VA_ARGS__), lo, hi}

static const op_case CASES[] = {
    {"add", "same shape", c_add, 2, {U(-2, 2, 3, 5), U(-2, 2, 3, 5)}, .flags = 0},
    {"add", "broadcast", c_add, 2, {U(-2, 2, 4, 5, 6), U(-2, 2, 5, 1)}, .flags = 0},
    {"add", "scalar tensor", c_add, 2, {U(-2, 2, 3, 7), U(-2, 2)}, .flags = 0},
    {"add", "x + f32", c_add, 2, {U(-2, 2, 3, 7), F32U(-2, 2, 3, 7)}, .flags = 0},
    {"sub", "broadcast", c_sub, 2, {U(-2, 2, 4, 5, 6), U(-2, 2, 6)}, .flags = 0},
    {"mul", "broadcast", c_mul, 2, {U(-2, 2, 4, 5, 6), U(-2, 2, 4, 1, 6)}, .flags = 0},
    {"div", "broadcast", c_div, 2, {U(-2, 2, 4, 5, 6), U(0.5, 2, 5, 1)}, .flags = 0},
    {"add_scalar", "+1.75", c_add_scalar, 1, {U(-2, 2, 3, 9)}, .farg = 1.75},
    {"add_scalar", "sub 0.5", c_sub_scalar, 1, {U(-2, 2, 3, 9)}, .farg = 0.5},
    {"mul_scalar", "*-1.5", c_mul_scalar, 1, {U(-2, 2, 3, 9)}, .farg = -1.5},
    {"div_scalar", "/1.75", c_div_scalar, 1, {U(-2, 2, 3, 9)}, .farg = 1.75},
    {"neg", "", c_neg, 1, {U(-2, 2, 3, 9)}, .flags = 0},
    {"relu", "", c_relu, 1, {A0(0.1, 2, 3, 33)}, .flags = 0},
    {"gelu", "exact", c_gelu, 1, {U(-3, 3, 3, 33)}, .iarg = AMP_GELU_EXACT},
    {"gelu", "tanh", c_gelu, 1, {U(-3, 3, 3, 33)}, .iarg = AMP_GELU_TANH},
    {"tanh", "", c_tanh, 1, {U(-3, 3, 3, 33)}, .flags = 0},
    {"sigmoid", "", c_sigmoid, 1, {U(-4, 4, 3, 33)}, .flags = 0},
    {"silu", "", c_silu, 1, {U(-4, 4, 3, 33)}, .flags = 0},
    {"exp", "", c_exp, 1, {U(-2, 2, 3, 33)}, .flags = 0},
    {"log", "", c_log, 1, {U(0.5, 3, 3, 33)}, .flags = 0},
    {"pow", "^2.5", c_pow, 1, {U(0.5, 2, 3, 33)}, .farg = 2.5},
    {"pow", "^-1", c_pow, 1, {U(0.5, 2, 3, 33)}, .farg = -1},
    {"matmul", "[3,4,6]@[6,5]", c_matmul, 2, {U(-1, 1, 3, 4, 6), U(-1, 1, 6, 5)}, .tol_mul = 2},
    {"matmul", "batched", c_matmul, 2, {U(-1, 1, 2, 3, 6), U(-1, 1, 2, 6, 5)}, .tol_mul = 2},
    {"linear", "bias", c_linear, 3, {U(-1, 1, 2, 3, 8), U(-1, 1, 5, 8), U(-1, 1, 5)}, .tol_mul = 2},
    {"linear", "no bias", c_linear, 2, {U(-1, 1, 4, 8), U(-1, 1, 5, 8)}, .tol_mul = 2},
    {"linear", "bias + relu", c_linear_relu, 3, {U(-1, 1, 2, 3, 8), U(-1, 1, 5, 8), U(-1, 1, 5)}, .tol_mul = 2},
    {"linear", "bias + gelu", c_linear_gelu, 3, {U(-1, 1, 2, 3, 8), U(-1, 1, 5, 8), U(-1, 1, 5)}, .tol_mul = 2},
    {"sum", "dims 0,2 keep", c_sum, 1, {U(-2, 2, 4, 5, 6)}, .iarg = 1, .tol_mul = 2},
    {"sum", "all", c_sum, 1, {U(-2, 2, 4, 5, 6)}, .tol_mul = 4},
    {"mean", "dim 1", c_mean, 1, {U(-2, 2, 4, 5, 6)}, .iarg = 1, .tol_mul = 2},
    {"mean", "all", c_mean, 1, {U(-2, 2, 4, 5, 6)}, .tol_mul = 2},
    {"softmax", "dim -1", c_softmax, 1, {U(-3, 3, 3, 4, 7)}, .iarg = -1},
    {"softmax", "dim 1", c_softmax, 1, {U(-3, 3, 3, 4, 7)}, .iarg = 1},
    {"log_softmax", "dim -1", c_log_softmax, 1, {U(-3, 3, 3, 4, 7)}, .iarg = -1, .tol_mul = 2},
    {"log_softmax", "dim 0", c_log_softmax, 1, {U(-3, 3, 3, 4, 7)}, .iarg = 0, .tol_mul = 2},
    {"cross_entropy", "", c_cross_entropy, 2, {U(-3, 3, 6, 10), L(10, 6)}, .tol_mul = 2},
    {"cross_entropy", "ignore 2", c_cross_entropy, 2, {U(-3, 3, 9, 4), L(4, 9)}, .iarg = 2, .tol_mul = 2},
    {"mse_loss", "", c_mse, 2, {U(-1, 1, 4, 9), U(-1, 1, 4, 9)}, .tol_mul = 2},
    {"layer_norm", "weight bias", c_layer_norm, 3, {U(-2, 3, 3, 5, 16), U(0.5, 1.5, 16), U(-1, 1, 16)},
     .iarg = 1, .tol_mul = 2},
    {"layer_norm", "2 dims", c_layer_norm, 1, {U(-2, 3, 3, 4, 6)}, .iarg = 2, .tol_mul = 2},
    {"embedding", "repeats", c_embedding, 2, {U(-1, 1, 10, 6), L(10, 3, 5)}, .flags = 0},
    {"dropout", "p 0.3", c_dropout, 1, {U(-2, 2, 4, 33)}, .iarg = 1234, .farg = 0.3},
    {"conv2d", "pad 1 bias", c_conv2d, 3, {U(-1, 1, 2, 3, 6, 5), U(-0.5, 0.5, 4, 3, 3, 3), U(-1, 1, 4)},
     .iarg = 11, .tol_mul = 2},
    {"conv2d", "bias + relu", c_conv2d_relu, 3, {U(-1, 1, 2, 3, 6, 5), U(-0.5, 0.5, 4, 3, 3, 3), U(-1, 1, 4)},
     .iarg = 11, .tol_mul = 2, .flags = NO_FD},
    {"conv2d", "stride 2", c_conv2d, 2, {U(-1, 1, 2, 2, 7, 6), U(-0.5, 0.5, 3, 2, 2, 3)}, .iarg = 20,
     .tol_mul = 2},
    {"max_pool2d", "2x2", c_max_pool, 1, {D(-2, 2, 2, 2, 4, 4)}, .iarg = 200},
    {"max_pool2d", "3 s2 p1", c_max_pool, 1, {D(-2, 2, 1, 2, 7, 5)}, .iarg = 321},
    {"avg_pool2d", "2x2", c_avg_pool, 1, {U(-2, 2, 2, 3, 6, 6)}, .iarg = 200},
    {"avg_pool2d", "3 s2 p1", c_avg_pool, 1, {U(-2, 2, 2, 2, 7, 5)}, .iarg = 321},
    {"reshape", "[3,4,5]->[-1,4]", c_reshape, 1, {U(-2, 2, 3, 4, 5)}, .flags = 0},
    {"permute", "2,0,1", c_permute, 1, {U(-2, 2, 3, 4, 5)}, .flags = 0},
    {"permute", "transpose", c_permute, 1, {U(-2, 2, 3, 4, 5)}, .iarg = 1},
    {"cat", "dim 1", c_cat, 3, {U(-2, 2, 3, 4), U(-2, 2, 3, 2), U(-2, 2, 3, 1)}, .iarg = 1},
    {"cat", "dim 0", c_cat, 2, {U(-2, 2, 2, 5), U(-2, 2, 3, 5)}, .iarg = 0},
    {"narrow", "last dim (qkv)", c_narrow, 1, {U(-2, 2, 2, 3, 12)}, .iarg = 244},
    {"narrow", "dim 1", c_narrow, 1, {U(-2, 2, 3, 5, 4)}, .iarg = 112},
    {"to", "to f32", c_to, 1, {U(-2, 2, 3, 9)}, .iarg = AMP_F32},
    {"to", "to f16", c_to, 1, {U(-2, 2, 3, 9)}, .flags = NO_FD, .iarg = AMP_F16},
    {"to", "to bf16", c_to, 1, {U(-2, 2, 3, 9)}, .flags = NO_FD, .iarg = AMP_BF16},
    {"argmax", "dim 1", c_argmax, 1, {D(-2, 2, 5, 7)}, .flags = NO_GRAD, .iarg = 1},
    {"scaled_dot_product_attention", "causal", c_attention, 3,
     {U(-1, 1, 2, 2, 5, 8), U(-1, 1, 2, 2, 5, 8), U(-1, 1, 2, 2, 5, 8)}, .iarg = 1, .tol_mul = 2},
    {"scaled_dot_product_attention", "full", c_attention, 3,
     {U(-1, 1, 2, 5, 8), U(-1, 1, 2, 5, 8), U(-1, 1, 2, 5, 8)}, .iarg = 0, .tol_mul = 2},
    {"scaled_dot_product_attention", "fused qkv causal", c_attention_qkv, 1, {U(-1, 1, 2, 5, 3, 2, 8)}, .iarg = 1,
     .tol_mul = 2},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static const amp_dtype DTYPES[3] = {AMP_F32, AMP_BF16, AMP_F16};

/* Per-dtype tolerance, relative to 1 + |ref| (see the file comment). */
static double tol_of(amp_dtype dt) { return dt == AMP_BF16 ? 1.6e-2 : dt == AMP_F16 ? 2e-3 : 2e-5; }

#define FD_TOL 3e-4

/* The op-table index of a row name, or -1. */
static int row_of(const char *name)
{
    for (int i = 0; i < amp_op_count(); i++)
        if (!strcmp(amp_op_name(i), name))
            return i;
    return -1;
}

/* -------------------------------------------------------------- inputs */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1p-53; }

static int64_t numel_of(amp_shape s)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= s.d[i];
    return n;
}

/* A CPU tensor of dt holding v[0..n) (rounded to dt). */
static amp_tensor *from_floats(amp_shape s, amp_dtype dt, const float *v)
{
    amp_tensor *t = amp_empty(s, dt);
    if (t && amp_tensor_copy_in(t, v, AMP_F32) != AMP_OK) {
        amp_tensor_free(t);
        return NULL;
    }
    return t;
}

/* Input k of case ci, on the CPU, float inputs in dt. */
static amp_tensor *make_input(int ci, int k, amp_dtype dt)
{
    const in_spec *sp = &CASES[ci].in[k];
    int64_t n = numel_of(sp->shape);
    uint64_t seed = 1000003u * (uint64_t)(ci + 1) + 7919u * (uint64_t)(k + 1);
    if (sp->values == V_LABELS) {
        int64_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++)
            v[i] = (int64_t)(sp->lo + unit(&seed) * (sp->hi - sp->lo));
        amp_tensor *t = amp_from_data(sp->shape, AMP_I64, v);
        free(v);
        return t;
    }
    float *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        double u = unit(&seed);
        switch (sp->values) {
        case V_AWAY0: v[i] = (float)((sp->lo + u * (sp->hi - sp->lo)) * (unit(&seed) < 0.5 ? -1 : 1)); break;
        case V_DISTINCT: v[i] = (float)(sp->lo + (sp->hi - sp->lo) * (double)i / (double)n); break;
        default: v[i] = (float)(sp->lo + u * (sp->hi - sp->lo)); break;
        }
    }
    if (sp->values == V_DISTINCT) /* Fisher-Yates: the ramp shuffled */
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(unit(&seed) * (double)(i + 1));
            float t = v[i];
            v[i] = v[j];
            v[j] = t;
        }
    amp_tensor *t = from_floats(sp->shape, sp->values == V_F32 ? AMP_F32 : dt, v);
    free(v);
    return t;
}

/* A copy of t (CPU) in dt when t is a float tensor, else a clone. */
static amp_tensor *recast(const amp_tensor *t, amp_dtype dt)
{
    if (!amp_dtype_is_float(amp_tensor_dtype(t)))
        return amp_clone(t);
    int64_t n = amp_tensor_numel(t);
    float *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    amp_tensor_copy_out(t, v, AMP_F32);
    amp_tensor *r = from_floats(amp_tensor_shape(t), dt, v);
    free(v);
    return r;
}

/* The weights w of sum(out * w): k / 64, exact in every float dtype. */
static amp_tensor *make_weights(const amp_tensor *out, int ci)
{
    int64_t n = amp_tensor_numel(out);
    float *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    uint64_t seed = 77u + (uint64_t)ci;
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((int)(unit(&seed) * 129) - 64) / 64.0f;
    amp_tensor *w = from_floats(amp_tensor_shape(out), amp_tensor_dtype(out), v);
    free(v);
    return w;
}

/* ------------------------------------------------------------ one run */

/* One evaluation: the leaves (owned, on one device) with their
 * gradients, and the result (retained). */
typedef struct {
    amp_tensor *in[MAXIN];
    amp_tensor *out;
    int n;
} run_t;

static void run_free(run_t *r)
{
    amp_tensor_free(r->out);
    for (int i = 0; i < r->n; i++)
        amp_tensor_free(r->in[i]);
    memset(r, 0, sizeof *r);
}

static bool has_grad(const op_case *c, const amp_tensor *t)
{
    return !(c->flags & NO_GRAD) && amp_dtype_is_float(amp_tensor_dtype(t));
}

/* Runs case ci on the leaves r->in (already set), under autocast to at on
 * their device when at is a float dtype: the forward, then (if the case
 * has a gradient) amp_backward of sum(out * w). Returns false with the
 * error kept when the forward failed, and fails the test when the
 * backward did. */
static bool run_case(int ci, run_t *r, amp_dtype at, const char *where)
{
    const op_case *c = &CASES[ci];
    amp_device dev = amp_tensor_device(r->in[0]);
    for (int i = 0; i < r->n; i++)
        if (has_grad(c, r->in[i]))
            amp_tensor_set_requires_grad(r->in[i], true);
    bool ac = at != AMP_DTYPE_COUNT;
    if (ac && amp_autocast_begin(dev, at) != AMP_OK) {
        harness_fail(__FILE__, __LINE__, "%s: autocast_begin: %s", where, amp_last_error());
        return false;
    }
    amp_tensor *out = c->call(r->in, c);
    r->out = out ? amp_tensor_retain(out) : NULL;
    if (out && !(c->flags & NO_GRAD)) {
        amp_tensor *w = make_weights(out, ci);
        amp_tensor *wd = dev == AMP_CPU ? amp_tensor_retain(w) : amp_to_device(w, dev);
        if (amp_backward(amp_sum_all(amp_mul(out, wd))) != AMP_OK)
            harness_fail(__FILE__, __LINE__, "%s: backward failed: %s", where, amp_last_error());
        amp_tensor_free(w);
        amp_tensor_free(wd);
    }
    if (ac)
        amp_autocast_end();
    amp_temps_free();
    return out != NULL;
}

/* Max over elements of |got - ref| / (1 + |ref|) (NaN against NaN, and
 * the same infinities, count as equal); INFINITY with a reason in why on
 * a missing tensor or a shape / dtype mismatch. */
static double max_err(const amp_tensor *ref, const amp_tensor *got, bool same_dtype, char *why, size_t nwhy,
                      int64_t *at)
{
    *at = -1;
    if (!ref || !got) {
        snprintf(why, nwhy, "%s is missing", ref ? "the result" : "the reference");
        return INFINITY;
    }
    char a[96], b[96];
    amp_shape_str(amp_tensor_shape(ref), a, sizeof a);
    amp_shape_str(amp_tensor_shape(got), b, sizeof b);
    if (strcmp(a, b) != 0 || (same_dtype && amp_tensor_dtype(ref) != amp_tensor_dtype(got))) {
        snprintf(why, nwhy, "%s, expected %s", b, a); /* shape_str names the dtype */
        return INFINITY;
    }
    int64_t n = amp_tensor_numel(ref);
    float *r = malloc(sizeof *r * (size_t)(n ? n : 1)), *g = malloc(sizeof *g * (size_t)(n ? n : 1));
    amp_tensor_copy_out(ref, r, AMP_F32);
    amp_tensor_copy_out(got, g, AMP_F32);
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e;
        if (isnan(r[i]) || isnan(g[i]))
            e = isnan(r[i]) && isnan(g[i]) ? 0 : INFINITY;
        else if (isinf(r[i]) || isinf(g[i]))
            e = r[i] == g[i] ? 0 : INFINITY;
        else
            e = fabs((double)g[i] - r[i]) / (1 + fabs((double)r[i]));
        if (e > m || (*at < 0 && e == m && m > 0)) {
            m = e;
            *at = i;
        }
    }
    if (*at >= 0)
        snprintf(why, nwhy, "element %lld is %.9g, reference %.9g", (long long)*at, g[*at], r[*at]);
    else
        snprintf(why, nwhy, "equal");
    free(r);
    free(g);
    return m;
}

/* got against ref: the results and every gradient ref has (in the same
 * dtypes when same_dtype). Fails the test past tol; returns the largest error (INFINITY on a mismatch). */
static double compare(int ci, const run_t *ref, const run_t *got, bool same_dtype, double tol, const char *where)
{
    const op_case *c = &CASES[ci];
    char why[256];
    int64_t at;
    double worst = max_err(ref->out, got->out, same_dtype, why, sizeof why, &at);
    if (!(worst <= tol))
        harness_fail(__FILE__, __LINE__, "%s, forward: max error %.3g > %.3g: %s", where, worst, tol, why);
    for (int i = 0; i < ref->n && !(c->flags & NO_GRAD); i++) {
        if (!has_grad(c, ref->in[i]))
            continue;
        amp_tensor *gr = amp_tensor_grad(ref->in[i]), *gg = amp_tensor_grad(got->in[i]);
        double e = max_err(gr, gg, same_dtype, why, sizeof why, &at);
        if (!(e <= tol))
            harness_fail(__FILE__, __LINE__, "%s, gradient of input %d: max error %.3g > %.3g: %s", where, i, e,
                         tol, why);
        if (!(e <= worst))
            worst = e;
    }
    return worst;
}

/* ------------------------------------------------ finite differences */

static bool quick(void)
{
    const char *q = getenv("AMPC_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

/* sum(w * out) in double; NAN when the forward failed. */
static double weighted(const amp_tensor *out, const float *w)
{
    if (!out)
        return NAN;
    int64_t n = amp_tensor_numel(out);
    float *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    amp_tensor_copy_out(out, v, AMP_F32);
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)w[i] * v[i];
    free(v);
    return s;
}

/* r's gradients (from run_case, CPU, f32) against central differences of
 * sum(w * out) with steps h = 1e-2 * max(1, |x|) and 2h (each divided by
 * the step as f32 rounded it), combined by Richardson. At most 40 elements per input (12 in quick mode), spread
 * over it. Returns the largest |analytic - numeric| / (1 + |numeric|). */
static double fd_check(int ci, run_t *r, const char *where)
{
    const op_case *c = &CASES[ci];
    amp_tensor *wt = make_weights(r->out, ci);
    int64_t m = amp_tensor_numel(r->out);
    float *w = malloc(sizeof *w * (size_t)(m ? m : 1));
    amp_tensor_copy_out(wt, w, AMP_F32);
    amp_tensor_free(wt);
    const int64_t most = quick() ? 12 : 40;
    double worst = 0;
    amp_no_grad_begin();
    for (int i = 0; i < r->n; i++) {
        if (!has_grad(c, r->in[i]))
            continue;
        const amp_tensor *g = amp_tensor_grad(r->in[i]);
        if (!g) {
            harness_fail(__FILE__, __LINE__, "%s: input %d got no gradient", where, i);
            worst = INFINITY;
            continue;
        }
        int64_t n = amp_tensor_numel(r->in[i]);
        float *ga = malloc(sizeof *ga * (size_t)(n ? n : 1));
        amp_tensor_copy_out(g, ga, AMP_F32);
        float *x = amp_tensor_data(r->in[i]);
        int64_t stride = (n + most - 1) / most;
        bool reported = false;
        for (int64_t j = (int64_t)ci % stride; j < n; j += stride) {
            const float x0 = x[j];
            const double h = 1e-2 * fmax(1.0, fabs((double)x0));
            double d[2];
            for (int s = 0; s < 2; s++) { /* steps h and 2h */
                const float xp = (float)(x0 + (s + 1) * h), xm = (float)(x0 - (s + 1) * h);
                x[j] = xp;
                const double fp = weighted(c->call(r->in, c), w);
                x[j] = xm;
                const double fm = weighted(c->call(r->in, c), w);
                x[j] = x0;
                d[s] = (fp - fm) / ((double)xp - (double)xm);
            }
            amp_temps_free();
            const double num = (4 * d[0] - d[1]) / 3; /* Richardson: the h^2 terms cancel */
            double e = fabs(ga[j] - num) / (1 + fabs(num));
            if (!(e <= FD_TOL) && !reported) {
                harness_fail(__FILE__, __LINE__, "%s: d/d input %d [%lld]: analytic %.7g, numeric %.7g", where, i,
                             (long long)j, ga[j], num);
                reported = true;
            }
            if (!(e <= worst))
                worst = e;
        }
        free(ga);
    }
    amp_no_grad_end();
    free(w);
    return worst;
}

/* -------------------------------------------------------- the driver */

/* Whether dev's backend says it runs row for the dtypes of in[0..n). */
static bool supported(amp_device dev, int row, amp_tensor **in, int n)
{
    if (!op_supported(dev, row, NULL))
        return false;
    node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = row;
    nd.n_in = n;
    nd.in = in;
    return op_supported(dev, row, &nd);
}

enum { COL_F32, COL_BF16, COL_F16, COL_AUTOCAST, COL_FD, NCOL };
typedef char cell[16];

static void cell_err(cell s, double e, double tol)
{
    snprintf(s, sizeof(cell), "%s %.0e", e <= tol ? "ok" : "FAIL", e);
}

static int n_devs;
static amp_device devs[AMP_DEVICE_COUNT];

/* Runs case ci on dev with copies of the CPU leaves cpu->in (clones when
 * dev is the CPU), in their dtypes (at = AMP_DTYPE_COUNT) or under
 * autocast to at, and compares it with ref; or, where dev's backend says
 * it does not run the row for those dtypes, checks that the call fails
 * with AMP_ERR_DEVICE. Fills the table cell. */
static void on_device(int ci, amp_device dev, const run_t *cpu, const run_t *ref, amp_dtype at, double tol,
                      bool same_dtype, cell out, const char *where)
{
    const op_case *c = &CASES[ci];
    run_t g = {.n = c->n_in};
    for (int k = 0; k < c->n_in; k++)
        g.in[k] = dev == AMP_CPU ? amp_clone(cpu->in[k]) : amp_to_device(cpu->in[k], dev);
    for (int k = 0; k < c->n_in; k++)
        if (!g.in[k]) {
            harness_fail(__FILE__, __LINE__, "%s: input %d not copied: %s", where, k, amp_last_error());
            snprintf(out, sizeof(cell), "ERR");
            amp_clear_error();
            run_free(&g);
            return;
        }
    int row = row_of(c->op);
    bool sup = supported(dev, row, g.in, g.n);
    if (sup && at != AMP_DTYPE_COUNT) { /* the dtypes the op runs in under autocast */
        run_t low = {.n = c->n_in};
        for (int k = 0; k < c->n_in; k++)
            low.in[k] = recast(cpu->in[k], at);
        sup = supported(dev, row, low.in, low.n);
        run_free(&low);
    }
    bool ran = run_case(ci, &g, at, where);
    if (!sup) {
        if (ran)
            harness_fail(__FILE__, __LINE__, "%s: op_supported says no, but the op ran", where);
        else if (amp_last_status() != AMP_ERR_DEVICE)
            harness_fail(__FILE__, __LINE__, "%s: unsupported, but failed with status %d, not AMP_ERR_DEVICE: %s",
                         where, (int)amp_last_status(), amp_last_error());
        snprintf(out, sizeof(cell), "unsup");
    } else if (!ran) {
        harness_fail(__FILE__, __LINE__, "%s: supported, but the forward failed: %s", where, amp_last_error());
        snprintf(out, sizeof(cell), "ERR");
    } else {
        cell_err(out, compare(ci, ref, &g, same_dtype, tol, where), tol);
    }
    amp_clear_error();
    run_free(&g);
}

static void test_case(int ci)
{
    const op_case *c = &CASES[ci];
    const int row = row_of(c->op);
    const double mul = c->tol_mul > 0 ? c->tol_mul : 1;
    cell cells[AMP_DEVICE_COUNT][NCOL];
    for (int d = 0; d < AMP_DEVICE_COUNT; d++)
        for (int k = 0; k < NCOL; k++)
            snprintf(cells[d][k], sizeof(cell), "-");
    char where[200];

    for (int di = 0; di < 3; di++) {
        const amp_dtype dt = DTYPES[di];
        const double tol = tol_of(dt) * mul;
        run_t cpu = {.n = c->n_in};
        for (int k = 0; k < c->n_in; k++)
            cpu.in[k] = make_input(ci, k, dt);
        snprintf(where, sizeof where, "%s (%s), cpu, %s", c->op, c->what, amp_dtype_name(dt));
        if (!run_case(ci, &cpu, AMP_DTYPE_COUNT, where)) {
            harness_fail(__FILE__, __LINE__, "%s: the reference forward failed: %s", where, amp_last_error());
            snprintf(cells[AMP_CPU][di], sizeof(cell), "ERR");
            amp_clear_error();
            run_free(&cpu);
            continue;
        }
        if (dt == AMP_F32) {
            snprintf(cells[AMP_CPU][di], sizeof(cell), "ref");
            const node *gf = cpu.out->grad_fn;
            if (!(c->flags & NO_GRAD))
                CHECK_MSG(gf && gf->op == row, "%s: the result was made by row %s, not by the case's row", where,
                          gf ? amp_op_name(gf->op) : "(none)");
            if (!(c->flags & (NO_GRAD | NO_FD))) {
                snprintf(where, sizeof where, "%s (%s), cpu, f32, finite differences", c->op, c->what);
                cell_err(cells[AMP_CPU][COL_FD], fd_check(ci, &cpu, where), FD_TOL);
            }
        } else {
            /* The CPU's 16-bit path against its f32 path on the same values. */
            run_t r32 = {.n = c->n_in};
            for (int k = 0; k < c->n_in; k++)
                r32.in[k] = recast(cpu.in[k], AMP_F32);
            snprintf(where, sizeof where, "%s (%s), cpu, %s against f32", c->op, c->what, amp_dtype_name(dt));
            if (run_case(ci, &r32, AMP_DTYPE_COUNT, where))
                cell_err(cells[AMP_CPU][di], compare(ci, &r32, &cpu, false, 2 * tol, where), 2 * tol);
            else
                harness_fail(__FILE__, __LINE__, "%s: the f32 forward failed: %s", where, amp_last_error());
            amp_clear_error();
            run_free(&r32);
        }
        for (int v = 1; v < n_devs; v++) {
            snprintf(where, sizeof where, "%s (%s), %s, %s", c->op, c->what, amp_device_name(devs[v]),
                     amp_dtype_name(dt));
            on_device(ci, devs[v], &cpu, &cpu, AMP_DTYPE_COUNT, tol, true, cells[devs[v]][di], where);
        }
        run_free(&cpu);
    }

    /* Autocast, where the row is LOWER on the device: f32 leaves, the op in
     * the device's autocast dtype. */
    for (int v = 0; v < n_devs; v++) {
        const amp_device dev = devs[v];
        if (amp_autocast_category(c->op, dev) != AMP_CAST_LOWER)
            continue;
        const amp_dtype at = amp_autocast_dtype(dev);
        run_t f32 = {.n = c->n_in}, ref = {.n = c->n_in};
        for (int k = 0; k < c->n_in; k++) {
            f32.in[k] = make_input(ci, k, AMP_F32);
            /* The CPU: the op on inputs rounded to at, which autocast must
             * reproduce; another device: the CPU under autocast to at. */
            ref.in[k] = recast(f32.in[k], dev == AMP_CPU ? at : AMP_F32);
        }
        snprintf(where, sizeof where, "%s (%s), %s, autocast %s", c->op, c->what, amp_device_name(dev),
                 amp_dtype_name(at));
        if (run_case(ci, &ref, dev == AMP_CPU ? AMP_DTYPE_COUNT : at, where)) {
            on_device(ci, dev, &f32, &ref, at, tol_of(at) * mul, dev != AMP_CPU, cells[dev][COL_AUTOCAST], where);
            size_t k = strlen(cells[dev][COL_AUTOCAST]);
            snprintf(cells[dev][COL_AUTOCAST] + k, sizeof(cell) - k, " %s", amp_dtype_name(at));
        } else {
            harness_fail(__FILE__, __LINE__, "%s: the reference failed: %s", where, amp_last_error());
        }
        amp_clear_error();
        run_free(&f32);
        run_free(&ref);
    }

    for (int v = 0; v < n_devs; v++) {
        const amp_device dev = devs[v];
        printf("  %-28s %-16s %-5s", c->op, c->what, amp_device_name(dev));
        for (int k = 0; k < NCOL; k++)
            printf(" %-14s", cells[dev][k]);
        printf("\n");
    }
}

/* Every op_list.h row has a case, every case names a row, and the CPU
 * (everyone's reference) runs every row. */
static void test_every_row_has_a_case(void)
{
    for (int r = 0; r < amp_op_count(); r++) {
        int n = 0;
        for (int ci = 0; ci < N_CASES; ci++)
            n += strcmp(CASES[ci].op, amp_op_name(r)) == 0;
        CHECK_MSG(n > 0, "op row \"%s\" (src/ops/op_list.h) has no case in tests/test_backend_ops.c's CASES",
                  amp_op_name(r));
        CHECK_MSG(op_supported(AMP_CPU, r, NULL), "the cpu backend (the reference) does not support row \"%s\"",
                  amp_op_name(r));
    }
    for (int ci = 0; ci < N_CASES; ci++)
        CHECK_MSG(row_of(CASES[ci].op) >= 0, "case %d names \"%s\", which is no row of op_list.h", ci,
                  CASES[ci].op);
}

/* The first event of kind k named name, over every thread; NULL if none. */
static const prof_event *first_event(prof_kind k, const char *name)
{
    const prof_thread_events *th;
    const int nt = prof_threads(&th);
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++)
            if (th[t].ev[i].kind == k && strcmp(th[t].ev[i].name, name) == 0)
                return &th[t].ev[i];
    return NULL;
}

/* The rows that move data and compute nothing (0 FLOPs, src/ops/cost.c),
 * forward and backward; every other row must count its arithmetic. */
static bool moves_data(const char *row, bool backward)
{
    static const char *const both[] = {"reshape", "permute", "cat", "narrow", "to"};
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++)
        if (!strcmp(row, both[i]))
            return true;
    return !backward && (!strcmp(row, "argmax") || !strcmp(row, "embedding")); /* an index, a gather */
}

/* Every row's cost function counts its op: its first case on the CPU in
 * f32, under the profiler, makes a forward event (and a backward one when
 * the row has a gradient) with the row's cost, bytes > 0 and FLOPs > 0
 * unless the row only moves data, and the row's params. */
static void test_every_row_has_a_cost(void)
{
    for (int r = 0; r < amp_op_count(); r++) {
        const char *name = amp_op_name(r);
        int ci = 0;
        while (ci < N_CASES && strcmp(CASES[ci].op, name) != 0)
            ci++;
        if (ci == N_CASES)
            continue; /* test_every_row_has_a_case fails it */
        const op_case *c = &CASES[ci];
        amp_tensor *in[MAXIN] = {NULL};
        for (int k = 0; k < c->n_in; k++) {
            in[k] = make_input(ci, k, AMP_F32);
            if (has_grad(c, in[k]))
                amp_tensor_set_requires_grad(in[k], true);
        }
        amp_profiler_opts o = amp_profiler_defaults();
        o.memory = false;
        CHECK_OK(amp_profiler_start(&o));
        amp_tensor *out = c->call(in, c);
        CHECK_MSG(out != NULL, "%s (%s): %s", name, c->what, amp_last_error());
        const bool grad = out && !(c->flags & NO_GRAD);
        if (grad)
            CHECK_OK(amp_backward(amp_sum_all(out)));
        CHECK_OK(amp_profiler_stop());
        for (int pass = 0; pass < 1 + grad; pass++) {
            const prof_event *e = first_event(pass ? PROF_OP_BWD : PROF_OP_FWD, name);
            const char *what = pass ? "backward" : "forward";
            CHECK_MSG(e != NULL, "%s (%s): no %s event", name, c->what, what);
            if (!e)
                continue;
            CHECK_MSG(e->bytes > 0, "%s (%s) %s: %.0f bytes", name, c->what, what, e->bytes);
            if (moves_data(name, pass))
                CHECK_MSG(e->flops == 0, "%s (%s) %s: %.0f FLOPs for a row that moves data", name, c->what, what,
                          e->flops);
            else
                CHECK_MSG(e->flops > 0, "%s (%s) %s: no FLOPs: does its cost function count them?", name,
                          c->what, what);
            CHECK_MSG(e->args == op_table[r].args, "%s (%s) %s: the event does not carry the row's params", name,
                      c->what, what);
        }
        amp_profiler_reset();
        amp_temps_free();
        for (int k = 0; k < c->n_in; k++)
            amp_tensor_free(in[k]);
    }
}

/* The table: each case on every backend present. */
static void test_every_op_on_every_backend(void)
{
    n_devs = 0;
    devs[n_devs++] = AMP_CPU;
    amp_tensor *probe = amp_zeros(AMP_SHAPE(1), AMP_F32);
    for (int d = 0; d < AMP_DEVICE_COUNT; d++) {
        if (d == AMP_CPU)
            continue;
        amp_tensor *t = amp_to_device(probe, (amp_device)d);
        if (t)
            devs[n_devs++] = (amp_device)d;
        else
            printf("  %s: not present (%s)\n", amp_device_name((amp_device)d), amp_last_error());
        amp_clear_error();
        amp_tensor_free(t);
    }
    amp_tensor_free(probe);
    printf("  %-28s %-16s %-5s %-14s %-14s %-14s %-14s %-14s\n", "op", "case", "dev", "f32", "bf16", "f16",
           "autocast", "finite diff");
    for (int ci = 0; ci < N_CASES; ci++)
        if (row_of(CASES[ci].op) >= 0)
            test_case(ci);
}

int main(void)
{
    RUN(test_every_row_has_a_case);
    RUN(test_every_row_has_a_cost);
    RUN(test_every_op_on_every_backend);
    return harness_done();
}
