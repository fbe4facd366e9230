/*
 * backend.h - the one interface between the device-neutral core (tensor,
 * ops, autograd, amp, optim, nn, io) and a device's kernels.
 *
 * A backend is one struct of function pointers (amp_backend) per device,
 * registered in one table (registry.c). Every primitive takes raw pointers
 * to the backend's own memory, element counts, dtypes and small geometry
 * structs; none takes a tensor, a node or an autocast state, so a backend
 * knows nothing of the layers above it. The core asks backend_of(device)
 * for the table and calls through it; it never includes a device header.
 *
 * A NULL field is a primitive the backend lacks: BACKEND_CALL turns the
 * call into an AMP_ERR_DEVICE error naming the caller, the primitive and
 * the device ("linear: the cuda backend has no gemm"), never a crash.
 * supports_op answers, per op-table row, whether the backend runs that op
 * (forward and backward); op_apply refuses an op a backend does not
 * support before any work is done, and the table-driven op test
 * (tests/test_backend_ops.c) checks that the answer is honest.
 *
 * Numerics, every backend: float kernels read 16-bit data as f32, compute
 * in f32 (sums in double where the CPU reference does) and round once into
 * the output dtype.
 *
 * Adding a backend: a folder under src/backend/ that defines one
 * `const amp_backend amp_backend_<name>` and one line in registry.c.
 */
#ifndef AMPC_BACKEND_H
#define AMPC_BACKEND_H

#include "ampc.h"
#include "backend/pointwise.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dims of a shape, and most operands of a pointwise primitive. */
#define BE_MAX_DIMS 8
#define BE_PW_MAX_IN 4

/* ------------------------------------------------------ plans / geometry */

/* A pointwise op's iteration: the output's (simplified) shape, nd dims of
 * d, and each input's element strides along it (0 where it is broadcast). */
typedef struct {
    int nd;
    int64_t d[BE_MAX_DIMS];
    int64_t st[BE_PW_MAX_IN][BE_MAX_DIMS];
} be_pw_plan;

/* ---- types: linalg -------------------------------------------------------- */
/* What gemm applies to the f32 product (plus bias) before its one
 * rounding into C. */
typedef enum {
    BE_EPI_NONE = 0,
    BE_EPI_RELU, /* max(x, 0) as the relu op computes it: NaN kept, -0 -> +0 */
    BE_EPI_GELU, /* gelu_tanh(x) into C, and when aux is not NULL x itself
                  * (rounded to C's dtype) into aux: the pre-activation
                  * that backward reads */
} be_epilogue;

/* One (batched) row-major product: for b in [0, batch), with A, B, C
 * advanced by sa, sb, sc elements (0: shared by every b),
 *     C_b = ep(alpha op(A_b) op(B_b) + beta C_b + bias)
 * op(A) is M x K (A stored K x M when ta), op(B) K x N (B stored N x K
 * when tb); lda, ldb, ldc are row strides in elements; beta 0 never reads
 * C. A and B have one float dtype (adt == bdt; the CPU also takes mixed
 * f32 / 16-bit), C any float dtype; the product accumulates in f32 and
 * each output is rounded once.
 * bias (N values of cdt, added to every row) and an epilogue other than
 * NONE: alpha 1, beta 0, batch 1 only; aux [M, N] at row stride ldaux.
 * weight_grad says that this is a linear layer's dW = dYᵀ X (ta, not tb,
 * A = dY [K, M] contiguous): a hint a backend may use to lay dYᵀ out first
 * (the CPU widens an f16 one up front); it never changes the result's
 * definition.
 * c_rounded (backends with gemm_rounds_c only): C is f32 and each output
 * is rounded to A's 16-bit dtype before it is stored, so C holds a 16-bit
 * C's bits widened (a weight gradient made for its f32 master in one
 * pass; autograd_grad_dtype in graph.h). */
