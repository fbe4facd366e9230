/*
 * test_nccl_cuda.c (2 ranks, mpirun; labels dist and cuda) - the NCCL path
 * (src/comm/comm_nccl.c) over two ranks, with CUDA tensors: on cudaemu
 * (an -DAMPC_CUDA=EMU build, where tests/cuda_emu/nccl.cc spans the MPI
 * processes) or on a machine with two GPUs and NCCL.
 *   - the collectives: f32 sum / avg / max, i32 / i64 sum / max, each
 *     result bit for bit what NCCL defines (sum: a + b in f32; avg:
 *     a / 2 + b / 2; max: fmax) and bit for bit what MPI gives for the
 *     same host buffers; bf16 all-gathers in place and not, an f32
 *     reduce-scatter (against MPI's too), a broadcast from rank 1; no host
 *     synchronisation added; operations counted;
 *   - DDP on cuda tensors (an MLP, SGD with momentum, two buckets started
 *     during backward): the first average bit for bit fl(g0 + g1) / 2 of
 *     the ranks' own gradients; 20 steps whose losses follow the CPU
 *     DDP's on the same data within 1e-4 (cuda_rig's close_to: relative
 *     to 1 + |loss|; the CPU and cudaemu products sum in different orders,
 *     so fp32 results differ in the last bits and drift a little, as in
 *     test_cuda_train), parameters bitwise equal on the two ranks after
 *     every step;
 *   - fp16 autocast + the scaler on cuda with DDP: an inf in rank 1's
 *     gradient only (after the average) makes both ranks skip (found_inf's
 *     MAX through NCCL, on the device) and halve the scale; parameters
 *     and Adam's state unchanged bit for bit on both; a following step
 *     (from backward to the scaler's update) adds no host synchronisation;
 *   - ZeRO-1 on cuda (SGD with momentum, AdamW) bitwise equal to the
 *     unsharded run that averages every gradient through NCCL (2 ranks:
 *     both sums are a + b, the division the same), every rank the same;
 *     with clipping on the device (the shards' sums of squares
 *     all-gathered through NCCL): norms within 1e-12 and parameters within
 *     1e-5 of the unsharded run over 20 steps, the 0-d tensor form
 *     clipping bit for bit as the double form with no host wait from the
 *     gradients' reduction to the parameters' gathering.
 * With --stall (CTest's dist_test_nccl_cuda_stall): rank 1 never joins an
 * all-reduce, and rank 0's call must fail past its 0.5 s timeout, saying
 * "rank 0 timed out after 0.5 s waiting for an all-reduce (ncclAllReduce):
 * rank 1 did not answer"; the program then ends the job.
 * Without CUDA or NCCL in the build (or no device) both ranks exit 77:
 * skipped.
 */
#include "comm/comm.h"
#include "comm/comm_engine.h"
#include "cuda_rig.h"
#include "ddp_mlp.h"
#include "dist_main.h"
#include "optim/optim.h"
#include "snapshot.h"
#include "tensor/tensor.h"
#include "zero_net.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* NCCL operations started so far (which engine ran). */
static int64_t nccl_ops(void) { return comm_device_engine(AMP_CUDA)->ops_started(); }

/* ---------------------------------------------------------------- helpers */

/* Whether t's bytes (on any device) are the same on every rank. */
static bool same_on_all_ranks(const amp_tensor *t)
{
    const size_t bytes = (size_t)amp_tensor_numel(t) * amp_dtype_size(amp_tensor_dtype(t));
    char *mine = malloc(bytes), *all = malloc(bytes * (size_t)world);
    bool same = mine && all && amp_tensor_copy_out(t, mine, amp_tensor_dtype(t)) == AMP_OK &&
                comm_allgather(mine, all, amp_tensor_numel(t), amp_tensor_dtype(t), AMP_CPU, NULL) == AMP_OK;
    for (int r = 1; same && r < world; r++)
        same = memcmp(all, all + (size_t)r * bytes, bytes) == 0;
    free(mine);
    free(all);
    return same;
}

