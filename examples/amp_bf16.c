/*
 * amp_bf16.c - bf16 autocast needs no grad scaler: bf16 has float32's
 * exponent range, so small gradients do not flush to zero.
 *
 *     with autocast("cpu", dtype=torch.bfloat16):
 *         loss = loss_fn(model(x), y)
 *     loss.backward(); optimizer.step()
 *
 * Exits 1 unless the loss falls and the parameters' gradients are f32.
 */
#include "synthetic.h"

int main(void)
{
    amp_tensor *x, *y;
    make_blobs(512, 16, 4, 5, &x, &y);
    amp_module *model = make_mlp(16, 64, 4);
    amp_tensor *params[8];
    int n = amp_module_params(model, params, 8);
    amp_optim *opt = amp_optim_adamw(params, n, amp_adamw_defaults());

    double first = 0, last = 0;
    int ok = 1;
    for (int step = 0; step < 60; step++) {
        amp_optim_zero_grad(opt);
        amp_autocast_begin(AMP_CPU, AMP_BF16);
        amp_tensor *logits = amp_module_forward(model, x);
        amp_tensor *loss = amp_cross_entropy(logits, y);
        amp_autocast_end();
        if (!loss || amp_backward(loss) != AMP_OK || amp_optim_step(opt) != AMP_OK)
            return fail("step");
        ok &= amp_tensor_dtype(logits) == AMP_BF16 && amp_tensor_dtype(loss) == AMP_F32 &&
              amp_tensor_dtype(amp_tensor_grad(params[0])) == AMP_F32;
        last = amp_item(loss);
        if (step == 0)
            first = last;
        amp_temps_free();
    }
    printf("loss %.4f -> %.4f (logits bf16, loss f32, gradients f32: %s)\n", first, last,
           ok ? "yes" : "NO");
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return ok && last < 0.5 * first ? 0 : 1;
}
