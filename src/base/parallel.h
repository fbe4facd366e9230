/*
 * parallel.h - the library's thread pool: every kernel's parallel loop.
 *
 * amp_parallel_for(n, grain, fn, ctx) covers [0, n) with calls
 * fn(ctx, lo, hi, tid) on disjoint ranges. Ranges start at multiples of
 * `grain` and are whole grains (the last may be shorter); they are handed
 * out dynamically, so a thread that gets less of its core (another
 * process on it) takes fewer of them. The calling thread takes part as
 * tid 0; tid < amp_parallel_width(n, grain) names a per-thread scratch
 * slot. fn must not assume which tid gets which range.
 *
 * It runs on the caller alone, as one call fn(ctx, 0, n, 0), when there
 * is at most one grain, when amp_threads() is 1, or when called from
 * inside another amp_parallel_for (nesting runs inline).
 *
 * Idle workers spin briefly and then sleep: they never busy-wait without
 * bound for a core they may be sharing.
 */
#ifndef AMPC_BASE_PARALLEL_H
#define AMPC_BASE_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

typedef void (*amp_range_fn)(void *ctx, int64_t lo, int64_t hi, int tid);

void amp_parallel_for(int64_t n, int64_t grain, amp_range_fn fn, void *ctx);

/* How many distinct tids a call amp_parallel_for(n, grain, ...) from this
 * thread may use: 1 .. amp_threads(). Size per-thread scratch with it. */
int amp_parallel_width(int64_t n, int64_t grain);

/* The calling thread's tid in the amp_parallel_for it is in (0 outside). */
int amp_parallel_tid(void);

/* Whether the calling thread is inside an amp_parallel_for. */
bool amp_in_parallel(void);

/* Makes every worker, present or created later, take flush-subnormals
 * mode `on` (flush.h) before it next runs a range (amp_set_flush_denormal). */
void parallel_set_flush(bool on);

#endif
