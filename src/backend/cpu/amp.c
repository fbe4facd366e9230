/*
 * amp.c - the CPU backend's AMP primitives (backend.h, section amp): the
 * grad scaler's unscale + inf/NaN check, its update rule and step count,
 * the count of non-finite elements, and clip_grad_norm's two halves
 * (grad_sumsq, clip_by_sumsq), on host memory.
 *
 * These are the loops src/amp/scaler.c, src/amp/nonfinite.c and
 * src/optim/clip.c ran themselves before the backend interface, moved
 * unchanged: the same arithmetic in the same order, so the scale, the
 * counters, the clip totals and the gradients are bit for bit what they
 * were. The CUDA backend's kernels (cuda/amp.cu) follow the same formulas.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/scaler_rule.h"
#include "base/base.h"
#include "base/parallel.h"
#include "dtype/dtype.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ unscale */

/* g *= inv (skipped when inv is exactly 1), returning whether any input
 * element was inf or NaN. The check reads the exponent bits, an integer OR
 * that the compiler vectorises. */
static bool unscale_f32(float *g, size_t n, float inv)
{
    uint32_t bad = 0;
    if (inv == 1.0f) {
        for (size_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &g[i], 4);
            bad |= (uint32_t)((b & 0x7F800000u) == 0x7F800000u);
        }
        return bad != 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &g[i], 4);
        bad |= (uint32_t)((b & 0x7F800000u) == 0x7F800000u);
        g[i] *= inv;
    }
    return bad != 0;
}

static bool unscale_bf16(uint16_t *g, size_t n, float inv)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= (uint32_t)((g[i] & 0x7F80u) == 0x7F80u);
        if (inv != 1.0f)
            g[i] = amp_f32_to_bf16(amp_bf16_to_f32(g[i]) * inv);
    }
    return bad != 0;
}

amp_status cpu_unscale(const be_buf *g, int n, const float *scale, float *found_inf)
{
    for (int i = 0; i < n; i++)
        if (g[i].n > 0 && g[i].dt != AMP_F32 && g[i].dt != AMP_BF16)
            return amp_set_error(AMP_ERR_DTYPE, "unscale: gradient %d has dtype %s (f32 or bf16 only)", i,
                                 amp_dtype_name(g[i].dt));
    /* FP32 division can be imprecise; PyTorch takes the reciprocal in FP64. */
    const float inv = (float)(1.0 / (double)*scale);
    bool found = false;
    /* One pass per dtype group (f32, then bf16), as the fused kernel runs. */
    for (int pass = 0; pass < 2; pass++) {
        amp_dtype want = pass == 0 ? AMP_F32 : AMP_BF16;
        for (int i = 0; i < n; i++) {
            if (g[i].dt != want || g[i].n <= 0)
                continue;
            if (want == AMP_F32)
                found |= unscale_f32(g[i].p, (size_t)g[i].n, inv);
            else
                found |= unscale_bf16(g[i].p, (size_t)g[i].n, inv);
        }
    }
    if (found)
        *found_inf = 1.0f;
    return AMP_OK;
}

/* -------------------------------------------------- non-finite count */

/* An element is inf or NaN when its exponent bits are all ones: a test
 * on the bits, per dtype, which the compiler vectorizes (the anomaly check
 * runs it on every op's result). Counted in chunks of NF_CHUNK elements on
 * the thread pool, at most NF_CHUNKS of them (each its own count, summed
 * after: no shared counter). */
#define NF_CHUNK (1 << 16)
#define NF_CHUNKS 256

typedef struct {
    const void *x;
    amp_dtype dt;
    int64_t n, per; /* elements, per chunk */
    int64_t *counts;
} nonfinite_job;

static int64_t nonfinite_span(const void *x, amp_dtype dt, int64_t lo, int64_t hi)
{
    int64_t bad = 0;
    if (dt == AMP_F32) {
        const uint32_t *u = x;
        for (int64_t i = lo; i < hi; i++)
            bad += (u[i] & 0x7f800000u) == 0x7f800000u;
    } else if (dt == AMP_F16 || dt == AMP_BF16) {
        const uint16_t *u = x, m = dt == AMP_F16 ? 0x7c00 : 0x7f80;
        for (int64_t i = lo; i < hi; i++)
            bad += (u[i] & m) == m;
    }
    return bad; /* integers are always finite */
}

static void nonfinite_chunks(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    nonfinite_job *j = ctx;
    for (int64_t c = lo; c < hi; c++) {
        int64_t e0 = c * j->per, e1 = e0 + j->per < j->n ? e0 + j->per : j->n;
        j->counts[c] = nonfinite_span(j->x, j->dt, e0, e1);
    }
}

amp_status cpu_count_nonfinite(const void *x, amp_dtype dt, int64_t n, int64_t *count)
{
    int64_t per = NF_CHUNK;
    if ((n + per - 1) / per > NF_CHUNKS)
        per = (n + NF_CHUNKS - 1) / NF_CHUNKS;
    const int64_t chunks = (n + per - 1) / per;
    int64_t counts[NF_CHUNKS];
    nonfinite_job j = {x, dt, n, per, counts};
    amp_parallel_for(chunks, 1, nonfinite_chunks, &j);
    int64_t bad = 0;
    for (int64_t c = 0; c < chunks; c++)
        bad += counts[c];
    *count = bad;
    return AMP_OK;
}

/* ---------------------------------------------------- scaler update */

amp_status cpu_scaler_update(float *scale, be_scaler_state *st, uint64_t records, be_scaler_opts o)
{
    be_scaler_update_rule(scale, st, records, o);
    return AMP_OK;
}

