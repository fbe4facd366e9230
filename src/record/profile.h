/*
 * profile.h - the profiler's recorder and the phases: what the hooks of
 * every layer record into (the public calls, with their checks and error
 * messages, are src/prof/profiler.c's: amp_profiler_*, amp_phase_begin /
 * amp_phase_end in ampc.h). Nothing here sets an error: this layer sits
 * below base, whose allocator records into the memory ledger beside it.
 *
 * Hooks in the layers above record into the calling thread's buffer:
 *
 *     prof_event *e = prof_begin(PROF_OP_FWD, name);   // NULL when off
 *     ... the work ...
 *     if (e) { fill e's dtypes, shapes, flops, bytes; prof_end(e); }
 *
 * prof_begin is one relaxed load when the profiler is off. Events nest:
 * an event begun inside another ends before it (phases contain ops, an op
 * contains the casts and kernels it runs), which is what the trace shows
 * and what "self time" subtracts.
 *
 * Device work is timed by the device's backend: the hook that issues it
 * asks for a mark (prof_device_mark) before and after, and the backend
 * resolves the marks to times when the profiler stops or at a step's end,
 * never inside the step.
 *
 * What each kind records (the hooks: ops/op_table.c, autograd/graph.c,
 * ops/autocast.c, the backends' GEMMs, the library's phases):
 *
 *   PROF_OP_FWD  op_run, around the forward: name = the op's (op_list.h);
 *                in[0..n_in) = the inputs as the forward saw them (after
 *                autocast: the dtypes it chose), out = the result (dtype -1
 *                when the forward failed); flops and bytes from the row's
 *                cost function (bytes = every input read + the result
 *                written); args + params = the op's parameters.
 *   PROF_OP_BWD  the backward engine, around node->backward: name = the
 *                op's; out = the gradient arriving (gout); in[i] = the
 *                gradient made for input i (dtype -1 where none was made:
 *                the input needs none); flops and bytes from the row's
 *                cost function (bytes = gout + every input + the
 *                gradients the inputs need); args + params as forward.
 *   PROF_CAST    a cast autocast inserted: name "cast f32->bf16" (from->to),
 *                in[0] = the source, out = the cast, bytes = read + written.
 *                It WRAPS the `to` op's own PROF_OP_FWD event (the next
 *                event of the thread, one level deeper, the same dtypes):
 *                the cast's time is its total time; count that `to` event
 *                once (as its self time, or leave it out of per-op totals
 *                when the casts are shown apart). A `to` op event not
 *                inside a PROF_CAST is the user's own amp_to. The casts'
 *                backward is a PROF_OP_BWD named "to".
 *   PROF_CAST_HIT  instant: a cast served from autocast's cache (the same
 *                names and tensors as PROF_CAST; bytes 0).
 *   PROF_KERNEL  a GEMM inside an op (its depth is the op's + 1): on the
 *                CPU each product of the backend's gemm primitive (matmul,
 *                linear and their backward; conv2d's and attention's inner
 *                products are not broken out), named by the path that ran
 *                ("oneDNN matmul", or ampc's
 *                micro-kernel: "amx-bf16 32x32", "avx512bf16 12x32",
 *                "amx-bf16 split 32x32" for f16, "avx512 12x32", ...); on
 *                CUDA every product (conv2d's and attention's too),
 *                "cublasLt gemm bf16" (f32, f16, tf32, "+epilogue" when
 *                fused) or "ampc gemm kernel (no cuBLASLt algorithm)";
 *                in[0], in[1] = A [M, K] and B [K, N] ([batch, ..] for a
 *                batch), out = C; flops 2*batch*M*N*K.
 *   PROF_PHASE   amp_phase_begin/end: name = amp_phase_name.
 *
 * Times: host-timed events have t0/t1 = host_t0/host_t1. A device-timed
 * event (device != AMP_CPU with marks) has t0/t1 = the device's times
 * mapped to the host clock after the stop; its host_t0/host_t1 say when
 * the host issued the work, and those nest inside the host-timed parents
 * (a GPU runs behind the host: its t1 may fall after its phase's end).
 */
#ifndef AMPC_PROFILE_H
#define AMPC_PROFILE_H

#include "ampc.h"

#include <stdatomic.h>

typedef enum {
    PROF_PHASE,     /* a phase of the step (amp_phase) */
    PROF_STEP,      /* one training step, between amp_profiler_step calls */
    PROF_OP_FWD,    /* an op's forward (op_run) */
    PROF_OP_BWD,    /* an op's backward (the graph's node->backward) */
    PROF_CAST,      /* a cast autocast inserted */
    PROF_CAST_HIT,  /* a cast served from the cast cache (instant) */
    PROF_KERNEL,    /* a named kernel / library call inside an op */
    PROF_COUNTER,   /* a memory counter sample (instant) */
    PROF_KIND_COUNT
} prof_kind;

#define PROF_MAX_TENSORS 4 /* inputs recorded per op (the output is apart) */
#define PROF_MAX_DIMS 4    /* dims recorded per shape; more are folded into the last */

typedef struct {
    int8_t dtype; /* amp_dtype, -1: none */
    int8_t ndim;
    int64_t dims[PROF_MAX_DIMS];
} prof_tensor;

/* One named parameter of an op, for the trace's "args" (profile_out.c
 * writes the name and the value as JSON). */
typedef enum { PROF_ARG_INT, PROF_ARG_U64, PROF_ARG_FLOAT, PROF_ARG_BOOL, PROF_ARG_STR, PROF_ARG_INTS } prof_arg_kind;
typedef struct {
    const char *name; /* static */
    prof_arg_kind kind;
    int64_t i;          /* INT, BOOL (0 or 1) */
    uint64_t u;         /* U64 */
    double f;           /* FLOAT */
    const char *s;      /* STR: static */
    const int64_t *ints; /* INTS: ints[0..n_ints), inside the event's params */
    int n_ints;
} prof_arg;

