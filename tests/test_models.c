/*
 * test_models.c - the ready-made models: the MLP's and CNN's layers,
 * parameter names and counts, shapes and a training step; the GPT's
 * parameter names and counts, initialisation, a forward checked against a
 * hand-wired replica built from its named parameters (which also splits
 * the tied head's gradient into its two uses), finite-difference
 * gradients, causality, dropout in train / eval mode, learning a repeating
 * sequence, bf16 autocast, and the argument errors.
 */
#include "harness.h"

#include <stdlib.h>

/* The parameter of m called name (NULL with a test failure if none). */
static amp_tensor *param(const amp_module *m, const char *name)
{
    for (int i = 0; i < amp_module_num_params(m); i++) {
        const char *nm;
        amp_tensor *t = amp_module_param(m, i, &nm);
        if (t && strcmp(nm, name) == 0)
            return t;
    }
    harness_fail(__FILE__, __LINE__, "no parameter called %s", name);
    return NULL;
}

static int64_t count_numbers(const amp_module *m)
{
    int64_t n = 0;
    for (int i = 0; i < amp_module_num_params(m); i++)
        n += amp_tensor_numel(amp_module_param(m, i, NULL));
    return n;
}

static bool shape_is(const amp_tensor *t, amp_shape s)
{
    if (!t || amp_tensor_ndim(t) != s.ndim)
        return false;
    for (int i = 0; i < s.ndim; i++)
        if (amp_tensor_dim(t, i) != s.d[i])
            return false;
    return true;
}

static bool all_finite(const amp_tensor *t)
{
    if (!t)
        return false;
    for (int64_t i = 0; i < amp_tensor_numel(t); i++)
        if (!isfinite(amp_tensor_get(t, i)))
            return false;
    return true;
}

/* ------------------------------------------------------------------ mlp */

