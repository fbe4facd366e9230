/*
 * elementwise.c (CUDA) - the pointwise ops on CUDA tensors: add, sub, mul,
 * div with broadcasting and type promotion, the scalar forms and the
 * activations, forward and backward; and the two helpers every CUDA op
 * file uses, cu_ew (a pointwise formula over broadcast operands) and
 * cu_reduce (sums over a set of dims).
 *
 * As on the CPU (src/ops/broadcast.c), the shape is first simplified the
 * way PyTorch's TensorIterator does (size-1 dims dropped, neighbours every
 * operand walks contiguously merged), so a same-shape op is one flat run
 * on the device. The formulas and what each backward reads (input or saved
 * output) are those of src/ops/elementwise.c.
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"

/* ------------------------------------------------------------- helpers */

/* The output's simplified shape and each operand's strides along it. */
_Static_assert(CUDA_MAX_DIMS == AMP_MAX_DIMS && CUDA_EW_MAX_IN <= EW_MAX_IN, "bcast_plan's array sizes");

static void plan_build(cuda_ew_plan *p, amp_shape out, const cu_arg *in, int nin)
{
    amp_shape shapes[CUDA_EW_MAX_IN];
    for (int k = 0; k < nin; k++)
        shapes[k] = in[k].shape;
    memset(p, 0, sizeof *p);
    p->nd = bcast_plan(out, shapes, nin, p->d, p->st);
}

amp_tensor *cu_ew(cuda_ew_op op, amp_shape shape, amp_dtype dt, const cu_arg *in, int nin, float s0)
{
    amp_tensor *out = cu_new(shape, dt);
    if (!out)
        return NULL;
    cuda_ew_plan p;
    plan_build(&p, shape, in, nin);
    const void *ptr[CUDA_EW_MAX_IN];
    amp_dtype dts[CUDA_EW_MAX_IN];
    for (int k = 0; k < nin; k++) {
        ptr[k] = in[k].data;
        dts[k] = in[k].dt;
    }
    if (cuda_ew(op, tensor_ptr(out), dt, out->numel, nin, ptr, dts, &p, s0) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* Appends a dim to a run list, merging it into the last one when the two
 * are neighbours in memory. */
static void push_dim(int *n, int64_t *d, int64_t *s, int64_t size, int64_t stride)
{
    if (*n > 0 && s[*n - 1] == stride * size) {
        d[*n - 1] *= size;
        s[*n - 1] = stride;
        return;
    }
    d[*n] = size;
    s[*n] = stride;
    (*n)++;
}

amp_tensor *cu_reduce(const cu_arg *x, unsigned mask, double scale, amp_shape out_shape, amp_dtype dt)
{
    amp_tensor *out = cu_new(out_shape, dt);
    if (!out)
        return NULL;
    cuda_reduce_plan p;
    memset(&p, 0, sizeof p);
    int64_t st[AMP_MAX_DIMS], s = 1;
    for (int i = x->shape.ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= x->shape.d[i];
    }
    /* A zero-size reduced dim makes every output a sum of nothing (0, or
     * NaN for a mean, as the CPU's). */
    for (int i = 0; i < x->shape.ndim; i++) {
        if (x->shape.d[i] == 1)
            continue;
        if ((mask >> i) & 1u)
            push_dim(&p.nr, p.rd, p.rs, x->shape.d[i], st[i]);
        else
            push_dim(&p.nk, p.kd, p.ks, x->shape.d[i], st[i]);
    }
    if (cuda_reduce_sum(x->data, x->dt, &p, scale, tensor_ptr(out), dt) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

amp_tensor *cu_sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale)
{
    cu_arg a = cu_arg_of(g);
    if (shape_equal(g->shape, small)) {
        if (scale == 1.0)
            return tensor_convert(g, dt);
        return cu_ew(CEW_MUL_S, small, dt, &a, 1, (float)scale);
    }
    const unsigned mask = sum_to_shape_mask(g->shape, small);
    return cu_reduce(&a, mask, scale, small, dt);
}

/* -------------------------------------------------------------- binary */

static amp_tensor *binary_forward(node *n, cuda_ew_op op)
{
    const amp_tensor *a = n->in[0], *b = n->in[1];
    amp_shape s;
    amp_dtype dt;
    if (!binary_infer(n, &s, &dt))
        return NULL;
    cu_arg args[2] = {cu_arg_of(a), cu_arg_of(b)};
    return cu_ew(op, s, dt, args, 2, 0.0f);
}

/* op(args) over the output's shape, summed back to input i's shape, in
 * input i's dtype. */
static amp_tensor *input_grad(const node *n, int i, const cu_arg *args, int nargs, cuda_ew_op op)
{
    const amp_tensor *x = n->in[i];
    if (shape_equal(x->shape, n->out_shape))
        return cu_ew(op, x->shape, x->dtype, args, nargs, 0.0f);
    amp_tensor *full = cu_ew(op, n->out_shape, AMP_F32, args, nargs, 0.0f);
    if (!full)
        return NULL;
    amp_tensor *g = cu_sum_to_shape(full, x->shape, x->dtype, 1.0);
    amp_tensor_free(full);
    return g;
}

static amp_status additive_backward(node *n, const amp_tensor *gout, amp_tensor **gin, double sign_b)
{
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        gin[i] = cu_sum_to_shape(gout, n->in[i]->shape, n->in[i]->dtype, i ? sign_b : 1.0);
        if (!gin[i])
            return fail_status();
    }
    return AMP_OK;
}

amp_tensor *cu_add_forward(node *n) { return binary_forward(n, CEW_ADD); }
amp_tensor *cu_sub_forward(node *n) { return binary_forward(n, CEW_SUB); }
amp_tensor *cu_mul_forward(node *n) { return binary_forward(n, CEW_MUL); }
amp_tensor *cu_div_forward(node *n) { return binary_forward(n, CEW_DIV); }

amp_status cu_add_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return additive_backward(n, gout, gin, 1.0);
}

amp_status cu_sub_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return additive_backward(n, gout, gin, -1.0);
}

