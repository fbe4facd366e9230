/*
 * parallel.c - amp_parallel_for (see parallel.h).
 *
 * First version: OpenMP underneath (dynamic schedule over grains). To be
 * replaced by the library's own pool.
 */
#include "base/parallel.h"

#include "base/base.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static _Thread_local int in_region; /* depth of amp_parallel_for on this thread */
static _Thread_local int region_tid;

bool amp_in_parallel(void) { return in_region > 0; }

int amp_parallel_width(int64_t n, int64_t grain)
{
    if (grain < 1)
        grain = 1;
    int64_t grains = (n + grain - 1) / grain;
    int t = amp_threads();
    if (in_region || grains <= 1 || t <= 1)
        return 1;
    return grains < t ? (int)grains : t;
}

void amp_parallel_for(int64_t n, int64_t grain, amp_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int w = amp_parallel_width(n, grain);
    if (w <= 1) {
        int saved = region_tid;
        in_region++;
        region_tid = 0;
        fn(ctx, 0, n, 0);
        region_tid = saved;
        in_region--;
        return;
    }
    int64_t grains = (n + grain - 1) / grain;
    (void)grains;
#ifdef _OPENMP
#pragma omp parallel num_threads(w)
    {
        int tid = omp_get_thread_num();
        in_region++;
        region_tid = tid;
#pragma omp for schedule(dynamic, 1)
        for (int64_t g = 0; g < grains; g++) {
            int64_t lo = g * grain, hi = n - lo < grain ? n : lo + grain;
            fn(ctx, lo, hi, tid);
        }
        in_region--;
    }
#else
    in_region++;
    fn(ctx, 0, n, 0);
    in_region--;
#endif
}

/* The calling thread's tid in the amp_parallel_for it is in (0 outside). */
int amp_parallel_tid(void) { return in_region ? region_tid : 0; }
