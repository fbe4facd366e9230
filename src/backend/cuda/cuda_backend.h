/*
 * cuda_backend.h - the CUDA backend's face to the rest of ampc: plain C
 * functions over raw device pointers, element counts and dtypes. The core
 * never includes a CUDA header; only the .cu files behind this one do.
 *
 * Everything is queued on one CUDA stream, in call order, so a kernel may
 * read what an earlier call wrote and a freed block may be handed to the
 * next allocation at once (the caching allocator's reuse is stream-ordered,
 * as PyTorch's). Calls that return data to the host (cuda_copy to the CPU,
 * cuda_synchronize) wait for the stream; nothing else does.
 *
 * Errors: every function that can fail returns an amp_status (or NULL) with
 * the thread's error set, naming the CUDA call and CUDA's message.
 *
 * The core reaches these functions only through the backend's table
 * (backend_cuda.c names them as the CUDA primitives of backend/backend.h),
 * and the public amp_cuda_* functions (device_api.c). The .c files here
 * compose kernels into the coarse primitives (conv2d as im2col + GEMM,
 * attention, the fused linear epilogues). A build without CUDA compiles
 * stub.c instead (what device_api.c and the table's availability need:
 * "ampc was built without CUDA").
 */
#ifndef AMPC_CUDA_BACKEND_H
#define AMPC_CUDA_BACKEND_H

#include "ampc.h"
#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- runtime */

/* CUDA devices usable (0 without a GPU, a driver, or a CUDA build). The
 * first call initialises device 0 and the stream. */
int cuda_device_count(void);
/* Why cuda_device_count() is 0, for error messages: "no CUDA device found
 * (...)" or "ampc was built without CUDA". */
const char *cuda_unavailable_reason(void);
/* The device this process uses (0, or its local rank modulo the devices
 * under an MPI launcher), and the backend's stream as a cudaStream_t
 * (for NCCL's side stream to order itself against: comm_nccl.c, through
 * the table's device_index and queue_handle). Both
 * start the device as cuda_device_count() does. */
int cuda_device_index(void);
void *cuda_stream_handle(void);

/* Device memory from the caching allocator: freed blocks are kept per size
 * class and handed to the next request of that class, so a training step
 * after the first calls cudaMalloc no more. NULL + AMP_ERR_MEMORY when the
 * device is full even after the cache was emptied. */
void *cuda_malloc(size_t nbytes);
void cuda_free(void *p);
amp_memory_stats cuda_memory_stats(void);
void cuda_memory_reset_peak(void);
/* Memory categories (mem_ledger.h): the class size a request of nbytes
 * takes, a live block's move to category c, the figures, and the bytes
 * per category now (the profiler's device memory counter: reads the
 * ledger only, never starts CUDA). */
size_t cuda_block_size(size_t nbytes);
void cuda_mem_retag(void *p, amp_mem_category c);
amp_status cuda_memory_categories(amp_memory_categories *out);
void cuda_memory_current(size_t cur[AMP_MEM_CATEGORY_COUNT]);
void cuda_empty_cache(void);
/* cudaMemGetInfo. */
amp_status cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* nbytes from src (on sdev) to dst (on ddev); any pair of CPU and CUDA. A
 * copy to the CPU waits for the stream (and the copy) to finish. */
amp_status cuda_copy(void *dst, amp_device ddev, const void *src, amp_device sdev, size_t nbytes);
/* Waits for everything queued so far. */
amp_status cuda_synchronize(void);
/* Device 0's compute capability as major * 10 + minor (90 for an H100 /
 * H200), 0 without a device. */
int cuda_compute_capability(void);
/* Kernel launches and cuBLASLt products queued since the start, for
 * bench_cuda's per-step count (0 without CUDA). */
uint64_t cuda_launch_count(void);

/* TF32 for f32 GEMMs (off by default). */
void cuda_set_tf32(bool on);
bool cuda_get_tf32(void);

/* ------------------------------------------------------- dtype kernels */
/* The functions below without a comment of their own are the CUDA
 * backend's table entries: backend.h's comment on the field of the same
 * name is their contract, and holds here. */

amp_status cuda_convert(const void *src, amp_dtype sdt, void *dst, amp_dtype ddt, int64_t n);
amp_status cuda_fill_pattern(void *dst, int64_t n, const void *elem, size_t elem_size);
amp_status cuda_iota_i64(int64_t *dst, int64_t n);

