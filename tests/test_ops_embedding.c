/*
 * test_ops_embedding.c - the ops of src/ops/embedding.c: embedding (row
 * gather, scatter-add gradient) and dropout (Philox mask regenerated in
 * backward). Values by index arithmetic and by replaying the generator
 * here, statistics of the mask with binomial bounds, finite-difference
 * gradients, 16-bit dtypes and the errors.
 */
#include "harness.h"
#include "base/base.h"

#include <stdlib.h>

/* ----------------------------------------------------------- embedding */

static void test_embedding_gathers_rows(void)
{
    amp_tensor *w = test_uniform(AMP_SHAPE(5, 3), AMP_F32, -1, 1, 1);
    const int64_t ix[6] = {4, 0, 2, 2, 4, 1};
    const int32_t ix32[6] = {4, 0, 2, 2, 4, 1};
    amp_tensor *idx = amp_from_data(AMP_SHAPE(2, 3), AMP_I64, ix);
    amp_tensor *idx32 = amp_from_data(AMP_SHAPE(3, 2), AMP_I32, ix32);
    amp_tensor *y = amp_embedding(w, idx), *y32 = amp_embedding(w, idx32);
    CHECK(y && y32);
    CHECK_EQ_INT(amp_tensor_ndim(y), 3);
    CHECK_EQ_INT(amp_tensor_dim(y, 0), 2);
    CHECK_EQ_INT(amp_tensor_dim(y, 1), 3);
    CHECK_EQ_INT(amp_tensor_dim(y, 2), 3);
    CHECK_EQ_INT(amp_tensor_dim(y32, 0), 3);
    for (int i = 0; y && y32 && i < 6; i++)
        for (int j = 0; j < 3; j++) {
            CHECK_NEAR(amp_tensor_get(y, i * 3 + j), amp_tensor_get(w, ix[i] * 3 + j), 0);
            CHECK_NEAR(amp_tensor_get(y32, i * 3 + j), amp_tensor_get(w, ix[i] * 3 + j), 0);
        }
    /* A scalar index gives one row, shape [D]. */
    int64_t one = 3;
    amp_tensor *s = amp_from_data(AMP_SHAPE(), AMP_I64, &one);
    amp_tensor *ys = amp_embedding(w, s);
    CHECK(ys && amp_tensor_ndim(ys) == 1 && amp_tensor_dim(ys, 0) == 3);
    amp_tensor_free(w);
    amp_tensor_free(idx);
    amp_tensor_free(idx32);
    amp_tensor_free(s);
}

static amp_tensor *emb_fn(amp_tensor **in, void *ctx)
{
    return amp_embedding(in[0], (amp_tensor *)ctx);
}

/* Repeated indices: their gradients add up in the shared row. */
static void test_embedding_gradcheck_repeated_indices(void)
{
    amp_tensor *w = test_uniform(AMP_SHAPE(6, 4), AMP_F32, -1, 1, 2);
    amp_tensor_set_requires_grad(w, true);
    const int64_t ix[8] = {1, 3, 1, 1, 5, 0, 3, 1};
    amp_tensor *idx = amp_from_data(AMP_SHAPE(2, 4), AMP_I64, ix);
    CHECK(gradcheck("embedding", emb_fn, &w, 1, idx, 1e-2, 1e-3, 1e-3));
    amp_tensor_free(w);
    amp_tensor_free(idx);
}

static void test_embedding_backward_sums_rows(void)
{
    amp_tensor *w = test_uniform(AMP_SHAPE(4, 2), AMP_F32, -1, 1, 3);
    amp_tensor_set_requires_grad(w, true);
    const int32_t ix[5] = {2, 0, 2, 2, 3};
    amp_tensor *idx = amp_from_data(AMP_SHAPE(5), AMP_I32, ix);
    amp_tensor *y = amp_embedding(w, idx);
    amp_tensor *g = test_uniform(AMP_SHAPE(5, 2), AMP_F32, -1, 1, 4);
    CHECK_OK(amp_backward_with(y, g));
    amp_tensor *gw = amp_tensor_grad(w);
    CHECK(gw != NULL);
    CHECK(!amp_tensor_requires_grad(idx));
    for (int r = 0; gw && r < 4; r++)
        for (int j = 0; j < 2; j++) {
            double want = 0;
            for (int i = 0; i < 5; i++)
                if (ix[i] == r)
                    want += amp_tensor_get(g, i * 2 + j);
            CHECK_NEAR(amp_tensor_get(gw, r * 2 + j), want, 1e-6); /* row 1 stays 0 */
        }
    amp_tensor_free(w);
    amp_tensor_free(idx);
    amp_tensor_free(g);
}

