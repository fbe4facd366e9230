/*
 * test_cli_nonfinite.c - runs that cannot train, and measurements that
 * would mean nothing, stop with an error saying what is not finite:
 *
 *   - fp16 + scaler on images holding NaN (an f32 IDX file, type 0x0D):
 *     every step is skipped; after --max-skips in a row (default 32) the
 *     run exits 1 naming the inputs, the loss and the first parameter
 *     whose gradient is not finite, instead of decaying the scale to 0
 *     and exiting 0 with an untrained model;
 *   - --max-skips is settable, saved in the run's settings, 0 turns it off;
 *     a resumed run continues the streak it was saved in;
 *   - without the scaler the NaN loss is blamed on the inputs, not the lr;
 *   - `ampc eval` (and train's closing evaluation) on NaN images or NaN
 *     weights exits 1 naming the file or the tensor;
 *   - the library's helpers (amp_tensor_count_nonfinite,
 *     amp_optim_find_nonfinite_grad) count and name correctly.
 */
#include "cli.h"
#include "checkpoint_cli.h"
#include "diagnose.h"
#include "settings.h"
#include "tensor/tensor.h"
#include "test_cli_util.h"

#include <stdint.h>
#include <stdlib.h>

static char tiny[256], nan_dir[256];

static void put_be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                          (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* The tiny two-class set as f32 IDX images (type 0x0D), one NaN pixel in
 * every image (so in every batch); labels as u8. */
static void write_nan_images(const char *dir)
{
    enum { N = 256, P = 16 };
    mkdir(dir, 0700);
    const char *pre[2] = {"train", "t10k"};
    for (int s = 0; s < 2; s++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, pre[s]);
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (!f)
            return;
        fwrite("\0\0\x0d\x03", 1, 4, f);
        put_be32(f, N), put_be32(f, 4), put_be32(f, 4);
        for (int i = 0; i < N; i++)
            for (int k = 0; k < P; k++) {
                float v = k == i % P ? NAN : (float)((i % 2) * 100 + (i * 7 + k * 13) % 128);
                uint32_t b;
                memcpy(&b, &v, 4);
                put_be32(f, b);
            }
        fclose(f);
        snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, pre[s]);
        f = fopen(path, "wb");
        fwrite("\0\0\x08\x01", 1, 4, f);
        put_be32(f, N);
        for (int i = 0; i < N; i++)
            fputc(i % 2, f);
        fclose(f);
    }
}

#define TRAIN "train --model mlp --hidden 16 --batch 16 --threads 1 --steps 60 "

static void test_fp16_scaler_on_nan_inputs_stops_naming_what_is_not_finite(void)
{
    int rc = cli_run(TRAIN "--precision fp16 --data %s", nan_dir);
    CHECK_MSG(rc == 1, "exit %d, expected 1:\n%s", rc, cli_out);
    CHECK_MSG(strstr(cli_out, "skipped 32 steps in a row"), "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "the inputs: micro-batch 31 holds 16 inf/NaN values (of 256)"), "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "the loss: nan"), "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "the gradients: 0.weight [16, 16] is the first with inf/NaN"), "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "the weights: all finite"), "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "fix --data"), "%s", cli_out);
    CHECK_MSG(!strstr(cli_out, "test_accuracy"), "an accuracy was reported:\n%s", cli_out);
}

