/*
 * comm.c - comm.h: the layer's one entry. It keeps the world (rank, size,
 * timeout, and whether it ended), checks each collective's arguments,
 * hands it to the engine chosen for the buffer's device (engine_for: the
 * only place an engine is chosen), and turns the engines' failures into
 * errors every rank returns (comm_agree before a collective; the world's
 * end after one, told to the other ranks).
 *
 * The engines (comm_engine.h) know nothing of each other or of this file:
 * each gets the comm_world below (attach), through which it agrees with
 * the other ranks, hears of their failures and reports its own.
 */
#include "comm/comm.h"
#include "comm/comm_engine.h"

#include "backend/backend.h"
#include "base/base.h"
#include "base/env.h"
#include "dtype/dtype.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_S 300.0
#define MESSAGE_MAX 512

static int g_rank = 0, g_size = 1;
static bool g_init = false;
static double g_timeout = 0; /* 0: not read yet */

/* The world's end: the first failure that left a collective unfinished,
 * this rank's or another's. Every later call returns it. */
static struct {
    bool on;
    amp_status st;
    char msg[MESSAGE_MAX];
} g_end;

struct comm_req {
    const comm_engine *e;
    comm_op *op;
};

bool comm_built_with_mpi(void) { return comm_engine_mpi.available(); }
bool comm_built_with_nccl(void) { return comm_engine_nccl.available(); }

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

/* ------------------------------------------------------ the world's end */

static amp_status ended(void) { return amp_set_error(g_end.st, "%s", g_end.msg); }

bool comm_failed(const char **why)
{
    if (why)
        *why = g_end.on ? g_end.msg : "";
    return g_end.on;
}

/* Whether the other ranks can be talked to (MPI started, more than one). */
static bool peers(void) { return g_init && g_size > 1; }

/* Records msg as the world's end (the first one stays) and tells the
 * other ranks; the error. */
static amp_status end_world(const char *msg)
{
    if (!g_end.on) {
        g_end.on = true;
        g_end.st = AMP_ERR_IO;
        snprintf(g_end.msg, sizeof g_end.msg, "%s", msg);
        if (peers())
            comm_engine_mpi.announce(g_end.msg);
    }
    return ended();
}

static amp_status world_fail(const char *what, const char *why)
{
    char msg[MESSAGE_MAX];
    snprintf(msg, sizeof msg, "dist: rank %d: %s: %s (the ranks cannot go on together)", g_rank, what, why);
    return end_world(msg);
}

amp_status comm_fail(const char *what)
{
    char why[400];
    snprintf(why, sizeof why, "%s", amp_last_error());
    return world_fail(what, why);
}

static amp_status world_timed_out(const char *what)
{
    if (g_end.on)
        return ended();
    const double t = comm_timeout();
    char who[200] = "";
    if (peers()) {
        /* Who is there: the ranks that answer within the grace period are
         * waiting in ampc's collectives like this one. */
        enum { LIST = 8 };
        int silent[LIST];
        const double grace = t < 1.0 ? t : 1.0;
        const int k = comm_engine_mpi.silent(grace, silent, LIST);
        size_t len = 0;
        if (k == 0)
            snprintf(who, sizeof who, "every rank answered (they wait in different collectives, or one is "
                                      "still at work between them)");
        for (int i = 0; i < k && i < LIST && len < sizeof who; i++)
            len += (size_t)snprintf(who + len, sizeof who - len, "%s%d", i == 0 ? (k == 1 ? "rank " : "ranks ") : ", ",
                                    silent[i]);
        if (k > LIST && len < sizeof who)
            len += (size_t)snprintf(who + len, sizeof who - len, " and %d more", k - LIST);
        if (k > 0 && len < sizeof who)
            snprintf(who + len, sizeof who - len, " did not answer (stopped, stuck, or busy outside the "
                                                  "collectives)");
    } else {
        snprintf(who, sizeof who, "it never completed");
    }
    char msg[MESSAGE_MAX];
    snprintf(msg, sizeof msg, "dist: rank %d timed out after %g s waiting for %s: %s; AMPC_DIST_TIMEOUT sets the "
             "limit (the ranks cannot go on together)", g_rank, t, what, who);
    return end_world(msg);
}

/* AMP_OK, or the world's end: recorded here, or another rank's notice. */
static amp_status world_check(void)
{
    if (g_end.on)
        return ended();
    char msg[MESSAGE_MAX];
    if (peers() && comm_engine_mpi.heard(msg, sizeof msg)) {
        g_end.on = true;
        g_end.st = AMP_ERR_IO;
        snprintf(g_end.msg, sizeof g_end.msg, "%s", msg);
        return ended();
    }
    return AMP_OK;
}

