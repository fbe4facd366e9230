/*
 * test_ddp.c (2 ranks, mpirun) - DistributedDataParallel (src/dist/ddp.c),
 * the autograd layer's grad-ready hook under it, and the grad scaler
 * across ranks:
 *   - the hook: once per leaf, after its last contribution, never for an
 *     unreached leaf, the checkpoint's parameters after its recompute,
 *     backward's gradients bitwise the same with a hook set;
 *   - 2 ranks x batch B against one process on the 2B batch (an MLP, 50
 *     SGD steps): losses within 1e-6 relative, parameters bitwise equal on
 *     the two ranks after every step, buckets started during backward;
 *     the same for a tiny gpt with activation checkpointing (20 steps);
 *   - a finish's gradients bitwise (g0 + g1) / 2 (a tiny gpt with
 *     activation checkpointing), parameters with a gradient on one rank
 *     only or on none, 16-bit parameters;
 *   - 16-bit compression: bitwise (round16(g0) + round16(g1)) / 2 and
 *     within its stated bound of the uncompressed average;
 *   - inf on rank 1 only: both ranks skip and back off, parameters and
 *     Adam's state unchanged (bitwise);
 *   - fp16 autocast + scaler + accumulation under no_sync + clipping
 *     against the one-process run;
 *   - bad arguments and ranks that disagree: clear errors on every rank.
 * Each rank computes the one-process reference itself, on its own copy of
 * the model, from the same data.
 */
#include "autograd/graph.h"
#include "comm/comm.h"
#include "ddp_mlp.h"
#include "dist_main.h"
#include "harness.h"
#include "snapshot.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool poison_rank1; /* batch() puts an inf into rank 1's rows */

enum { MAXP = 64 };

/* Rows [lo, hi) of batch `step` on the CPU (an inf in rank 1's when
 * poison_rank1). */
static void batch(int step, int lo, int hi, amp_tensor **x, amp_tensor **y)
{
    batch_rows(step, lo, hi, AMP_CPU, poison_rank1 && rank == 1, x, y);
}

static amp_tensor *mlp_loss(amp_module *m, int step, int lo, int hi)
{
    amp_tensor *x, *y;
    batch(step, lo, hi, &x, &y);
    return amp_cross_entropy(amp_module_forward(m, x), y);
}

/* Whether t's bytes are the same on every rank (all-gathered, compared). */
static bool same_on_all_ranks(const amp_tensor *t)
{
    const size_t bytes = (size_t)t->numel * amp_dtype_size(t->dtype);
    char *all = malloc(bytes * (size_t)world);
    bool same = all && comm_allgather(tensor_ptr(t), all, t->numel, t->dtype, AMP_CPU, NULL) == AMP_OK;
    for (int r = 1; same && r < world; r++)
        same = memcmp(all, all + (size_t)r * bytes, bytes) == 0;
    free(all);
    return same;
}

/* ------------------------------------------------------------- the hook */

typedef struct {
    amp_tensor *seen[16];
    int n, begins, nodes;
} hook_log;

static hook_log hlog;

static void record_hook(void *ctx, autograd_event ev, amp_tensor *leaf)
{
    (void)ctx;
    if (ev == AUTOGRAD_NODE_DONE) {
        hlog.nodes++;
        return;
    }
    if (ev == AUTOGRAD_BACKWARD_BEGIN) {
        hlog.begins++;
        return;
    }
    if (hlog.n < 16)
        hlog.seen[hlog.n++] = leaf;
}

static int times_seen(const amp_tensor *t)
{
    int c = 0;
    for (int i = 0; i < hlog.n; i++)
        c += hlog.seen[i] == t;
    return c;
}

static amp_tensor *ck_block(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    amp_tensor *w = ctx;
    return amp_relu(amp_linear(in[0], w, NULL));
}

static amp_tensor *param_like(amp_shape s, uint64_t seed)
{
    amp_tensor *t = test_uniform(s, AMP_F32, -1, 1, seed);
    amp_tensor_set_requires_grad(t, true);
    tensor_set_category(t, AMP_MEM_PARAMETERS);
    return t;
}

/* w shared by two linears (two contributions), u unreached, v inside a
 * checkpoint (reported after its recompute), and gradients bitwise equal
 * to a backward without the hook. */
