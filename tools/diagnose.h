/*
 * diagnose.h - what is not finite when a run cannot train (diagnose.c).
 *
 * Defines: DEFAULT_MAX_SKIPS, batch_fn, count_bad_inputs, diagnose_step.
 */
#ifndef AMPC_DIAGNOSE_H
#define AMPC_DIAGNOSE_H

#include "settings.h"
#include "train_opts.h"
#include "trainer.h"

/* --max-skips' default. Each skip halves the scale (backoff 0.5), so 32 in
 * a row take the default 65536 = 2^16 down to 2^-16: an fp16 gradient has
 * overflowed at every scale from the start to where every gradient below
 * 1 flushes to zero (f16's smallest subnormal is 2^-24). An overflow the
 * scaler can fix is fixed in fewer (PyTorch runs skip a handful of steps
 * at the start); a run still skipping holds inf/NaN at any scale. */
#define DEFAULT_MAX_SKIPS 32

/* train.c's micro-batch m of the run, on the model's device. */
typedef bool (*batch_fn)(void *ctx, int64_t m, amp_tensor **x, amp_tensor **y);
/* Inf/NaN values in the inputs of steps first..last (0-based), of *total;
 * -1 (error set) on failure. */
int64_t count_bad_inputs(const train_opts *o, int64_t first, int64_t last, batch_fn fn, void *ctx, int64_t *total);
/* Re-runs step `step`'s forward and backward (the scaler skipped it, so
 * nothing changed since) and says on stderr what is not finite: the
 * weights (which tensor), each micro-batch's inputs (how many values), its
 * loss, the first parameter whose gradient is not (name, shape, how many),
 * then a hint. Leaves the gradients zeroed. */
void diagnose_step(trainer *t, const train_opts *o, const run_info *ri, bool gpt, int64_t step, batch_fn fn,
                   void *ctx);

#endif
