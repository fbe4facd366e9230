/*
 * parallel.c - amp_parallel_for (see parallel.h): the library's own thread
 * pool.
 *
 * Design (docs/ARCHITECTURE.md, "Threads"):
 * - amp_threads() - 1 persistent workers, created on the first parallel
 *   call and re-created when amp_set_num_threads changes the count (at
 *   the start of a call, when no region runs). The caller is tid 0.
 * - One region at a time uses the pool: a caller takes `owner` with a
 *   compare-and-swap; a second concurrent caller (another user thread)
 *   does not wait, it runs its loop inline on itself (tid 0).
 * - A region is published by writing the job and then the 64-bit `state`
 *   word: region number, an OPEN bit and the count of workers that
 *   joined. A worker joins with a CAS that needs OPEN and a free slot;
 *   the join gives it its tid (1 + the count before it). Grains are then
 *   handed out by an atomic counter, so a worker that arrives late (its
 *   core busy with something else) takes fewer, or none: the caller
 *   closes the region (clears OPEN) as soon as it finds no grain left,
 *   and waits only for the workers that joined before that.
 * - Idle workers spin on `seq` (bumped per region) for SPIN_NS with a
 *   pause instruction, then sleep on a futex (Linux) or a condition
 *   variable; the caller's wait for the joined workers is spin-then-sleep
 *   the same way. A sleeper count saves the wake syscall when no one
 *   sleeps.
 * - A worker takes amp_set_flush_denormal's latest mode as it joins a
 *   region (flush.c): a region runs in the mode last set.
 * - No allocation per call. Workers exit at process exit (an atexit
 *   handler sets `quit`, wakes and joins them); a forked child starts
 *   with no workers.
 */
#include "base/parallel.h"

#include "base/base.h"
#include "base/env.h"
#include "base/flush.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* Spin this long (ns) before sleeping: long enough to catch the next
 * region of a step's back-to-back kernels, short enough that a worker
 * sharing its core gives it back quickly. */
/* AMPC_SPIN_US overrides it (microseconds), for measuring. */
#define SPIN_NS_DEFAULT 50000
static int64_t spin_ns(void)
{
    static _Atomic int64_t v = -1;
    int64_t x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        x = (int64_t)(env_number(ENV_SPIN_US, SPIN_NS_DEFAULT / 1000) * 1000);
        atomic_store(&v, x);
    }
    return x;
}
#define SPIN_NS spin_ns()

static _Thread_local int in_region; /* depth of amp_parallel_for on this thread */
static _Thread_local int region_tid;

/* The flush-subnormals mode (flush.h) the workers run in: a generation
 * << 1 | on, bumped by each amp_set_flush_denormal; 0 until the first, so
 * that a worker keeps the registers it started with (its creator's) until
 * the library is asked. Each worker compares it with the one it last took
 * when it joins a region: one relaxed load per join. */
static _Atomic uint32_t flush_mode;
static _Thread_local uint32_t flush_seen;

void parallel_set_flush(bool on)
{
    uint32_t m = atomic_load(&flush_mode);
    while (!atomic_compare_exchange_weak(&flush_mode, &m, ((m >> 1) + 1) << 1 | (on ? 1u : 0u)))
        ;
}

static void take_flush_mode(void)
{
    uint32_t m = atomic_load_explicit(&flush_mode, memory_order_relaxed);
    if (m != flush_seen) {
        flush_thread_set(m & 1u);
        flush_seen = m;
    }
}

/* ---- waiting: spin, then sleep ---------------------------------------- */

static inline void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#if defined(__linux__)
static void sleep_while(_Atomic uint32_t *w, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void wake_all(_Atomic uint32_t *w) { syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0); }
#else
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cv = PTHREAD_COND_INITIALIZER;
static void sleep_while(_Atomic uint32_t *w, uint32_t val)
{
    pthread_mutex_lock(&sleep_mu);
    while (atomic_load(w) == val)
        pthread_cond_wait(&sleep_cv, &sleep_mu);
    pthread_mutex_unlock(&sleep_mu);
}
static void wake_all(_Atomic uint32_t *w)
{
    (void)w;
    pthread_mutex_lock(&sleep_mu);
    pthread_cond_broadcast(&sleep_cv);
    pthread_mutex_unlock(&sleep_mu);
}
#endif

