/*
 * ckpt_rig.h - what the checkpoint tests (test_checkpoint.c,
 * test_checkpoint_ranges.c) share:
 *
 *   bytes, file_bytes   a file's bytes (p, n), read whole
 *   header_len          a safetensors file's header length (its first 8
 *                       bytes, little-endian)
 *   ckpt_train          steps first..first+n-1 of a mixed-precision run of
 *                       a 6-input, 3-class model: batch t is the same in
 *                       every run, so a resumed run can be compared with a
 *                       straight one
 *
 * Header-only (static inline), as tests/cuda_rig.h.
 */
#ifndef AMPC_TEST_CKPT_RIG_H
#define AMPC_TEST_CKPT_RIG_H

#include "harness.h"

typedef struct {
    unsigned char *p;
    size_t n;
} bytes;

/* p is NULL (n 0) when the file cannot be read. */
static inline bytes file_bytes(const char *path)
{
    bytes b = {0};
    b.p = (unsigned char *)test_read_file(path, &b.n);
    return b;
}

static inline uint64_t header_len(bytes f)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f.p[i];
    return n;
}

/* Autocast to dt on the CPU; the loss scaled by s. */
static inline void ckpt_train(amp_module *m, amp_optim *o, amp_scaler *s, amp_dtype dt, int first, int n)
{
    for (int t = first; t < first + n; t++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(16, 6), AMP_F32, -1, 1, 100 + (uint64_t)t);
        amp_tensor *y = test_uniform(AMP_SHAPE(16), AMP_I64, 0, 3, 200 + (uint64_t)t);
        amp_tensor *loss = NULL;
        AMP_AUTOCAST(AMP_CPU, dt) { loss = amp_cross_entropy(amp_module_forward(m, x), y); }
        CHECK(loss != NULL);
        CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
        CHECK_OK(amp_scaler_step(s, o, NULL));
        CHECK_OK(amp_scaler_update(s));
        amp_optim_zero_grad(o);
        amp_temps_free();
        amp_tensor_free(x);
        amp_tensor_free(y);
    }
}

#endif
