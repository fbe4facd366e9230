/*
 * layers.c - the leaf modules: their constructors (argument checks and
 * PyTorch's default initialisation) and their forwards (one public op
 * each).
 *
 * Initialisation draws from the global generator (amp_rand / amp_randn),
 * so amp_manual_seed makes a model reproducible; the numbers differ from
 * PyTorch's (another generator) but the distributions are the same:
 *   - Linear, Conv2d (torch/nn/modules/linear.py, conv.py reset_parameters):
 *     weight kaiming_uniform_(a=sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
 *     With a = sqrt(5), torch/nn/init.py gives gain = sqrt(2 / (1 + a^2))
 *     = sqrt(1/3) and bound = sqrt(3) * gain / sqrt(fan_in) = 1/sqrt(fan_in).
 *   - Embedding (sparse.py reset_parameters): weight N(0, 1).
 *   - LayerNorm (normalization.py reset_parameters): weight 1, bias 0.
 * The weight is drawn before the bias, as in PyTorch.
 *
 * Config slots (cfg_i / cfg_f) per kind are listed at each constructor.
 */
#include "nn/nn.h"

#include "base/base.h"
#include "ops/fused.h"
#include "tensor/tensor.h"

#include <math.h>

/* Frees a half-built module and returns NULL, keeping the error. */
static amp_module *fail(amp_module *m)
{
    amp_module_free(m);
    return NULL;
}

/* torch.nn.init.kaiming_uniform_(w, a): the bound for leaky_relu's gain. */
static double kaiming_uniform_bound(double a, int64_t fan_in)
{
    double gain = sqrt(2.0 / (1.0 + a * a));
    return sqrt(3.0) * gain / sqrt((double)fan_in);
}

/* Adds a "weight" of shape ws ([out, ...]) with PyTorch's Linear / Conv
 * initialisation and, when bias, a "bias" [out]. */
static amp_module *init_kaiming(amp_module *m, amp_shape ws, bool bias)
{
    int64_t out = ws.d[0], fan_in = shape_numel(ws) / out;
    double wb = kaiming_uniform_bound(sqrt(5.0), fan_in);
    if (module_add_param(m, amp_rand(ws, AMP_F32, -wb, wb), "weight") != AMP_OK)
        return fail(m);
    if (bias) {
        double bb = 1.0 / sqrt((double)fan_in);
        if (module_add_param(m, amp_rand(AMP_SHAPE(out), AMP_F32, -bb, bb), "bias") != AMP_OK)
            return fail(m);
    }
    return m;
}

/* The bias when the module has one (it is always the second parameter). */
static amp_tensor *bias_of(const amp_module *m) { return m->n_own > 1 ? m->own[1] : NULL; }

/* A layer with a Kaiming-initialised weight of shape ws (and bias) whose
 * forward can take a following ReLU (forward_relu: the sequential fuses
 * it); cfg_i[0..1] its input and output widths. */
static amp_module *weight_layer(const char *kind, module_forward_fn forward, module_forward_fn forward_relu,
                                int64_t in, int64_t out, amp_shape ws, bool bias)
{
    amp_module *m = module_new(kind, forward);
    if (!m)
        return NULL;
    m->forward_relu = forward_relu;
    m->cfg_i[0] = in;
    m->cfg_i[1] = out;
    return init_kaiming(m, ws, bias);
}

/* ---------------------------------------------------------------- linear */

/* cfg_i: in_features, out_features */
static amp_tensor *linear_forward(amp_module *m, amp_tensor *x) { return amp_linear(x, m->own[0], bias_of(m)); }
static amp_tensor *linear_relu_forward(amp_module *m, amp_tensor *x)
{
    return op_linear_relu(x, m->own[0], bias_of(m));
}

amp_module *amp_nn_linear(int64_t in_features, int64_t out_features, bool bias)
{
    if (in_features < 1 || out_features < 1)
        return amp_fail_null(AMP_ERR_ARG, "nn_linear: in_features %lld and out_features %lld must be >= 1",
                             (long long)in_features, (long long)out_features);
    return weight_layer("linear", linear_forward, linear_relu_forward, in_features, out_features,
                        AMP_SHAPE(out_features, in_features), bias);
}

