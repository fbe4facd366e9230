/*
 * test_clip.c - amp_clip_grad_norm and amp_clip_grad_norm_tensor against
 * PyTorch's clip_grad_norm_ (tests/reference/optim_ref.h, made by
 * gen_optim.py): the norms and the clipped gradients, 16-bit gradients,
 * the non-finite cases, errors that change nothing, and the tensor
 * variant's value, dtype and device. On CUDA, test_cuda_train.c's.
 */
#include "harness.h"
#include "optim/optim.h"
#include "optim_rig.h"
#include "reference/optim_ref.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool same_value(double a, double b, double rtol)
{
    if (isnan(b))
        return isnan(a);
    if (isinf(b))
        return a == b;
    return fabs(a - b) <= rtol * fabs(b) + 1e-12;
}

static void test_clip_grad_norm_matches_pytorch(void)
{
    for (int k = 0; k < CREF_NCASES; k++) {
        const cref_case *c = &cref_cases[k];
        amp_tensor *ps[CREF_NPARAM + 1];
        int off = 0;
        for (int i = 0; i < CREF_NPARAM; i++) {
            ps[i] = amp_zeros(AMP_SHAPE(cref_numel[i]), AMP_F32);
            set_grad(ps[i], c->grad + off);
            off += cref_numel[i];
        }
        ps[CREF_NPARAM] = amp_zeros(AMP_SHAPE(2), AMP_F32); /* no gradient: skipped */
        double norm = amp_clip_grad_norm(ps, CREF_NPARAM + 1, c->max_norm);
        CHECK_MSG(same_value(norm, c->norm, 1e-6), "%s: norm %.9g, PyTorch %.9g", c->name, norm, c->norm);
        off = 0;
        for (int i = 0; i < CREF_NPARAM; i++)
            for (int j = 0; j < cref_numel[i]; j++, off++) {
                double got = amp_tensor_get(amp_tensor_grad(ps[i]), j);
                CHECK_MSG(same_value(got, c->expect[off], 1e-6), "%s: grad %d[%d] %.9g, PyTorch %.9g", c->name, i,
                          j, got, c->expect[off]);
            }
        CHECK(amp_tensor_grad(ps[CREF_NPARAM]) == NULL);
        free_params(ps, CREF_NPARAM + 1);
    }
}

static void test_clip_grad_norm_16bit_and_errors(void)
{
    /* bf16 gradients: the norm of their (rounded) values, in double. */
    amp_tensor *p = amp_zeros(AMP_SHAPE(100), AMP_BF16);
    float g[100];
    double ss = 0;
    for (int j = 0; j < 100; j++)
        g[j] = (float)sin(j + 1.0) * 3.0f;
    set_grad(p, g);
    for (int j = 0; j < 100; j++)
        ss += pow(amp_tensor_get(amp_tensor_grad(p), j), 2);
    double before = amp_tensor_get(amp_tensor_grad(p), 7);
    double norm = amp_clip_grad_norm(&p, 1, 1.0);
    CHECK_NEAR(norm, sqrt(ss), 1e-9 * sqrt(ss));
    CHECK(amp_tensor_dtype(amp_tensor_grad(p)) == AMP_BF16);
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(p), 7), before / (sqrt(ss) + 1e-6), fabs(before) / sqrt(ss) / 128);
    amp_tensor_free(p);

    CHECK_NEAR(amp_clip_grad_norm(NULL, 0, 1.0), 0, 0); /* nothing to clip */
    CHECK(isnan(amp_clip_grad_norm(NULL, 2, 1.0)));
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm");
    amp_tensor *q = amp_zeros(AMP_SHAPE(1), AMP_F32);
    CHECK(isnan(amp_clip_grad_norm(&q, 1, -1.0)));
    CHECK_ERROR(AMP_ERR_ARG, "max_norm -1");
    amp_tensor_free(q);
}

/* clip_grad_norm_tensor: the same clipping, the norm in a 0-d tensor. */

/* Whether a and b hold the same bits (dtype, shape and every byte). */
static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    return a && b && amp_tensor_dtype(a) == amp_tensor_dtype(b) && amp_tensor_numel(a) == amp_tensor_numel(b) &&
           memcmp(amp_tensor_cdata(a), amp_tensor_cdata(b),
                  (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a))) == 0;
}

