/*
 * test_dist_cuda.c - the NCCL path (src/comm/comm_nccl.c) in a world of
 * one rank: amp_dist_init as an MPI singleton (no mpirun), then CUDA
 * tensors all-reduced (sum, average, maximum; f32 and i64), broadcast,
 * all-gathered (bf16, in place and not) and reduce-scattered through
 * NCCL, non-blocking requests, dtypes NCCL is not asked to reduce refused
 * with a message, no host synchronisation added by any of it, and a short
 * fp16 + scaler training whose gradients are averaged over the world
 * through NCCL each step, bitwise equal to the same training without;
 * the NCCL engine's calls directly (comm_device_engine), before
 * amp_dist_init (a one-rank communicator made without MPI: what runs on a
 * machine without Open MPI); and, on cudaemu, a communicator that never
 * settles: the call returns an error past the timeout, saying what it
 * waited for, and every later collective refuses with it.
 * Over one rank every collective leaves the data as it was, so each
 * result is known exactly.
 *
 * On cudaemu (ctest -L cuda in an -DAMPC_CUDA=EMU build) NCCL is
 * tests/cuda_emu/nccl.cc; on a GPU, the real library. Without a GPU, MPI
 * or NCCL in the build every test is skipped and the program exits 77
 * (CTest: "Skipped").
 */
#include "comm/comm.h"
#include "comm/comm_engine.h"
#include "cuda_rig.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static bool ran; /* whether any test ran (else main exits 77: skipped) */

/* NCCL operations started so far (which engine ran). */
static int64_t nccl_ops(void) { return comm_device_engine(AMP_CUDA)->ops_started(); }

/* Whether this test can run; the reason is reported as a skip. */
static bool ready(void)
{
    if (!gpu())
        return false;
    if (!comm_built_with_nccl() || !amp_dist_is_initialized()) {
        harness_skip(!comm_built_with_nccl() ? "no NCCL in this build" : "no MPI (amp_dist_init failed)");
        return false;
    }
    ran = true;
    return true;
}

/* A communicator that never finishes being made (cudaemu's
 * CUDAEMU_NCCL_STUCK: a peer that never joins) fails the call past the
 * timeout, saying what it waited for, instead of hanging; the world has
 * then ended, so a later collective refuses with the same message. In a
 * child process (before MPI starts), which reports what it got. */
