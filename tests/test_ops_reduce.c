/*
 * test_ops_reduce.c - sum and mean over lists of dims (keepdim, negative
 * dims, all dims), their accuracy on a million f32 values, independence
 * from the thread count, gradients, 16-bit dtypes, argmax (ties, NaN,
 * i64 result) and the errors.
 */
#include "harness.h"

#include <stdlib.h>

/* Reference: sums of x (read as double) over the dims in mask, in double,
 * written to ref in row-major order of the kept dims. Returns the count of
 * elements per output. */
static int64_t ref_sum(const amp_tensor *x, unsigned mask, double *ref)
{
    amp_shape s = amp_tensor_shape(x);
    int64_t on = 1, count = 1;
    for (int d = 0; d < s.ndim; d++) {
        if (mask >> d & 1u)
            count *= s.d[d];
        else
            on *= s.d[d];
    }
    for (int64_t j = 0; j < on; j++)
        ref[j] = 0;
    for (int64_t i = 0; i < amp_tensor_numel(x); i++) {
        int64_t rest = i, o = 0, stride = 1;
        for (int d = s.ndim - 1; d >= 0; d--) {
            int64_t c = rest % s.d[d];
            rest /= s.d[d];
            if (!(mask >> d & 1u)) {
                o += c * stride;
                stride *= s.d[d];
            }
        }
        ref[o] += amp_tensor_get(x, i);
    }
    return count;
}

/* |got - ref| within k f32 ulps of ref. */
static bool within_ulps(double got, double ref, double k)
{
    return fabs(got - ref) <= k * fmax(fabs(ref), 1e-30) * 0x1p-23;
}

static bool shape_is(const amp_tensor *t, amp_shape s)
{
    amp_shape a = amp_tensor_shape(t);
    if (!t || a.ndim != s.ndim)
        return false;
    for (int i = 0; i < s.ndim; i++)
        if (a.d[i] != s.d[i])
            return false;
    return true;
}

/* Runs sum or mean over dims and checks shape and values (within 1 ulp of
 * the double result). */
static void check_reduce(amp_tensor *x, bool mean, int nd, const int *dims, bool keepdim, amp_shape want)
{
    amp_tensor *y = mean ? amp_mean(x, nd, dims, keepdim) : amp_sum(x, nd, dims, keepdim);
    CHECK_MSG(y != NULL, "%s failed: %s", mean ? "mean" : "sum", amp_last_error());
    if (!y)
        return;
    CHECK_MSG(shape_is(y, want), "%s: wrong shape", mean ? "mean" : "sum");
    unsigned mask = 0;
    int xn = amp_tensor_ndim(x);
    for (int k = 0; k < nd; k++)
        mask |= 1u << (dims[k] < 0 ? dims[k] + xn : dims[k]);
    double *ref = malloc(sizeof(double) * (size_t)amp_tensor_numel(x) + 8);
    int64_t count = ref_sum(x, mask, ref);
    for (int64_t j = 0; j < amp_tensor_numel(y); j++) {
        double r = mean ? ref[j] / (double)count : ref[j];
        if (!within_ulps(amp_tensor_get(y, j), r, 1)) {
            harness_fail(__FILE__, __LINE__, "%s[%lld] = %.9g, expected %.9g", mean ? "mean" : "sum",
                         (long long)j, amp_tensor_get(y, j), r);
            break;
        }
    }
    free(ref);
}

static void test_sum_one_dim_keepdim_or_not(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 4, 5), AMP_F32, -2, 2, 1);
    check_reduce(x, false, 1, (int[]){1}, false, AMP_SHAPE(3, 5));
    check_reduce(x, false, 1, (int[]){1}, true, AMP_SHAPE(3, 1, 5));
    check_reduce(x, false, 1, (int[]){0}, false, AMP_SHAPE(4, 5));
    check_reduce(x, false, 1, (int[]){2}, true, AMP_SHAPE(3, 4, 1));
    amp_tensor_free(x);
}