/* t is a caller-owned 0-d f32 CPU tensor without history holding the bits
 * of (float)want (any NaN for a NaN). */
static void check_norm_tensor(const char *what, const amp_tensor *t, double want)
{
    CHECK_MSG(t != NULL, "%s: NULL (%s)", what, amp_last_error());
    if (!t)
        return;
    CHECK_MSG(amp_tensor_dtype(t) == AMP_F32 && amp_tensor_ndim(t) == 0 && amp_tensor_numel(t) == 1 &&
                  amp_tensor_device(t) == AMP_CPU,
              "%s: %s, %d dims, %lld elements, on %s", what, amp_dtype_name(amp_tensor_dtype(t)), amp_tensor_ndim(t),
              (long long)amp_tensor_numel(t), amp_device_name(amp_tensor_device(t)));
    CHECK(!amp_tensor_requires_grad(t) && amp_tensor_is_leaf(t));
    const float got = *(const float *)amp_tensor_cdata(t), f = (float)want;
    CHECK_MSG(isnan(f) ? isnan(got) : memcmp(&got, &f, sizeof f) == 0, "%s: tensor %.9g, (float) of the double %.9g",
              what, got, f);
}

/* Every PyTorch case (not clipped, clipped, to 0, inf and NaN gradients),
 * in f32 and with 16-bit gradients: the tensor holds (float) of
 * amp_clip_grad_norm's double, and leaves the gradients it leaves, bit for
 * bit; against PyTorch's (f32) norm to 1e-6. The result is the caller's,
 * not an op temporary: amp_temps_free leaves it. */
static void test_clip_grad_norm_tensor_is_the_double_rounded_once(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < CREF_NCASES; k++) {
            const cref_case *c = &cref_cases[k];
            amp_tensor *a[CREF_NPARAM + 1], *b[CREF_NPARAM + 1];
            int off = 0;
            for (int i = 0; i < CREF_NPARAM; i++) {
                a[i] = amp_zeros(AMP_SHAPE(cref_numel[i]), dts[d]);
                b[i] = amp_zeros(AMP_SHAPE(cref_numel[i]), dts[d]);
                set_grad(a[i], c->grad + off);
                set_grad(b[i], c->grad + off);
                off += cref_numel[i];
            }
            a[CREF_NPARAM] = amp_zeros(AMP_SHAPE(2), AMP_F32); /* no gradient: skipped */
            b[CREF_NPARAM] = amp_zeros(AMP_SHAPE(2), AMP_F32);
            char what[64];
            snprintf(what, sizeof what, "%s, %s gradients", c->name, amp_dtype_name(dts[d]));
            amp_clear_error();
            const double norm = amp_clip_grad_norm(a, CREF_NPARAM + 1, c->max_norm);
            const size_t temps = amp_temps_count();
            amp_tensor *t = amp_clip_grad_norm_tensor(b, CREF_NPARAM + 1, c->max_norm);
            CHECK_MSG(amp_last_status() == AMP_OK, "%s: %s", what, amp_last_error());
            CHECK_EQ_INT((long long)amp_temps_count(), (long long)temps);
            amp_temps_free();
            check_norm_tensor(what, t, norm);
            if (d == 0 && t)
                CHECK_MSG(same_value(amp_item(t), c->norm, 1e-6), "%s: norm %.9g, PyTorch %.9g", what, amp_item(t),
                          c->norm);
            for (int i = 0; i < CREF_NPARAM; i++)
                CHECK_MSG(same_bits(amp_tensor_grad(a[i]), amp_tensor_grad(b[i])), "%s: gradient %d differs", what,
                          i);
            CHECK(amp_tensor_grad(b[CREF_NPARAM]) == NULL);
            amp_tensor_free(t);
            free_params(a, CREF_NPARAM + 1);
            free_params(b, CREF_NPARAM + 1);
        }
}

/* A norm past FLT_MAX: the double is finite and clips (to max_norm), the
 * f32 tensor reads inf - it is the double rounded once. */
