/*
 * test_profiler.c - the profiler's recording hooks: the FLOPs of each op's
 * forward and backward against the formulas of the rows' cost functions
 * (src/ops, beside each forward), recomputed here from the shapes; the
 * dtypes and shapes an op event records (after autocast); each op's
 * params by name on its events and in the trace (a checkpoint's
 * recompute too); autocast's casts and cast-cache hits; the library's
 * phases and the nesting of events inside them (host times, per thread);
 * a model's forward + backward; nothing recorded and nothing allocated
 * while the profiler is off. On CUDA (cudaemu in `ctest -L cuda`):
 * training steps profiled with device-timed events and GEMMs named, and
 * the host synchronisation counter the same with the profiler on as off.
 */
#include "harness.h"
#include "trace_check.h"

#include "record/profile.h"

#include <stdlib.h>
#include <unistd.h>

/* ---------------------------------------------------------- helpers */

static void start(void)
{
    amp_profiler_opts o = amp_profiler_defaults();
    o.memory = false; /* counters are not what these tests look at */
    CHECK_OK(amp_profiler_start(&o));
}

/* The nth (0-based) event of kind k named name, over every thread; NULL
 * when there are fewer. */
static const prof_event *find(prof_kind k, const char *name, int nth)
{
    const prof_thread_events *th;
    int nt = prof_threads(&th);
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++) {
            const prof_event *e = &th[t].ev[i];
            if (e->kind == k && (!name || strcmp(e->name, name) == 0) && nth-- == 0)
                return e;
        }
    return NULL;
}

static int count(prof_kind k, const char *name)
{
    int n = 0;
    while (find(k, name, n))
        n++;
    return n;
}

static amp_tensor *param(amp_shape s, uint64_t seed)
{
    amp_manual_seed(seed);
    amp_tensor *t = amp_randn(s, AMP_F32, 0, 1);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

static void check_dims(const prof_tensor *pt, amp_dtype dt, amp_shape s, const char *what)
{
    CHECK_MSG(pt->dtype == (int)dt, "%s: dtype %d, expected %s", what, pt->dtype, amp_dtype_name(dt));
    CHECK_MSG(pt->ndim == s.ndim, "%s: ndim %d, expected %d", what, pt->ndim, s.ndim);
    for (int i = 0; i < s.ndim && i < PROF_MAX_DIMS && pt->ndim == s.ndim; i++)
        CHECK_MSG(pt->dims[i] == s.d[i], "%s: dim %d is %lld, expected %lld", what, i, (long long)pt->dims[i],
                  (long long)s.d[i]);
}

/* Runs fn's forward (its loss summed to a scalar) and backward under the
 * profiler and checks op's forward and backward FLOPs. */
static void check_flops(const char *op, amp_tensor *out, double fwd, double bwd)
{
    CHECK_MSG(out != NULL, "%s: %s", op, amp_last_error());
    if (!out) {
        amp_profiler_stop();
        return;
    }
    amp_tensor *loss = amp_tensor_numel(out) == 1 ? out : amp_sum_all(out);
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_profiler_stop());
    const prof_event *f = find(PROF_OP_FWD, op, 0), *b = find(PROF_OP_BWD, op, 0);
    CHECK_MSG(f != NULL, "%s: no forward event", op);
    CHECK_MSG(b != NULL, "%s: no backward event", op);
    if (f)
        CHECK_MSG(f->flops == fwd, "%s forward: %.0f FLOPs, formula %.0f", op, f->flops, fwd);
    if (b)
        CHECK_MSG(b->flops == bwd, "%s backward: %.0f FLOPs, formula %.0f", op, b->flops, bwd);
    amp_temps_free();
}

/* ----------------------------------------------------------- flops */

