/*
 * amp_underflow.c - why the grad scaler exists.
 *
 * A linear model whose loss is multiplied by 1e-7, so the gradient that
 * reaches the f16 matmul's output is around 3e-9 and the weights' true
 * gradients around 1e-8 .. 1e-7: below half of f16's smallest subnormal
 * (2^-25 = 3e-8), they round to zero on the way back. Three runs of 30
 * SGD steps:
 *   f32                    the reference
 *   f16 autocast alone     every gradient is exactly zero: nothing moves
 *   f16 autocast + scaler  gradients x 65536 survive; ends within 1% of f32
 *
 * Exits 1 unless all three behave so (it runs as a test).
 */
#include <ampc.h>
#include <math.h>
#include <stdio.h>

enum { N = 64, D = 8, STEPS = 30 };
#define LOSS_FACTOR 1e-7
#define LR (0.1 / LOSS_FACTOR) /* SGD on the tiny loss = lr 0.1 on the real one */

typedef struct {
    double final_loss;
    bool moved, any_nonzero_grad;
} outcome;

static outcome train(bool autocast, bool scaler_on)
{
    amp_manual_seed(1);
    amp_tensor *x = amp_rand(AMP_SHAPE(N, D), AMP_F32, -1, 1);
    amp_tensor *w_true = amp_rand(AMP_SHAPE(D, 1), AMP_F32, -1, 1);
    amp_tensor *t = amp_tensor_retain(amp_matmul(x, w_true));
    amp_tensor *w = amp_zeros(AMP_SHAPE(D, 1), AMP_F32);
    amp_tensor_set_requires_grad(w, true);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = LR;
    amp_optim *opt = amp_optim_sgd(&w, 1, so);
    amp_scaler_opts sc = amp_scaler_defaults();
    sc.enabled = scaler_on;
    amp_scaler *scaler = amp_scaler_new(sc);

    outcome o = {0};
    for (int step = 0; step < STEPS; step++) {
        amp_optim_zero_grad(opt);
        if (autocast)
            amp_autocast_begin(AMP_CPU, AMP_F16);
        amp_tensor *loss = amp_mul_scalar(amp_mse_loss(amp_matmul(x, w), t), LOSS_FACTOR);
        if (autocast)
            amp_autocast_end();
        if (amp_backward(amp_scaler_scale(scaler, loss)) != AMP_OK ||
            amp_scaler_unscale(scaler, opt) != AMP_OK) {
            fprintf(stderr, "step failed: %s\n", amp_last_error());
            break;
        }
        const amp_tensor *g = amp_tensor_grad(w);
        for (int i = 0; g && i < D; i++)
            o.any_nonzero_grad |= amp_tensor_get(g, i) != 0.0;
        amp_scaler_step(scaler, opt, NULL);
        amp_scaler_update(scaler);
        o.final_loss = amp_item(loss) / LOSS_FACTOR;
        amp_temps_free();
    }
    for (int i = 0; i < D; i++)
        o.moved |= amp_tensor_get(w, i) != 0.0;
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_tensor_free(w);
    amp_tensor_free(t);
    amp_tensor_free(w_true);
    amp_tensor_free(x);
    return o;
}

int main(void)
{
    outcome f32 = train(false, false), bare = train(true, false), scaled = train(true, true);
    printf("after %d steps (loss of the untrained model: %.6g)\n", STEPS, bare.final_loss);
    printf("  f32                   loss %.6g\n", f32.final_loss);
    printf("  f16 autocast alone    loss %.6g  gradients all zero: %s, weights moved: %s\n",
           bare.final_loss, bare.any_nonzero_grad ? "no" : "yes", bare.moved ? "yes" : "no");
    printf("  f16 autocast + scaler loss %.6g  (%.3f%% from f32)\n", scaled.final_loss,
           100 * fabs(scaled.final_loss - f32.final_loss) / f32.final_loss);
    bool ok = !bare.any_nonzero_grad && !bare.moved && scaled.moved &&
              f32.final_loss < 0.5 * bare.final_loss &&
              fabs(scaled.final_loss - f32.final_loss) <= 0.01 * f32.final_loss;
    printf("%s\n", ok ? "the scaler rescued the gradients" : "UNEXPECTED: see above");
    return ok ? 0 : 1;
}