static amp_status bcast_host(void *buf, size_t nbytes, int root, const char *what)
{
    if (g_end.on)
        return ended();
    if (!peers() || nbytes == 0)
        return AMP_OK;
    if (nbytes % 4 != 0 || nbytes / 4 > INT_MAX)
        return amp_set_error(AMP_ERR_ARG, "dist: %s: a broadcast of %zu bytes (whole 4-byte words only)", what,
                             nbytes);
    return comm_engine_mpi.bcast(buf, (int64_t)(nbytes / 4), AMP_I32, root, NULL);
}

amp_status comm_agree(amp_status st, const char *what)
{
    if (!peers())
        return st;
    if (g_end.on)
        return ended();
    /* MAX of: the lowest failing rank as size - rank, the highest as
     * rank + 1 (0: none) */
    int32_t v[2] = {st != AMP_OK ? g_size - g_rank : 0, st != AMP_OK ? g_rank + 1 : 0};
    struct {
        int32_t st;
        char msg[400];
    } note;
    memset(&note, 0, sizeof note);
    if (st != AMP_OK) {
        note.st = (int32_t)st;
        snprintf(note.msg, sizeof note.msg, "%s", amp_last_error());
    }
    amp_status cst = comm_engine_mpi.allreduce(v, 2, AMP_I32, AMP_REDUCE_MAX, NULL);
    if (cst != AMP_OK)
        return cst;
    if (v[0] == 0)
        return AMP_OK;
    const int first = g_size - v[0], last = v[1] - 1;
    _Static_assert(sizeof note % 4 == 0, "the note is moved as 4-byte words");
    if ((cst = bcast_host(&note, sizeof note, first, what)) != AMP_OK)
        return cst;
    note.msg[sizeof note.msg - 1] = '\0';
    const amp_status fst = note.st > AMP_OK && note.st <= AMP_ERR_DEVICE ? (amp_status)note.st : AMP_ERR_STATE;
    if (last > first)
        return amp_set_error(fst, "%s: rank %d failed (and at least one rank after it, up to rank %d): %s", what,
                             first, last, note.msg);
    return amp_set_error(fst, "%s: rank %d failed: %s", what, first, note.msg);
}

static int world_rank(void) { return g_rank; }
static int world_size(void) { return g_size; }

static const comm_world world = {
    .rank = world_rank,
    .size = world_size,
    .timeout = comm_timeout,
    .agree = comm_agree,
    .bcast_host = bcast_host,
    .check = world_check,
    .fail = world_fail,
    .timed_out = world_timed_out,
};

/* --------------------------------------------------------------- engines */

/* The engine for each device's buffers, one line each (as the backends'
 * registry.c): the world's own engine for host memory, NCCL for CUDA's. */
static const comm_engine *const engines[AMP_DEVICE_COUNT] = {
    [AMP_CPU] = &comm_engine_mpi,
    [AMP_CUDA] = &comm_engine_nccl,
};

static void attach_engines(void)
{
    static bool done;
    if (!done) {
        done = true;
        comm_engine_mpi.attach(&world);
        comm_engine_nccl.attach(&world);
    }
}

const comm_engine *comm_device_engine(amp_device dev)
{
    attach_engines();
    return (unsigned)dev < AMP_DEVICE_COUNT && engines[dev] ? engines[dev] : &comm_engine_mpi;
}

/* The engine for a collective on dev's buffers, or NULL where the
 * collective is the identity: a world of one rank, but for a device's own
 * engine after comm_init when it is built in (NCCL: a one-rank
 * communicator, so that one process runs the whole path). */
static const comm_engine *engine_for(amp_device dev)
{
    const comm_engine *e = comm_device_engine(dev);
    if (g_size > 1)
        return e;
    return e != &comm_engine_mpi && g_init && e->available() ? e : NULL;
}

/* Whether e can take a collective now: the world has not ended (another
 * rank's notice included), and the engine is in this build. */
static amp_status ready(const comm_engine *e, amp_device dev)
{
    amp_status st = world_check();
    if (st != AMP_OK)
        return st;
    if (!e->available())
        return amp_set_error(AMP_ERR_DEVICE, "dist: collectives on %s tensors need %s, and %s", amp_device_name(dev),
                             e->name, e->unavailable_reason());
    return AMP_OK;
}

/* A started operation (st: how starting it went) as a request in *req.
 * Without memory for the request it is waited for here instead: done on
 * return, nothing to hand out (*req stays NULL). */
static amp_status hand_out(const comm_engine *e, amp_status st, comm_op *op, comm_req **req, const char *what)
{
    if (st != AMP_OK || !req || !op)
        return st;
    comm_req *r = malloc(sizeof *r);
    if (!r)
        return e->wait(op, what);
    r->e = e;
    r->op = op;
    *req = r;
    return AMP_OK;
}

/* A world of one rank's collective: recv = send (the same buffer for an
 * all-reduce or a broadcast: nothing to copy). */
