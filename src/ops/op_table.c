/*
 * op_table.c - the op table and op_apply, the one path every op takes:
 * op_apply checks the inputs and casts them for autocast (autocast.c),
 * op_run runs the forward and records the node.
 *
 * The table is made from op_list.h's rows: per row, the small wrappers
 * that call the row's typed forward, backward and cost on the node's
 * params, and per params family (op_params.h) the function that names a
 * copy of its fields for the profiler's trace.
 */
#include "ops/ops.h"
#include "ops/scope.h"
#include "backend/backend.h"
#include "record/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------- the params by name */

/* One field of a params struct as the profiler writes it (profile.h). */
#define ARG_INT(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_INT, .i = (v)})
#define ARG_U64(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_U64, .u = (v)})
#define ARG_FLOAT(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_FLOAT, .f = (v)})
#define ARG_BOOL(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_BOOL, .i = (v) ? 1 : 0})
#define ARG_DTYPE(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_STR, .s = amp_dtype_name(v)})
#define ARG_GELU(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_STR, .s = (v) == AMP_GELU_TANH ? "tanh" : "none"})
#define ARG_ACT(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_STR, .s = act_name(v)})
#define ARG_LAYOUT(nm, v) ((prof_arg){.name = nm, .kind = PROF_ARG_STR, .s = layout_name(v)})
#define ARG_DIMS(nm, v)                                                                                       \
    ((prof_arg){.name = nm, .kind = PROF_ARG_INTS, .ints = (v).d,                                              \
                .n_ints = (v).n < 0 ? 0 : (v).n > AMP_MAX_DIMS ? AMP_MAX_DIMS : (int)(v).n})

static const char *act_name(op_act a)
{
    return a == OP_ACT_NONE ? "none" : a == OP_ACT_RELU ? "relu" : a == OP_ACT_GELU_TANH ? "gelu_tanh" : "?";
}

static const char *layout_name(attn_layout l)
{
    return l == ATTN_HEADS_FIRST ? "heads_first"
           : l == ATTN_BTHD    ? "bthd"
           : l == ATTN_CACHED  ? "cached"
           : l == ATTN_QKV     ? "qkv"
                               : "?";
}

/* Per family, <family>_args: the fields of a copy of its struct, in the
 * order FIELDS_<family> lists them (op_params.h). */
#define PUT_ARG(kind, name)                                                                                   \
    if (k < max)                                                                                              \
        out[k++] = ARG_##kind(#name, p->name);
#define FAMILY_ARGS(family)                                                                                   \
    static int family##_args(const prof_params *v, prof_arg *out, int max)                                    \
    {                                                                                                         \
        const family##_params *p = (const family##_params *)v->bytes;                                         \
        int k = 0;                                                                                            \
        FIELDS_##family(PUT_ARG)                                                                              \
        (void)p, (void)out, (void)max; /* none_params has no field */                                         \
        return k;                                                                                             \
    }
OP_PARAM_FAMILIES(FAMILY_ARGS)
#undef FAMILY_ARGS
#undef PUT_ARG

_Static_assert(sizeof(op_params) <= PROF_PARAMS_BYTES, "an event's copy of the params must hold every family");
_Static_assert(_Alignof(op_params) <= _Alignof(prof_params), "the event's copy is aligned for every family");

/* -------------------------------------------------------------- the table */

/* Each row's functions as the table calls them: the row's typed forward,
 * backward and cost on the node's params, the member the row names. */
#define X(e, nm, cpu, cuda, P, fwd, bwd, cost)                                                                 \
    static amp_tensor *e##_forward(node *n) { return fwd(n, &op_node_params(n)->P); }                        \
    static amp_status e##_backward(node *n, const amp_tensor *gout, amp_tensor **gin)                        \
    {                                                                                                         \
        return bwd(n, &op_node_params(n)->P, gout, gin);                                                      \
    }                                                                                                         \
    static op_cost e##_cost(const node *n, bool backward) { return cost(n, &op_node_params(n)->P, backward); }
#include "ops/op_list.h"
#undef X