static void test_grad_ready_hook(void)
{
    amp_tensor *w = param_like(AMP_SHAPE(8, 8), 1), *u = param_like(AMP_SHAPE(8), 2), *v = param_like(AMP_SHAPE(8, 8), 3);
    amp_tensor *x = test_uniform(AMP_SHAPE(4, 8), AMP_F32, -1, 1, 4);
    float *ref[2] = {NULL, NULL};
    for (int pass = 0; pass < 2; pass++) {
        memset(&hlog, 0, sizeof hlog);
        autograd_set_grad_ready_hook(pass ? record_hook : NULL, NULL);
        amp_tensor *h = amp_linear(amp_relu(amp_linear(x, w, NULL)), w, NULL);
        amp_tensor *in[1] = {h};
        amp_tensor *y = amp_checkpoint(ck_block, v, in, 1);
        amp_tensor *unused = amp_mul(u, u); /* recorded, but not on the loss's path */
        (void)unused;
        CHECK_OK(amp_backward(amp_sum_all(y)));
        if (pass == 0) {
            ref[0] = copy_f32(w->grad), ref[1] = copy_f32(v->grad);
        } else {
            CHECK_EQ_INT(hlog.begins, 1);
            CHECK_EQ_INT(times_seen(w), 1);
            CHECK_EQ_INT(times_seen(v), 1);
            CHECK_EQ_INT(times_seen(u), 0);
            float *g0 = copy_f32(w->grad), *g1 = copy_f32(v->grad);
            CHECK(g0 && g1 && memcmp(g0, ref[0], 64 * 4) == 0 && memcmp(g1, ref[1], 64 * 4) == 0);
            free(g0), free(g1);
        }
        amp_tensor_clear_grad(w), amp_tensor_clear_grad(v);
        amp_temps_free();
    }
    /* a second backward reports again (accumulation) */
    memset(&hlog, 0, sizeof hlog);
    autograd_set_grad_ready_hook(record_hook, NULL);
    for (int k = 0; k < 2; k++)
        CHECK_OK(amp_backward(amp_sum_all(amp_linear(x, w, NULL))));
    CHECK_EQ_INT(hlog.begins, 2);
    CHECK_EQ_INT(times_seen(w), 2);
    CHECK_EQ_INT(hlog.nodes, 4); /* linear and sum_all, twice */
    autograd_set_grad_ready_hook(NULL, NULL);
    free(ref[0]), free(ref[1]);
    amp_tensor_free(w), amp_tensor_free(u), amp_tensor_free(v), amp_tensor_free(x);
    amp_temps_free();
}

/* ----------------------------------------- 2 x B against 1 x 2B, f32 */

static void test_matches_one_process(void)
{
    amp_module *m = make_mlp(AMP_CPU), *ref = make_mlp(AMP_CPU);
    amp_tensor *p[MAXP], *q[MAXP];
    const int n = amp_module_params(m, p, MAXP);
    CHECK_EQ_INT(amp_module_params(ref, q, MAXP), n);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05, so.momentum = 0.9;
    amp_optim *o = amp_optim_sgd(p, n, so), *oref = amp_optim_sgd(q, n, so);
    amp_ddp_opts dop = amp_ddp_defaults();
    dop.bucket_mb = 1100.0 * 4 / 1048576; /* 1100 floats: two buckets (fc2 + fc1, then fc0) */
    amp_ddp *d = amp_ddp_new(p, n, dop);
    CHECK(d);
    if (!d)
        return;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += p[i]->numel;
    double worst = 0;
    enum { STEPS = 50 };
    for (int step = 0; step < STEPS; step++) {
        amp_tensor *l = mlp_loss(m, step, rank * B, rank * B + B);
        float mine = (float)amp_item(l);
        CHECK_OK(amp_backward(l));
        CHECK_OK(amp_ddp_finish(d));
        CHECK_OK(amp_optim_step(o));
        amp_optim_zero_grad(o);

        amp_tensor *lr = mlp_loss(ref, step, 0, 2 * B);
        const double want = amp_item(lr);
        CHECK_OK(amp_backward(lr));
        CHECK_OK(amp_optim_step(oref));
        amp_optim_zero_grad(oref);

        CHECK_OK(comm_allreduce(&mine, 1, AMP_F32, AMP_REDUCE_AVG, AMP_CPU, NULL));
        const double rel = fabs(mine - want) / fabs(want);
        worst = rel > worst ? rel : worst;
        CHECK_MSG(rel <= 1e-6, "step %d: 2 ranks' loss %.9g, one process's %.9g (relative %.3g)", step, mine, want,
                  rel);
        for (int i = 0; i < n; i++)
            CHECK_MSG(same_on_all_ranks(p[i]), "step %d: parameter %d differs between the ranks", step, i);
        amp_temps_free();
    }
    amp_ddp_stats s = amp_ddp_get_stats(d);
    CHECK_EQ_INT(s.buckets, 2);
    CHECK_EQ_INT(s.syncs, STEPS);
    CHECK_EQ_INT(s.bytes_sent, (int64_t)STEPS * (total + n) * 4); /* the gradients and one flag each */
    CHECK_EQ_INT(s.early_buckets, 2 * STEPS);                     /* all started during backward */
    CHECK(s.wait_s >= 0 && s.last_wait_s >= 0 && s.last_wait_s <= s.wait_s);
    if (rank == 0)
        printf("  50 steps: worst loss difference %.3g relative; finish waited %.3g ms in all\n", worst,
               1e3 * s.wait_s);
    amp_ddp_free(d);
    amp_optim_free(o), amp_optim_free(oref);
    amp_module_free(m), amp_module_free(ref);
}

