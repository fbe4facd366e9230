/*
 * test_checkpoint_activations.c - activation checkpointing (amp_checkpoint
 * and the GPT's checkpoint_activations): gradients, losses, updated
 * parameters and the RNG stream bit-identical to the run without it, in
 * fp32 and under bf16 and fp16 autocast with the grad scaler and dropout;
 * a function of two inputs and a parameter; nesting; what is kept; the
 * errors. On CUDA too when there is a device (cudaemu: ctest -L cuda).
 */
#include "harness.h"

#include <stdlib.h>

/* ------------------------------------------------------------ helpers */

/* t's values as f32 (exact for every float dtype), malloc'd. */
static float *values(const amp_tensor *t)
{
    int64_t n = amp_tensor_numel(t);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (v && amp_tensor_copy_out(t, v, AMP_F32) != AMP_OK) {
        free(v);
        return NULL;
    }
    return v;
}

/* Whether a and b hold the same values, bit for bit (both NULL counts). */
static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    if (!a || !b)
        return a == b;
    if (amp_tensor_numel(a) != amp_tensor_numel(b) || amp_tensor_dtype(a) != amp_tensor_dtype(b))
        return false;
    float *x = values(a), *y = values(b);
    bool same = x && y && memcmp(x, y, (size_t)amp_tensor_numel(a) * sizeof *x) == 0;
    free(x);
    free(y);
    return same;
}

static amp_tensor *leaf(amp_shape s, double std)
{
    amp_tensor *t = amp_randn(s, AMP_F32, 0.0, std);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

/* ---------------------------------------------------------------- gpt */

enum { VOCAB = 17, CONTEXT = 12, BATCH = 3, STEPS = 2, MICRO = 2, MAX_PARAMS = 64 };

typedef struct {
    int n;
    amp_tensor *grad[MAX_PARAMS];  /* copies of the last step's gradients */
    amp_tensor *param[MAX_PARAMS]; /* copies of the parameters after it */
    float loss[STEPS * MICRO];
    amp_rng_state rng;
    size_t temps_after_forward;
} gpt_run;

static amp_tensor *copy_of(const amp_tensor *t)
{
    if (!t)
        return NULL;
    float *v = values(t);
    amp_tensor *c = v ? amp_from_data(amp_tensor_shape(t), AMP_F32, v) : NULL;
    free(v);
    return c;
}

/* Token b*T + t of micro-batch k, and its target: a fixed pattern. */
static void tokens(int k, int32_t *idx, int32_t *tgt)
{
    for (int i = 0; i < BATCH * CONTEXT; i++) {
        idx[i] = (int32_t)((i * 7 + k * 5 + i / 3) % VOCAB);
        tgt[i] = (int32_t)((i * 3 + k + 1) % VOCAB);
    }
}

/* STEPS optimizer steps of MICRO micro-batches each (gradient
 * accumulation) on a small gpt with dropout, precision prec (AMP_F32: no
 * autocast), through the grad scaler; with or without checkpointing. */
static void run_gpt(bool checkpoint, amp_dtype prec, amp_device dev, gpt_run *r)
{
    memset(r, 0, sizeof *r);
    amp_manual_seed(1234);
    amp_gpt_config c = {.vocab = VOCAB, .context = CONTEXT, .width = 16, .layers = 3, .heads = 2, .mlp = 32,
                        .dropout = 0.25, .checkpoint_activations = checkpoint};
    amp_module *m = amp_model_gpt(c);
    CHECK(m);
    if (!m)
        return;
    CHECK_OK(amp_module_to(m, dev));
    amp_tensor *params[MAX_PARAMS];
    r->n = amp_module_params(m, params, MAX_PARAMS);
    amp_optim *o = amp_optim_adamw(params, r->n, amp_adamw_defaults());
    amp_scaler_opts so = amp_scaler_defaults();
    so.init_scale = 1024;
    amp_scaler *s = amp_scaler_new(so);
    CHECK(o && s);
    for (int step = 0; step < STEPS; step++) {
        amp_optim_zero_grad(o);
        for (int k = 0; k < MICRO; k++) {
            int32_t idx[BATCH * CONTEXT], tgt[BATCH * CONTEXT];
            tokens(step * MICRO + k, idx, tgt);
            amp_tensor *hx = amp_from_data(AMP_SHAPE(BATCH, CONTEXT), AMP_I32, idx);
            amp_tensor *hy = amp_from_data(AMP_SHAPE(BATCH * CONTEXT), AMP_I32, tgt);
            amp_tensor *x = amp_to_device(hx, dev), *y = amp_to_device(hy, dev);
            amp_tensor_free(hx);
            amp_tensor_free(hy);
            if (prec != AMP_F32)
                CHECK_OK(amp_autocast_begin(dev, prec));
            amp_tensor *logits = amp_module_forward(m, x);
            if (step == 0 && k == 0)
                r->temps_after_forward = amp_temps_count();
            amp_tensor *loss = amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(BATCH * CONTEXT, VOCAB)), y);
            if (prec != AMP_F32)
                CHECK_OK(amp_autocast_end());
            CHECK(loss);
            r->loss[step * MICRO + k] = loss ? (float)amp_item(loss) : NAN;
            CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
            amp_temps_free();
            amp_tensor_free(x);
            amp_tensor_free(y);
        }
        if (step == STEPS - 1)
            for (int i = 0; i < r->n; i++)
                r->grad[i] = copy_of(amp_tensor_grad(params[i]));
        bool skipped = true;
        CHECK_OK(amp_scaler_step(s, o, &skipped));
        CHECK(!skipped);
        CHECK_OK(amp_scaler_update(s));
    }
    for (int i = 0; i < r->n; i++)
        r->param[i] = copy_of(params[i]);
    r->rng = amp_rng_get_state();
    amp_scaler_free(s);
    amp_optim_free(o);
    amp_module_free(m);
}