static void test_mlp_layers_names_and_shapes(void)
{
    const int64_t hidden[2] = {64, 32};
    amp_module *m = amp_model_mlp(784, hidden, 2, 10);
    CHECK(m && strcmp(amp_module_kind(m), "sequential") == 0);
    CHECK_EQ_INT(amp_module_num_params(m), 6);
    const char *names[6] = {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"};
    const amp_shape shapes[6] = {AMP_SHAPE(64, 784), AMP_SHAPE(64), AMP_SHAPE(32, 64),
                                 AMP_SHAPE(32),      AMP_SHAPE(10, 32), AMP_SHAPE(10)};
    for (int i = 0; i < 6; i++) {
        const char *nm = NULL;
        amp_tensor *p = amp_module_param(m, i, &nm);
        CHECK_MSG(nm && strcmp(nm, names[i]) == 0, "parameter %d is %s, expected %s", i, nm ? nm : "?", names[i]);
        CHECK(shape_is(p, shapes[i]));
    }
    CHECK_EQ_INT(count_numbers(m), 784 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10);
    amp_tensor *x = test_uniform(AMP_SHAPE(5, 784), AMP_F32, -1, 1, 1);
    amp_tensor *y = amp_module_forward(m, x);
    CHECK(shape_is(y, AMP_SHAPE(5, 10)));
    /* The first layer's ReLU: the hidden layer is built from amp_relu, so
     * the output equals the hand-wired composition. */
    amp_tensor *h = amp_relu(amp_linear(x, param(m, "0.weight"), param(m, "0.bias")));
    h = amp_relu(amp_linear(h, param(m, "2.weight"), param(m, "2.bias")));
    h = amp_linear(h, param(m, "4.weight"), param(m, "4.bias"));
    CHECK(max_abs_diff(h, y) == 0.0);
    /* No hidden layer: one linear. */
    amp_module *lin = amp_model_mlp(3, NULL, 0, 2);
    CHECK(lin && amp_module_num_params(lin) == 2);
    amp_module_free(lin);
    amp_tensor_free(x);
    amp_module_free(m);
    amp_temps_free();
}

static void test_mlp_errors_name_the_argument(void)
{
    const int64_t bad[3] = {8, 0, 4};
    CHECK(!amp_model_mlp(0, bad, 1, 10));
    CHECK_ERROR(AMP_ERR_ARG, "in 0");
    CHECK(!amp_model_mlp(4, bad, 3, 10));
    CHECK_ERROR(AMP_ERR_ARG, "hidden[1] = 0");
    CHECK(!amp_model_mlp(4, NULL, 2, 10));
    CHECK_ERROR(AMP_ERR_ARG, "hidden");
    CHECK(!amp_model_mlp(4, bad, 1, 0));
    CHECK_ERROR(AMP_ERR_ARG, "classes 0");
    CHECK(!amp_model_mlp(4, bad, -1, 3));
    CHECK_ERROR(AMP_ERR_ARG, "n_hidden");
}

/* ------------------------------------------------------------------ cnn */

static void test_cnn_layers_names_and_shapes(void)
{
    amp_module *m = amp_model_cnn(1, 28, 28, 10);
    CHECK(m != NULL);
    CHECK_EQ_INT(amp_module_num_params(m), 8);
    const char *names[8] = {"0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias", "9.weight", "9.bias"};
    const amp_shape shapes[8] = {AMP_SHAPE(32, 1, 3, 3), AMP_SHAPE(32), AMP_SHAPE(64, 32, 3, 3), AMP_SHAPE(64),
                                 AMP_SHAPE(128, 3136),   AMP_SHAPE(128), AMP_SHAPE(10, 128), AMP_SHAPE(10)};
    for (int i = 0; i < 8; i++) {
        const char *nm = NULL;
        amp_tensor *p = amp_module_param(m, i, &nm);
        CHECK_MSG(nm && strcmp(nm, names[i]) == 0, "parameter %d is %s, expected %s", i, nm ? nm : "?", names[i]);
        CHECK_MSG(shape_is(p, shapes[i]), "parameter %s has the wrong shape", names[i]);
    }
    CHECK_EQ_INT(count_numbers(m), 320 + 18496 + 401536 + 1290);
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 1, 28, 28), AMP_F32, 0, 1, 2);
    CHECK(shape_is(amp_module_forward(m, x), AMP_SHAPE(2, 10)));
    amp_tensor_free(x);
    amp_module_free(m);
    /* Not square, 3 channels: the classifier takes 64 * 2 * 3 features. */
    m = amp_model_cnn(3, 8, 12, 5);
    CHECK(m && shape_is(param(m, "7.weight"), AMP_SHAPE(128, 384)));
    x = test_uniform(AMP_SHAPE(1, 3, 8, 12), AMP_F32, 0, 1, 3);
    CHECK(shape_is(amp_module_forward(m, x), AMP_SHAPE(1, 5)));
    amp_tensor_free(x);
    amp_module_free(m);
    amp_temps_free();
}

/* A few SGD steps on one batch: every parameter gets a finite gradient
 * and the loss on that batch goes down. */
static void test_cnn_training_steps_lower_the_loss(void)
{
    amp_manual_seed(7);
    amp_module *m = amp_model_cnn(1, 28, 28, 10);
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 1, 28, 28), AMP_F32, 0, 1, 4);
    const int64_t labels[2] = {3, 8};
    amp_tensor *y = amp_from_data(AMP_SHAPE(2), AMP_I64, labels);
    amp_tensor *ps[8];
    CHECK_EQ_INT(amp_module_params(m, ps, 8), 8);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05;
    amp_optim *opt = amp_optim_sgd(ps, 8, so);
    double first = 0, last = 0;
    for (int step = 0; step < 5; step++) {
        amp_optim_zero_grad(opt);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, x), y);
        CHECK_OK(amp_backward(loss));
        if (step == 0)
            for (int i = 0; i < 8; i++)
                CHECK_MSG(all_finite(amp_tensor_grad(ps[i])), "parameter %d: no or non-finite gradient", i);
        CHECK_OK(amp_optim_step(opt));
        last = amp_item(loss);
        if (step == 0)
            first = last;
        amp_temps_free();
    }
    CHECK_MSG(last < first * 0.8, "loss %g -> %g", first, last);
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void test_cnn_errors_name_the_argument(void)
{
    CHECK(!amp_model_cnn(0, 28, 28, 10));
    CHECK_ERROR(AMP_ERR_ARG, "in_ch 0");
    CHECK(!amp_model_cnn(1, 30, 28, 10));
    CHECK_ERROR(AMP_ERR_ARG, "height 30");
    CHECK(!amp_model_cnn(1, 28, 0, 10));
    CHECK_ERROR(AMP_ERR_ARG, "width 0");
    CHECK(!amp_model_cnn(1, 28, 28, 0));
    CHECK_ERROR(AMP_ERR_ARG, "classes 0");
}

