/*
 * synthetic.h - a small classification problem for the AMP recipes, so each
 * runs in a second without a data set: n points in d dims around one of
 * `classes` centres, and the model the recipes train on it.
 */
#ifndef AMPC_EXAMPLES_SYNTHETIC_H
#define AMPC_EXAMPLES_SYNTHETIC_H

#include <ampc.h>
#include <stdio.h>
#include <stdlib.h>

/* x [n, d] f32 and labels y [n] i64; the caller frees both. */
static inline void make_blobs(int n, int d, int classes, uint64_t seed, amp_tensor **x, amp_tensor **y)
{
    amp_manual_seed(seed);
    amp_tensor *centres = amp_randn(AMP_SHAPE(classes, d), AMP_F32, 0, 2);
    amp_tensor *noise = amp_randn(AMP_SHAPE(n, d), AMP_F32, 0, 1);
    float *xv = malloc(sizeof(float) * (size_t)(n * d));
    int64_t *yv = malloc(sizeof(int64_t) * (size_t)n);
    const float *c = amp_tensor_cdata(centres), *e = amp_tensor_cdata(noise);
    for (int i = 0; i < n; i++) {
        yv[i] = i % classes;
        for (int j = 0; j < d; j++)
            xv[i * d + j] = c[yv[i] * d + j] + e[i * d + j];
    }
    *x = amp_from_data(AMP_SHAPE(n, d), AMP_F32, xv);
    *y = amp_from_data(AMP_SHAPE(n), AMP_I64, yv);
    free(xv);
    free(yv);
    amp_tensor_free(centres);
    amp_tensor_free(noise);
}

/* d -> hidden -> classes MLP with ReLU. */
static inline amp_module *make_mlp(int d, int hidden, int classes)
{
    amp_module *m = amp_nn_sequential();
    amp_sequential_add(m, amp_nn_linear(d, hidden, true));
    amp_sequential_add(m, amp_nn_relu());
    amp_sequential_add(m, amp_nn_linear(hidden, classes, true));
    return m;
}

/* Prints the error and returns 1: `if (!t) return fail("forward");` */
static inline int fail(const char *what)
{
    fprintf(stderr, "%s failed: %s\n", what, amp_last_error());
    return 1;
}

#endif
