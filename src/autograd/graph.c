/*
 * graph.c - the backward engine and the no-grad mode.
 *
 * backward(loss): collect the nodes reachable from loss in topological
 * order (iterative DFS, so deep graphs cannot overflow the stack), seed
 * loss's gradient with ones on the loss's device, walk the nodes from the
 * last to the first, and hand each input its gradient: into the producing
 * node's grad for intermediate results, into .grad (in the leaf's dtype)
 * for leaves, adding to a gradient already there with the backend's
 * accumulate on the gradient's device. A node's output gradient is freed
 * as soon as its backward has run and its inputs' gradients are added
 * (every consumer ran before it), so backward holds only the gradients
 * still to be consumed. At the end free every node's inputs and saved
 * tensors, which is what releases a step's activations; a node marked
 * freed refuses a second backward.
 *
 * The grad-ready hook (graph.h; DistributedDataParallel's): with one set,
 * the outermost backward counts, before its loop, the contributions each
 * leaf can get (one per node input that is that leaf), counts them down
 * as the nodes run, and reports a leaf when its count reaches zero and no
 * opaque node (the checkpoint's, which runs a nested backward) is left to
 * run; nested backwards only note the parameters they reached, reported
 * after the last opaque node. The hook also hears when an outermost
 * backward begins and when each of its nodes is done. With no hook none
 * of this runs.
 */
#include "autograd/graph.h"
#include "backend/backend.h"
#include "base/base.h"
#include "record/profile.h"

#include <stdatomic.h>
#include <stdlib.h>

static _Thread_local int no_grad_depth;

autograd_observer_fn autograd_observer;
void *autograd_observer_ctx;

void autograd_set_observer(autograd_observer_fn fn, void *ctx)
{
    autograd_observer = fn;
    autograd_observer_ctx = fn ? ctx : NULL;
}

void amp_no_grad_begin(void) { no_grad_depth++; }
void amp_no_grad_end(void)
{
    if (no_grad_depth > 0)
        no_grad_depth--;
}
bool amp_grad_enabled(void) { return no_grad_depth == 0; }

void node_hold_state(node *n)
{
    if (!n->held_in)
        for (int i = 0; i < n->n_in; i++)
            tensor_graph_hold(n->in[i]);
    n->held_in = true;
    for (int k = 0; k < NODE_MAX_SAVED; k++)
        if (n->saved[k] && !(n->held_saved & (1u << k))) {
            tensor_graph_hold(n->saved[k]);
            n->held_saved |= (uint8_t)(1u << k);
        }
}

void node_free_state(node *n)
{
    for (int i = 0; i < n->n_in; i++) {
        if (n->held_in)
            tensor_graph_release(n->in[i]);
        amp_tensor_free(n->in[i]);
        n->in[i] = NULL;
    }
    n->held_in = false;
    for (int k = 0; k < NODE_MAX_SAVED; k++) {
        if (n->held_saved & (1u << k))
            tensor_graph_release(n->saved[k]);
        amp_tensor_free(n->saved[k]);
        n->saved[k] = NULL;
    }
    n->held_saved = 0;
    amp_tensor_free(n->grad);
    n->grad = NULL;
}

void node_release(node *n)
{
    if (!n || --n->refcount > 0)
        return;
    node_free_state(n);
    free(n->in);
    free(n);
}

/* amp_tensor_free drops a result's grad_fn through node_release, installed
 * before any node can exist (the tensor layer never calls up into this
 * one). */
__attribute__((constructor)) static void install_node_release(void) { tensor_set_grad_fn_release(node_release); }

/* ------------------------------------------------------------ tensors */

amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool on)
{
    if (!t)
        return amp_set_error(AMP_ERR_ARG, "set_requires_grad: NULL tensor");
    if (t->grad_fn)
        return amp_set_error(AMP_ERR_STATE,
                             "set_requires_grad: only leaf tensors can be set (this one was made by %s)",
                             t->grad_fn->name);
    if (on && !amp_dtype_is_float(t->dtype))
        return amp_set_error(AMP_ERR_DTYPE, "set_requires_grad: dtype %s cannot have a gradient",
                             amp_dtype_name(t->dtype));
    t->requires_grad = on;
    return AMP_OK;
}