/* Returns once *w != val: spins SPIN_NS, then sleeps, counting itself in
 * *sleepers while it may sleep (so a waker knows to make the syscall). */
static void wait_change(_Atomic uint32_t *w, uint32_t val, _Atomic int *sleepers)
{
    int64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != val)
            return;
        cpu_pause();
        if ((i & 63) == 0) {
            int64_t t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > SPIN_NS)
                break;
        }
    }
    atomic_fetch_add(sleepers, 1);
    while (atomic_load(w) == val)
        sleep_while(w, val);
    atomic_fetch_sub(sleepers, 1);
}

/* ---- the pool ---------------------------------------------------------- */

#define OPEN ((uint64_t)1 << 31)
#define JOINED_MASK (OPEN - 1)

static struct {
    /* the job of the current region: written by the owner before it
     * publishes `state` */
    amp_range_fn fn;
    void *ctx;
    int64_t n, grain, grains;
    _Atomic int width; /* read by joining workers before their CAS */
    _Atomic int64_t next; /* next grain to hand out */

    _Atomic uint64_t state;  /* region << 32 | OPEN | workers joined */
    _Atomic uint32_t seq;    /* bumped per region: workers wait on it */
    _Atomic uint32_t done;   /* workers of this region that finished */
    _Atomic int idle_sleepers, owner_sleeps;
    _Atomic int quit;

    _Atomic int owner; /* 1 while a caller holds the pool */
    int nworkers;      /* running workers (owner only) */
    int asked;         /* the count last asked of resize */
    pthread_t *threads;
    int cap;
} P;

static _Atomic int exit_registered;

static void run_grains(int tid)
{
    const int64_t n = P.n, grain = P.grain, grains = P.grains;
    for (;;) {
        int64_t g = atomic_fetch_add_explicit(&P.next, 1, memory_order_relaxed);
        if (g >= grains)
            return;
        int64_t lo = g * grain, hi = n - lo < grain ? n : lo + grain;
        P.fn(P.ctx, lo, hi, tid);
    }
}

