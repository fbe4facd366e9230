/*
 * norm.c (CPU backend) - layer_norm's kernels on host memory, forward and
 * backward, and the fused residual add + layer_norm (cpu_add_layer_norm:
 * sum = x + res and layer_norm(sum) in one pass over the rows) and the
 * backward that adds dx into an existing gradient
 * (cpu_layer_norm_backward_add: autograd's accumulate folded in).
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
 * over threads (amp_parallel_for); the weight and bias gradients sum
 * fixed blocks of rows into double partial sums that are added in block
 * order, so the result does not depend on the number of threads. When
 * they are wanted, backward computes dx and the block's sums in the same
 * pass over g and x.
 */
#include "backend/cpu/cpu_backend.h"
#include "base/base.h"
#include "base/parallel.h"

#include <math.h>
#include <string.h>

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN_WORK 32768

/* Row sums in double, over 8 independent lanes: one serial chain of
 * double adds would cost an add latency per element (the compiler may not
 * reorder FP adds), lanes let it pipeline and vectorise. */
enum { LANES = 8 };

#define INLINE static inline __attribute__((always_inline))

/* y = (x - m) * is [* w] [+ b] */
INLINE void apply_row_body(const float *restrict x, const float *restrict w, const float *restrict b, int64_t N,
                           float m, float is, float *restrict y)
{
    int64_t j;
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

/* dx = rr * (gw - m1 - xhat * m2), xhat = (x - mr) * rr */
INLINE void dx_row_body(const float *restrict gw, const float *restrict x, float mr, float rr, float m1, float m2,
                        int64_t N, float *restrict dx)
{
    for (int64_t k = 0; k < N; k++)
        dx[k] = rr * (gw[k] - m1 - ((x[k] - mr) * rr) * m2);
}

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
    apply_row_body(x, w, b, N, m, is, y);
}

/* Rows per group of the AVX-512 kernels below. */
enum { GROUP = 4 };

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
    dx_row_body(gw, x, mr, rr, m1, m2, N, dx);
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
    /* GROUP rows at once, the same bits as one by one (NULL: none) */
    void (*fwd_group)(const float *const *, const float *, const float *, int64_t, double, float *const *, float *,
                      float *);
    void (*bwd_group)(const float *const *, const float *const *, const float *, const float *, const float *, int64_t,
                      float *, float *const *);
    /* a += d over n floats (NULL: none) */
    void (*acc)(float *, const float *, int64_t);
    /* param_row on GROUP rows, adding into aw and ab row after row, as
     * GROUP calls of param would (NULL: none) */
    void (*param_group)(const float *const *, const float *const *, const float *, const float *, int64_t, double *,
                        double *);
} row_kernels;

static const row_kernels kernels_c = {fwd_row_c, bwd_row_c, param_row_c, NULL, NULL, NULL, NULL};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
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

/* fwd_row_body on GROUP rows: lane l of row r's zmm accumulator is
 * fwd_row_body's acc[l] (the same adds in the same order, so the same
 * bits); the rows' chains are independent, so their adds overlap instead
 * of each waiting out the previous one's latency. */
TGT_AVX512 static void fwd_group_v(const float *const *x, const float *w, const float *b, int64_t N, double eps,
                                   float *const *y, float *mu, float *rs)
{
    __m512d acc[GROUP];
    for (int r = 0; r < GROUP; r++)
        acc[r] = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + LANES <= N; j += LANES)
        for (int r = 0; r < GROUP; r++)
            acc[r] = _mm512_add_pd(acc[r], _mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j)));
    const int64_t jt = j;
    float m[GROUP];
    for (int r = 0; r < GROUP; r++) {
        double a[LANES], s = 0;
        _mm512_storeu_pd(a, acc[r]);
        for (int64_t t = jt; t < N; t++)
            s += x[r][t];
        for (int l = 0; l < LANES; l++)
            s += a[l];
        m[r] = (float)(s / (double)N);
        acc[r] = _mm512_setzero_pd();
    }
    __m256 mv[GROUP];
    for (int r = 0; r < GROUP; r++)
        mv[r] = _mm256_set1_ps(m[r]);
    for (j = 0; j + LANES <= N; j += LANES)
        for (int r = 0; r < GROUP; r++) {
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x[r] + j), mv[r]);
            acc[r] = _mm512_add_pd(acc[r], _mm512_cvtps_pd(_mm256_mul_ps(d, d)));
        }
    for (int r = 0; r < GROUP; r++) {
        double a[LANES], v = 0;
        _mm512_storeu_pd(a, acc[r]);
        for (int64_t t = jt; t < N; t++) {
            float d = x[r][t] - m[r];
            v += (double)(d * d);
        }
        for (int l = 0; l < LANES; l++)
            v += a[l];
        const float is = (float)(1.0 / sqrt(v / (double)N + eps));
        mu[r] = m[r];
        rs[r] = is;
        apply_row_body(x[r], w, b, N, m[r], is, y[r]);
    }
}

