/*
 * scale_calib.c - ampc train --init-scale auto (the rule: scale_calib.h).
 *
 * Why in the CLI and not the library: a probe is a whole training step's
 * forward and backward (the data, the model, autocast, the loss, --accum),
 * which only the caller of the library knows; what the library could hold
 * is the exponent walk below, a few lines. The scaler's own state is set
 * through amp_scaler_state_load, as a resumed run's is.
 *
 * The cheapest correct search: one probe at scale 1 reads the gradients'
 * largest magnitude g and guesses E = floor(log2(65504 / g)) (f16's
 * largest finite over it); the scaled backward overflows in its f16
 * intermediates, not only in the parameters' gradients, so the guess is
 * checked: probed at 2^E, then one exponent up (or down) at a time until
 * the boundary is seen. On the default gpt that is three probes.
 */
#include "scale_calib.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* f16's largest finite value (IEEE 754 binary16). */
#define F16_MAX 65504.0

/* One probe of step 0 at scale: whether every gradient is finite into
 * *finite, and (max_grad not NULL) the largest |gradient| into it. The
 * gradients are cleared and the generator put back after it. AMP_OK or
 * the error. */
static amp_status probe(trainer *t, const train_opts *o, const run_info *ri, bool gpt, batch_fn fn, void *ctx,
                        double scale, bool *finite, double *max_grad)
{
    const amp_rng_state rng = amp_rng_get_state();
    amp_clear_error();
    amp_device dev = t->n_params > 0 ? amp_tensor_device(t->params[0]) : AMP_CPU;
    amp_status st = AMP_OK;
    amp_optim_zero_grad(t->opt);
    for (int64_t j = 0; j < o->accum && st == AMP_OK; j++) {
        amp_tensor *x, *y;
        if (!fn(ctx, j, &x, &y)) {
            st = amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_IO;
            break;
        }
        amp_tensor *loss = micro_batch_loss(t, o, ri, gpt, dev, x, y);
        st = amp_backward(amp_mul_scalar(loss, scale));
        amp_temps_free();
    }
    int first = -1;
    if (st == AMP_OK)
        st = amp_optim_find_nonfinite_grad(t->opt, &first, NULL);
    *finite = first < 0;
    if (st == AMP_OK && max_grad) {
        double m = 0;
        float *host = NULL;
        for (int i = 0; i < t->n_params && st == AMP_OK; i++) {
            const amp_tensor *g = amp_tensor_grad(t->params[i]);
            int64_t n = g ? amp_tensor_numel(g) : 0;
            if (n == 0)
                continue;
            float *h = realloc(host, (size_t)n * sizeof *h);
            if (!h) { /* (the library's message slot is its own: said here) */
                fprintf(stderr, "ampc: --init-scale auto: out of memory for a gradient of %lld elements\n",
                        (long long)n);
                st = AMP_ERR_MEMORY;
                break;
            }
            host = h;
            if ((st = amp_tensor_copy_out(g, host, AMP_F32)) != AMP_OK)
                break;
            for (int64_t k = 0; k < n; k++)
                m = fmax(m, fabs((double)host[k]));
        }
        free(host);
        *max_grad = m;
    }
    amp_optim_zero_grad(t->opt);
    amp_rng_set_state(rng);
    return st;
}

/* Records probe (scale, finite) in c. */
static void note(scale_calib *c, double scale, bool finite)
{
    if (c->n_probes < SCALE_CALIB_MAX_PROBES) {
        c->probe_scale[c->n_probes] = scale;
        c->probe_finite[c->n_probes] = finite;
        c->n_probes++;
    }
}