/* ------------------------------------------------------------------ gpt */

static const amp_gpt_config tiny = {.vocab = 7, .context = 8, .width = 8, .layers = 2, .heads = 2, .mlp = 16};

static int64_t gpt_numbers(amp_gpt_config c)
{
    int64_t W = c.width, M = c.mlp;
    return c.vocab * W + c.context * W + 2 * W + c.layers * (4 * W * W + 2 * W * M + 9 * W + M);
}

static void test_gpt_parameter_names_and_counts(void)
{
    amp_module *m = amp_model_gpt(tiny);
    CHECK(m && strcmp(amp_module_kind(m), "gpt") == 0);
    CHECK_EQ_INT(amp_module_num_params(m), 2 + 12 * 2 + 2);
    const char *sub[6] = {"ln_1", "attn.qkv", "attn.proj", "ln_2", "mlp.fc1", "mlp.fc2"};
    const amp_shape wshape[6] = {AMP_SHAPE(8), AMP_SHAPE(24, 8), AMP_SHAPE(8, 8), AMP_SHAPE(8), AMP_SHAPE(16, 8),
                                 AMP_SHAPE(8, 16)};
    const amp_shape bshape[6] = {AMP_SHAPE(8), AMP_SHAPE(24), AMP_SHAPE(8), AMP_SHAPE(8), AMP_SHAPE(16), AMP_SHAPE(8)};
    const char *nm = NULL;
    CHECK(shape_is(amp_module_param(m, 0, &nm), AMP_SHAPE(7, 8)) && strcmp(nm, "wte.weight") == 0);
    CHECK(shape_is(amp_module_param(m, 1, &nm), AMP_SHAPE(8, 8)) && strcmp(nm, "wpe.weight") == 0);
    int k = 2;
    for (int blk = 0; blk < 2; blk++)
        for (int j = 0; j < 6; j++)
            for (int wb = 0; wb < 2; wb++, k++) {
                char want[40];
                snprintf(want, sizeof want, "h.%d.%s.%s", blk, sub[j], wb ? "bias" : "weight");
                amp_tensor *p = amp_module_param(m, k, &nm);
                CHECK_MSG(nm && strcmp(nm, want) == 0, "parameter %d is %s, expected %s", k, nm ? nm : "?", want);
                CHECK_MSG(shape_is(p, wb ? bshape[j] : wshape[j]), "%s has the wrong shape", want);
            }
    CHECK(amp_module_param(m, k, &nm) && strcmp(nm, "ln_f.weight") == 0);
    CHECK(amp_module_param(m, k + 1, &nm) && strcmp(nm, "ln_f.bias") == 0);
    CHECK_EQ_INT(count_numbers(m), gpt_numbers(tiny));
    CHECK_EQ_INT(count_numbers(m), 56 + 64 + 16 + 2 * (256 + 256 + 72 + 16));
    amp_module_free(m);

    /* The benchmark's size (bench/ampc_step.c's gpt). */
    amp_gpt_config big = {.vocab = 96, .context = 128, .width = 256, .layers = 4, .heads = 4, .mlp = 1024};
    m = amp_model_gpt(big);
    CHECK(m != NULL);
    CHECK_EQ_INT(count_numbers(m), 3216896);
    CHECK_EQ_INT(count_numbers(m), gpt_numbers(big));
    amp_module_free(m);
}

/* Sample standard deviation and largest |value|. */
static double sample_std(const amp_tensor *t, double *maxabs)
{
    double s = 0, s2 = 0, mx = 0;
    int64_t n = amp_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = amp_tensor_get(t, i);
        s += v;
        s2 += v * v;
        mx = fabs(v) > mx ? fabs(v) : mx;
    }
    if (maxabs)
        *maxabs = mx;
    return sqrt((s2 - s * s / (double)n) / (double)(n - 1));
}

