/*
 * embedding.c (CPU backend) - the nn family's primitives that pick
 * elements rather than compute them, on host memory: embedding (a row
 * gather, and its scatter-add backward) and dropout (a random mask).
 *
 * embedding checks every index on the host before it reads a row: an
 * index outside [0, V) is an AMP_ERR_ARG error naming it.
 *
 * dropout: element j is kept when the uniform drawn from Philox word
 * j % 4 of counter (first + j / 4) is >= p, and then scaled by 1/(1-p);
 * the CUDA backend draws the same words, so both drop the same elements.
 */
#include "backend/cpu/cpu_backend.h"
#include "base/base.h"
#include "base/parallel.h"
#include "dtype/dtype.h"

#include <math.h>
#include <string.h>

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN_WORK 32768

/* ------------------------------------------------------------ embedding */

typedef struct {
    const char *src;
    char *dst;
    const void *idx;
    amp_dtype idt;
    size_t row;
} gather_job;

static void gather_rows(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const gather_job *j = vj;
    for (int64_t i = lo; i < hi; i++)
        memcpy(j->dst + (size_t)i * j->row, j->src + (size_t)load_i64(j->idx, j->idt, (size_t)i) * j->row, j->row);
}

amp_status cpu_embedding(const void *w, amp_dtype wdt, const void *idx, amp_dtype idt, int64_t nidx, int64_t V,
                         int64_t D, void *out)
{
    for (int64_t i = 0; i < nidx; i++) {
        int64_t v = load_i64(idx, idt, (size_t)i);
        if (v < 0 || v >= V)
            return amp_set_error(AMP_ERR_ARG,
                                 "embedding: index %lld (at position %lld) is out of range for %lld rows "
                                 "(valid: 0 to %lld)",
                                 (long long)v, (long long)i, (long long)V, (long long)V - 1);
    }
    gather_job j = {.src = w, .dst = out, .idx = idx, .idt = idt, .row = (size_t)D * amp_dtype_size(wdt)};
    /* One grain (one thread) when small; else about 8K elements a grain. */
    int64_t grain = nidx * D > PAR_MIN_WORK ? (D < 8192 ? 8192 / D : 1) : nidx;
    amp_parallel_for(nidx, grain, gather_rows, &j);
    return AMP_OK;
}

amp_status cpu_embedding_backward(const void *gp, amp_dtype gdt, const void *idx, amp_dtype idt, int64_t nidx,
                                  int64_t V, int64_t D, float *dw)
{
    (void)V; /* the forward checked every index against it */
    float *tg = NULL;
    const float *g = gp;
    if (gdt != AMP_F32) {
        if (!(tg = amp_alloc((size_t)(nidx * D) * sizeof(float))))
            return amp_set_error(AMP_ERR_MEMORY, "embedding: backward out of memory");
        amp_convert(gp, gdt, tg, AMP_F32, (size_t)(nidx * D));
        g = tg;
    }
    /* Serial: repeated indices would race, and the work is one pass over
     * g, bound by memory. */
    for (int64_t i = 0; i < nidx; i++) {
        float *dr = dw + load_i64(idx, idt, (size_t)i) * D;
        const float *gr = g + i * D;
        for (int64_t j = 0; j < D; j++)
            dr[j] += gr[j];
    }
    amp_free(tg);
    return AMP_OK;
}

/* -------------------------------------------------------------- dropout */

enum { DROP_CHUNK = 1024 }; /* a multiple of 4: chunks start on a block */

typedef struct {
    const char *src;
    char *dst;
    amp_dtype dt;
    int64_t total;
    float scale;
    uint32_t thresh;
    uint64_t seed, first;
} dropout_job;

static void dropout_chunks(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const dropout_job *d = vj;
    const size_t es = amp_dtype_size(d->dt);
    for (int64_t c = lo; c < hi; c++) {
        const int64_t j0 = c * DROP_CHUNK, len = d->total - j0 < DROP_CHUNK ? d->total - j0 : DROP_CHUNK;
        float buf[DROP_CHUNK];
        float *v = d->dt == AMP_F32 ? (float *)(void *)(d->dst + (size_t)j0 * es) : buf;
        amp_convert(d->src + (size_t)j0 * es, d->dt, v, AMP_F32, (size_t)len);
        for (int64_t k = 0; k < len; k += 4) {
            uint32_t r[4];
            amp_philox(d->seed, 0, d->first + (uint64_t)(j0 + k) / 4, r);
            for (int q = 0; q < 4 && k + q < len; q++)
                v[k + q] = (r[q] >> 8) >= d->thresh ? v[k + q] * d->scale : 0.0f;
        }
        if (d->dt != AMP_F32)
            amp_convert(v, AMP_F32, d->dst + (size_t)j0 * es, d->dt, (size_t)len);
    }
}

/* Runs in chunks of whole Philox blocks, widened to f32 for 16-bit dtypes
 * and rounded once, so forward and backward see identical masks. */
amp_status cpu_dropout(const void *src, void *dst, amp_dtype dt, int64_t total, double p, uint64_t seed,
                       uint64_t first)
{
    const int64_t nchunks = (total + DROP_CHUNK - 1) / DROP_CHUNK;
    dropout_job d = {.src = src,
                     .dst = dst,
                     .dt = dt,
                     .total = total,
                     .scale = (float)(1.0 / (1.0 - p)),
                     /* u = (r >> 8) / 2^24 >= p, exactly, as an integer compare. */
                     .thresh = (uint32_t)ceil(p * 16777216.0),
                     .seed = seed,
                     .first = first};
    /* One grain when small; else 8 chunks (8K elements) a grain. */
    amp_parallel_for(nchunks, total > PAR_MIN_WORK ? 8 : nchunks, dropout_chunks, &d);
    return AMP_OK;
}