static void test_sum_several_and_negative_dims(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 4, 5), AMP_F32, -2, 2, 2);
    check_reduce(x, false, 2, (int[]){0, 2}, false, AMP_SHAPE(4));
    check_reduce(x, false, 2, (int[]){2, 0}, true, AMP_SHAPE(1, 4, 1));
    check_reduce(x, false, 2, (int[]){-1, -3}, false, AMP_SHAPE(4));
    check_reduce(x, false, 2, (int[]){-2, -1}, false, AMP_SHAPE(3));
    check_reduce(x, false, 3, (int[]){0, 1, 2}, false, AMP_SHAPE());
    amp_tensor *w = test_uniform(AMP_SHAPE(2, 3, 4, 5), AMP_F32, -2, 2, 3);
    check_reduce(w, false, 2, (int[]){1, 3}, false, AMP_SHAPE(2, 4));
    check_reduce(w, true, 2, (int[]){0, 2}, true, AMP_SHAPE(1, 3, 1, 5));
    amp_tensor_free(x);
    amp_tensor_free(w);
}

/* Every dim of an 8-dim tensor (AMP_MAX_DIMS) may be listed. */
static void test_sum_over_eight_dims(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 1, 3, 1, 2, 1, 2, 2), AMP_F32, -2, 2, 4);
    check_reduce(x, false, 8, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, false, AMP_SHAPE());
    check_reduce(x, true, 7, (int[]){0, 1, 2, 3, 4, 5, 7}, true, AMP_SHAPE(1, 1, 1, 1, 1, 1, 2, 1));
    CHECK(amp_sum(x, 9, (int[]){0, 1, 2, 3, 4, 5, 6, 7, 0}, false) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "sum: bad list of 9 dims");
    amp_tensor_free(x);
}

static void test_mean_values(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(6, 7), AMP_F32, -1, 3, 4);
    check_reduce(x, true, 1, (int[]){0}, false, AMP_SHAPE(7));
    check_reduce(x, true, 1, (int[]){-1}, true, AMP_SHAPE(6, 1));
    amp_tensor *m = amp_mean_all(x);
    double ref[1];
    ref_sum(x, 3u, ref);
    CHECK(m && amp_tensor_ndim(m) == 0 && within_ulps(amp_item(m), ref[0] / 42, 1));
    amp_tensor_free(x);
}

static void test_sum_all_is_0d(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 3), AMP_F32, -1, 1, 5);
    amp_tensor *s = amp_sum_all(x);
    double ref[1];
    ref_sum(x, 3u, ref);
    CHECK(s && amp_tensor_ndim(s) == 0 && amp_tensor_dtype(s) == AMP_F32);
    CHECK(s && within_ulps(amp_item(s), ref[0], 1));
    /* A 0-d input: sum_all gives it back; dim 0 / -1 is accepted (PyTorch). */
    amp_tensor *z = amp_full(AMP_SHAPE(), AMP_F32, 2.5);
    CHECK(amp_item(amp_sum_all(z)) == 2.5);
    amp_tensor *z0 = amp_sum(z, 1, (int[]){-1}, false);
    CHECK(z0 && amp_tensor_ndim(z0) == 0 && amp_item(z0) == 2.5);
    amp_tensor_free(x);
    amp_tensor_free(z);
}

/* A naive f32 running sum of these values is off by ~1e-4 relative; the
 * library's must be within one f32 ulp of the exact (double) sum. */