/* Host waits for the device (ampc.h: syncs + d2h_copies; a copy from
 * the host does not wait for the device's work). */
static int64_t host_syncs(void)
{
    amp_cuda_sync_stats s = amp_cuda_get_sync_stats();
    return (int64_t)(s.syncs + s.d2h_copies);
}

/* Rank r's element i: values of many magnitudes, so that sums round. */
static float val(int r, int i)
{
    return (float)((i * 37 + r * 101) % 1000) / 7.0f * (i % 3 == 0 ? 1e-3f : 1.0f) - 60.0f + (float)r * 0.3f;
}

/* ---------------------------------------------------------- collectives */

static void test_all_reduce(void)
{
    enum { N = 1000 };
    static float v[N], want[3][N];
    for (int i = 0; i < N; i++) {
        v[i] = val(rank, i);
        float a = val(0, i), b = val(1, i);
        if (i == 5) { /* an inf on rank 1: what found_inf's MAX carries */
            b = INFINITY;
            if (rank == 1)
                v[i] = INFINITY;
        }
        want[0][i] = a + b;
        want[1][i] = a * 0.5f + b * 0.5f; /* NCCL's average: each rank's value times 1 / nranks, summed */
        want[2][i] = fmaxf(a, b);
    }
    const amp_reduce_op ops[3] = {AMP_REDUCE_SUM, AMP_REDUCE_AVG, AMP_REDUCE_MAX};
    const char *names[3] = {"sum", "avg", "max"};
    for (int o = 0; o < 3; o++) {
        amp_tensor *t = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_F32, v));
        const int64_t ops0 = nccl_ops(), s0 = host_syncs();
        CHECK_OK(amp_dist_all_reduce(t, ops[o]));
        CHECK_EQ_INT(nccl_ops() - ops0, 1);
        CHECK_EQ_INT(host_syncs() - s0, 0);
        CHECK_MSG(holds_bits(t, want[o], sizeof want[o]), "f32 %s through NCCL: not NCCL's result", names[o]);
        /* and MPI's, on the same values in host memory */
        amp_tensor *h = amp_from_data(AMP_SHAPE(N), AMP_F32, v);
        CHECK_OK(amp_dist_all_reduce(h, ops[o]));
        float *got = copy_f32(t);
        CHECK_MSG(got && memcmp(got, amp_tensor_data(h), sizeof v) == 0, "f32 %s: NCCL and MPI differ", names[o]);
        free(got);
        amp_tensor_free(h);
        amp_tensor_free(t);
    }
    /* integers: i64 sum and max past 2^32, i32 sum */
    int64_t k[3] = {-5 - rank, (int64_t)7 << 33, rank ? INT64_MAX : 1};
    const int64_t ksum[3] = {-11, (int64_t)7 << 34, (int64_t)((uint64_t)INT64_MAX + 1u)}, kmax[3] = {-5, (int64_t)7 << 33,
                                                                                                  INT64_MAX};
    amp_tensor *t = on_cuda(amp_from_data(AMP_SHAPE(3), AMP_I64, k));
    CHECK_OK(amp_dist_all_reduce(t, AMP_REDUCE_SUM));
    CHECK_MSG(holds_bits(t, ksum, sizeof ksum), "i64 sum");
    amp_tensor_free(t);
    t = on_cuda(amp_from_data(AMP_SHAPE(3), AMP_I64, k));
    CHECK_OK(amp_dist_all_reduce(t, AMP_REDUCE_MAX));
    CHECK_MSG(holds_bits(t, kmax, sizeof kmax), "i64 max");
    amp_tensor_free(t);
    int32_t w[2] = {rank + 1, -100 * rank}, wsum[2] = {3, -100};
    t = on_cuda(amp_from_data(AMP_SHAPE(2), AMP_I32, w));
    CHECK_OK(amp_dist_all_reduce(t, AMP_REDUCE_SUM));
    CHECK_MSG(holds_bits(t, wsum, sizeof wsum), "i32 sum");
    amp_tensor_free(t);
}

