/*
 * test_scaler.c - the grad scaler's conformance cases (AMP_SPEC.md,
 * "Conformance cases" 1-16) and the opt-in extras.
 * The rig and the cases test_cuda.c runs on CUDA too are in scaler_rig.h.
 */
#include "harness.h"
#include "scaler_rig.h"

#include <stdlib.h>

/* 1 */
static void test_defaults(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    CHECK(s != NULL);
    CHECK(amp_scaler_get_scale(s) == 65536.0);
    CHECK(amp_scaler_get_growth_factor(s) == 2.0);
    CHECK(amp_scaler_get_backoff_factor(s) == 0.5);
    CHECK_EQ_INT(amp_scaler_get_growth_interval(s), 2000);
    CHECK(amp_scaler_is_enabled(s));
    amp_scaler_state st = amp_scaler_state_get(s);
    CHECK(st.valid && st.scale == 65536.0 && st.growth_factor == 2.0 && st.backoff_factor == 0.5);
    CHECK_EQ_INT(st.growth_interval, 2000);
    CHECK_EQ_INT(st.growth_tracker, 0);
    amp_scaler_free(s);
}

/* 2 */
static void test_factor_validation_only_when_enabled(void)
{
    amp_scaler_opts o = amp_scaler_defaults();
    o.growth_factor = 1.0;
    CHECK(amp_scaler_new(o) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "growth factor must be > 1.0");
    o = amp_scaler_defaults();
    o.backoff_factor = 1.0;
    CHECK(amp_scaler_new(o) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "backoff factor must be < 1.0");
    o.enabled = false;
    o.growth_factor = 1.0;
    amp_scaler *s = amp_scaler_new(o);
    CHECK(s != NULL);
    amp_scaler_free(s);
}

/* The scale is an f32: factors within 2^-24 of 1 would never move it and
 * are refused; the nearest ones allowed move every scale tried, powers of
 * two (the worst case: a tie rounds back to them) included. */
static void test_factors_that_cannot_move_an_f32_scale_are_refused(void)
{
    const double bad_growth[] = {1.00000001, 1.0 + 0x1p-24}, bad_backoff[] = {0.99999999, 0.99999997, 1.0 - 0x1p-25};
    for (int i = 0; i < 2; i++) {
        amp_scaler_opts o = amp_scaler_defaults();
        o.growth_factor = bad_growth[i];
        CHECK_MSG(amp_scaler_new(o) == NULL, "growth %.17g accepted", bad_growth[i]);
        CHECK_ERROR(AMP_ERR_ARG, "rounds to 1 in fp32, so the scale (an fp32) would never grow");
    }
    for (int i = 0; i < 3; i++) {
        amp_scaler_opts o = amp_scaler_defaults();
        o.backoff_factor = bad_backoff[i];
        CHECK_MSG(amp_scaler_new(o) == NULL, "backoff %.17g accepted", bad_backoff[i]);
        CHECK_ERROR(AMP_ERR_ARG, "is within 2^-24 of 1, so the scale (an fp32) would never back off");
    }
    const double scales[] = {65536.0, 1.0, 3.0, 1.99999988079071044921875, 1.00000011920928955078125};
    rig r = make_rig(3, false);
    for (int i = 0; i < 5; i++) {
        amp_scaler *g = scaler_with(scales[i], 1.0 + 0x1p-23, 0.5, 1);
        amp_scaler *b = scaler_with(scales[i], 2.0, 1.0 - 0x1p-24, 1);
        CHECK(g != NULL && b != NULL);
        if (g && b) {
            CHECK(!iteration(g, r, 1.0));
            CHECK_MSG(amp_scaler_get_scale(g) > scales[i], "scale %.17g did not grow", scales[i]);
            CHECK(iteration(b, r, INFINITY));
            CHECK_MSG(amp_scaler_get_scale(b) < scales[i], "scale %.17g did not back off", scales[i]);
        }
        amp_scaler_free(g);
        amp_scaler_free(b);
    }
    free_rig(r);
}

/* 3 */
static void test_small_interval_sequence(void) { scaler_case_small_interval_sequence(AMP_CPU); }

