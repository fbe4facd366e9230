/*
 * train.c - the train command: an MLP on Fashion-MNIST, trained with the
 * library's nn / optim / autograd API exactly as a user would, then
 * tested on the held-out 10000 images.
 *
 * One step, as PyTorch's AMP loop: zero_grad; forward and cross-entropy
 * inside an autocast region (bf16 / fp16 precision); backward of the scaled
 * loss; step and update through the grad scaler (fp16; a disabled scaler
 * for fp32 / bf16 / --no-scaler is a plain step); read the loss; free the
 * step's temporaries. Progress goes to stdout as
 * one plain line every --log-every steps (plus a live line when stdout is
 * a terminal); the last line is "test_accuracy 0.XXXX" for scripts.
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EVAL_BATCH 1000

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what)
{
    fprintf(stderr, "ampc: %s: %s\n", what, amp_last_error());
    return 1;
}

/* features -> hidden.. -> classes, ReLU between the linear layers. */
static amp_module *build_mlp(const train_opts *o, int64_t features, int64_t classes)
{
    amp_module *seq = amp_nn_sequential();
    int64_t in = features;
    for (int i = 0; seq && i <= o->n_hidden; i++) {
        int64_t out = i < o->n_hidden ? o->hidden[i] : classes;
        if (amp_sequential_add(seq, amp_nn_linear(in, out, true)) != AMP_OK ||
            (i < o->n_hidden && amp_sequential_add(seq, amp_nn_relu()) != AMP_OK)) {
            amp_module_free(seq);
            return NULL;
        }
        in = out;
    }
    return seq;
}

static amp_optim *build_optim(const train_opts *o, amp_module *m)
{
    int n = amp_module_num_params(m);
    amp_tensor **ps = malloc(sizeof *ps * (size_t)(n ? n : 1));
    if (!ps)
        return NULL;
    amp_module_params(m, ps, n);
    amp_optim *opt = NULL;
    if (strcmp(o->optim, "sgd") == 0) {
        amp_sgd_opts s = amp_sgd_defaults();
        s.lr = train_lr(o);
        s.momentum = o->momentum;
        if (!isnan(o->weight_decay))
            s.weight_decay = o->weight_decay;
        opt = amp_optim_sgd(ps, n, s);
    } else {
        bool w = strcmp(o->optim, "adamw") == 0;
        amp_adam_opts a = w ? amp_adamw_defaults() : amp_adam_defaults();
        a.lr = train_lr(o);
        if (!isnan(o->weight_decay))
            a.weight_decay = o->weight_decay;
        opt = w ? amp_optim_adamw(ps, n, a) : amp_optim_adam(ps, n, a);
    }
    free(ps);
    return opt;
}

/* How the step runs: the autocast dtype (none for fp32) and the scaler. */
typedef struct {
    bool autocast;
    amp_dtype dtype;
    amp_scaler *scaler;
} precision;

static amp_status make_precision(const train_opts *o, precision *p)
{
    p->autocast = strcmp(o->precision, "fp32") != 0;
    p->dtype = strcmp(o->precision, "fp16") == 0 ? AMP_F16 : AMP_BF16;
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = p->autocast && p->dtype == AMP_F16 && !o->no_scaler;
    so.init_scale = o->init_scale;
    so.growth_interval = o->growth_interval;
    p->scaler = amp_scaler_new(so);
    return p->scaler ? AMP_OK : amp_last_status();
}

/* One training step; *loss_out gets the (unscaled) loss. */
static amp_status amp_step(amp_module *model, amp_optim *opt, precision *p, amp_tensor *x,
                           amp_tensor *y, double *loss_out, bool *skipped)
{
    amp_optim_zero_grad(opt);
    if (p->autocast && amp_autocast_begin(AMP_CPU, p->dtype) != AMP_OK)
        return amp_last_status();
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, x), y);
    if (p->autocast)
        amp_autocast_end();
    if (!loss || amp_backward(amp_scaler_scale(p->scaler, loss)) != AMP_OK ||
        amp_scaler_step(p->scaler, opt, skipped) != AMP_OK || amp_scaler_update(p->scaler) != AMP_OK)
        return amp_last_status();
    *loss_out = amp_item(loss);
    return AMP_OK;
}

