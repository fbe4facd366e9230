/*
 * nccl.cc - cudaemu's NCCL (include/nccl.h), so that comm_nccl.c (the
 * communicator made over MPI, the side stream and its events, the
 * non-blocking communicator's polling, the collectives' arguments) and
 * what runs on it (DDP, ZeRO-1, the scaler's found_inf across ranks) run
 * in the emulation build's tests, on one rank or on several.
 *
 * One rank: every collective leaves the data as it is - a sum, maximum or
 * average (divided by 1, exact) is the identity and a gather, scatter or
 * broadcast a copy, done here as a device-to-device cudaMemcpyAsync on the
 * caller's stream. No MPI is needed (comm_nccl.c makes a one-rank
 * communicator before MPI starts).
 *
 * Several ranks (built with CUDAEMU_NCCL_MPI, where CMake found MPI): the
 * ranks are the MPI processes mpirun started, NCCL rank r being
 * MPI_COMM_WORLD's rank r (cudaemu's limit: a communicator of every
 * process, in world order, which is what comm_nccl.c makes). The
 * communicator is an MPI_Comm_idup of MPI_COMM_WORLD, and the ranks then
 * check over it that they were all given the same unique id and world
 * size and each its own rank. Each collective is non-blocking MPI on host
 * copies of the rank's buffers (cudaemu's device memory is host memory,
 * but PROT_NONE outside emulated device work; MPI never touches it): the
 * send buffer is copied out on the caller's stream, the bytes are moved
 * with MPI_Iallgather (all-reduce, all-gather), MPI_Ialltoall
 * (reduce-scatter) or MPI_Ibcast, and when the request completes the
 * result is reduced on the host and copied into the receive buffer on the
 * caller's stream. Reductions, element by element over the ranks in rank
 * order:
 *   - f32: in f32, each addition rounded (NCCL's ring also adds in f32;
 *     its order depends on the ring, so over more than 2 ranks a GPU may
 *     differ in the last bits). f64 likewise in f64.
 *   - f16 / bf16: widened to f32, combined in f32, rounded once to the
 *     16-bit type at the end (a GPU rounds to the 16-bit type at each
 *     step of the ring; over 2 ranks the two agree except where the f32
 *     sum of two 16-bit values is itself inexact, far outside their
 *     range).
 *   - ncclAvg on floating types: each rank's value multiplied by 1/nranks
 *     (rounded to the accumulation type) before the sum, as NCCL's
 *     "PreMulSum" does; on integers the sum divided by nranks afterwards
 *     (C division, toward zero), as its "SumPostDiv".
 *     On f16 / bf16 the product stays in f32 here, where NCCL rounds it
 *     to the 16-bit type before the sum: a value whose 1/nranks share is
 *     inexact in 16 bits may differ in its last bit from a GPU's.
 *   - ncclMax / ncclMin on floating types: fmax / fmin (a NaN loses to a
 *     number), as NCCL's kernels; integers wrap on overflow of a sum or a
 *     product (unsigned arithmetic), as on a GPU.
 * A collective answers ncclInProgress on a non-blocking communicator and
 * completes when ncclCommGetAsyncError polls it from the thread that
 * started MPI (comm_nccl.c's settle loop, under its deadline: a rank that
 * never joins a collective fails the call past comm_nccl.c's timeout, as
 * NCCL's would); a blocking communicator waits in the call. Other threads
 * (comm_nccl.c's watchdog) polling ncclCommGetAsyncError get the state
 * without MPI being called (MPI_THREAD_FUNNELED), and ncclCommAbort from
 * them calls no MPI.
 *
 * Checked, as NCCL would refuse or a GPU would fault: an unknown type or
 * operation; a communicator that is not live, or still being made, or
 * with a call that answered ncclInProgress and has not been polled to
 * ncclSuccess yet (NCCL's rule for non-blocking communicators, kept
 * strictly: the call is refused even where MPI has finished its part); a
 * config not made by
 * NCCL_CONFIG_INITIALIZER; a stream that is not one; buffers outside
 * device memory or shorter than the call's extent (a misuse); buffers that
 * overlap other than in NCCL's in-place form (all-reduce and broadcast:
 * send == recv; all-gather: send at this rank's block of recv;
 * reduce-scatter: recv at this rank's block of send); a root outside the
 * ranks; more ranks than MPI processes, or a rank that is not the
 * process's world rank; ranks that were given different unique ids.
 *
 * A non-blocking communicator answers ncclCommInitRankConfig and
 * ncclCommFinalize with ncclInProgress, and its first
 * ncclCommGetAsyncError after them with ncclInProgress again (one rank),
 * or until the MPI requests under it complete (several), so the caller's
 * polling loop runs as it must against NCCL. With CUDAEMU_NCCL_STUCK=1 in
 * the environment a non-blocking communicator never settles
 * (ncclInProgress for ever, no MPI called), as when a peer never joins.
 */