/* 4 */
static void test_growth_after_exactly_2000_clean_steps(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = make_rig(1, false);
    for (int k = 0; k < 1999; k++)
        iteration(s, r, 1e-6);
    CHECK(amp_scaler_get_scale(s) == 65536.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 1999);
    amp_scaler_state at1999 = amp_scaler_state_get(s);
    iteration(s, r, 1e-6);
    CHECK(amp_scaler_get_scale(s) == 131072.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 0);
    /* From tracker 1999 again, an inf instead: backoff. */
    CHECK_OK(amp_scaler_state_load(s, at1999));
    CHECK(iteration(s, r, NAN));
    CHECK(amp_scaler_get_scale(s) == 32768.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 0);
    free_rig(r);
    amp_scaler_free(s);
}

/* 5 */
static void test_no_floor_by_default(void) { scaler_case_no_floor(AMP_CPU); }

/* 6 */
static void test_growth_to_inf_is_refused(void)
{
    amp_scaler *s = scaler_with(0x1p127, 2, 0.5, 1);
    rig r = make_rig(1, false);
    CHECK(!iteration(s, r, 0x1p-140)); /* scaled gradient stays finite */
    CHECK(amp_scaler_get_scale(s) == 0x1p127);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 0);
    free_rig(r);
    amp_scaler_free(s);
}

/* 7 */
static void test_two_overflowing_optimizers_back_off_once(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig a = make_rig(2, false), b = make_rig(2, true);
    amp_optim_zero_grad(a.opt);
    amp_optim_zero_grad(b.opt);
    backward_with_grad(s, a, INFINITY);
    backward_with_grad(s, b, NAN);
    bool sa, sb;
    CHECK_OK(amp_scaler_step(s, a.opt, &sa));
    CHECK_OK(amp_scaler_step(s, b.opt, &sb));
    CHECK(sa && sb);
    CHECK_OK(amp_scaler_update(s));
    CHECK(amp_scaler_get_scale(s) == 32768.0);
    free_rig(a);
    free_rig(b);
    amp_scaler_free(s);
}

/* 8 */
static void test_interval_one_with_a_skip(void) { scaler_case_interval_one_with_a_skip(AMP_CPU); }

/* 9: four micro-batches, stepping every two. */
static void test_accumulation_keeps_the_scale_between_micro_batches(void)
{
    amp_scaler *s = scaler_with(128, 2, 0.5, 1);
    rig r = make_rig(2, false);
    for (int step = 0; step < 2; step++) {
        amp_optim_zero_grad(r.opt);
        for (int micro = 0; micro < 2; micro++)
            backward_with_grad(s, r, 0.5); /* loss / 2 */
        CHECK_NEAR(amp_tensor_get(amp_tensor_grad(r.p), 0), 1.0 * amp_scaler_get_scale(s), 0);
        bool skipped;
        CHECK_OK(amp_scaler_step(s, r.opt, &skipped));
        CHECK(!skipped);
        CHECK_OK(amp_scaler_update(s));
    }
    CHECK(amp_scaler_get_scale(s) == 512.0);
    free_rig(r);
    amp_scaler_free(s);
}

/* 10 */
static void test_unscale_divides_exactly(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = make_rig(4, false);
    backward_with_grad(s, r, 1.0); /* gradient 65536 */
    CHECK(amp_tensor_get(amp_tensor_grad(r.p), 0) == 65536.0);
    CHECK_OK(amp_scaler_unscale(s, r.opt));
    CHECK(amp_tensor_get(amp_tensor_grad(r.p), 3) == 1.0);
    bool skipped = true;
    CHECK_OK(amp_scaler_step(s, r.opt, &skipped));
    CHECK(!skipped);
    free_rig(r);
    amp_scaler_free(s);
}

/* 11 */
static void test_nonfinite_gradient_skips_and_keeps_state(void)
{
    scaler_case_skip_preserves(AMP_CPU, false, INFINITY);
    scaler_case_skip_preserves(AMP_CPU, false, -INFINITY);
    scaler_case_skip_preserves(AMP_CPU, false, NAN);
    scaler_case_skip_preserves(AMP_CPU, true, INFINITY);
    scaler_case_skip_preserves(AMP_CPU, true, NAN);
}

