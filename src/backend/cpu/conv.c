/*
 * conv.c (CPU backend) - the conv2d primitives, forward and backward, as
 * im2col + one GEMM per group of images (the op itself: src/ops/conv.c).
 *
 * Images go to threads in groups; each thread lowers its group to one
 * column matrix cols [C*kh*kw, n*L] (L = Ho*Wo; image i owns columns
 * i*L .. i*L+L-1) and runs one single-threaded GEMM on it: W [O, C*kh*kw]
 * cols -> [O, n*L] in f32, then a permute into y [n, O, L] that adds the
 * bias and rounds once. A group is sized so that its scratch stays in the
 * core's L2 cache (conv.h): one GEMM over the whole batch would stream a
 * column matrix of tens of MB through memory twice, which costs more than
 * the GEMM saves on packing. Fewer groups than threads (a single image)
 * leave the threads to the GEMM instead.
 *
 * The columns keep bf16 as bf16, so bf16 convolutions run on the CPU's
 * bf16 dot products (gemm_lowp); f16 inputs are widened to f32 once, on
 * their way into the columns, rather than in every GEMM panel.
 *
 * Backward permutes each group's dY into dY' [O, n*L] and reuses the same
 * columns: dW += dY' cols^T (a per-thread f32 partial sum, the partials
 * added in thread order), dcols = W^T dY', and col2im adds dcols back onto
 * each image in f32 before one rounding; db sums dY' rows in double.
 * Stride 1 with Wo == W ("same" padding) lowers and raises a whole plane
 * per kernel tap with one shifted copy. Pooling lives in pool.c.
 *
 * oneDNN's convolutions (onednn_conv.c) get each pass first where it is
 * built in; this file's kernels run what it does not take.
 *
 * A relu can be fused (act BE_EPI_RELU): y = relu(conv + bias), applied
 * before the one rounding (relu commutes with it, so the bits equal conv2d
 * then amp_relu). Backward takes dY already through it (src/ops/conv.c).
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/onednn/onednn.h"
#include "base/base.h"
#include "base/parallel.h"

#include <stdatomic.h>
#include <string.h>

/* Per-thread scratch (columns, dY', f32 results) a group of images may
 * take: about what stays in a core's L2 cache. */
#define GROUP_BUDGET_DEFAULT ((size_t)1 << 20)
static size_t group_budget = GROUP_BUDGET_DEFAULT;

size_t conv_set_cols_budget(size_t bytes)
{
    size_t old = group_budget;
    group_budget = bytes ? bytes : GROUP_BUDGET_DEFAULT;
    return old;
}

/* The geometry as this file's kernels read it: be_conv_geom, the GEMM
 * sizes of the lowering (ckk = C*kh*kw, l = Ho*Wo) and the fused relu. */
typedef struct {
    int64_t N, C, H, W, O, kh, kw, s, p, Ho, Wo;
    int64_t ckk, l;
    bool bias, relu;
} conv_geom;

static conv_geom geom_of(const be_conv_geom *b, bool bias, bool relu)
{
    return (conv_geom){.N = b->N, .C = b->C, .H = b->H, .W = b->W, .O = b->O, .kh = b->kh, .kw = b->kw,
                       .s = b->stride, .p = b->pad, .Ho = b->Ho, .Wo = b->Wo, .ckk = b->C * b->kh * b->kw,
                       .l = b->Ho * b->Wo, .bias = bias, .relu = relu};
}

/* The layout of the work: images go to threads in groups of cnt, each
 * group one GEMM on its thread; fewer groups than threads (one image, say)
 * leave the threads to the GEMM instead. cdt is the GEMM's operand dtype:
 * bf16 stays bf16 (native dot products), f16 is widened to f32 once, on
 * its way into the columns, rather than in every GEMM panel. */
typedef struct {
    int64_t cnt, groups;
    int nt;
    amp_dtype dt, cdt;
    bool tr; /* f32 GEMMs run transposed (see plan_make) */
} conv_plan;