static void test_gather_scatter_broadcast(void)
{
    enum { N = 257 };
    uint16_t b[2][N];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++)
            b[r][i] = (uint16_t)(0x3f80 + i * 3 + r * 1000);
    /* out of place */
    amp_tensor *src = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_BF16, b[rank]));
    amp_tensor *dst = on_cuda(amp_zeros(AMP_SHAPE(2 * N), AMP_BF16));
    CHECK_OK(comm_allgather(amp_tensor_data(src), amp_tensor_data(dst), N, AMP_BF16, AMP_CUDA, NULL));
    CHECK_MSG(holds_bits(dst, b, sizeof b), "bf16 all-gather");
    amp_tensor_free(dst);
    /* in place: this rank's block already in the receive buffer */
    uint16_t start[2][N];
    memset(start, 0, sizeof start);
    memcpy(start[rank], b[rank], sizeof b[rank]);
    dst = on_cuda(amp_from_data(AMP_SHAPE(2 * N), AMP_BF16, start));
    CHECK_OK(comm_allgather(amp_tensor_data(dst), amp_tensor_data(dst), N, AMP_BF16, AMP_CUDA, NULL));
    CHECK_MSG(holds_bits(dst, b, sizeof b), "bf16 all-gather in place");
    amp_tensor_free(dst);
    /* a broadcast from rank 1; a root that is not there is refused */
    CHECK_OK(amp_dist_broadcast(src, 1));
    CHECK_MSG(holds_bits(src, b[1], sizeof b[1]), "broadcast from rank 1");
    CHECK(amp_dist_broadcast(src, 2) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "rank 2");
    amp_tensor_free(src);

    /* f32 reduce-scatter: rank r gets block r of the sum */
    static float f[2 * N], want[N];
    for (int i = 0; i < 2 * N; i++)
        f[i] = val(rank, i);
    for (int i = 0; i < N; i++)
        want[i] = val(0, rank * N + i) + val(1, rank * N + i);
    amp_tensor *fs = on_cuda(amp_from_data(AMP_SHAPE(2 * N), AMP_F32, f));
    amp_tensor *fr = on_cuda(amp_zeros(AMP_SHAPE(N), AMP_F32));
    comm_req *req = NULL;
    CHECK_OK(comm_reduce_scatter(amp_tensor_data(fs), amp_tensor_data(fr), N, AMP_F32, AMP_CUDA, &req));
    CHECK_OK(comm_wait(req, "the test's reduce-scatter"));
    CHECK_MSG(holds_bits(fr, want, sizeof want), "f32 reduce-scatter");
    static float mpi[N];
    CHECK_OK(comm_reduce_scatter(f, mpi, N, AMP_F32, AMP_CPU, NULL));
    CHECK_MSG(memcmp(mpi, want, sizeof want) == 0, "reduce-scatter: MPI's differs from NCCL's");
    amp_tensor_free(fs);
    amp_tensor_free(fr);
}

/* ------------------------------------------------------------------ DDP */

enum { MAXP = 16 };

/* The loss of this rank's B rows of batch `step` (temporaries:
 * amp_temps_free), on dev. */
static amp_tensor *mlp_loss(amp_module *m, int step, amp_device dev, bool autocast)
{
    amp_tensor *x, *y;
    batch_rows(step, rank * B, rank * B + B, dev, false, &x, &y);
    if (autocast)
        amp_autocast_begin(dev, AMP_F16);
    amp_tensor *l = amp_cross_entropy(amp_module_forward(m, x), y);
    if (autocast)
        amp_autocast_end();
    return l;
}

