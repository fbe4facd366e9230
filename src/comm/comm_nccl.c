/*
 * comm_nccl.c - comm_nccl.h: comm.h's collectives on CUDA buffers, through
 * NCCL (built with AMPC_HAVE_NCCL: a CUDA build that found nccl.h and
 * libnccl; on cudaemu, tests/cuda_emu/nccl.cc: one rank, or the MPI processes).
 *
 * The communicator: one per process, made at the first CUDA collective.
 * Every rank opens NCCL (dlopen of libnccl.so.2 at that moment, as gemm.cu
 * opens cuBLASLt: a program that never runs a CUDA collective maps none of
 * NCCL's 200 MB) and the ranks agree over MPI that all of them could; rank
 * 0's ncclGetUniqueId is broadcast over MPI (comm_bcast on the host); then
 * ncclCommInitRankConfig on the device the CUDA backend chose (its local
 * rank modulo the devices: runtime.cu). The communicator is non-blocking
 * (config.blocking = 0), so no NCCL call can hold the host past the
 * deadline: a call that answers ncclInProgress is polled with
 * ncclCommGetAsyncError until it settles or comm_timeout() passes.
 *
 * An operation: an event recorded on the backend's stream, a side stream
 * that waits for it, the NCCL call on the side stream, and a done event
 * recorded after it. comm_nccl_wait makes the backend's stream wait for
 * the done event (cudaStreamWaitEvent): no host synchronisation, so the
 * scaler's found_inf and the clipping norm stay on the device. The caller
 * keeps the buffers alive until it has waited (the caching allocator's
 * reuse is ordered on the backend's stream, which then follows the
 * operation).
 *
 * Timeouts: the host never waits for an operation, so a peer that died
 * would leave the device (and a later amp_item) stuck. An operation
 * waited for stays on a watch list until its done event completes, and a
 * watchdog thread (started with the communicator, one check every 100 ms)
 * looks at that list; comm_nccl_test looks at the operation it is given
 * (one not yet waited for). An operation older than comm_timeout(), or an
 * error that ncclCommGetAsyncError reports, aborts the communicator
 * (ncclCommAbort, which ends its kernels) and the job (comm_abort, which
 * names the operation and the rank; from the watchdog that is an
 * MPI_Abort off the thread that started MPI, which MPI_THREAD_FUNNELED
 * does not promise; Open MPI's asks the launcher to end the job and
 * exits, which is all that is wanted here). An NCCL failure is never returned as
 * a plain error once the ranks are in a collective together: one rank
 * cannot leave it alone, so the job ends with NCCL's message.
 */
#include "comm/comm_nccl.h"
#include "comm/comm.h"

#include "backend/cuda/cuda_backend.h"
#include "base/base.h"
#include "dtype/dtype.h"

#include <stdint.h>

amp_status comm_nccl_copy(void *dst, const void *src, int64_t n, amp_dtype dt)
{
    return cuda_copy(dst, AMP_CUDA, src, AMP_CUDA, (size_t)n * amp_dtype_size(dt));
}

#ifndef AMPC_HAVE_NCCL

bool comm_built_with_nccl(void) { return false; }

static amp_status no_nccl(void)
{
    return amp_set_error(AMP_ERR_DEVICE, "dist: collectives on cuda tensors need NCCL, and this build of ampc "
                                         "has none (a CUDA build with NCCL found: nccl.h and libnccl, e.g. "
                                         "the CUDA toolkit's or Debian's libnccl-dev)");
}

amp_status comm_nccl_allreduce(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, nccl_op **out)
{
    (void)buf, (void)n, (void)dt, (void)op, (void)out;
    return no_nccl();
}

amp_status comm_nccl_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, nccl_op **out)
{
    (void)send, (void)recv, (void)n, (void)dt, (void)out;
    return no_nccl();
}

amp_status comm_nccl_reduce_scatter(const void *send, void *recv, int64_t n, amp_dtype dt, nccl_op **out)
{
    (void)send, (void)recv, (void)n, (void)dt, (void)out;
    return no_nccl();
}

amp_status comm_nccl_bcast(void *buf, int64_t n, amp_dtype dt, int root)
{
    (void)buf, (void)n, (void)dt, (void)root;
    return no_nccl();
}

bool comm_nccl_test(nccl_op *op)
{
    (void)op;
    return true;
}

amp_status comm_nccl_wait(nccl_op *op, const char *what)
{
    (void)op, (void)what;
    return AMP_OK;
}

int64_t comm_nccl_ops(void) { return 0; }
void comm_nccl_finalize(void) {}

