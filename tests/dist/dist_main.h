/*
 * dist_main.h - the start and the end of a distributed test's main, the
 * same in each:
 *
 *   rank, world    this process's rank and the world's size
 *   dist_start     amp_dist_init, one kernel thread a rank, rank and world
 *   dist_verdict   the exit status: failure when any rank's harness failed
 *                  (each rank runs every test), so mpirun's status says
 *                  the same on every rank
 *   dist_finish    dist_verdict of harness_done(), then amp_dist_finalize
 *
 * Header-only (static inline), beside harness.h.
 */
#ifndef AMPC_TESTS_DIST_MAIN_H
#define AMPC_TESTS_DIST_MAIN_H

#include "harness.h"

#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>

static int rank, world;

/* When amp_dist_init fails, says why and ends the program. */
static inline void dist_start(int *argc, char ***argv)
{
    if (amp_dist_init(argc, argv) != AMP_OK) {
        fprintf(stderr, "amp_dist_init: %s\n", amp_last_error());
        exit(1);
    }
    amp_set_num_threads(1);
    rank = amp_dist_rank();
    world = amp_dist_world_size();
}

/* rc: this rank's harness_done(); 1 when any rank's was non-zero (or the
 * all-reduce failed), else 0. */
static inline int dist_verdict(int rc)
{
    int64_t f = rc != 0;
    if (comm_allreduce(&f, 1, AMP_I64, AMP_REDUCE_MAX, AMP_CPU, NULL) != AMP_OK)
        return 1;
    return f != 0;
}

/* main's exit status, after the tests: dist_verdict, and 1 when
 * amp_dist_finalize fails. */
static inline int dist_finish(void)
{
    int rc = dist_verdict(harness_done());
    if (amp_dist_finalize() != AMP_OK)
        rc = 1;
    return rc;
}

#endif