static conv_plan plan_make(const conv_geom *g, amp_dtype dt, bool backward)
{
    conv_plan p = {.dt = dt, .cdt = dt == AMP_BF16 ? AMP_BF16 : AMP_F32};
    size_t ces = amp_dtype_size(p.cdt);
    /* Bytes per image: the columns and the GEMM results (forward), or the
     * columns, their gradient and dY' (backward). */
    double per = backward ? (double)g->ckk * (double)g->l * (double)(ces + 4) + (double)(g->O * g->l) * (double)ces
                          : (double)g->ckk * (double)g->l * (double)ces + (double)(g->O * g->l) * 4.0;
    int64_t cnt = (int64_t)((double)group_budget / per);
    int nt = amp_threads();
    int64_t share = (g->N + nt - 1) / nt; /* every thread gets a group */
    cnt = cnt > share ? share : cnt;
    if (cnt < 1)
        cnt = 1; /* N == 0: no groups, not a division by zero */
    p.cnt = cnt;
    p.groups = (g->N + cnt - 1) / cnt;
    p.nt = p.groups < nt ? 1 : nt;
    /* The f32 kernel's tiles are 12 x 32: with O (a few dozen channels) as
     * M, the last row panel is mostly padding, as N it fills whole column
     * panels. So f32 runs the products transposed: accT [n*L, O] = cols^T
     * W^T and dW^T += cols dY'^T (~20% faster at CNN sizes). The bf16
     * kernel's 32 x 32 tiles prefer them as they are. */
    p.tr = p.cdt == AMP_F32;
    return p;
}

/* The weight (n elements of dt) as the GEMM reads it: its own data, or an
 * f32 copy of an f16 weight in *tmp. NULL when out of memory. */
static const void *weight_operand(const void *w, amp_dtype dt, int64_t n, amp_dtype cdt, float **tmp)
{
    *tmp = NULL;
    if (dt == cdt)
        return w;
    *tmp = amp_alloc((size_t)n * sizeof(float));
    if (*tmp)
        amp_convert(w, dt, *tmp, AMP_F32, (size_t)n);
    return *tmp;
}

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

/* cols[(c*kh + i)*kw + j][oy*Wo + ox] = x[c][oy*s - p + i][ox*s - p + j],
 * 0 off the image; row r of cols starts at cols + r * ld. One body per
 * element size: the copy is the same for every dtype of that size.
 *
 * With stride 1 and Wo == W ("same" padding along x), a row of cols is the
 * channel's plane shifted by (i - p) * W + (j - p): one long copy, then
 * zeros over the few columns that wrapped around an edge. Otherwise each
 * output row is copied on its own (rows are short: plain loops beat
 * memcpy / memset calls there). */
#define IM2COL(NAME, T)                                                                       \
    static void NAME##_same(const conv_geom *g, const T *x, T *cols, int64_t ld)              \
    {                                                                                         \
        const int64_t W = g->W, hw = g->H * g->W, lw = g->l;                                  \
        for (int64_t c = 0; c < g->C; c++)                                                    \
            for (int64_t i = 0; i < g->kh; i++)                                               \
                for (int64_t j = 0; j < g->kw; j++) {                                         \
                    T *out = cols + ((c * g->kh + i) * g->kw + j) * ld;                       \
                    const T *plane = x + c * hw;                                              \
                    const int64_t d = (i - g->p) * W + (j - g->p); /* source of q: q + d */   \
                    int64_t q0 = d < 0 ? -d : 0, q1 = hw - d < lw ? hw - d : lw;              \
                    if (q1 < q0)                                                              \
                        q1 = q0 = lw < q0 ? lw : q0;                                          \
                    memset(out, 0, (size_t)q0 * sizeof(T));                                   \
                    memcpy(out + q0, plane + q0 + d, (size_t)(q1 - q0) * sizeof(T));          \
                    memset(out + q1, 0, (size_t)(lw - q1) * sizeof(T));                       \
                    int64_t lo, hi;                                                           \
                    valid_cols(g, j, &lo, &hi);                                               \
                    for (int64_t oy = 0; oy < g->Ho; oy++) {                                  \
                        for (int64_t ox = 0; ox < lo; ox++)                                   \
                            out[oy * W + ox] = 0;                                             \
                        for (int64_t ox = hi; ox < W; ox++)                                   \
                            out[oy * W + ox] = 0;                                             \
                    }                                                                         \
                }                                                                             \
    }                                                                                         \
    static void NAME(const conv_geom *g, const T *x, T *cols, int64_t ld)                     \
    {                                                                                         \
        if (g->s == 1 && g->Wo == g->W) {                                                     \
            NAME##_same(g, x, cols, ld);                                                      \
            return;                                                                           \
        }                                                                                     \
        for (int64_t c = 0; c < g->C; c++)                                                    \
            for (int64_t i = 0; i < g->kh; i++)                                               \
                for (int64_t j = 0; j < g->kw; j++) {                                         \
                    T *row = cols + ((c * g->kh + i) * g->kw + j) * ld;                       \
                    int64_t lo, hi;                                                           \
                    valid_cols(g, j, &lo, &hi);                                               \
                    const int64_t shift = j - g->p; /* input column of ox = ox*s + shift */   \
                    for (int64_t oy = 0; oy < g->Ho; oy++) {                                  \
                        int64_t iy = oy * g->s - g->p + i;                                    \
                        T *out = row + oy * g->Wo;                                            \
                        if (iy < 0 || iy >= g->H) {                                           \
                            for (int64_t ox = 0; ox < g->Wo; ox++)                            \
                                out[ox] = 0;                                                  \
                            continue;                                                         \
                        }                                                                     \
                        const T *in = x + (c * g->H + iy) * g->W;                             \
                        for (int64_t ox = 0; ox < lo; ox++)                                   \
                            out[ox] = 0;                                                      \
                        if (g->s == 1)                                                        \
                            for (int64_t ox = lo; ox < hi; ox++)                              \
                                out[ox] = in[ox + shift];                                     \
                        else                                                                  \
                            for (int64_t ox = lo; ox < hi; ox++)                              \
                                out[ox] = in[ox * g->s + shift];                              \
                        for (int64_t ox = hi; ox < g->Wo; ox++)                               \
                            out[ox] = 0;                                                      \
                    }                                                                         \
                }                                                                             \
    }

