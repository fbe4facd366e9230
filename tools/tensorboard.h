/*
 * tensorboard.h - `ampc train --tensorboard DIR`: TensorBoard event files
 * (tensorboard.c; the bytes are tb_encode.c's). Rank 0 of a data-parallel
 * run writes them, as it writes --log.
 *
 * Each run (a resumed one too) writes a new file in DIR named as
 * TensorFlow's writers name theirs,
 * events.out.tfevents.<seconds>.<host>.<pid>.<n>, so `tensorboard --logdir`
 * shows a resumed run as one series, its steps continuing. A step's values
 * are one Event, written and flushed at once (a crash loses at most the
 * step being written):
 *
 *   train/loss, train/lr, train/grad_norm, train/step_ms,
 *   train/samples_per_s or train/tokens_per_s
 *                         the log record's values (log.h), where the log
 *                         has a number (a null there is no point here)
 *   amp/loss_scale        the scale the step's backward used
 *   amp/skipped_steps     steps the scaler skipped so far in the run
 *                         (both with the grad scaler only)
 *   f16/zero, f16/flush, f16/subnormal, f16/overflow, and
 *   f16/flush_scaled ...  --health-every's steps: the log's f16_* fractions
 *   amp/stalled, amp/stalled_worst  --health-every's steps with 16-bit
 *                         parameters: the log's stalled fractions
 *   grad/<parameter>      --health-every's steps: histograms of the
 *                         unscaled gradients of the TB_WORST_PARAMS
 *                         parameters whose gradients lose the most in f16
 *                         at the step's scale (flushed, subnormal or
 *                         overflowing elements), worst first
 *   eval/test_accuracy, or eval/val_loss and eval/perplexity
 *                         the closing evaluation, at the last step
 *
 * Failures: a DIR that cannot take files is refused before the run
 * (tb_dir_check, exit 2). A write that fails later (a full disk) is said
 * once on stderr with the reason; the training goes on without events.
 *
 * Defines: tb_writer, TB_WORST_PARAMS, tb_dir_check, tb_open, tb_step,
 * tb_grads, tb_eval, tb_close.
 */
#ifndef AMPC_TENSORBOARD_H
#define AMPC_TENSORBOARD_H

#include "ampc.h"
#include "log.h"

typedef struct tb_writer tb_writer;

/* Gradients drawn as histograms at each --health-every step. */
#define TB_WORST_PARAMS 8

/* DIR can take event files: created when missing (with its parents), then
 * a file created, written and removed there. -1, or EXIT_USAGE after a
 * message naming DIR and the system's reason. */
int tb_dir_check(const char *dir);
/* Creates a new event file in dir and writes its first event; NULL with an
 * AMP_ERR_IO error naming the file when it cannot. */
tb_writer *tb_open(const char *dir);
/* Step r->step's values (the log's record; skipped_total: the steps
 * skipped so far, shown when scaled). */
void tb_step(tb_writer *w, const log_record *r, bool scaled, int64_t skipped_total);
/* Histograms of the gradients of the worst TB_WORST_PARAMS of m's n
 * parameters (params: m's, in its order) at step, ranked by f16 health at
 * scale (1 without the scaler). */
void tb_grads(tb_writer *w, int64_t step, const amp_module *m, amp_tensor *const *params, int n, double scale);
/* One scalar at step: the closing evaluation's tags. */
void tb_eval(tb_writer *w, int64_t step, const char *tag, double v);
/* Closes the file (NULL is fine); false when a write failed (said once). */
bool tb_close(tb_writer *w);

#endif