static void test_flops_matmul(void)
{
    /* a [3, 5, 7] @ b [7, 4]: B*M = 15, N = 4, K = 7 */
    amp_tensor *a = param(AMP_SHAPE(3, 5, 7), 1), *b = param(AMP_SHAPE(7, 4), 2);
    start();
    amp_tensor *c = amp_matmul(a, b);
    const double mnk = 15.0 * 4 * 7;
    check_flops("matmul", c, 2 * mnk, 4 * mnk);
    /* the dtypes, shapes and bytes of that forward */
    const prof_event *f = find(PROF_OP_FWD, "matmul", 0);
    if (f) {
        CHECK_EQ_INT(f->n_in, 2);
        check_dims(&f->in[0], AMP_F32, AMP_SHAPE(3, 5, 7), "matmul in[0]");
        check_dims(&f->in[1], AMP_F32, AMP_SHAPE(7, 4), "matmul in[1]");
        check_dims(&f->out, AMP_F32, AMP_SHAPE(3, 5, 4), "matmul out");
        CHECK(f->bytes == (105.0 + 28 + 60) * 4);
        CHECK_EQ_INT(f->device, AMP_CPU);
    }
    /* the GEMM inside it, named by the path it took (one product: the
     * leading dims fold into M) */
    const prof_event *k = find(PROF_KERNEL, NULL, 0);
    CHECK(k != NULL);
    if (k && f) {
        CHECK(k->flops == 2 * mnk);
        CHECK_MSG(strcmp(k->name, "gemm") != 0, "the kernel event does not name its path");
        CHECK_EQ_INT(k->depth, f->depth + 1);
        CHECK(k->host_t0 >= f->host_t0 && k->host_t1 <= f->host_t1);
        check_dims(&k->in[0], AMP_F32, AMP_SHAPE(15, 7), "gemm A");
        check_dims(&k->out, AMP_F32, AMP_SHAPE(15, 4), "gemm C");
    }
    /* backward: out = gout, in[i] = input i's gradient */
    const prof_event *g = find(PROF_OP_BWD, "matmul", 0);
    if (g) {
        check_dims(&g->out, AMP_F32, AMP_SHAPE(3, 5, 4), "matmul gout");
        check_dims(&g->in[0], AMP_F32, AMP_SHAPE(3, 5, 7), "matmul gin[0]");
        check_dims(&g->in[1], AMP_F32, AMP_SHAPE(7, 4), "matmul gin[1]");
    }

    /* only a needs a gradient: half the backward */
    amp_tensor *bc = amp_clone(b);
    start();
    check_flops("matmul", amp_matmul(a, bc), 2 * mnk, 2 * mnk);
    g = find(PROF_OP_BWD, "matmul", 0);
    if (g)
        CHECK_EQ_INT(g->in[1].dtype, -1); /* no gradient made for b */
    amp_tensor_free(bc);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void test_flops_linear_conv(void)
{
    amp_tensor *x = param(AMP_SHAPE(6, 8), 3), *w = param(AMP_SHAPE(5, 8), 4), *bias = param(AMP_SHAPE(5), 5);
    start();
    /* 2*R*in*out + R*out (bias); backward dx, dW, dbias */
    check_flops("linear", amp_linear(x, w, bias), 2.0 * 6 * 8 * 5 + 30, 2 * (2.0 * 6 * 8 * 5) + 30);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(bias);

    amp_tensor *cx = param(AMP_SHAPE(2, 3, 8, 8), 6), *cw = param(AMP_SHAPE(4, 3, 3, 3), 7),
               *cb = param(AMP_SHAPE(4), 8);
    start();
    /* stride 1, padding 1: Ho = Wo = 8; N*O*Ho*Wo = 512, C*k*k = 27 */
    const double prod = 2.0 * 512 * 27;
    check_flops("conv2d", amp_conv2d(cx, cw, cb, 1, 1), prod + 512, 2 * prod + 512);
    /* stride 2, no padding, no bias: Ho = Wo = 3 */
    start();
    const double prod2 = 2.0 * (2 * 4 * 3 * 3) * 27;
    check_flops("conv2d", amp_conv2d(cx, cw, NULL, 2, 0), prod2, 2 * prod2);
    amp_tensor_free(cx);
    amp_tensor_free(cw);
    amp_tensor_free(cb);
}

static void test_flops_attention(void)
{
    amp_tensor *q = param(AMP_SHAPE(2, 3, 16, 8), 9), *k = param(AMP_SHAPE(2, 3, 16, 8), 10),
               *v = param(AMP_SHAPE(2, 3, 16, 8), 11);
    const double htd = 6.0 * 16 * 16 * 8; /* heads 6, T 16, d 8 */
    start();
    check_flops("scaled_dot_product_attention", amp_attention(q, k, v, true), 4 * htd, 10 * htd);
    amp_tensor_free(q);
    amp_tensor_free(k);
    amp_tensor_free(v);
}

static void test_flops_pointwise_norm_loss(void)
{
    amp_tensor *a = param(AMP_SHAPE(4, 10), 12), *b = param(AMP_SHAPE(4, 10), 13);
    start();
    check_flops("mul", amp_mul(a, b), 40, 80); /* 1 per element; each gradient 1 per element */
    start();
    check_flops("relu", amp_relu(a), 40, 40);
    start();
    check_flops("softmax", amp_softmax(a, -1), 5 * 40, 4 * 40);

    amp_tensor *w = param(AMP_SHAPE(10), 14), *bias = param(AMP_SHAPE(10), 15);
    start();
    check_flops("layer_norm", amp_layer_norm(a, 1, w, bias, 1e-5), 8 * 40, 12 * 40);

    int64_t lab[4] = {1, 0, 9, 3};
    amp_tensor *labels = amp_from_data(AMP_SHAPE(4), AMP_I64, lab);
    start();
    check_flops("cross_entropy", amp_cross_entropy(a, labels), 5 * 40 + 4, 3 * 40);
    /* a reduction: 1 per input element both ways */
    start();
    amp_tensor *s = amp_sum_all(a);
    check_flops("sum", s, 40, 40);
    amp_tensor_free(labels);
    amp_tensor_free(w);
    amp_tensor_free(bias);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* --------------------------------------------------- autocast casts */

static void test_casts_and_cache_hits(void)
{
    amp_tensor *x = amp_randn(AMP_SHAPE(4, 8), AMP_F32, 0, 1); /* not a leaf that needs grad: never cached */
    amp_tensor *w = param(AMP_SHAPE(6, 8), 16);
    start();
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
    amp_tensor *y1 = amp_linear(x, w, NULL);
    amp_tensor *y2 = amp_linear(x, w, NULL); /* w's cast from the cache */
    CHECK_OK(amp_autocast_end());
    CHECK(y1 && y2);
    CHECK_OK(amp_backward(amp_sum_all(amp_add(y1, y2))));
    CHECK_OK(amp_profiler_stop());

    /* linear 1: x and w cast; linear 2: x cast, w a hit */
    CHECK_EQ_INT(count(PROF_CAST, "cast f32->bf16"), 3);
    CHECK_EQ_INT(count(PROF_CAST_HIT, "cast f32->bf16"), 1);
    const prof_event *h = find(PROF_CAST_HIT, NULL, 0);
    if (h) {
        check_dims(&h->in[0], AMP_F32, AMP_SHAPE(6, 8), "hit source");
        check_dims(&h->out, AMP_BF16, AMP_SHAPE(6, 8), "hit cast");
        CHECK(h->t0 == h->t1);
    }
    /* the linear events see what autocast chose */
    for (int i = 0; i < 2; i++) {
        const prof_event *f = find(PROF_OP_FWD, "linear", i);
        CHECK(f != NULL);
        if (!f)
            continue;
        check_dims(&f->in[0], AMP_BF16, AMP_SHAPE(4, 8), "linear x");
        check_dims(&f->in[1], AMP_BF16, AMP_SHAPE(6, 8), "linear w");
        check_dims(&f->out, AMP_BF16, AMP_SHAPE(4, 6), "linear out");
        CHECK(f->flops == 2.0 * 4 * 8 * 6);
    }
    /* Each cast event wraps exactly one `to` op event, one level down,
     * with the same dtypes: the nesting profile.h documents. */
    const prof_thread_events *th;
    int nt = prof_threads(&th), casts = 0;
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++) {
            const prof_event *c = &th[t].ev[i];
            if (c->kind != PROF_CAST)
                continue;
            casts++;
            CHECK(i + 1 < th[t].n);
            if (i + 1 >= th[t].n)
                continue;
            const prof_event *op = &th[t].ev[i + 1];
            CHECK(op->kind == PROF_OP_FWD && strcmp(op->name, "to") == 0);
            CHECK_EQ_INT(op->depth, c->depth + 1);
            CHECK(op->host_t0 >= c->host_t0 && op->host_t1 <= c->host_t1);
            CHECK_EQ_INT(op->in[0].dtype, c->in[0].dtype);
            CHECK_EQ_INT(op->out.dtype, c->out.dtype);
            CHECK_EQ_INT(c->in[0].dtype, AMP_F32);
            CHECK_EQ_INT(c->out.dtype, AMP_BF16);
            CHECK(c->bytes == (double)(c->in[0].dims[0] * c->in[0].dims[1]) * 6);
        }
    CHECK_EQ_INT(casts, 3);
    /* the backward of w's one cached cast (x needs no gradient) */
    CHECK_EQ_INT(count(PROF_OP_BWD, "to"), 1);
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
}

/* --------------------------------------------- phases and nesting */

typedef struct {
    amp_module *net;
    amp_optim *opt;
    amp_scaler *scaler;
    amp_tensor *x, *y;
} rig;

static void rig_make(rig *r, amp_device dev)
{
    amp_manual_seed(21);
    int64_t hidden[2] = {32, 16};
    r->net = amp_model_mlp(12, hidden, 2, 5);
    r->x = amp_randn(AMP_SHAPE(8, 12), AMP_F32, 0, 1);
    int64_t lab[8] = {0, 1, 2, 3, 4, 0, 1, 2};
    r->y = amp_from_data(AMP_SHAPE(8), AMP_I64, lab);
    if (dev != AMP_CPU) {
        CHECK_OK(amp_module_to(r->net, dev));
        CHECK_OK(amp_tensor_move(r->x, dev));
        CHECK_OK(amp_tensor_move(r->y, dev));
    }
    amp_tensor *ps[16];
    int n = amp_module_params(r->net, ps, 16);
    amp_sgd_opts o = amp_sgd_defaults();
    o.lr = 0.01;
    o.momentum = 0.9;
    r->opt = amp_optim_sgd(ps, n, o);
    r->scaler = amp_scaler_new(amp_scaler_defaults());
}

static void rig_free(rig *r)
{
    amp_scaler_free(r->scaler);
    amp_optim_free(r->opt);
    amp_module_free(r->net);
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
}

/* One fp16 + scaler step with the caller's data and forward phases marked
 * as ampc train marks them; the library marks the rest. */
static void rig_step(rig *r, amp_device dev)
{
    amp_optim_zero_grad(r->opt);
    amp_phase_begin(AMP_PHASE_FORWARD);
    amp_autocast_begin(dev, AMP_F16);
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(r->net, r->x), r->y);
    amp_autocast_end();
    CHECK_OK(amp_phase_end(AMP_PHASE_FORWARD));
    CHECK(loss != NULL);
    CHECK_OK(amp_backward(amp_scaler_scale(r->scaler, loss)));
    CHECK_OK(amp_scaler_unscale(r->scaler, r->opt));
    amp_tensor *ps[16];
    int n = amp_module_params(r->net, ps, 16);
    amp_tensor_free(amp_clip_grad_norm_tensor(ps, n, 1.0));
    CHECK_OK(amp_scaler_step(r->scaler, r->opt, NULL));
    CHECK_OK(amp_scaler_update(r->scaler));
    amp_profiler_step();
    amp_temps_free();
}

