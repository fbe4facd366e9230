/*
 * comm_mpi.c - comm.h on MPI for host buffers (and the identity for a
 * world of one rank, and in a build without MPI). CUDA buffers go to
 * NCCL (comm_nccl.c) where it is built in.
 *
 * Every collective is started non-blocking (MPI_I*) and waited for by
 * comm_wait's loop of MPI_Test against the deadline: a blocking call is
 * the same start followed by the wait, so no call can hang past the
 * timeout. MPI_Test also drives Open MPI's progress, which is how a
 * bucket's all-reduce moves while backward goes on (comm_progress).
 */
#include "comm/comm.h"
#include "comm/comm_nccl.h"

#include "base/base.h"
#include "base/env.h"
#include "dtype/dtype.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef AMPC_HAVE_MPI
#include <mpi.h>
#endif

#define DEFAULT_TIMEOUT_S 300.0

static int g_rank = 0, g_size = 1;
static bool g_init = false;
#ifdef AMPC_HAVE_MPI
static bool g_started_mpi = false; /* comm_init called MPI_Init_thread (so comm_finalize ends MPI) */
#endif
static double g_timeout = 0; /* 0: not read yet */

bool comm_built_with_mpi(void)
{
#ifdef AMPC_HAVE_MPI
    return true;
#else
    return false;
#endif
}

int comm_launched_size(void)
{
    /* the world's size as Open MPI, PMI (MPICH, Slurm) and PMIx launchers
     * export it */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end == '\0' && n >= 1 && n <= INT_MAX)
                return (int)n;
        }
    }
    return getenv("PMIX_RANK") ? 1 : -1;
}

bool comm_initialized(void) { return g_init; }
int comm_rank(void) { return g_rank; }
int comm_size(void) { return g_size; }

/* <= 0: back to the default, AMPC_DIST_TIMEOUT's or 300 s (read again). */
void comm_set_timeout(double seconds) { g_timeout = seconds > 0 ? seconds : 0; }

double comm_timeout(void)
{
    if (g_timeout <= 0) {
        g_timeout = env_number(ENV_DIST_TIMEOUT, DEFAULT_TIMEOUT_S);
    }
    return g_timeout;
}

#ifdef AMPC_HAVE_MPI
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif

_Noreturn void comm_abort(int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ampc: rank %d: %s\n", g_rank, msg);
    fflush(stderr);
#ifdef AMPC_HAVE_MPI
    if (g_init)
        MPI_Abort(MPI_COMM_WORLD, code);
#endif
    exit(code);
}

/* ------------------------------------------------------------ requests */

struct comm_req {
#ifdef AMPC_HAVE_MPI
    MPI_Request r;
#endif
    float *avg;     /* AMP_REDUCE_AVG: divide these n by the world size when done */
    int64_t n;
    nccl_op *nccl;  /* a CUDA buffer's operation (comm_nccl.c) */
};

#ifdef AMPC_HAVE_MPI

static amp_status mpi_error(int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", rc);
    return amp_set_error(AMP_ERR_IO, "dist: %s failed on rank %d: %s", what, g_rank, s);
}

