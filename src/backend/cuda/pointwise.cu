/*
 * pointwise.cu - kernels that work element by element: dtype conversion,
 * fills, iota, the elementwise map with broadcasting (every pointwise
 * formula of backend/pointwise.h, forward and backward), in-place accumulation,
 * permute, strided slice copies and dropout.
 *
 * One kernel serves every formula: the formula and the dtypes are kernel
 * arguments, the same for every thread (uniform branches cost little), so
 * the backend compiles quickly and a new formula in pointwise.h needs
 * nothing here. CUDA's expf / tanhf / erfcf may differ from glibc's by an
 * ulp or two, which the tests' tolerances allow.
 */
#include "backend/cuda/cuda_common.cuh"
#include "base/philox.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ convert */

/* One element from src[i] (sdt) to dst[j] (ddt), as amp_convert. */
__device__ __forceinline__ void convert_elem(const void *src, int sdt, int64_t i, void *dst, int ddt, int64_t j)
{
    bool sf = sdt == AMP_F32 || sdt == AMP_F16 || sdt == AMP_BF16;
    bool df = ddt == AMP_F32 || ddt == AMP_F16 || ddt == AMP_BF16;
    if (sf && df) {
        st_f32(dst, ddt, j, ld_f32(src, sdt, i));
    } else if (sdt == AMP_I64 && ddt == AMP_I32) {
        ((int32_t *)dst)[j] = (int32_t)((const long long *)src)[i];
    } else if (sdt == AMP_I32 && ddt == AMP_I64) {
        ((long long *)dst)[j] = ((const int32_t *)src)[i];
    } else if (sdt == ddt) {
        if (sdt == AMP_I32)
            ((int32_t *)dst)[j] = ((const int32_t *)src)[i];
        else
            ((long long *)dst)[j] = ((const long long *)src)[i];
    } else if (sdt == AMP_I64) { /* to a float: one rounding, through float */
        st_f32(dst, ddt, j, (float)((const long long *)src)[i]);
    } else if (sdt == AMP_I32) { /* to a float: exact through double */
        double v = (double)((const int32_t *)src)[i];
        st_f32(dst, ddt, j, (float)v);
    } else { /* a float to an integer */
        double v = (double)ld_f32(src, sdt, i);
        if (ddt == AMP_I32)
            ((int32_t *)dst)[j] = (int32_t)to_int(v, AMP_I32);
        else
            ((long long *)dst)[j] = to_int(v, AMP_I64);
    }
}

__global__ void k_convert(const void *src, int sdt, void *dst, int ddt, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        convert_elem(src, sdt, i, dst, ddt, i);
}

extern "C" amp_status cuda_convert(const void *src, amp_dtype sdt, void *dst, amp_dtype ddt, int64_t n)
{
    if (n <= 0)
        return AMP_OK;
    if (sdt == ddt)
        return cuda_memcpy(dst, src, (size_t)n * amp_dtype_size(sdt), cudaMemcpyDeviceToDevice,
                           "cudaMemcpyAsync (device copy)");
    k_convert<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(src, sdt, dst, ddt, n);
    return cuda_launched("convert kernel");
}

/* --------------------------------------------------------------- fill */

template <typename T> __global__ void k_fill(T *dst, int64_t n, T v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

extern "C" amp_status cuda_fill_pattern(void *dst, int64_t n, const void *elem, size_t elem_size)
{
    if (n <= 0)
        return AMP_OK;
    unsigned b = cuda_blocks(n);
    cudaStream_t s = cuda_stream();
    if (elem_size == 2) {
        uint16_t v;
        memcpy(&v, elem, 2);
        k_fill<uint16_t><<<b, CUDA_THREADS, 0, s>>>((uint16_t *)dst, n, v);
    } else if (elem_size == 4) {
        uint32_t v;
        memcpy(&v, elem, 4);
        k_fill<uint32_t><<<b, CUDA_THREADS, 0, s>>>((uint32_t *)dst, n, v);
    } else if (elem_size == 8) {
        unsigned long long v;
        memcpy(&v, elem, 8);
        k_fill<unsigned long long><<<b, CUDA_THREADS, 0, s>>>((unsigned long long *)dst, n, v);
    } else {
        return amp_set_error(AMP_ERR_ARG, "cuda fill: element size %zu", elem_size);
    }
    return cuda_launched("fill kernel");
}

__global__ void k_iota(long long *dst, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = (long long)i;
}

extern "C" amp_status cuda_iota_i64(int64_t *dst, int64_t n)
{
    if (n <= 0)
        return AMP_OK;
    k_iota<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>((long long *)dst, n);
    return cuda_launched("iota kernel");
}

/* ----------------------------------------------------- elementwise map */

/* The kernel's operands, passed by value. */
struct ew_args {
    const void *in[CUDA_EW_MAX_IN];
    int idt[CUDA_EW_MAX_IN];
    int nin;
};

__global__ void k_ew(int op, void *out, int odt, int64_t n, ew_args a, be_pw_plan p, float s, bool flat)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[CUDA_EW_MAX_IN] = {0, 0, 0, 0};
        if (flat) {
            /* One merged dim: every operand is contiguous or one value. */
            for (int k = 0; k < a.nin; k++)
                off[k] = i * p.st[k][0];
        } else {
            int64_t r = i;
            for (int d = p.nd - 1; d >= 0; d--) {
                int64_t ix = r % p.d[d];
                r /= p.d[d];
                for (int k = 0; k < a.nin; k++)
                    off[k] += ix * p.st[k][d];
            }
        }
        float v[CUDA_EW_MAX_IN] = {0, 0, 0, 0};
        for (int k = 0; k < a.nin; k++)
            v[k] = ld_f32(a.in[k], a.idt[k], off[k]);
        st_f32(out, odt, i, pw_eval(op, v[0], v[1], v[2], s));
    }
}