/* The innermost open event of thread events ev[0..i) at depth d (the
 * parent of an event at depth d + 1 that begins at i). */
static const prof_event *parent_of(const prof_event *ev, size_t i)
{
    for (size_t j = i; j-- > 0;)
        if (ev[j].depth == ev[i].depth - 1 && ev[j].kind != PROF_CAST_HIT && ev[j].kind != PROF_COUNTER &&
            ev[j].kind != PROF_STEP)
            return &ev[j];
    return NULL;
}

/* The phase event an event is inside: its nearest PROF_PHASE ancestor. */
static const prof_event *phase_of(const prof_event *ev, size_t i)
{
    const prof_event *p = &ev[i];
    while (p && p->depth > 0) {
        p = parent_of(ev, (size_t)(p - ev));
        if (p && p->kind == PROF_PHASE)
            return p;
    }
    return NULL;
}

static void test_phases_and_nesting(void)
{
    rig r;
    rig_make(&r, AMP_CPU);
    rig_step(&r, AMP_CPU); /* warm */
    amp_profiler_opts o = amp_profiler_defaults(); /* memory counters on, as the CLI runs it */
    CHECK_OK(amp_profiler_start(&o));
    for (int s = 0; s < 2; s++)
        rig_step(&r, AMP_CPU);
    CHECK_OK(amp_profiler_stop());
    CHECK_EQ_INT(amp_phase_current(), AMP_PHASE_OTHER); /* every begin had its end */

    static const char *const want[] = {"forward", "backward", "unscale", "optimizer", "scaler update"};
    for (int k = 0; k < 5; k++)
        CHECK_MSG(count(PROF_PHASE, want[k]) == (k == 2 ? 4 : 2), "phase %s: %d events", want[k],
                  count(PROF_PHASE, want[k]));

    const prof_thread_events *th;
    int nt = prof_threads(&th), fwd = 0, bwd = 0;
    for (int t = 0; t < nt; t++) {
        const prof_event *ev = th[t].ev;
        for (size_t i = 0; i < th[t].n; i++) {
            const prof_event *e = &ev[i];
            CHECK_MSG(e->t0 <= e->t1 && e->host_t0 <= e->host_t1, "event %s: t0 > t1", e->name);
            if (i > 0)
                CHECK_MSG(e->host_t0 >= ev[i - 1].host_t0, "event %zu (%s) begins before the one before it", i,
                          e->name);
            if (e->depth > 0) {
                const prof_event *p = parent_of(ev, i);
                CHECK_MSG(p && p->host_t0 <= e->host_t0 && e->host_t1 <= p->host_t1,
                          "event %s (depth %d) is not inside its parent %s", e->name, e->depth, p ? p->name : "-");
            }
            if (e->kind == PROF_OP_FWD || e->kind == PROF_OP_BWD) {
                const prof_event *ph = phase_of(ev, i);
                const char *name = ph ? ph->name : "(none)";
                /* forward ops in forward (scale's mul is outside any phase
                 * here); backward ops in backward */
                if (e->kind == PROF_OP_BWD) {
                    bwd++;
                    CHECK_MSG(strcmp(name, "backward") == 0, "backward op %s in phase %s", e->name, name);
                } else if (strcmp(e->name, "linear") == 0 || strcmp(e->name, "cross_entropy") == 0) {
                    fwd++;
                    CHECK_MSG(strcmp(name, "forward") == 0, "forward op %s in phase %s", e->name, name);
                }
                CHECK_EQ_INT(e->phase, ph ? ph->phase : AMP_PHASE_OTHER);
            }
        }
    }
    CHECK(fwd >= 2 * 4 && bwd > 0);
    CHECK(count(PROF_COUNTER, "memory") > 0);
    CHECK(count(PROF_STEP, "step") == 2);
    rig_free(&r);
}