static void test_gpt_initialisation(void)
{
    amp_gpt_config c = {.vocab = 64, .context = 32, .width = 64, .layers = 8, .heads = 4, .mlp = 256};
    amp_manual_seed(3);
    amp_module *m = amp_model_gpt(c);
    CHECK(m != NULL);
    const double res = 0.02 / sqrt(16.0);
    const struct {
        const char *name;
        double std;
    } w[] = {{"wte.weight", 0.02},          {"wpe.weight", 0.02},          {"h.3.attn.qkv.weight", 0.02},
             {"h.6.attn.qkv.weight", 0.02}, {"h.5.mlp.fc1.weight", 0.02},  {"h.0.attn.proj.weight", res},
             {"h.7.mlp.fc2.weight", res}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        double s = sample_std(param(m, w[i].name), NULL);
        CHECK_MSG(fabs(s / w[i].std - 1) < 0.06, "%s: std %g, expected %g", w[i].name, s, w[i].std);
    }
    double mx;
    const char *zero[] = {"h.0.attn.qkv.bias", "h.2.attn.proj.bias", "h.6.mlp.fc1.bias", "h.7.mlp.fc2.bias",
                          "h.1.ln_1.bias",     "h.4.ln_2.bias",      "ln_f.bias"};
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) {
        sample_std(param(m, zero[i]), &mx);
        CHECK_MSG(mx == 0, "%s is not all zero", zero[i]);
    }
    const char *ones[] = {"h.0.ln_1.weight", "h.3.ln_2.weight", "ln_f.weight"};
    for (size_t i = 0; i < 3; i++) {
        double s = sample_std(param(m, ones[i]), &mx);
        CHECK_MSG(s == 0 && mx == 1, "%s is not all one", ones[i]);
    }
    /* Same seed, same model. */
    amp_manual_seed(3);
    amp_module *m2 = amp_model_gpt(c);
    for (int i = 0; m2 && i < amp_module_num_params(m); i++)
        CHECK(max_abs_diff(amp_module_param(m, i, NULL), amp_module_param(m2, i, NULL)) == 0);
    amp_module_free(m2);
    amp_module_free(m);
}

/* Indices [B, T] (i64) from a list. */
static amp_tensor *tokens(int64_t B, int64_t T, const int64_t *v) { return amp_from_data(AMP_SHAPE(B, T), AMP_I64, v); }

/* Re-draws every parameter of m uniformly in [-a, a] (LayerNorm weights
 * around 1), so that gradients are not tiny as at initialisation. */
static void scramble(amp_module *m, double a, uint64_t seed)
{
    for (int i = 0; i < amp_module_num_params(m); i++) {
        const char *nm;
        amp_tensor *p = amp_module_param(m, i, &nm);
        amp_tensor *r = test_uniform(amp_tensor_shape(p), AMP_F32, -a, a, seed + (uint64_t)i);
        float *d = amp_tensor_data(p);
        for (int64_t j = 0; j < amp_tensor_numel(p); j++)
            d[j] = (float)amp_tensor_get(r, j);
        amp_tensor_free(r);
    }
    for (int blk = 0; blk < 2; blk++)
        for (int ln = 0; ln < 2; ln++) {
            char name[32];
            snprintf(name, sizeof name, "h.%d.%s.weight", blk, ln ? "ln_2" : "ln_1");
            float *d = amp_tensor_data(param(m, name));
            for (int j = 0; j < 8; j++)
                d[j] += 1.0f;
        }
}

