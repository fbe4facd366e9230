/*
 * ampc.h - the public API of ampc, a C library for training neural networks
 * with automatic mixed precision (autocast + grad scaler, as in PyTorch AMP).
 *
 * This is the only header a user includes. It is grouped by layer, bottom
 * to top: errors, dtypes, tensors, autograd, ops, nn, optim, io.
 *
 * Ownership, in one paragraph:
 *   - Tensors made by a constructor (amp_zeros, amp_from_data, amp_randn ...)
 *     belong to the caller: release them with amp_tensor_free.
 *   - Tensors returned by an op (amp_add, amp_matmul, amp_module_forward ...)
 *     are temporaries owned by the calling thread's pool. amp_temps_free()
 *     releases all of them at once (call it once per training step). To keep
 *     one beyond that, amp_tensor_retain it and amp_tensor_free it later.
 *   - Gradients belong to their tensor (amp_tensor_grad).
 *
 * Errors: functions return NULL or an amp_status; the reason is in
 * amp_last_error(), per thread. An op given a NULL input returns NULL and
 * keeps the first error, so a chain of ops is checked once at its end.
 * The library never aborts: it calls neither abort() nor exit(), nor
 * MPI_Abort; in a data-parallel run a failed, stopped or dead rank is an
 * error the calls return (see "distributed"), and ending the job is the
 * program's decision.
 */
#ifndef AMPC_H
#define AMPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AMPC_VERSION "0.1.0"

/* What libampc exports. The library is compiled with hidden visibility, so
 * every declaration below carries AMP_API and nothing else leaves it
 * (tests/check_exports.sh). */
#if defined(__GNUC__) || defined(__clang__)
#define AMP_API __attribute__((visibility("default")))
#else
#define AMP_API
#endif

#define AMP_MAX_DIMS 8

/* ------------------------------------------------------------------ errors */

typedef enum {
    AMP_OK = 0,
    AMP_ERR_ARG,     /* a bad argument: NULL, out of range, unknown option */
    AMP_ERR_SHAPE,   /* shapes that do not fit the op */
    AMP_ERR_DTYPE,   /* a dtype the op does not take */
    AMP_ERR_MEMORY,  /* an allocation failed */
    AMP_ERR_STATE,   /* a call out of order (freed graph, misuse) */
    AMP_ERR_IO,      /* a file could not be opened, read or written */
    AMP_ERR_FORMAT,  /* a file's content is malformed */
    AMP_ERR_DEVICE,  /* a device that is not available */
} amp_status;

/* The message of the last error on this thread ("" when none). */
AMP_API const char *amp_last_error(void);
/* The status of the last error on this thread (AMP_OK when none). */
AMP_API amp_status amp_last_status(void);
/* Forgets the last error on this thread. */
AMP_API void amp_clear_error(void);

/* ------------------------------------------------------------------ dtypes */

typedef enum {
    AMP_F32 = 0,
    AMP_F16,   /* IEEE binary16 */
    AMP_BF16,  /* bfloat16: float32's exponent, 7 mantissa bits */
    AMP_I32,
    AMP_I64,
    AMP_DTYPE_COUNT
} amp_dtype;

typedef enum { AMP_CPU = 0, AMP_CUDA, AMP_DEVICE_COUNT } amp_device;

AMP_API const char *amp_dtype_name(amp_dtype dt);   /* "f32", "f16", ... */
AMP_API size_t amp_dtype_size(amp_dtype dt);        /* bytes per element; 0 if invalid */
AMP_API bool amp_dtype_is_float(amp_dtype dt);
AMP_API const char *amp_device_name(amp_device dev);

/* Scalar conversions on raw bits: round to nearest even, +-inf kept, NaN
 * stays a quiet NaN, overflow goes to inf, subnormals both ways. */
AMP_API float amp_f16_to_f32(uint16_t h);
AMP_API uint16_t amp_f32_to_f16(float f);
AMP_API float amp_bf16_to_f32(uint16_t b);
AMP_API uint16_t amp_f32_to_bf16(float f);

/* Converts n elements between any two dtypes, on the fastest path this CPU
 * has (F16C / AVX-512 / AVX512-BF16 / scalar), bit-identical to the scalar
 * functions above. Float to integer truncates toward zero. */
AMP_API void amp_convert(const void *src, amp_dtype src_dt, void *dst, amp_dtype dst_dt, size_t n);

/* CPU features detected at run time (bit flags). */
enum {
    AMP_CPU_F16C = 1u << 0,
    AMP_CPU_AVX2 = 1u << 1,
    AMP_CPU_AVX512F = 1u << 2,
    AMP_CPU_AVX512BF16 = 1u << 3,
    AMP_CPU_AVX512BW = 1u << 4,
};
/* The features in use: those detected, less any masked by amp_cpu_limit. */
AMP_API unsigned amp_cpu_features(void);
/* Restricts the kernels to the features in mask (for tests and benchmarks);
 * amp_cpu_limit(~0u) lifts the restriction. */
AMP_API void amp_cpu_limit(unsigned mask);

/* Threads used by every kernel (0 = the number of cores), oneDNN's too. */
AMP_API void amp_set_num_threads(int n);
AMP_API int amp_get_num_threads(void);

/* Flushes subnormal floats to zero, as torch.set_flush_denormal: x86's
 * MXCSR FTZ + DAZ (AArch64: FPCR.FZ) on the calling thread and on every
 * thread the kernels run on (ampc's pool, OpenMP's team). Arithmetic then
 * reads a subnormal input as 0 (a bf16 subnormal, widened, too) and writes
 * 0 for a subnormal result: no microcode assists where values fall below
 * ~1.2e-38, at the cost of those values. The mode is per thread: set it
 * on the thread that runs the model. AMP_ERR_DEVICE where the CPU has no
 * such mode (PyTorch returns False); off always succeeds. */
AMP_API amp_status amp_set_flush_denormal(bool on);
/* Whether the calling thread flushes subnormals (both bits set). */
AMP_API bool amp_flush_denormal(void);

/* The CPU kernels this build runs on this CPU, for logs: e.g. "oneDNN
 * 2.6.3 where faster (AMPC_CPU_LIB=auto), ampc f32 avx512 12x32, bf16
 * amx-bf16 32x32, f16 amx-bf16 split 32x32 from 2^22 multiply-adds, else
 * widen: avx512 12x32"; without oneDNN "ampc f32 ..., bf16 ..., f16 ...".
 * The environment variable AMPC_CPU_LIB=own|onednn|auto, read once, picks
 * who runs the matrix products and convolutions (docs/ARCHITECTURE.md);
 * AMPC_GEMM_F16=widen|split|auto how ampc's own kernels run f16 x f16
 * products. */
AMP_API const char *amp_cpu_kernels(void);

/* Checks every environment variable the library reads (AMPC_CPU_LIB,
 * AMPC_GEMM_F16, AMPC_ONEDNN_SPLIT, AMPC_KEEP_CASTS, AMPC_SPIN_US,
 * AMPC_DIST_TIMEOUT; docs/environment.md lists their values): AMP_ERR_ARG
 * naming the first one set to a value it does not take (a misspelt
 * choice, text where a number belongs, a number out of range), which the
 * library would otherwise read as the default. Unset or empty is the
 * default. The ampc program calls it before any command runs. */
AMP_API amp_status amp_check_environment(void);

/* Bytes held by tensors and kernel scratch. Blocks come from a caching
 * allocator: freed blocks are kept for reuse by the next request of their
 * size class, so a training step after the first takes no fresh memory
 * from the OS. Sizes are those of the size classes. */
typedef struct {
    size_t current;   /* in use now */
    size_t peak;      /* the most in use at once since start or the last reset */
    size_t allocs;    /* allocations served so far */
    size_t cached;    /* freed and kept for reuse */
    size_t os_allocs; /* allocations that had to take fresh memory */
} amp_memory_stats;
AMP_API amp_memory_stats amp_memory_get_stats(void);
/* Starts a new peak measurement from the current figure. */
AMP_API void amp_memory_reset_peak(void);
/* Returns the cached blocks to the OS. */
AMP_API void amp_memory_empty_cache(void);

/* ----------------------------------------------- phases, memory categories */

/* The phases of a training step. The library marks backward (amp_backward),
 * unscale + check (amp_scaler_unscale), optimizer (amp_optim_step and the
 * scaler's step), scaler update and checkpoint save itself; the caller
 * marks data and forward with amp_phase_begin / amp_phase_end (ampc train
 * does). Phases nest per thread; the innermost open one is current. With
 * the profiler off a phase change costs one lock: it notes what is in use
 * in each allocator's ledger (a phase's peak counts what it started with). */
typedef enum {
    AMP_PHASE_OTHER,         /* outside every marked phase */
    AMP_PHASE_DATA,          /* loading / copying the batch */
    AMP_PHASE_FORWARD,       /* forward and loss (under autocast) */
    AMP_PHASE_BACKWARD,      /* amp_backward */
    AMP_PHASE_UNSCALE,       /* the scaler's unscale + inf/NaN check, and clipping */
    AMP_PHASE_OPTIMIZER,     /* the optimizer's update */
    AMP_PHASE_SCALER_UPDATE, /* the scaler's growth / backoff */
    AMP_PHASE_CHECKPOINT,    /* saving a checkpoint */
    AMP_PHASE_COUNT
} amp_phase;
AMP_API void amp_phase_begin(amp_phase p);
/* Closes the innermost open phase, which must be p (else AMP_ERR_STATE). */
AMP_API amp_status amp_phase_end(amp_phase p);
/* The calling thread's innermost open phase (AMP_PHASE_OTHER when none). */
AMP_API amp_phase amp_phase_current(void);
AMP_API const char *amp_phase_name(amp_phase p);

/* Every block the caching allocators (the host's and the device's) hand
 * out carries one of these categories; the bytes of each are counted
 * beside the allocator's total, which they sum to. A block takes the
 * calling thread's category when it is made (amp_memory_set_category;
 * temporaries for tensors, workspace for kernel scratch) and changes
 * category when the library learns what it is for: a tensor kept by the
 * graph for backward becomes an activation (and a temporary again when
 * backward releases it), a parameter's .grad a gradient, an optimizer's
 * buffer optimizer state, autocast's cached cast of a weight cast cache. */
