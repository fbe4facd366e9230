/*
 * op_check.h - what the op tests (test_ops_*.c) share:
 *
 *   make            a tensor of a dtype holding floats (rounded to it)
 *   as_dtype        an owned copy of a tensor's values in a dtype
 *   f32_copy        the same in f32 (exact: widening)
 *   check_close     a result against a double reference, element by
 *                   element within atol + rtol * |ref|, reporting the
 *                   first few mismatches
 *   check_close_f   the same against a float reference
 *
 * Header-only (static inline), as tests/cuda_rig.h.
 */
#ifndef AMPC_TEST_OP_CHECK_H
#define AMPC_TEST_OP_CHECK_H

#include "harness.h"

#include <stdlib.h>

static inline amp_tensor *make(amp_shape s, amp_dtype dt, const float *v)
{
    amp_tensor *t = amp_empty(s, dt);
    if (t)
        amp_tensor_copy_in(t, v, AMP_F32);
    return t;
}

static inline amp_tensor *as_dtype(const amp_tensor *t, amp_dtype dt)
{
    int64_t n = amp_tensor_numel(t);
    float *buf = malloc(sizeof(float) * (size_t)(n ? n : 1));
    amp_tensor_copy_out(t, buf, AMP_F32);
    amp_tensor *c = make(amp_tensor_shape(t), dt, buf);
    free(buf);
    return c;
}

static inline amp_tensor *f32_copy(const amp_tensor *t) { return as_dtype(t, AMP_F32); }

/* t must hold n elements. */
static inline void check_close(const char *what, const amp_tensor *t, const double *ref, int64_t n, double atol,
                               double rtol)
{
    CHECK_MSG(t != NULL, "%s: NULL tensor [%s]", what, amp_last_error());
    if (!t)
        return;
    CHECK_EQ_INT(amp_tensor_numel(t), n);
    int bad = 0;
    for (int64_t i = 0; i < n && i < amp_tensor_numel(t) && bad < 4; i++) {
        double v = amp_tensor_get(t, i);
        if (!(fabs(v - ref[i]) <= atol + rtol * fabs(ref[i]))) {
            harness_fail(__FILE__, __LINE__, "%s[%lld] = %.9g, expected %.9g", what, (long long)i, v, ref[i]);
            bad++;
        }
    }
}

static inline void check_close_f(const char *what, const amp_tensor *t, const float *ref, int64_t n, double atol,
                                 double rtol)
{
    double *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        r[i] = ref[i];
    check_close(what, t, r, n, atol, rtol);
    free(r);
}

#endif