int scale_calibrate(trainer *t, const train_opts *o, const run_info *ri, bool gpt, batch_fn fn, void *ctx,
                    scale_calib *c)
{
    *c = (scale_calib){0};
    bool finite;
    if (probe(t, o, ri, gpt, fn, ctx, 1.0, &finite, &c->max_grad) != AMP_OK)
        goto failed;
    note(c, 1.0, finite);
    /* e: the highest exponent known finite; the walk moves it to the
     * boundary (e finite, e + 1 not, or the top). */
    int e;
    /* the walk's top: where the cap (--max-scale, else --init-scale's
     * default) is reached */
    const double cap = o->max_scale > 0 ? o->max_scale : o->init_scale;
    double t_exp = ceil(log2(cap * o->growth_factor));
    const int top = t_exp > SCALE_CALIB_MAX_EXP ? SCALE_CALIB_MAX_EXP : t_exp < 0 ? 0 : (int)t_exp;
    if (finite) {
        int guess = top;
        if (c->max_grad > 0) {
            double g = floor(log2(F16_MAX / c->max_grad));
            guess = g < 0 ? 0 : g > top ? top : (int)g;
        }
        e = 0;
        if (guess > 0) {
            if (probe(t, o, ri, gpt, fn, ctx, ldexp(1.0, guess), &finite, NULL) != AMP_OK)
                goto failed;
            note(c, ldexp(1.0, guess), finite);
            if (finite)
                e = guess;
            /* below the guess: down until finite (0 is) */
            for (int k = guess - 1; !finite && k > 0; k--) {
                if (probe(t, o, ri, gpt, fn, ctx, ldexp(1.0, k), &finite, NULL) != AMP_OK)
                    goto failed;
                note(c, ldexp(1.0, k), finite);
                if (finite)
                    e = k;
            }
            if (e < guess) /* the boundary is found: e finite, e + 1 not */
                goto found;
        }
        for (finite = true; e < top;) { /* up until not finite */
            if (probe(t, o, ri, gpt, fn, ctx, ldexp(1.0, e + 1), &finite, NULL) != AMP_OK)
                goto failed;
            note(c, ldexp(1.0, e + 1), finite);
            if (!finite)
                break;
            e++;
        }
    } else {
        for (e = -1; e >= SCALE_CALIB_MIN_EXP; e--) { /* inf/NaN at 1: down until finite */
            if (probe(t, o, ri, gpt, fn, ctx, ldexp(1.0, e), &finite, NULL) != AMP_OK)
                goto failed;
            note(c, ldexp(1.0, e), finite);
            if (finite)
                break;
        }
        if (e < SCALE_CALIB_MIN_EXP) {
            fprintf(stderr, "ampc: --init-scale auto: the first step's gradients hold inf/NaN at every scale from 1 "
                            "down to 2^%d (%d probes): no scale makes them finite; check the data and --lr "
                            "(ampc train --max-skips shows which gradient)\n",
                    SCALE_CALIB_MIN_EXP, c->n_probes);
            return 1;
        }
    }
found:
    c->largest_finite = ldexp(1.0, e);
    /* the largest power of two at most S_max / margin */
    const double margin = SCALE_CALIB_MARGIN > o->growth_factor ? SCALE_CALIB_MARGIN : o->growth_factor;
    int k = e - (int)ceil(log2(margin));
    while (ldexp(1.0, k + 1) * margin <= c->largest_finite)
        k++;
    while (k > SCALE_CALIB_MIN_EXP - 32 && ldexp(1.0, k) * margin > c->largest_finite)
        k--;
    c->scale = ldexp(1.0, k);
    c->capped = e == top && finite;
    if (c->scale > cap)
        c->scale = cap;
    if (o->min_scale > 0 && c->scale < o->min_scale)
        c->scale = o->min_scale;
    amp_scaler_state st = amp_scaler_state_get(t->scaler);
    st.scale = c->scale;
    if (amp_scaler_state_load(t->scaler, st) != AMP_OK) {
        fprintf(stderr, "ampc: --init-scale auto: setting the scale %g: %s\n", c->scale, amp_last_error());
        return 1;
    }
    return -1;
failed:
    if (amp_last_error()[0])
        fprintf(stderr, "ampc: --init-scale auto: probing the first step: %s\n", amp_last_error());
    return 1;
}

const char *scale_calib_json(const scale_calib *c, char *buf, size_t n)
{
    /* an event line, flat (the log's lines are flat objects: ampc plot
     * reads them so); the probes in order as "SCALE:finite" / "SCALE:inf" */
    size_t at = (size_t)snprintf(buf, n,
                                 "{\"event\":\"init_scale_auto\",\"scale\":%.17g,\"largest_finite\":%.17g,\"capped\":%s,"
                                 "\"max_grad\":%.9g,\"probes\":%d,\"probed\":\"",
                                 c->scale, c->largest_finite, c->capped ? "true" : "false", c->max_grad,
                                 c->n_probes);
    for (int i = 0; i < c->n_probes && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%.17g:%s", i ? " " : "", c->probe_scale[i],
                               c->probe_finite[i] ? "finite" : "inf");
    if (at < n)
        snprintf(buf + at, n - at, "\"}");
    return buf;
}
