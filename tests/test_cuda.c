/*
 * test_cuda.c - the CUDA backend against the CPU: every op with a CUDA
 * kernel (conv2d and the pools included), forward and backward, in f32 /
 * f16 / bf16 with per-dtype tolerances (the CPU result is the reference);
 * tensors on the device; the caching allocator's steady state; the grad scaler's conformance cases 3,
 * 5, 8 and 11 with the scaler and optimizer on the device; autocast on
 * CUDA; a short MLP training run that must follow the CPU's; a tiny GPT
 * (forward and backward, with dropout, under autocast) against the CPU;
 * clip_grad_norm on the device (non-finite cases included); training
 * steps that never wait for the GPU (amp_cuda_get_sync_stats);
 * checkpoints of a CUDA model (loaded on the CPU and on CUDA); and `ampc
 * train / eval --device cuda` on tiny images (against the CPU, resumed bit
 * for bit, the default fp16 with the scaler) and the GPT with --clip on
 * tiny text (against the CPU).
 *
 * Without a GPU every test is reported as skipped (never as passed) and
 * the program exits 77, which CTest shows as "Skipped".
 */
#include "test_cli_util.h"

#include <stdlib.h>

static bool gpu(void)
{
    if (amp_cuda_available())
        return true;
    harness_skip("no CUDA device");
    return false;
}

/* ------------------------------------------------------------ compare */

#define MAXIN 4

typedef amp_tensor *(*op_fn)(amp_tensor **in, const void *ctx);

/* Tolerances: 16-bit results may differ by a unit in the last place where
 * the f32 values before rounding differ in the last bits. */
static double tol_of(amp_dtype dt) { return dt == AMP_BF16 ? 1.6e-2 : dt == AMP_F16 ? 2e-3 : 2e-5; }

static bool close_to(double ref, double got, double tol)
{
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got))
        return ref == got;
    return fabs(ref - got) <= tol * (1.0 + fabs(ref));
}

static void check_same(const char *what, const char *part, const amp_tensor *ref, const amp_tensor *got, double tol)
{
    CHECK_MSG(ref && got, "%s, %s: a tensor is missing (%s)", what, part, amp_last_error());
    if (!ref || !got)
        return;
    CHECK_MSG(amp_tensor_device(got) == AMP_CUDA, "%s, %s: not on cuda", what, part);
    CHECK_MSG(amp_tensor_dtype(ref) == amp_tensor_dtype(got), "%s, %s: dtype %s, expected %s", what, part,
              amp_dtype_name(amp_tensor_dtype(got)), amp_dtype_name(amp_tensor_dtype(ref)));
    char a[96], b[96];
    amp_shape_str(amp_tensor_shape(ref), a, sizeof a);
    amp_shape_str(amp_tensor_shape(got), b, sizeof b);
    CHECK_MSG(strcmp(a, b) == 0, "%s, %s: shape %s, expected %s", what, part, b, a);
    int64_t n = amp_tensor_numel(ref);
    if (strcmp(a, b) != 0 || n == 0)
        return;
    float *r = malloc((size_t)n * sizeof *r), *g = malloc((size_t)n * sizeof *g);
    CHECK_OK(amp_tensor_copy_out(ref, r, AMP_F32));
    CHECK_OK(amp_tensor_copy_out(got, g, AMP_F32));
    for (int64_t i = 0; i < n; i++)
        if (!close_to(r[i], g[i], tol)) {
            harness_fail(__FILE__, __LINE__, "%s, %s: element %lld is %.9g on cuda, %.9g on the cpu (tol %.2g)", what,
                         part, (long long)i, g[i], r[i], tol);
            break;
        }
    free(r);
    free(g);
}

/* fn on the CPU inputs and on CUDA copies of them: the results, and the
 * gradients of sum(out * w) (w fixed random weights) with respect to every
 * float input, must agree. The RNG state is replayed so dropout draws the
 * same mask on both. */
static void compare(const char *what, op_fn fn, amp_tensor **in, int n, const void *ctx, double tol)
{
    amp_tensor *dev[MAXIN] = {0};
    for (int i = 0; i < n; i++) {
        dev[i] = amp_to_device(in[i], AMP_CUDA);
        CHECK(dev[i] != NULL);
        if (amp_dtype_is_float(amp_tensor_dtype(in[i]))) {
            amp_tensor_set_requires_grad(in[i], true);
            amp_tensor_set_requires_grad(dev[i], true);
        }
    }
    amp_rng_state rng = amp_rng_get_state();
    amp_tensor *ref = fn(in, ctx);
    amp_rng_set_state(rng);
    amp_tensor *got = fn(dev, ctx);
    CHECK_MSG(ref && got, "%s: %s", what, amp_last_error());
    check_same(what, "forward", ref, got, tol);
    if (ref && got && amp_tensor_requires_grad(ref)) {
        amp_tensor *w = test_uniform(amp_tensor_shape(ref), amp_tensor_dtype(ref), -1, 1, 7);
        amp_tensor *wd = amp_to_device(w, AMP_CUDA);
        CHECK_OK(amp_backward(amp_sum_all(amp_mul(ref, w))));
        CHECK_OK(amp_backward(amp_sum_all(amp_mul(got, wd))));
        for (int i = 0; i < n; i++) {
            if (!amp_dtype_is_float(amp_tensor_dtype(in[i])))
                continue;
            char part[32];
            snprintf(part, sizeof part, "gradient %d", i);
            check_same(what, part, amp_tensor_grad(in[i]), amp_tensor_grad(dev[i]), tol);
        }
        amp_tensor_free(w);
        amp_tensor_free(wd);
    }
    for (int i = 0; i < n; i++) {
        amp_tensor_clear_grad(in[i]);
        amp_tensor_set_requires_grad(in[i], false);
        amp_tensor_free(dev[i]);
    }
    amp_temps_free();
}

static const amp_dtype FLOATS[3] = {AMP_F32, AMP_F16, AMP_BF16};

/* ---------------------------------------------------------- the ops */

typedef struct {
    int kind;
    double s;
} ew_ctx;

static amp_tensor *f_binary(amp_tensor **in, const void *c)
{
    switch (((const ew_ctx *)c)->kind) {
    case 0: return amp_add(in[0], in[1]);
    case 1: return amp_sub(in[0], in[1]);
    case 2: return amp_mul(in[0], in[1]);
    default: return amp_div(in[0], in[1]);
    }
}

static amp_tensor *f_unary(amp_tensor **in, const void *c)
{
    const ew_ctx *e = c;
    switch (e->kind) {
    case 0: return amp_add_scalar(in[0], e->s);
    case 1: return amp_mul_scalar(in[0], e->s);
    case 2: return amp_div_scalar(in[0], e->s);
    case 3: return amp_neg(in[0]);
    case 4: return amp_relu(in[0]);
    case 5: return amp_gelu(in[0], AMP_GELU_EXACT);
    case 6: return amp_gelu(in[0], AMP_GELU_TANH);
    case 7: return amp_tanh(in[0]);
    case 8: return amp_sigmoid(in[0]);
    case 9: return amp_exp(in[0]);
    case 10: return amp_log(in[0]);
    case 11: return amp_pow_scalar(in[0], e->s);
    case 12: return amp_dropout(in[0], 0.3, true);
    default: return amp_to(in[0], AMP_F32);
    }
}

static void test_elementwise(void)
{
    if (!gpu())
        return;
    const amp_shape sa[3] = {AMP_SHAPE(4, 5, 6), AMP_SHAPE(4, 5, 6), AMP_SHAPE(3, 7)};
    const amp_shape sb[3] = {AMP_SHAPE(4, 5, 6), AMP_SHAPE(5, 1), AMP_SHAPE()};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 4; k++)
            for (int s = 0; s < 3; s++) {
                amp_tensor *in[2] = {test_uniform(sa[s], FLOATS[d], -2, 2, 1),
                                     test_uniform(sb[s], FLOATS[d], 0.5, 2, 2)};
                ew_ctx c = {k, 0};
                char what[64];
                snprintf(what, sizeof what, "binary %d, shapes %d, %s", k, s, amp_dtype_name(FLOATS[d]));
                compare(what, f_binary, in, 2, &c, tol_of(FLOATS[d]));
                amp_tensor_free(in[0]);
                amp_tensor_free(in[1]);
            }
    /* Promotion: f16 with f32 gives f32. */
    amp_tensor *mixed[2] = {test_uniform(AMP_SHAPE(6), AMP_F16, -1, 1, 3),
                            test_uniform(AMP_SHAPE(6), AMP_F32, -1, 1, 4)};
    ew_ctx c = {2, 0};
    compare("mul f16 x f32", f_binary, mixed, 2, &c, tol_of(AMP_F16));
    amp_tensor_free(mixed[0]);
    amp_tensor_free(mixed[1]);
}

