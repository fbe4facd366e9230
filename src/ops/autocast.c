/*
 * autocast.c - autocast regions, the policy lookup, and the cast cache:
 * the step of op_apply that casts an op's inputs (autocast_inputs).
 *
 * The policy is the op table's cast column (ops/op_list.h) plus run-time
 * overrides. The casts are `to` ops run through op_run, the part of
 * op_apply below this step, so a cast never comes back here. A region saves the previous per-device state and restores it
 * on end; the outermost end empties the cache. All state but the
 * overrides is per thread, as in PyTorch.
 *
 * The cast cache keeps, for an f32 leaf that requires grad, its cast to the
 * autocast dtype: a weight used by several ops in one forward is cast once
 * and its gradient flows back through one `to` node. An entry is dropped
 * when the leaf was written since (storage version) or when a backward has
 * freed the cast's graph, so in-place updates inside a region and a second
 * forward/backward inside one region both see fresh casts (PyTorch's cache
 * has neither check). A scope (autocast_scope_begin, ops.h) is a region in
 * a given state with a cache of its own, the current one set aside:
 * amp_checkpoint runs and recomputes its function in one.
 *
 * Kept copies: the 16-bit data of each cached cast also outlives the
 * region (and the graph), hung on the leaf's storage with the storage's
 * version (amp_storage.kept_cast), so the next region's casts of an
 * unchanged weight (the next micro-batch under --accum, an evaluation)
 * reuse it: a `to` node is still recorded for the new graph (the gradient
 * flows back as before), but its forward is a view of the kept copy, not
 * a conversion (a cast-cache hit for the profiler). Anything that writes
 * a leaf from outside the ops bumps its version (the optimizer step, a
 * load, a fill, amp_tensor_data) and a to_dtype / to_device gives it a new
 * storage, so a changed weight is cast anew, never served stale. The
 * copies are counted as AMP_MEM_CAST_CACHE and freed with the weight's
 * storage (or replaced by its next cast). AMPC_KEEP_CASTS=0 in the
 * environment turns them off (each region casts anew, as before).
 */
#include "ops/ops.h"
#include "backend/backend.h"
#include "base/env.h"
#include "record/profile.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef autocast_state ac_state; /* ops.h */

/* dtype[dev] is 0 until a region sets it: the device's default then
 * (the backend's autocast_dtype; PyTorch's bf16 on the CPU, f16 on CUDA). */
static _Thread_local ac_state cur = {{false}, {0}, true, false};

/* The dtype autocast lowers to on dev in the current region. */
static amp_dtype lower_dtype(amp_device dev)
{
    amp_dtype d = cur.dtype[dev];
    return d == AMP_F16 || d == AMP_BF16 ? d : backend_of(dev)->autocast_dtype;
}
static _Thread_local ac_state saved[MAX_DEPTH];
static _Thread_local int depth;

typedef struct {
    amp_tensor *src, *cast;
    uint64_t version;
} cache_entry;
static _Thread_local cache_entry *cache;
static _Thread_local size_t cache_len, cache_cap;

/* The copy to_forward should return a view of (autocast_kept_copy). */
static _Thread_local amp_tensor *reusing;

/* Overrides: AMP_CAST_COUNT means "use the table". Shared by all threads. */
static _Atomic int overrides[OP_COUNT][AMP_DEVICE_COUNT];
static _Atomic int overrides_ready;

static void cache_clear(void)
{
    for (size_t i = 0; i < cache_len; i++) {
        amp_tensor_free(cache[i].src);
        amp_tensor_free(cache[i].cast);
    }
    free(cache);
    cache = NULL;
    cache_len = cache_cap = 0;
}

/* Whether kept copies are on: -1 until read from AMPC_KEEP_CASTS (0
 * turns them off) or set by autocast_keep_casts_set. */
static _Atomic int keep_on = -1;

static bool keep_casts(void)
{
    int v = atomic_load(&keep_on);
    if (v < 0) {
        v = env_choice(ENV_KEEP_CASTS, 1); /* "0" or "1" */
        atomic_store(&keep_on, v);
    }
    return v != 0;
}

void autocast_keep_casts_set(bool on) { atomic_store(&keep_on, on ? 1 : 0); }

