/*
 * zero_step.c - ZeRO-1 (amp_zero) against plain data parallelism on the
 * benchmark models (bench/ampc_step.c's: mlp and cnn with SGD + momentum,
 * gpt with AdamW; fp32; each rank the same batch size as one process
 * would use). Run it under mpirun:
 *
 *   mpirun -np 2 build/bench_zero_step [--steps N] [--models mlp,cnn,gpt]
 *
 * Per model, on rank 0: the optimizer state bytes of this rank, sharded
 * (amp_zero_state_bytes) and unsharded; the bytes this rank hands to the
 * engine per step (all-reduce of f32 gradients, against reduce-scatter of
 * the f32 gradients + all-gather of the parameters); and the medians over
 * the timed steps of the whole step and of its communication part (the
 * gradients' all-reduce, one per tensor, not bucketed or overlapped;
 * against amp_zero_reduce_gradients + amp_zero_gather_parameters), the
 * step made of amp_optim_step alone in between. One thread per rank.
 * Prints one JSON object per model.
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
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct {
    amp_module *net;
    amp_optim *opt;
    amp_tensor *x, *y;
    amp_tensor **ps;
    int n;
    bool sequence;
} rig;

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
    } else {
        amp_gpt_config c = {.vocab = 96, .context = 128, .width = 256, .layers = 4, .heads = 4, .mlp = 1024};
        r->net = amp_model_gpt(c);
        r->x = amp_zeros(AMP_SHAPE(16, 128), AMP_I64);
        r->y = amp_zeros(AMP_SHAPE(16 * 128), AMP_I64);
        r->sequence = true;
    }
    if (!r->net || !r->x || !r->y)
        return false;
    int64_t *yv = amp_tensor_data(r->y);
    for (int64_t i = 0; i < amp_tensor_numel(r->y); i++)
        yv[i] = (i * 7919 + amp_dist_rank()) % (r->sequence ? 96 : 10);
    if (r->sequence) {
        int64_t *xv = amp_tensor_data(r->x);
        for (int64_t i = 0; i < amp_tensor_numel(r->x); i++)
            xv[i] = (i * 104729) % 96;
    }
    r->n = amp_module_num_params(r->net);
    r->ps = malloc(sizeof *r->ps * (size_t)r->n);
    amp_module_params(r->net, r->ps, r->n);
    if (r->sequence) {
        amp_adam_opts o = amp_adamw_defaults();
        o.lr = 3e-4;
        o.weight_decay = 0.1;
        r->opt = amp_optim_adamw(r->ps, r->n, o);
    } else {
        amp_sgd_opts o = amp_sgd_defaults();
        o.lr = 0.01;
        o.momentum = 0.9;
        r->opt = amp_optim_sgd(r->ps, r->n, o);
    }
    return r->opt != NULL;
}

static void unmake(rig *r)
{
    amp_optim_free(r->opt);
    amp_module_free(r->net);
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    free(r->ps);
}

static bool forward_backward(rig *r)
{
    amp_optim_zero_grad(r->opt);
    amp_tensor *out = amp_module_forward(r->net, r->x);
    if (r->sequence)
        out = amp_reshape(out, AMP_SHAPE(-1, 96));
    return amp_backward(amp_cross_entropy(out, r->y)) == AMP_OK;
}

static int64_t state_bytes(const amp_optim *o)
{
    const char *keys[3] = {"momentum_buffer", "exp_avg", "exp_avg_sq"};
    int64_t b = 0;
    for (int i = 0; i < amp_optim_num_params(o); i++)
        for (int k = 0; k < 3; k++) {
            amp_tensor *t = amp_optim_state_tensor(o, i, keys[k]);
            b += t ? amp_tensor_numel(t) * 4 : 0;
        }
    amp_clear_error();
    return b;
}

/* One model: `steps` timed steps (after one warm-up) of each way. */
static int run(const char *model, int steps)
{
    rig r;
    double *all = calloc((size_t)steps, sizeof *all), *comm = calloc((size_t)steps, sizeof *comm);
    double res[2][2];
    int64_t state[2] = {0, 0}, numel = 0;
    for (int zero = 0; zero < 2; zero++) {
        if (!make(model, &r)) {
            fprintf(stderr, "%s: %s\n", model, amp_last_error());
            return 1;
        }
        amp_zero *z = zero ? amp_zero_new(r.opt) : NULL;
        if (zero && !z) {
            fprintf(stderr, "%s: %s\n", model, amp_last_error());
            return 1;
        }
        for (int s = -1; s < steps; s++) {
            amp_dist_barrier();
            double t0 = now();
            bool ok = forward_backward(&r);
            double t1 = now(), c = 0;
            if (zero) {
                ok = ok && amp_zero_reduce_gradients(z) == AMP_OK;
                c = now() - t1;
                ok = ok && amp_optim_step(r.opt) == AMP_OK;
                double t2 = now();
                ok = ok && amp_zero_gather_parameters(z) == AMP_OK;
                c += now() - t2;
            } else {
                for (int i = 0; i < r.n && ok; i++)
                    ok = amp_dist_all_reduce(amp_tensor_grad(r.ps[i]), AMP_REDUCE_AVG) == AMP_OK;
                c = now() - t1;
                ok = ok && amp_optim_step(r.opt) == AMP_OK;
            }
            double t3 = now();
            amp_temps_free();
            if (!ok) {
                fprintf(stderr, "%s: %s\n", model, amp_last_error());
                return 1;
            }
            if (s >= 0)
                all[s] = (t3 - t0) * 1e3, comm[s] = c * 1e3;
        }
        res[zero][0] = median(all, steps);
        res[zero][1] = median(comm, steps);
        if (zero) {
            state[1] = amp_zero_state_bytes(z);
        } else {
            state[0] = state_bytes(r.opt);
            for (int i = 0; i < r.n; i++)
                numel += amp_tensor_numel(r.ps[i]);
        }
        amp_zero_free(z);
        unmake(&r);
    }
    const int w = amp_dist_world_size();
    const int64_t shard = (numel + w - 1) / w;
    if (amp_dist_rank() == 0)
        printf("{\"bench\": \"zero_step\", \"model\": \"%s\", \"ranks\": %d, \"params\": %lld, "
               "\"state_bytes_unsharded\": %lld, \"state_bytes_zero\": %lld, "
               "\"sent_bytes_dp\": %lld, \"sent_bytes_zero\": %lld, "
               "\"step_ms_dp\": %.1f, \"comm_ms_dp\": %.1f, \"step_ms_zero\": %.1f, \"comm_ms_zero\": %.1f}\n",
               model, w, (long long)numel, (long long)state[0], (long long)state[1], (long long)(numel * 4),
               (long long)(shard * w * 4 + shard * 4), res[0][0], res[0][1], res[1][0], res[1][1]);
    free(all);
    free(comm);
    return 0;
}

int main(int argc, char **argv)
{
    if (amp_dist_init(&argc, &argv) != AMP_OK) {
        fprintf(stderr, "amp_dist_init: %s\n", amp_last_error());
        return 1;
    }
    amp_set_num_threads(1);
    int steps = 5;
    char models[64] = "mlp,cnn,gpt";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--models") == 0 && i + 1 < argc)
            snprintf(models, sizeof models, "%s", argv[++i]);
        else {
            fprintf(stderr, "usage: mpirun -np N bench_zero_step [--steps N] [--models mlp,cnn,gpt]\n");
            amp_dist_finalize();
            return 2;
        }
    }
    if (steps < 1)
        steps = 1;
    int rc = 0;
    for (char *m = strtok(models, ","); m && rc == 0; m = strtok(NULL, ","))
        rc = run(m, steps);
    amp_dist_finalize();
    return rc;
}
