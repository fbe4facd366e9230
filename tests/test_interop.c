/*
 * test_interop.c - ampc checkpoints and PyTorch (python/ampc_torch.py),
 * both ways, for the mlp, the cnn and the gpt (also nanoGPT's: --no-bias
 * --gelu exact, the twin's bias=False, gelu="exact"). PyTorch and safetensors
 * are not build dependencies: the Python side is run with the first of
 * $AMPC_TORCH_PYTHON, python3 and the repository's .bench-venv that has
 * them (CI installs them there: scripts/torch-deps.sh), and where none
 * has them this program exits 77, which CTest reports as skipped.
 *
 *   ampc -> PyTorch: `ampc train` a few steps, load the checkpoint into the
 *     model here and into the twin there (ampc_torch.load: built from the
 *     settings in the file), and compare their fp32 logits on one batch.
 *   PyTorch -> ampc: the twin with random weights, written by
 *     ampc_torch.save; here its logits again, then `ampc eval` on the file
 *     must report the twin's own measure (test accuracy for mlp / cnn, the
 *     validation loss for the gpt, which the Python side computes on the
 *     windows cut here with ampc's sampler and eval's seeds), and
 *     `ampc train --resume` must train on from it.
 *
 * Tolerance: both sides compute in fp32 with other summation orders
 * (blocked GEMMs, convolutions, attention), so each logit may differ by a
 * few ulps of the sums behind it: |ampc - twin| <= 1e-5 * (1 + |twin|)
 * (measured: 3e-8 to 7e-7 here). q and k swapped in the twin's split of
 * qkv moves the trained gpt's logits by 3e-3 (which is why that run takes
 * lr 0.03: near its initialisation attention is almost uniform and q, k
 * hardly matter), a wrong name or transposed weight by O(0.1).
 */
#include "checkpoint_cli.h"
#include "data.h"
#include "settings.h"
#include "harness.h"
#include "python_side.h"
#include "test_cli_util.h"

#include <stdlib.h>

#define TOL 1e-5
#define VAL_STREAM 0x76616cull /* tools/eval.c: the validation windows' seeds */

uint64_t derive_seed(uint64_t seed, uint64_t stream, uint64_t k); /* tools/data.c */

static char images[256], text[256];
static bool have_torch;

/* Whether the Python side can run; else the running test is skipped. */
static bool need_torch(void)
{
    if (!have_torch)
        harness_skip("no torch or safetensors in $AMPC_TORCH_PYTHON / python3");
    return have_torch;
}


static void write_raw(const char *path, const amp_tensor *t)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    size_t nb = (size_t)amp_tensor_numel(t) * amp_dtype_size(amp_tensor_dtype(t));
    CHECK(fwrite(amp_tensor_cdata(t), 1, nb, f) == nb);
    fclose(f);
}

static float *read_raw(const char *path, int64_t n)
{
    FILE *f = fopen(path, "rb");
    float *v = malloc((size_t)n * sizeof *v);
    bool ok = f && v && fread(v, sizeof *v, (size_t)n, f) == (size_t)n && fgetc(f) == EOF;
    if (f)
        fclose(f);
    if (!ok) {
        free(v);
        return NULL;
    }
    return v;
}

/* ampc's fp32 logits of m on x against the twin's in path. */
static void compare_logits(const char *what, amp_module *m, amp_tensor *x, const char *path)
{
    amp_module_train(m, false);
    amp_no_grad_begin();
    amp_tensor *y = amp_module_forward(m, x);
    amp_no_grad_end();
    CHECK(y != NULL);
    if (!y)
        return;
    int64_t n = amp_tensor_numel(y);
    float *twin = read_raw(path, n);
    CHECK_MSG(twin != NULL, "%s: no %lld twin logits in %s", what, (long long)n, path);
    double worst = 0, spread = 0;
    for (int64_t i = 0; twin && i < n; i++) {
        double a = amp_tensor_get(y, i), b = twin[i];
        double d = fabs(a - b) / (1 + fabs(b));
        worst = d > worst ? d : worst;
        spread = fabs(b) > spread ? fabs(b) : spread;
    }
    printf("  %s: %lld logits, max |ampc - twin| / (1 + |twin|) = %.3g (|logit| up to %.3g)\n", what, (long long)n,
           worst, spread);
    CHECK_MSG(worst <= TOL, "%s: logits differ by %.3g (relative) > %g", what, worst, TOL);
    CHECK_MSG(spread > 0.1, "%s: the logits are all near 0 (%.3g): the comparison would be empty", what, spread);
    free(twin);
    amp_temps_free();
}