/* Every phase the library opens is closed on its error paths too. */
static void test_phases_closed_on_errors(void)
{
    start();
    CHECK(amp_backward(NULL) != AMP_OK);
    amp_clear_error();
    amp_tensor *v = amp_zeros(AMP_SHAPE(3), AMP_F32);
    CHECK(amp_backward(v) != AMP_OK); /* not a scalar */
    CHECK(amp_backward_with(v, NULL) != AMP_OK);
    amp_clear_error();
    CHECK(amp_scaler_unscale(NULL, NULL) != AMP_OK);
    CHECK(amp_scaler_update(NULL) != AMP_OK);
    CHECK(amp_optim_step(NULL) != AMP_OK);
    CHECK(amp_checkpoint_save(NULL, NULL, NULL, NULL, 0, NULL) != AMP_OK);
    amp_tensor *ps[1] = {NULL};
    CHECK(isnan(amp_clip_grad_norm(ps, 1, 1.0)));
    amp_clear_error();
    CHECK_EQ_INT(amp_phase_current(), AMP_PHASE_OTHER);
    CHECK_OK(amp_profiler_stop());
    /* each one a closed phase event */
    static const char *const names[] = {"backward", "unscale", "scaler update", "optimizer", "checkpoint save"};
    static const int want[] = {3, 2, 1, 1, 1};
    for (int k = 0; k < 5; k++) {
        CHECK_MSG(count(PROF_PHASE, names[k]) == want[k], "phase %s: %d events, expected %d", names[k],
                  count(PROF_PHASE, names[k]), want[k]);
        const prof_event *e = find(PROF_PHASE, names[k], 0);
        if (e)
            CHECK(e->depth == 0 && e->t1 >= e->t0);
    }
    amp_tensor_free(v);
}

