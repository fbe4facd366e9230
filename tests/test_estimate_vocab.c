/*
 * test_estimate_vocab.c - the dry run's memory estimate (tools/estimate.c)
 * for a gpt whose vocabulary is GPT-2's (50257 tokens), where the head's
 * logits [B * T, vocab], their autocast copy, the cross-entropy's
 * gradient and the tied wte's gradient and AdamW state are most of the
 * peak. A small width and T keep it cheap; the model is trained the way
 * bench_ampc_step --models gpt2 trains GPT-2 124M (bench/gpt2.sh compares
 * the estimate with that full size's peak), and the allocator's peak of
 * the second step (the optimizer's state there) must be within
 * MEM_TOLERANCE of the estimate, in fp32, bf16 and fp16, with and without
 * activation checkpointing.
 */
#include "estimate.h"
#include "harness.h"

#include <stdlib.h>

enum { VOCAB = 50257, T = 32, B = 4, WIDTH = 64, LAYERS = 2, HEADS = 2, MLP = 256 };

/* The allocator's peak over the second of two training steps, in bytes;
 * 0 on failure (reported). */
static size_t measured_peak(const char *precision, bool ckpt)
{
    amp_manual_seed(0);
    amp_gpt_config c = {.vocab = VOCAB, .context = T, .width = WIDTH, .layers = LAYERS, .heads = HEADS,
                        .mlp = MLP, .checkpoint_activations = ckpt};
    amp_module *net = amp_model_gpt(c);
    amp_tensor *x = amp_zeros(AMP_SHAPE(B, T), AMP_I64), *y = amp_zeros(AMP_SHAPE(B * T), AMP_I64);
    CHECK(net && x && y);
    if (!net || !x || !y)
        return 0;
    int64_t *xv = amp_tensor_data(x), *yv = amp_tensor_data(y);
    for (int64_t i = 0; i < B * T; i++) {
        xv[i] = (i * 104729) % VOCAB;
        yv[i] = (i * 7919) % VOCAB;
    }
    int n = amp_module_num_params(net);
    amp_tensor **ps = malloc(sizeof *ps * (size_t)n);
    amp_module_params(net, ps, n);
    amp_optim *opt = amp_optim_adamw(ps, n, amp_adamw_defaults());
    free(ps);
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = strcmp(precision, "fp16") == 0;
    amp_scaler *scaler = amp_scaler_new(so);
    const bool autocast = strcmp(precision, "fp32") != 0;
    size_t peak = 0;
    for (int step = 0; step < 2 && opt && scaler; step++) {
        if (step == 1)
            amp_memory_reset_peak();
        amp_optim_zero_grad(opt);
        if (autocast)
            amp_autocast_begin(AMP_CPU, strcmp(precision, "fp16") == 0 ? AMP_F16 : AMP_BF16);
        amp_tensor *loss = amp_cross_entropy(amp_reshape(amp_module_forward(net, x), AMP_SHAPE(-1, VOCAB)), y);
        if (autocast)
            amp_autocast_end();
        const bool ok = amp_backward(amp_scaler_scale(scaler, loss)) == AMP_OK &&
                        amp_scaler_step(scaler, opt, NULL) == AMP_OK && amp_scaler_update(scaler) == AMP_OK;
        CHECK_MSG(ok, "%s step %d: %s", precision, step, amp_last_error());
        amp_temps_free();
        if (!ok)
            break;
        peak = amp_memory_get_stats().peak;
    }
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(net);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return peak;
}

static void check_estimate(const char *precision, bool ckpt)
{
    const size_t have = measured_peak(precision, ckpt);
    train_opts o;
    train_opts_default(&o);
    o.model = "gpt";
    o.layers = LAYERS;
    o.heads = HEADS;
    o.width = WIDTH;
    o.context = T;
    o.mlp_width = MLP;
    o.batch = B;
    o.optim = "adamw";
    o.precision = precision;
    o.checkpoint_activations = ckpt;
    run_info ri = {.vocab = VOCAB};
    run_data rd = {.gpt = true};
    mem_estimate e;
    mem_estimate_run(&o, &ri, &rd, amp_get_num_threads(), &e);
    const double err = have ? (double)e.tracked / (double)have - 1 : 1;
    printf("  %s%s: estimate %.2f MiB, measured %.2f MiB (%+.1f%%)\n", precision, ckpt ? " checkpointed" : "",
           (double)e.tracked / (1 << 20), (double)have / (1 << 20), err * 100);
    CHECK_MSG(have > 0 && err <= MEM_TOLERANCE && err >= -MEM_TOLERANCE,
              "%s checkpoint %d: estimate %llu bytes against the measured peak %zu (%+.1f%%, tolerance %.0f%%)",
              precision, ckpt, (unsigned long long)e.tracked, have, err * 100, MEM_TOLERANCE * 100);
    /* the logits alone (f32, B * T x vocab) are a good part of it: the estimate must hold them */
    CHECK(e.tracked > (uint64_t)B * T * VOCAB * 4);
}

static void test_fp32(void) { check_estimate("fp32", false); }
static void test_bf16(void) { check_estimate("bf16", false); }
static void test_fp16(void) { check_estimate("fp16", false); }
static void test_fp32_checkpointed(void) { check_estimate("fp32", true); }
static void test_bf16_checkpointed(void) { check_estimate("bf16", true); }

int main(void)
{
    RUN(test_fp32);
    RUN(test_bf16);
    RUN(test_fp16);
    RUN(test_fp32_checkpointed);
    RUN(test_bf16_checkpointed);
    return harness_done();
}
