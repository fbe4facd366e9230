/*
 * zero.c - amp_zero: ZeRO stage 1 (DeepSpeed) on the comm layer. The
 * optimizer's state is sharded over the ranks; the gradients are
 * reduce-scattered, each rank steps its shard, the parameters are
 * all-gathered (docs/distributed.md, "ZeRO-1").
 *
 * The layout: the optimizer's parameters flattened in order (parameter i
 * at element off[i] of T in all) are cut into W contiguous shards of
 * S = ceil(T / W) elements, rank r's being [r S, min((r + 1) S, T)) (the
 * last one shorter, possibly empty). A shard may start or end inside a
 * parameter: parameter i's part of this rank's shard is its elements
 * [lo[i], hi[i]), which the optimizer's step covers (optim_set_shard: its
 * state and f32 master hold those elements only).
 *
 * One step: amp_zero_reduce_gradients packs every gradient (widened to
 * f32) into a flat buffer of W S elements, zero-padded, reduce-scatters it
 * (a sum), divides this rank's S elements by W in f32 (x / W, as the comm
 * layer's AVG all-reduce does) and writes them into the gradients
 * (rounded to their dtype), with zeros everywhere else; the step updates the shard; amp_zero_gather_
 * parameters all-gathers the updated shards (as bits, in the parameters'
 * dtypes). With 2 ranks the reduce-scatter's sum of each element is a + b,
 * as the all-reduce's, and the update is elementwise, so the parameters
 * are bitwise those of the unsharded data-parallel run.
 *
 * A world of one rank (before amp_dist_init) is one shard: every parameter
 * whole, and every call here the plain single-process one.
 *
 * Work a rank can fail at alone (packing a buffer, allocating one) comes
 * before a comm_agree, and the collective after it: a failure there is
 * every rank's error, naming the rank, and no rank is left waiting in a
 * collective the failing one never reaches.
 */
#include "ampc.h"

#include "backend/backend.h"
#include "base/base.h"
#include "comm/comm.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct amp_zero {
    amp_optim *o;     /* not owned: it must outlive z */
    int world, rank;
    amp_device dev;   /* every parameter's */
    int64_t total;    /* T: elements of all parameters */
    int64_t shard;    /* S = ceil(T / W) */
    int64_t *off;     /* n: parameter i's first element in the flat layout */
    int64_t *lo, *hi; /* n: parameter i's part of this rank's shard */
    amp_tensor *flat; /* f32 [W S]: the gradients packed (made by amp_zero_new when W > 1) */
    amp_tensor *mine; /* f32 [S]: this rank's reduced shard */
    int32_t *has;     /* n: whether parameter i has a gradient (summed over the ranks) */
    /* the optimizer's state, the same on every rank (agreed after each
     * change): SHARDED (amp_zero_new, amp_zero_shard_state), WHOLE
     * (amp_zero_gather_state) or MIXED (an amp_zero_shard_state that failed
     * on some rank: each parameter's state sharded on some ranks, whole on
     * others; amp_zero_gather_state packs either) */
    enum { SHARDED = 0, WHOLE, MIXED } state;
};

static const amp_backend *be_of(const amp_zero *z) { return backend_of(z->dev); }

/* Parameter i's part of rank r's shard, as [*a, *b) in its own elements. */
static void part_of(const amp_zero *z, int i, int r, int64_t *a, int64_t *b)
{
    const int64_t numel = z->o->params[i]->numel, s0 = (int64_t)r * z->shard - z->off[i], s1 = s0 + z->shard;
    *a = s0 < 0 ? 0 : s0 > numel ? numel : s0;
    *b = s1 < 0 ? 0 : s1 > numel ? numel : s1;
    if (*b < *a)
        *b = *a;
}

/* n elements from src (sdt) to dst (ddt), both in the parameters' memory. */
static amp_status move(const amp_zero *z, void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n)
{
    if (n == 0)
        return AMP_OK;
    const amp_backend *be = be_of(z);
    if (ddt == sdt)
        return be->copy(dst, z->dev, src, z->dev, (size_t)n * amp_dtype_size(sdt));
    return be->convert(src, sdt, dst, ddt, n);
}