/* ----------------------------------- a finish's gradients, exactly */

/* Copies of every parameter's gradient on every rank: [rank][param]. */
static float **gather_grads(amp_tensor *const *p, int n)
{
    float **g = calloc((size_t)n, sizeof *g);
    for (int i = 0; g && i < n; i++) {
        g[i] = calloc((size_t)(p[i]->numel * world), sizeof **g);
        float *mine = calloc((size_t)p[i]->numel, sizeof *mine);
        if (p[i]->grad)
            amp_tensor_copy_out(p[i]->grad, mine, AMP_F32);
        comm_allgather(mine, g[i], p[i]->numel, AMP_F32, AMP_CPU, NULL);
        free(mine);
    }
    return g;
}

static void free_grads(float **g, int n)
{
    for (int i = 0; g && i < n; i++)
        free(g[i]);
    free(g);
}

/* A tiny gpt with activation checkpointing: its parameters are reported
 * after the last block's recompute; the result is (g0 + g1) / 2 bitwise. */
static void test_gpt_checkpointed_average_is_exact(void)
{
    enum { V = 11, T = 6, BB = 2 };
    amp_manual_seed(5);
    amp_gpt_config c = {.vocab = V, .context = T, .width = 16, .layers = 2, .heads = 2, .mlp = 32,
                        .checkpoint_activations = true};
    amp_module *m = amp_model_gpt(c);
    CHECK(m);
    if (!m)
        return;
    amp_tensor *p[MAXP];
    const int n = amp_module_params(m, p, MAXP);
    amp_ddp_opts dop = amp_ddp_defaults();
    dop.bucket_mb = 2048.0 * 4 / 1048576;
    amp_ddp *d = amp_ddp_new(p, n, dop);
    CHECK(d);
    int64_t idx[BB * T], tgt[BB * T];
    for (int i = 0; i < BB * T; i++)
        idx[i] = (int64_t)(mix((uint64_t)(rank * 1000 + i)) % V), tgt[i] = (int64_t)(mix((uint64_t)(rank * 999 + i)) % V);
    amp_tensor *x = pool_add(amp_from_data(AMP_SHAPE(BB, T), AMP_I64, idx));
    amp_tensor *y = pool_add(amp_from_data(AMP_SHAPE(BB * T), AMP_I64, tgt));
    amp_tensor *logits = amp_module_forward(m, x);
    CHECK_OK(amp_backward(amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(BB * T, V)), y)));
    float **local = gather_grads(p, n);
    CHECK_OK(amp_ddp_finish(d));
    for (int i = 0; local && i < n; i++) {
        CHECK(p[i]->grad);
        if (!p[i]->grad)
            continue;
        const float *g = tensor_f32(p[i]->grad);
        int bad = 0;
        for (int64_t e = 0; e < p[i]->numel; e++)
            bad += g[e] != (local[i][e] + local[i][p[i]->numel + e]) / 2;
        CHECK_MSG(bad == 0, "parameter %d: %d elements are not (g0 + g1) / 2", i, bad);
    }
    amp_ddp_stats s = amp_ddp_get_stats(d);
    CHECK(s.buckets >= 2);
    CHECK_EQ_INT(s.early_buckets, s.buckets); /* after the last recompute, still inside backward */
    free_grads(local, n);
    amp_ddp_free(d);
    amp_module_free(m);
    amp_temps_free();
}

/* A tiny gpt (activation checkpointing on: its parameters are reported
 * after the recompute) trained 20 steps: 2 ranks x 2 sequences against one
 * process on the 4, losses within 1e-6 relative, parameters bitwise equal
 * across the ranks. */
