/*
 * onednn.h - the CPU GEMMs and convolutions that run through oneDNN: the
 * module src/backend/cpu/onednn/, below the GEMM's dispatcher and the
 * convolutions (it calls neither).
 *
 * oneDNN (Intel's deep-learning primitives, Debian's libdnnl-dev) is an
 * optional dependency: CMake defines AMPC_HAVE_DNNL when it finds it. Every
 * entry point here answers "not taken" (false) when oneDNN is not built
 * in, cannot do the request (mixed input dtypes, f16 where the library has
 * no f16 kernels, ...) or the policy prefers ampc's own kernel for the
 * shape; the caller then runs its own kernel. So results never depend on
 * oneDNN being present, only the speed (and the f32 summation order)
 * does.
 *
 * The policy is a fixed rule from measurements on this project's machine
 * (docs/benchmarks.md), not a timing at run time: the same shapes always
 * take the same kernels, so runs are reproducible bit for bit and a
 * resumed run continues exactly as an uninterrupted one. For GEMMs the
 * GEMM's dispatcher applies it before calling onednn_gemm
 * (gemm/dispatch.c, gemm_onednn_policy); for convolutions onednn_conv.c
 * does (onednn_wants_conv).
 *
 * Both oneDNN API generations compile: 2.x (Debian 12) and 3.x, where
 * memory descriptors became handles and op descriptors went away
 * (onednn_common.c hides the difference behind a few helpers).
 *
 * Threads: oneDNN runs on OpenMP here (Debian's build) and follows
 * amp_set_num_threads like ampc's own kernels; a primitive is made for a
 * thread count and remade when it changes. Called inside a parallel region
 * it runs on the calling thread alone.
 *
 * Memory: primitives are told to use a caller-provided scratchpad, which
 * comes from ampc's caching allocator, so oneDNN takes no fresh memory in
 * the steady state either, and its scratch counts in amp_memory_stats.
 */
#ifndef AMPC_ONEDNN_H
#define AMPC_ONEDNN_H

#include "ampc.h"

/* The activation fused into a GEMM's or convolution's epilogue (oneDNN
 * post-ops), applied after the bias. */
typedef enum { CPU_ACT_NONE, CPU_ACT_RELU } cpu_act;

/* relu in place over C's batch x M rows of N (row stride ldc, batch
 * stride sc elements), as amp_relu computes it: NaN stays NaN, -0 becomes
 * +0. Every CPU path applies the fused relu this way, oneDNN's too: its
 * relu post-op turns NaN into 0, which would hide a NaN input from the
 * loss (PyTorch's relu propagates it). (relu_rows.c) */
void cpu_relu_rows(void *C, amp_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t ldc, int64_t sc);

/* Who runs the CPU GEMMs and convolutions:
 *   AUTO   oneDNN where the policy says it is faster, own kernels elsewhere
 *   OWN    ampc's kernels only
 *   ONEDNN oneDNN for everything it can do
 * The environment variable AMPC_CPU_LIB=auto|own|onednn sets the starting
 * mode (for benchmarks and comparisons); tests call onednn_set_mode. */
typedef enum { CPU_LIB_AUTO, CPU_LIB_OWN, CPU_LIB_ONEDNN } cpu_lib_mode;
void onednn_set_mode(cpu_lib_mode mode);
cpu_lib_mode onednn_mode(void);

/* Whether oneDNN is built in and its CPU engine could be made. */
bool onednn_available(void);

/* "oneDNN 2.6.3" or "none (built without oneDNN)". */
const char *onednn_version(void);

/* Which oneDNN this build runs, for `ampc --version`: "oneDNN 3.2.0
 * (built against 3.2.0)", the library loaded at run time (dnnl_version())
 * and then the headers compiled against (DNNL_VERSION_*); the two differ
 * when another libdnnl.so of the same SONAME is found at run time.
 * "oneDNN: none" in a build without it. */
const char *onednn_version_line(void);

/* Drops every cached primitive (tests; otherwise they live until exit). */
void onednn_clear_cache(void);

/*
 * C = act(alpha * op(A) op(B) + bias + beta * C), row-major as gemm/gemm.h
 * describes, for `batch` products at element strides sa, sb, sc (0 in sa or
 * sb: that operand is shared by every product). A and B: both f32 or both
 * bf16; C f32 or bf16 (f16 too where this oneDNN has f16 kernels). bias:
 * NULL or N values of bias_dt broadcast over the rows (not with
 * alpha != 1). Returns false, having touched nothing, when it does not take
 * the call; true with *st = AMP_OK or an error status (message set).
 * It takes any call it can do unless the mode is CPU_LIB_OWN: AUTO's rule
 * of which products it should run is the caller's (gemm_onednn_policy).
 */
bool onednn_gemm(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                 const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                 int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                 const void *bias, amp_dtype bias_dt, cpu_act act, amp_status *st);

/* Convolution geometry, NCHW activations and OIHW weights, groups = 1. */
typedef struct {
    int64_t N, C, H, W;   /* input */
    int64_t O, KH, KW;    /* output channels, kernel */
    int64_t OH, OW;       /* output size */
    int64_t sh, sw;       /* stride */
    int64_t ph, pw;       /* padding (both sides) */
    int64_t dh, dw;       /* dilation, 1 = none (PyTorch's convention) */
} onednn_conv_geom;

/*
 * y = act(conv(x, w) + bias); x, w in dt (f32 or bf16), y in y_dt, bias
 * NULL or O values of bias_dt. Same "taken" contract as onednn_gemm.
 */
bool onednn_conv_forward(const onednn_conv_geom *g, const void *x, const void *w, amp_dtype dt,
                         const void *bias, amp_dtype bias_dt, void *y, amp_dtype y_dt, cpu_act act,
                         amp_status *st);

/* dx = conv_transpose(dy, w): dy and w in dt, dx in dx_dt. */
bool onednn_conv_backward_data(const onednn_conv_geom *g, const void *dy, const void *w, amp_dtype dt,
                               void *dx, amp_dtype dx_dt, amp_status *st);

/* dw (and db when not NULL) from x and dy, both in dt; dw in dw_dt and db
 * in db_dt (f32 accumulation inside, one rounding). */
bool onednn_conv_backward_weights(const onednn_conv_geom *g, const void *x, const void *dy, amp_dtype dt,
                                  void *dw, amp_dtype dw_dt, void *db, amp_dtype db_dt, amp_status *st);

#endif