static void test_clip_grad_norm_tensor_past_flt_max(void)
{
    const float big[4] = {3e38f, -3e38f, 3e38f, 3e38f}; /* norm 6e38 */
    amp_tensor *p = amp_zeros(AMP_SHAPE(4), AMP_F32), *q = amp_zeros(AMP_SHAPE(4), AMP_F32);
    set_grad(p, big);
    set_grad(q, big);
    const double norm = amp_clip_grad_norm(&p, 1, 1.0);
    amp_tensor *t = amp_clip_grad_norm_tensor(&q, 1, 1.0);
    CHECK_NEAR(norm, 2.0 * (double)3e38f, 1e-15 * norm); /* sqrt(4 * big^2), in double */
    check_norm_tensor("norm 6e38", t, norm);
    CHECK(t && isinf(amp_item(t)) && amp_item(t) > 0);
    CHECK(same_bits(amp_tensor_grad(p), amp_tensor_grad(q)));
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(q), 1), -0.5, 1e-6); /* 3e38 / 6e38 */
    amp_tensor_free(t);
    amp_tensor_free(p);
    amp_tensor_free(q);
}

/* No gradient: a 0-d f32 zero, no error - on the CPU for an empty list
 * (as PyTorch's torch.tensor(0.0)), and for CPU parameters. */
static void test_clip_grad_norm_tensor_without_gradients(void)
{
    amp_clear_error();
    amp_tensor *t = amp_clip_grad_norm_tensor(NULL, 0, 1.0);
    check_norm_tensor("empty list", t, 0.0);
    CHECK_OK(amp_last_status());
    amp_tensor_free(t);

    amp_tensor *ps[2] = {amp_ones(AMP_SHAPE(3), AMP_F32), amp_ones(AMP_SHAPE(2, 2), AMP_BF16)};
    amp_tensor_set_requires_grad(ps[0], true);
    t = amp_clip_grad_norm_tensor(ps, 2, 0.0);
    check_norm_tensor("no gradients", t, 0.0);
    CHECK_OK(amp_last_status());
    CHECK(!amp_tensor_grad(ps[0]) && !amp_tensor_grad(ps[1]) && amp_tensor_get(ps[0], 0) == 1.0);
    amp_tensor_free(t);
    free_params(ps, 2);
}

/* Bad arguments: NULL with the error (named for this function), and no
 * gradient changed. */
static void test_clip_grad_norm_tensor_errors_change_nothing(void)
{
    const float g[3] = {3, 4, 12};
    amp_tensor *ps[2] = {amp_zeros(AMP_SHAPE(3), AMP_F32), NULL};
    set_grad(ps[0], g);
    amp_tensor *before = amp_clone(amp_tensor_grad(ps[0]));

    CHECK(amp_clip_grad_norm_tensor(ps, -1, 1.0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm_tensor: bad parameter list (n = -1)");
    CHECK(amp_clip_grad_norm_tensor(NULL, 2, 1.0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm_tensor: bad parameter list (n = 2)");
    CHECK(amp_clip_grad_norm_tensor(ps, 2, 1.0) == NULL); /* ps[1] is NULL, after one to clip */
    CHECK_ERROR(AMP_ERR_ARG, "clip_grad_norm_tensor: parameter 1 is NULL");
    CHECK(amp_clip_grad_norm_tensor(ps, 1, -1.0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "max_norm -1 must be >= 0");
    CHECK(amp_clip_grad_norm_tensor(ps, 1, NAN) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "max_norm nan must be >= 0");
    CHECK(same_bits(amp_tensor_grad(ps[0]), before));

    /* and then it works: norm 13, clipped to 1 */
    amp_tensor *t = amp_clip_grad_norm_tensor(ps, 1, 1.0);
    check_norm_tensor("3 4 12", t, 13.0);
    CHECK_NEAR(amp_tensor_get(amp_tensor_grad(ps[0]), 2), 12.0 / (13.0 + 1e-6), 1e-6);
    amp_tensor_free(t);
    amp_tensor_free(before);
    amp_tensor_free(ps[0]);
}

int main(void)
{
    RUN(test_clip_grad_norm_matches_pytorch);
    RUN(test_clip_grad_norm_16bit_and_errors);
    RUN(test_clip_grad_norm_tensor_is_the_double_rounded_once);
    RUN(test_clip_grad_norm_tensor_past_flt_max);
    RUN(test_clip_grad_norm_tensor_without_gradients);
    RUN(test_clip_grad_norm_tensor_errors_change_nothing);
    return harness_done();
}
