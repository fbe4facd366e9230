/*
 * elementwise.c - the pointwise ops: add, sub, mul, div with broadcasting
 * and type promotion, the scalar forms, and the activations (relu, gelu,
 * tanh, sigmoid, silu, exp, log, pow), forward and backward, on any device.
 *
 * Each op names a formula of backend/pointwise.h and hands it to the
 * backend through op_pointwise (broadcast.h), which plans the
 * broadcasting; the backend computes in f32 and rounds once into the
 * result's dtype, as PyTorch's kernels do. What each backward reads
 * (input or saved output) follows PyTorch's derivatives.yaml.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

/* ------------------------------------------------------- the public ops */

static amp_tensor *unary(int op, amp_tensor *a) { return op_apply(op, &a, 1, NULL); }

static amp_tensor *binary(int op, amp_tensor *a, amp_tensor *b)
{
    amp_tensor *in[2] = {a, b};
    return op_apply(op, in, 2, NULL);
}

/* add_scalar, mul_scalar, div_scalar: scalar_params. */
static amp_tensor *with_scalar(int op, amp_tensor *a, double s)
{
    const op_params p = {.scalar = {.scalar = s}};
    return op_apply(op, &a, 1, &p);
}

amp_tensor *amp_add(amp_tensor *a, amp_tensor *b) { return binary(OP_ADD, a, b); }
amp_tensor *amp_sub(amp_tensor *a, amp_tensor *b) { return binary(OP_SUB, a, b); }
amp_tensor *amp_mul(amp_tensor *a, amp_tensor *b) { return binary(OP_MUL, a, b); }
amp_tensor *amp_div(amp_tensor *a, amp_tensor *b) { return binary(OP_DIV, a, b); }
amp_tensor *amp_add_scalar(amp_tensor *a, double s) { return with_scalar(OP_ADD_SCALAR, a, s); }
/* a - s and a + (-s) are the same IEEE operation. */
amp_tensor *amp_sub_scalar(amp_tensor *a, double s) { return with_scalar(OP_ADD_SCALAR, a, -s); }
amp_tensor *amp_mul_scalar(amp_tensor *a, double s) { return with_scalar(OP_MUL_SCALAR, a, s); }
amp_tensor *amp_div_scalar(amp_tensor *a, double s) { return with_scalar(OP_DIV_SCALAR, a, s); }
amp_tensor *amp_neg(amp_tensor *a) { return unary(OP_NEG, a); }
amp_tensor *amp_relu(amp_tensor *a) { return unary(OP_RELU, a); }
amp_tensor *amp_tanh(amp_tensor *a) { return unary(OP_TANH, a); }
amp_tensor *amp_sigmoid(amp_tensor *a) { return unary(OP_SIGMOID, a); }
amp_tensor *amp_silu(amp_tensor *a) { return unary(OP_SILU, a); }
amp_tensor *amp_exp(amp_tensor *a) { return unary(OP_EXP, a); }
amp_tensor *amp_log(amp_tensor *a) { return unary(OP_LOG, a); }
amp_tensor *amp_pow_scalar(amp_tensor *a, double exponent)
{
    const op_params p = {.pow_scalar = {.exponent = exponent}};
    return op_apply(OP_POW_SCALAR, &a, 1, &p);
}

amp_tensor *amp_gelu(amp_tensor *a, amp_gelu_approx approx)
{
    if (approx != AMP_GELU_EXACT && approx != AMP_GELU_TANH)
        return amp_fail_null(AMP_ERR_ARG, "gelu: unknown approximation %d", (int)approx);
    const op_params p = {.gelu = {.approximate = approx}};
    return op_apply(OP_GELU, &a, 1, &p);
}

/* ------------------------------------------------------------- binary */

static amp_device dev_of(const node *n) { return tensor_device(n->in[0]); }

static amp_tensor *binary_forward(node *n, amp_pw_op op)
{
    const amp_tensor *a = n->in[0], *b = n->in[1];
    amp_shape s;
    amp_dtype dt;
    if (!binary_infer(n, &s, &dt))
        return NULL;
    ew_arg args[2] = {ew_arg_of(a), ew_arg_of(b)};
    return op_pointwise(op, s, dt, dev_of(n), args, 2, 0.0f);
}

/* The gradient of input i: op(args) over the output's shape, summed back
 * to input i's shape, in input i's dtype. */
static amp_tensor *input_grad(const node *n, int i, const ew_arg *args, int nargs, amp_pw_op op)
{
    const amp_tensor *x = n->in[i];
    if (shape_equal(x->shape, n->out_shape))
        return op_pointwise(op, x->shape, x->dtype, dev_of(n), args, nargs, 0.0f);
    amp_tensor *full = op_pointwise(op, n->out_shape, AMP_F32, dev_of(n), args, nargs, 0.0f);
    if (!full)
        return NULL;
    amp_tensor *g = sum_to_shape(full, x->shape, x->dtype, 1.0);
    amp_tensor_free(full);
    return g;
}

