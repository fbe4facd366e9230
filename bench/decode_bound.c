/*
 * decode_bound.c - the memory-bandwidth bound on a gpt's decode speed:
 * the bytes one generated token reads, over the read bandwidth this
 * machine gives on the same threads for a buffer of that size, measured
 * in this run (bench/generate.sh puts it beside `ampc generate`'s tokens/s).
 *
 *   bench_decode_bound --layers L --width W --vocab V --context C
 *                      [--mlp M] [--no-bias] [--tokens N] [--dtype fp32|bf16]
 *                      [--threads T] [--dram-mb MB]
 *
 * Bytes per token (a decode step: one position, batch 1) are every
 * parameter the forward reads, in the dtype it is read in: the linears'
 * weights and biases (qkv, proj, fc1, fc2 of each block; the head, tied
 * to wte) in the compute dtype (f32, or bf16: autocast's kept casts), the
 * LayerNorms' weights and biases in f32 (autocast runs layer_norm in
 * f32), one row each of wte and wpe (f32); plus the KV cache the
 * attention reads: 2 x layers x width values of the compute dtype per
 * cached position, at the mean length over a run of N tokens after a
 * one-token prompt ((N + 2) / 2 positions; default N = context - 1).
 * MLP width M defaults to 4 W (ampc train's gpt).
 *
 * The bandwidth: the library's thread pool (amp_parallel_for, T threads,
 * as the decode runs) reads a buffer of bytes-per-token bytes, each
 * thread a contiguous share, as often as it takes to read 64 MiB, 15
 * times over; all the bytes over all the time give GB/s (the decode
 * re-reads the same weights every token, so they sit in the cache level
 * that holds that many bytes; on this project's Xeon a 42 MB model sits
 * in its L3).
 * --dram-mb MB also measures a buffer of MB MiB (far past the L3, for the
 * memory's own bandwidth). Prints one line of key=value pairs:
 *   weights_bytes kv_bytes bytes_per_token read_gbs bound_tokens_s [dram_gbs]
 */
#include <ampc.h>

#include "base/parallel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define REPS 15
#define MIN_READ ((size_t)64 << 20)
#define CHUNK ((size_t)1 << 16) /* bytes per grain: a multiple of 64 */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The sum of n bytes (a multiple of 64) read as 64-bit words, so the
 * loads cannot be skipped. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static uint64_t read_avx512(const char *p, size_t n)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 64));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + i + 128));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + i + 192));
    }
    for (; i < n; i += 64)
        s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
    uint64_t w[8], t = 0; /* summed unsigned: wrapping is the point, not an overflow */
    _mm512_storeu_si512(w, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    for (int i = 0; i < 8; i++)
        t += w[i];
    return t;
}
#endif

static uint64_t read_c(const char *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)(const void *)p;
    uint64_t s[8] = {0};
    for (size_t i = 0; i < n / 8; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += w[i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

typedef struct {
    const char *buf;
    size_t bytes, passes;
    uint64_t (*read)(const char *, size_t);
    uint64_t sink[64];
} read_job;

/* Thread tid reads its share [lo, hi) of the buffer's chunks, passes
 * times (grain: one share per thread, as the decode's items are spread). */
static void read_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    read_job *j = ctx;
    const size_t from = (size_t)lo * CHUNK, to = (size_t)hi * CHUNK < j->bytes ? (size_t)hi * CHUNK : j->bytes;
    uint64_t s = 0;
    for (size_t p = 0; p < j->passes; p++)
        s += j->read(j->buf + from, to - from);
    j->sink[tid & 63] += s;
}

/* The read bandwidth over REPS passes of a buffer of `bytes`: all the
 * bytes over all the time, as the decode's tokens/s is its tokens over
 * its time (on a shared machine both then count the time the threads
 * waited for a core). */
static double read_gbs(size_t bytes, int threads)
{
    bytes = (bytes + CHUNK - 1) / CHUNK * CHUNK;
    char *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "bench_decode_bound: out of memory for %zu bytes\n", bytes);
        exit(1);
    }
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (char)(i * 131u);
    read_job j = {buf, bytes, (MIN_READ + bytes - 1) / bytes, read_c, {0}};