/* bwd_row_body on GROUP rows, likewise; gw is scratch for GROUP rows. */
TGT_AVX512 static void bwd_group_v(const float *const *g, const float *const *x, const float *w, const float *mr,
                                   const float *rr, int64_t N, float *gw, float *const *dx)
{
    for (int r = 0; r < GROUP; r++) {
        float *restrict gr = gw + r * N;
        const float *restrict gg = g[r];
        if (w)
            for (int64_t j = 0; j < N; j++)
                gr[j] = gg[j] * w[j];
        else
            memcpy(gr, gg, (size_t)N * sizeof(float));
    }
    __m512d a1[GROUP], a2[GROUP];
    __m256 mv[GROUP], rv[GROUP];
    for (int r = 0; r < GROUP; r++) {
        a1[r] = a2[r] = _mm512_setzero_pd();
        mv[r] = _mm256_set1_ps(mr[r]);
        rv[r] = _mm256_set1_ps(rr[r]);
    }
    int64_t j = 0;
    for (; j + LANES <= N; j += LANES)
        for (int r = 0; r < GROUP; r++) {
            const __m256 gv = _mm256_loadu_ps(gw + r * N + j);
            const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x[r] + j), mv[r]), rv[r]);
            a1[r] = _mm512_add_pd(a1[r], _mm512_cvtps_pd(gv));
            a2[r] = _mm512_add_pd(a2[r], _mm512_cvtps_pd(_mm256_mul_ps(gv, xh)));
        }
    for (int r = 0; r < GROUP; r++) {
        double b1[LANES], b2[LANES], s1 = 0, s2 = 0;
        _mm512_storeu_pd(b1, a1[r]);
        _mm512_storeu_pd(b2, a2[r]);
        const float *gr = gw + r * N;
        for (int64_t t = j; t < N; t++) {
            s1 += gr[t];
            s2 += (double)(gr[t] * ((x[r][t] - mr[r]) * rr[r]));
        }
        for (int l = 0; l < LANES; l++) {
            s1 += b1[l];
            s2 += b2[l];
        }
        const float m1 = (float)(s1 / (double)N), m2 = (float)(s2 / (double)N);
        dx_row_body(gr, x[r], mr[r], rr[r], m1, m2, N, dx[r]);
    }
}

TGT_AVX512 static void acc_row_v(float *a, const float *d, int64_t n)
{
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(a + j, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + j), _mm512_maskz_loadu_ps(k, d + j)));
    }
}

/* param_row_body on GROUP rows: each of aw[j], ab[j] is loaded once, gets
 * the rows' terms in row order (the adds param_row_body makes, in its
 * order: the same bits), and is stored once. */
TGT_AVX512 static void param_group_v(const float *const *g, const float *const *x, const float *mr, const float *rr,
                                     int64_t N, double *aw, double *ab)
{
    int64_t j = 0;
    for (; j + 8 <= N; j += 8) {
        __m512d w8 = aw ? _mm512_loadu_pd(aw + j) : _mm512_setzero_pd();
        __m512d b8 = ab ? _mm512_loadu_pd(ab + j) : _mm512_setzero_pd();
        for (int r = 0; r < GROUP; r++) {
            const __m256 gv = _mm256_loadu_ps(g[r] + j);
            if (aw) {
                const __m256 xh =
                    _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x[r] + j), _mm256_set1_ps(mr[r])), _mm256_set1_ps(rr[r]));
                w8 = _mm512_add_pd(w8, _mm512_cvtps_pd(_mm256_mul_ps(gv, xh)));
            }
            b8 = _mm512_add_pd(b8, _mm512_cvtps_pd(gv));
        }
        if (aw)
            _mm512_storeu_pd(aw + j, w8);
        if (ab)
            _mm512_storeu_pd(ab + j, b8);
    }
    for (int r = 0; r < GROUP && j < N; r++)
        param_row_body(g[r] + j, x[r] + j, mr[r], rr[r], N - j, aw ? aw + j : NULL, ab ? ab + j : NULL);
}

