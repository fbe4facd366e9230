/*
 * cpu_backend.h - the CPU backend's primitives, as backend_cpu.c's table
 * names them: one block per family, each implemented in its own file
 * under src/backend/cpu/.
 */
#ifndef AMPC_CPU_BACKEND_H
#define AMPC_CPU_BACKEND_H

#include "backend/backend.h"

/* ==== section pointwise ==== */
/* ==== end section pointwise ==== */



/* ==== section linalg ==== */
/* ==== end section linalg ==== */



/* ==== section nn ==== */
/* ==== end section nn ==== */



/* ==== section conv ==== */
/* ==== end section conv ==== */



/* ==== section amp ==== */
/* amp.c: the scaler, non-finite count and clip_grad_norm on host memory. */
amp_status cpu_unscale(const be_buf *g, int n, const float *scale, float *found_inf);
amp_status cpu_count_nonfinite(const void *x, amp_dtype dt, int64_t n, int64_t *count);
amp_status cpu_scaler_update(float *scale, be_scaler_state *st, uint64_t records, be_scaler_opts o);
amp_status cpu_scaler_count(be_scaler_state *st, int rec);
amp_status cpu_clip_grad_norm(const be_buf *g, int n, double max_norm, double *total);
amp_status cpu_clip_grad_norm_f32(const be_buf *g, int n, double max_norm, float *total);
/* ==== end section amp ==== */



/* ==== section optim ==== */
/* ==== end section optim ==== */

#endif
