/*
 * softmax.c (CPU backend) - the nn family's row kernels for softmax,
 * log_softmax and cross_entropy on host memory, forward and backward.
 *
 * All of them compute in f32 (16-bit inputs are widened, results rounded
 * once) and subtract the running max before exponentiating, so logits of
 * any magnitude stay finite; sums accumulate in double. cross_entropy's
 * rows use the SIMD row kernels (ops/simd.h) when the CPU has them.
 * Threads split the work at fixed boundaries, so results do not depend on
 * their number.
 */
#include "backend/cpu/cpu_backend.h"
#include "base/base.h"
#include "base/parallel.h"
#include "dtype/dtype.h"
#include "backend/cpu/simd.h"

#include <math.h>
#include <string.h>

/* Elements of work below which a kernel stays on one thread. */
#define PAR_MIN_WORK 32768
/* Elements of work a grain of a parallel loop is sized for. */
#define GRAIN_WORK 8192

/* Items of `per` elements each a grain takes: all of them (one thread)
 * when the whole is under PAR_MIN_WORK. */
static int64_t grain_of(int64_t items, int64_t per)
{
    if (items * per < PAR_MIN_WORK)
        return items > 0 ? items : 1;
    return per >= GRAIN_WORK ? 1 : GRAIN_WORK / (per > 0 ? per : 1);
}

/* Columns per block when the dim is not the last: the block's running
 * max and sums live on the stack while the dim is walked. */
#define SM_COLS 256

/* A kernel over w columns of a [len, inner]-strided block: a and b are
 * the inputs (b may be NULL), out the result, all f32. */
typedef void (*block_fn)(const float *a, const float *b, float *out, int64_t len, int64_t inner, int64_t w);

/* mx[i] = the maximum of column i of the [len, inner]-strided block (a
 * NaN makes the whole slice NaN), sm[i] = 0. */
static void col_max(const float *x, int64_t len, int64_t inner, int64_t w, float *mx, double *sm)
{
    for (int64_t i = 0; i < w; i++) {
        mx[i] = -INFINITY;
        sm[i] = 0;
    }
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            float v = x[d * inner + i];
            if (v > mx[i] || v != v)
                mx[i] = v;
        }
}

static void softmax_block(const float *x, const float *unused, float *y, int64_t len, int64_t inner,
                          int64_t w)
{
    (void)unused;
    float mx[SM_COLS];
    double sm[SM_COLS];
    col_max(x, len, inner, w, mx, sm);
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            float e = expf(x[d * inner + i] - mx[i]);
            y[d * inner + i] = e;
            sm[i] += e;
        }
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            y[d * inner + i] = (float)(y[d * inner + i] / sm[i]);
}

/* (x - max) - log(sum(exp(x - max))), PyTorch's order of operations. */
static void log_softmax_block(const float *x, const float *unused, float *y, int64_t len, int64_t inner,
                              int64_t w)
{
    (void)unused;
    float mx[SM_COLS], ls[SM_COLS];
    double sm[SM_COLS];
    col_max(x, len, inner, w, mx, sm);
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            sm[i] += expf(x[d * inner + i] - mx[i]);
    for (int64_t i = 0; i < w; i++)
        ls[i] = (float)log(sm[i]);
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            y[d * inner + i] = (x[d * inner + i] - mx[i]) - ls[i];
}

/* acc[i] = the sum over column i of g (times y when y is not NULL), in
 * double, for w columns of a [len, inner]-strided block. */
static void col_sums(const float *g, const float *y, int64_t len, int64_t inner, int64_t w, double *acc)
{
    for (int64_t i = 0; i < w; i++)
        acc[i] = 0;
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            acc[i] += y ? (double)g[d * inner + i] * y[d * inner + i] : (double)g[d * inner + i];
}

/* A backward block: gx = y * (g - sum(g * y)) for softmax, gx = g -
 * exp(y) * sum(g) for log_softmax (y its result). Inlined into each of the
 * two below, so neither tests `log` per element. */
static inline __attribute__((always_inline)) void grad_block(const float *g, const float *y, float *gx, int64_t len,
                                                             int64_t inner, int64_t w, bool log)
{
    double s[SM_COLS];
    col_sums(g, log ? NULL : y, len, inner, w, s);
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            int64_t k = d * inner + i;
            gx[k] = log ? g[k] - expf(y[k]) * (float)s[i] : y[k] * (g[k] - (float)s[i]);
        }
}

static void softmax_grad_block(const float *g, const float *y, float *gx, int64_t len, int64_t inner, int64_t w)
{
    grad_block(g, y, gx, len, inner, w, false);
}