static const row_kernels kernels_v = {fwd_row_v,   bwd_row_v, param_row_v,  fwd_group_v,
                                      bwd_group_v, acc_row_v, param_group_v};
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

/* Row r of t (dtype dt, rows of N) as bytes. */
static char *row_at(void *t, amp_dtype dt, int64_t r, int64_t N)
{
    return (char *)t + (size_t)(r * N) * amp_dtype_size(dt);
}

/* Elements per grain of a row-parallel loop. */
#define ROW_GRAIN_WORK 8192

/* Rows per grain for M rows of N: all of them (the caller alone) up to
 * PAR_MIN_WORK elements, else about ROW_GRAIN_WORK elements' worth. */
static int64_t row_grain(int64_t M, int64_t N)
{
    if (M * N <= PAR_MIN_WORK || M < 2)
        return M > 1 ? M : 1;
    int64_t g = ROW_GRAIN_WORK / (N > 0 ? N : 1);
    return g < 1 ? 1 : g;
}

/* Floats of per-thread scratch a row loop needs: five rows for one row
 * at a time (x, the residual, their sum, a result, a widened
 * accumulator), 2 * GROUP rows for a group's backward, and slack. */
static size_t scratch_per(int64_t N) { return (size_t)((2 * GROUP + 1) * N + 4); }

/* ------------------------------------------------------------ forward */

typedef struct {
    const void *x, *res; /* res: the residual added to x first, or NULL */
    amp_dtype xdt, rdt;
    const float *w, *b;
    int64_t N;
    double eps;
    void *sum; /* x + res in sdt, when res */
    amp_dtype sdt;
    void *y;
    amp_dtype ydt;
    float *mu, *rs;
    float *rows; /* per-thread scratch, scratch_per(N) floats each */
    const row_kernels *k;
} fwd_ctx;

/* Row r of layer_norm's input as f32: x's row (widened into mine when
 * 16-bit), or with a residual the sum as the add op computes it (f32,
 * rounded once into sdt: the sum's row in memory when f32, else in mine),
 * which layer_norm reads rounded. */
static const float *in_row(const fwd_ctx *c, int64_t r, float *mine)
{
    const int64_t N = c->N;
    const float *xr = row_f32(c->x, c->xdt, r, N, mine);
    if (!c->res)
        return xr;
    const float *restrict rr = row_f32(c->res, c->rdt, r, N, mine + N);
    float *restrict sr = c->sdt == AMP_F32 ? (float *)c->sum + r * N : mine + 2 * N;
    for (int64_t j = 0; j < N; j++)
        sr[j] = xr[j] + rr[j];
    if (c->sdt != AMP_F32) {
        char *dst = row_at(c->sum, c->sdt, r, N);
        amp_convert(sr, AMP_F32, dst, c->sdt, (size_t)N);
        amp_convert(dst, c->sdt, sr, AMP_F32, (size_t)N);
    }
    return sr;
}

static void fwd_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    const fwd_ctx *c = vc;
    const int64_t N = c->N;
    float *mine = c->rows + (size_t)tid * scratch_per(N);
    /* Rows whose input is f32 in memory (x, or the sum in f32) and whose
     * result is f32 run GROUP at a time; the rest one by one. */
    const bool grouped =
        c->k->fwd_group && c->xdt == AMP_F32 && (!c->res || c->sdt == AMP_F32) && c->ydt == AMP_F32;
    int64_t r = lo;
    for (; grouped && r + GROUP <= hi; r += GROUP) {
        const float *xs[GROUP];
        float *ys[GROUP];
        for (int k = 0; k < GROUP; k++) {
            xs[k] = in_row(c, r + k, mine);
            ys[k] = (float *)c->y + (r + k) * N;
        }
        c->k->fwd_group(xs, c->w, c->b, N, c->eps, ys, c->mu + r, c->rs + r);
    }
    for (; r < hi; r++) {
        const float *xr = in_row(c, r, mine);
        float *yr = c->ydt == AMP_F32 ? (float *)c->y + r * N : mine + 3 * N;
        c->k->fwd(xr, c->w, c->b, N, c->eps, yr, c->mu + r, c->rs + r);
        if (c->ydt != AMP_F32)
            amp_convert(yr, AMP_F32, row_at(c->y, c->ydt, r, N), c->ydt, (size_t)N);
    }
}

