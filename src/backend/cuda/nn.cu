/*
 * nn.cu - the layer kernels: layer_norm (forward, and backward for the
 * input, weight and bias), embedding (gather and scatter-add), and the
 * row-wise pieces of attention around its cuBLASLt GEMMs (masked softmax
 * with log-sum-exp, rebuilding P from it, and dS).
 *
 * The formulas and orders of operations are those of the CPU backend's
 * norm.c and embedding.c (src/backend/cpu) and of src/ops/attention.c;
 * row sums are in double.
 */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>

static unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 65535 * 16 ? (rows > 0 ? rows : 1) : 65535 * 16); }
static int row_threads(int64_t len) { return len >= 1024 ? 512 : len > 64 ? 128 : 32; }

/* ---------------------------------------------------------- layer_norm */

__global__ void k_layer_norm(const void *x, int xdt, const void *w, int wdt, const void *b, int bdt, int64_t M,
                             int64_t N, double eps, void *y, int ydt, float *mean, float *rstd)
{
    __shared__ double dscr[32];
    for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
        const int64_t base = r * N;
        double s = 0;
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x)
            s += (double)ld_f32(x, xdt, base + j);
        s = block_sum(s, dscr);
        const float m = (float)(s / (double)N);
        double q = 0;
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            float d = ld_f32(x, xdt, base + j) - m;
            q += (double)(d * d);
        }
        q = block_sum(q, dscr);
        const float is = (float)(1.0 / sqrt(q / (double)N + eps));
        if (threadIdx.x == 0 && mean) {
            mean[r] = m;
            rstd[r] = is;
        }
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            float h = (ld_f32(x, xdt, base + j) - m) * is;
            if (w)
                h *= ld_f32(w, wdt, j);
            if (b)
                h += ld_f32(b, bdt, j);
            st_f32(y, ydt, base + j, h);
        }
    }
}

extern "C" amp_status cuda_layer_norm(const void *x, amp_dtype xdt, const void *w, amp_dtype wdt, const void *b,
                                      amp_dtype bdt, int64_t M, int64_t N, double eps, void *y, amp_dtype ydt,
                                      float *mean, float *rstd)
{
    if (M <= 0)
        return AMP_OK;
    k_layer_norm<<<row_blocks(M), row_threads(N), 0, cuda_stream()>>>(x, xdt, w, wdt, b, bdt, M, N, eps, y, ydt,
                                                                      mean, rstd);
    return cuda_launched("layer_norm kernel");
}

/* dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w. */
__global__ void k_layer_norm_dx(const void *g, int gdt, const void *x, int xdt, const void *w, int wdt,
                                const float *mean, const float *rstd, int64_t M, int64_t N, void *dx, int dxdt)
{
    __shared__ double dscr[32];
    for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
        const int64_t base = r * N;
        const float mr = mean[r], rr = rstd[r];
        double s1 = 0, s2 = 0;
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            float gv = ld_f32(g, gdt, base + j);
            float gw = w ? gv * ld_f32(w, wdt, j) : gv;
            s1 += gw;
            s2 += (double)(gw * ((ld_f32(x, xdt, base + j) - mr) * rr));
        }
        s1 = block_sum(s1, dscr);
        s2 = block_sum(s2, dscr);
        const float m1 = (float)(s1 / (double)N), m2 = (float)(s2 / (double)N);
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            float gv = ld_f32(g, gdt, base + j);
            float gw = w ? gv * ld_f32(w, wdt, j) : gv;
            float xh = (ld_f32(x, xdt, base + j) - mr) * rr;
            st_f32(dx, dxdt, base + j, rr * (gw - m1 - xh * m2));
        }
    }
}

/* dw[j] = sum_r g[r,j] * xhat[r,j], db[j] = sum_r g[r,j]: one thread per
 * column, so a warp reads 32 neighbouring elements of each row. */
__global__ void k_layer_norm_dwb(const void *g, int gdt, const void *x, int xdt, const float *mean,
                                 const float *rstd, int64_t M, int64_t N, void *dw, int dwdt, void *db, int dbdt)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < N; j += (int64_t)gridDim.x * blockDim.x) {
        double aw = 0, ab = 0;
        for (int64_t r = 0; r < M; r++) {
            float gv = ld_f32(g, gdt, r * N + j);
            aw += (double)(gv * ((ld_f32(x, xdt, r * N + j) - mean[r]) * rstd[r]));
            ab += gv;
        }
        if (dw)
            st_f32(dw, dwdt, j, (float)aw);
        if (db)
            st_f32(db, dbdt, j, (float)ab);
    }
}

extern "C" amp_status cuda_layer_norm_backward(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt,
                                               const void *w, amp_dtype wdt, const float *mean, const float *rstd,
                                               int64_t M, int64_t N, void *dx, amp_dtype dxdt, void *dw,
                                               amp_dtype dwdt, void *db, amp_dtype dbdt)
{
    if (M <= 0 || N <= 0)
        return AMP_OK;
    cudaStream_t s = cuda_stream();
    if (dx) {
        k_layer_norm_dx<<<row_blocks(M), row_threads(N), 0, s>>>(g, gdt, x, xdt, w, wdt, mean, rstd, M, N, dx, dxdt);
        amp_status st = cuda_launched("layer_norm backward kernel");
        if (st != AMP_OK)
            return st;
    }
    if (dw || db) {
        k_layer_norm_dwb<<<cuda_blocks(N), CUDA_THREADS, 0, s>>>(g, gdt, x, xdt, mean, rstd, M, N, dw, dwdt, db,
                                                                  dbdt);
        return cuda_launched("layer_norm weight gradient kernel");
    }
    return AMP_OK;
}