static void *worker_main(void *arg)
{
    (void)arg;
    in_region = 0;
    uint32_t seen = atomic_load(&P.seq);
    for (;;) {
        if (atomic_load(&P.quit))
            return NULL;
        uint64_t s = atomic_load_explicit(&P.state, memory_order_acquire);
        /* Join if the region is open and has a free slot. */
        while ((s & OPEN) && (int)(s & JOINED_MASK) < atomic_load_explicit(&P.width, memory_order_relaxed) - 1) {
            if (atomic_compare_exchange_weak_explicit(&P.state, &s, s + 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                int tid = (int)(s & JOINED_MASK) + 1;
                take_flush_mode();
                in_region = 1;
                region_tid = tid;
                run_grains(tid);
                in_region = 0;
                atomic_fetch_add(&P.done, 1);
                if (atomic_load(&P.owner_sleeps))
                    wake_all(&P.done);
                break;
            }
        }
        wait_change(&P.seq, seen, &P.idle_sleepers);
        seen = atomic_load(&P.seq);
    }
}

/* Stops and joins every worker (the owner, or at exit). */
static void stop_workers(void)
{
    if (!P.nworkers)
        return;
    atomic_store(&P.quit, 1);
    atomic_fetch_add(&P.seq, 1);
    wake_all(&P.seq);
    for (int i = 0; i < P.nworkers; i++)
        pthread_join(P.threads[i], NULL);
    P.nworkers = 0;
    atomic_store(&P.quit, 0);
}

static void at_exit(void)
{
    /* If a user thread still runs a region at exit, leave its workers. */
    int free_ = 0;
    if (atomic_compare_exchange_strong(&P.owner, &free_, 1)) {
        stop_workers();
        free(P.threads);
        P.threads = NULL;
        P.cap = 0;
        atomic_store(&P.owner, 0);
    }
}

static void after_fork_child(void)
{
    /* The child has no workers; the parent's thread handles are void. */
    P.nworkers = 0;
    P.asked = 0;
    atomic_store(&P.owner, 0);
    atomic_store(&P.state, 0);
}

/* Brings the pool to `want` workers (the owner only). When memory or a
 * thread cannot be had, it has fewer; the region uses those that exist. */
static void resize(int want)
{
    /* (a count that could not be had fully is not retried every call) */
    if (want == P.nworkers || want == P.asked)
        return;
    P.asked = want;
    stop_workers();
    if (want > P.cap) {
        pthread_t *t = realloc(P.threads, (size_t)want * sizeof *t);
        if (!t)
            return;
        P.threads = t;
        P.cap = want;
    }
    if (!atomic_exchange(&exit_registered, 1)) {
        atexit(at_exit);
        pthread_atfork(NULL, NULL, after_fork_child);
    }
    /* Workers take no signals: they stay with the user's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (P.nworkers < want && pthread_create(&P.threads[P.nworkers], NULL, worker_main, NULL) == 0)
        P.nworkers++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

bool amp_in_parallel(void) { return in_region > 0; }

static bool nested(void)
{
#ifdef _OPENMP
    /* Inside a kernel's OpenMP team (one not yet converted) too. */
    if (omp_in_parallel())
        return true;
#endif
    return in_region > 0;
}

int amp_parallel_width(int64_t n, int64_t grain)
{
    if (grain < 1)
        grain = 1;
    if (n <= 0 || nested())
        return 1;
    int64_t grains = (n + grain - 1) / grain;
    int t = amp_threads();
    if (grains <= 1 || t <= 1)
        return 1;
    return grains < t ? (int)grains : t;
}

static void run_inline(int64_t n, amp_range_fn fn, void *ctx)
{
    int saved = region_tid;
    in_region++;
    region_tid = 0;
    fn(ctx, 0, n, 0);
    region_tid = saved;
    in_region--;
}

void amp_parallel_for(int64_t n, int64_t grain, amp_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int w = amp_parallel_width(n, grain);
    int free_ = 0;
    if (w <= 1 || !atomic_compare_exchange_strong(&P.owner, &free_, 1)) {
        run_inline(n, fn, ctx);
        return;
    }
    resize(amp_threads() - 1);
    if (w > P.nworkers + 1)
        w = P.nworkers + 1;
    if (w <= 1) {
        atomic_store(&P.owner, 0);
        run_inline(n, fn, ctx);
        return;
    }

    /* Publish the job, then open the region and wake the workers. */
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.grain = grain;
    P.grains = (n + grain - 1) / grain;
    atomic_store_explicit(&P.width, w, memory_order_relaxed);
    atomic_store_explicit(&P.next, 0, memory_order_relaxed);
    atomic_store_explicit(&P.done, 0, memory_order_relaxed);
    uint64_t region = (atomic_load_explicit(&P.state, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&P.state, region << 32 | OPEN, memory_order_release);
    atomic_fetch_add(&P.seq, 1);
    if (atomic_load(&P.idle_sleepers))
        wake_all(&P.seq);

    in_region++;
    region_tid = 0;
    run_grains(0);
    region_tid = 0;
    in_region--;

    /* Close: no worker joins after this; wait for those that did. */
    uint64_t s = atomic_fetch_and(&P.state, ~OPEN);
    uint32_t joined = (uint32_t)(s & JOINED_MASK);
    if (atomic_load_explicit(&P.done, memory_order_acquire) != joined) {
        int64_t t0 = 0;
        for (unsigned i = 1; atomic_load_explicit(&P.done, memory_order_acquire) != joined; i++) {
            cpu_pause();
            if ((i & 63) == 0) {
                int64_t t = now_ns();
                if (!t0)
                    t0 = t;
                else if (t - t0 > SPIN_NS) {
                    atomic_store(&P.owner_sleeps, 1);
                    uint32_t d;
                    while ((d = atomic_load(&P.done)) != joined)
                        sleep_while(&P.done, d);
                    atomic_store(&P.owner_sleeps, 0);
                    break;
                }
            }
        }
    }
    atomic_store_explicit(&P.owner, 0, memory_order_release);
}

/* The calling thread's tid in the amp_parallel_for it is in (0 outside). */
int amp_parallel_tid(void) { return in_region ? region_tid : 0; }
