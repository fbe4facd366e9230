/*
 * test_add_layer_norm.c - the residual add fused with layer_norm
 * (op_add_layer_norm, ops/fused.h): the sum, the normalised result and
 * every gradient bit for bit those of amp_add then amp_layer_norm, for
 * f32, 16-bit and mixed dtypes, with and without weight and bias, on one
 * and two threads, under CPU autocast; the backward that adds dx into an
 * existing gradient; on CUDA (cudaemu in CI), where ops compose the two,
 * the same bits too; the CPU kernels' rows taken a group at a time giving
 * the bits of one row at a time; finite differences; bad input.
 */
#include "backend/cpu/cpu_backend.h"
#include "harness.h"
#include "ops/fused.h"

#include <stdlib.h>
#include <string.h>

/* The results of one run: s, y, and the gradients of x, r, w, b. */
enum { R_S, R_Y, R_DX, R_DR, R_DW, R_DB, R_COUNT };
static const char *const result_names[R_COUNT] = {"sum", "y", "dx", "dres", "dweight", "dbias"};

typedef struct {
    amp_tensor *x, *r, *w, *b; /* owned; w and b may be NULL */
    amp_tensor *gs, *gy;       /* the loss sum(s * gs) + sum(y * gy) */
    double eps;
} ln_inputs;

/* Runs s = x + r, y = layer_norm(s) (fused or as two ops) and the loss's
 * backward, under autocast to ac on the inputs' device unless ac is f32;
 * out[] gets copies of the results on the CPU (NULL where none). */
static void run_ac(const ln_inputs *in, bool fused, amp_dtype ac, amp_tensor **out)
{
    amp_tensor *x = amp_clone(in->x), *r = amp_clone(in->r);
    amp_tensor *w = in->w ? amp_clone(in->w) : NULL, *b = in->b ? amp_clone(in->b) : NULL;
    amp_tensor *leaves[4] = {x, r, w, b};
    for (int i = 0; i < 4; i++)
        if (leaves[i])
            amp_tensor_set_requires_grad(leaves[i], true);
    amp_tensor *s, *y = NULL;
    if (ac != AMP_F32)
        CHECK_OK(amp_autocast_begin(amp_tensor_device(x), ac));
    if (fused) {
        s = op_add_layer_norm(x, r, w, b, in->eps, &y);
    } else {
        s = amp_add(x, r);
        y = amp_layer_norm(s, 1, w, b, in->eps);
    }
    CHECK_MSG(s && y, "run: %s", amp_last_error());
    /* s's other consumer comes after the layer_norm, as the next residual
     * add does in a transformer: its gradient reaches s first. */
    amp_tensor *loss = amp_add(amp_sum_all(amp_mul(y, in->gy)), amp_sum_all(amp_mul(s, in->gs)));
    if (ac != AMP_F32)
        CHECK_OK(amp_autocast_end());
    CHECK_OK(amp_backward(loss));
    out[R_S] = amp_to_device(s, AMP_CPU);
    out[R_Y] = amp_to_device(y, AMP_CPU);
    for (int i = 0; i < 4; i++)
        out[R_DX + i] =
            leaves[i] && amp_tensor_grad(leaves[i]) ? amp_to_device(amp_tensor_grad(leaves[i]), AMP_CPU) : NULL;
    for (int i = 0; i < 4; i++)
        amp_tensor_free(leaves[i]);
    amp_temps_free();
}

static void run(const ln_inputs *in, bool fused, amp_tensor **out) { run_ac(in, fused, AMP_F32, out); }

static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    if (!a || !b)
        return a == b;
    if (amp_tensor_dtype(a) != amp_tensor_dtype(b) || amp_tensor_numel(a) != amp_tensor_numel(b))
        return false;
    size_t n = (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a));
    return memcmp(amp_tensor_data((amp_tensor *)a), amp_tensor_data((amp_tensor *)b), n) == 0;
}

static void compare(const char *what, amp_tensor **a, amp_tensor **b)
{
    for (int k = 0; k < R_COUNT; k++) {
        CHECK_MSG(same_bits(a[k], b[k]), "%s: %s differs from the unfused ops", what, result_names[k]);
        amp_tensor_free(a[k]);
        amp_tensor_free(b[k]);
    }
}

