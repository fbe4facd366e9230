/*
 * comm_nccl.c - the NCCL engine (comm_engine.h): collectives on CUDA
 * buffers (built with AMPC_HAVE_NCCL: a CUDA build that found nccl.h and
 * libnccl; on cudaemu, tests/cuda_emu/nccl.cc: one rank, or the MPI
 * processes). What it needs of the device comes from the CUDA backend's
 * table (backend_of(AMP_CUDA): whether there is a device, which one, its
 * stream); what it needs of the world from the comm_world it is given.
 *
 * The communicator: one per process, made at the first CUDA collective.
 * Every rank opens NCCL (dlopen of libnccl.so.2 at that moment, as gemm.cu
 * opens cuBLASLt: a program that never runs a CUDA collective maps none of
 * NCCL's 200 MB) and the ranks agree that all of them could (the world's
 * agree: else every rank gets the same error, naming the rank); rank 0's
 * ncclGetUniqueId is sent to every rank (the world's bcast_host); then
 * ncclCommInitRankConfig on the device the CUDA backend chose (its local
 * rank modulo the devices: runtime.cu). The communicator is non-blocking
 * (config.blocking = 0), so no NCCL call can hold the host past the
 * deadline: a call that answers ncclInProgress is polled with
 * ncclCommGetAsyncError until it settles or the timeout passes, listening
 * meanwhile for another rank's failure (the world's check).
 *
 * An operation: an event recorded on the backend's stream, a side stream
 * that waits for it, the NCCL call on the side stream, and a done event
 * recorded after it. wait makes the backend's stream wait for the done
 * event (cudaStreamWaitEvent): no host synchronisation, so the scaler's
 * found_inf and the clipping norm stay on the device. The caller keeps the
 * buffers alive until it has waited (the caching allocator's reuse is
 * ordered on the backend's stream, which then follows the operation).
 *
 * Failures: once the ranks are in a collective together an NCCL failure
 * cannot be returned as this rank's own (one rank cannot leave a
 * collective alone): the communicator is aborted (ncclCommAbort, which
 * ends its kernels) and the world's fail / timed_out end the world with
 * the message, telling the other ranks. Since the host never waits for an
 * operation, a peer that died would leave the device (and a later amp_item)
 * stuck: an operation waited for stays on a watch list until its done
 * event completes, and a watchdog thread (started with the communicator,
 * one check every 100 ms) looks at that list; test looks at the operation
 * it is given (one not yet waited for). An operation older than the
 * timeout, or an error that ncclCommGetAsyncError reports, makes the
 * watchdog abort the communicator (so a host blocked on the device wakes)
 * and keep the reason, which the next call on this thread returns (the
 * watchdog calls nothing of the world: MPI is the main thread's).
 */
#include "comm/comm_engine.h"

#include "backend/backend.h"
#include "base/base.h"
#include "dtype/dtype.h"

#include <stdint.h>

static const comm_world *W;
static void nccl_attach(const comm_world *w) { W = w; }

#ifndef AMPC_HAVE_NCCL

static bool nccl_available(void) { return false; }

static const char *nccl_reason(void)
{
    return "this build of ampc has none (a CUDA build with NCCL found: nccl.h and libnccl, e.g. the CUDA toolkit's "
           "or Debian's libnccl-dev)";
}

#else /* AMPC_HAVE_NCCL */

#include <cuda_runtime.h>
#include <nccl.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
 * messages. Handed out by the collectives; after wait (or when its event
 * is found complete) it is the watch list's until the event completes,
 * then back in the pool. */
struct comm_op {
    cudaEvent_t done;
    double deadline, limit;
    char what[96];
    comm_op *next;
};

static ncclComm_t g_comm;     /* NULL once aborted (g_mu: the watchdog may abort it) */
static cudaStream_t g_side;   /* NCCL's stream */
static cudaEvent_t g_ready;   /* recorded on the backend's stream before each operation */
static cudaEvent_t g_spare;   /* the done event of an operation without memory for its own */
static int g_device;
static bool g_made;           /* the communicator, stream and events exist (until finalize) */
static char g_failed[384];    /* why the communicator could not be made (agreed: every later call says so) */
static char g_aborted[384];   /* why the watchdog aborted it (g_mu), for the next call to return */
static int64_t g_ops;         /* operations started, for the tests */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* guards g_comm, g_aborted, the lists and g_stop */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static comm_op *g_watch;      /* waited for, event not seen complete yet */
static comm_op *g_pool;       /* free, with their events */
static pthread_t g_dog;
static bool g_dog_on, g_stop;

static bool nccl_available(void) { return true; }
static const char *nccl_reason(void) { return ""; }

