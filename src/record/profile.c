/*
 * profile.c - the profiler's recorder (per-thread event buffers), its
 * runs and the phases. The public calls around them are in
 * src/prof/profiler.c, the outputs that read the events (the trace, the
 * table, the verdict) in src/prof/profile_out.c.
 *
 * Each thread that records gets a buffer of fixed-size chunks, so an open
 * event's pointer stays valid while later events are added; the chunks
 * are malloc'd (not amp_alloc'd: the profiler's own memory is not the
 * model's) as the thread first needs them, and made one array per thread
 * when the profiler stops. With the profiler off nothing is allocated and
 * each hook is one relaxed atomic load.
 */
#include "record/mem_ledger.h"
#include "record/profile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

atomic_bool prof_active;

#define CHUNK 4096
#define MAX_THREADS 256

typedef struct chunk {
    prof_event ev[CHUNK];
    struct chunk *next;
} chunk;

typedef struct {
    int tid;
    uint64_t run;          /* the recording run this buffer belongs to */
    chunk *head, *tail;
    size_t n, dropped;
    int open;              /* events begun and not ended */
    prof_event *flat;      /* after stop: the events as one array */
} thread_buf;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static thread_buf *threads[MAX_THREADS];
static prof_thread_events views[MAX_THREADS];
static int n_threads;
static uint64_t run_id;     /* bumped by each start */
static amp_profiler_opts opts;
static int64_t step_count;
static int64_t run_t0, run_t1; /* host ns at the last start and stop */
static _Thread_local thread_buf *mine;

static const prof_device_timer *timers[AMP_DEVICE_COUNT];
static atomic_size_t n_allocations; /* the recorder's mallocs (prof_allocations) */

size_t prof_allocations(void) { return atomic_load_explicit(&n_allocations, memory_order_relaxed); }

int64_t prof_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void free_buf(thread_buf *b)
{
    for (chunk *c = b->head; c;) {
        chunk *next = c->next;
        free(c);
        c = next;
    }
    free(b->flat);
    b->head = b->tail = NULL;
    b->flat = NULL;
    b->n = b->dropped = 0;
    b->open = 0;
}

/* This thread's buffer for the current run, registered at first use. */
static thread_buf *my_buf(void)
{
    uint64_t run = __atomic_load_n(&run_id, __ATOMIC_ACQUIRE);
    if (mine && mine->run == run)
        return mine;
    pthread_mutex_lock(&lock);
    if (!mine) {
        if (n_threads < MAX_THREADS && (mine = calloc(1, sizeof *mine)) != NULL) {
            atomic_fetch_add_explicit(&n_allocations, 1, memory_order_relaxed);
            mine->tid = n_threads;
            threads[n_threads++] = mine;
        }
    } else {
        free_buf(mine); /* left from an earlier run */
    }
    if (mine)
        mine->run = run;
    pthread_mutex_unlock(&lock);
    return mine;
}

/* A new slot in b; past max_events only step marks are kept (the outputs
 * count the steps by them), the rest are counted as dropped. */
static prof_event *new_event(thread_buf *b, prof_kind kind)
{
    size_t cap = opts.max_events ? opts.max_events : (size_t)1 << 20;
    if (b->n >= cap && kind != PROF_STEP) {
        b->dropped++;
        return NULL;
    }
    size_t k = b->n % CHUNK;
    if (k == 0) {
        chunk *c = malloc(sizeof *c);
        if (!c) {
            b->dropped++;
            return NULL;
        }
        atomic_fetch_add_explicit(&n_allocations, 1, memory_order_relaxed);
        c->next = NULL;
        if (b->tail)
            b->tail->next = c;
        else
            b->head = c;
        b->tail = c;
    }
    b->n++;
    prof_event *e = &b->tail->ev[k];
    memset(e, 0, sizeof *e);
    for (int i = 0; i < PROF_MAX_TENSORS; i++)
        e->in[i].dtype = -1;
    e->out.dtype = -1;
    e->dev_mark0 = e->dev_mark1 = -1;
    return e;
}

/* A new event of this thread stamped now; an open one (begun, to be ended)
 * or an instant. */
static prof_event *stamp(prof_kind kind, const char *name, bool open)
{
    thread_buf *b = my_buf();
    prof_event *e = b ? new_event(b, kind) : NULL;
    if (!e)
        return NULL;
    e->name = name;
    e->kind = (uint8_t)kind;
    e->phase = (uint8_t)amp_phase_current();
    e->depth = open ? b->open++ : b->open;
    e->step = __atomic_load_n(&step_count, __ATOMIC_RELAXED);
    e->t0 = e->t1 = e->host_t0 = e->host_t1 = prof_now_ns();
    return e;
}

