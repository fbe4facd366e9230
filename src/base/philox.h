/*
 * philox.h - Philox4x32-10 (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11), once, as an inline function that the C
 * compiler and nvcc both compile: the host's generator (amp_philox,
 * rng.c) and the CUDA kernels that draw on the device (dropout) give the
 * same words for the same key and counter.
 */
#ifndef AMPC_PHILOX_H
#define AMPC_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define PHILOX_FN static __host__ __device__ __forceinline__
#else
#define PHILOX_FN static inline
#endif

/* The four 32-bit words for (key, counter_hi:counter_lo): ten rounds. */
PHILOX_FN void philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0; /* the multipliers M0, M1 */
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u; /* the Weyl sequence's steps W0, W1 */
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

#endif