typedef struct {
    bool ta, tb;
    int64_t M, N, K, batch;
    float alpha, beta;
    const void *A, *B;
    void *C;
    int64_t lda, ldb, ldc, sa, sb, sc;
    amp_dtype adt, bdt, cdt;
    const void *bias;
    be_epilogue ep;
    void *aux;
    int64_t ldaux;
    bool weight_grad;
    bool c_rounded;
} be_gemm_desc;

/* Scaled dot-product attention over `heads` [T, D] slices of q, k, v (one
 * float dtype dt): out = softmax(scale q kᵀ [+ causal mask]) v.
 * Scores, mask and softmax are f32; lse [heads, T] (f32) holds each row's
 * log-sum-exp: written by attention when not NULL, read by
 * attention_backward, which rebuilds the probabilities from it. Backward
 * writes dQ, dK, dV (dt) into gq, gk, gv, each NULL when not wanted; out
 * (the forward's result) is read by the CPU's backward, NULL elsewhere.
 * Layout of q, k, v, out, gout, gq, gk, gv: row t of head h starts at
 * element (h / hgroup) * T * ld + (h % hgroup) * D + t * ld. hgroup = 0
 * and ld = 0 (read as 1 and D) are contiguous [heads, T, D] slices, the
 * only layout the CUDA backend takes; hgroup = H, ld = H * D is
 * [B, T, H, D] (heads = B * H), which the CPU backend reads in place.
 * out_ld > 0 (CPU only): out and gout have row stride out_ld in that
 * layout instead of ld, so q, k, v (and gq, gk, gv) can be the three
 * thirds of one fused [B, T, 3, H, D] projection (ld = 3 H D, out_ld =
 * H D); 0: ld.
 * Cached attention (a generating model's KV cache; forward only): Tk > 0
 * keys and values per head, row t of head h of k and v at h * D + t *
 * kv_ld ([Tk, heads, D], every backend), and query row t sees keys
 * 0 .. t + Tk - T when causal (the queries are the last T positions);
 * Tk = 0: k and v laid out as q, Tk = T. */
typedef struct {
    int64_t heads, T, D;
    int64_t hgroup, ld, out_ld;
    int64_t Tk, kv_ld;
    bool causal;
    float scale;
    amp_dtype dt;
    const void *q, *k, *v;
    void *out;         /* attention; read by the CPU's backward */
    float *lse;
    const void *gout;  /* attention_backward */
    void *gq, *gk, *gv;
} be_attn_desc;

/* ---- types: nn ------------------------------------------------------------ */

/* ---- types: conv ---------------------------------------------------------- */
/* A 2-D convolution: x [N, C, H, W] with w [O, C, kh, kw] into y [N, O,
 * Ho, Wo], one stride and one zero padding on both axes (conv2d_infer in
 * src/ops/infer.c makes it). */
typedef struct {
    int64_t N, C, H, W, O, kh, kw, stride, pad, Ho, Wo;
} be_conv_geom;

/* A pool over `planes` planes of H x W: k x k windows, stride, zero
 * padding (pool_infer makes it). Windows are clipped to the image; max
 * lets the first maximum win ties and a NaN win over numbers; avg divides
 * by k*k, padding included (PyTorch's count_include_pad). */
typedef struct {
    int64_t planes, H, W, k, stride, pad, Ho, Wo;
} be_pool_geom;

/* ---- types: amp ----------------------------------------------------------- */
#define BE_SCALER_HISTORY 64
#define BE_SCALER_MAX_RECORDS 64

/* The grad scaler's state, in the memory of the backend it runs on (the
 * scale itself is a 0-d f32 tensor beside it): what unscale, the guarded
 * step and update read and write, so an iteration never waits for the
 * device. The host copies it out (the backend's copy) when asked: the
 * getters, update_to, state_load. Plain fixed-size fields: the same layout
 * in C and C++. */