/* --------------------------------------------------------- AMP kernels */

/* One launch each, and no host synchronisation: the scale, found_inf,
 * the clip totals and the counts stay on the device until a getter copies
 * them out. The types are backend.h's. */

amp_status cuda_unscale(const be_buf *g, int n, const float *scale, float *found_inf);

amp_status cuda_grad_sumsq(const be_buf *g, int n, double *sumsq);
amp_status cuda_clip_by_sumsq(const be_buf *g, int n, const double *parts, int k, double max_norm, double *total,
                              float *total_f32);

amp_status cuda_scaler_update(float *scale, be_scaler_state *st, uint64_t records, be_scaler_opts o);
amp_status cuda_scaler_count(be_scaler_state *st, int rec);
amp_status cuda_count_nonfinite(const void *x, amp_dtype dt, int64_t n, int64_t *count);

/* The fused optimizers: one launch for every parameter. */
typedef be_optim_param cuda_param;
typedef be_sgd_opts cuda_sgd_opts;
typedef be_adam_opts cuda_adam_opts;

amp_status cuda_sgd_step(const cuda_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                         cuda_sgd_opts o);
amp_status cuda_adam_step(const cuda_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                          cuda_adam_opts o);

/* ----------------------------------------------------------------- ops */
/* The op kernels (built with CUDA). Shapes are row-major and
 * contiguous unless strides are given; float kernels compute in f32 (sums
 * in double) and round once into the output dtype. */

#define CUDA_EW_MAX_IN BE_PW_MAX_IN
#define CUDA_MAX_DIMS BE_MAX_DIMS


/* The pointwise plan is the backend interface's (backend.h). */
typedef be_pw_plan cuda_ew_plan;

amp_status cuda_ew(amp_pw_op op, void *out, amp_dtype odt, int64_t n, int nin, const void *const *in,
                   const amp_dtype *idt, const be_pw_plan *plan, float s0);
amp_status cuda_accumulate(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n);

/* A reduction: the kept dims (sizes, input strides) index the outputs in
 * order, the reduced dims (sizes, input strides) what each one sums. */
typedef struct {
    int nk, nr;
    int64_t kd[CUDA_MAX_DIMS], ks[CUDA_MAX_DIMS];
    int64_t rd[CUDA_MAX_DIMS], rs[CUDA_MAX_DIMS];
} cuda_reduce_plan;
/* out[j] = scale * sum (in double), rounded into odt. */
amp_status cuda_reduce_sum(const void *x, amp_dtype xdt, const cuda_reduce_plan *plan, double scale, void *out,
                           amp_dtype odt);
amp_status cuda_reduce_sum_dims(const void *x, amp_dtype xdt, amp_shape shape, unsigned mask, double scale, void *out,
                                amp_dtype odt, int64_t out_n);

amp_status cuda_softmax(const void *x, amp_dtype xdt, void *y, amp_dtype ydt, int64_t outer, int64_t len,
                        int64_t inner, bool log);
amp_status cuda_softmax_backward(const void *g, amp_dtype gdt, const void *y, amp_dtype ydt, void *gx,
                                 amp_dtype gxdt, int64_t outer, int64_t len, int64_t inner, bool log);

amp_status cuda_cross_entropy(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N,
                              int64_t C, int64_t ignore, float *stats, float *count, void *out, amp_dtype odt);
amp_status cuda_cross_entropy_backward(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N,
                                       int64_t C, int64_t ignore, const float *stats, const float *count,
                                       const void *g, amp_dtype gdt, void *gx, amp_dtype gxdt);

amp_status cuda_layer_norm(const void *x, amp_dtype xdt, const void *w, amp_dtype wdt, const void *b,
                           amp_dtype bdt, int64_t M, int64_t N, double eps, void *y, amp_dtype ydt, float *mean,
                           float *rstd);
amp_status cuda_layer_norm_backward(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *w,
                                    amp_dtype wdt, const float *mean, const float *rstd, int64_t M, int64_t N,
                                    void *dx, amp_dtype dxdt, void *dw, amp_dtype dwdt, void *db, amp_dtype dbdt);

amp_status cuda_embedding(const void *w, amp_dtype wdt, const void *idx, amp_dtype idt, int64_t nidx, int64_t V,
                          int64_t D, void *out);
