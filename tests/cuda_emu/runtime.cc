/*
 * runtime.cc (cudaemu) - the CUDA runtime on the CPU: one emulated device,
 * its memory, streams, copies, errors, and the kernel scheduler.
 *
 * Device memory is one reserved arena of host address space (CUDAEMU_MEM_MB,
 * default 4096, is the device's size), handed out first-fit in 256-byte
 * units. It stays PROT_NONE except inside a device_scope (a kernel, a copy,
 * a memset, a cuBLASLt call), so host code that dereferences a device
 * pointer faults on the spot. Fresh allocations are filled with 0xff bytes:
 * NaN in every float type, -1 in every integer, so reading memory nobody
 * wrote shows. CUDAEMU_PROTECT=0 turns the protection off (a debugger
 * session, say).
 *
 * Work runs synchronously on the calling thread, in issue order, which is
 * the order one CUDA stream guarantees; what a real stream adds (overlap
 * with the host) cannot change the results of a program that waits where
 * it must, and waiting where it must is what ampc's sync counter checks.
 *
 * Kernels: the threads of a block are fibers with their own stacks, run in
 * turn until each reaches a barrier (__syncthreads, a warp shuffle) or
 * exits; when every thread of the group has arrived the barrier opens.
 * Threads waiting at different barriers are a deadlock on a GPU: reported
 * as a misuse, the block abandoned. The fiber switch is a few instructions
 * of x86-64 assembly (callee-saved registers, MXCSR, x87 control word),
 * cheap enough for the millions of threads an im2col launches.
 *
 * Misuse (a host pointer in a kernel argument or a copy, a copy in the
 * wrong direction, a bad launch, a deadlock) prints "cudaemu: ..." to
 * stderr and becomes the last error; and the process exits with status 1
 * at its end however the program fared, so that no test passes over one.
 * CUDAEMU_ABORT=1 aborts at the first misuse instead (for a debugger).
 */
#include "emu.h"

#include <cuda_runtime.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <vector>

#if !defined(__x86_64__)
#error "cudaemu's fiber switch is written for x86-64"
#endif

/* ------------------------------------------------------------ errors */

static std::recursive_mutex mu; /* every entry point: one device, one queue */
static cudaError_t last_error = cudaSuccess;
static unsigned long n_misuse;

static void report_at_exit(void)
{
    if (n_misuse == 0)
        return;
    fflush(NULL);
    fprintf(stderr, "cudaemu: %lu misuse(s) of the CUDA API or device memory in this process (see above)\n",
            n_misuse);
    _exit(1);
}

static void set_error(cudaError_t e)
{
    if (last_error == cudaSuccess)
        last_error = e;
}

namespace emu {

void misuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cudaemu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    static std::once_flag at_exit;
    std::call_once(at_exit, [] { atexit(report_at_exit); });
    n_misuse++;
    set_error(cudaErrorLaunchFailure);
    const char *a = getenv("CUDAEMU_ABORT");
    if (a && *a == '1')
        abort();
}

unsigned long take_misuses(void)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    unsigned long n = n_misuse;
    n_misuse = 0;
    return n;
}

} // namespace emu

extern "C" cudaError_t cudaGetLastError(void)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void) { return last_error; }

static const struct {
    cudaError_t e;
    const char *name, *text;
} error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
};

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
    for (const auto &t : error_table)
        if (t.e == e)
            return t.text;
    return "unrecognized error code";
}

extern "C" const char *cudaGetErrorName(cudaError_t e)
{
    for (const auto &t : error_table)
        if (t.e == e)
            return t.name;
    return "cudaErrorUnknown";
}

/* ------------------------------------------------------------ device */

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

extern "C" cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return cudaErrorInvalidValue;
    /* CUDAEMU_DEVICES=0: a machine without a GPU, for the skip paths. */
    *count = env_int("CUDAEMU_DEVICES", 1) > 0 ? 1 : 0;
    return *count ? cudaSuccess : cudaErrorNoDevice;
}

extern "C" cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

/* CUDAEMU_SM=75 (say): a device of that compute capability (default 90,
 * an H100 / H200), for the paths that depend on it. */
