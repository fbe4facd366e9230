/*
 * profile.cu - the profiler's device timer on CUDA: marks are CUDA events
 * recorded on the backend's stream (cudaEventRecord queues them; nothing
 * waits), taken in turn from a pool of events made once and reused by
 * every later run. amp_profiler_start resets the pool and records a base
 * event, waited for there (outside any step), whose completion is paired
 * with the host clock; amp_profiler_stop waits once for the last mark and
 * turns every mark into host-clock ns as base + cudaEventElapsedTime(base,
 * mark). A mark past the pool's cap is -1 (the event is then host timed).
 *
 * The device must be in use when the profiler starts for the base to be
 * exact; a device first used during a run takes its base at its first
 * mark, with the host clock at that record (the stream is idle then).
 */
#include "backend/cuda/cuda_common.cuh"

#include <mutex>
#include <stdlib.h>
#include <vector>

static std::mutex mu;
/* pool[0] is the base. A plain array, never freed: the events live as long
 * as the process (a std::vector's destructor at exit would drop the only
 * reference to them before the runtime is gone). */
static cudaEvent_t *pool;
static size_t pool_size, pool_cap;
static size_t used;                   /* marks recorded this run, base included */
static bool have_base, resolved;
static int64_t base_ns;               /* host clock of the base event */
static std::vector<int64_t> times;    /* after the run: each mark's host-clock ns */

enum { PREALLOC = 4096, MAX_MARKS = 1 << 20 };

/* The recorder's host clock (record/profile.c). */
extern "C" int64_t prof_now_ns(void);

/* One more event in the pool; false when none can be made. */
static bool grow_pool(void)
{
    if (pool_size == pool_cap) {
        size_t cap = pool_cap ? 2 * pool_cap : (size_t)PREALLOC;
        cudaEvent_t *p = (cudaEvent_t *)realloc(pool, cap * sizeof *p);
        if (!p)
            return false;
        pool = p;
        pool_cap = cap;
    }
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    pool[pool_size++] = e;
    return true;
}

/* The next event of the pool, made when the pool is short; NULL past the cap. */
static cudaEvent_t next_event(void)
{
    if (used >= (size_t)MAX_MARKS)
        return NULL;
    if (used == pool_size && !grow_pool())
        return NULL;
    return pool[used++];
}

static bool record_base(bool wait)
{
    used = 0;
    cudaEvent_t b = next_event();
    if (!b || cudaEventRecord(b, cuda_stream()) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    if (wait && cudaEventSynchronize(b) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    base_ns = prof_now_ns();
    return have_base = true;
}

extern "C" void cuda_prof_reset(void)
{
    std::lock_guard<std::mutex> g(mu);
    have_base = resolved = false;
    used = 0;
    times.clear();
    /* The pool is made here, outside the steps, the first time. */
    while (pool_size < PREALLOC && grow_pool())
        ;
    record_base(true);
}

extern "C" int32_t cuda_prof_mark(void)
{
    std::lock_guard<std::mutex> g(mu);
    if (!have_base && !record_base(false))
        return -1;
    resolved = false;
    cudaEvent_t e = next_event();
    if (!e)
        return -1;
    if (cudaEventRecord(e, cuda_stream()) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return (int32_t)(used - 1);
}

/* Once per run (at amp_profiler_stop): wait for the last mark, then every
 * mark's time as the previous mark's plus the (float ms) time between the
 * two: each difference keeps the float's precision for a short span,
 * where one elapsed time from the base would lose a microsecond every
 * few seconds of the run. */
static void resolve_all(void)
{
    times.assign(used, -1);
    if (!have_base || used == 0)
        return;
    if (cudaEventSynchronize(pool[used - 1]) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    times[0] = base_ns;
    for (size_t i = 1; i < used; i++) {
        float ms = 0;
        if (times[i - 1] < 0 || cudaEventElapsedTime(&ms, pool[i - 1], pool[i]) != cudaSuccess) {
            cudaGetLastError();
            break; /* the rest stay -1: host timed */
        }
        times[i] = times[i - 1] + (int64_t)((double)ms * 1e6);
    }
    resolved = true;
}

extern "C" void cuda_prof_resolve(const int32_t *marks, int n, int64_t *ns_out)
{
    std::lock_guard<std::mutex> g(mu);
    if (!resolved)
        resolve_all();
    for (int i = 0; i < n; i++)
        ns_out[i] = marks[i] >= 0 && (size_t)marks[i] < times.size() ? times[marks[i]] : -1;
}