static void gpt_run_free(gpt_run *r)
{
    for (int i = 0; i < r->n; i++) {
        amp_tensor_free(r->grad[i]);
        amp_tensor_free(r->param[i]);
    }
}

static void check_gpt_bit_identical(amp_dtype prec, amp_device dev)
{
    gpt_run plain, ckpt;
    run_gpt(false, prec, dev, &plain);
    run_gpt(true, prec, dev, &ckpt);
    CHECK_EQ_INT(ckpt.n, plain.n);
    CHECK(plain.n == 2 + 12 * 3 + 2);
    for (int i = 0; i < STEPS * MICRO; i++)
        CHECK_MSG(memcmp(&plain.loss[i], &ckpt.loss[i], sizeof(float)) == 0,
                  "%s: loss %d: %.9g without checkpointing, %.9g with", amp_dtype_name(prec), i,
                  (double)plain.loss[i], (double)ckpt.loss[i]);
    for (int i = 0; i < plain.n && i < ckpt.n; i++) {
        CHECK_MSG(plain.grad[i] && same_bits(plain.grad[i], ckpt.grad[i]), "%s: gradient of parameter %d differs",
                  amp_dtype_name(prec), i);
        CHECK_MSG(same_bits(plain.param[i], ckpt.param[i]), "%s: parameter %d after the steps differs",
                  amp_dtype_name(prec), i);
    }
    /* The generator went on as without checkpointing: the recompute
     * replayed the forward's draws and put the state back. */
    CHECK(plain.rng.seed == ckpt.rng.seed && plain.rng.offset == ckpt.rng.offset && plain.rng.offset > 0);
    /* Checkpointed blocks leave only their results in the pool: per block
     * (some 12 ops each here) one temporary. */
    CHECK_MSG(ckpt.temps_after_forward + 3 * 10 < plain.temps_after_forward,
              "temporaries after the forward: %zu with checkpointing, %zu without", ckpt.temps_after_forward,
              plain.temps_after_forward);
    gpt_run_free(&plain);
    gpt_run_free(&ckpt);
}

static void test_gpt_fp32_bit_identical(void) { check_gpt_bit_identical(AMP_F32, AMP_CPU); }
static void test_gpt_bf16_bit_identical(void) { check_gpt_bit_identical(AMP_BF16, AMP_CPU); }
static void test_gpt_fp16_bit_identical(void) { check_gpt_bit_identical(AMP_F16, AMP_CPU); }

/* The same on a GPU (cudaemu in CI's test-cuda-emu), fp16 with the scaler
 * and fp32: dropout's masks come from the same generator there. */
static void test_gpt_cuda_bit_identical(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    check_gpt_bit_identical(AMP_F16, AMP_CUDA);
    check_gpt_bit_identical(AMP_F32, AMP_CUDA);
}

/* Less memory at the end of the forward (the step's peak without
 * checkpointing is at the end of backward's start). */
