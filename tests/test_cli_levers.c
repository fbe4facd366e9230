/*
 * test_cli_levers.c - the memory levers through the ampc program:
 * --param-dtype (16-bit weights, f32 masters in the optimizer) and
 * --optim-state (bf16 optimizer state).
 *
 *   - Bad values and combinations are exit 2 with a message naming the
 *     option: an unknown dtype, bf16 weights under another precision,
 *     fp16 weights without the grad scaler.
 *   - Resuming is exact with each lever: a run stopped half-way with
 *     --stop-at and resumed saves the straight run's checkpoint byte for
 *     byte (parameters, masters, state, settings) - an mlp in fp16 with the
 *     scaler skipping steps, a gpt in bf16 with dropout, a cnn with
 *     momentum SGD.
 *   - The levers are saved settings: a resumed run keeps them, and a
 *     conflicting value is exit 2.
 *   - The memory estimate (--dry-run) follows them: for mlp, cnn and gpt
 *     in bf16 with each lever and both, and in fp16 with both, within
 *     MEM_TOLERANCE of the measured peak (test_cli_memory.c's check), and
 *     the levers lower it.
 */
#include "test_cli_util.h"

#include "estimate.h"

static char tiny[256], text[256], images[256];

static void test_bad_values_are_refused_with_clear_messages(void)
{
    static const cli_refusal cases[] = {
        {"--param-dtype f8", "--param-dtype: unknown value 'f8' (choose from fp32|bf16|fp16)"},
        {"--param-dtype f32", "--param-dtype: unknown value 'f32'"},
        {"--optim-state fp16", "--optim-state: unknown value 'fp16' (choose from fp32|bf16|bf16-sr)"},
        {"--precision fp32 --param-dtype bf16", "--param-dtype bf16 needs --precision bf16"},
        {"--precision fp16 --param-dtype bf16", "--param-dtype bf16 needs --precision bf16"},
        {"--precision bf16 --param-dtype fp16", "--param-dtype fp16 needs --precision fp16"},
        {"--precision fp16 --no-scaler --param-dtype fp16", "--param-dtype fp16 needs the grad scaler"},
    };
    char train[400];
    snprintf(train, sizeof train, "train --model mlp --data %s --steps 1", tiny);
    cli_check_refusals(NULL, train, CLI_REFUSALS(cases));
}

/* A straight run of args saved in A; the same stopped at half and resumed
 * into B: the two checkpoints are the same bytes. */
static void check_resume_same_file(const char *what, const char *args, int steps)
{
    char a[512], b[512], name[128];
    snprintf(name, sizeof name, "%s-a", what);
    cli_path(a, sizeof a, name);
    snprintf(name, sizeof name, "%s-b", what);
    cli_path(b, sizeof b, name);
    int rc = cli_run("train %s --steps %d --save %s", args, steps, a);
    CHECK_MSG(rc == 0, "%s: the straight run: exit %d:\n%s", what, rc, cli_out);
    CHECK_OUT("memory levers: parameters");
    rc = cli_run("train %s --steps %d --stop-at %d --save %s", args, steps, steps / 2, b);
    CHECK_MSG(rc == 0, "%s: the first half: exit %d:\n%s", what, rc, cli_out);
    rc = cli_run("train --resume %s", b);
    CHECK_MSG(rc == 0, "%s: the resumed half: exit %d:\n%s", what, rc, cli_out);
    CHECK_OUT("resumed from");
    CHECK_OUT("memory levers: parameters"); /* the levers came back from the checkpoint */
    char why[400];
    CHECK_MSG(cli_same_checkpoint(a, b, why, sizeof why), "%s: %s", what, why);
}

