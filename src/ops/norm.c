/*
 * norm.c - layer_norm, forward and backward.
 *
 * x is seen as M rows of N elements (N = the product of the last k dims).
 * Each row is normalised with its mean and biased variance (as PyTorch),
 * then scaled by weight and shifted by bias, both shaped as the last k
 * dims. 16-bit inputs are widened to f32 and the result rounded once; the
 * row statistics are summed in double so long rows lose nothing.
 *
 * Saved for backward (only when a gradient is needed): the mean and rstd
 * = 1/sqrt(var + eps) of each row, f32 [M], in n->saved[0] and [1]; x and
 * weight are the node's inputs already.
 *
 * Params (api.c): i[0] = k, i[1] = has weight, i[2] = has bias, f[0] = eps.
 * Inputs: x, then weight if given, then bias if given. weight and bias may
 * have a dtype other than x's (PyTorch's CPU mixed-dtype layer_norm); the
 * output takes x's dtype and each gradient its input's.
 */
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN_WORK 32768

/* Row sums in double, over 8 independent lanes: one serial chain of
 * double adds would cost an add latency per element (the compiler may not
 * reorder FP adds), lanes let it pipeline and vectorise. */
enum { LANES = 8 };

static double row_sum(const float *x, int64_t n)
{
    double acc[LANES] = {0}, s = 0;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += x[j + l];
    for (; j < n; j++)
        s += x[j];
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

/* sum_j (x[j] - m)^2, the second pass of the two-pass variance. */
static double row_sqdev(const float *x, int64_t n, float m)
{
    double acc[LANES] = {0}, s = 0;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[j + l] - m;
            acc[l] += (double)(d * d);
        }
    for (; j < n; j++) {
        float d = x[j] - m;
        s += (double)(d * d);
    }
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

typedef struct {
    const amp_tensor *x, *w, *b;
    int64_t rows, cols;
} ln_args;

/* Validates the inputs and fills a; false with the error set. */
static bool ln_check(node *n, ln_args *a)
{
    const amp_tensor *x = n->in[0];
    int k = (int)n->p.i[0];
    int hw = n->p.i[1] != 0, hb = n->p.i[2] != 0;
    if (n->n_in != 1 + hw + hb)
        return op_fail_shapes(n, "inputs do not match the weight/bias flags"), false;
    for (int i = 0; i < n->n_in; i++)
        if (!op_require_float(n, i))
            return false;
    if (k < 1 || k > x->shape.ndim) {
        char why[96];
        snprintf(why, sizeof why, "normalized_ndim %d must be in [1, %d]", k, x->shape.ndim);
        return op_fail_shapes(n, why), false;
    }
    amp_shape ns = {k, {0}};
    for (int d = 0; d < k; d++)
        ns.d[d] = x->shape.d[x->shape.ndim - k + d];
    a->x = x;
    a->w = hw ? n->in[1] : NULL;
    a->b = hb ? n->in[1 + hw] : NULL;
    for (int i = 1; i < n->n_in; i++) {
        if (!shape_equal(n->in[i]->shape, ns)) {
            char why[160], b[96];
            snprintf(why, sizeof why, "%s must have the normalized shape %s",
                     i == 1 && hw ? "weight" : "bias", amp_shape_str(ns, b, sizeof b));
            return op_fail_shapes(n, why), false;
        }
    }
    a->cols = shape_numel(ns);
    a->rows = a->cols ? x->numel / a->cols : 0;
    return true;
}

amp_tensor *layer_norm_forward(node *n)
{
    ln_args a;
    if (!ln_check(n, &a))
        return NULL;
    const int64_t M = a.rows, N = a.cols;
    amp_tensor *out = tensor_new(a.x->shape, a.x->dtype);
    amp_tensor *mean = tensor_new(AMP_SHAPE(M), AMP_F32), *rstd = tensor_new(AMP_SHAPE(M), AMP_F32);
    float *tx = NULL, *tw = NULL, *tb = NULL, *ty = NULL;
    const float *x = out ? tensor_as_f32(a.x, &tx) : NULL;
    const float *w = a.w ? tensor_as_f32(a.w, &tw) : NULL, *b = a.b ? tensor_as_f32(a.b, &tb) : NULL;
    float *y = !out                     ? NULL
               : out->dtype == AMP_F32 ? tensor_f32(out)
                                       : (ty = amp_alloc((size_t)out->numel * sizeof(float)));
    if (!out || !mean || !rstd || !x || !y || (a.w && !w) || (a.b && !b)) {
        amp_tensor_free(out);
        out = amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
        goto done;
    }
    const double eps = n->p.f[0];
    float *mu = tensor_f32(mean), *rs = tensor_f32(rstd);
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (M * N > PAR_MIN_WORK && M > 1)
#endif
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * N;
        float *yr = y + r * N;
        const float m = (float)(row_sum(xr, N) / (double)N);
        /* Two passes: no cancellation when |mean| >> std. */
        const float is = (float)(1.0 / sqrt(row_sqdev(xr, N, m) / (double)N + eps));
        mu[r] = m;
        rs[r] = is;
        for (int64_t j = 0; j < N; j++) {
            float h = (xr[j] - m) * is;
            if (w)
                h *= w[j];
            if (b)
                h += b[j];
            yr[j] = h;
        }
    }
    if (ty)
        tensor_store_f32(out, ty);
    if (n->needs_grad) {
        n->saved[0] = mean;
        n->saved[1] = rstd;
        mean = rstd = NULL;
    }
done:
    amp_tensor_free(mean);
    amp_tensor_free(rstd);
    amp_free(tx);
    amp_free(tw);
    amp_free(tb);
    amp_free(ty);
    return out;
}

