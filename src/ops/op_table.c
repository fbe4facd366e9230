/*
 * op_table.c - the op table and op_apply, the one path every op takes:
 * op_apply checks the inputs and casts them for autocast (autocast.c),
 * op_run runs the forward and records the node.
 */
#include "ops/ops.h"
#include "backend/backend.h"
#include "record/profile.h"

#include <stdio.h>
#include <stdlib.h>

const op_def op_table[OP_COUNT] = {
#define X(e, nm, cpu, cuda, fwd, bwd) [OP_##e] = {nm, {CAST_##cpu, CAST_##cuda}, fwd, bwd},
#include "ops/op_list.h"
#undef X
};

/* The profiler's forward event (profile.h), with the profiler on: the
 * device and its first mark before the forward; then the inputs' dtypes
 * and shapes as the forward saw them (after autocast), the result's, the
 * FLOPs (cost.c) and the bytes (every input read, the result written). */
static void prof_forward_begin(prof_event *e, const node *n)
{
    amp_device dev = n->n_in > 0 && n->in[0] ? tensor_device(n->in[0]) : AMP_CPU;
    e->device = (uint8_t)dev;
    e->dev_mark0 = prof_device_mark(dev);
}

static void prof_forward_end(prof_event *e, const node *n, const amp_tensor *out)
{
    e->dev_mark1 = prof_device_mark((amp_device)e->device);
    double bytes = 0;
    for (int i = 0; i < n->n_in; i++) {
        const amp_tensor *x = n->in[i];
        bytes += (double)x->numel * (double)amp_dtype_size(x->dtype);
        if (i < PROF_MAX_TENSORS)
            prof_set_tensor(&e->in[i], x->dtype, x->shape.d, x->shape.ndim);
    }
    e->n_in = (uint8_t)(n->n_in < PROF_MAX_TENSORS ? n->n_in : PROF_MAX_TENSORS);
    if (out) {
        bytes += (double)out->numel * (double)amp_dtype_size(out->dtype);
        prof_set_tensor(&e->out, out->dtype, out->shape.d, out->shape.ndim);
        e->flops = op_flops(n, &out->shape, false);
    }
    e->bytes = bytes;
    prof_end(e);
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
        return op_table[op].forward(n);
    prof_forward_begin(pe, n);
    amp_tensor *out = op_table[op].forward(n);
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

amp_status no_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    (void)gout;
    (void)gin;
    return amp_set_error(AMP_ERR_STATE, "%s: has no gradient", op_name(n));
}

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
    node *n = calloc(1, sizeof *n);
    amp_tensor **ins = calloc((size_t)(n_in ? n_in : 1), sizeof *ins);
    if (!n || !ins) {
        free(n);
        free(ins);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_table[op].name);
    }
    n->op = op;
    n->name = op_table[op].name;
    n->backward = op_table[op].backward;
    n->flops = op_flops;
    n->refcount = 1;
    n->n_in = n_in;
    n->in = ins;
    if (p)
        n->p = *p;
    bool any_grad = false;
    for (int i = 0; i < n_in; i++) {
        ins[i] = amp_tensor_retain(in[i]);
        any_grad |= in[i]->requires_grad;
    }
    n->needs_grad = any_grad && amp_grad_enabled() && op_table[op].backward != no_backward;
    if (any_grad && !n->needs_grad && op_table[op].backward != no_backward)
        op_grad_input_seen = true; /* for amp_checkpoint (ops.h) */

    amp_tensor *out = device_forward(op, n);
    if (!out || !n->needs_grad || !amp_dtype_is_float(out->dtype)) {
        node_release(n);
        return pool_add(out);
    }
    n->out_shape = out->shape;
    n->out_dtype = out->dtype;
    out->requires_grad = true;
    out->grad_fn = n; /* the node's one reference now belongs to out */
    node_hold_state(n); /* its inputs and saved tensors: activations */
    return pool_add(out);
}
