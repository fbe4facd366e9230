/*
 * bench_parallel.c - the thread pool (amp_parallel_for) against an OpenMP
 * loop on the same work: regions of a fixed amount of arithmetic, split
 * into grains, back to back, on 1 and on 2 threads; microseconds per
 * region (median of --reps runs of --regions regions each). Run it beside
 * a busy loop on one core (bench/under_load.sh does for the step) to see
 * what a taken core costs each.
 *
 *   bench_parallel [--reps N] [--regions N]
 */
#include "base/base.h"
#include "base/parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define GRAINS 64
#define MAX_REPS 64

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* One grain: `iters` dependent multiply-adds on 8 lanes. */
static float grain_work(int64_t g, int64_t iters)
{
    float v[8];
    for (int l = 0; l < 8; l++)
        v[l] = (float)(g + l) * 1e-3f;
    for (int64_t i = 0; i < iters; i++)
        for (int l = 0; l < 8; l++)
            v[l] = v[l] * 0.999f + 0.001f;
    float s = 0;
    for (int l = 0; l < 8; l++)
        s += v[l];
    return s;
}

typedef struct {
    int64_t iters;
    float out[GRAINS];
} job;

static void pool_fn(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    job *j = vj;
    for (int64_t g = lo; g < hi; g++)
        j->out[g] = grain_work(g, j->iters);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median over reps of the mean time of one region, in microseconds. */
static double time_regions(bool omp, int threads, int64_t iters, int reps, int regions)
{
    double t[MAX_REPS];
    job j = {.iters = iters};
    amp_set_num_threads(threads);
    for (int r = 0; r < reps; r++) {
        double t0 = now_us();
        for (int k = 0; k < regions; k++) {
            if (!omp) {
                amp_parallel_for(GRAINS, 1, pool_fn, &j);
                continue;
            }
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
            for (int64_t g = 0; g < GRAINS; g++)
                j.out[g] = grain_work(g, iters);
#endif
        }
        t[r] = (now_us() - t0) / regions;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    return t[reps / 2];
}

int main(int argc, char **argv)
{
    int reps = 5, regions = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--regions"))
            regions = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_parallel: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || regions < 1) {
        fprintf(stderr, "bench_parallel: --reps 1..%d, --regions >= 1\n", MAX_REPS);
        return 2;
    }
    /* calibrate: iterations of one grain per microsecond on one thread
     * (the fastest of 9 tries: a try that lost its core would make the
     * work too small) */
    double best = 1e30;
    for (int i = 0; i < 9; i++) {
        double t0 = now_us();
        volatile float sink = grain_work(i, 200000);
        (void)sink;
        double t = now_us() - t0;
        best = t < best ? t : best;
    }
    double per_us = 200000 / best;
    printf("us per region of %d grains (median of %d x %d regions)\n\n", GRAINS, reps, regions);
    printf("| work/region | pool 1t | pool 2t | pool 2t/1t | OpenMP 1t | OpenMP 2t | OpenMP 2t/1t |\n");
    printf("|---|---|---|---|---|---|---|\n");
    static const double work_us[] = {20, 200, 2000};
    for (int w = 0; w < 3; w++) {
        int64_t iters = (int64_t)(work_us[w] * per_us / GRAINS);
        int n = work_us[w] >= 2000 ? regions / 10 + 1 : regions;
        double p1 = time_regions(false, 1, iters, reps, n), p2 = time_regions(false, 2, iters, reps, n);
#ifdef _OPENMP
        double o1 = time_regions(true, 1, iters, reps, n), o2 = time_regions(true, 2, iters, reps, n);
        printf("| %.0f us | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", work_us[w], p1, p2, p2 / p1, o1, o2,
               o2 / o1);
#else
        printf("| %.0f us | %.1f | %.1f | %.2f | - | - | - |\n", work_us[w], p1, p2, p2 / p1);
#endif
    }
    return 0;
}
