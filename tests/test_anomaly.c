/*
 * test_anomaly.c - the anomaly check (amp_anomaly_*): the first op whose
 * result or gradient holds inf/NaN is named exactly (op, module, phase,
 * dtype, category, whether its inputs were finite, the inputs'
 * statistics) in the three places an inf starts: an f16 linear that
 * overflows in forward, a log(0) in a loss, and a gradient that overflows
 * only in backward. Stopping (the op fails) and continuing (each distinct
 * op recorded once, the rest of the pass unchecked) both; off, no
 * observer is left behind.
 */
#include "harness.h"

#include "autograd/graph.h"

#include <math.h>
#include <stdlib.h>

/* x [2, 16] and w [4, 16], every element 100: exact in f16, and each
 * output 16 * 100 * 100 = 160000, past f16's largest (65504). */
static amp_tensor *hundreds(int64_t rows, amp_device dev)
{
    amp_tensor *h = amp_full(AMP_SHAPE(rows, 16), AMP_F32, 100.0);
    if (dev == AMP_CPU)
        return h;
    amp_tensor *d = amp_to_device(h, dev);
    amp_tensor_free(h);
    return d;
}

/* The overflowing linear under f16 autocast in module "fc1"; its result. */
static amp_tensor *overflow_linear(amp_tensor *x, amp_tensor *w)
{
    CHECK(amp_autocast_begin(amp_tensor_device(x), AMP_F16) == AMP_OK);
    CHECK(amp_scope_begin("fc1") == AMP_OK);
    amp_tensor *y = amp_linear(x, w, NULL);
    CHECK(amp_scope_end() == AMP_OK);
    amp_autocast_end();
    return y;
}

static void overflow_is_named(amp_device dev)
{
    CHECK(amp_anomaly_enable(true) == AMP_OK);
    amp_anomaly_set_context(3, 1);
    amp_tensor *x = hundreds(2, dev), *w = hundreds(4, dev);
    amp_tensor *y = overflow_linear(x, w);
    CHECK(y == NULL);
    CHECK_EQ_INT(amp_last_status(), AMP_ERR_STATE);
    CHECK_MSG(strncmp(amp_last_error(), "anomaly: op=linear module=fc1 phase=forward step=3 micro_batch=1 dtype=f16",
                      74) == 0,
              "error: %s", amp_last_error());
    amp_anomaly_report r;
    CHECK(amp_anomaly_last(&r));
    CHECK(strcmp(r.op, "linear") == 0 && strcmp(r.module, "fc1") == 0);
    CHECK(!r.backward && !r.recompute);
    CHECK_EQ_INT(r.device, dev);
    CHECK_EQ_INT(r.step, 3);
    CHECK_EQ_INT(r.micro_batch, 1);
    CHECK_EQ_INT(r.dtype, AMP_F16);
    CHECK_EQ_INT(r.category, AMP_CAST_LOWER);
    CHECK_EQ_INT(r.nonfinite, 8);
    CHECK_EQ_INT(r.numel, 8);
    CHECK(r.inputs_finite); /* the op itself overflowed */
    CHECK_EQ_INT(r.n_inputs, 2);
    CHECK_EQ_INT(r.in[0].dtype, AMP_F16); /* as the op saw them: after autocast */
    CHECK_EQ_INT(r.in[0].shape.ndim, 2);
    CHECK_EQ_INT(r.in[0].shape.d[0], 2);
    CHECK_EQ_INT(r.in[1].shape.d[0], 4);
    CHECK(r.in[0].min == 100 && r.in[0].max == 100 && r.in[1].absmax == 100);
    CHECK_EQ_INT(r.in[1].nonfinite, 0);
    CHECK_EQ_INT(r.grad.dtype, AMP_DTYPE_COUNT);
    CHECK_EQ_INT(amp_anomaly_count(), 1);
    char line[512];
    int len = amp_anomaly_format(&r, line, sizeof line);
    CHECK(len > 0 && (size_t)len < sizeof line);
    CHECK_MSG(strstr(line, " in0=f16[2,16] min=100 max=100 absmax=100 nonfinite=0") != NULL, "%s", line);
    CHECK_MSG(strstr(line, "inputs_finite=true") != NULL && strstr(line, "nonfinite=8/8") != NULL, "%s", line);
    /* The same op in f32 is finite: off again, nothing is checked. */
    CHECK(amp_anomaly_enable(false) == AMP_OK);
    CHECK(autograd_observer == NULL);
    CHECK(!amp_anomaly_enabled());
    amp_tensor *y32 = amp_linear(x, w, NULL);
    CHECK(y32 != NULL);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_temps_free();
}

static void test_an_f16_linear_that_overflows_is_named_in_forward(void) { overflow_is_named(AMP_CPU); }

