/*
 * embedding.c - embedding (a row gather) and dropout (a random mask), the
 * two ops that pick elements rather than compute them.
 *
 * embedding: weight [V, D] (float), indices (i32/i64, any shape) ->
 * [indices.., D] in weight's dtype. Backward scatter-adds gout's rows into
 * a dweight of weight's shape, summing in f32 and rounding once, so a
 * 16-bit table's repeated indices do not lose their small contributions.
 *
 * dropout: element j is kept when the uniform drawn from Philox word
 * j % 4 of counter (first + j / 4) is >= p, and then scaled by 1/(1-p).
 * The counters were reserved by api.c, so backward replays the same
 * words and rebuilds the mask instead of keeping it in memory.
 * Params: f[0] = p (0 also in eval mode), i[0] = seed, i[1] = first counter.
 */
#include "ops/infer.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN_WORK 32768

/* ------------------------------------------------------------ embedding */

amp_tensor *embedding_forward(node *n)
{
    const amp_tensor *w = n->in[0], *idx = n->in[1];
    amp_shape s;
    if (!embedding_infer(n, &s))
        return NULL;
    const int64_t V = w->shape.d[0], D = w->shape.d[1];
    const void *ip = tensor_ptr(idx);
    for (int64_t i = 0; i < idx->numel; i++) {
        int64_t v = load_i64(ip, idx->dtype, (size_t)i);
        if (v < 0 || v >= V)
            return amp_fail_null(AMP_ERR_ARG,
                                 "%s: index %lld (at position %lld) is out of range for %lld rows "
                                 "(valid: 0 to %lld)",
                                 op_name(n), (long long)v, (long long)i, (long long)V, (long long)V - 1);
    }
    amp_tensor *out = tensor_new(s, w->dtype);
    if (!out)
        return NULL;
    const size_t row = (size_t)D * amp_dtype_size(w->dtype);
    const char *src = tensor_ptr(w);
    char *dst = tensor_ptr(out);
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (out->numel > PAR_MIN_WORK)
#endif
    for (int64_t i = 0; i < idx->numel; i++)
        memcpy(dst + (size_t)i * row, src + (size_t)load_i64(ip, idx->dtype, (size_t)i) * row, row);
    return out;
}

amp_status embedding_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *w = n->in[0], *idx = n->in[1];
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    const int64_t D = w->shape.d[1];
    amp_tensor *dw = tensor_zeros(w->shape, AMP_F32);
    float *tg = NULL;
    const float *g = dw ? tensor_as_f32(gout, &tg) : NULL;
    if (!dw || !g) {
        amp_tensor_free(dw);
        return amp_set_error(AMP_ERR_MEMORY, "%s: backward out of memory", op_name(n));
    }
    /* Serial: repeated indices would race, and the work is one pass over
     * gout, bound by memory. */
    float *acc = tensor_f32(dw);
    const void *ip = tensor_ptr(idx);
    for (int64_t i = 0; i < idx->numel; i++) {
        float *dr = acc + load_i64(ip, idx->dtype, (size_t)i) * D;
        const float *gr = g + i * D;
        for (int64_t j = 0; j < D; j++)
            dr[j] += gr[j];
    }
    amp_free(tg);
    if (w->dtype != AMP_F32) {
        amp_tensor *r = tensor_convert(dw, w->dtype);
        amp_tensor_free(dw);
        if (!r)
            return amp_last_status();
        dw = r;
    }
    gin[0] = dw;
    return AMP_OK;
}

/* -------------------------------------------------------------- dropout */

/* dst = src * mask / (1 - p), the mask drawn from (seed, first counter).
 * Runs in chunks of whole Philox blocks, widened to f32 for 16-bit dtypes
 * and rounded once, so forward and backward see identical masks. */
static void dropout_apply(const amp_tensor *src, amp_tensor *dst, double p, uint64_t seed,
                                uint64_t first)
{
    enum { CHUNK = 1024 }; /* a multiple of 4: chunks start on a block */
    const int64_t total = src->numel, nchunks = (total + CHUNK - 1) / CHUNK;
    const float scale = (float)(1.0 / (1.0 - p));
    /* u = (r >> 8) / 2^24 >= p, exactly, as an integer compare. */
    const uint32_t thresh = (uint32_t)ceil(p * 16777216.0);
    const amp_dtype dt = src->dtype;
    const size_t es = amp_dtype_size(dt);
    const char *sp = tensor_ptr(src);
    char *dp = tensor_ptr(dst);
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (total > PAR_MIN_WORK)
#endif
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
}

/* The forward and backward kernel: dst gets src through the mask. */
static amp_tensor *dropout_run(const node *n, const amp_tensor *src)
{
    const double p = n->p.f[0];
    if (p <= 0)
        return tensor_convert(src, src->dtype);
    if (p >= 1)
        return tensor_zeros(src->shape, src->dtype);
    amp_tensor *dst = tensor_new(src->shape, src->dtype);
    if (dst)
        dropout_apply(src, dst, p, (uint64_t)n->p.i[0], (uint64_t)n->p.i[1]);
    return dst;
}

amp_tensor *dropout_forward(node *n)
{
    if (!op_require_float(n, 0))
        return NULL;
    return dropout_run(n, n->in[0]);
}

amp_status dropout_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = dropout_run(n, gout);
    return gin[0] ? AMP_OK : amp_last_status();
}
