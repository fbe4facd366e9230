/*
 * test_parallel.c - the thread pool behind amp_parallel_for (base/parallel.h):
 * every index covered exactly once in whole grains, tids below the width,
 * nested calls inline, thread counts changed between calls (1, 2, 7 on any
 * number of cores), two user threads calling at once, many tiny regions,
 * a fork, and reductions (a fixed split of the test's own, and the
 * kernels converted to the pool: clip_grad_norm's grad_sumsq and
 * clip_by_sumsq, softmax, cross_entropy, dropout, pooling) the same bits on
 * 1, 2 and 7 threads.
 *
 * Checks inside the ranges run on pool workers, so they count failures in
 * atomics that the calling thread then checks.
 */
#include "harness.h"

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/base.h"
#include "base/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- coverage ----------------------------------------------------------- */

typedef struct {
    int64_t n, grain;
    int width;
    _Atomic int *hits;
    _Atomic int bad_range, bad_tid, calls;
} cover_ctx;

static void cover_fn(void *vc, int64_t lo, int64_t hi, int tid)
{
    cover_ctx *c = vc;
    atomic_fetch_add(&c->calls, 1);
    /* whole grains starting on a grain, or the caller's one inline call */
    bool whole = lo % c->grain == 0 && lo < hi && hi <= c->n && (hi - lo == c->grain || hi == c->n);
    bool inline_all = lo == 0 && hi == c->n;
    if (!whole && !inline_all)
        atomic_fetch_add(&c->bad_range, 1);
    if (tid < 0 || tid >= c->width || tid != amp_parallel_tid() || tid != amp_thread_num() || !amp_in_parallel())
        atomic_fetch_add(&c->bad_tid, 1);
    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

/* Runs one loop of n in grains and checks each index was hit once. */
static bool cover_once(int64_t n, int64_t grain)
{
    cover_ctx c = {.n = n, .grain = grain < 1 ? 1 : grain, .width = amp_parallel_width(n, grain)};
    c.hits = calloc((size_t)(n > 0 ? n : 1), sizeof *c.hits);
    if (!c.hits)
        return false;
    amp_parallel_for(n, grain, cover_fn, &c);
    bool ok = atomic_load(&c.bad_range) == 0 && atomic_load(&c.bad_tid) == 0;
    for (int64_t i = 0; i < n; i++)
        ok = ok && atomic_load(&c.hits[i]) == 1;
    if (n <= 0)
        ok = ok && atomic_load(&c.calls) == 0;
    free(c.hits);
    return ok;
}

static void test_coverage(void)
{
    static const int threads[] = {1, 2, 7, 2, 1, 3};
    static const int64_t ns[] = {0, -5, 1, 2, 3, 7, 64, 1000, 4099};
    static const int64_t grains[] = {0, 1, 2, 3, 16, 1000, 5000};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        amp_set_num_threads(threads[t]);
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t b = 0; b < sizeof grains / sizeof *grains; b++)
                CHECK_MSG(cover_once(ns[a], grains[b]), "threads %d, n %lld, grain %lld", threads[t],
                          (long long)ns[a], (long long)grains[b]);
    }
    amp_set_num_threads(0);
}

static void test_width(void)
{
    amp_set_num_threads(7);
    CHECK_EQ_INT(amp_parallel_width(100, 1), 7);
    CHECK_EQ_INT(amp_parallel_width(100, 25), 4);
    CHECK_EQ_INT(amp_parallel_width(100, 100), 1);
    CHECK_EQ_INT(amp_parallel_width(0, 1), 1);
    CHECK_EQ_INT(amp_parallel_width(5, 0), 5);
    amp_set_num_threads(1);
    CHECK_EQ_INT(amp_parallel_width(100, 1), 1);
    amp_set_num_threads(0);
    CHECK_EQ_INT(amp_get_num_threads(), (int)sysconf(_SC_NPROCESSORS_ONLN));
}

/* ---- nesting ------------------------------------------------------------ */

typedef struct {
    _Atomic int bad, inner_calls;
    _Atomic int64_t covered;
} nest_ctx;

