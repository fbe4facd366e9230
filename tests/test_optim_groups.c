/*
 * test_optim_groups.c - per-parameter weight decay
 * (amp_optim_set_weight_decay), torch.optim's parameter groups as GPT-2
 * and nanoGPT use them: the matrices decay, the biases do not. Each kind
 * (SGD, Adam, AdamW) runs one weight and one bias three ways (weight decay
 * everywhere, nowhere, and on the weight only); the grouped run must give
 * the weight the first run's bits and the bias the second's. On the CPU
 * and, where there is one, on CUDA (cudaemu too).
 */
#include "harness.h"
#include "optim_rig.h"

#include <math.h>
#include <string.h>

enum { W_ROWS = 3, W_COLS = 5, W_N = W_ROWS * W_COLS, B_N = 5, STEPS = 3 };

typedef struct {
    float w[W_N], b[B_N];
} pair_values;

static amp_optim *make_optim(int kind, amp_tensor **ps, double wd)
{
    if (kind == 0) {
        amp_sgd_opts s = amp_sgd_defaults();
        s.lr = 0.1;
        s.momentum = 0.9;
        s.weight_decay = wd;
        return amp_optim_sgd(ps, 2, s);
    }
    amp_adam_opts a = kind == 1 ? amp_adam_defaults() : amp_adamw_defaults();
    a.lr = 0.01;
    a.weight_decay = wd;
    return kind == 1 ? amp_optim_adam(ps, 2, a) : amp_optim_adamw(ps, 2, a);
}

/* STEPS steps of optimizer kind over a weight [3, 5] and a bias [5] on dev,
 * weight decay wd on both, then bias_wd on the bias when >= 0. */
static void run(int kind, amp_device dev, double wd, double bias_wd, pair_values *out)
{
    amp_tensor *ps[2] = {test_uniform(AMP_SHAPE(W_ROWS, W_COLS), AMP_F32, -1, 1, 7),
                         test_uniform(AMP_SHAPE(B_N), AMP_F32, -1, 1, 8)};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(amp_tensor_move(ps[i], dev));
        amp_tensor_set_requires_grad(ps[i], true);
    }
    amp_optim *o = make_optim(kind, ps, wd);
    CHECK(o != NULL);
    if (bias_wd >= 0)
        CHECK_OK(amp_optim_set_weight_decay(o, 1, bias_wd));
    for (int s = 0; s < STEPS && o; s++) {
        for (int i = 0; i < 2; i++) {
            amp_tensor *g = test_uniform(ps[i]->shape, AMP_F32, -0.5, 0.5, 20 + (uint64_t)(2 * s + i));
            amp_tensor_clear_grad(ps[i]);
            ps[i]->grad = amp_to_device(g, dev);
            amp_tensor_free(g);
        }
        CHECK_OK(amp_optim_step(o));
    }
    CHECK_OK(amp_tensor_copy_out(ps[0], out->w, AMP_F32));
    CHECK_OK(amp_tensor_copy_out(ps[1], out->b, AMP_F32));
    amp_optim_free(o);
    free_params(ps, 2);
}

static void check_groups_on(amp_device dev)
{
    static const char *names[] = {"sgd", "adam", "adamw"};
    for (int kind = 0; kind < 3; kind++) {
        pair_values all, none, grouped;
        run(kind, dev, 0.1, -1, &all);
        run(kind, dev, 0, -1, &none);
        run(kind, dev, 0.1, 0, &grouped);
        CHECK_MSG(memcmp(grouped.w, all.w, sizeof all.w) == 0, "%s on %s: the weight did not decay as with wd 0.1",
                  names[kind], amp_device_name(dev));
        CHECK_MSG(memcmp(grouped.b, none.b, sizeof none.b) == 0, "%s on %s: the bias decayed", names[kind],
                  amp_device_name(dev));
        /* and the decay is real: it moves both tensors when applied */
        CHECK_MSG(memcmp(all.w, none.w, sizeof all.w) != 0 && memcmp(all.b, none.b, sizeof all.b) != 0,
                  "%s on %s: weight decay 0.1 changed nothing", names[kind], amp_device_name(dev));
    }
}

static void test_bias_without_decay_keeps_its_bits_on_cpu(void) { check_groups_on(AMP_CPU); }

static void test_bias_without_decay_keeps_its_bits_on_cuda(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    check_groups_on(AMP_CUDA);
}

static void test_weight_decay_accessors_check_index_and_value(void)
{
    amp_tensor *ps[2] = {amp_ones(AMP_SHAPE(2, 2), AMP_F32), amp_ones(AMP_SHAPE(2), AMP_F32)};
    amp_optim *o = make_optim(2, ps, 0.1);
    CHECK_NEAR(amp_optim_weight_decay(o, 0), 0.1, 0);
    CHECK_NEAR(amp_optim_weight_decay(o, 1), 0.1, 0);
    CHECK_OK(amp_optim_set_weight_decay(o, 1, 0));
    CHECK_NEAR(amp_optim_weight_decay(o, 1), 0, 0);
    CHECK_NEAR(amp_optim_weight_decay(o, 0), 0.1, 0);
    CHECK(amp_optim_set_weight_decay(o, 2, 0) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "index 2 out of range (2 parameters)");
    CHECK(amp_optim_set_weight_decay(o, 0, -1) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "weight_decay");
    CHECK_NEAR(amp_optim_weight_decay(o, 0), 0.1, 0);
    CHECK(amp_optim_set_weight_decay(o, 0, NAN) == AMP_ERR_ARG);
    CHECK(isnan(amp_optim_weight_decay(o, -1)));
    CHECK_ERROR(AMP_ERR_ARG, "index -1");
    CHECK(amp_optim_set_weight_decay(NULL, 0, 0) == AMP_ERR_ARG);
    amp_optim_free(o);
    free_params(ps, 2);
}

int main(void)
{
    RUN(test_bias_without_decay_keeps_its_bits_on_cpu);
    RUN(test_bias_without_decay_keeps_its_bits_on_cuda);
    RUN(test_weight_decay_accessors_check_index_and_value);
    return harness_done();
}