IM2COL(im2col32, float)
IM2COL(im2col16, uint16_t)

/* Lowers images [0, cnt) of x (dtype dt) into cols [ckk, cnt*L] of dtype
 * cdt; img32 holds one widened image when dt != cdt (f16 -> f32). */
static void lower_group(const conv_geom *g, const void *x, amp_dtype dt, amp_dtype cdt, int64_t cnt, void *cols,
                        float *img32)
{
    const int64_t ld = cnt * g->l, chw = g->C * g->H * g->W;
    const size_t es = amp_dtype_size(dt);
    for (int64_t i = 0; i < cnt; i++) {
        if (cdt == AMP_BF16) {
            im2col16(g, (const uint16_t *)x + i * chw, (uint16_t *)cols + i * g->l, ld);
            continue;
        }
        const float *xi = (const float *)x + i * chw;
        if (dt != AMP_F32) {
            amp_convert((const char *)x + (size_t)(i * chw) * es, dt, img32, AMP_F32, (size_t)chw);
            xi = img32;
        }
        im2col32(g, xi, (float *)cols + i * g->l, ld);
    }
}

/* col2im for stride 1 and Wo == W: each row of cols adds onto the plane
 * shifted by (i - p) * W + (j - p), one long run. The columns that wrapped
 * around an edge hold gradients of padding, which belong to no input:
 * they are zeroed first (cols is scratch), so adding them is harmless. */
static void col2im_same(const conv_geom *g, float *cols, int64_t ld, float *dx)
{
    const int64_t W = g->W, hw = g->H * g->W, lw = g->l;
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *restrict row = cols + ((c * g->kh + i) * g->kw + j) * ld;
                float *restrict plane = dx + c * hw;
                int64_t lo, hi;
                valid_cols(g, j, &lo, &hi);
                for (int64_t oy = 0; oy < g->Ho; oy++) {
                    for (int64_t ox = 0; ox < lo; ox++)
                        row[oy * W + ox] = 0.0f;
                    for (int64_t ox = hi; ox < W; ox++)
                        row[oy * W + ox] = 0.0f;
                }
                const int64_t d = (i - g->p) * W + (j - g->p);
                const int64_t q0 = d < 0 ? -d : 0, q1 = hw - d < lw ? hw - d : lw;
                for (int64_t q = q0; q < q1; q++)
                    plane[q + d] += row[q];
            }
}

/* The adjoint of im2col for one image: dx (f32) += the image's columns
 * (rows of stride ld). cols may be overwritten. */