static ln_inputs make_inputs(int64_t M, int64_t N, amp_dtype xdt, amp_dtype rdt, amp_dtype wdt, bool hw, bool hb,
                             uint64_t seed)
{
    ln_inputs in = {0};
    in.x = test_uniform(AMP_SHAPE(M, N), xdt, -2, 3, seed);
    in.r = test_uniform(AMP_SHAPE(M, N), rdt, -1, 1, seed + 1);
    in.w = hw ? test_uniform(AMP_SHAPE(N), wdt, 0.5, 1.5, seed + 2) : NULL;
    in.b = hb ? test_uniform(AMP_SHAPE(N), wdt, -1, 1, seed + 3) : NULL;
    amp_dtype sdt = xdt == rdt ? xdt : AMP_F32;
    in.gs = test_uniform(AMP_SHAPE(M, N), sdt, -1, 1, seed + 4);
    in.gy = test_uniform(AMP_SHAPE(M, N), sdt, -1, 1, seed + 5);
    in.eps = 1e-5;
    return in;
}

static void free_inputs(ln_inputs *in)
{
    amp_tensor_free(in->x), amp_tensor_free(in->r), amp_tensor_free(in->w), amp_tensor_free(in->b);
    amp_tensor_free(in->gs), amp_tensor_free(in->gy);
}

/* Every dtype mix the ops take, small (one thread) and large (several)
 * shapes, with and without the affine parameters, on 1 and 2 threads. */
static void test_fused_equals_unfused(void)
{
    const struct {
        amp_dtype x, r, w;
    } mixes[] = {{AMP_F32, AMP_F32, AMP_F32},  {AMP_F32, AMP_BF16, AMP_F32}, {AMP_BF16, AMP_F32, AMP_F32},
                 {AMP_BF16, AMP_BF16, AMP_F32}, {AMP_F16, AMP_F16, AMP_F16},  {AMP_BF16, AMP_BF16, AMP_BF16}};
    const int64_t shapes[3][2] = {{4, 5}, {300, 77}, {64, 1000}};
    const int saved = amp_get_num_threads();
    for (int th = 1; th <= 2; th++) {
        amp_set_num_threads(th);
        for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++)
            for (int s = 0; s < 3; s++)
                for (int aff = 0; aff < 3; aff++) {
                    ln_inputs in = make_inputs(shapes[s][0], shapes[s][1], mixes[m].x, mixes[m].r, mixes[m].w,
                                               aff != 1, aff != 2, 40 + (uint64_t)s);
                    amp_tensor *a[R_COUNT], *b[R_COUNT];
                    run(&in, true, a);
                    run(&in, false, b);
                    char what[160];
                    snprintf(what, sizeof what, "%s + %s (params %s) %lldx%lld, %d thread(s), %s",
                             amp_dtype_name(mixes[m].x), amp_dtype_name(mixes[m].r), amp_dtype_name(mixes[m].w),
                             (long long)shapes[s][0], (long long)shapes[s][1], th,
                             aff == 0 ? "weight+bias" : aff == 1 ? "bias only" : "weight only");
                    compare(what, a, b);
                    free_inputs(&in);
                }
    }
    amp_set_num_threads(saved);
}

/* The GPT's case: an f32 residual plus a bf16 linear output under CPU
 * bf16 autocast. */
static void test_fused_under_autocast(void)
{
    ln_inputs in = make_inputs(96, 64, AMP_F32, AMP_F32, AMP_F32, true, true, 70);
    amp_tensor *lw = test_uniform(AMP_SHAPE(64, 64), AMP_F32, -0.2, 0.2, 77);
    amp_tensor *res[2][R_COUNT];
    for (int f = 0; f < 2; f++) {
        amp_tensor *lwi = amp_clone(lw);
        amp_tensor_set_requires_grad(lwi, true);
        CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
        amp_tensor *x = amp_clone(in.x), *a = amp_clone(in.r), *w = amp_clone(in.w), *b = amp_clone(in.b);
        amp_tensor *leaves[4] = {x, a, w, b};
        for (int i = 0; i < 4; i++)
            amp_tensor_set_requires_grad(leaves[i], true);
        amp_tensor *r = amp_linear(a, lwi, NULL);
        CHECK(r && amp_tensor_dtype(r) == AMP_BF16);
        amp_tensor *s, *y = NULL;
        if (f == 0) {
            s = op_add_layer_norm(x, r, w, b, 1e-5, &y);
        } else {
            s = amp_add(x, r);
            y = amp_layer_norm(s, 1, w, b, 1e-5);
        }
        CHECK(s && y && amp_tensor_dtype(s) == AMP_F32 && amp_tensor_dtype(y) == AMP_F32);
        amp_tensor *loss = amp_add(amp_sum_all(amp_mul(y, in.gy)), amp_sum_all(amp_mul(s, in.gs)));
        CHECK_OK(amp_autocast_end());
        CHECK_OK(amp_backward(loss));
        res[f][R_S] = amp_clone(s);
        res[f][R_Y] = amp_clone(y);
        res[f][R_DX] = amp_clone(amp_tensor_grad(x));
        res[f][R_DR] = amp_clone(amp_tensor_grad(lwi)); /* through the bf16 residual */
        res[f][R_DW] = amp_clone(amp_tensor_grad(w));
        res[f][R_DB] = amp_clone(amp_tensor_grad(b));
        for (int i = 0; i < 4; i++)
            amp_tensor_free(leaves[i]);
        amp_tensor_free(lwi);
        amp_temps_free();
    }
    compare("autocast bf16: f32 residual + bf16 linear", res[0], res[1]);
    amp_tensor_free(lw);
    free_inputs(&in);
}

