/*
 * comm.h - communication between the ranks of a data-parallel run, on
 * existing engines: MPI (Open MPI) for host buffers, NCCL for CUDA
 * buffers (its communicator made over MPI). No sockets or collectives of
 * our own. The layer sits above the backends (a CUDA buffer's collective
 * runs on the CUDA backend's stream) and below tensors: it moves raw
 * buffers. The tensor-level API (amp_dist_*), DistributedDataParallel and
 * ZeRO live in src/dist/.
 *
 * comm.c is the layer's one entry: it checks the arguments, keeps the
 * world, and hands each collective to an engine (comm_engine.h: MPI's in
 * comm_mpi.c, NCCL's in comm_nccl.c), chosen by the buffer's device.
 *
 * One process is one rank. Before comm_init, and in a build without MPI,
 * the world is one rank (comm_rank() 0, comm_size() 1) and every
 * collective is the identity (a copy where send and receive differ), so
 * single-process code needs no branches; comm_init itself fails without
 * MPI with a message naming the package to install.
 *
 * Failures are returned, never fatal; the program decides to end the job
 * (tools/dist_cli.c does). Two kinds:
 *   - agreed: a rank that cannot reach a collective (out of memory while
 *     packing) says so in comm_agree before it, and every rank's call
 *     returns the same error naming that rank and its message; nothing is
 *     in flight, and the world goes on;
 *   - the world ends: a wait past the deadline (comm_set_timeout,
 *     AMPC_DIST_TIMEOUT in seconds, default 300; the message names the
 *     ranks that did not answer), an engine's error once the ranks are in
 *     a collective together (it cannot be cancelled, and its buffers may
 *     still be written), or such a failure another rank announced. The
 *     call returns the error, the other ranks are told (their waits return
 *     it too, naming this rank), and every later collective and
 *     comm_finalize return it at once, calling no engine: end the job
 *     (the launcher ends every rank when one exits without finalizing).
 *
 * Collectives are issued by one thread (MPI_THREAD_FUNNELED: the thread
 * that ran comm_init, which runs backward and the step).
 */
#ifndef AMPC_COMM_H
#define AMPC_COMM_H

#include "ampc.h"

#include <stdbool.h>
#include <stdint.h>

/* Reductions (amp_reduce_op of ampc.h). */

/* An operation in flight (a non-blocking collective). */
typedef struct comm_req comm_req;
typedef struct comm_engine comm_engine;

/* Whether this build has MPI (and NCCL, for CUDA buffers). */
bool comm_built_with_mpi(void);
bool comm_built_with_nccl(void);
/* The world size an MPI launcher (mpirun / mpiexec) announced in the
 * environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_SIZE; 1 with
 * PMIX_RANK alone); -1: not under a launcher. */
int comm_launched_size(void);

/* Starts MPI (once; argc / argv may be NULL), or joins an MPI the caller
 * started (at MPI_THREAD_FUNNELED or above). Without MPI in the build:
 * AMP_ERR_STATE, "ampc was built without MPI (...)"; after MPI was
 * finalized (MPI cannot start again): AMP_ERR_STATE. */
amp_status comm_init(int *argc, char ***argv);
bool comm_initialized(void);
/* Waits for the others (a barrier with the deadline), ends MPI if
 * comm_init started it; the world is one rank again (for good: MPI cannot
 * be initialized twice). After the world ended (comm_failed) it waits for
 * no one and returns that error: MPI is left as it is, for the program to
 * end the job. */
amp_status comm_finalize(void);
int comm_rank(void);
int comm_size(void);

void comm_set_timeout(double seconds); /* <= 0: the default */
double comm_timeout(void);

/* In place: buf (n elements of dt on dev) becomes the reduction over the
 * ranks. SUM / AVG on f32 (and f64-free int64 for SUM / MAX), MAX on f32
 * and i64; AVG divides the f32 sum by the world size. 16-bit buffers are
 * not reduced (the caller widens: sums stay f32). With req: starts it and
 * returns at once (*req to comm_wait); without: waits. */
amp_status comm_allreduce(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, amp_device dev, comm_req **req);
/* recv (size * n elements) gets every rank's send (n elements), in rank
 * order. Any dtype (16-bit ones moved as bits). */
amp_status comm_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, amp_device dev, comm_req **req);
/* send holds size * n elements: recv (n) gets the SUM over the ranks of
 * their send's block [rank * n, rank * n + n). f32 only. */
amp_status comm_reduce_scatter(const void *send, void *recv, int64_t n, amp_dtype dt, amp_device dev,
                               comm_req **req);
/* buf (n elements) becomes root's. */
amp_status comm_bcast(void *buf, int64_t n, amp_dtype dt, int root, amp_device dev);
amp_status comm_barrier(void);

/* Whether req is done (drives the engine's progress); never blocks. A
 * request that failed counts as done: comm_wait returns its error. */
bool comm_test(comm_req *req);
/* Waits for req (NULL: nothing to wait for) and frees it; `what` names it
 * in messages ("the gradient all-reduce of bucket 3"). Past the deadline,
 * or on an engine's error while waiting, the world ends (above) and the
 * error is returned; the request is given up (a collective cannot be
 * cancelled: keep its buffers alive until the job ends). */
amp_status comm_wait(comm_req *req, const char *what);
/* Lets the engine move the operations in flight along (one MPI call:
 * Open MPI progresses every request inside any), for overlap: call
 * between pieces of other work. */
void comm_progress(void);

/* Before a collective some rank may fail to reach: every rank passes how
 * its own work went (st: AMP_OK, or its error with the message set) and
 * all of them return the same outcome: AMP_OK when every rank succeeded,
 * else on every rank the failing rank's status and the message "<what>:
 * rank R failed: <its message>" (the lowest such rank; the others are
 * counted). Blocking, allocates nothing; the world goes on. A world of
 * one rank returns st. */
amp_status comm_agree(amp_status st, const char *what);
/* This rank cannot keep in step after the ranks agreed to go on (a
 * device failure between comm_agree and the collective): the world ends
 * as on an engine's failure, the last error giving the reason, and the
 * other ranks are told. Returns the error. */
amp_status comm_fail(const char *what);
/* Whether the world ended (above); its message then in *why when not NULL. */
bool comm_failed(const char **why);

/* The engine that carries collectives on dev's buffers once the world has
 * several ranks (MPI for the CPU, NCCL for CUDA), attached to the world;
 * for the tests, which drive the engines directly. */
const comm_engine *comm_device_engine(amp_device dev);

#endif