bool amp_tensor_requires_grad(const amp_tensor *t) { return t && t->requires_grad; }
bool amp_tensor_is_leaf(const amp_tensor *t) { return t && !t->grad_fn; }
amp_tensor *amp_tensor_grad(const amp_tensor *t) { return t ? t->grad : NULL; }

void amp_tensor_clear_grad(amp_tensor *t)
{
    if (!t)
        return;
    amp_tensor_free(t->grad);
    t->grad = NULL;
}

/* --------------------------------------------------------------- engine */

/* *dst += src in dst's dtype (f32 arithmetic, one rounding), on their
 * device; the first gradient is kept (when nothing else holds it) or
 * converted to dt. */
static amp_status accumulate(amp_tensor **dst, amp_tensor *src, amp_dtype dt)
{
    if (!*dst) {
        if (src->dtype == dt && src->refcount == 1 && src->storage->refcount == 1) {
            *dst = amp_tensor_retain(src);
            return AMP_OK;
        }
        *dst = tensor_convert(src, dt);
        return *dst ? AMP_OK : amp_last_status();
    }
    amp_tensor *d = *dst;
    const amp_device dev = tensor_device(d);
    if (tensor_device(src) != dev)
        return amp_set_error(AMP_ERR_DEVICE, "backward: a gradient on %s cannot be added to one on %s",
                             amp_device_name(tensor_device(src)), amp_device_name(dev));
    if (src->numel != d->numel) {
        char a[96], b[96];
        return amp_set_error(AMP_ERR_SHAPE, "backward: a gradient of shape %s cannot be added to one of shape %s",
                             amp_shape_str(src->shape, a, sizeof a), amp_shape_str(d->shape, b, sizeof b));
    }
    BACKEND_CALL(backend_of(dev), "backward", accumulate, tensor_ptr(d), d->dtype, tensor_ptr(src), src->dtype,
                 d->numel);
    return AMP_OK;
}

/* Into a leaf's .grad, counted as gradients when the leaf is a parameter
 * (other leaves' gradients, such as those of the detached inputs a
 * checkpoint recomputes from, stay temporaries). */
static amp_status accumulate_leaf(amp_tensor *x, amp_tensor *src)
{
    amp_status st = accumulate(&x->grad, src, x->dtype);
    if (x->grad && x->storage->category == AMP_MEM_PARAMETERS)
        tensor_set_category(x->grad, AMP_MEM_GRADIENTS);
    return st;
}

typedef struct {
    node **v;
    size_t len, cap;
} node_vec;

static bool vec_push(node_vec *s, node *n)
{
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        node **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->len++] = n;
    return true;
}

/* Post-order of the graph below root: every node after all it depends on. */
static amp_status topo_order(node *root, node_vec *order)
{
    static _Atomic uint64_t epoch_counter = 0;
    uint64_t visiting = atomic_fetch_add(&epoch_counter, 2) + 2, done = visiting + 1;
    node_vec stack = {0};
    amp_status st = AMP_OK;
    if (!vec_push(&stack, root))
        st = AMP_ERR_MEMORY;
    root->mark = visiting;
    while (st == AMP_OK && stack.len > 0) {
        node *n = stack.v[stack.len - 1];
        bool pushed = false;
        for (int i = 0; i < n->n_in; i++) {
            node *c = n->in[i] ? n->in[i]->grad_fn : NULL;
            if (!c || c->mark == visiting || c->mark == done)
                continue;
            if (c->freed) {
                st = amp_set_error(AMP_ERR_STATE,
                                   "backward: the graph through %s was already freed by an earlier "
                                   "backward",
                                   c->name);
                break;
            }
            c->mark = visiting;
            if (!vec_push(&stack, c)) {
                st = AMP_ERR_MEMORY;
                break;
            }
            pushed = true;
            break;
        }
        if (st != AMP_OK || pushed)
            continue;
        n->mark = done;
        stack.len--;
        if (!vec_push(order, n))
            st = AMP_ERR_MEMORY;
    }
    free(stack.v);
    if (st == AMP_ERR_MEMORY)
        amp_set_error(st, "backward: out of memory");
    /* Who reads each result in this backward (autograd_grad_dtype). */
    for (size_t k = 0; st == AMP_OK && k < order->len; k++)
        order->v[k]->uses = 0;
    for (size_t k = 0; st == AMP_OK && k < order->len; k++)
        for (int i = 0; i < order->v[k]->n_in; i++) {
            node *c = order->v[k]->in[i] ? order->v[k]->in[i]->grad_fn : NULL;
            if (c)
                c->uses++;
        }
    return st;
}