/* Whether kind is "gpt" or "gpt-nano" (nanoGPT's: --no-bias --gelu exact). */
static bool kind_is_gpt(const char *kind) { return strncmp(kind, "gpt", 3) == 0; }

/* The model as the CLI builds it for these runs. */
static amp_module *model_of(const char *kind)
{
    if (!strcmp(kind, "mlp")) {
        const int64_t hidden[] = {16};
        return amp_model_mlp(784, hidden, 1, 10);
    }
    if (!strcmp(kind, "cnn"))
        return amp_model_cnn(1, 28, 28, 10);
    amp_text *t = amp_text_load(text);
    amp_gpt_config c = {.vocab = t ? amp_text_vocab(t) : 1, .context = 8, .width = 16, .layers = 2, .heads = 2,
                        .mlp = 32, .no_bias = strcmp(kind, "gpt-nano") == 0,
                        .gelu_exact = strcmp(kind, "gpt-nano") == 0};
    amp_text_free(t);
    return amp_model_gpt(c);
}

/* An input batch for kind, its shape ("2,8") and dtype for the Python side. */
static amp_tensor *input_of(const char *kind, char *shape, size_t n, const char **dtype)
{
    amp_manual_seed(99);
    *dtype = "f32";
    if (!strcmp(kind, "mlp")) {
        snprintf(shape, n, "4,784");
        return amp_randn(AMP_SHAPE(4, 784), AMP_F32, 0, 1);
    }
    if (!strcmp(kind, "cnn")) {
        snprintf(shape, n, "2,1,28,28");
        return amp_randn(AMP_SHAPE(2, 1, 28, 28), AMP_F32, 0, 1);
    }
    *dtype = "i64";
    snprintf(shape, n, "3,8");
    amp_text *t = amp_text_load(text);
    amp_tensor *x = amp_zeros(AMP_SHAPE(3, 8), AMP_I64), *y = amp_zeros(AMP_SHAPE(3, 8), AMP_I64);
    CHECK_OK(amp_text_batch(t, false, 5, x, y));
    amp_tensor_free(y);
    amp_text_free(t);
    return x;
}

static const char *train_args(const char *kind)
{
    if (!strcmp(kind, "mlp"))
        return "--model mlp --hidden 16 --batch 16 --steps 4";
    if (!strcmp(kind, "cnn"))
        return "--model cnn --batch 8 --steps 2";
    if (!strcmp(kind, "gpt-nano"))
        return "--model gpt --layers 2 --heads 2 --width 16 --context 8 --mlp-width 32 --batch 4 --steps 4 "
               "--lr 0.03 --val-batches 2 --no-bias --gelu exact";
    return "--model gpt --layers 2 --heads 2 --width 16 --context 8 --mlp-width 32 --batch 4 --steps 4 --lr 0.03 "
           "--val-batches 2";
}

/* ampc trains kind a few steps (in bf16 autocast, the default; the gpt
 * with a large lr, so that its weights move far from initialisation); the twin
 * built from the checkpoint gives ampc's fp32 logits. */
static void check_ampc_to_torch(const char *kind)
{
    if (!need_torch() || !cli_have_binary())
        return;
    char dir[700], ck[800], xp[700], out[700], shape[32];
    snprintf(dir, sizeof dir, "%s/%s-run", tmpdir, kind);
    int rc = cli_run("train %s --data %s --threads 1 --save %s", train_args(kind),
                     kind_is_gpt(kind) ? text : images, dir);
    CHECK_MSG(rc == 0, "train %s: exit %d:\n%s", kind, rc, cli_out);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    amp_module *m = model_of(kind);
    CHECK_OK(amp_checkpoint_load(ck, m, NULL, NULL, NULL, NULL));
    const char *dt;
    amp_tensor *x = input_of(kind, shape, sizeof shape, &dt);
    snprintf(xp, sizeof xp, "%s/%s-x.bin", tmpdir, kind);
    snprintf(out, sizeof out, "%s/%s-twin.bin", tmpdir, kind);
    write_raw(xp, x);
    rc = python_run("logits '%s' '%s' %s %s '%s'", ck, xp, shape, dt, out);
    CHECK_MSG(rc == 0, "the twin of %s: exit %d:\n%s", ck, rc, cli_out);
    compare_logits(kind, m, x, out);
    amp_tensor_free(x);
    amp_module_free(m);
}

static void test_mlp_checkpoint_in_pytorch(void) { check_ampc_to_torch("mlp"); }
static void test_cnn_checkpoint_in_pytorch(void) { check_ampc_to_torch("cnn"); }
static void test_gpt_checkpoint_in_pytorch(void) { check_ampc_to_torch("gpt"); }
static void test_nanogpt_style_gpt_checkpoint_in_pytorch(void) { check_ampc_to_torch("gpt-nano"); }