static void col2im(const conv_geom *g, float *cols, int64_t ld, float *dx)
{
    if (g->s == 1 && g->Wo == g->W) {
        col2im_same(g, cols, ld, dx);
        return;
    }
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const float *row = cols + ((c * g->kh + i) * g->kw + j) * ld;
                int64_t lo, hi;
                valid_cols(g, j, &lo, &hi);
                const int64_t shift = j - g->p;
                for (int64_t oy = 0; oy < g->Ho; oy++) {
                    int64_t iy = oy * g->s - g->p + i;
                    if (iy < 0 || iy >= g->H)
                        continue;
                    float *out = dx + (c * g->H + iy) * g->W;
                    const float *in = row + oy * g->Wo;
                    if (g->s == 1)
                        for (int64_t ox = lo; ox < hi; ox++)
                            out[ox + shift] += in[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++)
                            out[ox * g->s + shift] += in[ox];
                }
            }
}

/* Elements per block when a row is rounded through a stack buffer. */
#define ROW_BLOCK 1024

/* amp_relu's f32 kernel: NaN stays NaN, -0 becomes +0. */
static inline float relu1(float v) { return v > 0.0f ? v : (v == v ? 0.0f : v); }

/* y[i][o][:] = accT[i*L + l][o] + b[o]: scatter_group for the
 * transposed product (f32 columns), through a row buffer. */
static void scatter_group_t(const conv_geom *g, const float *acc, int64_t cnt, const float *b, void *y, amp_dtype dt,
                            float *row)
{
    const size_t es = amp_dtype_size(dt);
    for (int64_t r = 0; r < cnt * g->O; r++) {
        const int64_t i = r / g->O, o = r % g->O;
        const float *src = acc + i * g->l * g->O + o;
        const float bias = b ? b[o] : 0.0f;
        float *d = dt == AMP_F32 ? (float *)y + r * g->l : row;
        if (g->relu)
            for (int64_t k = 0; k < g->l; k++)
                d[k] = relu1(src[k * g->O] + bias);
        else
            for (int64_t k = 0; k < g->l; k++)
                d[k] = src[k * g->O] + bias;
        if (dt != AMP_F32)
            amp_convert(row, AMP_F32, (char *)y + (size_t)(r * g->l) * es, dt, (size_t)g->l);
    }
}

/* y[i][o][:] = acc[o][i*L ..] + b[o] for the group's images, rounded once
 * into y's dtype (b may be NULL). */
static void scatter_group(const conv_geom *g, const float *acc, int64_t cnt, const float *b, void *y,
                          amp_dtype dt)
{
    const int64_t ld = cnt * g->l;
    const size_t es = amp_dtype_size(dt);
    for (int64_t r = 0; r < cnt * g->O; r++) {
        const int64_t i = r / g->O, o = r % g->O;
        const float *src = acc + o * ld + i * g->l;
        char *dst = (char *)y + (size_t)(r * g->l) * es;
        const float bias = b ? b[o] : 0.0f;
        if (dt == AMP_F32) {
            float *d = (float *)dst;
            if (g->relu)
                for (int64_t k = 0; k < g->l; k++)
                    d[k] = relu1(src[k] + bias);
            else
                for (int64_t k = 0; k < g->l; k++)
                    d[k] = src[k] + bias;
            continue;
        }
        if (!b && !g->relu) {
            amp_convert(src, AMP_F32, dst, dt, (size_t)g->l);
            continue;
        }
        float buf[ROW_BLOCK];
        for (int64_t k0 = 0; k0 < g->l; k0 += ROW_BLOCK) {
            int64_t len = g->l - k0 < ROW_BLOCK ? g->l - k0 : ROW_BLOCK;
            for (int64_t k = 0; k < len; k++)
                buf[k] = g->relu ? relu1(src[k0 + k] + bias) : src[k0 + k] + bias;
            amp_convert(buf, AMP_F32, dst + (size_t)k0 * es, dt, (size_t)len);
        }
    }
}

/* dY' [O, cnt*L] (dtype cdt) = the group's dY [cnt, O, L] (dtype dt). */
static void gather_group(const conv_geom *g, const void *gy, amp_dtype dt, amp_dtype cdt, int64_t cnt, void *gyp)
{
    const int64_t ld = cnt * g->l;
    const size_t es = amp_dtype_size(dt), ces = amp_dtype_size(cdt);
    for (int64_t r = 0; r < cnt * g->O; r++) {
        const int64_t i = r / g->O, o = r % g->O;
        amp_convert((const char *)gy + (size_t)(r * g->l) * es, dt, (char *)gyp + (size_t)(o * ld + i * g->l) * ces,
                    cdt, (size_t)g->l);
    }
}

