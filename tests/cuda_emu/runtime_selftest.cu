/*
 * runtime_selftest.cu (cudaemu) - checks the emulated runtime itself: that
 * kernels compute what CUDA says (block reductions through warp shuffles
 * and __syncthreads, __syncthreads_or, grid-stride coverage), that fresh
 * device memory is NaN-filled, and that each misuse cudaemu promises to
 * catch is caught (counted through emu::take_misuses, so that this program
 * can provoke them and still exit 0), host access to device memory
 * included (it must fault); events (complete when recorded, timed by the
 * host clock). Built like the backend's .cu files, through
 * launch.sed, and run by CTest with the CUDA tests.
 */
#include "emu.h"

#include <cuda_runtime.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define EXPECT(cond, ...)                                                                                          \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            failures++;                                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                   \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fputc('\n', stderr);                                                                                   \
        }                                                                                                          \
    } while (0)

/* Exactly n misuses since the last call, and the sticky error they left. */
static void expect_misuses(unsigned long n, const char *what)
{
    unsigned long got = emu::take_misuses();
    EXPECT(got == n, "%s: %lu misuses reported, expected %lu", what, got, n);
    cudaError_t e = cudaGetLastError();
    EXPECT((n > 0) == (e != cudaSuccess), "%s: last error %s", what, cudaGetErrorName(e));
}

/* ------------------------------------------------------------- kernels */

