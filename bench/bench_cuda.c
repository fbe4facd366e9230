/*
 * bench_cuda.c - ampc on the GPU: cuBLASLt GEMM speed (f16, bf16, and f32
 * with and without TF32) and the training step of the benchmark models
 * (mlp, cnn, gpt: bench/ampc_step.c's) in fp32 / bf16 / fp16 + scaler, timed as bench/torch_step.py times
 * PyTorch's (same models, batches, optimizers; each step ends with reading
 * the loss, which waits for the GPU; median of the timed steps).
 *
 *   bench_cuda [--gemm 4096,8192] [--steps N] [--warmup N (3)]
 *              [--models mlp,cnn,gpt] [--precisions fp32,bf16,fp16]
 *
 * Prints one JSON object per line:
 *   {"impl": "ampc", "kind": "gemm", "dtype", "n", "ms", "tflops"}
 *   {"impl": "ampc", "kind": "step", "model", "precision", "step_ms",
 *    "steps", "peak_mb", "host_syncs_per_step", "h2d_per_step",
 *    "queue_ms", "launches_per_step", "fwd_ms", "bwd_ms", "opt_ms"} (or
 *    "error" when the model cannot run on CUDA).
 * queue_ms: the host's time to queue a step, up to the loss read (median):
 * near step_ms, the step is bound by the host (launch overhead), not the
 * GPU. launches_per_step: kernels and cuBLASLt products queued per step.
 * fwd_ms / bwd_ms / opt_ms: a breakdown from separate steps with a wait
 * after the forward (and loss), the backward, and the scaler + optimizer
 * (medians; their sum exceeds step_ms by the waits). For one GPU run to
 * say where the time goes, since nothing else profiles there.
 * host_syncs_per_step: the host's waits for the GPU (stream syncs plus
 * copies to the host, amp_cuda_get_sync_stats) over the timed steps,
 * divided by their number: 1.00 is the loss read that ends each step, the
 * step itself should add none. h2d_per_step: copies from the host to the
 * device per step (tensor lists, the loss's seed gradient; not waits).
 * Without a GPU it prints {"error": ...} and exits 77.
 */
#include <ampc.h>

#include "backend/cuda/cuda_backend.h" /* cuda_launch_count */

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

