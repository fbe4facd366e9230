/*
 * norm.c (CPU backend) - layer_norm's kernels on host memory, forward and
 * backward.
 *
 * x is M rows of N elements. Each row is normalised with its mean and
 * biased variance (as PyTorch), then scaled by weight and shifted by bias
 * ([N] each). 16-bit inputs are widened to f32 a row at a time and each
 * result rounded once; the row statistics are summed in double so long
 * rows lose nothing.
 *
 * Speed: the per-row loops are written with independent lanes so that
 * they vectorise, and are compiled twice, for baseline x86-64 and for
 * AVX-512 (picked at run time, honouring amp_cpu_limit). Rows are spread
 * over threads; the weight and bias gradients sum fixed blocks of rows
 * into double partial sums that are added in block order, so the result
 * does not depend on the number of threads.
 */
#include "backend/cpu/cpu_backend.h"
#include "base/base.h"

#include <math.h>
#include <string.h>

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN_WORK 32768

/* Row sums in double, over 8 independent lanes: one serial chain of
 * double adds would cost an add latency per element (the compiler may not
 * reorder FP adds), lanes let it pipeline and vectorise. */
enum { LANES = 8 };

#define INLINE static inline __attribute__((always_inline))

/* Mean and rstd of row x, then y = (x - mean) * rstd [* w] [+ b]. */
INLINE void fwd_row_body(const float *restrict x, const float *restrict w, const float *restrict b, int64_t N,
                         double eps, float *restrict y, float *mu, float *rs)
{
    double acc[LANES] = {0}, s = 0;
    int64_t j = 0;
    for (; j + LANES <= N; j += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += x[j + l];
    for (; j < N; j++)
        s += x[j];
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    const float m = (float)(s / (double)N);
    /* Two passes: no cancellation when |mean| >> std. */
    double dv[LANES] = {0}, v = 0;
    for (j = 0; j + LANES <= N; j += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[j + l] - m;
            dv[l] += (double)(d * d);
        }
    for (; j < N; j++) {
        float d = x[j] - m;
        v += (double)(d * d);
    }
    for (int l = 0; l < LANES; l++)
        v += dv[l];
    const float is = (float)(1.0 / sqrt(v / (double)N + eps));
    *mu = m;
    *rs = is;
    if (w && b)
        for (j = 0; j < N; j++)
            y[j] = (x[j] - m) * is * w[j] + b[j];
    else if (w)
        for (j = 0; j < N; j++)
            y[j] = (x[j] - m) * is * w[j];
    else if (b)
        for (j = 0; j < N; j++)
            y[j] = (x[j] - m) * is + b[j];
    else
        for (j = 0; j < N; j++)
            y[j] = (x[j] - m) * is;
}

/* dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * weight:
 * the derivative of the normalisation with the row statistics depending
 * on x. gw is scratch for the row's g * weight. */
INLINE void bwd_row_body(const float *restrict g, const float *restrict x, const float *restrict w, float mr,
                         float rr, int64_t N, float *restrict gw, float *restrict dx)
{
    if (w)
        for (int64_t j = 0; j < N; j++)
            gw[j] = g[j] * w[j];
    else
        memcpy(gw, g, (size_t)N * sizeof(float));
    double a1[LANES] = {0}, a2[LANES] = {0}, s1 = 0, s2 = 0;
    int64_t j = 0;
    for (; j + LANES <= N; j += LANES)
        for (int l = 0; l < LANES; l++) {
            a1[l] += gw[j + l];
            a2[l] += (double)(gw[j + l] * ((x[j + l] - mr) * rr));
        }
    for (; j < N; j++) {
        s1 += gw[j];
        s2 += (double)(gw[j] * ((x[j] - mr) * rr));
    }
    for (int l = 0; l < LANES; l++) {
        s1 += a1[l];
        s2 += a2[l];
    }
    const float m1 = (float)(s1 / (double)N), m2 = (float)(s2 / (double)N);
    for (int64_t k = 0; k < N; k++)
        dx[k] = rr * (gw[k] - m1 - ((x[k] - mr) * rr) * m2);
}

/* aw[j] += g[j] * xhat[j], ab[j] += g[j] for one row (either may be NULL). */
INLINE void param_row_body(const float *restrict g, const float *restrict x, float mr, float rr, int64_t N,
                           double *restrict aw, double *restrict ab)
{
    if (aw)
        for (int64_t j = 0; j < N; j++)
            aw[j] += (double)(g[j] * ((x[j] - mr) * rr));
    if (ab)
        for (int64_t j = 0; j < N; j++)
            ab[j] += g[j];
}

static void fwd_row_c(const float *x, const float *w, const float *b, int64_t N, double eps, float *y, float *mu,
                      float *rs)
{
    fwd_row_body(x, w, b, N, eps, y, mu, rs);
}

static void bwd_row_c(const float *g, const float *x, const float *w, float mr, float rr, int64_t N, float *gw,
                      float *dx)
{
    bwd_row_body(g, x, w, mr, rr, N, gw, dx);
}

static void param_row_c(const float *g, const float *x, float mr, float rr, int64_t N, double *aw, double *ab)
{
    param_row_body(g, x, mr, rr, N, aw, ab);
}

typedef struct {
    void (*fwd)(const float *, const float *, const float *, int64_t, double, float *, float *, float *);
    void (*bwd)(const float *, const float *, const float *, float, float, int64_t, float *, float *);
    void (*param)(const float *, const float *, float, float, int64_t, double *, double *);
} row_kernels;

static const row_kernels kernels_c = {fwd_row_c, bwd_row_c, param_row_c};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TGT_AVX512 __attribute__((target("avx512f,fma")))
TGT_AVX512 static void fwd_row_v(const float *x, const float *w, const float *b, int64_t N, double eps, float *y,
                                 float *mu, float *rs)
{
    fwd_row_body(x, w, b, N, eps, y, mu, rs);
}

TGT_AVX512 static void bwd_row_v(const float *g, const float *x, const float *w, float mr, float rr, int64_t N,
                                 float *gw, float *dx)
{
    bwd_row_body(g, x, w, mr, rr, N, gw, dx);
}

TGT_AVX512 static void param_row_v(const float *g, const float *x, float mr, float rr, int64_t N, double *aw,
                                   double *ab)
{
    param_row_body(g, x, mr, rr, N, aw, ab);
}

static const row_kernels kernels_v = {fwd_row_v, bwd_row_v, param_row_v};
#endif

static const row_kernels *pick_kernels(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (amp_cpu_features() & AMP_CPU_AVX512F)
        return &kernels_v;
#endif
    return &kernels_c;
}

/* Row r of t (dtype dt, rows of N) as f32: t's own row when dt is f32,
 * else widened into buf. */
static const float *row_f32(const void *t, amp_dtype dt, int64_t r, int64_t N, float *buf)
{
    if (dt == AMP_F32)
        return (const float *)t + r * N;
    amp_convert((const char *)t + (size_t)(r * N) * amp_dtype_size(dt), dt, buf, AMP_F32, (size_t)N);
    return buf;
}

/* Threads for M rows of N. */
static int row_threads(int64_t M, int64_t N)
{
    return M * N > PAR_MIN_WORK && M > 1 ? amp_threads() : 1;
}

amp_status cpu_layer_norm(const void *x, amp_dtype xdt, const void *wp, amp_dtype wdt, const void *bp,
                          amp_dtype bdt, int64_t M, int64_t N, double eps, void *y, amp_dtype ydt, float *mean,
                          float *rstd)
{
    const int nt = row_threads(M, N);
    const size_t es = amp_dtype_size(ydt);
    const bool f32 = xdt == AMP_F32 && ydt == AMP_F32;
    /* The statistics go somewhere even when the caller keeps none. */
    float *stat = mean && rstd ? NULL : amp_alloc((size_t)(M ? 2 * M : 1) * sizeof(float));
    float *tw = NULL, *tb = NULL;
    const float *w = wp ? cpu_as_f32(wp, wdt, N, &tw) : NULL, *b = bp ? cpu_as_f32(bp, bdt, N, &tb) : NULL;
    /* Per thread, for a 16-bit x or y: the widened row and its result. */
    float *rows = f32 ? NULL : amp_alloc((size_t)nt * (size_t)(2 * N + 1) * sizeof(float));
    amp_status st = AMP_OK;
    if ((!(mean && rstd) && !stat) || (!f32 && !rows) || (wp && !w) || (bp && !b)) {
        st = amp_set_error(AMP_ERR_MEMORY, "layer_norm: out of memory");
        goto done;
    }
    const row_kernels *k = pick_kernels();
    float *mu = mean && rstd ? mean : stat, *rs = mean && rstd ? rstd : stat + M;
    char *yp = y;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < M; r++) {
        float *mine = rows ? rows + (size_t)amp_thread_num() * (size_t)(2 * N + 1) : NULL;
        const float *xr = row_f32(x, xdt, r, N, mine);
        float *yr = ydt == AMP_F32 ? (float *)(void *)yp + r * N : mine + N;
        k->fwd(xr, w, b, N, eps, yr, mu + r, rs + r);
        if (ydt != AMP_F32)
            amp_convert(yr, AMP_F32, yp + (size_t)(r * N) * es, ydt, (size_t)N);
    }
done:
    amp_free(stat);
    amp_free(tw);
    amp_free(tb);
    amp_free(rows);
    return st;
}

