/*
 * log.h - the training log: one JSON object per line (JSON Lines), one
 * line per optimizer step, flushed as it is written so a running or
 * crashed run's log can be read (and plotted: `ampc plot`) at any time.
 *
 * A line, keys in this order (the optional ones only when set):
 *
 *   {"step":120,"epoch":1,"loss":0.5123,"lr":0.001,"scale":65536,
 *    "skipped":false,"grad_norm":1.25,"step_ms":3.217,
 *    "val_loss":0.61,"tokens_per_s":81234.5,"samples_per_s":2210.1,"world_size":2}
 *
 *   step        the optimizer step, counted from 1
 *   epoch       1-based; written when > 0
 *   loss        the unscaled training loss of the step
 *   lr          the learning rate the step used
 *   scale       the grad scaler's scale the step's backward used (null
 *               when no scaler runs: fp32, bf16, --no-scaler)
 *   skipped     true when the scaler found inf/NaN gradients and skipped
 *               the optimizer step
 *   grad_norm   the total L2 norm of the unscaled gradients (null when not
 *               computed, or non-finite)
 *   step_ms     the step's wall time in milliseconds
 *   val_loss    a validation loss measured at this step; when has_val
 *   tokens_per_s, samples_per_s  throughput (all ranks together); written
 *               when > 0
 *   world_size  the ranks of a data-parallel run (mpirun -np N); written
 *               when > 1 (the loss and grad norm are then the means over
 *               the ranks, rank 0 writes the log)
 *   f16_zero, f16_flush, f16_subnormal, f16_overflow
 *               --health-every's steps only: the f16 health of the step's
 *               (unscaled) gradients (amp_grad_f16_health), as fractions
 *               of their elements: exactly zero; would round to zero, to a
 *               subnormal, or overflow (inf/NaN included) in f16 unscaled
 *   f16_flush_scaled, f16_subnormal_scaled, f16_overflow_scaled
 *               the same at the scale the step used; with the scaler only
 *   stalled, stalled_worst, stalled_worst_fraction
 *               --health-every's steps with 16-bit parameters (stall.h):
 *               the fraction of the elements with a nonzero gradient whose
 *               stored weight (the fp32 master, else the 16-bit weight)
 *               did not change in the step; the parameter with the largest
 *               fraction (its name) and that fraction. null when the step
 *               was skipped
 *
 * JSON has no NaN or infinity: a non-finite number is written as null
 * (a NaN or inf loss appears as "loss":null). Numbers are printed with
 * 9 significant digits (float precision), the scale with 17 (exact).
 *
 * Errors (open, write, close) return NULL / a status with the message in
 * amp_last_error(), naming the file.
 */
#ifndef AMPC_LOG_H
#define AMPC_LOG_H

#include "ampc.h"

typedef struct log_file log_file;

typedef struct {
    int64_t step;
    int64_t epoch;        /* 1-based; 0: left out */
    double loss;
    double lr;
    double scale;         /* NAN: no scaler (null) */
    bool skipped;
    double grad_norm;     /* NAN: not computed (null) */
    double step_ms;
    bool has_val;         /* write val_loss */
    double val_loss;
    double tokens_per_s;  /* > 0: written */
    double samples_per_s; /* > 0: written */
    int64_t world_size;   /* > 1: written */
    const amp_f16_health *health;        /* non-NULL: the f16_* keys, unscaled */
    const amp_f16_health *health_scaled; /* non-NULL: the f16_*_scaled keys */
    bool has_stall;                      /* the stalled* keys (NAN / NULL: null) */
    double stalled, stalled_worst_fraction;
    const char *stalled_worst;
} log_record;

/* Opens path for writing: truncated, or appended to when append (a resumed
 * run continues its log); NULL with an AMP_ERR_IO error naming path when
 * it cannot. Whether an existing file may be written at all is train's
 * check before it starts (preflight.c). */
log_file *log_open(const char *path, bool append);
/* Writes r as one line and flushes it. AMP_ERR_IO naming the file when the
 * write fails (disk full ...). */
amp_status log_step(log_file *f, const log_record *r);
/* Closes the file (NULL is fine); AMP_ERR_IO when the last writes fail. */
amp_status log_close(log_file *f);
/* Writes one line that is not a step's, an event ({"event":"anomaly",
 * ...}, {"event":"init_scale_auto", ...}: json, one whole object without
 * the newline), and flushes it;
 * `ampc plot` skips lines with an "event" key. Errors as log_step. */
amp_status log_event(log_file *f, const char *json);

/* Writes v as a JSON number into buf (n >= 32): "%.*g" with digits
 * significant digits, or null when v is not finite. Returns buf. */
const char *log_number(char *buf, size_t n, double v, int digits);

#endif