static void test_gpt_keeps_less(void)
{
    size_t held[2];
    for (int ck = 0; ck < 2; ck++) {
        amp_manual_seed(7);
        amp_gpt_config c = {.vocab = VOCAB, .context = CONTEXT, .width = 32, .layers = 4, .heads = 2, .mlp = 128};
        amp_module *m = amp_model_gpt(c);
        CHECK_OK(amp_gpt_set_checkpointing(m, ck == 1));
        int32_t idx[BATCH * CONTEXT], tgt[BATCH * CONTEXT];
        tokens(0, idx, tgt);
        amp_tensor *x = amp_from_data(AMP_SHAPE(BATCH, CONTEXT), AMP_I32, idx);
        size_t before = amp_memory_get_stats().current;
        amp_tensor *logits = amp_module_forward(m, x);
        CHECK(logits);
        held[ck] = amp_memory_get_stats().current - before;
        CHECK_OK(amp_backward(amp_sum_all(logits)));
        amp_temps_free();
        amp_tensor_free(x);
        amp_module_free(m);
    }
    /* Without: per block some 12 [B, T, width]-sized tensors and a
     * [B, T, mlp] one or two; with: one [B, T, width] per block. */
    CHECK_MSG(held[1] * 3 < held[0], "after the forward: %zu bytes held with checkpointing, %zu without", held[1],
              held[0]);
    {
        amp_module *mlp = amp_model_mlp(4, (const int64_t[]){8}, 1, 2);
        CHECK(amp_gpt_set_checkpointing(mlp, true) == AMP_ERR_ARG);
        CHECK_ERROR(AMP_ERR_ARG, "not a gpt model");
        CHECK(amp_gpt_set_checkpointing(NULL, true) == AMP_ERR_ARG);
        CHECK_ERROR(AMP_ERR_ARG, "not a gpt model");
        amp_module_free(mlp);
    }
}

/* ------------------------------------------------------- custom fn */

typedef struct {
    amp_tensor *w;  /* a parameter the function reads */
    double p;       /* dropout */
    int calls;
    int fail_at;    /* call number that fails (0: none) */
    int reshape_at; /* call number whose result has another shape */
} two_ctx;

/* linear(dropout(tanh(a) * b), w) + a */
static amp_tensor *two_fn(void *vctx, amp_tensor *const *in, int n)
{
    two_ctx *c = vctx;
    CHECK_EQ_INT(n, 2);
    c->calls++;
    if (c->calls == c->fail_at) /* an op fails: its error is the one kept */
        return amp_reshape(in[0], AMP_SHAPE(1000));
    amp_tensor *h = amp_dropout(amp_mul(amp_tanh(in[0]), in[1]), c->p, true);
    amp_tensor *y = amp_add(amp_linear(h, c->w, NULL), in[0]);
    return c->calls == c->reshape_at ? amp_reshape(y, AMP_SHAPE(-1)) : y;
}