amp_status cu_mul_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        cu_arg args[2] = {cu_arg_of(gout), cu_arg_of(n->in[1 - i])};
        if (!(gin[i] = input_grad(n, i, args, 2, CEW_MUL)))
            return fail_status();
    }
    return AMP_OK;
}

amp_status cu_div_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    cu_arg g = cu_arg_of(gout), a = cu_arg_of(n->in[0]), b = cu_arg_of(n->in[1]);
    if (in_needs_grad(n, 0)) {
        cu_arg args[2] = {g, b};
        if (!(gin[0] = input_grad(n, 0, args, 2, CEW_DIV)))
            return fail_status();
    }
    if (in_needs_grad(n, 1)) {
        cu_arg args[3] = {g, a, b};
        if (!(gin[1] = input_grad(n, 1, args, 3, CEW_DIV_B_GRAD)))
            return fail_status();
    }
    return AMP_OK;
}

/* --------------------------------------------------------------- unary */

static amp_tensor *unary_forward(node *n, cuda_ew_op op, float s, bool save_out)
{
    if (!op_require_float(n, 0))
        return NULL;
    const amp_tensor *x = n->in[0];
    cu_arg a = cu_arg_of(x);
    amp_tensor *out = cu_ew(op, x->shape, x->dtype, &a, 1, s);
    if (out && save_out && n->needs_grad && op_save(n, 0, out) != AMP_OK) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    return out;
}

/* gin[0] = op(gout, other) in the input's dtype (other may be NULL). */
static amp_status unary_backward(node *n, const amp_tensor *gout, amp_tensor **gin, const amp_tensor *other,
                                 cuda_ew_op op, float s)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    const amp_tensor *x = n->in[0];
    cu_arg args[2] = {cu_arg_of(gout), cu_arg_of(other ? other : gout)};
    gin[0] = cu_ew(op, x->shape, x->dtype, args, other ? 2 : 1, s);
    return gin[0] ? AMP_OK : fail_status();
}

static float scalar_of(const node *n) { return (float)n->p.f[0]; }

amp_tensor *cu_add_scalar_forward(node *n) { return unary_forward(n, CEW_ADD_S, scalar_of(n), false); }
amp_tensor *cu_mul_scalar_forward(node *n) { return unary_forward(n, CEW_MUL_S, scalar_of(n), false); }
amp_tensor *cu_div_scalar_forward(node *n) { return unary_forward(n, CEW_DIV_S, scalar_of(n), false); }

amp_status cu_add_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = tensor_convert(gout, n->in[0]->dtype);
    return gin[0] ? AMP_OK : fail_status();
}

amp_status cu_mul_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, NULL, CEW_MUL_S, scalar_of(n));
}

amp_status cu_div_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, NULL, CEW_DIV_S, scalar_of(n));
}

amp_tensor *cu_neg_forward(node *n) { return unary_forward(n, CEW_NEG, 0.0f, false); }
amp_tensor *cu_relu_forward(node *n) { return unary_forward(n, CEW_RELU, 0.0f, true); }
amp_tensor *cu_tanh_forward(node *n) { return unary_forward(n, CEW_TANH, 0.0f, true); }
amp_tensor *cu_sigmoid_forward(node *n) { return unary_forward(n, CEW_SIGMOID, 0.0f, true); }
amp_tensor *cu_exp_forward(node *n) { return unary_forward(n, CEW_EXP, 0.0f, true); }
amp_tensor *cu_log_forward(node *n) { return unary_forward(n, CEW_LOG, 0.0f, false); }
amp_tensor *cu_pow_scalar_forward(node *n) { return unary_forward(n, CEW_POW_S, scalar_of(n), false); }

amp_tensor *cu_gelu_forward(node *n)
{
    return unary_forward(n, n->p.i[0] == AMP_GELU_TANH ? CEW_GELU_TANH : CEW_GELU_EXACT, 0.0f, false);
}

amp_status cu_neg_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, NULL, CEW_NEG, 0.0f);
}

amp_status cu_relu_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->saved[0], CEW_RELU_GRAD, 0.0f);
}

amp_status cu_gelu_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->in[0],
                          n->p.i[0] == AMP_GELU_TANH ? CEW_GELU_TANH_GRAD : CEW_GELU_EXACT_GRAD, 0.0f);
}

amp_status cu_tanh_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->saved[0], CEW_TANH_GRAD, 0.0f);
}

amp_status cu_sigmoid_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->saved[0], CEW_SIGMOID_GRAD, 0.0f);
}

amp_status cu_exp_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->saved[0], CEW_MUL, 0.0f);
}

amp_status cu_log_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->in[0], CEW_DIV, 0.0f);
}

amp_status cu_pow_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return unary_backward(n, gout, gin, n->in[0], CEW_POW_GRAD, scalar_of(n));
}

#else
typedef int ampc_ops_cuda_elementwise_unused; /* ISO C wants a declaration in every file */
#endif
