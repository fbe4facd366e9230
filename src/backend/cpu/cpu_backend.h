/*
 * cpu_backend.h - the CPU backend's primitives, as backend_cpu.c's table
 * names them: one block per family, each implemented in its own file
 * under src/backend/cpu/.
 */
#ifndef AMPC_CPU_BACKEND_H
#define AMPC_CPU_BACKEND_H

#include "backend/backend.h"

/* pointwise */
/* pointwise.c */
/* n values of dt as f32: p itself when dt is f32, else widened into a new
 * buffer (*tmp, amp_free'd by the caller). NULL when out of memory. */
const float *cpu_as_f32(const void *p, amp_dtype dt, int64_t n, float **tmp);
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

/* linalg */
/* linalg.c: gemm over gemm.h's GEMMs, the bias gradient's column sums. */
amp_status cpu_gemm(const be_gemm_desc *g);
amp_status cpu_bias_grad(const void *dy, amp_dtype dt, int64_t rows, int64_t cols, void *db, amp_dtype dbdt);
/* attention.c: scaled dot-product attention, one head at a time. */
amp_status cpu_attention(const be_attn_desc *a);
amp_status cpu_attention_backward(const be_attn_desc *a);
/* bf16 attention's products: on VDPBF16PS where it outruns f32 FMA (AUTO:
 * AMD), always where the CPU has it (ON), or never (OFF); for tests. */
typedef enum { CPU_ATTN_DOT_AUTO, CPU_ATTN_DOT_ON, CPU_ATTN_DOT_OFF } cpu_attn_dot;
void cpu_attention_set_bf16_dot(cpu_attn_dot mode);

/* nn */
/* softmax.c: softmax, log_softmax and cross_entropy rows. */
amp_status cpu_softmax(const void *x, amp_dtype xdt, void *y, amp_dtype ydt, int64_t outer, int64_t len,
                       int64_t inner, bool log);
amp_status cpu_softmax_backward(const void *g, amp_dtype gdt, const void *y, amp_dtype ydt, void *gx,
                                amp_dtype gxdt, int64_t outer, int64_t len, int64_t inner, bool log);
amp_status cpu_cross_entropy(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N, int64_t C,
                             int64_t ignore, float *stats, float *count, void *out, amp_dtype odt);
amp_status cpu_cross_entropy_backward(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N,
                                      int64_t C, int64_t ignore, const float *stats, const float *count,
                                      const void *g, amp_dtype gdt, void *gx, amp_dtype gxdt);
/* norm.c: layer_norm. */
amp_status cpu_layer_norm(const void *x, amp_dtype xdt, const void *w, amp_dtype wdt, const void *b,
                          amp_dtype bdt, int64_t M, int64_t N, double eps, void *y, amp_dtype ydt, float *mean,
                          float *rstd);
amp_status cpu_layer_norm_backward(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *w,
                                   amp_dtype wdt, const float *mean, const float *rstd, int64_t M, int64_t N,
                                   void *dx, amp_dtype dxdt, void *dw, amp_dtype dwdt, void *db, amp_dtype dbdt);
amp_status cpu_add_layer_norm(const void *x, amp_dtype xdt, const void *res, amp_dtype rdt, const void *w,
                              amp_dtype wdt, const void *b, amp_dtype bdt, int64_t M, int64_t N, double eps,
                              void *sum, amp_dtype sdt, void *y, amp_dtype ydt, float *mean, float *rstd);
amp_status cpu_layer_norm_backward_add(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *w,
                                       amp_dtype wdt, const float *mean, const float *rstd, int64_t M, int64_t N,
                                       void *dx, amp_dtype dxdt, void *dw, amp_dtype dwdt, void *db,
                                       amp_dtype dbdt);
/* embedding.c: embedding and dropout. */
amp_status cpu_embedding(const void *w, amp_dtype wdt, const void *idx, amp_dtype idt, int64_t nidx, int64_t V,
                         int64_t D, void *out);
amp_status cpu_embedding_backward(const void *g, amp_dtype gdt, const void *idx, amp_dtype idt, int64_t nidx,
                                  int64_t V, int64_t D, float *dw);
amp_status cpu_dropout(const void *src, void *dst, amp_dtype dt, int64_t n, double p, uint64_t seed,
                       uint64_t first);

/* conv */
/* conv.c */
amp_status cpu_conv2d(const be_conv_geom *g, const void *x, const void *w, const void *bias, amp_dtype dt,
                      be_epilogue act, void *y);
amp_status cpu_conv2d_backward(const be_conv_geom *g, const void *gy, const void *x, const void *w, amp_dtype dt,
                               void *dx, void *dw, void *db);
/* conv2d's tuning knob, for tests: conv2d lowers a group of images to one
 * column matrix and runs one GEMM per group, each group on one thread; a
 * group is as many images as fit a per-thread scratch budget (default 1
 * MiB, about a core's L2 share). Sets the budget in bytes (0 restores the
 * default) and returns the previous one; tests lower it to reach the
 * many-group paths with small inputs. Not thread-safe: call it between
 * steps. */
size_t conv_set_cols_budget(size_t bytes);
/* pool.c */
amp_status cpu_pool2d(const be_pool_geom *g, bool is_max, const void *x, amp_dtype dt, void *y, int32_t *idx);
amp_status cpu_pool2d_backward(const be_pool_geom *g, const void *gy, amp_dtype gdt, const int32_t *idx, void *dx,
                               amp_dtype dxdt);

/* amp */
/* amp.c: the scaler, non-finite count and clip_grad_norm on host memory. */
amp_status cpu_unscale(const be_buf *g, int n, const float *scale, float *found_inf);
amp_status cpu_count_nonfinite(const void *x, amp_dtype dt, int64_t n, int64_t *count);
amp_status cpu_scaler_update(float *scale, be_scaler_state *st, uint64_t records, be_scaler_opts o);
amp_status cpu_scaler_count(be_scaler_state *st, int rec);
amp_status cpu_grad_sumsq(const be_buf *g, int n, double *sumsq);
amp_status cpu_clip_by_sumsq(const be_buf *g, int n, const double *parts, int k, double max_norm, double *total,
                             float *total_f32);

/* optim */
/* optim.c: the multi-tensor SGD and Adam / AdamW steps over host memory
 * (backend.h's sgd_step / adam_step; found_inf and steps are host memory). */
amp_status cpu_sgd_step(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                        be_sgd_opts o);
amp_status cpu_adam_step(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                         be_adam_opts o);

#endif
