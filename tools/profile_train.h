/*
 * profile_train.h - `ampc train --profile` (profile_train.c): which steps
 * are profiled, and the profiler around them.
 *
 * Defines: profile_window, profile_preflight, profile_window_init,
 * profile_step_begin, profile_step_end, profile_abort.
 */
#ifndef AMPC_PROFILE_TRAIN_H
#define AMPC_PROFILE_TRAIN_H

#include "progress.h"
#include "train_opts.h"

/* `ampc train --profile`: which steps are profiled, and the profiler
 * around them. */
typedef struct {
    const train_opts *o;
    int64_t start, end; /* steps [start, end) profiled; none when o->profile is NULL */
    bool on;
} profile_window;
/* --profile's trace file can be written (checked before anything loads:
 * a file made and removed beside it). -1 or 1 (message names the path). */
int profile_preflight(const train_opts *o);
/* The window of a run from step first to stop: the steps after the
 * warm-up. -1, or EXIT_USAGE when the warm-up leaves none (message). */
int profile_window_init(profile_window *w, const train_opts *o, int64_t first, int64_t stop);
/* Around train step `step`: start the profiler at the window's start;
 * mark the step, and at the window's end stop, print the table and the
 * verdict (clearing the progress line) and write the trace. A trace that
 * cannot be written is a warning: training goes on. */
void profile_step_begin(profile_window *w, int64_t step);
void profile_step_end(profile_window *w, int64_t step, progress *pg);
/* A run that stops inside the window: the profiler off, nothing printed. */
void profile_abort(profile_window *w);

#endif