typedef enum {
    AMP_MEM_PARAMETERS,   /* module parameters (and an optimizer's master copies) */
    AMP_MEM_GRADIENTS,    /* parameters' .grad */
    AMP_MEM_OPTIMIZER,    /* optimizer state (momentum, Adam's moments) */
    AMP_MEM_ACTIVATIONS,  /* tensors the graph keeps for backward */
    AMP_MEM_CAST_CACHE,   /* autocast's cached 16-bit copies of weights */
    AMP_MEM_TEMPORARIES,  /* other tensors: op results, activation gradients */
    AMP_MEM_WORKSPACE,    /* kernel scratch (packing, im2col, cuBLASLt's workspace) */
    AMP_MEM_DATA,         /* the data set and batch buffers */
    AMP_MEM_CATEGORY_COUNT
} amp_mem_category;
AMP_API const char *amp_memory_category_name(amp_mem_category c);
/* Sets the category of the tensors the calling thread makes from now on
 * (AMP_MEM_TEMPORARIES by default); returns the previous one. */
AMP_API amp_mem_category amp_memory_set_category(amp_mem_category c);

typedef struct {
    size_t current[AMP_MEM_CATEGORY_COUNT]; /* in use now, per category */
    size_t peak[AMP_MEM_CATEGORY_COUNT];    /* each category's own peak */
    size_t total, total_peak;               /* the allocator's current and peak */
    /* At the allocator's peak within each phase: that peak (what was in
     * use when the phase began counts too), and how it was made up. Since
     * start or the last amp_memory_reset_peak. The largest of them is
     * total_peak. */
    size_t phase_peak[AMP_PHASE_COUNT];
    size_t phase_peak_by[AMP_PHASE_COUNT][AMP_MEM_CATEGORY_COUNT];
} amp_memory_categories;
/* The figures of dev's allocator (AMP_CPU: host memory). */
AMP_API amp_status amp_memory_get_categories(amp_device dev, amp_memory_categories *out);
/* Prints the categories table of every device in use to f (NULL: stdout):
 * current and peak per category, and the peak of each phase. */
AMP_API amp_status amp_memory_report(FILE *f);

/* ---------------------------------------------------------------- profiler */

/* Records every op call (forward and backward: name, input and output
 * dtypes and shapes, FLOPs, bytes moved), every cast autocast inserts and
 * every cast-cache hit, the phases, kernels on a device (timed with the
 * device's events, read after the step: no host synchronisation inside
 * it) and a memory counter, per thread. Off by default; off, each hook is
 * one relaxed load. */
typedef struct {
    bool record_shapes; /* keep input / output shapes (default true) */
    bool memory;        /* a memory counter sample at each phase boundary (default true) */
    size_t max_events;  /* per thread; 0: 1 << 20. Events past it are counted, not kept */
} amp_profiler_opts;
AMP_API amp_profiler_opts amp_profiler_defaults(void);
/* Starts recording (drops what an earlier run recorded). Start and stop
 * while no other thread is running ops: a thread inside an op when its
 * buffer is dropped would write to freed memory. */
AMP_API amp_status amp_profiler_start(const amp_profiler_opts *o);
/* Marks the end of a training step (torch.profiler's step()). */
AMP_API void amp_profiler_step(void);
/* Stops recording and resolves device times; the results stay readable
 * until the next start or amp_profiler_reset. */
AMP_API amp_status amp_profiler_stop(void);
AMP_API bool amp_profiler_enabled(void);
AMP_API void amp_profiler_reset(void);
/* Events recorded (kept) and dropped (past max_events). */
AMP_API size_t amp_profiler_num_events(size_t *dropped);
/* The Chrome trace / Perfetto JSON of the last run (traceEvents). */
AMP_API amp_status amp_profiler_write_trace(const char *path);
/* torch.profiler's key_averages() table: per (op, dtypes) calls, total
 * and self time, % of the profiled steps, GFLOP/s, GB/s; sorted by total
 * time, at most max_rows rows (0: all). f NULL: stdout. */
AMP_API amp_status amp_profiler_print_table(FILE *f, int max_rows);
/* A few lines: the split data / forward / backward / optimizer / other in
 * %, the top ops, the time in autocast's casts. */
AMP_API amp_status amp_profiler_print_verdict(FILE *f);

/* The figures behind the verdict, for comparing runs side by side. */
typedef struct {
    int steps;                             /* profiled steps */
    double step_ms;                        /* mean wall time of a step */
    double phase_ms[AMP_PHASE_COUNT];      /* per step */
    double cast_ms;                        /* per step, in autocast's casts */
    int64_t casts, cast_cache_hits;        /* per step */
    double gflop;                          /* per step, all ops */
    struct {
        char name[96];                     /* "op pass (dtypes)" */
        double ms;                         /* per step */
    } top[5];                              /* by self time, longest first */
    size_t events, dropped;                /* recorded, and past max_events */
} amp_profile_summary;
AMP_API amp_status amp_profiler_summary(amp_profile_summary *out);

/* ----------------------------------------------------------------- random */

/* The global generator: Philox4x32-10 keyed by seed, with a counter offset
 * that every random op advances. Same seed, same calls, same numbers. */
typedef struct {
    uint64_t seed;
    uint64_t offset;
} amp_rng_state;

AMP_API void amp_manual_seed(uint64_t seed);
AMP_API amp_rng_state amp_rng_get_state(void);
AMP_API void amp_rng_set_state(amp_rng_state s);

/* ---------------------------------------------------------------- tensors */

typedef struct amp_tensor amp_tensor;

typedef struct {
    int ndim;
    int64_t d[AMP_MAX_DIMS];
} amp_shape;

/* AMP_SHAPE(2, 3) is the shape {2, 3}; AMP_SHAPE() is a scalar. */
#define AMP_SHAPE(...) \
    ((amp_shape){(int)(sizeof((int64_t[]){0, __VA_ARGS__}) / sizeof(int64_t)) - 1, {__VA_ARGS__}})

/* Constructors: the caller owns the result (amp_tensor_free). */
AMP_API amp_tensor *amp_empty(amp_shape shape, amp_dtype dt);  /* uninitialised */
AMP_API amp_tensor *amp_zeros(amp_shape shape, amp_dtype dt);
AMP_API amp_tensor *amp_ones(amp_shape shape, amp_dtype dt);
AMP_API amp_tensor *amp_full(amp_shape shape, amp_dtype dt, double value);
/* start, start+step, ... below end (1-D). */
AMP_API amp_tensor *amp_arange(double start, double end, double step, amp_dtype dt);
/* Copies numel elements of type dt from data. */
AMP_API amp_tensor *amp_from_data(amp_shape shape, amp_dtype dt, const void *data);
/* Seeded from the global generator. */
AMP_API amp_tensor *amp_randn(amp_shape shape, amp_dtype dt, double mean, double std);
AMP_API amp_tensor *amp_rand(amp_shape shape, amp_dtype dt, double low, double high);
/* A new tensor (caller-owned) with t's values, no history. */
AMP_API amp_tensor *amp_clone(const amp_tensor *t);

/* Reference counting. amp_tensor_free(NULL) is allowed. */
AMP_API amp_tensor *amp_tensor_retain(amp_tensor *t);
AMP_API void amp_tensor_free(amp_tensor *t);
/* Releases every op result this thread made since the last call. */
AMP_API void amp_temps_free(void);
/* Number of tensors the pool holds (for tests and leak hunting). */
AMP_API size_t amp_temps_count(void);

AMP_API amp_dtype amp_tensor_dtype(const amp_tensor *t);
AMP_API amp_device amp_tensor_device(const amp_tensor *t);
AMP_API int amp_tensor_ndim(const amp_tensor *t);
/* Size of dim i; negative i counts from the end. */
AMP_API int64_t amp_tensor_dim(const amp_tensor *t, int i);
AMP_API amp_shape amp_tensor_shape(const amp_tensor *t);
AMP_API int64_t amp_tensor_numel(const amp_tensor *t);
/* The contiguous element buffer: host memory for a CPU tensor, a device
 * pointer (not readable by the host) for a CUDA tensor. */
AMP_API void *amp_tensor_data(amp_tensor *t);
AMP_API const void *amp_tensor_cdata(const amp_tensor *t);

/* Copies all elements out to / in from user memory, converting to / from
 * dt. The buffer holds numel elements of dt. */
AMP_API amp_status amp_tensor_copy_out(const amp_tensor *t, void *dst, amp_dtype dt);
AMP_API amp_status amp_tensor_copy_in(amp_tensor *t, const void *src, amp_dtype dt);
/* Element i (flat index) as a double; NAN with an error when out of range. */
AMP_API double amp_tensor_get(const amp_tensor *t, int64_t i);
/* The value of a one-element tensor as a double. */
AMP_API double amp_item(const amp_tensor *t);
/* Fills t with value (in place, no history). */
AMP_API amp_status amp_tensor_fill(amp_tensor *t, double value);
/* Writes "shape dtype" into buf, e.g. "[64, 784] f32". */
AMP_API const char *amp_shape_str(amp_shape s, char *buf, size_t n);

/* ---------------------------------------------------------------- devices */
/* CUDA (docs/cuda.md). A tensor lives on one device; an op's inputs must
 * share it and its result lives there too. Every CUDA kernel, copy and GEMM
 * is queued on one stream: calls return before the GPU has finished, and
 * the calls that hand device values to the host wait for it
 * (amp_tensor_copy_out, amp_tensor_get, amp_item, amp_scaler_get_scale and
 * the scaler's and optimizer's other getters, amp_cuda_synchronize).
 * Without a GPU (or in a build without CUDA) asking for a CUDA tensor is an
 * AMP_ERR_DEVICE error, "cuda is not available (...)". */

/* Whether a CUDA device is usable, and how many there are (ampc uses the
 * first). */
AMP_API bool amp_cuda_available(void);
AMP_API int amp_cuda_device_count(void);
/* Whether the device has bf16 tensor cores (compute capability 8.0 or
 * more: A100, H100, H200 ...), as torch.cuda.is_bf16_supported(); false
 * without a GPU. Without them, cuda autocast to bf16 is an AMP_ERR_DEVICE
 * error (use f16); bf16 tensors still work there, on slower kernels. */
