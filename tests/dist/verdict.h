/*
 * verdict.h - the end of a distributed test's main: its exit status is
 * failure when any rank's harness failed (each rank runs every test), so
 * mpirun's status says the same on every rank.
 */
#ifndef AMPC_TESTS_DIST_VERDICT_H
#define AMPC_TESTS_DIST_VERDICT_H

#include "comm/comm.h"

/* rc: this rank's harness_done(); 1 when any rank's was non-zero (or the
 * all-reduce failed), else 0. */
static inline int dist_verdict(int rc)
{
    int64_t f = rc != 0;
    if (comm_allreduce(&f, 1, AMP_I64, AMP_REDUCE_MAX, AMP_CPU, NULL) != AMP_OK)
        return 1;
    return f != 0;
}

#endif