/* A widened gradient may go to c, the cast that made input x of its one
 * reader: a float-to-float cast from f32 to a 16-bit dtype that no
 * gradient reached yet, with no observer to show the 16-bit one to. */
static bool widened_grad_ok(const amp_tensor *x)
{
    const node *c = x->grad_fn;
    return c && c->widens_back && c->uses == 1 && !c->grad && c->n_in == 1 && c->in[0] &&
           c->in[0]->dtype == AMP_F32 && (x->dtype == AMP_BF16 || x->dtype == AMP_F16) && !autograd_observer;
}

amp_dtype autograd_grad_dtype(const node *n, int i)
{
    const amp_tensor *x = n && i >= 0 && i < n->n_in ? n->in[i] : NULL;
    if (!x)
        return AMP_F32;
    return widened_grad_ok(x) ? AMP_F32 : x->dtype;
}

/* ------------------------------------------------------ grad-ready hook */

static autograd_grad_ready_fn ready_fn;
static void *ready_ctx;

void autograd_set_grad_ready_hook(autograd_grad_ready_fn fn, void *ctx)
{
    ready_fn = fn;
    ready_ctx = fn ? ctx : NULL;
}

typedef struct {
    amp_tensor *t;   /* NULL: a free slot */
    int64_t pending; /* contributions still to come from this graph's nodes */
    bool got;        /* a gradient reached it in this backward */
    bool fired;
    bool held;       /* noted by a nested backward: we hold a reference */
} ready_entry;

/* Open addressing on the leaf's address. */
typedef struct {
    ready_entry *e;
    size_t mask, used;
    size_t opaque_left; /* opaque nodes still to run */
} ready_table;

/* Backward's nesting depth on this thread, and the outermost backward's
 * table while it runs with a hook. */
static _Thread_local int backward_depth;

bool autograd_in_backward(void) { return backward_depth > 0; }
static _Thread_local ready_table *ready_outer;

static ready_entry *ready_slot(ready_table *rt, const amp_tensor *t)
{
    size_t i = ptr_hash(t, rt->mask);
    while (rt->e[i].t && rt->e[i].t != t)
        i = (i + 1) & rt->mask;
    return &rt->e[i];
}

static ready_entry *ready_find(ready_table *rt, const amp_tensor *t)
{
    ready_entry *e = ready_slot(rt, t);
    return e->t ? e : NULL;
}

/* t's entry, made (pending 0) when absent; NULL when out of memory. */
static ready_entry *ready_insert(ready_table *rt, amp_tensor *t)
{
    if (2 * (rt->used + 1) > rt->mask + 1) {
        size_t cap = 2 * (rt->mask + 1);
        ready_entry *old = rt->e, *ne = calloc(cap, sizeof *ne);
        if (!ne)
            return NULL;
        size_t oldcap = rt->mask + 1;
        rt->e = ne;
        rt->mask = cap - 1;
        for (size_t k = 0; k < oldcap; k++)
            if (old[k].t)
                *ready_slot(rt, old[k].t) = old[k];
        free(old);
    }
    ready_entry *e = ready_slot(rt, t);
    if (!e->t) {
        *e = (ready_entry){.t = t};
        rt->used++;
    }
    return e;
}

static bool is_ready_leaf(const amp_tensor *x) { return x && x->requires_grad && !x->grad_fn; }