static void test_two_inputs_and_a_parameter(void)
{
    amp_manual_seed(3);
    amp_tensor *a = leaf(AMP_SHAPE(5, 6), 1.0), *b = leaf(AMP_SHAPE(5, 6), 1.0), *w = leaf(AMP_SHAPE(6, 6), 0.5);
    amp_tensor *g[2][3] = {{0}};
    amp_rng_state after[2];
    for (int ck = 0; ck < 2; ck++) {
        amp_manual_seed(99);
        two_ctx c = {.w = w, .p = 0.3};
        amp_tensor *in[2] = {a, b};
        amp_tensor *y = ck ? amp_checkpoint(two_fn, &c, in, 2) : two_fn(&c, in, 2);
        CHECK(y && amp_tensor_requires_grad(y));
        CHECK_OK(amp_backward(amp_sum_all(amp_mul(y, y))));
        CHECK_EQ_INT(c.calls, ck ? 2 : 1);
        after[ck] = amp_rng_get_state();
        amp_tensor *leaves[3] = {a, b, w};
        for (int i = 0; i < 3; i++) {
            g[ck][i] = copy_of(amp_tensor_grad(leaves[i]));
            CHECK(g[ck][i]);
            amp_tensor_clear_grad(leaves[i]);
        }
        amp_temps_free();
    }
    for (int i = 0; i < 3; i++)
        CHECK_MSG(same_bits(g[0][i], g[1][i]), "gradient of input %d differs with checkpointing", i);
    CHECK(after[0].offset == after[1].offset);

    /* An input that does not require grad gets none; the parameter still
     * makes the result require grad when no input does. */
    amp_tensor_set_requires_grad(b, false);
    two_ctx c = {.w = w};
    amp_tensor *in[2] = {a, b};
    CHECK_OK(amp_backward(amp_sum_all(amp_checkpoint(two_fn, &c, in, 2))));
    CHECK(amp_tensor_grad(a) && !amp_tensor_grad(b) && amp_tensor_grad(w));
    amp_tensor_clear_grad(a);
    amp_tensor_clear_grad(w);
    amp_tensor_set_requires_grad(a, false);
    amp_tensor *y = amp_checkpoint(two_fn, &c, in, 2);
    CHECK(y && amp_tensor_requires_grad(y) && !amp_tensor_is_leaf(y));
    CHECK_OK(amp_backward(amp_sum_all(y)));
    CHECK(!amp_tensor_grad(a) && !amp_tensor_grad(b) && amp_tensor_grad(w));
    amp_tensor_clear_grad(w);
    /* Nothing requires grad: a plain result. */
    amp_tensor_set_requires_grad(w, false);
    y = amp_checkpoint(two_fn, &c, in, 2);
    CHECK(y && !amp_tensor_requires_grad(y) && amp_tensor_is_leaf(y));
    /* Grad disabled: fn is just called. */
    amp_tensor_set_requires_grad(a, true);
    amp_no_grad_begin();
    y = amp_checkpoint(two_fn, &c, in, 2);
    amp_no_grad_end();
    CHECK(y && !amp_tensor_requires_grad(y));
    amp_temps_free();
    for (int ck = 0; ck < 2; ck++)
        for (int i = 0; i < 3; i++)
            amp_tensor_free(g[ck][i]);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_tensor_free(w);
}

/* Under autocast a parameter used twice inside fn is cast once (the cast
 * cache of the recompute), as without checkpointing: the same bits. */
static amp_tensor *twice_fn(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    amp_tensor *w = ctx;
    return amp_linear(amp_gelu(amp_linear(in[0], w, NULL), AMP_GELU_TANH), w, NULL);
}

static void test_autocast_cache_inside(void)
{
    amp_manual_seed(4);
    amp_tensor *x = leaf(AMP_SHAPE(4, 8), 1.0), *w = leaf(AMP_SHAPE(8, 8), 0.4);
    amp_tensor *gx[2], *gw[2];
    for (int ck = 0; ck < 2; ck++) {
        CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_F16));
        amp_tensor *y = ck ? amp_checkpoint(twice_fn, w, &x, 1) : twice_fn(w, &x, 1);
        CHECK(y && amp_tensor_dtype(y) == AMP_F16);
        amp_tensor *loss = amp_sum_all(amp_mul(y, y));
        CHECK_OK(amp_autocast_end());
        CHECK_OK(amp_backward(loss));
        gx[ck] = copy_of(amp_tensor_grad(x));
        gw[ck] = copy_of(amp_tensor_grad(w));
        amp_tensor_clear_grad(x);
        amp_tensor_clear_grad(w);
        amp_temps_free();
    }
    CHECK(gx[0] && same_bits(gx[0], gx[1]));
    CHECK(gw[0] && same_bits(gw[0], gw[1]));
    /* Backward inside the autocast region: the region's cache is not
     * disturbed and the result is the same. */
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_F16));
    amp_tensor *y = amp_checkpoint(twice_fn, w, &x, 1);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(y, y))));
    CHECK_EQ_INT(amp_autocast_depth(), 1);
    CHECK_OK(amp_autocast_end());
    CHECK(same_bits(amp_tensor_grad(w), gw[0]));
    CHECK(same_bits(amp_tensor_grad(x), gx[0]));
    amp_temps_free();
    for (int ck = 0; ck < 2; ck++) {
        amp_tensor_free(gx[ck]);
        amp_tensor_free(gw[ck]);
    }
    amp_tensor_free(x);
    amp_tensor_free(w);
}

/* fn returning an input or a parameter as it is. */
static amp_tensor *pick_fn(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    return ctx ? ctx : in[0];
}