amp_status cpu_scaler_count(be_scaler_state *st, int rec)
{
    if (rec < 0 || rec >= BE_SCALER_MAX_RECORDS)
        return amp_set_error(AMP_ERR_ARG, "scaler count: record %d out of range", rec);
    if (st->found_inf[rec] != 0.0f)
        st->skipped++;
    else
        st->steps++;
    return AMP_OK;
}

/* ----------------------------------------------------- clip_grad_norm */

/* 16-bit gradients are widened a block at a time into the stack, never as
 * a whole f32 copy: a 16M-element bf16 gradient would otherwise take 64 MiB
 * of scratch, more than the memory 16-bit parameters save. */
#define CLIP_BLOCK 2048

/* The squares are summed in groups of whole CLIP_BLOCKs, a group in order,
 * then the groups' sums in order: a fixed split, so the norm is the same
 * bits on any number of threads. At most SQ_GROUPS groups (their sums sit
 * on the stack); a gradient of one group sums exactly in element order. */
#define SQ_GROUPS 256
#define SQ_GROUP_MIN_BLOCKS 16 /* 32K elements: smaller runs on one thread */

typedef struct {
    const be_buf *g;
    int64_t group_blocks;
    double *sums;
} squares_job;

static void sum_square_groups(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const squares_job *q = vj;
    const be_buf *g = q->g;
    const size_t es = amp_dtype_size(g->dt);
    for (int64_t grp = lo; grp < hi; grp++) {
        const int64_t e0 = grp * q->group_blocks * CLIP_BLOCK;
        const int64_t e1 = g->n - e0 < q->group_blocks * CLIP_BLOCK ? g->n : e0 + q->group_blocks * CLIP_BLOCK;
        double s = 0;
        if (g->dt == AMP_F32) {
            const float *v = g->p;
            for (int64_t j = e0; j < e1; j++)
                s += (double)v[j] * v[j];
        } else {
            for (int64_t j0 = e0; j0 < e1; j0 += CLIP_BLOCK) {
                float v[CLIP_BLOCK];
                const int64_t n = e1 - j0 < CLIP_BLOCK ? e1 - j0 : CLIP_BLOCK;
                amp_convert((const char *)g->p + (size_t)j0 * es, g->dt, v, AMP_F32, (size_t)n);
                for (int64_t j = 0; j < n; j++)
                    s += (double)v[j] * v[j];
            }
        }
        q->sums[grp] = s;
    }
}

/* Adds the sum of g's squared elements to *acc (in double). */
static void sum_squares(const be_buf *g, double *acc)
{
    const int64_t blocks = (g->n + CLIP_BLOCK - 1) / CLIP_BLOCK;
    int64_t gb = (blocks + SQ_GROUPS - 1) / SQ_GROUPS;
    if (gb < SQ_GROUP_MIN_BLOCKS)
        gb = SQ_GROUP_MIN_BLOCKS;
    const int64_t groups = (blocks + gb - 1) / gb;
    double sums[SQ_GROUPS];
    squares_job q = {g, gb, sums};
    amp_parallel_for(groups, 1, sum_square_groups, &q);
    double s = 0;
    for (int64_t i = 0; i < groups; i++)
        s += sums[i];
    *acc += s;
}

/* g *= coef in g's dtype (computing in f32, rounding once). */
static void scale_by(const be_buf *g, float coef)
{
    if (g->dt == AMP_F32) {
        float *v = g->p;
        for (int64_t j = 0; j < g->n; j++)
            v[j] *= coef;
        return;
    }
    const size_t es = amp_dtype_size(g->dt);
    for (int64_t j0 = 0; j0 < g->n; j0 += CLIP_BLOCK) {
        float v[CLIP_BLOCK];
        const int64_t n = g->n - j0 < CLIP_BLOCK ? g->n - j0 : CLIP_BLOCK;
        char *p = (char *)g->p + (size_t)j0 * es;
        amp_convert(p, g->dt, v, AMP_F32, (size_t)n);
        for (int64_t j = 0; j < n; j++)
            v[j] *= coef;
        amp_convert(v, AMP_F32, p, g->dt, (size_t)n);
    }
}

static amp_status check_dtypes(const be_buf *g, int n)
{
    for (int i = 0; i < n; i++)
        if (g[i].n > 0 && g[i].dt != AMP_F32 && g[i].dt != AMP_F16 && g[i].dt != AMP_BF16)
            return amp_set_error(AMP_ERR_DTYPE, "gradient %d has dtype %s (f32, f16 or bf16 only)", i,
                                 amp_dtype_name(g[i].dt));
    return AMP_OK;
}

amp_status cpu_grad_sumsq(const be_buf *g, int n, double *sumsq)
{
    amp_status st = check_dtypes(g, n);
    if (st != AMP_OK)
        return st;
    double ss = 0;
    for (int i = 0; i < n; i++)
        sum_squares(&g[i], &ss);
    *sumsq = ss;
    return AMP_OK;
}

/* The parts are summed in index order (over ZeRO's ranks: rank order). */
amp_status cpu_clip_by_sumsq(const be_buf *g, int n, const double *parts, int k, double max_norm, double *total,
                             float *total_f32)
{
    amp_status st = check_dtypes(g, n);
    if (st != AMP_OK)
        return st;
    double ss = 0;
    for (int r = 0; r < k; r++)
        ss += parts[r];
    const double t = sqrt(ss), coef = max_norm / (t + 1e-6);
    if (!(coef >= 1.0)) /* clamp(max=1): a factor of 1 changes nothing */
        for (int i = 0; i < n; i++)
            scale_by(&g[i], (float)coef);
    if (total)
        *total = t;
    if (total_f32)
        *total_f32 = (float)t;
    return AMP_OK;
}
