/*
 * amp_accumulation.c - gradient accumulation over N micro-batches with a
 * grad scaler: each micro-batch's loss is divided by N and scaled with the
 * same scale; only at the boundary do unscale / step / update / zero run.
 *
 * Exits 1 unless the accumulated gradient equals the full batch's gradient
 * (to f32 rounding) and training makes progress.
 */
#include "synthetic.h"

#include <math.h>

enum { MICRO = 4, BATCH = 256 };

int main(void)
{
    amp_tensor *x, *y;
    make_blobs(BATCH, 16, 4, 3, &x, &y);
    amp_module *model = make_mlp(16, 32, 4);
    amp_tensor *params[8];
    int n = amp_module_params(model, params, 8);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.1;
    amp_optim *opt = amp_optim_sgd(params, n, so);
    amp_scaler *scaler = amp_scaler_new(amp_scaler_defaults());

    /* The reference: the full batch's gradient of the first weight, f32. */
    amp_optim_zero_grad(opt);
    if (amp_backward(amp_cross_entropy(amp_module_forward(model, x), y)) != AMP_OK)
        return fail("reference backward");
    amp_tensor *full = amp_clone(amp_tensor_grad(params[0]));
    amp_temps_free();

    int ok = 1;
    double first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        amp_optim_zero_grad(opt);
        double total = 0;
        for (int m = 0; m < MICRO; m++) {
            /* rows [m*B/4, (m+1)*B/4) as a view of x */
            amp_tensor *xb = amp_from_data(AMP_SHAPE(BATCH / MICRO, 16), AMP_F32,
                                           (const float *)amp_tensor_cdata(x) + m * (BATCH / MICRO) * 16);
            amp_tensor *yb = amp_from_data(AMP_SHAPE(BATCH / MICRO), AMP_I64,
                                           (const int64_t *)amp_tensor_cdata(y) + m * (BATCH / MICRO));
            amp_tensor *loss = amp_div_scalar(amp_cross_entropy(amp_module_forward(model, xb), yb), MICRO);
            if (!loss || amp_backward(amp_scaler_scale(scaler, loss)) != AMP_OK)
                return fail("micro-batch");
            total += amp_item(loss);
            amp_tensor_free(xb);
            amp_tensor_free(yb);
        }
        if (step == 0) {
            /* Before the first step: the accumulated, unscaled gradient is
             * the full batch's. */
            if (amp_scaler_unscale(scaler, opt) != AMP_OK)
                return fail("unscale");
            const amp_tensor *g = amp_tensor_grad(params[0]);
            double worst = 0;
            for (int64_t i = 0; i < amp_tensor_numel(g); i++) {
                double d = fabs(amp_tensor_get(g, i) - amp_tensor_get(full, i));
                worst = d > worst ? d : worst;
            }
            printf("accumulated vs full-batch gradient: max |diff| %.3g\n", worst);
            ok &= worst < 1e-6;
        }
        bool skipped;
        if (amp_scaler_step(scaler, opt, &skipped) != AMP_OK || amp_scaler_update(scaler) != AMP_OK)
            return fail("step");
        last = total;
        if (step == 0)
            first = total;
        amp_temps_free();
    }
    printf("loss %.4f -> %.4f\n", first, last);
    amp_tensor_free(full);
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return ok && last < 0.7 * first ? 0 : 1;
}
