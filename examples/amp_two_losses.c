/*
 * amp_two_losses.c - two models, two losses, two optimizers, one scaler:
 * each loss is scaled and back-propagated, each optimizer stepped through
 * the scaler (each skips on its own infs), and update runs once at the end.
 *
 * Exits 1 unless both losses fall.
 */
#include "synthetic.h"

int main(void)
{
    amp_tensor *x, *y;
    make_blobs(256, 16, 4, 4, &x, &y);
    amp_module *a = make_mlp(16, 32, 4), *b = make_mlp(16, 32, 4);
    amp_tensor *pa[8], *pb[8];
    int na = amp_module_params(a, pa, 8), nb = amp_module_params(b, pb, 8);
    amp_optim *oa = amp_optim_adam(pa, na, amp_adam_defaults());
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05;
    so.momentum = 0.9;
    amp_optim *ob = amp_optim_sgd(pb, nb, so);
    amp_scaler *scaler = amp_scaler_new(amp_scaler_defaults());

    double a0 = 0, b0 = 0, a1 = 0, b1 = 0;
    for (int step = 0; step < 40; step++) {
        amp_optim_zero_grad(oa);
        amp_optim_zero_grad(ob);
        amp_autocast_begin(AMP_CPU, AMP_F16);
        amp_tensor *out_a = amp_module_forward(a, x), *out_b = amp_module_forward(b, x);
        /* loss0 mixes both models' outputs; loss1 only b's. */
        amp_tensor *loss0 = amp_cross_entropy(amp_add(out_a, amp_mul_scalar(out_b, 0.5)), y);
        amp_tensor *loss1 = amp_cross_entropy(out_b, y);
        amp_autocast_end();
        /* Two graphs share out_b: back-propagate their sum once. */
        amp_tensor *both = amp_add(amp_scaler_scale(scaler, loss0), amp_scaler_scale(scaler, loss1));
        if (!both || amp_backward(both) != AMP_OK)
            return fail("backward");
        if (amp_scaler_step(scaler, oa, NULL) != AMP_OK || amp_scaler_step(scaler, ob, NULL) != AMP_OK ||
            amp_scaler_update(scaler) != AMP_OK)
            return fail("step");
        a1 = amp_item(loss0);
        b1 = amp_item(loss1);
        if (step == 0) {
            a0 = a1;
            b0 = b1;
        }
        amp_temps_free();
    }
    printf("loss0 %.4f -> %.4f, loss1 %.4f -> %.4f, scale %g\n", a0, a1, b0, b1,
           amp_scaler_get_scale(scaler));
    amp_scaler_free(scaler);
    amp_optim_free(oa);
    amp_optim_free(ob);
    amp_module_free(a);
    amp_module_free(b);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return a1 < 0.7 * a0 && b1 < 0.7 * b0 ? 0 : 1;
}