AMP_API bool amp_cuda_bf16_supported(void);
/* f32 matmuls on TF32 tensor cores (off by default, as PyTorch's
 * torch.backends.cuda.matmul.allow_tf32). f16 / bf16 always use tensor
 * cores with f32 accumulation. */
AMP_API void amp_cuda_allow_tf32(bool on);
AMP_API bool amp_cuda_tf32_allowed(void);
/* Waits until the GPU has finished everything queued. */
AMP_API amp_status amp_cuda_synchronize(void);
/* The device caching allocator's figures, as amp_memory_get_stats
 * (os_allocs counts cudaMalloc calls: flat after the first step). */
AMP_API amp_memory_stats amp_cuda_memory_get_stats(void);
AMP_API void amp_cuda_memory_reset_peak(void);
/* Returns the device memory cached for reuse to the driver. */
AMP_API void amp_cuda_empty_cache(void);
/* The device's free and total memory in bytes (cudaMemGetInfo: free
 * does not count the blocks ampc's cache keeps). AMP_ERR_DEVICE without
 * a usable GPU. */
AMP_API amp_status amp_cuda_mem_get_info(size_t *free_bytes, size_t *total_bytes);
/* How often ampc has blocked the host on the GPU, process-wide, since start
 * or the last reset (docs/cuda.md, "Counting host synchronisations"):
 * syncs counts stream synchronisations outside copies (amp_cuda_synchronize,
 * amp_cuda_empty_cache, a cudaMalloc retried after emptying the cache);
 * d2h_copies counts copies from the device to the host, each of which waits
 * for everything queued before it (amp_item, amp_tensor_get / copy_out,
 * amp_scaler_get_scale ...: one each); host waits = syncs + d2h_copies.
 * h2d_copies counts copies from host memory to the device: not counted as
 * waits, but CUDA may block on one while it stages the pageable source
 * (small ones, as a training step's few bytes of tensor lists and the
 * loss's seed gradient, return at once in practice). A training step as
 * docs/cuda.md's loop adds no syncs and no d2h_copies. All zero without a
 * GPU or in a build without CUDA. */
typedef struct {
    uint64_t syncs;
    uint64_t d2h_copies;
    uint64_t h2d_copies;
} amp_cuda_sync_stats;
AMP_API amp_cuda_sync_stats amp_cuda_get_sync_stats(void);
AMP_API void amp_cuda_reset_sync_stats(void);

/* A new tensor (caller-owned) on dev with t's dtype and values: no
 * history, requires_grad off (as amp_clone). */
AMP_API amp_tensor *amp_to_device(const amp_tensor *t, amp_device dev);
/* Moves a leaf tensor (and its gradient) to dev in place: the tensor
 * object stays, its storage changes, so a module or optimizer holding it
 * sees the move (PyTorch's module.to(device)). A tensor made by an op is an
 * AMP_ERR_STATE error; on failure nothing changes. */
AMP_API amp_status amp_tensor_move(amp_tensor *t, amp_device dev);

/* --------------------------------------------------------------- autograd */

/* Marks a leaf as a parameter whose gradient backward accumulates. */
AMP_API amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool on);
AMP_API bool amp_tensor_requires_grad(const amp_tensor *t);
AMP_API bool amp_tensor_is_leaf(const amp_tensor *t);
/* The accumulated gradient (same dtype and shape as t) or NULL. Owned by t. */
AMP_API amp_tensor *amp_tensor_grad(const amp_tensor *t);
/* Drops t's gradient (PyTorch's zero_grad(set_to_none=True)). */
AMP_API void amp_tensor_clear_grad(amp_tensor *t);

/* Runs backward from a one-element tensor, seeding with 1, then frees the
 * graph and its saved activations. A second backward through the same
 * graph is an AMP_ERR_STATE error. */
AMP_API amp_status amp_backward(amp_tensor *loss);
/* As amp_backward, seeding with grad (same shape as t). */
AMP_API amp_status amp_backward_with(amp_tensor *t, const amp_tensor *grad);

/* No-grad regions: ops inside record nothing. They nest. */
AMP_API void amp_no_grad_begin(void);
AMP_API void amp_no_grad_end(void);
AMP_API bool amp_grad_enabled(void);

/* Activation checkpointing (torch.utils.checkpoint, its reentrant form):
 * y = amp_checkpoint(fn, ctx, inputs, n) returns fn(ctx, inputs, n)
 * without keeping what fn computed on the way: fn runs with grad disabled
 * on detached inputs, and its temporaries other than the result are freed
 * when it returns. y requires grad when an input or a tensor fn reads (a
 * parameter) does; its node keeps only the inputs. Backward recomputes fn
 * with grad enabled, under the autocast state (devices, dtypes, cache
 * setting) and the RNG state of the forward (dropout draws the same
 * masks; the generator is put back afterwards), runs backward through
 * the recomputed result seeded with y's gradient (the parameters' .grad
 * accumulate there) and hands the inputs their gradients. The gradients
 * are bit-identical to running fn directly when fn is deterministic and
 * its inputs and the parameters it reads are used by nothing outside it
 * (a gradient summed over uses inside and outside fn is summed in another
 * order). fn's casts use a cast cache of their own and fn may nest
 * amp_checkpoint. With grad disabled nothing is recorded: fn runs on the
 * inputs and its temporaries other than the result are freed as well.
 * fn returns a temporary or a tensor it does not own (an input, a
 * parameter), or NULL with the error set; that error is kept (from the
 * recompute: prefixed "checkpoint: recomputing"); a recompute of another
 * shape or dtype than the forward's is an AMP_ERR_STATE error, and so is a
 * second backward through y, as for any graph. fn must not keep its
 * temporaries past the call. NULL fn or inputs, or a NULL input, is an
 * AMP_ERR_ARG error (a NULL input's own error is kept). */
typedef amp_tensor *(*amp_checkpoint_fn)(void *ctx, amp_tensor *const *inputs, int n);
AMP_API amp_tensor *amp_checkpoint(amp_checkpoint_fn fn, void *ctx, amp_tensor *const *inputs, int n_inputs);

/* -------------------------------------------------------------------- ops */
/* Every op returns a temporary (see Ownership) or NULL on error. Float ops
 * take f32, f16 and bf16; 16-bit kernels compute and accumulate in f32. */

AMP_API amp_tensor *amp_add(amp_tensor *a, amp_tensor *b);  /* broadcasting */
AMP_API amp_tensor *amp_sub(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_mul(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_div(amp_tensor *a, amp_tensor *b);
AMP_API amp_tensor *amp_add_scalar(amp_tensor *a, double s);
AMP_API amp_tensor *amp_sub_scalar(amp_tensor *a, double s);
AMP_API amp_tensor *amp_mul_scalar(amp_tensor *a, double s);
AMP_API amp_tensor *amp_div_scalar(amp_tensor *a, double s);
AMP_API amp_tensor *amp_neg(amp_tensor *a);
AMP_API amp_tensor *amp_relu(amp_tensor *a);
typedef enum { AMP_GELU_EXACT = 0, AMP_GELU_TANH = 1 } amp_gelu_approx;
AMP_API amp_tensor *amp_gelu(amp_tensor *a, amp_gelu_approx approx);
AMP_API amp_tensor *amp_tanh(amp_tensor *a);
AMP_API amp_tensor *amp_sigmoid(amp_tensor *a);
/* x * sigmoid(x) (SiLU / swish), computed as x / (1 + exp(-x)). */
AMP_API amp_tensor *amp_silu(amp_tensor *a);
AMP_API amp_tensor *amp_exp(amp_tensor *a);
AMP_API amp_tensor *amp_log(amp_tensor *a);
AMP_API amp_tensor *amp_pow_scalar(amp_tensor *a, double p);

/* a [.., M, K] @ b [K, N] or [.., K, N] with the same leading dims. */
AMP_API amp_tensor *amp_matmul(amp_tensor *a, amp_tensor *b);
/* x [.., in] . w[out, in]^T + bias[out]; bias may be NULL. */
AMP_API amp_tensor *amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *bias);

/* Sum / mean over the ndims dims listed (negative counts from the end). */
AMP_API amp_tensor *amp_sum(amp_tensor *a, int ndims, const int *dims, bool keepdim);
AMP_API amp_tensor *amp_mean(amp_tensor *a, int ndims, const int *dims, bool keepdim);
AMP_API amp_tensor *amp_sum_all(amp_tensor *a);   /* a scalar (0-d) */
AMP_API amp_tensor *amp_mean_all(amp_tensor *a);

AMP_API amp_tensor *amp_softmax(amp_tensor *a, int dim);
AMP_API amp_tensor *amp_log_softmax(amp_tensor *a, int dim);
/* PyTorch's default ignore_index. */
#define AMP_IGNORE_INDEX (-100)
/* logits [N, C], labels [N] (i32 or i64): mean over labels != ignore_index. */
AMP_API amp_tensor *amp_cross_entropy(amp_tensor *logits, amp_tensor *labels);
AMP_API amp_tensor *amp_cross_entropy_ignore(amp_tensor *logits, amp_tensor *labels, int64_t ignore_index);
/* mean((a - b)^2), same shapes. */
AMP_API amp_tensor *amp_mse_loss(amp_tensor *a, amp_tensor *b);
/* Normalises over the last normalized_ndim dims; weight/bias (shaped as
 * those dims) may be NULL. */
AMP_API amp_tensor *amp_layer_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, amp_tensor *bias,
                                   double eps);
/* weight [V, D], indices (i32/i64, any shape) -> [indices.., D]. */
AMP_API amp_tensor *amp_embedding(amp_tensor *weight, amp_tensor *indices);
/* Zeroes elements with probability p and scales the rest by 1/(1-p), from
 * the global generator; identity when !training or p == 0. */
AMP_API amp_tensor *amp_dropout(amp_tensor *a, double p, bool training);
/* x [N, C, H, W], w [O, C, kh, kw], bias [O] or NULL. */
AMP_API amp_tensor *amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding);
/* stride 0 means stride = kernel (PyTorch's default). */
AMP_API amp_tensor *amp_max_pool2d(amp_tensor *x, int kernel, int stride, int padding);
/* Padding counts in the divisor (count_include_pad=True, as PyTorch). */
AMP_API amp_tensor *amp_avg_pool2d(amp_tensor *x, int kernel, int stride, int padding);

