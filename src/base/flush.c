/*
 * flush.c - amp_set_flush_denormal: PyTorch's torch.set_flush_denormal
 * for the calling thread and for every thread ampc's kernels run on.
 *
 * The mode is per thread (a control register, flush.h). The caller's is
 * set here; the thread pool's workers take the latest setting when they
 * next join a region (parallel_set_flush), including workers created
 * later; OpenMP's team (oneDNN's threads with AMPC_ONEDNN_SPLIT=0, the
 * kernels still on OpenMP) gets it from one parallel region here, and
 * threads libgomp adds to a larger team later start from the calling
 * thread's registers, which hold it.
 */
#include "base/base.h"
#include "base/flush.h"
#include "base/parallel.h"

#include <stdalign.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Whether the CPU has the mode. x86: FTZ needs only SSE, but DAZ is
 * missing on the first SSE2 processors; MXCSR_MASK, which FXSAVE stores
 * at byte 28 (0 there means the default mask 0xFFBF, without DAZ), says
 * whether bit 6 may be set (Intel SDM vol. 1, 11.6.6). */
static bool supported(void)
{
#if defined(__x86_64__) || defined(__i386__)
    alignas(16) unsigned char area[512];
    memset(area, 0, sizeof area);
    __asm__ __volatile__("fxsave %0" : "=m"(area));
    uint32_t mask;
    memcpy(&mask, area + 28, sizeof mask);
    if (mask == 0)
        mask = 0xFFBF;
    return (mask >> 6 & 1) != 0;
#else
    return FLUSH_MODE_KNOWN;
#endif
}

amp_status amp_set_flush_denormal(bool on)
{
    if (on && !supported())
        return amp_set_error(AMP_ERR_DEVICE, "amp_set_flush_denormal: this CPU cannot flush subnormals "
                                             "(no denormals-are-zero mode); arithmetic keeps them");
    if (!FLUSH_MODE_KNOWN)
        return AMP_OK; /* off: there is nothing to clear */
    flush_thread_set(on);
    parallel_set_flush(on);
#ifdef _OPENMP
    if (!omp_in_parallel()) {
#pragma omp parallel
        flush_thread_set(on);
    }
#endif
    return AMP_OK;
}

bool amp_flush_denormal(void) { return flush_thread_on(); }
