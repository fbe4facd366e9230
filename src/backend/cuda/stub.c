/*
 * stub.c - the CUDA backend's core-facing functions in a build without
 * CUDA (no nvcc, or -DAMPC_CUDA=OFF): no device is ever available, every
 * call that would need one fails with "ampc was built without CUDA". The
 * core can thus call the backend unconditionally; with CUDA the .cu files
 * define these instead and this file compiles to nothing.
 */
#ifndef AMPC_HAVE_CUDA

#include "backend/cuda/cuda_backend.h"
#include "base/base.h"

static const char reason[] = "ampc was built without CUDA";

static amp_status unavailable(void) { return amp_set_error(AMP_ERR_DEVICE, "cuda is not available (%s)", reason); }

int cuda_device_count(void) { return 0; }
const char *cuda_unavailable_reason(void) { return reason; }
int cuda_device_index(void) { return 0; }
void *cuda_stream_handle(void) { return NULL; }

void *cuda_malloc(size_t nbytes)
{
    (void)nbytes;
    unavailable();
    return NULL;
}

void cuda_free(void *p) { (void)p; }
amp_memory_stats cuda_memory_stats(void) { return (amp_memory_stats){0, 0, 0, 0, 0}; }
void cuda_memory_reset_peak(void) {}
size_t cuda_block_size(size_t nbytes) { return nbytes; }
void cuda_mem_retag(void *p, amp_mem_category c) { (void)p, (void)c; }
amp_status cuda_memory_categories(amp_memory_categories *out)
{
    if (!out)
        return amp_set_error(AMP_ERR_ARG, "memory_get_categories: NULL output");
    *out = (amp_memory_categories){0};
    return AMP_OK;
}
void cuda_memory_current(size_t cur[AMP_MEM_CATEGORY_COUNT])
{
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        cur[c] = 0;
}
amp_status cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    (void)free_bytes, (void)total_bytes;
    return unavailable();
}
void cuda_empty_cache(void) {}

amp_status cuda_copy(void *dst, amp_device ddev, const void *src, amp_device sdev, size_t nbytes)
{
    (void)dst, (void)ddev, (void)src, (void)sdev, (void)nbytes;
    return unavailable();
}

amp_status cuda_synchronize(void) { return unavailable(); }
/* No device, so ampc never waited for one. */
amp_cuda_sync_stats amp_cuda_get_sync_stats(void) { return (amp_cuda_sync_stats){0, 0, 0}; }
void amp_cuda_reset_sync_stats(void) {}
/* The switch is kept (and ignored) so a program behaves the same either way. */
static bool tf32;
void cuda_set_tf32(bool on) { tf32 = on; }
bool cuda_get_tf32(void) { return tf32; }

/* Called by the ops only with CUDA, but by tests/test_cuda.c directly. */
amp_status cuda_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                     int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, void *C, int64_t ldc, int64_t sc,
                     int64_t batch, amp_dtype abdt, amp_dtype cdt)
{
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)sa, (void)B, (void)ldb;
    (void)sb, (void)beta, (void)C, (void)ldc, (void)sc, (void)batch, (void)abdt, (void)cdt;
    return unavailable();
}

uint64_t cuda_launch_count(void) { return 0; }
int cuda_compute_capability(void) { return 0; }

/* Called by tests/test_cuda.c directly; without CUDA no epilogue is taken. */
uint64_t cuda_gemm_epilogues_taken(cuda_epilogue ep)
{
    (void)ep;
    return 0;
}

#else
typedef int ampc_cuda_stub_unused; /* ISO C wants a declaration in every file */
#endif
