/*
 * base.h - what every layer uses: the per-thread error, CPU features,
 * threads, the random generator, and aligned memory.
 *
 * Defines: amp_set_error, amp_fail_null, amp_warn, amp_alloc/free, philox,
 * thread count, ptr_hash.
 */
#ifndef AMPC_BASE_H
#define AMPC_BASE_H

#include "ampc.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define AMP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define AMP_PRINTF(f, a)
#endif

/* Sets this thread's error (overwrites any earlier one) and returns st. */
amp_status amp_set_error(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);
/* As amp_set_error, returning NULL: `return amp_fail_null(...)`. */
void *amp_fail_null(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);
/* Sends a warning to the handler (amp_set_warning_handler; by default
 * "ampc warning: ..." on stderr). */
void amp_warn(const char *fmt, ...) AMP_PRINTF(1, 2);

/* 64-byte aligned allocation; size 0 gives a valid pointer. Sets an
 * AMP_ERR_MEMORY error on failure. */
void *amp_alloc(size_t nbytes);
void amp_free(void *p);

/* The host allocator's memory categories (record/mem_ledger.h): the size
 * class a request of n bytes takes (what it counts), a block's move to
 * another category, and the figures. */
size_t mem_host_block_size(size_t nbytes);
void mem_host_retag(void *p, amp_mem_category c);
amp_status mem_host_categories(amp_memory_categories *out);

/* Philox4x32-10: four 32-bit random words for (key, counter). */
void amp_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]);
/* Reserves n counter values of the global generator; returns the seed in
 * *seed and the first counter. */
uint64_t amp_rng_reserve(uint64_t n, uint64_t *seed);
/* Uniform float in [0, 1) from a 32-bit word (24 random bits). */
static inline float amp_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* A slot for pointer p in an open-addressing table of mask + 1 slots (a
 * power of two): the address mixed by MurmurHash3's 64-bit finalizer
 * steps, so that aligned addresses spread over the slots. */
static inline size_t ptr_hash(const void *p, size_t mask)
{
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h & mask;
}

/* Number of threads kernels should use: the setting, or 1 inside an
 * amp_parallel_for range (nested loops run inline). */
int amp_threads(void);
/* The calling thread's tid in the current amp_parallel_for (or in a
 * kernel's own OpenMP team); 0 outside: which per-thread scratch slice a
 * kernel uses. */
int amp_thread_num(void);

/* OpenMP pragmas that vanish (without an unknown-pragma warning) when the
 * library is built without OpenMP. */
#ifdef _OPENMP
#define OMP_PRAGMA(x) _Pragma(#x)
#else
#define OMP_PRAGMA(x)
#endif

/* Elements of work below which a kernel stays on one thread: under this,
 * waking threads costs more than it saves. */
#define EW_PARALLEL_MIN 32768

#endif
