/*
 * update.h - the element loops behind the CPU optimizer steps (update.c).
 *
 * One call steps every parameter of an optimizer at once (PyTorch's
 * foreach / multi-tensor idea): the work items are the (parameter, block)
 * pairs of all parameters, spread over threads in one parallel region, so
 * many small parameters do not each pay a fork / join and the threads stay
 * busy across parameter boundaries. Per-parameter scalars (step counts,
 * bias corrections) are worked out once per parameter before the loop.
 * AVX-512 versions give the same bits as the scalar loops, and the result
 * does not depend on the number of threads.
 *
 * Defines: optim_param, optim_sgd_step, optim_adam_step.
 */
#ifndef AMPC_OPTIM_UPDATE_H
#define AMPC_OPTIM_UPDATE_H

#include "ampc.h"

/* One parameter of a step. p and g are CPU buffers of n elements in their
 * own float dtypes: f32 values update in place, 16-bit ones are widened
 * block by block, updated in f32 and rounded once on store. state holds
 * the f32 state buffers in optim.h's slot order (NULL where the options
 * need none). t is the parameter's step count including this step (so 1
 * on its first step: SGD's momentum buffer starts as the gradient then). */
typedef struct {
    void *p;
    const void *g;
    amp_dtype p_dt, g_dt;
    float *state[3];
    int64_t n;
    int64_t t;
} optim_param;

/* One SGD step of the n parameters ps. AMP_ERR_MEMORY (nothing changed)
 * when the scratch cannot be had. */
amp_status optim_sgd_step(const amp_sgd_opts *s, float lr, const optim_param *ps, int n);

/* One Adam (decoupled = false) or AdamW step of the n parameters ps, each
 * at its own step ps[i].t; state[2] is amsgrad's running maximum or NULL. */
amp_status optim_adam_step(const amp_adam_opts *a, bool decoupled, double lr, const optim_param *ps, int n);

#endif
