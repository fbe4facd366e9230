/*
 * test_autocast.c - autocast's conformance cases (AMP_SPEC.md 17-24):
 * the policy per device, promote, what is never cast, nesting, the cast
 * cache, per-thread state, and the dtypes gradients come back in.
 */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>

static amp_tensor *param(amp_shape s, double v)
{
    amp_tensor *t = amp_full(s, AMP_F32, v);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

static amp_dtype plan1(const char *op, amp_device dev, amp_dtype at, amp_dtype a)
{
    amp_dtype out = AMP_DTYPE_COUNT;
    CHECK_OK(amp_autocast_plan(op, dev, at, 1, &a, &out));
    return out;
}

/* 17 */
static void test_matmul_lowers_on_both_devices(void)
{
    amp_dtype in[2] = {AMP_F32, AMP_F32}, out[2];
    CHECK_OK(amp_autocast_plan("matmul", AMP_CUDA, AMP_F16, 2, in, out));
    CHECK(out[0] == AMP_F16 && out[1] == AMP_F16);
    in[1] = AMP_F16;
    CHECK_OK(amp_autocast_plan("matmul", AMP_CUDA, AMP_F16, 2, in, out));
    CHECK(out[0] == AMP_F16 && out[1] == AMP_F16);

    amp_tensor *a = amp_ones(AMP_SHAPE(2, 3), AMP_F32), *b = amp_ones(AMP_SHAPE(3, 4), AMP_F32);
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_DTYPE_INHERIT));
    CHECK_EQ_INT(amp_autocast_dtype(AMP_CPU), AMP_BF16); /* the cpu default */
    amp_tensor *c = amp_matmul(a, b);
    CHECK_OK(amp_autocast_end());
    CHECK(c && amp_tensor_dtype(c) == AMP_BF16);
    CHECK(amp_tensor_get(c, 0) == 3.0);
    CHECK_EQ_INT(amp_autocast_dtype(AMP_CUDA), AMP_F16); /* the cuda default */
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* 18 */
static void test_cuda_fp32_and_fp32_output_ops(void)
{
    CHECK_EQ_INT(plan1("exp", AMP_CUDA, AMP_F16, AMP_F16), AMP_F32);
    CHECK_EQ_INT(plan1("softmax", AMP_CUDA, AMP_F16, AMP_F16), AMP_F32);
    CHECK_EQ_INT(plan1("sum", AMP_CUDA, AMP_F16, AMP_F16), AMP_F32);
    CHECK_EQ_INT(amp_autocast_category("softmax", AMP_CUDA), AMP_CAST_FP32_OUT);
    CHECK_EQ_INT(amp_autocast_category("exp", AMP_CUDA), AMP_CAST_FP32);
    /* On cpu the same ops are unlisted. */
    CHECK_EQ_INT(plan1("exp", AMP_CPU, AMP_BF16, AMP_BF16), AMP_BF16);
    CHECK_EQ_INT(amp_autocast_category("cross_entropy", AMP_CPU), AMP_CAST_FP32);
}

