/*
 * conv.c - conv2d, max_pool2d and avg_pool2d, forward and backward.
 *
 * conv2d is im2col + GEMM, per image: the image's receptive fields become
 * the columns of a [C*kh*kw, Ho*Wo] matrix, and the output image is
 * W [O, C*kh*kw] times it. Backward reuses the same columns: dW is
 * dY_n cols^T summed over images, dX is col2im of W^T dY_n, db sums dY.
 * Images are spread over threads (each with its own column scratch and,
 * in backward, its own dW partial sum); a single image instead lets the
 * GEMM use the threads. Everything runs in f32: 16-bit tensors are widened
 * once and the results rounded once, which is the f32 accumulation the
 * 16-bit GEMM would give.
 *
 * Pooling follows PyTorch (ceil_mode=False): Ho = (H + 2p - k) / s + 1.
 * Padding never wins a max; avg_pool2d divides by k*k, padding included
 * (count_include_pad=True). max_pool2d saves the argmax of each window
 * (an i32 tensor of offsets within the H x W plane) for backward; the
 * first maximum wins ties and a NaN wins over numbers, as in PyTorch.
 */
#include "backend/cpu/gemm.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------ conv2d */

typedef struct {
    int64_t N, C, H, W, O, kh, kw, s, p, Ho, Wo;
    int64_t ckk, l; /* GEMM sizes: C*kh*kw and Ho*Wo */
    bool bias;
} conv_geom;

static bool conv_geom_make(const node *n, conv_geom *g)
{
    const amp_tensor *x = n->in[0], *w = n->in[1];
    g->bias = n->p.i[2] != 0 && n->n_in > 2;
    g->s = n->p.i[0];
    g->p = n->p.i[1];
    if (x->shape.ndim != 4 || w->shape.ndim != 4) {
        op_fail_shapes(n, "need x [N, C, H, W] and weight [O, C, kh, kw]");
        return false;
    }
    g->N = x->shape.d[0], g->C = x->shape.d[1], g->H = x->shape.d[2], g->W = x->shape.d[3];
    g->O = w->shape.d[0], g->kh = w->shape.d[2], g->kw = w->shape.d[3];
    if (w->shape.d[1] != g->C) {
        op_fail_shapes(n, "input channels of x and weight differ");
        return false;
    }
    if (g->H + 2 * g->p < g->kh || g->W + 2 * g->p < g->kw || g->kh < 1 || g->kw < 1) {
        op_fail_shapes(n, "the padded input is smaller than the kernel");
        return false;
    }
    if (g->bias && (n->in[2]->shape.ndim != 1 || n->in[2]->shape.d[0] != g->O)) {
        op_fail_shapes(n, "the bias must be [out_channels]");
        return false;
    }
    g->Ho = (g->H + 2 * g->p - g->kh) / g->s + 1;
    g->Wo = (g->W + 2 * g->p - g->kw) / g->s + 1;
    g->ckk = g->C * g->kh * g->kw;
    g->l = g->Ho * g->Wo;
    return true;
}

/* A 1x1 kernel with stride 1 and no padding: the image is its own columns. */
static bool conv_is_pointwise(const conv_geom *g) { return g->kh == 1 && g->kw == 1 && g->s == 1 && g->p == 0; }

/* The output columns ox whose input column ox*s - p + j lies inside the
 * image: [*lo, *hi). Hoisting this out of the inner loops keeps them free
 * of branches (and a plain copy when the stride is 1). */
static void valid_cols(const conv_geom *g, int64_t j, int64_t *lo, int64_t *hi)
{
    int64_t first = g->p - j, last = g->W - 1 + g->p - j; /* need first <= ox*s <= last */
    *lo = first > 0 ? (first + g->s - 1) / g->s : 0;
    *hi = last < 0 ? 0 : last / g->s + 1;
    if (*hi > g->Wo)
        *hi = g->Wo;
    if (*lo > *hi)
        *lo = *hi;
}