static void test_ddp_follows_the_cpu(void)
{
    amp_module *mc = make_mlp(AMP_CUDA), *mh = make_mlp(AMP_CPU);
    amp_tensor *p[MAXP], *q[MAXP];
    const int n = amp_module_params(mc, p, MAXP);
    CHECK_EQ_INT(amp_module_params(mh, q, MAXP), n);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05, so.momentum = 0.9;
    amp_optim *oc = amp_optim_sgd(p, n, so), *oh = amp_optim_sgd(q, n, so);
    amp_ddp_opts dop = amp_ddp_defaults();
    dop.bucket_mb = 1100.0 * 4 / 1048576; /* two buckets (fc2 + fc1, then fc0) */
    amp_ddp *dc = amp_ddp_new(p, n, dop), *dh = amp_ddp_new(q, n, dop);
    CHECK(dc && dh);
    if (!dc || !dh)
        return;
    /* The first average, exactly: each rank's own gradients (no_sync),
     * then the synchronised backward of the same batch. */
    float *own[MAXP], *all[MAXP];
    amp_ddp_set_sync(dc, false);
    CHECK_OK(amp_backward(mlp_loss(mc, 0, AMP_CUDA, false)));
    for (int i = 0; i < n; i++) {
        own[i] = copy_f32(amp_tensor_grad(p[i]));
        all[i] = calloc((size_t)(2 * amp_tensor_numel(p[i])), sizeof(float));
        CHECK_OK(comm_allgather(own[i], all[i], amp_tensor_numel(p[i]), AMP_F32, AMP_CPU, NULL));
    }
    amp_optim_zero_grad(oc);
    amp_temps_free();
    amp_ddp_set_sync(dc, true);
    double worst = 0;
    enum { STEPS = 20 };
    for (int step = 0; step < STEPS; step++) {
        amp_tensor *l = mlp_loss(mc, step, AMP_CUDA, false);
        const double got = amp_item(l);
        CHECK_OK(amp_backward(l));
        CHECK_OK(amp_ddp_finish(dc));
        for (int i = 0; step == 0 && i < n; i++) {
            const int64_t k = amp_tensor_numel(p[i]);
            float *g = copy_f32(amp_tensor_grad(p[i]));
            int64_t bad = 0;
            for (int64_t j = 0; g && j < k; j++) {
                const float want = (all[i][j] + all[i][k + j]) / 2;
                bad += memcmp(&g[j], &want, sizeof want) != 0;
            }
            CHECK_MSG(g && bad == 0, "parameter %d: %lld elements of the average are not (g0 + g1) / 2", i,
                      (long long)bad);
            free(g);
        }
        CHECK_OK(amp_optim_step(oc));
        amp_optim_zero_grad(oc);

        amp_tensor *lh = mlp_loss(mh, step, AMP_CPU, false);
        const double want = amp_item(lh);
        CHECK_OK(amp_backward(lh));
        CHECK_OK(amp_ddp_finish(dh));
        CHECK_OK(amp_optim_step(oh));
        amp_optim_zero_grad(oh);

        const double rel = fabs(got - want) / (1 + fabs(want));
        worst = rel > worst ? rel : worst;
        CHECK_MSG(close_to(want, got, 1e-4), "rank %d step %d: loss %.9g on cuda (NCCL), %.9g on the cpu (MPI)",
                  rank, step, got, want);
        for (int i = 0; i < n; i++)
            CHECK_MSG(same_on_all_ranks(p[i]), "step %d: parameter %d differs between the ranks", step, i);
        amp_temps_free();
    }
    for (int i = 0; i < n; i++)
        check_same("DDP on cuda after 20 steps", "parameter", q[i], p[i], 1e-4);
    amp_ddp_stats s = amp_ddp_get_stats(dc);
    CHECK_EQ_INT(s.buckets, 2);
    CHECK_EQ_INT(s.syncs, STEPS);
    CHECK_EQ_INT(s.early_buckets, 2 * STEPS);
    if (rank == 0)
        printf("  20 steps: worst loss difference cuda (NCCL) vs cpu (MPI) %.3g (relative to 1 + |loss|)\n", worst);
    for (int i = 0; i < n; i++)
        free(own[i]), free(all[i]);
    amp_ddp_free(dc), amp_ddp_free(dh);
    amp_optim_free(oc), amp_optim_free(oh);
    amp_module_free(mc), amp_module_free(mh);
}

