/*
 * onednn_common.c - oneDNN's engine, the primitive cache and execution,
 * shared by onednn_gemm.c and onednn_conv.c (see onednn.h for why and
 * when oneDNN runs at all).
 *
 * Making a oneDNN primitive costs tens of microseconds to milliseconds
 * (it generates code); a training step runs the same few dozen shapes
 * every time, so each (kind, key) is made once and kept, including the
 * answer "not supported", until onednn_clear_cache. Cached primitives are
 * never freed while in use: eviction happens only in onednn_clear_cache,
 * and when the table is full a new primitive is made for the one call and
 * freed after it.
 */
#include "backend/cpu/onednn/onednn.h"
#include "base/base.h"
#include "base/env.h"
#include "base/parallel.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static _Atomic int mode_set = 0; /* 0: not read from the environment yet */
static _Atomic int mode = CPU_LIB_AUTO;

void onednn_set_mode(cpu_lib_mode m)
{
    atomic_store(&mode, (int)m);
    atomic_store(&mode_set, 1);
}

cpu_lib_mode onednn_mode(void)
{
    if (!atomic_load(&mode_set)) {
        static const int modes[] = {CPU_LIB_AUTO, CPU_LIB_OWN, CPU_LIB_ONEDNN}; /* env.c's order */
        int m = modes[env_choice(ENV_CPU_LIB, 0)];
        int expected = 0;
        if (atomic_compare_exchange_strong(&mode_set, &expected, 1))
            atomic_store(&mode, m);
    }
    return (cpu_lib_mode)atomic_load(&mode);
}

#ifndef AMPC_HAVE_DNNL

bool onednn_available(void) { return false; }
const char *onednn_version(void) { return "none (built without oneDNN)"; }
const char *onednn_version_line(void) { return "oneDNN: none"; }
void onednn_clear_cache(void) {}

#else

#include "backend/cpu/onednn/onednn_impl.h"

#include <pthread.h>
#include <stdio.h>

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;

static void make_engine(void)
{
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        engine = NULL;
}

dnnl_engine_t onednn_engine(void)
{
    pthread_once(&engine_once, make_engine);
    return engine;
}

bool onednn_available(void) { return onednn_engine() != NULL; }

const char *onednn_version(void)
{
    static char buf[48];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    return buf;
}

const char *onednn_version_line(void)
{
    static char buf[96];
    snprintf(buf, sizeof buf, "%s (built against %d.%d.%d)", onednn_version(), DNNL_VERSION_MAJOR,
             DNNL_VERSION_MINOR, DNNL_VERSION_PATCH);
    return buf;
}

/* AMPC_ONEDNN_SPLIT, read once: 1 (default) or 0. */
static int split_mode(void)
{
    static _Atomic int mode = -1;
    int m = atomic_load(&mode);
    if (m < 0) {
        m = env_choice(ENV_ONEDNN_SPLIT, 1); /* "0" or "1" */
        atomic_store(&mode, m);
    }
    return m;
}

bool onednn_split_ok(void) { return split_mode() && !amp_in_parallel() && amp_threads() > 1; }

int onednn_threads(void)
{
#ifdef _OPENMP
    /* With the split on, oneDNN never starts a libgomp team: a call it
     * cannot cut runs on the calling thread alone. */
    return split_mode() || omp_in_parallel() || amp_in_parallel() ? 1 : amp_threads();
#else
    return 1;
#endif
}

dnnl_data_type_t onednn_dt(amp_dtype dt)
{
    switch (dt) {
    case AMP_F32: return dnnl_f32;
    case AMP_BF16: return dnnl_bf16;
    case AMP_F16: return dnnl_f16;
    default: return dnnl_data_type_undef;
    }
}

bool onednn_md_make(onednn_md *md, int ndims, const int64_t *dims, dnnl_data_type_t dt, const int64_t *strides)
{
    dnnl_dims_t d, s;
    int64_t run = 1;
    for (int i = ndims - 1; i >= 0; i--) {
        d[i] = dims[i];
        s[i] = strides ? strides[i] : run;
        run *= dims[i];
    }
#if ONEDNN_V3
    *md = NULL;
    return dnnl_memory_desc_create_with_strides(md, ndims, d, dt, s) == dnnl_success;
#else
    return dnnl_memory_desc_init_by_strides(md, ndims, d, dt, s) == dnnl_success;
#endif
}

void onednn_md_drop(onednn_md *md)
{
#if ONEDNN_V3
    if (*md)
        dnnl_memory_desc_destroy(*md);
    *md = NULL;
#else
    (void)md;
#endif
}

dnnl_primitive_attr_t onednn_attr(float alpha, float beta)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
              dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
              dnnl_post_ops_create(&po) == dnnl_success;
#if ONEDNN_V3
#define APPEND_ELTWISE(alg, a, b) dnnl_post_ops_append_eltwise(po, alg, a, b)
#define APPEND_SUM(scale) dnnl_post_ops_append_sum(po, scale, 0, dnnl_data_type_undef)
#else
#define APPEND_ELTWISE(alg, a, b) dnnl_post_ops_append_eltwise(po, 1.0f, alg, a, b)
#define APPEND_SUM(scale) dnnl_post_ops_append_sum(po, scale)
#endif
    if (ok && alpha != 1.0f)
        ok = APPEND_ELTWISE(dnnl_eltwise_linear, alpha, 0.0f) == dnnl_success;
    if (ok && beta != 0.0f)
        ok = APPEND_SUM(beta) == dnnl_success;
#undef APPEND_ELTWISE
#undef APPEND_SUM
    if (ok && (alpha != 1.0f || beta != 0.0f))
        ok = dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po)
        dnnl_post_ops_destroy(po);
    if (!ok && attr) {
        dnnl_primitive_attr_destroy(attr);
        attr = NULL;
    }
    return attr;
}

