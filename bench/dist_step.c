/*
 * dist_step.c - data-parallel training steps on the CPU (bench/dist.sh):
 * the benchmark models of bench/ampc_step.c at the same global batch, on
 * one rank (no mpirun: a plain step, no DistributedDataParallel) or on N
 * ranks under mpirun (each rank batch / N, gradients averaged by amp_ddp).
 *
 *   dist_step [--model mlp|cnn|gpt] [--precision fp32|bf16|fp16]
 *             [--threads N] [--steps N] [--warmup N] [--bucket-mb X]
 *             [--compress none|bf16|f16]
 *
 * Rank 0 prints one JSON line: {"bench": "dist", "model", "precision",
 * "ranks", "threads", "global_batch", "step_ms" (the median over the timed
 * steps of the slowest rank's step), "bytes_per_step" (what amp_ddp handed
 * to MPI per step on rank 0, amp_ddp_get_stats().bytes_sent), "wait_ms"
 * (the median time amp_ddp_finish waited after backward ended: the
 * communication backward did not hide), "comm_alone_ms" (the median of
 * all-reducing every gradient, f32 in one buffer, with nothing else
 * running: what the communication costs unhidden; with --compress the
 * buckets send half of that), "hidden_pct" (1 - wait / alone, as a
 * %: the share of the communication overlapped with backward), "steps",
 * "warmup"}. One rank prints bytes 0 and no wait.
 *
 * More than one rank needs amp_ddp: when amp_ddp_new fails it says why and
 * exits 3.
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

/* The largest v over the ranks (v itself on one rank). */
static double max_over_ranks(double v)
{
    float f = (float)v;
    amp_tensor *t = amp_from_data(AMP_SHAPE(1), AMP_F32, &f);
    if (!t || amp_dist_all_reduce(t, AMP_REDUCE_MAX) != AMP_OK) {
        fprintf(stderr, "dist_step: %s\n", amp_last_error());
        exit(1);
    }
    double r = *(float *)amp_tensor_data(t);
    amp_tensor_free(t);
    return r;
}

typedef struct {
    amp_module *net;
    amp_optim *opt;
    amp_tensor *x, *y;
    amp_tensor **params;
    int n_params;
    bool sequence;
    int64_t global_batch;
} rig;

/* bench/ampc_step.c's models and optimizers; this rank's share of the
 * global batch (data differing per rank: offset patterns). */
static bool make(const char *model, int rank, int world, rig *r)
{
    amp_manual_seed(0);
    memset(r, 0, sizeof *r);
    int64_t gb;
    if (strcmp(model, "mlp") == 0) {
        gb = 256;
        int64_t hidden[2] = {4096, 4096};
        r->net = amp_model_mlp(784, hidden, 2, 10);
        r->x = amp_randn(AMP_SHAPE(gb / world, 784), AMP_F32, 0, 1);
        r->y = amp_zeros(AMP_SHAPE(gb / world), AMP_I64);
    } else if (strcmp(model, "cnn") == 0) {
        gb = 128;
        r->net = amp_model_cnn(1, 28, 28, 10);
        r->x = amp_randn(AMP_SHAPE(gb / world, 1, 28, 28), AMP_F32, 0, 1);
        r->y = amp_zeros(AMP_SHAPE(gb / world), AMP_I64);
    } else {
        gb = 16;
        amp_gpt_config c = {.vocab = 96, .context = 128, .width = 256, .layers = 4, .heads = 4, .mlp = 1024};
        r->net = amp_model_gpt(c);
        r->x = amp_zeros(AMP_SHAPE(gb / world, 128), AMP_I64);
        r->y = amp_zeros(AMP_SHAPE(gb / world * 128), AMP_I64);
        r->sequence = true;
    }
    r->global_batch = gb;
    if (gb % world) {
        fprintf(stderr, "dist_step: %s's global batch %lld does not split over %d ranks\n", model, (long long)gb,
                world);
        return false;
    }
    if (!r->net || !r->x || !r->y)
        return false;
    int64_t *yv = amp_tensor_data(r->y);
    for (int64_t i = 0; i < amp_tensor_numel(r->y); i++)
        yv[i] = (i * 7919 + rank * 31) % (r->sequence ? 96 : 10);
    if (r->sequence) {
        int64_t *xv = amp_tensor_data(r->x);
        for (int64_t i = 0; i < amp_tensor_numel(r->x); i++)
            xv[i] = (i * 104729 + rank * 17) % 96;
    }
    r->n_params = amp_module_num_params(r->net);
    r->params = malloc(sizeof *r->params * (size_t)r->n_params);
    if (!r->params)
        return false;
    amp_module_params(r->net, r->params, r->n_params);
    if (r->sequence) {
        amp_adam_opts o = amp_adamw_defaults();
        o.lr = 3e-4;
        o.weight_decay = 0.1;
        r->opt = amp_optim_adamw(r->params, r->n_params, o);
    } else {
        amp_sgd_opts o = amp_sgd_defaults();
        o.lr = 0.01;
        o.momentum = 0.9;
        r->opt = amp_optim_sgd(r->params, r->n_params, o);
    }
    return r->opt != NULL;
}

