/*
 * eval.h - measuring a model (eval.c): test accuracy, validation loss;
 * and whether --device can run at all. The eval command itself: cli.h.
 *
 * Defines: eval_accuracy, eval_text_loss, device_check.
 */
#ifndef AMPC_EVAL_H
#define AMPC_EVAL_H

#include "data.h"
#include "train_opts.h"
#include "trainer.h"

/* Share of d's images whose argmax logit is their label; -1 (error set)
 * on failure. */
double eval_accuracy(trainer *t, const dataset *d, batcher *b);
/* Mean cross-entropy over o->val_batches validation batches of the text,
 * drawn from seed `windows` (0: the windows train's closing evaluation
 * measures, whatever the run's seed); NAN (error set) on failure. */
double eval_text_loss(trainer *t, const train_opts *o, text_data *td, uint64_t windows);
/* --device cuda without a usable GPU: the clear error naming the device and
 * the library's reason; -1 for cpu or an available GPU, else 1 after it. */
int device_check(const train_opts *o, const char *who);

#endif
