/*
 * flush.h - the calling thread's flush-subnormals mode, which
 * amp_set_flush_denormal (flush.c) sets and the thread pool's workers
 * (parallel.c) copy: on x86 MXCSR's FTZ (bit 15: a result that would be
 * subnormal is written as zero) and DAZ (bit 6: a subnormal input is read
 * as zero), on AArch64 FPCR's FZ (bit 24: both). Other architectures have
 * none (FLUSH_MODE_KNOWN is 0 there).
 *
 * Defines: FLUSH_MODE_KNOWN, flush_thread_set, flush_thread_on.
 */
#ifndef AMPC_BASE_FLUSH_H
#define AMPC_BASE_FLUSH_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH_MODE_KNOWN 1
#define FLUSH_BITS (1u << 15 | 1u << 6) /* FTZ | DAZ */
static inline void flush_thread_set(bool on)
{
    unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? csr | FLUSH_BITS : csr & ~FLUSH_BITS);
}
static inline bool flush_thread_on(void) { return (_mm_getcsr() & FLUSH_BITS) == FLUSH_BITS; }
#elif defined(__aarch64__)
#define FLUSH_MODE_KNOWN 1
#define FLUSH_BITS ((uint64_t)1 << 24) /* FZ */
static inline uint64_t flush_fpcr(void)
{
    uint64_t r;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(r));
    return r;
}
static inline void flush_thread_set(bool on)
{
    uint64_t r = flush_fpcr();
    r = on ? r | FLUSH_BITS : r & ~FLUSH_BITS;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(r));
}
static inline bool flush_thread_on(void) { return (flush_fpcr() & FLUSH_BITS) != 0; }
#else
#define FLUSH_MODE_KNOWN 0
static inline void flush_thread_set(bool on) { (void)on; }
static inline bool flush_thread_on(void) { return false; }
#endif

#endif