static const amp_backend *cuda_be(void) { return backend_of(AMP_CUDA); }
static cudaStream_t backend_stream(void) { return (cudaStream_t)cuda_be()->queue_handle(); }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* NCCL's words for r (under g_mu, or on the thread that owns g_comm). */
static void nccl_why(ncclResult_t r, char *buf, size_t size)
{
    const char *last = g_comm && api.GetLastError ? api.GetLastError(g_comm) : NULL;
    snprintf(buf, size, "%s%s%s", api.GetErrorString ? api.GetErrorString(r) : "error", last && *last ? ": " : "",
             last ? last : "");
}

/* Ends NCCL's kernels and the communicator (under g_mu). */
static void abort_locked(void)
{
    if (g_comm)
        api.CommAbort(g_comm);
    g_comm = NULL;
}

static void abort_comm(void)
{
    pthread_mutex_lock(&g_mu);
    abort_locked();
    pthread_mutex_unlock(&g_mu);
}

/* This rank cannot go on with the others: the communicator aborted, the
 * world ended (the other ranks told). */
static amp_status fail_world(const char *what, const char *why)
{
    abort_comm();
    return W->fail(what, why);
}

static amp_status fail_cuda(cudaError_t e, const char *what)
{
    char why[160];
    snprintf(why, sizeof why, "%s", cudaGetErrorString(e));
    return fail_world(what, why);
}

/* AMP_OK, or the error that ended the world or this communicator (the
 * watchdog's abort included). */
static amp_status usable(void)
{
    amp_status st = W->check();
    if (st != AMP_OK)
        return st;
    char why[sizeof g_aborted] = "";
    pthread_mutex_lock(&g_mu);
    snprintf(why, sizeof why, "%s", g_aborted);
    pthread_mutex_unlock(&g_mu);
    return why[0] ? W->fail("NCCL", why) : AMP_OK;
}

/* The communicator's asynchronous error, if any (a kernel's, the
 * network's, a peer that aborted): then the world ends. */
static amp_status check_async(const char *what)
{
    ncclResult_t r = ncclSuccess;
    char why[sizeof g_aborted] = "";
    pthread_mutex_lock(&g_mu);
    if (!g_comm)
        snprintf(why, sizeof why, "%s", g_aborted[0] ? g_aborted : "the communicator was aborted");
    else if (api.CommGetAsyncError(g_comm, &r) != ncclSuccess)
        r = ncclInternalError;
    if (!why[0] && r != ncclSuccess && r != ncclInProgress)
        nccl_why(r, why, sizeof why);
    pthread_mutex_unlock(&g_mu);
    return why[0] ? fail_world(what, why) : AMP_OK;
}

/* Polls (never blocking in NCCL) until a call on the non-blocking
 * communicator settles; past the deadline, on an error, or when another
 * rank failed meanwhile, the communicator is aborted and the world ends. */
static amp_status settle(ncclResult_t r, const char *what)
{
    const double deadline = now_s() + W->timeout();
    while (r == ncclInProgress) {
        amp_status st = W->check();
        if (st != AMP_OK) {
            abort_comm();
            return st;
        }
        if (now_s() > deadline) {
            abort_comm();
            return W->timed_out(what);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_mu);
        if (!g_comm || api.CommGetAsyncError(g_comm, &r) != ncclSuccess)
            r = ncclInternalError;
        pthread_mutex_unlock(&g_mu);
    }
    if (r != ncclSuccess) {
        char why[sizeof g_aborted];
        pthread_mutex_lock(&g_mu);
        if (!g_comm && g_aborted[0]) /* the watchdog's abort: its reason */
            snprintf(why, sizeof why, "%s", g_aborted);
        else
            nccl_why(r, why, sizeof why);
        pthread_mutex_unlock(&g_mu);
        return fail_world(what, why);
    }
    return AMP_OK;
}

/* ------------------------------------------------------------- watchdog */

/* Takes the completed operations off the watch list (back into the pool);
 * the first one past its deadline, or whose event failed, is returned
 * with the reason in why (under g_mu). */