/* dweight[j] = sum_r g[r,j] * xhat[r,j] and dbias[j] = sum_r g[r,j], over
 * blocks of columns so that threads never share an accumulator and every
 * row is read in order. */
static void ln_param_grads(const float *g, const float *x, const float *mu, const float *rs, int64_t M,
                           int64_t N, float *dw, float *db)
{
    enum { BLOCK = 256 };
    const int64_t nblocks = (N + BLOCK - 1) / BLOCK;
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (M * N > PAR_MIN_WORK && nblocks > 1)
#endif
    for (int64_t blk = 0; blk < nblocks; blk++) {
        const int64_t j0 = blk * BLOCK, j1 = j0 + BLOCK < N ? j0 + BLOCK : N;
        double aw[BLOCK] = {0}, ab[BLOCK] = {0};
        for (int64_t r = 0; r < M; r++) {
            const float *gr = g + r * N + j0, *xr = x + r * N + j0;
            const float mr = mu[r], rr = rs[r];
            for (int64_t j = 0; j < j1 - j0; j++) {
                aw[j] += (double)(gr[j] * ((xr[j] - mr) * rr));
                ab[j] += gr[j];
            }
        }
        for (int64_t j = j0; j < j1; j++) {
            if (dw)
                dw[j] = (float)aw[j - j0];
            if (db)
                db[j] = (float)ab[j - j0];
        }
    }
}

/* dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * weight:
 * the derivative of the normalisation with the row statistics depending
 * on x. */