static void test_gpt_matches_one_process(void)
{
    enum { V = 13, T = 8, BB = 2, STEPS = 20 };
    amp_gpt_config c = {.vocab = V, .context = T, .width = 16, .layers = 2, .heads = 2, .mlp = 32,
                        .checkpoint_activations = true};
    amp_manual_seed(9);
    amp_module *m = amp_model_gpt(c);
    amp_manual_seed(9);
    amp_module *ref = amp_model_gpt(c);
    CHECK(m && ref);
    if (!m || !ref)
        return;
    amp_tensor *p[MAXP], *q[MAXP];
    const int n = amp_module_params(m, p, MAXP);
    CHECK_EQ_INT(amp_module_params(ref, q, MAXP), n);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.1, so.momentum = 0.9;
    amp_optim *o = amp_optim_sgd(p, n, so), *oref = amp_optim_sgd(q, n, so);
    amp_ddp_opts dop = amp_ddp_defaults();
    dop.bucket_mb = 1024.0 * 4 / 1048576;
    amp_ddp *d = amp_ddp_new(p, n, dop);
    CHECK(d);
    if (!d)
        return;
    double worst = 0;
    for (int step = 0; step < STEPS; step++) {
        int64_t idx[2 * BB * T], tgt[2 * BB * T];
        for (int i = 0; i < 2 * BB * T; i++) {
            idx[i] = (int64_t)(mix((uint64_t)(step * 4099 + i)) % V);
            tgt[i] = (int64_t)((idx[i] * 5 + 3) % V); /* learnable: a fixed map of the token */
        }
        float mine = 0;
        double want = 0;
        for (int side = 0; side < 2; side++) {
            const int rows = side ? 2 * BB : BB, first = side ? 0 : rank * BB;
            amp_tensor *x = pool_add(amp_from_data(AMP_SHAPE(rows, T), AMP_I64, idx + first * T));
            amp_tensor *y = pool_add(amp_from_data(AMP_SHAPE(rows * T), AMP_I64, tgt + first * T));
            amp_module *mm = side ? ref : m;
            amp_tensor *l = amp_cross_entropy(amp_reshape(amp_module_forward(mm, x), AMP_SHAPE(rows * T, V)), y);
            if (side)
                want = amp_item(l);
            else
                mine = (float)amp_item(l);
            CHECK_OK(amp_backward(l));
            if (!side)
                CHECK_OK(amp_ddp_finish(d));
            CHECK_OK(amp_optim_step(side ? oref : o));
            amp_optim_zero_grad(side ? oref : o);
            amp_temps_free();
        }
        CHECK_OK(comm_allreduce(&mine, 1, AMP_F32, AMP_REDUCE_AVG, AMP_CPU, NULL));
        const double rel = fabs(mine - want) / fabs(want);
        worst = fmax(worst, rel);
        CHECK_MSG(rel <= 1e-6, "gpt step %d: 2 ranks' loss %.9g, one process's %.9g (relative %.3g)", step, mine,
                  want, rel);
        for (int i = 0; i < n; i++)
            CHECK_MSG(same_on_all_ranks(p[i]), "gpt step %d: parameter %d differs between the ranks", step, i);
    }
    CHECK(amp_ddp_get_stats(d).early_buckets == amp_ddp_get_stats(d).buckets * STEPS);
    if (rank == 0)
        printf("  gpt, 20 steps: worst loss difference %.3g relative\n", worst);
    amp_ddp_free(d);
    amp_optim_free(o), amp_optim_free(oref);
    amp_module_free(m), amp_module_free(ref);
}

/* a: a gradient on every rank; b: on rank 0 only (rank 1 contributes
 * zeros and gets the average too); c: on none (keeps none); h: a bf16
 * parameter (widened, averaged, rounded back). */
static void test_missing_gradients_and_16_bit_parameters(void)
{
    amp_tensor *a = param_like(AMP_SHAPE(5), 11), *b = param_like(AMP_SHAPE(3), 12), *c = param_like(AMP_SHAPE(2), 13);
    amp_tensor *h = test_uniform(AMP_SHAPE(4), AMP_BF16, -1, 1, 14);
    amp_tensor_set_requires_grad(h, true);
    amp_tensor *ps[4] = {a, b, c, h};
    amp_ddp_opts dop = amp_ddp_defaults();
    dop.bucket_mb = 4.0 * 4 / 1048576; /* one parameter a bucket, nearly */
    amp_ddp *d = amp_ddp_new(ps, 4, dop);
    CHECK(d);
    if (!d)
        return;
    const float k = (float)(rank + 1);
    amp_tensor *loss = amp_mul_scalar(amp_sum_all(amp_mul(a, a)), k);
    if (rank == 0)
        loss = amp_add(loss, amp_sum_all(b));
    loss = amp_add(loss, amp_sum_all(amp_mul_scalar(h, k)));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_ddp_finish(d));
    const float *av = tensor_f32(a), *ag = a->grad ? tensor_f32(a->grad) : NULL;
    CHECK(ag);
    for (int i = 0; ag && i < 5; i++)
        CHECK(ag[i] == (2 * av[i] + 4 * av[i]) / 2); /* 2a * 1 and 2a * 2 */
    CHECK(b->grad);
    for (int i = 0; b->grad && i < 3; i++)
        CHECK(tensor_f32(b->grad)[i] == 0.5f);
    CHECK(c->grad == NULL);
    CHECK(h->grad && h->grad->dtype == AMP_BF16);
    for (int i = 0; h->grad && i < 4; i++)
        CHECK(amp_tensor_get(h->grad, i) == 1.5); /* (1 + 2) / 2 */
    CHECK(amp_ddp_get_stats(d).buckets >= 3);
    /* rank 1 alone holds a gradient that cannot be packed (wrong size):
     * every rank gets an error (rank 1 its own), none hangs, and no rank's
     * .grad is written (a keeps its local 2a * k: the ranks' differ) */
    amp_tensor_clear_grad(a), amp_tensor_clear_grad(b), amp_tensor_clear_grad(h);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(a, a))));
    if (rank == 1)
        c->grad = tensor_zeros(AMP_SHAPE(5), AMP_F32);
    const uint64_t av0 = a->grad ? a->grad->storage->version : 0;
    amp_status st = amp_ddp_finish(d);
    if (rank == 1) {
        CHECK(st == AMP_ERR_SHAPE);
        CHECK_ERROR(AMP_ERR_SHAPE, "parameter 2 has 2 elements but its gradient 5");
    } else {
        CHECK(st == AMP_ERR_STATE);
        CHECK_ERROR(AMP_ERR_STATE, "another rank failed");
        CHECK(c->grad == NULL);
    }
    CHECK(a->grad && a->grad->storage->version == av0);
    for (int i = 0; a->grad && i < 5; i++)
        CHECK(tensor_f32(a->grad)[i] == 2 * av[i]); /* untouched: this rank's own gradient */
    CHECK(b->grad == NULL);
    CHECK_OK(amp_ddp_finish(d)); /* done: nothing left */
    amp_ddp_free(d);
    amp_tensor_free(a), amp_tensor_free(b), amp_tensor_free(c), amp_tensor_free(h);
    amp_temps_free();
}