/* 12 */
static void test_poison_after_unscale_still_steps(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = make_rig(2, false);
    backward_with_grad(s, r, 1.0);
    CHECK_OK(amp_scaler_unscale(s, r.opt));
    float *g = amp_tensor_data(amp_tensor_grad(r.p));
    g[0] = INFINITY;
    bool skipped = true;
    CHECK_OK(amp_scaler_step(s, r.opt, &skipped));
    CHECK(!skipped);
    CHECK(isinf(amp_tensor_get(r.p, 0)));
    free_rig(r);
    amp_scaler_free(s);
}

/* 13 */
static void test_update_to_new_scale(void)
{
    amp_scaler *s = scaler_with(128, 2, 0.5, 10);
    rig r = make_rig(1, false);
    iteration(s, r, 1.0);
    iteration(s, r, 1.0);
    amp_optim_zero_grad(r.opt);
    backward_with_grad(s, r, 1.0);
    CHECK_OK(amp_scaler_step(s, r.opt, NULL));
    CHECK_OK(amp_scaler_update_to(s, 1024));
    CHECK(amp_scaler_get_scale(s) == 1024.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 2);
    /* Stages are READY again: a new unscale is accepted. */
    amp_optim_zero_grad(r.opt);
    backward_with_grad(s, r, 1.0);
    CHECK_OK(amp_scaler_unscale(s, r.opt));
    free_rig(r);
    amp_scaler_free(s);
}

/* 14 */
static void test_misuse_messages(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    rig r = make_rig(2, false);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.opt), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "Attempted unscale_ but _scale is None");
    CHECK_EQ_INT(amp_scaler_step(s, r.opt, NULL), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "Attempted step but _scale is None");
    CHECK_EQ_INT(amp_scaler_update(s), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "Attempted update but _scale is None");

    /* scale() without a backward: nothing recorded. */
    amp_scaler_scale(s, amp_sum_all(r.p));
    CHECK_EQ_INT(amp_scaler_update(s), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "No inf checks were recorded prior to update.");
    CHECK_EQ_INT(amp_scaler_step(s, r.opt, NULL), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "No inf checks were recorded for this optimizer.");
    CHECK_OK(amp_scaler_update_to(s, 65536)); /* back to READY */

    backward_with_grad(s, r, 1.0);
    CHECK_OK(amp_scaler_unscale(s, r.opt));
    CHECK_EQ_INT(amp_scaler_unscale(s, r.opt), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE,
                "unscale_() has already been called on this optimizer since the last update().");
    CHECK_OK(amp_scaler_step(s, r.opt, NULL));
    CHECK_EQ_INT(amp_scaler_unscale(s, r.opt), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "unscale_() is being called after step().");
    CHECK_EQ_INT(amp_scaler_step(s, r.opt, NULL), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "step() has already been called since the last update().");
    CHECK_OK(amp_scaler_update(s));

    /* f16 gradients are refused. */
    amp_tensor *h = amp_full(AMP_SHAPE(2), AMP_F16, 1.0);
    amp_tensor_set_requires_grad(h, true);
    amp_optim *oh = amp_optim_sgd(&h, 1, amp_sgd_defaults());
    CHECK_OK(amp_backward(amp_scaler_scale(s, amp_sum_all(h))));
    CHECK_EQ_INT(amp_scaler_unscale(s, oh), AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "Attempting to unscale FP16 gradients.");
    amp_optim_free(oh);
    amp_tensor_free(h);
    free_rig(r);
    amp_scaler_free(s);
}

/* 15 */
static void test_disabled_scaler_is_transparent(void)
{
    amp_scaler_opts o = amp_scaler_defaults();
    o.enabled = false;
    amp_scaler *s = amp_scaler_new(o);
    rig r = make_rig(2, false);
    amp_tensor *loss = amp_sum_all(r.p);
    CHECK(amp_scaler_scale(s, loss) == loss);
    CHECK(amp_scaler_get_scale(s) == 1.0);
    CHECK(!amp_scaler_state_get(s).valid);
    amp_optim_zero_grad(r.opt);
    backward_with_grad(s, r, INFINITY);
    bool skipped = true;
    CHECK_OK(amp_scaler_step(s, r.opt, &skipped));
    CHECK(!skipped);
    CHECK(isinf(amp_tensor_get(r.p, 0)));
    CHECK_OK(amp_scaler_update(s));
    CHECK(amp_scaler_get_scale(s) == 1.0);
    free_rig(r);
    amp_scaler_free(s);
}

