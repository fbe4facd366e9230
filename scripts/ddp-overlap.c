/*
 * ddp-overlap.c - how much of amp_ddp's communication backward hides: an
 * MLP 784-512x6-10 (1.72 M parameters, 6.6 MiB of f32 gradients), 64
 * rows per rank, one thread per rank, trained with SGD under amp_ddp at
 * several bucket sizes; per step: backward's time, amp_ddp_finish's wait
 * (the part not overlapped), the buckets started during backward and the
 * bytes handed to MPI, averaged over 30 steps after 2 of warm-up. Not
 * built by CMake (a measurement, not a test):
 *
 *   mpicc -O2 -Iinclude scripts/ddp-overlap.c -Lbuild -lampc -Wl,-rpath,$PWD/build -o /tmp/ddp-overlap
 *   OMP_WAIT_POLICY=PASSIVE mpirun --oversubscribe --allow-run-as-root -np 2 /tmp/ddp-overlap
 */
#include "ampc.h"

#include <stdio.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (amp_dist_init(&argc, &argv) != AMP_OK) {
        fprintf(stderr, "%s\n", amp_last_error());
        return 1;
    }
    amp_set_num_threads(1);
    const int rank = amp_dist_rank();
    enum { B = 64, STEPS = 32, WARM = 2 };
    const double sizes[3] = {25, 1, 0.25};
    const amp_dtype comp[3] = {AMP_F32, AMP_F32, AMP_F32};
    for (int c = 0; c < 4; c++) {
        amp_manual_seed(1);
        const int64_t h[6] = {512, 512, 512, 512, 512, 512};
        amp_module *m = amp_model_mlp(784, h, 6, 10);
        amp_tensor *p[16];
        int n = amp_module_params(m, p, 16);
        amp_optim *o = amp_optim_sgd(p, n, amp_sgd_defaults());
        amp_ddp_opts dop = amp_ddp_defaults();
        dop.bucket_mb = c < 3 ? sizes[c] : 1;
        dop.compress = c < 3 ? comp[c] : AMP_BF16;
        amp_ddp *d = amp_ddp_new(p, n, dop);
        if (!d) {
            fprintf(stderr, "%s\n", amp_last_error());
            return 1;
        }
        double bwd = 0, wait = 0;
        amp_ddp_stats s0 = {0};
        for (int step = 0; step < STEPS; step++) {
            if (step == WARM) {
                s0 = amp_ddp_get_stats(d);
                bwd = 0;
            }
            amp_tensor *x = amp_randn(AMP_SHAPE(B, 784), AMP_F32, 0, 1);
            amp_tensor *y = amp_zeros(AMP_SHAPE(B), AMP_I64);
            amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, x), y);
            double t0 = now();
            amp_backward(loss);
            double t1 = now();
            amp_ddp_finish(d);
            amp_optim_step(o);
            amp_optim_zero_grad(o);
            amp_temps_free();
            if (step >= WARM)
                bwd += t1 - t0;
        }
        amp_ddp_stats s = amp_ddp_get_stats(d);
        const int k = STEPS - WARM;
        wait = s.wait_s - s0.wait_s;
        if (rank == 0)
            printf("bucket_mb %5.2f %-4s: %lld buckets, %lld started in backward per step, %.2f MB sent per step, "
                   "backward %.2f ms, finish waited %.2f ms per step\n",
                   dop.bucket_mb, amp_dtype_name(dop.compress), (long long)s.buckets,
                   (long long)((s.early_buckets - s0.early_buckets) / k),
                   (double)(s.bytes_sent - s0.bytes_sent) / k / 1e6, 1e3 * bwd / k, 1e3 * wait / k);
        amp_ddp_free(d);
        amp_optim_free(o);
        amp_module_free(m);
    }
    amp_dist_finalize();
    return 0;
}