prof_event *prof_begin_on(prof_kind kind, const char *name) { return stamp(kind, name, true); }

void prof_end(prof_event *e)
{
    if (!e)
        return;
    e->t1 = e->host_t1 = prof_now_ns();
    if (mine && mine->open > 0)
        mine->open--;
}

prof_event *prof_instant(prof_kind kind, const char *name)
{
    return prof_on() ? stamp(kind, name, false) : NULL;
}

void prof_set_tensor(prof_tensor *pt, int dtype, const int64_t *dims, int ndim)
{
    pt->dtype = (int8_t)dtype;
    if (!opts.record_shapes) {
        pt->ndim = 0;
        return;
    }
    int k = ndim < PROF_MAX_DIMS ? ndim : PROF_MAX_DIMS;
    pt->ndim = (int8_t)ndim;
    for (int i = 0; i < k; i++)
        pt->dims[i] = dims[i];
    for (int i = k; i < ndim; i++)
        pt->dims[k - 1] *= dims[i];
}

void prof_register_device_timer(amp_device dev, const prof_device_timer *t)
{
    if (dev >= 0 && dev < AMP_DEVICE_COUNT)
        timers[dev] = t;
}

int32_t prof_device_mark(amp_device dev)
{
    if (dev < 0 || dev >= AMP_DEVICE_COUNT || !timers[dev] || !timers[dev]->mark)
        return -1;
    return timers[dev]->mark();
}

/* A memory counter sample per device in use. */
static void memory_sample(void)
{
    if (!opts.memory)
        return;
    prof_event *e = prof_instant(PROF_COUNTER, "memory");
    if (e) {
        e->device = AMP_CPU;
        mem_ledger_current(&mem_host_ledger, e->mem);
    }
    for (int d = 1; d < AMP_DEVICE_COUNT; d++)
        if (timers[d] && timers[d]->memory && (e = prof_instant(PROF_COUNTER, "memory")) != NULL) {
            e->device = (uint8_t)d;
            timers[d]->memory(e->mem);
        }
}

/* Turns every device-timed event's marks into host-clock times. */
static void resolve_device_times(void)
{
    for (int d = 1; d < AMP_DEVICE_COUNT; d++) {
        if (!timers[d] || !timers[d]->resolve)
            continue;
        for (int t = 0; t < n_threads; t++) {
            thread_buf *b = threads[t];
            if (b->run != run_id)
                continue;
            for (chunk *c = b->head; c; c = c->next) {
                size_t n = c == b->tail && b->n % CHUNK ? b->n % CHUNK : CHUNK;
                for (size_t i = 0; i < n; i++) {
                    prof_event *e = &c->ev[i];
                    if (e->device != d || e->dev_mark0 < 0 || e->dev_mark1 < 0)
                        continue;
                    int32_t m[2] = {e->dev_mark0, e->dev_mark1};
                    int64_t ns[2];
                    timers[d]->resolve(m, 2, ns);
                    if (ns[0] < 0 || ns[1] < ns[0])
                        continue; /* not resolved: the host's times stay */
                    e->t0 = ns[0];
                    e->t1 = ns[1];
                }
            }
        }
    }
}

bool prof_start(const amp_profiler_opts *o)
{
    if (prof_on())
        return false;
    pthread_mutex_lock(&lock);
    for (int t = 0; t < n_threads; t++)
        free_buf(threads[t]);
    opts = *o;
    step_count = 0;
    __atomic_add_fetch(&run_id, 1, __ATOMIC_RELEASE);
    for (int d = 0; d < AMP_DEVICE_COUNT; d++)
        if (timers[d] && timers[d]->reset)
            timers[d]->reset();
    run_t0 = run_t1 = prof_now_ns();
    pthread_mutex_unlock(&lock);
    atomic_store(&prof_active, true);
    memory_sample();
    return true;
}

void prof_step(void)
{
    if (!prof_on())
        return;
    memory_sample();
    prof_event *e = prof_instant(PROF_STEP, "step");
    (void)e;
    __atomic_add_fetch(&step_count, 1, __ATOMIC_RELAXED);
}

bool prof_stop(void)
{
    if (!prof_on())
        return false;
    memory_sample();
    atomic_store(&prof_active, false);
    run_t1 = prof_now_ns();
    pthread_mutex_lock(&lock);
    resolve_device_times();
    for (int t = 0; t < n_threads; t++) {
        thread_buf *b = threads[t];
        if (b->run != run_id || b->n == 0)
            continue;
        b->flat = malloc(b->n * sizeof *b->flat);
        if (!b->flat)
            continue;
        atomic_fetch_add_explicit(&n_allocations, 1, memory_order_relaxed);
        size_t k = 0;
        for (chunk *c = b->head; c && k < b->n; c = c->next) {
            size_t n = b->n - k < CHUNK ? b->n - k : CHUNK;
            memcpy(b->flat + k, c->ev, n * sizeof *c->ev);
            k += n;
        }
        for (chunk *c = b->head; c;) {
            chunk *next = c->next;
            free(c);
            c = next;
        }
        b->head = b->tail = NULL;
    }
    pthread_mutex_unlock(&lock);
    return true;
}

