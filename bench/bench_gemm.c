/*
 * bench_gemm.c - how fast the CPU GEMM runs against what the core can do.
 *
 * Measures, in one program:
 *   - the peaks: a register-only loop of independent f32 FMA chains, of
 *     VDPBF16PS chains (AVX512-BF16) and of TDPBF16PS tiles (AMX-BF16), on
 *     1 and 2 threads;
 *   - gemm_f32 and gemm_lowp(bf16 x bf16 -> bf16) on square n x n x n
 *     products, n = 256 .. 2048, 1 and 2 threads, on every bf16 path this
 *     CPU has (widening to f32, VDPBF16PS, AMX), each as GFLOP/s and as a
 *     fraction of its own instruction's peak.
 * Prints a table and writes the numbers as JSON (bench_gemm.json, or the
 * path after --json). Each figure is the best of --reps runs (default 5):
 * the machine may be shared, so the load average is printed and the
 * numbers are noisy; compare runs taken under similar load.
 *
 * Build (not a test; CMake target bench_gemm), or by hand from the
 * repository root after building the library in build/:
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/bench_gemm.c build/libampc.a -lz -lm -o bench_gemm
 * Run: ./bench_gemm [--reps N] [--max-n N] [--json PATH]
 */
#include "backend/cpu/gemm.h"
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---------------------------------------------------------------- peaks */

#define CHAINS 24
#define PEAK_ITERS 4000000L

#if defined(__x86_64__)
/* CHAINS independent accumulators, so latency never limits throughput. */
__attribute__((target("avx512f,fma"), noinline)) static float fma_loop(long iters)
{
    __m512 c[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        c[i] = _mm512_set1_ps((float)i);
    __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++)
            c[i] = _mm512_fmadd_ps(c[i], a, b);
        __asm__ volatile("" : "+v"(a)); /* keeps the loop from being folded */
    }
    __m512 s = c[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, c[i]);
    return _mm512_reduce_add_ps(s);
}

#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10)
__attribute__((target("avx512f,avx512bf16"), noinline)) static float dot_loop(long iters)
{
    __m512 c[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        c[i] = _mm512_set1_ps((float)i);
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3a803a80);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++)
            c[i] = _mm512_dpbf16_ps(c[i], a, b);
        __asm__ volatile("" : "+v"(a));
    }
    __m512 s = c[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, c[i]);
    return _mm512_reduce_add_ps(s);
}
#define HAVE_DOT_LOOP 1
#endif