/* layer_norm of x (+ res, written to sum, when res is not NULL). */
static amp_status ln_forward(const void *x, amp_dtype xdt, const void *res, amp_dtype rdt, const void *wp,
                             amp_dtype wdt, const void *bp, amp_dtype bdt, int64_t M, int64_t N, double eps,
                             void *sum, amp_dtype sdt, void *y, amp_dtype ydt, float *mean, float *rstd)
{
    const int64_t grain = row_grain(M, N);
    const int nt = amp_parallel_width(M, grain);
    /* The statistics go somewhere even when the caller keeps none. */
    float *stat = mean && rstd ? NULL : amp_alloc((size_t)(M ? 2 * M : 1) * sizeof(float));
    float *tw = NULL, *tb = NULL;
    const float *w = wp ? cpu_as_f32(wp, wdt, N, &tw) : NULL, *b = bp ? cpu_as_f32(bp, bdt, N, &tb) : NULL;
    float *rows = amp_alloc((size_t)nt * scratch_per(N) * sizeof(float));
    amp_status st = AMP_OK;
    if ((!(mean && rstd) && !stat) || !rows || (wp && !w) || (bp && !b)) {
        st = amp_set_error(AMP_ERR_MEMORY, "layer_norm: out of memory");
    } else {
        fwd_ctx c = {x,   res, xdt, rdt,  w,
                     b,   N,   eps, sum,  sdt,
                     y,   ydt, mean && rstd ? mean : stat,
                     mean && rstd ? rstd : stat + M,
                     rows, pick_kernels()};
        amp_parallel_for(M, grain, fwd_range, &c);
    }
    amp_free(stat);
    amp_free(tw);
    amp_free(tb);
    amp_free(rows);
    return st;
}

amp_status cpu_layer_norm(const void *x, amp_dtype xdt, const void *wp, amp_dtype wdt, const void *bp,
                          amp_dtype bdt, int64_t M, int64_t N, double eps, void *y, amp_dtype ydt, float *mean,
                          float *rstd)
{
    return ln_forward(x, xdt, NULL, AMP_F32, wp, wdt, bp, bdt, M, N, eps, NULL, AMP_F32, y, ydt, mean, rstd);
}

amp_status cpu_add_layer_norm(const void *x, amp_dtype xdt, const void *res, amp_dtype rdt, const void *wp,
                              amp_dtype wdt, const void *bp, amp_dtype bdt, int64_t M, int64_t N, double eps,
                              void *sum, amp_dtype sdt, void *y, amp_dtype ydt, float *mean, float *rstd)
{
    return ln_forward(x, xdt, res, rdt, wp, wdt, bp, bdt, M, N, eps, sum, sdt, y, ydt, mean, rstd);
}

/* ----------------------------------------------------------- backward */

/* Rows per block of the weight / bias gradient sums: fixed for a given M,
 * whatever the thread count, and at most 64 blocks. */
static int64_t param_block_rows(int64_t M)
{
    int64_t rb = (M + 63) / 64;
    return rb < 32 ? 32 : rb;
}

typedef struct {
    const void *g, *x;
    amp_dtype gdt, xdt;
    const float *w, *mu, *rs;
    int64_t M, N, rb;
    void *dx; /* NULL: not wanted */
    amp_dtype dxdt;
    bool acc;     /* dx += the gradient (as autograd's accumulate would) */
    double *part; /* per block: dweight, dbias partial sums [2N] */
    bool need_w, need_b;
    float *rows;
    const row_kernels *k;
} bwd_ctx;

/* dx (and the parameter sums into aw / ab, when not NULL) for rows
 * [r0, r1), with the thread's scratch. */