static void test_unary(void)
{
    if (!gpu())
        return;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k <= 13; k++) {
            bool positive = k == 10 || k == 11;
            amp_tensor *x = test_uniform(AMP_SHAPE(3, 65), FLOATS[d], positive ? 0.1 : -3, 3, 5 + (uint64_t)k);
            ew_ctx c = {k, k == 11 ? 2.5 : 1.75};
            char what[64];
            snprintf(what, sizeof what, "unary %d, %s", k, amp_dtype_name(FLOATS[d]));
            compare(what, f_unary, &x, 1, &c, tol_of(FLOATS[d]) * (k >= 5 && k <= 11 ? 2 : 1));
            amp_tensor_free(x);
        }
}

static amp_tensor *f_reduce(amp_tensor **in, const void *c)
{
    static const int d02[2] = {0, 2}, d1[1] = {1}, dm1[1] = {-1};
    switch (((const ew_ctx *)c)->kind) {
    case 0: return amp_sum(in[0], 2, d02, true);
    case 1: return amp_mean(in[0], 1, d1, false);
    case 2: return amp_sum_all(in[0]);
    case 3: return amp_mean_all(in[0]);
    case 4: return amp_sum(in[0], 1, dm1, false);
    case 5: return amp_softmax(in[0], -1);
    case 6: return amp_softmax(in[0], 1);
    case 7: return amp_log_softmax(in[0], -1);
    case 8: return amp_log_softmax(in[0], 0);
    default: return amp_argmax(in[0], 1);
    }
}

static void test_reductions_and_softmax(void)
{
    if (!gpu())
        return;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k <= 9; k++) {
            amp_tensor *x = test_uniform(AMP_SHAPE(5, 6, 70), FLOATS[d], -4, 4, 11 + (uint64_t)k);
            ew_ctx c = {k, 0};
            char what[64];
            snprintf(what, sizeof what, "reduce %d, %s", k, amp_dtype_name(FLOATS[d]));
            compare(what, f_reduce, &x, 1, &c, tol_of(FLOATS[d]));
            amp_tensor_free(x);
        }
}

static amp_tensor *f_loss(amp_tensor **in, const void *c)
{
    switch (((const ew_ctx *)c)->kind) {
    case 0: return amp_cross_entropy(in[0], in[1]);
    case 1: return amp_cross_entropy_ignore(in[0], in[1], 2);
    default: return amp_mse_loss(in[0], in[1]);
    }
}

static void test_losses(void)
{
    if (!gpu())
        return;
    for (int d = 0; d < 3; d++) {
        int64_t labels[9] = {0, 3, 2, 9, 2, 5, 1, 0, 7};
        for (int k = 0; k < 2; k++) {
            amp_tensor *in[2] = {test_uniform(AMP_SHAPE(9, 10), FLOATS[d], -3, 3, 21),
                                 amp_from_data(AMP_SHAPE(9), AMP_I64, labels)};
            ew_ctx c = {k, 0};
            char what[64];
            snprintf(what, sizeof what, "cross_entropy %d, %s", k, amp_dtype_name(FLOATS[d]));
            compare(what, f_loss, in, 2, &c, tol_of(FLOATS[d]));
            amp_tensor_free(in[0]);
            amp_tensor_free(in[1]);
        }
        amp_tensor *in[2] = {test_uniform(AMP_SHAPE(4, 33), FLOATS[d], -1, 1, 22),
                             test_uniform(AMP_SHAPE(4, 33), FLOATS[d], -1, 1, 23)};
        ew_ctx c = {2, 0};
        compare("mse_loss", f_loss, in, 2, &c, tol_of(FLOATS[d]));
        amp_tensor_free(in[0]);
        amp_tensor_free(in[1]);
    }
}

static amp_tensor *f_layer(amp_tensor **in, const void *c)
{
    static const int perm[3] = {2, 0, 1};
    switch (((const ew_ctx *)c)->kind) {
    case 0: return amp_layer_norm(in[0], 1, in[1], in[2], 1e-5);
    case 1: return amp_layer_norm(in[0], 2, NULL, NULL, 1e-5);
    case 2: return amp_embedding(in[0], in[1]);
    case 3: return amp_permute(in[0], perm);
    case 4: return amp_transpose(in[0], 0, 1);
    case 5: return amp_reshape(in[0], AMP_SHAPE(-1, 4));
    default: {
        amp_tensor *parts[3] = {in[0], in[0], in[0]};
        return amp_cat(parts, 3, 1);
    }
    }
}

static void test_layers_and_shapes(void)
{
    if (!gpu())
        return;
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = FLOATS[d];
        double tol = tol_of(dt);
        amp_tensor *ln[3] = {test_uniform(AMP_SHAPE(3, 5, 48), dt, -2, 3, 31),
                             test_uniform(AMP_SHAPE(48), dt, 0.5, 1.5, 32), test_uniform(AMP_SHAPE(48), dt, -1, 1, 33)};
        ew_ctx c0 = {0, 0}, c1 = {1, 0};
        compare("layer_norm weight bias", f_layer, ln, 3, &c0, tol * 2);
        compare("layer_norm 2 dims", f_layer, ln, 1, &c1, tol * 2);
        int64_t idx[6] = {1, 7, 1, 0, 9, 1};
        amp_tensor *emb[2] = {test_uniform(AMP_SHAPE(10, 12), dt, -1, 1, 34),
                              amp_from_data(AMP_SHAPE(2, 3), AMP_I64, idx)};
        ew_ctx c2 = {2, 0};
        compare("embedding", f_layer, emb, 2, &c2, tol);
        for (int k = 3; k <= 6; k++) {
            ew_ctx c = {k, 0};
            compare("permute / transpose / reshape / cat", f_layer, ln, 1, &c, tol);
        }
        for (int i = 0; i < 3; i++)
            amp_tensor_free(ln[i]);
        amp_tensor_free(emb[0]);
        amp_tensor_free(emb[1]);
    }
}

static amp_tensor *f_linalg(amp_tensor **in, const void *c)
{
    switch (((const ew_ctx *)c)->kind) {
    case 0: return amp_matmul(in[0], in[1]);
    case 1: return amp_linear(in[0], in[1], in[2]);
    case 2: return amp_linear(in[0], in[1], NULL);
    case 3: return amp_attention(in[0], in[1], in[2], true);
    default: return amp_attention(in[0], in[1], in[2], false);
    }
}

static void test_matmul_linear_attention(void)
{
    if (!gpu())
        return;
    const amp_shape a[5] = {AMP_SHAPE(3, 4, 20), AMP_SHAPE(2, 3, 20), AMP_SHAPE(3, 20), AMP_SHAPE(20),
                            AMP_SHAPE(4, 20)};
    const amp_shape b[5] = {AMP_SHAPE(20, 6), AMP_SHAPE(2, 20, 5), AMP_SHAPE(2, 20, 5), AMP_SHAPE(20, 6),
                            AMP_SHAPE(20)};
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = FLOATS[d];
        double tol = tol_of(dt) * 2;
        ew_ctx mm = {0, 0};
        for (int s = 0; s < 5; s++) {
            amp_tensor *in[2] = {test_uniform(a[s], dt, -1, 1, 41), test_uniform(b[s], dt, -1, 1, 42)};
            compare("matmul", f_linalg, in, 2, &mm, tol);
            amp_tensor_free(in[0]);
            amp_tensor_free(in[1]);
        }
        amp_tensor *lin[3] = {test_uniform(AMP_SHAPE(2, 3, 24), dt, -1, 1, 43),
                              test_uniform(AMP_SHAPE(10, 24), dt, -1, 1, 44),
                              test_uniform(AMP_SHAPE(10), dt, -1, 1, 45)};
        ew_ctx l1 = {1, 0}, l2 = {2, 0};
        compare("linear with bias", f_linalg, lin, 3, &l1, tol);
        compare("linear without bias", f_linalg, lin, 2, &l2, tol);
        for (int k = 3; k <= 4; k++) {
            amp_tensor *qkv[3];
            for (int i = 0; i < 3; i++)
                qkv[i] = test_uniform(AMP_SHAPE(2, 3, 17, 16), dt, -1, 1, 46 + (uint64_t)i);
            ew_ctx c = {k, 0};
            /* P (and dS) are rounded to 16 bits before their GEMMs on CUDA. */
            compare(k == 3 ? "attention causal" : "attention", f_linalg, qkv, 3, &c, tol * (dt == AMP_F32 ? 1 : 4));
            for (int i = 0; i < 3; i++)
                amp_tensor_free(qkv[i]);
        }
        for (int i = 0; i < 3; i++)
            amp_tensor_free(lin[i]);
    }
}