/* The same through the CUDA backend's count (cudaemu in test-cuda-emu). */
static void test_an_f16_linear_that_overflows_is_named_on_cuda(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    overflow_is_named(AMP_CUDA);
}

static void test_a_log_of_zero_in_a_loss_is_named(void)
{
    CHECK(amp_anomaly_enable(true) == AMP_OK);
    amp_anomaly_set_context(7, 2);
    const float v[4] = {0.5f, 0.0f, 2.0f, 1.0f};
    amp_tensor *p = amp_from_data(AMP_SHAPE(4), AMP_F32, v);
    CHECK(amp_scope_begin("loss") == AMP_OK);
    amp_tensor *l = amp_log(p);
    CHECK(amp_scope_end() == AMP_OK);
    CHECK(l == NULL);
    amp_anomaly_report r;
    CHECK(amp_anomaly_last(&r));
    CHECK(strcmp(r.op, "log") == 0 && strcmp(r.module, "loss") == 0 && !r.backward);
    CHECK_EQ_INT(r.dtype, AMP_F32);
    CHECK_EQ_INT(r.category, amp_autocast_category("log", AMP_CPU));
    CHECK_EQ_INT(r.nonfinite, 1);
    CHECK(r.inputs_finite);
    CHECK(r.in[0].min == 0 && r.in[0].max == 2 && r.in[0].absmax == 2);
    CHECK_MSG(strstr(amp_last_error(), "op=log module=loss phase=forward step=7") != NULL, "%s", amp_last_error());
    CHECK(amp_anomaly_enable(false) == AMP_OK);
    amp_tensor_free(p);
    amp_temps_free();
}

/* 1 / b with b = 1e-20: the forward (1e20) and a's gradient (1/b) are
 * finite, b's (-a / b^2 = -1e40) overflows f32 in backward only. */
static amp_tensor *quotient(amp_tensor **a, amp_tensor **b)
{
    *a = amp_full(AMP_SHAPE(3), AMP_F32, 1.0);
    *b = amp_full(AMP_SHAPE(3), AMP_F32, 1e-20);
    CHECK(amp_tensor_set_requires_grad(*a, true) == AMP_OK);
    CHECK(amp_tensor_set_requires_grad(*b, true) == AMP_OK);
    CHECK(amp_scope_begin("h.0.attn") == AMP_OK);
    amp_tensor *q = amp_div(*a, *b);
    CHECK(amp_scope_end() == AMP_OK);
    return amp_sum_all(q);
}

static void test_an_inf_made_only_in_backward_is_named(void)
{
    CHECK(amp_anomaly_enable(true) == AMP_OK);
    amp_anomaly_set_context(1, 1);
    amp_tensor *a, *b;
    amp_tensor *s = quotient(&a, &b);
    CHECK(s != NULL); /* the forward is finite */
    CHECK(!amp_anomaly_last(NULL));
    CHECK(amp_backward(s) != AMP_OK);
    amp_anomaly_report r;
    CHECK(amp_anomaly_last(&r));
    CHECK(strcmp(r.op, "div") == 0 && strcmp(r.module, "h.0.attn") == 0);
    CHECK(r.backward);
    CHECK_EQ_INT(r.result, 1); /* b's gradient */
    CHECK_EQ_INT(r.dtype, AMP_F32);
    CHECK_EQ_INT(r.nonfinite, 3);
    CHECK(r.inputs_finite);
    CHECK_EQ_INT(r.grad.dtype, AMP_F32); /* sum's gradient, ones */
    CHECK(r.grad.min == 1 && r.grad.max == 1);
    CHECK(r.in[1].absmax > 0.99e-20 && r.in[1].absmax < 1.01e-20);
    CHECK_MSG(strstr(amp_last_error(), "phase=backward") != NULL && strstr(amp_last_error(), "grad_of_input=1"),
              "%s", amp_last_error());
    CHECK(amp_anomaly_enable(false) == AMP_OK);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_temps_free();
}