#include <nccl.h>

#include "emu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <limits.h>
#include <math.h>
#include <mutex>
#include <set>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <type_traits>
#include <unistd.h>
#include <vector>

#ifdef CUDAEMU_NCCL_MPI
#define OMPI_SKIP_MPICXX 1 /* MPI's C API only: no C++ bindings to link */
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

/* What a communicator is waiting for (several ranks). */
enum class stage { none, dup, check, coll, finalize };

/* A collective's kind, for its completion. */
enum class kind { all_reduce, all_gather, reduce_scatter, broadcast };

struct ncclComm {
    bool blocking;
    int polls_left; /* ncclInProgress answers left before the state settles (one rank; stuck) */
    bool unpolled;  /* a call answered ncclInProgress, and no poll has answered ncclSuccess since */
    int nranks, rank;
    ncclResult_t async; /* sticky: what went wrong after a call returned */
    char last[256];
#ifdef CUDAEMU_NCCL_MPI
    MPI_Comm mpi = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    stage st = stage::none;
    uint64_t nonce = 0;
    /* The pending collective: host staging (this rank's bytes, every
     * rank's bytes), and where its result goes. */
    std::vector<unsigned char> mine, all;
    kind k = kind::all_reduce;
    const char *what = "";
    void *recv = nullptr;
    size_t count = 0;
    ncclDataType_t type = ncclFloat32;
    ncclRedOp_t op = ncclSum;
    cudaStream_t stream = nullptr;
#endif
};

static std::mutex mu;
static std::set<const void *> comms;
static const char id_magic[] = "cudaemu-nccl-id";
static char last_global[256];

static ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
    char *buf = c ? c->last : last_global;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof last_global, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cudaemu: NCCL: %s\n", buf);
    return r;
}

static ncclComm *live(ncclComm_t c) { return c && comms.count(c) ? c : nullptr; }

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

extern "C" ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* The id: the magic, then a nonce (so that two communicators' ids differ
 * and the ranks can check they were handed the same one). */
extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t nonce = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    {
        std::lock_guard<std::mutex> g(mu);
        nonce += ++counter * 0x9e3779b97f4a7c15ull;
    }
    memset(id, 0, sizeof *id);
    memcpy(id->internal, id_magic, sizeof id_magic);
    memcpy(id->internal + sizeof id_magic, &nonce, sizeof nonce);
    return ncclSuccess;
}

/* ----------------------------------------------------------- reductions */

/* The element types as the host sees them. */
template <class T> static float widen(T v) { return (float)v; }
template <> float widen<__half>(__half v) { return __half2float(v); }
template <> float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> static T narrow(float v) { return (T)v; }
template <> __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* Floating types: element i of every rank's block (rank r's at
 * in + r * stride bytes), combined in Acc in rank order, rounded once
 * into T. */