static void test_stuck_communicator_is_an_error(void)
{
#ifndef AMPC_CUDA_EMU
    harness_skip("needs cudaemu's CUDAEMU_NCCL_STUCK");
#else
    if (!gpu())
        return;
    if (!comm_built_with_nccl()) {
        harness_skip("no NCCL in this build");
        return;
    }
    ran = true;
    int fd[2];
    CHECK(pipe(fd) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        setenv("CUDAEMU_NCCL_STUCK", "1", 1);
        comm_set_timeout(0.25);
        amp_tensor *t = amp_zeros(AMP_SHAPE(8), AMP_F32);
        comm_op *op = NULL;
        int rc = 3;
        if (amp_tensor_move(t, AMP_CUDA) == AMP_OK &&
            comm_device_engine(AMP_CUDA)->allreduce(amp_tensor_data(t), 8, AMP_F32, AMP_REDUCE_SUM, &op) != AMP_OK) {
            fprintf(stderr, "first: %s\n", amp_last_error());
            rc = comm_failed(NULL) && amp_dist_all_reduce(t, AMP_REDUCE_SUM) != AMP_OK ? 1 : 4;
            fprintf(stderr, "then: %s\n", amp_last_error());
        }
        fflush(stderr);
        _exit(rc);
    }
    close(fd[1]);
    char msg[4096] = "";
    size_t len = 0;
    ssize_t k;
    while (len + 1 < sizeof msg && (k = read(fd[0], msg + len, sizeof msg - 1 - len)) > 0)
        len += (size_t)k;
    msg[len] = '\0';
    close(fd[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 1, "the child's calls did not fail as they should "
              "(status %d):\n%s", status, msg);
    const char *then = strstr(msg, "then: ");
    CHECK_MSG(strstr(msg, "first: dist: rank 0 timed out after 0.25 s waiting for making the NCCL communicator "
                          "(ncclCommInitRankConfig)") &&
                  then && strstr(then, "timed out after 0.25 s"),
              "the child said: %s", msg);
#endif
}

/* The NCCL engine's calls themselves, in a one-rank communicator (made
 * without MPI if need be: the test that runs where the build has NCCL but
 * no MPI, as on a GPU machine without Open MPI): an f32 average and a
 * bf16 all-gather through NCCL, waited for on the device. */
static void test_nccl_calls(void)
{
    if (!gpu())
        return;
    if (!comm_built_with_nccl()) {
        harness_skip("no NCCL in this build");
        return;
    }
    ran = true;
    enum { N = 300 };
    float v[N];
    uint16_t b[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)i / 7 - 20, b[i] = (uint16_t)(0x4000 + i);
    amp_tensor *t = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_F32, v));
    amp_tensor *h = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_BF16, b));
    amp_tensor *g = on_cuda(amp_zeros(AMP_SHAPE(N), AMP_BF16));
    const comm_engine *e = comm_device_engine(AMP_CUDA);
    int64_t ops0 = nccl_ops();
    comm_op *a = NULL, *c = NULL;
    CHECK_OK(e->allreduce(amp_tensor_data(t), N, AMP_F32, AMP_REDUCE_AVG, &a));
    CHECK_OK(e->allgather(amp_tensor_data(h), amp_tensor_data(g), N, AMP_BF16, &c));
    CHECK(a && c);
    CHECK_OK(e->wait(c, "the test's all-gather"));
    CHECK_OK(e->wait(a, "the test's all-reduce"));
    CHECK_EQ_INT(nccl_ops() - ops0, 2);
    CHECK(holds_bits(t, v, sizeof v));
    CHECK(holds_bits(g, b, sizeof b));
    amp_tensor_free(t);
    amp_tensor_free(h);
    amp_tensor_free(g);
    if (!amp_dist_is_initialized())
        CHECK_OK(e->finalize(false)); /* the next communicator is made over MPI */
}

/* f32 sum / avg / max and i64 sum / max: the values come back bit for bit
 * (a reduction over one rank; the average divides by 1), each through one
 * NCCL operation, with no host wait and a version bump. */
static void test_all_reduce(void)
{
    enum { N = 1000 };
    float v[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)i * 0.37f - 100.0f;
    amp_reduce_op ops[3] = {AMP_REDUCE_SUM, AMP_REDUCE_AVG, AMP_REDUCE_MAX};
    for (int o = 0; o < 3; o++) {
        amp_tensor *t = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_F32, v));
        int64_t ops0 = nccl_ops();
        amp_cuda_sync_stats s0 = amp_cuda_get_sync_stats();
        CHECK_OK(amp_dist_all_reduce(t, ops[o]));
        amp_cuda_sync_stats s1 = amp_cuda_get_sync_stats();
        CHECK_EQ_INT(nccl_ops() - ops0, 1);
        CHECK_EQ_INT(s1.syncs + s1.d2h_copies + s1.h2d_copies, s0.syncs + s0.d2h_copies + s0.h2d_copies);
        CHECK_MSG(holds_bits(t, v, sizeof v), "op %d: the values changed", o);
        amp_tensor_free(t);
    }
    int64_t k[3] = {-5, 7, INT64_MAX};
    amp_tensor *t = on_cuda(amp_from_data(AMP_SHAPE(3), AMP_I64, k));
    CHECK_OK(amp_dist_all_reduce(t, AMP_REDUCE_SUM));
    CHECK_OK(amp_dist_all_reduce(t, AMP_REDUCE_MAX));
    CHECK(holds_bits(t, k, sizeof k));
    /* What NCCL is not asked to do is refused before it, naming it. */
    CHECK(amp_dist_all_reduce(t, AMP_REDUCE_AVG) != AMP_OK);
    CHECK_ERROR(AMP_ERR_DTYPE, "avg");
    amp_tensor_free(t);
    amp_tensor *h = on_cuda(amp_zeros(AMP_SHAPE(4), AMP_BF16));
    CHECK(amp_dist_all_reduce(h, AMP_REDUCE_SUM) != AMP_OK);
    CHECK_ERROR(AMP_ERR_DTYPE, "bf16");
    amp_tensor_free(h);
}

