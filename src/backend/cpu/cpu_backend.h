/*
 * cpu_backend.h - the CPU backend's primitives, as backend_cpu.c's table
 * names them: one block per family, each implemented in its own file
 * under src/backend/cpu/.
 */
#ifndef AMPC_CPU_BACKEND_H
#define AMPC_CPU_BACKEND_H

#include "backend/backend.h"

/* ==== section pointwise ==== */
/* pointwise.c */
amp_status cpu_pointwise(amp_pw_op op, void *out, amp_dtype odt, int64_t n, int nin, const void *const *in,
                         const amp_dtype *idt, const be_pw_plan *plan, float s0);
amp_status cpu_convert(const void *src, amp_dtype sdt, void *dst, amp_dtype ddt, int64_t n);
amp_status cpu_accumulate(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n);
amp_status cpu_reduce_sum(const void *x, amp_dtype xdt, amp_shape shape, unsigned mask, double scale, void *out,
                          amp_dtype odt, int64_t out_n);
amp_status cpu_argmax(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, int64_t *out);
amp_status cpu_permute(const void *src, void *dst, size_t elem_size, int nd, const int64_t *od, const int64_t *ist);
amp_status cpu_copy_2d(const void *src, amp_dtype sdt, int64_t sld, int64_t soff, void *dst, amp_dtype ddt,
                       int64_t dld, int64_t doff, int64_t rows, int64_t cols);
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