static void bwd_rows(const bwd_ctx *c, int64_t r0, int64_t r1, float *mine, double *aw, double *ab)
{
    const int64_t N = c->N;
    /* f32 g, x and dx: GROUP rows at a time (gw in mine's first GROUP
     * rows, a dx to add in the next GROUP), each row's parameter sums
     * added in row order as one by one. */
    const bool grouped =
        c->k->bwd_group && c->gdt == AMP_F32 && c->xdt == AMP_F32 && (!c->dx || c->dxdt == AMP_F32);
    int64_t r = r0;
    for (; grouped && r + GROUP <= r1; r += GROUP) {
        const float *gs[GROUP], *xs[GROUP];
        float *ds[GROUP];
        for (int k = 0; k < GROUP; k++) {
            gs[k] = (const float *)c->g + (r + k) * N;
            xs[k] = (const float *)c->x + (r + k) * N;
            ds[k] = c->acc ? mine + (GROUP + k) * N : c->dx ? (float *)c->dx + (r + k) * N : NULL;
        }
        if (c->dx) {
            c->k->bwd_group(gs, xs, c->w, c->mu + r, c->rs + r, N, mine, ds);
            for (int k = 0; c->acc && k < GROUP; k++) {
                float *restrict a = (float *)c->dx + (r + k) * N;
                const float *restrict d = ds[k];
                if (c->k->acc)
                    c->k->acc(a, d, N);
                else
                    for (int64_t j = 0; j < N; j++)
                        a[j] += d[j];
            }
        }
        if ((aw || ab) && c->k->param_group)
            c->k->param_group(gs, xs, c->mu + r, c->rs + r, N, aw, ab);
        else
            for (int k = 0; (aw || ab) && k < GROUP; k++)
                c->k->param(gs[k], xs[k], c->mu[r + k], c->rs[r + k], N, aw, ab);
    }
    for (; r < r1; r++) {
        const float *gr = row_f32(c->g, c->gdt, r, N, mine), *xr = row_f32(c->x, c->xdt, r, N, mine + N);
        if (c->dx) {
            const bool direct = c->dxdt == AMP_F32 && !c->acc;
            float *restrict d = direct ? (float *)c->dx + r * N : mine + 3 * N;
            c->k->bwd(gr, xr, c->w, c->mu[r], c->rs[r], N, mine + 2 * N, d);
            if (c->acc && c->dxdt == AMP_F32) {
                float *restrict a = (float *)c->dx + r * N;
                for (int64_t j = 0; j < N; j++)
                    a[j] += d[j];
            } else if (c->acc) {
                /* The gradient rounded to dxdt, then added in f32 to the
                 * widened accumulator and rounded once: accumulate's way. */
                char *dst = row_at(c->dx, c->dxdt, r, N);
                float *restrict e = mine + 4 * N;
                amp_convert(d, AMP_F32, mine + 2 * N, c->dxdt, (size_t)N);
                amp_convert(mine + 2 * N, c->dxdt, d, AMP_F32, (size_t)N);
                amp_convert(dst, c->dxdt, e, AMP_F32, (size_t)N);
                for (int64_t j = 0; j < N; j++)
                    e[j] += d[j];
                amp_convert(e, AMP_F32, dst, c->dxdt, (size_t)N);
            } else if (!direct) {
                amp_convert(d, AMP_F32, row_at(c->dx, c->dxdt, r, N), c->dxdt, (size_t)N);
            }
        }
        if (aw || ab)
            c->k->param(gr, xr, c->mu[r], c->rs[r], N, aw, ab);
    }
}

static void bwd_row_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    const bwd_ctx *c = vc;
    bwd_rows(c, lo, hi, c->rows + (size_t)tid * scratch_per(c->N), NULL, NULL);
}

/* Blocks [lo, hi) of rb rows: dx and each block's parameter sums in one
 * pass over g and x. */
static void bwd_block_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    const bwd_ctx *c = vc;
    const int64_t N = c->N;
    for (int64_t blk = lo; blk < hi; blk++) {
        double *p = c->part + blk * 2 * N;
        memset(p, 0, (size_t)(2 * N) * sizeof(double));
        const int64_t r0 = blk * c->rb, r1 = (blk + 1) * c->rb < c->M ? (blk + 1) * c->rb : c->M;
        bwd_rows(c, r0, r1, c->rows + (size_t)tid * scratch_per(N), c->need_w ? p : NULL, c->need_b ? p + N : NULL);
    }
}

/* Rounds n f32 values into p (dtype dt) from v, where they differ. */
static void store_f32(void *p, amp_dtype dt, const float *v, int64_t n)
{
    if (dt != AMP_F32)
        amp_convert(v, AMP_F32, p, dt, (size_t)n);
}