extern "C" cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device)
{
    if (!value || device != 0)
        return cudaErrorInvalidValue;
    const int sm = env_int("CUDAEMU_SM", 90);
    if (attr == cudaDevAttrComputeCapabilityMajor)
        *value = sm / 10;
    else if (attr == cudaDevAttrComputeCapabilityMinor)
        *value = sm % 10;
    else
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return cudaErrorInvalidValue;
    *device = 0;
    return cudaSuccess;
}

/* ------------------------------------------------------------ memory */

static const size_t UNIT = 256;
static char *arena;
static size_t arena_size, high_water, open_len;
static std::map<size_t, size_t> free_runs; /* offset -> length */
static std::map<size_t, size_t> used_runs; /* offset -> length */
static int scope_depth;
static bool protect = true;

static bool arena_init(void)
{
    if (arena)
        return true;
    arena_size = (size_t)env_int("CUDAEMU_MEM_MB", 4096) << 20;
    protect = env_int("CUDAEMU_PROTECT", 1) != 0;
    void *p = mmap(NULL, arena_size, protect ? PROT_NONE : PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "cudaemu: cannot reserve %zu bytes of address space: %s\n", arena_size, strerror(errno));
        return false;
    }
    arena = (char *)p;
    free_runs[0] = arena_size;
    return true;
}

static size_t page_round(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

/* Opens (read-write) or closes (no access) the arena up to the high-water
 * mark. */
static void set_open(bool open)
{
    if (!protect)
        return;
    size_t len = open ? page_round(high_water) : open_len;
    if (len && mprotect(arena, len, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
        fprintf(stderr, "cudaemu: mprotect failed: %s\n", strerror(errno));
        abort(); /* the emulator itself is broken: nothing sensible to go on with */
    }
    open_len = open ? len : 0;
}

namespace emu {

device_scope::device_scope()
{
    mu.lock();
    if (scope_depth++ == 0)
        set_open(true);
}

device_scope::~device_scope()
{
    if (--scope_depth == 0)
        set_open(false);
    mu.unlock();
}

bool device_range(const void *p, size_t bytes)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    const char *c = (const char *)p;
    if (!arena || c < arena || c >= arena + arena_size)
        return false;
    size_t off = (size_t)(c - arena);
    auto it = used_runs.upper_bound(off);
    if (it == used_runs.begin())
        return false;
    --it;
    return off < it->first + it->second && bytes <= it->first + it->second - off;
}

} // namespace emu

/* Where p falls: 0 outside the arena (host memory), 1 inside a live
 * allocation with all nbytes, -1 inside the arena but not (freed memory,
 * or an overrun). */
static int classify(const void *p, size_t nbytes)
{
    const char *c = (const char *)p;
    if (!arena || c < arena || c >= arena + arena_size)
        return 0;
    return emu::device_range(p, nbytes) ? 1 : -1;
}

extern "C" cudaError_t cudaMalloc(void **ptr, size_t size)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!ptr)
        return cudaErrorInvalidValue;
    *ptr = NULL;
    if (size == 0)
        return cudaSuccess;
    if (!arena_init()) {
        set_error(cudaErrorMemoryAllocation);
        return cudaErrorMemoryAllocation;
    }
    size_t n = (size + UNIT - 1) / UNIT * UNIT;
    for (auto it = free_runs.begin(); it != free_runs.end(); ++it) {
        if (it->second < n)
            continue;
        size_t off = it->first, len = it->second;
        free_runs.erase(it);
        if (len > n)
            free_runs[off + n] = len - n;
        used_runs[off] = n;
        if (off + n > high_water)
            high_water = off + n;
        {
            emu::device_scope open;
            if (open_len < page_round(high_water))
                set_open(true); /* grown inside an open scope */
            memset(arena + off, 0xff, n);
        }
        *ptr = arena + off;
        return cudaSuccess;
    }
    set_error(cudaErrorMemoryAllocation);
    return cudaErrorMemoryAllocation;
}