/* Share of test images whose argmax logit is their label; -1 on error. */
static double evaluate(amp_module *model, const precision *p, const dataset *test, batcher *b)
{
    int64_t correct = 0;
    bool ok = true;
    amp_module_train(model, false);
    amp_no_grad_begin();
    for (int64_t k = 0, nb = batcher_count(b, test); k < nb && ok; k++) {
        amp_tensor *x, *y;
        batcher_fill(b, test, NULL, k, &x, &y);
        if (p->autocast)
            amp_autocast_begin(AMP_CPU, p->dtype);
        amp_tensor *pred = amp_argmax(amp_module_forward(model, x), 1);
        if (p->autocast)
            amp_autocast_end();
        ok = pred != NULL;
        if (ok) {
            const int64_t *p = amp_tensor_cdata(pred), *t = amp_tensor_cdata(y);
            for (int64_t i = 0, n = amp_tensor_numel(y); i < n; i++)
                correct += p[i] == t[i];
        }
        amp_temps_free();
    }
    amp_no_grad_end();
    amp_module_train(model, true);
    return ok ? (double)correct / (double)test->n : -1.0;
}

typedef struct {
    bool live;            /* stdout is a terminal: keep a \r status line */
    double t_start, t_window, t_live;
    double loss_sum;
    int64_t loss_n, samples_window;
} progress;

static void progress_step(progress *pg, const train_opts *o, const precision *p, int64_t epoch,
                          int64_t k, int64_t nb, int64_t step, int64_t total, double loss, int64_t rows)
{
    char scale[96] = "";
    if (amp_scaler_is_enabled(p->scaler))
        snprintf(scale, sizeof scale, " scale %g skipped %lld", amp_scaler_get_scale(p->scaler),
                 (long long)amp_scaler_get_counts(p->scaler).skipped);
    pg->loss_sum += loss;
    pg->loss_n++;
    pg->samples_window += rows;
    double t = now();
    if (step % o->log_every == 0 || step == total) {
        double rate = (double)pg->samples_window / (t - pg->t_window);
        printf("%sepoch %lld step %lld/%lld (batch %lld/%lld) loss %.4f%s %.0f samples/s %.1f s\n",
               pg->live ? "\r\033[K" : "", (long long)epoch + 1, (long long)step, (long long)total,
               (long long)k + 1, (long long)nb, pg->loss_sum / (double)pg->loss_n, scale, rate,
               t - pg->t_start);
        fflush(stdout);
        pg->loss_sum = 0;
        pg->loss_n = 0;
        pg->samples_window = 0;
        pg->t_window = t;
    } else if (pg->live && t - pg->t_live > 0.2) {
        printf("\r\033[Kepoch %lld step %lld/%lld loss %.4f%s", (long long)epoch + 1, (long long)step,
               (long long)total, loss, scale);
        fflush(stdout);
        pg->t_live = t;
    }
}

/* The training loop proper; returns the exit code. */
static int train_loop(const train_opts *o, amp_module *model, amp_optim *opt, precision *p,
                      const dataset *train, batcher *b)
{
    int64_t nb = batcher_count(b, train);
    int64_t total = o->steps > 0 ? o->steps : o->epochs * nb;
    int64_t *idx = malloc(sizeof *idx * (size_t)train->n);
    if (!idx) {
        fprintf(stderr, "ampc: out of memory for %lld indices\n", (long long)train->n);
        return 1;
    }
    progress pg = {.live = isatty(STDOUT_FILENO) != 0};
    pg.t_start = pg.t_window = pg.t_live = now();
    int rc = 0;
    int64_t step = 0;
    for (int64_t epoch = 0; step < total && rc == 0; epoch++) {
        shuffle_indices(idx, train->n, o->seed, (uint64_t)epoch);
        for (int64_t k = 0; k < nb && step < total; k++) {
            amp_tensor *x, *y;
            batcher_fill(b, train, idx, k, &x, &y);
            double l = 0;
            bool skipped = false;
            if (amp_step(model, opt, p, x, y, &l, &skipped) != AMP_OK) {
                char what[64];
                snprintf(what, sizeof what, "training step %lld", (long long)step + 1);
                rc = fail(what);
                break;
            }
            amp_temps_free();
            step++;
            if (!isfinite(l) && !skipped) { /* a skipped step is the scaler doing its job */
                fprintf(stderr, "%sampc: the loss is %g at step %lld (try a smaller --lr)\n",
                        pg.live ? "\r\033[K" : "", l, (long long)step);
                rc = 1;
                break;
            }
            progress_step(&pg, o, p, epoch, k, nb, step, total, l, amp_tensor_dim(y, 0));
        }
    }
    amp_temps_free();
    free(idx);
    return rc;
}