/* ------------------------------------------------------ conv and pools */

typedef struct {
    int kind; /* 0 conv2d, 1 max_pool2d, 2 avg_pool2d */
    int k, stride, pad;
    bool bias;
} conv_ctx;

static amp_tensor *f_conv(amp_tensor **in, const void *c)
{
    const conv_ctx *e = c;
    switch (e->kind) {
    case 0: return amp_conv2d(in[0], in[1], e->bias ? in[2] : NULL, e->stride, e->pad);
    case 1: return amp_max_pool2d(in[0], e->k, e->stride, e->pad);
    default: return amp_avg_pool2d(in[0], e->k, e->stride, e->pad);
    }
}

/* conv2d in every dtype: the cnn model's two layers (1 -> 32 and
 * 32 -> 64, 3x3, padding 1, on 28x28 and 14x14, batch 4), stride 2 with
 * padding 1, a non-square kernel without padding, with and without bias;
 * the result and the gradients of x, the weight and the bias. */
static void test_conv2d(void)
{
    if (!gpu())
        return;
    static const struct {
        int64_t N, C, H, W, O, kh, kw;
        int stride, pad;
        bool bias;
    } cases[] = {
        {4, 1, 28, 28, 32, 3, 3, 1, 1, true},  /* cnn conv1 */
        {4, 32, 14, 14, 64, 3, 3, 1, 1, true}, /* cnn conv2 */
        {4, 32, 14, 14, 64, 3, 3, 1, 1, false},
        {2, 3, 9, 7, 5, 3, 3, 2, 1, true},
        {2, 3, 9, 7, 5, 3, 3, 2, 1, false},
        {3, 4, 8, 10, 6, 2, 3, 2, 0, true},
        {1, 2, 5, 5, 3, 5, 5, 1, 0, false}, /* the kernel covers the image: one output */
    };
    for (int d = 0; d < 3; d++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            amp_dtype dt = FLOATS[d];
            amp_tensor *in[3] = {
                test_uniform(AMP_SHAPE(cases[k].N, cases[k].C, cases[k].H, cases[k].W), dt, -1, 1, 71 + k),
                test_uniform(AMP_SHAPE(cases[k].O, cases[k].C, cases[k].kh, cases[k].kw), dt, -0.5, 0.5, 81 + k),
                test_uniform(AMP_SHAPE(cases[k].O), dt, -1, 1, 91 + k)};
            conv_ctx c = {0, 0, cases[k].stride, cases[k].pad, cases[k].bias};
            char what[96];
            snprintf(what, sizeof what, "conv2d case %zu (stride %d, padding %d, %s), %s", k, cases[k].stride,
                     cases[k].pad, cases[k].bias ? "bias" : "no bias", amp_dtype_name(dt));
            /* GEMM sums in another order than the CPU's: one more ulp. */
            compare(what, f_conv, in, cases[k].bias ? 3 : 2, &c, tol_of(dt) * 2);
            for (int i = 0; i < 3; i++)
                amp_tensor_free(in[i]);
        }
}

/* x [shape] in dt with values that tie often (small integers), and NaNs
 * at every 37th element when nans is set. */
static amp_tensor *tied(amp_shape s, amp_dtype dt, bool nans)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= s.d[i];
    float *v = malloc((size_t)n * sizeof *v);
    void *raw = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        v[i] = nans && i % 37 == 5 ? NAN : (float)((i * 7 + i / 5) % 4) - 1.0f;
    amp_convert(v, AMP_F32, raw, dt, (size_t)n);
    amp_tensor *t = amp_from_data(s, dt, raw);
    free(v);
    free(raw);
    return t;
}

/* max_pool2d and avg_pool2d in every dtype: the cnn model's 2x2 pools,
 * overlapping windows with padding (3, stride 2, padding 1; 3, stride 1,
 * padding 1 on a 3-D input), a window as large as the image; max pools
 * also on tied values (the first maximum takes the gradient) and with
 * NaNs (a NaN wins; f32 only, where the NaN survives the round trip). */
static void test_pools(void)
{
    if (!gpu())
        return;
    static const struct {
        amp_shape s;
        int k, stride, pad;
    } cases[] = {
        {{4, {4, 32, 28, 28}}, 2, 0, 0}, /* cnn pool 1 */
        {{4, {4, 64, 14, 14}}, 2, 2, 0}, /* cnn pool 2 */
        {{4, {2, 3, 9, 7}}, 3, 2, 1},
        {{3, {3, 8, 8}}, 3, 1, 1},
        {{4, {2, 2, 5, 6}}, 4, 3, 2},
        {{4, {1, 2, 5, 5}}, 5, 1, 0},
    };
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = FLOATS[d];
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            for (int kind = 1; kind <= 2; kind++)
                for (int data = 0; data < (kind == 1 ? 3 : 1); data++) {
                    if (data == 2 && dt != AMP_F32)
                        continue;
                    amp_tensor *x = data ? tied(cases[k].s, dt, data == 2)
                                         : test_uniform(cases[k].s, dt, -2, 2, 101 + k);
                    conv_ctx c = {kind, cases[k].k, cases[k].stride, cases[k].pad, false};
                    char what[96];
                    snprintf(what, sizeof what, "%s case %zu%s, %s", kind == 1 ? "max_pool2d" : "avg_pool2d", k,
                             data == 1 ? " (ties)" : data == 2 ? " (NaNs)" : "", amp_dtype_name(dt));
                    compare(what, f_conv, &x, 1, &c, tol_of(dt));
                    amp_tensor_free(x);
                }
    }
}

/* ------------------------------------------------- tensors and errors */

static void test_device_tensors(void)
{
    if (!gpu())
        return;
    float v[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f};
    amp_tensor *h = amp_from_data(AMP_SHAPE(5), AMP_F32, v);
    amp_tensor *d = amp_to_device(h, AMP_CUDA);
    CHECK(amp_tensor_device(d) == AMP_CUDA);
    CHECK(amp_tensor_get(d, 2) == 3.25);
    float back[5];
    CHECK_OK(amp_tensor_copy_out(d, back, AMP_F32));
    CHECK(memcmp(back, v, sizeof v) == 0);
    CHECK_OK(amp_tensor_fill(d, -0.5));
    CHECK(amp_item(amp_sum_all(d)) == -2.5);
    amp_tensor *c = amp_clone(d); /* stays on the device */
    CHECK(amp_tensor_device(c) == AMP_CUDA);
    CHECK_OK(amp_tensor_move(c, AMP_CPU));
    CHECK(amp_tensor_device(c) == AMP_CPU && amp_tensor_get(c, 4) == -0.5);
    /* Mixed devices are an error naming both. */
    CHECK(amp_add(h, d) == NULL);
    CHECK_ERROR(AMP_ERR_DEVICE, "cpu and cuda");
    /* Every op of the table has a CUDA kernel now, the pools included
     * (before: "no CUDA kernel"); the result stays on the device. */
    amp_tensor *img = amp_zeros(AMP_SHAPE(1, 1, 4, 4), AMP_F32);
    amp_tensor *dimg = amp_to_device(img, AMP_CUDA);
    amp_tensor *pooled = amp_max_pool2d(dimg, 2, 2, 0);
    CHECK_MSG(pooled != NULL, "max_pool2d on cuda: %s", amp_last_error());
    CHECK(pooled && amp_tensor_device(pooled) == AMP_CUDA);
    /* A shape error is the CPU's, word for word. */
    CHECK(amp_max_pool2d(dimg, 8, 1, 0) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "max_pool2d: the padded input is smaller than the 8x8 window");
    amp_tensor *w3 = amp_zeros(AMP_SHAPE(2, 3, 3, 3), AMP_F32);
    amp_tensor *dw3 = amp_to_device(w3, AMP_CUDA);
    CHECK(amp_conv2d(dimg, dw3, NULL, 1, 1) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "conv2d: input channels of x and weight differ");
    amp_tensor_free(w3);
    amp_tensor_free(dw3);
    amp_tensor_free(img);
    amp_tensor_free(dimg);
    amp_temps_free();
    amp_tensor_free(c);
    amp_tensor_free(d);
    amp_tensor_free(h);
}