static amp_status identity_copy(void *recv, const void *send, int64_t n, amp_dtype dt, amp_device dev)
{
    if (g_end.on)
        return ended();
    if (n == 0 || recv == send)
        return AMP_OK;
    const amp_backend *be = backend_of(dev);
    if (!be->copy)
        return backend_missing(be, "dist", "copy");
    return be->copy(recv, dev, send, dev, (size_t)n * amp_dtype_size(dt));
}

/* ------------------------------------------------------------ lifetime */

amp_status comm_init(int *argc, char ***argv)
{
    if (g_init)
        return AMP_OK;
    attach_engines();
    int rank = 0, size = 1;
    amp_status st = comm_engine_mpi.init(argc, argv, &rank, &size);
    if (st != AMP_OK)
        return st;
    g_rank = rank;
    g_size = size;
    g_init = true;
    (void)comm_timeout();
    return AMP_OK;
}

amp_status comm_finalize(void)
{
    if (!g_init)
        return AMP_OK;
    amp_status st = comm_barrier();
    amp_status nst = comm_engine_nccl.finalize(g_end.on);
    if (g_end.on) { /* nobody waited for: MPI is left for the program to end the job */
        comm_engine_mpi.finalize(true);
        return ended();
    }
    amp_status mst = comm_engine_mpi.finalize(false);
    g_init = false;
    g_rank = 0;
    g_size = 1;
    return st != AMP_OK ? st : nst != AMP_OK ? nst : mst;
}

/* ---------------------------------------------------------- collectives */

static amp_status check_count(int64_t n, const char *what)
{
    if (n < 0 || n > INT_MAX)
        return amp_set_error(AMP_ERR_ARG, "dist: %s of %lld elements (at most %d at once)", what, (long long)n,
                             INT_MAX);
    return AMP_OK;
}

/* The engine that runs a collective of n elements of dt on dev's buffers,
 * or NULL with *st saying how it went where no engine runs it: a world of
 * one rank copies send to recv (nothing to do where they are the same
 * buffer), n of 0 is done, an engine that cannot take it now is an error. */
static const comm_engine *engine_to_run(void *recv, const void *send, int64_t n, amp_dtype dt, amp_device dev,
                                        amp_status *st)
{
    const comm_engine *e = engine_for(dev);
    if (!e)
        *st = identity_copy(recv, send, n, dt, dev);
    else if (n == 0)
        *st = AMP_OK;
    else if ((*st = ready(e, dev)) == AMP_OK)
        return e;
    return NULL;
}

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
    const comm_engine *e = engine_to_run(buf, buf, n, dt, dev, &st);
    if (!e)
        return st;
    comm_op *o = NULL;
    st = e->allreduce(buf, n, dt, op, req ? &o : NULL);
    return hand_out(e, st, o, req, "an all-reduce");
}

amp_status comm_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, amp_device dev, comm_req **req)
{
    if (req)
        *req = NULL;
    amp_status st = check_count(n, "an all-gather");
    if (st != AMP_OK)
        return st;
    const comm_engine *e = engine_to_run(recv, send, n, dt, dev, &st);
    if (!e)
        return st;
    comm_op *o = NULL;
    st = e->allgather(send, recv, n, dt, req ? &o : NULL);
    return hand_out(e, st, o, req, "an all-gather");
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
    const comm_engine *e = engine_to_run(recv, send, n, dt, dev, &st);
    if (!e)
        return st;
    comm_op *o = NULL;
    st = e->reduce_scatter(send, recv, n, dt, req ? &o : NULL);
    return hand_out(e, st, o, req, "a reduce-scatter");
}

amp_status comm_bcast(void *buf, int64_t n, amp_dtype dt, int root, amp_device dev)
{
    amp_status st = check_count(n, "a broadcast");
    if (st != AMP_OK)
        return st;
    if (root < 0 || root >= g_size)
        return amp_set_error(AMP_ERR_ARG, "dist: broadcast from rank %d of a world of %d", root, g_size);
    const comm_engine *e = engine_to_run(buf, buf, n, dt, dev, &st);
    return e ? e->bcast(buf, n, dt, root, NULL) : st;
}

amp_status comm_barrier(void)
{
    if (g_end.on)
        return ended();
    if (g_size == 1)
        return AMP_OK;
    const comm_engine *e = comm_device_engine(AMP_CPU);
    amp_status st = ready(e, AMP_CPU);
    return st != AMP_OK ? st : e->barrier(NULL);
}

/* -------------------------------------------------------------- waiting */

bool comm_test(comm_req *r)
{
    if (!r || g_end.on)
        return true;
    bool done = false;
    return r->e->test(r->op, &done) != AMP_OK || done;
}

amp_status comm_wait(comm_req *r, const char *what)
{
    if (!r)
        return AMP_OK;
    amp_status st = r->e->wait(r->op, what);
    free(r);
    return st;
}

void comm_progress(void)
{
    if (peers() && !g_end.on && comm_engine_mpi.progress)
        comm_engine_mpi.progress();
}
