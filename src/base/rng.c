/*
 * rng.c - the global counter-based random generator (Philox4x32-10).
 *
 * A counter-based generator makes every random op reproducible from
 * (seed, offset) alone: an op reserves a range of counters, and the same
 * numbers come back whenever the same range is replayed (dropout's
 * backward regenerates its mask this way instead of storing it).
 */
#include "base/base.h"

#include <pthread.h>

static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static amp_rng_state rng = {0x5eedull, 0};

/* Constants from Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3" (SC'11). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void amp_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint64_t amp_rng_reserve(uint64_t n, uint64_t *seed)
{
    pthread_mutex_lock(&rng_lock);
    uint64_t first = rng.offset;
    *seed = rng.seed;
    rng.offset += n;
    pthread_mutex_unlock(&rng_lock);
    return first;
}

void amp_manual_seed(uint64_t seed)
{
    pthread_mutex_lock(&rng_lock);
    rng.seed = seed;
    rng.offset = 0;
    pthread_mutex_unlock(&rng_lock);
}

amp_rng_state amp_rng_get_state(void)
{
    pthread_mutex_lock(&rng_lock);
    amp_rng_state s = rng;
    pthread_mutex_unlock(&rng_lock);
    return s;
}

void amp_rng_set_state(amp_rng_state s)
{
    pthread_mutex_lock(&rng_lock);
    rng = s;
    pthread_mutex_unlock(&rng_lock);
}