/* ------------------------------------------------------------ scaler */

typedef struct {
    amp_tensor *p;
    amp_optim *opt;
} rig;

static rig make_rig(int n, bool adam)
{
    rig r;
    r.p = amp_full(AMP_SHAPE(n), AMP_F32, 1.0);
    CHECK_OK(amp_tensor_move(r.p, AMP_CUDA));
    amp_tensor_set_requires_grad(r.p, true);
    if (adam) {
        r.opt = amp_optim_adam(&r.p, 1, amp_adam_defaults());
    } else {
        amp_sgd_opts o = amp_sgd_defaults();
        o.lr = 0.5;
        o.momentum = 0.9;
        r.opt = amp_optim_sgd(&r.p, 1, o);
    }
    return r;
}

static void free_rig(rig r)
{
    amp_optim_free(r.opt);
    amp_tensor_free(r.p);
}

static void backward_with_grad(amp_scaler *s, rig r, double g)
{
    amp_tensor *c = amp_full(amp_tensor_shape(r.p), AMP_F32, g);
    CHECK_OK(amp_tensor_move(c, AMP_CUDA));
    amp_tensor *loss = amp_sum_all(amp_mul(r.p, c));
    CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
    amp_tensor_free(c);
    amp_temps_free();
}

static bool iteration(amp_scaler *s, rig r, double g)
{
    bool skipped = false;
    amp_optim_zero_grad(r.opt);
    backward_with_grad(s, r, g);
    CHECK_OK(amp_scaler_step(s, r.opt, &skipped));
    CHECK_OK(amp_scaler_update(s));
    return skipped;
}

static amp_scaler *scaler_with(double init, double growth, double backoff, int64_t interval)
{
    amp_scaler_opts o = amp_scaler_defaults();
    o.init_scale = init;
    o.growth_factor = growth;
    o.backoff_factor = backoff;
    o.growth_interval = interval;
    return amp_scaler_new(o);
}

/* Conformance case 3. */
static void test_scaler_small_interval_sequence(void)
{
    if (!gpu())
        return;
    amp_scaler *s = scaler_with(4, 2, 0.25, 2);
    rig r = make_rig(3, false);
    CHECK(!iteration(s, r, 1.0));
    CHECK(amp_scaler_get_scale(s) == 4.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 1);
    CHECK(!iteration(s, r, 1.0));
    CHECK(amp_scaler_get_scale(s) == 8.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 0);
    CHECK(iteration(s, r, INFINITY));
    CHECK(amp_scaler_get_scale(s) == 2.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 0);
    free_rig(r);
    amp_scaler_free(s);
}

/* Case 5. */
static void test_scaler_no_floor(void)
{
    if (!gpu())
        return;
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = make_rig(1, false);
    for (int k = 0; k < 20; k++)
        CHECK(iteration(s, r, INFINITY));
    CHECK(amp_scaler_get_scale(s) == 0.0625);
    free_rig(r);
    amp_scaler_free(s);
}

/* Case 8, with the counts and history kept on the device. */
static void test_scaler_interval_one_with_a_skip(void)
{
    if (!gpu())
        return;
    amp_scaler *s = scaler_with(128, 2, 0.5, 1);
    rig r = make_rig(1, false);
    CHECK(!iteration(s, r, 1.0));
    CHECK(!iteration(s, r, 1.0));
    CHECK(iteration(s, r, INFINITY));
    CHECK(!iteration(s, r, 1.0));
    CHECK(amp_scaler_get_scale(s) == 512.0);
    amp_scaler_counts c = amp_scaler_get_counts(s);
    CHECK_EQ_INT(c.steps, 3);
    CHECK_EQ_INT(c.skipped, 1);
    amp_scale_change h[8];
    int n = amp_scaler_history(s, h, 8);
    CHECK_EQ_INT(n, 4);
    CHECK(n == 4 && h[2].old_scale == 512.0 && h[2].new_scale == 256.0 && h[2].update == 2);
    CHECK_EQ_INT(amp_optim_steps(r.opt), 3);
    free_rig(r);
    amp_scaler_free(s);
}

/* Case 11: a skipped step changes no parameter and no optimizer state. */
static void check_skip_preserves(bool adam, double bad)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = make_rig(3, adam);
    CHECK(!iteration(s, r, 0.25));
    amp_tensor *before = amp_clone(r.p);
    int64_t steps = amp_optim_steps(r.opt);
    double scale = amp_scaler_get_scale(s);
    CHECK(iteration(s, r, bad));
    CHECK(max_abs_diff(before, r.p) == 0.0);
    CHECK_EQ_INT(amp_optim_steps(r.opt), steps);
    CHECK_EQ_INT(amp_optim_param_steps(r.opt, 0), steps);
    CHECK(amp_scaler_get_scale(s) == scale / 2);
    amp_scaler *s2 = amp_scaler_new(amp_scaler_defaults());
    rig r2 = make_rig(3, adam);
    iteration(s2, r2, 0.25);
    iteration(s2, r2, 0.125);
    iteration(s, r, 0.125);
    CHECK(max_abs_diff(r.p, r2.p) < 1e-7);
    amp_tensor_free(before);
    free_rig(r);
    free_rig(r2);
    amp_scaler_free(s);
    amp_scaler_free(s2);
}

static void test_scaler_nonfinite_skips_and_keeps_state(void)
{
    if (!gpu())
        return;
    check_skip_preserves(false, INFINITY);
    check_skip_preserves(false, NAN);
    check_skip_preserves(true, -INFINITY);
    check_skip_preserves(true, NAN);
}

/* ------------------------------------------------------------ training */

/* A small MLP on fixed data; returns the loss of each step. */
static void train(amp_device dev, int prec, bool adam, int steps, double *losses)
{
    amp_manual_seed(3);
    int64_t hidden[2] = {64, 32};
    amp_module *m = amp_model_mlp(20, hidden, 2, 5);
    amp_tensor *x = test_uniform(AMP_SHAPE(32, 20), AMP_F32, -1, 1, 51);
    int64_t y_host[32];
    for (int i = 0; i < 32; i++)
        y_host[i] = (i * 7) % 5;
    amp_tensor *y = amp_from_data(AMP_SHAPE(32), AMP_I64, y_host);
    if (dev == AMP_CUDA) {
        CHECK_OK(amp_module_to(m, AMP_CUDA));
        CHECK_OK(amp_tensor_move(x, AMP_CUDA));
        CHECK_OK(amp_tensor_move(y, AMP_CUDA));
    }
    amp_tensor *params[16];
    int np = amp_module_params(m, params, 16);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.1;
    so.momentum = 0.9;
    amp_optim *opt = adam ? amp_optim_adamw(params, np, amp_adamw_defaults()) : amp_optim_sgd(params, np, so);
    amp_scaler_opts sc = amp_scaler_defaults();
    sc.enabled = prec == 2;
    amp_scaler *s = amp_scaler_new(sc);
    for (int k = 0; k < steps; k++) {
        amp_optim_zero_grad(opt);
        if (prec)
            amp_autocast_begin(dev, prec == 1 ? AMP_BF16 : AMP_F16);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, x), y);
        if (prec)
            amp_autocast_end();
        losses[k] = amp_item(loss);
        CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
        CHECK_OK(amp_scaler_step(s, opt, NULL));
        CHECK_OK(amp_scaler_update(s));
        amp_temps_free();
    }
    amp_scaler_free(s);
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void test_mlp_training_follows_the_cpu(void)
{
    if (!gpu())
        return;
    enum { STEPS = 25 };
    const char *names[3] = {"fp32", "bf16", "fp16+scaler"};
    for (int adam = 0; adam < 2; adam++)
        for (int prec = 0; prec < 3; prec++) {
            double cpu[STEPS], cuda[STEPS];
            train(AMP_CPU, prec, adam, STEPS, cpu);
            train(AMP_CUDA, prec, adam, STEPS, cuda);
            double tol = prec == 0 ? 1e-4 : prec == 1 ? 3e-2 : 1e-2;
            for (int k = 0; k < STEPS; k++)
                CHECK_MSG(close_to(cpu[k], cuda[k], tol), "%s %s: step %d loss %.7g on cuda, %.7g on the cpu",
                          adam ? "adamw" : "sgd", names[prec], k, cuda[k], cpu[k]);
            CHECK_MSG(cuda[STEPS - 1] < cuda[0], "%s %s: the loss did not go down (%g -> %g)", adam ? "adamw" : "sgd",
                      names[prec], cuda[0], cuda[STEPS - 1]);
        }
}

