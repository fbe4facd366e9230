/*
 * cuda_common.cuh - what the backend's .cu files share (C++ only): the
 * stream, error reporting, launch sizes, and element loads / stores in any
 * dtype that compute in f32 and round once (round to nearest even, as the
 * CPU's conversions).
 */
#ifndef AMPC_CUDA_COMMON_CUH
#define AMPC_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

extern "C" {
#include "base/base.h"
}
#include "backend/cuda/cuda_backend.h"

/* The stream every kernel, copy and GEMM is queued on. */
cudaStream_t cuda_stream(void);

/* Every cudaMemcpyAsync of the backend: queued on the stream, counted for
 * amp_cuda_get_sync_stats; a copy into host memory waits for it (runtime.cu
 * says what counts). Nothing else in the backend calls cudaMemcpy* or
 * cudaStreamSynchronize. */
amp_status cuda_memcpy(void *dst, const void *src, size_t nbytes, cudaMemcpyKind kind, const char *what);

/* AMP_OK, or the error set from e naming what failed. */
amp_status cuda_check(cudaError_t e, const char *what);
/* Counts one kernel launch (cuda_launch_count, for bench_cuda). */
void cuda_note_launch(void);
/* Checks the last launch (bad configuration, no kernel image ...) and
 * counts it: every kernel launch of the backend is followed by this. */
static inline amp_status cuda_launched(const char *what)
{
    cuda_note_launch();
    return cuda_check(cudaGetLastError(), what);
}

/* Threads per block, and blocks for n elements (grid-stride loops cover
 * the rest). */
enum { CUDA_THREADS = 256 };
static inline unsigned cuda_blocks(int64_t n)
{
    int64_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b > 65535 * 16 ? 65535 * 16 : b);
}

__device__ __forceinline__ float ld_f32(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case AMP_F32: return ((const float *)p)[i];
    case AMP_F16: return __half2float(((const __half *)p)[i]);
    case AMP_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case AMP_I32: return (float)((const int32_t *)p)[i];
    case AMP_I64: return (float)((const long long *)p)[i];
    default: return 0.0f;
    }
}

/* Float to integer as the CPU's amp_convert: truncate toward zero, NaN to
 * 0, saturate at the ends. */
__device__ __forceinline__ long long to_int(double v, int dt)
{
    double lo = dt == AMP_I32 ? -2147483648.0 : -9223372036854775808.0;
    double hi = dt == AMP_I32 ? 2147483647.0 : 9223372036854775807.0;
    if (v != v)
        return 0;
    if (v <= lo)
        return dt == AMP_I32 ? (long long)INT32_MIN : (long long)INT64_MIN;
    if (v >= hi)
        return dt == AMP_I32 ? (long long)INT32_MAX : (long long)INT64_MAX;
    return (long long)v;
}

__device__ __forceinline__ void st_f32(void *p, int dt, int64_t i, float v)
{
    switch (dt) {
    case AMP_F32: ((float *)p)[i] = v; break;
    case AMP_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case AMP_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case AMP_I32: ((int32_t *)p)[i] = (int32_t)to_int((double)v, AMP_I32); break;
    case AMP_I64: ((long long *)p)[i] = to_int((double)v, AMP_I64); break;
    default: break;
    }
}

__device__ __forceinline__ long long ld_i64(const void *p, int dt, int64_t i)
{
    return dt == AMP_I32 ? (long long)((const int32_t *)p)[i] : ((const long long *)p)[i];
}

/* Block-wide reductions (blockDim.x a multiple of 32, at most 1024). Every
 * thread gets the result. scratch: 32 slots of shared memory. */
__device__ __forceinline__ double block_sum(double v, double *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* scratch may still be read by an earlier reduction */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    double t = 0;
    for (int w = 0; w < nw; w++)
        t += scratch[w];
    return t;
}

/* The maximum, where a NaN wins (a NaN makes a softmax row NaN, as on the
 * CPU). */
__device__ __forceinline__ float nan_max(float a, float b) { return (b > a || b != b) && a == a ? b : a; }

__device__ __forceinline__ float block_max(float v, float *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v = nan_max(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    float t = scratch[0];
    for (int w = 1; w < nw; w++)
        t = nan_max(t, scratch[w]);
    return t;
}

#endif
