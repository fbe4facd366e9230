/*
 * test_cli.c - the ampc program, run as a user runs it: help and version,
 * exit code 2 with a message naming the option for every bad command line,
 * the clear --device cuda error, data errors naming the file (missing,
 * truncated, wrong magic; IDX and text), short runs of each model on tiny
 * data written here (and Fashion-MNIST when installed) that end with their
 * result line, mixed precision, the JSON-lines log (one valid line per
 * step with the required keys, plotted to SVG), and gradient accumulation
 * (accum 2 x batch B = batch 2B, first step, fp32), and --log-mode.
 *
 * Resuming and checkpoints are in test_cli_resume.c.
 */
#include "test_cli_util.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static char tiny[256];   /* the tiny image set */
static char text[256];   /* the tiny text corpus */

static void test_help_exits_0_and_lists_commands_and_options(void)
{
    CHECK_EQ_INT(cli_run("--help"), 0);
    CHECK_OUT("train");
    CHECK_OUT("eval");
    CHECK_OUT("plot");
    CHECK_EQ_INT(cli_run("train --help"), 0);
    const char *opts[] = {"--model", "--batch", "--accum", "--optim", "--schedule", "--warmup", "--precision",
                          "--save", "--resume", "--log", "--device", "--layers", "--context", "--clip"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        CHECK_OUT(opts[i]);
    CHECK_OUT("skipped"); /* the schedule holds on a skipped step: said in help */
    CHECK_EQ_INT(cli_run("eval --help"), 0);
    CHECK_OUT("ampc eval DIR");
    /* eval's own words: no "continue the run" for --resume, the run's
     * settings as defaults, and none of train's options. */
    CHECK_OUT("the same as DIR");
    CHECK_OUT("(default: the run's)");
    CHECK_MSG(strstr(cli_out, "continue the run") == NULL && strstr(cli_out, "--accum") == NULL &&
                  strstr(cli_out, "grad scaler (default") == NULL,
              "eval --help in train's words:\n%s", cli_out);
    CHECK_EQ_INT(cli_run("plot --help"), 0);
    CHECK_EQ_INT(cli_run("--version"), 0);
    CHECK_OUT("ampc " AMPC_VERSION);
}

static void test_no_command_or_unknown_command_exits_2(void)
{
    static const cli_refusal cases[] = {
        {"", "usage"},
        {"frobnicate", "unknown command 'frobnicate'"},
    };
    cli_check_refusals(NULL, "", CLI_REFUSALS(cases));
}

static void test_unknown_flag_exits_2_naming_it(void)
{
    static const cli_refusal cases[] = {
        {"train --bogus-flag 3", "--bogus-flag"},
        {"--bogus-top", "--bogus-top"},
        {"train stray", "'stray'"},
        {"eval --accum 3 somewhere", "--accum"}, /* a train-only option */
        {"eval", "which checkpoint"},
    };
    cli_check_refusals(NULL, "", CLI_REFUSALS(cases));
}

static void test_bad_values_and_combinations_name_the_flag(void)
{
    static const cli_refusal cases[] = {
        {"--batch 0", "--batch: '0'"},
        {"--batch 12abc", "--batch: '12abc'"},
        {"--batch 99999999999999999999999", "--batch"},
        {"--lr abc", "--lr: 'abc'"},
        {"--lr=-1", "--lr: -1"},
        {"--lr nan", "--lr"},
        {"--model mlp --hidden 12,x", "--hidden: '12,x'"},
        {"--model mlp --hidden 12,,3", "--hidden"},
        {"--epochs -1", "--epochs: '-1'"},
        {"--optim rmsprop", "--optim: unknown value 'rmsprop'"},
        {"--model resnet", "--model: unknown value 'resnet'"},
        {"--optim sgd --momentum 2", "--momentum: 2"},
        {"--seed -1", "--seed: '-1'"},
        {"--threads x", "--threads: 'x'"},
        {"--batch", "--batch: needs a value"},
        {"--accum 0", "--accum: '0'"},
        {"--schedule linear", "--schedule: unknown value 'linear'"},
        {"--warmup x", "--warmup: 'x'"},
        {"--gamma 2", "--gamma: 2"},
        {"--clip 0", "--clip: 0"},
        {"--device tpu", "--device: unknown value 'tpu'"},
        {"--dropout 1.5", "--dropout"},
        {"--save ''", "--save: needs a non-empty value"},
        /* options that do not apply to the run */
        {"--hidden 8", "--hidden applies to --model mlp only"},
        {"--model mlp --layers 2", "--layers applies to --model gpt only"},
        {"--momentum 0.5", "--momentum applies to --optim sgd only"},
        {"--schedule cosine --step-size 5", "--step-size applies to --schedule step only"},
        {"--epochs 1 --steps 5", "--epochs or --steps, not both"},
        {"--save-every 5", "--save-every needs --save"},
        {"--stop-at 5", "--stop-at needs --save"},
        {"--model gpt --width 10 --heads 4", "--width 10 is not divisible by --heads 4"},
        {"--precision bf16 --init-scale 8", "--init-scale applies to --precision fp16"},
    };
    cli_check_refusals(NULL, "train", CLI_REFUSALS(cases));
}

static void test_bad_precision_options_are_refused_clearly(void)
{
    static const cli_refusal cases[] = {
        {"--precision fp8", "--precision: unknown value 'fp8'"},
        {"--precision bf16 --no-scaler", "--no-scaler applies to --precision fp16 only"},
        {"--no-scaler=1", "--no-scaler: takes no value"},
        {"--precision fp16 --init-scale -4", "--init-scale"},
    };
    cli_check_refusals(NULL, "train", CLI_REFUSALS(cases));
}

static void test_device_cuda_is_a_clear_error_not_a_crash(void)
{
    /* Without a GPU (this test's machines): exit 1, naming the device and
     * the library's reason. With one, train and eval run there
     * (test_cuda_cli runs them). */
    if (amp_cuda_available())
        return;
    CHECK_EQ_INT(cli_run("train --device cuda --data %s", tiny), 1);
    CHECK_OUT("--device cuda: the CUDA backend is not built/available");
    CHECK_OUT("cuda is not available (");
    CHECK_EQ_INT(cli_run("eval %s/nowhere --device cuda", tmpdir), 1);
    CHECK_OUT("--device cuda: the CUDA backend is not built/available");
    CHECK_OUT("cuda is not available (");
}

static void test_missing_data_names_the_file(void)
{
    CHECK_EQ_INT(cli_run("train --data %s/absent", tmpdir), 1);
    char file[512];
    snprintf(file, sizeof file, "%s/absent/train-images-idx3-ubyte.gz", tmpdir);
    CHECK_OUT(file);
    CHECK_OUT("No such file");
    CHECK_EQ_INT(cli_run("train --model gpt --data %s/absent.txt", tmpdir), 1);
    snprintf(file, sizeof file, "%s/absent.txt", tmpdir);
    CHECK_OUT(file);
    CHECK_OUT("No such file");
}

/* A data dir whose train images are `content`; checks the error names the
 * file and says `why`. */
static void check_bad_images(const char *name, const char *why, bool gz, const void *content, size_t n)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte%s", dir, gz ? ".gz" : "");
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fwrite(content, 1, n, f);
    fclose(f);
    CHECK_EQ_INT(cli_run("train --model mlp --data %s", dir), 1);
    CHECK_OUT(path);
    CHECK_OUT(why);
}

