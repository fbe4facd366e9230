/*
 * eval.c - measuring a model: the share of test images classified right
 * (mlp, cnn), or the mean next-character cross-entropy over fixed windows
 * of the corpus's validation split (gpt; next-token over --val-bin's
 * windows for a run on token files), in the run's precision, with no
 * gradients and dropout off. And `ampc eval DIR`: the same for a saved
 * checkpoint.
 *
 * The validation windows come from fixed seeds, not the run's seed, so
 * runs with different seeds or precisions are measured on the same text;
 * `ampc eval --seed S` draws another set of windows.
 *
 * A model on CUDA (--device cuda) is measured there: each batch is copied
 * to the device, autocast runs on AMP_CUDA, and the predictions (or the
 * loss) come back to the host once per batch.
 */
#include "cli.h"
#include "checkpoint_cli.h"
#include "data.h"
#include "eval.h"
#include "progress.h"
#include "run_policy.h"
#include "settings.h"
#include "trainer.h"

#include "base/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VAL_STREAM 0x76616cull /* "val": the validation windows' seeds */

/* Where the model's parameters live. */
static amp_device model_device(const trainer *t)
{
    return t->n_params > 0 ? amp_tensor_device(t->params[0]) : AMP_CPU;
}

/* h on the model's device: h itself on the CPU, else a device copy in *slot
 * (made once, refilled in place after; freed by the caller). */
static amp_tensor *on_model_device(const trainer *t, amp_tensor *h, amp_tensor **slot)
{
    if (model_device(t) == AMP_CPU)
        return h;
    if (*slot && amp_tensor_numel(*slot) == amp_tensor_numel(h))
        return amp_tensor_copy_in(*slot, amp_tensor_cdata(h), amp_tensor_dtype(h)) == AMP_OK ? *slot : NULL;
    amp_tensor_free(*slot);
    return *slot = amp_to_device(h, model_device(t));
}

static void autocast_begin(const trainer *t)
{
    if (t->autocast)
        amp_autocast_begin(model_device(t), t->dtype);
}

static void autocast_end(const trainer *t)
{
    if (t->autocast)
        amp_autocast_end();
}

/* Refuses weights or inputs holding inf/NaN: the model's outputs would be
 * NaN, and an accuracy from their argmax (a tie-break, not a prediction)
 * or a NaN loss is no measurement. inputs (from the file named what) may
 * be NULL (token ids). False, with an error naming what is not finite. */
static bool all_finite(const trainer *t, const amp_tensor *inputs, const char *what)
{
    for (int i = 0; i < t->n_params; i++) {
        int64_t bad = amp_tensor_count_nonfinite(t->params[i]);
        if (bad < 0)
            return false;
        if (bad > 0) {
            const char *name = NULL;
            char shape[96];
            amp_module_param(t->model, i, &name);
            amp_set_error(AMP_ERR_ARG, "the weights are not finite: %s %s holds %lld inf/NaN values (of %lld)",
                          name ? name : "?", amp_shape_str(amp_tensor_shape(t->params[i]), shape, sizeof shape),
                          (long long)bad, (long long)amp_tensor_numel(t->params[i]));
            return false;
        }
    }
    int64_t bad = inputs ? amp_tensor_count_nonfinite(inputs) : 0;
    if (bad > 0)
        amp_set_error(AMP_ERR_ARG, "%s: the images hold %lld inf/NaN values (of %lld); inputs must be finite", what,
                      (long long)bad, (long long)amp_tensor_numel(inputs));
    return bad == 0;
}

double eval_accuracy(trainer *t, const dataset *d, batcher *b)
{
    if (!all_finite(t, d->x, d->images))
        return -1.0;
    int64_t correct = 0;
    bool ok = true;
    amp_tensor *dev = NULL; /* the batch on the model's device */
    int64_t *pred_host = malloc(sizeof *pred_host * (size_t)(b->size > 0 ? b->size : 1));
    if (!pred_host) {
        amp_set_error(AMP_ERR_MEMORY, "evaluation: out of memory for %lld predictions", (long long)b->size);
        return -1.0;
    }
    amp_module_train(t->model, false);
    amp_no_grad_begin();
    for (int64_t k = 0, nb = batcher_count(b, d); k < nb && ok; k++) {
        amp_tensor *x, *y;
        batcher_fill(b, d, k, &x, &y);
        amp_tensor *xin = on_model_device(t, x, &dev);
        autocast_begin(t);
        amp_tensor *pred = xin ? amp_argmax(amp_module_forward(t->model, xin), 1) : NULL;
        autocast_end(t);
        /* The labels stay on the host; the predictions come to them. */
        ok = pred != NULL && amp_tensor_copy_out(pred, pred_host, AMP_I64) == AMP_OK;
        if (ok) {
            const int64_t *l = amp_tensor_cdata(y);
            for (int64_t i = 0, n = amp_tensor_numel(y); i < n; i++)
                correct += pred_host[i] == l[i];
        }
        amp_temps_free();
    }
    amp_no_grad_end();
    amp_module_train(t->model, true);
    amp_tensor_free(dev);
    free(pred_host);
    return ok ? (double)correct / (double)d->n : -1.0;
}