static void test_max_skips_is_settable_saved_and_0_turns_it_off(void)
{
    int rc = cli_run(TRAIN "--precision fp16 --max-skips 5 --data %s", nan_dir);
    CHECK_MSG(rc == 1 && strstr(cli_out, "skipped 5 steps in a row (steps 1 to 5, --max-skips 5)"), "exit %d:\n%s",
              rc, cli_out);
    /* Off: the run goes on to the end, and then the evaluation refuses the NaN images. */
    rc = cli_run(TRAIN "--precision fp16 --max-skips 0 --data %s", nan_dir);
    CHECK_MSG(rc == 1 && !strstr(cli_out, "in a row") && strstr(cli_out, "step 60/60") &&
                  strstr(cli_out, "t10k-images-idx3-ubyte: the images hold 256 inf/NaN values (of 4096)"),
              "exit %d:\n%s", rc, cli_out);
    /* Only where there is a scaler. */
    rc = cli_run(TRAIN "--precision bf16 --max-skips 5 --data %s", tiny);
    CHECK_MSG(rc == 2 && strstr(cli_out, "--max-skips applies to --precision fp16 with the scaler"), "exit %d:\n%s",
              rc, cli_out);
    /* In the settings JSON, back and forth. */
    train_opts o, back;
    run_info ri = {0}, ri2;
    train_opts_default(&o);
    char *argv[] = {"--precision", "fp16", "--max-skips", "7"};
    CHECK_EQ_INT(train_parse(4, argv, &o), -1);
    CHECK_EQ_INT(opts_resolve(&o), -1);
    char *json = settings_to_json(&o, &ri);
    CHECK_MSG(json && strstr(json, "\"max-skips\":7"), "%s", json ? json : "NULL");
    train_opts_default(&back);
    CHECK_EQ_INT(back.max_skips, DEFAULT_MAX_SKIPS);
    CHECK_EQ_INT(settings_from_json(json, "test", &back, &ri2), -1);
    CHECK_EQ_INT(back.max_skips, 7);
    free(json);
}

/* The streak is the run's, not the process's: stopped after 3 skips and
 * resumed, the run stops after the same 6th skip as the straight run. */
static void test_a_resumed_run_continues_the_skip_streak(void)
{
    int rc = cli_run(TRAIN "--precision fp16 --max-skips 6 --data %s", nan_dir);
    CHECK_MSG(rc == 1 && strstr(cli_out, "skipped 6 steps in a row (steps 1 to 6, --max-skips 6)"), "exit %d:\n%s",
              rc, cli_out);
    char dir[512];
    cli_path(dir, sizeof dir, "streak");
    rc = cli_run(TRAIN "--precision fp16 --max-skips 6 --data %s --stop-at 3 --save %s", nan_dir, dir);
    /* (exit 1: the closing evaluation refuses the NaN test images) */
    CHECK_MSG(rc == 1 && strstr(cli_out, "stopped at step 3") && !strstr(cli_out, "in a row"), "exit %d:\n%s", rc,
              cli_out);
    rc = cli_run("train --resume %s", dir);
    CHECK_MSG(rc == 1 && strstr(cli_out, "skipped 6 steps in a row (steps 1 to 6, --max-skips 6)"),
              "the resumed run should stop at step 6, exit %d:\n%s", rc, cli_out);
}

static void test_nan_loss_without_scaler_blames_the_inputs_not_the_lr(void)
{
    const char *prec[2] = {"fp16 --no-scaler", "fp32"};
    for (int i = 0; i < 2; i++) {
        int rc = cli_run(TRAIN "--precision %s --data %s", prec[i], nan_dir);
        /* fp32: step 1's loss is finite (ReLU drops the NaN), its gradient is not: step 2's loss is NaN. */
        CHECK_MSG(rc == 1 && strstr(cli_out, "the loss is nan at step ") &&
                      strstr(cli_out, ": the inputs hold 16 inf/NaN values") &&
                      strstr(cli_out, "fix --data") && !strstr(cli_out, "--lr"),
                  "%s: exit %d:\n%s", prec[i], rc, cli_out);
    }
}

/* Overwrites the first element of tensor `name` in a safetensors file by
 * a NaN. */
static void poison_checkpoint(const char *path, const char *name)
{
    size_t len;
    char *buf = cli_read_file(path, &len);
    CHECK(buf != NULL && len > 8);
    if (!buf)
        return;
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--)
        hlen = hlen << 8 | (unsigned char)buf[k];
    char key[128];
    snprintf(key, sizeof key, "\"%s\"", name);
    char *at = strstr(buf + 8, key), *off = at ? strstr(at, "\"data_offsets\":[") : NULL;
    CHECK(off != NULL);
    if (off) {
        size_t begin = strtoull(off + strlen("\"data_offsets\":["), NULL, 10);
        float nan = NAN;
        memcpy(buf + 8 + hlen + begin, &nan, 4); /* f32, little-endian as safetensors */
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, len, f);
        fclose(f);
    }
    free(buf);
}