#if defined(__x86_64__)
    if (amp_cpu_features() & AMP_CPU_AVX512F)
        j.read = read_avx512;
#endif
    const int64_t chunks = (int64_t)(bytes / CHUNK), grain = (chunks + threads - 1) / threads;
    double t[REPS];
    for (int r = -2; r < REPS; r++) { /* two passes warm the caches */
        double t0 = now();
        amp_parallel_for(chunks, grain, read_range, &j);
        if (r >= 0)
            t[r] = now() - t0;
    }
    double total = 0;
    for (int r = 0; r < REPS; r++)
        total += t[r];
    uint64_t s = 0;
    for (int i = 0; i < 64; i++)
        s += j.sink[i];
    free(buf);
    if (s == 42) /* keeps the sums live */
        fputc(' ', stderr);
    return (double)bytes * (double)j.passes * REPS / total / 1e9;
}

static long long arg_ll(const char *opt, const char *v, long long lo)
{
    char *end;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || *end || x < lo) {
        fprintf(stderr, "bench_decode_bound: %s needs a whole number >= %lld (got %s)\n", opt, lo, v ? v : "none");
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    long long L = 0, W = 0, V = 0, C = 0, M = 0, N = 0, T = 1, dram_mb = 0;
    int es = 4, bias = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--no-bias") == 0) {
            bias = 0;
            continue;
        }
        if (strcmp(o, "--dtype") == 0 && v && (strcmp(v, "fp32") == 0 || strcmp(v, "bf16") == 0))
            es = strcmp(v, "bf16") == 0 ? 2 : 4;
        else if (strcmp(o, "--dtype") == 0) {
            fprintf(stderr, "bench_decode_bound: --dtype is fp32 or bf16 (got %s)\n", v ? v : "none");
            return 2;
        } else if (strcmp(o, "--layers") == 0) L = arg_ll(o, v, 1);
        else if (strcmp(o, "--width") == 0) W = arg_ll(o, v, 1);
        else if (strcmp(o, "--vocab") == 0) V = arg_ll(o, v, 1);
        else if (strcmp(o, "--context") == 0) C = arg_ll(o, v, 2);
        else if (strcmp(o, "--mlp") == 0) M = arg_ll(o, v, 1);
        else if (strcmp(o, "--tokens") == 0) N = arg_ll(o, v, 2);
        else if (strcmp(o, "--threads") == 0) T = arg_ll(o, v, 1);
        else if (strcmp(o, "--dram-mb") == 0) dram_mb = arg_ll(o, v, 1);
        else {
            fprintf(stderr, "bench_decode_bound: unknown option %s (see the comment at the top of "
                            "bench/decode_bound.c)\n", o);
            return 2;
        }
        i++;
    }
    if (!L || !W || !V || !C) {
        fprintf(stderr, "bench_decode_bound: --layers, --width, --vocab and --context are needed\n");
        return 2;
    }
    if (!M)
        M = 4 * W;
    if (!N)
        N = C - 1;
    if (T > 64) {
        fprintf(stderr, "bench_decode_bound: --threads %lld: 64 at most\n", T);
        return 2;
    }
    const double lin = (double)(4 * W * W + 2 * W * M), lin_b = bias ? (double)(5 * W + M) : 0,
                 ln = (bias ? 2.0 : 1.0) * (double)W;
    const double weights = (double)L * ((lin + lin_b) * es + 2 * ln * 4) + ln * 4 + (double)V * (double)W * es +
                           2.0 * (double)W * 4;
    const double kv = 2.0 * (double)L * (double)W * es * (double)(N + 2) / 2.0, total = weights + kv;
    amp_set_num_threads((int)T);
    const double gbs = read_gbs((size_t)total, (int)T);
    printf("weights_bytes=%.0f kv_bytes=%.0f bytes_per_token=%.0f read_gbs=%.2f bound_tokens_s=%.1f", weights, kv,
           total, gbs, gbs * 1e9 / total);
    if (dram_mb)
        printf(" dram_gbs=%.2f", read_gbs((size_t)dram_mb << 20, (int)T));
    printf("\n");
    return 0;
}