static void test_sum_of_a_million_f32_is_accurate(void)
{
    enum { N = 1000000 };
    amp_tensor *x = test_uniform(AMP_SHAPE(N), AMP_F32, 0, 1, 6);
    const float *v = amp_tensor_cdata(x);
    double exact = 0;
    float naive = 0;
    for (int i = 0; i < N; i++) {
        exact += v[i];
        naive += v[i];
    }
    CHECK_MSG(!within_ulps(naive, exact, 1), "the naive sum is already exact; the test cannot fail");
    amp_tensor *s = amp_sum_all(x), *m = amp_mean_all(x);
    CHECK_MSG(s && within_ulps(amp_item(s), exact, 1), "sum %.9g, exact %.9g", amp_item(s), exact);
    CHECK_MSG(m && within_ulps(amp_item(m), exact / N, 1), "mean %.9g, exact %.9g", amp_item(m), exact / N);
    /* The same values as [1000, 1000], summed over each dim. */
    amp_tensor *x2 = test_uniform(AMP_SHAPE(1000, 1000), AMP_F32, -1, 1, 7);
    check_reduce(x2, false, 1, (int[]){0}, false, AMP_SHAPE(1000));
    check_reduce(x2, false, 1, (int[]){1}, false, AMP_SHAPE(1000));
    amp_tensor_free(x);
    amp_tensor_free(x2);
}

/* The same input gives bit-identical sums on 1, 2 or 3 threads. */
static void test_sums_do_not_depend_on_thread_count(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(700, 900), AMP_F32, -1, 1, 8);
    float first[3] = {0}, col0[3] = {0}, row0[3] = {0};
    for (int t = 1; t <= 3; t++) {
        amp_set_num_threads(t);
        first[t - 1] = (float)amp_item(amp_sum_all(x));
        col0[t - 1] = (float)amp_tensor_get(amp_sum(x, 1, (int[]){0}, false), 5);
        row0[t - 1] = (float)amp_tensor_get(amp_mean(x, 1, (int[]){1}, false), 5);
        amp_temps_free();
    }
    amp_set_num_threads(0);
    for (int t = 1; t < 3; t++) {
        CHECK(first[t] == first[0]);
        CHECK(col0[t] == col0[0]);
        CHECK(row0[t] == row0[0]);
    }
    amp_tensor_free(x);
}

static void test_empty_sum_is_zero_and_mean_is_nan(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(0, 3), AMP_F32);
    amp_tensor *s = amp_sum(x, 1, (int[]){0}, false), *m = amp_mean(x, 1, (int[]){0}, false);
    CHECK(s && shape_is(s, AMP_SHAPE(3)) && amp_tensor_get(s, 2) == 0);
    CHECK(m && isnan(amp_tensor_get(m, 0)));
    amp_tensor_free(x);
}

/* ------------------------------------------------------------ gradients */

typedef struct {
    bool mean, keepdim;
    int nd;
    int dims[4];
} red_ctx;

static amp_tensor *gc_reduce(amp_tensor **in, void *ctx)
{
    red_ctx *c = ctx;
    if (c->nd == 0)
        return c->mean ? amp_mean_all(in[0]) : amp_sum_all(in[0]);
    return c->mean ? amp_mean(in[0], c->nd, c->dims, c->keepdim) : amp_sum(in[0], c->nd, c->dims, c->keepdim);
}

static void test_reduce_gradcheck(void)
{
    static const red_ctx cases[] = {
        {false, false, 1, {1}},     {true, false, 1, {1}},       {false, true, 2, {0, 2}},
        {true, false, 2, {-1, 0}},  {false, false, 0, {0}},      {true, true, 3, {0, 1, 2}},
        {true, false, 0, {0}},      {false, false, 1, {-2}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(3, 4, 2), AMP_F32, -2, 2, 10 + k);
        amp_tensor_set_requires_grad(x, true);
        char what[48];
        snprintf(what, sizeof what, "%s case %zu", cases[k].mean ? "mean" : "sum", k);
        gradcheck(what, gc_reduce, &x, 1, (void *)&cases[k], 1e-3, 1e-3, 1e-2);
        amp_tensor_free(x);
    }
    /* A 0-d input. */
    amp_tensor *z = amp_full(AMP_SHAPE(), AMP_F32, 0.7);
    amp_tensor_set_requires_grad(z, true);
    red_ctx all = {true, false, 0, {0}};
    gradcheck("mean of 0-d", gc_reduce, &z, 1, &all, 1e-3, 1e-3, 1e-2);
    amp_tensor_free(z);
}

