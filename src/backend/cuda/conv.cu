/*
 * conv.cu - the element kernels around conv2d's GEMMs and the two pools.
 *
 * conv2d runs as implicit GEMM (conv.c beside this file drives it): im2col
 * lowers a group of images to a column matrix, cuBLASLt multiplies, and
 * cuda_conv_output moves the f32 product into y's [N, O, Ho, Wo] layout,
 * adding the bias and rounding once. Backward goes the other way with
 * col2im, which gathers: one thread per input element sums, in f32 and in
 * the CPU's order (kernel row, then column), the column entries that
 * element was copied to. No atomics, so the result does not depend on
 * scheduling, and every element is written (no zeroing pass).
 *
 * The pools follow the CPU backend's (backend/cpu/pool.c) element for element: one thread per
 * output computes its clipped window in row-major order (max: first
 * maximum wins, a NaN wins over numbers; avg: sum from 0, times 1/(k*k)),
 * and backward gathers per input element over the windows that hold it,
 * in output order, as the CPU's scatter adds them. __fadd_rn / __fmul_rn
 * keep nvcc from fusing those into FMAs, so f32 results match the CPU's
 * bit for bit.
 */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>

/* ------------------------------------------------------------- im2col */

/* cols[r][q], r = (c*kh + i)*kw + j, q = img*L + oy*Wo + ox: the element
 * x[img][c][oy*s - p + i][ox*s - p + j], 0 off the image. T: the raw
 * element (the copy is the same for every dtype of a size). */
template <typename T>
__global__ void k_im2col(const T *__restrict__ x, be_conv_geom g, int64_t cnt, T *__restrict__ cols)
{
    const int64_t L = g.Ho * g.Wo, ld = cnt * L, total = g.C * g.kh * g.kw * ld;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / ld, q = e % ld;
        const int64_t img = q / L, l = q % L, oy = l / g.Wo, ox = l % g.Wo;
        const int64_t j = r % g.kw, i = (r / g.kw) % g.kh, c = r / (g.kw * g.kh);
        const int64_t iy = oy * g.stride - g.pad + i, ix = ox * g.stride - g.pad + j;
        T v = 0;
        if (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W)
            v = x[((img * g.C + c) * g.H + iy) * g.W + ix];
        cols[e] = v;
    }
}

extern "C" amp_status cuda_im2col(const void *x, amp_dtype dt, const be_conv_geom *g, int64_t cnt, void *cols)
{
    const int64_t n = g->C * g->kh * g->kw * cnt * g->Ho * g->Wo;
    if (n <= 0)
        return AMP_OK;
    const size_t es = amp_dtype_size(dt);
    if (es == 4)
        k_im2col<uint32_t><<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>((const uint32_t *)x, *g, cnt,
                                                                               (uint32_t *)cols);
    else if (es == 2)
        k_im2col<uint16_t><<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>((const uint16_t *)x, *g, cnt,
                                                                               (uint16_t *)cols);
    else
        return amp_set_error(AMP_ERR_DTYPE, "cuda im2col: dtype %s", amp_dtype_name(dt));
    return cuda_launched("im2col kernel");
}

/* ------------------------------------------------------ GEMM to output */

__global__ void k_conv_output(const float *__restrict__ acc, int64_t O, int64_t cnt, int64_t L, const void *bias,
                              int bdt, void *y, int ydt)
{
    const int64_t total = cnt * O * L, ld = cnt * L;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t img = e / (O * L), o = (e / L) % O, l = e % L;
        float v = acc[o * ld + img * L + l];
        if (bias)
            v = __fadd_rn(v, ld_f32(bias, bdt, o));
        st_f32(y, ydt, e, v);
    }
}

extern "C" amp_status cuda_conv_output(const float *acc, int64_t O, int64_t cnt, int64_t L, const void *bias,
                                       amp_dtype bdt, void *y, amp_dtype ydt)
{
    const int64_t n = cnt * O * L;
    if (n <= 0)
        return AMP_OK;
    k_conv_output<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(acc, O, cnt, L, bias, bdt, y, ydt);
    return cuda_launched("conv2d output kernel");
}

/* ------------------------------------------------------------- col2im */

/* The output index along one axis that tap t reads input position v from,
 * or -1 when no output does: o * s - p + t == v, 0 <= o < n. */
__device__ __forceinline__ int64_t tap_source(int64_t v, int64_t t, int64_t s, int64_t p, int64_t n)
{
    const int64_t u = v + p - t;
    if (u < 0 || u % s != 0)
        return -1;
    const int64_t o = u / s;
    return o < n ? o : -1;
}

__global__ void k_col2im(const float *__restrict__ dcols, be_conv_geom g, int64_t cnt, void *dx, int dxdt)
{
    const int64_t hw = g.H * g.W, chw = g.C * hw, total = cnt * chw;
    const int64_t L = g.Ho * g.Wo, ld = cnt * L;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t img = e / chw, c = (e / hw) % g.C, iy = (e / g.W) % g.H, ix = e % g.W;
        const float *base = dcols + c * g.kh * g.kw * ld + img * L;
        float acc = 0.0f;
        for (int64_t i = 0; i < g.kh; i++) {
            const int64_t oy = tap_source(iy, i, g.stride, g.pad, g.Ho);
            if (oy < 0)
                continue;
            for (int64_t j = 0; j < g.kw; j++) {
                const int64_t ox = tap_source(ix, j, g.stride, g.pad, g.Wo);
                if (ox >= 0)
                    acc = __fadd_rn(acc, base[(i * g.kw + j) * ld + oy * g.Wo + ox]);
            }
        }
        st_f32(dx, dxdt, e, acc);
    }
}