#if defined(__linux__) && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
/* Four independent 16 x 16 accumulators, A and B tiles loaded once. */
__attribute__((target("amx-tile,amx-bf16"), noinline)) static void amx_loop(long iters, float *out)
{
    static _Alignas(64) uint16_t ab[512];
    for (int i = 0; i < 512; i++)
        ab[i] = 0x3a80;
    struct {
        uint8_t palette, start, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.colsb[t] = 64, cfg.rows[t] = 16;
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    for (long k = 0; k < iters; k++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
}
#define HAVE_AMX_LOOP 1
#endif
#endif

typedef enum { PEAK_FMA, PEAK_DOT, PEAK_AMX } peak_kind;
static double peak(peak_kind kind, int nt, int reps);

/* Raises peaks[kind][nt - 1] to this measurement where higher; prints. */
static void measure_peaks(double peaks[3][2], unsigned f, bool dot_ok, bool amx_ok)
{
    for (int nt = 1; nt <= 2; nt++) {
        double m[3] = {0, 0, 0};
        if (f & AMP_CPU_AVX512F)
            m[PEAK_FMA] = peak(PEAK_FMA, nt, 3);
#ifdef HAVE_DOT_LOOP
        if (dot_ok)
            m[PEAK_DOT] = peak(PEAK_DOT, nt, 3);
#endif
#ifdef HAVE_AMX_LOOP
        if (amx_ok)
            m[PEAK_AMX] = peak(PEAK_AMX, nt, 3);
#endif
        (void)dot_ok, (void)amx_ok;
        printf("peak, %d thread%s: f32 FMA %6.0f  VDPBF16PS %6.0f  AMX TDPBF16PS %6.0f GFLOP/s\n", nt,
               nt > 1 ? "s" : " ", m[PEAK_FMA], m[PEAK_DOT], m[PEAK_AMX]);
        for (int k = 0; k < 3; k++)
            if (m[k] > peaks[k][nt - 1])
                peaks[k][nt - 1] = m[k];
    }
}

/* Best GFLOP/s of reps runs of the kind's loop on nt threads at once. */
static double peak(peak_kind kind, int nt, int reps)
{
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now(), flops = 0;
#pragma omp parallel num_threads(nt)
        {
#if defined(__x86_64__)
            float out[256];
            if (kind == PEAK_FMA)
                sink = fma_loop(PEAK_ITERS);
#ifdef HAVE_DOT_LOOP
            if (kind == PEAK_DOT)
                sink = dot_loop(PEAK_ITERS);
#endif
#ifdef HAVE_AMX_LOOP
            if (kind == PEAK_AMX) {
                amx_loop(PEAK_ITERS / 16, out);
                sink = out[0];
            }
#endif
            (void)out;
#endif
        }
        double t = now() - t0;
        /* per iteration: 24 zmm FMAs of 32 flops; 24 VDPBF16PS of 64;
         * 4 TDPBF16PS of 16 x 16 x 32 x 2 */
        if (kind == PEAK_FMA)
            flops = (double)PEAK_ITERS * CHAINS * 32;
        else if (kind == PEAK_DOT)
            flops = (double)PEAK_ITERS * CHAINS * 64;
        else
            flops = (double)(PEAK_ITERS / 16) * 4 * 16 * 16 * 32 * 2;
        double g = (double)nt * flops / t / 1e9;
        if (g > best)
            best = g;
    }
    (void)sink;
    return best;
}

/* ----------------------------------------------------------------- GEMM */

typedef enum { RUN_F32, RUN_WIDEN, RUN_DOT, RUN_AMX, RUN_DNNL, N_RUNS } run_kind;
static const char *run_names[N_RUNS] = {"f32", "bf16 widen", "bf16 dot", "bf16 amx", "bf16 onednn"};
/* The peak each run is measured against. */
static const peak_kind run_peak[N_RUNS] = {PEAK_FMA, PEAK_FMA, PEAK_DOT, PEAK_AMX, PEAK_AMX};

static uint64_t rng = 7;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) - 0.5);
}

typedef struct {
    int64_t n;
    const float *af, *bf;
    float *cf;
    const uint16_t *ah, *bh;
    uint16_t *ch;
} problem;

#ifdef AMPC_BENCH_DNNL
/* oneDNN's matmul on the same bf16 operands (bf16 out), for comparison:
 * the primitive is made once, outside the timing, as a caller would. */
#include <dnnl.h>
static double time_dnnl(const problem *pr, int nt, int reps)
{
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_memory_desc_t md;
    dnnl_dims_t d = {pr->n, pr->n};
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t m[3];
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&st, eng, dnnl_stream_default_flags) ||
        dnnl_memory_desc_init_by_tag(&md, 2, d, dnnl_bf16, dnnl_ab) || dnnl_matmul_desc_init(&mm, &md, &md, NULL, &md) ||
        dnnl_primitive_desc_create(&pd, &mm, NULL, eng, NULL) || dnnl_primitive_create(&prim, pd) ||
        dnnl_memory_create(&m[0], &md, eng, (void *)pr->ah) || dnnl_memory_create(&m[1], &md, eng, (void *)pr->bh) ||
        dnnl_memory_create(&m[2], &md, eng, pr->ch))
        return 0;
    static bool told;
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (!told)
        printf("oneDNN %d.%d matmul: %s\n", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, impl), told = true;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    amp_set_num_threads(nt); /* oneDNN's OpenMP threads follow omp_set_num_threads */
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        dnnl_primitive_execute(prim, st, 3, args);
        dnnl_stream_wait(st);
        double t = now() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    for (int i = 0; i < 3; i++)
        dnnl_memory_destroy(m[i]);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    double n = (double)pr->n;
    return 2.0 * n * n * n / best / 1e9;
}
#endif