/* ---------------------------------------------------------- 16-bit dtypes */

static int ulps16(amp_dtype dt, double got, double ref)
{
    uint16_t g = dt == AMP_F16 ? amp_f32_to_f16((float)got) : amp_f32_to_bf16((float)got);
    uint16_t r = dt == AMP_F16 ? amp_f32_to_f16((float)ref) : amp_f32_to_bf16((float)ref);
    int og = (g & 0x8000) ? -(int)(g & 0x7fff) : (int)g, orf = (r & 0x8000) ? -(int)(r & 0x7fff) : (int)r;
    return abs(og - orf);
}

static void test_16bit_sum_mean_and_gradients(void)
{
    static const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int k = 0; k < 2; k++) {
        amp_dtype dt = dts[k];
        amp_tensor *x = test_uniform(AMP_SHAPE(4, 50, 3), dt, -2, 2, 20);
        amp_tensor_set_requires_grad(x, true);
        double ref[12];
        ref_sum(x, 2u, ref);
        amp_tensor *s = amp_sum(x, 1, (int[]){1}, false), *m = amp_mean(x, 1, (int[]){1}, true);
        CHECK(s && m && amp_tensor_dtype(s) == dt && amp_tensor_dtype(m) == dt);
        for (int j = 0; s && m && j < 12; j++) {
            CHECK_MSG(ulps16(dt, amp_tensor_get(s, j), ref[j]) <= 1, "%s sum[%d] = %.6g, expected %.6g",
                      amp_dtype_name(dt), j, amp_tensor_get(s, j), ref[j]);
            CHECK_MSG(ulps16(dt, amp_tensor_get(m, j), ref[j] / 50) <= 1, "%s mean[%d] = %.6g, expected %.6g",
                      amp_dtype_name(dt), j, amp_tensor_get(m, j), ref[j] / 50);
        }
        /* d mean / dx = g / 50 broadcast over the reduced dim, in dt. */
        amp_tensor *g = test_uniform(AMP_SHAPE(4, 1, 3), dt, -1, 1, 21);
        CHECK_OK(amp_backward_with(m, g));
        amp_tensor *gx = amp_tensor_grad(x);
        CHECK(gx && amp_tensor_dtype(gx) == dt);
        for (int64_t i = 0; gx && i < 600; i++) {
            int64_t a = i / 150, c = i % 3;
            double want = amp_tensor_get(g, a * 3 + c) / 50;
            CHECK_MSG(ulps16(dt, amp_tensor_get(gx, i), want) <= 1, "%s grad[%lld] = %.6g, expected %.6g",
                      amp_dtype_name(dt), (long long)i, amp_tensor_get(gx, i), want);
            if (ulps16(dt, amp_tensor_get(gx, i), want) > 1)
                break;
        }
        amp_tensor_free(g);
        amp_tensor_free(x);
    }
}

/* ------------------------------------------------------------------ errors */

static void test_dim_list_errors(void)
{
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 3, 4), AMP_F32);
    CHECK(amp_sum(x, 2, (int[]){1, -2}, false) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "sum: dim 1 appears more than once");
    CHECK(amp_mean(x, 1, (int[]){3}, false) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "mean: dim 3 is out of range for a tensor of 3 dims");
    CHECK(amp_sum(x, 1, (int[]){-4}, true) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "sum: dim -4 is out of range");
    CHECK(amp_sum(x, 0, NULL, false) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "amp_sum_all");
    amp_tensor *i = amp_zeros(AMP_SHAPE(3), AMP_I64);
    CHECK(amp_sum_all(i) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "sum: input 0 has dtype i64");
    CHECK(amp_mean_all(amp_sum(x, 1, (int[]){7}, false)) == NULL); /* NULL in: the first error stays */
    CHECK_ERROR(AMP_ERR_ARG, "sum: dim 7");
    amp_tensor_free(x);
    amp_tensor_free(i);
}