/* A bf16 table: the forward copies bits, the gradient is summed in f32 and
 * rounded once. 299 hits of one row with gradient 1 give 299, which
 * bf16 rounds to 300; summing in bf16 would stall at 256, where 256 + 1
 * rounds back to 256. */
static void test_embedding_bf16_accumulates_in_f32(void)
{
    amp_tensor *w = test_uniform(AMP_SHAPE(3, 2), AMP_BF16, -1, 1, 5);
    amp_tensor_set_requires_grad(w, true);
    int64_t *ix = calloc(300, sizeof *ix);
    ix[7] = 2;
    amp_tensor *idx = amp_from_data(AMP_SHAPE(300), AMP_I64, ix);
    amp_tensor *y = amp_embedding(w, idx);
    CHECK(y != NULL);
    CHECK_EQ_INT(amp_tensor_dtype(y), AMP_BF16);
    const uint16_t *wb = amp_tensor_cdata(w);
    for (int j = 0; y && j < 2; j++) {
        CHECK_EQ_INT(((const uint16_t *)amp_tensor_cdata(y))[0 * 2 + j], wb[0 * 2 + j]);
        CHECK_EQ_INT(((const uint16_t *)amp_tensor_cdata(y))[7 * 2 + j], wb[2 * 2 + j]);
    }
    amp_tensor *g = amp_ones(AMP_SHAPE(300, 2), AMP_BF16);
    CHECK_OK(amp_backward_with(y, g));
    amp_tensor *gw = amp_tensor_grad(w);
    CHECK(gw != NULL);
    CHECK_EQ_INT(amp_tensor_dtype(gw), AMP_BF16);
    CHECK_NEAR(amp_tensor_get(gw, 0), 300, 0); /* 299 hits: a tie, rounded to even 300 */
    CHECK_NEAR(amp_tensor_get(gw, 1), 300, 0);
    CHECK_NEAR(amp_tensor_get(gw, 4), 1, 0);
    CHECK_NEAR(amp_tensor_get(gw, 2), 0, 0);
    free(ix);
    amp_tensor_free(w);
    amp_tensor_free(idx);
    amp_tensor_free(g);
}

static void test_embedding_errors(void)
{
    amp_tensor *w = amp_zeros(AMP_SHAPE(5, 3), AMP_F32);
    const int64_t bad[3] = {0, 5, 1}, neg[2] = {-1, 0};
    amp_tensor *ib = amp_from_data(AMP_SHAPE(3), AMP_I64, bad);
    amp_tensor *in = amp_from_data(AMP_SHAPE(2), AMP_I64, neg);
    CHECK(amp_embedding(w, ib) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "embedding: index 5 (at position 1) is out of range for 5 rows");
    CHECK(amp_embedding(w, in) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "index -1");
    amp_tensor *fi = amp_zeros(AMP_SHAPE(2), AMP_F32);
    CHECK(amp_embedding(w, fi) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "indices must be i32 or i64");
    amp_tensor *w1 = amp_zeros(AMP_SHAPE(5), AMP_F32);
    amp_tensor *ok = amp_zeros(AMP_SHAPE(2), AMP_I64);
    CHECK(amp_embedding(w1, ok) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "weight must be 2-D");
    amp_tensor *wi = amp_zeros(AMP_SHAPE(5, 3), AMP_I32);
    CHECK(amp_embedding(wi, ok) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "input 0 has dtype i32");
    amp_tensor *all[6] = {w, ib, in, fi, w1, ok};
    for (int i = 0; i < 6; i++)
        amp_tensor_free(all[i]);
    amp_tensor_free(wi);
}

/* ------------------------------------------------------------- dropout */

/* Whether element j is kept, replaying the generator from state s. */
static bool kept(amp_rng_state s, int64_t j, double p)
{
    uint32_t r[4];
    amp_philox(s.seed, 0, s.offset + (uint64_t)j / 4, r);
    return (double)amp_u32_to_unit(r[j % 4]) >= p;
}

static void test_dropout_same_seed_same_mask(void)
{
    amp_tensor *x = amp_ones(AMP_SHAPE(1001), AMP_F32);
    amp_manual_seed(7);
    amp_tensor *a = amp_dropout(x, 0.4, true);
    amp_tensor *b = amp_dropout(x, 0.4, true); /* the generator moved on */
    amp_manual_seed(7);
    amp_tensor *c = amp_dropout(x, 0.4, true);
    CHECK(a && b && c);
    CHECK_NEAR(max_abs_diff(a, c), 0, 0);
    CHECK(max_abs_diff(a, b) > 0);
    /* Each call reserves ceil(n / 4) counters. */
    CHECK_EQ_INT(amp_rng_get_state().offset, (1001 + 3) / 4);
    amp_tensor_free(x);
}