static void ln_input_grad(const float *g, const float *x, const float *w, const float *mu, const float *rs,
                          int64_t M, int64_t N, float *dx)
{
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (M * N > PAR_MIN_WORK && M > 1)
#endif
    for (int64_t r = 0; r < M; r++) {
        const float *gr = g + r * N, *xr = x + r * N;
        const float mr = mu[r], rr = rs[r];
        double a1[LANES] = {0}, a2[LANES] = {0}, s1 = 0, s2 = 0;
        int64_t j = 0;
        for (; j + LANES <= N; j += LANES)
            for (int l = 0; l < LANES; l++) {
                float gw = w ? gr[j + l] * w[j + l] : gr[j + l];
                a1[l] += gw;
                a2[l] += (double)(gw * ((xr[j + l] - mr) * rr));
            }
        for (; j < N; j++) {
            float gw = w ? gr[j] * w[j] : gr[j];
            s1 += gw;
            s2 += (double)(gw * ((xr[j] - mr) * rr));
        }
        for (int l = 0; l < LANES; l++) {
            s1 += a1[l];
            s2 += a2[l];
        }
        const float m1 = (float)(s1 / (double)N), m2 = (float)(s2 / (double)N);
        float *dr = dx + r * N;
        for (int64_t k = 0; k < N; k++) {
            float gw = w ? gr[k] * w[k] : gr[k];
            float xh = (xr[k] - mr) * rr;
            dr[k] = rr * (gw - m1 - xh * m2);
        }
    }
}

/* A gradient computed in f32: straight into its tensor when that is f32,
 * else into a buffer rounded into the tensor once at the end. */
typedef struct {
    amp_tensor *t;
    float *v;
} f32_out;

static bool out_open(f32_out *o, const amp_tensor *like)
{
    o->t = tensor_new(like->shape, like->dtype);
    const size_t n = (size_t)(like->numel ? like->numel : 1);
    o->v = !o->t ? NULL : like->dtype == AMP_F32 ? tensor_f32(o->t) : amp_alloc(n * sizeof(float));
    return o->v != NULL;
}

/* Finishes o: its tensor (or NULL, and o released, when !ok). */
static amp_tensor *out_close(f32_out *o, bool ok)
{
    bool tmp = o->t && o->t->dtype != AMP_F32;
    if (ok && tmp)
        tensor_store_f32(o->t, o->v);
    if (tmp)
        amp_free(o->v);
    if (!ok) {
        amp_tensor_free(o->t);
        o->t = NULL;
    }
    return o->t;
}

amp_status layer_norm_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const int hw = n->p.i[1] != 0, hb = n->p.i[2] != 0;
    const amp_tensor *xt = n->in[0], *wt = hw ? n->in[1] : NULL;
    const int iw = 1, ib = 1 + hw;
    const bool need_x = in_needs_grad(n, 0), need_w = hw && in_needs_grad(n, iw),
               need_b = hb && in_needs_grad(n, ib);
    if (!n->saved[0] || !n->saved[1])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved statistics", op_name(n));
    int64_t N = 1;
    for (int d = xt->shape.ndim - (int)n->p.i[0]; d < xt->shape.ndim; d++)
        N *= xt->shape.d[d];
    const int64_t M = n->saved[0]->numel;
    const float *mu = tensor_f32(n->saved[0]), *rs = tensor_f32(n->saved[1]);

    float *tg = NULL, *tx = NULL, *tw = NULL;
    const float *g = tensor_as_f32(gout, &tg), *x = tensor_as_f32(xt, &tx);
    const float *w = wt ? tensor_as_f32(wt, &tw) : NULL;
    f32_out dx = {0}, dw = {0}, db = {0};
    bool ok = g && x && (!wt || w) && (!need_x || out_open(&dx, xt)) &&
              (!need_w || out_open(&dw, n->in[iw])) && (!need_b || out_open(&db, n->in[ib]));
    if (ok && need_x)
        ln_input_grad(g, x, w, mu, rs, M, N, dx.v);
    if (ok && (need_w || need_b))
        ln_param_grads(g, x, mu, rs, M, N, dw.v, db.v);
    gin[0] = out_close(&dx, ok);
    if (hw)
        gin[iw] = out_close(&dw, ok);
    if (hb)
        gin[ib] = out_close(&db, ok);
    amp_free(tg);
    amp_free(tx);
    amp_free(tw);
    return ok ? AMP_OK : amp_set_error(AMP_ERR_MEMORY, "%s: backward out of memory", op_name(n));
}
