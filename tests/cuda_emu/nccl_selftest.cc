/*
 * nccl_selftest.cc (cudaemu; 2 ranks under mpirun) - checks cudaemu's NCCL
 * over MPI (nccl.cc) through NCCL's API itself, beyond what ampc asks of
 * it: every collective's result over 2 ranks for the element types and
 * operations NCCL has (f16 and bf16 sums rounded once, averages
 * pre-multiplied on floats and divided toward zero on integers, fmax's
 * NaN rule, wrapping integer sums, min, prod), out of place and in NCCL's
 * in-place forms, a broadcast whose non-root send buffer is not read;
 * the non-blocking communicator's answers (ncclInProgress until polled);
 * a blocking communicator; and each refusal: an unknown type, operation
 * or root, a call while another is in progress, ranks given different
 * unique ids (an error on both), and the misuses (counted through
 * emu::take_misuses): a buffer shorter than the call's extent, a host
 * buffer, buffers that overlap other than in place, a stream that is not
 * one. Every rank runs every check; the exit status is failure when any
 * rank failed.
 */
#include "emu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures, rank;

#define EXPECT(cond, ...)                                                                                          \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            failures++;                                                                                            \
            fprintf(stderr, "FAIL rank %d %s:%d: ", rank, __FILE__, __LINE__);                                     \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fputc('\n', stderr);                                                                                   \
        }                                                                                                          \
    } while (0)

static void expect_misuses(unsigned long n, const char *what)
{
    unsigned long got = emu::take_misuses();
    EXPECT(got == n, "%s: %lu misuses reported, expected %lu", what, got, n);
    cudaGetLastError(); /* the sticky error they left */
}

