/*
 * test_tensor.c - constructors, copies, accessors, shapes, and the seeded
 * counter-based generator.
 */
#include "base/base.h"
#include "harness.h"

#include <stdlib.h>

static void test_constructors_fill_values(void)
{
    amp_tensor *z = amp_zeros(AMP_SHAPE(2, 3), AMP_F32);
    amp_tensor *o = amp_ones(AMP_SHAPE(4), AMP_BF16);
    amp_tensor *f = amp_full(AMP_SHAPE(2, 2, 2), AMP_F16, -2.5);
    amp_tensor *i = amp_full(AMP_SHAPE(3), AMP_I64, 7);
    CHECK_EQ_INT(amp_tensor_numel(z), 6);
    CHECK_EQ_INT(amp_tensor_ndim(f), 3);
    CHECK_EQ_INT(amp_tensor_dim(z, -1), 3);
    CHECK(amp_tensor_get(z, 5) == 0.0);
    CHECK(amp_tensor_get(o, 3) == 1.0);
    CHECK(amp_tensor_get(f, 7) == -2.5);
    CHECK(amp_tensor_get(i, 2) == 7.0);
    CHECK_EQ_INT(amp_tensor_dtype(o), AMP_BF16);
    CHECK_EQ_INT(amp_tensor_device(o), AMP_CPU);
    amp_tensor_free(z);
    amp_tensor_free(o);
    amp_tensor_free(f);
    amp_tensor_free(i);
}

static void test_scalar_shape_has_one_element(void)
{
    amp_tensor *s = amp_full(AMP_SHAPE(), AMP_F32, 4.0);
    CHECK_EQ_INT(amp_tensor_ndim(s), 0);
    CHECK_EQ_INT(amp_tensor_numel(s), 1);
    CHECK(amp_item(s) == 4.0);
    amp_tensor_free(s);
}

