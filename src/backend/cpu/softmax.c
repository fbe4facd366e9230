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
#include "dtype/dtype.h"
#include "backend/cpu/simd.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Elements of work below which a kernel stays on one thread. */
#define PAR_MIN_WORK 32768

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

/* gx = y * (g - sum(g * y)) */
static void softmax_grad_block(const float *g, const float *y, float *gx, int64_t len, int64_t inner,
                               int64_t w)
{
    double dot[SM_COLS];
    col_sums(g, y, len, inner, w, dot);
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            int64_t k = d * inner + i;
            gx[k] = y[k] * (g[k] - (float)dot[i]);
        }
}

/* gx = g - exp(y) * sum(g) */
static void log_softmax_grad_block(const float *g, const float *y, float *gx, int64_t len, int64_t inner,
                                   int64_t w)
{
    double sm[SM_COLS];
    col_sums(g, NULL, len, inner, w, sm);
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            int64_t k = d * inner + i;
            gx[k] = g[k] - expf(y[k]) * (float)sm[i];
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
        bool par = numel >= PAR_MIN_WORK;
        (void)par; /* used only by the OpenMP pragma */
#pragma omp parallel for num_threads(amp_threads()) if (par) schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t o = t / per, c0 = (t % per) * SM_COLS;
            int64_t w = inner - c0 < SM_COLS ? inner - c0 : SM_COLS;
            size_t off = (size_t)(o * len * inner + c0);
            fn(fa + off, fb ? fb + off : NULL, fo + off, len, inner, w);
        }
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

static int row_thread(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

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

amp_status cpu_cross_entropy(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N, int64_t C,
                             int64_t ignore, float *stats, float *count, void *out, amp_dtype odt)
{
    int64_t counted = check_labels(labels, ldt, N, C, ignore);
    if (counted < 0)
        return amp_last_status();
    const int nt = N * C >= PAR_MIN_WORK ? amp_threads() : 1;
    double *loss = amp_alloc((size_t)N * sizeof(double));
    float *rows = amp_alloc((size_t)nt * (size_t)(2 * C) * sizeof(float));
    if (!loss || !rows) {
        amp_free(loss);
        amp_free(rows);
        return amp_set_error(AMP_ERR_MEMORY, "cross_entropy: out of memory");
    }
    const simd_row_fns *vec = simd_pick_rows();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float *buf = rows + (size_t)row_thread() * (size_t)(2 * C);
        const float *row = logits_row(x, xdt, i, C, buf);
        float m = -INFINITY;
        double s = 0;
        if (vec) {
            m = vec->max(row, C);
            memcpy(buf + C, row, (size_t)C * sizeof(float));
            s = vec->exp_sum(buf + C, C, m);
        } else {
            for (int64_t c = 0; c < C; c++)
                if (row[c] > m || row[c] != row[c])
                    m = row[c];
            for (int64_t c = 0; c < C; c++)
                s += expf(row[c] - m);
        }
        float ls = (float)log(s);
        if (stats) {
            stats[2 * i] = m;
            stats[2 * i + 1] = ls;
        }
        int64_t y = load_i64(labels, ldt, (size_t)i);
        loss[i] = y == ignore ? 0.0 : (double)ls - ((double)row[y] - (double)m);
    }
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

amp_status cpu_cross_entropy_backward(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N,
                                      int64_t C, int64_t ignore, const float *stats, const float *count,
                                      const void *g, amp_dtype gdt, void *gx, amp_dtype gxdt)
{
    const float scale = load_f32(g, gdt, 0) / *count;
    const int nt = N * C >= PAR_MIN_WORK ? amp_threads() : 1;
    const size_t es = amp_dtype_size(gxdt);
    float *rows = amp_alloc((size_t)nt * (size_t)(2 * C) * sizeof(float));
    if (!rows)
        return amp_set_error(AMP_ERR_MEMORY, "cross_entropy: out of memory in backward");
    const simd_row_fns *vec = simd_pick_rows();
    char *gp = gx;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float *buf = rows + (size_t)row_thread() * (size_t)(2 * C);
        int64_t y = load_i64(labels, ldt, (size_t)i);
        const float *row = logits_row(x, xdt, i, C, buf);
        float *gr = gxdt == AMP_F32 ? (float *)(void *)gp + i * C : buf + C;
        const float m = stats[2 * i], ls = stats[2 * i + 1];
        if (y == ignore) {
            for (int64_t c = 0; c < C; c++)
                gr[c] = 0.0f;
        } else {
            /* exp((x - m) - ls): the shift first, then the exponential */
            for (int64_t c = 0; c < C; c++)
                gr[c] = row[c] - m;
            if (vec)
                vec->exp_sum(gr, C, ls);
            else
                for (int64_t c = 0; c < C; c++)
                    gr[c] = expf(gr[c] - ls);
            for (int64_t c = 0; c < C; c++)
                gr[c] = (gr[c] - (c == y ? 1.0f : 0.0f)) * scale;
        }
        if (gxdt != AMP_F32)
            amp_convert(gr, AMP_F32, gp + (size_t)(i * C) * es, gxdt, (size_t)C);
    }
    amp_free(rows);
    return AMP_OK;
}