extern "C" cudaError_t cudaFree(void *ptr)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!ptr)
        return cudaSuccess;
    const char *c = (const char *)ptr;
    auto it = arena && c >= arena && c < arena + arena_size ? used_runs.find((size_t)(c - arena)) : used_runs.end();
    if (it == used_runs.end()) {
        emu::misuse("cudaFree(%p): not the start of a live device allocation", ptr);
        return cudaErrorInvalidValue;
    }
    size_t off = it->first, len = it->second;
    used_runs.erase(it);
    /* Coalesce with the free neighbours. */
    auto next = free_runs.lower_bound(off);
    if (next != free_runs.end() && next->first == off + len) {
        len += next->second;
        free_runs.erase(next);
    }
    auto prev = free_runs.lower_bound(off);
    if (prev != free_runs.begin()) {
        --prev;
        if (prev->first + prev->second == off) {
            off = prev->first;
            len += prev->second;
            free_runs.erase(prev);
        }
    }
    free_runs[off] = len;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!free_bytes || !total_bytes || !arena_init())
        return cudaErrorInvalidValue;
    size_t used = 0;
    for (const auto &kv : used_runs)
        used += kv.second;
    *total_bytes = arena_size;
    *free_bytes = arena_size - used;
    return cudaSuccess;
}

/* ----------------------------------------------------------- streams */

static std::set<const void *> streams;

static bool stream_ok(const void *s, const char *what)
{
    if (!s || streams.count(s))
        return true;
    emu::misuse("%s: %p is not a stream created by cudaStreamCreate*", what, s);
    return false;
}

namespace emu {
bool stream_valid(const void *s, const char *what)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    return stream_ok(s, what);
}
} // namespace emu

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!stream || flags > cudaStreamNonBlocking)
        return cudaErrorInvalidValue;
    *stream = (cudaStream_t)malloc(1);
    if (!*stream)
        return cudaErrorMemoryAllocation;
    streams.insert(*stream);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!streams.erase(stream))
        return cudaErrorInvalidResourceHandle;
    free(stream);
    return cudaSuccess;
}

/* ------------------------------------------------------------ events */

/* An event: whether it was recorded, and the host's CLOCK_MONOTONIC then
 * (work before it on the stream has already run: it is synchronous). */
struct emu_event {
    bool recorded;
    bool timing;
    struct timespec at;
};
static std::set<const void *> events;

static emu_event *event_of(cudaEvent_t e, const char *what)
{
    if (e && events.count(e))
        return (emu_event *)e;
    emu::misuse("%s: %p is not an event created by cudaEventCreate*", what, (void *)e);
    return NULL;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!event || flags > (cudaEventBlockingSync | cudaEventDisableTiming))
        return cudaErrorInvalidValue;
    emu_event *e = (emu_event *)calloc(1, sizeof *e);
    if (!e)
        return cudaErrorMemoryAllocation;
    e->timing = !(flags & cudaEventDisableTiming);
    events.insert(e);
    *event = (cudaEvent_t)e;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!events.erase(event))
        return cudaErrorInvalidResourceHandle;
    free(event);
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    emu_event *e = event_of(event, "cudaEventRecord");
    if (!e || !stream_ok(stream, "cudaEventRecord"))
        return cudaErrorInvalidResourceHandle;
    e->recorded = true;
    clock_gettime(CLOCK_MONOTONIC, &e->at);
    return cudaSuccess;
}

/* Work before the event has run already: nothing to wait for. */
extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    emu_event *e = event_of(event, "cudaStreamWaitEvent");
    if (!e || !stream_ok(stream, "cudaStreamWaitEvent"))
        return cudaErrorInvalidResourceHandle;
    return flags ? cudaErrorInvalidValue : cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t event)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    emu_event *e = event_of(event, "cudaEventQuery");
    return e ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    emu_event *e = event_of(event, "cudaEventSynchronize");
    return e ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

/* As CUDA: both events made with timing and recorded, else
 * cudaErrorInvalidResourceHandle (never cudaErrorNotReady: recorded work is
 * done here). */
extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    emu_event *a = event_of(start, "cudaEventElapsedTime"), *b = event_of(end, "cudaEventElapsedTime");
    if (!ms)
        return cudaErrorInvalidValue;
    if (!a || !b || !a->timing || !b->timing || !a->recorded || !b->recorded)
        return cudaErrorInvalidResourceHandle;
    double ns = (double)(b->at.tv_sec - a->at.tv_sec) * 1e9 + (double)(b->at.tv_nsec - a->at.tv_nsec);
    *ms = (float)(ns / 1e6);
    return cudaSuccess;
}

