/*
 * runtime.cu - the CUDA runtime side of the backend: device discovery, the
 * one stream, the caching device allocator, copies, the TF32 switch.
 *
 * Discovery runs once (cudaGetDeviceCount); with no driver or no GPU the
 * count is 0 and the reason is kept for error messages, and nothing else
 * in the backend is ever called. The process uses one device: device 0,
 * or under an MPI launcher its local rank modulo the devices (each rank of
 * a node on its own GPU, as the NCCL path wants: comm_nccl.c). The runtime is linked statically and
 * opens the driver (libcuda.so.1) at that first call, so a program that
 * never asks for a device loads nothing of CUDA (cuBLASLt: gemm.cu).
 *
 * The allocator keeps freed blocks in free lists per size class (multiples
 * of 512 bytes up to 1 MiB, then four classes per power of two, so at most
 * 25% slack) and hands them to the next request of the class: after the
 * first training step no cudaMalloc happens. Reuse is safe without events
 * because all work runs on one stream, in order: a kernel queued after the
 * free runs after every kernel that used the block before. When cudaMalloc
 * fails the cache is returned to the driver and the allocation retried.
 * Each live block keeps its memory category (mem_ledger.h): device_ledger
 * counts the bytes per category and per phase.
 *
 * Every cudaMemcpy* and cudaStreamSynchronize of the backend goes through
 * the two counted wrappers below (cuda_memcpy, stream_wait), so
 * amp_cuda_get_sync_stats sees each time ampc may block the host on the
 * GPU (docs/cuda.md, "Counting host synchronisations").
 */
#include "backend/cuda/cuda_common.cuh"
extern "C" {
#include "record/mem_ledger.h"
}

#include <atomic>
#include <dlfcn.h>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <unordered_map>
#include <vector>

/* ---------------------------------------------------------- discovery */

static std::once_flag init_once;
static int n_devices, capability; /* capability: major * 10 + minor of the device used */
static int device;                  /* the device used */
static char reason[256] = "no CUDA device found";
static cudaStream_t stream;

/* The rank within its node that an MPI launcher (Open MPI, MPICH / Intel
 * MPI, Slurm, torchrun-style) gave this process, 0 without one. */
static int local_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                       "LOCAL_RANK"};
    for (const char *name : vars) {
        const char *v = getenv(name);
        char *end = NULL;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && *v && end && *end == '\0' && r >= 0 && r < (1L << 20))
            return (int)r;
    }
    return 0;
}

static void init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        snprintf(reason, sizeof reason, "no CUDA device found: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
#ifndef CUDAEMU_CUDA_RUNTIME_H
        /* The static runtime says "driver version is insufficient" also
         * when there is no driver at all: say which. */
        if (e != cudaSuccess && !dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL))
            snprintf(reason, sizeof reason, "no CUDA device found: no NVIDIA driver (libcuda.so.1 could not be "
                     "loaded)");
#endif
        cudaGetLastError(); /* clear the sticky-free error state */
        return;
    }
    int major = 0, minor = 0;
    device = local_rank() % n;
    e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(reason, sizeof reason, "no CUDA device found: device %d failed to start: %s", device,
                 cudaGetErrorString(e));
        cudaGetLastError();
        return;
    }
    n_devices = n;
    capability = major * 10 + minor;
    cuda_prof_register(); /* the profiler's device timer (profile.cu) */
}

extern "C" int cuda_compute_capability(void)
{
    std::call_once(init_once, init);
    return capability;
}

extern "C" int cuda_device_count(void)
{
    std::call_once(init_once, init);
    return n_devices;
}

extern "C" const char *cuda_unavailable_reason(void)
{
    std::call_once(init_once, init);
    return reason;
}

cudaStream_t cuda_stream(void)
{
    std::call_once(init_once, init);
    return stream;
}

extern "C" void *cuda_stream_handle(void) { return (void *)cuda_stream(); }

extern "C" int cuda_device_index(void)
{
    std::call_once(init_once, init);
    return device;
}

