/*
 * test_cli_profile.c - `ampc train --profile` and `ampc profile`, through
 * the ampc program, on tiny data sets:
 *
 *   - the trace of each model (mlp, cnn, gpt) parses as JSON and follows
 *     the trace-event format (tests/trace_check.h): required fields, every
 *     op inside a phase of its thread, nesting, ts monotone per thread, one
 *     step event per profiled step; the table and the verdict are printed;
 *   - profiling changes no result: the losses of every step (--log) are
 *     those of the same run without --profile, bit for bit;
 *   - --profile's value: --profile FILE, --profile=FILE, and no value
 *     (ampc-trace.json in the working directory) when the next argument is
 *     an option;
 *   - bad values are refused with a message naming the option, and an
 *     unwritable trace path before training starts, as is a FILE that is
 *     not an earlier ampc trace (nothing the user had is replaced);
 *   - `ampc profile` prints a column per precision and what moved, writes
 *     a trace per precision with --profile, and refuses bad precision
 *     lists and options that keep something.
 */
#include "test_cli_util.h"
#include "trace_check.h"

static char images[256], text[256];

/* A trace file's check (ops must sit inside phases). */
static void check_trace(const char *path, int steps, const char *want_op)
{
    size_t len;
    char *t = trace_read(path, &len);
    CHECK_MSG(t != NULL, "no trace at %s", path);
    if (!t)
        return;
    trace_report r;
    CHECK_MSG(trace_check(t, len, true, &r), "%s: %s", path, r.error);
    CHECK_EQ_INT(r.n_step, steps);
    CHECK(r.n_phase >= 4 * steps); /* data, forward, backward, optimizer at least */
    CHECK(r.n_op > 0);
    CHECK(r.n_counter > 0);
    char pat[96];
    snprintf(pat, sizeof pat, "\"name\":\"%s\",\"cat\":\"op\"", want_op);
    CHECK_MSG(strstr(t, pat) != NULL, "%s: no %s op event", path, want_op);
    CHECK(strstr(t, "\"cat\":\"backward\"") != NULL);
    CHECK(strstr(t, "\"inputs\":[") != NULL);
    free(t);
}

static void test_train_profile_of_each_model_writes_a_valid_trace(void)
{
    const struct {
        const char *args, *op;
    } runs[] = {
        {"--model mlp --hidden 32 --batch 16 --data %s", "linear"},
        {"--model cnn --batch 8 --data %s", "conv2d"},
        {"--model gpt --layers 1 --heads 2 --width 16 --context 8 --batch 4 --data %s", "linear"},
    };
    for (int m = 0; m < 3; m++) {
        char args[512], trace[320];
        snprintf(args, sizeof args, runs[m].args, m == 2 ? text : images);
        snprintf(trace, sizeof trace, "%s/trace-%d.json", tmpdir, m);
        int rc = cli_run("train %s --steps 6 --profile %s --profile-steps 3 --profile-warmup 1", args, trace);
        CHECK_MSG(rc == 0, "%s: exit %d\n%s", args, rc, cli_out);
        CHECK_OUT("profile of steps 2 to 4 (3 steps after 1 of warm-up)");
        CHECK_OUT("op                             pass     dtypes");
        CHECK_OUT("3 steps profiled");
        CHECK_OUT("verdict: 3 steps of ");
        CHECK_OUT("step time: data ");
        CHECK_OUT("top ops by self time:");
        CHECK_OUT("autocast casts: ");
        CHECK_OUT("trace written to ");
        check_trace(trace, 3, runs[m].op);
    }
}

/* The "loss" of each line of a --log file, joined. */
static void losses(const char *path, char *out, size_t n)
{
    size_t len, k = 0;
    char *t = cli_read_file(path, &len);
    out[0] = '\0';
    CHECK(t != NULL);
    if (!t)
        return;
    char *lines[64];
    int nl = cli_lines(t, lines, 64);
    for (int i = 0; i < nl && k < n; i++) {
        char v[64];
        if (cli_json_field(lines[i], "loss", v, sizeof v))
            k += (size_t)snprintf(out + k, n - k, "%s;", v);
    }
    free(t);
}

static void test_profiling_changes_no_loss(void)
{
    const char *precs[] = {"bf16", "fp16"};
    for (int p = 0; p < 2; p++) {
        char with[300], without[300], trace[300];
        cli_path(with, sizeof with, "with.jsonl");
        cli_path(without, sizeof without, "without.jsonl");
        cli_path(trace, sizeof trace, "same.json");
        remove(with);
        remove(without);
        const char *base = "train --model mlp --hidden 32 --batch 16 --steps 8 --precision";
        CHECK_EQ_INT(cli_run("%s %s --data %s --log %s", base, precs[p], images, without), 0);
        CHECK_EQ_INT(cli_run("%s %s --data %s --log %s --profile %s --profile-steps 4", base, precs[p], images, with,
                             trace), 0);
        CHECK_OUT("4 steps profiled");
        char a[4096], b[4096];
        losses(without, a, sizeof a);
        losses(with, b, sizeof b);
        CHECK_MSG(strlen(a) > 8 * 2, "losses: %s", a);
        CHECK_MSG(strcmp(a, b) == 0, "%s: losses without --profile %s, with %s", precs[p], a, b);
    }
}