/* bf16 gathered (as ncclBfloat16) out of place and in place, f32
 * reduce-scattered, a broadcast from rank 0 (and from a rank that is not
 * there, refused). */
static void test_gather_scatter_broadcast(void)
{
    enum { N = 257 };
    uint16_t b[N];
    float f[N];
    for (int i = 0; i < N; i++)
        b[i] = (uint16_t)(0x3f80 + i * 3), f[i] = (float)i / 3 - 40;
    amp_tensor *src = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_BF16, b));
    amp_tensor *dst = on_cuda(amp_zeros(AMP_SHAPE(N), AMP_BF16));
    CHECK_OK(comm_allgather(amp_tensor_data(src), amp_tensor_data(dst), N, AMP_BF16, AMP_CUDA, NULL));
    CHECK(holds_bits(dst, b, sizeof b));
    CHECK_OK(comm_allgather(amp_tensor_data(dst), amp_tensor_data(dst), N, AMP_BF16, AMP_CUDA, NULL));
    CHECK(holds_bits(dst, b, sizeof b));
    CHECK_OK(amp_dist_broadcast(src, 0));
    CHECK(holds_bits(src, b, sizeof b));
    CHECK(amp_dist_broadcast(src, 1) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "rank 1");
    amp_tensor_free(src);
    amp_tensor_free(dst);

    amp_tensor *fs = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_F32, f));
    amp_tensor *fr = on_cuda(amp_zeros(AMP_SHAPE(N), AMP_F32));
    comm_req *req = NULL;
    CHECK_OK(comm_reduce_scatter(amp_tensor_data(fs), amp_tensor_data(fr), N, AMP_F32, AMP_CUDA, &req));
    CHECK(req != NULL);
    for (int spins = 0; req && !comm_test(req) && spins < 1000000; spins++)
        comm_progress();
    CHECK_OK(comm_wait(req, "the test's reduce-scatter"));
    CHECK(holds_bits(fr, f, sizeof f));
    amp_tensor_free(fs);
    amp_tensor_free(fr);
}

/* Several operations in flight at once, waited for in reverse order. */
static void test_requests_in_flight(void)
{
    enum { K = 6, N = 100 };
    amp_tensor *t[K];
    comm_req *req[K];
    float v[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)i;
    for (int k = 0; k < K; k++) {
        t[k] = on_cuda(amp_from_data(AMP_SHAPE(N), AMP_F32, v));
        CHECK_OK(comm_allreduce(amp_tensor_data(t[k]), N, AMP_F32, AMP_REDUCE_AVG, AMP_CUDA, &req[k]));
    }
    for (int k = K - 1; k >= 0; k--) {
        CHECK_OK(comm_wait(req[k], "the test's all-reduce"));
        CHECK(holds_bits(t[k], v, sizeof v));
        amp_tensor_free(t[k]);
    }
}

/* A small MLP, fp16 autocast + scaler, SGD with momentum: the losses
 * of each step, and the final parameters (f32 bits) into w. */