static void unmake(rig *r)
{
    amp_optim_free(r->opt);
    amp_module_free(r->net);
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    free(r->params);
}

/* One step; *wait_s gets amp_ddp_finish's wait (0 without d). */
static bool one_step(rig *r, amp_ddp *d, const char *precision, amp_scaler *s, double *wait_s)
{
    bool autocast = strcmp(precision, "fp32") != 0;
    amp_dtype dt = strcmp(precision, "fp16") == 0 ? AMP_F16 : AMP_BF16;
    amp_optim_zero_grad(r->opt);
    if (autocast)
        amp_autocast_begin(AMP_CPU, dt);
    amp_tensor *out = amp_module_forward(r->net, r->x);
    if (r->sequence)
        out = amp_reshape(out, AMP_SHAPE(-1, 96));
    amp_tensor *loss = amp_cross_entropy(out, r->y);
    if (autocast)
        amp_autocast_end();
    *wait_s = 0;
    if (amp_backward(amp_scaler_scale(s, loss)) != AMP_OK)
        return false;
    if (d) {
        if (amp_ddp_finish(d) != AMP_OK)
            return false;
        *wait_s = amp_ddp_get_stats(d).last_wait_s;
    }
    if (amp_scaler_step(s, r->opt, NULL) != AMP_OK || amp_scaler_update(s) != AMP_OK)
        return false;
    amp_item(loss);
    amp_temps_free();
    return true;
}

static const char *arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "dist_step: %s needs a value\n", argv[*i]);
        exit(2);
    }
    return argv[++*i];
}

static int positive(const char *opt, const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 100000) {
        fprintf(stderr, "dist_step: %s takes a positive integer (got '%s')\n", opt, v);
        exit(2);
    }
    return (int)n;
}