extern "C" amp_status cuda_ew(amp_pw_op op, void *out, amp_dtype odt, int64_t n, int nin, const void *const *in,
                              const amp_dtype *idt, const be_pw_plan *plan, float s0)
{
    if (n <= 0)
        return AMP_OK;
    if (nin < 0 || nin > CUDA_EW_MAX_IN || plan->nd < 1 || plan->nd > CUDA_MAX_DIMS)
        return amp_set_error(AMP_ERR_ARG, "cuda elementwise: %d operands over %d dims", nin, plan->nd);
    ew_args a;
    memset(&a, 0, sizeof a);
    a.nin = nin;
    for (int k = 0; k < nin; k++) {
        a.in[k] = in[k];
        a.idt[k] = idt[k];
    }
    k_ew<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(op, out, odt, n, a, *plan, s0, plan->nd == 1);
    return cuda_launched("elementwise kernel");
}

__global__ void k_accumulate(void *dst, int ddt, const void *src, int sdt, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        st_f32(dst, ddt, i, ld_f32(dst, ddt, i) + ld_f32(src, sdt, i));
}

extern "C" amp_status cuda_accumulate(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n)
{
    if (n <= 0)
        return AMP_OK;
    k_accumulate<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(dst, ddt, src, sdt, n);
    return cuda_launched("accumulate kernel");
}

/* ------------------------------------------------------------ permute */

struct perm_args {
    int nd;
    int64_t od[CUDA_MAX_DIMS], ist[CUDA_MAX_DIMS];
};

template <typename T> __global__ void k_permute(const T *src, T *dst, int64_t n, perm_args p)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, off = 0;
        for (int d = p.nd - 1; d >= 0; d--) {
            off += (r % p.od[d]) * p.ist[d];
            r /= p.od[d];
        }
        dst[i] = src[off];
    }
}

extern "C" amp_status cuda_permute(const void *src, void *dst, size_t elem_size, int nd, const int64_t *od,
                                   const int64_t *ist)
{
    if (nd < 0 || nd > CUDA_MAX_DIMS)
        return amp_set_error(AMP_ERR_ARG, "cuda permute: %d dims", nd);
    perm_args p;
    memset(&p, 0, sizeof p);
    p.nd = nd;
    int64_t n = 1;
    for (int d = 0; d < nd; d++) {
        p.od[d] = od[d];
        p.ist[d] = ist[d];
        n *= od[d];
    }
    if (n <= 0)
        return AMP_OK;
    unsigned b = cuda_blocks(n);
    cudaStream_t s = cuda_stream();
    if (elem_size == 2)
        k_permute<uint16_t><<<b, CUDA_THREADS, 0, s>>>((const uint16_t *)src, (uint16_t *)dst, n, p);
    else if (elem_size == 4)
        k_permute<uint32_t><<<b, CUDA_THREADS, 0, s>>>((const uint32_t *)src, (uint32_t *)dst, n, p);
    else if (elem_size == 8)
        k_permute<unsigned long long>
            <<<b, CUDA_THREADS, 0, s>>>((const unsigned long long *)src, (unsigned long long *)dst, n, p);
    else
        return amp_set_error(AMP_ERR_ARG, "cuda permute: element size %zu", elem_size);
    return cuda_launched("permute kernel");
}

/* ------------------------------------------------------- slice copies */

__global__ void k_copy_2d(const void *src, int sdt, int64_t sld, int64_t soff, void *dst, int ddt, int64_t dld,
                          int64_t doff, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        convert_elem(src, sdt, r * sld + soff + c, dst, ddt, r * dld + doff + c);
    }
}

extern "C" amp_status cuda_copy_2d(const void *src, amp_dtype sdt, int64_t sld, int64_t soff, void *dst,
                                   amp_dtype ddt, int64_t dld, int64_t doff, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return AMP_OK;
    k_copy_2d<<<cuda_blocks(rows * cols), CUDA_THREADS, 0, cuda_stream()>>>(src, sdt, sld, soff, dst, ddt, dld,
                                                                           doff, rows, cols);
    return cuda_launched("slice copy kernel");
}

/* ------------------------------------------------------------ dropout */

/* One thread per group of four elements: one Philox call each. */
__global__ void k_dropout(const void *src, void *dst, int dt, int64_t n, float scale, uint32_t thresh,
                          uint64_t seed, uint64_t first)
{
    int64_t groups = (n + 3) / 4;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < groups;
         q += (int64_t)gridDim.x * blockDim.x) {
        uint32_t r[4];
        philox4x32(seed, 0, first + (uint64_t)q, r);
        for (int w = 0; w < 4 && q * 4 + w < n; w++) {
            int64_t j = q * 4 + w;
            float v = ld_f32(src, dt, j);
            st_f32(dst, dt, j, (r[w] >> 8) >= thresh ? v * scale : 0.0f);
        }
    }
}

extern "C" amp_status cuda_dropout(const void *src, void *dst, amp_dtype dt, int64_t n, double p, uint64_t seed,
                                   uint64_t first)
{
    if (n <= 0)
        return AMP_OK;
    const float scale = (float)(1.0 / (1.0 - p));
    const uint32_t thresh = (uint32_t)ceil(p * 16777216.0);
    k_dropout<<<cuda_blocks((n + 3) / 4), CUDA_THREADS, 0, cuda_stream()>>>(src, dst, dt, n, scale, thresh, seed,
                                                                           first);
    return cuda_launched("dropout kernel");
}
