/*
 * graph.h - the tape: one node per op result that needs a gradient.
 *
 * A node holds references to its op's inputs and to whatever its backward
 * needs (saved), so the graph keeps exactly the activations backward will
 * read. The result tensor holds the node (grad_fn); the node never holds
 * its result, only an alias of the result's storage when backward needs
 * the output values (relu, exp, softmax ...).
 *
 * Defines: struct node, node_release, the backward engine. An op's
 * parameters are the op layer's: it records each op as an op_node (ops.h),
 * a node followed by them.
 */
#ifndef AMPC_GRAPH_H
#define AMPC_GRAPH_H

#include "tensor/tensor.h"

#define NODE_MAX_SAVED 4

struct node;
struct prof_event;
/* Fills gin[i] with the gradient of input i from gout (the op layer's
 * backward for the node's op; see ops/ops.h). */
typedef amp_status (*node_backward_fn)(struct node *n, const amp_tensor *gout, amp_tensor **gin);
/* Fills what the profiler's event for the node's forward or backward
 * needs from the op layer: the FLOPs and bytes (the row's cost function)
 * and the op's parameters by name (ops/op_table.c's op_profile). */
typedef void (*node_profile_fn)(const struct node *n, struct prof_event *e, bool backward);

typedef struct node {
    int op;
    const char *name;          /* the op's name, for messages */
    const char *scope;         /* the module path it was made in (ops/scope.h); "" for none */
    node_backward_fn backward; /* set by the op layer when it records the node */
    node_profile_fn profile;   /* likewise; NULL: no cost, no parameters */
    int refcount;
    bool needs_grad;  /* forward saves what backward needs only if set */
    bool freed;       /* backward has run and released the saved state */
    int n_in;
    amp_tensor **in;  /* references to the op's inputs (after autocast) */
    amp_tensor *saved[NODE_MAX_SAVED];
    amp_shape out_shape;
    amp_dtype out_dtype;
    amp_tensor *grad; /* during backward: the gradient of the result */
    uint64_t mark;    /* traversal epoch */
    bool held_in;       /* the inputs are held for backward (tensor_graph_hold) */
    uint8_t held_saved; /* bit k: saved[k] is held */
    /* Set by the op layer on a float-to-float cast: its backward only
     * converts the gradient back to its input's dtype (see
     * autograd_grad_dtype). */
    bool widens_back;
    int uses; /* during backward: the nodes of this backward that read the result */
} node;

/* Drops one reference; the last one releases the inputs and saved state. */
void node_release(node *n);
/* Releases what a node keeps for backward (inputs, saved tensors). */
void node_free_state(node *n);
/* Counts what a recorded node keeps (its inputs and saved tensors) as
 * held by the graph, for the memory categories; node_free_state lets go
 * of exactly what was held. */
void node_hold_state(node *n);

/* The grad-ready hook (for DistributedDataParallel, src/dist/ddp.c): fn is
 * called on the thread running backward with
 *   - AUTOGRAD_BACKWARD_BEGIN (leaf NULL) when an outermost backward
 *     begins (not a nested one: the recompute of a checkpoint);
 *   - AUTOGRAD_LEAF_READY once per outermost backward for each leaf, as
 *     soon as its .grad is complete for that backward: after the last node
 *     that can feed it has run. Leaves that requires_grad and that some
 *     node of the graph reached get it; leaves no gradient reached in this
 *     backward do not;
 *   - AUTOGRAD_NODE_DONE (leaf NULL) after each node of the outermost
 *     backward (a chance to let communication progress).
 * A leaf fed only through an opaque node (one whose backward runs a nested
 * backward: the checkpoint node, op < 0) is complete only once the last
 * opaque node of the graph has run (its nested backward could add to any
 * parameter): such leaves (those a nested backward reached whose storage
 * is a parameter's), and every leaf that becomes complete while an opaque
 * node is still to run, are reported right after that last opaque node.
 * Nothing is reported after an error. A second backward before the
 * gradients are used reports again (accumulation: the caller decides).
 * fn NULL removes it; with no hook backward does no extra work. One hook
 * per process. */
typedef enum { AUTOGRAD_BACKWARD_BEGIN = 0, AUTOGRAD_LEAF_READY, AUTOGRAD_NODE_DONE } autograd_event;
typedef void (*autograd_grad_ready_fn)(void *ctx, autograd_event ev, amp_tensor *leaf);
void autograd_set_grad_ready_hook(autograd_grad_ready_fn fn, void *ctx);

/* The node observer (the anomaly check's and the audit's, src/amp/): fn
 * is called on the thread that runs the op
 *   - after each op's forward (op_run), backward false, with its result
 *     (t[0], n_t 1), the node made for it (n: its op, scope and inputs;
 *     also for a result that needs no gradient, whose node is released
 *     right after);
 *   - after each node's backward, backward true, with the gradients it
 *     made for its inputs (t[i] for input i, NULL where none; n_t = n_in),
 *     before they are added anywhere.
 * A status other than AMP_OK (with the error set) fails the op (its
 * result is dropped and the op returns NULL) or stops the backward, as
 * an error of the op itself would. fn NULL removes it; with none, each op
 * pays one branch. One observer per process, set between steps. */
typedef amp_status (*autograd_observer_fn)(void *ctx, const node *n, bool backward, amp_tensor *const *t,
                                           int n_t);
void autograd_set_observer(autograd_observer_fn fn, void *ctx);
/* Whether this thread is inside a backward: a forward seen then is a
 * checkpointed block's recompute (ops/checkpoint.c). */
bool autograd_in_backward(void);
/* During n's backward: the dtype input i's gradient may be made in.
 * That is the input's own dtype, except for a 16-bit input cast from an
 * f32 tensor (autocast's cast of a weight) that n alone reads: then also
 * f32, holding the values the 16-bit gradient would (each rounded to the
 * input's dtype, then widened). Such a gradient goes to the cast as it
 * is and the cast's backward hands it on without its widening pass; a
 * backward may still make the input's own dtype. With a node observer
 * set (the anomaly check, the audit) it is always the input's dtype, so
 * what they see does not change. */
amp_dtype autograd_grad_dtype(const node *n, int i);

/* The observer and its context (read on every op; NULL: none). */
extern autograd_observer_fn autograd_observer;
extern void *autograd_observer_ctx;

#endif