amp_status cuda_embedding_backward(const void *g, amp_dtype gdt, const void *idx, amp_dtype idt, int64_t nidx,
                                   int64_t V, int64_t D, float *dw);

amp_status cuda_argmax(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, int64_t *out);

amp_status cuda_permute(const void *src, void *dst, size_t elem_size, int nd, const int64_t *od,
                        const int64_t *ist);

amp_status cuda_copy_2d(const void *src, amp_dtype sdt, int64_t sld, int64_t soff, void *dst, amp_dtype ddt,
                        int64_t dld, int64_t doff, int64_t rows, int64_t cols);

amp_status cuda_dropout(const void *src, void *dst, amp_dtype dt, int64_t n, double p, uint64_t seed,
                        uint64_t first);

/* C = alpha op(A) op(B) + beta C, row-major, batch products with element
 * strides sa / sb / sc (0 = shared). A and B have dtype abdt, C cdt (abdt,
 * or f32 for 16-bit abdt). Through cuBLASLt: 16-bit inputs accumulate in
 * f32 on tensor cores; f32 uses TF32 only when allowed. */
amp_status cuda_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                     int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, void *C, int64_t ldc,
                     int64_t sc, int64_t batch, amp_dtype abdt, amp_dtype cdt);

/* What cuda_gemm_epilogue applies to the f32 product before rounding. */
typedef enum {
    CUDA_EPI_NONE = 0,
    CUDA_EPI_BIAS,          /* + bias[j] on every row of C */
    CUDA_EPI_RELU,          /* max(x, 0) */
    CUDA_EPI_RELU_BIAS,     /* max(x + bias[j], 0) */
    CUDA_EPI_GELU,          /* gelu(x), the tanh approximation */
    CUDA_EPI_GELU_BIAS,     /* gelu(x + bias[j]) */
    CUDA_EPI_GELU_AUX,      /* gelu(x), and x itself into aux */
    CUDA_EPI_GELU_AUX_BIAS, /* gelu(x + bias[j]), and x + bias[j] into aux */
    CUDA_EPI_COUNT
} cuda_epilogue;

/* C [M, N] = ep(op(A) op(B)), one row-major GEMM (alpha 1, beta 0: C is
 * only written) with a cuBLASLt epilogue; bias [N] (dtype cdt, contiguous)
 * is added to every row of C. The _AUX epilogues also write the GELU's
 * input, rounded to cdt, into aux [M, N] (row-major, row stride ldaux
 * elements, which cuBLASLt wants a multiple of 8 and >= N; aux is
 * ignored by the other epilogues). *taken = false, AMP_OK and C (and aux)
 * untouched when cuBLASLt refuses the epilogue for this shape / dtype /
 * alignment (or there is nothing to compute, or ldaux does not fit): the
 * caller then runs its unfused path. NaN: cuBLASLt's relu is documented
 * as max(x, 0), whose NaN result is not specified (ampc's relu keeps
 * NaN). cuBLASLt's GELU is its own implementation of the tanh form:
 * within rounding of ampc's gelu kernel, not bit for bit. */
amp_status cuda_gemm_epilogue(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                              const void *B, int64_t ldb, void *C, int64_t ldc, amp_dtype abdt, amp_dtype cdt,
                              cuda_epilogue ep, const void *bias, void *aux, int64_t ldaux, bool *taken);
/* How many cuda_gemm_epilogue calls cuBLASLt took with epilogue ep since
 * the process started (the tests check that the fused paths really run). */
uint64_t cuda_gemm_epilogues_taken(cuda_epilogue ep);

/* Attention helpers over S [heads, T, T] f32. Forward: softmax of each row
 * of S [heads, T, Tk] (only the first i+1+Tk-T entries of row i when
 * causal, the rest 0: the queries are the last T of Tk positions) into P
 * (pdt), and lse[row] = max + log(sum) when lse is non-NULL. */
amp_status cuda_attn_softmax(const float *S, int64_t heads, int64_t T, int64_t Tk, bool causal, void *P,
                             amp_dtype pdt, float *lse);
/* P = exp(S - lse) (masked entries 0) in place, f32, and a copy in pdt
 * when Pc is non-NULL. */
amp_status cuda_attn_probs(float *S, int64_t heads, int64_t T, bool causal, const float *lse, void *Pc,
                           amp_dtype pdt);
/* dS = scale * P * (dP - rowsum(P * dP)) in place of dP (masked 0). */
amp_status cuda_attn_dscores(const float *P, float *dP, int64_t heads, int64_t T, bool causal, float scale);

