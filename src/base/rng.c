/*
 * rng.c - the global counter-based random generator (Philox4x32-10).
 *
 * A counter-based generator makes every random op reproducible from
 * (seed, offset) alone: an op reserves a range of counters, and the same
 * numbers come back whenever the same range is replayed (dropout's
 * backward regenerates its mask this way instead of storing it).
 */
#include "base/base.h"
#include "base/philox.h"

#include <pthread.h>

static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static amp_rng_state rng = {0x5eedull, 0};

void amp_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4])
{
    philox4x32(key, counter_hi, counter_lo, out);
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