/* After the first step a step takes no fresh device memory, and autocast
 * on CUDA casts as the CUDA policy says. */
static void test_allocator_steady_state_and_autocast(void)
{
    if (!gpu())
        return;
    double losses[3];
    train(AMP_CUDA, 2, true, 3, losses);
    amp_memory_stats a = amp_cuda_memory_get_stats();
    train(AMP_CUDA, 2, true, 3, losses);
    amp_memory_stats b = amp_cuda_memory_get_stats();
    CHECK_MSG(b.os_allocs == a.os_allocs, "cudaMalloc calls went from %zu to %zu", a.os_allocs, b.os_allocs);

    amp_tensor *w = test_uniform(AMP_SHAPE(8, 8), AMP_F32, -1, 1, 61);
    CHECK_OK(amp_tensor_move(w, AMP_CUDA));
    amp_tensor_set_requires_grad(w, true);
    amp_autocast_begin(AMP_CUDA, AMP_F16);
    amp_tensor *y = amp_matmul(w, w);
    amp_tensor *e = amp_exp(y);
    amp_autocast_end();
    CHECK(amp_tensor_dtype(y) == AMP_F16);
    CHECK(amp_tensor_dtype(e) == AMP_F32);
    CHECK_OK(amp_backward(amp_sum_all(e)));
    CHECK(amp_tensor_grad(w) && amp_tensor_dtype(amp_tensor_grad(w)) == AMP_F32);
    CHECK(amp_tensor_device(amp_tensor_grad(w)) == AMP_CUDA);
    amp_tensor_free(w);
}

/* --------------------------------------------- host synchronisations */

/* Host waits since a: stream syncs and copies to the host (each waits). */
static void check_waits(const char *what, amp_cuda_sync_stats a, amp_cuda_sync_stats b, uint64_t syncs, uint64_t d2h)
{
    CHECK_MSG(b.syncs - a.syncs == syncs, "%s: %llu stream syncs, expected %llu", what,
              (unsigned long long)(b.syncs - a.syncs), (unsigned long long)syncs);
    CHECK_MSG(b.d2h_copies - a.d2h_copies == d2h, "%s: %llu copies to the host, expected %llu", what,
              (unsigned long long)(b.d2h_copies - a.d2h_copies), (unsigned long long)d2h);
}

/* docs/cuda.md's loop (f16 autocast, the grad scaler, data already on the
 * device, amp_scaler_step with NULL) with SGD momentum or AdamW: after two
 * warm-up steps, five more make no stream sync and no copy to the host
 * (nor a cudaMalloc, which may synchronise); then reading the loss, the
 * scale, and amp_cuda_synchronize are one host wait each, as documented. */
static void check_steps_do_not_wait(bool adam)
{
    const char *name = adam ? "adamw" : "sgd momentum";
    enum { WARMUP = 2, STEPS = 5 };
    amp_manual_seed(5);
    int64_t hidden[2] = {64, 32};
    amp_module *m = amp_model_mlp(20, hidden, 2, 5);
    amp_tensor *x = test_uniform(AMP_SHAPE(32, 20), AMP_F32, -1, 1, 53);
    int64_t y_host[32];
    for (int i = 0; i < 32; i++)
        y_host[i] = (i * 3) % 5;
    amp_tensor *y = amp_from_data(AMP_SHAPE(32), AMP_I64, y_host);
    CHECK_OK(amp_module_to(m, AMP_CUDA));
    CHECK_OK(amp_tensor_move(x, AMP_CUDA));
    CHECK_OK(amp_tensor_move(y, AMP_CUDA));
    amp_tensor *params[16];
    int np = amp_module_params(m, params, 16);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05;
    so.momentum = 0.9;
    amp_optim *opt = adam ? amp_optim_adamw(params, np, amp_adamw_defaults()) : amp_optim_sgd(params, np, so);
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    CHECK_OK(amp_cuda_synchronize()); /* the uploads above are not the loop's */

    amp_cuda_sync_stats a = amp_cuda_get_sync_stats();
    amp_memory_stats ma = amp_cuda_memory_get_stats();
    amp_tensor *loss = NULL;
    for (int k = 0; k < WARMUP + STEPS + 1; k++) {
        if (k == WARMUP) {
            a = amp_cuda_get_sync_stats();
            ma = amp_cuda_memory_get_stats();
        }
        amp_optim_zero_grad(opt);
        amp_autocast_begin(AMP_CUDA, AMP_F16);
        loss = amp_cross_entropy(amp_module_forward(m, x), y);
        amp_autocast_end();
        CHECK_MSG(loss != NULL, "%s, step %d: %s", name, k, amp_last_error());
        CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
        CHECK_OK(amp_scaler_step(s, opt, NULL));
        CHECK_OK(amp_scaler_update(s));
        if (k < WARMUP + STEPS) /* the last step's loss is read below */
            amp_temps_free();
    }
    amp_cuda_sync_stats b = amp_cuda_get_sync_stats();
    amp_memory_stats mb = amp_cuda_memory_get_stats();
    char what[96];
    snprintf(what, sizeof what, "%s: %d training steps", name, STEPS + 1);
    check_waits(what, a, b, 0, 0);
    CHECK_MSG(mb.os_allocs == ma.os_allocs, "%s: cudaMalloc calls went from %zu to %zu", what, ma.os_allocs,
              mb.os_allocs);
    printf("  %s: %.1f host->device copies per step (not waits)\n", name,
           (double)(b.h2d_copies - a.h2d_copies) / (STEPS + 1));

    a = b;
    double v = loss ? amp_item(loss) : NAN;
    b = amp_cuda_get_sync_stats();
    snprintf(what, sizeof what, "%s: amp_item(loss)", name);
    check_waits(what, a, b, 0, 1);
    CHECK_MSG(isfinite(v) && v > 0 && v < 10, "%s: loss %g", name, v);

    a = b;
    double scale = amp_scaler_get_scale(s);
    b = amp_cuda_get_sync_stats();
    snprintf(what, sizeof what, "%s: amp_scaler_get_scale", name);
    check_waits(what, a, b, 0, 1);
    CHECK_MSG(scale >= 1.0 && scale <= 65536.0, "%s: scale %g", name, scale); /* backed off at most */

    a = b;
    CHECK_OK(amp_cuda_synchronize());
    b = amp_cuda_get_sync_stats();
    snprintf(what, sizeof what, "%s: amp_cuda_synchronize", name);
    check_waits(what, a, b, 1, 0);
    CHECK(b.h2d_copies == a.h2d_copies);

    amp_cuda_reset_sync_stats();
    b = amp_cuda_get_sync_stats();
    CHECK(b.syncs == 0 && b.d2h_copies == 0 && b.h2d_copies == 0);

    amp_temps_free();
    amp_scaler_free(s);
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void test_training_steps_do_not_wait_for_the_gpu(void)
{
    if (!gpu())
        return;
    check_steps_do_not_wait(false);
    check_steps_do_not_wait(true);
}

/* ------------------------------------------------------------- gpt */

/* The loss of a tiny GPT on fixed tokens (T of them per row), its
 * backward, in precision prec (0 fp32, 1 bf16, 2 fp16 autocast). */
static double gpt_loss(amp_module *m, amp_device dev, int prec, int64_t T)
{
    enum { B = 2 };
    int64_t idx[B * 8], tgt[B * 8];
    for (int64_t i = 0; i < B * T; i++) {
        idx[i] = (i * 5 + 3) % 11;
        tgt[i] = (i * 7 + 1) % 11;
    }
    amp_tensor *x = amp_from_data(AMP_SHAPE(B, T), AMP_I64, idx), *y = amp_from_data(AMP_SHAPE(B * T), AMP_I64, tgt);
    if (dev == AMP_CUDA) {
        CHECK_OK(amp_tensor_move(x, AMP_CUDA));
        CHECK_OK(amp_tensor_move(y, AMP_CUDA));
    }
    if (prec)
        amp_autocast_begin(dev, prec == 1 ? AMP_BF16 : AMP_F16);
    amp_tensor *logits = amp_module_forward(m, x);
    CHECK_MSG(logits != NULL, "gpt forward on %s: %s", amp_device_name(dev), amp_last_error());
    CHECK(!logits || amp_tensor_device(logits) == dev);
    amp_tensor *loss = amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(-1, 11)), y);
    if (prec)
        amp_autocast_end();
    CHECK_OK(amp_backward(loss));
    double v = loss ? amp_item(loss) : NAN;
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_temps_free();
    return v;
}