static MPI_Datatype mpi_type(amp_dtype dt)
{
    switch (dt) {
    case AMP_F32: return MPI_FLOAT;
    case AMP_F16:
    case AMP_BF16: return MPI_UINT16_T; /* moved as bits, never reduced */
    case AMP_I32: return MPI_INT32_T;
    case AMP_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

#endif

static amp_status check_count(int64_t n, const char *what)
{
    if (n < 0 || n > INT_MAX)
        return amp_set_error(AMP_ERR_ARG, "dist: %s of %lld elements (at most %d at once)", what, (long long)n,
                             INT_MAX);
    return AMP_OK;
}

static void finish_avg(float *buf, int64_t n)
{
    const float w = (float)g_size;
    for (int64_t i = 0; i < n; i++)
        buf[i] /= w;
}

/* The request of a started operation: handed out (*req) or waited for. */
static amp_status hand_out(comm_req *r, comm_req **req, const char *what)
{
    if (req) {
        *req = r;
        return AMP_OK;
    }
    return comm_wait(r, what);
}

static comm_req *new_req(void)
{
    comm_req *r = calloc(1, sizeof *r);
    if (!r)
        amp_set_error(AMP_ERR_MEMORY, "dist: out of memory");
    return r;
}

/* Whether a collective on a buffer of dev goes to NCCL: every CUDA one
 * in a world of several ranks, and in a world of one rank after comm_init
 * when NCCL is built in (a one-rank communicator: the path runs, and its
 * collectives are copies). */
static bool via_nccl(amp_device dev)
{
    return dev == AMP_CUDA && (g_size > 1 || (g_init && comm_built_with_nccl()));
}

/* A started NCCL operation (st: how starting it went, *opp what it made)
 * as a request. op is read here, after the call that fills it ran (an
 * argument next to that call could be read before it). */
static amp_status nccl_hand_out(amp_status st, nccl_op *const *opp, comm_req **req, const char *what)
{
    if (st != AMP_OK)
        return st;
    nccl_op *op = *opp;
    comm_req *r = new_req();
    if (!r) {
        comm_nccl_wait(op, what);
        return AMP_ERR_MEMORY;
    }
    r->nccl = op;
    return hand_out(r, req, what);
}

/* ------------------------------------------------------------ lifetime */

amp_status comm_init(int *argc, char ***argv)
{
    if (g_init)
        return AMP_OK;
#ifndef AMPC_HAVE_MPI
    (void)argc, (void)argv;
    return amp_set_error(AMP_ERR_STATE, "dist: ampc was built without MPI, so it cannot train on several "
                                        "processes (install Open MPI, e.g. apt-get install libopenmpi-dev "
                                        "openmpi-bin, and rebuild)");
#else
    int already = 0, finalized = 0, provided = MPI_THREAD_FUNNELED;
    MPI_Finalized(&finalized);
    if (finalized) /* MPI cannot start twice in one process */
        return amp_set_error(AMP_ERR_STATE, "dist: MPI was already finalized in this process (amp_dist_finalize "
                                            "ends it for good: initialize once, finalize once at the end)");
    MPI_Initialized(&already);
    if (!already) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return amp_set_error(AMP_ERR_STATE, "dist: MPI_Init_thread failed (code %d)", rc);
        g_started_mpi = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_FUNNELED)
        return amp_set_error(AMP_ERR_STATE, "dist: this MPI gives thread level %d, and ampc needs "
                                            "MPI_THREAD_FUNNELED (its pool's threads exist beside the one that "
                                            "communicates)", provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_init = true;
    (void)comm_timeout();
    return AMP_OK;
#endif
}

amp_status comm_finalize(void)
{
    if (!g_init)
        return AMP_OK;
    amp_status st = comm_barrier();
    comm_nccl_finalize();
#ifdef AMPC_HAVE_MPI
    int done = 0;
    MPI_Finalized(&done);
    if (!done && g_started_mpi) /* an MPI the caller started is the caller's to end */
        MPI_Finalize();
    g_started_mpi = false;
#endif
    g_init = false;
    g_rank = 0;
    g_size = 1;
    return st;
}

/* ---------------------------------------------------------- collectives */

amp_status comm_allreduce(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, amp_device dev, comm_req **req)
{
    if (req)
        *req = NULL;
    amp_status st = check_count(n, "an all-reduce");
    if (st != AMP_OK)
        return st;
    bool ok = (dt == AMP_F32 && (op == AMP_REDUCE_SUM || op == AMP_REDUCE_AVG || op == AMP_REDUCE_MAX)) ||
              ((dt == AMP_I64 || dt == AMP_I32) && (op == AMP_REDUCE_SUM || op == AMP_REDUCE_MAX));
    if (!ok)
        return amp_set_error(AMP_ERR_DTYPE, "dist: all-reduce %s on %s buffers is not supported (f32: sum, avg, "
                             "max; integers: sum, max; 16-bit data is widened to f32 first)",
                             op == AMP_REDUCE_SUM ? "sum" : op == AMP_REDUCE_AVG ? "avg" : "max",
                             amp_dtype_name(dt));
    if (n == 0 || (g_size == 1 && !via_nccl(dev)))
        return AMP_OK;
    nccl_op *nop = NULL;
    if (via_nccl(dev))
        return nccl_hand_out(comm_nccl_allreduce(buf, n, dt, op, &nop), &nop, req, "an all-reduce");
#ifdef AMPC_HAVE_MPI
    comm_req *r = new_req();
    if (!r)
        return AMP_ERR_MEMORY;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), op == AMP_REDUCE_MAX ? MPI_MAX : MPI_SUM,
                            MPI_COMM_WORLD, &r->r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_error(rc, "MPI_Iallreduce");
    }
    if (op == AMP_REDUCE_AVG)
        r->avg = buf, r->n = n;
    return hand_out(r, req, "an all-reduce");
#else
    return AMP_OK;
#endif
}

amp_status comm_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, amp_device dev, comm_req **req)
{
    if (req)
        *req = NULL;
    amp_status st = check_count(n, "an all-gather");
    if (st != AMP_OK)
        return st;
    if (n == 0 || (g_size == 1 && !via_nccl(dev))) {
        if (n && recv != send)
            return dev == AMP_CUDA ? comm_nccl_copy(recv, send, n, dt)
                                   : (memmove(recv, send, (size_t)n * amp_dtype_size(dt)), AMP_OK);
        return AMP_OK;
    }
    nccl_op *nop = NULL;
    if (via_nccl(dev))
        return nccl_hand_out(comm_nccl_allgather(send, recv, n, dt, &nop), &nop, req, "an all-gather");
#ifdef AMPC_HAVE_MPI
    comm_req *r = new_req();
    if (!r)
        return AMP_ERR_MEMORY;
    int rc = MPI_Iallgather(send == recv ? MPI_IN_PLACE : send, (int)n, mpi_type(dt), recv, (int)n, mpi_type(dt),
                            MPI_COMM_WORLD, &r->r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_error(rc, "MPI_Iallgather");
    }
    return hand_out(r, req, "an all-gather");
#else
    return AMP_OK;
#endif
}

