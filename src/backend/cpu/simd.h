/*
 * simd.h - vector versions of the ops' hottest inner loops, picked at run
 * time (simd_x86.c).
 *
 * The library is built for baseline x86-64, so anything wider than SSE2
 * lives in functions compiled with target attributes and is called only
 * when amp_cpu_features() reports the ISA (tests lower the mask with
 * amp_cpu_limit to compare against the plain C loops). Each picker
 * returns NULL when no vector version applies; the caller then runs its
 * own loop, which stays the reference the vector one must match.
 *
 * Defines: simd_max2x2_fn (and its 16-bit forward and backward),
 * simd_gelu_tanh_fn, simd_gelu_tanh_grad_fn,
 * simd_row_fns (softmax rows) and their pickers.
 */
#ifndef AMPC_SIMD_H
#define AMPC_SIMD_H

#include "ampc.h"

/* One output row of a 2x2 stride-2 max pool: y[k] = max of r0[2k],
 * r0[2k+1], r1[2k], r1[2k+1] (first wins ties, NaN wins), and when idx is
 * not NULL idx[k] = base + 2k + (0 | 1 | W | W+1), the winner's offset in
 * the plane. */
typedef void (*simd_max2x2_fn)(const float *r0, const float *r1, int64_t wo, int32_t base, int32_t W, float *y,
                               int32_t *idx);
simd_max2x2_fn simd_pick_max2x2(void);

/* The same on 16-bit rows (bf16 or f16), read where they lie (no
 * widened copy of the plane): y gets the winners widened (exact), idx as
 * above. NULL for another dtype or without AVX-512BW. */
typedef void (*simd_max2x2_half_fn)(const uint16_t *r0, const uint16_t *r1, int64_t wo, int32_t base, int32_t W,
                                    float *y, int32_t *idx);
simd_max2x2_half_fn simd_pick_max2x2_half(amp_dtype dt);

/* Its backward for one row of windows, 16-bit gradients of dx's dtype:
 * rows d0 and d1 of dx, columns 0 .. 2 wo - 1, get 0.0f + g[k] (rounded
 * to the dtype: the widened path's bits) at window k's argmax idx[k] (an
 * offset in the plane; window k's top left is base + 2k, rows W apart),
 * +0 elsewhere. */
typedef void (*simd_unpool2x2_half_fn)(const uint16_t *g, const int32_t *idx, int64_t wo, int32_t base, int32_t W,
                                       uint16_t *d0, uint16_t *d1);
simd_unpool2x2_half_fn simd_pick_unpool2x2_half(amp_dtype dt);

/* out[j] = gelu_tanh(x[j]) and out[j] = g[j] * gelu_tanh'(x[j]), within a
 * few ulp of the plain C formulas in elementwise.c (which use libm). */
typedef void (*simd_gelu_tanh_fn)(const float *x, float *out, int64_t n);
typedef void (*simd_gelu_tanh_grad_fn)(const float *g, const float *x, float *out, int64_t n);
simd_gelu_tanh_fn simd_pick_gelu_tanh(void);
simd_gelu_tanh_grad_fn simd_pick_gelu_tanh_grad(void);

/* The pieces of a softmax over a row of f32 scores:
 *   max      the row's maximum; NaN when any entry is NaN
 *   exp_sum  x[j] = exp(x[j] - sub) for j < n; returns the sum in double
 *            (summed in f64 lanes, so it differs from a serial sum only in
 *            the order of double additions)
 *   dot      sum of a[j] * b[j], products and sum in double. */
typedef struct {
    float (*max)(const float *x, int64_t n);
    double (*exp_sum)(float *x, int64_t n, float sub);
    double (*dot)(const float *a, const float *b, int64_t n);
} simd_row_fns;
/* NULL when the CPU has no vector version. */
const simd_row_fns *simd_pick_rows(void);

#endif
