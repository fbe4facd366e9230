/*
 * test_onednn_conv.c - conv2d through oneDNN (when it is built in) against
 * ampc's own kernels and convolutions in double, and the fused relu
 * (op param i[3] = 1) on both.
 *
 * Each case runs forward and backward once with oneDNN forced
 * (onednn_set_mode(CPU_LIB_ONEDNN)) and once on ampc's kernels
 * (CPU_LIB_OWN); every output and gradient is checked against a double
 * loop (tolerance: 1e-5 of the sum of the terms' magnitudes, plus one
 * bf16 ulp for 16-bit results) and the two paths against each other.
 * Without oneDNN both runs take ampc's kernels and the same checks hold;
 * the entry points are expected to decline then. The fused relu must
 * equal conv2d followed by amp_relu bit for bit on ampc's kernels, and
 * its gradients pass a finite-difference check on both paths.
 */
#include "backend/cpu/onednn/onednn.h"
#include "harness.h"
#include "ops/ops.h"

#include <stdlib.h>

typedef struct {
    int64_t N, C, H, W, O, kh, kw, s, p;
} cfg;

static int64_t out_h(const cfg *c) { return (c->H + 2 * c->p - c->kh) / c->s + 1; }
static int64_t out_w(const cfg *c) { return (c->W + 2 * c->p - c->kw) / c->s + 1; }

static uint64_t rng = 99;
/* n values uniform in [-1, 1), rounded to bf16 so that the f32 and bf16
 * cases convolve the same numbers. */
static float *values(int64_t n)
{
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        float f = (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        uint16_t h;
        amp_convert(&f, AMP_F32, &h, AMP_BF16, 1);
        amp_convert(&h, AMP_BF16, &v[i], AMP_F32, 1);
    }
    return v;
}

static amp_tensor *tensor(amp_shape s, amp_dtype dt, const float *v, bool grad)
{
    amp_tensor *t = amp_empty(s, dt);
    amp_tensor_copy_in(t, v, AMP_F32);
    amp_tensor_set_requires_grad(t, grad);
    return t;
}

/* y = conv(x, w) + b in double, with bound = the sum of the terms'
 * magnitudes (the scale of an f32 summation's error); b may be NULL. */
static void ref_forward(const cfg *c, const float *x, const float *w, const float *b, double *y, double *bound)
{
    const int64_t Ho = out_h(c), Wo = out_w(c);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double s = b ? b[o] : 0, a = b ? fabs(b[o]) : 0;
                    for (int64_t ci = 0; ci < c->C; ci++)
                        for (int64_t i = 0; i < c->kh; i++)
                            for (int64_t j = 0; j < c->kw; j++) {
                                int64_t iy = oy * c->s - c->p + i, ix = ox * c->s - c->p + j;
                                if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W)
                                    continue;
                                double t = (double)x[((n * c->C + ci) * c->H + iy) * c->W + ix] *
                                           w[((o * c->C + ci) * c->kh + i) * c->kw + j];
                                s += t, a += fabs(t);
                            }
                    int64_t k = ((n * c->O + o) * Ho + oy) * Wo + ox;
                    y[k] = s, bound[k] = a;
                }
}

/* dx, dw, db (and their bounds) from dY = g in double: each term of the
 * forward, g * x into dw, g * w into dx, g into db. */
static void ref_backward(const cfg *c, const float *x, const float *w, const double *g, double *dx, double *bx,
                         double *dw, double *bw, double *db, double *bb)
{
    const int64_t Ho = out_h(c), Wo = out_w(c);
    memset(dx, 0, sizeof(double) * (size_t)(c->N * c->C * c->H * c->W));
    memset(bx, 0, sizeof(double) * (size_t)(c->N * c->C * c->H * c->W));
    memset(dw, 0, sizeof(double) * (size_t)(c->O * c->C * c->kh * c->kw));
    memset(bw, 0, sizeof(double) * (size_t)(c->O * c->C * c->kh * c->kw));
    memset(db, 0, sizeof(double) * (size_t)c->O);
    memset(bb, 0, sizeof(double) * (size_t)c->O);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double gv = g[((n * c->O + o) * Ho + oy) * Wo + ox];
                    db[o] += gv, bb[o] += fabs(gv);
                    for (int64_t ci = 0; ci < c->C; ci++)
                        for (int64_t i = 0; i < c->kh; i++)
                            for (int64_t j = 0; j < c->kw; j++) {
                                int64_t iy = oy * c->s - c->p + i, ix = ox * c->s - c->p + j;
                                if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W)
                                    continue;
                                int64_t xi = ((n * c->C + ci) * c->H + iy) * c->W + ix;
                                int64_t wi = ((o * c->C + ci) * c->kh + i) * c->kw + j;
                                dx[xi] += gv * w[wi], bx[xi] += fabs(gv * w[wi]);
                                dw[wi] += gv * x[xi], bw[wi] += fabs(gv * x[xi]);
                            }
                }
}

