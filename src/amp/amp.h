/*
 * amp.h - what the grad scaler shares with the layers above it.
 *
 * Defines: scaler_counts_load (for the checkpoint reader). Autocast lives
 * in the ops layer (src/ops/autocast.c), the warning channel in base.
 */
#ifndef AMPC_AMP_H
#define AMPC_AMP_H

#include "ampc.h"

/* Sets the scaler's steps / skipped counters (amp_scaler_get_counts), as a
 * checkpoint saved them, so a resumed run counts on from there. */
amp_status scaler_counts_load(amp_scaler *s, amp_scaler_counts c);

#endif
