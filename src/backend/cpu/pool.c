/*
 * pool.c (CPU backend) - the max_pool2d and avg_pool2d primitives, forward
 * and backward (the ops themselves: src/ops/pool.c, which says what they
 * compute).
 *
 * Planes are independent, so threads take whole planes (amp_parallel_for). A 16-bit plane is
 * widened into a per-thread f32 buffer, pooled, and its result rounded
 * once; f32 planes are read and written in place. The 2x2 stride-2
 * window without padding (every CNN's pool) has its own loop; on bf16
 * and f16 with AVX-512BW its max pool reads the plane where it lies
 * (simd.h: only the result goes through f32) and its backward writes dx
 * straight from the gradient and the argmax, the bits of the widened
 * path.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"
#include "base/base.h"
#include "base/parallel.h"

#include <math.h>
#include <string.h>

/* The geometry as this file's kernels read it. */
typedef struct {
    int64_t planes, H, W, k, s, p, Ho, Wo;
} pool_geom;

static pool_geom geom_of(const be_pool_geom *b)
{
    return (pool_geom){b->planes, b->H, b->W, b->k, b->stride, b->pad, b->Ho, b->Wo};
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

/* Planes per grain of the parallel loop: all of them (one thread) when the
 * whole pool is small, else about 16K window reads a grain. */
static int64_t plane_grain(const pool_geom *g)
{
    int64_t per = g->Ho * g->Wo * g->k * g->k;
    if (g->planes * per <= 32768)
        return g->planes;
    int64_t grain = 16384 / (per > 0 ? per : 1);
    return grain < 1 ? 1 : grain;
}

typedef struct {
    const pool_geom *g;
    bool is_max;
    const char *x, *gy;
    char *y, *dx;
    amp_dtype dt, gdt;
    int32_t *idx;
    const int32_t *cidx;
    float *bufs; /* per tid: `slot` floats (the widened plane, then its pooled result) */
    int64_t slot;
    simd_max2x2_half_fn max_half;       /* a 16-bit 2x2 max pool's forward, when the CPU has it */
    simd_unpool2x2_half_fn unpool_half; /* and its backward */
} pool_job;

static void pool_planes(void *vj, int64_t lo, int64_t hi, int tid)
{
    const pool_job *j = vj;
    const pool_geom *g = j->g;
    const size_t es = amp_dtype_size(j->dt);
    const int64_t hw = g->H * g->W, per_plane = g->Ho * g->Wo;
    for (int64_t pl = lo; pl < hi; pl++) {
        int32_t *ip = j->idx ? j->idx + pl * per_plane : NULL;
        if (j->dt == AMP_F32) {
            pool_plane(g, j->is_max, (const float *)j->x + pl * hw, (float *)j->y + pl * per_plane, ip);
            continue;
        }
        /* the thread's slot: the widened plane (not with max_half), then the result */
        float *xb = j->bufs + (size_t)tid * (size_t)j->slot, *yb = xb + (j->slot - per_plane);
        if (j->max_half) { /* the windows read where they lie */
            const uint16_t *xp = (const uint16_t *)j->x + pl * hw;
            for (int64_t oy = 0; oy < g->Ho; oy++)
                j->max_half(xp + 2 * oy * g->W, xp + (2 * oy + 1) * g->W, g->Wo, (int32_t)(2 * oy * g->W),
                            (int32_t)g->W, yb + oy * g->Wo, ip ? ip + oy * g->Wo : NULL);
        } else {
            amp_convert(j->x + (size_t)(pl * hw) * es, j->dt, xb, AMP_F32, (size_t)hw);
            pool_plane(g, j->is_max, xb, yb, ip);
        }
        amp_convert(yb, AMP_F32, j->y + (size_t)(pl * per_plane) * es, j->dt, (size_t)per_plane);
    }
}

amp_status cpu_pool2d(const be_pool_geom *bg, bool is_max, const void *x, amp_dtype dt, void *y, int32_t *idx)
{
    const pool_geom g = geom_of(bg);
    const int64_t grain = plane_grain(&g);
    const int nt = amp_parallel_width(g.planes, grain);
    const int64_t hw = g.H * g.W, per_plane = g.Ho * g.Wo;
    pool_job j = {.g = &g, .is_max = is_max, .x = x, .y = y, .dt = dt, .idx = idx};
    if (is_max && is_2x2(&g))
        j.max_half = simd_pick_max2x2_half(dt);
    /* Per thread, for 16-bit planes: the widened plane (not with
     * max_half) and the pooled result. */
    j.slot = (j.max_half ? 0 : hw) + per_plane;
    float *bufs = dt == AMP_F32 ? NULL : amp_alloc((size_t)nt * (size_t)j.slot * sizeof(float));
    if (dt != AMP_F32 && !bufs)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", is_max ? "max_pool2d" : "avg_pool2d");
    j.bufs = bufs;
    amp_parallel_for(g.planes, grain, pool_planes, &j);
    amp_free(bufs);
    return AMP_OK;
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

/* A 16-bit plane's 2x2 max-pool backward without the f32 plane: each row
 * pair of windows straight into dx; the row and column no window covers
 * (odd H or W) get +0. */
static void unpool_plane_half(const pool_job *j, int64_t pl)
{
    const pool_geom *g = j->g;
    const int64_t hw = g->H * g->W, per_plane = g->Ho * g->Wo;
    const uint16_t *gp = (const uint16_t *)j->gy + pl * per_plane;
    const int32_t *ip = j->cidx + pl * per_plane;
    uint16_t *dp = (uint16_t *)j->dx + pl * hw;
    for (int64_t oy = 0; oy < g->Ho; oy++) {
        uint16_t *d0 = dp + 2 * oy * g->W, *d1 = d0 + g->W;
        j->unpool_half(gp + oy * g->Wo, ip + oy * g->Wo, g->Wo, (int32_t)(2 * oy * g->W), (int32_t)g->W, d0, d1);
        if (g->W & 1)
            d0[g->W - 1] = d1[g->W - 1] = 0;
    }
    if (g->H & 1)
        memset(dp + (g->H - 1) * g->W, 0, (size_t)g->W * sizeof(uint16_t));
}

static void unpool_planes(void *vj, int64_t lo, int64_t hi, int tid)
{
    const pool_job *j = vj;
    const pool_geom *g = j->g;
    const size_t es = amp_dtype_size(j->dt), ges = amp_dtype_size(j->gdt);
    const int64_t hw = g->H * g->W, per_plane = g->Ho * g->Wo;
    for (int64_t pl = lo; pl < hi; pl++) {
        if (j->unpool_half) {
            unpool_plane_half(j, pl);
            continue;
        }
        float *mine = j->bufs ? j->bufs + (size_t)tid * (size_t)j->slot : NULL;
        float *dp = j->dt == AMP_F32 ? (float *)j->dx + pl * hw : mine;
        const float *gp = (const float *)j->gy + pl * per_plane;
        if (j->gdt != AMP_F32) {
            amp_convert(j->gy + (size_t)(pl * per_plane) * ges, j->gdt, mine + hw, AMP_F32, (size_t)per_plane);
            gp = mine + hw;
        }
        memset(dp, 0, (size_t)hw * sizeof(float));
        unpool_plane(g, gp, j->cidx ? j->cidx + pl * per_plane : NULL, dp);
        if (j->dt != AMP_F32)
            amp_convert(dp, AMP_F32, j->dx + (size_t)(pl * hw) * es, j->dt, (size_t)hw);
    }
}

amp_status cpu_pool2d_backward(const be_pool_geom *bg, const void *gyv, amp_dtype gdt, const int32_t *idx, void *dxv,
                               amp_dtype dt)
{
    const pool_geom g = geom_of(bg);
    const int64_t grain = plane_grain(&g);
    const int nt = amp_parallel_width(g.planes, grain);
    const int64_t hw = g.H * g.W, per_plane = g.Ho * g.Wo;
    pool_job j = {.g = &g, .gy = gyv, .dx = dxv, .dt = dt, .gdt = gdt, .cidx = idx};
    if (idx && is_2x2(&g) && gdt == dt)
        j.unpool_half = simd_pick_unpool2x2_half(dt);
    /* Per thread, for 16-bit tensors (not with unpool_half, which writes
     * dx straight): the plane's gradient and dY. */
    bool narrow = !j.unpool_half && (dt != AMP_F32 || gdt != AMP_F32);
    j.slot = hw + per_plane;
    float *bufs = narrow ? amp_alloc((size_t)nt * (size_t)j.slot * sizeof(float)) : NULL;
    if (narrow && !bufs)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory in backward", idx ? "max_pool2d" : "avg_pool2d");
    j.bufs = bufs;
    amp_parallel_for(g.planes, grain, unpool_planes, &j);
    amp_free(bufs);
    return AMP_OK;
}
