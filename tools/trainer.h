/*
 * trainer.h - a run's model, optimizer, precision and schedule (build.c).
 *
 * Defines: trainer, trainer_build, trainer_free, model_describe.
 */
#ifndef AMPC_TRAINER_H
#define AMPC_TRAINER_H

#include "settings.h"
#include "train_opts.h"

#include <stddef.h>

/* Everything a step needs. */
typedef struct {
    amp_module *model;
    amp_optim *opt;
    amp_scaler *scaler;   /* always present; disabled unless fp16 with scaler */
    bool autocast;
    amp_dtype dtype;      /* the autocast dtype */
    amp_sched sched;
    amp_tensor **params;
    int n_params;
    int64_t n_weights;    /* parameter elements */
} trainer;

/* Seeds the generator and builds the run's model (for ri's shapes),
 * optimizer, scaler and schedule (total optimizer steps for cosine);
 * false (message printed) on failure. */
bool trainer_build(trainer *t, const train_opts *o, const run_info *ri, int64_t total_steps);
void trainer_free(trainer *t);
/* "cnn 784-...-10" style description into buf. */
const char *model_describe(const train_opts *o, const run_info *ri, char *buf, size_t n);

#endif