int main(int argc, char **argv)
{
    const char *model = "mlp", *precision = "bf16", *compress = "none";
    int threads = 1, steps = 10, warmup = 3;
    double bucket_mb = 25;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model"))
            model = arg(argc, argv, &i);
        else if (!strcmp(argv[i], "--precision"))
            precision = arg(argc, argv, &i);
        else if (!strcmp(argv[i], "--compress"))
            compress = arg(argc, argv, &i);
        else if (!strcmp(argv[i], "--threads"))
            threads = positive("--threads", arg(argc, argv, &i));
        else if (!strcmp(argv[i], "--steps"))
            steps = positive("--steps", arg(argc, argv, &i));
        else if (!strcmp(argv[i], "--warmup"))
            warmup = positive("--warmup", arg(argc, argv, &i));
        else if (!strcmp(argv[i], "--bucket-mb")) {
            const char *v = arg(argc, argv, &i);
            bucket_mb = strtod(v, NULL);
            if (!(bucket_mb > 0)) {
                fprintf(stderr, "dist_step: --bucket-mb takes a positive number (got '%s')\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "dist_step: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (strcmp(model, "mlp") && strcmp(model, "cnn") && strcmp(model, "gpt")) {
        fprintf(stderr, "dist_step: unknown model '%s' (mlp, cnn, gpt)\n", model);
        return 2;
    }
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "fp16")) {
        fprintf(stderr, "dist_step: unknown precision '%s' (fp32, bf16, fp16)\n", precision);
        return 2;
    }
    amp_dtype cdt = !strcmp(compress, "bf16") ? AMP_BF16 : !strcmp(compress, "f16") ? AMP_F16 : AMP_F32;
    if (cdt == AMP_F32 && strcmp(compress, "none")) {
        fprintf(stderr, "dist_step: unknown --compress '%s' (none, bf16, f16)\n", compress);
        return 2;
    }
    amp_set_num_threads(threads);
    /* Under a launcher: the world it made (one rank included). */
    bool launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    if (launched && amp_dist_init(&argc, &argv) != AMP_OK) {
        fprintf(stderr, "dist_step: %s\n", amp_last_error());
        return 1;
    }
    int rank = amp_dist_rank(), world = amp_dist_world_size();
    rig r;
    if (!make(model, rank, world, &r)) {
        fprintf(stderr, "dist_step: %s: %s\n", model, amp_last_error());
        return 1;
    }
    amp_ddp *d = NULL;
    if (amp_dist_is_initialized()) {
        amp_ddp_opts o = amp_ddp_defaults();
        o.bucket_mb = bucket_mb;
        o.compress = cdt;
        d = amp_ddp_new(r.params, r.n_params, o);
        if (!d) {
            if (rank == 0)
                fprintf(stderr, "dist_step: amp_ddp_new failed: %s\n", amp_last_error());
            amp_dist_finalize();
            return 3;
        }
    }
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = !strcmp(precision, "fp16");
    amp_scaler *s = amp_scaler_new(so);
    double *step_s = malloc(sizeof(double) * (size_t)steps), *wait_s = malloc(sizeof(double) * (size_t)steps);
    int64_t bytes0 = 0;
    for (int k = 0; k < warmup + steps; k++) {
        if (k == warmup) {
            amp_dist_barrier();
            bytes0 = d ? amp_ddp_get_stats(d).bytes_sent : 0;
        }
        double t0 = now(), w = 0;
        if (!one_step(&r, d, precision, s, &w)) {
            fprintf(stderr, "dist_step: rank %d, step %d: %s\n", rank, k, amp_last_error());
            return 1;
        }
        if (k >= warmup) {
            step_s[k - warmup] = now() - t0;
            wait_s[k - warmup] = w;
        }
    }
    int64_t bytes = d ? amp_ddp_get_stats(d).bytes_sent - bytes0 : 0;
    /* Each step's slowest rank (the others waited for it at the next
     * all-reduce anyway). */
    for (int k = 0; k < steps; k++)
        step_s[k] = max_over_ranks(step_s[k]);
    double step_ms = 1e3 * median(step_s, steps), wait_ms = 1e3 * median(wait_s, steps);
    /* The gradients (f32, in one buffer) all-reduced with nothing else
     * running. */
    double alone_ms = 0;
    if (d && bytes > 0) {
        int64_t n = 0;
        for (int i = 0; i < r.n_params; i++)
            n += amp_tensor_numel(r.params[i]);
        amp_tensor *g = amp_zeros(AMP_SHAPE(n), AMP_F32);
        double t[5];
        for (int k = 0; k < 5; k++) {
            amp_dist_barrier();
            double t0 = now();
            amp_dist_all_reduce(g, AMP_REDUCE_SUM);
            t[k] = max_over_ranks(now() - t0);
        }
        alone_ms = 1e3 * median(t, 5);
        amp_tensor_free(g);
    }
    if (rank == 0)
        printf("{\"bench\": \"dist\", \"model\": \"%s\", \"precision\": \"%s\", \"compress\": \"%s\", \"ranks\": %d, "
               "\"threads\": %d, \"global_batch\": %lld, \"step_ms\": %.3f, \"bytes_per_step\": %lld, "
               "\"wait_ms\": %.3f, \"comm_alone_ms\": %.3f, \"hidden_pct\": %.1f, \"steps\": %d, \"warmup\": %d}\n",
               model, precision, compress, world, threads, (long long)r.global_batch, step_ms,
               (long long)(bytes / steps), wait_ms, alone_ms,
               alone_ms > 0 ? 100.0 * (1.0 - (wait_ms < alone_ms ? wait_ms / alone_ms : 1.0)) : 0.0, steps, warmup);
    free(step_s);
    free(wait_s);
    amp_scaler_free(s);
    amp_ddp_free(d);
    unmake(&r);
    amp_dist_finalize();
    return 0;
}