/* |got - want| within 1e-5 of the terms' magnitudes, plus one bf16 ulp
 * (2^-8 of the value, either side) for a 16-bit result (and an f16
 * subnormal's step). */
static double tol(double want, double bound, amp_dtype dt)
{
    return 1e-5 * bound + (dt != AMP_F32 ? 0x1p-8 * fabs(want) : 0) + (dt == AMP_F16 ? 0x1p-24 : 0) + 1e-30;
}

/* Checks t (n values) against want / bound; up to 3 failures reported. */
static void check(const char *what, const char *path, const amp_tensor *t, const double *want, const double *bound,
                  int64_t n)
{
    CHECK_MSG(t && amp_tensor_numel(t) == n, "%s %s: missing or wrong size", what, path);
    if (!t || amp_tensor_numel(t) != n)
        return;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double got = amp_tensor_get(t, i);
        if (!(fabs(got - want[i]) <= tol(want[i], bound[i], amp_tensor_dtype(t))) && bad++ < 3)
            CHECK_MSG(0, "%s %s[%lld] = %.9g, double %.9g (bound %.3g)", what, path, (long long)i, got, want[i],
                      bound[i]);
    }
}

/* The two paths' results against each other: one tolerance of each. */
static void check_pair(const char *what, const amp_tensor *a, const amp_tensor *b, const double *bound)
{
    if (!a || !b || amp_tensor_numel(a) != amp_tensor_numel(b))
        return; /* reported by check */
    int bad = 0;
    for (int64_t i = 0; i < amp_tensor_numel(a); i++) {
        double x = amp_tensor_get(a, i), y = amp_tensor_get(b, i);
        double t = tol(x, bound[i], amp_tensor_dtype(a)) + tol(y, bound[i], amp_tensor_dtype(a));
        if (!(fabs(x - y) <= t) && bad++ < 3)
            CHECK_MSG(0, "%s[%lld]: oneDNN %.9g, own %.9g", what, (long long)i, x, y);
    }
}

/* conv2d of the three inputs with act an op_act (1: a fused relu), as api.c calls it. */
static amp_tensor *conv_act(amp_tensor *x, amp_tensor *w, amp_tensor *b, int stride, int pad, int act)
{
    amp_tensor *in[3] = {x, w, b};
    const op_params p = {
        .conv2d = {.stride = stride, .padding = pad, .has_bias = b != NULL, .act = (op_act)act}};
    return op_apply(OP_CONV2D, in, b ? 3 : 2, &p);
}

static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    if (!a || !b || amp_tensor_numel(a) != amp_tensor_numel(b) || amp_tensor_dtype(a) != amp_tensor_dtype(b))
        return false;
    size_t n = (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a));
    return memcmp(amp_tensor_data((amp_tensor *)a), amp_tensor_data((amp_tensor *)b), n) == 0;
}

typedef struct {
    amp_tensor *y, *dx, *dw, *db; /* owned copies */
} run_out;

/* Forward and backward of one case on the current path; need: which of
 * x, w, b get gradients (bits 1, 2, 4). */