amp_status comm_reduce_scatter(const void *send, void *recv, int64_t n, amp_dtype dt, amp_device dev,
                               comm_req **req)
{
    if (req)
        *req = NULL;
    amp_status st = check_count(n * g_size, "a reduce-scatter");
    if (st != AMP_OK)
        return st;
    if (dt != AMP_F32)
        return amp_set_error(AMP_ERR_DTYPE, "dist: reduce-scatter of %s buffers (f32 only)", amp_dtype_name(dt));
    if (n == 0 || (g_size == 1 && !via_nccl(dev))) {
        if (n && recv != send)
            return dev == AMP_CUDA ? comm_nccl_copy(recv, send, n, dt)
                                   : (memmove(recv, send, (size_t)n * sizeof(float)), AMP_OK);
        return AMP_OK;
    }
    nccl_op *nop = NULL;
    if (via_nccl(dev))
        return nccl_hand_out(comm_nccl_reduce_scatter(send, recv, n, dt, &nop), &nop, req, "a reduce-scatter");
#ifdef AMPC_HAVE_MPI
    comm_req *r = new_req();
    if (!r)
        return AMP_ERR_MEMORY;
    int rc = MPI_Ireduce_scatter_block(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r->r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_error(rc, "MPI_Ireduce_scatter_block");
    }
    return hand_out(r, req, "a reduce-scatter");
#else
    return AMP_OK;
#endif
}

amp_status comm_bcast(void *buf, int64_t n, amp_dtype dt, int root, amp_device dev)
{
    amp_status st = check_count(n, "a broadcast");
    if (st != AMP_OK)
        return st;
    if (root < 0 || root >= g_size)
        return amp_set_error(AMP_ERR_ARG, "dist: broadcast from rank %d of a world of %d", root, g_size);
    if (n == 0 || (g_size == 1 && !via_nccl(dev)))
        return AMP_OK;
    if (via_nccl(dev))
        return comm_nccl_bcast(buf, n, dt, root);
#ifdef AMPC_HAVE_MPI
    comm_req *r = new_req();
    if (!r)
        return AMP_ERR_MEMORY;
    int rc = MPI_Ibcast(buf, (int)n, mpi_type(dt), root, MPI_COMM_WORLD, &r->r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_error(rc, "MPI_Ibcast");
    }
    return comm_wait(r, "a broadcast");
#else
    return AMP_OK;
#endif
}

amp_status comm_barrier(void)
{
    if (g_size == 1)
        return AMP_OK;
#ifdef AMPC_HAVE_MPI
    comm_req *r = new_req();
    if (!r)
        return AMP_ERR_MEMORY;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &r->r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_error(rc, "MPI_Ibarrier");
    }
    return comm_wait(r, "a barrier");
#else
    return AMP_OK;
#endif
}

/* -------------------------------------------------------------- waiting */

bool comm_test(comm_req *r)
{
    if (!r)
        return true;
    if (r->nccl)
        return comm_nccl_test(r->nccl);
#ifdef AMPC_HAVE_MPI
    int flag = 0;
    if (r->r == MPI_REQUEST_NULL)
        return true;
    MPI_Test(&r->r, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
#else
    return true;
#endif
}

amp_status comm_wait(comm_req *r, const char *what)
{
    if (!r)
        return AMP_OK;
    amp_status st = AMP_OK;
    if (r->nccl) {
        st = comm_nccl_wait(r->nccl, what);
    } else {
#ifdef AMPC_HAVE_MPI
        const double deadline = now_s() + comm_timeout();
        long spins = 0;
        for (;;) {
            int flag = 0;
            int rc = MPI_Test(&r->r, &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) {
                /* The request may still be writing into the caller's
                 * buffer, and a collective cannot be cancelled: the job
                 * cannot go on consistently. */
                mpi_error(rc, what);
                comm_abort(1, "%s", amp_last_error());
            }
            if (flag)
                break;
            if (++spins > 2000) { /* past ~100 us of polling: check the clock, and let the core go */
                if (now_s() > deadline)
                    comm_abort(1, "timed out after %g s waiting for %s (another rank stopped, or is stuck); "
                                  "ending the job (AMPC_DIST_TIMEOUT sets the limit)",
                               comm_timeout(), what);
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
        }
#endif
    }
    if (st == AMP_OK && r->avg)
        finish_avg(r->avg, r->n);
    free(r);
    return st;
}

/* One MPI_Iprobe: Open MPI moves every non-blocking operation in flight
 * inside any MPI call. */
void comm_progress(void)
{
#ifdef AMPC_HAVE_MPI
    if (g_init && g_size > 1) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    }
#endif
}
