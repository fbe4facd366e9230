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
};

/* Proposed public API (for checkpoints). */

#endif