static void test_arange_counts_like_pytorch(void)
{
    amp_tensor *a = amp_arange(0, 10, 3, AMP_I64); /* 0 3 6 9 */
    CHECK_EQ_INT(amp_tensor_numel(a), 4);
    CHECK(amp_tensor_get(a, 3) == 9.0);
    amp_tensor *b = amp_arange(1, 2, 0.25, AMP_F32); /* 1 1.25 1.5 1.75 */
    CHECK_EQ_INT(amp_tensor_numel(b), 4);
    CHECK(amp_tensor_get(b, 3) == 1.75);
    CHECK(amp_arange(0, 1, 0, AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "arange");
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_copy_in_and_out_convert(void)
{
    float v[4] = {1.0f, 0.1f, -65536.0f, 3.0e38f};
    amp_tensor *t = amp_from_data(AMP_SHAPE(4), AMP_F32, v);
    uint16_t h[4];
    CHECK_OK(amp_tensor_copy_out(t, h, AMP_F16));
    CHECK(h[0] == 0x3C00);
    CHECK(h[1] == amp_f32_to_f16(0.1f));
    CHECK(h[2] == 0xFC00); /* -65536 overflows f16 to -inf */
    CHECK(h[3] == 0x7C00);
    amp_tensor *b = amp_zeros(AMP_SHAPE(4), AMP_BF16);
    CHECK_OK(amp_tensor_copy_in(b, v, AMP_F32));
    CHECK(amp_tensor_get(b, 2) == -65536.0);
    CHECK_EQ_INT(amp_tensor_copy_out(t, NULL, AMP_F32), AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "NULL destination");
    amp_tensor_free(t);
    amp_tensor_free(b);
}

static void test_bad_shapes_are_refused(void)
{
    amp_shape neg = AMP_SHAPE(2, -1);
    CHECK(amp_zeros(neg, AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "negative size");
    amp_shape big = {9, {1, 1, 1, 1, 1, 1, 1, 1}};
    CHECK(amp_zeros(big, AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "9 dims");
    CHECK(amp_zeros(AMP_SHAPE(2), (amp_dtype)42) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "invalid dtype");
    CHECK(amp_zeros(AMP_SHAPE(INT64_C(1) << 40, INT64_C(1) << 40), AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "too large");
}

static void test_item_and_get_check_ranges(void)
{
    amp_tensor *t = amp_zeros(AMP_SHAPE(2, 2), AMP_F32);
    CHECK(isnan(amp_item(t)));
    CHECK_ERROR(AMP_ERR_SHAPE, "4 elements");
    CHECK(isnan(amp_tensor_get(t, 4)));
    CHECK_ERROR(AMP_ERR_ARG, "out of range");
    CHECK_EQ_INT(amp_tensor_dim(t, 2), -1);
    CHECK_ERROR(AMP_ERR_ARG, "out of range");
    amp_tensor_free(t);
}

static void test_same_seed_same_numbers(void)
{
    amp_manual_seed(42);
    amp_tensor *a = amp_randn(AMP_SHAPE(1000), AMP_F32, 0, 1);
    amp_rng_state mid = amp_rng_get_state();
    amp_tensor *b = amp_rand(AMP_SHAPE(7), AMP_F32, -1, 1);
    amp_manual_seed(42);
    amp_tensor *a2 = amp_randn(AMP_SHAPE(1000), AMP_F32, 0, 1);
    CHECK(max_abs_diff(a, a2) == 0.0);
    amp_rng_set_state(mid);
    amp_tensor *b2 = amp_rand(AMP_SHAPE(7), AMP_F32, -1, 1);
    CHECK(max_abs_diff(b, b2) == 0.0);
    amp_manual_seed(43);
    amp_tensor *c = amp_randn(AMP_SHAPE(1000), AMP_F32, 0, 1);
    CHECK(max_abs_diff(a, c) > 0.1);
    amp_tensor_free(a);
    amp_tensor_free(a2);
    amp_tensor_free(b);
    amp_tensor_free(b2);
    amp_tensor_free(c);
}

/* The values do not depend on the thread count: each block of four comes
 * from its own Philox counter (randn and rand over several of the fill's
 * 4096-block grains, enough that the second thread takes some; a
 * length not a multiple of 4). */
static void test_random_values_do_not_depend_on_threads(void)
{
    const int64_t n = 64 * 4 * 4096 + 7;
    amp_tensor *one[2], *two[2];
    for (int pass = 0; pass < 2; pass++) {
        amp_tensor **out = pass ? two : one;
        amp_set_num_threads(pass ? 2 : 1);
        amp_manual_seed(11);
        out[0] = amp_randn(AMP_SHAPE(n), AMP_F32, 0.5, 2.0);
        out[1] = amp_rand(AMP_SHAPE(n), AMP_BF16, -3, 1);
    }
    amp_set_num_threads(0);
    for (int k = 0; k < 2; k++) {
        CHECK(one[k] && two[k]);
        if (one[k] && two[k])
            CHECK(memcmp(amp_tensor_data(one[k]), amp_tensor_data(two[k]),
                         (size_t)n * amp_dtype_size(amp_tensor_dtype(one[k]))) == 0);
        amp_tensor_free(one[k]);
        amp_tensor_free(two[k]);
    }
}

static void test_random_distributions_have_their_moments(void)
{
    amp_manual_seed(7);
    const int n = 200000;
    amp_tensor *g = amp_randn(AMP_SHAPE(n), AMP_F32, 1.0, 2.0);
    amp_tensor *u = amp_rand(AMP_SHAPE(n), AMP_F32, -3.0, 5.0);
    double sg = 0, sgg = 0, su = 0, lo = 1e9, hi = -1e9;
    for (int i = 0; i < n; i++) {
        double x = amp_tensor_get(g, i), y = amp_tensor_get(u, i);
        sg += x;
        sgg += x * x;
        su += y;
        lo = y < lo ? y : lo;
        hi = y > hi ? y : hi;
    }
    double mean = sg / n, var = sgg / n - mean * mean;
    /* Standard errors: mean 2/sqrt(n) ~ 0.0045; variance ~ 4*sqrt(2/n) ~ 0.013. */
    CHECK_NEAR(mean, 1.0, 0.03);
    CHECK_NEAR(var, 4.0, 0.08);
    CHECK_NEAR(su / n, 1.0, 0.05); /* uniform [-3, 5): mean 1, sd 2.31 */
    CHECK(lo >= -3.0 && hi < 5.0);
    amp_tensor_free(g);
    amp_tensor_free(u);
}

static void test_philox_matches_the_published_vector(void)
{
    /* Known-answer test from the Random123 distribution (kat_vectors):
     * philox4x32-10, counter 0, key 0. */
    uint32_t r[4];
    amp_philox(0, 0, 0, r);
    uint32_t expect[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(r[i] == expect[i], "philox word %d: %08x, expected %08x", i, r[i], expect[i]);
    /* counter 243f6a88 85a308d3 13198a2e 03707344, key a4093822 299f31d0 */
    amp_philox(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, r);
    uint32_t expect_pi[4] = {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(r[i] == expect_pi[i], "philox(pi) word %d: %08x, expected %08x", i, r[i],
                  expect_pi[i]);
}

static void test_clone_is_a_deep_copy(void)
{
    amp_tensor *a = amp_full(AMP_SHAPE(3), AMP_F32, 2.0);
    amp_tensor *b = amp_clone(a);
    amp_tensor_fill(a, 5.0);
    CHECK(amp_tensor_get(b, 0) == 2.0);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_memory_stats_count_live_and_peak_bytes(void)
{
    amp_memory_stats s0 = amp_memory_get_stats();
    amp_tensor *a = amp_zeros(AMP_SHAPE(1000), AMP_F32); /* 4000 -> 4032 bytes */
    amp_tensor *b = amp_zeros(AMP_SHAPE(1000), AMP_BF16); /* 2000 -> 2048: half */
    amp_memory_stats s1 = amp_memory_get_stats();
    CHECK_EQ_INT(s1.current - s0.current, 4032 + 2048);
    CHECK_EQ_INT(s1.allocs - s0.allocs, 2);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_memory_stats s2 = amp_memory_get_stats();
    CHECK_EQ_INT(s2.current, s0.current);
    CHECK(s2.peak >= s1.current);
    amp_memory_reset_peak();
    CHECK_EQ_INT(amp_memory_get_stats().peak, s2.current);
}

/* After a warm-up step, a training step takes no fresh memory from the OS:
 * every block comes back from the allocator's cache. */
static void test_steady_state_training_takes_no_fresh_memory(void)
{
#ifdef AMPC_NO_CACHE
    harness_skip("the caching allocator is off in this (sanitizer) build");
#else
    amp_tensor *w = amp_full(AMP_SHAPE(64, 32), AMP_F32, 0.01);
    amp_tensor *x = amp_full(AMP_SHAPE(16, 32), AMP_F32, 1.0);
    amp_tensor_set_requires_grad(w, true);
    amp_optim *opt = amp_optim_adam(&w, 1, amp_adam_defaults());
    size_t before = 0;
    for (int step = 0; step < 4; step++) {
        if (step == 2)
            before = amp_memory_get_stats().os_allocs;
        amp_optim_zero_grad(opt);
        amp_autocast_begin(AMP_CPU, AMP_BF16);
        amp_tensor *loss = amp_mean_all(amp_relu(amp_linear(x, w, NULL)));
        amp_autocast_end();
        CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_optim_step(opt));
        amp_temps_free();
    }
    CHECK_EQ_INT(amp_memory_get_stats().os_allocs - before, 0);
    amp_optim_free(opt);
    amp_tensor_free(w);
    amp_tensor_free(x);
#endif
}

int main(void)
{
    RUN(test_steady_state_training_takes_no_fresh_memory);
    RUN(test_memory_stats_count_live_and_peak_bytes);
    RUN(test_constructors_fill_values);
    RUN(test_scalar_shape_has_one_element);
    RUN(test_arange_counts_like_pytorch);
    RUN(test_copy_in_and_out_convert);
    RUN(test_bad_shapes_are_refused);
    RUN(test_item_and_get_check_ranges);
    RUN(test_same_seed_same_numbers);
    RUN(test_random_values_do_not_depend_on_threads);
    RUN(test_random_distributions_have_their_moments);
    RUN(test_philox_matches_the_published_vector);
    RUN(test_clone_is_a_deep_copy);
    return harness_done();
}
