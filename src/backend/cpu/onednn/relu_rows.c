/*
 * relu_rows.c - the relu of a fused product or convolution (cpu_relu_rows
 * in onednn.h), applied in its own pass after oneDNN's primitives and
 * ampc's kernels alike.
 */
#include "backend/cpu/onednn/onednn.h"
#include "base/base.h"
#include "base/parallel.h"

/* relu over one row of C, as the relu op computes it (NaN stays NaN). */
static void relu_row(void *row, amp_dtype dt, int64_t n)
{
    /* Branch-free, so that the compiler vectorizes it: with signs at random
     * a branch per element mispredicts half the time (the mlp's relu
     * after oneDNN's product took 4 ms a step that way). */
    if (dt == AMP_F32) {
        /* As bits: a set sign on a non-NaN (|x| <= inf) means zero. */
        uint32_t *r = row;
        for (int64_t j = 0; j < n; j++) {
            uint32_t v = r[j];
            uint32_t zero = (v >> 31) & ((v & 0x7FFFFFFFu) <= 0x7F800000u);
            r[j] = v & (zero - 1u);
        }
        return;
    }
    /* f16 / bf16: the same on 16 bits. */
    const uint16_t inf = dt == AMP_F16 ? 0x7C00 : 0x7F80;
    uint16_t *r = row;
    for (int64_t j = 0; j < n; j++) {
        uint16_t v = r[j];
        uint16_t zero = (uint16_t)((v >> 15) & ((v & 0x7FFF) <= inf));
        r[j] = (uint16_t)(v & (uint16_t)(zero - 1u));
    }
}

/* Rows of a batch of M x N matrices (batch stride sc, row stride ldc, in
 * elements of es bytes). */
typedef struct {
    char *c;
    amp_dtype dt;
    size_t es;
    int64_t M, N, ldc, sc;
} rows_job;

static void relu_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const rows_job *j = ctx;
    for (int64_t r = lo; r < hi; r++)
        relu_row(j->c + (size_t)((r / j->M) * j->sc + (r % j->M) * j->ldc) * j->es, j->dt, j->N);
}

void cpu_relu_rows(void *C, amp_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t ldc, int64_t sc)
{
    rows_job j = {C, dt, amp_dtype_size(dt), M, N, ldc, sc};
    /* 32K elements a grain: a pass under 64K elements stays on this thread. */
    const int64_t grain = N >= 32768 ? 1 : (32768 + N - 1) / (N > 0 ? N : 1);
    amp_parallel_for(batch * M, grain, relu_range, &j);
}