/* ---------------------------------------------------------------- conv2d */

/* cfg_i: in_ch, out_ch, kernel, stride, padding */
static amp_tensor *conv2d_forward(amp_module *m, amp_tensor *x)
{
    return amp_conv2d(x, m->own[0], bias_of(m), (int)m->cfg_i[3], (int)m->cfg_i[4]);
}

static amp_tensor *conv2d_relu_forward(amp_module *m, amp_tensor *x)
{
    return op_conv2d_relu(x, m->own[0], bias_of(m), (int)m->cfg_i[3], (int)m->cfg_i[4]);
}

amp_module *amp_nn_conv2d(int64_t in_ch, int64_t out_ch, int kernel, int stride, int padding, bool bias)
{
    if (in_ch < 1 || out_ch < 1)
        return amp_fail_null(AMP_ERR_ARG, "nn_conv2d: in_ch %lld and out_ch %lld must be >= 1",
                             (long long)in_ch, (long long)out_ch);
    if (kernel < 1 || stride < 1 || padding < 0)
        return amp_fail_null(AMP_ERR_ARG,
                             "nn_conv2d: kernel %d and stride %d must be >= 1, padding %d >= 0", kernel,
                             stride, padding);
    amp_module *m = weight_layer("conv2d", conv2d_forward, conv2d_relu_forward, in_ch, out_ch,
                                 AMP_SHAPE(out_ch, in_ch, kernel, kernel), bias);
    if (m) {
        m->cfg_i[2] = kernel;
        m->cfg_i[3] = stride;
        m->cfg_i[4] = padding;
    }
    return m;
}

/* ------------------------------------------------------------ layer_norm */

/* cfg_i: dim; cfg_f: eps */
static amp_tensor *layer_norm_forward(amp_module *m, amp_tensor *x)
{
    return amp_layer_norm(x, 1, m->own[0], m->own[1], m->cfg_f[0]);
}

amp_module *amp_nn_layer_norm(int64_t dim, double eps)
{
    if (dim < 1)
        return amp_fail_null(AMP_ERR_ARG, "nn_layer_norm: dim %lld must be >= 1", (long long)dim);
    if (!(eps >= 0) || isinf(eps))
        return amp_fail_null(AMP_ERR_ARG, "nn_layer_norm: eps %g must be finite and >= 0", eps);
    amp_module *m = module_new("layer_norm", layer_norm_forward);
    if (!m)
        return NULL;
    m->cfg_i[0] = dim;
    m->cfg_f[0] = eps;
    if (module_add_param(m, amp_ones(AMP_SHAPE(dim), AMP_F32), "weight") != AMP_OK ||
        module_add_param(m, amp_zeros(AMP_SHAPE(dim), AMP_F32), "bias") != AMP_OK)
        return fail(m);
    return m;
}

/* ------------------------------------------------------------- embedding */

/* cfg_i: num, dim */
static amp_tensor *embedding_forward(amp_module *m, amp_tensor *x) { return amp_embedding(m->own[0], x); }

amp_module *amp_nn_embedding(int64_t num, int64_t dim)
{
    if (num < 1 || dim < 1)
        return amp_fail_null(AMP_ERR_ARG, "nn_embedding: num %lld and dim %lld must be >= 1", (long long)num,
                             (long long)dim);
    amp_module *m = module_new("embedding", embedding_forward);
    if (!m)
        return NULL;
    m->cfg_i[0] = num;
    m->cfg_i[1] = dim;
    if (module_add_param(m, amp_randn(AMP_SHAPE(num, dim), AMP_F32, 0.0, 1.0), "weight") != AMP_OK)
        return fail(m);
    return m;
}

/* --------------------------------------------------------------- dropout */

