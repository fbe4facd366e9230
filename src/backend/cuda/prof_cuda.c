/*
 * prof_cuda.c - the CUDA backend's side of the profiler that needs
 * record/profile.h (C only: the .cu files cannot include its C atomics):
 * registering the device timer whose marks profile.cu records, and the
 * PROF_KERNEL events gemm.cu opens around each cuBLASLt call and kernel.
 */
#ifdef AMPC_HAVE_CUDA

#include "backend/cuda/cuda_backend.h"
#include "record/profile.h"

static const prof_device_timer timer = {
    .mark = cuda_prof_mark,
    .resolve = cuda_prof_resolve,
    .reset = cuda_prof_reset,
    /* The device allocator's bytes per category (its ledger). */
    .memory = cuda_memory_current,
};

void cuda_prof_register(void) { prof_register_device_timer(AMP_CUDA, &timer); }

void *cuda_prof_kernel_begin(const char *name)
{
    prof_event *e = prof_begin(PROF_KERNEL, name);
    if (e) {
        e->device = AMP_CUDA;
        e->dev_mark0 = prof_device_mark(AMP_CUDA);
    }
    return e;
}

void cuda_prof_gemm_end(void *ev, int64_t M, int64_t N, int64_t K, int64_t batch, amp_dtype abdt, amp_dtype cdt)
{
    prof_event *e = ev;
    if (!e)
        return;
    e->dev_mark1 = prof_device_mark(AMP_CUDA);
    const int64_t a[3] = {batch, M, K}, b[3] = {batch, K, N}, c[3] = {batch, M, N};
    const int skip = batch > 1 ? 0 : 1; /* [M, K] for one product, [batch, M, K] for several */
    prof_set_tensor(&e->in[0], abdt, a + skip, 3 - skip);
    prof_set_tensor(&e->in[1], abdt, b + skip, 3 - skip);
    prof_set_tensor(&e->out, cdt, c + skip, 3 - skip);
    e->n_in = 2;
    e->flops = 2.0 * (double)batch * (double)M * (double)N * (double)K;
    e->bytes = (double)batch * ((double)(M * K + K * N) * (double)amp_dtype_size(abdt) +
                                (double)(M * N) * (double)amp_dtype_size(cdt));
    prof_end(e);
}

#endif