/* fp16 + scaler + DDP on cuda: step 0 steps; step 1 has an inf in rank
 * 1's gradient after the average (only its unscale sees it): both skip
 * and back off, nothing changes; step 2 steps again, without waiting for
 * the device anywhere from backward to the update. */
static void test_inf_on_one_rank_skips_both(void)
{
    ddp_rig r;
    if (!ddp_rig_make(&r, AMP_CUDA, true))
        return;
    for (int step = 0; step < 3; step++) {
        snapshot before = {0};
        if (step == 1)
            snap(&before, r.p, r.n, r.o);
        amp_tensor *l = mlp_loss(r.m, step, AMP_CUDA, true);
        const int64_t s0 = host_syncs();
        CHECK_OK(amp_backward(amp_scaler_scale(r.s, l)));
        CHECK_OK(amp_ddp_finish(r.d));
        if (step == 1 && rank == 1) {
            float *g = copy_f32(amp_tensor_grad(r.p[2]));
            g[3] = INFINITY;
            CHECK_OK(amp_tensor_copy_in(amp_tensor_grad(r.p[2]), g, AMP_F32));
            free(g);
        }
        const int64_t s1 = host_syncs();
        CHECK_OK(amp_scaler_step(r.s, r.o, NULL));
        CHECK_OK(amp_scaler_update(r.s));
        if (step == 2)
            CHECK_MSG(host_syncs() == s0, "step 2 waited for the device %lld times (backward to update)",
                      (long long)(host_syncs() - s0));
        else if (step == 1)
            CHECK_MSG(host_syncs() == s1, "step 1's scaler step and update waited for the device");
        CHECK(amp_scaler_get_scale(r.s) == (step == 0 ? 65536.0 : 32768.0));
        if (step == 1)
            CHECK_MSG(snap_unchanged(&before, r.p, r.n, r.o),
                      "rank %d: the skipped step changed a parameter or Adam's state", rank);
        for (int i = 0; i < r.n; i++)
            CHECK_MSG(same_on_all_ranks(r.p[i]), "step %d: parameter %d differs between the ranks", step, i);
        amp_optim_zero_grad(r.o);
        amp_temps_free();
    }
    amp_scaler_counts c = amp_scaler_get_counts(r.s);
    CHECK_EQ_INT(c.skipped, 1);
    for (int i = 0; i < r.n; i++)
        CHECK_EQ_INT(amp_optim_param_steps(r.o, i), 2);
    ddp_rig_free(&r);
}

/* ---------------------------------------------------------------- ZeRO-1 */