static void test_bad_data_files_name_the_file(void)
{
    check_bad_images("magic", "bad magic", false, "not an idx file", 15);
    /* A header promising 256 images of 4x4 and 10 bytes of them. */
    unsigned char trunc[16 + 10] = {0, 0, 8, 3, 0, 0, 1, 0, 0, 0, 0, 4, 0, 0, 0, 4};
    check_bad_images("truncated", "truncated", false, trunc, sizeof trunc);
    /* The same, gzip-compressed and cut short. */
    char gzdir[512], path[600];
    snprintf(gzdir, sizeof gzdir, "%s/truncgz", tmpdir);
    mkdir(gzdir, 0700);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", gzdir);
    uint32_t dims[3] = {256, 4, 4};
    unsigned char few[40] = {0};
    cli_write_idx(path, 3, dims, few, sizeof few);
    CHECK_EQ_INT(cli_run("train --model cnn --data %s", gzdir), 1);
    CHECK_OUT(path);
    CHECK_OUT("truncated");
    /* An empty text file for gpt. */
    char empty[512];
    cli_path(empty, sizeof empty, "empty.txt");
    FILE *f = fopen(empty, "w");
    if (f)
        fclose(f);
    CHECK_EQ_INT(cli_run("train --model gpt --data %s", empty), 1);
    CHECK_OUT(empty);
    CHECK_OUT("empty");
}