static void test_resume_is_exact_with_each_lever(void)
{
    char args[1024];
    /* fp16 weights, bf16 Adam state, the scaler skipping now and then. */
    snprintf(args, sizeof args,
             "--model mlp --data %s --hidden 8 --batch 16 --threads 1 --seed 11 --precision fp16 "
             "--init-scale 16777216 --growth-interval 3 --lr 0.01 --warmup 4 --param-dtype fp16 "
             "--optim-state bf16",
             tiny);
    check_resume_same_file("mlp", args, 20);
    char path[600];
    snprintf(path, sizeof path, "%s/mlp-a/checkpoint.safetensors", tmpdir);
    size_t n = 0;
    char *body = cli_read_file(path, &n);
    /* The file holds the f16 weights, their f32 masters, bf16 moments and
     * the levers in its settings. */
    CHECK(body && n > 8 && strstr(body + 8, "\"optim.0.weight.master\":{\"dtype\":\"F32\"") &&
          strstr(body + 8, "\"0.weight\":{\"dtype\":\"F16\"") &&
          strstr(body + 8, "\"optim.0.weight.exp_avg\":{\"dtype\":\"BF16\"") &&
          strstr(body + 8, "\\\"param-dtype\\\":\\\"fp16\\\"") && strstr(body + 8, "\\\"optim-state\\\":\\\"bf16\\\""));
    CHECK_MSG(body && !strstr(body + 8, "\"scaler.skipped\":\"0\""), "the run should skip steps");
    free(body);

    /* bf16 weights alone, gpt with dropout. */
    snprintf(args, sizeof args,
             "--model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 4 --dropout 0.1 "
             "--lr 0.01 --val-batches 2 --threads 1 --precision bf16 --param-dtype bf16",
             text);
    check_resume_same_file("gpt", args, 8);
    /* bf16 Adam state with stochastic rounding: the same bits again. */
    snprintf(args, sizeof args,
             "--model mlp --data %s --hidden 8 --batch 16 --threads 1 --seed 3 --precision bf16 --lr 0.01 "
             "--optim-state bf16-sr",
             tiny);
    check_resume_same_file("mlp-sr", args, 10);
    /* bf16 momentum alone. */
    snprintf(args, sizeof args,
             "--model cnn --data %s --batch 100 --threads 1 --optim sgd --lr 0.05 --precision bf16 "
             "--schedule constant --optim-state bf16",
             tiny);
    check_resume_same_file("cnn", args, 4);
}

static void test_resume_refuses_another_lever(void)
{
    char dir[512];
    cli_path(dir, sizeof dir, "mlp-b");
    int rc = cli_run("train --resume %s --param-dtype fp32", dir);
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("--param-dtype fp32 conflicts with the checkpoint");
    rc = cli_run("train --resume %s --optim-state fp32", dir);
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("--optim-state fp32 conflicts with the checkpoint");
}

/* test_cli_memory.c's small runs. */
static const char *run_args(int model, char *buf, size_t n)
{
    if (model == 0)
        snprintf(buf, n, "--model mlp --hidden 512,256 --batch 256 --data %s", images);
    else if (model == 1)
        snprintf(buf, n, "--model cnn --batch 32 --data %s", images);
    else
        snprintf(buf, n, "--model gpt --layers 2 --width 64 --heads 4 --context 32 --batch 8 --val-batches 1 "
                         "--data %s", text);
    return buf;
}

static void test_estimate_follows_the_levers(void)
{
    /* Each precision's run without levers first, the base of the check
     * that the levers lower the estimate. */
    const char *const runs[6] = {"--precision bf16",
                                 "--precision bf16 --param-dtype bf16",
                                 "--precision bf16 --optim-state bf16",
                                 "--precision bf16 --param-dtype bf16 --optim-state bf16-sr",
                                 "--precision fp16",
                                 "--precision fp16 --param-dtype fp16 --optim-state bf16"};
    for (int m = 0; m < 3; m++) {
        double base = 0;
        for (int l = 0; l < 6; l++) {
            char args[1024];
            run_args(m, args, sizeof args);
            CHECK_EQ_INT(cli_run("train %s %s --threads 2 --dry-run", args, runs[l]), 0);
            double est = cli_value_after("(a run's 'peak memory' line): ");
            double data = cli_value_after("MiB, the data set ");
            CHECK_EQ_INT(cli_run("train %s %s --threads 2 --steps 3", args, runs[l]), 0);
            double peak = cli_value_after("peak memory ");
            CHECK_MSG(est > 0 && data >= 0 && peak > 0, "%s %s: no estimate or peak in the output:\n%s", args,
                      runs[l], cli_out);
            double need = est - data, got = peak - data, err = need / got - 1;
            printf("  %-5s %-58s estimate %.2f MiB, measured %.2f MiB, %+.1f%%\n",
                   m == 0 ? "mlp" : m == 1 ? "cnn" : "gpt", runs[l], need, got, 100 * err);
            CHECK_MSG(err <= MEM_TOLERANCE && err >= -MEM_TOLERANCE,
                      "%s %s: estimate %.2f MiB vs measured %.2f MiB (%+.1f%%, tolerance %.0f%%)", args, runs[l],
                      need, got, 100 * err, 100 * MEM_TOLERANCE);
            if (l == 0 || l == 4)
                base = need;
            else
                CHECK_MSG(need < base, "%s %s: the estimate %.2f MiB is not below the run's without levers, %.2f MiB",
                          args, runs[l], need, base);
        }
    }
}

int main(void)
{
    cli_init_tiny("test-cli-levers", tiny, text);
    cli_write_noise_images(cli_path(images, sizeof images, "images"), 512, 1);
    RUN_IF(cli_have_binary, test_bad_values_are_refused_with_clear_messages);
    RUN_IF(cli_have_binary, test_resume_is_exact_with_each_lever);
    RUN_IF(cli_have_binary, test_resume_refuses_another_lever);
    RUN_IF(cli_have_binary, test_estimate_follows_the_levers);
    cli_cleanup();
    return harness_done();
}