/* A model's forward + backward records both kinds, with FLOPs. */
static void test_model_forward_backward(void)
{
    amp_manual_seed(3);
    amp_gpt_config c = {.vocab = 16, .context = 8, .width = 16, .layers = 1, .heads = 2, .mlp = 32};
    amp_module *m = amp_model_gpt(c);
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 8), AMP_I64), *y = amp_zeros(AMP_SHAPE(16), AMP_I64);
    int64_t *xv = amp_tensor_data(x), *yv = amp_tensor_data(y);
    for (int i = 0; i < 16; i++)
        xv[i] = yv[i] = (i * 5) % 16;
    start();
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    amp_tensor *loss = amp_cross_entropy(amp_reshape(amp_module_forward(m, x), AMP_SHAPE(-1, 16)), y);
    amp_autocast_end();
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_profiler_stop());
    double ff = 0, fb = 0;
    int nf = 0, nb = 0;
    for (int i = 0;; i++) {
        const prof_event *e = find(PROF_OP_FWD, NULL, i);
        if (!e)
            break;
        nf++;
        ff += e->flops;
    }
    for (int i = 0;; i++) {
        const prof_event *e = find(PROF_OP_BWD, NULL, i);
        if (!e)
            break;
        nb++;
        fb += e->flops;
    }
    CHECK(nf > 10 && nb > 10);
    CHECK(ff > 0 && fb > ff); /* backward does about twice the forward's work */
    CHECK(count(PROF_OP_FWD, "scaled_dot_product_attention") == 1);
    CHECK(count(PROF_OP_BWD, "scaled_dot_product_attention") == 1);
    CHECK(count(PROF_CAST, NULL) > 0);
    amp_temps_free();
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

