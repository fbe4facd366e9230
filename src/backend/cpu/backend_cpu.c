/*
 * backend_cpu.c - the CPU backend's table: every primitive of
 * backend/backend.h on host memory. The kernels live beside this file
 * (gemm*, onednn*, and one file per family of primitives); this file only
 * names them.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/base.h"

#include <string.h>

static bool cpu_available(void) { return true; }
static const char *cpu_unavailable_reason(void) { return "the CPU is always available"; }

static void *cpu_alloc(size_t nbytes) { return amp_alloc(nbytes); }
static void cpu_free(void *p) { amp_free(p); }

static amp_status cpu_copy(void *dst, amp_device ddev, const void *src, amp_device sdev, size_t nbytes)
{
    if (ddev != AMP_CPU || sdev != AMP_CPU)
        return amp_set_error(AMP_ERR_DEVICE, "copy: the cpu backend copies only within host memory");
    if (nbytes)
        memmove(dst, src, nbytes);
    return AMP_OK;
}

/* A zero pattern is one memset (tensor_zeros); others copy the pattern
 * once and then double what is written (memcpy-speed for any size). */
static amp_status cpu_fill(void *dst, int64_t n, const void *elem, size_t elem_size)
{
    const size_t total = (size_t)n * elem_size;
    if (total == 0)
        return AMP_OK;
    const unsigned char *e = elem;
    size_t z = 0;
    while (z < elem_size && e[z] == 0)
        z++;
    if (z == elem_size) {
        memset(dst, 0, total);
        return AMP_OK;
    }
    char *d = dst;
    memcpy(d, elem, elem_size);
    for (size_t have = elem_size; have < total;) {
        size_t k = have < total - have ? have : total - have;
        memcpy(d + have, d, k);
        have += k;
    }
    return AMP_OK;
}

static amp_status cpu_iota_i64(int64_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = i;
    return AMP_OK;
}

static amp_status cpu_synchronize(void) { return AMP_OK; }

/* The reference: every op row runs here (supports_op NULL). */
const amp_backend amp_backend_cpu = {
    .name = "cpu",
    .optim_writes_cast = true,
    .gemm_rounds_c = true,
    .device = AMP_CPU,
    .available = cpu_available,
    .unavailable_reason = cpu_unavailable_reason,
    .autocast_dtype = AMP_BF16,

    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .convert = cpu_convert,
    .iota_i64 = cpu_iota_i64,
    .synchronize = cpu_synchronize,
    .memory_stats = amp_memory_get_stats,
    .memory_reset_peak = amp_memory_reset_peak,
    .empty_cache = amp_memory_empty_cache,
    .mem_block_size = mem_host_block_size,
    .mem_retag = mem_host_retag,
    .memory_categories = mem_host_categories,

    /* pointwise */
    .pointwise = cpu_pointwise,
    .accumulate = cpu_accumulate,
    .reduce_sum = cpu_reduce_sum,
    .argmax = cpu_argmax,
    .permute = cpu_permute,
    .copy_2d = cpu_copy_2d,

    /* linalg */
    .gemm = cpu_gemm,
    .bias_grad = cpu_bias_grad,
    .attention = cpu_attention,
    .attention_backward = cpu_attention_backward,

    /* nn */
    .softmax = cpu_softmax,
    .softmax_backward = cpu_softmax_backward,
    .cross_entropy = cpu_cross_entropy,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .layer_norm = cpu_layer_norm,
    .layer_norm_backward = cpu_layer_norm_backward,
    .add_layer_norm = cpu_add_layer_norm,
    .layer_norm_backward_add = cpu_layer_norm_backward_add,
    .embedding = cpu_embedding,
    .embedding_backward = cpu_embedding_backward,
    .dropout = cpu_dropout,

    /* conv */
    .conv2d = cpu_conv2d,
    .conv2d_backward = cpu_conv2d_backward,
    .pool2d = cpu_pool2d,
    .pool2d_backward = cpu_pool2d_backward,

    /* amp */
    .unscale = cpu_unscale,
    .count_nonfinite = cpu_count_nonfinite,
    .scaler_update = cpu_scaler_update,
    .scaler_count = cpu_scaler_count,
    .grad_sumsq = cpu_grad_sumsq,
    .clip_by_sumsq = cpu_clip_by_sumsq,

    /* optim */
    .sgd_step = cpu_sgd_step,
    .adam_step = cpu_adam_step,
};