typedef struct {
    int64_t tracker;
    int64_t hysteresis_left;
    int64_t updates;
    int64_t steps, skipped;
    int64_t skip_streak; /* updates in a row that found inf/NaN (0 after a clean one) */
    int64_t hist_len;
    int64_t hist_update[BE_SCALER_HISTORY];
    float hist_old[BE_SCALER_HISTORY];
    float hist_new[BE_SCALER_HISTORY];
    float found_inf[BE_SCALER_MAX_RECORDS]; /* per optimizer record: 0 or 1 */
} be_scaler_state;

/* The options the update rule needs (amp_scaler_opts). */
typedef struct {
    double growth_factor, backoff_factor, min_scale, max_scale;
    int64_t growth_interval;
    int hysteresis;
} be_scaler_opts;

/* One tensor's data in the backend's memory, as the multi-tensor
 * primitives (unscale, grad_sumsq, clip_by_sumsq) take a list of them. */
typedef struct {
    void *p;
    int64_t n;
    amp_dtype dt;
} be_buf;

/* ---- types: optim --------------------------------------------------------- */
/* One parameter of a multi-tensor optimizer step, in the backend's memory:
 * its data and gradient (float dtypes pdt, gdt; n elements each), up to
 * three state buffers shaped like it in the optimizer's slot order, in
 * dtype sdt (f32, or bf16: loaded to f32, updated, rounded to nearest-even
 * on store; NULL where the options need none), its f32 master copy (Apex
 * O2: the update runs on master in place and p gets it rounded; NULL: the
 * update runs on p itself), its index in the step counters, and cast: n
 * elements of cast_dt (16-bit) that also receive the updated value,
 * converted as the backend's convert would (autocast's kept copy of the
 * weight, its next cast made in the same pass; NULL: none), and its weight
 * decay (its parameter group's: amp_optim_set_weight_decay). A backend
 * whose table's optim_writes_cast is false never gets a cast. */
typedef struct {
    void *p;
    const void *g;
    void *s0, *s1, *s2;
    float *master;
    int64_t n;
    amp_dtype pdt, gdt, sdt;
    int index;
    void *cast;
    amp_dtype cast_dt;
    double weight_decay;
} be_optim_param;

/* SGD's constants, as f32 (torch.optim's SGD runs in the parameter's f32;
 * the weight decay is each parameter's, be_optim_param). sr: bf16 state is
 * stored with stochastic rounding (round_rule.h); wsr: so is a bf16
 * parameter without an f32 master (state slot 3 of round_rule.h's bits). */
typedef struct {
    float lr, momentum, one_minus_dampening;
    bool nesterov, sr, wsr;
} be_sgd_opts;

/* Adam's (decoupled: AdamW); amsgrad uses s2 as the running maximum; sr,
 * wsr and the weight decay as SGD's. */
typedef struct {
    double lr, beta1, beta2, eps;
    bool decoupled, amsgrad, sr, wsr;
} be_adam_opts;

/* ------------------------------------------------------------ the table */

