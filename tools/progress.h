/*
 * progress.h - a training run's progress (progress.c): the live line on a
 * terminal, plain lines otherwise.
 *
 * Defines: progress, progress_begin, progress_step, progress_clear,
 * progress_health, now_s.
 */
#ifndef AMPC_PROGRESS_H
#define AMPC_PROGRESS_H

#include "train_opts.h"
#include "trainer.h"

typedef struct {
    bool live;          /* stdout is a terminal: a \r status line */
    const char *unit;   /* "samples" or "tokens" */
    int64_t per_step;   /* samples or tokens per optimizer step */
    int64_t first, total, every;
    double t_start, t_window, t_live;
    double loss_sum;
    int64_t loss_n, steps_window;
    char health[512];   /* --health-every: the last measurement, shown on the next plain line */
} progress;

void progress_begin(progress *p, const train_opts *o, int64_t first_step, int64_t total,
                    int64_t per_step, bool tokens);
void progress_step(progress *p, int64_t step, double loss, const trainer *t, int64_t skipped);
/* Clears the live line (before other output). */
void progress_clear(progress *p);
/* --health-every: the f16 health measured at step (at_scale NULL without
 * the scaler), shown on the next plain progress line. */
void progress_health(progress *p, int64_t step, double scale, const amp_f16_health *at_scale,
                     const amp_f16_health *unscaled);
/* --health-every with 16-bit parameters: the stalled updates (stall.h;
 * fraction NAN: a skipped step), added to the health line. */
void progress_stall(progress *p, double fraction, const char *worst, double worst_fraction);
double now_s(void);

#endif
