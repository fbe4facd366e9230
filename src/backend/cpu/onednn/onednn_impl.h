/*
 * onednn_impl.h - what onednn_gemm.c and onednn_conv.c share: the engine,
 * a primitive cache, execution with a scratchpad from ampc's allocator,
 * and the few calls whose shape differs between oneDNN 2.x and 3.x.
 * Included only where AMPC_HAVE_DNNL is defined.
 */
#ifndef AMPC_ONEDNN_IMPL_H
#define AMPC_ONEDNN_IMPL_H

#include "backend/cpu/onednn/onednn.h"

#include <dnnl.h>
#include <stdatomic.h>

#if DNNL_VERSION_MAJOR >= 3
#define ONEDNN_V3 1
#define ONEDNN_MD(m) (m) /* a memory descriptor is a handle in 3.x */
#else
#define ONEDNN_V3 0
#define ONEDNN_MD(m) (&(m)) /* and a struct passed by address in 2.x */
#endif

/* A memory descriptor of either generation; onednn_md_make builds it from
 * dims and element strides (NULL strides: dense row-major), onednn_md_drop
 * releases it (a no-op in 2.x). A zeroed onednn_md may be dropped. */
typedef dnnl_memory_desc_t onednn_md;
bool onednn_md_make(onednn_md *md, int ndims, const int64_t *dims, dnnl_data_type_t dt, const int64_t *strides);
void onednn_md_drop(onednn_md *md);

/* ampc's dtype as oneDNN's; dnnl_data_type_undef for the integer types. */
dnnl_data_type_t onednn_dt(amp_dtype dt);

dnnl_engine_t onednn_engine(void);

/* Thread count a primitive is made for (part of every cache key). */
int onednn_threads(void);

/* Whether a oneDNN call that has the threads to itself may be cut into
 * chunks on ampc's pool, one oneDNN thread each (so libgomp never starts
 * a team beside the pool): AMPC_ONEDNN_SPLIT=0 says no, and then this
 * thread is outside a parallel range with more than one thread. */
bool onednn_split_ok(void);

/* How the chunks of a split call went: whether oneDNN declined one (the
 * caller's own kernels then redo the whole call) and the error of one
 * that failed; a chunk that finds either skips its work. Zeroed before
 * the loop. */
typedef struct {
    _Atomic int declined;
    _Atomic int status;
} onednn_chunks;

/* Whether a chunk should still run. */
static inline bool onednn_chunks_going(onednn_chunks *c)
{
    return !atomic_load(&c->declined) && atomic_load(&c->status) == AMP_OK;
}

/* Notes a chunk's outcome: ran (false: oneDNN declined it) with status
 * st; whether it ran and succeeded. */
static inline bool onednn_chunk_done(onednn_chunks *c, bool ran, amp_status st)
{
    if (!ran)
        atomic_store(&c->declined, 1);
    else if (st != AMP_OK)
        atomic_store(&c->status, (int)st);
    return ran && st == AMP_OK;
}

/* After the loop: false when a chunk was declined; else true, *st the
 * status of a failed chunk (AMP_OK: none failed). */
static inline bool onednn_chunks_ran(onednn_chunks *c, amp_status *st)
{
    if (atomic_load(&c->declined))
        return false;
    *st = (amp_status)atomic_load(&c->status);
    return true;
}

/* Primitive attributes with a user scratchpad and, when the scales ask,
 * post-ops in this order: eltwise linear (alpha, when alpha != 1), sum
 * (beta, when beta != 0). No relu post-op: oneDNN's turns NaN into 0, so
 * callers apply ampc's (cpu_relu_rows) after the primitive. NULL on
 * failure. */
dnnl_primitive_attr_t onednn_attr(float alpha, float beta);

/*
 * The primitive cache. A key is the bytes of a caller's struct (zero it
 * before filling so padding compares equal) plus a kind tag; make creates
 * the primitive descriptor for it (or returns false: not supported).
 * onednn_prim_get gives a primitive ready to run, or false when the
 * request is not supported, also when oneDNN would only run a reference
 * (unoptimised) implementation for it; both answers are cached.
 */
typedef bool (*onednn_make_fn)(const void *key, dnnl_primitive_desc_t *pd);
/* The kinds, one per primitive family (keys of different kinds never
 * compare equal, whatever their bytes). */
enum { ONEDNN_KIND_MATMUL = 1, ONEDNN_KIND_CONV = 16, ONEDNN_KIND_CONV_REORDER = 17 };
typedef struct {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    size_t scratch;   /* scratchpad bytes */
    bool owned;       /* not in the cache (it was full): onednn_prim_put frees it */
} onednn_prim;
bool onednn_prim_get(int kind, const void *key, size_t key_size, onednn_make_fn make, onednn_prim *p);
void onednn_prim_put(onednn_prim *p);

/* Memory for the pd's descriptor `what` (dnnl_query_src_md, ...) at
 * index idx over the caller's buffer; NULL with the error set. */
dnnl_memory_t onednn_mem(const onednn_prim *p, dnnl_query_t what, int idx, const void *ptr);

/* Runs p with args (plus a scratchpad from amp_alloc) on this thread's
 * stream and waits; destroys the args' memory objects. `what` names the
 * operation in an error. */
amp_status onednn_run(const onednn_prim *p, int nargs, dnnl_exec_arg_t *args, const char *what);

#endif
