/*
 * reduce.cu - kernels that reduce: sums over any set of dims, softmax and
 * log_softmax along a dim (and their backwards), the fused cross-entropy,
 * and argmax.
 *
 * As on the CPU (src/backend/cpu/pointwise.c, softmax.c), sums accumulate in
 * double, maxima propagate NaN, and each result is rounded once into its
 * dtype. A row that one block reduces is walked by all its threads with a
 * stride, then combined with block_sum / block_max: the order of additions
 * differs from the CPU's, within the rounding of a double sum.
 */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- sums */

__device__ __forceinline__ int64_t kept_offset(const cuda_reduce_plan &p, int64_t j)
{
    int64_t off = 0;
    for (int d = p.nk - 1; d >= 0; d--) {
        off += (j % p.kd[d]) * p.ks[d];
        j /= p.kd[d];
    }
    return off;
}

__device__ __forceinline__ int64_t reduced_offset(const cuda_reduce_plan &p, int64_t r)
{
    if (p.nr == 1)
        return r * p.rs[0];
    int64_t off = 0;
    for (int d = p.nr - 1; d >= 0; d--) {
        off += (r % p.rd[d]) * p.rs[d];
        r /= p.rd[d];
    }
    return off;
}

/* One block per output: its threads share the reduced elements. */
__global__ void k_sum_block(const void *x, int xdt, cuda_reduce_plan p, int64_t outs, int64_t R, double scale,
                            void *out, int odt)
{
    __shared__ double scratch[32];
    for (int64_t j = blockIdx.x; j < outs; j += gridDim.x) {
        int64_t base = kept_offset(p, j);
        double s = 0;
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
            s += (double)ld_f32(x, xdt, base + reduced_offset(p, r));
        s = block_sum(s, scratch);
        if (threadIdx.x == 0)
            st_f32(out, odt, j, (float)(s * scale));
    }
}

/* One thread per output, walking its reduced elements alone: for the kept
 * innermost dim being contiguous (a bias gradient's column sums), where
 * neighbouring threads then read neighbouring elements. */
__global__ void k_sum_thread(const void *x, int xdt, cuda_reduce_plan p, int64_t outs, int64_t R, double scale,
                             void *out, int odt)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < outs; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = kept_offset(p, j);
        double s = 0;
        for (int64_t r = 0; r < R; r++)
            s += (double)ld_f32(x, xdt, base + reduced_offset(p, r));
        st_f32(out, odt, j, (float)(s * scale));
    }
}

extern "C" amp_status cuda_reduce_sum(const void *x, amp_dtype xdt, const cuda_reduce_plan *plan, double scale,
                                      void *out, amp_dtype odt)
{
    int64_t outs = 1, R = 1;
    for (int d = 0; d < plan->nk; d++)
        outs *= plan->kd[d];
    for (int d = 0; d < plan->nr; d++)
        R *= plan->rd[d];
    if (outs <= 0)
        return AMP_OK;
    cudaStream_t s = cuda_stream();
    if (plan->nk > 0 && plan->ks[plan->nk - 1] == 1 && outs >= 64) {
        k_sum_thread<<<cuda_blocks(outs), CUDA_THREADS, 0, s>>>(x, xdt, *plan, outs, R, scale, out, odt);
    } else {
        unsigned blocks = (unsigned)(outs < 65535 * 16 ? outs : 65535 * 16);
        int threads = R >= 65536 ? 1024 : CUDA_THREADS;
        k_sum_block<<<blocks, threads, 0, s>>>(x, xdt, *plan, outs, R, scale, out, odt);
    }
    return cuda_launched("sum kernel");
}

/* Appends a dim to a run list, merging it into the last one when the two
 * are neighbours in memory. */
static void push_dim(int *n, int64_t *d, int64_t *s, int64_t size, int64_t stride)
{
    if (*n > 0 && s[*n - 1] == stride * size) {
        d[*n - 1] *= size;
        s[*n - 1] = stride;
        return;
    }
    d[*n] = size;
    s[*n] = stride;
    (*n)++;
}

extern "C" amp_status cuda_reduce_sum_dims(const void *x, amp_dtype xdt, amp_shape shape, unsigned mask, double scale,
                                           void *out, amp_dtype odt, int64_t out_n)
{
    (void)out_n; /* the kept dims' product */
    cuda_reduce_plan p;
    memset(&p, 0, sizeof p);
    int64_t st[CUDA_MAX_DIMS], s = 1;
    for (int i = shape.ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape.d[i];
    }
    /* A zero-size reduced dim makes every output a sum of nothing (0, or
     * NaN for a mean, as the CPU's). */
    for (int i = 0; i < shape.ndim; i++) {
        if (shape.d[i] == 1)
            continue;
        if ((mask >> i) & 1u)
            push_dim(&p.nr, p.rd, p.rs, shape.d[i], st[i]);
        else
            push_dim(&p.nk, p.kd, p.ks, shape.d[i], st[i]);
    }
    return cuda_reduce_sum(x, xdt, &p, scale, out, odt);
}