/* A view sharing a's storage; one dim may be -1. */
AMP_API amp_tensor *amp_reshape(amp_tensor *a, amp_shape shape);
AMP_API amp_tensor *amp_transpose(amp_tensor *a, int dim0, int dim1);
/* dims: a permutation of 0..ndim-1. */
AMP_API amp_tensor *amp_permute(amp_tensor *a, const int *dims);
AMP_API amp_tensor *amp_cat(amp_tensor *const *ts, int n, int dim);
/* Elements [start, start + length) of dim (dim may be negative, counting
 * from the last; start >= 0), copied (torch.narrow's values; PyTorch's is a view). The gradient is
 * gout in that slice of zeros. */
AMP_API amp_tensor *amp_narrow(amp_tensor *a, int dim, int64_t start, int64_t length);
/* Differentiable dtype cast (the gradient flows back in a's dtype). */
AMP_API amp_tensor *amp_to(amp_tensor *a, amp_dtype dt);
/* Index of the largest value along dim (i64, no gradient). */
AMP_API amp_tensor *amp_argmax(amp_tensor *a, int dim);
/* softmax(q kᵀ / sqrt(d) [+ causal mask]) v for q, k, v [.., T, d] (same
 * shapes): PyTorch's scaled_dot_product_attention. The scores and the
 * softmax are computed in f32 whatever the inputs' dtype, so f16 cannot
 * overflow there. */
AMP_API amp_tensor *amp_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal);

/* The op table: every op by name, for tools and docs. */
AMP_API int amp_op_count(void);
AMP_API const char *amp_op_name(int op);

/* --------------------------------------------------------------------- nn */

typedef struct amp_module amp_module;

AMP_API amp_module *amp_nn_linear(int64_t in_features, int64_t out_features, bool bias);
AMP_API amp_module *amp_nn_conv2d(int64_t in_ch, int64_t out_ch, int kernel, int stride, int padding,
                                  bool bias);
AMP_API amp_module *amp_nn_layer_norm(int64_t dim, double eps);
AMP_API amp_module *amp_nn_embedding(int64_t num, int64_t dim);
AMP_API amp_module *amp_nn_dropout(double p);
AMP_API amp_module *amp_nn_relu(void);
AMP_API amp_module *amp_nn_gelu(amp_gelu_approx approx);
AMP_API amp_module *amp_nn_tanh(void);
AMP_API amp_module *amp_nn_max_pool2d(int kernel, int stride);
AMP_API amp_module *amp_nn_avg_pool2d(int kernel, int stride);
/* Flattens all dims after the first. */
AMP_API amp_module *amp_nn_flatten(void);
/* A container that runs its children in order. */
AMP_API amp_module *amp_nn_sequential(void);
/* Appends child (the container takes ownership, also on error), except
 * when child already belongs to a container or would make a cycle: then
 * nothing changes and the error is AMP_ERR_STATE. */
AMP_API amp_status amp_sequential_add(amp_module *seq, amp_module *child);

AMP_API amp_tensor *amp_module_forward(amp_module *m, amp_tensor *x);
/* Training mode (dropout on) or eval mode; applies to children. Modules
 * start in training mode; a child added later keeps its own mode. */
AMP_API void amp_module_train(amp_module *m, bool training);
/* Parameters in a fixed order, with the names PyTorch's state_dict gives
 * the same module tree: "0.weight" in a sequential, "h.0.attn.qkv.weight"
 * in the gpt (docs/interop.md). */
AMP_API int amp_module_num_params(const amp_module *m);
AMP_API amp_tensor *amp_module_param(const amp_module *m, int i, const char **name);
/* Fills out with up to max parameters; returns how many m has. */
AMP_API int amp_module_params(const amp_module *m, amp_tensor **out, int max);
AMP_API const char *amp_module_kind(const amp_module *m);
/* Frees m, its children and its parameters (tensors others retained live
 * on). A module inside a container is left alone (AMP_ERR_STATE). */
AMP_API void amp_module_free(amp_module *m);
/* amp_tensor_move for every parameter of m. Checks the device first, so
 * "no GPU" changes nothing. Create optimizers after the move. */
AMP_API amp_status amp_module_to(amp_module *m, amp_device dev);
/* Stores m's parameters in dt in place (the tensors stay the same
 * objects; values rounded to nearest-even), Apex O2's model.half(): every
 * parameter except those of layer_norm modules (kept f32, Apex's
 * keep_batchnorm_fp32: autocast runs the norms in f32) and of embedding
 * modules (kept f32: autocast does not lower an embedding, and a 16-bit
 * table would put the whole residual stream in 16 bits). Linear and conv
 * weights and biases go to dt: under autocast those ops run in 16 bits
 * anyway, so they need no cast and no cached 16-bit copy. dt: f32, f16 or
 * bf16. Gradients are dropped. Convert before creating the optimizer, and
 * give it master weights (amp_optim_set_master_weights). */
AMP_API amp_status amp_module_to_dtype(amp_module *m, amp_dtype dt);

/* ------------------------------------------------------------------ optim */

typedef struct amp_optim amp_optim;

typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} amp_sgd_opts;

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad;
} amp_adam_opts;

/* PyTorch's defaults (except SGD's lr: 0.01 here, 1e-3 in PyTorch 2.x). */
AMP_API amp_sgd_opts amp_sgd_defaults(void);
AMP_API amp_adam_opts amp_adam_defaults(void);   /* lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0 */
AMP_API amp_adam_opts amp_adamw_defaults(void);  /* as Adam, wd 0.01 */

/* The optimizer keeps references to params (retained). Each f32 element is
 * updated as torch.optim's single-tensor SGD / Adam on PyTorch's CPU
 * kernels computes it, operation for operation and rounding for rounding
 * (fused multiply-adds included; docs/amp.md), the CUDA backend's the same
 * arithmetic: PyTorch's bits, but where PyTorch's own CPU sqrt is not
 * correctly rounded (Adam). */
AMP_API amp_optim *amp_optim_sgd(amp_tensor *const *params, int n, amp_sgd_opts o);
AMP_API amp_optim *amp_optim_adam(amp_tensor *const *params, int n, amp_adam_opts o);
AMP_API amp_optim *amp_optim_adamw(amp_tensor *const *params, int n, amp_adam_opts o);
/* One update of every parameter that has a gradient. */
AMP_API amp_status amp_optim_step(amp_optim *o);
/* Drops every parameter's gradient (set_to_none). */
AMP_API void amp_optim_zero_grad(amp_optim *o);
AMP_API double amp_optim_get_lr(const amp_optim *o);
AMP_API void amp_optim_set_lr(amp_optim *o, double lr);
AMP_API int amp_optim_num_params(const amp_optim *o);
AMP_API amp_tensor *amp_optim_param(const amp_optim *o, int i);
/* Number of steps taken (Adam's step counter; SGD counts too). */
AMP_API int64_t amp_optim_steps(const amp_optim *o);
/* Parameter i's weight decay, as if it sat in a torch.optim parameter group
 * of its own ({"params": [p], "weight_decay": wd}): the options'
 * weight_decay until set. GPT-2 / nanoGPT decay the matrices only:
 * set 0 for biases and norm weights. Not part of a checkpoint (set it again
 * after building the optimizer). wd must be finite and >= 0. */
AMP_API amp_status amp_optim_set_weight_decay(amp_optim *o, int i, double wd);
/* Parameter i's weight decay, NAN with an error for a bad index. */
AMP_API double amp_optim_weight_decay(const amp_optim *o, int i);
AMP_API void amp_optim_free(amp_optim *o);

/* Optimizer state, for checkpoints. Parameter i's buffer called name, in
 * amp_optim_state_dtype (PyTorch's keys: "momentum_buffer"; "exp_avg", "exp_avg_sq",
 * "max_exp_avg_sq"), owned by the optimizer; NULL without an error before
 * the parameter's first step, NULL with an error for a name these options
 * do not use. */
AMP_API amp_tensor *amp_optim_state_tensor(const amp_optim *o, int i, const char *name);
/* Steps parameter i has taken (its own count: Adam's bias correction). */
AMP_API int64_t amp_optim_param_steps(const amp_optim *o, int i);
/* Loading: steps > 0 creates the buffers (zeros) for state_tensor to fill;
 * 0 drops them. */
AMP_API amp_status amp_optim_set_param_steps(amp_optim *o, int i, int64_t steps);
AMP_API amp_status amp_optim_set_steps(amp_optim *o, int64_t steps);

/* Master weights (Apex O2). On: the optimizer keeps an f32 master copy of
 * each f16 / bf16 parameter (made now, from the parameter, exactly); a
 * step computes the update in f32 on the master and writes the parameter
 * rounded to nearest-even, so updates smaller than the parameter's 16-bit
 * spacing accumulate instead of rounding away. The gradients stay in the
 * parameter's dtype (the grad scaler unscales bf16 ones in place and f16
 * ones into f32, see amp_scaler_unscale). A write to a parameter from
 * outside the optimizer (amp_tensor_copy_in, amp_tensor_data, a checkpoint
 * load, amp_tensor_move) re-seeds its master from the 16-bit value. f32
 * parameters have no master. Off drops the masters. */
AMP_API amp_status amp_optim_set_master_weights(amp_optim *o, bool on);
AMP_API bool amp_optim_master_weights(const amp_optim *o);
/* Parameter i's f32 master (owned by the optimizer), or NULL (no error)
 * when it has none: master weights off, or an f32 parameter. */
AMP_API amp_tensor *amp_optim_master(const amp_optim *o, int i);
/* The dtype of the optimizer's state buffers: AMP_F32 (default) or
 * AMP_BF16 (Adam's moments, SGD's momentum: loaded to f32, updated in f32,
 * stored rounded to nearest-even; half the memory). Existing buffers are
 * converted. Anything else: AMP_ERR_DTYPE, nothing changed. */
AMP_API amp_status amp_optim_set_state_dtype(amp_optim *o, amp_dtype dt);
AMP_API amp_dtype amp_optim_state_dtype(const amp_optim *o);
/* bf16 state stored with stochastic rounding instead of to nearest-even:
 * 16 random bits (a hash of parameter, step, buffer and element: the same
 * on every thread count, device and resume) added below bf16's last place
 * before truncating, so each stored value is the f32 one in expectation.
 * Nearest-even loses every update under half a unit in the last place,
 * and Adam's exp_avg_sq (beta2 0.999) then drifts (docs/memory.md).
 * Off by default; no effect on f32 state. */