static amp_status zeros(const amp_zero *z, void *dst, amp_dtype dt, int64_t n)
{
    static const uint32_t zero = 0;
    return n > 0 ? be_of(z)->fill(dst, n, &zero, amp_dtype_size(dt)) : AMP_OK;
}

static void *at(const void *p, amp_dtype dt, int64_t k) { return (char *)p + (size_t)k * amp_dtype_size(dt); }

/* Every rank's outcome of a step that each ran (st: this rank's): this
 * rank's own error, else the all-reduce's, else, where another rank
 * failed, AMP_ERR_STATE with the message others_failed. */
static amp_status every_rank(amp_status st, const char *others_failed)
{
    int32_t bad = st != AMP_OK;
    const amp_status cst = comm_allreduce(&bad, 1, AMP_I32, AMP_REDUCE_MAX, AMP_CPU, NULL);
    if (st != AMP_OK)
        return st;
    if (cst != AMP_OK)
        return cst;
    return bad ? amp_set_error(AMP_ERR_STATE, "%s", others_failed) : AMP_OK;
}

amp_zero *amp_zero_new(amp_optim *o)
{
    if (!o)
        return amp_fail_null(AMP_ERR_ARG, "zero: NULL optimizer");
    const int n = o->n, world = comm_size();
    const amp_device dev = tensor_device(o->params[0]);
    int64_t total = 0;
    amp_status st = AMP_OK;
    for (int i = 0; i < n; i++) {
        if (tensor_device(o->params[i]) != dev && st == AMP_OK)
            st = amp_set_error(AMP_ERR_DEVICE, "zero: parameter 0 is on %s but parameter %d on %s (one device for "
                               "every parameter)", amp_device_name(dev), i,
                               amp_device_name(tensor_device(o->params[i])));
        total += o->params[i]->numel;
    }
    /* the layout's fingerprint: FNV-1a over every parameter's (numel,
     * dtype) in order, cut to 62 bits so that its negation fits */
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < n; i++) {
        const uint64_t w[2] = {(uint64_t)o->params[i]->numel, (uint64_t)o->params[i]->dtype};
        for (int j = 0; j < 2; j++)
            for (int b = 0; b < 8; b++)
                h = (h ^ ((w[j] >> (8 * b)) & 0xff)) * 1099511628211ull;
    }
    const int64_t layout = (int64_t)(h >> 2);
    const int64_t shard = (total + world - 1) / world;
    if (st == AMP_OK && shard * world > INT32_MAX)
        st = amp_set_error(AMP_ERR_ARG, "zero: %lld parameter elements over %d ranks is more than one collective "
                           "moves (%d elements)", (long long)total, world, INT32_MAX);
    /* the flat buffers of the gradients' reduce-scatter, kept */
    amp_zero *z = st == AMP_OK ? calloc(1, sizeof *z) : NULL;
    if (z) {
        z->off = calloc((size_t)n, sizeof *z->off);
        z->lo = calloc((size_t)n, sizeof *z->lo);
        z->hi = calloc((size_t)n, sizeof *z->hi);
        z->has = calloc((size_t)n, sizeof *z->has);
        if (world > 1 && (z->flat = tensor_new_on(AMP_SHAPE(shard * world), AMP_F32, dev)))
            tensor_set_category(z->flat, AMP_MEM_GRADIENTS);
        if (world > 1 && (z->mine = tensor_new_on(AMP_SHAPE(shard), AMP_F32, dev)))
            tensor_set_category(z->mine, AMP_MEM_GRADIENTS);
    }
    if (st == AMP_OK && !(z && z->off && z->lo && z->hi && z->has && (world == 1 || (z->flat && z->mine))))
        st = amp_set_error(AMP_ERR_MEMORY, "zero: out of memory for %lld elements of gradient buffers",
                           (long long)(shard * (world + 1)));
    /* every rank must cut the same layout: the parameter count, the total,
     * the device and the fingerprint of each parameter's numel and dtype
     * (their maxima and minima over the ranks must be ours: then every
     * rank's are equal); and a rank that failed above says so here, so that
     * all fail together */
    if (world > 1) {
        int64_t v[10] = {n,           total,  (int64_t)dev,  layout,  st != AMP_OK,
                         -(int64_t)n, -total, -(int64_t)dev, -layout, 0};
        amp_status cst = comm_allreduce(v, 10, AMP_I64, AMP_REDUCE_MAX, AMP_CPU, NULL);
        if (st == AMP_OK && cst != AMP_OK)
            st = cst;
        else if (st == AMP_OK && (v[0] != -v[5] || v[1] != -v[6] || v[2] != -v[7]))
            st = amp_set_error(AMP_ERR_ARG, "zero: the ranks' optimizers differ (parameters: %lld to %lld, "
                               "elements: %lld to %lld, devices %s and %s): every rank must build the same model",
                               (long long)-v[5], (long long)v[0], (long long)-v[6], (long long)v[1],
                               amp_device_name((amp_device)-v[7]), amp_device_name((amp_device)v[2]));
        else if (st == AMP_OK && v[3] != -v[8])
            st = amp_set_error(AMP_ERR_ARG, "zero: the ranks' optimizers differ in their parameters' sizes or "
                               "dtypes (the same %d parameters and %lld elements, split or typed differently): every "
                               "rank must build the same model, its parameters in the same order", n,
                               (long long)total);
        else if (st == AMP_OK && v[4])
            st = amp_set_error(AMP_ERR_STATE, "zero: another rank failed to set up its shard (its message says "
                               "why)");
    }
    if (st != AMP_OK) {
        amp_zero_free(z);
        return NULL;
    }
    z->o = o;
    z->world = world;
    z->rank = comm_rank();
    z->dev = dev;
    z->total = total;
    z->shard = shard;
    for (int i = 0; i < n; i++) {
        z->off[i] = i ? z->off[i - 1] + o->params[i - 1]->numel : 0;
        part_of(z, i, z->rank, &z->lo[i], &z->hi[i]);
    }
    if (amp_zero_shard_state(z) != AMP_OK) {
        amp_zero_free(z);
        return NULL;
    }
    return z;
}