/* ----------------------------------------------------- compression */

static float round16(float v, amp_dtype dt)
{
    uint16_t h;
    float r;
    amp_convert(&v, AMP_F32, &h, dt, 1);
    amp_convert(&h, dt, &r, AMP_F32, 1);
    return r;
}

/* The same backward averaged by an uncompressed ddp and a bf16 / f16 one:
 * the compressed result is bitwise (round16(g0) + round16(g1)) / 2 (f32
 * sum in rank order) and within u * (|g0| + |g1|) / 2 of the f32 average
 * (plus the two f32 sums' roundings, 2^-24 of each result), u the 16-bit
 * format's unit roundoff (2^-8 bf16, 2^-11 f16; f16 values below 2^-14
 * lose more: an absolute 2^-25 each). Relative to the average itself the
 * error is unbounded where g0 and g1 nearly cancel. */
static void test_compression(void)
{
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int t = 0; t < 2; t++) {
        amp_module *m0 = make_mlp(AMP_CPU), *m1 = make_mlp(AMP_CPU);
        amp_tensor *p0[MAXP], *p1[MAXP];
        const int n = amp_module_params(m0, p0, MAXP);
        amp_module_params(m1, p1, MAXP);
        amp_ddp_opts plain = amp_ddp_defaults(), comp = plain;
        comp.compress = dts[t];
        amp_ddp *d0 = amp_ddp_new(p0, n, plain), *d1 = amp_ddp_new(p1, n, comp);
        CHECK(d0 && d1);
        if (!d0 || !d1)
            return;
        CHECK_OK(amp_backward(mlp_loss(m0, 3, rank * B, rank * B + B)));
        CHECK_OK(amp_backward(mlp_loss(m1, 3, rank * B, rank * B + B)));
        float **local = gather_grads(p1, n);
        CHECK_OK(amp_ddp_finish(d0));
        CHECK_OK(amp_ddp_finish(d1));
        const double u = dts[t] == AMP_BF16 ? 0x1p-8 : 0x1p-11;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const float *g = tensor_f32(p1[i]->grad), *exact = tensor_f32(p0[i]->grad);
            const float *l0 = local[i], *l1 = local[i] + p1[i]->numel;
            int bad = 0, far = 0;
            for (int64_t e = 0; e < p1[i]->numel; e++) {
                bad += g[e] != (round16(l0[e], dts[t]) + round16(l1[e], dts[t])) / 2;
                double bound = u * (fabs(l0[e]) + fabs(l1[e])) / 2 + 0x1p-24 * (fabs(exact[e]) + fabs(g[e])) +
                               (dts[t] == AMP_F16 ? 0x1p-25 : 0);
                double err = fabs((double)g[e] - exact[e]);
                far += err > bound;
                if (exact[e] != 0 && err / fabs(exact[e]) > worst)
                    worst = err / fabs(exact[e]);
            }
            CHECK_MSG(bad == 0, "%s: parameter %d: %d elements are not the f32 sum of the 16-bit ones / 2",
                      amp_dtype_name(dts[t]), i, bad);
            CHECK_MSG(far == 0, "%s: parameter %d: %d elements past the bound", amp_dtype_name(dts[t]), i, far);
            CHECK(same_on_all_ranks(p1[i]->grad));
        }
        CHECK_EQ_INT(amp_ddp_get_stats(d1).bytes_sent * 2, amp_ddp_get_stats(d0).bytes_sent);
        if (rank == 0)
            printf("  %s compression: worst relative error %.3g against the f32 average\n", amp_dtype_name(dts[t]),
                   worst);
        free_grads(local, n);
        amp_ddp_free(d0), amp_ddp_free(d1);
        amp_module_free(m0), amp_module_free(m1);
        amp_temps_free();
    }
}

/* ----------------------------------------------- the scaler across ranks */

/* Inf in rank 1's gradient only (after the average: only its unscale sees
 * it; then from an inf in its input: the average carries it): both ranks
 * skip, back off, and keep their parameters and Adam's state bit for bit. */
