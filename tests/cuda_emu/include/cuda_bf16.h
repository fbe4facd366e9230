/*
 * cuda_bf16.h (cudaemu) - __nv_bfloat16 and its two conversions the
 * backend uses: f32 -> bf16 rounds to nearest even (NaN kept quiet,
 * overflow to inf), bf16 -> f32 is exact (the top half of the f32).
 */
#ifndef CUDAEMU_CUDA_BF16_H
#define CUDAEMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t __x;
};

static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t bits = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    __nv_bfloat16 h;
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        h.__x = (uint16_t)((bits >> 16) | 0x40u);
    else
        h.__x = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    return h;
}

#endif
