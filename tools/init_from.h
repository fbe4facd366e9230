/*
 * init_from.h - `ampc train --init-from DIR` (init_from.c): a new run that
 * starts from the weights saved in DIR (a run's checkpoint, or one
 * `ampc import` wrote) with a fresh optimizer, grad scaler, schedule and
 * step 0.
 *
 * Defines: init_from_settings, init_from_load.
 */
#ifndef AMPC_INIT_FROM_H
#define AMPC_INIT_FROM_H

#include "settings.h"
#include "train_opts.h"
#include "trainer.h"

/* Reads DIR's settings (o->init_from) and takes its model's shape into o
 * (model, its shape options, --param-dtype): a given one that differs is
 * refused, as is --resume beside it. *init gets DIR's run values (its
 * vocabulary). -1, or the exit code after a message. */
int init_from_settings(train_opts *o, run_info *init);
/* DIR's weights into t's model (built for o and have, the data's run
 * values, checked against init's vocabulary), the optimizer's f32 masters
 * re-seeded from them; the generator's state is left as it was. -1, or
 * the exit code after a message. */
int init_from_load(const train_opts *o, trainer *t, const run_info *have, const run_info *init);

#endif