AMP_API amp_status amp_optim_set_state_stochastic_rounding(amp_optim *o, bool on);
AMP_API bool amp_optim_state_stochastic_rounding(const amp_optim *o);
/* bf16 parameters without an f32 master (master weights off) stored with
 * stochastic rounding after each update, as the state above (their own
 * bits: the same on every thread count, device and resume): an update
 * under half a unit in the last place moves the weight a whole unit with
 * probability update / unit, where nearest-even drops it (the stall:
 * docs/debugging.md). No effect on f32, f16 or mastered parameters. */
AMP_API amp_status amp_optim_set_weight_stochastic_rounding(amp_optim *o, bool on);
AMP_API bool amp_optim_weight_stochastic_rounding(const amp_optim *o);

/* Scales gradients so their global L2 norm is at most max_norm; returns the
 * norm before clipping (NAN/inf if a gradient is not finite, as PyTorch,
 * and then, as PyTorch, multiplies the gradients by 0 (inf) or NaN).
 * Parameters without a gradient are skipped. max_norm < 0: NAN + error.
 * All gradients must be on one device (else NAN + AMP_ERR_DEVICE, nothing
 * changed). On CUDA the norm and the clipping run on the device; returning
 * the norm waits for the GPU (amp_clip_grad_norm_tensor does not). */
AMP_API double amp_clip_grad_norm(amp_tensor *const *params, int n, double max_norm);
/* The same clipping (the same gradients, bit for bit), the norm returned as
 * PyTorch's clip_grad_norm_ returns it: a new 0-d tensor on the gradients'
 * device, so on CUDA nothing waits for the GPU until the caller reads it
 * (amp_item). The caller owns it (amp_tensor_free); no history. Its dtype
 * is always f32: amp_clip_grad_norm's double rounded once (past FLT_MAX:
 * inf), where PyTorch's is the gradients' (f16 for f16 ones). No gradient:
 * 0, on params[0]'s device (the CPU when n is 0; PyTorch: the CPU). A
 * non-finite norm is a value, not an error (PyTorch's default
 * error_if_nonfinite=False): the tensor holds inf/NaN and the gradients
 * are scaled as above; to refuse it, read it. On error NULL with the error
 * set: amp_clip_grad_norm's (found before any gradient changes), or no
 * memory for the result (nothing changed). */
AMP_API amp_tensor *amp_clip_grad_norm_tensor(amp_tensor *const *params, int n, double max_norm);

/* Learning-rate schedules, as closed forms of the step count. */
typedef enum { AMP_SCHED_CONSTANT = 0, AMP_SCHED_STEP, AMP_SCHED_COSINE } amp_sched_kind;
typedef struct {
    amp_sched_kind kind;
    double base_lr;
    int64_t step_size;    /* STEP: decay every step_size steps */
    double gamma;         /* STEP: multiply by gamma */
    int64_t total_steps;  /* COSINE: T_max (counted after warm-up) */
    double min_lr;        /* COSINE: eta_min */
    int64_t warmup_steps; /* linear warm-up from warmup_start_factor * base_lr */
    double warmup_start_factor;
} amp_sched;
/* The learning rate at step t (0-based). COSINE past total_steps rises
 * again, as PyTorch's. Bad fields or t < 0: NAN with an error. */
AMP_API double amp_sched_lr(const amp_sched *s, int64_t t);

/* --------------------------------------------------------------- autocast */
/* Autocast runs each op in the precision its category asks for, as
 * torch.autocast does (docs/amp.md; the policy in docs/autocast-policy.md).
 * State is per thread; regions nest. */

typedef enum {
    AMP_CAST_NONE = 0,  /* unlisted: runs in its inputs' dtype */
    AMP_CAST_LOWER,     /* inputs cast to the autocast dtype (f16 / bf16) */
    AMP_CAST_FP32,      /* inputs cast to f32 */
    AMP_CAST_FP32_OUT,  /* computed and returned in f32 */
    AMP_CAST_PROMOTE,   /* inputs cast to the widest input dtype */
    AMP_CAST_BANNED,    /* an error under autocast */
    AMP_CAST_COUNT
} amp_cast_category;

/* Marks "no dtype given": the region inherits the enclosing one's. */
#define AMP_DTYPE_INHERIT AMP_DTYPE_COUNT

/* Opens a region on device type dev with dtype dt (f16 or bf16, or
 * AMP_DTYPE_INHERIT), autocast enabled and the cast cache on. */
AMP_API amp_status amp_autocast_begin(amp_device dev, amp_dtype dt);
/* The full form: enabled=false turns autocast off inside (still a nesting
 * level); cache_enabled=false makes every cast anew. */
AMP_API amp_status amp_autocast_begin_ex(amp_device dev, amp_dtype dt, bool enabled, bool cache_enabled);
/* Closes the innermost region, restoring the state before it; the outermost
 * end empties the cast cache. An end without a begin is an AMP_ERR_STATE. */
AMP_API amp_status amp_autocast_end(void);
/* The scoped form: AMP_AUTOCAST(AMP_CPU, AMP_BF16) { ... } runs the block
 * inside a region and ends it after. Leave the block only at its end (no
 * return, break or goto out of it). If the region cannot begin, the block
 * is skipped and amp_last_error() says why. */
#define AMP_AUTOCAST(dev, dt)                                                     \
    for (int amp_autocast_once_ = amp_autocast_begin((dev), (dt)) == AMP_OK;      \
         amp_autocast_once_; amp_autocast_once_ = 0, amp_autocast_end())
AMP_API bool amp_autocast_is_enabled(amp_device dev);
/* The dtype autocast lowers to on dev (defaults: cpu bf16, cuda f16). */
AMP_API amp_dtype amp_autocast_dtype(amp_device dev);
/* Open regions on this thread. */
AMP_API int amp_autocast_depth(void);
/* Entries in this thread's cast cache. */
AMP_API size_t amp_autocast_cache_size(void);

/* The category of op (by name) on device type dev, with any override. */
AMP_API amp_cast_category amp_autocast_category(const char *op, amp_device dev);
/* Overrides op's category on dev for every thread (PyTorch has no such
 * switch). AMP_CAST_COUNT restores the built-in category. */
AMP_API amp_status amp_autocast_set_category(const char *op, amp_device dev, amp_cast_category c);
AMP_API const char *amp_cast_category_name(amp_cast_category c);
/* The dtypes op would run in under autocast (dev, autocast dtype at) for
 * inputs of dtypes in[0..n): out[i] per input. Used for the CUDA policy
 * where no GPU is present. AMP_ERR_DTYPE for f16 mixed with bf16 under
 * PROMOTE, AMP_ERR_STATE for a BANNED op. */
AMP_API amp_status amp_autocast_plan(const char *op, amp_device dev, amp_dtype at, int n, const amp_dtype *in,
                                     amp_dtype *out);
/* Modules kept in f32 under autocast. Each path names a module as
 * PyTorch's named_modules() does ("h.0.attn", "ln_f", "fc1"; a
 * sequential's children by index, "0"); the ops run inside that module,
 * or inside a module under it, run in f32 where autocast would lower them
 * (their 16-bit inputs widened): a nested autocast(enabled=False) around
 * the module with its inputs cast to float, in PyTorch's terms. The rest
 * of the model is autocast as before. Replaces the set for every thread
 * (the paths are copied); n = 0 clears it. Set it between steps, not
 * while a forward runs. */
AMP_API amp_status amp_autocast_set_fp32_modules(const char *const *paths, int n);
/* How many module forwards entered the i-th path of the set (or a module
 * under it) since it was set; -1 past the set. A path with no hits after
 * a forward names no module the model ran. */
AMP_API long amp_autocast_fp32_module_hits(int i);
/* Names the ops run until amp_scope_end as if they were a module's at
 * path (the scope ops/modules record, which the anomaly check and the
 * audit report; a module in the fp32 set above is kept in f32 here too).
 * Module forwards enter their own paths by themselves; this is for code
 * outside any module, such as a loss ("loss"). Nests up to 64 deep per
 * thread. */
AMP_API amp_status amp_scope_begin(const char *path);
AMP_API amp_status amp_scope_end(void);
/* The path the current op would be recorded in ("" outside every scope). */
AMP_API const char *amp_scope_current(void);

/* Warnings (autocast disabled for an unsupported dtype, ...) go to this
 * handler; the default prints "ampc warning: ..." to stderr. NULL restores
 * the default. */
typedef void (*amp_warning_fn)(const char *msg, void *user);
AMP_API void amp_set_warning_handler(amp_warning_fn fn, void *user);

/* ------------------------------------------------------------ distributed */
/* Data-parallel training over several processes (ranks), on Open MPI for
 * CPU tensors and NCCL for CUDA tensors (docs/distributed.md). Start it
 * with mpirun -np N; each rank runs the same program on its own shard of
 * the data. Before amp_dist_init (and in a build without MPI) the world is
 * one rank: rank 0, size 1, every collective the identity.
 * Failures come back as errors on every rank, naming the rank: a rank
 * that cannot do its part before a collective (out of memory) makes every
 * rank's call fail with its message, and the run can go on. A rank that
 * fails inside a collective, stops or dies (a wait past the timeout names
 * the ranks that did not answer) ends the world: the call returns
 * AMP_ERR_IO, the other ranks' calls return the same message, and every
 * later collective (amp_dist_finalize too) returns it at once. The ranks
 * cannot go on together then: end the job (MPI_Abort, or exit non-zero
 * without finalizing: the launcher ends the others). */

typedef enum { AMP_REDUCE_SUM = 0, AMP_REDUCE_AVG, AMP_REDUCE_MAX } amp_reduce_op;

/* Whether this build of ampc has MPI (and so amp_dist_init can work). */
AMP_API bool amp_dist_available(void);
/* Starts MPI (argc / argv may be NULL), or joins an MPI the program
 * started itself (at MPI_THREAD_FUNNELED or above). Without MPI in the
 * build: AMP_ERR_STATE with a message naming what to install. Once per
 * process: MPI cannot start again after amp_dist_finalize. */