static run_out run_case(const cfg *c, amp_dtype dt, const float *x, const float *w, const float *b, const float *gy,
                        int act, int need)
{
    amp_tensor *xt = tensor(AMP_SHAPE(c->N, c->C, c->H, c->W), dt, x, need & 1);
    amp_tensor *wt = tensor(AMP_SHAPE(c->O, c->C, c->kh, c->kw), dt, w, need & 2);
    amp_tensor *bt = b ? tensor(AMP_SHAPE(c->O), dt, b, need & 4) : NULL;
    amp_tensor *gt = tensor(AMP_SHAPE(c->N, c->O, out_h(c), out_w(c)), dt, gy, false);
    run_out r = {0};
    amp_tensor *y = conv_act(xt, wt, bt, (int)c->s, (int)c->p, act);
    CHECK(y != NULL);
    if (y) {
        r.y = amp_clone(y);
        CHECK_OK(amp_backward_with(y, gt));
        r.dx = amp_tensor_grad(xt) ? amp_clone(amp_tensor_grad(xt)) : NULL;
        r.dw = amp_tensor_grad(wt) ? amp_clone(amp_tensor_grad(wt)) : NULL;
        r.db = bt && amp_tensor_grad(bt) ? amp_clone(amp_tensor_grad(bt)) : NULL;
    }
    amp_tensor_free(xt), amp_tensor_free(wt), amp_tensor_free(bt), amp_tensor_free(gt);
    amp_temps_free();
    return r;
}

static void run_free(run_out *r)
{
    amp_tensor_free(r->y), amp_tensor_free(r->dx), amp_tensor_free(r->dw), amp_tensor_free(r->db);
}

/* One case on both paths, each against double and against the other. */
static void compare_paths(const cfg *c, amp_dtype dt, bool bias, int act, int need)
{
    const int64_t nx = c->N * c->C * c->H * c->W, nw = c->O * c->C * c->kh * c->kw;
    const int64_t ny = c->N * c->O * out_h(c) * out_w(c);
    float *x = values(nx), *w = values(nw), *b = values(c->O), *gy = values(ny);
    double *y = malloc(sizeof(double) * (size_t)ny), *by = malloc(sizeof(double) * (size_t)ny);
    double *g = malloc(sizeof(double) * (size_t)ny);
    double *dx = malloc(sizeof(double) * (size_t)nx), *bx = malloc(sizeof(double) * (size_t)nx);
    double *dw = malloc(sizeof(double) * (size_t)nw), *bw = malloc(sizeof(double) * (size_t)nw);
    double *db = malloc(sizeof(double) * (size_t)c->O), *bb = malloc(sizeof(double) * (size_t)c->O);
    char what[160];
    snprintf(what, sizeof what, "%s N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lld p%lld%s%s need%d",
             amp_dtype_name(dt), (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W,
             (long long)c->O, (long long)c->kh, (long long)c->kw, (long long)c->s, (long long)c->p,
             bias ? " bias" : "", act ? " relu" : "", need);
    ref_forward(c, x, w, bias ? b : NULL, y, by);
    for (int64_t i = 0; act && i < ny; i++)
        y[i] = y[i] > 0 ? y[i] : 0;
    run_out r[2];
    const cpu_lib_mode modes[2] = {CPU_LIB_ONEDNN, CPU_LIB_OWN};
    const char *names[2] = {"oneDNN", "own"};
    for (int m = 0; m < 2; m++) {
        onednn_set_mode(modes[m]);
        r[m] = run_case(c, dt, x, w, bias ? b : NULL, gy, act, need);
        check(what, names[m], r[m].y, y, by, ny);
        /* dY masked by the path's own output (a value within rounding
         * of 0 may fall either side on the two paths) */
        for (int64_t i = 0; i < ny; i++)
            g[i] = !act || (r[m].y && amp_tensor_get(r[m].y, i) > 0) ? gy[i] : 0;
        ref_backward(c, x, w, g, dx, bx, dw, bw, db, bb);
        CHECK_MSG(!(need & 1) == !r[m].dx && !(need & 2) == !r[m].dw && !(need & 4 && bias) == !r[m].db,
                  "%s %s: gradients present: dx %d dw %d db %d", what, names[m], r[m].dx != NULL,
                  r[m].dw != NULL, r[m].db != NULL);
        if (r[m].dx)
            check(what, names[m], r[m].dx, dx, bx, nx);
        if (r[m].dw)
            check(what, names[m], r[m].dw, dw, bw, nw);
        if (r[m].db)
            check(what, names[m], r[m].db, db, bb, c->O);
    }
    check_pair(what, r[0].y, r[1].y, by);
    check_pair(what, r[0].dx, r[1].dx, bx); /* bounds of the last mask: the same up to a few terms */
    check_pair(what, r[0].dw, r[1].dw, bw);
    check_pair(what, r[0].db, r[1].db, bb);
    run_free(&r[0]), run_free(&r[1]);
    onednn_set_mode(CPU_LIB_AUTO);
    free(x), free(w), free(b), free(gy), free(y), free(by), free(g);
    free(dx), free(bx), free(dw), free(bw), free(db), free(bb);
}

/* f16 runs on the f32 primitive, converted by the layout reorders. */
static void test_onednn_matches_own_and_double(void)
{
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++)
        for (int s = 1; s <= 2; s++)
            for (int p = 0; p <= 1; p++)
                for (int bias = 0; bias <= 1; bias++)
                    for (int act = 0; act <= 1; act++) {
                        /* 16 in, 20 out channels: oneDNN's blocked kernels, a partial block */
                        cfg c = {2, 16, 7, 6, 20, 3, 3, s, p};
                        compare_paths(&c, dts[d], bias, act, 7);
                    }
}

