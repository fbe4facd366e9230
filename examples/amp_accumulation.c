/*
 * amp_accumulation.c - gradient accumulation under autocast (f16) and a
 * grad scaler, the recipe for a batch too big to take at once:
 *
 *     for i, (x, y) in enumerate(micro_batches):
 *         with autocast(dtype=float16):
 *             loss = criterion(model(x), y) / ACCUM
 *         scaler.scale(loss).backward()          # every micro-batch
 *         if (i + 1) % ACCUM == 0:
 *             scaler.unscale_(optimizer)         # once per step
 *             clip_grad_norm_(params, max_norm)  # on the true gradients
 *             scaler.step(optimizer)
 *             scaler.update()
 *             optimizer.zero_grad()
 *
 * Every micro-batch's loss is scaled by the same scale (update only runs
 * at the boundary), so the gradients add up scaled once; unscale divides
 * the sum once, and step does not unscale again.
 *
 * Exits 1 unless, before the first step, the accumulated and unscaled
 * gradient is the full batch's (taken at once under the same autocast and
 * scale) to f16's rounding, every step saw the clip hold, the optimizer
 * stepped once per ACCUM micro-batches, and the loss falls.
 */
#include "synthetic.h"

#include <math.h>

enum { ACCUM = 4, BATCH = 256, MICRO = BATCH / ACCUM, D = 16, STEPS = 30 };

int main(void)
{
    const double max_norm = 1.0;
    amp_tensor *x, *y;
    make_blobs(BATCH, D, 4, 3, &x, &y);
    amp_module *model = make_mlp(D, 32, 4);
    amp_tensor *params[8];
    int n = amp_module_params(model, params, 8);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.1;
    so.momentum = 0.9;
    amp_optim *opt = amp_optim_sgd(params, n, so);
    amp_scaler *scaler = amp_scaler_new(amp_scaler_defaults());

    /* The reference: the full batch's gradient of the first weight, taken
     * at once under the same autocast, the loss scaled by the scaler's
     * first scale (a power of two: dividing it out again is exact). */
    const double scale0 = amp_scaler_get_scale(scaler);
    amp_optim_zero_grad(opt);
    amp_autocast_begin(AMP_CPU, AMP_F16);
    amp_tensor *full_loss = amp_cross_entropy(amp_module_forward(model, x), y);
    amp_autocast_end();
    if (!full_loss || amp_backward(amp_mul_scalar(full_loss, scale0)) != AMP_OK)
        return fail("reference backward");
    amp_tensor *full = amp_div_scalar(amp_tensor_grad(params[0]), scale0);
    amp_tensor_retain(full);
    amp_temps_free();
    amp_optim_zero_grad(opt);

    int ok = 1, skipped_steps = 0;
    double first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        double total = 0;
        for (int m = 0; m < ACCUM; m++) {
            /* rows [m * MICRO, (m + 1) * MICRO) of the batch */
            amp_tensor *xb = amp_from_data(AMP_SHAPE(MICRO, D), AMP_F32,
                                           (const float *)amp_tensor_cdata(x) + m * MICRO * D);
            amp_tensor *yb = amp_from_data(AMP_SHAPE(MICRO), AMP_I64, (const int64_t *)amp_tensor_cdata(y) + m * MICRO);
            amp_autocast_begin(AMP_CPU, AMP_F16);
            amp_tensor *loss = amp_div_scalar(amp_cross_entropy(amp_module_forward(model, xb), yb), ACCUM);
            amp_autocast_end();
            if (!loss || amp_backward(amp_scaler_scale(scaler, loss)) != AMP_OK)
                return fail("micro-batch forward/backward");
            total += amp_item(loss); /* the micro-batch's share of the batch's mean loss */
            amp_tensor_free(xb);
            amp_tensor_free(yb);
        }
        /* The boundary: unscale once, clip, step, update, zero. */
        if (amp_scaler_unscale(scaler, opt) != AMP_OK)
            return fail("unscale");
        if (step == 0) {
            /* The same rows through the same f16 linears: the sums differ
             * only in how the rows are split (four f16 weight gradients of
             * 64 rows added in f32, against one of 256 rows), a few f16
             * roundings (2^-11 relative) of the largest element at most. */
            const amp_tensor *g = amp_tensor_grad(params[0]);
            double worst = 0, size = 0;
            for (int64_t i = 0; i < amp_tensor_numel(g); i++) {
                double d = fabs(amp_tensor_get(g, i) - amp_tensor_get(full, i));
                worst = d > worst ? d : worst;
                size = fmax(size, fabs(amp_tensor_get(full, i)));
            }
            printf("accumulated, unscaled vs full-batch gradient: max |diff| %.3g (largest element %.3g)\n", worst,
                   size);
            ok &= worst <= 4 * 0x1p-11 * size;
        }
        double norm = amp_clip_grad_norm(params, n, max_norm);
        double after = amp_clip_grad_norm(params, n, INFINITY); /* measures only */
        if (isfinite(norm) && after > max_norm * (1 + 1e-5)) {
            printf("step %d: norm after clipping %g > %g\n", step, after, max_norm);
            ok = 0;
        }
        bool skipped = false;
        if (amp_scaler_step(scaler, opt, &skipped) != AMP_OK || amp_scaler_update(scaler) != AMP_OK)
            return fail("step");
        skipped_steps += skipped;
        amp_optim_zero_grad(opt);
        last = total;
        if (step == 0)
            first = total;
        if (step % 10 == 0)
            printf("step %2d  loss %.4f  grad norm %.3f  scale %g\n", step, total, norm, amp_scaler_get_scale(scaler));
        amp_temps_free();
    }
    /* One optimizer step per ACCUM micro-batches (a step the scaler skipped
     * for inf/NaN gradients does not count). */
    int64_t steps = amp_optim_steps(opt);
    printf("loss %.4f -> %.4f; %lld optimizer steps for %d micro-batches (%d skipped)\n", first, last,
           (long long)steps, STEPS * ACCUM, skipped_steps);
    ok &= steps == STEPS - skipped_steps;
    amp_tensor_free(full);
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return ok && last < 0.7 * first ? 0 : 1;
}