amp_tensor *autocast_kept_copy(void) { return reusing; }

size_t amp_autocast_cache_size(void) { return cache_len; }
int amp_autocast_depth(void) { return depth; }

bool amp_autocast_is_enabled(amp_device dev)
{
    return (unsigned)dev < AMP_DEVICE_COUNT && cur.enabled[dev];
}

amp_dtype amp_autocast_dtype(amp_device dev)
{
    return (unsigned)dev < AMP_DEVICE_COUNT ? lower_dtype(dev) : AMP_DTYPE_COUNT;
}

amp_status amp_autocast_begin(amp_device dev, amp_dtype dt)
{
    return amp_autocast_begin_ex(dev, dt, true, true);
}

amp_status amp_autocast_begin_ex(amp_device dev, amp_dtype dt, bool enabled, bool cache_enabled)
{
    if ((unsigned)dev >= AMP_DEVICE_COUNT)
        return amp_set_error(AMP_ERR_ARG, "autocast_begin: invalid device type %d", (int)dev);
    if (dt != AMP_DTYPE_INHERIT && (unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_set_error(AMP_ERR_DTYPE, "autocast_begin: invalid dtype %d", (int)dt);
    if (depth == MAX_DEPTH)
        return amp_set_error(AMP_ERR_STATE,
                             "autocast_begin: %d regions open; is an amp_autocast_end missing?",
                             MAX_DEPTH);
    amp_dtype target = dt == AMP_DTYPE_INHERIT ? lower_dtype(dev) : dt;
    /* The device may refuse a dtype (CUDA refuses all but f16 and bf16,
     * and bf16 on a GPU without it, as PyTorch does). */
    const amp_backend *be = backend_of(dev);
    if (enabled && be->autocast_check && be->autocast_check(target) != AMP_OK)
        return amp_last_status();
    if (enabled && target != AMP_F16 && target != AMP_BF16) {
        /* PyTorch's CPU autocast warns and disables itself here. */
        amp_warn("autocast on %s supports bf16 and f16, not %s; autocast is disabled in this region",
                 amp_device_name(dev), amp_dtype_name(target));
        enabled = false;
    }
    saved[depth++] = cur;
    cur.enabled[dev] = enabled;
    if (target == AMP_F16 || target == AMP_BF16)
        cur.dtype[dev] = target;
    cur.cache_enabled = cache_enabled;
    return AMP_OK;
}

amp_status amp_autocast_end(void)
{
    if (depth == 0)
        return amp_set_error(AMP_ERR_STATE, "autocast_end: no autocast region is open (an "
                                            "amp_autocast_end without its amp_autocast_begin)");
    cur = saved[--depth];
    if (depth == 0)
        cache_clear();
    return AMP_OK;
}

autocast_state autocast_state_get(void) { return cur; }

bool autocast_fp32_scope_set(bool on)
{
    bool was = cur.fp32_scope;
    cur.fp32_scope = on;
    return was;
}

amp_status autocast_scope_begin(autocast_scope *sc, const autocast_state *s)
{
    if (depth == MAX_DEPTH)
        return amp_set_error(AMP_ERR_STATE,
                             "autocast: %d regions open; is an amp_autocast_end missing?", MAX_DEPTH);
    sc->depth = depth;
    sc->cache = cache;
    sc->len = cache_len;
    sc->cap = cache_cap;
    cache = NULL;
    cache_len = cache_cap = 0;
    saved[depth++] = cur;
    cur = *s;
    return AMP_OK;
}

void autocast_scope_end(autocast_scope *sc)
{
    cache_clear();
    cache = sc->cache;
    cache_len = sc->len;
    cache_cap = sc->cap;
    depth = sc->depth;
    cur = saved[depth];
}

/* ------------------------------------------------------------- policy */

static const char *const category_names[AMP_CAST_COUNT] = {"unlisted", "lower", "fp32",
                                                           "fp32_out", "promote", "banned"};

const char *amp_cast_category_name(amp_cast_category c)
{
    return (unsigned)c < AMP_CAST_COUNT ? category_names[c] : "invalid";
}

static void overrides_init(void)
{
    if (atomic_load(&overrides_ready))
        return;
    for (int op = 0; op < OP_COUNT; op++)
        for (int d = 0; d < AMP_DEVICE_COUNT; d++)
            atomic_store(&overrides[op][d], AMP_CAST_COUNT);
    atomic_store(&overrides_ready, 1);
}

static int op_by_name(const char *name)
{
    for (int op = 0; name && op < OP_COUNT; op++)
        if (strcmp(op_table[op].name, name) == 0)
            return op;
    return -1;
}

static amp_cast_category category_of(int op, amp_device dev)
{
    overrides_init();
    int o = atomic_load(&overrides[op][dev]);
    /* cast_policy (ops.h) and amp_cast_category list the same categories
     * in the same order. */
    return o != AMP_CAST_COUNT ? (amp_cast_category)o : (amp_cast_category)op_table[op].cast[dev];
}

amp_cast_category amp_autocast_category(const char *name, amp_device dev)
{
    int op = op_by_name(name);
    if (op < 0 || (unsigned)dev >= AMP_DEVICE_COUNT) {
        amp_set_error(AMP_ERR_ARG, "autocast_category: unknown op \"%s\" or device %d",
                      name ? name : "(null)", (int)dev);
        return AMP_CAST_COUNT;
    }
    return category_of(op, dev);
}

amp_status amp_autocast_set_category(const char *name, amp_device dev, amp_cast_category c)
{
    int op = op_by_name(name);
    if (op < 0)
        return amp_set_error(AMP_ERR_ARG, "autocast_set_category: unknown op \"%s\"",
                             name ? name : "(null)");
    if ((unsigned)dev >= AMP_DEVICE_COUNT || (unsigned)c > AMP_CAST_COUNT)
        return amp_set_error(AMP_ERR_ARG, "autocast_set_category: invalid device %d or category %d",
                             (int)dev, (int)c);
    overrides_init();
    atomic_store(&overrides[op][dev], (int)c);
    return AMP_OK;
}

/* The dtype each input runs in. Only float inputs are eligible (ampc has no
 * f64); the caller has already filtered the device. PROMOTE follows
 * PyTorch's prioritize(): start from the autocast dtype; f32 anywhere wins;
 * otherwise every eligible input must match it. */
static amp_status plan(int op, amp_cast_category c, amp_dtype at, int n, const amp_dtype *in,
                       amp_dtype *out)
{
    if (c == AMP_CAST_BANNED)
        return amp_set_error(AMP_ERR_STATE,
                             "%s is unsafe to autocast; use its logits form, or run it outside "
                             "the autocast region",
                             op_table[op].name);
    amp_dtype widest = at;
    for (int i = 0; c == AMP_CAST_PROMOTE && i < n; i++) {
        if (!amp_dtype_is_float(in[i]))
            continue;
        if (widest == AMP_F32 || in[i] == AMP_F32)
            widest = AMP_F32;
        else if (in[i] != widest)
            return amp_set_error(AMP_ERR_DTYPE,
                                 "%s under %s autocast: input %d is %s; promote mixes f16 and bf16 "
                                 "only with an f32 input",
                                 op_table[op].name, amp_dtype_name(at), i, amp_dtype_name(in[i]));
    }
    for (int i = 0; i < n; i++) {
        out[i] = in[i];
        if (!amp_dtype_is_float(in[i]))
            continue;
        switch (c) {
        case AMP_CAST_LOWER: out[i] = at; break;
        case AMP_CAST_FP32:
        case AMP_CAST_FP32_OUT: out[i] = AMP_F32; break;
        case AMP_CAST_PROMOTE: out[i] = widest; break;
        default: break;
        }
    }
    return AMP_OK;
}

amp_status amp_autocast_plan(const char *name, amp_device dev, amp_dtype at, int n, const amp_dtype *in,
                             amp_dtype *out)
{
    int op = op_by_name(name);
    if (op < 0 || (unsigned)dev >= AMP_DEVICE_COUNT || n < 0 || (n > 0 && (!in || !out)))
        return amp_set_error(AMP_ERR_ARG, "autocast_plan: unknown op \"%s\" or bad arguments",
                             name ? name : "(null)");
    if (at != AMP_F16 && at != AMP_BF16)
        return amp_set_error(AMP_ERR_DTYPE, "autocast_plan: autocast dtype %s is not f16 or bf16",
                             amp_dtype_name(at));
    return plan(op, category_of(op, dev), at, n, in, out);
}

/* --------------------------------------------------------- the casts */

/* t as dt: a `to` op, recorded like any other (the gradient flows back in
 * t's dtype), run below autocast. t is an input op_apply has checked. */
static amp_tensor *cast_op(amp_tensor *t, amp_dtype dt)
{
    const op_params p = {.to = {.dtype = dt}};
    return op_run(OP_TO, &t, 1, &p);
}

/* The profiler's names of the casts, per (from, to) float dtype. */
static const char *cast_name(amp_dtype from, amp_dtype to)
{
    static const char *const names[3][3] = {
        {"cast f32->f32", "cast f32->f16", "cast f32->bf16"},
        {"cast f16->f32", "cast f16->f16", "cast f16->bf16"},
        {"cast bf16->f32", "cast bf16->f16", "cast bf16->bf16"},
    };
    return (unsigned)from < 3 && (unsigned)to < 3 ? names[from][to] : "cast";
}

/* in[0] = the source, out = the cast (its dtype dt, the source's shape). */
static void prof_cast_tensors(prof_event *e, const amp_tensor *t, amp_dtype dt)
{
    e->device = (uint8_t)t->storage->device;
    e->n_in = 1;
    prof_set_tensor(&e->in[0], t->dtype, t->shape.d, t->shape.ndim);
    prof_set_tensor(&e->out, dt, t->shape.d, t->shape.ndim);
    e->bytes = (double)t->numel * (double)(amp_dtype_size(t->dtype) + amp_dtype_size(dt));
}

/* A cast autocast inserts: a PROF_CAST event around the `to` op's own
 * PROF_OP_FWD event (profile.h says how the outputs tell them apart). */
static amp_tensor *cast(amp_tensor *t, amp_dtype dt)
{
    prof_event *e = prof_begin(PROF_CAST, cast_name(t->dtype, dt));
    if (!e)
        return cast_op(t, dt);
    prof_cast_tensors(e, t, dt);
    e->dev_mark0 = prof_device_mark((amp_device)e->device);
    amp_tensor *c = cast_op(t, dt);
    e->dev_mark1 = prof_device_mark((amp_device)e->device);
    prof_end(e);
    return c;
}

/* t's kept copy in dt, if it has a fresh one. */
static amp_tensor *kept_find(const amp_tensor *t, amp_dtype dt)
{
    const amp_storage *st = t->storage;
    const amp_tensor *k = st->kept_cast;
    return k && k->dtype == dt && k->numel == t->numel && shape_equal(k->shape, t->shape) &&
                   st->kept_offset == t->offset && st->kept_version == st->version
               ? st->kept_cast
               : NULL;
}

amp_tensor *autocast_kept_for_update(const amp_tensor *p)
{
    if (!keep_casts() || p->dtype != AMP_F32)
        return NULL;
    amp_tensor *k = p->storage->kept_cast;
    if (!k || !kept_find(p, k->dtype))
        return NULL;
    return k->refcount == 1 && k->storage->refcount == 1 && k->storage->graph_holds == 0 ? k : NULL;
}

void autocast_kept_updated(amp_tensor *p) { p->storage->kept_version = p->storage->version; }

/* Keeps the data of c, a fresh cast of t, for later regions (replacing
 * the copy t's storage kept before). */
static void kept_put(amp_tensor *t, amp_tensor *c)
{
    if (!keep_casts())
        return;
    amp_tensor *copy = tensor_view(c, c->shape);
    if (!copy) {
        amp_clear_error(); /* no room to keep it: the cast is still correct */
        return;
    }
    amp_storage *st = t->storage;
    amp_tensor_free(st->kept_cast);
    st->kept_cast = copy;
    st->kept_offset = t->offset;
    st->kept_version = st->version;
}

/* t as dt from its kept copy: a `to` node like any cast, whose forward
 * is a view of the copy (to_forward asks autocast_kept_copy). */
static amp_tensor *reuse(amp_tensor *t, amp_dtype dt, amp_tensor *copy)
{
    prof_event *h = prof_instant(PROF_CAST_HIT, cast_name(t->dtype, dt));
    if (h) {
        prof_cast_tensors(h, t, dt);
        h->bytes = 0; /* nothing converted: the kept copy is reused */
    }
    const op_params p = {.to = {.dtype = dt, .from_kept_copy = true}};
    reusing = copy;
    amp_tensor *c = op_run(OP_TO, &t, 1, &p);
    reusing = NULL;
    return c;
}

/* A cast for the cache: from t's kept copy when it has a fresh one, else
 * converted (and kept). */
static amp_tensor *fresh_cast(amp_tensor *t, amp_dtype dt)
{
    amp_tensor *k = keep_casts() ? kept_find(t, dt) : NULL;
    if (k)
        return reuse(t, dt, k);
    amp_tensor *c = cast(t, dt);
    if (c)
        kept_put(t, c);
    return c;
}

static amp_tensor *cached_cast(amp_tensor *t, amp_dtype dt)
{
    bool cacheable = cur.cache_enabled && t->dtype == AMP_F32 && !t->grad_fn && t->requires_grad &&
                     dt == lower_dtype(t->storage->device);
    if (!cacheable)
        return cast(t, dt);
    for (size_t i = 0; i < cache_len; i++) {
        cache_entry *e = &cache[i];
        if (e->src != t)
            continue;
        bool fresh = e->version == t->storage->version && e->cast->grad_fn &&
                     !e->cast->grad_fn->freed;
        if (fresh) {
            prof_event *h = prof_instant(PROF_CAST_HIT, cast_name(t->dtype, dt));
            if (h) {
                prof_cast_tensors(h, t, dt);
                h->bytes = 0; /* nothing moved: the cached cast is reused */
            }
            return e->cast;
        }
        amp_tensor *c = fresh_cast(t, dt);
        if (!c)
            return NULL;
        amp_tensor_free(e->cast);
        e->cast = amp_tensor_retain(c);
        e->version = t->storage->version;
        tensor_set_category(c, AMP_MEM_CAST_CACHE);
        return c;
    }
    amp_tensor *c = fresh_cast(t, dt);
    if (!c)
        return NULL;
    if (cache_len == cache_cap) {
        size_t cap = cache_cap ? cache_cap * 2 : 32;
        cache_entry *p = realloc(cache, cap * sizeof *p);
        if (!p)
            return c; /* no room to cache: still a correct cast */
        cache = p;
        cache_cap = cap;
    }
    cache[cache_len++] = (cache_entry){amp_tensor_retain(t), amp_tensor_retain(c), t->storage->version};
    tensor_set_category(c, AMP_MEM_CAST_CACHE);
    return c;
}

amp_status autocast_inputs(int op, amp_tensor *const *in, int n, amp_tensor **out)
{
    for (int i = 0; i < n; i++)
        out[i] = in[i];
    if (n == 0 || op == OP_TO)
        return AMP_OK;
    amp_device dev = in[0]->storage->device;
    if (!cur.enabled[dev])
        return AMP_OK;
    amp_cast_category c = category_of(op, dev);
    if (c == AMP_CAST_NONE)
        return AMP_OK;
    if (c == AMP_CAST_LOWER && cur.fp32_scope)
        c = AMP_CAST_FP32; /* a module kept in f32 (scope.h) */
    amp_dtype din[AMP_MAX_DIMS * 4], dout[AMP_MAX_DIMS * 4];
    if (n > (int)(sizeof din / sizeof din[0]))
        return AMP_OK; /* more inputs than any autocast op takes */
    for (int i = 0; i < n; i++)
        /* Tensors on another device than the op's are never cast. */
        din[i] = in[i]->storage->device == dev ? in[i]->dtype : AMP_I64;
    amp_status st = plan(op, c, lower_dtype(dev), n, din, dout);
    if (st != AMP_OK)
        return st;
    for (int i = 0; i < n; i++) {
        if (dout[i] == din[i] || !amp_dtype_is_float(din[i]))
            continue;
        out[i] = c == AMP_CAST_LOWER ? cached_cast(in[i], dout[i]) : cast(in[i], dout[i]);
        if (!out[i])
            return amp_last_status();
    }
    return AMP_OK;
}