/* The GPT runs on CUDA (its position indices made on the device): the
 * same initial weights give the CPU's loss and gradients, for a T below
 * the context and at it, with dropout (the same Philox mask) and under
 * autocast. */
static void test_gpt_on_cuda_matches_the_cpu(void)
{
    if (!gpu())
        return;
    for (int drop = 0; drop < 2; drop++) {
        amp_gpt_config c = {.vocab = 11, .context = 8, .width = 16, .layers = 2, .heads = 2, .mlp = 32,
                            .dropout = drop ? 0.2 : 0.0};
        amp_manual_seed(21);
        amp_module *mc = amp_model_gpt(c);
        amp_manual_seed(21);
        amp_module *md = amp_model_gpt(c);
        CHECK_OK(amp_module_to(md, AMP_CUDA));
        const int64_t Ts[2] = {5, 8};
        for (int k = 0; k < 2; k++)
            for (int prec = 0; prec < 3; prec++) {
                int np = amp_module_num_params(mc);
                for (int i = 0; i < np; i++) {
                    amp_tensor_clear_grad(amp_module_param(mc, i, NULL));
                    amp_tensor_clear_grad(amp_module_param(md, i, NULL));
                }
                amp_rng_state rng = amp_rng_get_state();
                double lc = gpt_loss(mc, AMP_CPU, prec, Ts[k]);
                amp_rng_set_state(rng);
                double ld = gpt_loss(md, AMP_CUDA, prec, Ts[k]);
                double tol = prec == 0 ? tol_of(AMP_F32) : prec == 1 ? tol_of(AMP_BF16) : tol_of(AMP_F16);
                CHECK_MSG(isfinite(lc) && close_to(lc, ld, tol),
                          "gpt (dropout %d) T %lld prec %d: loss %.7g on cuda, %.7g on the cpu", drop,
                          (long long)Ts[k], prec, ld, lc);
                if (prec != 0)
                    continue;
                for (int i = 0; i < np; i++) { /* fp32: every gradient too */
                    const char *name = NULL;
                    amp_tensor *pc = amp_module_param(mc, i, &name), *pd = amp_module_param(md, i, NULL);
                    char what[96];
                    snprintf(what, sizeof what, "gpt (dropout %d) T %lld", drop, (long long)Ts[k]);
                    check_same(what, name, amp_tensor_grad(pc), amp_tensor_grad(pd), tol_of(AMP_F32));
                }
            }
        amp_module_free(mc);
        amp_module_free(md);
    }
}

/* -------------------------------------------------- clip_grad_norm */

/* A parameter of shape [n] and dtype dt whose gradient is g (rounded into
 * dt), on dev: set by a backward, as a training step would. */
static amp_tensor *param_with_grad(int64_t n, amp_dtype dt, const float *g, amp_device dev)
{
    amp_tensor *p = amp_zeros(AMP_SHAPE(n), dt), *c = amp_zeros(AMP_SHAPE(n), dt);
    CHECK_OK(amp_tensor_copy_in(c, g, AMP_F32));
    amp_tensor_set_requires_grad(p, true);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(p, c)))); /* d/dp sum(p * c) = c */
    amp_tensor_free(c);
    amp_temps_free();
    if (dev == AMP_CUDA)
        CHECK_OK(amp_tensor_move(p, AMP_CUDA)); /* the gradient moves with it */
    return p;
}

enum { CLIP_N = 4 };
static const int64_t clip_len[CLIP_N] = {5000, 21, 64, 9}; /* 5000: two chunks of the multi-tensor launch */
static const amp_dtype clip_dt[CLIP_N] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F32};

/* The same gradients on the CPU (p[0]) and on CUDA (p[1]); parameter 3
 * has none. bad: 0, or put +inf (1) or NaN (2) into the f16 / bf16 one. */
static void clip_params(amp_tensor *p[2][CLIP_N], int bad)
{
    float *g = malloc(5000 * sizeof *g);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < CLIP_N; i++) {
            for (int64_t j = 0; j < clip_len[i]; j++)
                g[j] = (float)(sin(0.37 * (double)j + i) * (i == 1 ? 3.0 : 0.5));
            if (bad == 1 && i == 1)
                g[4] = INFINITY;
            if (bad == 2 && i == 2)
                g[7] = NAN;
            if (i == 3) {
                p[d][i] = amp_zeros(AMP_SHAPE(clip_len[i]), clip_dt[i]);
                amp_tensor_set_requires_grad(p[d][i], true);
                if (d)
                    CHECK_OK(amp_tensor_move(p[d][i], AMP_CUDA));
            } else {
                p[d][i] = param_with_grad(clip_len[i], clip_dt[i], g, d ? AMP_CUDA : AMP_CPU);
            }
        }
    free(g);
}

static void clip_free(amp_tensor *p[2][CLIP_N])
{
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < CLIP_N; i++)
            amp_tensor_free(p[d][i]);
}

/* sqrt of the sum of squares of every gradient value, in double. */
static double norm_of(amp_tensor *const *p)
{
    double ss = 0;
    for (int i = 0; i < CLIP_N; i++) {
        amp_tensor *g = amp_tensor_grad(p[i]);
        if (!g)
            continue;
        float v[5000];
        CHECK_OK(amp_tensor_copy_out(g, v, AMP_F32));
        for (int64_t j = 0; j < clip_len[i]; j++)
            ss += (double)v[j] * v[j];
    }
    return sqrt(ss);
}

/* clip_grad_norm on CUDA gradients (f32, f16, bf16; one parameter
 * without a gradient) returns the CPU's total and leaves the CPU's values:
 * not clipped, clipped, and with an inf (total inf: factor 0, the inf
 * becomes NaN) or a NaN (everything NaN), and max_norm inf with an inf
 * gradient (a NaN factor), as PyTorch. Mixed devices are an error that
 * changes nothing. */
