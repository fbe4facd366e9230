/*
 * amp.h - autocast's hook into op_apply.
 *
 * Defines: autocast_inputs (cast an op's inputs per its category), the
 * warning channel, and scaler_counts_load (for the checkpoint reader).
 */
#ifndef AMPC_AMP_H
#define AMPC_AMP_H

#include "ampc.h"

/* Replaces in[i] by its autocast cast where op's category on the inputs'
 * device asks for one; out[i] is in[i] itself or a cast (a pool temporary,
 * or from the cast cache). Returns AMP_OK, or an error for a banned op or
 * f16 mixed with bf16 under PROMOTE. Does nothing outside autocast. */
amp_status autocast_inputs(int op, amp_tensor *const *in, int n, amp_tensor **out);

/* Sends msg to the warning handler. */
void amp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sets the scaler's steps / skipped counters (amp_scaler_get_counts), as a
 * checkpoint saved them, so a resumed run counts on from there. */
amp_status scaler_counts_load(amp_scaler *s, amp_scaler_counts c);

#endif