static void test_inf_on_one_rank(void)
{
    ddp_rig r;
    if (!ddp_rig_make(&r, AMP_CPU, true))
        return;
    for (int step = 0; step < 3; step++) {
        snapshot before;
        if (step > 0)
            snap(&before, r.p, r.n, r.o);
        poison_rank1 = step == 2; /* an inf input: inf / NaN gradients before the average */
        CHECK_OK(amp_backward(amp_scaler_scale(r.s, mlp_loss(r.m, step, rank * B, rank * B + B))));
        poison_rank1 = false;
        CHECK_OK(amp_ddp_finish(r.d));
        if (step == 1 && rank == 1)
            tensor_f32(r.p[2]->grad)[3] = INFINITY; /* after it: this rank's alone */
        bool skipped = true;
        CHECK_OK(amp_scaler_step(r.s, r.o, &skipped));
        CHECK_OK(amp_scaler_update(r.s));
        CHECK_EQ_INT(skipped, step > 0);
        CHECK(amp_scaler_get_scale(r.s) == (step == 0 ? 65536.0 : step == 1 ? 32768.0 : 16384.0));
        if (step > 0)
            CHECK_MSG(snap_unchanged(&before, r.p, r.n, r.o),
                      "step %d: a skipped step changed a parameter or Adam's state", step);
        for (int i = 0; i < r.n; i++)
            CHECK(same_on_all_ranks(r.p[i]));
        amp_optim_zero_grad(r.o);
        amp_temps_free();
    }
    CHECK_EQ_INT(amp_scaler_get_counts(r.s).skipped, 2);
    ddp_rig_free(&r);
}

/* A failure of rank 1's own before the found_inf all-reduce (an f16
 * gradient without master weights) is every rank's error, naming rank 1
 * and why, with nothing divided on any rank; the step then goes on. */
static void test_unscale_failing_on_one_rank_fails_on_every_rank(void)
{
    ddp_rig r;
    if (!ddp_rig_make(&r, AMP_CPU, false))
        return;
    CHECK(r.n >= 2);
    if (r.n < 2) {
        ddp_rig_free(&r);
        return;
    }
    CHECK_OK(amp_backward(amp_scaler_scale(r.s, mlp_loss(r.m, 0, rank * B, rank * B + B))));
    CHECK_OK(amp_ddp_finish(r.d));
    amp_tensor *kept = r.p[0]->grad;
    if (rank == 1)
        r.p[0]->grad = tensor_convert(kept, AMP_F16);
    float *g1 = copy_f32(r.p[1]->grad);
    CHECK(amp_scaler_unscale(r.s, r.o) == AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "scaler_unscale: rank 1 failed: Attempting to unscale FP16 gradients");
    CHECK(g1 && memcmp(g1, tensor_f32(r.p[1]->grad), (size_t)r.p[1]->numel * 4) == 0); /* not divided */
    free(g1);
    if (rank == 1) {
        amp_tensor_free(r.p[0]->grad);
        r.p[0]->grad = kept;
    }
    CHECK_OK(amp_scaler_unscale(r.s, r.o));
    CHECK_OK(amp_scaler_step(r.s, r.o, NULL));
    CHECK_OK(amp_scaler_update(r.s));
    for (int i = 0; i < r.n; i++)
        CHECK(same_on_all_ranks(r.p[i]));
    amp_temps_free();
    ddp_rig_free(&r);
}

/* fp16 autocast, the scaler, 2 micro-batches accumulated with no_sync on
 * the first, and clipping, against one process doing the same on the 2B
 * micro-batches. */
