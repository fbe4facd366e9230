/*
 * comm_engine.h - the interface between comm.c (the layer's one entry:
 * the world, argument checks, requests, failures) and the engines that
 * move the bytes, as backend/backend.h is between the core and a device.
 *
 * An engine is one struct of function pointers (comm_engine). Two exist:
 * comm_engine_mpi (comm_mpi.c: host buffers, and the world itself: its
 * ranks, its start and end, the channel on which a rank tells the others
 * it failed) and comm_engine_nccl (comm_nccl.c: CUDA buffers, on the CUDA
 * backend's stream). Neither includes or calls the other: what NCCL needs
 * from the world (agreeing with the other ranks, rank 0's id sent to all,
 * a peer's failure heard while it waits) comes through the comm_world that
 * comm.c hands every engine (attach), and what it needs from the device
 * (is there one, which, its stream) through the CUDA backend's table. An
 * engine built without its library has a table too: available() is false
 * and unavailable_reason() says what to install.
 *
 * Which engine carries a collective is decided in one place, comm.c's
 * engine_for (by the buffer's device and the world's size).
 */
#ifndef AMPC_COMM_ENGINE_H
#define AMPC_COMM_ENGINE_H

#include "ampc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An operation in flight: each engine defines its own struct. */
typedef struct comm_op comm_op;

/* What comm.c lends an engine: the world, and a way to talk to it.
 * Every function is safe to call from the thread that issues the
 * collectives only. */
typedef struct comm_world {
    int (*rank)(void);
    int (*size)(void);
    double (*timeout)(void); /* seconds any wait may last */
    /* Every rank says how it went (st, this rank's error message kept);
     * every rank returns AMP_OK, or the same error naming the rank that
     * failed (comm_agree in comm.h). The identity in a world of one. */
    amp_status (*agree)(amp_status st, const char *what);
    /* nbytes of host memory at buf become rank root's (blocking). */
    amp_status (*bcast_host)(void *buf, size_t nbytes, int root, const char *what);
    /* AMP_OK, or the error that ended the world: another rank's failure
     * heard (polled by an engine while it waits) or one recorded here. */
    amp_status (*check)(void);
    /* This rank cannot go on with the others (a collective that cannot be
     * finished or cancelled): records why for every later call, tells the
     * other ranks, and returns the error. what: the operation. */
    amp_status (*fail)(const char *what, const char *why);
    /* The same for a wait past the timeout: the message also names the
     * ranks that did not answer (which one stopped). */
    amp_status (*timed_out)(const char *what);
} comm_world;

typedef struct comm_engine {
    const char *name; /* "MPI", "NCCL": in messages */

    /* Whether this build has the engine (and, for NCCL, that it can be
     * loaded is found out at the first collective); why not. */
    bool (*available)(void);
    const char *(*unavailable_reason)(void);
    /* Given the world once, before any other call. */
    void (*attach)(const comm_world *w);

    /* The world's engine (MPI) starts the process group and says which
     * rank this is in how many; NULL in the others. */
    amp_status (*init)(int *argc, char ***argv, int *rank, int *size);
    /* Waits for what is in flight and frees what the engine made (a later
     * collective starts it anew). broken: the world failed; give up what
     * is in flight without waiting for any peer. */
    amp_status (*finalize)(bool broken);

    /* Collectives on n elements of dt in the engine's memory; comm.c has
     * checked the arguments (counts fit an int, dtypes and reductions the
     * engine takes). With out: started, *out to test and wait; without
     * (NULL): done on return. An error after the other ranks may have
     * joined goes through the world's fail or timed_out (so every later
     * call refuses); one before (an engine that cannot start, agreed by
     * every rank) is returned alone. */
    amp_status (*allreduce)(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, comm_op **out);
    amp_status (*allgather)(const void *send, void *recv, int64_t n, amp_dtype dt, comm_op **out);
    amp_status (*reduce_scatter)(const void *send, void *recv, int64_t n, amp_dtype dt, comm_op **out);
    amp_status (*bcast)(void *buf, int64_t n, amp_dtype dt, int root, comm_op **out);
    amp_status (*barrier)(comm_op **out);

    /* Whether op is done (moving the engine along); never blocks. An
     * error: op failed (it stays op's to wait, which frees it). */
    amp_status (*test)(comm_op *op, bool *done);
    /* Waits for op (an engine on a device may instead make the device's
     * queue wait, the host going on) and frees it; what names it in
     * messages. */
    amp_status (*wait)(comm_op *op, const char *what);
    /* Lets the engine move what is in flight along; NULL: nothing to do. */
    void (*progress)(void);

    /* The failure channel (the world's engine; NULL in the others):
     * announce tells every other rank that this one failed, msg saying
     * why; heard fills msg with a notice another rank sent (false: none
     * yet), answering the other ranks' questions meanwhile; silent asks
     * every other rank whether it is there and lists in ranks[0..max)
     * those that did not answer within grace_s (how many). */
    void (*announce)(const char *msg);
    bool (*heard)(char *msg, size_t size);
    int (*silent)(double grace_s, int *ranks, int max);

    /* Operations started since the process began (the tests check which
     * engine ran). */
    int64_t (*ops_started)(void);
} comm_engine;

/* The finalize and ops_started of an engine this build lacks (its
 * collectives and failure channel stay NULL: comm.c asks available()
 * first): nothing to finalize, no operation ever started. */
static inline amp_status comm_engine_absent_finalize(bool broken)
{
    (void)broken;
    return AMP_OK;
}
static inline int64_t comm_engine_absent_ops(void) { return 0; }

extern const comm_engine comm_engine_mpi;
extern const comm_engine comm_engine_nccl;

#endif
