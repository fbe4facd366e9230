/*
 * test_autograd.c - the tape: leaves and their gradients, accumulation
 * across backward calls, graphs freed after backward, a node's output
 * gradient freed as soon as its backward has run, no-grad regions, the
 * pool of temporaries, and errors that keep the first message.
 */
#include "harness.h"

#include <pthread.h>

static amp_tensor *leaf(amp_shape s, double v)
{
    amp_tensor *t = amp_full(s, AMP_F32, v);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

static void test_error_is_kept_until_cleared(void)
{
    amp_clear_error();
    CHECK_EQ_INT(amp_last_status(), AMP_OK);
    CHECK(strcmp(amp_last_error(), "") == 0);
    CHECK(isnan(amp_item(NULL)));
    CHECK_ERROR(AMP_ERR_ARG, "NULL tensor");
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    amp_item(NULL); /* sets this thread's error only */
    return (void *)(intptr_t)amp_last_status();
}

static void test_errors_are_per_thread(void)
{
    amp_clear_error();
    pthread_t th;
    void *st;
    pthread_create(&th, NULL, fail_in_thread, NULL);
    pthread_join(th, &st);
    CHECK_EQ_INT((intptr_t)st, AMP_ERR_ARG);
    CHECK_EQ_INT(amp_last_status(), AMP_OK); /* this thread saw nothing */
}

static void test_null_input_keeps_first_error(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 3), AMP_F32);
    amp_tensor *b = amp_zeros(AMP_SHAPE(4), AMP_F32);
    amp_tensor *bad = amp_add(a, b); /* fails: shapes */
    CHECK(bad == NULL);
    char first[512];
    snprintf(first, sizeof first, "%s", amp_last_error());
    /* A chain after the failure returns NULL without replacing the message. */
    amp_tensor *r = amp_relu(amp_mul_scalar(amp_exp(bad), 2.0));
    CHECK(r == NULL);
    CHECK(strcmp(first, amp_last_error()) == 0);
    CHECK_ERROR(AMP_ERR_SHAPE, "add");
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* y = sum(x*x + 3x) -> dy/dx = 2x + 3 */
static void test_leaf_gradient(void)
{
    amp_tensor *x = leaf(AMP_SHAPE(3), 2.0);
    float xv[3] = {1, -2, 0.5f};
    amp_tensor_copy_in(x, xv, AMP_F32);
    amp_tensor *y = amp_sum_all(amp_add(amp_mul(x, x), amp_mul_scalar(x, 3)));
    CHECK(y != NULL);
    CHECK_NEAR(amp_item(y), 1 + 4 + 0.25 + 3 * (1 - 2 + 0.5), 1e-6);
    CHECK_OK(amp_backward(y));
    amp_tensor *g = amp_tensor_grad(x);
    CHECK(g != NULL);
    for (int i = 0; i < 3 && g; i++)
        CHECK_NEAR(amp_tensor_get(g, i), 2 * xv[i] + 3, 1e-6);
    CHECK(amp_tensor_is_leaf(x));
    CHECK(!amp_tensor_is_leaf(y));
    amp_tensor_free(x);
}

static void test_gradients_accumulate_until_cleared(void)
{
    amp_tensor *x = leaf(AMP_SHAPE(2), 1.0);
    for (int k = 0; k < 3; k++)
        CHECK_OK(amp_backward(amp_sum_all(amp_mul_scalar(x, 2.0))));
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(x), 0), 6.0, 0);
    amp_tensor_clear_grad(x);
    CHECK(amp_tensor_grad(x) == NULL);
    amp_tensor_free(x);
}

static void test_second_backward_through_freed_graph_is_an_error(void)
{
    amp_tensor *x = leaf(AMP_SHAPE(2), 1.0);
    amp_tensor *y = amp_sum_all(amp_exp(x));
    CHECK_OK(amp_backward(y));
    CHECK_EQ_INT(amp_backward(y), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "already freed");
    amp_tensor_free(x);
}

static void test_shared_subexpression_gets_both_paths(void)
{
    /* z = a*a where a = 2x: dz/dx = 8x, the two uses of a add up. */
    amp_tensor *x = leaf(AMP_SHAPE(1), 3.0);
    amp_tensor *a = amp_mul_scalar(x, 2.0);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(a, a))));
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(x), 0), 24.0, 0);
    amp_tensor_free(x);
}

static void test_no_grad_records_nothing(void)
{
    amp_tensor *x = leaf(AMP_SHAPE(2), 1.0);
    amp_no_grad_begin();
    CHECK(!amp_grad_enabled());
    amp_tensor *y = amp_sum_all(amp_mul_scalar(x, 2.0));
    CHECK(!amp_tensor_requires_grad(y));
    CHECK(amp_tensor_is_leaf(y));
    amp_no_grad_end();
    CHECK(amp_grad_enabled());
    CHECK_EQ_INT(amp_backward(y), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "does not require grad");
    amp_tensor_free(x);
}