static void run_zero(int kind)
{
    net r = make_net(kind, AMP_CUDA), a = make_net(kind, AMP_CUDA);
    amp_zero *z = amp_zero_new(a.o);
    CHECK(z);
    const int64_t ops0 = nccl_ops();
    for (int t = 0; t < 10 && z; t++) {
        amp_optim_zero_grad(r.o);
        fwd_bwd(&r, t, rank, NULL);
        for (int i = 0; i < r.n; i++)
            CHECK_OK(amp_dist_all_reduce(amp_tensor_grad(r.p[i]), AMP_REDUCE_AVG));
        CHECK_OK(amp_optim_step(r.o));

        amp_optim_zero_grad(a.o);
        fwd_bwd(&a, t, rank, NULL);
        CHECK_OK(amp_zero_reduce_gradients(z));
        CHECK_OK(amp_optim_step(a.o));
        CHECK_OK(amp_zero_gather_parameters(z));

        const int64_t bad = diff_params(&a, &r, NULL);
        CHECK_MSG(bad == 0, "%s step %d: %lld elements differ from the unsharded run", a.o->name, t, (long long)bad);
        for (int i = 0; i < a.n; i++)
            CHECK_MSG(same_on_all_ranks(a.p[i]), "%s step %d: parameter %d differs between the ranks", a.o->name, t,
                      i);
        if (bad)
            break;
    }
    CHECK_MSG(nccl_ops() - ops0 >= 10 * (r.n + 2), "ZeRO's collectives did not go through NCCL (%lld ops)",
              (long long)(nccl_ops() - ops0));
    CHECK_EQ_INT(amp_optim_steps(a.o), 10);
    amp_zero_free(z);
    free_net(&a);
    free_net(&r);
}

static void test_zero_sgd_bitwise(void) { run_zero(SGD); }
static void test_zero_adamw_bitwise(void) { run_zero(ADAMW); }

/* ZeRO-1 with clipping on cuda (every step clips: max_norm 0.25 is below
 * the norms), against the unsharded run (gradients averaged through
 * NCCL, amp_clip_grad_norm on the device): the global norm is the ranks'
 * shard sums of squares all-gathered through NCCL and added in rank
 * order, a different grouping from the reference's, so the norms agree to
 * a few ulps of a double (checked to 1e-12 relative) and the f32 factor
 * may differ by an ulp: over 20 steps the parameters stay within 1e-5
 * relative (as test_zero.c on the CPU). amp_zero_clip_grad_norm_tensor
 * clips bit for bit as the double form, its norm the double rounded once
 * to f32, and from the gradients' reduction to the parameters' gathering
 * the host never waits for the device. */
static void run_zero_clipped(int kind)
{
    net r = make_net(kind, AMP_CUDA), a = make_net(kind, AMP_CUDA), b = make_net(kind, AMP_CUDA);
    amp_zero *z = amp_zero_new(a.o), *zb = amp_zero_new(b.o);
    CHECK(z && zb);
    double worst = 0, worst_norm = 0;
    int clipped = 0;
    for (int t = 0; t < 20 && z && zb; t++) {
        amp_optim_zero_grad(r.o);
        fwd_bwd(&r, t, rank, NULL);
        for (int i = 0; i < r.n; i++)
            CHECK_OK(amp_dist_all_reduce(amp_tensor_grad(r.p[i]), AMP_REDUCE_AVG));
        const double nr = amp_clip_grad_norm(r.p, r.n, 0.25);
        CHECK_OK(amp_optim_step(r.o));

        amp_optim_zero_grad(a.o);
        fwd_bwd(&a, t, rank, NULL);
        CHECK_OK(amp_zero_reduce_gradients(z));
        const double na = amp_zero_clip_grad_norm(z, 0.25);
        CHECK_OK(amp_optim_step(a.o));
        CHECK_OK(amp_zero_gather_parameters(z));

        amp_optim_zero_grad(b.o);
        fwd_bwd(&b, t, rank, NULL);
        const int64_t s0 = host_syncs();
        CHECK_OK(amp_zero_reduce_gradients(zb));
        amp_tensor *nt = amp_zero_clip_grad_norm_tensor(zb, 0.25);
        CHECK(nt && amp_tensor_numel(nt) == 1 && amp_tensor_dtype(nt) == AMP_F32 &&
              amp_tensor_device(nt) == AMP_CUDA);
        CHECK_OK(amp_optim_step(b.o));
        CHECK_OK(amp_zero_gather_parameters(zb));
        CHECK_MSG(host_syncs() == s0, "step %d: ZeRO's reduce, clip, step and gather waited for the device %lld times",
                  t, (long long)(host_syncs() - s0));
        const double nb = nt ? amp_tensor_get(nt, 0) : NAN;
        amp_tensor_free(nt);
        CHECK_MSG(nb == (double)(float)na, "step %d: the tensor's norm %.9g, the double's %.17g", t, nb, na);
        CHECK_MSG(diff_params(&b, &a, NULL) == 0, "step %d: the tensor form clipped differently", t);

        clipped += nr > 0.25;
        const double dn = fabs(na - nr) / nr;
        worst_norm = dn > worst_norm ? dn : worst_norm;
        double rel;
        diff_params(&a, &r, &rel);
        worst = rel > worst ? rel : worst;
        for (int i = 0; i < a.n; i++)
            CHECK_MSG(same_on_all_ranks(a.p[i]), "%s clipped step %d: parameter %d differs between the ranks",
                      a.o->name, t, i);
    }
    CHECK_MSG(clipped >= 15, "only %d of 20 steps clipped: the test does not test clipping", clipped);
    CHECK_MSG(worst_norm <= 1e-12, "%s: global norm off by %.3g relative", a.o->name, worst_norm);
    CHECK_MSG(worst <= 1e-5, "%s clipped: parameters off by %.3g relative", a.o->name, worst);
    if (rank == 0)
        printf("  %s clipped on cuda: norms within %.2g, parameters within %.2g relative of the unsharded run\n",
               a.o->name, worst_norm, worst);
    amp_zero_free(z);
    amp_zero_free(zb);
    free_net(&a);
    free_net(&b);
    free_net(&r);
}