static void log_softmax_grad_block(const float *g, const float *y, float *gx, int64_t len, int64_t inner, int64_t w)
{
    grad_block(g, y, gx, len, inner, w, true);
}

typedef struct {
    const float *fa, *fb;
    float *fo;
    int64_t len, inner, per;
    block_fn fn;
} dim_job;

static void dim_tasks(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const dim_job *j = vj;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o = t / j->per, c0 = (t % j->per) * SM_COLS;
        int64_t w = j->inner - c0 < SM_COLS ? j->inner - c0 : SM_COLS;
        size_t off = (size_t)(o * j->len * j->inner + c0);
        j->fn(j->fa + off, j->fb ? j->fb + off : NULL, j->fo + off, j->len, j->inner, w);
    }
}

/* out (odt) = fn over every [len] slice of a (and b) seen as [outer, len,
 * inner], computed in f32. */
static amp_status along_dim(const void *a, amp_dtype adt, const void *b, amp_dtype bdt, void *out, amp_dtype odt,
                            int64_t outer, int64_t len, int64_t inner, block_fn fn)
{
    const int64_t numel = outer * len * inner;
    float *ta = NULL, *tb = NULL, *to = NULL;
    const float *fa = cpu_as_f32(a, adt, numel, &ta), *fb = b ? cpu_as_f32(b, bdt, numel, &tb) : NULL;
    float *fo = odt == AMP_F32 ? out : (to = amp_alloc((size_t)numel * sizeof(float)));
    amp_status st = AMP_OK;
    if (fa && (fb || !b) && fo) {
        int64_t per = (inner + SM_COLS - 1) / SM_COLS, tasks = outer * per;
        dim_job j = {fa, fb, fo, len, inner, per, fn};
        amp_parallel_for(tasks, grain_of(tasks, len * (inner < SM_COLS ? inner : SM_COLS)), dim_tasks, &j);
        if (to)
            amp_convert(to, AMP_F32, out, odt, (size_t)numel);
    } else {
        st = amp_set_error(AMP_ERR_MEMORY, "out of memory for %lld elements", (long long)numel);
    }
    amp_free(ta);
    amp_free(tb);
    amp_free(to);
    return st;
}

amp_status cpu_softmax(const void *x, amp_dtype xdt, void *y, amp_dtype ydt, int64_t outer, int64_t len,
                       int64_t inner, bool log)
{
    return along_dim(x, xdt, NULL, AMP_F32, y, ydt, outer, len, inner, log ? log_softmax_block : softmax_block);
}

amp_status cpu_softmax_backward(const void *g, amp_dtype gdt, const void *y, amp_dtype ydt, void *gx,
                                amp_dtype gxdt, int64_t outer, int64_t len, int64_t inner, bool log)
{
    return along_dim(g, gdt, y, ydt, gx, gxdt, outer, len, inner,
                     log ? log_softmax_grad_block : softmax_grad_block);
}

/* ---------------------------------------------------------- cross_entropy */

/* Row i of the logits [N, C] as f32: x's own row, or widened into buf. */
static const float *logits_row(const void *x, amp_dtype xdt, int64_t i, int64_t C, float *buf)
{
    if (xdt == AMP_F32)
        return (const float *)x + i * C;
    amp_convert((const char *)x + (size_t)(i * C) * amp_dtype_size(xdt), xdt, buf, AMP_F32, (size_t)C);
    return buf;
}

/* Checks each of the N labels is in [0, C) or equal to ignore; returns
 * the number of labels counted or -1 with the error set. */
static int64_t check_labels(const void *labels, amp_dtype ldt, int64_t N, int64_t C, int64_t ignore)
{
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t y = load_i64(labels, ldt, (size_t)i);
        if (y == ignore)
            continue;
        if (y < 0 || y >= C) {
            amp_set_error(AMP_ERR_ARG, "cross_entropy: label %lld at index %lld is out of range [0, %lld)",
                          (long long)y, (long long)i, (long long)C);
            return -1;
        }
        count++;
    }
    return count;
}

typedef struct {
    const void *x, *labels;
    amp_dtype xdt, ldt, gxdt;
    int64_t C, ignore;
    float *stats, *rows, scale;
    const float *cstats;
    double *loss;
    char *gp;
    const simd_row_fns *vec;
} ce_job;