/* Rows per block of the weight / bias gradient sums: fixed for a given M,
 * whatever the thread count, and at most 64 blocks. */
static int64_t param_block_rows(int64_t M)
{
    int64_t rb = (M + 63) / 64;
    return rb < 32 ? 32 : rb;
}

/* One gradient output of n elements, computed in f32: straight into its
 * memory when its dtype is f32, else into a buffer rounded in once at the
 * end. */
typedef struct {
    void *p;
    amp_dtype dt;
    int64_t n;
    float *v;
} f32_out;

static bool out_open(f32_out *o, void *p, amp_dtype dt, int64_t n)
{
    *o = (f32_out){p, dt, n, NULL};
    o->v = dt == AMP_F32 ? p : amp_alloc((size_t)(n ? n : 1) * sizeof(float));
    return o->v != NULL;
}

/* Rounds o's values into its memory (when ok) and releases its buffer. */
static void out_close(f32_out *o, bool ok)
{
    if (!o->p || o->dt == AMP_F32)
        return;
    if (ok)
        amp_convert(o->v, AMP_F32, o->p, o->dt, (size_t)o->n);
    amp_free(o->v);
}

amp_status cpu_layer_norm_backward(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *wp,
                                   amp_dtype wdt, const float *mu, const float *rs, int64_t M, int64_t N,
                                   void *dxp, amp_dtype dxdt, void *dwp, amp_dtype dwdt, void *dbp,
                                   amp_dtype dbdt)
{
    const bool need_x = dxp != NULL, need_w = dwp != NULL, need_b = dbp != NULL;
    const int nt = row_threads(M, N);
    const int64_t rb = param_block_rows(M), nblk = (M + rb - 1) / rb;
    const bool params = need_w || need_b;

    float *tw = NULL;
    const float *w = wp ? cpu_as_f32(wp, wdt, N, &tw) : NULL;
    /* Per thread: g and x rows (16-bit), g * weight, and dx (16-bit). */
    const size_t per = (size_t)(4 * N + 4);
    float *rows = amp_alloc((size_t)nt * per * sizeof(float));
    /* Per block of rows: partial sums for dweight and dbias. */
    double *part = params ? amp_alloc((size_t)nblk * (size_t)(2 * N) * sizeof(double)) : NULL;
    f32_out dx = {0}, dw = {0}, db = {0};
    bool ok = (!wp || w) && rows && (!params || part) && (!need_x || out_open(&dx, dxp, dxdt, M * N)) &&
              (!need_w || out_open(&dw, dwp, dwdt, N)) && (!need_b || out_open(&db, dbp, dbdt, N));
    const row_kernels *k = pick_kernels();
    if (ok && need_x) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < M; r++) {
            float *mine = rows + (size_t)amp_thread_num() * per;
            const float *gr = row_f32(g, gdt, r, N, mine), *xr = row_f32(x, xdt, r, N, mine + N);
            k->bwd(gr, xr, w, mu[r], rs[r], N, mine + 2 * N, dx.v + r * N);
        }
    }
    if (ok && params) {
        memset(part, 0, (size_t)nblk * (size_t)(2 * N) * sizeof(double));
#pragma omp parallel for num_threads(nblk > 1 ? nt : 1) schedule(static)
        for (int64_t blk = 0; blk < nblk; blk++) {
            float *mine = rows + (size_t)amp_thread_num() * per;
            double *aw = need_w ? part + blk * 2 * N : NULL, *ab = need_b ? part + blk * 2 * N + N : NULL;
            const int64_t r1 = (blk + 1) * rb < M ? (blk + 1) * rb : M;
            for (int64_t r = blk * rb; r < r1; r++)
                k->param(row_f32(g, gdt, r, N, mine), row_f32(x, xdt, r, N, mine + N), mu[r], rs[r], N, aw, ab);
        }
        for (int64_t j = 0; j < N; j++) {
            double sw = 0, sb = 0;
            for (int64_t blk = 0; blk < nblk; blk++) {
                sw += part[blk * 2 * N + j];
                sb += part[blk * 2 * N + N + j];
            }
            if (need_w)
                dw.v[j] = (float)sw;
            if (need_b)
                db.v[j] = (float)sb;
        }
    }
    out_close(&dx, ok);
    out_close(&dw, ok);
    out_close(&db, ok);
    amp_free(tw);
    amp_free(rows);
    amp_free(part);
    return ok ? AMP_OK : amp_set_error(AMP_ERR_MEMORY, "layer_norm: backward out of memory");
}