static void test_zero_sgd_clipped(void) { run_zero_clipped(SGD); }
static void test_zero_adamw_clipped(void) { run_zero_clipped(ADAMW); }

/* --stall (CTest's dist_test_nccl_cuda_stall): rank 1 never joins rank
 * 0's all-reduce; rank 0's call (the NCCL engine polling the non-blocking
 * communicator) must return an error past the timeout, naming the
 * operation and rank 1, rather than hang; then this program ends the job,
 * as ampc train does (the library never does). */
static int stall(void)
{
    amp_dist_set_timeout(0.5);
    amp_tensor *t = on_cuda(amp_ones(AMP_SHAPE(64), AMP_F32));
    CHECK_OK(amp_dist_all_reduce(t, AMP_REDUCE_SUM)); /* together: the communicator is made */
    CHECK_OK(amp_dist_barrier());
    if (rank == 1) {
        sleep(60); /* ended by the launcher when rank 0 ends the job */
        return 1;
    }
    if (amp_dist_all_reduce(t, AMP_REDUCE_SUM) == AMP_OK) {
        fprintf(stderr, "test_nccl_cuda --stall: the all-reduce returned without rank 1\n");
        return 1;
    }
    fprintf(stderr, "ampc: rank 0: %s\n", amp_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(int argc, char **argv)
{
    const bool stall_mode = argc > 1 && strcmp(argv[1], "--stall") == 0;
    dist_start(&argc, &argv);
    if (!amp_cuda_available() || !comm_built_with_nccl()) {
        if (rank == 0)
            printf("test_nccl_cuda: skipped: %s\n", !amp_cuda_available() ? "no CUDA device" : "no NCCL in this build");
        amp_dist_finalize();
        return 77;
    }
    if (world != 2) {
        fprintf(stderr, "test_nccl_cuda runs on 2 ranks (mpirun -np 2), not %d\n", world);
        amp_dist_finalize();
        return 1;
    }
    if (stall_mode)
        return stall();
    RUN(test_all_reduce);
    RUN(test_gather_scatter_broadcast);
    RUN(test_ddp_follows_the_cpu);
    RUN(test_inf_on_one_rank_skips_both);
    RUN(test_zero_sgd_bitwise);
    RUN(test_zero_adamw_bitwise);
    RUN(test_zero_sgd_clipped);
    RUN(test_zero_adamw_clipped);
    return dist_finish();
}
