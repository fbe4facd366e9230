/*
 * profile_stats.h - the profiler's events digested for its outputs
 * (profile_out.c): the profiled steps, the time of each phase, and one row
 * per (op, pass, dtypes) with calls, total and self time, FLOPs and bytes.
 *
 * Definitions used by every output:
 *   - a step runs from the previous amp_profiler_step mark (the first: from
 *     amp_profiler_start) to its own; the profiled wall time is their sum.
 *     A run without marks is counted as one step, start to stop.
 *   - a phase's time is its exclusive time (minus the phases nested in
 *     it) on the thread that marks the steps, within the steps; "other"
 *     is the steps' wall time in no phase.
 *   - an event's self time is its duration minus its direct children's
 *     (events begun inside it on the same thread and the same clock: host
 *     time, or one device's), except its own work: the kernels an op runs
 *     (they have rows of their own) and the `to` op an autocast cast wraps
 *     (which has no row: the cast's row stands for it).
 *   - rows, casts and FLOPs count the events begun within the steps.
 */
#ifndef AMPC_PROFILE_STATS_H
#define AMPC_PROFILE_STATS_H

#include "base/base.h"
#include "record/profile.h"

typedef struct {
    const char *name;   /* the event's name */
    char label[64];     /* what the table shows: the op, or "to bf16 (autocast)" */
    char sig[64];       /* "bf16,bf16 -> bf16" (a backward: "bf16 -> -,bf16"), "" when none recorded */
    uint8_t kind;       /* prof_kind: OP_FWD, OP_BWD, CAST, CAST_HIT, KERNEL */
    uint8_t device;     /* where it was timed: AMP_CPU (host clock) or a device */
    uint32_t key;       /* kind, device and dtypes packed (grouping) */
    int64_t calls;
    int64_t total_ns, self_ns;
    double flops, bytes;
} prof_row;

typedef struct {
    int64_t t_start, t_stop; /* the run's host window (ns) */
    int64_t t_end;           /* the last step mark (t_stop without marks) */
    int steps;               /* profiled steps (1 without marks) */
    bool marked;             /* amp_profiler_step marked them */
    int64_t wall_ns;         /* t_end - t_start */
    int step_tid;            /* the thread that marks the steps (phases counted there) */
    int64_t phase_ns[AMP_PHASE_COUNT]; /* exclusive; [OTHER]: wall in no phase */
    int64_t cast_ns, casts, cast_hits;
    double flops;            /* forward and backward ops' */
    prof_row *rows;          /* sorted by total time, longest first */
    int n_rows;
    size_t events, dropped;
} prof_stats;

/* Digests the last run's events (after amp_profiler_stop). AMP_ERR_STATE
 * while the profiler runs or when nothing was recorded; AMP_ERR_MEMORY. */
amp_status prof_stats_build(prof_stats *s);
void prof_stats_free(prof_stats *s);

/* "fp32", "bf16", ... for an amp_dtype; "?" for anything else. */
const char *prof_dtype_name(int dtype);
/* "fwd", "bwd", "cast", "hit", "kernel" for a row's kind. */
const char *prof_pass_name(int kind);

/* Per event of one thread: its parent's index (-1: none) and its self
 * time (as above). Phases and ops both; instants have self 0. parent and
 * self hold n entries. */
void prof_thread_tree(const prof_event *ev, size_t n, int64_t *parent, int64_t *self);

#endif
