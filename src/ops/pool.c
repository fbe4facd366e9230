/*
 * pool.c - max_pool2d and avg_pool2d, forward and backward.
 *
 * Pooling follows PyTorch (ceil_mode=False): Ho = (H + 2p - k) / s + 1.
 * Padding never wins a max; avg_pool2d divides by k*k, padding included
 * (count_include_pad=True). max_pool2d saves the argmax of each window
 * (an i32 tensor of offsets within the H x W plane) for backward; the
 * first maximum wins ties and a NaN wins over numbers, as in PyTorch.
 *
 * Planes are independent, so threads take whole planes. A 16-bit plane is
 * widened into a per-thread f32 buffer, pooled, and its result rounded
 * once; f32 planes are read and written in place. The 2x2 stride-2
 * window without padding (every CNN's pool) has its own loop.
 */
#include "ops/infer.h"
#include "ops/simd.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Pools a [.., H, W] tensor (3-D or 4-D) plane by plane (the geometry:
 * src/ops/infer.c, shared with the CUDA forward). */
typedef pool_shape pool_geom;

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

static bool is_2x2(const pool_geom *g) { return g->k == 2 && g->s == 2 && g->p == 0; }

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One update of a running max: NaN wins (PyTorch's test), ties keep the
 * first. Written with masks rather than a branch (which compilers keep
 * for a ?: on floats): on real data which element wins is a coin toss
 * that the branch predictor loses. */
#define MAX_STEP(v, at)                                                          \
    do {                                                                         \
        float v_ = (v);                                                          \
        uint32_t m_ = 0u - (uint32_t)((v_ > best) | (v_ != v_));                 \
        best = bits_f32((f32_bits(v_) & m_) | (f32_bits(best) & ~m_));           \
        arg = (int32_t)(((uint32_t)(at) & m_) | ((uint32_t)arg & ~m_));          \
    } while (0)

/* Pools one f32 plane xp into yp (and idx, when not NULL). */
static void pool_plane(const pool_geom *g, bool is_max, const float *xp, float *yp, int32_t *idx)
{
    const float inv_area = 1.0f / (float)(g->k * g->k);
    simd_max2x2_fn vmax = is_max && is_2x2(g) ? simd_pick_max2x2() : NULL;
    if (vmax) {
        for (int64_t oy = 0; oy < g->Ho; oy++)
            vmax(xp + 2 * oy * g->W, xp + (2 * oy + 1) * g->W, g->Wo, (int32_t)(2 * oy * g->W), (int32_t)g->W,
                 yp + oy * g->Wo, idx ? idx + oy * g->Wo : NULL);
        return;
    }
    if (is_2x2(g)) {
        for (int64_t oy = 0; oy < g->Ho; oy++) {
            const float *r0 = xp + 2 * oy * g->W, *r1 = r0 + g->W;
            float *yr = yp + oy * g->Wo;
            for (int64_t ox = 0; ox < g->Wo; ox++) {
                const int64_t c = 2 * ox;
                if (is_max) {
                    /* Against the starting -inf the first element always
                     * wins (or ties with -inf, keeping its index). */
                    float best = r0[c];
                    int32_t arg = (int32_t)(2 * oy * g->W + c);
                    MAX_STEP(r0[c + 1], 2 * oy * g->W + c + 1);
                    MAX_STEP(r1[c], (2 * oy + 1) * g->W + c);
                    MAX_STEP(r1[c + 1], (2 * oy + 1) * g->W + c + 1);
                    yr[ox] = best;
                    if (idx)
                        idx[oy * g->Wo + ox] = arg;
                } else {
                    yr[ox] = (((0.0f + r0[c]) + r0[c + 1]) + r1[c] + r1[c + 1]) * inv_area; /* the generic loop's order */
                }
            }
        }
        return;
    }
    for (int64_t oy = 0; oy < g->Ho; oy++)
        for (int64_t ox = 0; ox < g->Wo; ox++) {
            int64_t y0, y1, x0, x1, o = oy * g->Wo + ox;
            pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
            if (is_max) {
                float best = -INFINITY;
                int32_t arg = (int32_t)(y0 * g->W + x0);
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        MAX_STEP(xp[iy * g->W + ix], iy * g->W + ix);
                yp[o] = best;
                if (idx)
                    idx[o] = arg;
            } else {
                float sum = 0.0f;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        sum += xp[iy * g->W + ix];
                yp[o] = sum * inv_area;
            }
        }
}

/* Threads for the planes: one when the whole pool is small. */
static int plane_threads(const pool_geom *g)
{
    int64_t work = g->planes * g->Ho * g->Wo * g->k * g->k;
    int nt = amp_threads();
    return work > 32768 && g->planes > 1 ? (g->planes < nt ? (int)g->planes : nt) : 1;
}

/* Runs the forward of one pool: max (saving the argmax when a gradient
 * is needed) or average. */
static amp_tensor *pool_forward(node *n, bool is_max)
{
    pool_geom g;
    if (!pool_infer(n, &g))
        return NULL;
    const amp_tensor *xt = n->in[0];
    const amp_dtype dt = xt->dtype;
    const size_t es = amp_dtype_size(dt);
    amp_shape os = pool_out_shape(xt, &g);
    amp_tensor *y = tensor_new(os, dt);
    amp_tensor *idx_t = is_max && n->needs_grad ? tensor_new(os, AMP_I32) : NULL;
    const int nt = plane_threads(&g);
    const int64_t hw = g.H * g.W, per_plane = g.Ho * g.Wo;
    /* Per thread, for 16-bit planes: the widened plane and its result. */
    float *bufs = dt == AMP_F32 ? NULL : amp_alloc((size_t)nt * (size_t)(hw + per_plane) * sizeof(float));
    if (!y || (is_max && n->needs_grad && !idx_t) || (dt != AMP_F32 && !bufs)) {
        amp_free(bufs);
        amp_tensor_free(y);
        amp_tensor_free(idx_t);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    int32_t *idx = idx_t ? (int32_t *)tensor_ptr(idx_t) : NULL;
    const char *x = tensor_ptr(xt);
    char *yp = tensor_ptr(y);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        int32_t *ip = idx ? idx + pl * per_plane : NULL;
        if (dt == AMP_F32) {
            pool_plane(&g, is_max, (const float *)x + pl * hw, (float *)yp + pl * per_plane, ip);
            continue;
        }
        float *xb = bufs + (size_t)amp_thread_num() * (size_t)(hw + per_plane), *yb = xb + hw;
        amp_convert(x + (size_t)(pl * hw) * es, dt, xb, AMP_F32, (size_t)hw);
        pool_plane(&g, is_max, xb, yb, ip);
        amp_convert(yb, AMP_F32, yp + (size_t)(pl * per_plane) * es, dt, (size_t)per_plane);
    }
    amp_free(bufs);
    if (idx_t)
        n->saved[0] = idx_t;
    return y;
}

/* dp (f32, zeroed) += the plane's output gradient gp spread back: to each
 * window's argmax (max) or over its image positions (avg). */
static void unpool_plane(const pool_geom *g, const float *gp, const int32_t *idx, float *dp)
{
    const int64_t per_plane = g->Ho * g->Wo;
    if (idx) {
        for (int64_t o = 0; o < per_plane; o++)
            dp[idx[o]] += gp[o];
        return;
    }
    const float inv_area = 1.0f / (float)(g->k * g->k);
    for (int64_t o = 0; o < per_plane; o++) {
        int64_t y0, y1, x0, x1;
        pool_window(g, o / g->Wo, o % g->Wo, &y0, &y1, &x0, &x1);
        float v = gp[o] * inv_area;
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++)
                dp[iy * g->W + ix] += v;
    }
}