AMP_API amp_status amp_dist_init(int *argc, char ***argv);
AMP_API bool amp_dist_is_initialized(void);
AMP_API int amp_dist_rank(void);       /* 0 before amp_dist_init */
AMP_API int amp_dist_world_size(void); /* 1 before amp_dist_init */
/* Waits for every rank (with the timeout), then ends MPI if
 * amp_dist_init started it. After the world ended (above) it waits for no
 * one, leaves MPI as it is and returns that error. */
AMP_API amp_status amp_dist_finalize(void);
/* How long any wait for the other ranks may last before the call returns
 * an error saying what it waited for and which ranks did not answer (the
 * world then ends, above): seconds, default 300 or AMPC_DIST_TIMEOUT's;
 * <= 0 restores the default. */
AMP_API void amp_dist_set_timeout(double seconds);
/* In place over the ranks: a contiguous f32 tensor (SUM, AVG, MAX) or i64
 * one (SUM, MAX), on the CPU (MPI) or CUDA (NCCL). */
AMP_API amp_status amp_dist_all_reduce(amp_tensor *t, amp_reduce_op op);
/* t becomes rank root's (any dtype, contiguous). */
AMP_API amp_status amp_dist_broadcast(amp_tensor *t, int root);
AMP_API amp_status amp_dist_barrier(void);

/* DistributedDataParallel: averages the parameters' gradients over the
 * ranks in buckets of about bucket_mb MiB, each bucket's all-reduce
 * started during backward as soon as the gradients in it are complete, so
 * communication overlaps the rest of backward. Parameters are bucketed in
 * reverse order (the order backward completes them). */
typedef struct amp_ddp amp_ddp;

typedef struct {
    double bucket_mb;      /* bucket size in MiB (25, as DDP's bucket_cap_mb); > 0 */
    amp_dtype compress;    /* AMP_F32 (none), or AMP_BF16 / AMP_F16: each bucket sent rounded to
                              16 bits and summed in f32 on receipt (DDP's compression hooks) */
    bool broadcast_params; /* at amp_ddp_new, every rank takes rank 0's parameters (true) */
} amp_ddp_opts;

AMP_API amp_ddp_opts amp_ddp_defaults(void);
/* Over params[0..n) (the leaves that get gradients, on one device; each
 * under INT_MAX elements, the most one collective moves). Collective: a
 * refusal or allocation failure on any rank is NULL on every rank. */
AMP_API amp_ddp *amp_ddp_new(amp_tensor *const *params, int n, amp_ddp_opts o);
/* Collective when a synchronised backward is unfinished: it then does
 * amp_ddp_finish's collectives first (every rank must finish or free). */
AMP_API void amp_ddp_free(amp_ddp *d);
/* sync false: PyTorch's no_sync(): backward only accumulates locally (for
 * the micro-batches of gradient accumulation before the last); true (the
 * default) again before the last micro-batch's backward. */
AMP_API void amp_ddp_set_sync(amp_ddp *d, bool sync);
/* Waits for the buckets of the last synchronised backward (starting any
 * that backward did not): every parameter's .grad is then the average
 * over the ranks. Call it after that backward, before unscale, clipping
 * and the step. Without a synchronised backward since the last call it
 * does nothing. A failure on any rank (a gradient it could not pack, a
 * second synchronised backward before finish) is an error on every rank,
 * and then no rank's .grad is written.
 * Rule: between a synchronised backward and its finish, issue no other
 * collective (amp_dist_*, a ZeRO step, another ddp's finish in a different
 * order on some rank): buckets may still be starting, and ranks whose
 * graphs differ start them at different moments. Any backward begins a
 * synchronised backward of EVERY live ddp whose sync is on. */
AMP_API amp_status amp_ddp_finish(amp_ddp *d);

typedef struct {
    int64_t buckets;        /* buckets the parameters make */
    int64_t bytes_sent;     /* bytes handed to the engine by this rank, all steps */
    int64_t syncs;          /* synchronised backward passes finished */
    double wait_s;          /* time amp_ddp_finish spent waiting, all steps */
    double last_wait_s;     /* ... in the last call */
    int64_t early_buckets;  /* buckets started during backward, before amp_ddp_finish, all steps */
} amp_ddp_stats;
AMP_API amp_ddp_stats amp_ddp_get_stats(const amp_ddp *d);

/* ZeRO stage 1 (DeepSpeed): the optimizer's state sharded over the ranks.
 * The parameters, flattened in order, are cut into world-size contiguous
 * shards; each rank keeps optimizer state for its own shard only (1/N of
 * it), the gradients are reduce-scattered (each rank gets the average of
 * its shard), each rank updates its shard, and the parameters are
 * all-gathered. The results equal an unsharded data-parallel run's
 * (docs/distributed.md says when bit for bit). Used instead of an amp_ddp
 * (not beside one), with o over the same parameters. Every call but
 * amp_zero_free and amp_zero_state_bytes is a collective: every rank makes
 * it, in the same order. */
typedef struct amp_zero amp_zero;
/* Shards o (which must outlive z), keeping this rank's part of any state
 * it holds (a checkpoint loaded before). amp_zero_free leaves o sharded. */
AMP_API amp_zero *amp_zero_new(amp_optim *o);
AMP_API void amp_zero_free(amp_zero *z);
/* Averages the gradients over the ranks: after it each rank's gradients
 * hold the average on its own shard and zeros elsewhere. Call it once per
 * optimizer step, after the last micro-batch's backward. Refused (on every
 * rank) while the state is not sharded (amp_zero_gather_state, or a failed
 * amp_zero_shard_state), as is amp_zero_clip_grad_norm. */
AMP_API amp_status amp_zero_reduce_gradients(amp_zero *z);
/* The global norm of the reduced gradients (every rank gets the same),
 * clipped to max_norm as amp_clip_grad_norm does: each rank's sum of
 * squares over its shard, all-gathered (on CUDA in device memory through
 * NCCL) and added in the same order on every rank. It is sqrt of that
 * sum, so it may differ from the unsharded norm in the last bits (the
 * squares are added in another grouping). Returning the double waits for
 * the GPU on CUDA; amp_zero_clip_grad_norm_tensor does not (the norm in a
 * new 0-d f32 tensor on the parameters' device, as
 * amp_clip_grad_norm_tensor; NULL on error). With one rank both are the
 * plain clipping. */
AMP_API double amp_zero_clip_grad_norm(amp_zero *z, double max_norm);
AMP_API amp_tensor *amp_zero_clip_grad_norm_tensor(amp_zero *z, double max_norm);
/* After the optimizer step (amp_optim_step or amp_scaler_step, which
 * update this rank's shard): every rank gets every shard's new values. */
AMP_API amp_status amp_zero_gather_parameters(amp_zero *z);
/* The optimizer state in full (every shard's) on every rank, for saving,
 * then sharded again by amp_zero_shard_state (after a load too). Both agree
 * on their outcome over the ranks: an error on one is an error on all. */
AMP_API amp_status amp_zero_gather_state(amp_zero *z);
AMP_API amp_status amp_zero_shard_state(amp_zero *z);
/* This rank's optimizer state in bytes (for the 1/N check). */
AMP_API int64_t amp_zero_state_bytes(const amp_zero *z);

/* ------------------------------------------------------------ grad scaler */
/* Dynamic loss scaling with torch.amp.GradScaler's semantics (AMP_SPEC). */

typedef struct amp_scaler amp_scaler;

typedef struct {
    double init_scale;       /* 65536 = 2^16; positive and finite as an f32 */
    double growth_factor;    /* 2.0; must be > 1 when enabled */
    double backoff_factor;   /* 0.5; must be < 1 when enabled */
    int64_t growth_interval; /* 2000 */
    bool enabled;            /* true */
    /* Opt-in extras, off by default (0): */
    double min_scale;        /* > 0: the scale never backs off below it */
    double max_scale;        /* > 0: the scale never grows above it */
    int hysteresis;          /* > 1: the first hysteresis-1 overflows since the
                                scale last grew keep it; the hysteresis-th and
                                each one after it back off, until the scale
                                grows again (Megatron-LM) */
} amp_scaler_opts;

AMP_API amp_scaler_opts amp_scaler_defaults(void);
AMP_API amp_scaler *amp_scaler_new(amp_scaler_opts o);
AMP_API void amp_scaler_free(amp_scaler *s);

/* loss * scale (f32 scale); the loss itself when disabled. */
AMP_API amp_tensor *amp_scaler_scale(amp_scaler *s, amp_tensor *loss);
/* Divides o's gradients by the scale in one pass per dtype and records
 * whether any is inf/NaN. */
AMP_API amp_status amp_scaler_unscale(amp_scaler *s, amp_optim *o);
/* Unscales if not done yet, then steps o unless a non-finite gradient was
 * found. *skipped (may be NULL) says which. */
AMP_API amp_status amp_scaler_step(amp_scaler *s, amp_optim *o, bool *skipped);
/* Backs off or grows the scale from this iteration's records. */
AMP_API amp_status amp_scaler_update(amp_scaler *s);
/* Sets the scale to new_scale (positive and finite as an f32); the growth
 * tracker is kept. */
AMP_API amp_status amp_scaler_update_to(amp_scaler *s, double new_scale);

/* On CUDA the scale and the scaler's state live on the device (scale()
 * creates them on the loss's device) and step / update never wait for the
 * GPU; the getters below copy the state to the host, so reading the scale
 * is the explicit synchronisation point (as .item() in PyTorch). So is a
 * non-NULL `skipped` in amp_scaler_step on CUDA: pass NULL to avoid it. */
AMP_API double amp_scaler_get_scale(const amp_scaler *s);   /* 1.0 when disabled */
AMP_API double amp_scaler_get_growth_factor(const amp_scaler *s);
AMP_API double amp_scaler_get_backoff_factor(const amp_scaler *s);
AMP_API int64_t amp_scaler_get_growth_interval(const amp_scaler *s);
AMP_API int64_t amp_scaler_get_growth_tracker(const amp_scaler *s);
AMP_API void amp_scaler_set_growth_factor(amp_scaler *s, double f);
AMP_API void amp_scaler_set_backoff_factor(amp_scaler *s, double f);
AMP_API void amp_scaler_set_growth_interval(amp_scaler *s, int64_t n);
AMP_API bool amp_scaler_is_enabled(const amp_scaler *s);
/* With hysteresis N > 1: the steps with inf/NaN gradients the scaler
 * still lets pass (skipped, the scale kept) before it backs off, 1..N
 * (1: the next one backs off); 1 without hysteresis, 0 for a disabled or
 * NULL scaler. Not part of amp_scaler_state (PyTorch's state_dict has no
 * such field): amp_checkpoint_save keeps it beside that state, so a
 * resumed run continues the count. Set refuses a value outside
 * 1..max(N, 1). (A host read / write of the state: on CUDA a
 * synchronisation, as the getters.) */
