/*
 * amp.h - what the grad scaler shares with the layers above it.
 *
 * Defines: scaler_counts_load, scaler_hysteresis_most (for the checkpoint
 * reader). Autocast lives
 * in the ops layer (src/ops/autocast.c), the warning channel in base.
 */
#ifndef AMPC_AMP_H
#define AMPC_AMP_H

#include "ampc.h"

/* Sets the scaler's steps / skipped / skipped-in-a-row counters
 * (amp_scaler_get_counts), as a checkpoint saved them, so a resumed run
 * counts on from there. */
amp_status scaler_counts_load(amp_scaler *s, amp_scaler_counts c);
/* The largest hysteresis count s takes: its hysteresis N, 1 without one. */
int scaler_hysteresis_most(const amp_scaler *s);

#endif