static void test_eval_refuses_nan_inputs_and_nan_weights(void)
{
    char ck[600], file[700];
    cli_path(ck, sizeof ck, "ck");
    CLI_OK(TRAIN "--precision fp32 --steps 3 --data %s --save %s", tiny, ck);
    int rc = cli_run("eval %s --threads 1", ck);
    CHECK_MSG(rc == 0 && strstr(cli_out, "test_accuracy"), "clean eval: exit %d:\n%s", rc, cli_out);
    rc = cli_run("eval %s --threads 1 --data %s", ck, nan_dir);
    CHECK_MSG(rc == 1 && strstr(cli_out, "t10k-images-idx3-ubyte: the images hold 256 inf/NaN values (of 4096)") &&
                  !strstr(cli_out, "test_accuracy"),
              "NaN images: exit %d:\n%s", rc, cli_out);
    snprintf(file, sizeof file, "%s/" CHECKPOINT_FILE, ck);
    poison_checkpoint(file, "2.weight");
    rc = cli_run("eval %s --threads 1", ck);
    /* The checkpoint loader refuses it before eval sees it (a trained
     * model whose weights went non-finite is caught by eval's own check:
     * test_nan_training_data_stops_with_a_diagnosis). */
    CHECK_MSG(rc == 1 && strstr(cli_out, "tensor '2.weight' holds a non-finite value (inf or NaN) at element 0") &&
                  !strstr(cli_out, "test_accuracy"),
              "NaN weights: exit %d:\n%s", rc, cli_out);
}

/* ----------------------------------------------------- library helpers */

static void check_helpers(amp_device dev)
{
    float v[6] = {1, NAN, -INFINITY, 2, INFINITY, 0};
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int i = 0; i < 3; i++) {
        amp_tensor *f = amp_from_data(AMP_SHAPE(6), AMP_F32, v), *t = amp_clone(amp_to(f, dts[i]));
        CHECK_OK(amp_tensor_move(t, dev));
        CHECK_EQ_INT(amp_tensor_count_nonfinite(t), 3);
        amp_tensor_free(f);
        amp_tensor_free(t);
        amp_temps_free();
    }
    /* Many blocks' worth (the CUDA kernel adds per-block counts): every
     * 997th element inf or NaN. */
    enum { BIG = 300000 };
    float *w = calloc(BIG, sizeof *w);
    int64_t want = 0;
    for (int64_t j = 0; j < BIG; j++) {
        w[j] = (float)(j % 13) - 6.0f;
        if (j % 997 == 0) {
            w[j] = want % 2 ? NAN : -INFINITY;
            want++;
        }
    }
    for (int i = 0; i < 3; i++) {
        amp_tensor *f = amp_from_data(AMP_SHAPE(BIG), AMP_F32, w), *t = amp_clone(amp_to(f, dts[i]));
        CHECK_OK(amp_tensor_move(t, dev));
        CHECK_EQ_INT(amp_tensor_count_nonfinite(t), want);
        amp_tensor_free(f);
        amp_tensor_free(t);
        amp_temps_free();
    }
    free(w);
    /* f16 overflow is the dtype's own: 70000 is inf in f16, finite in f32. */
    float big = 70000;
    amp_tensor *b32 = amp_from_data(AMP_SHAPE(1), AMP_F32, &big), *b16 = amp_to(b32, AMP_F16);
    CHECK_EQ_INT(amp_tensor_count_nonfinite(b32), 0);
    CHECK_EQ_INT(amp_tensor_count_nonfinite(b16), 1);
    amp_tensor_free(b32);
    amp_temps_free();
    int64_t iv[2] = {1, 2};
    amp_tensor *it = amp_from_data(AMP_SHAPE(2), AMP_I64, iv);
    CHECK_EQ_INT(amp_tensor_count_nonfinite(it), 0);
    amp_tensor_free(it);
    CHECK_EQ_INT(amp_tensor_count_nonfinite(NULL), -1);
    amp_clear_error();

    /* Parameter 0 without a gradient, 1 finite, 2 with two NaN, 3 with an inf. */
    amp_tensor *ps[4];
    float g[4][6] = {{0}, {1, 2, 3, 4, 5, 6}, {0, NAN, 1, NAN, 2, 3}, {INFINITY, 0, 0, 0, 0, 0}};
    for (int i = 0; i < 4; i++) {
        ps[i] = amp_zeros(AMP_SHAPE(2, 3), AMP_F32);
        amp_tensor_set_requires_grad(ps[i], true);
        CHECK_OK(amp_tensor_move(ps[i], dev));
    }
    amp_optim *o = amp_optim_sgd(ps, 4, amp_sgd_defaults());
    int idx = 7;
    int64_t count = 7;
    CHECK_OK(amp_optim_find_nonfinite_grad(o, &idx, &count));
    CHECK_EQ_INT(idx, -1);
    CHECK_EQ_INT(count, 0);
    for (int i = 1; i < 4; i++) {
        amp_tensor *gt = amp_from_data(AMP_SHAPE(2, 3), AMP_F32, g[i]);
        CHECK_OK(amp_tensor_move(gt, dev));
        ps[i]->grad = gt; /* as backward leaves one (optim_rig.h's set_grad, on any device) */
    }
    CHECK_OK(amp_optim_find_nonfinite_grad(o, &idx, &count));
    CHECK_EQ_INT(idx, 2);
    CHECK_EQ_INT(count, 2);
    CHECK_OK(amp_optim_find_nonfinite_grad(o, &idx, NULL));
    CHECK_EQ_INT(idx, 2);
    CHECK(amp_optim_find_nonfinite_grad(NULL, &idx, NULL) == AMP_ERR_ARG);
    amp_clear_error();
    amp_optim_free(o);
    for (int i = 0; i < 4; i++)
        amp_tensor_free(ps[i]);
}

