/*
 * cpu_backend.h - the CPU backend's primitives, as backend_cpu.c's table
 * names them: one block per family, each implemented in its own file
 * under src/backend/cpu/.
 */
#ifndef AMPC_CPU_BACKEND_H
#define AMPC_CPU_BACKEND_H

#include "backend/backend.h"

/* ==== section pointwise ==== */
/* accumulate.c: dst[i] += src[i] in dst's dtype (backend.h's accumulate). */
amp_status cpu_accumulate(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n);
/* ==== end section pointwise ==== */



/* ==== section linalg ==== */
/* ==== end section linalg ==== */



/* ==== section nn ==== */
/* ==== end section nn ==== */



/* ==== section conv ==== */
/* ==== end section conv ==== */



/* ==== section amp ==== */
/* ==== end section amp ==== */



/* ==== section optim ==== */
/* optim.c: the multi-tensor SGD and Adam / AdamW steps over host memory
 * (backend.h's sgd_step / adam_step; found_inf and steps are host memory). */
amp_status cpu_sgd_step(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                        be_sgd_opts o);
amp_status cpu_adam_step(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                         be_adam_opts o);
/* ==== end section optim ==== */

#endif