amp_status cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return AMP_OK;
    amp_status st = e == cudaErrorMemoryAllocation ? AMP_ERR_MEMORY : AMP_ERR_DEVICE;
    return amp_set_error(st, "cuda: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ------------------------------------------- counted host waits, copies */

/* Process-wide, relaxed: the counts are read between steps, not used to
 * order anything. */
static std::atomic<uint64_t> n_syncs{0}, n_d2h{0}, n_h2d{0};

/* The one place the host waits for the stream outside a copy to the
 * host. */
static cudaError_t stream_wait(void)
{
    n_syncs.fetch_add(1, std::memory_order_relaxed);
    return cudaStreamSynchronize(cuda_stream());
}

/* Queues nbytes from src to dst on the stream. A copy into host memory
 * then waits for the stream (the host reads it next): a device -> host copy
 * counts once, as a d2h copy (its wait is part of it); host -> host counts
 * as a sync (ampc never asks for one: device.c memcpy's). A host -> device
 * copy from pageable memory returns once CUDA has staged the source (the
 * caller may free it); CUDA may block the host for that (its documentation
 * allows a stream synchronisation), small copies return at once in
 * practice: counted apart, as h2d, not as a wait. Device -> device copies
 * never block the host and are not counted. */
amp_status cuda_memcpy(void *dst, const void *src, size_t nbytes, cudaMemcpyKind kind, const char *what)
{
    if (nbytes == 0)
        return AMP_OK;
    if (kind == cudaMemcpyHostToDevice)
        n_h2d.fetch_add(1, std::memory_order_relaxed);
    else if (kind == cudaMemcpyDeviceToHost)
        n_d2h.fetch_add(1, std::memory_order_relaxed);
    amp_status st = cuda_check(cudaMemcpyAsync(dst, src, nbytes, kind, cuda_stream()), what);
    if (st != AMP_OK || (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyHostToHost))
        return st;
    if (kind == cudaMemcpyHostToHost)
        return cuda_check(stream_wait(), "cudaStreamSynchronize after a host copy");
    return cuda_check(cudaStreamSynchronize(cuda_stream()), "cudaStreamSynchronize after a copy to the host");
}

/* Kernel launches and cuBLASLt products queued (bench_cuda's per-step
 * count: a step of many tiny launches is bound by the host). */
static std::atomic<uint64_t> n_launches{0};

void cuda_note_launch(void) { n_launches.fetch_add(1, std::memory_order_relaxed); }

extern "C" uint64_t cuda_launch_count(void) { return n_launches.load(std::memory_order_relaxed); }

extern "C" amp_cuda_sync_stats amp_cuda_get_sync_stats(void)
{
    amp_cuda_sync_stats s;
    s.syncs = n_syncs.load(std::memory_order_relaxed);
    s.d2h_copies = n_d2h.load(std::memory_order_relaxed);
    s.h2d_copies = n_h2d.load(std::memory_order_relaxed);
    return s;
}

extern "C" void amp_cuda_reset_sync_stats(void)
{
    n_syncs.store(0, std::memory_order_relaxed);
    n_d2h.store(0, std::memory_order_relaxed);
    n_h2d.store(0, std::memory_order_relaxed);
}

/* ---------------------------------------------------------- allocator */

static std::mutex mu;
static std::unordered_map<size_t, std::vector<void *>> free_lists; /* class size -> blocks */
struct live_block {
    size_t size;          /* class size */
    amp_mem_category cat; /* what it holds */
};
static std::unordered_map<void *, live_block> live; /* block -> its class size and category */
static size_t cached_bytes, n_allocs, n_os_allocs; /* bytes in use: device_ledger */
static mem_ledger device_ledger;

static size_t class_size(size_t n)
{
    const size_t small = (size_t)1 << 20;
    if (n <= small)
        return n == 0 ? 512 : (n + 511) / 512 * 512;
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^e < n <= 2^(e+1) */
    size_t base = (size_t)1 << e, step = base / 4;
    return base + (n - base + step - 1) / step * step;
}

/* Returns every cached block to the driver (mu held). */
static void release_cache_locked(void)
{
    for (auto &kv : free_lists)
        for (void *p : kv.second)
            cudaFree(p);
    free_lists.clear();
    cached_bytes = 0;
}

extern "C" void *cuda_malloc(size_t nbytes)
{
    if (cuda_device_count() < 1) {
        amp_set_error(AMP_ERR_DEVICE, "cuda is not available (%s)", reason);
        return NULL;
    }
    size_t cs = class_size(nbytes);
    std::lock_guard<std::mutex> g(mu);
    void *p = NULL;
    auto it = free_lists.find(cs);
    if (it != free_lists.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_bytes -= cs;
    } else {
        cudaError_t e = cudaMalloc(&p, cs);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            stream_wait(); /* the cached blocks may still be in use by queued work */
            release_cache_locked();
            e = cudaMalloc(&p, cs);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            size_t in_use, peak;
            mem_ledger_totals(&device_ledger, &in_use, &peak);
            amp_set_error(e == cudaErrorMemoryAllocation ? AMP_ERR_MEMORY : AMP_ERR_DEVICE,
                          "cuda: out of device memory allocating %zu bytes (%s; %zu bytes in use)", nbytes,
                          cudaGetErrorString(e), in_use);
            return NULL;
        }
        n_os_allocs++;
    }
    const amp_mem_category cat = mem_alloc_category();
    live[p] = live_block{cs, cat};
    n_allocs++;
    mem_ledger_add(&device_ledger, cat, cs);
    return p;
}