static void test_clip_grad_norm_matches_the_cpu(void)
{
    if (!gpu())
        return;
    const struct {
        int bad;
        double max_norm;
    } cases[] = {{0, 1e6}, {0, 1.0}, {0, 0.0}, {1, 1.0}, {2, 1.0}, {0, INFINITY}, {1, INFINITY}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        amp_tensor *p[2][CLIP_N];
        clip_params(p, cases[c].bad);
        const double ref = norm_of(p[0]);
        amp_clear_error();
        const double tc = amp_clip_grad_norm(p[0], CLIP_N, cases[c].max_norm);
        const double td = amp_clip_grad_norm(p[1], CLIP_N, cases[c].max_norm);
        CHECK_MSG(amp_last_status() == AMP_OK, "case %zu: %s", c, amp_last_error());
        CHECK_MSG(close_to(ref, tc, 1e-12) && close_to(ref, td, 1e-12),
                  "case %zu: total %.17g on cuda, %.17g on the cpu, %.17g in double", c, td, tc, ref);
        for (int i = 0; i < CLIP_N; i++) {
            char part[48];
            snprintf(part, sizeof part, "gradient %d (%s)", i, amp_dtype_name(clip_dt[i]));
            if (i == 3) {
                CHECK(!amp_tensor_grad(p[0][i]) && !amp_tensor_grad(p[1][i]));
                continue;
            }
            char what[48];
            snprintf(what, sizeof what, "clip case %zu", c);
            /* the same factor rounded into the same dtype: bit for bit */
            check_same(what, part, amp_tensor_grad(p[0][i]), amp_tensor_grad(p[1][i]), 0.0);
        }
        if (cases[c].bad == 0 && cases[c].max_norm == 1.0) /* clipped to 1, to the 16-bit roundings */
            CHECK_NEAR(norm_of(p[1]), 1.0, 2e-3);
        if (cases[c].bad == 1 && isfinite(cases[c].max_norm)) /* factor 0: the inf is NaN, the rest 0 */
            CHECK(isnan(amp_tensor_get(amp_tensor_grad(p[1][1]), 4)) &&
                  amp_tensor_get(amp_tensor_grad(p[1][0]), 1) == 0.0);
        if (cases[c].bad == 2 || (cases[c].bad == 1 && !isfinite(cases[c].max_norm)))
            CHECK(isnan(amp_tensor_get(amp_tensor_grad(p[1][0]), 1)));
        clip_free(p);
    }

    /* no gradients at all: 0, nothing to do */
    amp_tensor *none = amp_zeros(AMP_SHAPE(3), AMP_F32);
    CHECK_OK(amp_tensor_move(none, AMP_CUDA));
    amp_tensor_set_requires_grad(none, true);
    amp_clear_error();
    CHECK(amp_clip_grad_norm(&none, 1, 1.0) == 0.0 && amp_last_status() == AMP_OK);
    amp_tensor_free(none);

    /* a CPU gradient beside a CUDA one */
    amp_tensor *p[2][CLIP_N];
    clip_params(p, 0);
    amp_tensor *mixed[2] = {p[0][0], p[1][1]};
    const double before = norm_of(p[1]);
    CHECK(isnan(amp_clip_grad_norm(mixed, 2, 1e-3)));
    CHECK_ERROR(AMP_ERR_DEVICE, "all gradients must be on one device");
    CHECK(norm_of(p[1]) == before && norm_of(p[0]) == before);
    clip_free(p);
}

/* ------------------------------------------------------- checkpoints */

/* One fp32 Adam step of m on (x, y). */
static void adam_step(amp_module *m, amp_optim *o, amp_tensor *x, amp_tensor *y)
{
    amp_optim_zero_grad(o);
    CHECK_OK(amp_backward(amp_cross_entropy(amp_module_forward(m, x), y)));
    CHECK_OK(amp_optim_step(o));
    amp_temps_free();
}

/* Every parameter (and, with oa / ob, every Adam state buffer and step
 * count) of a and b equal, bit for bit. */
static void check_same_state(const char *what, amp_module *a, amp_module *b, amp_optim *oa, amp_optim *ob)
{
    int n = amp_module_num_params(a);
    CHECK_EQ_INT(amp_module_num_params(b), n);
    for (int i = 0; i < n && i < amp_module_num_params(b); i++) {
        const char *name;
        amp_tensor *pa = amp_module_param(a, i, &name), *pb = amp_module_param(b, i, NULL);
        CHECK_MSG(max_abs_diff(pa, pb) == 0.0, "%s: parameter %s differs by %g", what, name, max_abs_diff(pa, pb));
        if (!oa)
            continue;
        CHECK_EQ_INT(amp_optim_param_steps(ob, i), amp_optim_param_steps(oa, i));
        const char *keys[2] = {"exp_avg", "exp_avg_sq"};
        for (int k = 0; k < 2; k++) {
            amp_tensor *sa = amp_optim_state_tensor(oa, i, keys[k]), *sb = amp_optim_state_tensor(ob, i, keys[k]);
            CHECK_MSG(sa && sb && max_abs_diff(sa, sb) == 0.0, "%s: %s of %s differs", what, keys[k], name);
        }
    }
}

/* A CUDA model and its Adam state saved, then loaded into a CPU model
 * (the same values) and into a CUDA one, which then trains on exactly as
 * the original. */
static void test_checkpoint_of_a_cuda_model(void)
{
    if (!gpu())
        return;
    char path[] = "/tmp/ampc-cuda-ckpt-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    int64_t hidden[1] = {16}, labels[8] = {0, 1, 2, 3, 4, 0, 1, 2};
    amp_tensor *x = test_uniform(AMP_SHAPE(8, 12), AMP_F32, -1, 1, 111);
    amp_tensor *y = amp_from_data(AMP_SHAPE(8), AMP_I64, labels);
    amp_tensor *dx = amp_to_device(x, AMP_CUDA), *dy = amp_to_device(y, AMP_CUDA);
    amp_module *m[3];
    amp_optim *o[3];
    amp_tensor *params[3][8];
    for (int k = 0; k < 3; k++) {
        amp_manual_seed(10 + (uint64_t)k); /* different initial weights: the load must replace them */
        m[k] = amp_model_mlp(12, hidden, 1, 5);
        if (k != 1)
            CHECK_OK(amp_module_to(m[k], AMP_CUDA));
        int np = amp_module_params(m[k], params[k], 8);
        o[k] = amp_optim_adam(params[k], np, amp_adam_defaults());
    }
    adam_step(m[0], o[0], dx, dy);
    adam_step(m[0], o[0], dx, dy);
    CHECK_OK(amp_checkpoint_save(path, m[0], o[0], NULL, 2, NULL));
    int64_t step = 0;
    CHECK_OK(amp_checkpoint_load(path, m[1], o[1], NULL, &step, NULL)); /* on the CPU */
    CHECK_EQ_INT(step, 2);
    check_same_state("saved on cuda, loaded on the cpu", m[0], m[1], o[0], o[1]);
    CHECK_OK(amp_checkpoint_load(path, m[2], o[2], NULL, NULL, NULL)); /* on cuda */
    CHECK(amp_tensor_device(amp_module_param(m[2], 0, NULL)) == AMP_CUDA);
    check_same_state("saved on cuda, loaded on cuda", m[0], m[2], o[0], o[2]);
    CHECK_EQ_INT(amp_optim_steps(o[2]), 2);
    adam_step(m[0], o[0], dx, dy);
    adam_step(m[2], o[2], dx, dy);
    check_same_state("one step after the load", m[0], m[2], o[0], o[2]);
    for (int k = 0; k < 3; k++) {
        amp_optim_free(o[k]);
        amp_module_free(m[k]);
    }
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_tensor_free(dx);
    amp_tensor_free(dy);
    unlink(path);
}

/* ------------------------------------------------ ampc --device cuda */

static bool cli_ready;

/* The "key" field of each of the log's lines, into vals (at most max);
 * returns the line count. */
static int log_field(const char *path, const char *key, double *vals, char (*text)[64], int max)
{
    char *buf = cli_read_file(path, NULL), *lines[512];
    if (!buf)
        return 0;
    int n = cli_lines(buf, lines, 512), k = 0;
    for (int i = 0; i < n && k < max; i++) {
        char v[64];
        if (!lines[i][0] || !cli_json_field(lines[i], key, v, sizeof v))
            continue;
        if (text)
            snprintf(text[k], sizeof text[k], "%s", v);
        vals[k++] = strcmp(v, "null") == 0 ? NAN : atof(v);
    }
    free(buf);
    return k;
}

/* The temp dir and the ampc binary; false (skipped) without them. */
static bool cli_setup(void)
{
    if (!cli_ready && !(cli_ready = cli_init("test-cuda")))
        return false;
    if (!cli_ampc[0]) { /* run by hand, without CTest's AMPC_BUILD_DIR: the ampc beside this program */
        char self[900];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) {
            self[len] = '\0';
            char *slash = strrchr(self, '/');
            if (slash)
                *slash = '\0';
            snprintf(cli_ampc, sizeof cli_ampc, "%s/ampc", self);
        }
    }
    return cli_have_binary();
}

/* The cnn on tiny images: a cuda run follows the cpu run in fp32; the
 * default precision on cuda is fp16 with the scaler; a cuda run stopped,
 * saved and resumed logs the same steps as one straight run, bit for bit;
 * its checkpoint evaluates the same on cuda and (nearly) on the cpu. */