void amp_zero_free(amp_zero *z)
{
    if (!z)
        return;
    amp_tensor_free(z->flat);
    amp_tensor_free(z->mine);
    free(z->off);
    free(z->lo);
    free(z->hi);
    free(z->has);
    free(z);
}

/* ------------------------------------------------------------ gradients */

/* Multiplies n buffers (f32 / f16 / bf16) in the parameters' memory by
 * `factor` (f32 arithmetic, rounded once into the dtype) - or, with
 * divide, divides them by it. On the CPU here; on a GPU through the
 * backend's unscale (a multiply by the f32 reciprocal of 1 / factor: the
 * same bits where the factor is a power of two). */
static amp_status scale_bufs(const amp_zero *z, const be_buf *g, int n, float factor, bool divide)
{
    if (z->dev == AMP_CPU) {
        for (int i = 0; i < n; i++) {
            enum { B = 2048 };
            float tmp[B];
            for (int64_t j0 = 0; j0 < g[i].n; j0 += B) {
                const int64_t m = g[i].n - j0 < B ? g[i].n - j0 : B;
                float *v = g[i].dt == AMP_F32 ? (float *)g[i].p + j0 : tmp;
                if (v == tmp)
                    amp_convert(at(g[i].p, g[i].dt, j0), g[i].dt, tmp, AMP_F32, (size_t)m);
                for (int64_t j = 0; j < m; j++)
                    v[j] = divide ? v[j] / factor : v[j] * factor;
                if (v == tmp)
                    amp_convert(tmp, AMP_F32, at(g[i].p, g[i].dt, j0), g[i].dt, (size_t)m);
            }
        }
        return AMP_OK;
    }
    const amp_backend *be = be_of(z);
    float *d = be->alloc(2 * sizeof *d); /* the scale, then found_inf */
    if (!d)
        return amp_set_error(AMP_ERR_MEMORY, "zero: out of %s memory", be->name);
    const float host[2] = {divide ? factor : (float)(1.0 / (double)factor), 0};
    amp_status st = be->copy(d, z->dev, host, AMP_CPU, sizeof host);
    if (st == AMP_OK)
        st = be->unscale ? be->unscale(g, n, d, d + 1) : backend_missing(be, "zero", "unscale");
    be->free(d);
    return st;
}

