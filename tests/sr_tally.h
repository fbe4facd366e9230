/*
 * sr_tally.h - the check of a stochastic rounding to bf16 (round_rule.h)
 * that test_levers.c (optimizer state) and test_weight_sr.c (weights)
 * share: each stored bf16 value must be one of the two around its f32
 * value, rounded away from zero as often as the discarded fractions say.
 *
 * Defines: sr_tally, sr_tally_add.
 */
#ifndef AMPC_TEST_SR_TALLY_H
#define AMPC_TEST_SR_TALLY_H

#include <stdint.h>
#include <string.h>

typedef struct {
    double ups;      /* stored values rounded away from zero */
    double expected; /* the discarded fractions' sum: ups' expectation */
    double var;      /* ups' variance */
    int64_t outside; /* stored values that are neither neighbour */
} sr_tally;

/* Adds n stored values got (bf16 bits) of the f32 values want to t. */
static inline void sr_tally_add(sr_tally *t, const float *want, const uint16_t *got, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &want[j], 4);
        const uint16_t down = (uint16_t)(u >> 16);
        const double frac = (u & 0xffffu) / 65536.0;
        if (got[j] == down + 1 && frac > 0)
            t->ups += 1;
        else if (got[j] != down)
            t->outside++;
        t->expected += frac;
        t->var += frac * (1 - frac);
    }
}

#endif