/* Counts every leaf's contributions and the opaque nodes over order. */
static amp_status ready_build(ready_table *rt, const node_vec *order)
{
    size_t edges = 0;
    for (size_t k = 0; k < order->len; k++)
        edges += (size_t)order->v[k]->n_in;
    size_t cap = 16;
    while (cap < 2 * edges + 2)
        cap *= 2;
    *rt = (ready_table){.e = calloc(cap, sizeof(ready_entry)), .mask = cap - 1};
    if (!rt->e)
        return amp_set_error(AMP_ERR_MEMORY, "backward: out of memory");
    for (size_t k = 0; k < order->len; k++) {
        const node *n = order->v[k];
        rt->opaque_left += n->op < 0;
        for (int i = 0; i < n->n_in; i++)
            if (is_ready_leaf(n->in[i]))
                ready_insert(rt, n->in[i])->pending++; /* cannot grow: sized above */
    }
    return AMP_OK;
}

static void ready_fire(ready_entry *e)
{
    if (ready_fn && e->got && !e->fired && e->pending == 0) {
        e->fired = true;
        ready_fn(ready_ctx, AUTOGRAD_LEAF_READY, e->t);
    }
}

/* Every complete leaf not yet reported. */
static void ready_flush(ready_table *rt)
{
    for (size_t k = 0; k <= rt->mask; k++)
        if (rt->e[k].t)
            ready_fire(&rt->e[k]);
}

/* After node n has run (or was skipped): its inputs' counts go down; the
 * leaves it completed are reported unless an opaque node is still to run;
 * after the last opaque node, everything complete is. */
static void ready_after_node(ready_table *rt, const node *n, bool report)
{
    for (int i = 0; i < n->n_in; i++)
        if (is_ready_leaf(n->in[i])) {
            ready_entry *e = ready_find(rt, n->in[i]);
            if (e && e->pending > 0)
                e->pending--;
        }
    bool last_opaque = n->op < 0 && rt->opaque_left > 0 && --rt->opaque_left == 0;
    if (!report || !ready_fn || rt->opaque_left > 0)
        return;
    if (last_opaque) {
        ready_flush(rt);
        return;
    }
    for (int i = 0; i < n->n_in; i++)
        if (is_ready_leaf(n->in[i])) {
            ready_entry *e = ready_find(rt, n->in[i]);
            if (e)
                ready_fire(e);
        }
}

/* A nested backward added to leaf x: a parameter (not one of the
 * checkpoint's detached views, which die with its backward) is noted in
 * the outermost table, held until that backward ends. */
static amp_status ready_note_nested(ready_table *rt, amp_tensor *x)
{
    if (x->storage->category != AMP_MEM_PARAMETERS)
        return AMP_OK;
    ready_entry *e = ready_insert(rt, x);
    if (!e)
        return amp_set_error(AMP_ERR_MEMORY, "backward: out of memory");
    e->got = true;
    if (!e->held) { /* keep it alive until reported */
        e->held = true;
        amp_tensor_retain(x);
    }
    return AMP_OK;
}

static void ready_free(ready_table *rt)
{
    for (size_t k = 0; k <= rt->mask; k++)
        if (rt->e[k].t && rt->e[k].held)
            amp_tensor_free(rt->e[k].t);
    free(rt->e);
}

/* The profiler's backward event (profile.h): its device and first mark
 * before n->backward, then gout's and the gradients' dtypes and shapes
 * (in[i] is input i's gradient, dtype -1 where none was made), and what
 * the op layer knows through the node: the FLOPs, the bytes (gout, the
 * inputs, the gradients the inputs need) and the op's parameters. Called
 * only with the profiler on. */
static void prof_backward_begin(prof_event *e, const node *n)
{
    amp_device dev = tensor_device(n->grad);
    e->device = (uint8_t)dev;
    e->dev_mark0 = prof_device_mark(dev);
}

static void prof_backward_end(prof_event *e, const node *n, amp_tensor *const *gin)
{
    e->dev_mark1 = prof_device_mark((amp_device)e->device);
    const amp_tensor *g = n->grad;
    prof_set_tensor(&e->out, g->dtype, g->shape.d, g->shape.ndim);
    for (int i = 0; i < n->n_in && i < PROF_MAX_TENSORS; i++)
        if (gin[i])
            prof_set_tensor(&e->in[i], gin[i]->dtype, gin[i]->shape.d, gin[i]->shape.ndim);
    e->n_in = (uint8_t)(n->n_in < PROF_MAX_TENSORS ? n->n_in : PROF_MAX_TENSORS);
    if (n->profile)
        n->profile(n, e, true);
    prof_end(e);
}

