/*
 * comm_nccl.c - comm_nccl.h. Not built with NCCL yet: every CUDA
 * collective is an error that says so.
 */
#include "comm/comm_nccl.h"

#include "base/base.h"

static amp_status no_nccl(void)
{
    return amp_set_error(AMP_ERR_DEVICE, "dist: collectives on cuda tensors need NCCL, and this build of ampc "
                                         "has none (a CUDA build with NCCL found)");
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

amp_status comm_nccl_copy(void *dst, const void *src, int64_t n, amp_dtype dt)
{
    (void)dst, (void)src, (void)n, (void)dt;
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

void comm_nccl_finalize(void) {}