/* ------------------------------------------------------------- softmax */

/* One block per [len] slice of [outer, len, inner]; element d of row r is
 * at (r / inner) * len * inner + d * inner + r % inner. */
__global__ void k_softmax(const void *x, int xdt, void *y, int ydt, int64_t rows, int64_t len, int64_t inner,
                          bool log_out)
{
    __shared__ double dscr[32];
    __shared__ float fscr[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / inner) * len * inner + r % inner;
        float m = -INFINITY;
        for (int64_t d = threadIdx.x; d < len; d += blockDim.x)
            m = nan_max(m, ld_f32(x, xdt, base + d * inner));
        m = block_max(m, fscr);
        double s = 0;
        for (int64_t d = threadIdx.x; d < len; d += blockDim.x)
            s += (double)expf(ld_f32(x, xdt, base + d * inner) - m);
        s = block_sum(s, dscr);
        float ls = (float)log(s);
        for (int64_t d = threadIdx.x; d < len; d += blockDim.x) {
            float v = ld_f32(x, xdt, base + d * inner);
            float o = log_out ? (v - m) - ls : (float)((double)expf(v - m) / s);
            st_f32(y, ydt, base + d * inner, o);
        }
    }
}

__global__ void k_softmax_backward(const void *g, int gdt, const void *y, int ydt, void *gx, int gxdt,
                                   int64_t rows, int64_t len, int64_t inner, bool log_out)
{
    __shared__ double dscr[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = (r / inner) * len * inner + r % inner;
        double s = 0;
        for (int64_t d = threadIdx.x; d < len; d += blockDim.x) {
            int64_t k = base + d * inner;
            float gv = ld_f32(g, gdt, k);
            s += log_out ? (double)gv : (double)gv * (double)ld_f32(y, ydt, k);
        }
        s = block_sum(s, dscr);
        for (int64_t d = threadIdx.x; d < len; d += blockDim.x) {
            int64_t k = base + d * inner;
            float gv = ld_f32(g, gdt, k), yv = ld_f32(y, ydt, k);
            st_f32(gx, gxdt, k, log_out ? gv - expf(yv) * (float)s : yv * (gv - (float)s));
        }
    }
}

static unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 65535 * 16 ? (rows > 0 ? rows : 1) : 65535 * 16); }

static int row_threads(int64_t len) { return len >= 1024 ? 512 : len > 64 ? 128 : 32; }

extern "C" amp_status cuda_softmax(const void *x, amp_dtype xdt, void *y, amp_dtype ydt, int64_t outer, int64_t len,
                                   int64_t inner, bool log)
{
    int64_t rows = outer * inner;
    if (rows <= 0 || len <= 0)
        return AMP_OK;
    k_softmax<<<row_blocks(rows), row_threads(len), 0, cuda_stream()>>>(x, xdt, y, ydt, rows, len, inner, log);
    return cuda_launched("softmax kernel");
}

extern "C" amp_status cuda_softmax_backward(const void *g, amp_dtype gdt, const void *y, amp_dtype ydt, void *gx,
                                            amp_dtype gxdt, int64_t outer, int64_t len, int64_t inner, bool log)
{
    int64_t rows = outer * inner;
    if (rows <= 0 || len <= 0)
        return AMP_OK;
    k_softmax_backward<<<row_blocks(rows), row_threads(len), 0, cuda_stream()>>>(g, gdt, y, ydt, gx, gxdt, rows,
                                                                                len, inner, log);
    return cuda_launched("softmax backward kernel");
}

/* ------------------------------------------------------- cross-entropy */

/* Per row: max, log-sum-exp, and the row's loss and whether it counts. */
__global__ void k_xent_rows(const void *x, int xdt, const void *labels, int ldt, int64_t N, int64_t C,
                            long long ignore, float *stats, double *loss, double *valid)
{
    __shared__ double dscr[32];
    __shared__ float fscr[32];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        int64_t base = i * C;
        float m = -INFINITY;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            m = nan_max(m, ld_f32(x, xdt, base + c));
        m = block_max(m, fscr);
        double s = 0;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            s += (double)expf(ld_f32(x, xdt, base + c) - m);
        s = block_sum(s, dscr);
        if (threadIdx.x == 0) {
            float ls = (float)log(s);
            if (stats) {
                stats[2 * i] = m;
                stats[2 * i + 1] = ls;
            }
            long long y = ld_i64(labels, ldt, i);
            if (y == ignore) {
                loss[i] = 0.0;
                valid[i] = 0.0;
            } else if (y < 0 || y >= C) {
                loss[i] = __longlong_as_double(0x7ff8000000000000LL); /* NaN */
                valid[i] = 1.0;
            } else {
                loss[i] = (double)ls - ((double)ld_f32(x, xdt, base + y) - (double)m);
                valid[i] = 1.0;
            }
        }
    }
}