/* add and sub: each gradient is +-gout summed to the input's shape. Where
 * that is gout itself (the input's shape and dtype, +), a view of it: the
 * engine frees gout before adding the gradients in, so the view becomes
 * the input's gradient without a copy (the residual stream's adds). */
static amp_status additive_backward(node *n, const amp_tensor *gout, amp_tensor **gin, double sign_b)
{
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        const amp_tensor *x = n->in[i];
        if ((i == 0 || sign_b == 1.0) && x->dtype == gout->dtype && shape_equal(x->shape, gout->shape))
            gin[i] = tensor_view(gout, x->shape);
        else
            gin[i] = sum_to_shape(gout, x->shape, x->dtype, i ? sign_b : 1.0);
        if (!gin[i])
            return fail_status();
    }
    return AMP_OK;
}

amp_tensor *add_forward(node *n, const add_params *p)
{
    amp_tensor *out;
    if (p->fused_layer_norm && add_layer_norm_try(n, &out)) /* op_add_layer_norm's fused pass */
        return out;
    return binary_forward(n, AMP_PW_ADD);
}

amp_tensor *sub_forward(node *n, const none_params *p)
{
    (void)p;
    return binary_forward(n, AMP_PW_SUB);
}

amp_tensor *mul_forward(node *n, const none_params *p)
{
    (void)p;
    return binary_forward(n, AMP_PW_MUL);
}

amp_tensor *div_forward(node *n, const none_params *p)
{
    (void)p;
    return binary_forward(n, AMP_PW_DIV);
}

amp_status add_backward(node *n, const add_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    return additive_backward(n, gout, gin, 1.0);
}

amp_status sub_backward(node *n, const none_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    return additive_backward(n, gout, gin, -1.0);
}

/* d(a*b)/da = g * b, d(a*b)/db = g * a. */
amp_status mul_backward(node *n, const none_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        ew_arg args[2] = {ew_arg_of(gout), ew_arg_of(n->in[1 - i])};
        if (!(gin[i] = input_grad(n, i, args, 2, AMP_PW_MUL)))
            return fail_status();
    }
    return AMP_OK;
}

/* d(a/b)/da = g / b, d(a/b)/db = -g * ((a / b) / b), as PyTorch writes it. */
amp_status div_backward(node *n, const none_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    ew_arg g = ew_arg_of(gout), a = ew_arg_of(n->in[0]), b = ew_arg_of(n->in[1]);
    if (in_needs_grad(n, 0)) {
        ew_arg args[2] = {g, b};
        if (!(gin[0] = input_grad(n, 0, args, 2, AMP_PW_DIV)))
            return fail_status();
    }
    if (in_needs_grad(n, 1)) {
        ew_arg args[3] = {g, a, b};
        if (!(gin[1] = input_grad(n, 1, args, 3, AMP_PW_DIV_B_GRAD)))
            return fail_status();
    }
    return AMP_OK;
}

/* -------------------------------------------------------------- unary */

/* op(x) in x's dtype; saves an alias of the result when backward reads it. */
static amp_tensor *unary_forward(node *n, amp_pw_op op, float s, bool save_out)
{
    if (!op_require_float(n, 0))
        return NULL;
    const amp_tensor *x = n->in[0];
    ew_arg a = ew_arg_of(x);
    amp_tensor *out = op_pointwise(op, x->shape, x->dtype, dev_of(n), &a, 1, s);
    if (out && save_out && n->needs_grad && op_save(n, 0, out) != AMP_OK) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    return out;
}

/* gin[0] = op(gout, other) in the input's dtype (other may be NULL). */
static amp_status unary_backward(node *n, const amp_tensor *gout, amp_tensor **gin, const amp_tensor *other,
                                 amp_pw_op op, float s)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    const amp_tensor *x = n->in[0];
    ew_arg args[2] = {ew_arg_of(gout), ew_arg_of(other ? other : gout)};
    gin[0] = op_pointwise(op, x->shape, x->dtype, dev_of(n), args, other ? 2 : 1, s);
    return gin[0] ? AMP_OK : fail_status();
}

/* A Python number as PyTorch converts it for a float tensor's kernel. */
static float scalar_of(double s) { return (float)s; }

amp_tensor *add_scalar_forward(node *n, const scalar_params *p)
{
    return unary_forward(n, AMP_PW_ADD_S, scalar_of(p->scalar), false);
}

amp_status add_scalar_backward(node *n, const scalar_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    (void)p;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = tensor_convert(gout, n->in[0]->dtype);
    return gin[0] ? AMP_OK : fail_status();
}

/* x * s, x / s (true division, as PyTorch's div_true_kernel, not
 * x * (1/s)) and -x are linear: the gradient is the same map of g. */