/* cfg_f: p */
static amp_tensor *dropout_forward(amp_module *m, amp_tensor *x) { return amp_dropout(x, m->cfg_f[0], m->training); }

amp_module *amp_nn_dropout(double p)
{
    if (!(p >= 0 && p <= 1))
        return amp_fail_null(AMP_ERR_ARG, "nn_dropout: probability p %g is not in [0, 1]", p);
    amp_module *m = module_new("dropout", dropout_forward);
    if (m)
        m->cfg_f[0] = p;
    return m;
}

/* ----------------------------------------------------------- activations */

static amp_tensor *relu_forward(amp_module *m, amp_tensor *x)
{
    (void)m;
    return amp_relu(x);
}

static amp_tensor *tanh_forward(amp_module *m, amp_tensor *x)
{
    (void)m;
    return amp_tanh(x);
}

/* cfg_i: approximation */
static amp_tensor *gelu_forward(amp_module *m, amp_tensor *x) { return amp_gelu(x, (amp_gelu_approx)m->cfg_i[0]); }

amp_module *amp_nn_relu(void) { return module_new("relu", relu_forward); }
bool module_is_relu(const amp_module *m) { return m && m->forward == relu_forward; }
amp_module *amp_nn_tanh(void) { return module_new("tanh", tanh_forward); }

amp_module *amp_nn_gelu(amp_gelu_approx approx)
{
    if (approx != AMP_GELU_EXACT && approx != AMP_GELU_TANH)
        return amp_fail_null(AMP_ERR_ARG, "nn_gelu: unknown approximation %d", (int)approx);
    amp_module *m = module_new("gelu", gelu_forward);
    if (m)
        m->cfg_i[0] = approx;
    return m;
}

/* ----------------------------------------------------------------- pools */

/* cfg_i: kernel, stride (0 = kernel) */
static amp_tensor *max_pool_forward(amp_module *m, amp_tensor *x)
{
    return amp_max_pool2d(x, (int)m->cfg_i[0], (int)m->cfg_i[1], 0);
}

static amp_tensor *avg_pool_forward(amp_module *m, amp_tensor *x)
{
    return amp_avg_pool2d(x, (int)m->cfg_i[0], (int)m->cfg_i[1], 0);
}

static amp_module *pool_new(const char *kind, module_forward_fn fwd, int kernel, int stride)
{
    if (kernel < 1 || stride < 0)
        return amp_fail_null(AMP_ERR_ARG, "nn_%s: kernel %d must be >= 1 and stride %d >= 0 (0 = kernel)",
                             kind, kernel, stride);
    amp_module *m = module_new(kind, fwd);
    if (m) {
        m->cfg_i[0] = kernel;
        m->cfg_i[1] = stride;
    }
    return m;
}

amp_module *amp_nn_max_pool2d(int kernel, int stride)
{
    return pool_new("max_pool2d", max_pool_forward, kernel, stride);
}

amp_module *amp_nn_avg_pool2d(int kernel, int stride)
{
    return pool_new("avg_pool2d", avg_pool_forward, kernel, stride);
}

/* --------------------------------------------------------------- flatten */

/* torch.nn.Flatten(start_dim=1): [N, d1, d2, ...] -> [N, d1*d2*...]. */
static amp_tensor *flatten_forward(amp_module *m, amp_tensor *x)
{
    (void)m;
    int nd = amp_tensor_ndim(x);
    if (nd < 2) {
        char b[96];
        return amp_fail_null(AMP_ERR_SHAPE, "flatten: input %s %s needs at least 2 dims",
                             amp_shape_str(amp_tensor_shape(x), b, sizeof b),
                             amp_dtype_name(amp_tensor_dtype(x)));
    }
    amp_shape s = amp_tensor_shape(x);
    int64_t rest = 1;
    for (int k = 1; k < nd; k++)
        rest *= s.d[k];
    return amp_reshape(x, AMP_SHAPE(s.d[0], rest));
}

amp_module *amp_nn_flatten(void) { return module_new("flatten", flatten_forward); }