/* 19 */
static void test_promote(void)
{
    amp_dtype three[3] = {AMP_F16, AMP_F16, AMP_F16}, out[3];
    CHECK_OK(amp_autocast_plan("cat", AMP_CPU, AMP_F16, 3, three, out));
    CHECK(out[0] == AMP_F16 && out[2] == AMP_F16);
    amp_dtype mixed[3] = {AMP_F16, AMP_F32, AMP_F16};
    CHECK_OK(amp_autocast_plan("cat", AMP_CPU, AMP_F16, 3, mixed, out));
    CHECK(out[0] == AMP_F32 && out[1] == AMP_F32 && out[2] == AMP_F32);
    amp_dtype bad[2] = {AMP_F16, AMP_BF16};
    CHECK_EQ_INT(amp_autocast_plan("cat", AMP_CPU, AMP_F16, 2, bad, out), AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "cat");

    amp_tensor *a = amp_ones(AMP_SHAPE(2), AMP_BF16), *b = amp_ones(AMP_SHAPE(3), AMP_F32);
    amp_tensor *ts[2] = {a, b};
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    amp_tensor *c = amp_cat(ts, 2, 0);
    amp_autocast_end();
    CHECK(c && amp_tensor_dtype(c) == AMP_F32);
    CHECK_EQ_INT(amp_tensor_numel(c), 5);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* 20 */
static void test_integers_and_other_devices_are_never_cast(void)
{
    amp_tensor *w = param(AMP_SHAPE(5, 3), 0.5);
    int64_t idx[2] = {4, 1};
    amp_tensor *ix = amp_from_data(AMP_SHAPE(2), AMP_I64, idx);
    amp_tensor *logits = amp_ones(AMP_SHAPE(2, 5), AMP_F32);
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    amp_tensor *e = amp_embedding(w, ix); /* unlisted: stays f32, indices untouched */
    amp_tensor *l = amp_cross_entropy(amp_to(logits, AMP_BF16), ix); /* fp32 category */
    amp_autocast_end();
    CHECK(e && amp_tensor_dtype(e) == AMP_F32);
    CHECK(l && amp_tensor_dtype(l) == AMP_F32);
    CHECK_NEAR(amp_item(l), log(5.0), 1e-6);
    amp_dtype in[2] = {AMP_F32, AMP_I64}, out[2];
    CHECK_OK(amp_autocast_plan("cross_entropy", AMP_CPU, AMP_BF16, 2, in, out));
    CHECK(out[1] == AMP_I64);
    /* cuda autocast leaves cpu tensors alone. */
    amp_tensor *a = amp_ones(AMP_SHAPE(2, 2), AMP_F32);
    amp_autocast_begin(AMP_CUDA, AMP_F16);
    amp_tensor *m = amp_matmul(a, a);
    amp_autocast_end();
    CHECK(m && amp_tensor_dtype(m) == AMP_F32);
    amp_tensor_free(w);
    amp_tensor_free(ix);
    amp_tensor_free(logits);
    amp_tensor_free(a);
}

/* 21 */
static void test_nested_disabled_region(void)
{
    amp_tensor *a = amp_ones(AMP_SHAPE(2, 2), AMP_F32);
    amp_autocast_begin(AMP_CPU, AMP_F16);
    CHECK_EQ_INT(amp_tensor_dtype(amp_matmul(a, a)), AMP_F16);
    amp_autocast_begin_ex(AMP_CPU, AMP_DTYPE_INHERIT, false, true);
    CHECK(!amp_autocast_is_enabled(AMP_CPU));
    CHECK_EQ_INT(amp_tensor_dtype(amp_matmul(a, a)), AMP_F32);
    CHECK_EQ_INT(amp_autocast_depth(), 2);
    amp_autocast_end();
    CHECK_EQ_INT(amp_tensor_dtype(amp_matmul(a, a)), AMP_F16);
    /* An inner region without a dtype inherits the outer one. */
    amp_autocast_begin(AMP_CPU, AMP_DTYPE_INHERIT);
    CHECK_EQ_INT(amp_autocast_dtype(AMP_CPU), AMP_F16);
    amp_autocast_end();
    amp_autocast_end();
    CHECK_EQ_INT(amp_autocast_dtype(AMP_CPU), AMP_BF16);
    CHECK(!amp_autocast_is_enabled(AMP_CPU));
    amp_tensor_free(a);
}

static void keep_warning(const char *msg, void *user) { snprintf(user, 512, "%s", msg); }

static void test_unbalanced_end_and_bad_dtype(void)
{
    CHECK_EQ_INT(amp_autocast_end(), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "no autocast region is open");
    CHECK_EQ_INT(amp_autocast_begin(AMP_CUDA, AMP_F32), AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "cuda autocast supports f16 and bf16");
    CHECK_EQ_INT(amp_autocast_depth(), 0);
    /* cpu: a warning, and autocast off inside. */
    char seen[512] = "";
    amp_set_warning_handler(keep_warning, seen);
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_F32));
    amp_set_warning_handler(NULL, NULL);
    CHECK(strstr(seen, "autocast is disabled") != NULL);
    CHECK(!amp_autocast_is_enabled(AMP_CPU));
    CHECK_OK(amp_autocast_end());
}

/* 22 */
static void test_cast_cache(void)
{
    amp_tensor *w = param(AMP_SHAPE(3, 3), 0.5);
    amp_tensor *x = amp_ones(AMP_SHAPE(2, 3), AMP_F32);
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    amp_matmul(x, w);
    amp_linear(x, w, NULL);
    CHECK_EQ_INT(amp_autocast_cache_size(), 1); /* one leaf, cast once */
    amp_autocast_begin_ex(AMP_CPU, AMP_DTYPE_INHERIT, false, true);
    amp_autocast_end();
    CHECK_EQ_INT(amp_autocast_cache_size(), 1); /* an inner region keeps it */
    /* Not cached: non-leaves, leaves without grad, f32 targets. */
    amp_matmul(x, amp_mul_scalar(w, 2.0));
    amp_matmul(x, x);
    amp_tensor *hb = amp_full(AMP_SHAPE(2), AMP_BF16, 1.0);
    amp_tensor_set_requires_grad(hb, true);
    amp_mse_loss(hb, hb); /* a cast to f32 */
    amp_tensor_free(hb);
    CHECK_EQ_INT(amp_autocast_cache_size(), 1);
    amp_autocast_end();
    CHECK_EQ_INT(amp_autocast_cache_size(), 0);

    amp_autocast_begin_ex(AMP_CPU, AMP_BF16, true, false);
    amp_matmul(x, w);
    CHECK_EQ_INT(amp_autocast_cache_size(), 0);
    amp_autocast_end();
    amp_tensor_free(w);
    amp_tensor_free(x);
}