static void test_cli_trains_and_checkpoints_on_cuda(void)
{
    if (!gpu() || !cli_setup())
        return;
    enum { STEPS = 8 };
    char tiny[256], lcpu[512], lcuda[512], la[512], lc[512], ck[512];
    cli_path(tiny, sizeof tiny, "tiny");
    cli_write_tiny_images(tiny);
    cli_path(lcpu, sizeof lcpu, "cpu.jsonl");
    cli_path(lcuda, sizeof lcuda, "cuda.jsonl");
    cli_path(la, sizeof la, "a.jsonl");
    cli_path(lc, sizeof lc, "c.jsonl");
    cli_path(ck, sizeof ck, "ck");
    char common[1024];
    snprintf(common, sizeof common, "train --model cnn --data %s --batch 16 --threads 2 --schedule cosine", tiny);

    /* fp32: the same losses as the CPU's, to GEMM summation order */
    int rc = cli_run("%s --steps %d --precision fp32 --device cpu --log %s", common, STEPS, lcpu);
    CHECK_MSG(rc == 0, "cpu run: exit %d:\n%s", rc, cli_out);
    rc = cli_run("%s --steps %d --precision fp32 --device cuda --log %s", common, STEPS, lcuda);
    CHECK_MSG(rc == 0, "cuda run: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("on cuda");
    CHECK_OUT("peak device memory");
    CHECK_OUT("test_accuracy");
    double lc1[STEPS], lc2[STEPS];
    int n1 = log_field(lcpu, "loss", lc1, NULL, STEPS), n2 = log_field(lcuda, "loss", lc2, NULL, STEPS);
    CHECK_EQ_INT(n1, STEPS);
    CHECK_EQ_INT(n2, STEPS);
    for (int i = 0; i < n1 && i < n2; i++)
        CHECK_MSG(close_to(lc1[i], lc2[i], 1e-4), "fp32 step %d: loss %.7g on cuda, %.7g on the cpu", i + 1, lc2[i],
                  lc1[i]);

    /* the default precision there: fp16 with the scaler; no --log, so the
     * losses are read at the progress lines only */
    rc = cli_run("%s --steps %d --device cuda --log-every 4", common, STEPS);
    CHECK_MSG(rc == 0, "cuda fp16 run: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("precision fp16 with the grad scaler, on cuda");
    CHECK_OUT("scaler: final scale");
    CHECK_MSG(isfinite(cli_value_after("loss ")), "no finite loss in the progress lines:\n%s", cli_out);

    /* stop at STEPS / 2, save, resume: the same log as straight through */
    rc = cli_run("%s --steps %d --device cuda --log %s", common, STEPS, la);
    CHECK_MSG(rc == 0, "straight cuda run: exit %d:\n%s", rc, cli_out);
    rc = cli_run("%s --steps %d --stop-at %d --device cuda --save %s", common, STEPS, STEPS / 2, ck);
    CHECK_MSG(rc == 0, "first half: exit %d:\n%s", rc, cli_out);
    rc = cli_run("train --resume %s --device cuda --threads 2 --log %s", ck, lc);
    CHECK_MSG(rc == 0, "resumed half: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
    double acc = cli_value_after("test_accuracy ");
    const char *keys[3] = {"loss", "lr", "scale"};
    for (int k = 0; k < 3; k++) {
        double va[STEPS], vc[STEPS];
        char ta[STEPS][64], tc[STEPS][64];
        int na = log_field(la, keys[k], va, ta, STEPS), nc = log_field(lc, keys[k], vc, tc, STEPS);
        CHECK_EQ_INT(na, STEPS);
        CHECK_EQ_INT(nc, STEPS / 2);
        for (int i = 0; i < STEPS / 2 && i < nc && STEPS / 2 + i < na; i++)
            CHECK_MSG(strcmp(ta[STEPS / 2 + i], tc[i]) == 0, "resumed on cuda: step %d %s %s, straight %s",
                      STEPS / 2 + i + 1, keys[k], tc[i], ta[STEPS / 2 + i]);
    }
    /* the checkpoint: the same accuracy on cuda, about the same on the cpu */
    rc = cli_run("eval %s --device cuda", ck);
    CHECK_MSG(rc == 0, "eval on cuda: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(cli_value_after("test_accuracy ") == acc, "eval on cuda: accuracy %g, the run ended with %g",
              cli_value_after("test_accuracy "), acc);
    rc = cli_run("eval %s --device cpu", ck);
    CHECK_MSG(rc == 0, "eval on the cpu: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(fabs(cli_value_after("test_accuracy ") - acc) <= 0.02, "eval on the cpu: accuracy %g, cuda %g",
              cli_value_after("test_accuracy "), acc);
}

/* ampc train --model gpt --clip on cuda (both refused before): fp32 follows
 * the CPU's run step for step, losses and grad norms (measured and clipped
 * on the device), and the clipping bites (max norm below the norms). */
static void test_cli_gpt_with_clip_on_cuda(void)
{
    if (!gpu() || !cli_setup())
        return;
    enum { STEPS = 6 };
    char text[256], lcpu[512], lcuda[512];
    cli_path(text, sizeof text, "tiny.txt");
    cli_write_tiny_text(text);
    cli_path(lcpu, sizeof lcpu, "gpt-cpu.jsonl");
    cli_path(lcuda, sizeof lcuda, "gpt-cuda.jsonl");
    char common[1024];
    snprintf(common, sizeof common,
             "train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 8 --steps %d "
             "--lr 0.01 --clip 0.05 --val-batches 2 --threads 2 --precision fp32",
             text, STEPS);
    int rc = cli_run("%s --device cpu --log %s", common, lcpu);
    CHECK_MSG(rc == 0, "gpt cpu run: exit %d:\n%s", rc, cli_out);
    rc = cli_run("%s --device cuda --log %s", common, lcuda);
    CHECK_MSG(rc == 0, "gpt cuda run: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("on cuda");
    CHECK_MSG(isfinite(cli_value_after("val_loss ")), "no val_loss:\n%s", cli_out);
    const char *keys[2] = {"loss", "grad_norm"};
    for (int k = 0; k < 2; k++) {
        double a[STEPS], b[STEPS];
        int na = log_field(lcpu, keys[k], a, NULL, STEPS), nb = log_field(lcuda, keys[k], b, NULL, STEPS);
        CHECK_EQ_INT(na, STEPS);
        CHECK_EQ_INT(nb, STEPS);
        for (int i = 0; i < na && i < nb; i++) {
            CHECK_MSG(isfinite(b[i]) && close_to(a[i], b[i], 1e-4), "gpt step %d: %s %.7g on cuda, %.7g on the cpu",
                      i + 1, keys[k], b[i], a[i]);
            if (k == 1)
                CHECK_MSG(b[i] > 0.05, "gpt step %d: grad norm %g is not above --clip 0.05", i + 1, b[i]);
        }
    }
}

int main(void)
{
    RUN(test_elementwise);
    RUN(test_unary);
    RUN(test_reductions_and_softmax);
    RUN(test_losses);
    RUN(test_layers_and_shapes);
    RUN(test_matmul_linear_attention);
    RUN(test_conv2d);
    RUN(test_pools);
    RUN(test_device_tensors);
    RUN(test_scaler_small_interval_sequence);
    RUN(test_scaler_no_floor);
    RUN(test_scaler_interval_one_with_a_skip);
    RUN(test_scaler_nonfinite_skips_and_keeps_state);
    RUN(test_mlp_training_follows_the_cpu);
    RUN(test_allocator_steady_state_and_autocast);
    RUN(test_training_steps_do_not_wait_for_the_gpu);
    RUN(test_gpt_on_cuda_matches_the_cpu);
    RUN(test_clip_grad_norm_matches_the_cpu);
    RUN(test_checkpoint_of_a_cuda_model);
    RUN(test_cli_trains_and_checkpoints_on_cuda);
    RUN(test_cli_gpt_with_clip_on_cuda);
    if (cli_ready)
        cli_cleanup();
    int rc = harness_done();
    /* Everything skipped for want of a GPU: CTest's "Skipped", not a pass. */
    return rc == 0 && !amp_cuda_available() ? 77 : rc;
}