/* 16 */
static void test_state_round_trip(void)
{
    amp_scaler *a = scaler_with(3, 4, 0.5, 2);
    rig r = make_rig(1, false);
    iteration(a, r, 1.0);
    amp_scaler_state st = amp_scaler_state_get(a);
    CHECK(st.scale == 3.0 && st.growth_factor == 4.0 && st.backoff_factor == 0.5);
    CHECK_EQ_INT(st.growth_interval, 2);
    CHECK_EQ_INT(st.growth_tracker, 1);
    amp_scaler *b = amp_scaler_new(amp_scaler_defaults());
    CHECK_OK(amp_scaler_state_load(b, st));
    CHECK(amp_scaler_get_scale(b) == 3.0);
    CHECK(amp_scaler_get_growth_factor(b) == 4.0);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(b), 1);
    iteration(b, r, 1.0); /* tracker reaches the interval: 3 * 4 */
    CHECK(amp_scaler_get_scale(b) == 12.0);
    amp_scaler_state empty = {0};
    CHECK_EQ_INT(amp_scaler_state_load(b, empty), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "empty");
    free_rig(r);
    amp_scaler_free(a);
    amp_scaler_free(b);
}

static void test_min_scale_floor_and_max_scale_cap(void)
{
    amp_scaler_opts o = amp_scaler_defaults();
    o.init_scale = 8;
    o.min_scale = 2;
    o.max_scale = 16;
    o.growth_interval = 1;
    amp_scaler *s = amp_scaler_new(o);
    rig r = make_rig(1, false);
    for (int k = 0; k < 5; k++)
        iteration(s, r, INFINITY);
    CHECK(amp_scaler_get_scale(s) == 2.0);
    for (int k = 0; k < 5; k++)
        iteration(s, r, 1.0);
    CHECK(amp_scaler_get_scale(s) == 16.0);
    free_rig(r);
    amp_scaler_free(s);
}

static void test_hysteresis_tolerates_overflows(void)
{
    amp_scaler_opts o = amp_scaler_defaults();
    o.init_scale = 64;
    o.hysteresis = 3;
    amp_scaler *s = amp_scaler_new(o);
    rig r = make_rig(1, false);
    CHECK(iteration(s, r, INFINITY)); /* skipped, but the scale holds */
    CHECK(iteration(s, r, INFINITY));
    CHECK(amp_scaler_get_scale(s) == 64.0);
    CHECK(iteration(s, r, INFINITY)); /* the third: back off */
    CHECK(amp_scaler_get_scale(s) == 32.0);
    CHECK(iteration(s, r, INFINITY)); /* until it grows again, each backs off */
    CHECK(amp_scaler_get_scale(s) == 16.0);
    free_rig(r);
    amp_scaler_free(s);
}

static void test_f16_health_counts_underflow_and_overflow(void)
{
    amp_scaler *s = scaler_with(1, 2, 0.5, 2000);
    rig r = make_rig(6, false);
    float c[6] = {1e-9f, 1.0f, 1e5f, 0.0f, INFINITY, NAN};
    amp_tensor *ct = amp_from_data(AMP_SHAPE(6), AMP_F32, c);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(r.p, ct))));
    int64_t under, over;
    CHECK_OK(amp_scaler_f16_health(s, r.p, &under, &over));
    CHECK_EQ_INT(under, 1); /* 1e-9 < 2^-25; exact zero is not counted */
    CHECK_EQ_INT(over, 3);  /* 1e5 > 65504, and the inf and the NaN */
    amp_tensor_free(ct);
    free_rig(r);
    amp_scaler_free(s);
}

/* The f16 class of x as the f16 conversion itself rounds it: the
 * reference amp_grad_f16_health's thresholds must agree with. */
