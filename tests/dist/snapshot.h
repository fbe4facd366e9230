/*
 * snapshot.h - what the distributed tests (test_ddp.c, test_nccl_cuda.c,
 * zero_net.h) share to prove that a skipped step changed nothing: a host
 * copy of the parameters and Adam's two moments (on any device), compared
 * bit for bit (snap_unchanged: the step since the snapshot changed
 * nothing).
 * Header-only (static inline), beside harness.h.
 */
#ifndef AMPC_TESTS_DIST_SNAPSHOT_H
#define AMPC_TESTS_DIST_SNAPSHOT_H

#include "harness.h"

#include <stdlib.h>
#include <string.h>

enum { SNAP_MAXP = 64 };

/* t's elements as a new host f32 array (from any device); NULL when out of
 * memory. */
static inline float *copy_f32(const amp_tensor *t)
{
    float *c = calloc((size_t)amp_tensor_numel(t), sizeof *c);
    if (c)
        CHECK_OK(amp_tensor_copy_out(t, c, AMP_F32));
    return c;
}

/* Each parameter, its exp_avg and its exp_avg_sq (NULL where o has none). */
typedef struct {
    float *v[3 * SNAP_MAXP];
    int k;
} snapshot;

static inline void snap(snapshot *s, amp_tensor *const *p, int n, amp_optim *o)
{
    s->k = 0;
    CHECK(n <= SNAP_MAXP);
    for (int i = 0; i < n && i < SNAP_MAXP; i++) {
        s->v[s->k++] = copy_f32(p[i]);
        amp_tensor *m = amp_optim_state_tensor(o, i, "exp_avg"), *v = amp_optim_state_tensor(o, i, "exp_avg_sq");
        s->v[s->k++] = m ? copy_f32(m) : NULL;
        s->v[s->k++] = v ? copy_f32(v) : NULL;
    }
}

/* Whether every array of a and b is there and holds the same bits. */
static inline bool snap_equal(const snapshot *a, const snapshot *b, amp_tensor *const *p, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 3; j++)
            if (!a->v[3 * i + j] || !b->v[3 * i + j] ||
                memcmp(a->v[3 * i + j], b->v[3 * i + j], (size_t)amp_tensor_numel(p[i]) * 4) != 0)
                return false;
    return true;
}

static inline void snap_free(snapshot *s)
{
    for (int i = 0; i < s->k; i++)
        free(s->v[i]);
}

/* Whether p and o's moments still hold before's bits (a skipped step
 * changed nothing); frees before. */
static inline bool snap_unchanged(snapshot *before, amp_tensor *const *p, int n, amp_optim *o)
{
    snapshot after;
    snap(&after, p, n, o);
    bool same = snap_equal(before, &after, p, n);
    snap_free(&after);
    snap_free(before);
    return same;
}

#endif