amp_status amp_zero_reduce_gradients(amp_zero *z)
{
    if (!z)
        return amp_set_error(AMP_ERR_ARG, "zero_reduce_gradients: NULL");
    if (z->world == 1)
        return AMP_OK; /* the average over one rank: the gradients as they are */
    if (z->state != SHARDED) /* (the same on every rank: they all refuse) */
        return amp_set_error(AMP_ERR_STATE, "zero_reduce_gradients: the optimizer state is not sharded (after "
                             "amp_zero_gather_state, or an amp_zero_shard_state that failed): call "
                             "amp_zero_shard_state first");
    amp_optim *o = z->o;
    const int n = o->n;
    amp_phase_begin(AMP_PHASE_BACKWARD); /* (DDP's all-reduce is backward's too) */
    amp_status st = AMP_OK;
    for (int i = 0; i < n && st == AMP_OK; i++) {
        const amp_tensor *p = o->params[i], *g = p->grad;
        z->has[i] = g != NULL;
        if (g && (tensor_device(g) != z->dev || !shape_equal(g->shape, p->shape) || !amp_dtype_is_float(g->dtype)))
            st = amp_set_error(AMP_ERR_SHAPE, "zero: parameter %d's gradient is not a float tensor of its shape on "
                               "its device", i);
    }
    float *flat = tensor_f32(z->flat), *mine = tensor_f32(z->mine);
    /* pack: every gradient widened to f32, zeros for none and the padding */
    for (int i = 0; i < n && st == AMP_OK; i++) {
        const amp_tensor *g = o->params[i]->grad;
        st = g ? move(z, flat + z->off[i], AMP_F32, tensor_ptr(g), g->dtype, g->numel)
               : zeros(z, flat + z->off[i], AMP_F32, o->params[i]->numel);
    }
    if (st == AMP_OK)
        st = zeros(z, flat + z->total, AMP_F32, z->shard * z->world - z->total);
    /* every rank checked and packed its gradients, and has them for the
     * same parameters */
    st = comm_agree(st, "zero_reduce_gradients");
    if (st == AMP_OK)
        st = comm_allreduce(z->has, n, AMP_I32, AMP_REDUCE_SUM, AMP_CPU, NULL);
    for (int i = 0; i < n && st == AMP_OK; i++)
        if (z->has[i] != 0 && z->has[i] != z->world)
            st = amp_set_error(AMP_ERR_STATE, "zero: parameter %d has a gradient on %d of the %d ranks (every rank "
                               "must backpropagate into the same parameters)", i, (int)z->has[i], z->world);
    if (st != AMP_OK) {
        amp_phase_end(AMP_PHASE_BACKWARD);
        return st; /* (on every rank) */
    }
    st = comm_reduce_scatter(flat, mine, z->shard, AMP_F32, z->dev, NULL);
    if (st == AMP_OK) { /* the sum / W, in f32 */
        be_buf b = {mine, z->shard, AMP_F32};
        st = scale_bufs(z, &b, 1, (float)z->world, true);
    }
    /* unpack: this rank's shard of the average, zeros elsewhere */
    const int64_t base = (int64_t)z->rank * z->shard;
    for (int i = 0; i < n && st == AMP_OK; i++) {
        amp_tensor *g = o->params[i]->grad;
        if (!g)
            continue;
        st = zeros(z, tensor_ptr(g), g->dtype, z->lo[i]);
        if (st == AMP_OK)
            st = move(z, at(tensor_ptr(g), g->dtype, z->lo[i]), g->dtype, mine + (z->off[i] + z->lo[i] - base),
                      AMP_F32, z->hi[i] - z->lo[i]);
        if (st == AMP_OK)
            st = zeros(z, at(tensor_ptr(g), g->dtype, z->hi[i]), g->dtype, g->numel - z->hi[i]);
        tensor_bump(g);
    }
    amp_phase_end(AMP_PHASE_BACKWARD);
    return st;
}