/* cols[(c*kh + i)*kw + j][oy*Wo + ox] = x[c][oy*s - p + i][ox*s - p + j], 0 off the image. */
static void im2col(const conv_geom *g, const float *x, float *cols)
{
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *row = cols + ((c * g->kh + i) * g->kw + j) * g->l;
                int64_t lo, hi;
                valid_cols(g, j, &lo, &hi);
                for (int64_t oy = 0; oy < g->Ho; oy++) {
                    int64_t iy = oy * g->s - g->p + i;
                    float *out = row + oy * g->Wo;
                    if (iy < 0 || iy >= g->H) {
                        for (int64_t ox = 0; ox < g->Wo; ox++)
                            out[ox] = 0.0f;
                        continue;
                    }
                    const float *in = x + (c * g->H + iy) * g->W;
                    const int64_t shift = j - g->p; /* input column of ox = ox*s + shift */
                    /* Rows are short (Wo of a few dozen): plain loops beat
                     * memcpy / memset calls here. */
                    for (int64_t ox = 0; ox < lo; ox++)
                        out[ox] = 0.0f;
                    if (g->s == 1)
                        for (int64_t ox = lo; ox < hi; ox++)
                            out[ox] = in[ox + shift];
                    else
                        for (int64_t ox = lo; ox < hi; ox++)
                            out[ox] = in[ox * g->s + shift];
                    for (int64_t ox = hi; ox < g->Wo; ox++)
                        out[ox] = 0.0f;
                }
            }
}

/* The adjoint of im2col: dx (zeroed by the caller) += the columns. */
static void col2im(const conv_geom *g, const float *cols, float *dx)
{
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const float *row = cols + ((c * g->kh + i) * g->kw + j) * g->l;
                int64_t lo, hi;
                valid_cols(g, j, &lo, &hi);
                for (int64_t oy = 0; oy < g->Ho; oy++) {
                    int64_t iy = oy * g->s - g->p + i;
                    if (iy < 0 || iy >= g->H)
                        continue;
                    float *out = dx + (c * g->H + iy) * g->W;
                    const float *in = row + oy * g->Wo;
                    const int64_t shift = j - g->p;
                    for (int64_t ox = lo; ox < hi; ox++)
                        out[ox * g->s + shift] += in[ox];
                }
            }
}

/* Threads across images: one per image at most; a lone image leaves the
 * threads to its GEMM. */
static int image_threads(int64_t images)
{
    int nt = amp_threads();
    return images < nt ? (int)(images > 0 ? images : 1) : nt;
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* An f32 buffer of t's size that becomes t's data when t is f32. */
static float *f32_target(amp_tensor *t) { return t->dtype == AMP_F32 ? tensor_f32(t) : amp_alloc((size_t)t->numel * sizeof(float)); }

/* Rounds buf into t when it is a separate buffer, then frees it. */
static void f32_commit(amp_tensor *t, float *buf)
{
    if (buf && buf != tensor_f32(t)) {
        tensor_store_f32(t, buf);
        amp_free(buf);
    }
}

static bool same_dtypes(const node *n)
{
    for (int i = 0; i < n->n_in; i++) {
        if (!op_require_float(n, i))
            return false;
        if (n->in[i]->dtype != n->in[0]->dtype) {
            amp_fail_null(AMP_ERR_DTYPE, "%s: dtypes %s and %s differ", op_name(n),
                          amp_dtype_name(n->in[0]->dtype), amp_dtype_name(n->in[i]->dtype));
            return false;
        }
    }
    return true;
}

amp_tensor *conv2d_forward(node *n)
{
    conv_geom g;
    if (!same_dtypes(n) || !conv_geom_make(n, &g))
        return NULL;
    amp_tensor *y = tensor_new(AMP_SHAPE(g.N, g.O, g.Ho, g.Wo), n->in[0]->dtype);
    if (!y)
        return NULL;
    float *tx, *tw, *tb = NULL;
    const float *x = tensor_as_f32(n->in[0], &tx), *w = tensor_as_f32(n->in[1], &tw);
    const float *b = g.bias ? tensor_as_f32(n->in[2], &tb) : NULL;
    float *yf = f32_target(y);
    int nt = image_threads(g.N);
    bool pointwise = conv_is_pointwise(&g);
    float *cols = pointwise ? NULL : amp_alloc((size_t)(nt * g.ckk * g.l) * sizeof(float));
    int failed = !x || !w || (g.bias && !b) || !yf || (!pointwise && !cols);
    if (!failed) {
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static) reduction(| : failed)
        for (int64_t im = 0; im < g.N; im++) {
            float *c = pointwise ? NULL : cols + (size_t)thread_id() * (size_t)(g.ckk * g.l);
            const float *xi = x + im * g.C * g.H * g.W;
            float *yi = yf + im * g.O * g.l;
            if (pointwise)
                c = (float *)xi;
            else
                im2col(&g, xi, c);
            if (b)
                for (int64_t o = 0; o < g.O; o++)
                    for (int64_t k = 0; k < g.l; k++)
                        yi[o * g.l + k] = b[o];
            failed |= gemm_f32(false, false, g.O, g.l, g.ckk, 1.0f, w, g.ckk, c, g.l, b ? 1.0f : 0.0f,
                               yi, g.l) != AMP_OK;
        }
    }
    amp_free(cols);
    amp_free(tx);
    amp_free(tw);
    amp_free(tb);
    if (failed) {
        if (yf != tensor_f32(y))
            amp_free(yf);
        amp_tensor_free(y);
        return amp_fail_null(AMP_ERR_MEMORY, "conv2d: out of memory");
    }
    f32_commit(y, yf);
    return y;
}

