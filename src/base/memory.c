/*
 * memory.c - aligned allocation for tensor storage and scratch, with the
 * byte counts behind amp_memory_stats().
 *
 * 64-byte alignment lets AVX-512 kernels use aligned loads on whole rows.
 * Each block carries a 64-byte header holding its size, so frees can be
 * counted and the peak of live bytes measured: mixed precision's memory
 * saving shows up there.
 */
#include "base/base.h"

#include <stdatomic.h>
#include <stdlib.h>

#define HEADER 64

static _Atomic size_t live_bytes, peak_bytes, n_allocs;

void *amp_alloc(size_t nbytes)
{
    size_t n = (nbytes + 63) & ~(size_t)63;
    if (n < nbytes || n > SIZE_MAX - HEADER) {
        amp_set_error(AMP_ERR_MEMORY, "out of memory allocating %zu bytes", nbytes);
        return NULL;
    }
    char *p = aligned_alloc(64, n + HEADER);
    if (!p) {
        amp_set_error(AMP_ERR_MEMORY, "out of memory allocating %zu bytes", nbytes);
        return NULL;
    }
    *(size_t *)p = n;
    size_t now = atomic_fetch_add(&live_bytes, n) + n;
    size_t peak = atomic_load(&peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now))
        ;
    atomic_fetch_add(&n_allocs, 1);
    return p + HEADER;
}

void amp_free(void *ptr)
{
    if (!ptr)
        return;
    char *p = (char *)ptr - HEADER;
    atomic_fetch_sub(&live_bytes, *(size_t *)p);
    free(p);
}

amp_memory_stats amp_memory_get_stats(void)
{
    return (amp_memory_stats){atomic_load(&live_bytes), atomic_load(&peak_bytes),
                              atomic_load(&n_allocs)};
}

void amp_memory_reset_peak(void) { atomic_store(&peak_bytes, atomic_load(&live_bytes)); }
