/*
 * test_nn.c - modules: PyTorch's initialisation (bounds and statistics),
 * reproducibility from the seed, parameter names and order in nested
 * sequentials, forward shapes and values of every module, train/eval for
 * dropout, a short training run, and argument errors.
 */
#include "harness.h"

#include <stdlib.h>

/* Mean and standard deviation (population) of t's values, in double. */
static void moments(const amp_tensor *t, double *mean, double *std, double *lo, double *hi)
{
    int64_t n = amp_tensor_numel(t);
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = amp_tensor_get(t, i);
        s += v;
        s2 += v * v;
        *lo = fmin(*lo, v);
        *hi = fmax(*hi, v);
    }
    *mean = s / (double)n;
    *std = sqrt(fmax(s2 / (double)n - *mean * *mean, 0));
}

/* Checks U(-bound, bound): inside the bounds, reaching close to both,
 * mean ~0 and std ~bound/sqrt(3) (4.5 standard errors). */
static void check_uniform(const char *what, const amp_tensor *t, double bound)
{
    double mean, std, lo, hi;
    moments(t, &mean, &std, &lo, &hi);
    double n = (double)amp_tensor_numel(t), sd = bound / sqrt(3.0);
    CHECK_MSG(lo >= -bound && hi <= bound, "%s: values in [%g, %g], bound %g", what, lo, hi, bound);
    CHECK_MSG(lo < -0.95 * bound && hi > 0.95 * bound, "%s: [%g, %g] does not fill +-%g", what, lo, hi, bound);
    CHECK_MSG(fabs(mean) < 4.5 * sd / sqrt(n), "%s: mean %g", what, mean);
    /* The std of a sample std of U is about sd * 0.45 / sqrt(n). */
    CHECK_MSG(fabs(std - sd) < 4.5 * 0.45 * sd / sqrt(n) + 1e-9, "%s: std %g, want %g", what, std, sd);
}

static amp_tensor *param(const amp_module *m, int i, const char *want_name)
{
    const char *name = NULL;
    amp_tensor *p = amp_module_param(m, i, &name);
    CHECK_MSG(p && name && strcmp(name, want_name) == 0, "param %d: name %s, want %s", i, name ? name : "(null)",
              want_name);
    return p;
}

/* ------------------------------------------------------------------- init */

static void test_linear_init_is_kaiming_uniform(void)
{
    amp_manual_seed(1);
    amp_module *m = amp_nn_linear(400, 300, true);
    CHECK(m && strcmp(amp_module_kind(m), "linear") == 0);
    CHECK_EQ_INT(amp_module_num_params(m), 2);
    amp_tensor *w = param(m, 0, "weight"), *b = param(m, 1, "bias");
    CHECK(amp_tensor_ndim(w) == 2 && amp_tensor_dim(w, 0) == 300 && amp_tensor_dim(w, 1) == 400);
    CHECK(amp_tensor_ndim(b) == 1 && amp_tensor_dim(b, 0) == 300);
    check_uniform("linear weight", w, 1.0 / sqrt(400.0));
    check_uniform("linear bias", b, 1.0 / sqrt(400.0));
    for (int i = 0; i < 2; i++) {
        amp_tensor *p = amp_module_param(m, i, NULL);
        CHECK(amp_tensor_dtype(p) == AMP_F32 && amp_tensor_requires_grad(p) && amp_tensor_is_leaf(p));
    }
    amp_module_free(m);

    amp_module *nb = amp_nn_linear(3, 2, false);
    CHECK_EQ_INT(amp_module_num_params(nb), 1);
    param(nb, 0, "weight");
    amp_module_free(nb);
}