typedef struct amp_backend {
    const char *name;  /* "cpu", "cuda": in every error message */
    amp_device device;
    /* Whether sgd_step / adam_step write be_optim_param.cast. */
    bool optim_writes_cast;
    /* Whether gemm takes be_gemm_desc.c_rounded. */
    bool gemm_rounds_c;

    /* ---- availability --------------------------------------------- */
    /* Whether the device can run now (a CUDA build on a machine with a
     * GPU); why not, for error messages. */
    bool (*available)(void);
    const char *(*unavailable_reason)(void);
    /* Whether this backend runs op-table row `op` (OP_* of ops.h),
     * forward and backward, for the inputs' dtypes in dts[0..n); NULL:
     * every row, in every float dtype. */
    bool (*supports_op)(int op, const amp_dtype *dts, int n);

    /* What autocast lowers to on this device by default (f16 or bf16). */
    amp_dtype autocast_dtype;
    /* Whether autocast may lower to target (f16 or bf16) on this device:
     * AMP_OK, or the error that refuses the region (a GPU without bf16).
     * NULL: every 16-bit dtype is fine. */
    amp_status (*autocast_check)(amp_dtype target);

    /* ---- memory ----------------------------------------------------- */
    /* From the backend's (caching) allocator; NULL + AMP_ERR_MEMORY. */
    void *(*alloc)(size_t nbytes);
    void (*free)(void *p);
    /* nbytes between any two devices one of which is this backend's (the
     * other may be AMP_CPU); a copy to the host waits for the data. */
    amp_status (*copy)(void *dst, amp_device ddev, const void *src, amp_device sdev, size_t nbytes);
    /* n copies of the elem_size-byte pattern at host address elem. */
    amp_status (*fill)(void *dst, int64_t n, const void *elem, size_t elem_size);
    /* n elements from src (sdt) to dst (ddt), amp_convert's semantics. */
    amp_status (*convert)(const void *src, amp_dtype sdt, void *dst, amp_dtype ddt, int64_t n);
    /* dst[i] = i (index tensors made in place: the GPT's positions). */
    amp_status (*iota_i64)(int64_t *dst, int64_t n);
    /* Waits for everything queued so far (no-op on a synchronous device). */
    amp_status (*synchronize)(void);
    /* For an engine that orders its own work against this backend's
     * (NCCL: src/comm/comm_nccl.c): the device this process uses, and the
     * queue everything here runs on as its native handle (a
     * cudaStream_t). NULL on a synchronous device. */
    int (*device_index)(void);
    void *(*queue_handle)(void);
    amp_memory_stats (*memory_stats)(void);
    void (*memory_reset_peak)(void);
    void (*empty_cache)(void);
    /* Memory categories (record/mem_ledger.h): the bytes a request of
     * nbytes takes from the allocator (its size class); a live block's
     * move to category c (p from alloc); the allocator's figures, read
     * without starting the device. */
    size_t (*mem_block_size)(size_t nbytes);
    void (*mem_retag)(void *p, amp_mem_category c);
    amp_status (*memory_categories)(amp_memory_categories *out);

    /* ---- elementwise, reductions, layout ----------------------------- */
    /* out[i] = pw_eval(op, in...) for the n elements of the contiguous
     * output (formulas: backend/pointwise.h). */
    amp_status (*pointwise)(amp_pw_op op, void *out, amp_dtype odt, int64_t n, int nin, const void *const *in,
                            const amp_dtype *idt, const be_pw_plan *plan, float s0);
    /* dst[i] += src[i] in dst's dtype (f32 arithmetic, one rounding):
     * autograd's gradient accumulation. */
    amp_status (*accumulate)(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n);
    /* out (out_n elements, odt) = scale * the sum (in double) of the
     * contiguous x of the given shape over the dims whose bit is set in
     * mask, the kept dims' elements in order; fixed summation order (the
     * same bits whatever the number of threads). */
    amp_status (*reduce_sum)(const void *x, amp_dtype xdt, amp_shape shape, unsigned mask, double scale, void *out,
                             amp_dtype odt, int64_t out_n);
    /* [outer, len, inner] -> i64 index of the largest along len (first
     * wins; a NaN wins). */
    amp_status (*argmax)(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, int64_t *out);
    /* dst (contiguous, out dims od[0..nd)) from src at element strides ist. */
    amp_status (*permute)(const void *src, void *dst, size_t elem_size, int nd, const int64_t *od,
                          const int64_t *ist);
    /* dst[r*dld + doff + c] = convert(src[r*sld + soff + c]); sld 0 repeats
     * one source row. */
    amp_status (*copy_2d)(const void *src, amp_dtype sdt, int64_t sld, int64_t soff, void *dst, amp_dtype ddt,
                          int64_t dld, int64_t doff, int64_t rows, int64_t cols);

    /* ---- linalg ---------------------------------------------------- */
    /* C = ep(alpha op(A) op(B) + beta C [+ bias]), batched, row-major;
     * see be_gemm_desc. */
    amp_status (*gemm)(const be_gemm_desc *g);
    /* db [cols] (dbdt) = the column sums of dy [rows, cols] (dt), rounded
     * once: a linear layer's bias gradient. Not reduce_sum: the CPU's
     * sums f32 blocks of rows, the blocks added in double (vectorised, the
     * same for any thread count), and keeps those bits; CUDA's is its
     * reduce_sum. */
    amp_status (*bias_grad)(const void *dy, amp_dtype dt, int64_t rows, int64_t cols, void *db, amp_dtype dbdt);
    /* Scaled dot-product attention and its gradients; see be_attn_desc. */
    amp_status (*attention)(const be_attn_desc *a);
    amp_status (*attention_backward)(const be_attn_desc *a);

    /* ---- nn -------------------------------------------------------- */
    /* Softmax / log_softmax of x seen as [outer, len, inner] along len. */
    amp_status (*softmax)(const void *x, amp_dtype xdt, void *y, amp_dtype ydt, int64_t outer, int64_t len,
                          int64_t inner, bool log);
    /* gx = y * (g - sum(g * y)) or, for log, g - exp(y) * sum(g). */
    amp_status (*softmax_backward)(const void *g, amp_dtype gdt, const void *y, amp_dtype ydt, void *gx,
                                   amp_dtype gxdt, int64_t outer, int64_t len, int64_t inner, bool log);
    /* Cross-entropy of logits [N, C] against labels [N] (i32/i64): the
     * mean over rows whose label is not `ignore` into out (0-d, odt; NaN
     * when none counts), the number of those rows into *count ([1] f32),
     * and, when stats is not NULL, each row's max and log-sum-exp ([N, 2]
     * f32). A label outside [0, C): the CPU fails with AMP_ERR_ARG naming
     * it; CUDA gives a NaN loss (checking would wait for the GPU). */
    amp_status (*cross_entropy)(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt, int64_t N,
                                int64_t C, int64_t ignore, float *stats, float *count, void *out, amp_dtype odt);
    /* gx[i, c] = (softmax(x_i)[c] - [c == label_i]) * g / *count, 0 for
     * ignored rows; g is the loss's 0-d gradient (gdt), stats and count
     * the forward's. */
    amp_status (*cross_entropy_backward)(const void *x, amp_dtype xdt, const void *labels, amp_dtype ldt,
                                         int64_t N, int64_t C, int64_t ignore, const float *stats,
                                         const float *count, const void *g, amp_dtype gdt, void *gx,
                                         amp_dtype gxdt);
    /* layer_norm over M rows of N: y = (x - mean) * rstd [* w] [+ b] (w, b
     * [N] or NULL, each in its own dtype); each row's mean and rstd = 1 /
     * sqrt(biased var + eps) ([M] f32) are written when not NULL. */
    amp_status (*layer_norm)(const void *x, amp_dtype xdt, const void *w, amp_dtype wdt, const void *b,
                             amp_dtype bdt, int64_t M, int64_t N, double eps, void *y, amp_dtype ydt, float *mean,
                             float *rstd);
    /* From g and the forward's x, w, mean, rstd: dx [M, N], dw and db
     * ([N]), each may be NULL (not wanted) and each in its own dtype. */
    amp_status (*layer_norm_backward)(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt, const void *w,
                                      amp_dtype wdt, const float *mean, const float *rstd, int64_t M, int64_t N,
                                      void *dx, amp_dtype dxdt, void *dw, amp_dtype dwdt, void *db,
                                      amp_dtype dbdt);
    /* Optional (NULL: ops compose add and layer_norm). sum [M, N] (sdt) =
     * x + res (f32 sum, rounded once), then layer_norm of the rounded sum
     * as layer_norm does, in one pass: the same bits as the two. */
    amp_status (*add_layer_norm)(const void *x, amp_dtype xdt, const void *res, amp_dtype rdt, const void *w,
                                 amp_dtype wdt, const void *b, amp_dtype bdt, int64_t M, int64_t N, double eps,
                                 void *sum, amp_dtype sdt, void *y, amp_dtype ydt, float *mean, float *rstd);
    /* Optional (NULL: layer_norm_backward, then accumulate). As
     * layer_norm_backward, but dx (not NULL) holds a gradient already and
     * gets this one added: dx rounded to dxdt, added in f32, rounded once,
     * the same bits as accumulate. */
    amp_status (*layer_norm_backward_add)(const void *g, amp_dtype gdt, const void *x, amp_dtype xdt,
                                          const void *w, amp_dtype wdt, const float *mean, const float *rstd,
                                          int64_t M, int64_t N, void *dx, amp_dtype dxdt, void *dw,
                                          amp_dtype dwdt, void *db, amp_dtype dbdt);
    /* out [nidx, D] (wdt) = rows idx[i] (i32/i64) of w [V, D]. An index
     * outside [0, V): the CPU fails with AMP_ERR_ARG naming it; CUDA gives
     * a NaN row (checking would wait for the GPU). */
    amp_status (*embedding)(const void *w, amp_dtype wdt, const void *idx, amp_dtype idt, int64_t nidx, int64_t V,
                            int64_t D, void *out);
    /* dw [V, D] f32 (zeroed by the caller) += row i of g [nidx, D] at row
     * idx[i], summed in f32 (CUDA: atomic adds, in no fixed order). */
    amp_status (*embedding_backward)(const void *g, amp_dtype gdt, const void *idx, amp_dtype idt, int64_t nidx,
                                     int64_t V, int64_t D, float *dw);
    /* dst = src * mask / (1 - p) for 0 < p < 1, n elements of dt: element
     * j kept when word j % 4 of Philox counter (first + j / 4) under seed,
     * >> 8, is >= p * 2^24 (every backend drops the same elements). */
    amp_status (*dropout)(const void *src, void *dst, amp_dtype dt, int64_t n, double p, uint64_t seed,
                          uint64_t first);

    /* ---- conv ------------------------------------------------------ */
    /* y = act(conv(x, w) + bias): x, w, bias (may be NULL) and y all of
     * dtype dt, act BE_EPI_NONE or BE_EPI_RELU (before the one rounding). */
    amp_status (*conv2d)(const be_conv_geom *g, const void *x, const void *w, const void *bias, amp_dtype dt,
                         be_epilogue act, void *y);
    /* From gy [N, O, Ho, Wo] (dt, already through a fused activation):
     * dx, dw, db in dt, each NULL when not wanted; every element of the
     * others is written. */
    amp_status (*conv2d_backward)(const be_conv_geom *g, const void *gy, const void *x, const void *w, amp_dtype dt,
                                  void *dx, void *dw, void *db);
    /* y [planes, Ho, Wo] (dt) = each window's max or average of x; for
     * max, idx (may be NULL) gets each window's argmax as an offset within
     * its plane. */
    amp_status (*pool2d)(const be_pool_geom *g, bool is_max, const void *x, amp_dtype dt, void *y, int32_t *idx);
    /* dx (dxdt, every element written) = gy (gdt) back through the pool:
     * to each window's argmax idx (max), or spread over the window / (k*k)
     * (avg: idx NULL). */
    amp_status (*pool2d_backward)(const be_pool_geom *g, const void *gy, amp_dtype gdt, const int32_t *idx,
                                  void *dx, amp_dtype dxdt);

    /* ---- amp ------------------------------------------------------- */
    /* g[i] *= 1/scale for every buffer (f32 or bf16), the inverse computed
     * in double from *scale and rounded to f32 (PyTorch's reciprocal); a
     * factor of exactly 1 multiplies nothing. Sets *found_inf = 1 when any
     * element was inf or NaN (the caller zeroes it first). */
    amp_status (*unscale)(const be_buf *g, int n, const float *scale, float *found_inf);
    /* *count = the inf/NaN elements among x[0..n) of a float dtype. */
    amp_status (*count_nonfinite)(const void *x, amp_dtype dt, int64_t n, int64_t *count);
    /* PyTorch's _amp_update_scale_: found = any st->found_inf[r] with bit
     * r of records set; backs off (hysteresis, min_scale) or grows
     * (growth_interval, max_scale) *scale, products in double stored as
     * f32; keeps the tracker, the history and the update count in *st. */
    amp_status (*scaler_update)(float *scale, be_scaler_state *st, uint64_t records, be_scaler_opts o);
    /* After an optimizer step guarded by st->found_inf[rec]: st->steps++,
     * or st->skipped++ when the flag is set. */
    amp_status (*scaler_count)(be_scaler_state *st, int rec);
    /* clip_grad_norm_ (norm 2) in two halves, so that sums of squares
     * can be combined between them (over ZeRO-1's ranks, each holding a
     * shard of the gradients; src/optim/clip.c, src/dist/zero.c).
     * grad_sumsq: *sumsq (the backend's memory) = the sum of the squares
     * of every element of g[0..n) (f32, f16, bf16), in double, in an order
     * fixed by the buffers alone (the same bits on any thread count).
     * clip_by_sumsq: total = sqrt(parts[0] + ... + parts[k-1]) (k >= 1
     * doubles in the backend's memory, summed in an order fixed by k), coef
     * = max_norm / (total + 1e-6), and unless coef >= 1 every element of
     * g[0..n) *= (float)coef in f32, rounded once into its dtype (a NaN or
     * inf total gives a NaN or 0 factor, as PyTorch). The total goes to
     * *total (a double) and to *total_f32 ((float) of it: a 0-d f32
     * tensor's data), each in the backend's memory, when not NULL. With
     * k = 1 and parts = grad_sumsq's, this is clip_grad_norm_ itself. */
    amp_status (*grad_sumsq)(const be_buf *g, int n, double *sumsq);
    amp_status (*clip_by_sumsq)(const be_buf *g, int n, const double *parts, int k, double max_norm, double *total,
                                float *total_f32);

    /* ---- optim ----------------------------------------------------- */
    /* One update of every parameter in p[0..n) (torch.optim's
     * single-tensor formulas, element for element; 16-bit parameters are
     * updated in f32 and rounded once). steps holds n_counters + 1 int64
     * counters in this backend's memory: steps[p[i].index] is parameter
     * i's step count (its update uses that count + 1), steps[n_counters]
     * the optimizer's. When found_inf (this backend's memory, may be NULL)
     * is non-zero nothing changes, counters included; otherwise each
     * stepped parameter's counter and the total go up by 1. */
    amp_status (*sgd_step)(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                           be_sgd_opts o);
    amp_status (*adam_step)(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                            be_adam_opts o);
} amp_backend;

/* The backend of dev: never NULL for a valid device (a device without a
 * backend compiled in gets a table whose available() is false and whose
 * primitives are all NULL). */
const amp_backend *backend_of(amp_device dev);

/* Sets AMP_ERR_DEVICE "<who>: <why>" for dev when its backend cannot run
 * now (no GPU, no CUDA build); AMP_OK when it can. */
amp_status backend_check(amp_device dev, const char *who);

/* The error for a NULL primitive: "<who>: the <backend> backend has no
 * <primitive>". Returns the status (AMP_ERR_DEVICE). */
amp_status backend_missing(const amp_backend *be, const char *who, const char *primitive);

/* Calls be->FIELD(...), or returns the missing-primitive error from the
 * enclosing amp_status function; returns the primitive's error too. */
#define BACKEND_CALL(be, who, field, ...)                                                  \
    do {                                                                                   \
        const amp_backend *be_ = (be);                                                     \
        if (!be_->field)                                                                   \
            return backend_missing(be_, (who), #field);                                    \
        amp_status st_ = be_->field(__VA_ARGS__);                                          \
        if (st_ != AMP_OK)                                                                 \
            return st_;                                                                    \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