/* On CUDA the ops compose add and layer_norm (no fused kernel there): the
 * same nodes, so the same bits, in f32 and under f16 autocast (layer_norm
 * an fp32 op there) with an f16 residual. */
static void test_fused_on_cuda(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    const amp_dtype rdts[2] = {AMP_F32, AMP_F16};
    for (int k = 0; k < 2; k++) {
        ln_inputs c = make_inputs(64, 96, AMP_F32, rdts[k], AMP_F32, true, true, 60);
        amp_tensor **ts[6] = {&c.x, &c.r, &c.w, &c.b, &c.gs, &c.gy};
        for (int i = 0; i < 6; i++) {
            amp_tensor *d = amp_to_device(*ts[i], AMP_CUDA);
            CHECK(d);
            amp_tensor_free(*ts[i]);
            *ts[i] = d;
        }
        amp_tensor *a[R_COUNT], *b[R_COUNT];
        run_ac(&c, true, k ? AMP_F16 : AMP_F32, a);
        run_ac(&c, false, k ? AMP_F16 : AMP_F32, b);
        compare(k ? "cuda, f16 autocast, f32 + f16" : "cuda, f32", a, b);
        free_inputs(&c);
    }
}

/* A residual that broadcasts (not the fused pass's case) and the layer_norm
 * consumed first: still the two ops' values. */
static void test_broadcast_falls_back(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(6, 8), AMP_F32, -1, 1, 90), *r = test_uniform(AMP_SHAPE(8), AMP_F32, -1, 1, 91);
    amp_tensor *w = test_uniform(AMP_SHAPE(8), AMP_F32, 0.5, 1.5, 92);
    amp_tensor *y = NULL;
    amp_tensor *s = op_add_layer_norm(x, r, w, NULL, 1e-5, &y);
    amp_tensor *s2 = amp_add(x, r), *y2 = amp_layer_norm(s2, 1, w, NULL, 1e-5);
    CHECK(same_bits(s, s2) && same_bits(y, y2));
    amp_tensor_free(x), amp_tensor_free(r), amp_tensor_free(w);
    amp_temps_free();
}

typedef struct {
    bool hw, hb;
} gc_ctx;

/* s * 0.7 + y: both results carry a gradient. */
static amp_tensor *fused_fn(amp_tensor **in, void *ctx)
{
    const gc_ctx *c = ctx;
    amp_tensor *y = NULL;
    amp_tensor *s = op_add_layer_norm(in[0], in[1], c->hw ? in[2] : NULL, c->hb ? in[2 + c->hw] : NULL, 1e-5, &y);
    return amp_add(amp_mul_scalar(s, 0.7), y);
}

static void test_fused_gradcheck(void)
{
    for (int aff = 0; aff < 3; aff++) {
        gc_ctx c = {aff != 1, aff != 2};
        amp_tensor *in[4] = {test_uniform(AMP_SHAPE(3, 7), AMP_F32, -2, 2, 20),
                             test_uniform(AMP_SHAPE(3, 7), AMP_F32, -1, 1, 21)};
        int n = 2;
        if (c.hw)
            in[n++] = test_uniform(AMP_SHAPE(7), AMP_F32, 0.5, 1.5, 22);
        if (c.hb)
            in[n++] = test_uniform(AMP_SHAPE(7), AMP_F32, -1, 1, 23);
        for (int i = 0; i < n; i++)
            amp_tensor_set_requires_grad(in[i], true);
        CHECK_MSG(gradcheck("add_layer_norm", fused_fn, in, n, &c, 1e-2, 2e-3, 2e-2), "affine case %d", aff);
        for (int i = 0; i < n; i++)
            amp_tensor_free(in[i]);
    }
}

