/*
 * diagnose.c - saying what is not finite when a run cannot train: the
 * weights, a step's inputs, its loss, or (first) which parameter's
 * gradient. train.c calls it when the grad scaler has skipped --max-skips
 * steps in a row (every step's gradients held inf/NaN: the model is not
 * training and the scale decays towards 0), and, without the scaler, when
 * the loss is not finite.
 *
 * The scaler's own check is one fused pass that records only "some
 * gradient was not finite", and by the time train.c learns of a skip the
 * gradients have been through clip_grad_norm (which, as PyTorch's,
 * multiplies them all by NaN when the norm is not finite). So the
 * diagnosis re-runs the step: skipped steps change nothing, so its
 * forward and backward see what the failing step saw (dropout aside).
 */
#include "diagnose.h"
#include "train.h"

#include <math.h>
#include <string.h>

static const char *param_label(const trainer *t, int i, char *buf, size_t n)
{
    const char *name = NULL;
    char shape[96];
    amp_module_param(t->model, i, &name);
    snprintf(buf, n, "%s %s", name ? name : "?", amp_shape_str(amp_tensor_shape(t->params[i]), shape, sizeof shape));
    return buf;
}

int64_t count_bad_inputs(const train_opts *o, int64_t first, int64_t last, batch_fn fn, void *ctx, int64_t *total)
{
    int64_t bad = 0;
    *total = 0;
    for (int64_t m = first * o->accum; m < (last + 1) * o->accum; m++) {
        amp_tensor *x, *y;
        if (!fn(ctx, m, &x, &y))
            return -1;
        int64_t b = amp_tensor_count_nonfinite(x);
        if (b < 0)
            return -1;
        bad += b;
        *total += amp_tensor_numel(x);
    }
    return bad;
}

void diagnose_step(trainer *t, const train_opts *o, const run_info *ri, bool gpt, int64_t step, batch_fn fn,
                   void *ctx)
{
    char label[256];
    bool weights_bad = false, inputs_bad = false, loss_bad = false;
    amp_clear_error();
    for (int i = 0; i < t->n_params && !weights_bad; i++) {
        int64_t bad = amp_tensor_count_nonfinite(t->params[i]);
        if ((weights_bad = bad > 0))
            fprintf(stderr, "ampc:   the weights: %s holds %lld inf/NaN values (of %lld)\n",
                    param_label(t, i, label, sizeof label), (long long)bad,
                    (long long)amp_tensor_numel(t->params[i]));
    }
    if (!weights_bad)
        fprintf(stderr, "ampc:   the weights: all finite\n");
    amp_device dev = t->n_params > 0 ? amp_tensor_device(t->params[0]) : AMP_CPU;
    amp_optim_zero_grad(t->opt);
    bool ok = true;
    for (int64_t j = 0; j < o->accum && ok; j++) {
        int64_t m = step * o->accum + j;
        amp_tensor *x, *y;
        if (!(ok = fn(ctx, m, &x, &y)))
            break;
        int64_t bad = amp_tensor_count_nonfinite(x);
        if (bad != 0) {
            inputs_bad = true;
            fprintf(stderr, "ampc:   the inputs: micro-batch %lld holds %lld inf/NaN values (of %lld)\n",
                    (long long)m, (long long)bad, (long long)amp_tensor_numel(x));
        }
        amp_tensor *loss = micro_batch_loss(t, o, ri, gpt, dev, x, y);
        double v = loss ? amp_item(loss) : NAN;
        if (!(ok = loss != NULL && amp_backward(amp_scaler_scale(t->scaler, loss)) == AMP_OK))
            break;
        if (!isfinite(v)) {
            loss_bad = true;
            fprintf(stderr, "ampc:   the loss: %g on micro-batch %lld\n", v * (double)o->accum, (long long)m);
        }
        amp_temps_free();
    }
    if (!ok) {
        fprintf(stderr, "ampc:   (re-running the step failed: %s)\n", amp_last_error());
        return;
    }
    if (!inputs_bad)
        fprintf(stderr, "ampc:   the inputs: all finite%s\n", gpt ? " (token ids)" : "");
    if (!loss_bad)
        fprintf(stderr, "ampc:   the loss: finite\n");
    int first = -1;
    int64_t count = 0;
    if (amp_optim_find_nonfinite_grad(t->opt, &first, &count) != AMP_OK)
        fprintf(stderr, "ampc:   the gradients: %s\n", amp_last_error());
    else if (first < 0)
        fprintf(stderr, "ampc:   the gradients: all finite at scale %g\n", amp_scaler_get_scale(t->scaler));
    else
        fprintf(stderr, "ampc:   the gradients: %s is the first with inf/NaN (%lld of %lld elements, at scale %g)\n",
                param_label(t, first, label, sizeof label), (long long)count,
                (long long)amp_tensor_numel(t->params[first]), amp_scaler_get_scale(t->scaler));
    if (inputs_bad)
        fprintf(stderr, "ampc: the data holds inf/NaN: fix --data %s (inputs must be finite)\n", o->data);
    else if (weights_bad)
        fprintf(stderr, "ampc: the weights are not finite (resumed from a checkpoint saved after they diverged?)\n");
    else if (loss_bad)
        fprintf(stderr, "ampc: the forward pass overflows on finite inputs: try a smaller --lr, --clip, or "
                        "--precision bf16; --anomaly-continue names the op and module that overflow, and ampc "
                        "policy search finds the modules to keep in f32\n");
    else {
        /* The scale's own knob: the fixed one, or the floor the backoff
         * stopped at, or the start. */
        char knob[96];
        if (o->static_scale > 0)
            snprintf(knob, sizeof knob, "--static-scale (%g now)", o->static_scale);
        else if (o->min_scale > 0)
            snprintf(knob, sizeof knob, "--min-scale (the floor, %g now)", o->min_scale);
        else
            snprintf(knob, sizeof knob, "--init-scale");
        fprintf(stderr, "ampc: the backward pass overflows at scale %g: try a smaller %s or --lr, --clip, or "
                        "--precision bf16\n", amp_scaler_get_scale(t->scaler), knob);
    }
    amp_optim_zero_grad(t->opt);
    amp_temps_free();
}