static void test_gpt_shapes_and_input_errors(void)
{
    amp_module *m = amp_model_gpt(tiny);
    const int64_t idx[10] = {1, 2, 3, 4, 5, 6, 0, 1, 2, 3};
    amp_tensor *x = tokens(2, 5, idx);
    amp_tensor *y = amp_module_forward(m, x);
    CHECK(shape_is(y, AMP_SHAPE(2, 5, 7)) && amp_tensor_dtype(y) == AMP_F32);
    const int32_t idx32[8] = {0, 1, 2, 3, 4, 5, 6, 0};
    amp_tensor *x32 = amp_from_data(AMP_SHAPE(1, 8), AMP_I32, idx32);
    CHECK(shape_is(amp_module_forward(m, x32), AMP_SHAPE(1, 8, 7))); /* T = context */
    amp_tensor *longer = amp_zeros(AMP_SHAPE(1, 9), AMP_I64);
    CHECK(!amp_module_forward(m, longer));
    CHECK_ERROR(AMP_ERR_SHAPE, "T = 9 tokens; 1 to context 8");
    amp_tensor *flt = amp_zeros(AMP_SHAPE(1, 4), AMP_F32);
    CHECK(!amp_module_forward(m, flt));
    CHECK_ERROR(AMP_ERR_DTYPE, "[1, 4] f32");
    amp_tensor *flat = amp_zeros(AMP_SHAPE(4), AMP_I64);
    CHECK(!amp_module_forward(m, flat));
    CHECK_ERROR(AMP_ERR_SHAPE, "[B, T]");
    const int64_t oob[2] = {3, 7};
    amp_tensor *bad = tokens(1, 2, oob);
    CHECK(!amp_module_forward(m, bad));
    CHECK_ERROR(AMP_ERR_ARG, "index 7");
    amp_tensor_free(x);
    amp_tensor_free(x32);
    amp_tensor_free(longer);
    amp_tensor_free(flt);
    amp_tensor_free(flat);
    amp_tensor_free(bad);
    amp_module_free(m);
    amp_temps_free();
}

static void test_gpt_config_errors_name_the_field(void)
{
    amp_gpt_config c = tiny;
    c.heads = 3;
    CHECK(!amp_model_gpt(c));
    CHECK_ERROR(AMP_ERR_ARG, "width 8 is not divisible by heads 3");
    c = tiny;
    c.vocab = 0;
    CHECK(!amp_model_gpt(c));
    CHECK_ERROR(AMP_ERR_ARG, "vocab 0");
    c = tiny;
    c.mlp = -1;
    CHECK(!amp_model_gpt(c));
    CHECK_ERROR(AMP_ERR_ARG, "mlp -1");
    c = tiny;
    c.dropout = 1.0;
    CHECK(!amp_model_gpt(c));
    CHECK_ERROR(AMP_ERR_ARG, "dropout 1");
    c = tiny;
    c.dropout = NAN;
    CHECK(!amp_model_gpt(c));
    CHECK_ERROR(AMP_ERR_ARG, "dropout");
}

/* The forward wired by hand from the named parameters (documented in
 * gpt.c), with the head reading head_w instead of wte; q, k and v as
 * three linears on the thirds of qkv's weight and bias (narrowed along
 * dim 0, not the fused output's last dim as the model does). */
static amp_tensor *replica(const amp_module *m, amp_tensor *idx, amp_tensor *head_w)
{
    static const int perm[4] = {0, 2, 1, 3};
    int64_t B = amp_tensor_dim(idx, 0), T = amp_tensor_dim(idx, 1);
    amp_tensor *pos = amp_arange(0, (double)T, 1, AMP_I64);
    amp_tensor *x = amp_add(amp_embedding(param(m, "wte.weight"), idx), amp_embedding(param(m, "wpe.weight"), pos));
    amp_tensor_free(pos);
    for (int blk = 0; blk < 2; blk++) {
        static const char *const sub[6] = {"ln_1", "attn.qkv", "attn.proj", "ln_2", "mlp.fc1", "mlp.fc2"};
        amp_tensor *p[6][2];
        for (int j = 0; j < 6; j++)
            for (int wb = 0; wb < 2; wb++) {
                char name[40];
                snprintf(name, sizeof name, "h.%d.%s.%s", blk, sub[j], wb ? "bias" : "weight");
                p[j][wb] = param(m, name);
            }
        amp_tensor *h = amp_layer_norm(x, 1, p[0][0], p[0][1], 1e-5);
        amp_tensor *qkv[3];
        for (int j = 0; j < 3; j++) {
            amp_tensor *w = amp_narrow(p[1][0], 0, 8 * j, 8), *b = amp_narrow(p[1][1], 0, 8 * j, 8);
            qkv[j] = amp_permute(amp_reshape(amp_linear(h, w, b), AMP_SHAPE(B, T, 2, 4)), perm);
        }
        amp_tensor *a = amp_attention(qkv[0], qkv[1], qkv[2], true);
        a = amp_reshape(amp_permute(a, perm), AMP_SHAPE(B, T, 8));
        x = amp_add(x, amp_linear(a, p[2][0], p[2][1]));
        h = amp_layer_norm(x, 1, p[3][0], p[3][1], 1e-5);
        h = amp_gelu(amp_linear(h, p[4][0], p[4][1]), AMP_GELU_TANH);
        x = amp_add(x, amp_linear(h, p[5][0], p[5][1]));
    }
    x = amp_layer_norm(x, 1, param(m, "ln_f.weight"), param(m, "ln_f.bias"), 1e-5);
    return amp_linear(x, head_w, NULL);
}