static void test_tiny_mlp_run_learns_and_repeats_with_its_seed(void)
{
    char args[1024];
    snprintf(args, sizeof args,
             "train --model mlp --data %s --hidden 8 --steps 40 --batch 16 --seed 7 --threads 1 --log-every 10 --lr 0.01 "
             "--precision fp32",
             tiny);
    CLI_OK("%s", args);
    double acc = cli_value_after("test_accuracy ");
    CHECK_MSG(acc >= 0.95, "test_accuracy %g on a separable set:\n%s", acc, cli_out);
    CHECK_OUT("peak memory");
    /* The last line is the result. */
    const char *last = strstr(cli_out, "test_accuracy ");
    CHECK(last && strchr(last, '\n') == last + strlen(last) - 1);
    /* The same seed gives the same run, output for output (timings aside). */
    char first[sizeof cli_out];
    memcpy(first, cli_out, sizeof first);
    CHECK_EQ_INT(cli_run("%s", args), 0);
    for (const char *p = strstr(first, " loss "), *q = strstr(cli_out, " loss "); p || q;
         p = strstr(p + 1, " loss "), q = strstr(q + 1, " loss ")) {
        CHECK(p && q);
        if (!p || !q)
            break;
        CHECK_NEAR(atof(q + 6), atof(p + 6), 0);
    }
    CHECK_NEAR(cli_value_after("test_accuracy "), acc, 0);
}

