/*
 * test_flush_denormal.c - amp_set_flush_denormal (torch.set_flush_denormal):
 * a subnormal product flushes to zero, and a subnormal input reads as
 * zero, on the calling thread, on every worker of the thread pool (those
 * made before the call and after it, whoever made them) and on OpenMP's
 * team; off again restores both. The dtype conversions give the same bits
 * either way, and the grad scaler still finds inf/NaN and unscales.
 */
#include "harness.h"
#include "base/base.h"
#include "base/flush.h"
#include "base/parallel.h"
#include "tensor/tensor.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_T 8

/* 1e-30 * 1e-10 is 1e-40, below f32's smallest normal (1.18e-38): FTZ
 * writes 0. 1e-40 itself, times 1, is a subnormal input: DAZ reads 0. */
typedef struct {
    float product, passed;
} probe;

static probe measure(void)
{
    volatile float a = 1e-30f, b = 1e-10f, s = 1e-40f, one = 1.0f;
    return (probe){a * b, s * one};
}

/* Read as bits: with DAZ on, this thread's own comparisons would take a
 * subnormal for zero. */
static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool flushed(probe p) { return bits(p.product) == 0 && bits(p.passed) == 0; }
/* (1e-30f * 1e-10f folded by the compiler: IEEE arithmetic, no flushing) */
static bool kept(probe p) { return bits(p.product) == bits(1e-30f * 1e-10f) && bits(p.passed) == bits(1e-40f); }

/* ---- every thread of a region: one grain each, held until all arrive */

typedef struct {
    int width;
    _Atomic int arrived;
    probe seen[MAX_T];
    bool mode[MAX_T], ran[MAX_T];
} region;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void one_grain(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)lo;
    (void)hi;
    region *r = ctx;
    /* Held until every thread of the region has a grain, so that each
     * tid measures (10 s at most: a thread that never came fails below). */
    atomic_fetch_add(&r->arrived, 1);
    for (double t0 = now_s(); atomic_load(&r->arrived) < r->width && now_s() - t0 < 10;)
        sched_yield();
    if (tid >= 0 && tid < MAX_T) {
        r->seen[tid] = measure();
        r->mode[tid] = amp_flush_denormal();
        r->ran[tid] = true;
    }
}

/* Runs a region of amp_threads() grains; its width in *width. */
static region run_region(void)
{
    region r = {0};
    r.width = amp_parallel_width(amp_threads(), 1);
    atomic_store(&r.arrived, 0);
    amp_parallel_for(r.width, 1, one_grain, &r);
    return r;
}

/* Whether tids [from, width) ran and each flushed (want) or kept. */
static void check_region(const region *r, int from, bool want, const char *when)
{
    CHECK_MSG(r->width == 3, "%s: a region of %d threads, not 3", when, r->width);
    for (int t = from; t < r->width && t < MAX_T; t++) {
        CHECK_MSG(r->ran[t], "%s: thread %d ran no grain", when, t);
        CHECK_MSG(want ? flushed(r->seen[t]) : kept(r->seen[t]), "%s: thread %d: 1e-30f * 1e-10f = %g, 1e-40f * 1 = %g",
                  when, t, (double)r->seen[t].product, (double)r->seen[t].passed);
        CHECK_MSG(r->mode[t] == want, "%s: thread %d reports flushing %s", when, t, r->mode[t] ? "on" : "off");
    }
}

static bool can_flush(void)
{
    if (!FLUSH_MODE_KNOWN) {
        CHECK_ERROR(amp_set_flush_denormal(true), "cannot flush");
        CHECK_OK(amp_set_flush_denormal(false));
        harness_skip("no flush-subnormals mode on this architecture");
        return false;
    }
    return true;
}

static void test_the_calling_thread_flushes_and_off_restores(void)
{
    CHECK(kept(measure()));
    CHECK(!amp_flush_denormal());
    CHECK_OK(amp_set_flush_denormal(true));
    CHECK(amp_flush_denormal());
    probe p = measure();
    CHECK_MSG(flushed(p), "on: %g, %g", (double)p.product, (double)p.passed);
    CHECK_OK(amp_set_flush_denormal(true)); /* twice: still on */
    CHECK(flushed(measure()));
    CHECK_OK(amp_set_flush_denormal(false));
    CHECK(!amp_flush_denormal());
    p = measure();
    CHECK_MSG(kept(p), "off again: %g, %g", (double)p.product, (double)p.passed);
}