static void test_fp16_accumulation_no_sync_clipping(void)
{
    enum { STEPS = 10, K = 2 };
    amp_module *m = make_mlp(AMP_CPU), *ref = make_mlp(AMP_CPU);
    amp_tensor *p[MAXP], *q[MAXP];
    const int n = amp_module_params(m, p, MAXP);
    amp_module_params(ref, q, MAXP);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05, so.momentum = 0.9;
    amp_optim *o = amp_optim_sgd(p, n, so), *oref = amp_optim_sgd(q, n, so);
    amp_scaler_opts sco = amp_scaler_defaults();
    sco.init_scale = 1024, sco.growth_interval = 4;
    amp_scaler *s = amp_scaler_new(sco), *sref = amp_scaler_new(sco);
    amp_ddp *d = amp_ddp_new(p, n, amp_ddp_defaults());
    CHECK(d);
    if (!d)
        return;
    const double max_norm = 0.25;
    int clipped = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int side = 0; side < 2; side++) {
            amp_module *mm = side ? ref : m;
            amp_scaler *ss = side ? sref : s;
            for (int mb = 0; mb < K; mb++) {
                if (!side)
                    amp_ddp_set_sync(d, mb == K - 1);
                amp_tensor *x, *y;
                batch(step * K + mb, side ? 0 : rank * B, side ? 2 * B : rank * B + B, &x, &y);
                CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_F16));
                amp_tensor *logits = amp_module_forward(mm, x);
                CHECK_OK(amp_autocast_end());
                amp_tensor *l = amp_div_scalar(amp_cross_entropy(logits, y), K);
                const amp_ddp_stats before = amp_ddp_get_stats(d);
                CHECK_OK(amp_backward(amp_scaler_scale(ss, l)));
                if (!side && mb < K - 1) { /* no_sync: nothing moved */
                    const amp_ddp_stats after = amp_ddp_get_stats(d);
                    CHECK_EQ_INT(after.bytes_sent, before.bytes_sent);
                    CHECK_EQ_INT(after.early_buckets, before.early_buckets);
                    CHECK_EQ_INT(after.syncs, step);
                }
            }
            if (!side)
                CHECK_OK(amp_ddp_finish(d));
            amp_optim *oo = side ? oref : o;
            CHECK_OK(amp_scaler_unscale(ss, oo));
            double norm = amp_clip_grad_norm(side ? q : p, n, max_norm);
            clipped += !side && norm > max_norm;
            CHECK_OK(amp_scaler_step(ss, oo, NULL));
            CHECK_OK(amp_scaler_update(ss));
            amp_optim_zero_grad(oo);
            amp_temps_free();
        }
        CHECK(amp_scaler_get_scale(s) == amp_scaler_get_scale(sref));
        for (int i = 0; i < n; i++)
            CHECK(same_on_all_ranks(p[i]));
    }
    CHECK(clipped > 0);
    CHECK_EQ_INT(amp_ddp_get_stats(d).syncs, STEPS);
    CHECK_EQ_INT(amp_scaler_get_counts(s).skipped, amp_scaler_get_counts(sref).skipped);
    /* Autocast rounds each linear's weight gradient to f16 before the
     * average (2 ranks) or once (one process): 2^-11 relative per gradient,
     * times 10 steps of lr 0.05 (momentum 0.9: up to 10x) on gradients
     * clipped to norm 0.25: at most ~10 * 0.05 * 10 * 0.25 * 2^-10 = 1.2e-3
     * apart; 2e-3 leaves room for the f32 differences they feed. */
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const float *a = tensor_f32(p[i]), *b = tensor_f32(q[i]);
        for (int64_t e = 0; e < p[i]->numel; e++)
            worst = fmax(worst, fabs((double)a[e] - b[e]));
    }
    CHECK_MSG(worst <= 2e-3, "fp16 + no_sync + clipping: parameters %.3g from the one-process run", worst);
    if (rank == 0)
        printf("  fp16 + scaler + no_sync + clipping: parameters within %.3g of one process (clipped %d of %d steps)\n",
               worst, clipped, STEPS);
    amp_ddp_free(d);
    amp_scaler_free(s), amp_scaler_free(sref);
    amp_optim_free(o), amp_optim_free(oref);
    amp_module_free(m), amp_module_free(ref);
}

/* ----------------------------------------------- broadcast_params */

/* Rank 1's parameters differ (another seed) and its optimizer already
 * holds f32 masters of them: amp_ddp_new gives every rank rank 0's bits,
 * bumps the version, and the optimizer re-seeds its masters from them (a
 * zero-gradient step leaves rank 0's values, not rank 1's old ones). */
static void test_broadcast_params(void)
{
    amp_tensor *p[2] = {test_uniform(AMP_SHAPE(7), AMP_BF16, -1, 1, 40 + (uint64_t)rank),
                        test_uniform(AMP_SHAPE(3, 2), AMP_BF16, -1, 1, 50 + (uint64_t)rank)};
    for (int i = 0; i < 2; i++)
        amp_tensor_set_requires_grad(p[i], true);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.1;
    amp_optim *o = amp_optim_sgd(p, 2, so);
    CHECK_OK(amp_optim_set_master_weights(o, true));
    CHECK(!same_on_all_ranks(p[0]) && !same_on_all_ranks(p[1]));
    const uint64_t v0 = p[0]->storage->version;
    amp_ddp *d = amp_ddp_new(p, 2, amp_ddp_defaults());
    CHECK(d);
    for (int i = 0; i < 2; i++)
        CHECK(same_on_all_ranks(p[i]));
    CHECK(p[0]->storage->version > v0);
    float *want = copy_f32(p[0]);
    for (int i = 0; i < 2; i++)
        p[i]->grad = tensor_zeros(p[i]->shape, AMP_BF16);
    CHECK_OK(amp_optim_step(o));
    for (int i = 0; i < 2; i++)
        CHECK(same_on_all_ranks(p[i]));
    float *got = copy_f32(p[0]);
    CHECK(want && got && memcmp(want, got, 7 * sizeof *got) == 0);
    free(want), free(got);
    amp_ddp_free(d);
    amp_optim_free(o);
    amp_tensor_free(p[0]), amp_tensor_free(p[1]);
    amp_temps_free();
}