/* The validation windows `ampc eval --val-batches N` measures a gpt of
 * context T on (batch B, the CLI's default 32), as x then y per window,
 * written to path. */
static void write_eval_windows(const char *path, int64_t B, int64_t T, int N)
{
    amp_text *t = amp_text_load(text);
    FILE *f = fopen(path, "wb");
    CHECK(t && f);
    amp_tensor *x = amp_zeros(AMP_SHAPE(B, T), AMP_I64), *y = amp_zeros(AMP_SHAPE(B, T), AMP_I64);
    for (int k = 0; t && f && k < N; k++) {
        CHECK_OK(amp_text_batch(t, true, derive_seed(0, VAL_STREAM, (uint64_t)k), x, y));
        CHECK(fwrite(amp_tensor_cdata(x), 8, (size_t)(B * T), f) == (size_t)(B * T));
        CHECK(fwrite(amp_tensor_cdata(y), 8, (size_t)(B * T), f) == (size_t)(B * T));
    }
    if (f)
        fclose(f);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_text_free(t);
}

/* The twin with random weights, written by ampc_torch.save: ampc loads it
 * (same logits), `ampc eval` reports the twin's accuracy or loss, and
 * `ampc train --resume` trains on from it. */
static void check_torch_to_ampc(const char *kind, const char *config)
{
    if (!need_torch() || !cli_have_binary())
        return;
    char dir[700], ck[800], xp[700], out[700], ev[700], shape[32];
    snprintf(dir, sizeof dir, "%s/%s-torch", tmpdir, kind);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    snprintf(xp, sizeof xp, "%s/%s-x2.bin", tmpdir, kind);
    snprintf(out, sizeof out, "%s/%s-twin2.bin", tmpdir, kind);
    snprintf(ev, sizeof ev, "%s/%s-eval.bin", tmpdir, kind);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
    const char *dt;
    amp_tensor *x = input_of(kind, shape, sizeof shape, &dt);
    write_raw(xp, x);
    bool gpt = kind_is_gpt(kind);
    const char *data = gpt ? text : images;
    if (gpt)
        write_eval_windows(ev, 32, 8, 3);
    char extra[800] = "";
    if (gpt)
        snprintf(extra, sizeof extra, "'%s' 32 8 3", ev);
    int rc = python_run("write '%s' 17 '%s' '%s' '%s' %s %s '%s' %s", config, ck, data, xp, shape, dt, out, extra);
    CHECK_MSG(rc == 0, "ampc_torch.save of the %s twin: exit %d:\n%s", kind, rc, cli_out);
    const char *label = gpt ? "twin_loss " : "twin_accuracy ";
    double want = cli_value_after(label);
    amp_module *m = model_of(kind);
    CHECK_OK(amp_checkpoint_load(ck, m, NULL, NULL, NULL, NULL));
    char what[64];
    snprintf(what, sizeof what, "%s from PyTorch", kind);
    compare_logits(what, m, x, out);
    amp_tensor_free(x);
    amp_module_free(m);

    rc = cli_run("eval %s --data %s --threads 1%s", dir, data, gpt ? " --val-batches 3" : "");
    CHECK_MSG(rc == 0, "ampc eval of the twin's checkpoint: exit %d:\n%s", rc, cli_out);
    if (gpt) {
        /* Printed to 4 decimals. */
        double got = cli_value_after("val_loss ");
        printf("  gpt from PyTorch: ampc eval val_loss %.4f, the twin's %.6f\n", got, want);
        CHECK_NEAR(got, want, 6e-5);
    } else {
        /* One image's argmax may tip over where two logits are within the
         * tolerance: at most one of the 64 test images. */
        double got = cli_value_after("test_accuracy ");
        printf("  %s from PyTorch: ampc eval test_accuracy %.4f, the twin's %.6f\n", kind, got, want);
        CHECK_NEAR(got, want, 1.0 / 64 + 5e-5);
    }
    /* nanoGPT's gpt: its logits and measure; generate and resume take the
     * gpt's path again (time the test does not have) */
    if (!strcmp(kind, "gpt-nano"))
        return;
    if (gpt) {
        /* generate on a checkpoint ampc_torch.save wrote: its settings lack
         * the schedule and lr, which generate fills as eval does. 12 tokens
         * after the prompt (a newline, not printed) and the closing newline,
         * after a one-line warning: ampc_torch.save records no vocabulary
         * bytes. Before the resume below, which saves over it. */
        rc = cli_run("generate %s --data %s --threads 1 --tokens 12 --quiet", dir, data);
        CHECK_MSG(rc == 0, "ampc generate on the twin's checkpoint: exit %d:\n%s", rc, cli_out);
        CHECK_OUT("does not record its vocabulary");
        const char *nl = strchr(cli_out, '\n');
        CHECK_EQ_INT(nl ? (int)strlen(nl + 1) : -1, 13);
    }
    rc = cli_run("train --resume %s --data %s --threads 1 --steps 2", dir, data);
    CHECK_MSG(rc == 0, "ampc train --resume of the twin's checkpoint: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
    if (!gpt)
        return;
    /* Saved as fp16: a fresh grad scaler's state, which --resume loads. */
    char dir16[760], ck16[800];
    snprintf(dir16, sizeof dir16, "%s-fp16", dir);
    snprintf(ck16, sizeof ck16, "%s/checkpoint.safetensors", dir16);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir16);
    CHECK_EQ_INT(system(cmd), 0);
    rc = python_run("resave '%s' '%s' fp16 '%s'", ck, data, ck16);
    CHECK_MSG(rc == 0, "ampc_torch.save(precision=\"fp16\"): exit %d:\n%s", rc, cli_out);
    rc = cli_run("train --resume %s --data %s --threads 1 --steps 2", dir16, data);
    CHECK_MSG(rc == 0, "ampc train --resume of the twin's fp16 checkpoint: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
}

static void test_mlp_from_pytorch(void)
{
    check_torch_to_ampc("mlp", "{\"model\": \"mlp\", \"features\": 784, \"hidden\": [16], \"classes\": 10}");
}

static void test_cnn_from_pytorch(void)
{
    check_torch_to_ampc("cnn", "{\"model\": \"cnn\", \"channels\": 1, \"height\": 28, \"width\": 28, \"classes\": 10}");
}

/* check_torch_to_ampc for the gpt of model_of(kind), its twin's config
 * ending with extra. */
static void check_gpt_from_pytorch(const char *kind, const char *extra)
{
    amp_text *t = amp_text_load(text);
    char cfg[300];
    snprintf(cfg, sizeof cfg,
             "{\"model\": \"gpt\", \"vocab\": %lld, \"context\": 8, \"width\": 16, \"layers\": 2, \"heads\": 2, "
             "\"mlp-width\": 32%s}",
             (long long)(t ? amp_text_vocab(t) : 0), extra);
    amp_text_free(t);
    check_torch_to_ampc(kind, cfg);
}

static void test_gpt_from_pytorch(void) { check_gpt_from_pytorch("gpt", ""); }

/* nanoGPT's bias=False and nn.GELU(): the twin's GPT(bias=False,
 * gelu="exact") and ampc's --no-bias --gelu exact. */
static void test_nanogpt_style_gpt_from_pytorch(void)
{
    check_gpt_from_pytorch("gpt-nano", ", \"no-bias\": true, \"gelu\": \"exact\"");
}

/* The run's settings in dir's checkpoint, resolved as a resumed run
 * resolves them (an option left out takes the model's default), as
 * settings_to_json writes them, the schedule's place left out (a saved
 * twin is at step 0). */
static char *settings_at_step_0(const char *dir)
{
    train_opts o;
    run_info ri;
    if (checkpoint_read_settings(dir, &o, &ri) >= 0 || opts_resolve(&o) >= 0)
        return NULL;
    ri.sched_step = ri.skipped = 0;
    return settings_to_json(&o, &ri);
}

/* ampc -> ampc_torch -> ampc: the twin keeps the run's settings and its
 * weights' dtypes, so the checkpoint it writes holds the same bits and
 * the same settings, and `ampc eval` prints the same number (dropping the
 * batch, seed and val-batches of a run moves a gpt's val_loss from 4.6150
 * to 4.6066). */
static void check_round_trip(const char *what, const char *args)
{
    char a[512], b[512], ckb[600], first[256];
    snprintf(first, sizeof first, "rt-%s-a", what);
    cli_path(a, sizeof a, first);
    snprintf(first, sizeof first, "rt-%s-b", what);
    cli_path(b, sizeof b, first);
    int rc = cli_run("train %s --save %s", args, a);
    CHECK_MSG(rc == 0, "%s: exit %d:\n%s", what, rc, cli_out);
    rc = cli_run("eval %s", a);
    CHECK_MSG(rc == 0, "%s: eval: exit %d:\n%s", what, rc, cli_out);
    const char *m = strstr(cli_out, "val_loss ") ? strstr(cli_out, "val_loss ") : strstr(cli_out, "test_accuracy ");
    snprintf(first, sizeof first, "%s", m ? m : "(no measure)");
    mkdir(b, 0700);
    snprintf(ckb, sizeof ckb, "%s/checkpoint.safetensors", b);
    char cka[600];
    snprintf(cka, sizeof cka, "%s/checkpoint.safetensors", a);
    rc = python_run("roundtrip '%s' '%s'", cka, ckb);
    CHECK_MSG(rc == 0 && strstr(cli_out, "weights identical"), "%s: roundtrip: exit %d:\n%s", what, rc, cli_out);
    char *sa = settings_at_step_0(a), *sb = settings_at_step_0(b);
    CHECK_MSG(sa && sb && strcmp(sa, sb) == 0, "%s: the settings differ:\n  ampc  %s\n  twin  %s", what,
              sa ? sa : "?", sb ? sb : "?");
    free(sa);
    free(sb);
    rc = cli_run("eval %s", b);
    CHECK_MSG(rc == 0, "%s: eval of the twin's file: exit %d:\n%s", what, rc, cli_out);
    m = strstr(cli_out, "val_loss ") ? strstr(cli_out, "val_loss ") : strstr(cli_out, "test_accuracy ");
    CHECK_MSG(m && strcmp(m, first) == 0, "%s: eval moved:\n  ampc  %s  twin  %s", what, first, m ? m : "?");
    rc = cli_run("train --resume %s --steps 2", b);
    CHECK_MSG(rc == 0 && strstr(cli_out, "resumed from"), "%s: resume of the twin's file: exit %d:\n%s", what, rc,
              cli_out);
}

static void test_round_trip_through_pytorch_keeps_settings_and_measure(void)
{
    char args[1024];
    snprintf(args, sizeof args,
             "--model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 3 --val-batches 4 "
             "--seed 7 --steps 3 --threads 1",
             text);
    check_round_trip("gpt", args);
    snprintf(args, sizeof args,
             "--model mlp --data %s --hidden 24 --batch 20 --seed 5 --steps 3 --threads 1 --precision fp16 "
             "--param-dtype fp16 --init-scale 1024 --hysteresis 2",
             images);
    check_round_trip("mlp-fp16", args);
}

/* A state_dict that does not fit (a missing and an unexpected name) is
 * refused by ampc_torch.save, naming them. */
static void test_save_refuses_a_state_dict_that_does_not_fit(void)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' -c \"import sys; sys.path.insert(0, 'python'); import ampc_torch as a, torch\n"
             "m = a.MLP(4, [3], 2); sd = m.state_dict(); sd['fc.weight'] = sd.pop('0.weight')\n"
             "try:\n a.load_state_dict(a.MLP(4, [3], 2), sd)\nexcept ValueError as e:\n print(e)\" 2>&1",
             getenv("AMPC_SOURCE_DIR") ? getenv("AMPC_SOURCE_DIR") : ".", python_exe);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(cli_out, 1, sizeof cli_out - 1, p) : 0;
    cli_out[n] = '\0';
    if (p)
        pclose(p);
    CHECK_OUT("missing ['0.weight']");
    CHECK_OUT("unexpected ['fc.weight']");
}