static void test_continuing_records_each_distinct_op_once(void)
{
    CHECK(amp_anomaly_enable(true) == AMP_OK);
    amp_anomaly_set_continue(true);
    amp_tensor *x = hundreds(2, AMP_CPU), *w = hundreds(4, AMP_CPU);
    for (int step = 1; step <= 3; step++) {
        amp_anomaly_set_context(step, 1);
        amp_tensor *y = overflow_linear(x, w);
        CHECK(y != NULL); /* the run goes on */
        /* what follows the inf in the pass is its consequence: not reported */
        amp_tensor *z = amp_mul_scalar(y, 2.0);
        CHECK(z != NULL);
        amp_anomaly_report r;
        CHECK(amp_anomaly_last(&r));
        CHECK(strcmp(r.op, "linear") == 0);
        CHECK_EQ_INT(r.step, step);
        amp_temps_free();
    }
    CHECK_EQ_INT(amp_anomaly_count(), 1);
    amp_anomaly_report first;
    CHECK(amp_anomaly_get(0, &first) == AMP_OK);
    CHECK_EQ_INT(first.step, 1); /* the first occurrence */
    CHECK(amp_anomaly_get(1, &first) == AMP_ERR_ARG);
    /* a new op in a new pass is a second report */
    amp_anomaly_set_context(4, 1);
    const float zero = 0;
    amp_tensor *p = amp_from_data(AMP_SHAPE(1), AMP_F32, &zero);
    amp_tensor *l = amp_log(p);
    CHECK(l != NULL);
    CHECK_EQ_INT(amp_anomaly_count(), 2);
    /* a finite pass has no report */
    amp_anomaly_set_context(5, 1);
    amp_tensor *ok = amp_mul_scalar(p, 3.0);
    CHECK(ok != NULL && !amp_anomaly_last(NULL));
    amp_anomaly_set_continue(false);
    CHECK(amp_anomaly_enable(false) == AMP_OK);
    amp_tensor_free(p);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_temps_free();
}

/* A gpt whose h.1.mlp.fc1 weights are +-60000 (exact in f16), alternating
 * along the width: LayerNorm's output (finite, zero mean) times them
 * overflows f16 in that linear, named by the module path PyTorch gives
 * it. */
static void test_a_gpt_names_the_module_path(void)
{
    amp_manual_seed(1);
    amp_gpt_config c = {.vocab = 11, .context = 8, .width = 16, .layers = 2, .heads = 2, .mlp = 32};
    amp_module *m = amp_model_gpt(c);
    bool set = false;
    for (int i = 0; i < amp_module_num_params(m); i++) {
        const char *name;
        amp_tensor *p = amp_module_param(m, i, &name);
        float w[32 * 16];
        for (int k = 0; k < 32 * 16; k++)
            w[k] = k % 2 ? 60000.0f : -60000.0f;
        if (strcmp(name, "h.1.mlp.fc1.weight") == 0)
            set = amp_tensor_copy_in(p, w, AMP_F32) == AMP_OK;
    }
    CHECK(set);
    int64_t v[16];
    for (int i = 0; i < 16; i++)
        v[i] = i % 11;
    amp_tensor *idx = amp_from_data(AMP_SHAPE(2, 8), AMP_I64, v);
    CHECK(amp_anomaly_enable(true) == AMP_OK);
    amp_anomaly_set_context(1, 1);
    CHECK(amp_autocast_begin(AMP_CPU, AMP_F16) == AMP_OK);
    amp_tensor *logits = amp_module_forward(m, idx);
    amp_autocast_end();
    CHECK(logits == NULL);
    amp_anomaly_report r;
    CHECK(amp_anomaly_last(&r));
    CHECK_MSG(strcmp(r.op, "linear") == 0 && strcmp(r.module, "h.1.mlp.fc1") == 0, "%s in %s", r.op, r.module);
    CHECK_EQ_INT(r.dtype, AMP_F16);
    CHECK(r.inputs_finite);
    CHECK_EQ_INT(r.in[1].shape.d[0], 32); /* fc1's weight [mlp, width] */
    CHECK(r.in[1].min == -60000 && r.in[1].max == 60000);
    CHECK(strcmp(amp_scope_current(), "") == 0); /* the failed forward left its scopes */
    CHECK(amp_anomaly_enable(false) == AMP_OK);
    amp_temps_free();
    amp_tensor_free(idx);
    amp_module_free(m);
}

static amp_status other(void *ctx, const node *n, bool backward, amp_tensor *const *t, int n_t)
{
    (void)ctx, (void)n, (void)backward, (void)t, (void)n_t;
    return AMP_OK;
}

static void test_enabling_beside_another_observer_is_refused(void)
{
    autograd_set_observer(other, NULL);
    CHECK(amp_anomaly_enable(true) == AMP_ERR_STATE);
    CHECK(strstr(amp_last_error(), "another node observer") != NULL);
    CHECK(amp_anomaly_enable(false) == AMP_OK); /* leaves the other one alone */
    CHECK(autograd_observer == other);
    autograd_set_observer(NULL, NULL);
    CHECK(amp_anomaly_enable(true) == AMP_OK);
    CHECK(amp_anomaly_enabled());
    CHECK(amp_anomaly_enable(false) == AMP_OK);
    CHECK(autograd_observer == NULL);
}

int main(void)
{
    RUN(test_an_f16_linear_that_overflows_is_named_in_forward);
    RUN(test_an_f16_linear_that_overflows_is_named_on_cuda);
    RUN(test_a_log_of_zero_in_a_loss_is_named);
    RUN(test_an_inf_made_only_in_backward_is_named);
    RUN(test_a_gpt_names_the_module_path);
    RUN(test_continuing_records_each_distinct_op_once);
    RUN(test_enabling_beside_another_observer_is_refused);
    return harness_done();
}