/* ----------------------------------------------------------- off */

static void test_off_records_and_allocates_nothing(void)
{
    rig r;
    rig_make(&r, AMP_CPU);
    rig_step(&r, AMP_CPU);
    rig_step(&r, AMP_CPU); /* warm: the allocator's caches filled */
    amp_profiler_reset();
    CHECK(!amp_profiler_enabled());
    size_t rec0 = prof_allocations();
    amp_memory_stats m0 = amp_memory_get_stats();
    rig_step(&r, AMP_CPU);
    amp_memory_stats m1 = amp_memory_get_stats();
    size_t dropped = 1;
    CHECK_EQ_INT(amp_profiler_num_events(&dropped), 0);
    CHECK_EQ_INT(dropped, 0);
    CHECK_EQ_INT(prof_allocations(), rec0); /* the recorder malloc'd nothing */
    const prof_thread_events *th;
    CHECK_EQ_INT(prof_threads(&th), 0);

    /* The hooks take nothing from ampc's allocator, on or off: a step's
     * allocations are the same count either way. */
    start();
    amp_memory_stats m2 = amp_memory_get_stats();
    rig_step(&r, AMP_CPU);
    amp_memory_stats m3 = amp_memory_get_stats();
    CHECK_OK(amp_profiler_stop());
    CHECK_MSG(m3.allocs - m2.allocs == m1.allocs - m0.allocs, "a step made %zu allocations off, %zu on",
              (size_t)(m1.allocs - m0.allocs), (size_t)(m3.allocs - m2.allocs));
    CHECK(prof_allocations() > rec0); /* (on, it did record) */
    CHECK(amp_profiler_num_events(NULL) > 0);
    amp_profiler_reset();
    CHECK_EQ_INT(amp_profiler_num_events(NULL), 0);
    rig_free(&r);
}

/* ----------------------------------------------------------- cuda */

static void test_cuda_steps(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    enum { STEPS = 3 };
    rig r;
    rig_make(&r, AMP_CUDA);
    rig_step(&r, AMP_CUDA);
    rig_step(&r, AMP_CUDA);
    CHECK_OK(amp_cuda_synchronize());

    amp_cuda_sync_stats a = amp_cuda_get_sync_stats();
    for (int s = 0; s < STEPS; s++)
        rig_step(&r, AMP_CUDA);
    amp_cuda_sync_stats b = amp_cuda_get_sync_stats();
    start();
    amp_cuda_sync_stats c = amp_cuda_get_sync_stats();
    for (int s = 0; s < STEPS; s++)
        rig_step(&r, AMP_CUDA);
    amp_cuda_sync_stats d = amp_cuda_get_sync_stats();
    CHECK_OK(amp_profiler_stop());
    CHECK_MSG(d.syncs - c.syncs == b.syncs - a.syncs && d.d2h_copies - c.d2h_copies == b.d2h_copies - a.d2h_copies &&
                  d.h2d_copies - c.h2d_copies == b.h2d_copies - a.h2d_copies,
              "host synchronisations in %d steps: off %llu syncs %llu d2h %llu h2d, on %llu %llu %llu", STEPS,
              (unsigned long long)(b.syncs - a.syncs), (unsigned long long)(b.d2h_copies - a.d2h_copies),
              (unsigned long long)(b.h2d_copies - a.h2d_copies), (unsigned long long)(d.syncs - c.syncs),
              (unsigned long long)(d.d2h_copies - c.d2h_copies), (unsigned long long)(d.h2d_copies - c.h2d_copies));

    int on_dev = 0, kernels = 0, resolved = 0;
    const prof_thread_events *th;
    int nt = prof_threads(&th);
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++) {
            const prof_event *e = &th[t].ev[i];
            if (e->kind != PROF_OP_FWD && e->kind != PROF_OP_BWD && e->kind != PROF_KERNEL && e->kind != PROF_CAST)
                continue;
            if (e->kind != PROF_KERNEL)
                CHECK_MSG(e->device == AMP_CUDA, "%s on device %d", e->name, e->device);
            if (e->device != AMP_CUDA)
                continue;
            on_dev++;
            CHECK_MSG(e->dev_mark0 >= 0 && e->dev_mark1 > e->dev_mark0, "%s: marks %d, %d", e->name, e->dev_mark0,
                      e->dev_mark1);
            /* device times, on the host's clock: after the host issued the work */
            CHECK_MSG(e->t0 <= e->t1 && e->t0 >= e->host_t0 - 100000, "%s: device %lld..%lld, host %lld..%lld",
                      e->name, (long long)e->t0, (long long)e->t1, (long long)e->host_t0, (long long)e->host_t1);
            resolved += e->t0 != e->host_t0; /* the device's time, not the host's */
            if (e->kind == PROF_KERNEL) {
                kernels++;
                CHECK(e->flops > 0);
                CHECK_MSG(strstr(e->name, "gemm") != NULL, "kernel %s", e->name);
            }
        }
    CHECK(on_dev > 10);
    CHECK_MSG(resolved > on_dev / 2, "%d of %d device events have device times", resolved, on_dev);
    CHECK(kernels >= STEPS * 3); /* three linear layers' forward products at least */
    CHECK(count(PROF_OP_FWD, "linear") == STEPS * 3);
    const prof_event *g = find(PROF_KERNEL, NULL, 0);
    if (g)
        CHECK_EQ_INT(g->in[0].dtype, AMP_F16);
    rig_free(&r);
}