static void test_conv2d_init_uses_fan_in_of_kernel(void)
{
    amp_manual_seed(2);
    amp_module *m = amp_nn_conv2d(8, 64, 3, 1, 1, true);
    amp_tensor *w = param(m, 0, "weight"), *b = param(m, 1, "bias");
    amp_shape s = amp_tensor_shape(w);
    CHECK(s.ndim == 4 && s.d[0] == 64 && s.d[1] == 8 && s.d[2] == 3 && s.d[3] == 3);
    check_uniform("conv weight", w, 1.0 / sqrt(8 * 9.0)); /* fan_in = in_ch * k * k */
    double mean, std, lo, hi;
    moments(b, &mean, &std, &lo, &hi);
    CHECK(lo >= -1.0 / sqrt(72.0) && hi <= 1.0 / sqrt(72.0) && amp_tensor_numel(b) == 64);
    amp_module_free(m);
}

static void test_embedding_is_standard_normal_and_layer_norm_is_identity(void)
{
    amp_manual_seed(3);
    amp_module *e = amp_nn_embedding(1000, 64);
    amp_tensor *w = param(e, 0, "weight");
    CHECK(amp_tensor_dim(w, 0) == 1000 && amp_tensor_dim(w, 1) == 64);
    double mean, std, lo, hi;
    moments(w, &mean, &std, &lo, &hi);
    CHECK_NEAR(mean, 0, 4.5 / sqrt(64000.0));
    CHECK_NEAR(std, 1, 4.5 * 0.71 / sqrt(64000.0)); /* sd of a normal's sample sd ~ 1/sqrt(2n) */
    CHECK(lo < -3.5 && hi > 3.5);
    amp_module_free(e);

    amp_module *ln = amp_nn_layer_norm(7, 1e-5);
    CHECK_EQ_INT(amp_module_num_params(ln), 2);
    amp_tensor *g = param(ln, 0, "weight"), *b = param(ln, 1, "bias");
    for (int i = 0; i < 7; i++) {
        CHECK_NEAR(amp_tensor_get(g, i), 1, 0);
        CHECK_NEAR(amp_tensor_get(b, i), 0, 0);
    }
    amp_module_free(ln);
}

static amp_module *small_mlp(void)
{
    amp_module *s = amp_nn_sequential();
    amp_sequential_add(s, amp_nn_linear(5, 7, true));
    amp_sequential_add(s, amp_nn_tanh());
    amp_sequential_add(s, amp_nn_linear(7, 3, true));
    return s;
}

static void test_same_seed_gives_same_weights(void)
{
    amp_manual_seed(42);
    amp_module *a = small_mlp();
    amp_manual_seed(42);
    amp_module *b = small_mlp();
    amp_manual_seed(43);
    amp_module *c = small_mlp();
    int n = amp_module_num_params(a);
    CHECK_EQ_INT(n, 4);
    double diff_ab = 0, diff_ac = 0;
    for (int i = 0; i < n; i++) {
        diff_ab = fmax(diff_ab, max_abs_diff(amp_module_param(a, i, NULL), amp_module_param(b, i, NULL)));
        diff_ac = fmax(diff_ac, max_abs_diff(amp_module_param(a, i, NULL), amp_module_param(c, i, NULL)));
    }
    CHECK(diff_ab == 0);
    CHECK(diff_ac > 0);
    /* Weight and bias of one layer come from different draws. */
    CHECK(amp_tensor_get(amp_module_param(a, 0, NULL), 0) != amp_tensor_get(amp_module_param(a, 1, NULL), 0));
    amp_module_free(a);
    amp_module_free(b);
    amp_module_free(c);
}

/* ------------------------------------------------------------- parameters */

