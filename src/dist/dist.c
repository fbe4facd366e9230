/*
 * dist.c - the public amp_dist_* calls: comm.h's world and collectives on
 * tensors. A collective that writes a tensor bumps its version, as any
 * write from outside the ops does (autocast's kept casts of a broadcast
 * weight are made anew).
 */
#include "comm/comm.h"

#include "base/base.h"
#include "tensor/tensor.h"

bool amp_dist_available(void) { return comm_built_with_mpi(); }
amp_status amp_dist_init(int *argc, char ***argv) { return comm_init(argc, argv); }
bool amp_dist_is_initialized(void) { return comm_initialized(); }
int amp_dist_rank(void) { return comm_rank(); }
int amp_dist_world_size(void) { return comm_size(); }
amp_status amp_dist_finalize(void) { return comm_finalize(); }
void amp_dist_set_timeout(double seconds) { comm_set_timeout(seconds); }
amp_status amp_dist_barrier(void) { return comm_barrier(); }

amp_status amp_dist_all_reduce(amp_tensor *t, amp_reduce_op op)
{
    if (!t)
        return amp_set_error(AMP_ERR_ARG, "dist_all_reduce: NULL tensor");
    if ((unsigned)op > AMP_REDUCE_MAX)
        return amp_set_error(AMP_ERR_ARG, "dist_all_reduce: unknown reduction %d", (int)op);
    amp_status st = comm_allreduce(tensor_ptr(t), t->numel, t->dtype, op, tensor_device(t), NULL);
    if (st == AMP_OK)
        tensor_bump(t);
    return st;
}

amp_status amp_dist_broadcast(amp_tensor *t, int root)
{
    if (!t)
        return amp_set_error(AMP_ERR_ARG, "dist_broadcast: NULL tensor");
    amp_status st = comm_bcast(tensor_ptr(t), t->numel, t->dtype, root, tensor_device(t));
    if (st == AMP_OK)
        tensor_bump(t);
    return st;
}
