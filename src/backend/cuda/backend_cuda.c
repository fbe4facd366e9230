/*
 * backend_cuda.c - the CUDA backend's table. With CUDA built in, the
 * primitives are the functions of cuda_backend.h (kernels in the .cu
 * files, compositions of them in the .c files beside this one); without,
 * the table has no primitives and available() is false, so every use is a
 * clear "cuda is not available (ampc was built without CUDA)" error.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "base/base.h"

static bool cuda_available(void) { return cuda_device_count() > 0; }

/* As PyTorch: f16 or bf16 only, and bf16 only from compute capability 8.0. */
static amp_status cuda_autocast_check(amp_dtype target)
{
    if (target != AMP_F16 && target != AMP_BF16)
        return amp_set_error(AMP_ERR_DTYPE, "autocast_begin: cuda autocast supports f16 and bf16, not %s",
                             amp_dtype_name(target));
    int cc = cuda_device_count() > 0 ? cuda_compute_capability() : 0;
    if (target == AMP_BF16 && cc > 0 && cc < 80)
        return amp_set_error(AMP_ERR_DEVICE,
                             "autocast_begin: this GPU (compute capability %d.%d) does not support bf16 (8.0 or more "
                             "needed); use f16",
                             cc / 10, cc % 10);
    return AMP_OK;
}

/* Every op row runs here (supports_op NULL). */
const amp_backend amp_backend_cuda = {
    .name = "cuda",
    .device = AMP_CUDA,
    .available = cuda_available,
    .unavailable_reason = cuda_unavailable_reason,
    .autocast_dtype = AMP_F16,
    .autocast_check = cuda_autocast_check,

#ifdef AMPC_HAVE_CUDA
    .alloc = cuda_malloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .fill = cuda_fill_pattern,
    .convert = cuda_convert,
    .iota_i64 = cuda_iota_i64,
    .synchronize = cuda_synchronize,
    .device_index = cuda_device_index,
    .queue_handle = cuda_stream_handle,
    .memory_stats = cuda_memory_stats,
    .memory_reset_peak = cuda_memory_reset_peak,
    .empty_cache = cuda_empty_cache,
    .mem_block_size = cuda_block_size,
    .mem_retag = cuda_mem_retag,
    .memory_categories = cuda_memory_categories,

    /* pointwise */
    .pointwise = cuda_ew,
    .accumulate = cuda_accumulate,
    .reduce_sum = cuda_reduce_sum_dims,
    .argmax = cuda_argmax,
    .permute = cuda_permute,
    .copy_2d = cuda_copy_2d,

    /* linalg */
    .gemm = cuda_linalg_gemm,
    .bias_grad = cuda_linalg_bias_grad,
    .attention = cuda_attention,
    .attention_backward = cuda_attention_backward,

    /* nn */
    .softmax = cuda_softmax,
    .softmax_backward = cuda_softmax_backward,
    .cross_entropy = cuda_cross_entropy,
    .cross_entropy_backward = cuda_cross_entropy_backward,
    .layer_norm = cuda_layer_norm,
    .layer_norm_backward = cuda_layer_norm_backward,
    .embedding = cuda_embedding,
    .embedding_backward = cuda_embedding_backward,
    .dropout = cuda_dropout,

    /* conv */
    .conv2d = cuda_conv2d,
    .conv2d_backward = cuda_conv2d_backward,
    .pool2d = cuda_pool2d,
    .pool2d_backward = cuda_pool2d_backward,

    /* amp */
    .unscale = cuda_unscale,
    .count_nonfinite = cuda_count_nonfinite,
    .scaler_update = cuda_scaler_update,
    .scaler_count = cuda_scaler_count,
    .grad_sumsq = cuda_grad_sumsq,
    .clip_by_sumsq = cuda_clip_by_sumsq,

    /* optim */
    .sgd_step = cuda_sgd_step,
    .adam_step = cuda_adam_step,
#endif
};
