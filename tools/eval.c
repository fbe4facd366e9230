/*
 * eval.c - measuring a model: the share of test images classified right
 * (mlp, cnn), or the mean next-character cross-entropy over fixed windows
 * of the corpus's validation split (gpt), in the run's precision, with no
 * gradients and dropout off. And `ampc eval DIR`: the same for a saved
 * checkpoint.
 *
 * The validation windows come from fixed seeds, not the run's seed, so
 * runs with different seeds or precisions are measured on the same text.
 */
#include "cli.h"

#include <math.h>
#include <string.h>

#define VAL_STREAM 0x76616cull /* "val": the validation windows' seeds */

static void autocast_begin(const trainer *t)
{
    if (t->autocast)
        amp_autocast_begin(AMP_CPU, t->dtype);
}

static void autocast_end(const trainer *t)
{
    if (t->autocast)
        amp_autocast_end();
}

double eval_accuracy(trainer *t, const dataset *d, batcher *b)
{
    int64_t correct = 0;
    bool ok = true;
    amp_module_train(t->model, false);
    amp_no_grad_begin();
    for (int64_t k = 0, nb = batcher_count(b, d); k < nb && ok; k++) {
        amp_tensor *x, *y;
        batcher_fill(b, d, k, &x, &y);
        autocast_begin(t);
        amp_tensor *pred = amp_argmax(amp_module_forward(t->model, x), 1);
        autocast_end(t);
        ok = pred != NULL;
        if (ok) {
            const int64_t *p = amp_tensor_cdata(pred), *l = amp_tensor_cdata(y);
            for (int64_t i = 0, n = amp_tensor_numel(y); i < n; i++)
                correct += p[i] == l[i];
        }
        amp_temps_free();
    }
    amp_no_grad_end();
    amp_module_train(t->model, true);
    return ok ? (double)correct / (double)d->n : -1.0;
}

double eval_text_loss(trainer *t, const train_opts *o, text_data *td)
{
    double sum = 0;
    bool ok = true;
    amp_module_train(t->model, false);
    amp_no_grad_begin();
    for (int64_t k = 0; k < o->val_batches && ok; k++) {
        ok = amp_text_batch(td->text, true, derive_seed(0, VAL_STREAM, (uint64_t)k), td->x, td->y) == AMP_OK;
        if (!ok)
            break;
        autocast_begin(t);
        amp_tensor *logits = amp_module_forward(t->model, td->x);
        amp_tensor *loss = amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(-1, amp_text_vocab(td->text))),
                                             amp_reshape(td->y, AMP_SHAPE(-1)));
        autocast_end(t);
        ok = loss != NULL;
        if (ok)
            sum += amp_item(loss);
        amp_temps_free();
    }
    amp_no_grad_end();
    amp_module_train(t->model, true);
    return ok ? sum / (double)o->val_batches : NAN;
}

int device_check(const train_opts *o, const char *who)
{
    if (strcmp(o->device, "cuda") != 0)
        return -1;
    if (amp_cuda_available()) {
        fprintf(stderr, "%s: --device cuda: a GPU is available, but this command trains on the CPU only for "
                        "now; use --device cpu\n", who);
        return 1;
    }
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

int eval_run(int argc, char **argv)
{
    train_opts o, ck;
    run_info ri = {0}, saved = {0};
    train_opts_default(&o);
    int rc = opts_parse(argc, argv, &o, true);
    if (rc < 0)
        rc = device_check(&o, "ampc eval");
    if (rc < 0)
        rc = checkpoint_read_settings(o.resume, &ck, &saved);
    char where[4096];
    checkpoint_path(where, sizeof where, o.resume ? o.resume : ".");
    if (rc < 0)
        rc = settings_merge(&o, &ck, where);
    if (rc < 0)
        rc = opts_resolve(&o);
    if (rc >= 0)
        return rc;
    amp_set_num_threads((int)o.threads);

    double t0 = now_s();
    run_data rd;
    if ((rc = data_open(&rd, &o, &ri, false)) >= 0)
        return rc;
    trainer t = {0};
    int64_t step = 0;
    if ((rc = data_check(&ri, &saved, &o, where)) < 0 && !trainer_build(&t, &o, &saved, 1))
        rc = 1;
    if (rc < 0)
        rc = checkpoint_load_run(o.resume, &t, false, false, &step);
    if (rc < 0) {
        char desc[256];
        printf("checkpoint %s: step %lld, %s (%lld parameters), precision %s\n", where, (long long)step,
               model_describe(&o, &saved, desc, sizeof desc), (long long)t.n_weights, o.precision);
        if (rd.gpt) {
            double loss = eval_text_loss(&t, &o, &rd.text);
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