/* Both entry points (fn names the caller): this rank's shard of the
 * gradients, clipped by optim_clip_bufs over the world's ranks (its sum of
 * squares all-gathered in the backend's memory, the W parts added in the
 * same order on every rank, so every rank gets the same total and factor).
 * The total goes to *host (on a GPU, the wait) or into *out, a new 0-d f32
 * tensor on the parameters' device. */
static amp_status zero_clip(amp_zero *z, double max_norm, const char *fn, double *host, amp_tensor **out)
{
    amp_optim *o = z->o;
    be_buf *bufs = calloc((size_t)o->n, sizeof *bufs);
    if (!bufs) /* the others agree in optim_clip_bufs before its all-gather: so does this rank */
        return comm_agree(amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", fn), fn);
    int k = 0;
    for (int i = 0; i < o->n; i++) {
        amp_tensor *g = o->params[i]->grad;
        if (g && z->hi[i] > z->lo[i])
            bufs[k++] = (be_buf){at(tensor_ptr(g), g->dtype, z->lo[i]), z->hi[i] - z->lo[i], g->dtype};
    }
    amp_status st = optim_clip_bufs(z->dev, bufs, k, z->world, max_norm, fn, host, out);
    free(bufs);
    return st;
}

/* The checks both entry points make (false: the error is set). */
static bool zero_clip_ok(const amp_zero *z, double max_norm, const char *fn)
{
    if (!z) {
        amp_set_error(AMP_ERR_ARG, "%s: NULL", fn);
        return false;
    }
    if (!(max_norm >= 0)) {
        amp_set_error(AMP_ERR_ARG, "%s: max_norm %g must be >= 0", fn, max_norm);
        return false;
    }
    if (z->world > 1 && z->state != SHARDED) {
        amp_set_error(AMP_ERR_STATE, "%s: the optimizer state is not sharded (after amp_zero_gather_state, or an "
                      "amp_zero_shard_state that failed): call amp_zero_shard_state first", fn);
        return false;
    }
    return true;
}

double amp_zero_clip_grad_norm(amp_zero *z, double max_norm)
{
    if (!zero_clip_ok(z, max_norm, "zero_clip_grad_norm"))
        return NAN;
    if (z->world == 1) /* one shard: the plain clipping */
        return amp_clip_grad_norm(z->o->params, z->o->n, max_norm);
    double total = NAN;
    amp_phase_begin(AMP_PHASE_UNSCALE);
    amp_status st = zero_clip(z, max_norm, "zero_clip_grad_norm", &total, NULL);
    amp_phase_end(AMP_PHASE_UNSCALE);
    return st == AMP_OK ? total : NAN;
}

amp_tensor *amp_zero_clip_grad_norm_tensor(amp_zero *z, double max_norm)
{
    if (!zero_clip_ok(z, max_norm, "zero_clip_grad_norm_tensor"))
        return NULL;
    if (z->world == 1)
        return amp_clip_grad_norm_tensor(z->o->params, z->o->n, max_norm);
    amp_tensor *total = NULL;
    amp_phase_begin(AMP_PHASE_UNSCALE);
    amp_status st = zero_clip(z, max_norm, "zero_clip_grad_norm_tensor", NULL, &total);
    amp_phase_end(AMP_PHASE_UNSCALE);
    return st == AMP_OK ? total : NULL;
}

/* ----------------------------------------------------------- parameters */

/* Bytes of rank r's shard in the parameters' own dtypes. */
static int64_t shard_bytes(const amp_zero *z, int r)
{
    int64_t b = 0;
    for (int i = 0; i < z->o->n; i++) {
        int64_t a, e;
        part_of(z, i, r, &a, &e);
        b += (e - a) * (int64_t)amp_dtype_size(z->o->params[i]->dtype);
    }
    return b;
}

amp_status amp_zero_gather_parameters(amp_zero *z)
{
    if (!z)
        return amp_set_error(AMP_ERR_ARG, "zero_gather_parameters: NULL");
    if (z->world == 1)
        return AMP_OK;
    amp_optim *o = z->o;
    /* the shards as 16-bit words (every dtype's size is even), each rank's
     * padded to the longest */
    int64_t words = 0;
    for (int r = 0; r < z->world; r++) {
        const int64_t w = (shard_bytes(z, r) + 1) / 2;
        words = w > words ? w : words;
    }
    amp_tensor *send = tensor_new_on(AMP_SHAPE(words > 0 ? words : 1), AMP_F16, z->dev);
    amp_tensor *recv = tensor_new_on(AMP_SHAPE(words * z->world > 0 ? words * z->world : 1), AMP_F16, z->dev);
    amp_status st = send && recv ? AMP_OK : amp_last_status();
    char *sp = st == AMP_OK ? tensor_ptr(send) : NULL;
    for (int i = 0; i < o->n && st == AMP_OK; i++) {
        const amp_tensor *p = o->params[i];
        const size_t es = amp_dtype_size(p->dtype);
        st = move(z, sp, p->dtype, at(tensor_ptr(p), p->dtype, z->lo[i]), p->dtype, z->hi[i] - z->lo[i]);
        sp += (size_t)(z->hi[i] - z->lo[i]) * es;
    }
    st = comm_agree(st, "zero_gather_parameters");
    if (st == AMP_OK)
        st = comm_allgather(tensor_ptr(send), tensor_ptr(recv), words, AMP_F16, z->dev, NULL);
    for (int r = 0; r < z->world && st == AMP_OK; r++) {
        const char *rp = (const char *)tensor_ptr(recv) + (size_t)r * (size_t)words * 2;
        for (int i = 0; i < o->n && st == AMP_OK; i++) {
            amp_tensor *p = o->params[i];
            int64_t a, e;
            part_of(z, i, r, &a, &e);
            if (r != z->rank)
                st = move(z, at(tensor_ptr(p), p->dtype, a), p->dtype, rp, p->dtype, e - a);
            rp += (size_t)(e - a) * amp_dtype_size(p->dtype);
        }
    }
    if (st == AMP_OK)
        for (int i = 0; i < o->n; i++) {
            tensor_bump(o->params[i]); /* a write from outside the ops */
            optim_master_current(o, i); /* the shard is the master's rounding; the rest is not the master's */
        }
    amp_tensor_free(send);
    amp_tensor_free(recv);
    return st;
}

/* ---------------------------------------------------------------- state */

amp_status amp_zero_gather_state(amp_zero *z)
{
    if (!z)
        return amp_set_error(AMP_ERR_ARG, "zero_gather_state: NULL");
    amp_optim *o = z->o;
    const int n = o->n, K = OPTIM_MAX_STATE;
    if (z->world == 1 || z->state == WHOLE)
        return AMP_OK; /* whole already (one rank, or gathered; decided alike on every rank) */
    /* full[i * (K + 1) + k]: parameter i's whole slot k (K: its master) */
    amp_tensor **full = calloc((size_t)n * (K + 1), sizeof *full);
    amp_tensor *send = NULL, *recv = NULL;
    amp_status st = full ? AMP_OK : amp_set_error(AMP_ERR_MEMORY, "zero: out of memory");
    for (int i = 0; i < n && st == AMP_OK; i++)
        st = optim_sync_master(o, i); /* (already in step after amp_zero_gather_parameters) */
    bool masters = false;
    for (int i = 0; i < n; i++)
        masters = masters || optim_wants_master(o, i);
    for (int k = 0; k <= K; k++) {
        if (k < K ? !o->def->has_state(o, k) : !masters)
            continue;
        const amp_dtype dt = k < K ? o->state_dt : AMP_F32;
        if (st == AMP_OK) {
            send = tensor_new_on(AMP_SHAPE(z->shard > 0 ? z->shard : 1), dt, z->dev);
            recv = tensor_new_on(AMP_SHAPE(z->shard * z->world > 0 ? z->shard * z->world : 1), dt, z->dev);
            st = send && recv ? zeros(z, tensor_ptr(send), dt, z->shard) : amp_last_status();
        }
        /* pack this rank's parts in order (zeros where there is no state) */
        int64_t pos = 0;
        for (int i = 0; i < n && st == AMP_OK; i++) {
            const amp_tensor *s = k < K ? o->state[i * K + k] : o->master[i];
            const int64_t len = z->hi[i] - z->lo[i], from = optim_is_sharded(o, i) ? 0 : z->lo[i];
            if (s && len > 0)
                st = move(z, at(tensor_ptr(send), dt, pos), dt, at(tensor_ptr(s), dt, from), dt, len);
            pos += len;
        }
        /* every rank packed its shard (else every rank stops here, at the
         * same slot) */
        st = comm_agree(st, "zero_gather_state");
        if (st != AMP_OK) {
            amp_tensor_free(send);
            amp_tensor_free(recv);
            send = recv = NULL;
            break;
        }
        st = comm_allgather(tensor_ptr(send), tensor_ptr(recv), z->shard, dt, z->dev, NULL);
        /* the ranks' shards in order are the flat layout: parameter i's
         * whole state is recv[off[i], off[i] + numel) */
        for (int i = 0; i < n && st == AMP_OK; i++) {
            const amp_tensor *p = o->params[i];
            const bool want = k < K ? amp_optim_param_steps(o, i) > 0 : optim_wants_master(o, i);
            if (!want)
                continue;
            amp_tensor *t = tensor_new_on(p->shape, dt, z->dev);
            st = t ? move(z, tensor_ptr(t), dt, at(tensor_ptr(recv), dt, z->off[i]), dt, p->numel)
                   : amp_last_status();
            if (t)
                tensor_set_category(t, k < K ? AMP_MEM_OPTIMIZER : AMP_MEM_PARAMETERS);
            full[i * (K + 1) + k] = t;
        }
        amp_tensor_free(send);
        amp_tensor_free(recv);
        send = recv = NULL;
    }
    /* every rank's outcome: one that failed after the last all-gather (no
     * memory for the whole state) keeps its state, so the others must too,
     * or the next call would find some ranks whole and the rest not (on a
     * failure z->state is what it was: no rank's state changed) */
    st = every_rank(st, "zero_gather_state: another rank failed to gather the optimizer state (its message says "
                        "why); the state stays as it was on every rank");
    if (st == AMP_OK) {
        for (int i = 0; i < n; i++)
            optim_unshard(o, i, &full[i * (K + 1)], full[i * (K + 1) + K]);
        z->state = WHOLE;
    } else if (full) {
        for (int j = 0; j < n * (K + 1); j++)
            amp_tensor_free(full[j]);
    }
    free(full);
    return st;
}

amp_status amp_zero_shard_state(amp_zero *z)
{
    if (!z)
        return amp_set_error(AMP_ERR_ARG, "zero_shard_state: NULL");
    amp_status st = AMP_OK;
    for (int i = 0; i < z->o->n && st == AMP_OK; i++)
        st = optim_set_shard(z->o, i, z->lo[i], z->hi[i]);
    /* every rank's outcome: a rank that failed part way (no memory for a
     * slice) holds some parameters' state whole and the rest sharded, which
     * amp_zero_gather_state packs alike; so unless every rank succeeded,
     * every rank is MIXED (reduce_gradients refuses; gather_state and
     * shard_state run on every rank) */
    if (z->world > 1)
        st = every_rank(st, "zero_shard_state: another rank failed to shard its optimizer state (its message says "
                            "why); call amp_zero_shard_state again (or amp_zero_gather_state)");
    z->state = st == AMP_OK ? SHARDED : MIXED;
    return st;
}

int64_t amp_zero_state_bytes(const amp_zero *z)
{
    if (!z)
        return 0;
    const amp_optim *o = z->o;
    int64_t b = 0;
    for (int i = 0; i < o->n; i++) {
        for (int k = 0; k < OPTIM_MAX_STATE; k++) {
            const amp_tensor *s = o->state[i * OPTIM_MAX_STATE + k];
            b += s ? s->numel * (int64_t)amp_dtype_size(s->dtype) : 0;
        }
        b += o->master[i] ? o->master[i]->numel * (int64_t)sizeof(float) : 0;
    }
    return b;
}
