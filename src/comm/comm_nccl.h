/*
 * comm_nccl.h - comm.h's collectives on CUDA buffers, through NCCL
 * (comm_nccl.c): one communicator per process, made at the first CUDA
 * collective from an ncclUniqueId that rank 0 broadcasts over MPI, its
 * operations on a side stream that waits for the CUDA backend's stream
 * and that the backend's stream waits for in turn when an operation is
 * waited for (device-side: no host synchronisation). Without NCCL in the
 * build every call is an AMP_ERR_DEVICE error naming what is missing
 * (comm_nccl_copy, which needs no NCCL, excepted). comm_mpi.c sends CUDA
 * buffers here whenever the world has several ranks, and also in a world
 * of one rank after comm_init in a build with NCCL (NCCL's one-rank
 * collectives are copies), so one process exercises the whole path.
 */
#ifndef AMPC_COMM_NCCL_H
#define AMPC_COMM_NCCL_H

#include "ampc.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct nccl_op nccl_op;

amp_status comm_nccl_allreduce(void *buf, int64_t n, amp_dtype dt, amp_reduce_op op, nccl_op **out);
amp_status comm_nccl_allgather(const void *send, void *recv, int64_t n, amp_dtype dt, nccl_op **out);
amp_status comm_nccl_reduce_scatter(const void *send, void *recv, int64_t n, amp_dtype dt, nccl_op **out);
amp_status comm_nccl_bcast(void *buf, int64_t n, amp_dtype dt, int root);
/* dst = src on the device (a world of one rank's all-gather). */
amp_status comm_nccl_copy(void *dst, const void *src, int64_t n, amp_dtype dt);
bool comm_nccl_test(nccl_op *op);
/* Makes the CUDA backend's stream wait for op (no host wait), then frees
 * it. */
amp_status comm_nccl_wait(nccl_op *op, const char *what);
/* NCCL operations started since the process began (the tests check that
 * the NCCL path ran). */
int64_t comm_nccl_ops(void);
/* Waits for the operations in flight, then ends the communicator (a
 * later CUDA collective makes a new one). */
void comm_nccl_finalize(void);

#endif