/* db[o] += the sum of row o of dY' [O, ld] (dtype dt), in double. */
static void bias_sums(const void *gyp, amp_dtype dt, int64_t O, int64_t ld, double *db)
{
    const size_t es = amp_dtype_size(dt);
    for (int64_t o = 0; o < O; o++) {
        const char *row = (const char *)gyp + (size_t)(o * ld) * es;
        float buf[ROW_BLOCK];
        double s = 0;
        for (int64_t k0 = 0; k0 < ld; k0 += ROW_BLOCK) {
            int64_t len = ld - k0 < ROW_BLOCK ? ld - k0 : ROW_BLOCK;
            const float *v = (const float *)(row + (size_t)k0 * es);
            if (dt != AMP_F32) {
                amp_convert(row + (size_t)k0 * es, dt, buf, AMP_F32, (size_t)len);
                v = buf;
            }
            /* Short f32 runs in 16 independent lanes (so the loop
             * vectorises), then double across them. */
            float lane[16] = {0};
            int64_t k = 0;
            for (; k + 16 <= len; k += 16)
                for (int l = 0; l < 16; l++)
                    lane[l] += v[k + l];
            for (; k < len; k++)
                lane[0] += v[k];
            for (int l = 0; l < 16; l++)
                s += lane[l];
        }
        db[o] += s;
    }
}

/* Adds col2im of the group's dcols [ckk, cnt*L] into dx's images (dtype
 * dt; each image summed in f32 and rounded once through img32). */
static void raise_group(const conv_geom *g, float *dcols, int64_t cnt, void *dx, amp_dtype dt, float *img32)
{
    const int64_t ld = cnt * g->l, chw = g->C * g->H * g->W;
    for (int64_t i = 0; i < cnt; i++) {
        float *img = dt == AMP_F32 ? (float *)dx + i * chw : img32;
        memset(img, 0, (size_t)chw * sizeof(float));
        col2im(g, dcols + i * g->l, ld, img);
        if (dt != AMP_F32)
            amp_convert(img, AMP_F32, (char *)dx + (size_t)(i * chw) * amp_dtype_size(dt), dt, (size_t)chw);
    }
}

