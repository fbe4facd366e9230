/*
 * bench_scaler.c - the grad scaler's overhead: unscale + non-finite check +
 * update over 64 MB of f32 gradients, in GB/s beside memcpy's over the
 * same bytes, measured in the same run. Both read and write every byte
 * once (unscale works in place), so memcpy is the bandwidth ceiling.
 *
 *   bench_scaler [MB] [--json FILE]
 */
#include <ampc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    size_t mb = argc > 1 && argv[1][0] != '-' ? (size_t)atol(argv[1]) : 64;
    const char *json = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--json") == 0)
            json = argv[i + 1];
    const int n_params = 8, reps = 20;
    int64_t per = (int64_t)(mb << 20) / 4 / n_params;
    amp_tensor *p[8];
    for (int i = 0; i < n_params; i++) {
        p[i] = amp_full(AMP_SHAPE(per), AMP_F32, 1.0);
        amp_tensor_set_requires_grad(p[i], true);
    }
    amp_optim *opt = amp_optim_sgd(p, n_params, amp_sgd_defaults());
    amp_scaler_opts so = amp_scaler_defaults();
    so.growth_interval = 1 << 30;
    amp_scaler *s = amp_scaler_new(so);
    /* Gradients: backward of scale * sum(p) gives every element = scale. */
    amp_tensor *loss = amp_sum_all(p[0]);
    for (int i = 1; i < n_params; i++)
        loss = amp_add(loss, amp_sum_all(p[i]));
    if (amp_backward(amp_scaler_scale(s, loss)) != AMP_OK) {
        fprintf(stderr, "%s\n", amp_last_error());
        return 1;
    }
    amp_temps_free();
    size_t bytes = (size_t)per * 4 * (size_t)n_params;

    double best_unscale = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        amp_scaler_unscale(s, opt);
        /* Back to READY with a scale of 0.5 or 2 in turn: each pass really
         * multiplies (by 2, then 0.5), and the values stay where they were. */
        amp_scaler_update_to(s, r % 2 ? 2.0 : 0.5);
        double t = now() - t0;
        best_unscale = t < best_unscale ? t : best_unscale;
    }
    float *src = malloc(bytes), *dst = malloc(bytes);
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    double best_copy = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        memcpy(dst, src, bytes);
        double t = now() - t0;
        best_copy = t < best_copy ? t : best_copy;
    }
    /* Traffic: read + write of each byte, for both. */
    double gbs_unscale = 2.0 * (double)bytes / best_unscale / 1e9;
    double gbs_copy = 2.0 * (double)bytes / best_copy / 1e9;
    printf("grad scaler overhead over %zu MB of f32 gradients (%d tensors, best of %d)\n", mb,
           n_params, reps);
    printf("  unscale + check + update  %7.2f ms  %6.1f GB/s\n", best_unscale * 1e3, gbs_unscale);
    printf("  memcpy                    %7.2f ms  %6.1f GB/s\n", best_copy * 1e3, gbs_copy);
    printf("  ratio                     %6.0f%% of memcpy\n", 100 * gbs_unscale / gbs_copy);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\": \"scaler\", \"mb\": %zu, \"unscale_gbs\": %.2f, \"memcpy_gbs\": %.2f, "
                    "\"ratio\": %.3f}\n",
                    mb, gbs_unscale, gbs_copy, gbs_unscale / gbs_copy);
            fclose(f);
        }
    }
    free(src);
    free(dst);
    amp_scaler_free(s);
    amp_optim_free(opt);
    for (int i = 0; i < n_params; i++)
        amp_tensor_free(p[i]);
    return 0;
}