static void json_error(const char *kind, const char *what, const char *err)
{
    printf("{\"impl\": \"ampc\", \"kind\": \"%s\", %s, \"error\": \"", kind, what);
    for (const char *c = err; *c; c++)
        putchar(*c == '"' || *c == '\\' ? '\'' : *c);
    printf("\"}\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------ GEMM */

/* n x n @ n x n in dt (f32 inputs a32, b32 on the device, cast once). */
static void bench_gemm(amp_tensor *a32, amp_tensor *b32, int64_t n, amp_dtype dt, bool tf32)
{
    char what[96];
    snprintf(what, sizeof what, "\"dtype\": \"%s%s\", \"n\": %lld", amp_dtype_name(dt), tf32 ? "+tf32" : "",
             (long long)n);
    amp_cuda_allow_tf32(tf32);
    amp_no_grad_begin();
    amp_tensor *a = amp_tensor_retain(amp_to(a32, dt)), *b = amp_tensor_retain(amp_to(b32, dt));
    amp_temps_free();
    const int reps = n >= 8192 ? 10 : 30;
    bool ok = a && b;
    for (int r = 0; r < 3 && ok; r++) /* warm-up: the handle, the workspace, the heuristic */
        ok = amp_matmul(a, b) != NULL;
    amp_temps_free();
    ok = ok && amp_cuda_synchronize() == AMP_OK;
    double t0 = now();
    for (int r = 0; r < reps && ok; r++) {
        ok = amp_matmul(a, b) != NULL;
        amp_temps_free(); /* the output goes back to the cache, stream-ordered */
    }
    ok = ok && amp_cuda_synchronize() == AMP_OK;
    double ms = (now() - t0) * 1e3 / reps;
    amp_no_grad_end();
    if (ok)
        printf("{\"impl\": \"ampc\", \"kind\": \"gemm\", %s, \"ms\": %.4f, \"tflops\": %.1f}\n", what, ms,
               2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) / 1e12);
    else
        json_error("gemm", what, amp_last_error());
    fflush(stdout);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_cuda_allow_tf32(false);
}

static void bench_gemms(int64_t n)
{
    amp_tensor *a = amp_rand(AMP_SHAPE(n, n), AMP_F32, -1, 1), *b = amp_rand(AMP_SHAPE(n, n), AMP_F32, -1, 1);
    if (!a || !b || amp_tensor_move(a, AMP_CUDA) != AMP_OK || amp_tensor_move(b, AMP_CUDA) != AMP_OK) {
        json_error("gemm", "\"dtype\": \"all\"", amp_last_error());
    } else {
        bench_gemm(a, b, n, AMP_F16, false);
        bench_gemm(a, b, n, AMP_BF16, false);
        bench_gemm(a, b, n, AMP_F32, true);
        bench_gemm(a, b, n, AMP_F32, false);
    }
    amp_tensor_free(a);
    amp_tensor_free(b);
}

/* ---------------------------------------------------------------- steps */

typedef struct {
    amp_module *net;
    amp_optim *opt;
    amp_tensor *x, *y;
    bool sequence; /* gpt: logits [B, T, V] against targets [B, T] */
} rig;

static void rig_free(rig *r)
{
    amp_optim_free(r->opt);
    amp_module_free(r->net);
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
}

/* The model on the GPU, its data there too, the optimizer made after. */
static bool make(const char *model, rig *r)
{
    amp_manual_seed(0);
    memset(r, 0, sizeof *r);
    if (strcmp(model, "mlp") == 0) {
        int64_t hidden[2] = {4096, 4096};
        r->net = amp_model_mlp(784, hidden, 2, 10);
        r->x = amp_randn(AMP_SHAPE(256, 784), AMP_F32, 0, 1);
        r->y = amp_zeros(AMP_SHAPE(256), AMP_I64);
    } else if (strcmp(model, "cnn") == 0) {
        r->net = amp_model_cnn(1, 28, 28, 10);
        r->x = amp_randn(AMP_SHAPE(128, 1, 28, 28), AMP_F32, 0, 1);
        r->y = amp_zeros(AMP_SHAPE(128), AMP_I64);
    } else if (strcmp(model, "gpt") == 0) {
        amp_gpt_config c = {.vocab = 96, .context = 128, .width = 256, .layers = 4, .heads = 4, .mlp = 1024};
        r->net = amp_model_gpt(c);
        r->x = amp_zeros(AMP_SHAPE(16, 128), AMP_I64);
        r->y = amp_zeros(AMP_SHAPE(16 * 128), AMP_I64);
        r->sequence = true;
    } else {
        return false; /* bench_step checked the name */
    }
    if (!r->net || !r->x || !r->y || amp_module_to(r->net, AMP_CUDA) != AMP_OK ||
        amp_tensor_move(r->x, AMP_CUDA) != AMP_OK || amp_tensor_move(r->y, AMP_CUDA) != AMP_OK)
        return false;
    amp_tensor *params[256];
    int n = amp_module_params(r->net, params, 256);
    if (r->sequence) {
        amp_adam_opts o = amp_adamw_defaults();
        o.lr = 3e-4;
        o.weight_decay = 0.1;
        r->opt = amp_optim_adamw(params, n, o);
    } else {
        amp_sgd_opts o = amp_sgd_defaults();
        o.lr = 0.01;
        o.momentum = 0.9;
        r->opt = amp_optim_sgd(params, n, o);
    }
    return r->opt != NULL;
}

/* One step; false with the error set. queue: the host's time to queue it
 * (up to the loss read), in ms. phases: when non-NULL, waits for the GPU
 * after the forward (and loss), the backward and the optimizer, and
 * writes their times (ms). */
static bool step(rig *r, int prec, amp_scaler *s, double *queue, double *phases)
{
    double t0 = now();
    amp_optim_zero_grad(r->opt);
    if (prec && amp_autocast_begin(AMP_CUDA, prec == 1 ? AMP_BF16 : AMP_F16) != AMP_OK)
        return false;
    amp_tensor *out = amp_module_forward(r->net, r->x);
    if (out && r->sequence)
        out = amp_reshape(out, AMP_SHAPE(-1, amp_tensor_dim(out, -1)));
    amp_tensor *loss = amp_cross_entropy(out, r->y);
    if (prec)
        amp_autocast_end();
    bool ok = loss != NULL;
    double t1 = now(), t2 = t1;
    if (ok && phases) {
        ok = amp_cuda_synchronize() == AMP_OK;
        t1 = now();
        phases[0] = (t1 - t0) * 1e3;
    }
    ok = ok && amp_backward(amp_scaler_scale(s, loss)) == AMP_OK;
    if (ok && phases) {
        ok = amp_cuda_synchronize() == AMP_OK;
        t2 = now();
        phases[1] = (t2 - t1) * 1e3;
    }
    ok = ok && amp_scaler_step(s, r->opt, NULL) == AMP_OK && amp_scaler_update(s) == AMP_OK;
    if (ok && phases) {
        ok = amp_cuda_synchronize() == AMP_OK;
        phases[2] = (now() - t2) * 1e3;
    }
    if (queue)
        *queue = (now() - t0) * 1e3;
    if (ok) { /* reads the loss once: waits for the GPU, as loss.item(); NaN (or a failed read) fails */
        double v = amp_item(loss);
        ok = v == v;
    }
    amp_temps_free();
    return ok;
}

static void bench_step(const char *model, const char *precision, int steps, int warmup)
{
    int prec = strcmp(precision, "bf16") == 0 ? 1 : strcmp(precision, "fp16") == 0 ? 2 : 0;
    char what[96];
    snprintf(what, sizeof what, "\"model\": \"%s\", \"precision\": \"%s\"", model, precision);
    if (strcmp(model, "mlp") != 0 && strcmp(model, "cnn") != 0 && strcmp(model, "gpt") != 0) {
        json_error("step", what, "unknown model (mlp, cnn or gpt)");
        return;
    }
    rig r;
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = prec == 2;
    amp_scaler *s = amp_scaler_new(so);
    if (!make(model, &r) || !s) {
        json_error("step", what, amp_last_error());
        rig_free(&r);
        amp_scaler_free(s);
        return;
    }
    enum { PHASE_STEPS = 3 };
    double *t = malloc((size_t)steps * sizeof *t), *q = malloc((size_t)steps * sizeof *q);
    double ph[3][PHASE_STEPS];
    bool ok = t && q;
    for (int k = 0; k < warmup && ok; k++)
        ok = step(&r, prec, s, NULL, NULL);
    amp_cuda_memory_reset_peak();
    amp_cuda_sync_stats w0 = amp_cuda_get_sync_stats();
    const uint64_t l0 = cuda_launch_count();
    for (int k = 0; k < steps && ok; k++) {
        double t0 = now();
        ok = step(&r, prec, s, &q[k], NULL);
        t[k] = (now() - t0) * 1e3;
    }
    amp_cuda_sync_stats w1 = amp_cuda_get_sync_stats();
    const double launches = (double)(cuda_launch_count() - l0) / steps;
    double waits = (double)((w1.syncs - w0.syncs) + (w1.d2h_copies - w0.d2h_copies)) / steps;
    double h2d = (double)(w1.h2d_copies - w0.h2d_copies) / steps;
    for (int k = 0; k < PHASE_STEPS && ok; k++) {
        double p[3];
        ok = step(&r, prec, s, NULL, p);
        for (int i = 0; i < 3; i++)
            ph[i][k] = p[i];
    }
    if (ok)
        printf("{\"impl\": \"ampc\", \"kind\": \"step\", %s, \"step_ms\": %.3f, \"steps\": %d, \"peak_mb\": %.1f, "
               "\"host_syncs_per_step\": %.2f, \"h2d_per_step\": %.2f, \"queue_ms\": %.3f, "
               "\"launches_per_step\": %.1f, \"fwd_ms\": %.3f, \"bwd_ms\": %.3f, \"opt_ms\": %.3f}\n",
               what, median(t, steps), steps, (double)amp_cuda_memory_get_stats().peak / (1 << 20), waits, h2d,
               median(q, steps), launches, median(ph[0], PHASE_STEPS), median(ph[1], PHASE_STEPS),
               median(ph[2], PHASE_STEPS));
    else
        json_error("step", what, amp_last_error());
    fflush(stdout);
    free(t);
    free(q);
    amp_scaler_free(s);
    rig_free(&r);
}

int main(int argc, char **argv)
{
    const char *gemm = "4096,8192", *models = "mlp,cnn,gpt", *precisions = "fp32,bf16,fp16";
    int steps = 20, warmup = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gemm") == 0 && i + 1 < argc)
            gemm = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--models") == 0 && i + 1 < argc)
            models = argv[++i];
        else if (strcmp(argv[i], "--precisions") == 0 && i + 1 < argc)
            precisions = argv[++i];
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--gemm 4096,8192] [--steps N] [--warmup N] [--models mlp,cnn,gpt] "
                    "[--precisions fp32,bf16,fp16]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1)
        steps = 1;
    if (warmup < 0)
        warmup = 0;
    if (!amp_cuda_available()) {
        printf("{\"impl\": \"ampc\", \"error\": \"no CUDA device\"}\n");
        return 77;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", gemm);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int64_t n = atoll(tok);
        if (n > 0)
            bench_gemms(n);
    }
    char mb[256], pb[256];
    snprintf(mb, sizeof mb, "%s", models);
    char *msave = NULL, *psave = NULL;
    for (char *m = strtok_r(mb, ",", &msave); m; m = strtok_r(NULL, ",", &msave)) {
        snprintf(pb, sizeof pb, "%s", precisions);
        for (char *p = strtok_r(pb, ",", &psave); p; p = strtok_r(NULL, ",", &psave))
            bench_step(m, p, steps, warmup);
    }
    return 0;
}
