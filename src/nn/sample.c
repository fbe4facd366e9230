/*
 * sample.c - picking the next token from a language model's logits
 * (amp_sample_next), as nanoGPT's generate does it:
 *
 *   logits of the last position / temperature, top-k (the k largest kept,
 *   the others -inf), softmax, one multinomial draw.
 *
 * On the host, in double: the logits row (vocab values) is copied out
 * once per token, which is tiny beside the forward that made it. The draw
 * is Philox4x32-10 keyed by the caller's seed at counter (draw, row): the
 * same seed and draw number give the same token on any machine or device,
 * and the global generator (dropout, initialisation) is left alone.
 *
 * Choices: temperature 0 is greedy decoding (the first largest logit, as
 * torch.argmax), where nanoGPT would divide by zero. Top-k keeps every
 * logit equal to the k-th largest too (nanoGPT's `logits < v[:, [-1]]`
 * mask does the same), so a tie can keep more than k. A NaN or infinite
 * logit is an error, not a token.
 */
#include "base/base.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_desc(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* A uniform double in [0, 1) from 53 random bits. */
static double uniform01(uint64_t seed, uint64_t draw, uint64_t row)
{
    uint32_t r[4];
    amp_philox(seed, draw, row, r);
    const uint64_t bits = ((uint64_t)r[0] << 32 | r[1]) >> 11;
    return (double)bits * 0x1.0p-53;
}

/* The token of one row z[0..V) (double scratch s[0..V) beside it). */
static int64_t pick(double *z, double *s, int64_t V, double temperature, int64_t top_k, uint64_t seed,
                    uint64_t draw, uint64_t row)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (z[i] > z[best])
            best = i;
    if (temperature == 0)
        return best;
    double keep_from = -INFINITY; /* logits below this are masked */
    if (top_k > 0 && top_k < V) {
        memcpy(s, z, (size_t)V * sizeof *s);
        qsort(s, (size_t)V, sizeof *s, cmp_desc);
        keep_from = s[top_k - 1];
    }
    /* exp((z - max) / T): <= 1, and no inf - inf for a tiny T */
    double sum = 0;
    for (int64_t i = 0; i < V; i++) {
        s[i] = z[i] >= keep_from ? exp((z[i] - z[best]) / temperature) : 0.0;
        sum += s[i];
    }
    const double target = uniform01(seed, draw, row) * sum;
    double acc = 0;
    int64_t last = best;
    for (int64_t i = 0; i < V; i++) {
        if (s[i] == 0)
            continue;
        acc += s[i];
        last = i;
        if (acc > target)
            return i;
    }
    return last; /* rounding left target at the very top */
}

amp_status amp_sample_next(const amp_tensor *logits, double temperature, int64_t top_k, uint64_t seed,
                           uint64_t draw, int64_t *tokens)
{
    if (!logits || !tokens)
        return amp_set_error(AMP_ERR_ARG, "sample_next: %s is NULL", !logits ? "logits" : "tokens");
    const int nd = logits->shape.ndim;
    char b[96];
    if ((nd != 2 && nd != 3) || logits->shape.d[nd - 1] < 1 || logits->shape.d[0] < 1 ||
        (nd == 3 && logits->shape.d[1] < 1))
        return amp_set_error(AMP_ERR_SHAPE, "sample_next: logits %s are not [B, vocab] or [B, T, vocab]",
                             amp_shape_str(logits->shape, b, sizeof b));
    if (logits->dtype != AMP_F32 && logits->dtype != AMP_BF16 && logits->dtype != AMP_F16)
        return amp_set_error(AMP_ERR_DTYPE, "sample_next: logits of dtype %s; a float dtype is needed",
                             amp_dtype_name(logits->dtype));
    if (!(temperature >= 0) || !isfinite(temperature))
        return amp_set_error(AMP_ERR_ARG, "sample_next: temperature %g must be finite and >= 0 (0: greedy)",
                             temperature);
    const int64_t V = logits->shape.d[nd - 1], B = logits->shape.d[0], T = nd == 3 ? logits->shape.d[1] : 1;
    if (top_k < 0 || top_k > V)
        return amp_set_error(AMP_ERR_ARG, "sample_next: top_k %lld is not in 1 .. vocab %lld (0: no cut)",
                             (long long)top_k, (long long)V);
    float *all = malloc((size_t)logits->numel * sizeof *all);
    double *z = malloc(2 * (size_t)V * sizeof *z);
    amp_status st = all && z ? amp_tensor_copy_out(logits, all, AMP_F32)
                             : amp_set_error(AMP_ERR_MEMORY, "sample_next: out of memory for %lld logits",
                                             (long long)logits->numel);
    for (int64_t r = 0; r < B && st == AMP_OK; r++) {
        const float *row = all + (r * T + T - 1) * V; /* the last position */
        for (int64_t i = 0; i < V && st == AMP_OK; i++) {
            if (!isfinite(row[i]))
                st = amp_set_error(AMP_ERR_ARG, "sample_next: logit %lld of row %lld is %g; the model's output is "
                                                "not finite", (long long)i, (long long)r, (double)row[i]);
            z[i] = row[i];
        }
        if (st == AMP_OK)
            tokens[r] = pick(z, z + V, V, temperature, top_k, seed, draw, (uint64_t)r);
    }
    free(all);
    free(z);
    return st;
}
