/*
 * checkpoint_step.c - what activation checkpointing costs and saves: one
 * gpt trained with its blocks checkpointed on every other step
 * (amp_gpt_set_checkpointing), so that the two kinds of step alternate
 * A B A B in one process and a busy machine slows both alike.
 *
 *   bench_checkpoint_step [--layers N] [--width N] [--heads N] [--context N]
 *                         [--batch N] [--vocab N] [--dropout P]
 *                         [--precision fp32|bf16|fp16] [--steps N] [--threads N]
 *
 * Defaults: ampc train --model gpt's (2 layers, width 128, 4 heads, context
 * 64, batch 32, mlp 4 x width, bf16; vocab 114, the fortunes corpus's),
 * AdamW, the grad scaler in fp16. Each kind runs --steps timed steps after
 * two warm-up steps each. Prints, per kind: the median step time (wall
 * clock and process CPU time), and the activation peak: the allocator's
 * peak during a step minus what it holds after the step (parameters,
 * gradients, optimizer state, the batch); then the changes, and the
 * median of the per-pair wall-time ratios.
 */
#include <ampc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    amp_gpt_config c = {.vocab = 114, .context = 64, .width = 128, .layers = 2, .heads = 4};
    int64_t batch = 32;
    int steps = 10, threads = 0;
    const char *precision = "bf16";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--layers") == 0)
            c.layers = atoll(v);
        else if (strcmp(k, "--width") == 0)
            c.width = atoll(v);
        else if (strcmp(k, "--heads") == 0)
            c.heads = atoll(v);
        else if (strcmp(k, "--context") == 0)
            c.context = atoll(v);
        else if (strcmp(k, "--vocab") == 0)
            c.vocab = atoll(v);
        else if (strcmp(k, "--dropout") == 0)
            c.dropout = atof(v);
        else if (strcmp(k, "--batch") == 0)
            batch = atoll(v);
        else if (strcmp(k, "--steps") == 0)
            steps = atoi(v);
        else if (strcmp(k, "--threads") == 0)
            threads = atoi(v);
        else if (strcmp(k, "--precision") == 0)
            precision = v;
        else {
            fprintf(stderr, "bench_checkpoint_step: unknown option %s\n", k);
            return 2;
        }
    }
    c.mlp = 4 * c.width;
    if (steps < 1 || batch < 1) {
        fprintf(stderr, "bench_checkpoint_step: --steps and --batch must be >= 1\n");
        return 2;
    }
    amp_set_num_threads(threads);
    const bool autocast = strcmp(precision, "fp32") != 0;
    const amp_dtype dt = strcmp(precision, "fp16") == 0 ? AMP_F16 : AMP_BF16;

    amp_manual_seed(0);
    amp_module *net = amp_model_gpt(c);
    amp_tensor *x = amp_zeros(AMP_SHAPE(batch, c.context), AMP_I64);
    amp_tensor *y = amp_zeros(AMP_SHAPE(batch * c.context), AMP_I64);
    if (!net || !x || !y) {
        fprintf(stderr, "bench_checkpoint_step: %s\n", amp_last_error());
        return 1;
    }
    int64_t *xv = amp_tensor_data(x), *yv = amp_tensor_data(y);
    for (int64_t i = 0; i < batch * c.context; i++) {
        xv[i] = (i * 104729) % c.vocab;
        yv[i] = (i * 7919) % c.vocab;
    }
    int n = amp_module_num_params(net);
    amp_tensor **ps = malloc(sizeof *ps * (size_t)n);
    amp_module_params(net, ps, n);
    amp_adam_opts ao = amp_adamw_defaults();
    ao.lr = 3e-4;
    amp_optim *opt = amp_optim_adamw(ps, n, ao);
    free(ps);
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = autocast && dt == AMP_F16;
    amp_scaler *scaler = amp_scaler_new(so);

    const int warmup = 2;
    double *wall[2], *cpu[2];
    size_t act[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        wall[k] = calloc((size_t)steps, sizeof(double));
        cpu[k] = calloc((size_t)steps, sizeof(double));
    }
    for (int i = 0; i < 2 * (warmup + steps); i++) {
        const int k = i % 2; /* 0: without checkpointing, 1: with */
        amp_gpt_set_checkpointing(net, k == 1);
        amp_memory_reset_peak();
        const double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        amp_optim_zero_grad(opt);
        if (autocast)
            amp_autocast_begin(AMP_CPU, dt);
        amp_tensor *out = amp_reshape(amp_module_forward(net, x), AMP_SHAPE(-1, c.vocab));
        amp_tensor *loss = amp_cross_entropy(out, y);
        if (autocast)
            amp_autocast_end();
        if (amp_backward(amp_scaler_scale(scaler, loss)) != AMP_OK || amp_scaler_step(scaler, opt, NULL) != AMP_OK ||
            amp_scaler_update(scaler) != AMP_OK) {
            fprintf(stderr, "bench_checkpoint_step: %s\n", amp_last_error());
            return 1;
        }
        amp_item(loss);
        amp_temps_free();
        const double w1 = clock_s(CLOCK_MONOTONIC), c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        const amp_memory_stats st = amp_memory_get_stats();
        const int j = i / 2 - warmup;
        if (j >= 0) {
            wall[k][j] = (w1 - w0) * 1e3;
            cpu[k][j] = (c1 - c0) * 1e3;
            if (st.peak - st.current > act[k])
                act[k] = st.peak - st.current;
        }
    }
    double ratio[steps];
    for (int j = 0; j < steps; j++)
        ratio[j] = wall[1][j] / wall[0][j];
    const double r_med = median(ratio, steps);
    double wm[2], cm[2];
    for (int k = 0; k < 2; k++) {
        wm[k] = median(wall[k], steps);
        cm[k] = median(cpu[k], steps);
    }
    printf("gpt %lld layers, width %lld, %lld heads, context %lld, batch %lld, %s, %d threads, %d steps each\n",
           (long long)c.layers, (long long)c.width, (long long)c.heads, (long long)c.context, (long long)batch,
           precision, amp_get_num_threads(), steps);
    for (int k = 0; k < 2; k++)
        printf("  %-22s step %8.1f ms wall, %8.1f ms cpu; activation peak %8.1f MiB\n",
               k ? "checkpointed:" : "not checkpointed:", wm[k], cm[k], (double)act[k] / (1 << 20));
    printf("  change: activation peak %+.1f%%, step time %+.1f%% wall (median of pairs %+.1f%%), %+.1f%% cpu\n",
           100.0 * ((double)act[1] / (double)act[0] - 1), 100 * (wm[1] / wm[0] - 1), 100 * (r_med - 1),
           100 * (cm[1] / cm[0] - 1));
    for (int k = 0; k < 2; k++) {
        free(wall[k]);
        free(cpu[k]);
    }
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(net);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return 0;
}
