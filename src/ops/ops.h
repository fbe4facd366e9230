/*
 * ops.h - the op table and what op implementations share.
 *
 * Each public op (amp_add, amp_matmul, ...) is a thin call to op_apply
 * with its row of the table, its inputs and its params (the row's struct,
 * op_params.h). op_apply checks the inputs, applies autocast, runs the
 * forward, records the node when a gradient is needed, and hands the
 * result to the thread's pool.
 *
 * A forward returns a new tensor (one reference, owned by the caller) or
 * NULL with the error set; it may store tensors in n->saved when
 * n->needs_grad. A backward fills gin[i] (a new owned tensor with the
 * shape and dtype of input i) for each input that requires a gradient,
 * and may leave the others NULL. A cost gives the FLOPs and bytes of the
 * forward (backward false) or the backward of the node, from its inputs'
 * shapes and n->out_shape / out_dtype (set once the forward has run).
 * All three take the row's params struct, typed.
 */
#ifndef AMPC_OPS_H
#define AMPC_OPS_H

#include "autograd/graph.h"
#include "base/base.h"
#include "record/profile.h"
#include "dtype/dtype.h"
#include "ops/op_params.h"

typedef enum {
    CAST_NONE = 0,
    CAST_LOWER,
    CAST_FP32,
    CAST_FP32_OUT,
    CAST_PROMOTE,
    CAST_BANNED,
} cast_policy;

/* What a forward or a backward costs, for the profiler: floating-point
 * operations (a multiply-add is 2) and bytes moved (read + written). */
typedef struct op_cost {
    double flops, bytes;
} op_cost;

/* A row's functions as the table calls them: op_table.c wraps each row's
 * typed forward, backward and cost in these, passing the node's params. */
typedef amp_tensor *(*op_forward_fn)(node *n);
typedef amp_status (*op_backward_fn)(node *n, const amp_tensor *gout, amp_tensor **gin);
typedef op_cost (*op_cost_fn)(const node *n, bool backward);

typedef struct op_def {
    const char *name;
    cast_policy cast[AMP_DEVICE_COUNT];
    op_forward_fn forward;
    op_backward_fn backward;
    op_cost_fn cost;
    size_t params_size;   /* sizeof the row's params struct */
    prof_args_fn args;    /* names a copy of its params for the trace */
} op_def;

enum {
#define X(e, name, cpu, cuda, P, fwd, bwd, cost) OP_##e,
#include "ops/op_list.h"
#undef X
    OP_COUNT
};