double eval_text_loss(trainer *t, const train_opts *o, text_data *td, uint64_t windows)
{
    if (!all_finite(t, NULL, NULL))
        return NAN;
    double sum = 0;
    bool ok = true;
    amp_tensor *dx = NULL, *dy = NULL; /* the windows on the model's device */
    amp_module_train(t->model, false);
    amp_no_grad_begin();
    for (int64_t k = 0; k < o->val_batches && ok; k++) {
        ok = text_batch(td, true, derive_seed(windows, VAL_STREAM, (uint64_t)k), 0, 1);
        amp_tensor *x = ok ? on_model_device(t, td->x, &dx) : NULL, *y = x ? on_model_device(t, td->y, &dy) : NULL;
        if (!(ok = y != NULL))
            break;
        autocast_begin(t);
        amp_tensor *logits = amp_module_forward(t->model, x);
        amp_tensor *loss = amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(-1, text_vocab(td))),
                                             amp_reshape(y, AMP_SHAPE(-1)));
        autocast_end(t);
        ok = loss != NULL;
        if (ok)
            sum += amp_item(loss);
        amp_temps_free();
    }
    amp_no_grad_end();
    amp_module_train(t->model, true);
    amp_tensor_free(dx);
    amp_tensor_free(dy);
    if (ok && !isfinite(sum)) {
        /* Finite weights (checked above), a loss that is not: the forward
         * overflows in the run's precision. */
        amp_set_error(AMP_ERR_STATE,
                      "the validation loss is %s though every weight is finite: the forward overflows in %s "
                      "(--detect-anomaly names the op, ampc audit ranks the ops against fp32)",
                      isnan(sum) ? "nan" : "inf", o->precision);
        return NAN;
    }
    return ok ? sum / (double)o->val_batches : NAN;
}

int device_check(const train_opts *o, const char *who)
{
    if (strcmp(o->device, "cuda") != 0 || amp_cuda_available())
        return -1;
    /* The library says why (a build without CUDA, no driver, no GPU). */
    amp_tensor *probe = amp_zeros(AMP_SHAPE(1), AMP_F32);
    amp_tensor *moved = probe ? amp_to_device(probe, AMP_CUDA) : NULL;
    fprintf(stderr, "%s: --device cuda: the CUDA backend is not built/available (%s); use --device cpu\n", who,
            moved ? "?" : amp_last_error());
    amp_tensor_free(moved);
    amp_tensor_free(probe);
    amp_clear_error();
    return 1;
}

/* The rows of train's table eval takes, in eval's words: settings a run
 * saved default to the run's values. */
static const opt_pick eval_picks[] = {
    {"data", "the data to measure on: Fashion-MNIST IDX directory (mlp, cnn; its test set), text file or "
             "directory (gpt; its validation split) (default: the run's)"},
    {"batch", "examples (gpt: sequences) per batch measured (default: the run's)"},
    {"seed", "gpt: the seed the validation windows are drawn from (default 0: the windows train's closing "
             "evaluation measures, whatever the run's seed; mlp and cnn measure the whole test set)"},
    {"threads", "kernel threads, 0 for every core (default 0)"},
    {"flush-denormal", "flush subnormal floats to zero, as torch.set_flush_denormal(True) (default: the run's)"},
    {"device", "measure on cpu or cuda (default cpu)"},
    {"precision", "fp32, or bf16 / fp16 autocast for the forward passes (no scaler: nothing is trained) "
                  "(default: the run's)"},
    {"val-batches", "gpt: validation batches measured (default: the run's, else 20)"},
    {"resume", "the run's directory, the same as DIR (evaluated only: nothing is trained or saved)"},
    {"val-bin", "gpt trained on token files: the token file to measure on (default: the run's --val-bin)"},
    {"fp32-modules", "modules kept in f32 under autocast (default: the run's)"},
    {"policy", "the autocast policy file measured with (default: the run's)"},
};

/* ampc eval DIR: the first argument that is not an option is --resume. */
static int eval_dir(const opt_cmd *c, const char *arg, void *ctx)
{
    train_opts *o = ctx;
    if (arg[0] == '-' || o->resume)
        return opt_unexpected(c, arg);
    o->resume = arg;
    return -1;
}