/* Work already ran; what is left to report is an error it left. */
extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!stream_ok(stream, "cudaStreamSynchronize"))
        return cudaErrorInvalidResourceHandle;
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaDeviceSynchronize(void) { return cudaStreamSynchronize(NULL); }

/* ------------------------------------------------------------ copies */

static const char *kind_name(cudaMemcpyKind k)
{
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    return (unsigned)k <= 4 ? names[k] : "?";
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                                       cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!stream_ok(stream, "cudaMemcpyAsync"))
        return cudaErrorInvalidResourceHandle;
    if (count == 0)
        return cudaSuccess;
    if ((unsigned)kind > cudaMemcpyDefault) {
        emu::misuse("cudaMemcpyAsync: kind %d is not a cudaMemcpyKind", (int)kind);
        return cudaErrorInvalidMemcpyDirection;
    }
    const int d = classify(dst, count), s = classify(src, count);
    if (d < 0 || s < 0) {
        emu::misuse("cudaMemcpyAsync(%p <- %p, %zu bytes, %s): the %s runs outside any live device allocation", dst,
                    src, count, kind_name(kind), d < 0 ? "destination" : "source");
        return cudaErrorInvalidValue;
    }
    const bool want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyDefault && ((d == 1) != want_d || (s == 1) != want_s)) {
        emu::misuse("cudaMemcpyAsync(%p <- %p, %zu bytes): kind %s, but the destination is %s memory and the "
                    "source %s memory",
                    dst, src, count, kind_name(kind), d ? "device" : "host", s ? "device" : "host");
        return cudaErrorInvalidValue;
    }
    emu::device_scope open;
    memmove(dst, src, count);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, count, kind, NULL);
    return e == cudaSuccess ? cudaStreamSynchronize(NULL) : e;
}

extern "C" cudaError_t cudaMemset2DAsync(void *ptr, size_t pitch, int value, size_t width, size_t height,
                                         cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    if (!stream_ok(stream, "cudaMemset2DAsync"))
        return cudaErrorInvalidResourceHandle;
    if (width == 0 || height == 0)
        return cudaSuccess;
    if (width > pitch && height > 1) {
        emu::misuse("cudaMemset2DAsync: width %zu is more than the pitch %zu", width, pitch);
        return cudaErrorInvalidValue;
    }
    const size_t extent = pitch * (height - 1) + width;
    if (classify(ptr, extent) != 1) {
        emu::misuse("cudaMemset2DAsync(%p, pitch %zu, %zu x %zu): not inside one live device allocation", ptr,
                    pitch, width, height);
        return cudaErrorInvalidValue;
    }
    emu::device_scope open;
    for (size_t r = 0; r < height; r++)
        memset((char *)ptr + r * pitch, value, width);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    return cudaMemset2DAsync(ptr, count, value, count, 1, stream);
}

/* ---------------------------------------------------------- kernels */

namespace emu {

thread_local uint3 thread_idx, block_idx;
thread_local dim3 block_dim, grid_dim;

bool launch_ok(const char *kernel, dim3 grid, dim3 block, size_t shmem, const void *stream)
{
    std::lock_guard<std::recursive_mutex> g(mu);
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 ||
        threads == 0 || threads > 1024 || block.z > 64) {
        misuse("kernel %s: bad launch configuration: grid (%u, %u, %u), block (%u, %u, %u)", kernel, grid.x,
               grid.y, grid.z, block.x, block.y, block.z);
        return false;
    }
    if (shmem != 0) {
        misuse("kernel %s: dynamic shared memory (%zu bytes) is not emulated", kernel, shmem);
        return false;
    }
    return stream_ok(stream, kernel);
}

void check_pointer_arg(const char *kernel, int index, const void *p)
{
    if (p && !device_range(p, 0))
        misuse("kernel %s: argument %d (%p) is not device memory", kernel, index, p);
}

} // namespace emu

/* The fiber switch: saves the callee-saved registers, MXCSR and the x87
 * control word on the current stack, stores the stack pointer in *from,
 * loads `to` and restores what is saved there. A new fiber's stack is
 * made to look as if it had switched out right before fiber_start, which
 * moves its fiber pointer (r12) into the first argument and calls
 * fiber_main. */