static amp_status run_backward(amp_tensor *t, const amp_tensor *seed)
{
    node *root = t->grad_fn;
    if (!root) {
        if (!t->requires_grad)
            return amp_set_error(AMP_ERR_STATE,
                                 "backward: the tensor does not require grad and has no grad_fn");
        amp_status st = accumulate_leaf(t, (amp_tensor *)seed);
        if (st == AMP_OK && ready_fn && backward_depth == 0) {
            ready_fn(ready_ctx, AUTOGRAD_BACKWARD_BEGIN, NULL);
            ready_fn(ready_ctx, AUTOGRAD_LEAF_READY, t);
        } else if (st == AMP_OK && ready_outer && backward_depth > 0)
            st = ready_note_nested(ready_outer, t);
        return st;
    }
    if (root->freed)
        return amp_set_error(AMP_ERR_STATE,
                             "backward: the graph through %s was already freed by an earlier "
                             "backward (PyTorch's retain_graph is not supported)",
                             root->name);

    node_vec order = {0};
    amp_status st = topo_order(root, &order);
    if (st == AMP_OK)
        st = accumulate(&root->grad, (amp_tensor *)seed, root->out_dtype);
    /* The grad-ready hook's table, for the outermost backward only. */
    ready_table rt_mem, *rt = NULL;
    if (st == AMP_OK && ready_fn && backward_depth == 0) {
        ready_fn(ready_ctx, AUTOGRAD_BACKWARD_BEGIN, NULL);
        if ((st = ready_build(&rt_mem, &order)) == AMP_OK)
            ready_outer = rt = &rt_mem;
    }
    ready_table *const nested_into = backward_depth > 0 ? ready_outer : NULL;
    backward_depth++;

    amp_no_grad_begin();
    for (size_t k = order.len; st == AMP_OK && k-- > 0;) {
        node *n = order.v[k];
        if (!n->grad) { /* no path from the loss reached this node's result */
            if (rt)
                ready_after_node(rt, n, true);
            continue;
        }
        amp_tensor *stack_gin[4] = {0};
        amp_tensor **gin = n->n_in <= 4 ? stack_gin : calloc((size_t)n->n_in, sizeof *gin);
        if (!gin) {
            st = amp_set_error(AMP_ERR_MEMORY, "backward: out of memory");
            break;
        }
        prof_event *pe = prof_begin(PROF_OP_BWD, n->name);
        if (pe)
            prof_backward_begin(pe, n);
        st = n->backward(n, n->grad, gin);
        if (pe)
            prof_backward_end(pe, n, gin);
        if (autograd_observer && st == AMP_OK)
            st = autograd_observer(autograd_observer_ctx, n, true, gin, n->n_in);
        /* Its consumers have all run (topological order), so nothing adds
         * to n's gradient again: free it now, as PyTorch does, not at the
         * end (on an error too; the loop stops and the rest go below).
         * Before its inputs' gradients are added in: a gradient that is
         * it (a cast's backward given the gradient in its input's dtype
         * hands it on as it is) or a view of it (reshape's, add's) then
         * holds the memory alone, and becomes the input's own instead of
         * being copied. */
        amp_tensor_free(n->grad);
        n->grad = NULL;
        for (int i = 0; i < n->n_in; i++) {
            amp_tensor *x = n->in[i];
            if (st == AMP_OK && gin[i] && x->requires_grad) {
                if (x->grad_fn && gin[i]->dtype != x->dtype && gin[i]->dtype == AMP_F32 && widened_grad_ok(x)) {
                    x->grad_fn->grad = gin[i]; /* already widened (autograd_grad_dtype) */
                    gin[i] = NULL;
                } else if (x->grad_fn)
                    st = accumulate(&x->grad_fn->grad, gin[i], x->dtype);
                else {
                    st = accumulate_leaf(x, gin[i]);
                    ready_entry *e = st == AMP_OK && rt ? ready_find(rt, x) : NULL;
                    if (e) /* counted by ready_build */
                        e->got = true;
                    else if (st == AMP_OK && nested_into)
                        st = ready_note_nested(nested_into, x);
                }
            }
            amp_tensor_free(gin[i]);
        }
        if (gin != stack_gin)
            free(gin);
        if (rt) {
            ready_after_node(rt, n, st == AMP_OK);
            if (ready_fn && st == AMP_OK)
                ready_fn(ready_ctx, AUTOGRAD_NODE_DONE, NULL);
        }
    }
    amp_no_grad_end();
    backward_depth--;
    if (rt) {
        if (st == AMP_OK)
            ready_flush(rt); /* a safety net: every complete leaf was reported by now */
        ready_outer = NULL;
        ready_free(rt);
    }

    /* Free the graph whatever happened: its activations belong to this step. */
    for (size_t k = 0; k < order.len; k++) {
        node_free_state(order.v[k]);
        order.v[k]->freed = true;
    }
    free(order.v);
    return st;
}