/* ----------------------------------------------------------- embedding */

__global__ void k_embedding(const void *w, int wdt, const void *idx, int idt, int64_t nidx, int64_t V, int64_t D,
                            void *out)
{
    int64_t n = nidx * D;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / D, j = e % D;
        long long v = ld_i64(idx, idt, i);
        if (v < 0 || v >= V)
            st_f32(out, wdt, e, __int_as_float(0x7fc00000)); /* NaN */
        else if (wdt == AMP_F32)
            ((float *)out)[e] = ((const float *)w)[v * D + j];
        else
            ((uint16_t *)out)[e] = ((const uint16_t *)w)[v * D + j];
    }
}

extern "C" amp_status cuda_embedding(const void *w, amp_dtype wdt, const void *idx, amp_dtype idt, int64_t nidx,
                                     int64_t V, int64_t D, void *out)
{
    if (nidx * D <= 0)
        return AMP_OK;
    k_embedding<<<cuda_blocks(nidx * D), CUDA_THREADS, 0, cuda_stream()>>>(w, wdt, idx, idt, nidx, V, D, out);
    return cuda_launched("embedding kernel");
}

__global__ void k_embedding_backward(const void *g, int gdt, const void *idx, int idt, int64_t nidx, int64_t V,
                                     int64_t D, float *dw)
{
    int64_t n = nidx * D;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / D, j = e % D;
        long long v = ld_i64(idx, idt, i);
        if (v >= 0 && v < V)
            atomicAdd(dw + v * D + j, ld_f32(g, gdt, e));
    }
}

extern "C" amp_status cuda_embedding_backward(const void *g, amp_dtype gdt, const void *idx, amp_dtype idt,
                                              int64_t nidx, int64_t V, int64_t D, float *dw)
{
    if (nidx * D <= 0)
        return AMP_OK;
    k_embedding_backward<<<cuda_blocks(nidx * D), CUDA_THREADS, 0, cuda_stream()>>>(g, gdt, idx, idt, nidx, V, D,
                                                                                   dw);
    return cuda_launched("embedding backward kernel");
}

/* ----------------------------------------------------------- attention */

/* One block per row (h, i) of S [heads, T, Tk]. */
__global__ void k_attn_softmax(const float *S, int64_t rows, int64_t T, int64_t Tk, bool causal, void *P, int pdt,
                               float *lse)
{
    __shared__ double dscr[32];
    __shared__ float fscr[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t i = r % T, len = causal ? i + 1 + (Tk - T) : Tk, base = r * Tk;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            m = nan_max(m, S[base + j]);
        m = block_max(m, fscr);
        double s = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            s += (double)expf(S[base + j] - m);
        s = block_sum(s, dscr);
        const float inv = (float)(1.0 / s);
        for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x)
            st_f32(P, pdt, base + j, j < len ? expf(S[base + j] - m) * inv : 0.0f);
        if (threadIdx.x == 0 && lse)
            lse[r] = m + (float)log(s);
    }
}

extern "C" amp_status cuda_attn_softmax(const float *S, int64_t heads, int64_t T, int64_t Tk, bool causal, void *P,
                                        amp_dtype pdt, float *lse)
{
    int64_t rows = heads * T;
    if (rows <= 0)
        return AMP_OK;
    k_attn_softmax<<<row_blocks(rows), row_threads(Tk), 0, cuda_stream()>>>(S, rows, T, Tk, causal, P, pdt, lse);
    return cuda_launched("attention softmax kernel");
}

__global__ void k_attn_probs(float *S, int64_t rows, int64_t T, bool causal, const float *lse, void *Pc, int pdt)
{
    int64_t n = rows * T;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / T, j = e % T, i = r % T;
        float p = (!causal || j <= i) ? expf(S[e] - lse[r]) : 0.0f;
        S[e] = p;
        if (Pc)
            st_f32(Pc, pdt, e, p);
    }
}

extern "C" amp_status cuda_attn_probs(float *S, int64_t heads, int64_t T, bool causal, const float *lse, void *Pc,
                                      amp_dtype pdt)
{
    int64_t n = heads * T * T;
    if (n <= 0)
        return AMP_OK;
    k_attn_probs<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(S, heads * T, T, causal, lse, Pc, pdt);
    return cuda_launched("attention probabilities kernel");
}

__global__ void k_attn_dscores(const float *P, float *dP, int64_t rows, int64_t T, bool causal, float scale)
{
    __shared__ double dscr[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t i = r % T, len = causal ? i + 1 : T, base = r * T;
        double dot = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            dot += (double)P[base + j] * dP[base + j];
        dot = block_sum(dot, dscr);
        for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
            dP[base + j] = j < len ? scale * P[base + j] * (dP[base + j] - (float)dot) : 0.0f;
    }
}

extern "C" amp_status cuda_attn_dscores(const float *P, float *dP, int64_t heads, int64_t T, bool causal, float scale)
{
    int64_t rows = heads * T;
    if (rows <= 0)
        return AMP_OK;
    k_attn_dscores<<<row_blocks(rows), row_threads(T), 0, cuda_stream()>>>(P, dP, rows, T, causal, scale);
    return cuda_launched("attention dS kernel");
}
