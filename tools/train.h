/*
 * train.h - the training step's parts that others run (train.c): one
 * micro-batch's loss (diagnose.c re-runs a step with it) and profile's
 * runs. The train command itself: cli.h.
 *
 * Defines: micro_batch_loss, train_profile_run, train_trial.
 */
#ifndef AMPC_TRAIN_H
#define AMPC_TRAIN_H

#include "data.h"
#include "settings.h"
#include "train_opts.h"
#include "trainer.h"

/* One micro-batch's loss as a training step computes it: the forward and
 * cross-entropy inside autocast when the run has it (on dev), the gpt's
 * [B, T, V] logits as one row per position, divided by --accum. NULL on
 * error (amp_last_error says why). diagnose_step re-runs a step with it. */
amp_tensor *micro_batch_loss(const trainer *t, const train_opts *o, const run_info *ri, bool gpt, amp_device dev,
                             amp_tensor *x, amp_tensor *y);
/* `ampc profile`: o's run on rd's data (no checkpoint, log or evaluation)
 * for o->profile_warmup + o->profile_steps optimizer steps, the last
 * profile_steps of them profiled; the profiler's results stay readable
 * (amp_profiler_summary ...). -1 or an exit code (message printed). */
int train_profile_run(const train_opts *o, run_data *rd, run_info *ri);
/* `ampc policy search`'s trial: o's run on rd's data for o->steps
 * optimizer steps from step 0 (no checkpoint, log or evaluation), from
 * --init-from's weights when o has it (init: their run values), under the
 * library's autocast policy as it is set. *loss gets the mean training
 * loss of the last quarter of the steps (NAN when one is not finite),
 * *step_ms the median step time after the first. -1 or an exit code
 * (message printed). */
int train_trial(const train_opts *o, run_data *rd, run_info *ri, const run_info *init, double *loss,
                double *step_ms);

#endif