static int f16_class_of(float x)
{
    if (isnan(x) || isinf(x))
        return 4; /* nonfinite */
    if (x == 0)
        return 0; /* zero */
    uint16_t h = amp_f32_to_f16(x);
    if ((h & 0x7fff) == 0)
        return 1; /* underflow */
    if ((h & 0x7c00) == 0)
        return 2; /* subnormal */
    if ((h & 0x7fff) == 0x7c00)
        return 3; /* overflow */
    return 5; /* a normal f16 */
}

/* amp_grad_f16_health against the conversion on f16's rounding
 * boundaries (each value, its neighbours in f32, both signs), unscaled
 * and at scale 2^10, over two parameters. */
static void test_grad_f16_health_matches_the_conversion(void)
{
    const float edges[] = {0x1p-25f, 0x1p-24f, 0x1.8p-25f, 0x1p-14f - 0x1p-25f, 0x1p-14f - 0x1p-24f, 0x1p-14f,
                           65504.0f, 65519.0f, 65520.0f, 1.0f, 0x1p-40f, 1e30f};
    enum { NE = sizeof edges / sizeof edges[0], N = NE * 6 + 3 };
    float c[N];
    int k = 0;
    for (int i = 0; i < NE; i++) {
        float v[3] = {nextafterf(edges[i], 0), edges[i], nextafterf(edges[i], INFINITY)};
        for (int j = 0; j < 3; j++) {
            c[k++] = v[j];
            c[k++] = -v[j];
        }
    }
    c[k++] = 0.0f;
    c[k++] = INFINITY;
    c[k++] = NAN;
    const double scales[] = {1.0, 1024.0};
    for (int si = 0; si < 2; si++) {
        int64_t want[6] = {0};
        for (int i = 0; i < N; i++)
            want[f16_class_of(isfinite(c[i]) ? (float)(c[i] * scales[si]) : c[i])]++;
        /* Two parameters: the first N / 2 values, then the rest. */
        int n0 = N / 2;
        amp_tensor *p[2] = {amp_full(AMP_SHAPE(n0), AMP_F32, 1.0), amp_full(AMP_SHAPE(N - n0), AMP_F32, 1.0)};
        amp_tensor *ct[2] = {amp_from_data(AMP_SHAPE(n0), AMP_F32, c),
                             amp_from_data(AMP_SHAPE(N - n0), AMP_F32, c + n0)};
        for (int i = 0; i < 2; i++) {
            amp_tensor_set_requires_grad(p[i], true);
            CHECK_OK(amp_backward(amp_sum_all(amp_mul(p[i], ct[i]))));
        }
        amp_f16_health at, un;
        CHECK_OK(amp_grad_f16_health(p, 2, scales[si], &at, &un));
        CHECK_EQ_INT(at.numel, N);
        CHECK_EQ_INT(at.zero, want[0]);
        CHECK_EQ_INT(at.underflow, want[1]);
        CHECK_EQ_INT(at.subnormal, want[2]);
        CHECK_EQ_INT(at.overflow, want[3]);
        CHECK_EQ_INT(at.nonfinite, want[4]);
        if (si == 0) /* scale 1: the unscaled counts are the same */
            CHECK(memcmp(&at, &un, sizeof at) == 0);
        else /* fewer flush, more overflow at 2^10 than unscaled */
            CHECK(at.underflow < un.underflow && at.overflow > un.overflow && un.numel == N);
        /* Bad arguments: a clear error, nothing written. */
        CHECK(amp_grad_f16_health(p, 2, 0.0, &at, NULL) == AMP_ERR_ARG);
        CHECK(amp_grad_f16_health(p, 2, INFINITY, &at, NULL) == AMP_ERR_ARG);
        CHECK(amp_grad_f16_health(NULL, 2, 1.0, &at, NULL) == AMP_ERR_ARG);
        CHECK(amp_grad_f16_health(p, 2, 1.0, NULL, NULL) == AMP_ERR_ARG);
        for (int i = 0; i < 2; i++) {
            amp_tensor_free(p[i]);
            amp_tensor_free(ct[i]);
        }
    }
    /* No gradients: all counts 0. */
    amp_tensor *q = amp_full(AMP_SHAPE(3), AMP_F32, 1.0);
    amp_f16_health h = {1, 1, 1, 1, 1, 1};
    CHECK_OK(amp_grad_f16_health(&q, 1, 1.0, &h, NULL));
    CHECK_EQ_INT(h.numel, 0);
    CHECK_EQ_INT(h.zero, 0);
    amp_tensor_free(q);
}