#define LINEAR_MAP(name, family, formula, scalar)                                                    \
    amp_tensor *name##_forward(node *n, const family##_params *p)                                    \
    {                                                                                                \
        (void)p;                                                                                     \
        return unary_forward(n, formula, scalar, false);                                             \
    }                                                                                                \
    amp_status name##_backward(node *n, const family##_params *p, const amp_tensor *gout,             \
                               amp_tensor **gin)                                                     \
    {                                                                                                \
        (void)p;                                                                                     \
        return unary_backward(n, gout, gin, NULL, formula, scalar);                                  \
    }
LINEAR_MAP(mul_scalar, scalar, AMP_PW_MUL_S, scalar_of(p->scalar))
LINEAR_MAP(div_scalar, scalar, AMP_PW_DIV_S, scalar_of(p->scalar))
LINEAR_MAP(neg, none, AMP_PW_NEG, 0.0f)
#undef LINEAR_MAP

/* An activation: its formula, whether backward reads the saved output
 * (else the input), and the gradient formula g * f'(that). relu keeps
 * NaN; its gradient is threshold_backward(g, y, 0) on the output, so 0 at
 * x = 0. exp's gradient is g * exp(x) = g * y; log's g / x. */
#define ACTIVATION(name, formula, reads_out, grad)                                                   \
    amp_tensor *name##_forward(node *n, const none_params *p)                                        \
    {                                                                                                \
        (void)p;                                                                                     \
        return unary_forward(n, formula, 0.0f, reads_out);                                           \
    }                                                                                                \
    amp_status name##_backward(node *n, const none_params *p, const amp_tensor *gout, amp_tensor **gin) \
    {                                                                                                \
        (void)p;                                                                                     \
        return unary_backward(n, gout, gin, (reads_out) ? n->saved[0] : n->in[0], grad, 0.0f);       \
    }
ACTIVATION(relu, AMP_PW_RELU, true, AMP_PW_RELU_GRAD)
ACTIVATION(tanh, AMP_PW_TANH, true, AMP_PW_TANH_GRAD)
ACTIVATION(sigmoid, AMP_PW_SIGMOID, true, AMP_PW_SIGMOID_GRAD)
ACTIVATION(silu, AMP_PW_SILU, false, AMP_PW_SILU_GRAD)
ACTIVATION(exp, AMP_PW_EXP, true, AMP_PW_MUL)
ACTIVATION(log, AMP_PW_LOG, false, AMP_PW_DIV)
#undef ACTIVATION

amp_tensor *relu_grad_from_output(const amp_tensor *gout, const amp_tensor *y)
{
    if (gout->dtype != y->dtype || gout->numel != y->numel || !amp_dtype_is_float(y->dtype))
        return amp_fail_null(AMP_ERR_STATE, "relu gradient: gradient %s [%lld] does not match the output %s [%lld]",
                             amp_dtype_name(gout->dtype), (long long)gout->numel, amp_dtype_name(y->dtype),
                             (long long)y->numel);
    ew_arg args[2] = {{tensor_ptr(gout), gout->dtype, y->shape}, ew_arg_of(y)};
    return op_pointwise(AMP_PW_RELU_GRAD, y->shape, y->dtype, tensor_device(y), args, 2, 0.0f);
}

amp_tensor *gelu_forward(node *n, const gelu_params *p)
{
    return unary_forward(n, p->approximate == AMP_GELU_TANH ? AMP_PW_GELU_TANH : AMP_PW_GELU_EXACT, 0.0f, false);
}

amp_status gelu_backward(node *n, const gelu_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->in[0],
                          p->approximate == AMP_GELU_TANH ? AMP_PW_GELU_TANH_GRAD : AMP_PW_GELU_EXACT_GRAD, 0.0f);
}

amp_tensor *pow_scalar_forward(node *n, const pow_scalar_params *p)
{
    return unary_forward(n, AMP_PW_POW_S, scalar_of(p->exponent), false);
}

/* g * p * x^(p-1); 0 when p == 0 (PyTorch's pow_backward), even at x = 0. */
amp_status pow_scalar_backward(node *n, const pow_scalar_params *p, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->in[0], AMP_PW_POW_GRAD, scalar_of(p->exponent));
}

/* ----------------------------------------------------------------- cost */

/* Every op here is pointwise (cost.c): 1 FLOP per element of the result,
 * backward 1 per element of each gradient made, whatever the params. */
OP_COST_IS(pointwise_cost, none, cost_pointwise)
OP_COST_IS(add_cost, add, cost_pointwise)
OP_COST_IS(scalar_cost, scalar, cost_pointwise)
OP_COST_IS(gelu_cost, gelu, cost_pointwise)
OP_COST_IS(pow_scalar_cost, pow_scalar, cost_pointwise)
