/*
 * emu.h - what the parts of cudaemu share (C++ only). cudaemu stands in for
 * the CUDA runtime and cuBLASLt on a machine without a GPU, so that the
 * CUDA backend's own source runs - kernels, host logic, GEMM calls - and
 * its tests compare it against the CPU backend in CI. See README.md here.
 *
 * Device memory is host memory that cudaemu keeps inaccessible (PROT_NONE)
 * except while the emulated device works on it: a kernel, a copy, a
 * memset, a cuBLASLt call. Host code that dereferences a device pointer
 * therefore faults at once, as it would (with garbage) on a real GPU.
 */
#ifndef AMPC_CUDA_EMU_H
#define AMPC_CUDA_EMU_H

#include <stddef.h>

namespace emu {

/* Whether [p, p + bytes) lies inside one live device allocation
 * (bytes 0: whether p does). */
bool device_range(const void *p, size_t bytes);

/* While one of these lives, device memory is readable and writable by
 * the calling host thread's emulated device work. Nests. */
struct device_scope {
    device_scope();
    ~device_scope();
    device_scope(const device_scope &) = delete;
    device_scope &operator=(const device_scope &) = delete;
};

/* Whether s is the default stream (NULL) or one cudaStreamCreate* made
 * and cudaStreamDestroy has not ended; when not, a misuse naming `what`
 * is reported. For nccl.cc, whose collectives take a stream. */
bool stream_valid(const void *s, const char *what);

/* A misuse the emulator caught (a host pointer handed to a kernel, a copy
 * in the wrong direction ...): printed to stderr with "cudaemu:" in front,
 * and remembered as a sticky launch failure that the next
 * cudaGetLastError / cudaStreamSynchronize returns. */
void misuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* How many misuses were reported so far; forgets them (the exit status no
 * longer counts them). For runtime_selftest, which provokes them. */
unsigned long take_misuses(void);

} // namespace emu

#endif
