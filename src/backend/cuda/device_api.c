/*
 * device_api.c - the public CUDA device API of ampc.h (amp_cuda_*):
 * whether CUDA is there, its settings and its memory, answered by the
 * CUDA backend (without CUDA built in, stub.c's answers: no device, "ampc
 * was built without CUDA").
 */
#include "backend/cuda/cuda_backend.h"
#include "base/base.h"

bool amp_cuda_available(void) { return cuda_device_count() > 0; }
int amp_cuda_device_count(void) { return cuda_device_count(); }
bool amp_cuda_bf16_supported(void) { return cuda_device_count() > 0 && cuda_compute_capability() >= 80; }
void amp_cuda_allow_tf32(bool on) { cuda_set_tf32(on); }
bool amp_cuda_tf32_allowed(void) { return cuda_get_tf32(); }
amp_status amp_cuda_synchronize(void) { return cuda_synchronize(); }
amp_memory_stats amp_cuda_memory_get_stats(void) { return cuda_memory_stats(); }
void amp_cuda_memory_reset_peak(void) { cuda_memory_reset_peak(); }
void amp_cuda_empty_cache(void) { cuda_empty_cache(); }

amp_status amp_cuda_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return amp_set_error(AMP_ERR_ARG, "cuda_mem_get_info: NULL argument");
    return cuda_mem_info(free_bytes, total_bytes);
}
