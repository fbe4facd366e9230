/*
 * test_underflow.c - why the grad scaler exists.
 *
 * A linear model whose loss is multiplied by 1e-7, so the gradient that
 * reaches the f16 matmul's output is around 3e-9 and the weights' true
 * gradients around 1e-8 .. 1e-7: below half of f16's smallest subnormal
 * (2^-25 = 3e-8), they round to zero on the way back. Under f16 autocast without a scaler
 * every gradient is exactly zero and the weights never move; with the
 * scaler (2^16) they survive, and 30 SGD steps end within 1% of the loss
 * of the same run in f32.
 */
#include "harness.h"

enum { N = 64, D = 8, STEPS = 30 };
#define LOSS_FACTOR 1e-7
#define LR (0.1 / LOSS_FACTOR) /* SGD on the tiny loss = lr 0.1 on the real one */

typedef enum { RUN_F32, RUN_F16_NO_SCALER, RUN_F16_SCALER } run_kind;

typedef struct {
    double final_loss;
    bool weights_moved;
    bool any_nonzero_grad;
} outcome;

static outcome train(run_kind kind)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(N, D), AMP_F32, -1, 1, 1);
    amp_tensor *wt = test_uniform(AMP_SHAPE(D, 1), AMP_F32, -1, 1, 2);
    amp_tensor *t = amp_matmul(x, wt);
    amp_tensor_retain(t);
    amp_temps_free();
    amp_tensor *w = amp_zeros(AMP_SHAPE(D, 1), AMP_F32);
    amp_tensor_set_requires_grad(w, true);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = LR;
    amp_optim *opt = amp_optim_sgd(&w, 1, so);
    amp_scaler_opts sc = amp_scaler_defaults();
    sc.enabled = kind == RUN_F16_SCALER;
    amp_scaler *scaler = amp_scaler_new(sc);

    outcome o = {0};
    for (int step = 0; step < STEPS; step++) {
        amp_optim_zero_grad(opt);
        if (kind != RUN_F32)
            amp_autocast_begin(AMP_CPU, AMP_F16);
        amp_tensor *loss = amp_mul_scalar(amp_mse_loss(amp_matmul(x, w), t), LOSS_FACTOR);
        if (kind != RUN_F32)
            amp_autocast_end();
        CHECK_OK(amp_backward(amp_scaler_scale(scaler, loss)));
        CHECK_OK(amp_scaler_unscale(scaler, opt));
        amp_tensor *g = amp_tensor_grad(w);
        for (int i = 0; g && i < D; i++)
            o.any_nonzero_grad |= amp_tensor_get(g, i) != 0.0;
        bool skipped = false;
        CHECK_OK(amp_scaler_step(scaler, opt, &skipped));
        CHECK(!skipped);
        CHECK_OK(amp_scaler_update(scaler));
        o.final_loss = amp_item(loss) / LOSS_FACTOR;
        amp_temps_free();
    }
    for (int i = 0; i < D; i++)
        o.weights_moved |= amp_tensor_get(w, i) != 0.0;
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_tensor_free(w);
    amp_tensor_free(t);
    amp_tensor_free(wt);
    amp_tensor_free(x);
    return o;
}

static void test_f16_without_scaler_flushes_every_gradient(void)
{
    outcome o = train(RUN_F16_NO_SCALER);
    CHECK(!o.any_nonzero_grad);
    CHECK(!o.weights_moved);
}

static void test_f16_with_scaler_trains_like_f32(void)
{
    outcome ref = train(RUN_F32), amp = train(RUN_F16_SCALER);
    CHECK(amp.any_nonzero_grad && amp.weights_moved);
    outcome start = train(RUN_F16_NO_SCALER); /* never moves: the untrained loss */
    CHECK_MSG(ref.final_loss < 0.5 * start.final_loss, "f32 run did not learn: %g vs %g",
              ref.final_loss, start.final_loss);
    CHECK_MSG(fabs(amp.final_loss - ref.final_loss) <= 0.01 * ref.final_loss,
              "f16+scaler loss %.6g vs f32 %.6g", amp.final_loss, ref.final_loss);
    printf("  losses after %d steps: f32 %.6g, f16+scaler %.6g, f16 alone %.6g (never moved)\n",
           STEPS, ref.final_loss, amp.final_loss, start.final_loss);
}

int main(void)
{
    RUN(test_f16_without_scaler_flushes_every_gradient);
    RUN(test_f16_with_scaler_trains_like_f32);
    return harness_done();
}