static void ce_rows(void *vj, int64_t lo, int64_t hi, int tid)
{
    const ce_job *j = vj;
    const int64_t C = j->C;
    for (int64_t i = lo; i < hi; i++) {
        float *buf = j->rows + (size_t)tid * (size_t)(2 * C);
        const float *row = logits_row(j->x, j->xdt, i, C, buf);
        float m = -INFINITY;
        double s = 0;
        if (j->vec) {
            m = j->vec->max(row, C);
            memcpy(buf + C, row, (size_t)C * sizeof(float));
            s = j->vec->exp_sum(buf + C, C, m);
        } else {
            for (int64_t c = 0; c < C; c++)
                if (row[c] > m || row[c] != row[c])
                    m = row[c];
            for (int64_t c = 0; c < C; c++)
                s += expf(row[c] - m);
        }
        float ls = (float)log(s);
        if (j->stats) {
            j->stats[2 * i] = m;
            j->stats[2 * i + 1] = ls;
        }
        int64_t y = load_i64(j->labels, j->ldt, (size_t)i);
        j->loss[i] = y == j->ignore ? 0.0 : (double)ls - ((double)row[y] - (double)m);
    }
}

amp_status cpu_cross_entropy(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N, int64_t C,
                             int64_t ignore, float *stats, float *count, void *out, amp_dtype odt)
{
    int64_t counted = check_labels(labels, ldt, N, C, ignore);
    if (counted < 0)
        return amp_last_status();
    const int64_t grain = grain_of(N, C);
    const int nt = amp_parallel_width(N, grain);
    double *loss = amp_alloc((size_t)N * sizeof(double));
    float *rows = amp_alloc((size_t)nt * (size_t)(2 * C) * sizeof(float));
    if (!loss || !rows) {
        amp_free(loss);
        amp_free(rows);
        return amp_set_error(AMP_ERR_MEMORY, "cross_entropy: out of memory");
    }
    ce_job j = {.x = x, .labels = labels, .xdt = xdt, .ldt = ldt, .C = C, .ignore = ignore, .stats = stats,
                .rows = rows, .loss = loss, .vec = simd_pick_rows()};
    amp_parallel_for(N, grain, ce_rows, &j);
    double total = 0;
    for (int64_t i = 0; i < N; i++)
        total += loss[i];
    float v = (float)(total / (double)counted);
    amp_convert(&v, AMP_F32, out, odt, 1);
    if (count)
        *count = (float)counted;
    amp_free(loss);
    amp_free(rows);
    return AMP_OK;
}

static void ce_grad_rows(void *vj, int64_t lo, int64_t hi, int tid)
{
    const ce_job *j = vj;
    const int64_t C = j->C;
    const size_t es = amp_dtype_size(j->gxdt);
    for (int64_t i = lo; i < hi; i++) {
        float *buf = j->rows + (size_t)tid * (size_t)(2 * C);
        int64_t y = load_i64(j->labels, j->ldt, (size_t)i);
        const float *row = logits_row(j->x, j->xdt, i, C, buf);
        float *gr = j->gxdt == AMP_F32 ? (float *)(void *)j->gp + i * C : buf + C;
        const float m = j->cstats[2 * i], ls = j->cstats[2 * i + 1];
        if (y == j->ignore) {
            for (int64_t c = 0; c < C; c++)
                gr[c] = 0.0f;
        } else {
            /* exp((x - m) - ls): the shift first, then the exponential */
            for (int64_t c = 0; c < C; c++)
                gr[c] = row[c] - m;
            if (j->vec)
                j->vec->exp_sum(gr, C, ls);
            else
                for (int64_t c = 0; c < C; c++)
                    gr[c] = expf(gr[c] - ls);
            for (int64_t c = 0; c < C; c++)
                gr[c] = (gr[c] - (c == y ? 1.0f : 0.0f)) * j->scale;
        }
        if (j->gxdt != AMP_F32)
            amp_convert(gr, AMP_F32, j->gp + (size_t)(i * C) * es, j->gxdt, (size_t)C);
    }
}

amp_status cpu_cross_entropy_backward(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N,
                                      int64_t C, int64_t ignore, const float *stats, const float *count,
                                      const void *g, amp_dtype gdt, void *gx, amp_dtype gxdt)
{
    const int64_t grain = grain_of(N, C);
    const int nt = amp_parallel_width(N, grain);
    float *rows = amp_alloc((size_t)nt * (size_t)(2 * C) * sizeof(float));
    if (!rows)
        return amp_set_error(AMP_ERR_MEMORY, "cross_entropy: out of memory in backward");
    ce_job j = {.x = x, .labels = labels, .xdt = xdt, .ldt = ldt, .gxdt = gxdt, .C = C, .ignore = ignore,
                .cstats = stats, .rows = rows, .scale = load_f32(g, gdt, 0) / *count, .gp = gx,
                .vec = simd_pick_rows()};
    amp_parallel_for(N, grain, ce_grad_rows, &j);
    amp_free(rows);
    return AMP_OK;
}