/* Each row's functions, typed by its params struct. */
#define X(e, name, cpu, cuda, P, fwd, bwd, cost)                                                \
    amp_tensor *fwd(node *n, const P##_params *p);                                              \
    amp_status bwd(node *n, const P##_params *p, const amp_tensor *gout, amp_tensor **gin);     \
    op_cost cost(const node *n, const P##_params *p, bool backward);
#include "ops/op_list.h"
#undef X

extern const op_def op_table[OP_COUNT];

/* An op's node: the autograd node, then the op's parameters (the member
 * of p its row names). op_run allocates one per op call; node_release
 * frees it whole (base is first). The checkpoint's node is no op_node. */
typedef struct op_node {
    node base;
    op_params p;
} op_node;

static inline const op_params *op_node_params(const node *n) { return &((const op_node *)n)->p; }

/* n's cost by its row's cost function (n an op_node after its forward). */
op_cost op_cost_of(const node *n, bool backward);

/* Whether dev's backend runs op for the inputs of n (their dtypes; n may
 * be NULL: any dtypes). */
bool op_supported(amp_device dev, int op, const node *n);

/* Runs op on in[0..n_in) with params p (the member its row names; NULL:
 * all zero). The result is a pool temporary; NULL with the error set (or
 * kept, for NULL inputs). The public op functions (each in its family's
 * file) call it; it checks the inputs, asks autocast_inputs for their
 * autocast dtypes, then calls op_run. */
amp_tensor *op_apply(int op, amp_tensor *const *in, int n_in, const op_params *p);
/* The part of op_apply below autocast: runs the forward on inputs that
 * are non-NULL, on one device and already in the dtypes the op runs in,
 * and records the node. Autocast's casts (`to` ops) come through here, so
 * op_apply -> autocast_inputs -> op_run never loops back. */
amp_tensor *op_run(int op, amp_tensor *const *in, int n_in, const op_params *p);
/* Autocast's step of op_apply (autocast.c): replaces in[i] by its cast
 * where op's category on the inputs' device asks for one; out[i] is in[i]
 * itself or a cast (a pool temporary, or from the cast cache). Returns
 * AMP_OK, or an error for a banned op or f16 mixed with bf16 under
 * PROMOTE. Does nothing outside autocast. */
amp_status autocast_inputs(int op, amp_tensor *const *in, int n, amp_tensor **out);
/* The kept 16-bit copy a `to` op with from_kept_copy returns a view of
 * (autocast.c reuses a weight's cast from an earlier region that way),
 * NULL outside such a call. */
amp_tensor *autocast_kept_copy(void);
/* Turns the kept copies on or off for every thread (AMPC_KEEP_CASTS's
 * setting until then); copies kept already stay until replaced or freed. */
void autocast_keep_casts_set(bool on);
/* p's kept 16-bit copy when an optimizer step may write p's update into
 * it in the same pass (the weight's next cast, made while the value is in
 * cache): kept copies are on, the copy is fresh (p's current data, cast)
 * and nothing but p's storage holds it (no graph, view or user tensor
 * sees it change). NULL otherwise. */
amp_tensor *autocast_kept_for_update(const amp_tensor *p);
/* After a step that wrote p's kept copy (or skipped, leaving both as
 * they were): the copy is p's cast at p's current version. */
void autocast_kept_updated(amp_tensor *p);

/* The cost helpers the rows' cost functions share (cost.c). */
/* Bytes of a forward (every input read, the result written: n->out_shape
 * in n->out_dtype) or a backward (gout read, every input read, and the
 * gradient of each input that needs one written). */
double cost_bytes(const node *n, bool backward);
/* A pointwise op: 1 FLOP per element of the result; backward 1 per
 * element of each gradient made. */
op_cost cost_pointwise(const node *n, bool backward);
/* A row that moves data and does no arithmetic: 0 FLOPs, its bytes. */
op_cost cost_moves_data(const node *n, bool backward);
/* Whether input i needs a gradient (for a backward's count). */
bool cost_needs(const node *n, int i);
/* A product of prod FLOPs whose epilogue adds a bias (input 2) and / or
 * an activation over the ew elements of its result: forward prod + ew for
 * each; backward prod for each of inputs 0 and 1 that needs a gradient,
 * ew for the bias's and ew through the activation. */
op_cost cost_product(const node *n, bool backward, double prod, double ew, bool bias, bool act);
/* Defines a row's cost function `name` (typed by its params family, as
 * the row declares it) as one of the shared costs above, for a row whose
 * count reads no parameter. */
#define OP_COST_IS(name, family, shared)                                                          \
    op_cost name(const node *n, const family##_params *p, bool backward)                         \
    {                                                                                             \
        (void)p;                                                                                  \
        return shared(n, backward);                                                               \
    }

/* Autocast's state on this thread: per device whether a region lowers and
 * to which dtype (0: the device's default), whether casts are cached, and
 * whether the current module is kept in f32 (scope.h: what autocast
 * would lower runs in f32 there). */
typedef struct {
    bool enabled[AMP_DEVICE_COUNT];
    amp_dtype dtype[AMP_DEVICE_COUNT];
    bool cache_enabled;
    bool fp32_scope;
} autocast_state;
/* Sets this thread's fp32_scope (scope.c, on entering and leaving a
 * module kept in f32); returns the previous value. */
bool autocast_fp32_scope_set(bool on);
/* A region opened by autocast_scope_begin: the cast cache set aside. */
typedef struct {
    int depth;
    void *cache;
    size_t len, cap;
} autocast_scope;
autocast_state autocast_state_get(void);
/* Opens a region in state s with an empty cast cache of its own (the
 * current one set aside, untouched), so casts made inside never meet the
 * casts (and graphs) of the code around it: activation checkpointing runs
 * and recomputes its function in one. autocast_scope_end closes it (and
 * any region left open inside), frees its cache and brings the set-aside
 * cache back. */
amp_status autocast_scope_begin(autocast_scope *sc, const autocast_state *s);
void autocast_scope_end(autocast_scope *sc);

/* Set by op_run when an op made a float result (one that can carry a
 * gradient) with grad disabled from an input that requires grad:
 * amp_checkpoint (checkpoint.c) learns this way that its function reads
 * a parameter that requires grad. */
extern _Thread_local bool op_grad_input_seen;

#include "ops/fused.h"

/* The op's name, for error messages. */
static inline const char *op_name(const node *n) { return op_table[n->op].name; }

/* Error helpers that name the op and the offending shapes / dtypes. */
void *op_fail_shapes(const node *n, const char *why);
void *op_fail_dtype(const node *n, int input, const char *why);
/* Checks that input i is a float tensor; sets the error and returns false. */
bool op_require_float(const node *n, int input);
/* Whether input i needs a gradient. */
static inline bool in_needs_grad(const node *n, int i) { return n->in[i] && n->in[i]->requires_grad; }
/* The gradient through a relu fused into linear or conv2d: gout where the
 * fused op's output y is > 0, else 0 (threshold_backward), in gout's
 * dtype; a new tensor, or NULL with the error set. */
amp_tensor *relu_grad_from_output(const amp_tensor *gout, const amp_tensor *y);
/* Saves an alias of t (sharing storage, no history) in slot k. */
amp_status op_save(node *n, int k, const amp_tensor *t);

#endif
