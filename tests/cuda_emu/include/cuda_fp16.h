/*
 * cuda_fp16.h (cudaemu) - __half and its two conversions the backend uses,
 * on the host: f32 -> f16 rounds to nearest even (overflow to inf, NaN
 * kept quiet), f16 -> f32 is exact. Written from IEEE 754 binary16, not
 * from ampc's own converters, so that the emulated device checks them.
 */
#ifndef CUDAEMU_CUDA_FP16_H
#define CUDAEMU_CUDA_FP16_H

#include <stdint.h>
#include <string.h>

struct __half {
    uint16_t __x;
};

static inline float __half2float(__half h)
{
    const uint32_t sign = (uint32_t)(h.__x & 0x8000u) << 16, exp = (h.__x >> 10) & 0x1fu, man = h.__x & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, or NaN with its payload */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13); /* rebias 15 -> 127 */
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: man * 2^-24, exact in f32 */
        float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline __half __float2half_rn(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t abs = bits & 0x7fffffffu;
    __half h;
    if (abs > 0x7f800000u) { /* NaN: keep the top payload bits, force quiet */
        h.__x = (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
        return h;
    }
    if (abs >= 0x477ff000u) { /* rounds to >= 65520: inf */
        h.__x = (uint16_t)(sign | 0x7c00u);
        return h;
    }
    if (abs < 0x38800000u) { /* below 2^-14: a subnormal (or zero), in units of 2^-24 */
        float a;
        memcpy(&a, &abs, 4);
        /* a * 2^24 is < 1024 and exact up to the rounding we want; let
         * the FPU round to nearest even by adding 2^23 (0x1p23f + x has
         * a unit of 1 there). */
        float r = (a * 0x1p24f + 0x1p23f) - 0x1p23f;
        h.__x = (uint16_t)(sign | (uint16_t)r);
        return h;
    }
    /* Normal: drop 13 mantissa bits with round to nearest even; a carry
     * into the exponent is the right answer (up to inf, excluded above). */
    uint32_t v = abs - 0x38000000u; /* rebias 127 -> 15 in the exponent field */
    uint32_t round = 0xfffu + ((v >> 13) & 1u);
    h.__x = (uint16_t)(sign | (uint16_t)((v + round) >> 13));
    return h;
}

#endif