const op_def op_table[OP_COUNT] = {
#define X(e, nm, cpu, cuda, P, fwd, bwd, cost)                                                                 \
    [OP_##e] = {nm, {CAST_##cpu, CAST_##cuda}, e##_forward, e##_backward, e##_cost, sizeof(P##_params), P##_args},
#include "ops/op_list.h"
#undef X
};

op_cost op_cost_of(const node *n, bool backward) { return op_table[n->op].cost(n, backward); }

/* The node's part of a profiler event (node_profile_fn): the row's cost
 * and a copy of the op's params with the function that names them. */
static void op_profile(const node *n, prof_event *e, bool backward)
{
    const op_def *d = &op_table[n->op];
    const op_cost c = d->cost(n, backward);
    e->flops = c.flops;
    e->bytes = c.bytes;
    memcpy(e->params.bytes, op_node_params(n), d->params_size);
    e->args = d->args;
}

/* The profiler's forward event (profile.h), with the profiler on: the
 * device and its first mark before the forward; then the inputs' dtypes
 * and shapes as the forward saw them (after autocast), the result's, and
 * the node's part (op_profile: the cost, the params). */
static void prof_forward_begin(prof_event *e, const node *n)
{
    amp_device dev = n->n_in > 0 && n->in[0] ? tensor_device(n->in[0]) : AMP_CPU;
    e->device = (uint8_t)dev;
    e->dev_mark0 = prof_device_mark(dev);
}

static void prof_forward_end(prof_event *e, const node *n, const amp_tensor *out)
{
    e->dev_mark1 = prof_device_mark((amp_device)e->device);
    for (int i = 0; i < n->n_in && i < PROF_MAX_TENSORS; i++) {
        const amp_tensor *x = n->in[i];
        prof_set_tensor(&e->in[i], x->dtype, x->shape.d, x->shape.ndim);
    }
    e->n_in = (uint8_t)(n->n_in < PROF_MAX_TENSORS ? n->n_in : PROF_MAX_TENSORS);
    if (out) {
        prof_set_tensor(&e->out, out->dtype, out->shape.d, out->shape.ndim);
        op_profile(n, e, false);
    }
    prof_end(e);
}

/* Notes out's shape and dtype in n (what a cost reads); returns out. */
static amp_tensor *set_out(node *n, amp_tensor *out)
{
    if (out) {
        n->out_shape = out->shape;
        n->out_dtype = out->dtype;
    }
    return out;
}

/* The forward on the inputs' device, after asking its backend whether it
 * can run there at all: the row's forward is device-neutral, the backend
 * does the element work. With the profiler on, the forward is an event. */
static amp_tensor *device_forward(int op, node *n)
{
    amp_device dev = n->n_in > 0 && n->in[0] ? tensor_device(n->in[0]) : AMP_CPU;
    const char *name = op_table[op].name;
    if (backend_check(dev, name) != AMP_OK)
        return NULL;
    if (!op_supported(dev, op, n))
        return amp_fail_null(AMP_ERR_DEVICE, "%s: the %s backend does not support this op for these dtypes", name,
                             backend_of(dev)->name);
    prof_event *pe = prof_begin(PROF_OP_FWD, name);
    if (!pe)
        return set_out(n, op_table[op].forward(n));
    prof_forward_begin(pe, n);
    amp_tensor *out = set_out(n, op_table[op].forward(n));
    prof_forward_end(pe, n, out);
    return out;
}

bool op_supported(amp_device dev, int op, const node *n)
{
    const amp_backend *be = backend_of(dev);
    if (op < 0 || op >= OP_COUNT)
        return false;
    if (!be->supports_op)
        return true;
    amp_dtype dts[8];
    int k = 0;
    for (int i = 0; n && i < n->n_in && k < 8; i++)
        if (n->in[i])
            dts[k++] = n->in[i]->dtype;
    return be->supports_op(op, dts, k);
}

int amp_op_count(void) { return OP_COUNT; }

const char *amp_op_name(int op) { return (op >= 0 && op < OP_COUNT) ? op_table[op].name : NULL; }

void *op_fail_shapes(const node *n, const char *why)
{
    char msg[400];
    size_t k = (size_t)snprintf(msg, sizeof msg, "%s: %s (", op_name(n), why);
    for (int i = 0; i < n->n_in && k < sizeof msg; i++) {
        char b[96];
        if (n->in[i])
            k += (size_t)snprintf(msg + k, sizeof msg - k, "%s%s %s", i ? ", " : "",
                                  amp_shape_str(n->in[i]->shape, b, sizeof b),
                                  amp_dtype_name(n->in[i]->dtype));
    }
    if (k < sizeof msg)
        snprintf(msg + k, sizeof msg - k, ")");
    return amp_fail_null(AMP_ERR_SHAPE, "%s", msg);
}

void *op_fail_dtype(const node *n, int input, const char *why)
{
    return amp_fail_null(AMP_ERR_DTYPE, "%s: input %d has dtype %s: %s", op_name(n), input,
                         amp_dtype_name(n->in[input]->dtype), why);
}

bool op_require_float(const node *n, int input)
{
    if (amp_dtype_is_float(n->in[input]->dtype))
        return true;
    op_fail_dtype(n, input, "expected a float tensor (f32, f16 or bf16)");
    return false;
}

amp_status op_save(node *n, int k, const amp_tensor *t)
{
    amp_tensor *v = tensor_view(t, t->shape);
    if (!v)
        return AMP_ERR_MEMORY;
    amp_tensor_free(n->saved[k]);
    n->saved[k] = v;
    return AMP_OK;
}

amp_tensor *op_apply(int op, amp_tensor *const *args, int n_in, const op_params *p)
{
    for (int i = 0; i < n_in; i++)
        if (!args[i])
            return NULL; /* keep the error that made the NULL */
    for (int i = 1; i < n_in; i++)
        if (args[i]->storage->device != args[0]->storage->device)
            return amp_fail_null(AMP_ERR_DEVICE, "%s: inputs on %s and %s", op_table[op].name,
                                 amp_device_name(args[0]->storage->device),
                                 amp_device_name(args[i]->storage->device));

    /* Autocast: the inputs in the dtypes the op's category asks for. The
     * casts are ops themselves, so the gradient flows back through them. */
    amp_tensor *cast_stack[8];
    amp_tensor **in = n_in <= 8 ? cast_stack : calloc((size_t)n_in, sizeof *in);
    if (!in)
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_table[op].name);
    if (autocast_inputs(op, args, n_in, in) != AMP_OK) {
        if (in != cast_stack)
            free(in);
        return NULL;
    }
    amp_tensor *out = op_run(op, in, n_in, p);
    if (in != cast_stack)
        free(in);
    return out;
}

