/*
 * cpu.c - CPU feature detection and the thread setting.
 *
 * Kernels ask amp_cpu_features() which paths they may take; tests lower
 * the mask with amp_cpu_limit() to compare vector paths with scalar ones.
 * On other architectures no x86 feature is ever reported.
 */
#include "base/base.h"
#include "base/parallel.h"

#include <stdatomic.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static _Atomic unsigned cpu_mask = ~0u;
static _Atomic int num_threads = 0;

static unsigned detect(void)
{
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#ifdef __clang__
    /* Debian 12's clang 14 (make fuzz builds with it) does not know "f16c"
     * in __builtin_cpu_supports: CPUID leaf 1, ECX bit 29. */
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1))
        f |= AMP_CPU_F16C;
#else
    if (__builtin_cpu_supports("f16c"))
        f |= AMP_CPU_F16C;
#endif
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f |= AMP_CPU_AVX2;
    if (__builtin_cpu_supports("avx512f"))
        f |= AMP_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw"))
        f |= AMP_CPU_AVX512BW;
#if (defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12)
    if (__builtin_cpu_supports("avx512bf16"))
        f |= AMP_CPU_AVX512BF16;
#endif
#endif
    return f;
}

unsigned amp_cpu_features(void)
{
    static _Atomic unsigned detected = 0;
    static _Atomic int done = 0;
    if (!atomic_load(&done)) {
        atomic_store(&detected, detect());
        atomic_store(&done, 1);
    }
    return atomic_load(&detected) & atomic_load(&cpu_mask);
}

void amp_cpu_limit(unsigned mask) { atomic_store(&cpu_mask, mask); }

void amp_set_num_threads(int n)
{
    atomic_store(&num_threads, n < 0 ? 0 : n);
#ifdef _OPENMP
    omp_set_num_threads(amp_threads());
#endif
}

/* The setting (amp_set_num_threads, else the online CPUs). */
static int configured_threads(void)
{
    int n = atomic_load(&num_threads);
    if (n > 0)
        return n;
    /* The online CPUs, read once: glibc's sysconf opens and parses
     * /sys/devices/system/cpu/online at each call (some 2 us), and every
     * op asks (amp_parallel_width). */
    static _Atomic int online;
    int c = atomic_load_explicit(&online, memory_order_relaxed);
    if (c <= 0) {
        long s = sysconf(_SC_NPROCESSORS_ONLN);
        c = s > 0 ? (int)s : 1;
        atomic_store_explicit(&online, c, memory_order_relaxed);
    }
    return c;
}

int amp_get_num_threads(void) { return configured_threads(); }

int amp_thread_num(void)
{
#ifdef _OPENMP
    /* In a kernel's own OpenMP team (one not converted to
     * amp_parallel_for yet), its OpenMP thread number. */
    if (omp_get_level() > 0)
        return omp_get_thread_num();
#endif
    return amp_parallel_tid();
}

int amp_threads(void)
{
    /* Inside an amp_parallel_for range a kernel runs on its own thread:
     * nested loops run inline, and an OpenMP team sized by this stays one
     * thread. */
    if (amp_in_parallel())
        return 1;
    return configured_threads();
}
