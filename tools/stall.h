/*
 * stall.h - the stalled-update fraction of a step (ampc train
 * --health-every, with 16-bit parameters: --param-dtype bf16 / fp16).
 *
 * An element stalls when the optimizer meant to move it and the weight the
 * next step starts from did not move: of the elements of the 16-bit
 * parameters whose (unscaled) gradient is nonzero, those whose stored
 * weight is the same value after the step as before it. The stored weight
 * is what carries the run:
 *   - fp32 master weights (the default with --param-dtype): the master.
 *     The 16-bit copy may sit still while the master moves; that is not a
 *     lost update (the master keeps it), so it does not count.
 *   - --master-weights off: the 16-bit weight itself. An update under half
 *     a unit in its last place rounds back to the same value: lost.
 *   - --weight-update sr: the 16-bit weight, rounded stochastically. An
 *     update of a fraction f of a unit moves the weight a whole unit with
 *     probability f, so a small update stalls in most steps by design and
 *     the weight is right in expectation: the fraction falls, but stays
 *     well above the masters' (judge it by the loss, docs/debugging.md).
 * A skipped step (the scaler's) moves nothing by design: not measured.
 * Elements with a zero gradient are left out (Adam's momentum or weight
 * decay may still move them; their "meant to move" is not read here).
 *
 * Defines: stall_probe, stall_begin, stall_end, stall_free.
 */
#ifndef AMPC_STALL_H
#define AMPC_STALL_H

#include "trainer.h"

typedef struct {
    int n;            /* t->n_params; 0: no 16-bit parameter (nothing measured) */
    float **before;   /* n: each 16-bit parameter's stored weight before the step (NULL: not 16-bit) */
    uint8_t **moving; /* n: its elements with a nonzero gradient */
} stall_probe;

typedef struct {
    double fraction;     /* stalled / meant to move, over every 16-bit parameter; NAN: not measured */
    const char *worst;   /* the parameter with the largest fraction (its module name), or NULL */
    double worst_fraction;
} stall_result;

/* One parameter's part of a step, for a caller that keeps its own sums
 * (ampc audit): its elements meant to move and those that stalled, and
 * the squared norms of its stored weight's change and of the weight
 * before (the update-to-weight ratio). */
typedef struct {
    int64_t moving, stalled;
    double change_sq, weight_sq;
} stall_param;

/* Reads the stored weights and gradients (after unscale, before the step)
 * of the 16-bit parameters, or of every parameter with every_param; a
 * no-op when there is none to read. AMP_OK or the error (the probe then
 * holds nothing). */
amp_status stall_begin(stall_probe *s, const trainer *t, bool every_param);
/* After the step: the fractions into r (NAN when nothing was measured or
 * skipped), per (not NULL: t->n_params entries, zeroed here) each
 * parameter's part, and frees what stall_begin read. */
amp_status stall_end(stall_probe *s, const trainer *t, bool skipped, stall_result *r, stall_param *per);
void stall_free(stall_probe *s);

#endif
