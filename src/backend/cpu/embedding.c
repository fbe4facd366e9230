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
#include "dtype/dtype.h"

#include <math.h>
#include <string.h>

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN_WORK 32768

/* ------------------------------------------------------------ embedding */

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
    const size_t row = (size_t)D * amp_dtype_size(wdt);
    const char *src = w;
    char *dst = out;
#pragma omp parallel for num_threads(amp_threads()) if (nidx * D > PAR_MIN_WORK)
    for (int64_t i = 0; i < nidx; i++)
        memcpy(dst + (size_t)i * row, src + (size_t)load_i64(idx, idt, (size_t)i) * row, row);
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

/* Runs in chunks of whole Philox blocks, widened to f32 for 16-bit dtypes
 * and rounded once, so forward and backward see identical masks. */
amp_status cpu_dropout(const void *src, void *dst, amp_dtype dt, int64_t total, double p, uint64_t seed,
                       uint64_t first)
{
    enum { CHUNK = 1024 }; /* a multiple of 4: chunks start on a block */
    const int64_t nchunks = (total + CHUNK - 1) / CHUNK;
    const float scale = (float)(1.0 / (1.0 - p));
    /* u = (r >> 8) / 2^24 >= p, exactly, as an integer compare. */
    const uint32_t thresh = (uint32_t)ceil(p * 16777216.0);
    const size_t es = amp_dtype_size(dt);
    const char *sp = src;
    char *dp = dst;
#pragma omp parallel for num_threads(amp_threads()) if (total > PAR_MIN_WORK)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t j0 = c * CHUNK, len = total - j0 < CHUNK ? total - j0 : CHUNK;
        float buf[CHUNK];
        float *v = dt == AMP_F32 ? (float *)(void *)(dp + (size_t)j0 * es) : buf;
        amp_convert(sp + (size_t)j0 * es, dt, v, AMP_F32, (size_t)len);
        for (int64_t k = 0; k < len; k += 4) {
            uint32_t r[4];
            amp_philox(seed, 0, first + (uint64_t)(j0 + k) / 4, r);
            for (int q = 0; q < 4 && k + q < len; q++)
                v[k + q] = (r[q] >> 8) >= thresh ? v[k + q] * scale : 0.0f;
        }
        if (dt != AMP_F32)
            amp_convert(v, AMP_F32, dp + (size_t)j0 * es, dt, (size_t)len);
    }
    return AMP_OK;
}
