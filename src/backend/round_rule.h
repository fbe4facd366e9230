/*
 * round_rule.h - stochastic rounding of optimizer state to bf16, once, for
 * every backend (inline functions that the C compiler and nvcc both
 * compile): the random bits are a counter-based hash of (parameter,
 * step, state slot, element), so an element's rounding depends on nothing
 * else - not the thread, block, vector width or device - and a resumed run
 * (the same step counts) rounds as the straight one.
 *
 * Why: with round-to-nearest-even, an update smaller than half a bf16
 * unit in the last place (2^-9 of the value) is lost. Adam's exp_avg_sq
 * (beta2 0.999) moves by 0.1% of (g^2 - v) a step, under half an ulp once
 * v is near its level, so only the large g^2 of a heavy-tailed gradient
 * move it - upward: it drifts above the f32 value (docs/memory.md). Adding
 * 16 uniform random bits below bf16's last place before truncating rounds
 * up with probability equal to the discarded fraction: the stored value is
 * the f32 value in expectation.
 */
#ifndef AMPC_ROUND_RULE_H
#define AMPC_ROUND_RULE_H

#include "backend/pointwise.h"

#include <stdint.h>

/* The slot whose bits round a bf16 parameter without a master (the
 * optimizers' state uses slots 0..2). */
#define WEIGHT_SR_SLOT 3

/* The 16 random bits of element j of state slot `slot` of the parameter
 * with counter `index`, at its step t (1 on its first step):
 * splitmix64's finaliser over the packed counters. */
PW_FN uint32_t be_sr_bits(int index, int64_t t, int slot, int64_t j)
{
    uint64_t z = ((uint64_t)(uint32_t)index << 34) ^ ((uint64_t)t << 2) ^ (uint64_t)slot;
    z = z * 0x9E3779B97F4A7C15ull + (uint64_t)j;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z & 0xffffu);
}

/* v as bf16 bits, rounded stochastically with the 16 bits r: truncation
 * of v + r units of 2^-16 of bf16's last place (toward zero in magnitude,
 * so the probability of rounding away from zero is the discarded
 * fraction). NaN stays a (quiet) NaN; inf stays inf; a value above bf16's
 * largest may round to inf, as its distance to it allows. */
PW_FN uint16_t be_bf16_sr(float v, uint32_t r)
{
    union {
        float f;
        uint32_t u;
    } x;
    x.f = v;
    if ((x.u & 0x7f800000u) == 0x7f800000u)
        return (uint16_t)((x.u >> 16) | ((x.u & 0x007fffffu) ? 0x0040u : 0u));
    return (uint16_t)((x.u + r) >> 16);
}

#endif