static void *dev(const void *host, size_t bytes)
{
    void *d = nullptr;
    EXPECT(cudaMalloc(&d, bytes) == cudaSuccess, "cudaMalloc(%zu)", bytes);
    if (host)
        EXPECT(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy to the device");
    return d;
}

static void host(void *dst, const void *d, size_t bytes)
{
    EXPECT(cudaMemcpy(dst, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy to the host");
}

/* Polls a non-blocking communicator until it settles; its state. */
static ncclResult_t settle(ncclComm_t c, ncclResult_t r, int *polls)
{
    int n = 0;
    const time_t end = time(NULL) + 60;
    while (r == ncclInProgress && time(NULL) < end) {
        if (ncclCommGetAsyncError(c, &r) != ncclSuccess)
            return ncclInternalError;
        n++;
    }
    if (polls)
        *polls = n;
    return r;
}

static ncclComm_t make_comm(ncclUniqueId id, bool blocking, ncclResult_t *state)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking ? 1 : 0;
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&c, 2, id, rank, &cfg);
    if (!blocking)
        EXPECT(r == ncclInProgress, "a non-blocking communicator answered %d, not ncclInProgress", (int)r);
    *state = c ? settle(c, r, nullptr) : r;
    return c;
}

/* ------------------------------------------------------------- values */

static float f16(float v) { return __half2float(__float2half_rn(v)); }
static float bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/* An all-reduce of n elements of t (element size es) out of place: rank
 * r's values mine, the result into got. */
static void all_reduce(ncclComm_t c, const void *mine, void *got, size_t n, size_t es, ncclDataType_t t, ncclRedOp_t op)
{
    void *s = dev(mine, n * es), *d = dev(nullptr, n * es);
    ncclResult_t r = ncclAllReduce(s, d, n, t, op, c, nullptr);
    EXPECT(settle(c, r, nullptr) == ncclSuccess, "all-reduce type %d op %d", (int)t, (int)op);
    host(got, d, n * es);
    cudaFree(s);
    cudaFree(d);
}

static void test_float_reductions(ncclComm_t c)
{
    enum { N = 6 };
    /* rank 0 and rank 1's values; sums that round in f32, in f16 */
    const float a[N] = {1.0f, 0x1p24f, -3.5f, NAN, 2.0f, 1e-3f};
    const float b[N] = {0x1p-24f, 1.0f, 7.25f, 5.0f, NAN, 3e-3f};
    const float *mine = rank ? b : a;
    float got[N];
    all_reduce(c, mine, got, N, 4, ncclFloat32, ncclSum);
    for (int i = 0; i < N; i++) {
        const float want = a[i] + b[i];
        EXPECT(memcmp(&got[i], &want, 4) == 0 || (isnan(want) && isnan(got[i])), "f32 sum %d: %a, want %a", i,
               got[i], want);
    }
    all_reduce(c, mine, got, N, 4, ncclFloat32, ncclAvg);
    for (int i = 0; i < N; i++) {
        const float want = a[i] * 0.5f + b[i] * 0.5f;
        EXPECT(memcmp(&got[i], &want, 4) == 0 || (isnan(want) && isnan(got[i])), "f32 avg %d: %a, want %a", i,
               got[i], want);
    }
    all_reduce(c, mine, got, N, 4, ncclFloat32, ncclMax);
    for (int i = 0; i < N; i++) /* fmax: a NaN loses to a number */
        EXPECT(got[i] == fmaxf(a[i], b[i]), "f32 max %d: %a, want %a", i, got[i], fmaxf(a[i], b[i]));
    all_reduce(c, mine, got, N, 4, ncclFloat32, ncclMin);
    for (int i = 0; i < N; i++)
        EXPECT(got[i] == fminf(a[i], b[i]), "f32 min %d: %a", i, got[i]);
    double da[2] = {3.0, -0.1}, db[2] = {1.0 / 3, 1e300}, dg[2];
    all_reduce(c, rank ? db : da, dg, 2, 8, ncclFloat64, ncclProd);
    EXPECT(dg[0] == 3.0 * (1.0 / 3) && dg[1] == -0.1 * 1e300, "f64 prod: %a %a", dg[0], dg[1]);

    /* f16 and bf16: in f32, one rounding */
    const float ha[3] = {2048.0f, 0.1f, 65504.0f}, hb[3] = {1.0f, 0.2f, 32.0f};
    __half h[3], hg[3];
    __nv_bfloat16 bh[3], bg[3];
    for (int i = 0; i < 3; i++) {
        h[i] = __float2half_rn(rank ? hb[i] : ha[i]);
        bh[i] = __float2bfloat16_rn(rank ? hb[i] : ha[i]);
    }
    all_reduce(c, h, hg, 3, 2, ncclFloat16, ncclSum);
    all_reduce(c, bh, bg, 3, 2, ncclBfloat16, ncclAvg);
    for (int i = 0; i < 3; i++) {
        const float want = f16(f16(ha[i]) + f16(hb[i]));
        EXPECT(__half2float(hg[i]) == want || (isinf(want) && isinf(__half2float(hg[i]))), "f16 sum %d: %g, want %g",
               i, __half2float(hg[i]), want);
        const float wb = bf16(bf16(ha[i]) * 0.5f + bf16(hb[i]) * 0.5f);
        EXPECT(__bfloat162float(bg[i]) == wb, "bf16 avg %d: %g, want %g", i, __bfloat162float(bg[i]), wb);
    }
    EXPECT(__half2float(hg[0]) == 2048.0f, "f16 2048 + 1 rounds to even: %g", __half2float(hg[0]));
    EXPECT(isinf(__half2float(hg[2])), "f16 65504 + 32 overflows: %g", __half2float(hg[2]));
}

static void test_integer_reductions(ncclComm_t c)
{
    const int32_t a[3] = {-7, INT32_MAX, 10}, b[3] = {2, 1, -3};
    int32_t g[3];
    all_reduce(c, rank ? b : a, g, 3, 4, ncclInt32, ncclAvg);
    EXPECT(g[0] == -2 && g[1] == (int32_t)((uint32_t)INT32_MAX + 1u) / 2 && g[2] == 3, "i32 avg: %d %d %d", g[0],
           g[1], g[2]);
    all_reduce(c, rank ? b : a, g, 3, 4, ncclInt32, ncclMin);
    EXPECT(g[0] == -7 && g[1] == 1 && g[2] == -3, "i32 min: %d %d %d", g[0], g[1], g[2]);
    const uint8_t ua[2] = {200, 3}, ub[2] = {100, 5};
    uint8_t ug[2];
    all_reduce(c, rank ? ub : ua, ug, 2, 1, ncclUint8, ncclSum);
    EXPECT(ug[0] == 44 && ug[1] == 8, "u8 sum wraps: %u %u", ug[0], ug[1]);
    all_reduce(c, rank ? ub : ua, ug, 2, 1, ncclUint8, ncclProd);
    EXPECT(ug[0] == (uint8_t)(200 * 100) && ug[1] == 15, "u8 prod: %u %u", ug[0], ug[1]);
    const int64_t la[2] = {INT64_MIN, 5}, lb[2] = {-1, 6};
    int64_t lg[2];
    all_reduce(c, rank ? lb : la, lg, 2, 8, ncclInt64, ncclMax);
    EXPECT(lg[0] == -1 && lg[1] == 6, "i64 max");
}

/* In place (all-reduce: send == recv; all-gather: send at this rank's
 * block; reduce-scatter: recv at this rank's block), a reduce-scatter out
 * of place, a broadcast from rank 1 whose other send buffer is NULL. */
static void test_layouts(ncclComm_t c)
{
    enum { N = 5 };
    int32_t v[2 * N], got[2 * N];
    for (int i = 0; i < 2 * N; i++)
        v[i] = 100 * rank + i;
    /* all-reduce in place */
    int32_t *d = (int32_t *)dev(v, sizeof v);
    EXPECT(settle(c, ncclAllReduce(d, d, 2 * N, ncclInt32, ncclSum, c, nullptr), nullptr) == ncclSuccess, "in place");
    host(got, d, sizeof got);
    for (int i = 0; i < 2 * N; i++)
        EXPECT(got[i] == 100 + 2 * i, "all-reduce in place %d: %d", i, got[i]);
    /* all-gather in place: this rank's block at rank * N */
    EXPECT(cudaMemcpy(d + rank * N, v, N * 4, cudaMemcpyHostToDevice) == cudaSuccess, "copy");
    EXPECT(settle(c, ncclAllGather(d + rank * N, d, N, ncclInt32, c, nullptr), nullptr) == ncclSuccess, "gather");
    host(got, d, sizeof got);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++)
            EXPECT(got[r * N + i] == 100 * r + i, "all-gather in place [%d][%d]: %d", r, i, got[r * N + i]);
    /* reduce-scatter in place: recv at this rank's block of send */
    EXPECT(cudaMemcpy(d, v, sizeof v, cudaMemcpyHostToDevice) == cudaSuccess, "copy");
    EXPECT(settle(c, ncclReduceScatter(d, d + rank * N, N, ncclInt32, ncclSum, c, nullptr), nullptr) == ncclSuccess,
           "reduce-scatter in place");
    host(got, d + rank * N, N * 4);
    for (int i = 0; i < N; i++)
        EXPECT(got[i] == 100 + 2 * (rank * N + i), "reduce-scatter in place %d: %d", i, got[i]);
    /* reduce-scatter out of place */
    int32_t *s = (int32_t *)dev(v, sizeof v), *o = (int32_t *)dev(nullptr, N * 4);
    EXPECT(settle(c, ncclReduceScatter(s, o, N, ncclInt32, ncclMax, c, nullptr), nullptr) == ncclSuccess, "rs");
    host(got, o, N * 4);
    for (int i = 0; i < N; i++)
        EXPECT(got[i] == 100 + rank * N + i, "reduce-scatter max %d: %d", i, got[i]);
    /* broadcast from rank 1, out of place; rank 0's send is not read */
    EXPECT(settle(c, ncclBroadcast(rank == 1 ? s : nullptr, o, N, ncclInt32, 1, c, nullptr), nullptr) == ncclSuccess,
           "broadcast");
    host(got, o, N * 4);
    for (int i = 0; i < N; i++)
        EXPECT(got[i] == 100 + i, "broadcast %d: %d", i, got[i]);
    cudaFree(d);
    cudaFree(s);
    cudaFree(o);
}

