/*
 * test_comm.c (2 ranks, mpirun) - the world and the collectives under the
 * tensor API and the layer's own buffers (src/comm/comm.h): sums,
 * averages and maxima over the ranks against the values each rank knows
 * the other holds, broadcast, all-gather and reduce-scatter in rank order,
 * 16-bit data moved as bits, unsupported reductions refused with a
 * message, a world of one rank before init (the identity: an all-reduce
 * leaves its buffer, an all-gather copies), the timeout set and restored,
 * and no second init after finalize.
 */
#include "comm/comm.h"
#include "harness.h"
#include "verdict.h"
#include "tensor/tensor.h"

#include <stdlib.h>

static int rank, world;

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

int main(int argc, char **argv)
{
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
    if (amp_dist_init(&argc, &argv) != AMP_OK) {
        fprintf(stderr, "amp_dist_init: %s\n", amp_last_error());
        return 1;
    }
    amp_set_num_threads(1);
    rank = amp_dist_rank();
    world = amp_dist_world_size();
    RUN(test_world);
    RUN(test_all_reduce);
    RUN(test_overlapped_requests);
    RUN(test_broadcast_gather_scatter);
    int rc = dist_verdict(harness_done());
    if (amp_dist_finalize() != AMP_OK)
        rc = 1;
    if (amp_dist_world_size() != 1 || amp_dist_init(NULL, NULL) == AMP_OK ||
        !strstr(amp_last_error(), "already finalized")) {
        fprintf(stderr, "a second init after finalize: %s\n", amp_last_error());
        rc = 1;
    }
    return rc;
}