static comm_op *reap_locked(double now, char *why, size_t size)
{
    comm_op **pp = &g_watch, *late = NULL;
    while (*pp) {
        comm_op *op = *pp;
        cudaError_t e = cudaEventQuery(op->done);
        if (e == cudaSuccess) {
            *pp = op->next;
            op->next = g_pool;
            g_pool = op;
            continue;
        }
        if (!late && e != cudaErrorNotReady) {
            late = op;
            snprintf(why, size, "%s: %s", op->what, cudaGetErrorString(e));
        } else if (!late && now > op->deadline) {
            late = op;
            snprintf(why, size, "%s: not done after %g s (another rank stopped, or is stuck; AMPC_DIST_TIMEOUT "
                     "sets the limit)", op->what, op->limit);
        }
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
        if (g_stop || !g_watch || !g_comm)
            continue;
        char why[sizeof g_aborted] = "";
        if (!reap_locked(now_s(), why, sizeof why) && g_watch) {
            ncclResult_t r = ncclSuccess;
            if (api.CommGetAsyncError(g_comm, &r) != ncclSuccess)
                r = ncclInternalError;
            if (r != ncclSuccess && r != ncclInProgress) {
                char what[320];
                nccl_why(r, what, sizeof what);
                snprintf(why, sizeof why, "the communicator: %s", what);
            }
        }
        /* From this thread: the main one may be blocked on the device (a
         * copy to the host behind the stuck operation); the abort ends
         * NCCL's kernels, and the main thread's next call returns why. */
        if (why[0]) {
            abort_locked();
            snprintf(g_aborted, sizeof g_aborted, "%s", why);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* --------------------------------------------------------- communicator */

/* Makes the communicator (every rank at the same collective: the first
 * on CUDA buffers). A failure to start that every rank agrees on comes
 * back as the same error on every rank (and again at every later CUDA
 * collective). Before the world has several ranks its agree and
 * bcast_host are the identity: a one-rank communicator, which
 * test_dist_cuda uses where MPI is missing. */
static amp_status ensure_comm(void)
{
    if (g_made)
        return usable();
    if (g_failed[0])
        return amp_set_error(AMP_ERR_DEVICE, "%s", g_failed);
    amp_status st = W->check();
    if (st != AMP_OK)
        return st;
    /* 1. Every rank has a device and the library (nobody enters
     * ncclCommInitRankConfig alone), and rank 0 an id. */
    const amp_backend *be = cuda_be();
    char msg[320] = "";
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (!be->available()) {
        snprintf(msg, sizeof msg, "%s", be->unavailable_reason());
    } else if (load_api(msg, sizeof msg)) { /* (else msg says why) */
        if (cudaSetDevice(g_device = be->device_index()) != cudaSuccess) {
            snprintf(msg, sizeof msg, "cudaSetDevice(%d) failed", g_device);
        } else if (W->rank() == 0) {
            ncclResult_t r = api.GetUniqueId(&id);
            if (r != ncclSuccess)
                snprintf(msg, sizeof msg, "ncclGetUniqueId failed: %s", api.GetErrorString(r));
        }
    }
    st = msg[0] ? amp_set_error(AMP_ERR_DEVICE, "dist: NCCL cannot start on rank %d: %s", W->rank(), msg) : AMP_OK;
    st = W->agree(st, "dist: NCCL cannot start");
    if (st != AMP_OK) {
        snprintf(g_failed, sizeof g_failed, "%s", amp_last_error());
        return st;
    }
    /* 2. Rank 0's id to every rank. */
    _Static_assert(sizeof id % 4 == 0, "the id is moved as 4-byte words");
    if ((st = W->bcast_host(&id, sizeof id, 0, "the NCCL id")) != AMP_OK)
        return st;
    /* 3. The communicator (non-blocking), the side stream, the events,
     * the watchdog. */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = api.CommInitRankConfig(&c, W->size(), id, W->rank(), &cfg);
    pthread_mutex_lock(&g_mu);
    g_comm = c;
    g_aborted[0] = '\0';
    pthread_mutex_unlock(&g_mu);
    if (!c) {
        char why[320];
        nccl_why(r, why, sizeof why);
        return W->fail("making the NCCL communicator (ncclCommInitRankConfig)", why);
    }
    if ((st = settle(r, "making the NCCL communicator (ncclCommInitRankConfig)")) != AMP_OK)
        return st;
    cudaError_t e = cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return fail_cuda(e, "cudaStreamCreateWithFlags");
    if ((e = cudaEventCreateWithFlags(&g_ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g_spare, cudaEventDisableTiming)) != cudaSuccess)
        return fail_cuda(e, "cudaEventCreateWithFlags");
    g_made = true;
    g_stop = false;
    if (pthread_create(&g_dog, NULL, watchdog, NULL) != 0)
        return fail_world("starting NCCL's watchdog thread", "pthread_create failed");
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

static void to_pool(comm_op *op)
{
    if (!op)
        return;
    pthread_mutex_lock(&g_mu);
    op->next = g_pool;
    g_pool = op;
    pthread_mutex_unlock(&g_mu);
}

/* An operation from the pool (or a new one; *op stays NULL without memory
 * for one: its done event is then g_spare), its side stream made to wait
 * for the backend's stream. */
static amp_status begin(const char *what, comm_op **opp)
{
    amp_status st = ensure_comm();
    *opp = NULL;
    if (st != AMP_OK)
        return st;
    char unused[8];
    pthread_mutex_lock(&g_mu);
    if (!g_pool && g_watch)
        reap_locked(now_s(), unused, sizeof unused);
    comm_op *op = g_pool;
    if (op)
        g_pool = op->next;
    pthread_mutex_unlock(&g_mu);
    if (!op && (op = calloc(1, sizeof *op)) != NULL) {
        cudaError_t e = cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(op);
            return fail_cuda(e, "cudaEventCreateWithFlags");
        }
    }
    if (op) {
        op->next = NULL;
        snprintf(op->what, sizeof op->what, "%s", what);
        op->limit = W->timeout();
        op->deadline = now_s() + op->limit;
    }
    cudaError_t e = cudaEventRecord(g_ready, backend_stream());
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(g_side, g_ready, 0);
    if (e != cudaSuccess) {
        to_pool(op);
        return fail_cuda(e, "ordering NCCL's stream after the backend's");
    }
    *opp = op;
    return AMP_OK;
}

static amp_status nccl_wait(comm_op *op, const char *what);

/* After the NCCL call (r, under g_mu): settled, the done event recorded,
 * handed out in *out or waited for (on the device). */
static amp_status end(comm_op *op, ncclResult_t r, comm_op **out, const char *what)
{
    if (out)
        *out = NULL;
    amp_status st = settle(r, what);
    cudaError_t e = st == AMP_OK ? cudaEventRecord(op ? op->done : g_spare, g_side) : cudaSuccess;
    if (st == AMP_OK && e != cudaSuccess)
        st = fail_cuda(e, "cudaEventRecord");
    if (st != AMP_OK) {
        to_pool(op);
        return st;
    }
    g_ops++;
    if (!op) { /* no memory for an operation: the backend's stream follows it now */
        e = cudaStreamWaitEvent(backend_stream(), g_spare, 0);
        return e == cudaSuccess ? AMP_OK : fail_cuda(e, "cudaStreamWaitEvent");
    }
    if (out) {
        *out = op;
        return AMP_OK;
    }
    return nccl_wait(op, what);
}

/* r = `call` on g_comm, under g_mu (the watchdog may abort it). */
#define NCCL_CALL(call)                                                                                            \
    do {                                                                                                           \
        pthread_mutex_lock(&g_mu);                                                                                 \
        r = g_comm ? (call) : ncclInvalidUsage;                                                                    \
        pthread_mutex_unlock(&g_mu);                                                                               \
    } while (0)

/* The body of a collective: an operation named what begun, `call` made
 * (NCCL_CALL), the operation ended: handed out in *out or waited for. */
#define NCCL_OP(what, out, call)                                                                                   \
    comm_op *o_;                                                                                                   \
    amp_status st_ = begin(what, &o_);                                                                             \
    if (st_ != AMP_OK)                                                                                             \
        return st_;                                                                                                \
    ncclResult_t r;                                                                                                \
    NCCL_CALL(call);                                                                                               \
    return end(o_, r, out, what)

static amp_status nccl_allreduce(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, comm_op **out)
{
    NCCL_OP("an all-reduce (ncclAllReduce)", out,
            api.AllReduce(buf, buf, (size_t)n, nccl_type(dt), nccl_op_of(op), g_comm, g_side));
}

/* Bytes per element as NCCL moves dt (1 where dt has no NCCL type). */
static size_t moved_size(amp_dtype dt) { return nccl_type(dt) == ncclUint8 ? amp_dtype_size(dt) : 1; }

static amp_status nccl_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, comm_op **out)
{
    /* send == recv is MPI's in place (this rank's block already in recv);
     * NCCL's in place is send at this rank's block of recv. */
    if (send == recv)
        send = (const char *)recv + (size_t)W->rank() * (size_t)n * amp_dtype_size(dt);
    NCCL_OP("an all-gather (ncclAllGather)", out,
            api.AllGather(send, recv, (size_t)n * moved_size(dt), nccl_type(dt), g_comm, g_side));
}

static amp_status nccl_reduce_scatter(const void *send, void *recv, int64_t n, amp_dtype dt, comm_op **out)
{
    NCCL_OP("a reduce-scatter (ncclReduceScatter)", out,
            api.ReduceScatter(send, recv, (size_t)n, nccl_type(dt), ncclSum, g_comm, g_side));
}

static amp_status nccl_bcast(void *buf, int64_t n, amp_dtype dt, int root, comm_op **out)
{
    NCCL_OP("a broadcast (ncclBroadcast)", out,
            api.Broadcast(buf, buf, (size_t)n * moved_size(dt), nccl_type(dt), root, g_comm, g_side));
}

static amp_status nccl_test(comm_op *op, bool *done)
{
    *done = true;
    if (!op)
        return AMP_OK;
    cudaError_t e = cudaEventQuery(op->done);
    if (e == cudaSuccess)
        return AMP_OK;
    *done = false;
    if (e != cudaErrorNotReady)
        return fail_cuda(e, op->what);
    amp_status st = usable();
    if (st == AMP_OK)
        st = check_async(op->what);
    if (st == AMP_OK && now_s() > op->deadline) {
        abort_comm();
        st = W->timed_out(op->what);
    }
    return st;
}

static void free_op(comm_op *op)
{
    cudaEventDestroy(op->done);
    free(op);
}

static amp_status nccl_wait(comm_op *op, const char *what)
{
    if (!op)
        return AMP_OK;
    amp_status st = usable();
    if (st != AMP_OK) { /* aborted: nothing to follow */
        free_op(op);
        return st;
    }
    if (what)
        snprintf(op->what, sizeof op->what, "%s", what);
    cudaError_t e = cudaStreamWaitEvent(backend_stream(), op->done, 0);
    if (e != cudaSuccess) {
        free_op(op);
        return fail_cuda(e, "cudaStreamWaitEvent");
    }
    pthread_mutex_lock(&g_mu);
    op->next = g_watch;
    g_watch = op;
    pthread_mutex_unlock(&g_mu);
    return AMP_OK;
}

static int64_t nccl_ops(void) { return g_ops; }

static void free_list(comm_op *op)
{
    while (op) {
        comm_op *next = op->next;
        free_op(op);
        op = next;
    }
}

/* Waits for what is in flight (polled, with the deadline), then ends the
 * communicator; broken (or a failure on the way): aborts it instead. A
 * later CUDA collective makes a new one. */
static amp_status nccl_finalize(bool broken)
{
    amp_status st = AMP_OK;
    if (g_dog_on) {
        pthread_mutex_lock(&g_mu);
        g_stop = true;
        pthread_cond_signal(&g_cv);
        pthread_mutex_unlock(&g_mu);
        pthread_join(g_dog, NULL);
        g_dog_on = false;
    }
    if (g_made && !broken && (st = usable()) == AMP_OK) {
        for (;;) {
            char why[sizeof g_aborted] = "";
            pthread_mutex_lock(&g_mu);
            comm_op *late = g_watch ? reap_locked(now_s(), why, sizeof why) : NULL;
            bool left = g_watch != NULL;
            pthread_mutex_unlock(&g_mu);
            if (late) {
                st = fail_world("amp_dist_finalize", why);
                break;
            }
            if (!left || (st = check_async("amp_dist_finalize")) != AMP_OK)
                break;
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        ncclResult_t r = ncclSuccess;
        if (st == AMP_OK) {
            NCCL_CALL(api.CommFinalize(g_comm));
            st = settle(r, "ending the NCCL communicator (ncclCommFinalize)");
        }
        pthread_mutex_lock(&g_mu);
        if (st == AMP_OK && g_comm)
            api.CommDestroy(g_comm);
        else
            abort_locked();
        g_comm = NULL;
        pthread_mutex_unlock(&g_mu);
    } else {
        abort_comm();
    }
    if (g_made) {
        free_list(g_pool);
        free_list(g_watch);
        g_pool = g_watch = NULL;
        cudaEventDestroy(g_ready);
        cudaEventDestroy(g_spare);
        cudaStreamDestroy(g_side);
    }
    g_made = false;
    g_failed[0] = '\0';
    g_aborted[0] = '\0';
    return st;
}

#endif /* AMPC_HAVE_NCCL */

const comm_engine comm_engine_nccl = {
    .name = "NCCL",
    .available = nccl_available,
    .unavailable_reason = nccl_reason,
    .attach = nccl_attach,
#ifdef AMPC_HAVE_NCCL
    .finalize = nccl_finalize,
    .allreduce = nccl_allreduce,
    .allgather = nccl_allgather,
    .reduce_scatter = nccl_reduce_scatter,
    .bcast = nccl_bcast,
    .test = nccl_test,
    .wait = nccl_wait,
    .ops_started = nccl_ops,
#else /* comm.c asks available() before any collective */
    .finalize = comm_engine_absent_finalize,
    .ops_started = comm_engine_absent_ops,
#endif
};
