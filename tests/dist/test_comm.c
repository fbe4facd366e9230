/*
 * test_comm.c (2 ranks, mpirun) - the world and the collectives under the
 * tensor API and the layer's own buffers (src/comm/comm.h): sums,
 * averages and maxima over the ranks against the values each rank knows
 * the other holds, broadcast, all-gather and reduce-scatter in rank order,
 * 16-bit data moved as bits, unsupported reductions refused with a
 * message, a world of one rank before init (the identity: an all-reduce
 * leaves its buffer, an all-gather copies), the timeout set and restored,
 * and no second init after finalize; failures: comm_agree turns one
 * rank's failure into the same error on every rank, naming it, and the
 * world goes on.
 *
 * Two more runs, each its own job (CTest's dist_test_comm_fail and
 * dist_test_comm_stall), end the world on purpose and check that every
 * rank's call returns the error, naming the rank; rank 1 then reports to
 * rank 0, which prints the verdict and ends the job (as a program must
 * once the world ended):
 *   --fail:  rank 1 fails after the ranks agreed (comm_fail) while rank 0
 *            waits in an all-reduce; rank 0's call returns rank 1's
 *            failure, and every later call (and finalize) on both refuses;
 *   --stall: rank 1 is away (asleep, no MPI) past rank 0's timeout; rank
 *            0's call names rank 1 as the one that did not answer, and rank
 *            1's next call returns rank 0's message.
 */
#include "base/base.h"
#include "comm/comm.h"
#include "dist_main.h"
#include "harness.h"
#include "tensor/tensor.h"

#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

static void test_world(void)
{
    CHECK(amp_dist_available());
    CHECK(amp_dist_is_initialized());
    CHECK_EQ_INT(world, 2);
    CHECK(rank == 0 || rank == 1);
    CHECK_OK(amp_dist_barrier());
}