static void test_profile_value_forms(void)
{
    char path[300];
    cli_path(path, sizeof path, "eq.json");
    CHECK_EQ_INT(cli_run("train --model mlp --hidden 8 --batch 8 --steps 3 --data %s --profile=%s", images, path),
                 0);
    CHECK(access(path, F_OK) == 0);
    /* No value: the default file in the working directory, the next
     * argument being an option. */
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK_EQ_INT(chdir(tmpdir), 0);
    int rc = cli_run("train --profile --model mlp --hidden 8 --batch 8 --steps 3 --data %s", images);
    CHECK_MSG(rc == 0, "exit %d\n%s", rc, cli_out);
    CHECK(access("ampc-trace.json", F_OK) == 0);
    CHECK_OUT("trace written to ampc-trace.json");
    /* Last on the line, too. */
    remove("ampc-trace.json");
    CHECK_EQ_INT(cli_run("train --model mlp --hidden 8 --batch 8 --steps 3 --data %s --profile", images), 0);
    CHECK(access("ampc-trace.json", F_OK) == 0);
    CHECK_EQ_INT(chdir(cwd), 0);
    /* Fewer steps left than --profile-steps: those are profiled. */
    cli_path(path, sizeof path, "short.json");
    CHECK_EQ_INT(cli_run("train --model mlp --hidden 8 --batch 8 --steps 4 --data %s --profile %s", images, path),
                 0);
    CHECK_OUT("profile of steps 3 to 4 (2 steps after 2 of warm-up)");
    check_trace(path, 2, "linear");
}