/* Runs the forward on inputs already autocast and records the node. */
amp_tensor *op_run(int op, amp_tensor *const *in, int n_in, const op_params *p)
{
    op_node *on = calloc(1, sizeof *on);
    amp_tensor **ins = calloc((size_t)(n_in ? n_in : 1), sizeof *ins);
    if (!on || !ins) {
        free(on);
        free(ins);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_table[op].name);
    }
    if (p)
        on->p = *p;
    node *n = &on->base;
    n->op = op;
    n->name = op_table[op].name;
    n->scope = op_scope_current();
    n->backward = op_table[op].backward;
    n->profile = op_profile;
    n->refcount = 1;
    n->n_in = n_in;
    n->in = ins;
    bool any_grad = false;
    for (int i = 0; i < n_in; i++) {
        ins[i] = amp_tensor_retain(in[i]);
        any_grad |= in[i]->requires_grad;
    }
    n->needs_grad = any_grad && amp_grad_enabled();

    amp_tensor *out = device_forward(op, n);
    if (autograd_observer && out &&
        autograd_observer(autograd_observer_ctx, n, false, &out, 1) != AMP_OK) {
        amp_tensor_free(out);
        node_release(n);
        return NULL;
    }
    /* A float result of an input that requires grad, made with grad
     * disabled: amp_checkpoint (ops.h) learns this way that its function
     * reads a parameter that requires grad. An integer result (argmax's
     * indices, a cast to an integer dtype) carries no gradient. */
    const bool float_out = out && amp_dtype_is_float(out->dtype);
    if (any_grad && !n->needs_grad && float_out)
        op_grad_input_seen = true;
    if (!n->needs_grad || !float_out) {
        node_release(n);
        return pool_add(out);
    }
    out->requires_grad = true;
    out->grad_fn = n; /* the node's one reference now belongs to out */
    n->widens_back = op == OP_TO && n_in == 1 && amp_dtype_is_float(in[0]->dtype);
    node_hold_state(n); /* its inputs and saved tensors: activations */
    return pool_add(out);
}