/* rank r holds r + 1 + i / 8 at i: the sum, average and maximum are known. */
static void test_all_reduce(void)
{
    enum { N = 1000 };
    amp_reduce_op ops[3] = {AMP_REDUCE_SUM, AMP_REDUCE_AVG, AMP_REDUCE_MAX};
    for (int o = 0; o < 3; o++) {
        amp_tensor *t = amp_zeros(AMP_SHAPE(N), AMP_F32);
        float *p = amp_tensor_data(t);
        for (int i = 0; i < N; i++)
            p[i] = (float)(rank + 1) + (float)i / 8;
        uint64_t v0 = t->storage->version;
        CHECK_OK(amp_dist_all_reduce(t, ops[o]));
        CHECK(t->storage->version != v0); /* a write: kept casts are made anew */
        for (int i = 0; i < N; i++) {
            float a = 1 + (float)i / 8, b = 2 + (float)i / 8;
            float want = o == 0 ? a + b : o == 1 ? (a + b) / 2 : b;
            CHECK_MSG(p[i] == want, "op %d element %d: %g, want %g", o, i, p[i], want);
        }
        amp_tensor_free(t);
    }
    amp_tensor *k = amp_zeros(AMP_SHAPE(3), AMP_I64);
    int64_t *q = amp_tensor_data(k);
    q[0] = rank, q[1] = 10 * (rank + 1), q[2] = -rank;
    CHECK_OK(amp_dist_all_reduce(k, AMP_REDUCE_MAX));
    CHECK(q[0] == 1 && q[1] == 20 && q[2] == 0);
    CHECK_OK(amp_dist_all_reduce(k, AMP_REDUCE_SUM));
    CHECK(q[0] == 2 && q[1] == 40 && q[2] == 0);
    CHECK(amp_dist_all_reduce(k, AMP_REDUCE_AVG) != AMP_OK);
    CHECK_ERROR(AMP_ERR_DTYPE, "avg");
    amp_tensor_free(k);
    amp_tensor *h = amp_zeros(AMP_SHAPE(4), AMP_BF16);
    CHECK(amp_dist_all_reduce(h, AMP_REDUCE_SUM) != AMP_OK);
    CHECK_ERROR(AMP_ERR_DTYPE, "bf16");
    CHECK(amp_dist_all_reduce(NULL, AMP_REDUCE_SUM) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    amp_tensor_free(h);
}

/* Non-blocking: both started, then waited for in the other order. */
static void test_overlapped_requests(void)
{
    float a[64], b[64];
    for (int i = 0; i < 64; i++)
        a[i] = (float)(rank * 64 + i), b[i] = (float)(rank + 1);
    comm_req *ra, *rb;
    CHECK_OK(comm_allreduce(a, 64, AMP_F32, AMP_REDUCE_SUM, AMP_CPU, &ra));
    CHECK_OK(comm_allreduce(b, 64, AMP_F32, AMP_REDUCE_AVG, AMP_CPU, &rb));
    comm_progress();
    CHECK_OK(comm_wait(rb, "b"));
    CHECK_OK(comm_wait(ra, "a"));
    for (int i = 0; i < 64; i++) {
        CHECK(a[i] == (float)(i + 64 + i));
        CHECK(b[i] == 1.5f);
    }
}

static void test_broadcast_gather_scatter(void)
{
    amp_tensor *t = amp_zeros(AMP_SHAPE(5), AMP_BF16);
    uint16_t *h = amp_tensor_data(t);
    for (int i = 0; i < 5; i++)
        h[i] = (uint16_t)(rank ? 0xFFFF : 0x3F80 + i); /* rank 1's are NaN bits, overwritten */
    CHECK_OK(amp_dist_broadcast(t, 0));
    for (int i = 0; i < 5; i++)
        CHECK(h[i] == 0x3F80 + i);
    CHECK(amp_dist_broadcast(t, 2) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "rank 2");
    amp_tensor_free(t);

    uint16_t send[3] = {(uint16_t)(rank * 3), (uint16_t)(rank * 3 + 1), (uint16_t)(rank * 3 + 2)}, recv[6];
    CHECK_OK(comm_allgather(send, recv, 3, AMP_F16, AMP_CPU, NULL));
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(recv[i], i);

    float full[8], mine[4];
    for (int i = 0; i < 8; i++)
        full[i] = (float)(i * (rank + 1));
    CHECK_OK(comm_reduce_scatter(full, mine, 4, AMP_F32, AMP_CPU, NULL));
    for (int i = 0; i < 4; i++)
        CHECK(mine[i] == (float)(3 * (rank * 4 + i)));
}

/* One rank's failure before a collective is every rank's error, naming
 * it, with its status and message; several failing: the lowest is named
 * and the others counted. Nothing is left in flight: the world goes on. */
static void test_agree_names_the_failing_rank(void)
{
    CHECK_OK(comm_agree(AMP_OK, "the test"));
    amp_status mine = rank == 1 ? amp_set_error(AMP_ERR_MEMORY, "packing: out of memory") : AMP_OK;
    CHECK(comm_agree(mine, "the test") == AMP_ERR_MEMORY);
    CHECK_ERROR(AMP_ERR_MEMORY, "the test: rank 1 failed: packing: out of memory");
    amp_set_error(AMP_ERR_ARG, "rank %d's own reason", rank);
    CHECK(comm_agree(AMP_ERR_ARG, "both") == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "both: rank 0 failed (and at least one rank after it, up to rank 1): rank 0's own reason");
    CHECK(!comm_failed(NULL));
    float v[4] = {1, 2, 3, 4};
    CHECK_OK(comm_allreduce(v, 4, AMP_F32, AMP_REDUCE_SUM, AMP_CPU, NULL));
    CHECK(v[0] == 2 && v[3] == 8);
}

/* ------------------------------------------------- the world's end */

static int verdict_fails; /* this rank's failed checks in a --fail / --stall run */

static void expect(bool ok, const char *what, const char *msg)
{
    if (!ok) {
        verdict_fails++;
        fprintf(stderr, "test_comm: rank %d: %s: got \"%s\"\n", rank, what, msg ? msg : "");
    }
}

/* Rank 1 reports to rank 0 (plain MPI: ampc calls none after the world
 * ended), which prints one verdict for both and ends the job. */
static int end_run(const char *mode)
{
    int32_t fails = verdict_fails;
    if (rank == 1) {
        MPI_Send(&fails, 1, MPI_INT32_T, 0, 77, MPI_COMM_WORLD);
        sleep(60); /* ended with the job */
        return 1;
    }
    int32_t theirs = -1;
    MPI_Recv(&theirs, 1, MPI_INT32_T, 1, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("test_comm %s: %s\n", mode, fails == 0 && theirs == 0 ? "both ranks ok" : "FAILED");
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, fails == 0 && theirs == 0 ? 0 : 1);
    return 1;
}

/* After the world ended: every collective and finalize refuse at once,
 * with the message that ended it. */
static void expect_refusals(const char *needle)
{
    const char *why = NULL;
    expect(comm_failed(&why) && strstr(why, needle), "comm_failed", why);
    float v[2] = {1, 2};
    expect(comm_allreduce(v, 2, AMP_F32, AMP_REDUCE_SUM, AMP_CPU, NULL) == AMP_ERR_IO &&
               strstr(amp_last_error(), needle),
           "an all-reduce after the end", amp_last_error());
    expect(amp_dist_barrier() != AMP_OK && strstr(amp_last_error(), needle), "a barrier after the end",
           amp_last_error());
    expect(comm_agree(AMP_OK, "x") != AMP_OK && strstr(amp_last_error(), needle), "comm_agree after the end",
           amp_last_error());
    expect(amp_dist_finalize() != AMP_OK && strstr(amp_last_error(), needle) && amp_dist_is_initialized(),
           "finalize after the end", amp_last_error());
}

static int fail_run(void)
{
    static float buf[256]; /* alive to the end: the collective rank 1 never joins is never finished */
    CHECK_OK(comm_barrier());
    if (rank == 1) {
        CHECK_OK(comm_agree(AMP_OK, "the test"));
        amp_set_error(AMP_ERR_DEVICE, "the device failed after the agreement");
        amp_status st = comm_fail("the test's step");
        expect(st == AMP_ERR_IO && strstr(amp_last_error(), "dist: rank 1: the test's step: the device failed"),
               "comm_fail's own error", amp_last_error());
    } else {
        CHECK_OK(comm_agree(AMP_OK, "the test"));
        amp_status st = comm_allreduce(buf, 256, AMP_F32, AMP_REDUCE_SUM, AMP_CPU, NULL);
        expect(st == AMP_ERR_IO && strstr(amp_last_error(), "dist: rank 1: the test's step: the device failed"),
               "rank 0's all-reduce, rank 1 having failed", amp_last_error());
    }
    expect_refusals("rank 1: the test's step: the device failed");
    return end_run("--fail");
}

static int stall_run(void)
{
    static float buf[256];
    amp_dist_set_timeout(0.5);
    CHECK_OK(comm_barrier());
    if (rank == 1) {
        sleep(3); /* away: no MPI call while rank 0 waits */
        amp_status st = comm_allreduce(buf, 256, AMP_F32, AMP_REDUCE_SUM, AMP_CPU, NULL);
        expect(st == AMP_ERR_IO && strstr(amp_last_error(), "rank 0 timed out after 0.5 s waiting for") &&
                   strstr(amp_last_error(), "rank 1 did not answer"),
               "rank 1's all-reduce after rank 0's timeout", amp_last_error());
    } else {
        amp_status st = comm_allreduce(buf, 256, AMP_F32, AMP_REDUCE_SUM, AMP_CPU, NULL);
        expect(st == AMP_ERR_IO &&
                   strstr(amp_last_error(), "dist: rank 0 timed out after 0.5 s waiting for an all-reduce") &&
                   strstr(amp_last_error(), "rank 1 did not answer"),
               "rank 0's all-reduce without rank 1", amp_last_error());
    }
    expect_refusals("rank 0 timed out after 0.5 s");
    return end_run("--stall");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (*mode) {
        if (amp_dist_init(&argc, &argv) != AMP_OK || amp_dist_world_size() != 2) {
            fprintf(stderr, "test_comm %s: needs 2 ranks: %s\n", mode, amp_last_error());
            return 1;
        }
        rank = amp_dist_rank();
        world = amp_dist_world_size();
        if (strcmp(mode, "--fail") == 0)
            return fail_run();
        if (strcmp(mode, "--stall") == 0)
            return stall_run();
        fprintf(stderr, "test_comm: unknown mode %s\n", mode);
        return 1;
    }

    /* before init: a world of one */
    if (amp_dist_rank() != 0 || amp_dist_world_size() != 1 || amp_dist_is_initialized()) {
        fprintf(stderr, "the world before init is not one rank\n");
        return 1;
    }
    float v[3] = {1.5f, -2.0f, 3.25f}, g[3] = {0};
    if (comm_allreduce(v, 3, AMP_F32, AMP_REDUCE_SUM, AMP_CPU, NULL) != AMP_OK ||
        comm_allreduce(v, 3, AMP_F32, AMP_REDUCE_AVG, AMP_CPU, NULL) != AMP_OK ||
        comm_allgather(v, g, 3, AMP_F32, AMP_CPU, NULL) != AMP_OK || v[0] != 1.5f || v[1] != -2.0f ||
        v[2] != 3.25f || memcmp(v, g, sizeof v) != 0) {
        fprintf(stderr, "the collectives of a world of one are not the identity\n");
        return 1;
    }
    setenv("AMPC_DIST_TIMEOUT", "42", 1);
    amp_dist_set_timeout(7);
    if (comm_timeout() != 7) {
        fprintf(stderr, "amp_dist_set_timeout(7): %g\n", comm_timeout());
        return 1;
    }
    amp_dist_set_timeout(0); /* back to the environment's */
    if (comm_timeout() != 42) {
        fprintf(stderr, "amp_dist_set_timeout(0) with AMPC_DIST_TIMEOUT=42: %g\n", comm_timeout());
        return 1;
    }
    unsetenv("AMPC_DIST_TIMEOUT");
    amp_dist_set_timeout(0);
    dist_start(&argc, &argv);
    RUN(test_world);
    RUN(test_all_reduce);
    RUN(test_overlapped_requests);
    RUN(test_broadcast_gather_scatter);
    RUN(test_agree_names_the_failing_rank);
    int rc = dist_finish();
    if (amp_dist_world_size() != 1 || amp_dist_init(NULL, NULL) == AMP_OK ||
        !strstr(amp_last_error(), "already finalized")) {
        fprintf(stderr, "a second init after finalize: %s\n", amp_last_error());
        rc = 1;
    }
    return rc;
}