extern "C" amp_status cuda_col2im(const float *dcols, const be_conv_geom *g, int64_t cnt, void *dx, amp_dtype dxdt)
{
    const int64_t n = cnt * g->C * g->H * g->W;
    if (n <= 0)
        return AMP_OK;
    k_col2im<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(dcols, *g, cnt, dx, dxdt);
    return cuda_launched("col2im kernel");
}

/* -------------------------------------------------------------- pools */

__global__ void k_pool2d(const void *x, int dt, be_pool_geom g, bool is_max, float inv_area, void *y, int32_t *idx)
{
    const int64_t per = g.Ho * g.Wo, total = g.planes * per, hw = g.H * g.W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pl = e / per, o = e % per, oy = o / g.Wo, ox = o % g.Wo;
        const int64_t ys = oy * g.stride - g.pad, xs = ox * g.stride - g.pad;
        const int64_t y0 = ys < 0 ? 0 : ys, x0 = xs < 0 ? 0 : xs;
        const int64_t y1 = ys + g.k < g.H ? ys + g.k : g.H, x1 = xs + g.k < g.W ? xs + g.k : g.W;
        const int64_t base = pl * hw;
        if (is_max) {
            float best = -INFINITY;
            int64_t arg = y0 * g.W + x0;
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++) {
                    const float v = ld_f32(x, dt, base + iy * g.W + ix);
                    if (v > best || v != v) { /* pool.c's MAX_STEP */
                        best = v;
                        arg = iy * g.W + ix;
                    }
                }
            st_f32(y, dt, e, best);
            if (idx)
                idx[e] = (int32_t)arg;
        } else {
            float sum = 0.0f;
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++)
                    sum = __fadd_rn(sum, ld_f32(x, dt, base + iy * g.W + ix));
            st_f32(y, dt, e, __fmul_rn(sum, inv_area));
        }
    }
}

/* 1/(k*k) as the CPU computes it: one f32 division. */
static float inverse_area(const be_pool_geom *g) { return 1.0f / (float)(g->k * g->k); }

extern "C" amp_status cuda_pool2d(const be_pool_geom *g, bool is_max, const void *x, amp_dtype dt, void *y,
                                  int32_t *idx)
{
    const int64_t n = g->planes * g->Ho * g->Wo;
    if (n <= 0)
        return AMP_OK;
    k_pool2d<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(x, dt, *g, is_max, inverse_area(g), y,
                                                                 is_max ? idx : NULL);
    return cuda_launched(is_max ? "max_pool2d kernel" : "avg_pool2d kernel");
}

/* The outputs along one axis whose window [o*s - p, o*s - p + k) holds
 * input position v: [*lo, *hi], empty when *lo > *hi. */
__device__ __forceinline__ void windows_of(int64_t v, int64_t k, int64_t s, int64_t p, int64_t n, int64_t *lo,
                                           int64_t *hi)
{
    const int64_t t = v + p - k + 1; /* need o*s >= t and o*s <= v + p */
    *lo = t <= 0 ? 0 : (t + s - 1) / s;
    const int64_t h = (v + p) / s;
    *hi = h < n - 1 ? h : n - 1;
}

__global__ void k_pool2d_backward(const void *gy, int gdt, const int32_t *idx, be_pool_geom g, float inv_area,
                                  void *dx, int dxdt)
{
    const int64_t hw = g.H * g.W, per = g.Ho * g.Wo, total = g.planes * hw;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pl = e / hw, q = e % hw, iy = q / g.W, ix = q % g.W;
        int64_t oy0, oy1, ox0, ox1;
        windows_of(iy, g.k, g.stride, g.pad, g.Ho, &oy0, &oy1);
        windows_of(ix, g.k, g.stride, g.pad, g.Wo, &ox0, &ox1);
        const int64_t base = pl * per;
        float acc = 0.0f;
        for (int64_t oy = oy0; oy <= oy1; oy++)
            for (int64_t ox = ox0; ox <= ox1; ox++) {
                const int64_t o = base + oy * g.Wo + ox;
                if (idx) {
                    if (idx[o] == (int32_t)q)
                        acc = __fadd_rn(acc, ld_f32(gy, gdt, o));
                } else {
                    acc = __fadd_rn(acc, __fmul_rn(ld_f32(gy, gdt, o), inv_area));
                }
            }
        st_f32(dx, dxdt, e, acc);
    }
}

extern "C" amp_status cuda_pool2d_backward(const be_pool_geom *g, const void *gy, amp_dtype gdt, const int32_t *idx,
                                           void *dx, amp_dtype dxdt)
{
    const int64_t n = g->planes * g->H * g->W;
    if (n <= 0)
        return AMP_OK;
    k_pool2d_backward<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(gy, gdt, idx, *g, inverse_area(g), dx,
                                                                          dxdt);
    return cuda_launched(idx ? "max_pool2d backward kernel" : "avg_pool2d backward kernel");
}