/* The first layer of an image model (1 or 3 channels: oneDNN keeps x
 * plain there), a 1x1 and a non-square kernel, an odd batch. */
static void test_onednn_other_shapes(void)
{
    const cfg cs[] = {
        {3, 1, 8, 8, 32, 3, 3, 1, 1}, {2, 3, 9, 7, 8, 3, 3, 2, 1}, {2, 32, 5, 5, 16, 1, 1, 1, 0},
        {1, 8, 6, 9, 12, 2, 3, 1, 1}, {5, 4, 4, 4, 6, 3, 3, 1, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int d = 0; d < 2; d++)
            compare_paths(&cs[i], d ? AMP_BF16 : AMP_F32, true, (int)(i & 1), 7);
}

/* Only some inputs need gradients: the input alone (a frozen layer's
 * backward), the weight without the bias, the bias alone (oneDNN makes
 * it only along with the weight's: the own kernels take that one). */
static void test_onednn_partial_gradients(void)
{
    cfg c = {2, 16, 6, 6, 16, 3, 3, 1, 1};
    const int needs[] = {1, 2, 4, 6};
    for (size_t i = 0; i < sizeof needs / sizeof needs[0]; i++)
        for (int d = 0; d < 2; d++)
            compare_paths(&c, d ? AMP_BF16 : AMP_F32, true, 1, needs[i]);
}

/* The entry points directly: what they take, the output dtypes conv.c
 * does not use (bf16 in, f32 out), dilation. */
static void test_onednn_entry_points(void)
{
    const onednn_conv_geom g = {.N = 2, .C = 16, .H = 7, .W = 7, .O = 16, .KH = 3, .KW = 3, .OH = 3, .OW = 3,
                                .sh = 1, .sw = 1, .ph = 0, .pw = 0, .dh = 2, .dw = 2};
    const int64_t nx = 2 * 16 * 49, nw = 16 * 16 * 9, ny = 2 * 16 * 9;
    float *x = values(nx), *w = values(nw), *b = values(16), *gy = values(ny);
    uint16_t *xh = malloc(2 * (size_t)nx), *wh = malloc(2 * (size_t)nw), *bh = malloc(32), *gh = malloc(2 * (size_t)ny);
    amp_convert(x, AMP_F32, xh, AMP_BF16, (size_t)nx);
    amp_convert(w, AMP_F32, wh, AMP_BF16, (size_t)nw);
    amp_convert(b, AMP_F32, bh, AMP_BF16, 16);
    amp_convert(gy, AMP_F32, gh, AMP_BF16, (size_t)ny);
    float *out = malloc(sizeof(float) * (size_t)nw), *outb = malloc(64);
    amp_status st = AMP_OK;
    const bool have = onednn_available();

    onednn_set_mode(CPU_LIB_OWN);
    CHECK(!onednn_conv_forward(&g, x, w, AMP_F32, NULL, AMP_F32, out, AMP_F32, CPU_ACT_NONE, &st));
    onednn_set_mode(CPU_LIB_ONEDNN);
    uint16_t fh[4] = {0};
    CHECK(!onednn_conv_forward(&g, fh, fh, AMP_F16, NULL, AMP_F16, out, AMP_BF16, CPU_ACT_NONE, &st));
    CHECK(!onednn_conv_forward(&g, x, w, AMP_F32, NULL, AMP_F32, out, AMP_BF16, CPU_ACT_NONE, &st));
    /* AUTO leaves bf16 convolutions of few input channels to ampc */
    onednn_set_mode(CPU_LIB_AUTO);
    onednn_conv_geom g1 = g;
    g1.C = 3;
    CHECK(!onednn_conv_forward(&g1, xh, wh, AMP_BF16, NULL, AMP_BF16, out, AMP_BF16, CPU_ACT_NONE, &st));
    onednn_set_mode(CPU_LIB_ONEDNN);

    /* dilation 2, bf16 in, f32 out, a bf16 bias, fused relu, against
     * double (the reference below dilates by spreading the kernel) */
    cfg cd = {2, 16, 7, 7, 16, 5, 5, 1, 0}; /* the dilated 3x3 kernel as a 5x5 one with zeros */
    float *w5 = calloc((size_t)(16 * 16 * 25), sizeof(float));
    for (int64_t k = 0; k < 16 * 16; k++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                w5[k * 25 + 2 * i * 5 + 2 * j] = w[k * 9 + i * 3 + j];
    double *y = malloc(sizeof(double) * (size_t)ny), *by = malloc(sizeof(double) * (size_t)ny);
    ref_forward(&cd, x, w5, b, y, by);
    bool taken = onednn_conv_forward(&g, xh, wh, AMP_BF16, bh, AMP_BF16, out, AMP_F32, CPU_ACT_RELU, &st);
    CHECK_EQ_INT(taken, have);
    if (taken) {
        CHECK_OK(st);
        int bad = 0;
        for (int64_t i = 0; i < ny; i++) {
            double want = y[i] > 0 ? y[i] : 0;
            if (!(fabs(out[i] - want) <= tol(want, by[i], AMP_F32)) && bad++ < 3)
                CHECK_MSG(0, "dilated y[%lld] = %.9g, double %.9g", (long long)i, out[i], want);
        }
    }
    /* weight gradient in f32 from bf16 operands, bias gradient in f32 */
    double *g64 = malloc(sizeof(double) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++)
        g64[i] = gy[i];
    double *dx = malloc(sizeof(double) * (size_t)nx), *bx = malloc(sizeof(double) * (size_t)nx);
    double *dw = malloc(sizeof(double) * 16 * 16 * 25), *bw = malloc(sizeof(double) * 16 * 16 * 25);
    double db[16], bb[16];
    ref_backward(&cd, x, w5, g64, dx, bx, dw, bw, db, bb);
    taken = onednn_conv_backward_weights(&g, xh, gh, AMP_BF16, out, AMP_F32, outb, AMP_F32, &st);
    CHECK_EQ_INT(taken, have);
    if (taken) {
        CHECK_OK(st);
        int bad = 0;
        for (int64_t k = 0; k < 16 * 16; k++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    int64_t r = k * 25 + 2 * i * 5 + 2 * j;
                    if (!(fabs(out[k * 9 + i * 3 + j] - dw[r]) <= tol(dw[r], bw[r], AMP_F32)) && bad++ < 3)
                        CHECK_MSG(0, "dilated dw[%lld] = %.9g, double %.9g", (long long)(k * 9 + i * 3 + j),
                                  out[k * 9 + i * 3 + j], dw[r]);
                }
        for (int o = 0; o < 16; o++)
            CHECK_NEAR(outb[o], db[o], tol(db[o], bb[o], AMP_F32));
    }
    float *dxo = malloc(sizeof(float) * (size_t)nx);
    taken = onednn_conv_backward_data(&g, gh, wh, AMP_BF16, dxo, AMP_F32, &st);
    CHECK_EQ_INT(taken, have);
    if (taken) {
        CHECK_OK(st);
        int bad = 0;
        for (int64_t i = 0; i < nx; i++)
            if (!(fabs(dxo[i] - dx[i]) <= tol(dx[i], bx[i], AMP_F32)) && bad++ < 3)
                CHECK_MSG(0, "dilated dx[%lld] = %.9g, double %.9g", (long long)i, dxo[i], dx[i]);
    }
    onednn_set_mode(CPU_LIB_AUTO);
    free(x), free(w), free(b), free(gy), free(xh), free(wh), free(bh), free(gh), free(out), free(outb), free(w5);
    free(y), free(by), free(g64), free(dx), free(bx), free(dw), free(bw), free(dxo);
}


/* The same call gives the same bits every time, with two threads too
 * (each pass's reduction order is fixed by its primitive). */
static void test_onednn_is_deterministic(void)
{
    cfg c = {4, 16, 8, 8, 32, 3, 3, 1, 1};
    const int64_t nx = 4 * 16 * 64, nw = 32 * 16 * 9, ny = 4 * 32 * 64;
    float *x = values(nx), *w = values(nw), *b = values(32), *gy = values(ny);
    const int threads = amp_get_num_threads();
    amp_set_num_threads(2);
    onednn_set_mode(CPU_LIB_ONEDNN);
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = d ? AMP_BF16 : AMP_F32;
        run_out r0 = run_case(&c, dt, x, w, b, gy, 1, 7), r1 = run_case(&c, dt, x, w, b, gy, 1, 7);
        CHECK_MSG(same_bits(r0.y, r1.y) && same_bits(r0.dx, r1.dx) && same_bits(r0.dw, r1.dw) &&
                      same_bits(r0.db, r1.db),
                  "%s: two runs differ", amp_dtype_name(dt));
        run_free(&r0), run_free(&r1);
    }
    onednn_set_mode(CPU_LIB_AUTO);
    amp_set_num_threads(threads);
    free(x), free(w), free(b), free(gy);
}

/* On ampc's kernels the fused relu is conv2d then amp_relu, bit for bit,
 * forward and backward, in every float dtype, NaN included. */
static void test_fused_relu_is_conv_then_relu_bitwise(void)
{
    onednn_set_mode(CPU_LIB_OWN);
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    const int64_t nx = 2 * 3 * 30, nw = 4 * 3 * 9, ny = 2 * 4 * 30;
    for (int d = 0; d < 3; d++)
        for (int bias = 0; bias <= 1; bias++) {
            float *x = values(nx), *w = values(nw), *b = values(4), *gy = values(ny);
            x[7] = NAN; /* a NaN stays NaN through both relus */
            amp_tensor *in[2][3], *y[2], *gt = tensor(AMP_SHAPE(2, 4, 6, 5), dts[d], gy, false);
            for (int k = 0; k < 2; k++) {
                in[k][0] = tensor(AMP_SHAPE(2, 3, 6, 5), dts[d], x, true);
                in[k][1] = tensor(AMP_SHAPE(4, 3, 3, 3), dts[d], w, true);
                in[k][2] = bias ? tensor(AMP_SHAPE(4), dts[d], b, true) : NULL;
            }
            y[0] = conv_act(in[0][0], in[0][1], in[0][2], 1, 1, 1);
            y[1] = amp_relu(amp_conv2d(in[1][0], in[1][1], in[1][2], 1, 1));
            CHECK_MSG(same_bits(y[0], y[1]), "%s%s: fused relu output differs", amp_dtype_name(dts[d]),
                      bias ? " bias" : "");
            for (int k = 0; k < 2; k++)
                CHECK_OK(amp_backward_with(y[k], gt));
            for (int i = 0; i < (bias ? 3 : 2); i++)
                CHECK_MSG(same_bits(amp_tensor_grad(in[0][i]), amp_tensor_grad(in[1][i])),
                          "%s%s: gradient of input %d differs", amp_dtype_name(dts[d]), bias ? " bias" : "", i);
            for (int k = 0; k < 2; k++)
                for (int i = 0; i < 3; i++)
                    amp_tensor_free(in[k][i]);
            amp_tensor_free(gt);
            amp_temps_free();
            free(x), free(w), free(b), free(gy);
        }
    onednn_set_mode(CPU_LIB_AUTO);
}

/* Through oneDNN too a NaN input stays NaN through the fused relu
 * (its relu post-op turned NaN into 0; ampc's relu now runs after the
 * primitive): the fused output is NaN exactly where conv2d then amp_relu
 * is. */
static void test_fused_relu_keeps_nan_on_onednn(void)
{
    const int64_t nx = 2 * 16 * 49, nw = 16 * 16 * 9;
    float *x = values(nx), *w = values(nw), *b = values(16);
    x[7] = NAN;
    amp_tensor *xt = tensor(AMP_SHAPE(2, 16, 7, 7), AMP_F32, x, false);
    amp_tensor *wt = tensor(AMP_SHAPE(16, 16, 3, 3), AMP_F32, w, false);
    amp_tensor *bt = tensor(AMP_SHAPE(16), AMP_F32, b, false);
    onednn_set_mode(CPU_LIB_ONEDNN);
    amp_tensor *fused = conv_act(xt, wt, bt, 1, 1, 1), *plain = amp_relu(amp_conv2d(xt, wt, bt, 1, 1));
    onednn_set_mode(CPU_LIB_AUTO);
    CHECK(fused && plain);
    if (fused && plain) {
        const float *f = amp_tensor_cdata(fused), *p = amp_tensor_cdata(plain);
        int nans = 0, differ = 0;
        for (int64_t i = 0; i < amp_tensor_numel(fused); i++) {
            nans += isnan(p[i]);
            differ += isnan(f[i]) != isnan(p[i]);
        }
        CHECK_MSG(nans > 0 && differ == 0, "%d NaN outputs unfused, %d places where the fused one differs", nans,
                  differ);
    }
    amp_tensor_free(xt), amp_tensor_free(wt), amp_tensor_free(bt);
    amp_temps_free();
    free(x), free(w), free(b);
}

typedef struct {
    int stride, pad;
} gc_args;

static amp_tensor *fused_fn(amp_tensor **in, void *ctx)
{
    gc_args *a = ctx;
    return conv_act(in[0], in[1], in[2], a->stride, a->pad, 1);
}

/* Finite differences through the fused relu, on both paths. The inputs
 * are drawn until every pre-activation is at least 0.02 from the kink,
 * which a step of 1e-3 in one input (|weights| < 1) cannot cross. */
static void test_fused_relu_gradcheck(void)
{
    const cpu_lib_mode modes[2] = {CPU_LIB_OWN, CPU_LIB_ONEDNN};
    for (int m = 0; m < 2; m++)
        for (int stride = 1; stride <= 2; stride++) {
            cfg c = {2, 3, 5, 6, 4, 3, 3, stride, 1};
            const int64_t nx = 2 * 3 * 30, nw = 4 * 3 * 9, ny = 2 * 4 * out_h(&c) * out_w(&c);
            double *y = malloc(sizeof(double) * (size_t)ny), *by = malloc(sizeof(double) * (size_t)ny);
            float *x = NULL, *w = NULL, *b = NULL;
            double margin = 0;
            for (int tries = 0; tries < 200 && margin < 0.02; tries++) {
                free(x), free(w), free(b);
                x = values(nx), w = values(nw), b = values(4);
                ref_forward(&c, x, w, b, y, by);
                margin = 1e9;
                for (int64_t i = 0; i < ny; i++)
                    margin = fabs(y[i]) < margin ? fabs(y[i]) : margin;
            }
            CHECK(margin >= 0.02);
            amp_tensor *in[3] = {tensor(AMP_SHAPE(2, 3, 5, 6), AMP_F32, x, true),
                                 tensor(AMP_SHAPE(4, 3, 3, 3), AMP_F32, w, true),
                                 tensor(AMP_SHAPE(4), AMP_F32, b, true)};
            gc_args a = {stride, 1};
            onednn_set_mode(modes[m]);
            char what[64];
            snprintf(what, sizeof what, "fused relu conv stride %d (%s)", stride, m ? "oneDNN" : "own");
            CHECK(gradcheck(what, fused_fn, in, 3, &a, 1e-3, 2e-3, 1e-2));
            onednn_set_mode(CPU_LIB_AUTO);
            for (int i = 0; i < 3; i++)
                amp_tensor_free(in[i]);
            free(x), free(w), free(b), free(y), free(by);
        }
}

static void test_unknown_activation_is_an_error(void)
{
    float v[2 * 2 * 9] = {0};
    amp_tensor *x = amp_from_data(AMP_SHAPE(1, 2, 3, 3), AMP_F32, v);
    amp_tensor *w = amp_from_data(AMP_SHAPE(2, 2, 3, 3), AMP_F32, v);
    CHECK(conv_act(x, w, NULL, 1, 0, 2) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "activation");
    amp_tensor_free(x), amp_tensor_free(w);
}

int main(void)
{
    printf("oneDNN: %s (%s)\n", onednn_version(), onednn_available() ? "available" : "not available");
    RUN(test_onednn_matches_own_and_double);
    RUN(test_onednn_other_shapes);
    RUN(test_onednn_partial_gradients);
    RUN(test_onednn_entry_points);
    RUN(test_onednn_is_deterministic);
    RUN(test_fused_relu_is_conv_then_relu_bitwise);
    RUN(test_fused_relu_keeps_nan_on_onednn);
    RUN(test_fused_relu_gradcheck);
    RUN(test_unknown_activation_is_an_error);
    return harness_done();
}