/* -------------------------------------------------------- bad input */

static void test_bad_input(void)
{
    amp_module *m = make_mlp(AMP_CPU);
    amp_tensor *p[MAXP];
    const int n = amp_module_params(m, p, MAXP);
    amp_ddp_opts o = amp_ddp_defaults();
    CHECK(!amp_ddp_new(p, 0, o));
    CHECK_ERROR(AMP_ERR_ARG, "no parameters");
    CHECK(!amp_ddp_new(NULL, n, o));
    CHECK_ERROR(AMP_ERR_ARG, "NULL parameter array");
    o.bucket_mb = 0;
    CHECK(!amp_ddp_new(p, n, o));
    CHECK_ERROR(AMP_ERR_ARG, "bucket_mb");
    o.bucket_mb = -1;
    CHECK(!amp_ddp_new(p, n, o));
    CHECK_ERROR(AMP_ERR_ARG, "bucket_mb");
    o = amp_ddp_defaults();
    o.compress = AMP_I64;
    CHECK(!amp_ddp_new(p, n, o));
    CHECK_ERROR(AMP_ERR_DTYPE, "compress i64");
    o = amp_ddp_defaults();
    amp_tensor *dup[2] = {p[0], p[0]};
    CHECK(!amp_ddp_new(dup, 2, o));
    CHECK_ERROR(AMP_ERR_ARG, "parameter 1 is parameter 0 again");
    /* one rank alone refuses: every rank gets its error, naming it; none hangs */
    amp_tensor *one[2] = {p[0], rank == 1 ? NULL : p[1]};
    CHECK(!amp_ddp_new(one, 2, o));
    CHECK_ERROR(AMP_ERR_ARG, "ddp_new: rank 1 failed: ddp: parameter 1 is NULL");
    /* the ranks disagree: on the count, then on a size */
    CHECK(!amp_ddp_new(p, rank == 1 ? n - 1 : n, o));
    CHECK_ERROR(AMP_ERR_ARG, "the ranks disagree");
    amp_tensor *sz[1] = {p[rank == 1 ? 1 : 0]};
    CHECK(!amp_ddp_new(sz, 1, o));
    CHECK_ERROR(AMP_ERR_SHAPE, "the ranks disagree: parameter 0 has");
    amp_ddp_opts o2 = amp_ddp_defaults();
    o2.bucket_mb = rank ? 1 : 2;
    CHECK(!amp_ddp_new(p, n, o2));
    CHECK_ERROR(AMP_ERR_ARG, "bucket_mb or compress differ");
    CHECK(amp_ddp_finish(NULL) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    /* a second synchronised backward before finish */
    amp_ddp *d = amp_ddp_new(p, n, amp_ddp_defaults());
    CHECK(d);
    CHECK_OK(amp_ddp_finish(d)); /* nothing to do yet */
    CHECK_EQ_INT(amp_ddp_get_stats(d).syncs, 0);
    CHECK_OK(amp_backward(mlp_loss(m, 0, rank * B, rank * B + B)));
    CHECK_OK(amp_backward(mlp_loss(m, 1, rank * B, rank * B + B)));
    CHECK(amp_ddp_finish(d) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "second synchronised backward");
    /* ... on rank 1 only: an error on every rank, no .grad written */
    for (int i = 0; i < n; i++)
        amp_tensor_clear_grad(p[i]);
    CHECK_OK(amp_backward(mlp_loss(m, 0, rank * B, rank * B + B)));
    if (rank == 1)
        CHECK_OK(amp_backward(mlp_loss(m, 1, rank * B, rank * B + B)));
    float *g0 = copy_f32(p[0]->grad);
    CHECK(amp_ddp_finish(d) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, rank == 1 ? "second synchronised backward" : "another rank failed");
    CHECK(g0 && memcmp(g0, tensor_f32(p[0]->grad), (size_t)p[0]->numel * 4) == 0);
    free(g0);
    /* freed in the middle of a synchronised backward: it finishes the
     * collectives (rank 0 calls finish, rank 1 frees), neither hangs */
    CHECK_OK(amp_backward(mlp_loss(m, 2, rank * B, rank * B + B)));
    if (rank == 0)
        CHECK_OK(amp_ddp_finish(d));
    amp_ddp_free(d);
    amp_temps_free();
    amp_module_free(m);
}

int main(int argc, char **argv)
{
    dist_start(&argc, &argv);
    RUN(test_grad_ready_hook);
    RUN(test_matches_one_process);
    RUN(test_gpt_checkpointed_average_is_exact);
    RUN(test_gpt_matches_one_process);
    RUN(test_missing_gradients_and_16_bit_parameters);
    RUN(test_compression);
    RUN(test_inf_on_one_rank);
    RUN(test_unscale_failing_on_one_rank_fails_on_every_rank);
    RUN(test_fp16_accumulation_no_sync_clipping);
    RUN(test_broadcast_params);
    RUN(test_bad_input);
    return dist_finish();
}