static void test_tiny_cnn_and_gpt_runs_print_their_results(void)
{
    int rc = cli_run("train --data %s --steps 30 --batch 16 --threads 1", tiny); /* the default model: cnn, bf16 */
    CHECK_MSG(rc == 0, "cnn: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("model cnn");
    CHECK_OUT("precision bf16");
    double acc = cli_value_after("test_accuracy ");
    CHECK_MSG(acc >= 0.9, "cnn: test_accuracy %g:\n%s", acc, cli_out);

    rc = cli_run("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 8 --steps 60 "
                 "--lr 0.01 --val-batches 4 --threads 1",
                 text);
    CHECK_MSG(rc == 0, "gpt: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("tokens/s");
    double val = cli_value_after("val_loss ");
    double ppl = cli_value_after("perplexity ");
    /* The corpus has 14 characters; uniform guessing scores ln 14 = 2.64. */
    CHECK_MSG(val > 0 && val < 2.0, "gpt: val_loss %g:\n%s", val, cli_out);
    CHECK_NEAR(ppl, exp(val), 0.01 * ppl);
}

/* bf16 autocast and fp16 autocast + scaler learn the separable set too;
 * fp16 shows the scale as it goes and the scaler's summary at the end. */
static void test_mixed_precision_runs_learn(void)
{
    const char *precisions[] = {"bf16", "fp16", "fp16 --no-scaler"};
    for (int i = 0; i < 3; i++) {
        int rc = cli_run("train --model mlp --data %s --hidden 8 --steps 40 --batch 16 --seed 7 --threads 1 "
                         "--log-every 10 --lr 0.01 --precision %s",
                         tiny, precisions[i]);
        CHECK_MSG(rc == 0, "%s: exit %d:\n%s", precisions[i], rc, cli_out);
        double acc = cli_value_after("test_accuracy ");
        CHECK_MSG(acc >= 0.95, "%s: test_accuracy %g:\n%s", precisions[i], acc, cli_out);
        bool scaled = i == 1;
        CHECK_MSG((strstr(cli_out, " scale 65536 skipped 0") != NULL) == scaled, "%s: scale shown?\n%s",
                  precisions[i], cli_out);
        CHECK_MSG((strstr(cli_out, "scaler: final scale") != NULL) == scaled, "%s: summary?\n%s", precisions[i],
                  cli_out);
    }
}

/* The log: one JSON object per optimizer step with the keys the issue
 * names, steps 1..n in order; a huge initial scale makes the first fp16
 * steps skip (and the log says so); `ampc plot` draws it. */
static void test_log_has_one_valid_json_line_per_step_and_plots(void)
{
    char log[512], svg[512];
    cli_path(log, sizeof log, "run.jsonl");
    cli_path(svg, sizeof svg, "run.svg");
    enum { STEPS = 12 };
    CLI_OK("train --model mlp --data %s --hidden 8 --steps %d --batch 16 --threads 1 --precision fp16 "
           "--init-scale 16777216 --log %s",
           tiny, STEPS, log);
    char *body = cli_read_file(log, NULL);
    CHECK(body != NULL);
    if (!body)
        return;
    char *lines[64];
    int n = cli_lines(body, lines, 64);
    CHECK_EQ_INT(n, STEPS);
    const char *keys[] = {"step", "loss", "lr", "scale", "skipped", "grad_norm", "step_ms"};
    int skipped = 0;
    for (int i = 0; i < n; i++) {
        CHECK_MSG(cli_json_object_line(lines[i]), "line %d is not one JSON object: %s", i + 1, lines[i]);
        char v[64];
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            CHECK_MSG(cli_json_field(lines[i], keys[k], v, sizeof v), "line %d has no \"%s\": %s", i + 1, keys[k],
                      lines[i]);
        CHECK(cli_json_field(lines[i], "step", v, sizeof v) && atoi(v) == i + 1);
        CHECK(cli_json_field(lines[i], "skipped", v, sizeof v) && (strcmp(v, "true") == 0 || strcmp(v, "false") == 0));
        skipped += strcmp(v, "true") == 0;
        CHECK(cli_json_field(lines[i], "scale", v, sizeof v) && atof(v) > 0);
        CHECK(cli_json_field(lines[i], "loss", v, sizeof v) && atof(v) > 0);
    }
    /* 2^24 overflows f16 gradients: the first steps skip, backing off. */
    CHECK_MSG(skipped >= 3, "%d skipped steps:\n%s", skipped, cli_out);
    free(body);

    CHECK_EQ_INT(cli_run("plot %s -o %s", log, svg), 0);
    char *pic = cli_read_file(svg, NULL);
    CHECK_MSG(pic && strstr(pic, "<svg") && strstr(pic, "</svg>"), "no SVG in %s", svg);
    free(pic);
}

/* The schedule holds on a skipped step: with warm-up, the lr of the step
 * after a skipped one equals the skipped step's lr. */
static void test_schedule_holds_on_skipped_steps(void)
{
    char log[512];
    cli_path(log, sizeof log, "hold.jsonl");
    CLI_OK("train --model mlp --data %s --hidden 8 --steps 12 --batch 16 --threads 1 --precision fp16 "
           "--init-scale 16777216 --warmup 10 --lr 0.01 --log %s",
           tiny, log);
    char *body = cli_read_file(log, NULL);
    if (!body) {
        CHECK(body != NULL);
        return;
    }
    char *lines[32];
    int n = cli_lines(body, lines, 32), taken = 0;
    for (int i = 0; i < n; i++) {
        char lr[64], sk[16];
        CHECK(cli_json_field(lines[i], "lr", lr, sizeof lr) && cli_json_field(lines[i], "skipped", sk, sizeof sk));
        /* the warm-up (nanoGPT's): lr = 0.01 * (taken + 1) / (10 + 1) */
        CHECK_NEAR(atof(lr), 0.01 * (taken + 1) / 11.0, 1e-9);
        taken += strcmp(sk, "false") == 0;
    }
    CHECK_MSG(taken < n, "no skipped step to hold on");
    free(body);
}

/* --accum 2 with batch B: the first step's loss and gradient norm equal
 * batch 2B's (fp32, to 1e-6). */
static void test_accumulation_matches_the_full_batch(void)
{
    char la[512], lb[512];
    cli_path(la, sizeof la, "full.jsonl");
    cli_path(lb, sizeof lb, "accum.jsonl");
    const char *common = "train --model mlp --hidden 16 --steps 1 --threads 1 --precision fp32 --seed 3";
    CHECK_EQ_INT(cli_run("%s --data %s --batch 64 --log %s", common, tiny, la), 0);
    CHECK_EQ_INT(cli_run("%s --data %s --batch 32 --accum 2 --log %s", common, tiny, lb), 0);
    char *a = cli_read_file(la, NULL), *b = cli_read_file(lb, NULL);
    CHECK(a && b);
    if (a && b) {
        char va[64], vb[64];
        const char *keys[] = {"loss", "grad_norm"};
        for (int k = 0; k < 2; k++) {
            CHECK(cli_json_field(a, keys[k], va, sizeof va) && cli_json_field(b, keys[k], vb, sizeof vb));
            CHECK_NEAR(atof(vb), atof(va), 1e-6);
            CHECK(atof(va) > 0.01);
        }
    }
    free(a);
    free(b);
}

/* Lines in a file (0 when absent). */
static int count_lines(const char *path)
{
    char *s = cli_read_file(path, NULL);
    int n = 0;
    for (const char *p = s; p && *p; p++)
        n += *p == '\n';
    free(s);
    return n;
}

/* An existing log is written only as --log-mode says (append is the
 * default on --resume); --save leaves nothing but the checkpoint behind
 * (its writability probe is removed). */
static void test_log_modes_and_the_save_probe(void)
{
    char log[512], dir[512];
    cli_path(log, sizeof log, "modes.jsonl");
    cli_path(dir, sizeof dir, "modes-run");
    const char *run = "train --model mlp --hidden 8 --batch 16 --threads 1";
    CHECK_EQ_INT(cli_run("%s --data %s --steps 2 --save %s --log %s", run, tiny, dir, log), 0);
    CHECK_EQ_INT(count_lines(log), 2);
    CHECK_EQ_INT(cli_run("%s --data %s --steps 2 --log %s", run, tiny, log), 2);
    CHECK_OUT("--log-mode append");
    CHECK_EQ_INT(count_lines(log), 2);
    CHECK_EQ_INT(cli_run("%s --data %s --steps 3 --log %s --log-mode append", run, tiny, log), 0);
    CHECK_EQ_INT(count_lines(log), 5);
    CHECK_EQ_INT(cli_run("%s --data %s --steps 1 --log %s --log-mode replace", run, tiny, log), 0);
    CHECK_EQ_INT(count_lines(log), 1);
    CHECK_EQ_INT(cli_run("train --resume %s --steps 4 --log %s", dir, log), 0); /* steps 3 and 4, appended */
    CHECK_EQ_INT(count_lines(log), 3);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = checkpoint.safetensors", dir);
    CHECK_MSG(system(cmd) == 0, "%s holds more than its checkpoint", dir);
}

static void test_short_fashion_mnist_run_prints_test_accuracy(void)
{
    if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        harness_skip(FMNIST " is not installed");
        return;
    }
    CLI_OK("train --model mlp --steps 20 --log-every 10");
    CHECK_OUT("60000");
    double acc = cli_value_after("test_accuracy ");
    /* 20 steps of 128 images: far from trained, but well above chance (0.1). */
    CHECK_MSG(acc > 0.3 && acc <= 1.0, "test_accuracy %g:\n%s", acc, cli_out);
}

/* A refusal speaks in the terms of the command that made it and names a
 * cause the user did not type: eval's messages say "ampc eval" and never
 * an option eval does not take; a setting that came from the checkpoint
 * is named as the checkpoint's. A gpt --dry-run whose token buffers alone
 * would not fit prints the estimate and "does not fit", as mlp and cnn do. */
static void test_messages_are_in_the_commands_terms(void)
{
    char mlp[512], p16[512], ns[512];
    cli_path(mlp, sizeof mlp, "terms-mlp");
    cli_path(p16, sizeof p16, "terms-bf16-weights");
    cli_path(ns, sizeof ns, "terms-no-scaler");
    const char *run = "train --model mlp --data %s --hidden 8 --batch 16 --steps 2 --threads 1 --save %s %s";
    CHECK_EQ_INT(cli_run(run, tiny, mlp, ""), 0);
    CHECK_EQ_INT(cli_run(run, tiny, p16, "--param-dtype bf16"), 0);
    CHECK_EQ_INT(cli_run(run, tiny, ns, "--precision fp16 --no-scaler --stop-at 1"), 0);
    int rc = cli_run("eval %s --val-batches 5", mlp);
    CHECK_MSG(rc == 2 && strstr(cli_out, "ampc eval: --val-batches applies to --model gpt only (the checkpoint's "
                                         "model is mlp)") && !strstr(cli_out, "ampc train"),
              "exit %d:\n%s", rc, cli_out);
    rc = cli_run("eval %s --precision fp32", p16);
    CHECK_MSG(rc == 2 && strstr(cli_out, "ampc eval: --precision fp32 cannot run the checkpoint's weights, which it "
                                         "stores in bf16") &&
                  strstr(cli_out, "give --precision bf16") && !strstr(cli_out, "needs --precision"),
              "exit %d:\n%s", rc, cli_out);
    rc = cli_run("train --resume %s --max-skips 4", ns);
    CHECK_MSG(rc == 2 && strstr(cli_out, "--max-skips applies to --precision fp16 with the scaler only (the "
                                         "checkpoint's run has --no-scaler)"),
              "exit %d:\n%s", rc, cli_out);
    /* 512 GiB a token buffer; a text whose validation split holds a window */
    char big[512];
    cli_path(big, sizeof big, "terms-long.txt");
    FILE *f = fopen(big, "w");
    CHECK(f != NULL);
    for (int i = 0; f && i < 800000; i++)
        fputc("abcdefgh \n"[(i * 7 + i / 13) % 10], f);
    if (f)
        fclose(f);
    rc = cli_run("train --model gpt --data %s --batch 1048576 --context 65536 --dry-run", big);
    CHECK_MSG(rc == 0 && strstr(cli_out, "does not fit") && !strstr(cli_out, "out of memory"), "exit %d:\n%s", rc,
              cli_out);
}

int main(void)
{
    cli_init_tiny("test-cli", tiny, text);
    RUN_IF(cli_have_binary, test_help_exits_0_and_lists_commands_and_options);
    RUN_IF(cli_have_binary, test_no_command_or_unknown_command_exits_2);
    RUN_IF(cli_have_binary, test_unknown_flag_exits_2_naming_it);
    RUN_IF(cli_have_binary, test_messages_are_in_the_commands_terms);
    RUN_IF(cli_have_binary, test_bad_values_and_combinations_name_the_flag);
    RUN_IF(cli_have_binary, test_bad_precision_options_are_refused_clearly);
    RUN_IF(cli_have_binary, test_device_cuda_is_a_clear_error_not_a_crash);
    RUN_IF(cli_have_binary, test_missing_data_names_the_file);
    RUN_IF(cli_have_binary, test_bad_data_files_name_the_file);
    RUN_IF(cli_have_binary, test_tiny_mlp_run_learns_and_repeats_with_its_seed);
    RUN_IF(cli_have_binary, test_tiny_cnn_and_gpt_runs_print_their_results);
    RUN_IF(cli_have_binary, test_mixed_precision_runs_learn);
    RUN_IF(cli_have_binary, test_log_has_one_valid_json_line_per_step_and_plots);
    RUN_IF(cli_have_binary, test_schedule_holds_on_skipped_steps);
    RUN_IF(cli_have_binary, test_accumulation_matches_the_full_batch);
    RUN_IF(cli_have_binary, test_log_modes_and_the_save_probe);
    RUN_IF(cli_have_binary, test_short_fashion_mnist_run_prints_test_accuracy);
    cli_cleanup();
    return harness_done();
}