template <class T, class Acc>
static void reduce_float(ncclRedOp_t op, int nranks, const unsigned char *in, size_t stride, size_t count,
                         unsigned char *out)
{
    const Acc scale = (Acc)(1.0 / nranks);
    for (size_t i = 0; i < count; i++) {
        Acc acc = 0;
        for (int r = 0; r < nranks; r++) {
            T t;
            memcpy(&t, in + (size_t)r * stride + i * sizeof t, sizeof t);
            Acc v;
            if constexpr (std::is_same<T, Acc>::value)
                v = t;
            else
                v = widen<T>(t);
            if (op == ncclAvg)
                v = v * scale;
            if (r == 0)
                acc = v;
            else if (op == ncclSum || op == ncclAvg)
                acc = acc + v;
            else if (op == ncclProd)
                acc = acc * v;
            else if (op == ncclMax)
                acc = std::fmax(acc, v);
            else
                acc = std::fmin(acc, v);
        }
        T t;
        if constexpr (std::is_same<T, Acc>::value)
            t = acc;
        else
            t = narrow<T>(acc);
        memcpy(out + i * sizeof t, &t, sizeof t);
    }
}

/* Integer types: sums and products wrap (computed unsigned). */
template <class T>
static void reduce_int(ncclRedOp_t op, int nranks, const unsigned char *in, size_t stride, size_t count,
                       unsigned char *out)
{
    typedef typename std::make_unsigned<T>::type U;
    for (size_t i = 0; i < count; i++) {
        T acc = 0;
        for (int r = 0; r < nranks; r++) {
            T v;
            memcpy(&v, in + (size_t)r * stride + i * sizeof v, sizeof v);
            if (r == 0)
                acc = v;
            else if (op == ncclSum || op == ncclAvg)
                acc = (T)((U)acc + (U)v);
            else if (op == ncclProd)
                acc = (T)((U)acc * (U)v);
            else if (op == ncclMax)
                acc = v > acc ? v : acc;
            else
                acc = v < acc ? v : acc;
        }
        if (op == ncclAvg)
            acc = (T)(acc / (T)nranks);
        memcpy(out + i * sizeof acc, &acc, sizeof acc);
    }
}

static void reduce(ncclDataType_t t, ncclRedOp_t op, int nranks, const unsigned char *in, size_t stride,
                   size_t count, unsigned char *out)
{
    switch (t) {
    case ncclInt8: reduce_int<int8_t>(op, nranks, in, stride, count, out); break;
    case ncclUint8: reduce_int<uint8_t>(op, nranks, in, stride, count, out); break;
    case ncclInt32: reduce_int<int32_t>(op, nranks, in, stride, count, out); break;
    case ncclUint32: reduce_int<uint32_t>(op, nranks, in, stride, count, out); break;
    case ncclInt64: reduce_int<int64_t>(op, nranks, in, stride, count, out); break;
    case ncclUint64: reduce_int<uint64_t>(op, nranks, in, stride, count, out); break;
    case ncclFloat16: reduce_float<__half, float>(op, nranks, in, stride, count, out); break;
    case ncclBfloat16: reduce_float<__nv_bfloat16, float>(op, nranks, in, stride, count, out); break;
    case ncclFloat32: reduce_float<float, float>(op, nranks, in, stride, count, out); break;
    case ncclFloat64: reduce_float<double, double>(op, nranks, in, stride, count, out); break;
    default: break; /* refused before */
    }
}

/* ---------------------------------------------------------- several ranks */

#ifdef CUDAEMU_NCCL_MPI

/* Whether this thread may call MPI (comm_nccl.c starts it FUNNELED). */
static bool may_call_mpi(void)
{
    int level = MPI_THREAD_SINGLE, is_main = 0;
    MPI_Query_thread(&level);
    MPI_Is_thread_main(&is_main);
    return level == MPI_THREAD_MULTIPLE || is_main;
}

static ncclResult_t mpi_failed(ncclComm *c, int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, s, &len);
    c->st = stage::none;
    c->req = MPI_REQUEST_NULL;
    c->async = fail(c, ncclSystemError, "%s: MPI failed: %s", what, s);
    return c->async;
}

/* The pending collective's result: reduced (or taken) from every rank's
 * bytes, copied into the receive buffer on its stream. */