/* The backend table's linalg primitives (backend/backend.h), composed of
 * the kernels above in linalg.c: gemm over cuda_gemm / cuda_gemm_epilogue
 * (the unfused path where cuBLASLt refuses an epilogue), the bias
 * gradient as a cuda_reduce_sum, attention as strided-batch GEMMs around
 * the cuda_attn_* kernels. */
amp_status cuda_linalg_gemm(const be_gemm_desc *g);
amp_status cuda_linalg_bias_grad(const void *dy, amp_dtype dt, int64_t rows, int64_t cols, void *db, amp_dtype dbdt);
amp_status cuda_attention(const be_attn_desc *a);
amp_status cuda_attention_backward(const be_attn_desc *a);

/* conv2d as implicit GEMM (conv.cu's kernels, composed in conv.c):
 * images [cnt, C, H, W] lowered to a column matrix cols [C*kh*kw, cnt*L]
 * (L = Ho*Wo; image i owns columns i*L .. i*L+L-1, as the CPU backend lays
 * them out), the GEMMs through cuda_gemm, and the way back. The geometry
 * is backend.h's be_conv_geom (its N and O unused by the kernels). */
/* cols (x's dtype dt) = im2col of the cnt images at x; 0 off the image. */
amp_status cuda_im2col(const void *x, amp_dtype dt, const be_conv_geom *g, int64_t cnt, void *cols);
/* y[i][o][l] = acc[o][i*L + l] (+ bias[o]) for cnt images of O channels,
 * added in f32 and rounded once into ydt (bias may be NULL). */
amp_status cuda_conv_output(const float *acc, int64_t O, int64_t cnt, int64_t L, const void *bias, amp_dtype bdt,
                            void *y, amp_dtype ydt);
/* The adjoint of im2col: each element of the cnt images dx (dxdt) is the
 * f32 sum of the dcols [C*kh*kw, cnt*L] entries it was copied to, over
 * the kernel taps in order (one thread per element, no atomics), rounded
 * once. Every element of dx is written. */
amp_status cuda_col2im(const float *dcols, const be_conv_geom *g, int64_t cnt, void *dx, amp_dtype dxdt);
/* The backend table's conv2d and conv2d_backward (backend.h). */
amp_status cuda_conv2d(const be_conv_geom *g, const void *x, const void *w, const void *bias, amp_dtype dt,
                       be_epilogue act, void *y);
amp_status cuda_conv2d_backward(const be_conv_geom *g, const void *gy, const void *x, const void *w, amp_dtype dt,
                                void *dx, void *dw, void *db);

/* The backend table's pool2d and pool2d_backward (backend.h; the CPU
 * backend's semantics element for element). Backward: one thread per
 * input element, f32 sums in output order, one rounding. */
amp_status cuda_pool2d(const be_pool_geom *g, bool is_max, const void *x, amp_dtype dt, void *y, int32_t *idx);
amp_status cuda_pool2d_backward(const be_pool_geom *g, const void *gy, amp_dtype gdt, const int32_t *idx, void *dx,
                                amp_dtype dxdt);

/* --------------------------------------------------------------- profiler */

/* The profiler's device timer for CUDA (profile.cu): a mark is a CUDA
 * event recorded on the stream, taken from a pool made once and reused;
 * the marks are turned into host-clock ns at amp_profiler_stop, against a
 * base event recorded (and waited for, outside any step) at the start. No
 * call here waits for the GPU inside a step. The runtime registers the
 * timer (cuda_prof_register, prof_cuda.c) when the device starts. */
int32_t cuda_prof_mark(void);
void cuda_prof_resolve(const int32_t *marks, int n, int64_t *ns_out);
void cuda_prof_reset(void);
void cuda_prof_register(void);
/* A named kernel or cuBLASLt call inside an op, as a PROF_KERNEL event on
 * CUDA (NULL when the profiler is off): begin before the launch, end after
 * it with the GEMM's sizes (a [M, K] x [K, N] product, batch of them, in
 * abdt into cdt) for its dtypes, shapes and FLOPs. */
void *cuda_prof_kernel_begin(const char *name);
void cuda_prof_gemm_end(void *e, int64_t M, int64_t N, int64_t K, int64_t batch, amp_dtype abdt, amp_dtype cdt);

#ifdef __cplusplus
}
#endif
#endif
