/*
 * peaks.h - what this CPU's cores can do at most, for bench_gemm: register-
 * only loops of independent f32 FMA chains, of VDPBF16PS chains
 * (AVX512-BF16) and of TDPBF16PS tiles (AMX-BF16), timed on 1 and 2
 * threads. Static functions: one program includes it.
 */
#ifndef AMPC_BENCH_PEAKS_H
#define AMPC_BENCH_PEAKS_H

#include "base/base.h"

#include <stdbool.h>
#include <stdio.h>
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

#endif