static void test_backward_needs_one_element_or_a_seed(void)
{
    amp_tensor *x = leaf(AMP_SHAPE(2, 2), 1.0);
    amp_tensor *y = amp_mul_scalar(x, 3.0);
    CHECK_EQ_INT(amp_backward(y), AMP_ERR_SHAPE);
    CHECK_ERROR(AMP_ERR_SHAPE, "[2, 2]");
    amp_tensor *seed = amp_full(AMP_SHAPE(2, 2), AMP_F32, 0.5);
    CHECK_OK(amp_backward_with(y, seed));
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(x), 3), 1.5, 0);
    amp_tensor_free(seed);
    amp_tensor_free(x);
}

static void test_only_leaves_take_requires_grad(void)
{
    amp_tensor *x = leaf(AMP_SHAPE(2), 1.0);
    amp_tensor *y = amp_mul_scalar(x, 2.0);
    CHECK_EQ_INT(amp_tensor_set_requires_grad(y, false), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "leaf");
    amp_tensor *i = amp_zeros(AMP_SHAPE(2), AMP_I64);
    CHECK_EQ_INT(amp_tensor_set_requires_grad(i, true), AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "i64");
    amp_tensor_free(i);
    amp_tensor_free(x);
}

static void test_pool_holds_op_results_until_freed(void)
{
    amp_temps_free();
    amp_tensor *x = leaf(AMP_SHAPE(4), 1.0);
    amp_tensor *y = amp_exp(amp_mul_scalar(x, 2.0));
    CHECK_EQ_INT(amp_temps_count(), 2);
    amp_tensor_retain(y); /* keep one result beyond the pool */
    amp_temps_free();
    CHECK_EQ_INT(amp_temps_count(), 0);
    CHECK_NEAR(amp_tensor_get(y, 0), exp(2.0), 1e-5);
    amp_tensor_free(y);
    amp_tensor_free(x);
}

static void test_16bit_leaf_gets_16bit_gradient(void)
{
    amp_tensor *x = amp_full(AMP_SHAPE(3), AMP_BF16, 1.5);
    amp_tensor_set_requires_grad(x, true);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(x, x))));
    amp_tensor *g = amp_tensor_grad(x);
    CHECK(g && amp_tensor_dtype(g) == AMP_BF16);
    CHECK_NEAR(amp_tensor_get(g, 1), 3.0, 0);
    amp_tensor_free(x);
}

static void test_node_gradients_are_freed_as_backward_goes(void)
{
    /* y = x * 2^K through K nodes of N floats each (a size class of its
     * own: 256 KiB). Backward holds a node's gradient and the one it makes
     * for its input, not all K: the engine frees each as soon as its
     * node's backward has run. Kept to the end, they would be K blocks. */
    enum { K = 8, N = 65536 };
    const size_t B = (size_t)N * 4;
    amp_temps_free();
    amp_tensor *x = leaf(AMP_SHAPE(N), 1.0);
    amp_tensor *y = x;
    for (int k = 0; k < K; k++)
        y = amp_mul_scalar(y, 2.0);
    amp_tensor *loss = amp_sum_all(y);
    amp_memory_reset_peak();
    const size_t before = amp_memory_get_stats().current;
    CHECK_OK(amp_backward(loss));
    const size_t held = amp_memory_get_stats().peak - before;
    CHECK_MSG(held >= 2 * B && held < 3 * B, "backward held %zu bytes at its peak, %zu a gradient", held, B);
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(x), N - 1), 256.0, 0);
    amp_temps_free();
    amp_tensor_free(x);
}

static void test_deep_chain_does_not_overflow_the_stack(void)
{
    amp_tensor *x = leaf(AMP_SHAPE(1), 1.0);
    amp_tensor *y = x;
    for (int k = 0; k < 20000; k++)
        y = amp_add_scalar(y, 0.0);
    CHECK_OK(amp_backward(amp_sum_all(y)));
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(x), 0), 1.0, 0);
    amp_tensor_free(x);
}

int main(void)
{
    RUN(test_error_is_kept_until_cleared);
    RUN(test_errors_are_per_thread);
    RUN(test_null_input_keeps_first_error);
    RUN(test_leaf_gradient);
    RUN(test_gradients_accumulate_until_cleared);
    RUN(test_second_backward_through_freed_graph_is_an_error);
    RUN(test_shared_subexpression_gets_both_paths);
    RUN(test_no_grad_records_nothing);
    RUN(test_backward_needs_one_element_or_a_seed);
    RUN(test_only_leaves_take_requires_grad);
    RUN(test_pool_holds_op_results_until_freed);
    RUN(test_node_gradients_are_freed_as_backward_goes);
    RUN(test_16bit_leaf_gets_16bit_gradient);
    RUN(test_deep_chain_does_not_overflow_the_stack);
    return harness_done();
}
