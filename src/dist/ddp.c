/*
 * ddp.c - amp_ddp, DistributedDataParallel: the parameters' gradients
 * averaged over the ranks in buckets, each bucket's collective started
 * during backward as soon as its gradients are complete.
 *
 * Buckets: the parameters in reverse order (the order backward completes
 * them), cut each time a bucket reaches bucket_mb MiB of f32 (a parameter
 * never split). Each bucket owns an f32 buffer on the parameters' device:
 * its parameters' gradients one after another (16-bit ones widened), then
 * one flag per parameter, 1 when this rank has a gradient for it, 0 when
 * not (its place holds zeros).
 *
 * During a synchronised backward the autograd layer's grad-ready hook
 * (graph.h) reports each parameter whose .grad is complete; a bucket whose
 * parameters are all reported is packed and its collective started, non
 * blocking: an MPI_Iallreduce (SUM) of the f32 buffer, or with
 * compression, the buffer rounded to bf16 / f16 and all-gathered (MPI
 * cannot sum 16-bit floats), the ranks' copies summed in f32 on receipt in
 * rank order. Buckets start strictly in index order (a complete bucket
 * waits for the ones before it), so every rank issues the same bucket
 * collectives in the same order even when a parameter gets no gradient on
 * one rank - provided no other collective is issued between a
 * synchronised backward and its finish (a bucket may start before or
 * after it, rank by rank; amp_ddp_finish's comment in ampc.h states the
 * rule). Any backward (BACKWARD_BEGIN) activates every live ddp.
 * After every node of backward (the hook's AUTOGRAD_NODE_DONE) and every
 * report, MPI is let progress the buckets in flight (an MPI_Test each).
 *
 * amp_ddp_finish starts the buckets that did not start, waits for all of
 * them, and writes sum / world into each .grad (rounded to the gradient's
 * dtype; a write from outside the ops: the version is bumped). A parameter
 * that got a gradient on some ranks only has the zeros of the others in
 * its average and gets a .grad everywhere; one that got no gradient on any
 * rank keeps none (the flags' sum says which), as in a one-process run.
 * Before unpacking, finish all-reduces (MAX) one failure flag: a rank's
 * own failure (a gradient it could not pack, a second backward) is every
 * rank's error and no .grad is written anywhere.
 *
 * Device-agnostic: every copy, conversion, fill and sum goes through the
 * parameters' backend, and the collectives through comm with their device
 * (NCCL for CUDA buffers), so no host copy is made except the flags of a
 * bucket in which this rank lacks a gradient (host flag buffers made in
 * amp_ddp_new: the hook allocates nothing, so cannot skip a collective).
 */
#include "ampc.h"

#include "autograd/graph.h"
#include "backend/backend.h"
#include "backend/pointwise.h"
#include "base/base.h"
#include "comm/comm.h"
#include "tensor/tensor.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int first, count;  /* its parameters: order[first .. first + count) */
    int64_t numel;     /* gradient elements (the flags follow) */
    int pending;       /* parameters not reported yet in this backward */
    float *buf;        /* numel + count f32, on the device */
    void *half;        /* numel + count 16-bit (compression), on the device */
    void *gathered;    /* world * (numel + count) 16-bit (compression) */
    float *hflags;     /* count f32 on the host: the flags, packed and read back */
    comm_req *req;
    bool started;
} ddp_bucket;

struct amp_ddp {
    amp_tensor **params; /* retained */
    int n;
    amp_ddp_opts o;
    amp_device dev;
    const amp_backend *be;
    int world;
    int *order;        /* bucket order: n - 1 .. 0 */
    int *bucket_of;    /* parameter -> bucket */
    int64_t *offset;   /* parameter -> offset in its bucket */
    bool *ready;       /* parameter reported in this backward */
    ddp_bucket *b;
    int nb, next;      /* next: the next bucket to start */
    int *slot;         /* open addressing: parameter index + 1, 0 empty */
    size_t mask;
    bool sync;
    bool active;       /* a synchronised backward began since the last finish */
    amp_status err;    /* a failure inside the hook, returned by finish */
    char errmsg[256];
    amp_ddp_stats stats;
    struct amp_ddp *next_live;
};

/* ----------------------------------------------------------- the hook */

/* The live instances, all reached through the one autograd hook. */
static amp_ddp *live;