#else /* AMPC_HAVE_NCCL */

#include <cuda_runtime.h>
#include <nccl.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool comm_built_with_nccl(void) { return true; }

/* ------------------------------------------------------------ the library */

#define NCCL_FNS(X)                                                                                                \
    X(GetVersion) X(GetUniqueId) X(CommInitRankConfig) X(CommGetAsyncError) X(CommAbort) X(CommFinalize)          \
    X(CommDestroy) X(AllReduce) X(AllGather) X(ReduceScatter) X(Broadcast) X(GetErrorString) X(GetLastError)

static struct {
#define X(f) __typeof__(&nccl##f) f;
    NCCL_FNS(X)
#undef X
} api;

/* NCCL 2.14 brought non-blocking communicators (ncclConfig_t.blocking). */
#define MIN_VERSION 21400

/* Fills api; false with msg set when NCCL cannot be used here. */
static bool load_api(char *msg, size_t size)
{
#ifdef AMPC_NCCL_EMU
    (void)msg, (void)size;
#define X(f) api.f = nccl##f;
    NCCL_FNS(X)
#undef X
#else
    static const char *const names[] = {"libnccl.so.2", "libnccl.so",
#ifdef AMPC_NCCL_PATH
                                        AMPC_NCCL_PATH,
#endif
    };
    void *h = NULL;
    const char *err = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        if (!(h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
            err = dlerror();
    if (!h) {
        snprintf(msg, size, "NCCL could not be loaded (%s): install NCCL 2 (libnccl2) or add its directory to "
                 "LD_LIBRARY_PATH", err ? err : "libnccl.so.2 not found");
        return false;
    }
#define X(f)                                                                                                       \
    if (!(api.f = (__typeof__(&nccl##f))dlsym(h, "nccl" #f))) {                                                    \
        snprintf(msg, size, "the NCCL library found has no nccl" #f " (NCCL %d.%d or later is needed)",          \
                 MIN_VERSION / 10000, MIN_VERSION / 100 % 100);                                                   \
        return false;                                                                                              \
    }
    NCCL_FNS(X)
#undef X
#endif
    int v = 0;
    if (api.GetVersion(&v) != ncclSuccess || v < MIN_VERSION) {
        snprintf(msg, size, "NCCL %d.%d.%d was found; ampc needs %d.%d or later (non-blocking communicators)",
                 v / 10000, v / 100 % 100, v % 100, MIN_VERSION / 10000, MIN_VERSION / 100 % 100);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- state */

/* An operation in flight: its done event and deadline, named for the
 * timeout's message. Handed out by the collectives; after
 * comm_nccl_wait (or when its event is found complete) it is the watch
 * list's until the event completes, then back in the pool. */
struct nccl_op {
    cudaEvent_t done;
    double deadline;
    char what[96];
    nccl_op *next;
};

static ncclComm_t g_comm;
static cudaStream_t g_side;   /* NCCL's stream */
static cudaEvent_t g_ready;   /* recorded on the backend's stream before each operation */
static int g_device;
static char g_failed[384];    /* why the communicator could not be made (sticky: the ranks agreed) */
static int64_t g_ops;         /* operations started, for the tests */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* guards the lists and g_stop */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static nccl_op *g_watch;      /* waited for, event not seen complete yet */
static nccl_op *g_pool;       /* free, with their events */
static pthread_t g_dog;
static bool g_dog_on, g_stop;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Aborts the communicator and ends the job, naming what went wrong. */
static _Noreturn void fail_job(const char *what, const char *why)
{
    if (g_comm)
        api.CommAbort(g_comm);
    comm_abort(1, "NCCL: %s: %s; ending the job", what, why);
}

static void nccl_why(ncclResult_t r, char *buf, size_t size)
{
    const char *last = g_comm && api.GetLastError ? api.GetLastError(g_comm) : NULL;
    snprintf(buf, size, "%s%s%s", api.GetErrorString ? api.GetErrorString(r) : "error", last && *last ? ": " : "",
             last ? last : "");
}

/* Whether the communicator has failed (an error from a kernel, a network
 * error, a peer that aborted): then ends the job. */
static void check_async(const char *what)
{
    ncclResult_t r = ncclSuccess;
    if (api.CommGetAsyncError(g_comm, &r) != ncclSuccess)
        r = ncclInternalError;
    if (r != ncclSuccess && r != ncclInProgress) {
        char why[320];
        nccl_why(r, why, sizeof why);
        fail_job(what, why);
    }
}

/* Waits (polling, never blocking in NCCL) until a call on the
 * non-blocking communicator settles; past the deadline, or on an error,
 * ends the job. */
static void settle(ncclResult_t r, const char *what)
{
    const double deadline = now_s() + comm_timeout();
    while (r == ncclInProgress) {
        if (now_s() > deadline) {
            char why[160];
            snprintf(why, sizeof why, "timed out after %g s (another rank stopped, or is stuck; AMPC_DIST_TIMEOUT "
                     "sets the limit)", comm_timeout());
            fail_job(what, why);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
        if (api.CommGetAsyncError(g_comm, &r) != ncclSuccess)
            r = ncclInternalError;
    }
    if (r != ncclSuccess) {
        char why[320];
        nccl_why(r, why, sizeof why);
        fail_job(what, why);
    }
}

static void cuda_or_fail(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        fail_job(what, cudaGetErrorString(e));
}

/* ------------------------------------------------------------- watchdog */

/* Takes the completed operations off the watch list (back into the pool);
 * the first one past its deadline, if any, is returned (under g_mu). */
static nccl_op *reap_locked(double now)
{
    nccl_op **pp = &g_watch, *late = NULL;
    while (*pp) {
        nccl_op *op = *pp;
        cudaError_t e = cudaEventQuery(op->done);
        if (e == cudaSuccess) {
            *pp = op->next;
            op->next = g_pool;
            g_pool = op;
            continue;
        }
        if (e != cudaErrorNotReady) {
            fprintf(stderr, "ampc: rank %d: NCCL: %s: %s\n", comm_rank(), op->what, cudaGetErrorString(e));
            return op;
        }
        if (now > op->deadline && !late)
            late = op;
        pp = &op->next;
    }
    return late;
}

static void *watchdog(void *arg)
{
    (void)arg;
    cudaSetDevice(g_device);
    pthread_mutex_lock(&g_mu);
    while (!g_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g_cv, &g_mu, &ts);
        if (g_stop || !g_watch)
            continue;
        nccl_op *late = reap_locked(now_s());
        if (late) {
            char what[96];
            snprintf(what, sizeof what, "%s", late->what);
            pthread_mutex_unlock(&g_mu);
            /* From this thread: the main one may be blocked on the device
             * (a copy to the host behind the stuck operation).
             * ncclCommAbort ends NCCL's kernels; comm_abort's MPI_Abort
             * only signals the launcher, which ends every rank. */
            char why[160];
            snprintf(why, sizeof why, "not done after %g s (another rank stopped, or is stuck; AMPC_DIST_TIMEOUT "
                     "sets the limit)", comm_timeout());
            fail_job(what, why);
        }
        if (g_watch) {
            pthread_mutex_unlock(&g_mu);
            check_async("the communicator");
            pthread_mutex_lock(&g_mu);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* --------------------------------------------------------- communicator */

/* Makes the communicator (every rank at the same collective: the first
 * on CUDA buffers). An error that every rank agrees on comes back as an
 * error on every rank (and again at every later CUDA collective). Before
 * comm_init (or without MPI) the world is one rank and the host
 * collectives below are the identity: a one-rank communicator, which
 * test_dist_cuda uses where MPI is missing. */
static amp_status ensure_comm(void)
{
    if (g_comm)
        return AMP_OK;
    if (g_failed[0])
        return amp_set_error(AMP_ERR_DEVICE, "dist: %s", g_failed);
    /* 1. Every rank has a device and the library, or every rank says why
     * not (nobody enters ncclCommInitRank alone). */
    char msg[320] = "";
    if (cuda_device_count() <= 0)
        snprintf(msg, sizeof msg, "%s", cuda_unavailable_reason());
    else if (load_api(msg, sizeof msg))
        msg[0] = '\0';
    int32_t bad = msg[0] ? comm_rank() + 1 : 0;
    amp_status st = comm_allreduce(&bad, 1, AMP_I32, AMP_REDUCE_MAX, AMP_CPU, NULL);
    if (st != AMP_OK)
        return st;
    if (bad) {
        if (msg[0])
            snprintf(g_failed, sizeof g_failed, "NCCL cannot start on rank %d: %s", comm_rank(), msg);
        else
            snprintf(g_failed, sizeof g_failed, "NCCL cannot start on rank %d (its own message says why)",
                     (int)bad - 1);
        return amp_set_error(AMP_ERR_DEVICE, "dist: %s", g_failed);
    }
    /* 2. Rank 0's unique id, over MPI (with whether rank 0 got one). */
    struct {
        int32_t ok, pad;
        ncclUniqueId id;
    } hello;
    memset(&hello, 0, sizeof hello);
    g_device = cuda_device_index();
    cuda_or_fail(cudaSetDevice(g_device), "cudaSetDevice");
    if (comm_rank() == 0) {
        ncclResult_t r = api.GetUniqueId(&hello.id);
        hello.ok = r == ncclSuccess;
        if (!hello.ok)
            snprintf(msg, sizeof msg, "ncclGetUniqueId failed: %s", api.GetErrorString(r));
    }
    _Static_assert(sizeof hello % sizeof(int32_t) == 0, "the hello is moved as int32s");
    st = comm_bcast(&hello, (int64_t)(sizeof hello / sizeof(int32_t)), AMP_I32, 0, AMP_CPU);
    if (st != AMP_OK)
        return st;
    if (!hello.ok) {
        snprintf(g_failed, sizeof g_failed, "NCCL cannot start: rank 0: %s",
                 msg[0] ? msg : "ncclGetUniqueId failed (rank 0's message says why)");
        return amp_set_error(AMP_ERR_DEVICE, "dist: %s", g_failed);
    }
    /* 3. The communicator (non-blocking), the side stream, the events. */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = api.CommInitRankConfig(&c, comm_size(), hello.id, comm_rank(), &cfg);
    g_comm = c;
    if (!g_comm) {
        char why[320];
        nccl_why(r, why, sizeof why);
        fail_job("ncclCommInitRankConfig", why);
    }
    settle(r, "making the communicator (ncclCommInitRankConfig)");
    cuda_or_fail(cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cuda_or_fail(cudaEventCreateWithFlags(&g_ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    g_stop = false;
    if (pthread_create(&g_dog, NULL, watchdog, NULL) != 0)
        fail_job("starting the watchdog thread", "pthread_create failed");
    g_dog_on = true;
    return AMP_OK;
}

/* ----------------------------------------------------------- operations */

static ncclDataType_t nccl_type(amp_dtype dt)
{
    switch (dt) {
    case AMP_F32: return ncclFloat32;
    case AMP_F16: return ncclFloat16;
    case AMP_BF16: return ncclBfloat16;
    case AMP_I32: return ncclInt32;
    case AMP_I64: return ncclInt64;
    default: return ncclUint8;
    }
}

static ncclRedOp_t nccl_op_of(amp_reduce_op op)
{
    return op == AMP_REDUCE_AVG ? ncclAvg : op == AMP_REDUCE_MAX ? ncclMax : ncclSum;
}

/* An operation from the pool (or a new one), its side stream made to
 * wait for the backend's stream. NULL: out of memory (error set). */
static nccl_op *begin(const char *what)
{
    pthread_mutex_lock(&g_mu);
    if (!g_pool && g_watch)
        reap_locked(now_s());
    nccl_op *op = g_pool;
    if (op)
        g_pool = op->next;
    pthread_mutex_unlock(&g_mu);
    if (!op) {
        op = calloc(1, sizeof *op);
        if (!op) {
            amp_set_error(AMP_ERR_MEMORY, "dist: out of memory");
            return NULL;
        }
        cuda_or_fail(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    op->next = NULL;
    snprintf(op->what, sizeof op->what, "%s", what);
    op->deadline = now_s() + comm_timeout();
    cuda_or_fail(cudaEventRecord(g_ready, (cudaStream_t)cuda_stream_handle()), "cudaEventRecord");
    cuda_or_fail(cudaStreamWaitEvent(g_side, g_ready, 0), "cudaStreamWaitEvent");
    return op;
}

/* After the NCCL call r: settled, the done event recorded, handed out. */
static amp_status end(nccl_op *op, ncclResult_t r, nccl_op **out)
{
    settle(r, op->what);
    cuda_or_fail(cudaEventRecord(op->done, g_side), "cudaEventRecord");
    g_ops++;
    *out = op;
    return AMP_OK;
}

amp_status comm_nccl_allreduce(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, nccl_op **out)
{
    amp_status st = ensure_comm();
    if (st != AMP_OK)
        return st;
    nccl_op *o = begin("an all-reduce (ncclAllReduce)");
    if (!o)
        return AMP_ERR_MEMORY;
    return end(o, api.AllReduce(buf, buf, (size_t)n, nccl_type(dt), nccl_op_of(op), g_comm, g_side), out);
}

/* Bytes per element as NCCL moves dt (1 where dt has no NCCL type). */
static size_t moved_size(amp_dtype dt) { return nccl_type(dt) == ncclUint8 ? amp_dtype_size(dt) : 1; }

amp_status comm_nccl_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, nccl_op **out)
{
    amp_status st = ensure_comm();
    if (st != AMP_OK)
        return st;
    /* send == recv is MPI's in place (this rank's block already in recv);
     * NCCL's in place is send at this rank's block of recv. */
    if (send == recv)
        send = (const char *)recv + (size_t)comm_rank() * (size_t)n * amp_dtype_size(dt);
    nccl_op *o = begin("an all-gather (ncclAllGather)");
    if (!o)
        return AMP_ERR_MEMORY;
    return end(o, api.AllGather(send, recv, (size_t)n * moved_size(dt), nccl_type(dt), g_comm, g_side), out);
}

amp_status comm_nccl_reduce_scatter(const void *send, void *recv, int64_t n, amp_dtype dt, nccl_op **out)
{
    amp_status st = ensure_comm();
    if (st != AMP_OK)
        return st;
    nccl_op *o = begin("a reduce-scatter (ncclReduceScatter)");
    if (!o)
        return AMP_ERR_MEMORY;
    return end(o, api.ReduceScatter(send, recv, (size_t)n, nccl_type(dt), ncclSum, g_comm, g_side), out);
}

amp_status comm_nccl_bcast(void *buf, int64_t n, amp_dtype dt, int root)
{
    amp_status st = ensure_comm();
    if (st != AMP_OK)
        return st;
    nccl_op *o = begin("a broadcast (ncclBroadcast)");
    if (!o)
        return AMP_ERR_MEMORY;
    nccl_op *done = NULL;
    end(o, api.Broadcast(buf, buf, (size_t)n * moved_size(dt), nccl_type(dt), root, g_comm, g_side), &done);
    return comm_nccl_wait(done, "a broadcast (ncclBroadcast)");
}

bool comm_nccl_test(nccl_op *op)
{
    if (!op)
        return true;
    cudaError_t e = cudaEventQuery(op->done);
    if (e == cudaSuccess)
        return true;
    if (e != cudaErrorNotReady)
        fail_job(op->what, cudaGetErrorString(e));
    check_async(op->what);
    if (now_s() > op->deadline) {
        char why[160];
        snprintf(why, sizeof why, "not done after %g s (another rank stopped, or is stuck; AMPC_DIST_TIMEOUT sets "
                 "the limit)", comm_timeout());
        fail_job(op->what, why);
    }
    return false;
}

amp_status comm_nccl_wait(nccl_op *op, const char *what)
{
    if (!op)
        return AMP_OK;
    if (what)
        snprintf(op->what, sizeof op->what, "%s", what);
    cuda_or_fail(cudaStreamWaitEvent((cudaStream_t)cuda_stream_handle(), op->done, 0), "cudaStreamWaitEvent");
    pthread_mutex_lock(&g_mu);
    op->next = g_watch;
    g_watch = op;
    pthread_mutex_unlock(&g_mu);
    return AMP_OK;
}

int64_t comm_nccl_ops(void) { return g_ops; }

static void free_list(nccl_op *op)
{
    while (op) {
        nccl_op *next = op->next;
        cudaEventDestroy(op->done);
        free(op);
        op = next;
    }
}

void comm_nccl_finalize(void)
{
    if (!g_comm) {
        g_failed[0] = '\0';
        return;
    }
    if (g_dog_on) {
        pthread_mutex_lock(&g_mu);
        g_stop = true;
        pthread_cond_signal(&g_cv);
        pthread_mutex_unlock(&g_mu);
        pthread_join(g_dog, NULL);
        g_dog_on = false;
    }
    /* What is still in flight finishes first (polled, with the deadline). */
    for (;;) {
        pthread_mutex_lock(&g_mu);
        nccl_op *late = g_watch ? reap_locked(now_s()) : NULL;
        bool left = g_watch != NULL;
        pthread_mutex_unlock(&g_mu);
        if (late)
            fail_job(late->what, "not done at amp_dist_finalize, past the timeout");
        if (!left)
            break;
        check_async("amp_dist_finalize");
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    settle(api.CommFinalize(g_comm), "ending the communicator (ncclCommFinalize)");
    api.CommDestroy(g_comm);
    g_comm = NULL;
    free_list(g_pool);
    g_pool = NULL;
    cudaEventDestroy(g_ready);
    cudaStreamDestroy(g_side);
    g_failed[0] = '\0';
}

#endif /* AMPC_HAVE_NCCL */