/* Best GFLOP/s of the n x n x n product, or 0 when the path is missing. */
static double time_gemm(run_kind kind, const problem *pr, int nt, int reps)
{
    if (kind == RUN_DNNL) {
#ifdef AMPC_BENCH_DNNL
        return time_dnnl(pr, nt, reps);
#else
        return 0;
#endif
    }
    gemm_bf16_mode mode[N_RUNS] = {GEMM_BF16_AUTO, GEMM_BF16_WIDEN, GEMM_BF16_DOT, GEMM_BF16_AMX, GEMM_BF16_AUTO};
    gemm_bf16_set_mode(mode[kind]);
    const char *name = gemm_bf16_kernel_name();
    if ((kind == RUN_DOT && !strstr(name, "avx512bf16")) || (kind == RUN_AMX && !strstr(name, "amx")) ||
        (kind == RUN_WIDEN && !strstr(name, "widen"))) {
        gemm_bf16_set_mode(GEMM_BF16_AUTO);
        return 0;
    }
    amp_set_num_threads(nt);
    const int64_t n = pr->n;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) { /* the first run warms caches and the allocator */
        double t0 = now();
        amp_status st = kind == RUN_F32 ? gemm_f32(false, false, n, n, n, 1.0f, pr->af, n, pr->bf, n, 0.0f, pr->cf, n)
                                        : gemm_lowp(false, false, n, n, n, 1.0f, pr->ah, AMP_BF16, n, pr->bh,
                                                    AMP_BF16, n, 0.0f, pr->ch, AMP_BF16, n);
        double t = now() - t0;
        if (st != AMP_OK) {
            fprintf(stderr, "gemm failed: %s\n", amp_last_error());
            exit(1);
        }
        if (r > 0 && t < best)
            best = t;
    }
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    return 2.0 * (double)n * (double)n * (double)n / best / 1e9;
}

static void read_load(double load[3])
{
    load[0] = load[1] = load[2] = -1;
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(la);
    }
}

#define MAX_SIZES 8

int main(int argc, char **argv)
{
    int reps = 5;
    int64_t max_n = 2048;
    const char *json = "bench_gemm.json";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-n") && i + 1 < argc)
            max_n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--reps N] [--max-n N] [--json PATH]\n", argv[0]);
            return 2;
        }
    }
    double load0[3], load1[3];
    read_load(load0);
    unsigned f = amp_cpu_features();
    bool dot_ok = (f & AMP_CPU_AVX512BF16) != 0, amx_ok = false;
#if defined(__x86_64__)
    amx_ok = dot_ok && gemm_amx_usable();