/* Per-thread scratch: nt slices of `per` bytes (64-byte multiples). */
static size_t slice(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* The geometry as onednn.h takes it. */
static onednn_conv_geom onednn_geom(const conv_geom *g)
{
    return (onednn_conv_geom){.N = g->N, .C = g->C, .H = g->H, .W = g->W, .O = g->O, .KH = g->kh, .KW = g->kw,
                              .OH = g->Ho, .OW = g->Wo, .sh = g->s, .sw = g->s, .ph = g->p, .pw = g->p,
                              .dh = 1, .dw = 1};
}

typedef struct {
    const conv_geom *g;
    const conv_plan *pl;
    const char *x, *gy;
    const void *w;
    const float *b;
    char *y, *dx;
    char *scratch;
    size_t per, cols_b, acc_b;
    /* backward: the scratch parts, and the groups of each partial-sum
     * slot */
    size_t gyp_b, dcols_b, img_b, dw_b;
    bool need_x, need_w, need_b;
    _Atomic int failed;
} conv_job;

/* The byte offsets of image n0 in the job's x or dx (C x H x W values an
 * image) and in its y or gy (O x Ho x Wo). */
static size_t in_off(const conv_job *j, int64_t n0)
{
    return (size_t)(n0 * j->g->C * j->g->H * j->g->W) * amp_dtype_size(j->pl->dt);
}
static size_t out_off(const conv_job *j, int64_t n0)
{
    return (size_t)(n0 * j->g->O * j->g->l) * amp_dtype_size(j->pl->dt);
}

static void forward_groups(void *vj, int64_t lo, int64_t hi, int tid)
{
    conv_job *j = vj;
    const conv_geom *g = j->g;
    const conv_plan *pl = j->pl;
    char *mine = j->scratch + (size_t)tid * j->per;
    void *cols = mine;
    float *acc = (float *)(mine + j->cols_b), *img32 = (float *)(mine + j->cols_b + j->acc_b);
    for (int64_t gi = lo; gi < hi; gi++) {
        const int64_t n0 = gi * pl->cnt, cnt = g->N - n0 < pl->cnt ? g->N - n0 : pl->cnt, ld = cnt * g->l;
        lower_group(g, j->x + in_off(j, n0), pl->dt, pl->cdt, cnt, cols, img32);
        char *yg = j->y + out_off(j, n0);
        if (pl->tr) {
            /* accT [ld, O] = cols^T [ld, CKK] W^T [CKK, O] */
            if (gemm_lowp(true, true, ld, g->O, g->ckk, 1.0f, cols, pl->cdt, ld, j->w, pl->cdt, g->ckk, 0.0f, acc,
                          AMP_F32, g->O) != AMP_OK) {
                atomic_store(&j->failed, 1);
                continue;
            }
            scatter_group_t(g, acc, cnt, j->b, yg, pl->dt, img32);
            continue;
        }
        /* acc [O, ld] = W [O, CKK] cols [CKK, ld] */
        if (gemm_lowp(false, false, g->O, ld, g->ckk, 1.0f, j->w, pl->cdt, g->ckk, cols, pl->cdt, ld, 0.0f, acc,
                      AMP_F32, ld) != AMP_OK) {
            atomic_store(&j->failed, 1);
            continue;
        }
        scatter_group(g, acc, cnt, j->b, yg, pl->dt);
    }
}

/* y = the convolution of x and w (+ bias), all of dtype dt, with ampc's
 * kernels. */
static amp_status forward_own(const conv_geom *gp, const void *xv, const void *wv, const void *bias, amp_dtype dt,
                              void *y)
{
    const conv_geom g = *gp;
    const conv_plan pl = plan_make(&g, dt, false);
    const int64_t chw = g.C * g.H * g.W;
    const size_t ces = amp_dtype_size(pl.cdt);
    const size_t cols_b = slice((size_t)(g.ckk * pl.cnt * g.l) * ces);
    const size_t acc_b = slice((size_t)(g.O * pl.cnt * g.l) * sizeof(float));
    /* an f32 image to widen f16 into, or a row for the transposed scatter */
    const int64_t img_n = (dt != pl.cdt ? chw : 0) > (pl.tr ? g.l : 0) ? chw : (pl.tr ? g.l : 0);
    const size_t img_b = slice((size_t)img_n * sizeof(float));
    const size_t per = cols_b + acc_b + img_b;
    /* a group a grain, on as many threads as the plan has */
    const int64_t grain = pl.nt > 1 ? 1 : (pl.groups > 0 ? pl.groups : 1);
    const int nt = amp_parallel_width(pl.groups, grain);
    char *scratch = amp_alloc((size_t)nt * per);
    float *wtmp, *b = g.bias ? amp_alloc((size_t)g.O * sizeof(float)) : NULL;
    const void *w = weight_operand(wv, dt, g.O * g.ckk, pl.cdt, &wtmp);
    int failed = !scratch || !w || (g.bias && !b);
    if (b)
        amp_convert(bias, dt, b, AMP_F32, (size_t)g.O);
    if (!failed) {
        conv_job j = {.g = &g, .pl = &pl, .x = xv, .w = w, .b = b, .y = y, .scratch = scratch, .per = per,
                      .cols_b = cols_b, .acc_b = acc_b};
        amp_parallel_for(pl.groups, grain, forward_groups, &j);
        failed = atomic_load(&j.failed);
    }
    amp_free(scratch);
    amp_free(wtmp);
    amp_free(b);
    return failed ? amp_set_error(AMP_ERR_MEMORY, "conv2d: out of memory") : AMP_OK;
}

amp_status cpu_conv2d(const be_conv_geom *bg, const void *x, const void *w, const void *bias, amp_dtype dt,
                      be_epilogue act, void *y)
{
    if (act != BE_EPI_NONE && act != BE_EPI_RELU)
        return amp_set_error(AMP_ERR_ARG, "conv2d: the cpu backend fuses only a relu");
    const conv_geom g = geom_of(bg, bias != NULL, act == BE_EPI_RELU);
    const onednn_conv_geom og = onednn_geom(&g);
    amp_status st = AMP_OK;
    if (!onednn_conv_forward(&og, x, w, dt, bias, dt, y, dt, g.relu ? CPU_ACT_RELU : CPU_ACT_NONE, &st))
        st = forward_own(&g, x, w, bias, dt, y);
    return st;
}

/* The groups of partial-sum slot k of nt: OpenMP's static split (the
 * first groups % nt slots one group longer), the split this file has
 * always used, so the sums are the same bits on whichever thread runs a
 * slot. */
static void slot_groups(int64_t groups, int nt, int64_t k, int64_t *g0, int64_t *g1)
{
    int64_t q = groups / nt, r = groups % nt;
    *g0 = k * q + (k < r ? k : r);
    *g1 = *g0 + q + (k < r ? 1 : 0);
}

static void backward_slots(void *vj, int64_t lo, int64_t hi, int tid)
{
    conv_job *j = vj;
    const conv_geom *g = j->g;
    const conv_plan *pl = j->pl;
    /* the tid's columns; the slot's partial sums of dW and db */
    char *mine = j->scratch + (size_t)tid * j->per;
    void *gyp = mine, *cols = mine + j->gyp_b;
    float *dcols = (float *)(mine + j->gyp_b + j->cols_b), *img32 = (float *)((char *)dcols + j->dcols_b);
    for (int64_t k = lo; k < hi; k++) {
        char *sums = j->scratch + (size_t)k * j->per + j->gyp_b + j->cols_b + j->dcols_b + j->img_b;
        float *dw = (float *)sums;
        double *db = (double *)(sums + j->dw_b);
        int64_t g0, g1;
        slot_groups(pl->groups, pl->nt, k, &g0, &g1);
        for (int64_t gi = g0; gi < g1; gi++) {
            const int64_t n0 = gi * pl->cnt, cnt = g->N - n0 < pl->cnt ? g->N - n0 : pl->cnt, ld = cnt * g->l;
            gather_group(g, j->gy + out_off(j, n0), pl->dt, pl->cdt, cnt, gyp);
            if (j->need_b)
                bias_sums(gyp, pl->cdt, g->O, ld, db);
            if (j->need_w) {
                lower_group(g, j->x + in_off(j, n0), pl->dt, pl->cdt, cnt, cols, img32);
                bool bad;
                if (pl->tr) /* dW^T [CKK, O] += cols [CKK, ld] dY'^T [ld, O] */
                    bad = gemm_lowp(false, true, g->ckk, g->O, ld, 1.0f, cols, pl->cdt, ld, gyp, pl->cdt, ld, 1.0f,
                                    dw, AMP_F32, g->O) != AMP_OK;
                else /* dW [O, CKK] += dY' [O, ld] cols^T [ld, CKK] */
                    bad = gemm_lowp(false, true, g->O, g->ckk, ld, 1.0f, gyp, pl->cdt, ld, cols, pl->cdt, ld, 1.0f,
                                    dw, AMP_F32, g->ckk) != AMP_OK;
                if (bad)
                    atomic_store(&j->failed, 1);
            }
            if (j->need_x) {
                /* dcols [CKK, ld] = W^T [CKK, O] dY' [O, ld], then back onto the images */
                if (gemm_lowp(true, false, g->ckk, ld, g->O, 1.0f, j->w, pl->cdt, g->ckk, gyp, pl->cdt, ld, 0.0f,
                              dcols, AMP_F32, ld) != AMP_OK) {
                    atomic_store(&j->failed, 1);
                    continue;
                }
                raise_group(g, dcols, cnt, j->dx + in_off(j, n0), pl->dt, img32);
            }
        }
    }
}

/* The gradients that the flags ask for (into dx, dw, db, of dtype dt),
 * with ampc's kernels. */
static amp_status backward_own(const conv_geom *gp, const void *gyv, const void *xv, const void *wv, amp_dtype dt,
                               void *dx, void *dwv, void *dbv, bool need_x, bool need_w, bool need_b)
{
    const conv_geom g = *gp;
    const conv_plan pl = plan_make(&g, dt, true);
    const size_t es = amp_dtype_size(dt), ces = amp_dtype_size(pl.cdt);
    const int64_t chw = g.C * g.H * g.W;
    /* Per slot (pl.nt of them, run by any thread; the tid's own slot
     * holds its columns): dY', columns, their gradient, an f32 image, and
     * the slot's partial sums of dW and db. */
    const size_t gyp_b = slice((size_t)(g.O * pl.cnt * g.l) * ces);
    const size_t cols_b = need_w ? slice((size_t)(g.ckk * pl.cnt * g.l) * ces) : 0;
    const size_t dcols_b = need_x ? slice((size_t)(g.ckk * pl.cnt * g.l) * sizeof(float)) : 0;
    const size_t img_b = dt != AMP_F32 ? slice((size_t)chw * sizeof(float)) : 0;
    const size_t dw_b = need_w ? slice((size_t)(g.O * g.ckk) * sizeof(float)) : 0;
    const size_t db_b = slice((size_t)g.O * sizeof(double));
    const size_t per = gyp_b + cols_b + dcols_b + img_b + dw_b + db_b;
    char *scratch = amp_alloc((size_t)pl.nt * per);
    float *wtmp;
    const void *w = need_x ? weight_operand(wv, dt, g.O * g.ckk, pl.cdt, &wtmp) : (wtmp = NULL, NULL);
    int failed = !scratch || (need_x && !w);
    for (int t = 0; !failed && t < pl.nt; t++) {
        char *sums = scratch + (size_t)t * per + gyp_b + cols_b + dcols_b + img_b;
        memset(sums, 0, dw_b + db_b);
    }
    if (!failed) {
        conv_job j = {.g = &g, .pl = &pl, .x = xv, .gy = gyv, .w = w, .dx = dx, .scratch = scratch, .per = per,
                      .gyp_b = gyp_b, .cols_b = cols_b, .dcols_b = dcols_b, .img_b = img_b, .dw_b = dw_b,
                      .need_x = need_x, .need_w = need_w, .need_b = need_b};
        /* tids < width <= pl.nt: each has a slot for its columns */
        amp_parallel_for(pl.nt, 1, backward_slots, &j);
        failed = atomic_load(&j.failed);
    }
    /* Slot 0's partial sums collect the others', in slot order. */
    float *dw0 = (float *)(scratch + gyp_b + cols_b + dcols_b + img_b);
    double *db0 = (double *)((char *)dw0 + dw_b);
    for (int t = 1; !failed && t < pl.nt; t++) {
        const float *dwt = (const float *)((const char *)dw0 + (size_t)t * per);
        const double *dbt = (const double *)((const char *)db0 + (size_t)t * per);
        for (int64_t k = 0; need_w && k < g.O * g.ckk; k++)
            dw0[k] += dwt[k];
        for (int64_t o = 0; need_b && o < g.O; o++)
            db0[o] += dbt[o];
    }
    if (!failed && need_w && pl.tr) {
        /* dW^T [CKK, O] back to [O, CKK], through thread 0's dY' slot */
        float *dwo = (float *)scratch;
        if (gyp_b < (size_t)(g.O * g.ckk) * sizeof(float))
            failed = !(dwo = amp_alloc((size_t)(g.O * g.ckk) * sizeof(float)));
        for (int64_t o = 0; !failed && o < g.O; o++)
            for (int64_t k = 0; k < g.ckk; k++)
                dwo[o * g.ckk + k] = dw0[k * g.O + o];
        if (!failed)
            amp_convert(dwo, AMP_F32, dwv, dt, (size_t)(g.O * g.ckk));
        if (dwo != (float *)scratch)
            amp_free(dwo);
    } else if (!failed && need_w) {
        amp_convert(dw0, AMP_F32, dwv, dt, (size_t)(g.O * g.ckk));
    }
    if (!failed && need_b) {
        float vals[64];
        for (int64_t o0 = 0; o0 < g.O; o0 += 64) {
            int64_t len = g.O - o0 < 64 ? g.O - o0 : 64;
            for (int64_t o = 0; o < len; o++)
                vals[o] = (float)db0[o0 + o];
            amp_convert(vals, AMP_F32, (char *)dbv + (size_t)o0 * es, dt, (size_t)len);
        }
    }
    amp_free(scratch);
    amp_free(wtmp);
    return failed ? amp_set_error(AMP_ERR_MEMORY, "conv2d: out of memory in backward") : AMP_OK;
}

amp_status cpu_conv2d_backward(const be_conv_geom *bg, const void *gy, const void *x, const void *w, amp_dtype dt,
                               void *dx, void *dw, void *db)
{
    bool need_x = dx != NULL, need_w = dw != NULL, need_b = db != NULL;
    const conv_geom g = geom_of(bg, need_b, false);
    /* oneDNN first; its weight pass makes the bias gradient along (so a
     * frozen weight with a trainable bias stays on the own kernels). */
    const onednn_conv_geom og = onednn_geom(&g);
    amp_status st = AMP_OK;
    if (need_x && onednn_conv_backward_data(&og, gy, w, dt, dx, dt, &st))
        need_x = false;
    if (st == AMP_OK && need_w && onednn_conv_backward_weights(&og, x, gy, dt, dw, dt, db, dt, &st))
        need_w = need_b = false;
    if (st == AMP_OK && (need_x || need_w || need_b))
        st = backward_own(&g, gy, x, w, dt, dx, dw, db, need_x, need_w, need_b);
    return st;
}