static void test_nested_sequential_names_and_order(void)
{
    amp_module *inner = amp_nn_sequential();
    CHECK_OK(amp_sequential_add(inner, amp_nn_linear(8, 8, false)));
    CHECK_OK(amp_sequential_add(inner, amp_nn_layer_norm(8, 1e-5)));
    amp_module *m = amp_nn_sequential();
    CHECK_OK(amp_sequential_add(m, amp_nn_linear(4, 8, true)));
    CHECK_OK(amp_sequential_add(m, amp_nn_relu()));
    CHECK_OK(amp_sequential_add(m, inner));
    CHECK_OK(amp_sequential_add(m, amp_nn_linear(8, 2, true)));
    CHECK(strcmp(amp_module_kind(m), "sequential") == 0);

    const char *want[] = {"0.weight", "0.bias", "2.0.weight", "2.1.weight", "2.1.bias", "3.weight", "3.bias"};
    const int64_t rows[] = {8, 8, 8, 8, 8, 2, 2};
    CHECK_EQ_INT(amp_module_num_params(m), 7);
    amp_tensor *all[7] = {0};
    CHECK_EQ_INT(amp_module_params(m, all, 7), 7);
    for (int i = 0; i < 7; i++) {
        amp_tensor *p = param(m, i, want[i]);
        CHECK(p == all[i]);
        CHECK_EQ_INT(amp_tensor_dim(p, 0), rows[i]);
    }
    /* Fewer slots than parameters: fills what fits, returns the count. */
    amp_tensor *two[2] = {0};
    CHECK_EQ_INT(amp_module_params(m, two, 2), 7);
    CHECK(two[0] == all[0] && two[1] == all[1]);
    CHECK_EQ_INT(amp_module_params(m, NULL, 0), 7);
    /* The inner container names relative to itself. */
    param(inner, 0, "0.weight");
    param(inner, 2, "1.bias");
    /* Growing a nested container renames the outer list. */
    CHECK_OK(amp_sequential_add(inner, amp_nn_linear(8, 8, true)));
    CHECK_EQ_INT(amp_module_num_params(m), 9);
    param(m, 5, "2.2.weight");
    param(m, 6, "2.2.bias");
    param(m, 7, "3.weight");
    CHECK(amp_module_param(m, 9, NULL) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "index 9 out of range");
    /* Parameter-free modules. */
    amp_module *r = amp_nn_relu();
    CHECK_EQ_INT(amp_module_num_params(r), 0);
    CHECK(amp_module_param(r, 0, NULL) == NULL);
    amp_clear_error();
    amp_module_free(r);
    amp_module_free(m);
}

/* ---------------------------------------------------------------- forward */

static bool shape_is(const amp_tensor *t, amp_shape want)
{
    if (!t || amp_tensor_ndim(t) != want.ndim)
        return false;
    for (int k = 0; k < want.ndim; k++)
        if (amp_tensor_dim(t, k) != want.d[k])
            return false;
    return true;
}

#define CHECK_SHAPE(t, want)                                                                          \
    do {                                                                                              \
        char a_[96], b_[96];                                                                          \
        const amp_tensor *t_ = (t);                                                                   \
        CHECK_MSG(shape_is(t_, want), "%s: got %s, want %s [%s]", #t,                                 \
                  t_ ? amp_shape_str(amp_tensor_shape(t_), a_, sizeof a_) : "NULL",                   \
                  amp_shape_str(want, b_, sizeof b_), amp_last_error());                              \
    } while (0)

static void test_linear_forward_is_xwt_plus_b(void)
{
    amp_manual_seed(5);
    amp_module *m = amp_nn_linear(4, 3, true);
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 4), AMP_F32, -1, 1, 9);
    amp_tensor *y = amp_module_forward(m, x);
    CHECK_SHAPE(y, AMP_SHAPE(2, 3));
    amp_tensor *w = amp_module_param(m, 0, NULL), *b = amp_module_param(m, 1, NULL);
    for (int i = 0; y && i < 2; i++)
        for (int o = 0; o < 3; o++) {
            double want = amp_tensor_get(b, o);
            for (int k = 0; k < 4; k++)
                want += amp_tensor_get(x, i * 4 + k) * amp_tensor_get(w, o * 4 + k);
            CHECK_NEAR(amp_tensor_get(y, i * 3 + o), want, 1e-5);
        }
    /* Leading dims pass through. */
    amp_tensor *x3 = amp_zeros(AMP_SHAPE(2, 5, 4), AMP_F32);
    amp_tensor *y3 = amp_module_forward(m, x3);
    CHECK_SHAPE(y3, AMP_SHAPE(2, 5, 3));
    if (y3)
        CHECK_NEAR(amp_tensor_get(y3, 4), amp_tensor_get(b, 1), 1e-7); /* zeros in: the bias */
    amp_tensor_free(x);
    amp_tensor_free(x3);
    amp_temps_free();
    amp_module_free(m);
}