/* ------------------------------------------------------------------ argmax */

static void test_argmax_values_ties_and_dtype(void)
{
    /* rows: a plain max, a tie (first wins), all equal, max at the end */
    amp_tensor *x = amp_from_data(AMP_SHAPE(4, 4), AMP_F32,
                                  (float[]){1, 5, 2, 3, 7, 2, 7, 1, 4, 4, 4, 4, -3, -2, -5, -1});
    amp_tensor *a = amp_argmax(x, 1);
    CHECK(a && amp_tensor_dtype(a) == AMP_I64 && shape_is(a, AMP_SHAPE(4)));
    static const int64_t want1[4] = {1, 0, 0, 3}, want0[4] = {1, 0, 1, 2};
    for (int i = 0; a && i < 4; i++)
        CHECK_EQ_INT(amp_tensor_get(a, i), want1[i]);
    amp_tensor *b = amp_argmax(x, -2);
    for (int i = 0; b && i < 4; i++)
        CHECK_EQ_INT(amp_tensor_get(b, i), want0[i]);
    amp_tensor_free(x);
}

static void test_argmax_nan_is_largest(void)
{
    amp_tensor *x = amp_from_data(AMP_SHAPE(2, 4), AMP_F32, (float[]){1, NAN, 9, NAN, 3, 2, 1, 8});
    amp_tensor *a = amp_argmax(x, 1);
    CHECK(a && amp_tensor_get(a, 0) == 1 && amp_tensor_get(a, 1) == 3);
    amp_tensor_free(x);
}

static void test_argmax_middle_dim_16bit_and_int(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 5, 4), AMP_BF16, -10, 10, 30);
    amp_tensor *xi = test_uniform(AMP_SHAPE(3, 5, 4), AMP_I32, -10, 10, 31);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *a = amp_argmax(x, 1), *ai = amp_argmax(xi, 1);
    CHECK(a && shape_is(a, AMP_SHAPE(3, 4)) && !amp_tensor_requires_grad(a));
    CHECK(ai && shape_is(ai, AMP_SHAPE(3, 4)));
    for (int o = 0; a && ai && o < 3; o++)
        for (int i = 0; i < 4; i++) {
            int best = 0, besti = 0;
            for (int d = 1; d < 5; d++) {
                if (amp_tensor_get(x, (o * 5 + d) * 4 + i) > amp_tensor_get(x, (o * 5 + best) * 4 + i))
                    best = d;
                if (amp_tensor_get(xi, (o * 5 + d) * 4 + i) > amp_tensor_get(xi, (o * 5 + besti) * 4 + i))
                    besti = d;
            }
            CHECK_EQ_INT(amp_tensor_get(a, o * 4 + i), best);
            CHECK_EQ_INT(amp_tensor_get(ai, o * 4 + i), besti);
        }
    CHECK(amp_argmax(x, 3) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "argmax: dim 3 is out of range");
    amp_tensor_free(x);
    amp_tensor_free(xi);
}

int main(void)
{
    RUN(test_sum_one_dim_keepdim_or_not);
    RUN(test_sum_several_and_negative_dims);
    RUN(test_sum_over_eight_dims);
    RUN(test_mean_values);
    RUN(test_sum_all_is_0d);
    RUN(test_sum_of_a_million_f32_is_accurate);
    RUN(test_sums_do_not_depend_on_thread_count);
    RUN(test_empty_sum_is_zero_and_mean_is_nan);
    RUN(test_reduce_gradcheck);
    RUN(test_16bit_sum_mean_and_gradients);
    RUN(test_dim_list_errors);
    RUN(test_argmax_values_ties_and_dtype);
    RUN(test_argmax_nan_is_largest);
    RUN(test_argmax_middle_dim_16bit_and_int);
    return harness_done();
}
