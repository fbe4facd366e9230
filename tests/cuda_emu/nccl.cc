/*
 * nccl.cc - cudaemu's NCCL (include/nccl.h): a world of one rank, so that
 * comm_nccl.c's plumbing (the communicator made over MPI, the side stream
 * and its events, the non-blocking communicator's polling, the
 * collectives' arguments) runs in the emulation build's tests. Over one
 * rank every collective leaves the data as it is: a sum, maximum or
 * average (divided by 1, exact) is the identity and a gather, scatter or
 * broadcast a copy, done here as a device-to-device cudaMemcpyAsync on the
 * caller's stream, which checks the stream and both extents. An in-place
 * call's buffer is checked too. More than one rank is refused
 * (ncclInvalidArgument), as is anything NCCL itself would refuse that
 * ampc could get wrong: an unknown type or operation, a communicator that
 * is not live, a call while it is still being made, a config that was not
 * NCCL_CONFIG_INITIALIZER's.
 *
 * A non-blocking communicator (config.blocking = 0) answers
 * ncclCommInitRankConfig and ncclCommFinalize with ncclInProgress, and
 * its first ncclCommGetAsyncError after them with ncclInProgress again,
 * so the caller's polling loop runs as it must against NCCL. With
 * CUDAEMU_NCCL_STUCK=1 in the environment a non-blocking communicator
 * never settles (ncclInProgress for ever), as when a peer never joins.
 */
#include <nccl.h>

#include "emu.h"

#include <limits.h>
#include <mutex>
#include <set>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ncclComm {
    bool blocking;
    int polls_left;       /* ncclInProgress answers left before the state settles */
    char last[256];
};

static std::mutex mu;
static std::set<const void *> comms;
static const char id_magic[] = "cudaemu-nccl-id";
static char last_global[256];

static ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
    char *buf = c ? c->last : last_global;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof last_global, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cudaemu: NCCL: %s\n", buf);
    return r;
}

static ncclComm *live(ncclComm_t c) { return c && comms.count(c) ? c : nullptr; }

extern "C" ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, id_magic, sizeof id_magic);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t *config)
{
    std::lock_guard<std::mutex> g(mu);
    if (!comm)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: NULL comm");
    *comm = nullptr;
    if (nranks != 1 || rank != 0)
        return fail(nullptr, ncclInvalidArgument,
                    "ncclCommInitRankConfig: rank %d of %d ranks: cudaemu's NCCL is a world of one rank", rank,
                    nranks);
    if (memcmp(id.internal, id_magic, sizeof id_magic) != 0)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: the unique id is not ncclGetUniqueId's");
    if (config && (config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef ||
                   config->version != NCCL_VERSION_CODE))
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: the config was not made by "
                                                  "NCCL_CONFIG_INITIALIZER");
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev != 0)
        return fail(nullptr, ncclUnhandledCudaError, "ncclCommInitRankConfig: no current CUDA device");
    ncclComm *c = new ncclComm();
    c->blocking = !config || config->blocking != 0;
    comms.insert(c);
    *comm = c;
    if (c->blocking)
        return ncclSuccess;
    /* CUDAEMU_NCCL_STUCK=1: a peer that never comes, so the communicator
     * never settles (the caller's deadline is what ends it). */
    const char *stuck = getenv("CUDAEMU_NCCL_STUCK");
    c->polls_left = stuck && strcmp(stuck, "1") == 0 ? INT_MAX : 1;
    return ncclInProgress;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    if (!c || !state)
        return fail(c, ncclInvalidArgument, "ncclCommGetAsyncError: %s", c ? "NULL state" : "no such communicator");
    if (c->polls_left > 0) {
        c->polls_left--;
        *state = ncclInProgress;
    } else {
        *state = ncclSuccess;
    }
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: no such communicator");
    if (c->blocking)
        return ncclSuccess;
    c->polls_left = 1;
    return ncclInProgress;
}

static ncclResult_t end_comm(ncclComm_t comm, const char *what)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "%s: no such communicator", what);
    comms.erase(c);
    delete c;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) { return end_comm(comm, "ncclCommDestroy"); }
extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) { return end_comm(comm, "ncclCommAbort"); }

extern "C" const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

extern "C" const char *ncclGetLastError(ncclComm_t comm)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    return c ? c->last : last_global;
}

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* count elements of t from send to recv over one rank, on stream. */
static ncclResult_t one_rank(const char *what, const void *send, void *recv, size_t count, ncclDataType_t t,
                             ncclComm_t comm, cudaStream_t stream)
{
    std::lock_guard<std::mutex> g(mu);
    ncclComm *c = live(comm);
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "%s: no such communicator", what);
    if (c->polls_left > 0)
        return fail(c, ncclInvalidUsage, "%s: the communicator is still being made (poll ncclCommGetAsyncError "
                                         "until ncclSuccess first)", what);
    const size_t es = type_size(t);
    if (!es)
        return fail(c, ncclInvalidArgument, "%s: unknown data type %d", what, (int)t);
    if (count == 0)
        return ncclSuccess;
    const size_t bytes = count * es;
    if (send == recv) {
        if (!emu::device_range(recv, bytes)) {
            emu::misuse("%s(%p, %zu bytes in place): outside any live device allocation", what, recv, bytes);
            return fail(c, ncclInvalidArgument, "%s: a buffer outside device memory", what);
        }
        return ncclSuccess;
    }
    if (cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
        return fail(c, ncclUnhandledCudaError, "%s: the copy of %zu bytes failed (cudaemu said why)", what, bytes);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t stream)
{
    if ((unsigned)op >= ncclNumOps)
        return fail(nullptr, ncclInvalidArgument, "ncclAllReduce: unknown operation %d", (int)op);
    return one_rank("ncclAllReduce", send, recv, count, t, comm, stream);
}

extern "C" ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                      ncclComm_t comm, cudaStream_t stream)
{
    if (root != 0)
        return fail(nullptr, ncclInvalidArgument, "ncclBroadcast: root %d of a world of one rank", root);
    return one_rank("ncclBroadcast", send, recv, count, t, comm, stream);
}

extern "C" ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
                                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    if ((unsigned)op >= ncclNumOps)
        return fail(nullptr, ncclInvalidArgument, "ncclReduceScatter: unknown operation %d", (int)op);
    return one_rank("ncclReduceScatter", send, recv, recvcount, t, comm, stream);
}

extern "C" ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
                                      ncclComm_t comm, cudaStream_t stream)
{
    return one_rank("ncclAllGather", send, recv, sendcount, t, comm, stream);
}