/* The model equals the replica; the replica with a separate copy of wte
 * in the head splits wte's gradient into its two uses, and the model's
 * gradient is their sum (both parts non-zero). */
static void test_gpt_matches_replica_and_tied_head_gets_both_gradients(void)
{
    amp_manual_seed(11);
    amp_module *m = amp_model_gpt(tiny);
    scramble(m, 0.5, 500);
    const int64_t idx[12] = {1, 2, 3, 1, 2, 3, 6, 5, 4, 3, 2, 1};
    const int64_t tgt[12] = {2, 3, 1, 2, 3, 1, 5, 4, 3, 2, 1, 0};
    amp_tensor *x = tokens(2, 6, idx), *y = amp_from_data(AMP_SHAPE(12), AMP_I64, tgt);
    amp_tensor *wte = param(m, "wte.weight");
    amp_tensor *head = amp_clone(wte);
    amp_tensor_set_requires_grad(head, true);

    amp_tensor *lm = amp_module_forward(m, x);
    amp_tensor *lr = replica(m, x, head);
    CHECK_MSG(max_abs_diff(lm, lr) == 0, "model and replica differ by %g", max_abs_diff(lm, lr));
    CHECK_OK(amp_backward(amp_cross_entropy(amp_reshape(lm, AMP_SHAPE(12, 7)), y)));
    amp_tensor *g_model = amp_clone(amp_tensor_grad(wte));
    amp_tensor_clear_grad(wte);
    CHECK_OK(amp_backward(amp_cross_entropy(amp_reshape(lr, AMP_SHAPE(12, 7)), y)));
    amp_tensor *g_emb = amp_tensor_grad(wte), *g_head = amp_tensor_grad(head);
    CHECK(g_emb && g_head && g_model);
    double emb_norm = 0, head_norm = 0, worst = 0;
    for (int64_t i = 0; g_emb && g_head && g_model && i < 56; i++) {
        double e = amp_tensor_get(g_emb, i), h = amp_tensor_get(g_head, i);
        emb_norm += e * e;
        head_norm += h * h;
        double d = fabs(amp_tensor_get(g_model, i) - (e + h));
        worst = d > worst ? d : worst;
        /* Token 0 is never an input: its row gets the head's part only. */
        if (i < 8)
            CHECK(e == 0);
    }
    CHECK_MSG(worst < 1e-6, "model gradient differs from embedding + head parts by %g", worst);
    CHECK(emb_norm > 1e-6 && head_norm > 1e-6);
    amp_tensor_free(g_model);
    amp_tensor_free(head);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_module_free(m);
    amp_temps_free();
}

typedef struct {
    amp_module *m;
    amp_tensor *x;
} gpt_ctx;

static amp_tensor *gpt_fn(amp_tensor **in, void *vc)
{
    (void)in; /* the parameters being checked are the model's own */
    gpt_ctx *c = vc;
    return amp_module_forward(c->m, c->x);
}

static void test_gpt_gradients_match_finite_differences(void)
{
    amp_manual_seed(12);
    amp_module *m = amp_model_gpt(tiny);
    scramble(m, 0.5, 900);
    const int64_t idx[12] = {0, 3, 6, 2, 5, 1, 4, 4, 2, 0, 6, 3};
    gpt_ctx c = {m, tokens(2, 6, idx)};
    const char *names[] = {"wte.weight",           "wpe.weight",      "h.0.ln_1.bias",    "h.0.attn.qkv.weight",
                           "h.0.attn.qkv.bias",    "h.0.attn.proj.weight", "h.1.ln_2.weight", "h.1.mlp.fc1.bias",
                           "h.1.mlp.fc2.weight",   "ln_f.weight"};
    enum { N = sizeof names / sizeof names[0] };
    amp_tensor *in[N];
    for (int i = 0; i < N; i++)
        in[i] = param(m, names[i]);
    CHECK(gradcheck("gpt parameters", gpt_fn, in, N, &c, 1e-2, 2e-3, 2e-2));
    amp_tensor_free(c.x);
    amp_module_free(m);
}