static void test_forward_shapes_of_every_module(void)
{
    amp_manual_seed(6);
    amp_tensor *img = test_uniform(AMP_SHAPE(2, 3, 8, 8), AMP_F32, -1, 1, 1);

    amp_module *c1 = amp_nn_conv2d(3, 16, 3, 1, 1, true);
    CHECK_SHAPE(amp_module_forward(c1, img), AMP_SHAPE(2, 16, 8, 8));
    amp_module *c2 = amp_nn_conv2d(3, 4, 3, 2, 0, false);
    CHECK_SHAPE(amp_module_forward(c2, img), AMP_SHAPE(2, 4, 3, 3));

    amp_module *mp = amp_nn_max_pool2d(2, 0), *ap = amp_nn_avg_pool2d(2, 1);
    CHECK_SHAPE(amp_module_forward(mp, img), AMP_SHAPE(2, 3, 4, 4));
    CHECK_SHAPE(amp_module_forward(ap, img), AMP_SHAPE(2, 3, 7, 7));
    amp_tensor *pooled = amp_module_forward(mp, img);
    if (pooled) { /* max over the first 2x2 window */
        double want = -INFINITY;
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++)
                want = fmax(want, amp_tensor_get(img, r * 8 + c));
        CHECK_NEAR(amp_tensor_get(pooled, 0), want, 0);
    }
    amp_tensor *avg = amp_module_forward(ap, img);
    if (avg) /* window at (0, 1): stride 1 */
        CHECK_NEAR(amp_tensor_get(avg, 1),
                   (amp_tensor_get(img, 1) + amp_tensor_get(img, 2) + amp_tensor_get(img, 9) +
                    amp_tensor_get(img, 10)) / 4,
                   1e-6);

    amp_module *fl = amp_nn_flatten();
    CHECK_SHAPE(amp_module_forward(fl, img), AMP_SHAPE(2, 192));

    amp_tensor *x = test_uniform(AMP_SHAPE(5, 8), AMP_F32, -3, 3, 2);
    amp_module *ln = amp_nn_layer_norm(8, 1e-5);
    amp_tensor *y = amp_module_forward(ln, x);
    CHECK_SHAPE(y, AMP_SHAPE(5, 8));
    if (y) { /* weight 1, bias 0: each row has mean 0 and variance ~1 */
        double s = 0, s2 = 0;
        for (int k = 0; k < 8; k++) {
            s += amp_tensor_get(y, 8 + k);
            s2 += pow(amp_tensor_get(y, 8 + k), 2);
        }
        CHECK_NEAR(s / 8, 0, 1e-5);
        CHECK_NEAR(s2 / 8, 1, 1e-3);
    }

    int64_t idx[6] = {0, 9, 3, 3, 1, 0};
    amp_tensor *ids = amp_from_data(AMP_SHAPE(2, 3), AMP_I64, idx);
    amp_module *em = amp_nn_embedding(10, 4);
    amp_tensor *e = amp_module_forward(em, ids);
    CHECK_SHAPE(e, AMP_SHAPE(2, 3, 4));
    if (e) /* row 9 of the table */
        CHECK_NEAR(amp_tensor_get(e, 4 + 2), amp_tensor_get(amp_module_param(em, 0, NULL), 9 * 4 + 2), 0);

    float v[4] = {-2.0f, -0.5f, 0.0f, 1.5f};
    amp_tensor *a = amp_from_data(AMP_SHAPE(4), AMP_F32, v);
    amp_module *re = amp_nn_relu(), *th = amp_nn_tanh(), *ge = amp_nn_gelu(AMP_GELU_EXACT),
               *gt = amp_nn_gelu(AMP_GELU_TANH);
    amp_tensor *ra = amp_module_forward(re, a), *ta = amp_module_forward(th, a), *ga = amp_module_forward(ge, a),
               *gta = amp_module_forward(gt, a);
    CHECK_SHAPE(ra, AMP_SHAPE(4));
    CHECK_SHAPE(ta, AMP_SHAPE(4));
    CHECK_SHAPE(ga, AMP_SHAPE(4));
    CHECK_SHAPE(gta, AMP_SHAPE(4));
    for (int i = 0; ra && ta && ga && gta && i < 4; i++) {
        double xv = v[i];
        CHECK_NEAR(amp_tensor_get(ra, i), xv > 0 ? xv : 0, 0);
        CHECK_NEAR(amp_tensor_get(ta, i), tanh(xv), 1e-6);
        CHECK_NEAR(amp_tensor_get(ga, i), 0.5 * xv * (1 + erf(xv / sqrt(2.0))), 1e-6);
        CHECK_NEAR(amp_tensor_get(gta, i),
                   0.5 * xv * (1 + tanh(sqrt(2 / M_PI) * (xv + 0.044715 * xv * xv * xv))), 1e-6);
    }

    amp_module *mods[] = {c1, c2, mp, ap, fl, ln, em, re, th, ge, gt};
    for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++)
        amp_module_free(mods[i]);
    amp_tensor_free(img);
    amp_tensor_free(x);
    amp_tensor_free(ids);
    amp_tensor_free(a);
    amp_temps_free();
}