static void complete_coll(ncclComm *c)
{
    const size_t es = type_size(c->type), n = (size_t)c->nranks;
    const size_t bytes = c->count * es;
    std::vector<unsigned char> out;
    const unsigned char *res = c->all.data();
    size_t out_bytes = bytes;
    switch (c->k) {
    case kind::all_reduce:
    case kind::reduce_scatter: /* every rank's block for this rank, in rank order */
        out.resize(bytes);
        reduce(c->type, c->op, c->nranks, c->all.data(), bytes, c->count, out.data());
        res = out.data();
        break;
    case kind::all_gather:
        out_bytes = bytes * n;
        break;
    case kind::broadcast:
        break;
    }
    if (cudaMemcpyAsync(c->recv, res, out_bytes, cudaMemcpyHostToDevice, c->stream) != cudaSuccess)
        c->async = fail(c, ncclUnhandledCudaError, "%s: writing the result (%zu bytes) failed (cudaemu said why)",
                        c->what, out_bytes);
    c->mine.clear();
    c->all.clear();
}

/* Moves the communicator's pending MPI work on, if this thread may; its
 * state afterwards. Under mu. */
static void progress(ncclComm *c)
{
    if (c->st == stage::none || !may_call_mpi())
        return;
    int done = 0;
    int rc = MPI_Test(&c->req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        mpi_failed(c, rc, c->st == stage::coll ? c->what : "making the communicator");
        return;
    }
    if (!done)
        return;
    switch (c->st) {
    case stage::dup: {
        /* Everyone's (nonce, nranks, rank), to check they agree. */
        MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
        const int64_t me[3] = {(int64_t)c->nonce, c->nranks, c->rank};
        c->mine.assign((const unsigned char *)me, (const unsigned char *)me + sizeof me);
        c->all.assign(sizeof me * (size_t)c->nranks, 0);
        rc = MPI_Iallgather(c->mine.data(), (int)sizeof me, MPI_BYTE, c->all.data(), (int)sizeof me, MPI_BYTE,
                            c->mpi, &c->req);
        if (rc != MPI_SUCCESS) {
            mpi_failed(c, rc, "ncclCommInitRankConfig");
            return;
        }
        c->st = stage::check;
        return;
    }
    case stage::check: {
        c->st = stage::none;
        for (int r = 0; r < c->nranks; r++) {
            int64_t e[3];
            memcpy(e, c->all.data() + (size_t)r * sizeof e, sizeof e);
            if (e[0] != (int64_t)c->nonce || e[1] != c->nranks || e[2] != r) {
                c->async = fail(c, ncclInvalidArgument,
                                "ncclCommInitRankConfig: the ranks disagree: MPI rank %d was given %s (rank %lld "
                                "of %lld), this one rank %d of %d",
                                r, e[0] != (int64_t)c->nonce ? "another unique id" : "the same unique id",
                                (long long)e[2], (long long)e[1], c->rank, c->nranks);
                break;
            }
        }
        c->mine.clear();
        c->all.clear();
        return;
    }
    case stage::coll:
        c->st = stage::none;
        complete_coll(c);
        return;
    case stage::finalize:
    case stage::none:
        c->st = stage::none;
        return;
    }
}

/* A blocking communicator's call: waits (under mu) until it settles. */
static ncclResult_t settle_blocking(ncclComm *c)
{
    while (c->st != stage::none) {
        progress(c);
        if (c->st != stage::none) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    return c->async;
}

static ncclResult_t init_several(ncclComm *c, uint64_t nonce)
{
    int inited = 0, finalized = 0, world = 0, me = -1;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return fail(nullptr, ncclInvalidUsage, "ncclCommInitRankConfig: %d ranks: cudaemu's ranks are MPI processes, "
                    "and MPI is %s", c->nranks, finalized ? "finalized" : "not initialized");
    if (!may_call_mpi())
        return fail(nullptr, ncclInvalidUsage, "ncclCommInitRankConfig: called off the thread that started MPI "
                    "(cudaemu's NCCL calls MPI, started MPI_THREAD_FUNNELED)");
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (world != c->nranks || me != c->rank)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: rank %d of %d ranks, but this is MPI "
                    "process %d of %d (cudaemu's NCCL makes communicators of every MPI process, NCCL rank = "
                    "world rank)", c->rank, c->nranks, me, world);
    c->nonce = nonce;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &c->mpi, &c->req);
    if (rc != MPI_SUCCESS)
        return mpi_failed(c, rc, "ncclCommInitRankConfig (MPI_Comm_idup)");
    c->st = stage::dup;
    return ncclSuccess;
}