/* Changing the token at position t changes no logits before t. */
static void test_gpt_is_causal(void)
{
    amp_manual_seed(13);
    amp_module *m = amp_model_gpt(tiny);
    scramble(m, 0.5, 1300);
    int64_t idx[8] = {1, 4, 2, 6, 0, 3, 5, 2};
    amp_tensor *x1 = tokens(1, 8, idx);
    const int t = 4;
    idx[t] = 6;
    amp_tensor *x2 = tokens(1, 8, idx);
    amp_tensor *y1 = amp_module_forward(m, x1), *y2 = amp_module_forward(m, x2);
    CHECK(y1 && y2);
    for (int pos = 0; y1 && y2 && pos < 8; pos++) {
        double d = 0;
        for (int v = 0; v < 7; v++)
            d = fmax(d, fabs(amp_tensor_get(y1, pos * 7 + v) - amp_tensor_get(y2, pos * 7 + v)));
        if (pos < t)
            CHECK_MSG(d == 0, "logits at %d changed by %g", pos, d);
        else
            CHECK_MSG(d > 1e-4, "logits at %d did not change", pos);
    }
    amp_tensor_free(x1);
    amp_tensor_free(x2);
    amp_module_free(m);
    amp_temps_free();
}

static void test_gpt_dropout_only_in_training(void)
{
    amp_gpt_config c = tiny;
    c.dropout = 0.3;
    amp_manual_seed(14);
    amp_module *md = amp_model_gpt(c);
    amp_manual_seed(14);
    amp_module *m0 = amp_model_gpt(tiny); /* the same weights: dropout draws nothing at init */
    const int64_t idx[6] = {1, 2, 3, 4, 5, 6};
    amp_tensor *x = tokens(1, 6, idx);
    amp_tensor *ref = amp_module_forward(m0, x);
    amp_tensor *train = amp_module_forward(md, x);
    CHECK(max_abs_diff(ref, train) > 1e-4);
    amp_module_train(md, false);
    CHECK(max_abs_diff(ref, amp_module_forward(md, x)) == 0);
    amp_tensor_free(x);
    amp_module_free(md);
    amp_module_free(m0);
    amp_temps_free();
}

/* Next-token prediction on repeating sequences of period 5: rows cycle
 * through 0..4 or 2..6, so token 4 is followed by 0 or 5 depending on
 * which cycle the row is in (the model must look back), the rest by a
 * fixed successor. 100 AdamW steps drive the mean loss from about ln 7
 * to near 0. */
static double train_repeating(int steps, double *first)
{
    amp_gpt_config c = {.vocab = 7, .context = 16, .width = 32, .layers = 2, .heads = 4, .mlp = 64};
    amp_manual_seed(2024);
    amp_module *m = amp_model_gpt(c);
    const int64_t B = 4, T = 16;
    int64_t xi[64], yi[64];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            xi[b * T + t] = (b + t) % 5 + (b % 2) * 2; /* two alphabets of period 5 */
            yi[b * T + t] = (b + t + 1) % 5 + (b % 2) * 2;
        }
    amp_tensor *x = tokens(B, T, xi), *y = amp_from_data(AMP_SHAPE(B * T), AMP_I64, yi);
    int n = amp_module_num_params(m);
    amp_tensor **ps = malloc(sizeof *ps * (size_t)n);
    amp_module_params(m, ps, n);
    amp_adam_opts o = amp_adamw_defaults();
    o.lr = 1e-2;
    amp_optim *opt = amp_optim_adamw(ps, n, o);
    free(ps);
    double loss = NAN;
    for (int s = 0; s < steps; s++) {
        amp_optim_zero_grad(opt);
        amp_tensor *l = amp_cross_entropy(amp_reshape(amp_module_forward(m, x), AMP_SHAPE(B * T, 7)), y);
        if (amp_backward(l) != AMP_OK || amp_optim_step(opt) != AMP_OK) {
            harness_fail(__FILE__, __LINE__, "step %d: %s", s, amp_last_error());
            break;
        }
        loss = amp_item(l);
        if (s == 0)
            *first = loss;
        amp_temps_free();
    }
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return loss;
}

