/*
 * update.h - the element loops behind the CPU optimizer steps (update.c).
 *
 * Each updates one parameter's n f32 values in place, with its f32 state
 * buffers (NULL where the options need none), spread over threads for big
 * parameters; AVX-512 versions give the same bits as the scalar loops.
 *
 * Defines: optim_sgd_update, optim_adam_update.
 */
#ifndef AMPC_OPTIM_UPDATE_H
#define AMPC_OPTIM_UPDATE_H

#include "ampc.h"

/* One SGD step: first says the momentum buffer starts as the gradient. */
void optim_sgd_update(const amp_sgd_opts *s, float lr, bool first, float *p, const float *g, float *buf, int64_t n);

/* One Adam (decoupled = false) or AdamW step at (1-based) step t; vmax is
 * amsgrad's running maximum or NULL. */
void optim_adam_update(const amp_adam_opts *a, bool decoupled, double lr, int64_t t, float *p, const float *g,
                       float *m, float *v, float *vmax, int64_t n);

#endif