amp_status conv2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    conv_geom g;
    if (!conv_geom_make(n, &g))
        return amp_last_status();
    bool need_x = in_needs_grad(n, 0), need_w = in_needs_grad(n, 1);
    bool need_b = g.bias && in_needs_grad(n, 2);
    amp_dtype dt = n->in[0]->dtype;
    if (need_x)
        gin[0] = tensor_new(n->in[0]->shape, dt);
    if (need_w)
        gin[1] = tensor_new(n->in[1]->shape, dt);
    if (need_b)
        gin[2] = tensor_new(n->in[2]->shape, dt);
    if ((need_x && !gin[0]) || (need_w && !gin[1]) || (need_b && !gin[2]))
        return amp_last_status();

    int nt = image_threads(g.N);
    bool pointwise = conv_is_pointwise(&g);
    /* Per thread: columns, their gradient, and a dW partial sum. */
    const size_t per = (size_t)(2 * g.ckk * g.l + g.O * g.ckk);
    float *tx, *tw, *tg;
    const float *x = tensor_as_f32(n->in[0], &tx), *w = tensor_as_f32(n->in[1], &tw);
    const float *gy = tensor_as_f32(gout, &tg);
    float *scratch = amp_alloc((size_t)nt * per * sizeof(float));
    float *dx = need_x ? f32_target(gin[0]) : NULL;
    int failed = !x || !w || !gy || !scratch || (need_x && !dx);
    if (!failed) {
        for (int t = 0; t < nt; t++) /* only the dW partial sums start at zero */
            memset(scratch + (size_t)t * per + 2 * g.ckk * g.l, 0, (size_t)(g.O * g.ckk) * sizeof(float));
        if (dx)
            memset(dx, 0, (size_t)gin[0]->numel * sizeof(float));
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static) reduction(| : failed)
        for (int64_t im = 0; im < g.N; im++) {
            float *mine = scratch + (size_t)thread_id() * per;
            float *cols = mine, *dcols = mine + g.ckk * g.l, *dw = dcols + g.ckk * g.l;
            const float *xi = x + im * g.C * g.H * g.W, *gi = gy + im * g.O * g.l;
            if (need_w) {
                if (pointwise)
                    cols = (float *)xi;
                else
                    im2col(&g, xi, cols);
                /* dW += dY_n [O, L] cols^T [L, CKK] */
                failed |= gemm_f32(false, true, g.O, g.ckk, g.l, 1.0f, gi, g.l, cols, g.l, 1.0f, dw,
                                   g.ckk) != AMP_OK;
            }
            if (need_x) {
                /* dcols [CKK, L] = W^T [CKK, O] dY_n [O, L], then back onto the image */
                float *dxi = dx + im * g.C * g.H * g.W;
                failed |= gemm_f32(true, false, g.ckk, g.l, g.O, 1.0f, w, g.ckk, gi, g.l, 0.0f,
                                   pointwise ? dxi : dcols, g.l) != AMP_OK;
                if (!pointwise)
                    col2im(&g, dcols, dxi);
            }
        }
    }
    if (!failed && need_w) {
        /* Thread 0's partial sum collects the others'. */
        float *dw0 = scratch + 2 * g.ckk * g.l;
        for (int t = 1; t < nt; t++)
            for (int64_t k = 0; k < g.O * g.ckk; k++)
                dw0[k] += scratch[(size_t)t * per + (size_t)(2 * g.ckk * g.l + k)];
        tensor_store_f32(gin[1], dw0);
    }
    if (!failed && need_b) {
        float *db = scratch; /* the columns are no longer needed */
        memset(db, 0, (size_t)g.O * sizeof(float));
        for (int64_t im = 0; im < g.N; im++)
            for (int64_t o = 0; o < g.O; o++) {
                const float *row = gy + (im * g.O + o) * g.l;
                float s = 0.0f;
                for (int64_t k = 0; k < g.l; k++)
                    s += row[k];
                db[o] += s;
            }
        tensor_store_f32(gin[2], db);
    }
    if (dx && !failed)
        f32_commit(gin[0], dx);
    else if (dx && dx != tensor_f32(gin[0]))
        amp_free(dx);
    amp_free(scratch);
    amp_free(tx);
    amp_free(tw);
    amp_free(tg);
    return failed ? amp_set_error(AMP_ERR_MEMORY, "conv2d: out of memory in backward") : AMP_OK;
}