static void test_gpt_learns_a_repeating_sequence(void)
{
    double first = 0, first2 = 0;
    double last = train_repeating(100, &first);
    printf("  loss %.4f -> %.4f after 100 AdamW steps\n", first, last);
    CHECK_MSG(first > 1.5, "initial loss %g, expected about ln 7 = 1.95", first);
    CHECK_MSG(last < 0.1, "loss %g after 100 steps", last);
    /* Deterministic: the same run gives the same numbers. */
    double again = train_repeating(100, &first2);
    CHECK(again == last && first2 == first);
}

/* bf16 autocast: logits in bf16 close to f32's, a finite loss close to
 * f32's, and f32 gradients on the f32 parameters. */
static void test_gpt_bf16_autocast_close_to_f32(void)
{
    amp_gpt_config c = {.vocab = 11, .context = 16, .width = 32, .layers = 2, .heads = 4, .mlp = 64};
    amp_manual_seed(15);
    amp_module *m = amp_model_gpt(c);
    int64_t xi[32], yi[32];
    for (int i = 0; i < 32; i++) {
        xi[i] = (i * 5 + 3) % 11;
        yi[i] = (i * 7 + 1) % 11;
    }
    amp_tensor *x = tokens(2, 16, xi), *y = amp_from_data(AMP_SHAPE(32), AMP_I64, yi);
    amp_tensor *l32 = amp_module_forward(m, x);
    double loss32 = amp_item(amp_cross_entropy(amp_reshape(l32, AMP_SHAPE(32, 11)), y));
    double scale = 0;
    for (int64_t i = 0; i < amp_tensor_numel(l32); i++)
        scale = fmax(scale, fabs(amp_tensor_get(l32, i)));
    amp_tensor *l16 = NULL, *loss = NULL;
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
    l16 = amp_module_forward(m, x);
    loss = amp_cross_entropy(amp_reshape(l16, AMP_SHAPE(32, 11)), y);
    CHECK_OK(amp_autocast_end());
    CHECK(l16 && amp_tensor_dtype(l16) == AMP_BF16);
    CHECK(loss && amp_tensor_dtype(loss) == AMP_F32 && isfinite(amp_item(loss)));
    double d = max_abs_diff(l16, l32);
    printf("  max |logit| %.4f, bf16 vs f32 max diff %.5f; loss %.6f vs %.6f\n", scale, d,
           amp_item(loss), loss32);
    CHECK_MSG(d < 0.05 * scale + 1e-3, "bf16 logits differ from f32 by %g (scale %g)", d, scale);
    CHECK_NEAR(amp_item(loss), loss32, 0.02);
    CHECK_OK(amp_backward(loss));
    for (int i = 0; i < amp_module_num_params(m); i++) {
        const char *nm;
        amp_tensor *p = amp_module_param(m, i, &nm);
        amp_tensor *g = amp_tensor_grad(p);
        CHECK_MSG(g && amp_tensor_dtype(g) == AMP_F32 && all_finite(g), "%s: no finite f32 gradient", nm);
    }
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_module_free(m);
    amp_temps_free();
}

int main(void)
{
    RUN(test_mlp_layers_names_and_shapes);
    RUN(test_mlp_errors_name_the_argument);
    RUN(test_cnn_layers_names_and_shapes);
    RUN(test_cnn_training_steps_lower_the_loss);
    RUN(test_cnn_errors_name_the_argument);
    RUN(test_gpt_parameter_names_and_counts);
    RUN(test_gpt_initialisation);
    RUN(test_gpt_shapes_and_input_errors);
    RUN(test_gpt_config_errors_name_the_field);
    RUN(test_gpt_matches_replica_and_tied_head_gets_both_gradients);
    RUN(test_gpt_gradients_match_finite_differences);
    RUN(test_gpt_is_causal);
    RUN(test_gpt_dropout_only_in_training);
    RUN(test_gpt_learns_a_repeating_sequence);
    RUN(test_gpt_bf16_autocast_close_to_f32);
    return harness_done();
}