/* The mask is the documented function of (seed, counter): zero where the
 * uniform from word j % 4 of counter first + j / 4 is below p. */
static void test_dropout_mask_follows_philox(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(7, 13), AMP_F32, 1, 2, 8);
    amp_manual_seed(123);
    amp_tensor *skip = amp_rand(AMP_SHAPE(5), AMP_F32, 0, 1); /* a nonzero first counter */
    amp_rng_state s = amp_rng_get_state();
    CHECK(s.offset > 0);
    const double p = 0.3;
    amp_tensor *y = amp_dropout(x, p, true);
    CHECK(y != NULL);
    const float scale = (float)(1.0 / (1.0 - p));
    for (int64_t j = 0; y && j < 91; j++) {
        double want = kept(s, j, p) ? (double)((float)amp_tensor_get(x, j) * scale) : 0.0;
        if (amp_tensor_get(y, j) != want) {
            harness_fail(__FILE__, __LINE__, "dropout[%lld] = %g, expected %g", (long long)j,
                         amp_tensor_get(y, j), want);
            break;
        }
    }
    amp_tensor_free(x);
    amp_tensor_free(skip);
}

/* Over n = 200000 elements the zeroed fraction is p within 5 binomial
 * standard deviations, and the mean of dropout(ones) stays 1. */
static void test_dropout_statistics(void)
{
    const int64_t n = 200000;
    amp_tensor *x = amp_ones(AMP_SHAPE(n), AMP_F32);
    const double ps[3] = {0.1, 0.5, 0.8};
    amp_manual_seed(99);
    for (int k = 0; k < 3; k++) {
        const double p = ps[k];
        amp_tensor *y = amp_dropout(x, p, true);
        CHECK(y != NULL);
        const float *v = amp_tensor_cdata(y);
        int64_t zeros = 0;
        double sum = 0;
        bool scaled = true;
        for (int64_t i = 0; y && i < n; i++) {
            zeros += v[i] == 0;
            sum += v[i];
            scaled &= v[i] == 0 || v[i] == (float)(1.0 / (1.0 - p));
        }
        CHECK(scaled);
        double sd = sqrt(p * (1 - p) / (double)n);
        CHECK_MSG(fabs((double)zeros / (double)n - p) < 5 * sd, "p %g: zeroed fraction %g (sd %g)", p,
                  (double)zeros / (double)n, sd);
        /* mean = kept / (n (1-p)); its sd is sd / (1-p). */
        CHECK_MSG(fabs(sum / (double)n - 1) < 5 * sd / (1 - p), "p %g: mean %g", p, sum / (double)n);
    }
    amp_tensor_free(x);
}

/* The gradient is gout through the same mask and scale, without the mask
 * having been stored: it is regenerated from (seed, counter). */
static void test_dropout_backward_uses_forward_mask(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(40, 25), AMP_F32, 1, 2, 9); /* no zeros of its own */
    amp_tensor_set_requires_grad(x, true);
    const double p = 0.35;
    amp_tensor *y = amp_dropout(x, p, true);
    amp_tensor *r = amp_rand(AMP_SHAPE(64), AMP_F32, 0, 1); /* the generator moves on meanwhile */
    amp_tensor *g = test_uniform(AMP_SHAPE(40, 25), AMP_F32, -1, 1, 10);
    CHECK(y && r);
    CHECK_OK(amp_backward_with(y, g));
    amp_tensor *gx = amp_tensor_grad(x);
    CHECK(gx != NULL);
    const float scale = (float)(1.0 / (1.0 - p));
    int64_t mism = 0;
    for (int64_t j = 0; gx && j < 1000; j++) {
        bool keep = amp_tensor_get(y, j) != 0;
        double want = keep ? (double)((float)amp_tensor_get(g, j) * scale) : 0.0;
        mism += amp_tensor_get(gx, j) != want;
    }
    CHECK_EQ_INT(mism, 0);
    amp_tensor_free(x);
    amp_tensor_free(g);
    amp_tensor_free(r);
}

typedef struct {
    amp_rng_state s;
    double p;
} drop_ctx;

static amp_tensor *drop_fn(amp_tensor **in, void *ctx)
{
    drop_ctx *c = ctx;
    amp_rng_set_state(c->s); /* the same mask for every evaluation */
    return amp_dropout(in[0], c->p, true);
}

