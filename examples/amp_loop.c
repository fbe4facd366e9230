/*
 * amp_loop.c - the typical AMP step, line for line as in PyTorch:
 *
 *     optimizer.zero_grad()
 *     with autocast(device_type, dtype):
 *         loss = loss_fn(model(x), y)
 *     scaler.scale(loss).backward()
 *     scaler.step(optimizer)
 *     scaler.update()
 *
 * f16 autocast on the CPU with a grad scaler. Exits 1 unless the loss falls
 * to under half its start.
 */
#include "synthetic.h"

int main(void)
{
    amp_tensor *x, *y;
    make_blobs(512, 16, 4, 1, &x, &y);
    amp_module *model = make_mlp(16, 64, 4);
    amp_tensor *params[8];
    int n = amp_module_params(model, params, 8);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05;
    so.momentum = 0.9;
    amp_optim *opt = amp_optim_sgd(params, n, so);
    amp_scaler *scaler = amp_scaler_new(amp_scaler_defaults());

    double first = 0, last = 0;
    for (int step = 0; step < 60; step++) {
        amp_optim_zero_grad(opt);
        amp_autocast_begin(AMP_CPU, AMP_F16);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, x), y);
        amp_autocast_end();
        if (!loss || amp_backward(amp_scaler_scale(scaler, loss)) != AMP_OK)
            return fail("forward/backward");
        bool skipped;
        if (amp_scaler_step(scaler, opt, &skipped) != AMP_OK || amp_scaler_update(scaler) != AMP_OK)
            return fail("step");
        last = amp_item(loss);
        if (step == 0)
            first = last;
        if (step % 20 == 0)
            printf("step %2d  loss %.4f  scale %g%s\n", step, last, amp_scaler_get_scale(scaler),
                   skipped ? "  (skipped)" : "");
        amp_temps_free();
    }
    printf("loss %.4f -> %.4f\n", first, last);
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return last < 0.5 * first ? 0 : 1;
}
