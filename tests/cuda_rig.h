/*
 * cuda_rig.h - what the CUDA backend's tests (test_cuda.c, test_cuda_train.c,
 * test_cuda_cli.c, test_dist_cuda.c, dist/test_nccl_cuda.c) share: the
 * skip when no GPU is present, the per-dtype tolerances and the comparison
 * of a CUDA tensor against its CPU reference, moving a tensor to the
 * device and comparing its bytes, and the exit status that makes CTest say
 * "Skipped" (77, SKIP_RETURN_CODE in CMakeLists.txt) when everything was
 * skipped for want of a GPU. Header-only (static inline, so a file that
 * does not use one stays -Wunused-function clean): each test binary stays
 * one .c file plus the harness, as CMake's tests/test_*.c glob builds them.
 */
#ifndef AMPC_TEST_CUDA_RIG_H
#define AMPC_TEST_CUDA_RIG_H

#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* True when a CUDA device is present; otherwise the current test is
 * reported as skipped (never as passed). */
static inline bool gpu(void)
{
    if (amp_cuda_available())
        return true;
    harness_skip("no CUDA device");
    return false;
}

/* Tolerances: 16-bit results may differ by a unit in the last place where
 * the f32 values before rounding differ in the last bits. */
static inline double tol_of(amp_dtype dt) { return dt == AMP_BF16 ? 1.6e-2 : dt == AMP_F16 ? 2e-3 : 2e-5; }

static inline bool close_to(double ref, double got, double tol)
{
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got))
        return ref == got;
    return fabs(ref - got) <= tol * (1.0 + fabs(ref));
}

/* ref (on the CPU) and got (on CUDA) agree: the same dtype and shape, and
 * every element within tol relative to 1 + |ref| (NaN where NaN, the same
 * infinities). */
static inline void check_same(const char *what, const char *part, const amp_tensor *ref, const amp_tensor *got,
                              double tol)
{
    CHECK_MSG(ref && got, "%s, %s: a tensor is missing (%s)", what, part, amp_last_error());
    if (!ref || !got)
        return;
    CHECK_MSG(amp_tensor_device(got) == AMP_CUDA, "%s, %s: not on cuda", what, part);
    CHECK_MSG(amp_tensor_dtype(ref) == amp_tensor_dtype(got), "%s, %s: dtype %s, expected %s", what, part,
              amp_dtype_name(amp_tensor_dtype(got)), amp_dtype_name(amp_tensor_dtype(ref)));
    char a[96], b[96];
    amp_shape_str(amp_tensor_shape(ref), a, sizeof a);
    amp_shape_str(amp_tensor_shape(got), b, sizeof b);
    CHECK_MSG(strcmp(a, b) == 0, "%s, %s: shape %s, expected %s", what, part, b, a);
    int64_t n = amp_tensor_numel(ref);
    if (strcmp(a, b) != 0 || n == 0)
        return;
    float *r = malloc((size_t)n * sizeof *r), *g = malloc((size_t)n * sizeof *g);
    CHECK_OK(amp_tensor_copy_out(ref, r, AMP_F32));
    CHECK_OK(amp_tensor_copy_out(got, g, AMP_F32));
    for (int64_t i = 0; i < n; i++)
        if (!close_to(r[i], g[i], tol)) {
            harness_fail(__FILE__, __LINE__, "%s, %s: element %lld is %.9g on cuda, %.9g on the cpu (tol %.2g)", what,
                         part, (long long)i, g[i], r[i], tol);
            break;
        }
    free(r);
    free(g);
}

/* t, moved to the device (checked). */
static inline amp_tensor *on_cuda(amp_tensor *t)
{
    CHECK_OK(amp_tensor_move(t, AMP_CUDA));
    return t;
}

/* Whether t (on any device) holds exactly the bytes of want, in its own
 * dtype. */
static inline bool holds_bits(const amp_tensor *t, const void *want, size_t bytes)
{
    void *got = malloc(bytes);
    bool ok = got && amp_tensor_copy_out(t, got, amp_tensor_dtype(t)) == AMP_OK && memcmp(got, want, bytes) == 0;
    free(got);
    return ok;
}

/* main's exit status: harness_done()'s, but 77 (CTest's "Skipped", not a
 * pass) when every test skipped for want of a GPU. */
static inline int cuda_rig_done(void)
{
    int rc = harness_done();
    return rc == 0 && !amp_cuda_available() ? 77 : rc;
}

#endif