static void print_config(const train_opts *o, const dataset *train, const dataset *test, int64_t params)
{
    printf("data %s: train %lld, test %lld, %lld features, %lld classes\n", o->data_dir,
           (long long)train->n, (long long)test->n, (long long)train->features,
           (long long)train->classes);
    printf("model mlp %lld", (long long)train->features);
    for (int i = 0; i < o->n_hidden; i++)
        printf("-%lld", (long long)o->hidden[i]);
    printf("-%lld (%lld parameters), precision %s\n", (long long)train->classes, (long long)params,
           o->precision);
    printf("optim %s lr %g", o->optim, train_lr(o));
    if (strcmp(o->optim, "sgd") == 0)
        printf(" momentum %g", o->momentum);
    if (!isnan(o->weight_decay))
        printf(" weight_decay %g", o->weight_decay);
    printf(", batch %lld, ", (long long)o->batch);
    if (o->steps > 0)
        printf("%lld steps", (long long)o->steps);
    else
        printf("%lld epochs", (long long)o->epochs);
    printf(", seed %llu, threads %d\n", (unsigned long long)o->seed, amp_get_num_threads());
    fflush(stdout);
}

int train_run(const train_opts *o)
{
    double t0 = now();
    amp_set_num_threads((int)o->threads);
    dataset train, test;
    if (!dataset_load(&train, o->data_dir, "train"))
        return 1;
    if (!dataset_load(&test, o->data_dir, "t10k")) {
        dataset_free(&train);
        return 1;
    }
    if (test.features != train.features || test.classes > train.classes) {
        fprintf(stderr, "ampc: the test set (%lld features, %lld classes) does not match the "
                        "training set (%lld features, %lld classes)\n",
                (long long)test.features, (long long)test.classes, (long long)train.features,
                (long long)train.classes);
        dataset_free(&train);
        dataset_free(&test);
        return 1;
    }
    double t_loaded = now();

    int rc = 1;
    amp_manual_seed(o->seed);
    amp_module *model = build_mlp(o, train.features, train.classes);
    amp_optim *opt = model ? build_optim(o, model) : NULL;
    batcher tb = {0}, eb = {0};
    precision prec = {0};
    if (!model || !opt || make_precision(o, &prec) != AMP_OK) {
        fail(!model ? "model" : !opt ? "optimizer" : "grad scaler");
        goto out;
    }
    if (!batcher_init(&tb, &train, o->batch) || !batcher_init(&eb, &test, EVAL_BATCH))
        goto out;

    int64_t params = 0;
    for (int i = 0; i < amp_module_num_params(model); i++)
        params += amp_tensor_numel(amp_module_param(model, i, NULL));
    print_config(o, &train, &test, params);

    rc = train_loop(o, model, opt, &prec, &train, &tb);
    double t_trained = now();
    if (rc == 0) {
        double acc = evaluate(model, &prec, &test, &eb);
        double t_end = now();
        if (acc < 0) {
            rc = fail("evaluation");
        } else {
            printf("time: load %.1f s, train %.1f s, test %.1f s, total %.1f s\n", t_loaded - t0,
                   t_trained - t_loaded, t_end - t_trained, t_end - t0);
            if (amp_scaler_is_enabled(prec.scaler)) {
                amp_scaler_counts c = amp_scaler_get_counts(prec.scaler);
                printf("scaler: final scale %g, %lld steps taken, %lld skipped\n",
                       amp_scaler_get_scale(prec.scaler), (long long)c.steps, (long long)c.skipped);
            }
            printf("test_accuracy %.4f\n", acc);
        }
    }
out:
    amp_scaler_free(prec.scaler);
    batcher_free(&tb);
    batcher_free(&eb);
    amp_optim_free(opt);
    amp_module_free(model);
    dataset_free(&train);
    dataset_free(&test);
    return rc;
}