/* An op's parameters as an event keeps them: a copy of the op's params
 * struct (the op layer's, ops/op_params.h), read back by the op layer's
 * function. */
#define PROF_PARAMS_BYTES 96
typedef union {
    int64_t align;
    double falign;
    unsigned char bytes[PROF_PARAMS_BYTES];
} prof_params;
#define PROF_MAX_ARGS 8 /* parameters written per event */
/* Names the parameters in params: fills out[0..max) and returns how
 * many. */
typedef int (*prof_args_fn)(const prof_params *params, prof_arg *out, int max);

typedef struct prof_event {
    const char *name;  /* static: the op's, phase's or kernel's name */
    uint8_t kind;      /* prof_kind */
    uint8_t device;    /* amp_device the work ran on */
    uint8_t phase;     /* amp_phase current when it began */
    uint8_t n_in;      /* inputs recorded */
    int32_t depth;     /* open events of this thread when it began */
    int64_t t0, t1;    /* host ns (CLOCK_MONOTONIC); t1 = t0 for instants */
    int32_t dev_mark0, dev_mark1; /* device marks, -1: none (host timed) */
    double flops;      /* floating-point operations, 0: not counted */
    double bytes;      /* bytes read + written */
    prof_tensor in[PROF_MAX_TENSORS], out;
    size_t mem[AMP_MEM_CATEGORY_COUNT]; /* PROF_COUNTER: bytes per category */
    int64_t step;      /* amp_profiler_step count when it began */
    /* Added (hooks): the host clock around the call. Equal to t0/t1 for a
     * host-timed event; for a device-timed one (dev marks resolved at
     * stop), t0/t1 become the device's times mapped to the host clock and
     * these keep when the host issued the work, which is what nests it
     * inside its host-timed parents (phases). */
    int64_t host_t0, host_t1;
    /* PROF_OP_FWD, PROF_OP_BWD: the op's parameters and the function
     * that names them (NULL: none to write). */
    prof_args_fn args;
    prof_params params;
} prof_event;

extern atomic_bool prof_active;

static inline bool prof_on(void) { return atomic_load_explicit(&prof_active, memory_order_relaxed); }

/* Opens an event on this thread's buffer; NULL when the profiler is off or
 * the buffer is full (counted as dropped). */
prof_event *prof_begin_on(prof_kind kind, const char *name);
static inline prof_event *prof_begin(prof_kind kind, const char *name)
{
    return prof_on() ? prof_begin_on(kind, name) : NULL;
}
/* Closes e (the most recently opened event of this thread). */
void prof_end(prof_event *e);
/* An instant event (a cast-cache hit); NULL when off. */
prof_event *prof_instant(prof_kind kind, const char *name);

/* The recorder's own allocations (thread buffers, event chunks, the
 * arrays made at stop) since the process started: flat while the profiler
 * is off (tests/test_profiler.c checks it). Added (hooks). */
size_t prof_allocations(void);

/* Fills a prof_tensor from a dtype and shape (the hooks above tensor pass
 * t->dtype, t->shape.dims, t->shape.ndim). */
void prof_set_tensor(prof_tensor *pt, int dtype, const int64_t *dims, int ndim);

int64_t prof_now_ns(void);

/* Device timing, filled in by a backend that has events (CUDA): record a
 * mark on its stream and return its index, and later turn the marks into
 * host-clock ns. Registered by the backend at its first use. */
typedef struct {
    int32_t (*mark)(void);                           /* -1: none */
    void (*resolve)(const int32_t *marks, int n, int64_t *ns_out); /* after the step */
    void (*reset)(void);
    /* The device allocator's bytes per category now (a counter sample). */
    void (*memory)(size_t cur[AMP_MEM_CATEGORY_COUNT]);
} prof_device_timer;
void prof_register_device_timer(amp_device dev, const prof_device_timer *t);
int32_t prof_device_mark(amp_device dev);

/* The events recorded, for the outputs (profile_out.c): every thread's
 * buffer in turn. Valid after amp_profiler_stop until the next start. */
typedef struct {
    int tid;
    const prof_event *ev;
    size_t n;
} prof_thread_events;
int prof_threads(const prof_thread_events **out);

/* Host ns (prof_now_ns) at the last amp_profiler_start and stop. */
void prof_run_window(int64_t *t0, int64_t *t1);

/* A recording run (amp_profiler_start .. stop): prof_start begins one
 * with the options o (not NULL), false when one runs already; prof_stop
 * ends it, false when none runs; prof_step marks a step's end;
 * prof_reset stops any run and drops every event; prof_num_events counts
 * the last run's events (and, in *dropped when not NULL, those dropped). */
bool prof_start(const amp_profiler_opts *o);
bool prof_stop(void);
void prof_step(void);
void prof_reset(void);
size_t prof_num_events(size_t *dropped);

/* The phases: a stack per thread (amp_phase_current is its top); the
 * process's phase for the memory accounting (record/mem_ledger.h) is the
 * innermost open phase of the thread that last began or ended one. prof_phase_begin
 * pushes p (AMP_PHASE_OTHER for an invalid p); prof_phase_end pops it,
 * or says why not: no phase open, or another one on top (in *open). */
typedef enum { PROF_PHASE_ENDED, PROF_PHASE_NONE_OPEN, PROF_PHASE_OTHER_OPEN } prof_phase_end_result;
void prof_phase_begin(amp_phase p);
prof_phase_end_result prof_phase_end(amp_phase p, amp_phase *open);

#endif