static void inner_fn(void *vc, int64_t lo, int64_t hi, int tid)
{
    nest_ctx *c = vc;
    atomic_fetch_add(&c->inner_calls, 1);
    if (lo != 0 || hi != 100 || tid != 0 || amp_parallel_tid() != 0)
        atomic_fetch_add(&c->bad, 1);
}

static void outer_fn(void *vc, int64_t lo, int64_t hi, int tid)
{
    nest_ctx *c = vc;
    if (amp_parallel_width(100, 1) != 1 || amp_threads() != 1)
        atomic_fetch_add(&c->bad, 1);
    for (int64_t i = lo; i < hi; i++)
        amp_parallel_for(100, 1, inner_fn, c); /* inline: one call (0, 100, 0) */
    /* back in the outer range, its tid again */
    if (amp_parallel_tid() != tid || !amp_in_parallel())
        atomic_fetch_add(&c->bad, 1);
    atomic_fetch_add(&c->covered, hi - lo);
}

static void test_nesting(void)
{
    for (int t = 1; t <= 7; t += 3) {
        amp_set_num_threads(t);
        nest_ctx c = {0};
        amp_parallel_for(40, 1, outer_fn, &c);
        CHECK_EQ_INT(atomic_load(&c.bad), 0);
        CHECK_EQ_INT(atomic_load(&c.inner_calls), 40);
        CHECK_EQ_INT((int)atomic_load(&c.covered), 40);
        CHECK(!amp_in_parallel());
        CHECK_EQ_INT(amp_parallel_tid(), 0);
    }
    amp_set_num_threads(0);
}

/* ---- concurrency and stress --------------------------------------------- */

static void *caller_main(void *arg)
{
    _Atomic int *bad = arg;
    for (int r = 0; r < 2000; r++)
        if (!cover_once(37 + r % 50, 1 + r % 4))
            atomic_fetch_add(bad, 1);
    return NULL;
}

static void test_concurrent_callers(void)
{
    amp_set_num_threads(2);
    _Atomic int bad = 0;
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, caller_main, &bad) == 0);
    CHECK(pthread_create(&b, NULL, caller_main, &bad) == 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK_EQ_INT(atomic_load(&bad), 0);
    amp_set_num_threads(0);
}

static void add_fn(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    atomic_fetch_add((_Atomic int64_t *)vc, hi - lo);
}

static void test_tiny_regions(void)
{
    static const int threads[] = {2, 7};
    for (int t = 0; t < 2; t++) {
        amp_set_num_threads(threads[t]);
        _Atomic int64_t sum = 0;
        int64_t want = 0;
        for (int r = 0; r < 100000; r++) {
            amp_parallel_for(2 + r % 3, 1, add_fn, &sum);
            want += 2 + r % 3;
        }
        CHECK_EQ_INT((int)atomic_load(&sum), (int)want);
    }
    amp_set_num_threads(0);
}

static void test_fork(void)
{
    amp_set_num_threads(2);
    CHECK(cover_once(1000, 7)); /* the parent's workers exist */
    pid_t pid = fork();
    if (pid == 0) /* the child starts a pool of its own */
        _exit(cover_once(1000, 7) && cover_once(5000, 3) ? 0 : 1);
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cover_once(1000, 7));
    amp_set_num_threads(0);
}

/* ---- reductions: the same bits on any number of threads ------------------ */

#define RED_N 300000
#define RED_GRAIN 1000

typedef struct {
    const float *x;
    float *part; /* one per grain: the fixed split */
} red_ctx;

static void red_fn(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    red_ctx *c = vc;
    for (int64_t g0 = lo; g0 < hi; g0 += RED_GRAIN) {
        float s = 0;
        int64_t g1 = hi - g0 < RED_GRAIN ? hi : g0 + RED_GRAIN;
        for (int64_t i = g0; i < g1; i++)
            s += c->x[i] * c->x[i];
        c->part[g0 / RED_GRAIN] = s;
    }
}

static float reduce_on(int threads, const float *x)
{
    amp_set_num_threads(threads);
    float part[(RED_N + RED_GRAIN - 1) / RED_GRAIN];
    red_ctx c = {x, part};
    amp_parallel_for(RED_N, RED_GRAIN, red_fn, &c);
    float s = 0;
    for (size_t g = 0; g < sizeof part / sizeof *part; g++)
        s += part[g];
    return s;
}

