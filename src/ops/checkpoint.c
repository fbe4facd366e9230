/*
 * checkpoint.c - activation checkpointing: amp_checkpoint, PyTorch's
 * reentrant torch.utils.checkpoint.
 *
 * Forward: fn runs with grad disabled on detached views of the inputs,
 * inside an autocast scope in the current autocast state with a cast
 * cache of its own (ops.h); the pool's temporaries it made are freed when
 * it returns, so only its result survives. The result gets one node (a
 * checkpoint_node, its base first so node_release frees the whole) that
 * holds the inputs, fn and ctx, the RNG state before fn and the autocast
 * state. It requires grad when an input does or when op_run saw fn's ops
 * read a tensor that requires grad (op_grad_input_seen: a parameter).
 *
 * Backward (run by the engine inside its own backward loop): fn again on
 * new detached views, those of inputs that require grad marked so, with
 * grad enabled, the forward's autocast state and the forward's RNG state
 * (put back afterwards), then a backward of its own (amp_backward_with)
 * through the recomputed result seeded with the incoming gradient. That
 * inner backward is a separate graph (its traversal takes a new epoch,
 * its nodes are freed at its end); it accumulates into the parameters'
 * .grad and into the views' .grad, which become the inputs' gradients.
 * The recompute's temporaries go back the same way as the forward's.
 *
 * With grad disabled nothing is recorded: fn runs on the inputs and only
 * its result outlives the call (an evaluation's forward through
 * checkpointed blocks holds one block's temporaries at a time).
 */
#include "ops/ops.h"
#include "ops/scope.h"

#include <stdio.h>
#include <stdlib.h>

_Thread_local bool op_grad_input_seen;

typedef struct {
    node base; /* first: node_release frees a checkpoint_node */
    amp_checkpoint_fn fn;
    void *ctx;
    amp_rng_state rng;
    autocast_state autocast;
} checkpoint_node;

/* A new leaf over t's storage; requires grad when grad is asked for and
 * t's dtype can have one. */
static amp_tensor *detach(const amp_tensor *t, bool grad)
{
    amp_tensor *d = tensor_view(t, t->shape);
    if (d)
        d->requires_grad = grad && t->requires_grad && amp_dtype_is_float(t->dtype);
    return d;
}

static void free_all(amp_tensor **v, int n)
{
    for (int i = 0; v && i < n; i++)
        amp_tensor_free(v[i]);
    free(v);
}

static amp_tensor **detach_all(amp_tensor *const *in, int n, bool grad)
{
    amp_tensor **v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v)
        return amp_fail_null(AMP_ERR_MEMORY, "checkpoint: out of memory");
    for (int i = 0; i < n; i++)
        if (!(v[i] = detach(in[i], grad))) {
            free_all(v, n);
            return NULL;
        }
    return v;
}

/* fn(ctx, x, n) in an autocast scope of state ac; NULL with fn's error
 * (or one saying fn gave no error) when it fails. */
static amp_tensor *call(const checkpoint_node *c, amp_tensor *const *x, int n)
{
    autocast_scope sc;
    if (autocast_scope_begin(&sc, &c->autocast) != AMP_OK)
        return NULL;
    amp_tensor *y = c->fn(c->ctx, x, n);
    autocast_scope_end(&sc);
    if (!y && amp_last_status() == AMP_OK)
        amp_set_error(AMP_ERR_STATE, "checkpoint: the function returned NULL without setting an error");
    return y;
}

static amp_status checkpoint_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    checkpoint_node *c = (checkpoint_node *)n;
    amp_tensor **x = detach_all(n->in, n->n_in, true);
    if (!x)
        return amp_last_status();
    /* The engine runs backwards with grad disabled: enable it for the
     * recompute, and disable it again as deep as it was. */
    int no_grad = 0;
    for (; !amp_grad_enabled(); no_grad++)
        amp_no_grad_end();
    const amp_rng_state after = amp_rng_get_state();
    amp_rng_set_state(c->rng);
    const size_t mark = amp_temps_count();
    amp_tensor *y = call(c, x, n->n_in);
    amp_rng_set_state(after);

    amp_status st = AMP_OK;
    char b1[96], b2[96];
    if (!y) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", amp_last_error());
        st = amp_set_error(amp_last_status(), "checkpoint: recomputing: %s", msg);
    } else if (!shape_equal(y->shape, n->out_shape) || y->dtype != n->out_dtype) {
        st = amp_set_error(AMP_ERR_STATE,
                           "checkpoint: the recomputed result is %s %s, the forward's was %s %s (the "
                           "function must compute the same thing again)",
                           amp_shape_str(y->shape, b1, sizeof b1), amp_dtype_name(y->dtype),
                           amp_shape_str(n->out_shape, b2, sizeof b2), amp_dtype_name(n->out_dtype));
    } else if (y->requires_grad) {
        /* The recomputed graph holds what its backward reads: the pool's
         * references can go first (so an engine that frees nodes as it
         * goes could free the recompute's activations on the way). */
        amp_tensor_retain(y);
        pool_release_to(mark);
        st = amp_backward_with(y, gout);
        amp_tensor_free(y);
    }
    for (; no_grad > 0; no_grad--)
        amp_no_grad_begin();
    for (int i = 0; i < n->n_in; i++)
        if (st == AMP_OK && x[i]->grad) {
            gin[i] = x[i]->grad; /* the engine adds it to input i's gradient */
            x[i]->grad = NULL;
        }
    free_all(x, n->n_in);
    pool_release_to(mark);
    return st;
}