static void test_refusals(ncclComm_t c, ncclUniqueId id)
{
    float *d = (float *)dev(nullptr, 64), *e = (float *)dev(nullptr, 64);
    EXPECT(ncclAllReduce(d, e, 4, ncclFloat32, ncclNumOps, c, nullptr) == ncclInvalidArgument, "unknown op");
    EXPECT(ncclAllReduce(d, e, 4, ncclNumTypes, ncclSum, c, nullptr) == ncclInvalidArgument, "unknown type");
    EXPECT(ncclBroadcast(d, e, 4, ncclFloat32, 2, c, nullptr) == ncclInvalidArgument, "root 2 of 2");
    /* a call while another is in progress: refused; the first completes */
    ncclResult_t r = ncclAllReduce(d, e, 4, ncclFloat32, ncclSum, c, nullptr);
    EXPECT(r == ncclInProgress, "a non-blocking collective answered %d", (int)r);
    EXPECT(ncclAllReduce(d, e, 4, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidUsage, "a second call in progress");
    EXPECT(ncclCommFinalize(c) == ncclInvalidUsage, "finalize with a call in progress");
    EXPECT(settle(c, r, nullptr) == ncclSuccess, "the first call completes");
    expect_misuses(0, "the refusals");
    /* misuses (allocations are 256-byte units): a receive buffer shorter
     * than the gather, a host buffer,
     * overlap that is not in place, a stream that is not one */
    EXPECT(ncclAllGather(d, e, 40, ncclFloat32, c, nullptr) == ncclInvalidArgument, "recv too short"); /* 320 > 256 */
    expect_misuses(1, "a receive buffer shorter than the all-gather");
    static float h[16];
    EXPECT(ncclAllReduce(h, e, 4, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidArgument, "host buffer");
    expect_misuses(1, "a host send buffer");
    EXPECT(ncclAllReduce(d, d + 1, 4, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidArgument, "overlap");
    expect_misuses(1, "overlapping buffers");
    float *g = (float *)dev(nullptr, 2 * 16);
    EXPECT(ncclAllGather(g + (1 - rank) * 4, g, 4, ncclFloat32, c, nullptr) == ncclInvalidArgument,
           "the other rank's block as in place");
    expect_misuses(1, "an all-gather's send at another rank's block");
    EXPECT(ncclAllReduce(d, e, 4, ncclFloat32, ncclSum, c, (cudaStream_t)h) == ncclInvalidArgument, "bad stream");
    expect_misuses(1, "a stream that is not one");
    /* ranks given different ids: the communicator fails on both */
    ncclUniqueId other = id;
    if (rank == 1)
        ncclGetUniqueId(&other);
    ncclResult_t state;
    ncclComm_t bad = make_comm(other, false, &state);
    EXPECT(state == ncclInvalidArgument, "ranks with different ids: state %d", (int)state);
    if (bad)
        ncclCommAbort(bad);
    /* a rank that is not this process's world rank */
    ncclComm_t x = nullptr;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    EXPECT(ncclCommInitRankConfig(&x, 2, id, 1 - rank, &cfg) == ncclInvalidArgument && !x, "rank swapped");
    EXPECT(ncclCommInitRankConfig(&x, 3, id, rank, &cfg) == ncclInvalidArgument && !x, "3 ranks of 2 processes");
    cudaFree(d);
    cudaFree(e);
    cudaFree(g);
}

int main(int argc, char **argv)
{
    int provided = 0, world = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world != 2) {
        fprintf(stderr, "cudaemu_nccl_selftest runs on 2 ranks (mpirun -np 2), not %d\n", world);
        MPI_Finalize();
        return 1;
    }
    ncclUniqueId id;
    if (rank == 0)
        ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclResult_t state;
    ncclComm_t c = make_comm(id, false, &state);
    EXPECT(c && state == ncclSuccess, "the communicator: state %d", (int)state);
    if (c && state == ncclSuccess) {
        test_float_reductions(c);
        test_integer_reductions(c);
        test_layouts(c);
        test_refusals(c, id);
        int polls = 0;
        EXPECT(settle(c, ncclCommFinalize(c), &polls) == ncclSuccess && polls >= 1, "finalize (%d polls)", polls);
        EXPECT(ncclCommDestroy(c) == ncclSuccess, "destroy");
        EXPECT(ncclCommDestroy(c) == ncclInvalidArgument, "destroy twice");
    }
    /* a blocking communicator: each call done when it returns */
    ncclComm_t b = nullptr;
    EXPECT(ncclCommInitRankConfig(&b, 2, id, rank, nullptr) == ncclSuccess && b, "blocking communicator");
    if (b) {
        float v = 1.5f + (float)rank, got = 0;
        float *d = (float *)dev(&v, 4);
        EXPECT(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, b, nullptr) == ncclSuccess, "blocking all-reduce");
        host(&got, d, 4);
        EXPECT(got == 4.0f, "blocking all-reduce: %g", got);
        cudaFree(d);
        EXPECT(ncclCommFinalize(b) == ncclSuccess && ncclCommDestroy(b) == ncclSuccess, "blocking end");
    }
    expect_misuses(0, "the end");
    int any = failures > 0, all = 0;
    MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("cudaemu_nccl_selftest: %s\n", all ? "FAILED" : "ok");
    MPI_Finalize();
    return all ? 1 : 0;
}