/* Backward of either pool. */
static amp_status pool_backward(node *n, const amp_tensor *gout, amp_tensor **gin, bool is_max)
{
    pool_geom g;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!pool_infer(n, &g))
        return amp_last_status();
    if (is_max && !n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved indices", op_name(n));
    const amp_dtype dt = n->in[0]->dtype, gdt = gout->dtype;
    const size_t es = amp_dtype_size(dt), ges = amp_dtype_size(gdt);
    const int nt = plane_threads(&g);
    const int64_t hw = g.H * g.W, per_plane = g.Ho * g.Wo;
    gin[0] = tensor_new(n->in[0]->shape, dt);
    /* Per thread, for 16-bit tensors: the plane's gradient and dY. */
    bool narrow = dt != AMP_F32 || gdt != AMP_F32;
    float *bufs = narrow ? amp_alloc((size_t)nt * (size_t)(hw + per_plane) * sizeof(float)) : NULL;
    if (!gin[0] || (narrow && !bufs)) {
        amp_free(bufs);
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory in backward", op_name(n));
    }
    const int32_t *idx = is_max ? (const int32_t *)tensor_ptr(n->saved[0]) : NULL;
    const char *gy = tensor_ptr(gout);
    char *dx = tensor_ptr(gin[0]);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        float *mine = narrow ? bufs + (size_t)amp_thread_num() * (size_t)(hw + per_plane) : NULL;
        float *dp = dt == AMP_F32 ? (float *)dx + pl * hw : mine;
        const float *gp = (const float *)gy + pl * per_plane;
        if (gdt != AMP_F32) {
            amp_convert(gy + (size_t)(pl * per_plane) * ges, gdt, mine + hw, AMP_F32, (size_t)per_plane);
            gp = mine + hw;
        }
        memset(dp, 0, (size_t)hw * sizeof(float));
        unpool_plane(&g, gp, idx ? idx + pl * per_plane : NULL, dp);
        if (dt != AMP_F32)
            amp_convert(dp, AMP_F32, dx + (size_t)(pl * hw) * es, dt, (size_t)hw);
    }
    amp_free(bufs);
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
