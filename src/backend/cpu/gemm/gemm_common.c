/*
 * gemm_common.c - the epilogue's pass over a whole C and the thread's
 * gemm_path (gemm_common.h); the drivers' shared error (gemm_kernels.h).
 */
#include "backend/cpu/gemm/gemm_common.h"
#include "backend/cpu/gemm/gemm_kernels.h"
#include "base/base.h"
#include "base/parallel.h"

_Thread_local const char *gemm_path;

amp_status gemm_packing_failed(int64_t M, int64_t N, int64_t K)
{
    return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory for packing buffers (%lld x %lld x %lld)",
                         (long long)M, (long long)N, (long long)K);
}

/* The epilogue over all of C at once (after a product oneDNN or a trivial
 * path ran): one call per block of rows and 1024 columns. */
typedef struct {
    const gemm_epilogue *ep;
    int64_t N;
} ep_job;

static void ep_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const ep_job *j = ctx;
    for (int64_t j0 = 0; j0 < j->N; j0 += 1024)
        j->ep->fn(j->ep->ctx, lo, j0, (int)(hi - lo), (int)(j->N - j0 < 1024 ? j->N - j0 : 1024));
}

void gemm_epilogue_all(const gemm_epilogue *ep, int64_t M, int64_t N)
{
    if (!ep || M <= 0 || N <= 0)
        return;
    ep_job j = {ep, N};
    amp_parallel_for(M, gemm_row_grain(N) < 64 ? gemm_row_grain(N) : 64, ep_range, &j);
}