__device__ __forceinline__ double warp_then_block_sum(double v)
{
    __shared__ double part[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    double t = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        t += part[w];
    return t;
}

/* out[b] = sum of (b * blockDim + t) over the block's threads; any[b] =
 * whether a thread of the block has t == b. */
__global__ void k_sums(double *out, int *any)
{
    const double s = warp_then_block_sum((double)(blockIdx.x * blockDim.x + threadIdx.x));
    const int a = __syncthreads_or(threadIdx.x == blockIdx.x);
    if (threadIdx.x == 0) {
        out[blockIdx.x] = s;
        any[blockIdx.x] = a;
    }
}

/* Every element once, whatever the grid. */
__global__ void k_count(int *hits, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        atomicAdd(hits + i, 1);
}

__global__ void k_write(float *p) { p[threadIdx.x] = 1.0f; }

/* Threads past `keep` exit before a barrier the others wait at. */
__global__ void k_divergent(float *p, int keep)
{
    if ((int)threadIdx.x >= keep)
        return;
    __syncthreads();
    p[threadIdx.x] = 2.0f;
}

/* Half of warp 1 waits at a shuffle the other half never reaches (they
 * wait at __syncthreads with warp 0): a deadlock. */
__global__ void k_deadlock(float *p)
{
    if (threadIdx.x < 48)
        __syncthreads();
    else
        p[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

/* A 48-thread block: the second warp has 16 lanes, and its lanes 8-15
 * shuffle from lanes 16-23, which do not exist. */
__global__ void k_missing_lane(float *p) { p[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 8); }

/* --------------------------------------------------------------- checks */

static void check_kernels(cudaStream_t s)
{
    const unsigned sizes[3] = {32, 256, 1024};
    for (unsigned bs : sizes) {
        enum { BLOCKS = 5 };
        double *d_out;
        int *d_any;
        EXPECT(cudaMalloc((void **)&d_out, BLOCKS * sizeof(double)) == cudaSuccess, "cudaMalloc");
        EXPECT(cudaMalloc((void **)&d_any, BLOCKS * sizeof(int)) == cudaSuccess, "cudaMalloc");
        k_sums<<<BLOCKS, bs, 0, s>>>(d_out, d_any);
        double out[BLOCKS];
        int any[BLOCKS];
        EXPECT(cudaMemcpyAsync(out, d_out, sizeof out, cudaMemcpyDeviceToHost, s) == cudaSuccess, "copy back");
        EXPECT(cudaMemcpyAsync(any, d_any, sizeof any, cudaMemcpyDeviceToHost, s) == cudaSuccess, "copy back");
        for (int b = 0; b < BLOCKS; b++) {
            const double lo = (double)b * bs, want = bs * lo + (double)bs * (bs - 1) / 2;
            EXPECT(out[b] == want, "block size %u, block %d: sum %.0f, expected %.0f", bs, b, out[b], want);
            EXPECT(any[b] == 1, "block size %u, block %d: __syncthreads_or %d", bs, b, any[b]);
        }
        cudaFree(d_out);
        cudaFree(d_any);
    }
    const long long n = 100003;
    int *d_hits;
    EXPECT(cudaMalloc((void **)&d_hits, n * sizeof(int)) == cudaSuccess, "cudaMalloc");
    int *hits = (int *)malloc(n * sizeof(int));
    /* Fresh device memory is 0xff bytes (NaN as a float, -1 as an int). */
    EXPECT(cudaMemcpyAsync(hits, d_hits, n * sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess, "copy");
    EXPECT(hits[0] == -1 && hits[n - 1] == -1, "fresh memory holds %d ... %d, expected 0xff bytes", hits[0],
           hits[n - 1]);
    const unsigned grids[3] = {1, 7, 1000};
    for (unsigned g : grids) {
        EXPECT(cudaMemsetAsync(d_hits, 0, n * sizeof(int), s) == cudaSuccess, "memset");
        k_count<<<g, 128, 0, s>>>(d_hits, n);
        EXPECT(cudaMemcpyAsync(hits, d_hits, n * sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess, "copy");
        long long wrong = 0;
        for (long long i = 0; i < n; i++)
            wrong += hits[i] != 1;
        EXPECT(wrong == 0, "grid %u: %lld elements not visited exactly once", g, wrong);
    }
    free(hits);
    cudaFree(d_hits);
    expect_misuses(0, "correct kernels");
}

static void check_misuses(cudaStream_t s)
{
    float *d, host[64];
    EXPECT(cudaMalloc((void **)&d, 64 * sizeof(float)) == cudaSuccess, "cudaMalloc");

    k_write<<<1, 32, 0, s>>>(host); /* a host pointer as an argument */
    expect_misuses(1, "host pointer in a kernel argument");

    EXPECT(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyHostToDevice, s) != cudaSuccess, "wrong direction");
    expect_misuses(1, "copy in the wrong direction");

    EXPECT(cudaMemcpyAsync(host, d, 65 * sizeof(float), cudaMemcpyDeviceToHost, s) != cudaSuccess, "overrun");
    expect_misuses(1, "copy past the end of an allocation");

    EXPECT(cudaFree(d + 1) != cudaSuccess, "free of an inner pointer");
    expect_misuses(1, "cudaFree of an inner pointer");

    k_divergent<<<1, 64, 0, s>>>(d, 40);
    expect_misuses(1, "__syncthreads after some threads exited");

    k_deadlock<<<1, 64, 0, s>>>(d);
    expect_misuses(1, "a deadlock between a barrier and a shuffle");

    k_missing_lane<<<1, 48, 0, s>>>(d);
    expect_misuses(8, "shuffles from lanes that do not exist");

    k_write<<<1, 2048, 0, s>>>(d);
    expect_misuses(1, "a block of 2048 threads");

    /* Host code reading device memory faults on the spot. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not a sanitizer's report: the fault itself */
        volatile float v = d[0];
        (void)v;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "a host read of device memory did not fault");
    cudaFree(d);
    expect_misuses(0, "after the misuses");
}

/* Events: complete when recorded, timed by the host clock then, in
 * order; the errors CUDA gives for a bad event or one never recorded. */
static void check_events(cudaStream_t s)
{
    cudaEvent_t a = NULL, b = NULL, quiet = NULL;
    EXPECT(cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess, "cudaEventCreate");
    EXPECT(cudaEventCreateWithFlags(&quiet, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreateWithFlags");
    float ms = -1;
    EXPECT(cudaEventElapsedTime(&ms, a, b) == cudaErrorInvalidResourceHandle, "elapsed time of unrecorded events");
    EXPECT(cudaEventRecord(a, s) == cudaSuccess, "record a");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t1);
    while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 2000000L); /* 2 ms */
    EXPECT(cudaEventRecord(b, s) == cudaSuccess, "record b");
    EXPECT(cudaEventQuery(b) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess, "b is complete");
    EXPECT(cudaEventElapsedTime(&ms, a, b) == cudaSuccess && ms >= 2.0f && ms < 1000.0f, "a to b: %g ms", ms);
    EXPECT(cudaEventElapsedTime(&ms, b, a) == cudaSuccess && ms <= -2.0f, "b to a: %g ms", ms);
    EXPECT(cudaEventRecord(quiet, s) == cudaSuccess, "record quiet");
    EXPECT(cudaEventElapsedTime(&ms, a, quiet) == cudaErrorInvalidResourceHandle, "a timing-disabled event");
    EXPECT(cudaEventDestroy(a) == cudaSuccess && cudaEventDestroy(b) == cudaSuccess &&
               cudaEventDestroy(quiet) == cudaSuccess,
           "cudaEventDestroy");
    EXPECT(cudaEventDestroy(a) == cudaErrorInvalidResourceHandle, "a second destroy");
    expect_misuses(0, "events");
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n != 1) {
        fprintf(stderr, "FAIL: cudaemu reports %d devices\n", n);
        return 1;
    }
    cudaStream_t s;
    EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    check_kernels(s);
    check_events(s);
    check_misuses(s);
    emu::take_misuses(); /* whatever a failed check left: the result is failures */
    if (failures)
        fprintf(stderr, "runtime_selftest: %d failures\n", failures);
    else
        printf("runtime_selftest: all passed\n");
    return failures ? 1 : 0;
}