/* One block: the mean over counted rows. */
__global__ void k_xent_mean(const double *loss, const double *valid, int64_t N, float *count, void *out, int odt)
{
    __shared__ double dscr[32];
    double t = 0, c = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        t += loss[i];
        c += valid[i];
    }
    t = block_sum(t, dscr);
    c = block_sum(c, dscr);
    if (threadIdx.x == 0) {
        st_f32(out, odt, 0, (float)(t / c));
        *count = (float)c;
    }
}

extern "C" amp_status cuda_cross_entropy(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt,
                                         int64_t N, int64_t C, int64_t ignore, float *stats, float *count, void *out,
                                         amp_dtype odt)
{
    double *scratch = (double *)cuda_malloc((size_t)(N > 0 ? 2 * N : 2) * sizeof(double));
    if (!scratch)
        return amp_last_status();
    cudaStream_t s = cuda_stream();
    amp_status st = AMP_OK;
    if (N > 0) {
        k_xent_rows<<<row_blocks(N), row_threads(C), 0, s>>>(x, xdt, labels, ldt, N, C, ignore, stats, scratch,
                                                             scratch + N);
        st = cuda_launched("cross_entropy kernel");
    }
    if (st == AMP_OK) {
        k_xent_mean<<<1, 1024, 0, s>>>(scratch, scratch + N, N, count, out, odt);
        st = cuda_launched("cross_entropy mean kernel");
    }
    cuda_free(scratch); /* stream-ordered: the kernels above run first */
    return st;
}

__global__ void k_xent_backward(const void *x, int xdt, const void *labels, int ldt, int64_t N, int64_t C,
                                long long ignore, const float *stats, const float *count, const void *g, int gdt,
                                void *gx, int gxdt)
{
    const float scale = ld_f32(g, gdt, 0) / *count;
    int64_t n = N * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / C, c = e % C;
        long long y = ld_i64(labels, ldt, i);
        float v = 0.0f;
        if (y != ignore) {
            float m = stats[2 * i], ls = stats[2 * i + 1];
            v = (expf((ld_f32(x, xdt, e) - m) - ls) - (c == y ? 1.0f : 0.0f)) * scale;
        }
        st_f32(gx, gxdt, e, v);
    }
}

extern "C" amp_status cuda_cross_entropy_backward(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt,
                                                  int64_t N, int64_t C, int64_t ignore, const float *stats,
                                                  const float *count, const void *g, amp_dtype gdt, void *gx,
                                                  amp_dtype gxdt)
{
    if (N * C <= 0)
        return AMP_OK;
    k_xent_backward<<<cuda_blocks(N * C), CUDA_THREADS, 0, cuda_stream()>>>(x, xdt, labels, ldt, N, C, ignore, stats,
                                                                           count, g, gdt, gx, gxdt);
    return cuda_launched("cross_entropy backward kernel");
}

/* -------------------------------------------------------------- argmax */

__global__ void k_argmax(const void *x, int dt, int64_t outer, int64_t len, int64_t inner, long long *out)
{
    int64_t m = outer * inner;
    bool is_float = dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < m; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = (j / inner) * len * inner + j % inner;
        long long best = 0;
        if (is_float) {
            float bv = ld_f32(x, dt, base);
            for (int64_t k = 1; k < len && bv == bv; k++) {
                float v = ld_f32(x, dt, base + k * inner);
                if (v > bv || v != v) {
                    bv = v;
                    best = k;
                }
            }
        } else {
            long long bv = ld_i64(x, dt, base);
            for (int64_t k = 1; k < len; k++) {
                long long v = ld_i64(x, dt, base + k * inner);
                if (v > bv) {
                    bv = v;
                    best = k;
                }
            }
        }
        out[j] = best;
    }
}

extern "C" amp_status cuda_argmax(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner,
                                  int64_t *out)
{
    if (outer * inner <= 0)
        return AMP_OK;
    k_argmax<<<cuda_blocks(outer * inner), CUDA_THREADS, 0, cuda_stream()>>>(x, dt, outer, len, inner,
                                                                            (long long *)out);
    return cuda_launched("argmax kernel");
}