/* ------------------------------------------------------------ pooling */

/* Pools a [.., H, W] tensor (3-D or 4-D) plane by plane. */
typedef struct {
    int64_t planes, H, W, k, s, p, Ho, Wo;
} pool_geom;

static bool pool_geom_make(const node *n, pool_geom *g)
{
    const amp_tensor *x = n->in[0];
    if (!op_require_float(n, 0))
        return false;
    int nd = x->shape.ndim;
    if (nd != 3 && nd != 4) {
        op_fail_shapes(n, "need x [N, C, H, W] or [C, H, W]");
        return false;
    }
    g->k = n->p.i[0], g->s = n->p.i[1], g->p = n->p.i[2];
    g->H = x->shape.d[nd - 2], g->W = x->shape.d[nd - 1];
    g->planes = 1;
    for (int i = 0; i < nd - 2; i++)
        g->planes *= x->shape.d[i];
    if (g->H + 2 * g->p < g->k || g->W + 2 * g->p < g->k) {
        char why[96];
        snprintf(why, sizeof why, "the padded input is smaller than the %lldx%lld window", (long long)g->k,
                 (long long)g->k);
        op_fail_shapes(n, why);
        return false;
    }
    if (g->H * g->W > INT32_MAX) {
        op_fail_shapes(n, "a plane has more elements than the i32 argmax can index");
        return false;
    }
    g->Ho = (g->H + 2 * g->p - g->k) / g->s + 1;
    g->Wo = (g->W + 2 * g->p - g->k) / g->s + 1;
    return true;
}

static amp_shape pool_out_shape(const amp_tensor *x, const pool_geom *g)
{
    amp_shape s = x->shape;
    s.d[s.ndim - 2] = g->Ho;
    s.d[s.ndim - 1] = g->Wo;
    return s;
}

/* The window of output (oy, ox) clipped to the image: rows [*y0, *y1),
 * columns [*x0, *x1). With padding <= k/2 it is never empty. */
static void pool_window(const pool_geom *g, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1, int64_t *x0,
                        int64_t *x1)
{
    int64_t ys = oy * g->s - g->p, xs = ox * g->s - g->p;
    *y0 = ys < 0 ? 0 : ys;
    *x0 = xs < 0 ? 0 : xs;
    *y1 = ys + g->k < g->H ? ys + g->k : g->H;
    *x1 = xs + g->k < g->W ? xs + g->k : g->W;
}