#endif /* CUDAEMU_NCCL_MPI */

/* ---------------------------------------------------------- communicator */

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t *config)
{
    std::lock_guard<std::mutex> g(mu);
    if (!comm)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: NULL comm");
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: rank %d of %d ranks", rank, nranks);
#ifndef CUDAEMU_NCCL_MPI
    if (nranks != 1)
        return fail(nullptr, ncclInvalidArgument,
                    "ncclCommInitRankConfig: rank %d of %d ranks: this cudaemu was built without MPI, so its NCCL "
                    "is a world of one rank", rank, nranks);
#endif
    if (memcmp(id.internal, id_magic, sizeof id_magic) != 0)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: the unique id is not ncclGetUniqueId's");
    if (config && (config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef ||
                   config->version != NCCL_VERSION_CODE))
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: the config was not made by "
                                                  "NCCL_CONFIG_INITIALIZER");
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev != 0)
        return fail(nullptr, ncclUnhandledCudaError, "ncclCommInitRankConfig: no current CUDA device");
    ncclComm *c = new ncclComm();
    c->blocking = !config || config->blocking != 0;
    c->nranks = nranks;
    c->rank = rank;
    c->async = ncclSuccess;
    /* CUDAEMU_NCCL_STUCK=1: a peer that never comes, so the communicator
     * never settles (the caller's deadline is what ends it). */
    const char *stuck = getenv("CUDAEMU_NCCL_STUCK");
    const bool never = !c->blocking && stuck && strcmp(stuck, "1") == 0;
#ifdef CUDAEMU_NCCL_MPI
    if (nranks > 1 && !never) {
        uint64_t nonce;
        memcpy(&nonce, id.internal + sizeof id_magic, sizeof nonce);
        ncclResult_t r = init_several(c, nonce);
        if (r != ncclSuccess) {
            delete c;
            return r;
        }
    }
#endif
    comms.insert(c);
    *comm = c;
#ifdef CUDAEMU_NCCL_MPI
    if (c->blocking) {
        ncclResult_t r = settle_blocking(c);
        if (r != ncclSuccess) {
            comms.erase(c);
            delete c;
            *comm = nullptr;
        }
        return r;
    }
#else
    if (c->blocking)
        return ncclSuccess;
#endif
    c->polls_left = never ? INT_MAX : nranks == 1 ? 1 : 0;
    c->unpolled = true;
    return ncclInProgress;
}

/* Whether the communicator has something in progress (under mu). */
static bool busy(ncclComm *c)
{
    if (c->unpolled)
        return true;
#ifdef CUDAEMU_NCCL_MPI
    if (c->st != stage::none)
        return true;
#endif
    return c->polls_left > 0;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    if (!c || !state)
        return fail(c, ncclInvalidArgument, "ncclCommGetAsyncError: %s", c ? "NULL state" : "no such communicator");
#ifdef CUDAEMU_NCCL_MPI
    progress(c);
#endif
    if (c->async != ncclSuccess) {
        *state = c->async;
    } else if (c->polls_left > 0) {
        c->polls_left--;
        *state = ncclInProgress;
    } else {
        c->unpolled = false;
        *state = busy(c) ? ncclInProgress : ncclSuccess;
        c->unpolled = *state == ncclInProgress;
    }
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: no such communicator");
    if (busy(c) && c->polls_left != INT_MAX)
        return fail(c, ncclInvalidUsage, "ncclCommFinalize: a call is still in progress (poll "
                                         "ncclCommGetAsyncError until ncclSuccess first)");
    if (c->blocking)
        return ncclSuccess;
    c->polls_left = 1;
    c->unpolled = true;
    return ncclInProgress;
}