/* amp_backward and amp_backward_with run in the backward phase. */
static amp_status backward_loss(amp_tensor *loss);
static amp_status backward_with(amp_tensor *t, const amp_tensor *grad);

amp_status amp_backward(amp_tensor *loss)
{
    amp_phase_begin(AMP_PHASE_BACKWARD);
    amp_status st = backward_loss(loss);
    amp_phase_end(AMP_PHASE_BACKWARD);
    return st;
}

amp_status amp_backward_with(amp_tensor *t, const amp_tensor *grad)
{
    amp_phase_begin(AMP_PHASE_BACKWARD);
    amp_status st = backward_with(t, grad);
    amp_phase_end(AMP_PHASE_BACKWARD);
    return st;
}

static amp_status backward_loss(amp_tensor *loss)
{
    if (!loss)
        return amp_last_status() != AMP_OK ? amp_last_status()
                                           : amp_set_error(AMP_ERR_ARG, "backward: NULL tensor");
    if (loss->numel != 1) {
        char b[96];
        return amp_set_error(AMP_ERR_SHAPE,
                             "backward: the loss has shape %s; a gradient can be seeded implicitly "
                             "only for one element (use amp_backward_with)",
                             amp_shape_str(loss->shape, b, sizeof b));
    }
    /* The seed is made where the loss is (on a device by its fill), so
     * that backward queues no copy from the host. */
    amp_tensor *seed = tensor_new_on(loss->shape, loss->dtype, amp_tensor_device(loss));
    if (!seed)
        return amp_last_status();
    amp_status st = amp_tensor_fill(seed, 1.0);
    if (st == AMP_OK)
        st = run_backward(loss, seed);
    amp_tensor_free(seed);
    return st;
}

static amp_status backward_with(amp_tensor *t, const amp_tensor *grad)
{
    if (!t || !grad)
        return amp_last_status() != AMP_OK
                   ? amp_last_status()
                   : amp_set_error(AMP_ERR_ARG, "backward: NULL %s", t ? "gradient" : "tensor");
    if (!shape_equal(t->shape, grad->shape)) {
        char a[96], b[96];
        return amp_set_error(AMP_ERR_SHAPE, "backward: gradient shape %s does not match tensor %s",
                             amp_shape_str(grad->shape, b, sizeof b),
                             amp_shape_str(t->shape, a, sizeof a));
    }
    if (!amp_dtype_is_float(grad->dtype))
        return amp_set_error(AMP_ERR_DTYPE, "backward: gradient dtype %s is not a float type",
                             amp_dtype_name(grad->dtype));
    /* accumulate may keep the seed itself as a gradient: never the caller's.
     * The copy is made on t's device. */
    amp_tensor *seed = tensor_device(grad) == tensor_device(t) ? tensor_convert(grad, grad->dtype)
                                                                : amp_to_device(grad, tensor_device(t));
    if (!seed)
        return amp_last_status();
    amp_status st = run_backward(t, seed);
    amp_tensor_free(seed);
    return st;
}