extern "C" __attribute__((visibility("hidden"))) void cudaemu_switch(void **from, void *to);
extern "C" __attribute__((visibility("hidden"))) void cudaemu_fiber_start(void);
extern "C" __attribute__((visibility("hidden"))) void cudaemu_fiber_main(void *fiber);
asm(R"(
    .text
    .p2align 4
    .globl cudaemu_switch
    .hidden cudaemu_switch
    .type cudaemu_switch, @function
cudaemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr 8(%rsp)
    fldcw (%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cudaemu_switch, .-cudaemu_switch

    .p2align 4
    .globl cudaemu_fiber_start
    .hidden cudaemu_fiber_start
    .type cudaemu_fiber_start, @function
cudaemu_fiber_start:
    movq %r12, %rdi
    call cudaemu_fiber_main@PLT
    ud2
    .size cudaemu_fiber_start, .-cudaemu_fiber_start
)");

namespace {

enum fstate { RUNNABLE, WAIT_BLOCK, WAIT_WARP, DONE };

struct fiber {
    void *sp;
    char *stack; /* lowest usable address; a guard page lies below */
    fstate state;
    int pred, result; /* __syncthreads_or */
    uint3 idx;
};

const size_t STACK = 128 << 10;

struct block_run {
    std::vector<fiber> f;
    unsigned n = 0, live = 0, cur = 0;
    void *sched_sp = nullptr;
    emu::body_fn body = nullptr;
    void *ctx = nullptr;
    const char *kernel = nullptr;
    uint64_t slots[1024];
} run;

/* Stacks are made once and reused by every block after. */
bool ensure_fibers(unsigned n)
{
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    while (run.f.size() < n) {
        char *m = (char *)mmap(NULL, STACK + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                               -1, 0);
        if (m == MAP_FAILED)
            return false;
        mprotect(m, pg, PROT_NONE);
        fiber f{};
        f.stack = m + pg;
        run.f.push_back(f);
    }
    return true;
}

void fiber_init(fiber *f)
{
    /* The frame cudaemu_switch pops: control words, r15 r14 r13 r12 rbx
     * rbp, then the return address; after `ret` the stack pointer must be
     * 16-byte aligned for fiber_start's call. */
    uintptr_t top = ((uintptr_t)(f->stack + STACK)) & ~(uintptr_t)15;
    uint64_t *ret = (uint64_t *)(top - 8);
    *ret = (uint64_t)(uintptr_t)&cudaemu_fiber_start;
    uint64_t *regs = ret - 6; /* r15 r14 r13 r12 rbx rbp, lowest first */
    memset(regs, 0, 6 * sizeof *regs);
    regs[3] = (uint64_t)(uintptr_t)f; /* r12 */
    uint32_t *ctl = (uint32_t *)(regs - 2); /* 16 bytes: x87 control word at 0, MXCSR at 8 */
    ctl[0] = 0x037f;                        /* the x87 power-on default */
    ctl[1] = ctl[3] = 0;
    ctl[2] = 0x1f80; /* MXCSR: round to nearest, all exceptions masked */
    f->sp = ctl;
    f->state = RUNNABLE;
}

void enter(unsigned t)
{
    fiber *f = &run.f[t];
    run.cur = t;
    emu::thread_idx = f->idx;
    cudaemu_switch(&run.sched_sp, f->sp);
}

void wait(fstate why)
{
    fiber *f = &run.f[run.cur];
    f->state = why;
    cudaemu_switch(&f->sp, run.sched_sp);
}

} // namespace

extern "C" void cudaemu_fiber_main(void *self)
{
    fiber *f = (fiber *)self;
    run.body(run.ctx);
    f->state = DONE;
    run.live--;
    cudaemu_switch(&f->sp, run.sched_sp);
}

namespace emu {

void sync_block(void) { wait(WAIT_BLOCK); }

int sync_block_or(int pred)
{
    run.f[run.cur].pred = pred != 0;
    wait(WAIT_BLOCK);
    return run.f[run.cur].result;
}

void sync_warp(unsigned mask)
{
    (void)mask; /* the shuffles check their source lanes */
    wait(WAIT_WARP);
}

uint64_t *shuffle_slot(unsigned thread) { return &run.slots[thread < 1024 ? thread : 0]; }
bool thread_exists(unsigned thread) { return thread < run.n && run.f[thread].state != DONE; }
unsigned linear_tid(void) { return run.cur; }

/* Opens the barriers every live thread of a group waits at; false when
 * none could open (a deadlock). */
static bool release(void)
{
    unsigned waiting_block = 0;
    int any = 0;
    for (unsigned t = 0; t < run.n; t++)
        if (run.f[t].state == WAIT_BLOCK) {
            waiting_block++;
            any |= run.f[t].pred;
        }
    if (waiting_block == run.live) {
        /* The CUDA programming guide allows __syncthreads in conditional
         * code only where the condition is the same for the whole block. */
        if (run.live < run.n)
            misuse("kernel %s: block (%u, %u, %u): %u threads wait at __syncthreads after %u others exited",
                   run.kernel, block_idx.x, block_idx.y, block_idx.z, run.live, run.n - run.live);
        for (unsigned t = 0; t < run.n; t++) {
            run.f[t].result = any;
            run.f[t].pred = 0;
            if (run.f[t].state == WAIT_BLOCK)
                run.f[t].state = RUNNABLE;
        }
        return true;
    }
    bool opened = false;
    for (unsigned w = 0; w * 32 < run.n; w++) {
        unsigned lo = w * 32, hi = lo + 32 < run.n ? lo + 32 : run.n, live = 0, at = 0;
        for (unsigned t = lo; t < hi; t++) {
            live += run.f[t].state != DONE;
            at += run.f[t].state == WAIT_WARP;
        }
        if (at && at == live) {
            for (unsigned t = lo; t < hi; t++)
                if (run.f[t].state == WAIT_WARP)
                    run.f[t].state = RUNNABLE;
            opened = true;
        }
    }
    return opened;
}

void run_grid(const char *kernel, dim3 grid, dim3 block, body_fn body, void *ctx)
{
    device_scope open;
    const unsigned n = block.x * block.y * block.z;
    if (!ensure_fibers(n)) {
        misuse("kernel %s: cannot make %u fiber stacks", kernel, n);
        return;
    }
    const dim3 saved_block = block_dim, saved_grid = grid_dim;
    block_dim = block;
    grid_dim = grid;
    run.body = body;
    run.ctx = ctx;
    run.kernel = kernel;
    run.n = n;
    /* CUDAEMU_BLOCK_ORDER=reverse runs the last block first: a kernel whose
     * result depends on the order of its blocks shows. */
    static const bool reverse = [] {
        const char *o = getenv("CUDAEMU_BLOCK_ORDER");
        return o && strcmp(o, "reverse") == 0;
    }();
    const unsigned long long n_blocks = (unsigned long long)grid.x * grid.y * grid.z;
    for (unsigned long long q = 0; q < n_blocks; q++) {
        const unsigned long long b = reverse ? n_blocks - 1 - q : q;
        block_idx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                          (unsigned)(b / ((unsigned long long)grid.x * grid.y))};
        for (unsigned t = 0; t < n; t++) {
            fiber_init(&run.f[t]);
            run.f[t].idx = uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
            run.f[t].pred = run.f[t].result = 0;
        }
        run.live = n;
        while (run.live > 0) {
            for (unsigned t = 0; t < n; t++)
                if (run.f[t].state == RUNNABLE)
                    enter(t);
            if (run.live > 0 && !release()) {
                unsigned at_block = 0, at_warp = 0;
                for (unsigned t = 0; t < n; t++) {
                    at_block += run.f[t].state == WAIT_BLOCK;
                    at_warp += run.f[t].state == WAIT_WARP;
                }
                misuse("kernel %s: block (%u, %u, %u) deadlocks: %u threads wait at __syncthreads, %u at a warp "
                       "shuffle, %u have exited",
                       kernel, block_idx.x, block_idx.y, block_idx.z, at_block, at_warp, n - run.live);
                goto out; /* abandoned: its fibers are re-made by the next launch */
            }
        }
    }
out:
    block_dim = saved_block;
    grid_dim = saved_grid;
}

} // namespace emu