AMP_API int amp_scaler_get_hysteresis_left(const amp_scaler *s);
AMP_API amp_status amp_scaler_set_hysteresis_left(amp_scaler *s, int left);

/* state_dict / load_state_dict. valid=false is the empty state of a
 * disabled scaler. Load checks the state as amp_scaler_new checks its
 * options, and the growth tracker in [0, growth_interval). */
typedef struct {
    bool valid;
    double scale, growth_factor, backoff_factor;
    int64_t growth_interval, growth_tracker;
} amp_scaler_state;
AMP_API amp_scaler_state amp_scaler_state_get(const amp_scaler *s);
AMP_API amp_status amp_scaler_state_load(amp_scaler *s, amp_scaler_state st);

/* Observability: steps taken and skipped, and the last scale changes.
 * skipped_in_a_row: the updates since the last one whose iteration was
 * clean that found inf/NaN, i.e. the iterations skipped in a row up to
 * now (0 after a clean one); a guard that stops a run which cannot train
 * reads it, and amp_checkpoint_save keeps it with the counts. */
typedef struct {
    int64_t steps, skipped;
    int64_t skipped_in_a_row;
} amp_scaler_counts;
AMP_API amp_scaler_counts amp_scaler_get_counts(const amp_scaler *s);
typedef struct {
    int64_t update;    /* the update() call that changed it (0-based) */
    double old_scale, new_scale;
} amp_scale_change;
/* Copies up to max of the most recent changes, oldest first; returns how many. */
AMP_API int amp_scaler_history(const amp_scaler *s, amp_scale_change *out, int max);
/* For param's (unscaled) gradient g at the current scale: how many nonzero
 * elements would round to zero in f16 (|g * scale| <= 2^-25) and how many
 * would overflow to inf (|g * scale| >= 65520, or g inf or NaN). The
 * scale must be positive and finite (amp_grad_f16_health's checks). */
AMP_API amp_status amp_scaler_f16_health(const amp_scaler *s, const amp_tensor *param, int64_t *underflow,
                                         int64_t *overflow);
/* The f16 health of gradients (the Quick Check, ampc train --health-every):
 * for every element g of the gradients of params[0..n) (those without one
 * are passed over), where g * scale would land if rounded to f16 (round
 * to nearest even, exact thresholds on the real product):
 *   zero       g is exactly 0 (nothing to lose; an unscaled f16 backward
 *              leaves the flushed ones here)
 *   underflow  g != 0 but |g * scale| <= 2^-25: rounds to 0
 *   subnormal  2^-25 < |g * scale| < 2^-14 - 2^-25: rounds to a subnormal
 *              (fewer than 11 significant bits)
 *   overflow   |g * scale| >= 65520 (rounds to inf), g finite
 *   nonfinite  g is inf or NaN
 * Fractions are these over numel. at_scale gets them with `scale`
 * (positive and finite; the scaler's: amp_scaler_get_scale), unscaled
 * (may be NULL) with scale 1, from the same read. Each gradient is read on
 * the host: on CUDA copied there first (a wait), so call it at the steps
 * it reports, not every step. */
typedef struct {
    int64_t numel, zero, underflow, subnormal, overflow, nonfinite;
} amp_f16_health;
AMP_API amp_status amp_grad_f16_health(amp_tensor *const *params, int n, double scale, amp_f16_health *at_scale,
                                       amp_f16_health *unscaled);

/* Diagnosing inf/NaN (what the scaler's fused check does not say): they
 * read every element, copying a CUDA tensor to the host first (a wait). */
/* Inf/NaN elements of t (0 for an integer tensor); -1 + error on failure. */
AMP_API int64_t amp_tensor_count_nonfinite(const amp_tensor *t);
/* *index: the first of o's parameters (in its order) whose gradient holds
 * inf/NaN, -1 when every gradient is finite or missing; *count (may be
 * NULL): how many of its elements. */
AMP_API amp_status amp_optim_find_nonfinite_grad(const amp_optim *o, int *index, int64_t *count);

/* ------------------------------------------------------- anomaly detection */
/* PyTorch's detect_anomaly, naming the op: with it on, every op's result
 * (forward) and every gradient a node's backward makes are checked for
 * inf/NaN right after the kernel wrote them (the backend's count, one
 * pass; on a GPU a wait per op). The first one is reported with the op,
 * the module it ran in, the dtypes and each input's statistics. Off, an
 * op pays one branch. The check is the process's node observer: enabling
 * it while another observer is set is an AMP_ERR_STATE error. */

/* One tensor of a report: an input of the op as it saw it (after
 * autocast) or, in backward, the gradient of the op's result. min, max
 * and absmax are over the finite elements (NaN when there are none);
 * nonfinite counts the inf/NaN elements (0 for an integer tensor). */
typedef struct {
    amp_dtype dtype;
    amp_shape shape;
    double min, max, absmax;
    int64_t nonfinite;
} amp_anomaly_tensor;

#define AMP_ANOMALY_INPUTS 8 /* inputs described in a report; all are checked */

/* Where an inf/NaN first appeared. */
typedef struct {
    int64_t step, micro_batch; /* amp_anomaly_set_context's values; -1 when never set */
    bool backward;             /* the phase: false forward, true backward */
    bool recompute;            /* forward: a checkpointed block's re-run inside backward */
    char op[32];               /* the op table's name: "linear", "log", "to" (an autocast cast) */
    char module[128];          /* PyTorch's module path ("h.1.attn.qkv", "fc1"); "" outside every module */
    amp_device device;
    amp_cast_category category; /* the op's autocast category on device */
    amp_dtype dtype;            /* the dtype of the tensor that held inf/NaN: the one the op ran in */
    int result;                 /* backward: the input whose gradient it is; forward: 0 */
    int64_t nonfinite, numel;   /* in that tensor */
    bool inputs_finite;         /* every input (and in backward the result's gradient) was finite:
                                   the op itself overflowed (an f16 result past 65504) or made a NaN */
    int n_inputs;               /* the op's inputs; the first AMP_ANOMALY_INPUTS are in in[] */
    amp_anomaly_tensor in[AMP_ANOMALY_INPUTS];
    amp_anomaly_tensor grad; /* backward: the gradient of the op's result (dtype AMP_DTYPE_COUNT in forward) */
} amp_anomaly_report;

/* Turns the check on or off (on clears the reports). */
AMP_API amp_status amp_anomaly_enable(bool on);
AMP_API bool amp_anomaly_enabled(void);
/* false (the default, as PyTorch): the first inf/NaN fails the op, whose
 * result is dropped (it returns NULL) or stops the backward, with the
 * report's line (amp_anomaly_format) as the error. true: ops go on; the
 * first inf/NaN of each pass (see below) is recorded, and the rest of the
 * pass is not checked (what follows an inf is its consequence). */
AMP_API void amp_anomaly_set_continue(bool on);
/* Starts a pass (a micro-batch's forward and backward): the step and
 * micro-batch that reports carry (1-based in the CLI; any values). */
AMP_API void amp_anomaly_set_context(int64_t step, int64_t micro_batch);
/* The reports recorded since the check was enabled, one per distinct
 * (phase, op, module), in the order they first happened. */
AMP_API int amp_anomaly_count(void);
/* Report i (0 <= i < amp_anomaly_count) into *out; AMP_ERR_ARG past them. */
AMP_API amp_status amp_anomaly_get(int i, amp_anomaly_report *out);
/* The current pass's first inf/NaN into *out (its step and micro-batch
 * the pass's); false when the pass had none. With continue on, an op
 * reported in an earlier pass keeps that pass's statistics. */
AMP_API bool amp_anomaly_last(amp_anomaly_report *out);
/* The report as one line, "anomaly: op=... module=... phase=... step=...
 * dtype=... ...", into buf (n bytes, truncated, NUL-terminated): as
 * snprintf, the length the whole line needs. */
AMP_API int amp_anomaly_format(const amp_anomaly_report *r, char *buf, size_t n);

/* The precision audit (`ampc audit`, src/amp/audit.c): what a 16-bit run
 * moved, per op call site, against an fp32 shadow run on the same
 * weights and batch. amp_audit_record makes the ops that follow (forward
 * outputs, and in backward the gradients each node makes for its inputs)
 * the reference, each kept widened to f32 under its key: forward or
 * backward, module path, op name, and the how-many-th call of that key
 * since the record began. amp_audit_compare then compares each call the
 * ops make against the reference of the same key, adding to that site's
 * statistics. Autocast's casts (op "to") have no counterpart in an fp32
 * run and are passed over, as are a checkpointed block's recomputes.
 * Uses the node observer: one audit at a time, none beside another
 * observer. Values are read on the host (a CUDA tensor is copied: a
 * wait). Per element, with a = the audited value and s = the reference:
 *   rel       |a - s| / max(|s|, 1e-3 * max|s| of the tensor), over the
 *             elements where both are finite (a 0 reference tensor
 *             divides by f32's smallest normal)
 *   flushed   a == 0 where s is a nonzero normal f32
 *   subnormal a is nonzero and below the smallest normal of a's dtype
 *   overflow  a is inf where s is finite
 *   overflow_made  of those, the ones in calls whose inputs (forward) or
 *             incoming gradient and inputs (backward) were all finite:
 *             values this op made inf, not ones it passed on */
typedef struct amp_audit amp_audit;
typedef struct {
    const char *scope;   /* module path ("" outside every module) */
    const char *op;      /* the op table's name */
    bool backward;       /* the gradients the op's backward made */
    amp_dtype dtype;     /* the audited values' dtype (the last call's) */
    int64_t calls;       /* calls compared */
    int64_t unmatched;   /* calls with no reference of their key and shape */
    int64_t values;      /* elements compared */
    int64_t finite;      /* of those, with a and s both finite (rel's count) */
    double max_rel, sum_rel;   /* mean rel = sum_rel / finite */
    double sum_sq_diff, sum_sq_ref; /* norm-wise error = sqrt(diff / ref) */
    int64_t flushed, subnormal, overflow;
    int64_t overflow_made;
} amp_audit_site;
AMP_API amp_audit *amp_audit_new(void);
AMP_API void amp_audit_free(amp_audit *a);
/* From now until amp_audit_stop: the ops' values are the reference
 * (the previous reference is dropped). */