static amp_status ln_backward(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *wp,
                              amp_dtype wdt, const float *mu, const float *rs, int64_t M, int64_t N, void *dxp,
                              amp_dtype dxdt, bool acc, void *dwp, amp_dtype dwdt, void *dbp, amp_dtype dbdt)
{
    const bool need_w = dwp != NULL, need_b = dbp != NULL, params = need_w || need_b;
    const int64_t rb = param_block_rows(M), nblk = (M + rb - 1) / rb;
    /* dx and the parameter sums in one pass over blocks of rows when
     * there are blocks enough to share (or the layer is small: the caller
     * alone); else dx over rows in parallel, then the sums. */
    const bool big = M * N > PAR_MIN_WORK;
    const bool one_pass = params && (!dxp || !big || nblk >= 2 * amp_threads());
    const int64_t rgrain = row_grain(M, N), bgrain = big ? 1 : nblk;
    const int nr = dxp && !one_pass ? amp_parallel_width(M, rgrain) : 1,
              nb = params ? amp_parallel_width(nblk, bgrain) : 1, nt = nr > nb ? nr : nb;

    float *tw = NULL;
    const float *w = wp ? cpu_as_f32(wp, wdt, N, &tw) : NULL;
    float *rows = amp_alloc((size_t)nt * scratch_per(N) * sizeof(float));
    double *part = params ? amp_alloc((size_t)nblk * (size_t)(2 * N) * sizeof(double)) : NULL;
    /* dweight and dbias in f32: straight into their memory when f32. */
    float *dwv = need_w ? (dwdt == AMP_F32 ? dwp : amp_alloc((size_t)(N ? N : 1) * sizeof(float))) : NULL;
    float *dbv = need_b ? (dbdt == AMP_F32 ? dbp : amp_alloc((size_t)(N ? N : 1) * sizeof(float))) : NULL;
    const bool ok = (!wp || w) && rows && (!params || part) && (!need_w || dwv) && (!need_b || dbv);
    if (ok) {
        bwd_ctx c = {g, x, gdt, xdt, w, mu, rs, M, N, rb, dxp, dxdt, acc, part, need_w, need_b, rows,
                     pick_kernels()};
        if (dxp && !one_pass) {
            bwd_ctx dx_only = c;
            dx_only.part = NULL;
            amp_parallel_for(M, rgrain, bwd_row_range, &dx_only);
            c.dx = NULL; /* the sums alone below */
        }
        if (params)
            amp_parallel_for(nblk, bgrain, bwd_block_range, &c);
        for (int64_t j = 0; params && j < N; j++) {
            double sw = 0, sb = 0;
            for (int64_t blk = 0; blk < nblk; blk++) {
                sw += part[blk * 2 * N + j];
                sb += part[blk * 2 * N + N + j];
            }
            if (need_w)
                dwv[j] = (float)sw;
            if (need_b)
                dbv[j] = (float)sb;
        }
        if (need_w)
            store_f32(dwp, dwdt, dwv, N);
        if (need_b)
            store_f32(dbp, dbdt, dbv, N);
    }
    if (dwv != dwp)
        amp_free(dwv);
    if (dbv != dbp)
        amp_free(dbv);
    amp_free(tw);
    amp_free(rows);
    amp_free(part);
    return ok ? AMP_OK : amp_set_error(AMP_ERR_MEMORY, "layer_norm: backward out of memory");
}

amp_status cpu_layer_norm_backward(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *wp,
                                   amp_dtype wdt, const float *mu, const float *rs, int64_t M, int64_t N,
                                   void *dxp, amp_dtype dxdt, void *dwp, amp_dtype dwdt, void *dbp,
                                   amp_dtype dbdt)
{
    return ln_backward(g, gdt, x, xdt, wp, wdt, mu, rs, M, N, dxp, dxdt, false, dwp, dwdt, dbp, dbdt);
}

amp_status cpu_layer_norm_backward_add(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *wp,
                                       amp_dtype wdt, const float *mu, const float *rs, int64_t M, int64_t N,
                                       void *dxp, amp_dtype dxdt, void *dwp, amp_dtype dwdt, void *dbp,
                                       amp_dtype dbdt)
{
    return ln_backward(g, gdt, x, xdt, wp, wdt, mu, rs, M, N, dxp, dxdt, true, dwp, dwdt, dbp, dbdt);
}