static int param_index(const amp_ddp *d, const amp_tensor *t)
{
    for (size_t i = ptr_hash(t, d->mask);; i = (i + 1) & d->mask) {
        int s = d->slot[i];
        if (!s)
            return -1;
        if (d->params[s - 1] == t)
            return s - 1;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Keeps the first failure for amp_ddp_finish. */
static void hook_fail(amp_ddp *d, amp_status st)
{
    if (d->err == AMP_OK) {
        d->err = st;
        snprintf(d->errmsg, sizeof d->errmsg, "%s", amp_last_error());
    }
}

/* Packs bucket k (gradients widened to f32, zeros and a 0 flag where this
 * rank has none) and starts its collective. */
static amp_status bucket_start(amp_ddp *d, int k)
{
    ddp_bucket *bk = &d->b[k];
    const amp_backend *be = d->be;
    float *flags = bk->hflags; /* made in amp_ddp_new: nothing here can skip the collective */
    /* A gradient that cannot be packed (a wrong shape or device: this
     * rank's own error) is sent as zeros and the error returned after the
     * collective has started: every rank issues the same collectives, and
     * amp_ddp_finish makes the error every rank's. */
    amp_status pack = AMP_OK, st = AMP_OK;
    for (int j = 0; j < bk->count; j++) {
        int i = d->order[bk->first + j];
        amp_tensor *p = d->params[i], *g = p->grad;
        float *dst = bk->buf + d->offset[i];
        flags[j] = g ? 1.0f : 0.0f;
        st = AMP_OK;
        if (g && g->numel != p->numel)
            st = amp_set_error(AMP_ERR_SHAPE, "ddp: parameter %d has %lld elements but its gradient %lld", i,
                               (long long)p->numel, (long long)g->numel);
        else if (g && tensor_device(g) != d->dev)
            st = amp_set_error(AMP_ERR_DEVICE, "ddp: parameter %d's gradient is on %s, the parameters on %s", i,
                               amp_device_name(tensor_device(g)), amp_device_name(d->dev));
        else if (g && g->dtype == AMP_F32)
            st = be->copy(dst, d->dev, tensor_ptr(g), d->dev, (size_t)p->numel * sizeof(float));
        else if (g)
            st = be->convert(tensor_ptr(g), g->dtype, dst, AMP_F32, p->numel);
        if (!g || st != AMP_OK) {
            const float zero = 0.0f;
            if (st != AMP_OK && pack == AMP_OK)
                pack = st;
            flags[j] = 0.0f;
            if ((st = be->fill(dst, p->numel, &zero, sizeof zero)) != AMP_OK && pack == AMP_OK)
                pack = st;
        }
    }
    st = be->copy(bk->buf + bk->numel, d->dev, flags, AMP_CPU, (size_t)bk->count * sizeof(float));
    if (st != AMP_OK && pack == AMP_OK)
        pack = st;
    const int64_t len = bk->numel + bk->count;
    if (d->o.compress == AMP_F32) {
        st = comm_allreduce(bk->buf, len, AMP_F32, AMP_REDUCE_SUM, d->dev, &bk->req);
        d->stats.bytes_sent += len * 4;
    } else {
        /* a failed rounding sends zeros (the error is finish's): the all-gather is issued anyway */
        if ((st = be->convert(bk->buf, AMP_F32, bk->half, d->o.compress, len)) != AMP_OK) {
            const uint16_t zero = 0; /* +0 in bf16 and f16 */
            if (pack == AMP_OK)
                pack = st;
            be->fill(bk->half, len, &zero, sizeof zero);
        }
        st = comm_allgather(bk->half, bk->gathered, len, d->o.compress, d->dev, &bk->req);
        d->stats.bytes_sent += len * 2;
    }
    bk->started = st == AMP_OK;
    return st != AMP_OK ? st : pack;
}

/* Starts the buckets from d->next on whose parameters are all reported
 * (every: finish), in index order. */
static amp_status start_ready(amp_ddp *d, bool every)
{
    amp_status first = AMP_OK;
    while (d->next < d->nb && (every || d->b[d->next].pending == 0)) {
        amp_status st = bucket_start(d, d->next);
        d->next++;
        if (st != AMP_OK && first == AMP_OK) {
            first = st;
            hook_fail(d, st);
        }
    }
    return first;
}

/* A new synchronised backward: nothing reported, nothing started. */
static void begin_sync(amp_ddp *d)
{
    d->active = true;
    d->next = 0;
    memset(d->ready, 0, (size_t)d->n * sizeof *d->ready);
    for (int k = 0; k < d->nb; k++)
        d->b[k].pending = d->b[k].count;
}

static void on_ready(amp_ddp *d, autograd_event ev, amp_tensor *leaf)
{
    if (!d->sync || ev == AUTOGRAD_NODE_DONE)
        return; /* no_sync: backward only accumulates */
    if (ev == AUTOGRAD_BACKWARD_BEGIN) { /* of this model or another's */
        if (!d->active)
            begin_sync(d);
        return;
    }
    int i = param_index(d, leaf);
    if (i < 0)
        return;
    if (d->ready[i]) { /* reported twice: a second backward through it */
        if (d->err == AMP_OK) {
            d->err = AMP_ERR_STATE;
            snprintf(d->errmsg, sizeof d->errmsg,
                     "ddp: a second synchronised backward before amp_ddp_finish (parameter %d's gradient was "
                     "already reported; for gradient accumulation call amp_ddp_set_sync(d, false) before the "
                     "micro-batches but the last)",
                     i);
        }
        return;
    }
    d->ready[i] = true;
    int k = d->bucket_of[i];
    if (--d->b[k].pending == 0 && k == d->next)
        start_ready(d, false); /* a failure is kept for finish */
}

static void hook(void *ctx, autograd_event ev, amp_tensor *leaf)
{
    (void)ctx;
    bool in_flight = false;
    for (amp_ddp *d = live; d; d = d->next_live) {
        on_ready(d, ev, leaf);
        in_flight |= d->active && d->next > 0;
    }
    /* After every node and report: let MPI move what is in flight while
     * backward goes on (Open MPI progresses a non-blocking collective
     * only inside MPI calls). */
    if (in_flight)
        comm_progress();
}

/* --------------------------------------------------------------- new */

amp_ddp_opts amp_ddp_defaults(void) { return (amp_ddp_opts){.bucket_mb = 25, .compress = AMP_F32, .broadcast_params = true}; }

/* The most elements of one bucket (gradients and flags): a collective's
 * count is an int. */
#define DDP_MAX_LEN INT_MAX

/* This rank's own checks of the arguments (no collective). */
static amp_status check_local(amp_tensor *const *params, int n, const amp_ddp_opts *o)
{
    if (!params || n <= 0)
        return amp_set_error(AMP_ERR_ARG, "ddp: %s", !params ? "NULL parameter array" : "no parameters (n <= 0)");
    if (!(o->bucket_mb > 0) || !isfinite(o->bucket_mb) || o->bucket_mb > 1048576)
        return amp_set_error(AMP_ERR_ARG, "ddp: bucket_mb %g must be > 0 (and at most 1048576 MiB)", o->bucket_mb);
    if (o->compress != AMP_F32 && o->compress != AMP_BF16 && o->compress != AMP_F16)
        return amp_set_error(AMP_ERR_DTYPE, "ddp: compress %s: only f32 (none), bf16 or f16",
                             (unsigned)o->compress < AMP_DTYPE_COUNT ? amp_dtype_name(o->compress) : "(unknown dtype)");
    for (int i = 0; i < n; i++) {
        const amp_tensor *p = params[i];
        if (!p)
            return amp_set_error(AMP_ERR_ARG, "ddp: parameter %d is NULL", i);
        if (p->grad_fn || !p->requires_grad)
            return amp_set_error(AMP_ERR_ARG, "ddp: parameter %d is %s", i,
                                 p->grad_fn ? "not a leaf (made by an op)" : "a tensor that does not require grad");
        if (!amp_dtype_is_float(p->dtype))
            return amp_set_error(AMP_ERR_DTYPE, "ddp: parameter %d has dtype %s", i, amp_dtype_name(p->dtype));
        if (p->numel > DDP_MAX_LEN - 1)
            return amp_set_error(AMP_ERR_SHAPE,
                                 "ddp: parameter %d has %lld elements: a bucket (its gradients and one flag per "
                                 "parameter) holds at most %d elements, the most one collective moves",
                                 i, (long long)p->numel, DDP_MAX_LEN);
        if (tensor_device(p) != tensor_device(params[0]))
            return amp_set_error(AMP_ERR_DEVICE, "ddp: parameter %d is on %s, parameter 0 on %s (one device)", i,
                                 amp_device_name(tensor_device(p)), amp_device_name(tensor_device(params[0])));
        for (int j = 0; j < i; j++)
            if (params[j] == p)
                return amp_set_error(AMP_ERR_ARG, "ddp: parameter %d is parameter %d again", i, j);
    }
    return backend_check(tensor_device(params[0]), "ddp");
}

/* Every rank's arguments, checked alike: a rank that refused its own (or
 * had no memory to compare them) fails amp_ddp_new on every rank, each
 * message naming that rank and why (comm_agree); then the counts and
 * options (n, bucket_mb's bits, compress), then every parameter's size
 * and dtype, must be the same on every rank. */
static amp_status agree(amp_tensor *const *params, int n, const amp_ddp_opts *o, amp_status local)
{
    const int world = comm_size(), me = comm_rank();
    int64_t mine[3] = {n, 0, (int64_t)o->compress};
    memcpy(&mine[1], &o->bucket_mb, sizeof(double));
    int64_t *all = malloc((size_t)world * sizeof mine);
    if (!all && local == AMP_OK)
        local = amp_set_error(AMP_ERR_MEMORY, "ddp: out of memory");
    amp_status st = comm_agree(local, "ddp_new");
    if (st == AMP_OK)
        st = comm_allgather(mine, all, 3, AMP_I64, AMP_CPU, NULL);
    for (int r = 0; st == AMP_OK && r < world; r++) {
        const int64_t *a = all + 3 * r;
        if (a[0] != n)
            st = amp_set_error(AMP_ERR_ARG, "ddp: the ranks disagree: rank %d has %lld parameters, rank %d has %d", r,
                               (long long)a[0], me, n);
        else if (a[1] != mine[1] || a[2] != mine[2])
            st = amp_set_error(AMP_ERR_ARG, "ddp: the ranks disagree on the options: bucket_mb or compress differ "
                               "between rank %d and rank %d", r, me);
    }
    free(all);
    if (st != AMP_OK)
        return st;
    /* the sizes and dtypes, parameter by parameter */
    int64_t *sz = malloc((size_t)n * sizeof *sz), *szall = malloc((size_t)world * (size_t)n * sizeof *szall);
    st = comm_agree(sz && szall ? AMP_OK : amp_set_error(AMP_ERR_MEMORY, "ddp: out of memory"), "ddp_new");
    if (st != AMP_OK) {
        free(sz);
        free(szall);
        return st;
    }
    for (int i = 0; i < n; i++)
        sz[i] = params[i]->numel * 64 + (int64_t)params[i]->dtype;
    st = comm_allgather(sz, szall, n, AMP_I64, AMP_CPU, NULL);
    for (int r = 0; st == AMP_OK && r < world; r++)
        for (int i = 0; i < n; i++)
            if (szall[(int64_t)r * n + i] != sz[i]) {
                int64_t v = szall[(int64_t)r * n + i];
                st = amp_set_error(AMP_ERR_SHAPE,
                                   "ddp: the ranks disagree: parameter %d has %lld elements (%s) on rank %d and %lld "
                                   "(%s) on rank %d",
                                   i, (long long)(v / 64), amp_dtype_name((amp_dtype)(v % 64)), r,
                                   (long long)params[i]->numel, amp_dtype_name(params[i]->dtype), me);
                break;
            }
    free(sz);
    free(szall);
    return st;
}

static void ddp_release(amp_ddp *d)
{
    if (!d)
        return;
    for (int k = 0; d->b && k < d->nb; k++) {
        if (d->b[k].req)
            comm_wait(d->b[k].req, "a gradient bucket of a freed ddp");
        void *bufs[3] = {d->b[k].buf, d->b[k].half, d->b[k].gathered};
        for (int j = 0; j < 3; j++)
            if (bufs[j])
                d->be->free(bufs[j]);
        free(d->b[k].hflags);
    }
    for (int i = 0; d->params && i < d->n; i++)
        amp_tensor_free(d->params[i]);
    free(d->params);
    free(d->order);
    free(d->bucket_of);
    free(d->offset);
    free(d->ready);
    free(d->b);
    free(d->slot);
    free(d);
}

amp_ddp *amp_ddp_new(amp_tensor *const *params, int n, amp_ddp_opts o)
{
    amp_status st = agree(params, n, &o, check_local(params, n, &o));
    if (st != AMP_OK)
        return NULL;
    amp_ddp *d = calloc(1, sizeof *d);
    if (!d) { /* the others go on to the agreement below */
        comm_agree(amp_set_error(AMP_ERR_MEMORY, "ddp: out of memory"), "ddp_new");
        return NULL;
    }
    d->n = n;
    d->o = o;
    d->dev = tensor_device(params[0]);
    d->be = backend_of(d->dev);
    d->world = comm_size();
    d->sync = true;
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    d->mask = cap - 1;
    d->params = calloc((size_t)n, sizeof *d->params);
    d->order = malloc((size_t)n * sizeof *d->order);
    d->bucket_of = malloc((size_t)n * sizeof *d->bucket_of);
    d->offset = malloc((size_t)n * sizeof *d->offset);
    d->ready = calloc((size_t)n, sizeof *d->ready);
    d->b = calloc((size_t)n, sizeof *d->b);
    d->slot = calloc(cap, sizeof *d->slot);
    if (!d->params || !d->order || !d->bucket_of || !d->offset || !d->ready || !d->b || !d->slot) {
        ddp_release(d);
        comm_agree(amp_set_error(AMP_ERR_MEMORY, "ddp: out of memory"), "ddp_new");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        d->params[i] = amp_tensor_retain(params[i]);
        size_t s = ptr_hash(params[i], d->mask);
        while (d->slot[s])
            s = (s + 1) & d->mask;
        d->slot[s] = i + 1;
    }
    /* buckets over the parameters in reverse order */
    const double cap_elems = o.bucket_mb * 1048576.0 / 4.0;
    for (int j = 0; j < n; j++) {
        int i = n - 1 - j;
        d->order[j] = i;
        ddp_bucket *bk = &d->b[d->nb > 0 ? d->nb - 1 : 0];
        if (d->nb == 0 || (double)bk->numel >= cap_elems ||
            bk->numel + bk->count + 1 + params[i]->numel > DDP_MAX_LEN) { /* (check_local: one fits) */
            bk = &d->b[d->nb++];
            bk->first = j;
        }
        d->bucket_of[i] = (int)(bk - d->b);
        d->offset[i] = bk->numel;
        bk->numel += params[i]->numel;
        bk->count++;
    }
    for (int k = 0; k < d->nb && st == AMP_OK; k++) {
        ddp_bucket *bk = &d->b[k];
        const size_t len = (size_t)(bk->numel + bk->count);
        if (!(bk->hflags = calloc((size_t)bk->count, sizeof *bk->hflags)))
            st = amp_set_error(AMP_ERR_MEMORY, "ddp: out of memory");
        else if (!(bk->buf = d->be->alloc(len * 4)))
            st = amp_last_status();
        else if (o.compress != AMP_F32 &&
                 (!(bk->half = d->be->alloc(len * 2)) || !(bk->gathered = d->be->alloc(len * 2 * (size_t)d->world))))
            st = amp_last_status();
    }
    /* Every rank's allocations succeeded, or every rank fails here
     * (another's failure must not leave this one in a bcast below). */
    st = comm_agree(st, "ddp_new");
    /* every rank takes rank 0's parameters (bits, in their own dtype) */
    for (int i = 0; st == AMP_OK && o.broadcast_params && i < n && d->world > 1; i++) {
        amp_tensor *p = d->params[i];
        if ((st = comm_bcast(tensor_ptr(p), p->numel, p->dtype, 0, d->dev)) == AMP_OK)
            tensor_bump(p);
    }
    if (st != AMP_OK) {
        ddp_release(d);
        return NULL;
    }
    d->stats.buckets = d->nb;
    d->next_live = live;
    live = d;
    autograd_set_grad_ready_hook(hook, NULL);
    return d;
}

void amp_ddp_free(amp_ddp *d)
{
    if (!d)
        return;
    /* A synchronised backward not finished: the other ranks issue (or
     * issued) every bucket's collective and the agreement, so this rank
     * does too, as amp_ddp_finish (which it is; its status is dropped). */
    if (d->active)
        (void)amp_ddp_finish(d);
    for (amp_ddp **p = &live; *p; p = &(*p)->next_live)
        if (*p == d) {
            *p = d->next_live;
            break;
        }
    if (!live)
        autograd_set_grad_ready_hook(NULL, NULL);
    ddp_release(d);
}

void amp_ddp_set_sync(amp_ddp *d, bool sync)
{
    if (d)
        d->sync = sync;
}

/* ------------------------------------------------------------ finish */

/* sum / world of bucket k into its parameters' .grad. */
static amp_status bucket_unpack(amp_ddp *d, int k)
{
    ddp_bucket *bk = &d->b[k];
    const amp_backend *be = d->be;
    const int64_t len = bk->numel + bk->count;
    amp_status st;
    if (d->o.compress != AMP_F32) {
        /* f32 sum of the ranks' 16-bit copies in rank order: the same bits everywhere */
        const float zero = 0.0f;
        if ((st = be->fill(bk->buf, len, &zero, sizeof zero)) != AMP_OK)
            return st;
        for (int r = 0; r < d->world; r++)
            if ((st = be->accumulate(bk->buf, AMP_F32, (char *)bk->gathered + (size_t)r * (size_t)len * 2,
                                     d->o.compress, len)) != AMP_OK)
                return st;
    }
    if (d->world > 1) {
        const be_pw_plan plan = {.nd = 1, .d = {bk->numel}, .st = {{1}}};
        const void *in[1] = {bk->buf};
        const amp_dtype idt[1] = {AMP_F32};
        BACKEND_CALL(be, "ddp", pointwise, AMP_PW_DIV_S, bk->buf, AMP_F32, bk->numel, 1, in, idt, &plan,
                     (float)d->world);
    }
    /* The flags only matter where this rank has no gradient. */
    float *flags = bk->hflags;
    for (int j = 0; j < bk->count; j++)
        if (!d->params[d->order[bk->first + j]]->grad) {
            if ((st = be->copy(flags, AMP_CPU, bk->buf + bk->numel, d->dev, (size_t)bk->count * 4)) != AMP_OK)
                return st;
            break;
        }
    st = AMP_OK;
    for (int j = 0; j < bk->count && st == AMP_OK; j++) {
        int i = d->order[bk->first + j];
        amp_tensor *p = d->params[i], *g = p->grad;
        const float *src = bk->buf + d->offset[i];
        if (!g) {
            if (flags[j] == 0.0f)
                continue; /* no gradient on any rank: none here either */
            if (!(g = tensor_new_on(p->shape, p->dtype, d->dev))) {
                st = amp_last_status();
                break;
            }
            tensor_set_category(g, AMP_MEM_GRADIENTS);
            p->grad = g;
        }
        if (g->dtype == AMP_F32)
            st = be->copy(tensor_ptr(g), d->dev, src, d->dev, (size_t)p->numel * 4);
        else
            st = be->convert(src, AMP_F32, tensor_ptr(g), g->dtype, p->numel);
        tensor_bump(g);
    }
    return st;
}

amp_status amp_ddp_finish(amp_ddp *d)
{
    if (!d)
        return amp_set_error(AMP_ERR_ARG, "ddp_finish: NULL ddp");
    if (!d->active)
        return d->err == AMP_OK ? AMP_OK : amp_set_error(d->err, "%s", d->errmsg);
    const int early = d->next;
    start_ready(d, true); /* whatever failed: the other ranks start them too */
    amp_status st = AMP_OK;
    /* Wait for every bucket that started (whatever failed: the others
     * issued the same collectives), then unpack. */
    const double t0 = now_s();
    for (int k = 0; k < d->nb; k++)
        if (d->b[k].req) {
            char what[64];
            snprintf(what, sizeof what, "the gradient all-reduce of bucket %d", k);
            amp_status w = comm_wait(d->b[k].req, what);
            d->b[k].req = NULL;
            if (w != AMP_OK)
                hook_fail(d, w);
        }
    const double waited = now_s() - t0;
    d->stats.wait_s += waited;
    d->stats.last_wait_s = waited;
    /* Every rank's verdict (MAX of a failure flag, one i64): a failure on
     * one rank (a gradient it could not pack, a second synchronised
     * backward, ...) is every rank's error and no rank writes a .grad, so
     * the ranks cannot drift. */
    if (d->world > 1) {
        int64_t bad = d->err != AMP_OK;
        amp_status c = comm_allreduce(&bad, 1, AMP_I64, AMP_REDUCE_MAX, AMP_CPU, NULL);
        if (c != AMP_OK)
            hook_fail(d, c);
        else if (bad && d->err == AMP_OK) {
            d->err = AMP_ERR_STATE;
            snprintf(d->errmsg, sizeof d->errmsg,
                     "ddp: another rank failed in this synchronised backward (its message says why); no "
                     ".grad was written");
        }
    }
    for (int k = 0; k < d->nb && d->err == AMP_OK; k++)
        if ((st = bucket_unpack(d, k)) != AMP_OK)
            hook_fail(d, st);
    for (int k = 0; k < d->nb; k++)
        d->b[k].started = false;
    d->active = false;
    d->next = 0;
    d->stats.syncs++;
    d->stats.early_buckets += early;
    if (d->err != AMP_OK) {
        st = amp_set_error(d->err, "%s", d->errmsg);
        d->err = AMP_OK;
        return st;
    }
    return AMP_OK;
}

amp_ddp_stats amp_ddp_get_stats(const amp_ddp *d) { return d ? d->stats : (amp_ddp_stats){0}; }