static void test_identity_and_parameter_results(void)
{
    amp_manual_seed(8);
    amp_tensor *x = leaf(AMP_SHAPE(2, 3), 1.0), *w = leaf(AMP_SHAPE(2, 3), 1.0);
    amp_tensor *c = amp_randn(AMP_SHAPE(2, 3), AMP_F32, 0.0, 1.0); /* no grad */
    amp_tensor *y = amp_checkpoint(pick_fn, NULL, &x, 1);
    CHECK(y && y != x && amp_tensor_requires_grad(y) && same_bits(y, x));
    CHECK_OK(amp_backward(amp_sum_all(amp_mul_scalar(y, 3.0))));
    CHECK(amp_tensor_grad(x) && amp_tensor_get(amp_tensor_grad(x), 0) == 3.0 &&
          amp_tensor_get(amp_tensor_grad(x), 5) == 3.0);
    /* a parameter returned as it is: the result requires grad, the
     * gradient reaches the parameter */
    y = amp_checkpoint(pick_fn, w, &c, 1);
    CHECK(y && amp_tensor_requires_grad(y) && same_bits(y, w));
    CHECK_OK(amp_backward(amp_sum_all(amp_mul_scalar(y, 2.0))));
    CHECK(amp_tensor_grad(w) && amp_tensor_get(amp_tensor_grad(w), 0) == 2.0);
    CHECK(!amp_tensor_grad(c));
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(c);
}

/* A parameter read only through an integer result (argmax's indices, a
 * cast to i64) carries no gradient into fn's result, so the checkpoint's
 * result does not require grad (as the same ops without checkpointing). */
static amp_tensor *index_fn(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    amp_tensor *w = ctx;
    amp_tensor *i = amp_tensor_ndim(in[0]) == 1 ? amp_argmax(w, 1) : amp_to(w, AMP_I64);
    return amp_add(in[0], amp_to(i, AMP_F32));
}

static void test_parameter_read_through_integers(void)
{
    amp_manual_seed(9);
    amp_tensor *w = leaf(AMP_SHAPE(2, 3), 1.0);
    amp_tensor *c2 = amp_randn(AMP_SHAPE(2), AMP_F32, 0.0, 1.0), *c3 = amp_randn(AMP_SHAPE(2, 3), AMP_F32, 0.0, 1.0);
    amp_tensor *in[2] = {c2, c3};
    for (int k = 0; k < 2; k++) {
        amp_tensor *plain = index_fn(w, &in[k], 1), *y = amp_checkpoint(index_fn, w, &in[k], 1);
        CHECK(plain && !amp_tensor_requires_grad(plain));
        CHECK_MSG(y && !amp_tensor_requires_grad(y), "through %s: the checkpoint's result requires grad",
                  k ? "a cast to i64" : "argmax");
        CHECK(y && plain && same_bits(y, plain));
    }
    amp_temps_free();
    amp_tensor_free(w);
    amp_tensor_free(c2);
    amp_tensor_free(c3);
}

/* --------------------------------------------------------- nesting */

static amp_tensor *inner_fn(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    return amp_dropout(amp_tanh(amp_linear(in[0], ctx, NULL)), 0.2, true);
}

static amp_tensor *outer_fn(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    amp_tensor *h = amp_checkpoint(inner_fn, ctx, in, 1);
    amp_tensor *k = amp_checkpoint(inner_fn, ctx, &h, 1);
    return amp_mul(h, k);
}

static void test_nested(void)
{
    amp_manual_seed(5);
    amp_tensor *x = leaf(AMP_SHAPE(3, 4), 1.0), *w = leaf(AMP_SHAPE(4, 4), 0.7);
    amp_tensor *gx = NULL, *gw = NULL;
    for (int mode = 0; mode < 2; mode++) {
        amp_manual_seed(11);
        amp_tensor *y;
        if (mode == 0) { /* no checkpoint at all */
            amp_tensor *h = inner_fn(w, &x, 1);
            y = amp_mul(h, inner_fn(w, &h, 1));
        } else {
            y = amp_checkpoint(outer_fn, w, &x, 1);
        }
        CHECK_OK(amp_backward(amp_sum_all(y)));
        if (mode == 0) {
            gx = copy_of(amp_tensor_grad(x));
            gw = copy_of(amp_tensor_grad(w));
        } else {
            CHECK(same_bits(gx, amp_tensor_grad(x)));
            CHECK(same_bits(gw, amp_tensor_grad(w)));
        }
        amp_tensor_clear_grad(x);
        amp_tensor_clear_grad(w);
        amp_temps_free();
    }
    amp_tensor_free(gx);
    amp_tensor_free(gw);
    amp_tensor_free(x);
    amp_tensor_free(w);
}