/* ---------------------------------------------------------------- cache */

enum { CACHE_SLOTS = 256, KEY_MAX = 256 };

typedef struct {
    int kind;
    size_t key_size;
    unsigned char key[KEY_MAX];
    bool supported;
    onednn_prim p;
} slot;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static slot *cache;
static int n_cached;

static void prim_free(onednn_prim *p)
{
    if (p->prim)
        dnnl_primitive_destroy(p->prim);
    if (p->pd)
        dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

/* Makes the primitive; false when unsupported or only a reference
 * implementation exists (those run orders of magnitude slower than
 * ampc's own kernels). */
static bool prim_make(const void *key, onednn_make_fn make, onednn_prim *p)
{
    memset(p, 0, sizeof *p);
    if (!make(key, &p->pd))
        return false;
    const char *impl = NULL;
    dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &impl);
    if (!impl || !strncmp(impl, "ref", 3) || dnnl_primitive_create(&p->prim, p->pd) != dnnl_success) {
        prim_free(p);
        return false;
    }
    p->scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0));
    return true;
}

/* oneDNN sizes a primitive's parallel regions, when it makes it and when
 * it runs it, by the calling thread's OpenMP setting: make that the
 * thread count the key says (onednn_threads()). Set on every thread that
 * makes or runs one: the caller of a split region runs chunks as tid 0,
 * where onednn_threads() is 1, and must not make its next whole-product
 * primitive under that 1. */
static void sync_omp_threads(void)
{
#ifdef _OPENMP
    int want = onednn_threads();
    if (!omp_in_parallel() && omp_get_max_threads() != want)
        omp_set_num_threads(want);
#endif
}

bool onednn_prim_get(int kind, const void *key, size_t key_size, onednn_make_fn make, onednn_prim *p)
{
    if (key_size > KEY_MAX || !onednn_available())
        return false;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_cached; i++) {
        slot *s = &cache[i];
        if (s->kind == kind && s->key_size == key_size && !memcmp(s->key, key, key_size)) {
            *p = s->p;
            bool ok = s->supported;
            pthread_mutex_unlock(&cache_lock);
            return ok;
        }
    }
    /* Made under the lock: two threads asking for the same new shape make
     * it once. Only the first call of each shape pays. */
    onednn_prim made;
    sync_omp_threads();
    bool ok = prim_make(key, make, &made);
    if (!cache)
        cache = calloc(CACHE_SLOTS, sizeof *cache);
    if (cache && n_cached < CACHE_SLOTS) {
        slot *s = &cache[n_cached++];
        s->kind = kind;
        s->key_size = key_size;
        memcpy(s->key, key, key_size);
        s->supported = ok;
        s->p = made;
    } else {
        made.owned = true;
    }
    pthread_mutex_unlock(&cache_lock);
    *p = made;
    return ok;
}

void onednn_prim_put(onednn_prim *p)
{
    if (p->owned)
        prim_free(p);
}

void onednn_clear_cache(void)
{
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < n_cached; i++)
        prim_free(&cache[i].p);
    free(cache);
    cache = NULL;
    n_cached = 0;
    pthread_mutex_unlock(&cache_lock);
}

/* ------------------------------------------------------------ execution */

dnnl_memory_t onednn_mem(const onednn_prim *p, dnnl_query_t what, int idx, const void *ptr)
{
    dnnl_memory_t m = NULL;
    if (dnnl_memory_create(&m, dnnl_primitive_desc_query_md(p->pd, what, idx), onednn_engine(), (void *)ptr) !=
        dnnl_success) {
        amp_set_error(AMP_ERR_MEMORY, "oneDNN: cannot make a memory object");
        return NULL;
    }
    return m;
}

amp_status onednn_run(const onednn_prim *p, int nargs, dnnl_exec_arg_t *args, const char *what)
{
    enum { MAX_ARGS = 8 };
    dnnl_exec_arg_t all[MAX_ARGS + 1];
    amp_status st = AMP_OK;
    void *scratch = NULL;
    dnnl_stream_t stream = NULL;
    int n = 0;
    for (int i = 0; i < nargs; i++) {
        if (!args[i].memory)
            st = amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_MEMORY;
        else if (n < MAX_ARGS)
            all[n++] = args[i];
        else
            dnnl_memory_destroy(args[i].memory), st = amp_set_error(AMP_ERR_ARG, "%s: too many oneDNN arguments", what);
    }
    if (st == AMP_OK && p->scratch) {
        scratch = amp_alloc(p->scratch);
        all[n].arg = DNNL_ARG_SCRATCHPAD;
        all[n].memory = scratch ? onednn_mem(p, dnnl_query_scratchpad_md, 0, scratch) : NULL;
        if (!all[n++].memory)
            st = amp_last_status();
    }
    sync_omp_threads();
    if (st == AMP_OK) {
        /* A CPU stream is a small object; one per call keeps concurrent
         * callers (a parallel loop of GEMMs) apart. */
        if (dnnl_stream_create(&stream, onednn_engine(), dnnl_stream_default_flags) != dnnl_success ||
            dnnl_primitive_execute(p->prim, stream, n, all) != dnnl_success ||
            dnnl_stream_wait(stream) != dnnl_success)
            st = amp_set_error(AMP_ERR_STATE, "%s: oneDNN failed to run", what);
    }
    if (stream)
        dnnl_stream_destroy(stream);
    for (int i = 0; i < n; i++)
        dnnl_memory_destroy(all[i].memory);
    amp_free(scratch);
    return st;
}

#endif /* AMPC_HAVE_DNNL */