AMP_API amp_status amp_audit_record(amp_audit *a);
/* From now until amp_audit_stop: the ops' values are compared against
 * the reference (each key's calls counted from the first again). */
AMP_API amp_status amp_audit_compare(amp_audit *a);
/* Stops observing; the statistics stay. */
AMP_API void amp_audit_stop(amp_audit *a);
/* Drops the reference values (the statistics stay). */
AMP_API void amp_audit_drop_reference(amp_audit *a);
/* The sites seen so far (recorded or compared; calls counts the compared
 * ones), in the order first seen; NULL past the end. A site's address
 * holds until the next record or compare. */
AMP_API int amp_audit_num_sites(const amp_audit *a);
AMP_API const amp_audit_site *amp_audit_site_at(const amp_audit *a, int i);
/* The statistics of two tensors of the same numel, as a compare adds
 * them to a site (tests and callers with their own pairs). */
AMP_API amp_status amp_audit_compare_tensors(const amp_tensor *audited, const amp_tensor *reference,
                                             amp_audit_site *into);

/* ----------------------------------------------------------------- models */
/* Ready-made models: the CLI's, the benchmarks' and the examples'. */

/* in -> hidden[0] -> ... -> classes, ReLU between the linear layers. */
AMP_API amp_module *amp_model_mlp(int64_t in, const int64_t *hidden, int n_hidden, int64_t classes);
/* conv in_ch->32 3x3 pad 1, ReLU, max-pool 2; conv 32->64 3x3 pad 1, ReLU,
 * max-pool 2; flatten; linear -> 128, ReLU; linear 128 -> classes. Input
 * [N, in_ch, height, width] (height and width divisible by 4). */
AMP_API amp_module *amp_model_cnn(int64_t in_ch, int64_t height, int64_t width, int64_t classes);

typedef struct {
    int64_t vocab;    /* tokens */
    int64_t context;  /* longest sequence (learned positions) */
    int64_t width;    /* embedding width */
    int64_t layers;
    int64_t heads;    /* width % heads == 0 */
    int64_t mlp;      /* hidden width of each block's MLP (GELU) */
    double dropout;   /* 0 for none */
    bool checkpoint_activations; /* each block through amp_checkpoint (amp_gpt_set_checkpointing) */
    bool no_bias;     /* linears and LayerNorms without biases (nanoGPT's bias=False) */
    bool gelu_exact;  /* the MLP's GELU in the erf form (nanoGPT's nn.GELU()); false: tanh (GPT-2's) */
} amp_gpt_config;
/* A decoder-only transformer: token + learned position embeddings,
 * pre-LayerNorm blocks of causal self-attention and a GELU MLP, a final
 * LayerNorm, and an output head tied to the token embedding; q, k and v
 * are one fused linear per block (qkv [3 width, width]). Its forward
 * takes token indices [B, T] (i32/i64, T <= context) and returns logits
 * [B, T, vocab]. */
AMP_API amp_module *amp_model_gpt(amp_gpt_config c);
/* Turns activation checkpointing of each block on or off (the config's
 * checkpoint_activations): a block keeps only its input and is recomputed
 * in backward (amp_checkpoint); the same values and gradients, bit for
 * bit, for less memory and about one more forward. A forward with grad
 * disabled (an evaluation) holds one block's temporaries at a time.
 * Switching the model between training and evaluation mode between a
 * forward and its backward changes the recompute (dropout). AMP_ERR_ARG
 * when m is not a gpt model. */
AMP_API amp_status amp_gpt_set_checkpointing(amp_module *m, bool on);

/* Generation with a key/value cache (docs/generate.md). The cache keeps
 * each block's keys and values of the positions a gpt model has seen, so
 * a forward runs only the new positions: the prompt once, then one
 * position per token, attending over the cache. For batch rows of the
 * gpt model m (which must outlive it); its memory (2 * layers * context *
 * batch * width values in the forward's k / v dtype, on m's device) is
 * made at the first forward. AMP_ERR_ARG for a model that is not a gpt. */
typedef struct amp_gpt_cache amp_gpt_cache;
AMP_API amp_gpt_cache *amp_gpt_cache_new(const amp_module *m, int64_t batch);
AMP_API void amp_gpt_cache_free(amp_gpt_cache *c);
/* Positions held (0 after new or reset). */
AMP_API int64_t amp_gpt_cache_len(const amp_gpt_cache *c);
/* Forgets every position (the memory stays for the next prefill; that
 * prefill remakes it when it runs in another dtype or on another device). */
AMP_API void amp_gpt_cache_reset(amp_gpt_cache *c);
/* Logits [B, T, vocab] of tokens idx [B, T] (i32 / i64, B the cache's
 * batch) at positions len .. len + T - 1, whose keys and values join the
 * cache (len grows by T). The same values as the model's forward over the
 * whole sequence at those positions (docs/generate.md: bit for bit on the
 * CPU in f32 up to the GEMMs' blocking). Inference only: runs with grad
 * disabled, no graph; in the module's mode (amp_module_train(m, false)
 * for dropout off); inside the caller's autocast region if any (the
 * cache keeps one dtype: a change of precision needs a reset). Past the
 * context (len + T > context): AMP_ERR_SHAPE, nothing changed - crop the
 * sequence and refill a reset cache. */
AMP_API amp_tensor *amp_gpt_forward_cached(amp_module *m, amp_gpt_cache *c, amp_tensor *idx);
/* The next token of each row of logits [B, vocab] or [B, T, vocab] (its
 * last position), as nanoGPT samples: logits / temperature, only the
 * top_k largest kept (ties with the k-th too; 0: all), softmax, one draw
 * from Philox4x32-10 keyed by seed at counter (draw, row), so the same
 * (seed, draw) gives the same token. temperature 0: greedy, the first
 * largest logit. tokens[B] out. AMP_ERR_ARG for temperature < 0 or not
 * finite, top_k outside 0 .. vocab, or a logit that is inf / NaN. */
AMP_API amp_status amp_sample_next(const amp_tensor *logits, double temperature, int64_t top_k, uint64_t seed,
                                   uint64_t draw, int64_t *tokens);

/* --------------------------------------------------------------------- io */

/* Reads an IDX file (optionally gzip-compressed) into a tensor of dt; the
 * caller owns it (amp_tensor_free). Pixel bytes keep their 0..255 values.
 * Errors name the file and what is wrong: AMP_ERR_IO (missing, unreadable,
 * not a regular file: a FIFO or a device is refused without blocking),
 * AMP_ERR_FORMAT (bad magic or type, truncated, trailing bytes). */
AMP_API amp_tensor *amp_idx_load(const char *path, amp_dtype dt);

/* Checkpoints, in the safetensors format (Python's safetensors and
 * PyTorch open the tensors by name). One file holds the model's parameters
 * (by their module names), the optimizer's state ("optim.<name>.<key>",
 * name the parameter's module name, and step counts), the scaler's state, the step, the global RNG state and the
 * run's settings (a JSON string in the header's __metadata__). Written to a
 * temporary file, fsynced and renamed into place: a crash never leaves a
 * half-written checkpoint under path. The temporaries "<path>.tmp.<pid>"
 * that killed saves left are removed first (those of pids that are not
 * live processes). Weights or optimizer state holding inf / NaN are not
 * saved (AMP_ERR_STATE naming the tensor; the file under path is left as
 * it was), so a diverged run never replaces its last good checkpoint.
 * Any pointer but path and m may be NULL to leave that part out. */
AMP_API amp_status amp_checkpoint_save(const char *path, const amp_module *m, const amp_optim *o,
                                       const amp_scaler *s, int64_t step, const char *settings_json);
/* Loads what amp_checkpoint_save wrote into an already-built model (and
 * optimizer / scaler with its step counters, when given), restores the
 * global RNG state, and returns the step and (malloc'd, caller frees) the
 * settings. A corrupt, truncated or mismatching file, a number out of its
 * range (a negative step, a counter above 2^53), an inf / NaN weight or
 * optimizer buffer, or a path that is not a regular file is an error
 * naming the file and the problem, and then nothing has been changed.
 * Files of older versions load too: optimizer state by index
 * ("optim.<i>.<key>"), and a gpt's index names with separate q, k, v
 * linears, converted on load with a warning (qkv = cat(q, k, v);
 * docs/interop.md). */
AMP_API amp_status amp_checkpoint_load(const char *path, amp_module *m, amp_optim *o, amp_scaler *s,
                                       int64_t *step, char **settings_json);

/* A character-level text corpus: the bytes of a file, with a vocabulary of
 * the distinct bytes present (sorted). */
typedef struct amp_text amp_text;
/* Reads path (a regular file, or a directory of them); errors name the
 * file (missing, empty, unreadable, not a regular file, larger than
 * memory). */
AMP_API amp_text *amp_text_load(const char *path);
AMP_API int64_t amp_text_vocab(const amp_text *t);
AMP_API int64_t amp_text_length(const amp_text *t);
/* The byte with token id `id` (for printing samples). */
AMP_API int amp_text_char(const amp_text *t, int64_t id);
/* Fills x and y ([B, T] i64, caller-allocated) with B windows of T tokens
 * and their next-token targets, starting at positions drawn with seed from
 * the split: the first 90% of the text (val = false) or the last 10%. */
AMP_API amp_status amp_text_batch(const amp_text *t, bool val, uint64_t seed, amp_tensor *x, amp_tensor *y);
/* As amp_text_batch, from shard `part` of `parts` of the split: its
 * part-th contiguous 1/parts of the tokens (a window never leaves its
 * shard, so the shards of data-parallel ranks share no token). Shard 0 of
 * 1 is amp_text_batch's batch. */
AMP_API amp_status amp_text_batch_shard(const amp_text *t, bool val, uint64_t seed, int part, int parts,
                                        amp_tensor *x, amp_tensor *y);
AMP_API void amp_text_free(amp_text *t);

#ifdef __cplusplus
}
#endif
#endif /* AMPC_H */