static void test_sequential_cnn_runs_children_in_order(void)
{
    amp_manual_seed(7);
    amp_module *m = amp_nn_sequential();
    amp_sequential_add(m, amp_nn_conv2d(1, 4, 3, 1, 1, true));
    amp_sequential_add(m, amp_nn_relu());
    amp_sequential_add(m, amp_nn_max_pool2d(2, 2));
    amp_sequential_add(m, amp_nn_flatten());
    amp_sequential_add(m, amp_nn_dropout(0.25));
    amp_sequential_add(m, amp_nn_linear(4 * 4 * 4, 10, true));
    CHECK_EQ_INT(amp_module_num_params(m), 4);
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 1, 8, 8), AMP_F32, 0, 1, 3);
    CHECK_SHAPE(amp_module_forward(m, x), AMP_SHAPE(3, 10));
    /* An empty sequential is the identity (as PyTorch's). */
    amp_module *id = amp_nn_sequential();
    CHECK(amp_module_forward(id, x) == x);
    amp_module_free(id);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_temps_free();
}

/* ---------------------------------------------------------------- dropout */

static void test_dropout_follows_train_and_eval(void)
{
    amp_manual_seed(8);
    amp_module *inner = amp_nn_sequential();
    amp_sequential_add(inner, amp_nn_dropout(0.5));
    amp_module *m = amp_nn_sequential();
    amp_sequential_add(m, amp_nn_relu());
    amp_sequential_add(m, inner);
    amp_tensor *x = amp_ones(AMP_SHAPE(4000), AMP_F32);

    /* Training (the default): about half zeroed, the rest scaled by 2. */
    amp_tensor *y = amp_module_forward(m, x);
    CHECK(y != NULL);
    int zeros = 0, twos = 0;
    for (int i = 0; y && i < 4000; i++) {
        double v = amp_tensor_get(y, i);
        zeros += v == 0;
        twos += v == 2;
    }
    CHECK_EQ_INT(zeros + twos, 4000);
    CHECK_MSG(abs(zeros - 2000) < 5 * 32, "zeros %d of 4000", zeros); /* sd sqrt(1000) ~ 32 */

    /* Eval: the identity, also for the nested dropout. */
    amp_module_train(m, false);
    y = amp_module_forward(m, x);
    CHECK(y && max_abs_diff(y, x) == 0);

    amp_module_train(m, true);
    y = amp_module_forward(m, x);
    CHECK(y && max_abs_diff(y, x) > 0);

    /* A module added to a container in eval mode keeps its own mode until
     * the container is switched again (as PyTorch's add_module). */
    amp_module_train(m, false);
    amp_module *late = amp_nn_dropout(0.5);
    CHECK_OK(amp_sequential_add(m, late));
    y = amp_module_forward(m, x);
    CHECK(y && max_abs_diff(y, x) > 0);
    amp_module_train(m, false);
    y = amp_module_forward(m, x);
    CHECK(y && max_abs_diff(y, x) == 0);

    /* p = 0 is the identity even in training. */
    amp_module *d0 = amp_nn_dropout(0);
    y = amp_module_forward(d0, x);
    CHECK(y && max_abs_diff(y, x) == 0);
    amp_module_free(d0);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_temps_free();
}

