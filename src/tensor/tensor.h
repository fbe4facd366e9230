/*
 * tensor.h - the tensor object as the library sees it.
 *
 * A tensor is a shape and dtype over a reference-counted storage. Every
 * tensor is contiguous (row-major); reshape makes a view that shares the
 * storage. A tensor made by an op carries grad_fn, the tape node that made
 * it (autograd/graph.h).
 *
 * Defines: struct amp_tensor, storage, the internal constructors (caller
 * owns the result, nothing goes to the pool), and the per-thread pool.
 */
#ifndef AMPC_TENSOR_H
#define AMPC_TENSOR_H

#include "ampc.h"

typedef struct amp_storage {
    void *data;
    size_t nbytes;
    int refcount;
    amp_device device;
    uint64_t version; /* bumped by every write from outside the ops */
    int category;     /* amp_mem_category: what the storage is for */
    int graph_holds;  /* graph nodes keeping it for backward */
    /* autocast's kept 16-bit copy of the tensor at kept_offset (ops/
     * autocast.c), made at version kept_version; freed with the storage. */
    struct amp_tensor *kept_cast;
    size_t kept_offset;
    uint64_t kept_version;
} amp_storage;

struct node; /* autograd/graph.h */

struct amp_tensor {
    amp_shape shape;
    int64_t numel;
    amp_dtype dtype;
    amp_storage *storage;
    size_t offset;       /* in bytes, into storage->data */
    int refcount;
    bool requires_grad;
    amp_tensor *grad;    /* leaves: accumulated gradient, owned */
    struct node *grad_fn; /* non-leaves: the node that made it (a reference) */
};

static inline void *tensor_ptr(const amp_tensor *t) { return (char *)t->storage->data + t->offset; }
static inline float *tensor_f32(const amp_tensor *t) { return (float *)tensor_ptr(t); }
/* Records an in-place write (the autocast cache checks it). */
static inline void tensor_bump(amp_tensor *t) { t->storage->version++; }

int64_t shape_numel(amp_shape s);
bool shape_equal(amp_shape a, amp_shape b);
/* Normalises a possibly negative dim against ndim; -1 when out of range. */
int shape_dim(int ndim, int dim);

/* Internal constructors: the caller owns one reference, no pool. */
amp_tensor *tensor_new(amp_shape shape, amp_dtype dt);   /* uninitialised */
amp_tensor *tensor_zeros(amp_shape shape, amp_dtype dt);
/* The same on a device, from its backend's allocator (AMP_ERR_DEVICE
 * "cuda is not available (...)" when the device cannot run: no GPU, no
 * CUDA build). */
amp_tensor *tensor_new_on(amp_shape shape, amp_dtype dt, amp_device dev);
amp_tensor *tensor_zeros_on(amp_shape shape, amp_dtype dt, amp_device dev);
/* A new tensor object over t's storage with another shape (same numel). */
amp_tensor *tensor_view(const amp_tensor *t, amp_shape shape);
/* Moves t's storage to memory category c in its device's accounting
 * (a parameter, a .grad, optimizer state, the cast cache ...). A storage
 * takes the thread's tensor category when made (amp_memory_set_category). */
void tensor_set_category(amp_tensor *t, amp_mem_category c);
/* A graph node keeps t for backward (hold) or lets it go (release): a
 * temporaries storage counts as activations while at least one node holds
 * it. Other categories (parameters, cast cache, data) are never moved. */
void tensor_graph_hold(amp_tensor *t);
void tensor_graph_release(amp_tensor *t);
/* t's values converted to dt (a plain copy when dt matches), on t's device. */
amp_tensor *tensor_convert(const amp_tensor *t, amp_dtype dt);
/* Stores leaf t in dt in place (a new storage holding t's values
 * converted, same device, version bumped, category kept as parameters);
 * drops its gradient. */
amp_status tensor_retype(amp_tensor *t, amp_dtype dt);

static inline amp_device tensor_device(const amp_tensor *t) { return t->storage->device; }

/* Sets how amp_tensor_free drops a tensor's grad_fn reference: the
 * autograd layer installs its node release here, so that tensor never
 * calls up into autograd. */
void tensor_set_grad_fn_release(void (*release)(struct node *n));

/* Hands one reference of t to this thread's pool; returns t. */
amp_tensor *pool_add(amp_tensor *t);
/* Frees the pool's temporaries added since the pool held mark of them
 * (amp_temps_count() then), newest first; the older ones stay. */
void pool_release_to(size_t mark);

/* Stores n floats from src into t's buffer, rounding to t's dtype. */
void tensor_store_f32(amp_tensor *t, const float *src);

#endif