/* ------------------------------------------------------------ params */

/* Event e's param named name, as the trace names it; NULL when none. */
static const prof_arg *param_of(const prof_event *e, const char *name, prof_arg *a)
{
    const int n = e && e->args ? e->args(&e->params, a, PROF_MAX_ARGS) : 0;
    for (int i = 0; i < n; i++)
        if (strcmp(a[i].name, name) == 0)
            return &a[i];
    return NULL;
}

static bool int_param(const prof_event *e, const char *name, int64_t v)
{
    prof_arg a[PROF_MAX_ARGS];
    const prof_arg *p = param_of(e, name, a);
    return p && p->kind == PROF_ARG_INT && p->i == v;
}

static bool str_param(const prof_event *e, const char *name, const char *v)
{
    prof_arg a[PROF_MAX_ARGS];
    const prof_arg *p = param_of(e, name, a);
    return p && p->kind == PROF_ARG_STR && strcmp(p->s, v) == 0;
}

static bool bool_param(const prof_event *e, const char *name, bool v)
{
    prof_arg a[PROF_MAX_ARGS];
    const prof_arg *p = param_of(e, name, a);
    return p && p->kind == PROF_ARG_BOOL && (p->i != 0) == v;
}

/* An op's forward and backward events carry its params by name. */
static void test_op_events_carry_params(void)
{
    amp_tensor *x = param(AMP_SHAPE(1, 2, 7, 7), 21), *w = param(AMP_SHAPE(3, 2, 3, 3), 22),
               *b = param(AMP_SHAPE(3), 23);
    start();
    amp_tensor *y = amp_conv2d(x, w, b, 2, 1);
    amp_tensor *z = amp_reshape(amp_to(y, AMP_BF16), AMP_SHAPE(-1, 4));
    CHECK_OK(amp_backward(amp_sum_all(amp_add_scalar(z, 0.25))));
    CHECK_OK(amp_profiler_stop());
    for (int pass = 0; pass < 2; pass++) {
        const prof_event *e = find(pass ? PROF_OP_BWD : PROF_OP_FWD, "conv2d", 0);
        CHECK_MSG(e != NULL, "no conv2d %s event", pass ? "backward" : "forward");
        CHECK(int_param(e, "stride", 2) && int_param(e, "padding", 1));
        CHECK(bool_param(e, "has_bias", true) && str_param(e, "act", "none"));
    }
    const prof_event *to = find(PROF_OP_FWD, "to", 0), *r = find(PROF_OP_FWD, "reshape", 0);
    CHECK(str_param(to, "dtype", "bf16") && bool_param(to, "from_kept_copy", false));
    prof_arg a[PROF_MAX_ARGS];
    const prof_arg *shape = param_of(r, "shape", a);
    CHECK(shape && shape->kind == PROF_ARG_INTS && shape->n_ints == 2 && shape->ints[0] == -1 && shape->ints[1] == 4);
    const prof_arg *s = param_of(find(PROF_OP_FWD, "add_scalar", 0), "scalar", a);
    CHECK(s && s->kind == PROF_ARG_FLOAT && s->f == 0.25);
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
}

/* The trace writes them under "params" in an op's args, as valid JSON
 * (infinities as strings: JSON has none). */