/* Ends the communicator. From the thread that may call MPI its MPI
 * communicator is freed too (and a request still pending is left to
 * MPI: the job is ending); from another thread (comm_nccl.c's watchdog
 * aborting) no MPI is called. */
static ncclResult_t end_comm(ncclComm_t comm, const char *what)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "%s: no such communicator", what);
    comms.erase(c);
#ifdef CUDAEMU_NCCL_MPI
    if (c->st != stage::none)
        return ncclSuccess; /* MPI may still write into its buffers: left as they are */
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (c->mpi != MPI_COMM_NULL && !finalized && may_call_mpi())
        MPI_Comm_free(&c->mpi);
#endif
    delete c;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) { return end_comm(comm, "ncclCommDestroy"); }
extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) { return end_comm(comm, "ncclCommAbort"); }

extern "C" const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

extern "C" const char *ncclGetLastError(ncclComm_t comm)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    return c ? c->last : last_global;
}

/* ----------------------------------------------------------- collectives */

/* A collective's buffers: send_bytes at send (not read when send_used is
 * false: a broadcast's non-root), recv_bytes at recv, and the one overlap
 * NCCL allows (send == in_place_send when recv is the receive buffer). */
struct coll_args {
    const char *what;
    kind k;
    const void *send;
    void *recv;
    size_t count; /* elements per rank's block */
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
    ncclComm_t comm;
    cudaStream_t stream;
};

static bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return x < y + nb && y < x + na;
}

static ncclResult_t collective(const coll_args &a)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(a.comm);
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "%s: no such communicator", a.what);
    if (c->async != ncclSuccess)
        return fail(c, c->async, "%s: the communicator failed before (%s)", a.what, ncclGetErrorString(c->async));
    if (busy(c)) /* NCCL's rule for a non-blocking communicator, kept strictly */
        return fail(c, ncclInvalidUsage, "%s: the communicator is still being made, or a call on it answered "
                    "ncclInProgress (poll ncclCommGetAsyncError until ncclSuccess first)", a.what);
    const size_t es = type_size(a.type);
    if (!es)
        return fail(c, ncclInvalidArgument, "%s: unknown data type %d", a.what, (int)a.type);
    if ((unsigned)a.op >= ncclNumOps)
        return fail(c, ncclInvalidArgument, "%s: unknown operation %d", a.what, (int)a.op);
    if (a.k == kind::broadcast && (a.root < 0 || a.root >= c->nranks))
        return fail(c, ncclInvalidArgument, "%s: root %d of %d ranks", a.what, a.root, c->nranks);
    if (!emu::stream_valid(a.stream, a.what))
        return fail(c, ncclInvalidArgument, "%s: not a stream", a.what);
    if (a.count == 0)
        return ncclSuccess;
    const size_t n = (size_t)c->nranks, block = a.count * es;
    size_t send_bytes = block, recv_bytes = block;
    const void *in_place = a.recv; /* the send buffer NCCL takes as in place */
    if (a.k == kind::all_gather) {
        recv_bytes = block * n;
        in_place = (const char *)a.recv + (size_t)c->rank * block;
    } else if (a.k == kind::reduce_scatter) {
        send_bytes = block * n;
        in_place = (const char *)a.recv - (size_t)c->rank * block;
    }
    const bool send_used = a.k != kind::broadcast || c->rank == a.root;
    const bool inplace = a.send == in_place;
    if ((send_used && !emu::device_range(a.send, send_bytes)) || !emu::device_range(a.recv, recv_bytes)) {
        const bool bad_send = send_used && !emu::device_range(a.send, send_bytes);
        emu::misuse("%s(send %p, %zu bytes; recv %p, %zu bytes): the %s buffer is not (all) inside one live device "
                    "allocation", a.what, a.send, send_bytes, a.recv, recv_bytes, bad_send ? "send" : "receive");
        return fail(c, ncclInvalidArgument, "%s: a buffer outside device memory", a.what);
    }
    if (send_used && !inplace && overlap(a.send, send_bytes, a.recv, recv_bytes)) {
        emu::misuse("%s(send %p, %zu bytes; recv %p, %zu bytes): the buffers overlap, and not in NCCL's in-place "
                    "form (send at %p)", a.what, a.send, send_bytes, a.recv, recv_bytes, in_place);
        return fail(c, ncclInvalidArgument, "%s: overlapping buffers", a.what);
    }
    if (n == 1) { /* the data as it is: a copy unless in place */
        if (inplace || !send_used)
            return ncclSuccess;
        if (cudaMemcpyAsync(a.recv, a.send, block, cudaMemcpyDeviceToDevice, a.stream) != cudaSuccess)
            return fail(c, ncclUnhandledCudaError, "%s: the copy of %zu bytes failed (cudaemu said why)", a.what,
                        block);
        return ncclSuccess;
    }