extern "C" void cuda_free(void *p)
{
    if (!p)
        return;
    std::lock_guard<std::mutex> g(mu);
    auto it = live.find(p);
    if (it == live.end())
        return; /* not ours: never hand a foreign pointer to cudaFree */
    size_t cs = it->second.size;
    mem_ledger_sub(&device_ledger, it->second.cat, cs);
    live.erase(it);
    free_lists[cs].push_back(p);
    cached_bytes += cs;
}

extern "C" amp_memory_stats cuda_memory_stats(void)
{
    std::lock_guard<std::mutex> g(mu);
    amp_memory_stats s = {0, 0, n_allocs, cached_bytes, n_os_allocs};
    mem_ledger_totals(&device_ledger, &s.current, &s.peak);
    return s;
}

extern "C" amp_status cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    if (cuda_device_count() < 1)
        return amp_set_error(AMP_ERR_DEVICE, "cuda is not available (%s)", reason);
    return cuda_check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

extern "C" void cuda_memory_reset_peak(void)
{
    mem_ledger_reset_peak(&device_ledger);
}

extern "C" size_t cuda_block_size(size_t nbytes) { return class_size(nbytes); }

extern "C" void cuda_mem_retag(void *p, amp_mem_category c)
{
    if (!p || (int)c < 0 || (int)c >= AMP_MEM_CATEGORY_COUNT) /* int: an enum may be unsigned in C++ */
        return;
    std::lock_guard<std::mutex> g(mu);
    auto it = live.find(p);
    if (it == live.end())
        return;
    mem_ledger_move(&device_ledger, it->second.cat, c, it->second.size);
    it->second.cat = c;
}

extern "C" amp_status cuda_memory_categories(amp_memory_categories *out)
{
    if (!out)
        return amp_set_error(AMP_ERR_ARG, "memory_get_categories: NULL output");
    mem_ledger_read(&device_ledger, out);
    return AMP_OK;
}

/* Reads the ledger only: never starts CUDA (a sample before any device
 * use is all zeros). */
extern "C" void cuda_memory_current(size_t cur[AMP_MEM_CATEGORY_COUNT])
{
    mem_ledger_current(&device_ledger, cur);
}

extern "C" void cuda_empty_cache(void)
{
    if (cuda_device_count() < 1)
        return;
    std::lock_guard<std::mutex> g(mu);
    stream_wait();
    release_cache_locked();
}

/* ------------------------------------------------------------- copies */

extern "C" amp_status cuda_copy(void *dst, amp_device ddev, const void *src, amp_device sdev, size_t nbytes)
{
    if (nbytes == 0)
        return AMP_OK;
    if (cuda_device_count() < 1)
        return amp_set_error(AMP_ERR_DEVICE, "cuda is not available (%s)", reason);
    cudaMemcpyKind kind = sdev == AMP_CPU ? (ddev == AMP_CPU ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
                                          : (ddev == AMP_CPU ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
    /* A copy to the host waits for it (the host reads it right after). */
    return cuda_memcpy(dst, src, nbytes, kind, "cudaMemcpyAsync");
}

extern "C" amp_status cuda_synchronize(void)
{
    if (cuda_device_count() < 1)
        return amp_set_error(AMP_ERR_DEVICE, "cuda is not available (%s)", reason);
    return cuda_check(stream_wait(), "cudaStreamSynchronize");
}

/* --------------------------------------------------------------- TF32 */

static std::atomic<bool> tf32{false};

extern "C" void cuda_set_tf32(bool on) { tf32.store(on); }
extern "C" bool cuda_get_tf32(void) { return tf32.load(); }