/* Runs the forward of one pool: max (idx != NULL or not) or average. */
static amp_tensor *pool_forward(node *n, bool is_max)
{
    pool_geom g;
    if (!pool_geom_make(n, &g))
        return NULL;
    const amp_tensor *xt = n->in[0];
    amp_shape os = pool_out_shape(xt, &g);
    amp_tensor *y = tensor_new(os, xt->dtype);
    amp_tensor *idx_t = is_max && n->needs_grad ? tensor_new(os, AMP_I32) : NULL;
    float *tx;
    const float *x = tensor_as_f32(xt, &tx);
    float *yf = y ? f32_target(y) : NULL;
    if (!y || !x || !yf || (is_max && n->needs_grad && !idx_t)) {
        if (y && yf && yf != tensor_f32(y))
            amp_free(yf);
        amp_free(tx);
        amp_tensor_free(y);
        amp_tensor_free(idx_t);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    int32_t *idx = idx_t ? (int32_t *)tensor_ptr(idx_t) : NULL;
    const float inv_area = 1.0f / (float)(g.k * g.k);
    const int64_t per_plane = g.Ho * g.Wo;
#pragma omp parallel for num_threads(amp_threads()) if (g.planes * per_plane * g.k * g.k > 32768)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.H * g.W;
        for (int64_t oy = 0; oy < g.Ho; oy++)
            for (int64_t ox = 0; ox < g.Wo; ox++) {
                int64_t y0, y1, x0, x1, o = pl * per_plane + oy * g.Wo + ox;
                pool_window(&g, oy, ox, &y0, &y1, &x0, &x1);
                if (is_max) {
                    float best = -INFINITY;
                    int64_t arg = y0 * g.W + x0;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++) {
                            float v = xp[iy * g.W + ix];
                            if (v > best || isnan(v)) { /* PyTorch's test: NaN propagates */
                                best = v;
                                arg = iy * g.W + ix;
                            }
                        }
                    yf[o] = best;
                    if (idx)
                        idx[o] = (int32_t)arg;
                } else {
                    float sum = 0.0f;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++)
                            sum += xp[iy * g.W + ix];
                    yf[o] = sum * inv_area;
                }
            }
    }
    amp_free(tx);
    f32_commit(y, yf);
    if (idx_t)
        n->saved[0] = idx_t;
    return y;
}

/* Backward of either pool: each output's gradient goes to its argmax
 * (max) or spreads over its window's image positions (avg). */
static amp_status pool_backward(node *n, const amp_tensor *gout, amp_tensor **gin, bool is_max)
{
    pool_geom g;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!pool_geom_make(n, &g))
        return amp_last_status();
    if (is_max && !n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved indices", op_name(n));
    gin[0] = tensor_new(n->in[0]->shape, n->in[0]->dtype);
    float *tg;
    const float *gy = tensor_as_f32(gout, &tg);
    float *dx = gin[0] ? f32_target(gin[0]) : NULL;
    if (!gin[0] || !gy || !dx) {
        amp_free(tg);
        if (gin[0] && dx && dx != tensor_f32(gin[0]))
            amp_free(dx);
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory in backward", op_name(n));
    }
    memset(dx, 0, (size_t)gin[0]->numel * sizeof(float));
    const int32_t *idx = is_max ? (const int32_t *)tensor_ptr(n->saved[0]) : NULL;
    const float inv_area = 1.0f / (float)(g.k * g.k);
    const int64_t per_plane = g.Ho * g.Wo;
    /* Planes are disjoint, so threads never write the same element. */
#pragma omp parallel for num_threads(amp_threads()) if (g.planes * per_plane * g.k * g.k > 32768)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        float *dp = dx + pl * g.H * g.W;
        const float *gp = gy + pl * per_plane;
        for (int64_t o = 0; o < per_plane; o++) {
            if (is_max) {
                dp[idx[pl * per_plane + o]] += gp[o];
                continue;
            }
            int64_t y0, y1, x0, x1;
            pool_window(&g, o / g.Wo, o % g.Wo, &y0, &y1, &x0, &x1);
            float v = gp[o] * inv_area;
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++)
                    dp[iy * g.W + ix] += v;
        }
    }
    amp_free(tg);
    f32_commit(gin[0], dx);
    return AMP_OK;
}

amp_tensor *max_pool2d_forward(node *n) { return pool_forward(n, true); }
amp_tensor *avg_pool2d_forward(node *n) { return pool_forward(n, false); }

amp_status max_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return pool_backward(n, gout, gin, true);
}

amp_status avg_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return pool_backward(n, gout, gin, false);
}