static void test_bad_input(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 4), AMP_F32, -1, 1, 30), *r = test_uniform(AMP_SHAPE(2, 4), AMP_F32, -1, 1, 31);
    amp_tensor *w5 = test_uniform(AMP_SHAPE(5), AMP_F32, -1, 1, 32);
    amp_tensor *y = (amp_tensor *)1;
    CHECK(op_add_layer_norm(x, r, NULL, NULL, 1e-5, NULL) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "y is NULL");
    CHECK(op_add_layer_norm(x, r, NULL, NULL, -1.0, &y) == NULL && y == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "eps -1 is negative");
    CHECK(op_add_layer_norm(x, r, w5, NULL, 1e-5, &y) == NULL && y == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "weight must have the normalized shape [4]");
    amp_tensor *r3 = test_uniform(AMP_SHAPE(3, 4), AMP_F32, -1, 1, 33);
    CHECK(op_add_layer_norm(x, r3, NULL, NULL, 1e-5, &y) == NULL && y == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "cannot broadcast");
    amp_tensor *xi = amp_empty(AMP_SHAPE(2, 4), AMP_I32);
    CHECK(op_add_layer_norm(xi, r, NULL, NULL, 1e-5, &y) == NULL && y == NULL);
    CHECK(amp_last_status() != AMP_OK);
    amp_clear_error();
    /* After the failures, a good call is unaffected. */
    amp_tensor *s = op_add_layer_norm(x, r, NULL, NULL, 1e-5, &y);
    amp_tensor *s2 = amp_add(x, r), *y2 = amp_layer_norm(s2, 1, NULL, NULL, 1e-5);
    CHECK(same_bits(s, s2) && same_bits(y, y2));
    amp_tensor_free(x), amp_tensor_free(r), amp_tensor_free(w5), amp_tensor_free(r3), amp_tensor_free(xi);
    amp_temps_free();
}

/* layer_norm of a [M, N] tensor (rows in groups where the CPU has the
 * group kernels) against each row on its own (a [1, N] call: one row at
 * a time): y and dx bit for bit. */
static void test_grouped_rows_equal_single_rows(void)
{
    const int64_t Ns[3] = {77, 256, 1000};
    for (int k = 0; k < 3; k++) {
        const int64_t M = 11, N = Ns[k];
        amp_tensor *x = test_uniform(AMP_SHAPE(M, N), AMP_F32, -2, 3, 200 + (uint64_t)k);
        amp_tensor *g = test_uniform(AMP_SHAPE(M, N), AMP_F32, -1, 1, 210 + (uint64_t)k);
        amp_tensor *w = test_uniform(AMP_SHAPE(N), AMP_F32, 0.5, 1.5, 220 + (uint64_t)k);
        amp_tensor *b = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 230 + (uint64_t)k);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *y = amp_layer_norm(x, 1, w, b, 1e-5);
        CHECK_OK(amp_backward_with(y, g));
        for (int64_t r = 0; r < M; r++) {
            float xr[1000], gr[1000];
            for (int64_t j = 0; j < N; j++) {
                xr[j] = (float)amp_tensor_get(x, r * N + j);
                gr[j] = (float)amp_tensor_get(g, r * N + j);
            }
            amp_tensor *x1 = amp_empty(AMP_SHAPE(1, N), AMP_F32), *g1 = amp_empty(AMP_SHAPE(1, N), AMP_F32);
            amp_tensor_copy_in(x1, xr, AMP_F32);
            amp_tensor_copy_in(g1, gr, AMP_F32);
            amp_tensor_set_requires_grad(x1, true);
            amp_tensor *y1 = amp_layer_norm(x1, 1, w, b, 1e-5);
            CHECK_OK(amp_backward_with(y1, g1));
            const float *yp = amp_tensor_data(y), *y1p = amp_tensor_data(y1);
            const float *dxp = amp_tensor_data(amp_tensor_grad(x)), *dx1p = amp_tensor_data(amp_tensor_grad(x1));
            CHECK_MSG(memcmp(yp + r * N, y1p, (size_t)N * 4) == 0, "N %lld row %lld: y differs", (long long)N,
                      (long long)r);
            CHECK_MSG(memcmp(dxp + r * N, dx1p, (size_t)N * 4) == 0, "N %lld row %lld: dx differs", (long long)N,
                      (long long)r);
            amp_tensor_free(x1), amp_tensor_free(g1);
        }
        amp_tensor_free(x), amp_tensor_free(g), amp_tensor_free(w), amp_tensor_free(b);
        amp_temps_free();
    }
}