static void test_trace_writes_params(void)
{
    amp_tensor *x = param(AMP_SHAPE(1, 2, 7, 7), 24), *w = param(AMP_SHAPE(3, 2, 3, 3), 25);
    start();
    amp_tensor *y = amp_max_pool2d(amp_conv2d(x, w, NULL, 2, 1), 2, 0, 0);
    int dims[2] = {0, 2};
    CHECK_OK(amp_backward(amp_sum_all(amp_sum(amp_add_scalar(y, INFINITY), 2, dims, true))));
    CHECK_OK(amp_profiler_stop());
    char dir[] = "/tmp/ampc_prof_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    CHECK_OK(amp_profiler_write_trace(path));
    size_t len;
    char *text = trace_read(path, &len);
    trace_report rep;
    CHECK_MSG(text && trace_check(text, len, false, &rep), "trace: %s", text ? rep.error : "not read");
    const json_value *root;
    char err[128];
    json_doc *doc = text ? json_parse(text, len, &root, err, sizeof err) : NULL;
    const json_value *evs = doc ? json_get(root, "traceEvents") : NULL;
    int conv = 0, pool = 0, sum = 0, scalar = 0;
    for (int i = 0; evs && i < evs->n; i++) {
        const json_value *e = &evs->items[i], *args = json_get(e, "args");
        const char *name = tc_str(json_get(e, "name"));
        const json_value *p = args ? json_get(args, "params") : NULL;
        if (!name || !p)
            continue;
        if (!strcmp(name, "conv2d")) {
            const json_value *st = json_get(p, "stride"), *act = json_get(p, "act"), *hb = json_get(p, "has_bias");
            conv += st && st->type == JSON_NUMBER && !strcmp(st->str, "2") && act && !strcmp(tc_str(act), "none") &&
                    hb && hb->type == JSON_FALSE;
        } else if (!strcmp(name, "max_pool2d")) {
            const json_value *k = json_get(p, "kernel"), *st = json_get(p, "stride");
            pool += k && !strcmp(k->str, "2") && st && !strcmp(st->str, "2");
        } else if (!strcmp(name, "sum")) {
            const json_value *d = json_get(p, "dims"), *kd = json_get(p, "keepdim");
            sum += d && d->type == JSON_ARRAY && d->n == 2 && !strcmp(d->items[1].str, "2") && kd &&
                   kd->type == JSON_TRUE;
        } else if (!strcmp(name, "add_scalar")) {
            const json_value *v = json_get(p, "scalar");
            scalar += v && v->type == JSON_STRING && !strcmp(v->str, "inf");
        }
    }
    CHECK_EQ_INT(conv, 2); /* forward and backward */
    CHECK_EQ_INT(pool, 2);
    CHECK_EQ_INT(sum, 2);
    CHECK_EQ_INT(scalar, 2);
    json_free(doc);
    free(text);
    remove(path);
    rmdir(dir);
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
}

/* A checkpointed block's recompute runs its ops again with the same
 * params (the function calls the ops again, as it did the first time). */
static amp_tensor *strided_conv(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    return amp_relu(amp_conv2d(in[0], (amp_tensor *)ctx, NULL, 2, 1));
}

static void test_checkpoint_recompute_keeps_params(void)
{
    amp_tensor *x = param(AMP_SHAPE(1, 2, 6, 6), 26), *w = param(AMP_SHAPE(3, 2, 3, 3), 27);
    start();
    amp_tensor *y = amp_checkpoint(strided_conv, w, &x, 1);
    CHECK_OK(amp_backward(amp_sum_all(y)));
    CHECK_OK(amp_profiler_stop());
    CHECK_EQ_INT(count(PROF_OP_FWD, "conv2d"), 2); /* the forward, then the recompute */
    for (int k = 0; k < 2; k++) {
        const prof_event *e = find(PROF_OP_FWD, "conv2d", k);
        CHECK(int_param(e, "stride", 2) && int_param(e, "padding", 1) && bool_param(e, "has_bias", false));
    }
    const prof_event *b = find(PROF_OP_BWD, "conv2d", 0);
    CHECK(int_param(b, "stride", 2) && int_param(b, "padding", 1));
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
}

int main(void)
{
    RUN(test_flops_matmul);
    RUN(test_flops_linear_conv);
    RUN(test_flops_attention);
    RUN(test_flops_pointwise_norm_loss);
    RUN(test_op_events_carry_params);
    RUN(test_trace_writes_params);
    RUN(test_checkpoint_recompute_keeps_params);
    RUN(test_casts_and_cache_hits);
    RUN(test_phases_and_nesting);
    RUN(test_phases_closed_on_errors);
    RUN(test_model_forward_backward);
    RUN(test_off_records_and_allocates_nothing);
    RUN(test_cuda_steps);
    return harness_done();
}