/* ---------------------------------------------------------- errors */

static amp_tensor *null_fn(void *ctx, amp_tensor *const *in, int n)
{
    (void)ctx;
    (void)in;
    (void)n;
    return NULL;
}

static void test_errors(void)
{
    amp_manual_seed(6);
    amp_tensor *a = leaf(AMP_SHAPE(2, 3), 1.0), *b = leaf(AMP_SHAPE(2, 3), 1.0), *w = leaf(AMP_SHAPE(3, 3), 1.0);
    amp_tensor *in[2] = {a, b};
    two_ctx c = {.w = w};

    CHECK(!amp_checkpoint(NULL, &c, in, 2));
    CHECK_ERROR(AMP_ERR_ARG, "NULL function");
    CHECK(!amp_checkpoint(two_fn, &c, NULL, 2));
    CHECK_ERROR(AMP_ERR_ARG, "NULL input array");
    CHECK(!amp_checkpoint(two_fn, &c, in, -1));
    CHECK_ERROR(AMP_ERR_ARG, "must be >= 0");
    amp_tensor *with_null[2] = {a, NULL};
    CHECK(!amp_checkpoint(two_fn, &c, with_null, 2));
    CHECK_ERROR(AMP_ERR_ARG, "input 1 is NULL");
    /* A NULL input made by a failed op: that op's error is kept. */
    with_null[1] = amp_reshape(b, AMP_SHAPE(7));
    CHECK(!amp_checkpoint(two_fn, &c, with_null, 2));
    CHECK_ERROR(AMP_ERR_SHAPE, "reshape");
    CHECK_EQ_INT(c.calls, 0);

    /* fn fails: its error is kept, nothing is left in the pool. */
    size_t temps = amp_temps_count();
    c.fail_at = 1;
    CHECK(!amp_checkpoint(two_fn, &c, in, 2));
    CHECK_ERROR(AMP_ERR_SHAPE, "reshape");
    CHECK_EQ_INT(amp_temps_count(), temps);
    CHECK(!amp_checkpoint(null_fn, NULL, in, 2));
    CHECK_ERROR(AMP_ERR_STATE, "returned NULL without setting an error");

    /* fn fails only when recomputed: backward says so, with its error. */
    c.calls = 0;
    c.fail_at = 2;
    amp_tensor *y = amp_checkpoint(two_fn, &c, in, 2);
    CHECK(y);
    CHECK(amp_backward(amp_sum_all(y)) == AMP_ERR_SHAPE);
    CHECK_ERROR(AMP_ERR_SHAPE, "checkpoint: recomputing: reshape");
    CHECK_EQ_INT(amp_grad_enabled(), true);
    /* fn computes something else the second time. */
    c.calls = 0;
    c.fail_at = 0;
    c.reshape_at = 2;
    y = amp_checkpoint(two_fn, &c, in, 2);
    CHECK(amp_backward(amp_sum_all(y)) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "the recomputed result is [6] f32, the forward's was [2, 3] f32");
    amp_tensor_clear_grad(a);
    amp_tensor_clear_grad(b);
    amp_tensor_clear_grad(w);

    /* Backward twice through the same checkpoint. */
    c.calls = 0;
    c.reshape_at = 0;
    y = amp_checkpoint(two_fn, &c, in, 2);
    amp_tensor *loss = amp_sum_all(y);
    CHECK_OK(amp_backward(loss));
    CHECK(amp_backward(loss) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "already freed");
    CHECK(amp_backward(amp_sum_all(amp_mul_scalar(y, 2.0))) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "graph through checkpoint was already freed");
    CHECK_EQ_INT(c.calls, 2);
    amp_temps_free();
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_tensor_free(w);
}

int main(void)
{
    RUN(test_gpt_fp32_bit_identical);
    RUN(test_gpt_bf16_bit_identical);
    RUN(test_gpt_fp16_bit_identical);
    RUN(test_gpt_cuda_bit_identical);
    RUN(test_gpt_keeps_less);
    RUN(test_two_inputs_and_a_parameter);
    RUN(test_autocast_cache_inside);
    RUN(test_identity_and_parameter_results);
    RUN(test_parameter_read_through_integers);
    RUN(test_nested);
    RUN(test_errors);
    return harness_done();
}
