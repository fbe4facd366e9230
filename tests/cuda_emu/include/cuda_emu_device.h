/*
 * cuda_emu_device.h (cudaemu) - the device side of CUDA C++ on the host:
 * what nvcc provides implicitly to a .cu file, for the subset ampc's
 * kernels use.
 *
 * A kernel launch `k<<<grid, block, shmem, stream>>>(args)` is rewritten by
 * the build (tests/cuda_emu/launch.sed) into
 * `::emu::launch("k", grid, block, shmem, stream)(k, args)`. The launch
 * checks the configuration and every pointer argument (it must be device
 * memory or NULL), then runs the grid block after block; the threads of a
 * block run as fibers on the calling thread, switching only at
 * __syncthreads and warp shuffles, so those see every other thread of the
 * block (or warp) arrive first, as on the device. Threads that meet
 * different barriers (a divergent __syncthreads) are a reported misuse,
 * not a hang. __shared__ variables are function statics: one instance
 * shared by the block, as on the device (blocks run one after another).
 *
 * Not modelled: concurrency between blocks (they run in order), warp
 * lockstep outside shuffles, memory fences, dynamic shared memory.
 */
#ifndef CUDAEMU_DEVICE_H
#define CUDAEMU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static
#define __launch_bounds__(...)
#define __grid_constant__

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};

namespace emu {

/* The running thread's coordinates, set by the scheduler before it
 * switches into a thread's fiber. */
extern thread_local uint3 thread_idx, block_idx;
extern thread_local dim3 block_dim, grid_dim;

/* Barriers. Every thread of the block (sync_block) or of the warp
 * (sync_warp) that has not exited must arrive. */
void sync_block(void);
int sync_block_or(int pred);
void sync_warp(unsigned mask);
/* The running thread's 8-byte shuffle slot (read by the others between
 * the two warp barriers of a shuffle), and another thread's. */
uint64_t *shuffle_slot(unsigned thread);
bool thread_exists(unsigned thread);
/* The running thread's index in its block, x fastest. */
unsigned linear_tid(void);

/* A misuse the emulator caught (tests/cuda_emu/emu.h says more). */
void misuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Runs body() for every thread of the grid (see the top of this file).
 * Returns false (with a misuse reported) when the configuration is bad. */
typedef void (*body_fn)(void *ctx);
void run_grid(const char *kernel, dim3 grid, dim3 block, body_fn body, void *ctx);

/* Launch-time checks: the configuration and the stream; each pointer
 * argument. */
bool launch_ok(const char *kernel, dim3 grid, dim3 block, size_t shmem, const void *stream);
void check_pointer_arg(const char *kernel, int index, const void *p);

template <class T> inline void check_arg(const char *kernel, int index, const T &v)
{
    if constexpr (std::is_pointer_v<T>)
        check_pointer_arg(kernel, index, (const void *)v);
    (void)kernel, (void)index, (void)v;
}

template <class... P> struct kernel_call {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> args;
    static void run(void *self)
    {
        kernel_call *c = (kernel_call *)self;
        std::apply(c->k, c->args); /* each thread gets the arguments by value, as a kernel does */
    }
};

struct launcher {
    const char *name;
    dim3 grid, block;
    size_t shmem;
    const void *stream;

    template <class... P, class... A> void operator()(void (*k)(P...), A &&...a) const
    {
        static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
        /* CUDA's limit on a launch's arguments (without the 32 KiB opt-in). */
        static_assert((0 + ... + sizeof(std::decay_t<P>)) <= 4096, "kernel arguments over 4 KiB");
        kernel_call<P...> call{k, std::tuple<std::decay_t<P>...>(static_cast<std::decay_t<P>>(std::forward<A>(a))...)};
        if (!launch_ok(name, grid, block, shmem, stream))
            return;
        int i = 0;
        std::apply([&](const auto &...v) { (check_arg(name, i++, v), ...); }, call.args);
        run_grid(name, grid, block, &kernel_call<P...>::run, &call);
    }
};

inline launcher launch(const char *name, dim3 grid, dim3 block, size_t shmem = 0, const void *stream = nullptr)
{
    return launcher{name, grid, block, shmem, stream};
}

} // namespace emu

#define threadIdx (::emu::thread_idx)
#define blockIdx (::emu::block_idx)
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)
#define warpSize 32

inline void __syncthreads(void) { emu::sync_block(); }
inline int __syncthreads_or(int pred) { return emu::sync_block_or(pred); }

/* The value of var held by lane (lane id + delta) of the same width-wide
 * segment, or the caller's own when that lane is past the segment: two
 * warp barriers around the exchange through the shuffle slots. */
template <class T> inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of an unsupported type");
    uint64_t mine = 0;
    memcpy(&mine, &var, sizeof var);
    const unsigned me = emu::linear_tid();
    *emu::shuffle_slot(me) = mine;
    emu::sync_warp(mask);
    const unsigned lane = me & 31u, seg = lane & ~(unsigned)(width - 1);
    T out = var;
    if (lane + delta < seg + (unsigned)width) {
        const unsigned src = me + delta;
        if (!emu::thread_exists(src) || !((mask >> (lane + delta)) & 1u))
            emu::misuse("__shfl_down_sync: lane %u reads lane %u, which is not part of the exchange",
                        lane, lane + delta);
        else
            memcpy(&out, emu::shuffle_slot(src), sizeof out);
    }
    emu::sync_warp(mask);
    return out;
}

/* Fibers never run at the same time: a plain read-modify-write is atomic. */
template <class T> inline T atomicAdd(T *address, T val)
{
    T old = *address;
    *address = old + val;
    return old;
}

/* Explicitly rounded arithmetic (no contraction into an FMA; the emulator
 * is built with -ffp-contract=off throughout). */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

inline unsigned int __float_as_uint(float f)
{
    unsigned int u;
    memcpy(&u, &f, 4);
    return u;
}
inline float __uint_as_float(unsigned int u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, 4);
    return f;
}
inline double __longlong_as_double(long long v)
{
    double d;
    memcpy(&d, &v, 8);
    return d;
}
inline long long __double_as_longlong(double d)
{
    long long v;
    memcpy(&v, &d, 8);
    return v;
}

#endif
