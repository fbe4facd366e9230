/*
 * comm_mpi.c - the MPI engine (comm_engine.h): collectives on host
 * buffers, and the world itself: starting and ending MPI, which rank this
 * is, and the channel on which a rank that cannot go on tells the others.
 *
 * Every collective is started non-blocking (MPI_I*) and waited for by a
 * loop of MPI_Test against the deadline: a blocking call is the same start
 * followed by the wait, so no call can hang past the timeout. MPI_Test
 * also drives Open MPI's progress, which is how a bucket's all-reduce
 * moves while backward goes on (progress). While it waits the loop also
 * listens on the failure channel: a notice from another rank ends the
 * wait with that rank's message.
 *
 * The failure channel is a duplicate of MPI_COMM_WORLD (its own context:
 * its messages never match a collective's). A rank whose collective
 * cannot finish sends every other rank a notice (announce); a rank that
 * timed out first asks the others whether they are there (silent), and
 * every rank answers such a question whenever it waits or progresses.
 * After a failure nothing more is asked of MPI (a collective cannot be
 * cancelled, so MPI is not finalized either): the program ends the job.
 */
#include "comm/comm_engine.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef AMPC_HAVE_MPI
#include <mpi.h>
#endif

static const comm_world *W;
static void mpi_attach(const comm_world *w) { W = w; }

#ifndef AMPC_HAVE_MPI

static bool mpi_available(void) { return false; }

static const char *mpi_reason(void)
{
    return "ampc was built without MPI, so it cannot train on several processes (install Open MPI, e.g. "
           "apt-get install libopenmpi-dev openmpi-bin, and rebuild)";
}

static amp_status mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    (void)argc, (void)argv;
    *rank = 0;
    *size = 1;
    return amp_set_error(AMP_ERR_STATE, "dist: %s", mpi_reason());
}

#else /* AMPC_HAVE_MPI */

/* The failure channel's messages; a notice is at most NOTE_MAX bytes. */
enum { TAG_FAIL = 1, TAG_ASK, TAG_ANSWER };
#define NOTE_MAX 512

struct comm_op {
    MPI_Request r;
    float *avg; /* AMP_REDUCE_AVG: these n divided by the world size when done */
    int64_t n;
};

static bool g_started;               /* init called MPI_Init_thread (so finalize ends MPI) */
static MPI_Comm g_ctl = MPI_COMM_NULL; /* the failure channel */
static int64_t g_ops;
static bool g_noted;                 /* a notice came: g_note */
static char g_note[NOTE_MAX];