/* The hysteresis count: read, set, and what the next overflow does. */
static void test_hysteresis_left_get_and_set(void)
{
    amp_scaler_opts o = amp_scaler_defaults();
    o.init_scale = 64;
    o.hysteresis = 3;
    amp_scaler *s = amp_scaler_new(o);
    rig r = make_rig(3, false);
    CHECK_EQ_INT(amp_scaler_get_hysteresis_left(s), 3);
    CHECK(iteration(s, r, INFINITY));
    CHECK_EQ_INT(amp_scaler_get_hysteresis_left(s), 2);
    CHECK(amp_scaler_get_scale(s) == 64.0);
    CHECK_OK(amp_scaler_set_hysteresis_left(s, 1)); /* the next overflow backs off */
    CHECK(iteration(s, r, INFINITY));
    CHECK(amp_scaler_get_scale(s) == 32.0);
    CHECK(amp_scaler_set_hysteresis_left(s, 0) == AMP_ERR_ARG);
    CHECK(amp_scaler_set_hysteresis_left(s, 4) == AMP_ERR_ARG);
    CHECK(strstr(amp_last_error(), "outside 1..3") != NULL);
    CHECK(amp_scaler_set_hysteresis_left(NULL, 1) == AMP_ERR_ARG);
    CHECK_EQ_INT(amp_scaler_get_hysteresis_left(NULL), 0);
    free_rig(r);
    amp_scaler_free(s);
    o.hysteresis = 0; /* none: the count is 1, and only 1 can be set */
    s = amp_scaler_new(o);
    CHECK_EQ_INT(amp_scaler_get_hysteresis_left(s), 1);
    CHECK(amp_scaler_set_hysteresis_left(s, 2) == AMP_ERR_ARG);
    amp_scaler_free(s);
}

/* PyTorch's promotion: the 0-d f32 scale does not widen a dimensioned f16
 * tensor, so scaling f16 outputs stays f16 (and overflows as in PyTorch). */
static void test_scale_keeps_dimensioned_16bit_outputs(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    amp_tensor *h = amp_full(AMP_SHAPE(3), AMP_F16, 2.0);
    amp_tensor *out = amp_scaler_scale(s, h);
    CHECK(out && amp_tensor_dtype(out) == AMP_F16);
    CHECK(out && isinf(amp_tensor_get(out, 0))); /* 2 * 65536 > 65504 */
    amp_tensor *l = amp_full(AMP_SHAPE(), AMP_F16, 2.0);
    amp_tensor *lo = amp_scaler_scale(s, l);
    CHECK(lo && amp_tensor_dtype(lo) == AMP_F32 && amp_item(lo) == 131072.0);
    amp_tensor_free(h);
    amp_tensor_free(l);
    amp_scaler_free(s);
}

int main(void)
{
    RUN(test_scale_keeps_dimensioned_16bit_outputs);
    RUN(test_defaults);
    RUN(test_factor_validation_only_when_enabled);
    RUN(test_factors_that_cannot_move_an_f32_scale_are_refused);
    RUN(test_small_interval_sequence);
    RUN(test_growth_after_exactly_2000_clean_steps);
    RUN(test_no_floor_by_default);
    RUN(test_growth_to_inf_is_refused);
    RUN(test_two_overflowing_optimizers_back_off_once);
    RUN(test_interval_one_with_a_skip);
    RUN(test_accumulation_keeps_the_scale_between_micro_batches);
    RUN(test_unscale_divides_exactly);
    RUN(test_nonfinite_gradient_skips_and_keeps_state);
    RUN(test_poison_after_unscale_still_steps);
    RUN(test_update_to_new_scale);
    RUN(test_misuse_messages);
    RUN(test_disabled_scaler_is_transparent);
    RUN(test_state_round_trip);
    RUN(test_min_scale_floor_and_max_scale_cap);
    RUN(test_hysteresis_tolerates_overflows);
    RUN(test_f16_health_counts_underflow_and_overflow);
    RUN(test_grad_f16_health_matches_the_conversion);
    RUN(test_hysteresis_left_get_and_set);
    return harness_done();
}