amp_tensor *amp_checkpoint(amp_checkpoint_fn fn, void *ctx, amp_tensor *const *inputs, int n_inputs)
{
    if (!fn)
        return amp_fail_null(AMP_ERR_ARG, "checkpoint: NULL function");
    if (n_inputs < 0 || (n_inputs > 0 && !inputs))
        return amp_fail_null(AMP_ERR_ARG, "checkpoint: %d inputs%s", n_inputs,
                             n_inputs < 0 ? " (must be >= 0)" : " but a NULL input array");
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i])
            return amp_last_status() != AMP_OK ? NULL
                                               : amp_fail_null(AMP_ERR_ARG, "checkpoint: input %d is NULL", i);
    if (!amp_grad_enabled()) {
        /* Nothing will be recorded: fn on the inputs themselves, keeping
         * only its result (an evaluation's forward holds one block's
         * temporaries at a time). */
        checkpoint_node plain = {.fn = fn, .ctx = ctx, .autocast = autocast_state_get()};
        const size_t mark = amp_temps_count();
        amp_tensor *y = call(&plain, inputs, n_inputs);
        if (y && y->requires_grad) { /* an input or parameter, as it was: not one of fn's temporaries */
            pool_release_to(mark);
            return y;
        }
        amp_tensor *out = y ? tensor_view(y, y->shape) : NULL;
        pool_release_to(mark);
        return pool_add(out);
    }

    checkpoint_node *c = calloc(1, sizeof *c);
    amp_tensor **ins = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *ins);
    amp_tensor **x = c && ins ? detach_all(inputs, n_inputs, false) : NULL;
    if (!x) {
        free(c);
        free(ins);
        return amp_last_status() != AMP_OK ? NULL : amp_fail_null(AMP_ERR_MEMORY, "checkpoint: out of memory");
    }
    c->fn = fn;
    c->ctx = ctx;
    c->rng = amp_rng_get_state();
    c->autocast = autocast_state_get();

    /* fn under no-grad; op_grad_input_seen tells whether it read a tensor
     * that requires grad (kept set for a checkpoint around this one). */
    const bool seen_outside = op_grad_input_seen;
    op_grad_input_seen = false;
    const size_t mark = amp_temps_count();
    amp_no_grad_begin();
    amp_tensor *y = call(c, x, n_inputs);
    amp_no_grad_end();
    bool grad = op_grad_input_seen || (y && y->requires_grad); /* or fn returned a parameter */
    op_grad_input_seen = seen_outside || op_grad_input_seen;

    /* The result outlives fn's other temporaries (and the views: fn may
     * return one of them). */
    amp_tensor *out = y ? tensor_view(y, y->shape) : NULL;
    free_all(x, n_inputs);
    pool_release_to(mark);
    if (!out) {
        free(c);
        free(ins);
        return NULL;
    }
    for (int i = 0; i < n_inputs; i++)
        grad |= inputs[i]->requires_grad;
    if (!grad || !amp_dtype_is_float(out->dtype)) {
        free(c);
        free(ins);
        return pool_add(out);
    }
    node *n = &c->base;
    n->op = -1; /* not a row of the op table */
    n->name = "checkpoint";
    n->scope = op_scope_current();
    n->backward = checkpoint_backward;
    n->refcount = 1;
    n->needs_grad = true;
    n->n_in = n_inputs;
    n->in = ins;
    for (int i = 0; i < n_inputs; i++)
        ins[i] = amp_tensor_retain(inputs[i]);
    n->out_shape = out->shape;
    n->out_dtype = out->dtype;
    out->requires_grad = true;
    out->grad_fn = n;
    node_hold_state(n); /* the block inputs it keeps: activations */
    return pool_add(out);
}
