/*
 * amp_clipping.c - gradient clipping with a grad scaler: unscale first, so
 * the clip sees the true gradients; step then skips on inf/NaN without a
 * second unscale.
 *
 *     scaler.scale(loss).backward()
 *     scaler.unscale_(optimizer)
 *     clip_grad_norm_(model.parameters(), max_norm)
 *     scaler.step(optimizer)
 *     scaler.update()
 *
 * Exits 1 unless every clipped norm is <= max_norm and the loss falls.
 */
#include "synthetic.h"

#include <math.h>

int main(void)
{
    const double max_norm = 0.5;
    amp_tensor *x, *y;
    make_blobs(256, 16, 4, 2, &x, &y);
    amp_module *model = make_mlp(16, 64, 4);
    amp_tensor *params[8];
    int n = amp_module_params(model, params, 8);
    amp_optim *opt = amp_optim_adamw(params, n, amp_adamw_defaults());
    amp_scaler *scaler = amp_scaler_new(amp_scaler_defaults());

    double first = 0, last = 0;
    int ok = 1;
    for (int step = 0; step < 40; step++) {
        amp_optim_zero_grad(opt);
        amp_autocast_begin(AMP_CPU, AMP_F16);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, x), y);
        amp_autocast_end();
        if (!loss || amp_backward(amp_scaler_scale(scaler, loss)) != AMP_OK)
            return fail("forward/backward");
        if (amp_scaler_unscale(scaler, opt) != AMP_OK)
            return fail("unscale");
        double norm = amp_clip_grad_norm(params, n, max_norm);
        double after = amp_clip_grad_norm(params, n, INFINITY); /* measures only */
        if (isfinite(norm) && after > max_norm * (1 + 1e-5)) {
            printf("step %d: norm after clipping %g > %g\n", step, after, max_norm);
            ok = 0;
        }
        if (amp_scaler_step(scaler, opt, NULL) != AMP_OK || amp_scaler_update(scaler) != AMP_OK)
            return fail("step");
        last = amp_item(loss);
        if (step == 0)
            first = last;
        if (step % 10 == 0)
            printf("step %2d  loss %.4f  grad norm %.3f -> %.3f\n", step, last, norm, after);
        amp_temps_free();
    }
    printf("loss %.4f -> %.4f\n", first, last);
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return ok && last < 0.7 * first ? 0 : 1;
}