static void test_dropout_gradcheck(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(5, 7), AMP_F32, -1, 1, 11);
    amp_tensor_set_requires_grad(x, true);
    drop_ctx c = {amp_rng_get_state(), 0.5};
    CHECK(gradcheck("dropout", drop_fn, &x, 1, &c, 1e-2, 1e-3, 1e-3));
    amp_tensor_free(x);
}

/* p == 0 and eval mode: a copy, the gradient passes through unchanged,
 * and the generator does not move. p == 1: all zeros, zero gradient. */
static void test_dropout_identity_and_all_zero(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 4), AMP_BF16, -1, 1, 12);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *g = test_uniform(AMP_SHAPE(3, 4), AMP_BF16, -1, 1, 13);
    for (int mode = 0; mode < 2; mode++) {
        amp_rng_state before = amp_rng_get_state();
        amp_tensor *y = mode ? amp_dropout(x, 0.5, false) : amp_dropout(x, 0.0, true);
        CHECK(y != NULL);
        CHECK_EQ_INT(amp_rng_get_state().offset, before.offset);
        CHECK(amp_tensor_data(y) != amp_tensor_data(x));
        CHECK_NEAR(max_abs_diff(x, y), 0, 0);
        amp_tensor_clear_grad(x);
        CHECK_OK(amp_backward_with(y, g));
        CHECK_NEAR(max_abs_diff(amp_tensor_grad(x), g), 0, 0);
    }
    amp_tensor *z = amp_dropout(x, 1.0, true);
    CHECK(z != NULL);
    for (int i = 0; z && i < 12; i++)
        CHECK_NEAR(amp_tensor_get(z, i), 0, 0);
    amp_tensor_clear_grad(x);
    CHECK_OK(amp_backward_with(z, g));
    for (int i = 0; amp_tensor_grad(x) && i < 12; i++)
        CHECK_NEAR(amp_tensor_get(amp_tensor_grad(x), i), 0, 0);
    amp_tensor_free(x);
    amp_tensor_free(g);
}

/* 16-bit dropout draws the same mask as f32 from the same state, and each
 * kept value is x * scale computed in f32 and rounded once. */
static void test_dropout_16bit_matches_f32_mask(void)
{
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int t = 0; t < 2; t++) {
        amp_tensor *x16 = test_uniform(AMP_SHAPE(2051), dts[t], 0.5, 3, 14 + t);
        amp_tensor *x32 = amp_clone(amp_to(x16, AMP_F32));
        amp_rng_state s = amp_rng_get_state();
        amp_tensor *y16 = amp_dropout(x16, 0.25, true);
        amp_rng_set_state(s);
        amp_tensor *y32 = amp_dropout(x32, 0.25, true);
        CHECK(y16 && y32);
        CHECK_EQ_INT(amp_tensor_dtype(y16), dts[t]);
        amp_tensor *r = amp_to(y32, dts[t]); /* f32 result rounded once */
        const uint16_t *a = amp_tensor_cdata(y16), *b = amp_tensor_cdata(r);
        int64_t mism = 0;
        for (int64_t i = 0; r && i < 2051; i++)
            mism += a[i] != b[i];
        CHECK_EQ_INT(mism, 0);
        amp_tensor_free(x16);
        amp_tensor_free(x32);
    }
}

static void test_dropout_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(4), AMP_F32);
    amp_tensor *xi = amp_zeros(AMP_SHAPE(4), AMP_I64);
    CHECK(amp_dropout(x, 1.5, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "probability 1.5 is not in [0, 1]");
    CHECK(amp_dropout(x, -0.1, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "probability");
    CHECK(amp_dropout(xi, 0.5, true) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "dropout: input 0 has dtype i64");
    amp_tensor_free(x);
    amp_tensor_free(xi);
}

int main(void)
{
    RUN(test_embedding_gathers_rows);
    RUN(test_embedding_gradcheck_repeated_indices);
    RUN(test_embedding_backward_sums_rows);
    RUN(test_embedding_bf16_accumulates_in_f32);
    RUN(test_embedding_errors);
    RUN(test_dropout_same_seed_same_mask);
    RUN(test_dropout_mask_follows_philox);
    RUN(test_dropout_statistics);
    RUN(test_dropout_backward_uses_forward_mask);
    RUN(test_dropout_gradcheck);
    RUN(test_dropout_identity_and_all_zero);
    RUN(test_dropout_16bit_matches_f32_mask);
    RUN(test_dropout_errors);
    return harness_done();
}