/* --------------------------------------------------------------- training */

static void test_mlp_trains_with_backward_and_adam(void)
{
    amp_manual_seed(9);
    amp_module *m = amp_nn_sequential();
    amp_sequential_add(m, amp_nn_linear(2, 16, true));
    amp_sequential_add(m, amp_nn_tanh());
    amp_sequential_add(m, amp_nn_linear(16, 1, true));
    amp_tensor *ps[4];
    CHECK_EQ_INT(amp_module_params(m, ps, 4), 4);
    amp_adam_opts ao = amp_adam_defaults();
    ao.lr = 0.02;
    amp_optim *o = amp_optim_adam(ps, 4, ao);
    /* y = x0 * x1 on 32 fixed points. */
    amp_tensor *x = test_uniform(AMP_SHAPE(32, 2), AMP_F32, -1, 1, 4);
    float t[32];
    for (int i = 0; i < 32; i++)
        t[i] = (float)(amp_tensor_get(x, 2 * i) * amp_tensor_get(x, 2 * i + 1));
    amp_tensor *target = amp_from_data(AMP_SHAPE(32, 1), AMP_F32, t);
    double first = NAN, last = NAN;
    for (int step = 0; step < 150; step++) {
        amp_optim_zero_grad(o);
        amp_tensor *loss = amp_mse_loss(amp_module_forward(m, x), target);
        if (!loss)
            break;
        last = amp_item(loss);
        if (step == 0)
            first = last;
        CHECK_OK(amp_backward(loss));
        if (step == 0)
            for (int i = 0; i < 4; i++) {
                amp_tensor *g = amp_tensor_grad(ps[i]);
                CHECK(g && amp_tensor_numel(g) == amp_tensor_numel(ps[i]));
            }
        CHECK_OK(amp_optim_step(o));
        amp_temps_free();
    }
    CHECK_MSG(last < 0.2 * first, "loss %g -> %g", first, last);
    amp_optim_free(o);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(target);
    amp_temps_free();
}

/* ----------------------------------------------------------------- errors */

