/*
 * optim.h - the optimizer object behind amp_optim (internal), and the
 * optimizers share.
 *
 * An optimizer holds a reference to each parameter and, per parameter,
 * up to three f32 state buffers shaped like it (PyTorch's state keys):
 *   SGD:   "momentum_buffer" (only when momentum != 0)
 *   Adam:  "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (only with amsgrad)
 * and the number of steps that parameter has taken (PyTorch's
 * state["step"]: a parameter without a gradient does not count a step,
 * which matters for Adam's bias correction). Buffers are created on a
 * parameter's first step.
 *
 * Defines: struct amp_optim (the state accessors are public, in ampc.h).
 */
#ifndef AMPC_OPTIM_H
#define AMPC_OPTIM_H

#include "ampc.h"

#define OPTIM_MAX_STATE 3

typedef enum { OPTIM_SGD = 0, OPTIM_ADAM, OPTIM_ADAMW } optim_kind;

struct amp_optim {
    optim_kind kind;
    const char *name;      /* "sgd", "adam", "adamw" for messages */
    int n;
    amp_tensor **params;   /* references */
    amp_tensor **state;    /* n * OPTIM_MAX_STATE, NULL until a parameter's first step */
    int64_t *param_steps;  /* per parameter */
    int64_t steps;         /* amp_optim_step calls that succeeded */
    double lr;
    amp_sgd_opts sgd;
    amp_adam_opts adam;
    /* CUDA parameters: n + 1 int64 step counters on the device (each
     * parameter's, then the optimizer's), authoritative once allocated at
     * the first CUDA step; the getters copy them to the host. */
    int64_t *dev_steps;
};

/* One step of o; for CUDA parameters, found_inf (a device float, may be
 * NULL) makes the step skip itself on the device when it is non-zero:
 * the grad scaler's step, without a host synchronisation. */
amp_status optim_step_guarded(amp_optim *o, const float *found_inf);

/* Proposed public API (for checkpoints). */

#endif
