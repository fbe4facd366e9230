/*
 * test_pool_backward.c - the 2x2 stride-2 max pool (every CNN's pool;
 * src/backend/cpu/pool.c), forward and backward, against a reference
 * written here from the op's definition: each window's maximum (a NaN
 * wins, the last of several; else a larger value wins, a tie keeping the
 * first in row order), and the gradient going to that argmax, added to
 * zero in f32 (so -0 becomes +0) and rounded once to the dtype; every
 * other input gets 0, including the last row or column when H or W is
 * odd. f32, bf16 and f16, with ties, NaNs, infinities and subnormals in x
 * and -0, NaN, infinite and subnormal gradients; again with subnormals
 * flushed (amp_set_flush_denormal), where the reference's own f32 sum and
 * comparisons flush them too. bf16 and f16 have their own kernels on
 * AVX-512BW; each case runs on them and, with amp_cpu_limit lowered, on
 * the plain loops.
 */
#include "harness.h"

#include <stdint.h>
#include <stdlib.h>

enum { N = 2, C = 3 };

static float value_at(int i, uint32_t *rng)
{
    *rng = *rng * 1664525u + 1013904223u;
    const int r = (int)(*rng >> 24);
    if (i % 37 == 5)
        return NAN;
    if (i % 41 == 7)
        return INFINITY;
    if (i % 43 == 3)
        return -INFINITY;
    if (i % 47 == 9) /* subnormal in f32 and bf16 (0 in f16) */
        return (r & 1) ? 3e-39f : -1e-39f;
    return (float)(r % 9) - 4.0f; /* few distinct values: ties */
}

static float grad_at(int i, uint32_t *rng)
{
    *rng = *rng * 1664525u + 1013904223u;
    if (i % 11 == 2)
        return -0.0f;
    if (i % 13 == 4)
        return NAN;
    if (i % 17 == 6)
        return -INFINITY;
    if (i % 19 == 8)
        return (*rng & 256) ? 2e-39f : -5e-39f;
    return ((float)(*rng >> 8) / 16777216.0f - 0.5f) * 3.0f;
}

/* The values as dt holds them, widened. */
static void through(float *v, int n, amp_dtype dt)
{
    for (int i = 0; i < n; i++) {
        uint16_t h;
        if (dt == AMP_F32)
            continue;
        amp_convert(&v[i], AMP_F32, &h, dt, 1);
        amp_convert(&h, dt, &v[i], AMP_F32, 1);
    }
}

/* t (dt, n elements) against want (widened): the same bits, any NaN for
 * a NaN. */
static void check_values(amp_tensor *t, const float *want, int n, amp_dtype dt, const char *what, int H, int W)
{
    CHECK_MSG(t && amp_tensor_dtype(t) == dt, "%s %dx%d: %s missing or not %s", amp_dtype_name(dt), H, W, what,
              amp_dtype_name(dt));
    if (!t || amp_tensor_dtype(t) != dt)
        return;
    float *got = malloc(sizeof(float) * (size_t)n);
    amp_convert(amp_tensor_data(t), dt, got, AMP_F32, (size_t)n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const bool same = (isnan(got[i]) && isnan(want[i])) || memcmp(&got[i], &want[i], sizeof got[i]) == 0;
        if (!same && bad++ < 5)
            CHECK_MSG(false, "%s %dx%d: %s[%d] = %g, expected %g", amp_dtype_name(dt), H, W, what, i, got[i],
                      want[i]);
    }
    CHECK_EQ_INT(bad, 0);
    free(got);
}

static void check_dtype(amp_dtype dt, int H, int W)
{
    const int HO = H / 2, WO = W / 2;
    const int nx = N * C * H * W, ny = N * C * HO * WO;
    float *x = malloc(sizeof(float) * (size_t)nx), *g = malloc(sizeof(float) * (size_t)ny);
    float *want = calloc((size_t)nx, sizeof(float)), *want_y = malloc(sizeof(float) * (size_t)ny);
    uint32_t rng = 12345;
    for (int i = 0; i < nx; i++)
        x[i] = value_at(i, &rng);
    for (int i = 0; i < ny; i++)
        g[i] = grad_at(i, &rng);
    through(x, nx, dt);
    through(g, ny, dt);
    for (int p = 0; p < N * C; p++)
        for (int oy = 0; oy < HO; oy++)
            for (int ox = 0; ox < WO; ox++) {
                const int base = p * H * W + 2 * oy * W + 2 * ox;
                const int at[4] = {base, base + 1, base + W, base + W + 1};
                int arg = at[0];
                float best = x[at[0]];
                for (int k = 1; k < 4; k++) {
                    const float v = x[at[k]];
                    if (isnan(v) || v > best) { /* a later NaN wins too (MAX_STEP) */
                        best = v;
                        arg = at[k];
                    }
                }
                want[arg] = g[(p * HO + oy) * WO + ox] + 0.0f;
                want_y[(p * HO + oy) * WO + ox] = best;
            }
    through(want, nx, dt);

    amp_tensor *xf = amp_from_data(AMP_SHAPE(N, C, H, W), AMP_F32, x);
    amp_tensor *gf = amp_from_data(AMP_SHAPE(N, C, HO, WO), AMP_F32, g);
    amp_tensor *xt = amp_to(xf, dt), *gt = amp_to(gf, dt);
    CHECK_OK(amp_tensor_set_requires_grad(xt, true));
    amp_tensor *y = amp_max_pool2d(xt, 2, 2, 0);
    CHECK(y != NULL);
    check_values(y, want_y, ny, dt, "y", H, W);
    amp_no_grad_begin(); /* the forward without indices */
    check_values(amp_max_pool2d(xt, 2, 2, 0), want_y, ny, dt, "y without grad", H, W);
    amp_no_grad_end();
    CHECK_OK(amp_backward_with(y, gt));
    amp_tensor *dx = amp_tensor_grad(xt);
    CHECK(dx && amp_tensor_dtype(dx) == dt);
    check_values(dx, want, nx, dt, "dx", H, W);
    amp_tensor_free(xf);
    amp_tensor_free(gf);
    amp_temps_free();
    free(x);
    free(g);
    free(want);
    free(want_y);
}

/* 7 x 9: odd sides, fewer windows a row than a vector; 6 x 41: a full
 * vector of windows and a partial one; 28 x 28: the cnn's first pool. */
static void check_sizes(amp_dtype dt)
{
    for (int plain = 0; plain < 2; plain++) { /* the vector kernels, then the plain loops */
        amp_cpu_limit(plain ? 0u : ~0u);
        for (int flush = 0; flush < 2; flush++) {
            CHECK_OK(amp_set_flush_denormal(flush == 1));
            check_dtype(dt, 7, 9);
            check_dtype(dt, 6, 41);
            check_dtype(dt, 28, 28);
        }
    }
    amp_cpu_limit(~0u);
    CHECK_OK(amp_set_flush_denormal(false));
}

static void test_f32(void) { check_sizes(AMP_F32); }
static void test_bf16(void) { check_sizes(AMP_BF16); }
static void test_f16(void) { check_sizes(AMP_F16); }

int main(void)
{
    RUN(test_f32);
    RUN(test_bf16);
    RUN(test_f16);
    return harness_done();
}