static void test_every_pool_worker_flushes(void)
{
    amp_set_num_threads(3);
    region r = run_region(); /* the workers exist, made with flushing off */
    check_region(&r, 0, false, "before");
    CHECK_OK(amp_set_flush_denormal(true));
    r = run_region();
    check_region(&r, 0, true, "on");
    CHECK_OK(amp_set_flush_denormal(false));
    r = run_region();
    check_region(&r, 0, false, "off again");
    amp_set_num_threads(0);
}

/* A user thread that runs a region without setting the mode itself. */
static void *region_thread(void *arg)
{
    *(region *)arg = run_region();
    return NULL;
}

static void test_workers_follow_the_setting_not_their_maker(void)
{
    /* The thread count changes, so the next region re-makes the workers,
     * from a thread whose own registers do not flush: they take the
     * library's setting all the same; the thread itself (tid 0) keeps its
     * own mode, which is per thread (as PyTorch's). */
    amp_set_num_threads(4);
    region r = run_region(); /* 3 workers */
    CHECK_OK(amp_set_flush_denormal(true));
    amp_set_num_threads(3);
    memset(&r, 0, sizeof r);
    pthread_t th;
    flush_thread_set(false); /* the thread below copies this thread's registers */
    CHECK_EQ_INT(pthread_create(&th, NULL, region_thread, &r), 0);
    pthread_join(th, NULL);
    CHECK(r.ran[0] && kept(r.seen[0]) && !r.mode[0]);
    check_region(&r, 1, true, "workers made by a thread that does not flush");
    CHECK_OK(amp_set_flush_denormal(false));
    amp_set_num_threads(0);
}

#ifdef _OPENMP
/* Each thread of a 3-thread OpenMP team measures: all flushed (want), or
 * all kept. */
static void check_openmp_team(bool want, const char *when)
{
    probe seen[MAX_T];
    int n = 0;
#pragma omp parallel num_threads(3)
    {
        int t = omp_get_thread_num();
        if (t < MAX_T)
            seen[t] = measure();
#pragma omp single
        n = omp_get_num_threads();
    }
    CHECK_MSG(n == 3, "%s: an OpenMP team of %d threads, not 3", when, n);
    for (int t = 0; t < n && t < MAX_T; t++)
        CHECK_MSG(want ? flushed(seen[t]) : kept(seen[t]), "%s: OpenMP thread %d: %g, %g", when, t,
                  (double)seen[t].product, (double)seen[t].passed);
}
#endif

static void test_openmp_team_flushes(void)
{
#ifdef _OPENMP
    amp_set_num_threads(3); /* (OpenMP's team size too) */
    check_openmp_team(false, "before"); /* the team exists, made with flushing off */
    CHECK_OK(amp_set_flush_denormal(true));
    check_openmp_team(true, "on");
    CHECK_OK(amp_set_flush_denormal(false));
    check_openmp_team(false, "off again");
    amp_set_num_threads(0);
#else
    harness_skip("built without OpenMP");
#endif
}

/* amp_convert's bits between f32 and f16 / bf16 with flushing on and
 * off: for all 65536 16-bit patterns widened, and for f32 patterns across
 * every exponent (subnormals included) narrowed. The conversions work on
 * the bits, so a bf16 subnormal widens to the f32 subnormal either way;
 * only arithmetic on it then reads 0. */
static void test_conversions_keep_their_bits(void)
{
    enum { N16 = 65536, N32 = 1 << 20 };
    uint16_t *h = malloc(N16 * sizeof *h), *n_off = malloc(N32 * sizeof *n_off), *n_on = malloc(N32 * sizeof *n_on);
    uint32_t *w_off = malloc(N16 * 4), *w_on = malloc(N16 * 4), *f = malloc(N32 * 4);
    CHECK(h && n_off && n_on && w_off && w_on && f);
    if (!(h && n_off && n_on && w_off && w_on && f))
        goto out;
    for (int i = 0; i < N16; i++)
        h[i] = (uint16_t)i;
    for (int i = 0; i < N32; i++) /* 4096 patterns from each 2^-8 of the range, and the lowest ones */
        f[i] = i < 4096 ? (uint32_t)i : (uint32_t)i * 4093u;
    static const amp_dtype half[2] = {AMP_F16, AMP_BF16};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(amp_set_flush_denormal(false));
        amp_convert(h, half[k], w_off, AMP_F32, N16);
        amp_convert(f, AMP_F32, n_off, half[k], N32);
        CHECK_OK(amp_set_flush_denormal(true));
        amp_convert(h, half[k], w_on, AMP_F32, N16);
        amp_convert(f, AMP_F32, n_on, half[k], N32);
        CHECK_OK(amp_set_flush_denormal(false));
        int bad = 0;
        for (int i = 0; i < N16 && bad < 3; i++) {
            bad += w_on[i] != w_off[i];
            CHECK_MSG(w_on[i] == w_off[i], "%s 0x%04x widens to 0x%08x flushing, 0x%08x not",
                      amp_dtype_name(half[k]), i, w_on[i], w_off[i]);
        }
        for (int i = 0; i < N32 && bad < 3; i++) {
            bad += n_on[i] != n_off[i];
            CHECK_MSG(n_on[i] == n_off[i], "f32 0x%08x narrows to %s 0x%04x flushing, 0x%04x not", f[i],
                      amp_dtype_name(half[k]), n_on[i], n_off[i]);
        }
    }
    CHECK(w_off[1] == 1u << 16); /* bf16's smallest subnormal is f32's 2^-133, kept */