static float *random_floats(int64_t n, uint64_t key)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; x && i < n; i += 4) {
        uint32_t r[4];
        amp_philox(key, 0, (uint64_t)i / 4, r);
        for (int q = 0; q < 4 && i + q < n; q++)
            x[i + q] = amp_u32_to_unit(r[q]) * 4.0f - 2.0f;
    }
    return x;
}

static void test_reduction_bits(void)
{
    float *x = random_floats(RED_N, 1);
    CHECK(x != NULL);
    if (!x)
        return;
    float one = reduce_on(1, x);
    for (int rep = 0; rep < 20; rep++) {
        float two = reduce_on(2, x), seven = reduce_on(7, x);
        CHECK(memcmp(&one, &two, sizeof one) == 0);
        CHECK(memcmp(&one, &seven, sizeof one) == 0);
    }
    free(x);
    amp_set_num_threads(0);
}

/* The converted kernels on 1, 2 and 7 threads: outputs compared bitwise. */
static void kernels_on(int threads, const float *x, void *out[6], int64_t n)
{
    amp_set_num_threads(threads);
    /* clip_grad_norm: the total (a reduction) and the scaled gradients */
    float *g = malloc((size_t)n * sizeof *g);
    memcpy(g, x, (size_t)n * sizeof *g);
    be_buf b = {g, n, AMP_F32};
    double *total = malloc(sizeof *total), ss;
    CHECK_OK(cpu_grad_sumsq(&b, 1, &ss));
    CHECK_OK(cpu_clip_by_sumsq(&b, 1, &ss, 1, 1.0, total, NULL));
    out[0] = total;
    out[1] = g;
    /* softmax over rows of 1000, and along a middle dim */
    float *y = malloc((size_t)n * sizeof *y);
    CHECK_OK(cpu_softmax(x, AMP_F32, y, AMP_F32, n / 1000, 1000, 1, false));
    out[2] = y;
    float *y2 = malloc((size_t)n * sizeof *y2);
    CHECK_OK(cpu_softmax(x, AMP_F32, y2, AMP_BF16, n / 3000, 10, 300, true));
    out[3] = y2;
    /* cross_entropy: per-row losses summed in row order */
    int32_t *labels = malloc((size_t)(n / 500) * sizeof *labels);
    for (int64_t i = 0; i < n / 500; i++)
        labels[i] = (int32_t)(i * 7 % 500);
    float *loss = malloc(sizeof *loss), *stats = malloc((size_t)(n / 500) * 2 * sizeof *stats), count;
    CHECK_OK(cpu_cross_entropy(x, AMP_F32, labels, AMP_I32, n / 500, 500, -100, stats, &count, loss, AMP_F32));
    out[4] = loss;
    free(labels);
    free(stats);
    /* dropout: masks by position */
    float *d = malloc((size_t)n * sizeof *d);
    CHECK_OK(cpu_dropout(x, d, AMP_F32, n, 0.3, 42, 0));
    out[5] = d;
}

static void test_kernel_bits(void)
{
    const int64_t n = 300000;
    float *x = random_floats(n, 2);
    CHECK(x != NULL);
    if (!x)
        return;
    static const size_t bytes[6] = {sizeof(double), 300000 * 4, 300000 * 4, 300000 * 2, sizeof(float), 300000 * 4};
    void *ref[6], *got[6];
    kernels_on(1, x, ref, n);
    static const int threads[] = {2, 7, 2};
    for (int t = 0; t < 3; t++) {
        kernels_on(threads[t], x, got, n);
        for (int k = 0; k < 6; k++) {
            CHECK_MSG(memcmp(ref[k], got[k], bytes[k]) == 0, "kernel output %d on %d threads differs from 1 thread",
                      k, threads[t]);
            free(got[k]);
        }
    }
    for (int k = 0; k < 6; k++)
        free(ref[k]);
    free(x);
    amp_set_num_threads(0);
}

int main(void)
{
    RUN(test_coverage);
    RUN(test_width);
    RUN(test_nesting);
    RUN(test_concurrent_callers);
    RUN(test_tiny_regions);
    RUN(test_fork);
    RUN(test_reduction_bits);
    RUN(test_kernel_bits);
    return harness_done();
}