#endif
    printf("load average %.2f %.2f %.2f (a shared machine: figures are noisy; best of %d)\n", load0[0], load0[1],
           load0[2], reps);
    printf("f32 kernel: %s; bf16 x bf16 by default: %s\n\n", gemm_kernel_name(), gemm_bf16_kernel_name());

    /* peaks[kind][threads - 1], measured now and again after the GEMMs
     * (the best of both: other work on the machine only lowers them) */
    double peaks[3][2] = {{0}};
    measure_peaks(peaks, f, dot_ok, amx_ok);

    /* gflops[size][threads - 1][run] */
    static double gflops[MAX_SIZES][2][N_RUNS];
    int64_t sizes[MAX_SIZES];
    int n_sizes = 0;
    printf("\nGFLOP/s as measured:\n");
    for (int64_t n = 256; n <= max_n && n_sizes < MAX_SIZES; n *= 2) {
        sizes[n_sizes] = n;
        float *af = amp_alloc(sizeof(float) * (size_t)(n * n)), *bf = amp_alloc(sizeof(float) * (size_t)(n * n));
        float *cf = amp_alloc(sizeof(float) * (size_t)(n * n));
        uint16_t *ah = amp_alloc(2 * (size_t)(n * n)), *bh = amp_alloc(2 * (size_t)(n * n));
        uint16_t *ch = amp_alloc(2 * (size_t)(n * n));
        if (!af || !bf || !cf || !ah || !bh || !ch) {
            fprintf(stderr, "out of memory at n = %lld\n", (long long)n);
            return 1;
        }
        for (int64_t i = 0; i < n * n; i++)
            af[i] = frand(), bf[i] = frand();
        amp_convert(af, AMP_F32, ah, AMP_BF16, (size_t)(n * n));
        amp_convert(bf, AMP_F32, bh, AMP_BF16, (size_t)(n * n));
        problem pr = {n, af, bf, cf, ah, bh, ch};
        int r = n >= 2048 ? (reps + 1) / 2 : reps; /* the big ones are steadier */
        for (int nt = 1; nt <= 2; nt++) {
            printf("  n %5lld, %d thread%s:", (long long)n, nt, nt > 1 ? "s" : " ");
            for (int k = 0; k < N_RUNS; k++) {
                gflops[n_sizes][nt - 1][k] = time_gemm((run_kind)k, &pr, nt, r);
                printf(" %s %.0f", run_names[k], gflops[n_sizes][nt - 1][k]);
            }
            printf("\n");
            fflush(stdout);
        }
        amp_free(af), amp_free(bf), amp_free(cf), amp_free(ah), amp_free(bh), amp_free(ch);
        n_sizes++;
    }
    printf("\npeaks again:\n");
    measure_peaks(peaks, f, dot_ok, amx_ok);
    read_load(load1);

    printf("\nGFLOP/s (%% of the peak of the path's instruction on as many threads: FMA for f32 and widen,\n"
           "VDPBF16PS for dot, TDPBF16PS for amx and oneDNN); load average now %.2f\n", load1[0]);
    printf("%5s %3s", "n", "thr");
    for (int k = 0; k < N_RUNS; k++)
        printf(" %17s", run_names[k]);
    printf("\n");
    for (int s = 0; s < n_sizes; s++)
        for (int nt = 1; nt <= 2; nt++) {
            printf("%5lld %3d", (long long)sizes[s], nt);
            for (int k = 0; k < N_RUNS; k++) {
                double g = gflops[s][nt - 1][k], pk = peaks[run_peak[k]][nt - 1];
                if (g > 0)
                    printf("  %6.0f (%5.1f%%)", g, pk > 0 ? 100.0 * g / pk : 0.0);
                else
                    printf(" %17s", "-");
            }
            printf("\n");
        }

    FILE *js = fopen(json, "w");
    if (js) {
        fprintf(js, "{\n  \"load_average_before\": [%.2f, %.2f, %.2f],\n", load0[0], load0[1], load0[2]);
        fprintf(js, "  \"load_average_after\": [%.2f, %.2f, %.2f],\n  \"reps\": %d,\n", load1[0], load1[1], load1[2],
                reps);
        fprintf(js, "  \"f32_kernel\": \"%s\",\n  \"bf16_default\": \"%s\",\n", gemm_kernel_name(),
                gemm_bf16_kernel_name());
        fprintf(js, "  \"peak_gflops\": {\"threads\": [1, 2], \"fma_f32\": [%.1f, %.1f], \"vdpbf16ps\": [%.1f, %.1f], "
                    "\"amx_bf16\": [%.1f, %.1f]},\n",
                peaks[0][0], peaks[0][1], peaks[1][0], peaks[1][1], peaks[2][0], peaks[2][1]);
        fprintf(js, "  \"gemm_gflops\": [");
        for (int s = 0; s < n_sizes; s++)
            for (int nt = 1; nt <= 2; nt++) {
                fprintf(js, "%s\n    {\"n\": %lld, \"threads\": %d", s || nt > 1 ? "," : "", (long long)sizes[s], nt);
                for (int k = 0; k < N_RUNS; k++)
                    fprintf(js, ", \"%s\": %.1f", run_names[k], gflops[s][nt - 1][k]);
                fprintf(js, "}");
            }
        fprintf(js, "\n  ]\n}\n");
        fclose(js);
        printf("\nwrote %s\n", json);
    }
    amp_set_num_threads(0);
    return 0;
}
