/*
 * data.c - the training data in memory: Fashion-MNIST loaded from its IDX
 * files and normalised once, a seeded shuffle per epoch, and batches
 * copied into buffers that live for the whole run (no allocation per
 * step).
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The file DIR/NAME.gz when it exists, else DIR/NAME when that exists,
 * else DIR/NAME.gz (so that the error names the usual file). */
static void pick_file(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s/%s.gz", dir, name);
    if (access(out, F_OK) == 0)
        return;
    snprintf(out, n, "%s/%s", dir, name);
    if (access(out, F_OK) == 0)
        return;
    snprintf(out, n, "%s/%s.gz", dir, name);
}

bool dataset_load(dataset *d, const char *dir, const char *prefix)
{
    char xpath[4096], ypath[4096], name[64];
    memset(d, 0, sizeof *d);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    pick_file(xpath, sizeof xpath, dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    pick_file(ypath, sizeof ypath, dir, name);

    d->x = amp_idx_load(xpath, AMP_F32);
    d->y = d->x ? amp_idx_load(ypath, AMP_I64) : NULL;
    if (!d->x || !d->y) {
        fprintf(stderr, "ampc: %s\n", amp_last_error());
        fprintf(stderr, "ampc: --data %s should hold Fashion-MNIST's IDX files "
                        "(train-images-idx3-ubyte.gz and the like)\n", dir);
        dataset_free(d);
        return false;
    }
    d->n = amp_tensor_ndim(d->x) >= 2 ? amp_tensor_dim(d->x, 0) : 0;
    if (d->n < 1 || amp_tensor_ndim(d->y) != 1 || amp_tensor_dim(d->y, 0) != d->n) {
        char xs[96], ys[96];
        fprintf(stderr, "ampc: %s is %s and %s is %s: expected [n, ...] images and [n] labels\n", xpath,
                amp_shape_str(amp_tensor_shape(d->x), xs, sizeof xs), ypath,
                amp_shape_str(amp_tensor_shape(d->y), ys, sizeof ys));
        dataset_free(d);
        return false;
    }
    d->features = amp_tensor_numel(d->x) / d->n;

    const int64_t *y = amp_tensor_cdata(d->y);
    for (int64_t i = 0; i < d->n; i++) {
        if (y[i] < 0 || y[i] > 65535) {
            fprintf(stderr, "ampc: %s: label %lld at index %lld is not a class number\n", ypath,
                    (long long)y[i], (long long)i);
            dataset_free(d);
            return false;
        }
        if (y[i] + 1 > d->classes)
            d->classes = y[i] + 1;
    }

    /* x/255 then (x - mean)/std, folded into one multiply-add. */
    float *x = amp_tensor_data(d->x);
    const float a = (float)(1.0 / (255.0 * FMNIST_STD)), b = (float)(-FMNIST_MEAN / FMNIST_STD);
    for (int64_t i = 0, n = amp_tensor_numel(d->x); i < n; i++)
        x[i] = x[i] * a + b;
    return true;
}

void dataset_free(dataset *d)
{
    amp_tensor_free(d->x);
    amp_tensor_free(d->y);
    d->x = d->y = NULL;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound), unbiased: draws below 2^64 mod bound are redrawn. */
static uint64_t below(uint64_t *s, uint64_t bound)
{
    uint64_t threshold = -bound % bound;
    for (;;) {
        uint64_t r = splitmix64(s);
        if (r >= threshold)
            return r % bound;
    }
}

void shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch)
{
    /* One generator per (seed, epoch): epoch e's order does not depend on
     * how many numbers earlier epochs drew. */
    uint64_t s = seed ^ 0xA0761D6478BD642Full;
    s = splitmix64(&s) ^ (epoch * 0xE7037ED1A0B428DBull);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)below(&s, (uint64_t)i + 1);
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

bool batcher_init(batcher *b, const dataset *d, int64_t size)
{
    memset(b, 0, sizeof *b);
    b->size = size < d->n ? size : d->n;
    b->tail = d->n % b->size;
    b->x = amp_empty(AMP_SHAPE(b->size, d->features), AMP_F32);
    b->y = amp_empty(AMP_SHAPE(b->size), AMP_I64);
    bool ok = b->x && b->y;
    if (ok && b->tail) {
        b->tail_x = amp_empty(AMP_SHAPE(b->tail, d->features), AMP_F32);
        b->tail_y = amp_empty(AMP_SHAPE(b->tail), AMP_I64);
        ok = b->tail_x && b->tail_y;
    }
    if (!ok) {
        fprintf(stderr, "ampc: batch buffers: %s\n", amp_last_error());
        batcher_free(b);
    }
    return ok;
}

void batcher_free(batcher *b)
{
    amp_tensor_free(b->x);
    amp_tensor_free(b->y);
    amp_tensor_free(b->tail_x);
    amp_tensor_free(b->tail_y);
    memset(b, 0, sizeof *b);
}

int64_t batcher_count(const batcher *b, const dataset *d) { return (d->n + b->size - 1) / b->size; }

void batcher_fill(batcher *b, const dataset *d, const int64_t *idx, int64_t k, amp_tensor **x,
                  amp_tensor **y)
{
    bool full = k < d->n / b->size;
    *x = full ? b->x : b->tail_x;
    *y = full ? b->y : b->tail_y;
    int64_t rows = full ? b->size : b->tail, f = d->features;
    float *bx = amp_tensor_data(*x);
    int64_t *by = amp_tensor_data(*y);
    const float *sx = amp_tensor_cdata(d->x);
    const int64_t *sy = amp_tensor_cdata(d->y);
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = k * b->size + r;
        int64_t src = idx ? idx[i] : i;
        memcpy(bx + r * f, sx + src * f, sizeof(float) * (size_t)f);
        by[r] = sy[src];
    }
}