static void test_constructor_errors_name_module_and_argument(void)
{
    CHECK(amp_nn_linear(0, 3, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_linear: in_features 0");
    CHECK(amp_nn_linear(3, -1, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "out_features -1");
    CHECK(amp_nn_conv2d(3, 0, 3, 1, 0, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_conv2d: in_ch 3 and out_ch 0");
    CHECK(amp_nn_conv2d(3, 4, 0, 1, 0, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_conv2d: kernel 0");
    CHECK(amp_nn_conv2d(3, 4, 3, 0, 0, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "stride 0");
    CHECK(amp_nn_conv2d(3, 4, 3, 1, -1, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "padding -1");
    CHECK(amp_nn_layer_norm(0, 1e-5) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_layer_norm: dim 0");
    CHECK(amp_nn_layer_norm(4, -1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_layer_norm: eps -1");
    CHECK(amp_nn_embedding(0, 4) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_embedding: num 0");
    CHECK(amp_nn_dropout(1.5) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_dropout: probability p 1.5");
    CHECK(amp_nn_dropout(-0.1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "p -0.1");
    CHECK(amp_nn_dropout(NAN) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "p nan");
    CHECK(amp_nn_max_pool2d(0, 0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_max_pool2d: kernel 0");
    CHECK(amp_nn_avg_pool2d(2, -1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_avg_pool2d: kernel 2 must be >= 1 and stride -1");
    CHECK(amp_nn_gelu((amp_gelu_approx)5) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "nn_gelu: unknown approximation 5");
    amp_module *d1 = amp_nn_dropout(1.0), *d0 = amp_nn_dropout(0.0);
    CHECK(d1 && d0); /* both ends of [0, 1] are allowed */
    amp_module_free(d1);
    amp_module_free(d0);
}

static void test_sequential_add_ownership_and_errors(void)
{
    amp_module *s = amp_nn_sequential();
    /* A failed constructor: its error is kept. */
    CHECK(amp_sequential_add(s, amp_nn_linear(0, 1, true)) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "nn_linear");
    CHECK(amp_sequential_add(s, NULL) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "sequential_add: NULL child");
    /* Not a container: the child is freed (ASan would report a leak). */
    amp_module *lin = amp_nn_linear(2, 2, true);
    CHECK(amp_sequential_add(lin, amp_nn_relu()) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "linear is not a sequential (child relu freed)");
    CHECK(amp_sequential_add(NULL, amp_nn_linear(3, 3, true)) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "NULL container");
    /* Adding the same child twice, or a container to itself, is refused
     * and changes nothing. */
    CHECK_OK(amp_sequential_add(s, lin));
    CHECK(amp_sequential_add(s, lin) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "already belongs to a sequential");
    CHECK(amp_sequential_add(s, s) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "cycle");
    amp_module *inner = amp_nn_sequential();
    CHECK_OK(amp_sequential_add(s, inner));
    CHECK(amp_sequential_add(inner, s) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "cycle");
    CHECK_EQ_INT(amp_module_num_params(s), 2);
    /* A child cannot be freed on its own while its container owns it. */
    amp_module_free(lin);
    CHECK_ERROR(AMP_ERR_STATE, "free the container instead");
    CHECK_EQ_INT(amp_module_num_params(s), 2);
    amp_module_free(s);
    amp_module_free(NULL);
}

static void test_forward_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 5), AMP_F32);
    CHECK(amp_module_forward(NULL, x) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "module_forward: NULL module");
    amp_module *s = amp_nn_sequential();
    amp_sequential_add(s, amp_nn_relu());
    amp_sequential_add(s, amp_nn_linear(4, 3, true)); /* x has 5 features */
    CHECK(amp_module_forward(s, x) == NULL);
    CHECK_MSG(amp_last_status() == AMP_ERR_SHAPE && strstr(amp_last_error(), "sequential[1] (linear): "),
              "got %d \"%s\"", (int)amp_last_status(), amp_last_error());
    amp_clear_error();
    /* A NULL input keeps the error that made it (no "sequential" prefix). */
    amp_tensor *bad = amp_reshape(x, AMP_SHAPE(7));
    CHECK(bad == NULL);
    amp_status st = amp_last_status();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    CHECK(amp_module_forward(s, bad) == NULL);
    CHECK(amp_last_status() == st && strcmp(amp_last_error(), msg) == 0);
    amp_clear_error();
    amp_module *fl = amp_nn_flatten();
    amp_tensor *v = amp_zeros(AMP_SHAPE(6), AMP_F32);
    CHECK(amp_module_forward(fl, v) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "flatten: input [6] f32 needs at least 2 dims");
    CHECK(amp_module_num_params(NULL) == 0);
    CHECK_ERROR(AMP_ERR_ARG, "NULL module");
    CHECK(amp_module_kind(NULL) == NULL);
    amp_module_train(NULL, true);
    amp_module_free(fl);
    amp_module_free(s);
    amp_tensor_free(x);
    amp_tensor_free(v);
    amp_temps_free();
}

int main(void)
{
    RUN(test_linear_init_is_kaiming_uniform);
    RUN(test_conv2d_init_uses_fan_in_of_kernel);
    RUN(test_embedding_is_standard_normal_and_layer_norm_is_identity);
    RUN(test_same_seed_gives_same_weights);
    RUN(test_nested_sequential_names_and_order);
    RUN(test_linear_forward_is_xwt_plus_b);
    RUN(test_forward_shapes_of_every_module);
    RUN(test_sequential_cnn_runs_children_in_order);
    RUN(test_dropout_follows_train_and_eval);
    RUN(test_mlp_trains_with_backward_and_adam);
    RUN(test_constructor_errors_name_module_and_argument);
    RUN(test_sequential_add_ownership_and_errors);
    RUN(test_forward_errors);
    return harness_done();
}