#ifndef CUDAEMU_NCCL_MPI
    return fail(c, ncclInternalError, "%s: %d ranks without MPI", a.what, c->nranks);
#else
    if (send_bytes > INT_MAX)
        return fail(c, ncclInvalidArgument, "%s: %zu bytes: cudaemu's NCCL moves at most 2^31 - 1 bytes per rank "
                    "in one call", a.what, send_bytes);
    if (!may_call_mpi())
        return fail(c, ncclInvalidUsage, "%s: called off the thread that started MPI", a.what);
    /* This rank's bytes to the host. */
    c->mine.assign(send_used ? send_bytes : block, 0);
    if (send_used &&
        cudaMemcpyAsync(c->mine.data(), a.send, send_bytes, cudaMemcpyDeviceToHost, a.stream) != cudaSuccess)
        return fail(c, ncclUnhandledCudaError, "%s: reading the send buffer failed (cudaemu said why)", a.what);
    c->k = a.k;
    c->what = a.what;
    c->recv = a.recv;
    c->count = a.count;
    c->type = a.type;
    c->op = a.op;
    c->stream = a.stream;
    int rc = MPI_SUCCESS;
    const int b = (int)block;
    switch (a.k) {
    case kind::all_reduce:
    case kind::all_gather:
        c->all.assign(block * n, 0);
        rc = MPI_Iallgather(c->mine.data(), b, MPI_BYTE, c->all.data(), b, MPI_BYTE, c->mpi, &c->req);
        break;
    case kind::reduce_scatter: /* rank j's block j of every rank */
        c->all.assign(block * n, 0);
        rc = MPI_Ialltoall(c->mine.data(), b, MPI_BYTE, c->all.data(), b, MPI_BYTE, c->mpi, &c->req);
        break;
    case kind::broadcast:
        c->all = c->mine;
        rc = MPI_Ibcast(c->all.data(), b, MPI_BYTE, a.root, c->mpi, &c->req);
        break;
    }
    if (rc != MPI_SUCCESS)
        return mpi_failed(c, rc, a.what);
    c->st = stage::coll;
    if (c->blocking)
        return settle_blocking(c);
    c->unpolled = true;
    return ncclInProgress;
#endif
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t stream)
{
    return collective({"ncclAllReduce", kind::all_reduce, send, recv, count, t, op, 0, comm, stream});
}

extern "C" ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                      ncclComm_t comm, cudaStream_t stream)
{
    return collective({"ncclBroadcast", kind::broadcast, send, recv, count, t, ncclSum, root, comm, stream});
}

extern "C" ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
                                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return collective({"ncclReduceScatter", kind::reduce_scatter, send, recv, recvcount, t, op, 0, comm, stream});
}

extern "C" ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
                                      ncclComm_t comm, cudaStream_t stream)
{
    return collective({"ncclAllGather", kind::all_gather, send, recv, sendcount, t, ncclSum, 0, comm, stream});
}