static void test_bad_profile_arguments_are_refused(void)
{
    char dir[300];
    cli_path(dir, sizeof dir, "a-dir");
    mkdir(dir, 0700);
    const char *common = "train --model mlp --hidden 8 --batch 8 --steps 3";
    const struct {
        const char *args;
        int rc;
        const char *msg;
    } cases[] = {
        {"--profile x.json --profile-steps 0", 2, "--profile-steps: '0' is not a whole number from 1 to 1000000"},
        {"--profile x.json --profile-steps five", 2, "--profile-steps: 'five' is not a whole number"},
        {"--profile x.json --profile-warmup -1", 2, "--profile-warmup: '-1' is not a whole number from 0"},
        {"--profile-steps 3", 2, "--profile-steps needs --profile [FILE]"},
        {"--profile-warmup 1", 2, "--profile-warmup needs --profile [FILE]"},
        {"--profile=", 2, "--profile: needs a non-empty value"},
        {"--profile x.json --profile-warmup 3", 2, "not more than --profile-warmup 3: no step left to profile"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli_run("%s --data %s %s", common, images, cases[i].args);
        CHECK_MSG(rc == cases[i].rc, "%s: exit %d\n%s", cases[i].args, rc, cli_out);
        CHECK_OUT(cases[i].msg);
        CHECK_MSG(strstr(cli_out, "step 1/") == NULL, "%s: trained anyway", cases[i].args);
    }
    /* Unwritable paths: refused before the data is loaded. */
    int rc = cli_run("%s --data %s --profile %s/no/such/dir/t.json", common, images, tmpdir);
    CHECK_EQ_INT(rc, 1);
    CHECK_OUT("--profile: cannot write the trace");
    CHECK_OUT("/no/such/dir/t.json");
    CHECK(strstr(cli_out, "data ") == NULL);
    rc = cli_run("%s --data %s --profile %s", common, images, dir);
    CHECK_EQ_INT(rc, 1);
    CHECK_OUT("is a directory");
    /* Nothing the user had is replaced: a file that is not an ampc trace,
     * a device. */
    size_t before = 0, after = 1;
    char *was = cli_read_file(text, &before);
    rc = cli_run("%s --data %s --profile %s", common, images, text);
    CHECK_EQ_INT(rc, 1);
    CHECK_OUT("exists and is not an ampc trace: not replaced");
    char *is = cli_read_file(text, &after);
    CHECK(was && is && before == after && memcmp(was, is, before) == 0);
    free(was);
    free(is);
    rc = cli_run("%s --data %s --profile /dev/null", common, images);
    CHECK_EQ_INT(rc, 1);
    CHECK_OUT("'/dev/null' is not a regular file");
}

/* --device cuda (on cudaemu in build-emu; skipped where there is no GPU):
 * the device's events at device times on pid 1, the host's on pid 0, both
 * tracks valid. */
static void test_cuda_trace_has_a_device_track(void)
{
    char trace[300];
    cli_path(trace, sizeof trace, "cuda.json");
    int rc = cli_run("train --model mlp --hidden 16 --batch 8 --steps 3 --device cuda --data %s --profile %s "
                     "--profile-steps 1", images, trace);
    if (rc == 1 && strstr(cli_out, "cuda")) {
        harness_skip("no CUDA device (the cudaemu build runs this)");
        return;
    }
    CHECK_MSG(rc == 0, "exit %d\n%s", rc, cli_out);
    CHECK_OUT("kernel@cuda");
    size_t len;
    char *t = trace_read(trace, &len);
    trace_report r;
    CHECK_MSG(t && trace_check(t, len, true, &r), "%s", r.error);
    CHECK(t && strstr(t, "\"cuda (device time)\"") != NULL);
    CHECK(t && strstr(t, "\"cat\":\"kernel\",\"pid\":1,\"tid\":0") != NULL);
    free(t);
}

static void test_ampc_profile_prints_each_precision_side_by_side(void)
{
    char trace[300];
    cli_path(trace, sizeof trace, "side.json");
    int rc = cli_run("profile --model mlp --hidden 32 --batch 16 --data %s --precision fp32,bf16,fp16 "
                     "--profile-steps 2 --profile-warmup 1 --profile %s", images, trace);
    CHECK_MSG(rc == 0, "exit %d\n%s", rc, cli_out);
    CHECK_OUT("each precision: 1 warm-up step, then 2 profiled");
    CHECK_OUT("                               fp32         bf16         fp16");
    const char *rows[] = {"step ms", "  data", "  forward", "  backward", "  optimizer (all)", "  other",
                          "casts a step", "cast ms a step", "cast % of the step", "cast cache hits a step",
                          "GFLOP/s (ops)", "top ops by self time", "what moved (against fp32):", "  bf16: step ",
                          "  fp16: step ", "casts cost "};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        CHECK_OUT(rows[i]);
    /* fp32 inserts no cast; bf16 does. */
    const char *casts = strstr(cli_out, "casts a step");
    CHECK(casts && strncmp(casts, "casts a step                      0", 35) == 0);
    const char *names[] = {"side-fp32.json", "side-bf16.json", "side-fp16.json"};
    for (int i = 0; i < 3; i++) {
        char p[320];
        cli_path(p, sizeof p, names[i]);
        check_trace(p, 2, "linear");
    }
    rc = cli_run("profile --model gpt --layers 1 --heads 2 --width 16 --context 8 --batch 4 --data %s "
                 "--precision bf16 --profile-steps 1 --profile-warmup 0 --repeat 2", text);
    CHECK_MSG(rc == 0, "exit %d\n%s", rc, cli_out);
    CHECK_OUT("2 runs each, round-robin");
    CHECK_OUT("                               bf16\n");
    CHECK(strstr(cli_out, "what moved") == NULL);
}

static void test_ampc_profile_refuses_bad_arguments(void)
{
    static const cli_refusal cases[] = {
        {"--precision fp32,fp64", "'fp64' in 'fp32,fp64' is not fp32, bf16 or fp16"},
        {"--precision fp32,,bf16", "'' in 'fp32,,bf16' is not fp32, bf16 or fp16"},
        {"--precision bf16,bf16", "bf16 is in 'bf16,bf16' twice"},
        {"--precision", "--precision: needs a value"},
        {"--save d", "--save is not an ampc profile option"},
        {"--steps 10", "--steps is not an ampc profile option"},
        {"--precision fp32,bf16 --no-scaler", "--no-scaler applies to fp16 only"},
        {"--profile-steps 0", "ampc profile: --profile-steps: '0' is not a whole number"},
        {"--bogus", "ampc profile: unknown option '--bogus'"},
        {"--repeat 0", "--repeat: '0' is not a whole number from 1 to 100"},
        {"--repeat", "--repeat: '' is not a whole number from 1 to 100"},
        {"--repeat=2x", "--repeat: '2x' is not a whole number from 1 to 100"},
    };
    char profile[400];
    snprintf(profile, sizeof profile, "profile --model mlp --data %s", images);
    cli_check_refusals(NULL, profile, CLI_REFUSALS(cases));
    CHECK_EQ_INT(cli_run("profile --help"), 0);
    CHECK_OUT("usage: ampc profile [--precision LIST] [train options]");
    CHECK_EQ_INT(cli_run("--help"), 0);
    CHECK_OUT("  profile ");
    CHECK_EQ_INT(cli_run("train --help"), 0);
    CHECK_OUT("--profile [FILE]");
    CHECK_OUT("--profile-steps N");
    CHECK_OUT("--profile-warmup N");
}

int main(void)
{
    cli_init("profile");
    if (cli_have_binary()) {
        cli_write_noise_images(cli_path(images, sizeof images, "images"), 128, 3);
        cli_write_tiny_text(cli_path(text, sizeof text, "text.txt"));
        RUN(test_train_profile_of_each_model_writes_a_valid_trace);
        RUN(test_profiling_changes_no_loss);
        RUN(test_profile_value_forms);
        RUN(test_bad_profile_arguments_are_refused);
        RUN(test_cuda_trace_has_a_device_track);
        RUN(test_ampc_profile_prints_each_precision_side_by_side);
        RUN(test_ampc_profile_refuses_bad_arguments);
    }
    cli_cleanup();
    return harness_done();
}