static void train(bool through_nccl, int steps, double *losses, float *w, int64_t w_cap, int64_t *ops)
{
    amp_manual_seed(5);
    int64_t hidden[1] = {32};
    amp_module *m = amp_model_mlp(12, hidden, 1, 4);
    amp_tensor *x = test_uniform(AMP_SHAPE(16, 12), AMP_F32, -1, 1, 71);
    int64_t y_host[16];
    for (int i = 0; i < 16; i++)
        y_host[i] = (i * 3) % 4;
    amp_tensor *y = amp_from_data(AMP_SHAPE(16), AMP_I64, y_host);
    CHECK_OK(amp_module_to(m, AMP_CUDA));
    CHECK_OK(amp_tensor_move(x, AMP_CUDA));
    CHECK_OK(amp_tensor_move(y, AMP_CUDA));
    amp_tensor *params[8];
    int np = amp_module_params(m, params, 8);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.1;
    so.momentum = 0.9;
    amp_optim *opt = amp_optim_sgd(params, np, so);
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    int64_t ops0 = nccl_ops();
    for (int k = 0; k < steps; k++) {
        amp_optim_zero_grad(opt);
        amp_autocast_begin(AMP_CUDA, AMP_F16);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, x), y);
        amp_autocast_end();
        losses[k] = amp_item(loss);
        CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
        for (int i = 0; through_nccl && i < np; i++)
            CHECK_OK(amp_dist_all_reduce(amp_tensor_grad(params[i]), AMP_REDUCE_AVG));
        CHECK_OK(amp_scaler_step(s, opt, NULL));
        CHECK_OK(amp_scaler_update(s));
        amp_temps_free();
    }
    *ops = nccl_ops() - ops0;
    int64_t off = 0;
    for (int i = 0; i < np; i++) {
        int64_t n = amp_tensor_numel(params[i]);
        CHECK(off + n <= w_cap);
        if (off + n <= w_cap)
            CHECK_OK(amp_tensor_copy_out(params[i], w + off, AMP_F32));
        off += n;
    }
    amp_scaler_free(s);
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void test_training_through_nccl(void)
{
    enum { STEPS = 8, CAP = 1024 };
    double plain[STEPS], dist[STEPS];
    static float wp[CAP], wd[CAP];
    int64_t ops_plain = 0, ops_dist = 0;
    train(false, STEPS, plain, wp, CAP, &ops_plain);
    train(true, STEPS, dist, wd, CAP, &ops_dist);
    CHECK_EQ_INT(ops_plain, 0);
    CHECK_EQ_INT(ops_dist, 4 * STEPS); /* two linear layers, weight and bias each */
    for (int k = 0; k < STEPS; k++)
        CHECK_MSG(plain[k] == dist[k], "step %d: loss %.9g through NCCL, %.9g without", k, dist[k], plain[k]);
    CHECK_MSG(memcmp(wp, wd, sizeof wp) == 0, "the parameters differ after training through NCCL");
    CHECK_MSG(dist[STEPS - 1] < dist[0], "the loss did not go down (%g -> %g)", dist[0], dist[STEPS - 1]);
}

/* After amp_dist_finalize the world is one rank without a communicator:
 * CUDA collectives are the identity again, with no NCCL operation. */
static void test_after_finalize(void)
{
    float v[5] = {1, 2, 3, 4, 5};
    amp_tensor *t = on_cuda(amp_from_data(AMP_SHAPE(5), AMP_F32, v));
    CHECK_OK(amp_dist_finalize());
    int64_t ops0 = nccl_ops();
    CHECK_OK(amp_dist_all_reduce(t, AMP_REDUCE_SUM));
    CHECK_EQ_INT(nccl_ops(), ops0);
    CHECK(holds_bits(t, v, sizeof v));
    amp_tensor_free(t);
}

int main(void)
{
    amp_set_num_threads(1);
    RUN(test_stuck_communicator_is_an_error); /* first: forks, before MPI and any communicator */
    RUN(test_nccl_calls); /* before amp_dist_init: a communicator without MPI */
    if (amp_cuda_available() && comm_built_with_nccl() && amp_dist_init(NULL, NULL) != AMP_OK)
        fprintf(stderr, "test_dist_cuda: %s\n", amp_last_error());
    RUN(test_nccl_calls); /* and over MPI, where there is one */
    RUN_IF(ready, test_all_reduce);
    RUN_IF(ready, test_gather_scatter_broadcast);
    RUN_IF(ready, test_requests_in_flight);
    RUN_IF(ready, test_training_through_nccl);
    RUN_IF(ready, test_after_finalize);
    amp_dist_finalize();
    int rc = harness_done();
    return rc == 0 && !ran ? 77 : rc;
}
