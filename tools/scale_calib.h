/*
 * scale_calib.h - ampc train --init-scale auto: the grad scaler's first
 * scale measured on the run's first step instead of guessed (scale_calib.c).
 *
 * The rule: S_max is the largest power of two 2^E, E in
 * [SCALE_CALIB_MIN_EXP, SCALE_CALIB_MAX_EXP], at which the first step's
 * scaled backward (every micro-batch of step 0) leaves every gradient
 * finite; the scale chosen is the largest power of two at most
 * S_max / SCALE_CALIB_MARGIN (16; growth_factor when that is larger), so
 * the gradients may grow 16-fold over the first steps, and the first
 * growth may happen, before an overflow; at most the cap,
 * --max-scale when given, else --init-scale's default (65536, PyTorch's);
 * at least --min-scale. A run that starts there loses no step to the scaler's
 * first back-offs. The cap: gradients grow over the first steps from the
 * initial weights, so a first scale above PyTorch's, finite at step 0,
 * overflows a few steps later (mlp and cnn: docs/debugging.md); the probes
 * go no higher than the cap times growth_factor.
 *
 * Defines: SCALE_CALIB_*, scale_calib, scale_calibrate, scale_calib_json.
 */
#ifndef AMPC_SCALE_CALIB_H
#define AMPC_SCALE_CALIB_H

#include "diagnose.h"
#include "settings.h"
#include "train_opts.h"
#include "trainer.h"

/* The exponents probed: 2^24 is the top (beyond it a gradient's f32 copy
 * gains nothing: f16's smallest subnormal is 2^-24, so any gradient that
 * is not flushed at 2^24 is normal at 2^0), 2^-24 the bottom. */
#define SCALE_CALIB_MIN_EXP (-24)
#define SCALE_CALIB_MAX_EXP 24
#define SCALE_CALIB_MAX_PROBES (SCALE_CALIB_MAX_EXP - SCALE_CALIB_MIN_EXP + 2)
/* The headroom below S_max: the gradients of the first steps grow from
 * the initial weights' (measured: the default gpt's need a scale 8 times
 * below step 0's largest finite one by step 15, an mlp at batch 1 by step
 * 5), so the scale starts 16 times below S_max, or growth_factor times
 * when that is more (the first growth must not overflow either). */
#define SCALE_CALIB_MARGIN 16.0

typedef struct {
    double scale;          /* the scale the run starts with */
    double largest_finite; /* S_max, or the top probed when capped */
    bool capped;           /* finite at the top: the scale is the cap */
    double max_grad;       /* max |gradient| of the first step at scale 1 (the probe's guess) */
    int n_probes;
    double probe_scale[SCALE_CALIB_MAX_PROBES];
    bool probe_finite[SCALE_CALIB_MAX_PROBES];
} scale_calib;

/* Probes step 0 (micro-batches 0 .. accum-1 through fn) at scales 2^E:
 * first at 1, whose largest gradient guesses E, then up or down from the
 * guess one exponent at a time until the step from finite to not finite
 * is seen. Each probe is a forward and a scaled backward; the gradients
 * are cleared after each, and the generator is put back, so the run that
 * follows is the run started with --init-scale c->scale. Sets the
 * scaler's scale. -1, or 1 after a message (inf/NaN at every scale, or an
 * error). */
int scale_calibrate(trainer *t, const train_opts *o, const run_info *ri, bool gpt, batch_fn fn, void *ctx,
                    scale_calib *c);

/* c as the log's calibration event, one JSON object (no newline) in buf:
 * {"event":"init_scale_auto","scale":S,...}. */
const char *scale_calib_json(const scale_calib *c, char *buf, size_t n);

#endif