static void test_cache_sees_in_place_writes(void)
{
    amp_tensor *w = param(AMP_SHAPE(2, 2), 1.0);
    amp_tensor *x = amp_ones(AMP_SHAPE(1, 2), AMP_F32);
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    CHECK(amp_tensor_get(amp_matmul(x, w), 0) == 2.0);
    amp_tensor_fill(w, 3.0); /* e.g. an optimizer step inside the region */
    CHECK(amp_tensor_get(amp_matmul(x, w), 0) == 6.0);
    amp_autocast_end();
    amp_tensor_free(w);
    amp_tensor_free(x);
}

/* 23 */
static void *other_thread(void *arg)
{
    amp_tensor *a = arg;
    amp_tensor *m = amp_matmul(a, a);
    amp_dtype *dt = malloc(sizeof *dt);
    *dt = amp_tensor_dtype(m);
    amp_temps_free();
    return dt;
}

static void test_autocast_state_is_per_thread(void)
{
    amp_tensor *a = amp_ones(AMP_SHAPE(2, 2), AMP_F32);
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    pthread_t th;
    pthread_create(&th, NULL, other_thread, a);
    void *res;
    pthread_join(th, &res);
    CHECK_EQ_INT(*(amp_dtype *)res, AMP_F32);
    free(res);
    CHECK_EQ_INT(amp_tensor_dtype(amp_matmul(a, a)), AMP_BF16);
    amp_autocast_end();
    amp_tensor_free(a);
}

/* 24 */
static void test_f32_parameter_gets_f32_gradient_through_lowered_matmul(void)
{
    amp_tensor *w = param(AMP_SHAPE(3, 2), 0.25);
    amp_tensor *x = amp_full(AMP_SHAPE(4, 3), AMP_F32, 2.0);
    amp_autocast_begin(AMP_CPU, AMP_F16);
    amp_tensor *y = amp_matmul(x, w);
    amp_tensor *loss = amp_mean_all(amp_to(y, AMP_F32));
    amp_autocast_end();
    CHECK_EQ_INT(amp_tensor_dtype(y), AMP_F16);
    CHECK_OK(amp_backward(loss));
    amp_tensor *g = amp_tensor_grad(w);
    CHECK(g && amp_tensor_dtype(g) == AMP_F32);
    /* d mean(xw) / dw[k][j] = sum_i x[i][k] / (4*2) = 4*2/8 = 1 */
    CHECK(g && amp_tensor_get(g, 0) == 1.0);
    amp_tensor_free(w);
    amp_tensor_free(x);
}

static void test_override_category_at_run_time(void)
{
    amp_tensor *a = amp_ones(AMP_SHAPE(2, 2), AMP_F32);
    CHECK_OK(amp_autocast_set_category("matmul", AMP_CPU, AMP_CAST_FP32));
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    CHECK_EQ_INT(amp_tensor_dtype(amp_matmul(a, a)), AMP_F32);
    amp_autocast_end();
    CHECK_OK(amp_autocast_set_category("matmul", AMP_CPU, AMP_CAST_COUNT));
    CHECK_EQ_INT(amp_autocast_category("matmul", AMP_CPU), AMP_CAST_LOWER);
    CHECK_OK(amp_autocast_set_category("mse_loss", AMP_CPU, AMP_CAST_BANNED));
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    CHECK(amp_mse_loss(a, a) == NULL);
    CHECK_ERROR(AMP_ERR_STATE, "unsafe to autocast");
    amp_autocast_end();
    CHECK_OK(amp_autocast_set_category("mse_loss", AMP_CPU, AMP_CAST_COUNT));
    CHECK_EQ_INT(amp_autocast_set_category("nope", AMP_CPU, AMP_CAST_FP32), AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "unknown op");
    amp_tensor_free(a);
}

static void test_scoped_form_opens_and_closes_a_region(void)
{
    amp_tensor *a = amp_ones(AMP_SHAPE(2, 2), AMP_F32);
    amp_tensor *m = NULL;
    AMP_AUTOCAST(AMP_CPU, AMP_BF16)
    {
        CHECK_EQ_INT(amp_autocast_depth(), 1);
        m = amp_matmul(a, a);
    }
    CHECK_EQ_INT(amp_autocast_depth(), 0);
    CHECK(m && amp_tensor_dtype(m) == AMP_BF16);
    bool ran = false;
    AMP_AUTOCAST(AMP_CUDA, AMP_F32) ran = true; /* cannot begin: skipped */
    CHECK(!ran);
    CHECK_ERROR(AMP_ERR_DTYPE, "cuda autocast supports");
    amp_tensor_free(a);
}

int main(void)
{
    RUN(test_scoped_form_opens_and_closes_a_region);
    RUN(test_matmul_lowers_on_both_devices);
    RUN(test_cuda_fp32_and_fp32_output_ops);
    RUN(test_promote);
    RUN(test_integers_and_other_devices_are_never_cast);
    RUN(test_nested_disabled_region);
    RUN(test_unbalanced_end_and_bad_dtype);
    RUN(test_cast_cache);
    RUN(test_cache_sees_in_place_writes);
    RUN(test_autocast_state_is_per_thread);
    RUN(test_f32_parameter_gets_f32_gradient_through_lowered_matmul);
    RUN(test_override_category_at_run_time);
    return harness_done();
}