const opt_cmd eval_options = {
    .who = "ampc eval",
    .usage = "usage: ampc eval DIR [options]   (or ampc eval --resume DIR)\n\n"
             "Loads DIR/" CHECKPOINT_FILE " (or DIR itself when it is a .safetensors file) and\n"
             "measures the model with its saved settings:\n"
             "test accuracy (mlp, cnn; last line \"test_accuracy 0.XXXX\") or validation\n"
             "loss and perplexity (gpt).\n\n",
    .blocks = (const opt_block[]){{.rows = train_rows, .n = RO_COUNT, .pick = eval_picks,
                                   .n_pick = sizeof eval_picks / sizeof eval_picks[0]}},
    .n_blocks = 1,
    .positional = eval_dir,
};

int eval_parse(int argc, char **argv, train_opts *o)
{
    opts_set_command(eval_options.who);
    int rc = opt_parse(&eval_options, &(opt_dst){o, o->given}, o, argc, argv);
    if (rc < 0 && !o->resume) {
        fprintf(stderr, "ampc eval: which checkpoint? give its directory: ampc eval DIR (see ampc eval --help)\n");
        return EXIT_USAGE;
    }
    return rc;
}

int eval_run(int argc, char **argv)
{
    train_opts o, ck;
    run_info ri = {0}, saved = {0};
    train_opts_default(&o);
    int rc = eval_parse(argc, argv, &o);
    if (rc < 0)
        rc = device_check(&o, "ampc eval");
    if (rc < 0)
        rc = checkpoint_read_settings(o.resume, &ck, &saved);
    char where[CLI_PATH_MAX];
    checkpoint_path(where, sizeof where, o.resume ? o.resume : ".");
    if (rc < 0)
        rc = data_resume_check(&o, &ck, &saved, where);
    if (rc < 0)
        rc = settings_merge(&o, &ck, where);
    if (rc < 0)
        rc = opts_resolve(&o);
    /* --seed picks a gpt's validation windows; an image model's test set
     * is measured whole, in order, so a seed there would change nothing. */
    const bool seed_given = o.given[RO_seed];
    if (rc < 0 && seed_given && !is_gpt(&o)) {
        fprintf(stderr, "ampc eval: --seed picks a gpt's validation windows; the %s in %s is measured on the whole "
                        "test set, in order, which no seed changes\n",
                o.model, where);
        rc = EXIT_USAGE;
    }
    if (rc < 0)
        rc = opts_apply_cpu(&o, "ampc eval");
    if (rc >= 0)
        return rc;
    if (saved.token_ids && !o.vocab) /* the vocabulary the run read beside its --data-bin */
        o.vocab = saved.vocab;

    double t0 = now_s();
    run_data rd;
    if ((rc = data_open(&rd, &o, &ri, false)) >= 0)
        return rc;
    if ((rc = data_buffers(&rd, &o)) >= 0) {
        data_close(&rd);
        return rc;
    }
    trainer t = {0};
    int64_t step = 0;
    if ((rc = data_check(&ri, &saved, &o, where)) < 0)
        rc = checkpoint_check_size(o.resume, &o, &saved);
    if (rc < 0 && !trainer_build(&t, &o, &saved, 1))
        rc = 1;
    if (rc < 0)
        rc = checkpoint_load_run(o.resume, &t, false, false, &step);
    run_policy rp = {0}; /* the run's, so the forwards run in its precision */
    if (rc < 0)
        rc = run_policy_load(&rp, &o, "ampc eval");
    if (rc < 0)
        rc = run_policy_check(&rp, &t, &o, &saved, "ampc eval");
    run_policy_free(&rp);
    if (rc < 0) {
        char desc[256];
        printf("checkpoint %s: step %lld, %s (%lld parameters), precision %s%s\n", where, (long long)step,
               model_describe(&o, &saved, desc, sizeof desc), (long long)t.n_weights, o.precision,
               o.flush_denormal ? ", subnormals flushed to zero" : "");
        if (rd.gpt) {
            double loss = eval_text_loss(&t, &o, &rd.text, seed_given ? o.seed : 0);
            if (isnan(loss)) {
                fprintf(stderr, "ampc: evaluation: %s\n", amp_last_error());
                rc = 1;
            } else {
                printf("time %.1f s\n", now_s() - t0);
                printf("val_loss %.4f perplexity %.3f\n", loss, exp(loss));
            }
        } else {
            double acc = eval_accuracy(&t, &rd.test, &rd.eb);
            if (acc < 0) {
                fprintf(stderr, "ampc: evaluation: %s\n", amp_last_error());
                rc = 1;
            } else {
                printf("time %.1f s\n", now_s() - t0);
                printf("test_accuracy %.4f\n", acc);
            }
        }
    }
    trainer_free(&t);
    data_close(&rd);
    return rc < 0 ? 0 : rc;
}