/* The CPU backend's layer_norm backward on the same g, x and row
 * statistics: the weight and bias sums of the vector kernels (GROUP rows
 * at a time) bit for bit those of the plain C kernels (row by row); the
 * backward that adds dx into a gradient gives that gradient + dx (f32
 * adds) bit for bit. M = 11: two groups of four and three rows alone. */
static void test_grouped_parameter_sums_and_accumulate_exact(void)
{
    const int64_t Ns[3] = {77, 256, 1000}, M = 11;
    for (int k = 0; k < 3; k++) {
        const int64_t N = Ns[k];
        amp_tensor *x = test_uniform(AMP_SHAPE(M, N), AMP_F32, -2, 3, 300 + (uint64_t)k);
        amp_tensor *g = test_uniform(AMP_SHAPE(M, N), AMP_F32, -1, 1, 310 + (uint64_t)k);
        amp_tensor *w = test_uniform(AMP_SHAPE(N), AMP_F32, 0.5, 1.5, 320 + (uint64_t)k);
        amp_tensor *a0 = test_uniform(AMP_SHAPE(M, N), AMP_F32, -1, 1, 330 + (uint64_t)k);
        float mu[11], rs[11];
        for (int64_t r = 0; r < M; r++) {
            mu[r] = 0.25f + 0.01f * (float)r;
            rs[r] = 0.9f - 0.02f * (float)r;
        }
        const float *xp = amp_tensor_data(x), *gp = amp_tensor_data(g), *wp = amp_tensor_data(w);
        float *dw[2], *db[2], *dx = malloc((size_t)(M * N) * 4), *acc = malloc((size_t)(M * N) * 4);
        for (int v = 0; v < 2; v++) {
            dw[v] = malloc((size_t)N * 4);
            db[v] = malloc((size_t)N * 4);
            amp_cpu_limit(v ? 0u : ~0u);
            CHECK_OK(cpu_layer_norm_backward(gp, AMP_F32, xp, AMP_F32, wp, AMP_F32, mu, rs, M, N, dx, AMP_F32, dw[v],
                                             AMP_F32, db[v], AMP_F32));
            memcpy(acc, amp_tensor_data(a0), (size_t)(M * N) * 4);
            float dw2[1000], db2[1000];
            CHECK_OK(cpu_layer_norm_backward_add(gp, AMP_F32, xp, AMP_F32, wp, AMP_F32, mu, rs, M, N, acc, AMP_F32,
                                                 dw2, AMP_F32, db2, AMP_F32));
            const float *a0p = amp_tensor_data(a0);
            int64_t bad = -1;
            for (int64_t i = 0; i < M * N && bad < 0; i++)
                if (acc[i] != a0p[i] + dx[i])
                    bad = i;
            CHECK_MSG(bad < 0, "N %lld kernel %d: accumulated dx differs at %lld", (long long)N, v, (long long)bad);
            CHECK_MSG(memcmp(dw2, dw[v], (size_t)N * 4) == 0 && memcmp(db2, db[v], (size_t)N * 4) == 0,
                      "N %lld kernel %d: the sums differ with accumulate", (long long)N, v);
        }
        amp_cpu_limit(~0u);
        CHECK_MSG(memcmp(dw[0], dw[1], (size_t)N * 4) == 0, "N %lld: dweight of vector and C kernels differ",
                  (long long)N);
        CHECK_MSG(memcmp(db[0], db[1], (size_t)N * 4) == 0, "N %lld: dbias of vector and C kernels differ",
                  (long long)N);
        for (int v = 0; v < 2; v++)
            free(dw[v]), free(db[v]);
        free(dx), free(acc);
        amp_tensor_free(x), amp_tensor_free(g), amp_tensor_free(w), amp_tensor_free(a0);
        amp_temps_free();
    }
}

int main(void)
{
    RUN(test_fused_equals_unfused);
    RUN(test_fused_under_autocast);
    RUN(test_fused_on_cuda);
    RUN(test_broadcast_falls_back);
    RUN(test_grouped_rows_equal_single_rows);
    RUN(test_grouped_parameter_sums_and_accumulate_exact);
    RUN(test_fused_gradcheck);
    RUN(test_bad_input);
    return harness_done();
}