int main(void)
{
    cli_init("interop");
    amp_set_num_threads(1);
    have_torch = python_find("test_interop.py", "torch, safetensors");
    if (!have_torch)
        printf("  no Python with torch and safetensors ($AMPC_TORCH_PYTHON, python3, .bench-venv; "
               "scripts/torch-deps.sh installs them): the PyTorch tests are skipped\n");
    cli_write_noise_images(cli_path(images, sizeof images, "images"), 64, 5);
    cli_write_tiny_text(cli_path(text, sizeof text, "text.txt"));
    RUN(test_mlp_checkpoint_in_pytorch);
    RUN(test_cnn_checkpoint_in_pytorch);
    RUN(test_gpt_checkpoint_in_pytorch);
    RUN(test_mlp_from_pytorch);
    RUN(test_cnn_from_pytorch);
    RUN(test_gpt_from_pytorch);
    RUN(test_nanogpt_style_gpt_checkpoint_in_pytorch);
    RUN(test_nanogpt_style_gpt_from_pytorch);
    RUN_IF(need_torch, test_save_refuses_a_state_dict_that_does_not_fit);
    RUN_IF(need_torch, test_round_trip_through_pytorch_keeps_settings_and_measure);
    cli_cleanup();
    int rc = harness_done();
    return rc == 0 && !have_torch ? 77 : rc;
}