static bool mpi_available(void) { return true; }
static const char *mpi_reason(void) { return ""; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* MPI's words for error code rc. */
static const char *mpi_why(int rc, char *buf, size_t size)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(buf, size, "MPI error %d", rc);
    else
        snprintf(buf, size, "%s", s);
    return buf;
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

/* ------------------------------------------------------ failure channel */

/* Takes every message waiting on the failure channel: the first notice is
 * kept, a question answered, an answer marked in answered[] (when given). */
static void serve(unsigned char *answered)
{
    for (int k = 0; k < 1024; k++) {
        int flag = 0;
        MPI_Status s;
        if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_ctl, &flag, &s) != MPI_SUCCESS || !flag)
            return;
        char buf[NOTE_MAX];
        if (MPI_Recv(buf, NOTE_MAX, MPI_CHAR, s.MPI_SOURCE, s.MPI_TAG, g_ctl, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return;
        if (s.MPI_TAG == TAG_FAIL && !g_noted) {
            buf[NOTE_MAX - 1] = '\0';
            snprintf(g_note, sizeof g_note, "%s", buf);
            g_noted = true;
        } else if (s.MPI_TAG == TAG_ASK) {
            static const char yes = 1;
            MPI_Request r;
            if (MPI_Isend(&yes, 1, MPI_CHAR, s.MPI_SOURCE, TAG_ANSWER, g_ctl, &r) == MPI_SUCCESS)
                MPI_Request_free(&r);
        } else if (s.MPI_TAG == TAG_ANSWER && answered) {
            answered[s.MPI_SOURCE] = 1;
        }
    }
}

static bool mpi_heard(char *msg, size_t size)
{
    if (g_ctl == MPI_COMM_NULL)
        return false;
    if (!g_noted)
        serve(NULL);
    if (g_noted)
        snprintf(msg, size, "%s", g_note);
    return g_noted;
}

static void mpi_announce(const char *msg)
{
    if (g_ctl == MPI_COMM_NULL)
        return;
    static char sent[NOTE_MAX]; /* alive until the sends complete */
    snprintf(sent, sizeof sent, "%s", msg);
    const int n = (int)strlen(sent) + 1, size = W->size(), me = W->rank();
    MPI_Request *r = calloc((size_t)size, sizeof *r);
    for (int i = 0; i < size; i++) {
        MPI_Request one = MPI_REQUEST_NULL;
        if (i == me || MPI_Isend(sent, n, MPI_CHAR, i, TAG_FAIL, g_ctl, &one) != MPI_SUCCESS)
            one = MPI_REQUEST_NULL;
        if (r)
            r[i] = one;
        else if (one != MPI_REQUEST_NULL)
            MPI_Request_free(&one);
    }
    /* Pushed out for a while (a small message usually leaves at once), the
     * rest left to MPI: a dead peer never takes its notice. */
    const double until = now_s() + 1.0;
    for (bool all = false; r && !all && now_s() < until;) {
        all = true;
        for (int i = 0; i < size; i++) {
            int done = 1;
            if (r[i] != MPI_REQUEST_NULL && MPI_Test(&r[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                done = 1;
            all = all && done;
        }
        if (!all)
            pause_us(200);
    }
    for (int i = 0; r && i < size; i++)
        if (r[i] != MPI_REQUEST_NULL)
            MPI_Request_free(&r[i]);
    free(r);
}

static int mpi_silent(double grace_s, int *ranks, int max)
{
    const int size = W->size(), me = W->rank();
    unsigned char *answered = calloc((size_t)size, 1);
    if (!answered || g_ctl == MPI_COMM_NULL) {
        free(answered);
        return 0; /* cannot ask: nobody is named */
    }
    static const char ask = 1;
    for (int i = 0; i < size; i++) {
        MPI_Request r;
        if (i != me && MPI_Isend(&ask, 1, MPI_CHAR, i, TAG_ASK, g_ctl, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
    answered[me] = 1;
    const double until = now_s() + grace_s;
    for (bool all = false; !all && now_s() < until;) {
        serve(answered);
        all = memchr(answered, 0, (size_t)size) == NULL;
        if (!all)
            pause_us(500);
    }
    int k = 0;
    for (int i = 0; i < size; i++)
        if (!answered[i]) {
            if (k < max)
                ranks[k] = i;
            k++;
        }
    free(answered);
    return k;
}

/* ------------------------------------------------------------- waiting */

/* Waits for o (not freed): MPI_Test in a loop against the deadline,
 * listening for notices. An error, a notice or the deadline ends the
 * world (the request is given up: it cannot be cancelled). */
static amp_status wait_op(comm_op *o, const char *what)
{
    amp_status st = W->check();
    if (st != AMP_OK)
        return st;
    const double deadline = now_s() + W->timeout();
    for (long spins = 0;; spins++) {
        int flag = 0;
        int rc = MPI_Test(&o->r, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char why[MPI_MAX_ERROR_STRING + 32];
            return W->fail(what, mpi_why(rc, why, sizeof why));
        }
        if (flag)
            break;
        if (spins > 2000) { /* past ~100 us of polling: listen, check the clock, and let the core go */
            if ((st = W->check()) != AMP_OK)
                return st;
            if (now_s() > deadline)
                return W->timed_out(what);
            pause_us(20);
        }
    }
    if (o->avg) {
        const float w = (float)W->size();
        for (int64_t i = 0; i < o->n; i++)
            o->avg[i] /= w;
    }
    /* A notice sent before this collective completed is this call's
     * error too: the other ranks do not go on. */
    return W->check();
}

static amp_status mpi_wait(comm_op *o, const char *what)
{
    if (!o)
        return AMP_OK;
    amp_status st = wait_op(o, what);
    free(o);
    return st;
}

static amp_status mpi_test(comm_op *o, bool *done)
{
    *done = true;
    if (!o || o->r == MPI_REQUEST_NULL)
        return AMP_OK;
    int flag = 0;
    int rc = MPI_Test(&o->r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        char why[MPI_MAX_ERROR_STRING + 32];
        return W->fail("testing a request", mpi_why(rc, why, sizeof why));
    }
    if (!flag) {
        /* a request whose peer failed never completes: the notice says so */
        *done = false;
        return W->check();
    }
    return AMP_OK;
}

/* One MPI call on the failure channel: Open MPI moves every non-blocking
 * operation in flight inside any, and a question from a rank that timed
 * out is answered. */
static void mpi_progress(void)
{
    if (g_ctl != MPI_COMM_NULL)
        serve(NULL);
}

/* --------------------------------------------------------- collectives */

/* The operation to start: a new one when it is to be handed out (*out),
 * else (or without memory for one) local, waited for before returning. */
static comm_op *op_begin(comm_op *local, comm_op **out)
{
    memset(local, 0, sizeof *local);
    comm_op *o = out ? calloc(1, sizeof *o) : NULL;
    if (out)
        *out = NULL;
    return o ? o : local;
}

/* After the MPI_I* call (rc) that filled o->r: handed out, or waited for. */
static amp_status op_started(int rc, comm_op *o, comm_op *local, comm_op **out, const char *what)
{
    if (rc != MPI_SUCCESS) {
        if (o != local)
            free(o);
        char why[MPI_MAX_ERROR_STRING + 32];
        return W->fail(what, mpi_why(rc, why, sizeof why)); /* the others may be in it already */
    }
    g_ops++;
    if (o != local) {
        *out = o;
        return AMP_OK;
    }
    return wait_op(o, what);
}

static amp_status mpi_allreduce(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, comm_op **out)
{
    comm_op local, *o = op_begin(&local, out);
    if (op == AMP_REDUCE_AVG)
        o->avg = buf, o->n = n;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), op == AMP_REDUCE_MAX ? MPI_MAX : MPI_SUM,
                            MPI_COMM_WORLD, &o->r);
    return op_started(rc, o, &local, out, "an all-reduce (MPI_Iallreduce)");
}

static amp_status mpi_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, comm_op **out)
{
    comm_op local, *o = op_begin(&local, out);
    int rc = MPI_Iallgather(send == recv ? MPI_IN_PLACE : send, (int)n, mpi_type(dt), recv, (int)n, mpi_type(dt),
                            MPI_COMM_WORLD, &o->r);
    return op_started(rc, o, &local, out, "an all-gather (MPI_Iallgather)");
}

static amp_status mpi_reduce_scatter(const void *send, void *recv, int64_t n, amp_dtype dt, comm_op **out)
{
    (void)dt; /* f32 only (comm.c) */
    comm_op local, *o = op_begin(&local, out);
    int rc = MPI_Ireduce_scatter_block(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &o->r);
    return op_started(rc, o, &local, out, "a reduce-scatter (MPI_Ireduce_scatter_block)");
}

static amp_status mpi_bcast(void *buf, int64_t n, amp_dtype dt, int root, comm_op **out)
{
    comm_op local, *o = op_begin(&local, out);
    int rc = MPI_Ibcast(buf, (int)n, mpi_type(dt), root, MPI_COMM_WORLD, &o->r);
    return op_started(rc, o, &local, out, "a broadcast (MPI_Ibcast)");
}

static amp_status mpi_barrier(comm_op **out)
{
    comm_op local, *o = op_begin(&local, out);
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &o->r);
    return op_started(rc, o, &local, out, "a barrier (MPI_Ibarrier)");
}

/* ------------------------------------------------------------ lifetime */

static amp_status mpi_init(int *argc, char ***argv, int *rank, int *size)
{
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
        g_started = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_FUNNELED)
        return amp_set_error(AMP_ERR_STATE, "dist: this MPI gives thread level %d, and ampc needs "
                                            "MPI_THREAD_FUNNELED (its pool's threads exist beside the one that "
                                            "communicates)", provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &g_ctl);
    if (rc != MPI_SUCCESS) {
        char why[MPI_MAX_ERROR_STRING + 32];
        g_ctl = MPI_COMM_NULL;
        return amp_set_error(AMP_ERR_STATE, "dist: MPI_Comm_dup failed: %s", mpi_why(rc, why, sizeof why));
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    g_noted = false;
    return AMP_OK;
}

static amp_status mpi_finalize(bool broken)
{
    if (broken) /* a collective may be unfinished: MPI is not called again */
        return AMP_OK;
    if (g_ctl != MPI_COMM_NULL)
        MPI_Comm_free(&g_ctl);
    g_ctl = MPI_COMM_NULL;
    int done = 0;
    MPI_Finalized(&done);
    if (!done && g_started) /* an MPI the caller started is the caller's to end */
        MPI_Finalize();
    g_started = false;
    return AMP_OK;
}

static int64_t mpi_ops(void) { return g_ops; }

#endif /* AMPC_HAVE_MPI */

const comm_engine comm_engine_mpi = {
    .name = "MPI",
    .available = mpi_available,
    .unavailable_reason = mpi_reason,
    .attach = mpi_attach,
    .init = mpi_init,
#ifdef AMPC_HAVE_MPI
    .finalize = mpi_finalize,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .reduce_scatter = mpi_reduce_scatter,
    .bcast = mpi_bcast,
    .barrier = mpi_barrier,
    .test = mpi_test,
    .wait = mpi_wait,
    .progress = mpi_progress,
    .announce = mpi_announce,
    .heard = mpi_heard,
    .silent = mpi_silent,
    .ops_started = mpi_ops,
#else /* never asked for a collective: without MPI the world is one rank */
    .finalize = comm_engine_absent_finalize,
    .ops_started = comm_engine_absent_ops,
#endif
};