out:
    free(h), free(n_off), free(n_on), free(w_off), free(w_on), free(f);
}

/* One scaled step of SGD on a parameter whose gradient is g (f32, n):
 * whether the scaler skipped it, the unscaled gradient in out. */
static bool scaled_step(const float *g, int n, float *out)
{
    amp_tensor *p = amp_zeros(AMP_SHAPE(n), AMP_F32);
    amp_optim *o = amp_optim_sgd(&p, 1, amp_sgd_defaults());
    amp_scaler *sc = amp_scaler_new(amp_scaler_defaults()); /* scale 65536 */
    bool skipped = false;
    CHECK(p && o && sc);
    if (p && o && sc) {
        amp_tensor *loss = amp_zeros(AMP_SHAPE(), AMP_F32);
        CHECK(amp_scaler_scale(sc, loss) != NULL); /* (the scaler's step starts at a scaled loss) */
        amp_tensor_free(loss);
        amp_temps_free();
        p->grad = amp_from_data(AMP_SHAPE(n), AMP_F32, g);
        CHECK_OK(amp_scaler_unscale(sc, o));
        memcpy(out, tensor_f32(p->grad), (size_t)n * sizeof *out);
        CHECK_OK(amp_scaler_step(sc, o, &skipped));
        CHECK_OK(amp_scaler_update(sc));
    }
    amp_scaler_free(sc);
    amp_optim_free(o);
    amp_tensor_free(p);
    return skipped;
}

static void test_the_grad_scaler_still_finds_inf_and_unscales(void)
{
    enum { N = 5 };
    /* Scaled gradients (the scale is 2^16): normal ones, and one whose
     * unscaled value, 2^-124 / 2^16 = 2^-140, is subnormal. */
    const float g[N] = {65536.0f, -3.0f, 1e-20f, 0x1p-124f, 7.5e30f};
    float off[N], on[N];
    CHECK(!scaled_step(g, N, off));
    CHECK_OK(amp_set_flush_denormal(true));
    CHECK(!scaled_step(g, N, on));
    for (int i = 0; i < N; i++)
        if (i != 3)
            CHECK_MSG(memcmp(&on[i], &off[i], 4) == 0, "gradient %d: %a flushing, %a not", i, (double)on[i],
                      (double)off[i]);
    CHECK(bits(off[0]) == bits(1.0f) && bits(off[3]) == bits(0x1p-140f)); /* kept without flushing */
    CHECK(bits(on[3]) == 0); /* flushed: PyTorch's semantics too */
    const float bad[3][2] = {{1.0f, INFINITY}, {-INFINITY, 0.0f}, {NAN, 1e-40f}};
    for (int k = 0; k < 3; k++)
        CHECK_MSG(scaled_step(bad[k], 2, on), "case %d: an inf/NaN gradient was not found", k);
    CHECK_OK(amp_set_flush_denormal(false));
}

int main(void)
{
    RUN_IF(can_flush, test_the_calling_thread_flushes_and_off_restores);
    RUN_IF(can_flush, test_every_pool_worker_flushes);
    RUN_IF(can_flush, test_workers_follow_the_setting_not_their_maker);
    RUN_IF(can_flush, test_openmp_team_flushes);
    RUN_IF(can_flush, test_conversions_keep_their_bits);
    RUN_IF(can_flush, test_the_grad_scaler_still_finds_inf_and_unscales);
    return harness_done();
}