static void test_count_nonfinite_and_find_nonfinite_grad(void) { check_helpers(AMP_CPU); }

static void test_count_nonfinite_and_find_nonfinite_grad_on_cuda(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    check_helpers(AMP_CUDA);
}

/* A gpt whose fp16 forward overflows with finite weights (lr 1, every
 * overflowing step skipped, --max-skips off): the closing evaluation's
 * NaN loss is a failed run that says why, not an empty message. */
static void test_a_nan_validation_loss_from_finite_weights_says_the_forward_overflows(void)
{
    int rc = cli_run("train --model gpt --precision fp16 --lr 1 --steps 12 --max-skips 0 --layers 1 --context 32 "
                     "--width 64 --threads 1");
    CHECK_MSG(rc == 1 && strstr(cli_out, "step 12/12") &&
                  strstr(cli_out, "ampc: evaluation: the validation loss is nan though every weight is finite: "
                                  "the forward overflows in fp16 (--detect-anomaly names the op"),
              "exit %d:\n%s", rc, cli_out);
}

int main(void)
{
    cli_init_tiny("test-cli-nonfinite", tiny, NULL);
    cli_path(nan_dir, sizeof nan_dir, "nan");
    write_nan_images(nan_dir);
    RUN_IF(cli_have_binary, test_fp16_scaler_on_nan_inputs_stops_naming_what_is_not_finite);
    RUN_IF(cli_have_binary, test_max_skips_is_settable_saved_and_0_turns_it_off);
    RUN_IF(cli_have_binary, test_a_resumed_run_continues_the_skip_streak);
    RUN_IF(cli_have_binary, test_nan_loss_without_scaler_blames_the_inputs_not_the_lr);
    RUN_IF(cli_have_binary, test_eval_refuses_nan_inputs_and_nan_weights);
    RUN_IF(cli_have_binary, test_a_nan_validation_loss_from_finite_weights_says_the_forward_overflows);
    RUN(test_count_nonfinite_and_find_nonfinite_grad);
    RUN(test_count_nonfinite_and_find_nonfinite_grad_on_cuda);
    cli_cleanup();
    return harness_done();
}