void prof_reset(void)
{
    if (prof_on())
        prof_stop();
    pthread_mutex_lock(&lock);
    for (int t = 0; t < n_threads; t++)
        free_buf(threads[t]);
    pthread_mutex_unlock(&lock);
}

size_t prof_num_events(size_t *dropped)
{
    size_t n = 0, d = 0;
    pthread_mutex_lock(&lock);
    for (int t = 0; t < n_threads; t++)
        if (threads[t]->run == run_id) {
            n += threads[t]->n;
            d += threads[t]->dropped;
        }
    pthread_mutex_unlock(&lock);
    if (dropped)
        *dropped = d;
    return n;
}

int prof_threads(const prof_thread_events **out)
{
    int k = 0;
    pthread_mutex_lock(&lock);
    for (int t = 0; t < n_threads; t++) {
        thread_buf *b = threads[t];
        if (b->run != run_id || !b->flat)
            continue;
        views[k++] = (prof_thread_events){b->tid, b->flat, b->n};
    }
    pthread_mutex_unlock(&lock);
    *out = views;
    return k;
}

void prof_run_window(int64_t *t0, int64_t *t1)
{
    *t0 = run_t0;
    *t1 = run_t1;
}

/* ------------------------------------------------------------------ phases */

#define MAX_PHASES 16

static _Thread_local uint8_t phase_stack[MAX_PHASES];
static _Thread_local prof_event *phase_ev[MAX_PHASES];
static _Thread_local uint64_t phase_run[MAX_PHASES]; /* the run phase_ev belongs to */
static _Thread_local int phase_depth;

static const char *const phase_names[AMP_PHASE_COUNT] = {
    [AMP_PHASE_OTHER] = "other",         [AMP_PHASE_DATA] = "data",
    [AMP_PHASE_FORWARD] = "forward",     [AMP_PHASE_BACKWARD] = "backward",
    [AMP_PHASE_UNSCALE] = "unscale",     [AMP_PHASE_OPTIMIZER] = "optimizer",
    [AMP_PHASE_SCALER_UPDATE] = "scaler update", [AMP_PHASE_CHECKPOINT] = "checkpoint save",
};

const char *amp_phase_name(amp_phase p)
{
    return p >= 0 && p < AMP_PHASE_COUNT ? phase_names[p] : NULL;
}

amp_phase amp_phase_current(void)
{
    return phase_depth > 0 ? (amp_phase)phase_stack[phase_depth - 1] : AMP_PHASE_OTHER;
}

void prof_phase_begin(amp_phase p)
{
    if (p < 0 || p >= AMP_PHASE_COUNT)
        p = AMP_PHASE_OTHER;
    if (phase_depth >= MAX_PHASES) {
        phase_depth++; /* counted, so the matching end balances */
        return;
    }
    phase_stack[phase_depth] = (uint8_t)p;
    phase_ev[phase_depth] = NULL;
    phase_depth++;
    mem_phase_note(p);
    if (prof_on()) {
        memory_sample();
        phase_ev[phase_depth - 1] = prof_begin_on(PROF_PHASE, phase_names[p]);
        phase_run[phase_depth - 1] = __atomic_load_n(&run_id, __ATOMIC_ACQUIRE);
    }
}

prof_phase_end_result prof_phase_end(amp_phase p, amp_phase *open)
{
    if (phase_depth == 0)
        return PROF_PHASE_NONE_OPEN;
    if (phase_depth > MAX_PHASES) {
        phase_depth--;
        return PROF_PHASE_ENDED;
    }
    if (phase_stack[phase_depth - 1] != (uint8_t)p) {
        *open = (amp_phase)phase_stack[phase_depth - 1];
        return PROF_PHASE_OTHER_OPEN;
    }
    phase_depth--;
    prof_event *e = phase_ev[phase_depth];
    /* Not an event of a run stopped since: its buffer is gone. */
    if (e && prof_on() && phase_run[phase_depth] == __atomic_load_n(&run_id, __ATOMIC_ACQUIRE))
        prof_end(e);
    if (prof_on())
        memory_sample();
    mem_phase_note(amp_phase_current());
    return PROF_PHASE_ENDED;
}
