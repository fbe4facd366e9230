/*
 * test_cli_memory.c - the memory estimate and the check before a run
 * (tools/estimate.c, tools/memcheck.c), through the ampc program.
 *
 *   - The estimate meets the measured peak: for mlp, cnn and gpt in fp32,
 *     bf16 and fp16 at small sizes, the model's part of the estimate (the
 *     allocator's part minus the data set, both printed by --dry-run) is
 *     within MEM_TOLERANCE of the model's part of the peak a real run
 *     prints ('peak memory' minus the same data set), too low or too
 *     high.
 *   - A run that does not fit is refused before it allocates the model:
 *     AMPC_MEMORY_LIMIT below the estimate is exit 1 with the message
 *     (needed, available and from where, the biggest parts, what to try),
 *     and no training line; --no-memory-check runs it anyway.
 *   - --dry-run prints the table (every category, total, available) and
 *     exits 0 without training; it resolves the options as the run would,
 *     a resumed checkpoint's settings included; a cuda run's estimate
 *     needs no GPU.
 */
#include "test_cli_util.h"

#include "cli.h"

static char images[256], text[256];

/* 28x28 images (the cnn's real shape), N of them in each split. */
static void write_images(const char *dir)
{
    enum { N = 512, P = 28 * 28 };
    static unsigned char img[N * P], lab[N];
    uint64_t s = 1;
    for (int i = 0; i < N; i++) {
        lab[i] = (unsigned char)(i % 10);
        for (int k = 0; k < P; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            img[i * P + k] = (unsigned char)(s >> 56);
        }
    }
    mkdir(dir, 0700);
    uint32_t idims[3] = {N, 28, 28}, ldims[1] = {N};
    const char *pre[2] = {"train", "t10k"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, pre[i]);
        cli_write_idx(path, 3, idims, img, sizeof img);
        snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, pre[i]);
        cli_write_idx(path, 1, ldims, lab, sizeof lab);
    }
}

static const char *const precisions[3] = {"fp32", "bf16", "fp16"};

/* The small runs: each model's options (data appended). */
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

static void test_estimate_is_within_tolerance_of_the_measured_peak(void)
{
    if (!cli_have_binary())
        return;
    for (int m = 0; m < 3; m++) {
        for (int p = 0; p < 3; p++) {
            char args[1024];
            run_args(m, args, sizeof args);
            CHECK_EQ_INT(cli_run("train %s --precision %s --threads 2 --dry-run", args, precisions[p]), 0);
            double est = cli_value_after("(a run's 'peak memory' line): ");
            double data = cli_value_after("MiB, the data set ");
            CHECK_EQ_INT(cli_run("train %s --precision %s --threads 2 --steps 3", args, precisions[p]), 0);
            double peak = cli_value_after("peak memory ");
            CHECK_MSG(est > 0 && data >= 0 && peak > 0, "%s %s: no estimate or peak in the output:\n%s", args,
                      precisions[p], cli_out);
            double need = est - data, got = peak - data, err = need / got - 1;
            printf("  %-5s %s: estimate %.1f MiB, measured %.1f MiB (the data set's %.1f MiB apart), %+.1f%%\n",
                   m == 0 ? "mlp" : m == 1 ? "cnn" : "gpt", precisions[p], need, got, data, 100 * err);
            CHECK_MSG(err <= MEM_TOLERANCE && err >= -MEM_TOLERANCE,
                      "%s --precision %s: estimate %.1f MiB vs measured %.1f MiB (%+.1f%%, tolerance %.0f%%)", args,
                      precisions[p], need, got, 100 * err, 100 * MEM_TOLERANCE);
        }
    }
}

static void test_a_run_that_does_not_fit_is_refused_before_it_starts(void)
{
    if (!cli_have_binary())
        return;
    /* about 110 MiB of activations: far over a 40 MiB cap */
    int rc;
    const char *big = "train --model gpt --layers 4 --width 256 --heads 4 --context 64 --batch 32 --steps 1000 "
                      "--val-batches 1 --threads 1 --precision fp32 --data";
    rc = cli_run("%s %s --dry-run", big, text);
    CHECK_EQ_INT(rc, 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "AMPC_MEMORY_LIMIT=40M '%s' %s %s 2>&1", cli_ampc, big, text);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    size_t n = fread(cli_out, 1, sizeof cli_out - 1, f);
    cli_out[n] = '\0';
    int st = pclose(f);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 1);
    CHECK_MSG(strstr(cli_out, "not enough memory for this run"), "no refusal:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "AMPC_MEMORY_LIMIT=40M"), "the source of the limit is not named:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "the biggest parts: activation"), "the biggest parts are not named:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "--batch") && strstr(cli_out, "--accum") && strstr(cli_out, "bf16"),
              "no advice:\n%s", cli_out);
    CHECK_MSG(!strstr(cli_out, "model gpt") && !strstr(cli_out, "step "), "it started training:\n%s", cli_out);
    /* --no-memory-check runs it anyway (one step) */
    snprintf(cmd, sizeof cmd, "AMPC_MEMORY_LIMIT=40M '%s' %s %s --no-memory-check --steps 1 2>&1", cli_ampc,
             "train --model gpt --layers 4 --width 256 --heads 4 --context 64 --batch 32 --val-batches 1 "
             "--threads 1 --precision fp32 --data", text);
    f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    n = fread(cli_out, 1, sizeof cli_out - 1, f);
    cli_out[n] = '\0';
    st = pclose(f);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0);
    CHECK_MSG(strstr(cli_out, "val_loss"), "--no-memory-check did not run:\n%s", cli_out);
}

static void test_dry_run_prints_the_table_and_does_not_train(void)
{
    if (!cli_have_binary())
        return;
    CHECK_EQ_INT(cli_run("train --model gpt --data %s --steps 1000000 --dry-run", text), 0);
    for (int c = 0; c < MEM_CATS; c++)
        CHECK_MSG(strstr(cli_out, mem_cat_name((mem_cat)c)), "no row %s:\n%s", mem_cat_name((mem_cat)c), cli_out);
    CHECK_MSG(strstr(cli_out, "  total "), "no total:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "available: "), "no available line:\n%s", cli_out);
    CHECK_MSG(!strstr(cli_out, "val_loss") && !strstr(cli_out, "step "), "it trained:\n%s", cli_out);
}

static void test_dry_run_takes_a_resumed_runs_settings(void)
{
    if (!cli_have_binary())
        return;
    char ck[512];
    cli_path(ck, sizeof ck, "ck");
    CHECK_EQ_INT(cli_run("train --model gpt --layers 1 --width 32 --heads 2 --context 16 --batch 4 --steps 2 "
                         "--val-batches 1 --threads 1 --data %s --save %s",
                         text, ck),
                 0);
    CHECK_EQ_INT(cli_run("train --resume %s --dry-run", ck), 0);
    CHECK_MSG(strstr(cli_out, "gpt 1 layers, 2 heads, width 32") && strstr(cli_out, "batch 4"),
              "not the checkpoint's settings:\n%s", cli_out);
    CHECK_EQ_INT(cli_run("train --resume %s --batch 64 --dry-run", ck), 0);
    CHECK_MSG(strstr(cli_out, "batch 64"), "--batch given on resume is not used:\n%s", cli_out);
}

static void test_dry_run_of_a_cuda_run_needs_no_gpu(void)
{
    if (!cli_have_binary())
        return;
    CHECK_EQ_INT(cli_run("train --model gpt --data %s --device cuda --dry-run", text), 0);
    CHECK_MSG(strstr(cli_out, "on the cuda device") && strstr(cli_out, "device memory available: "),
              "no device table:\n%s", cli_out);
}

int main(void)
{
    if (!cli_init("memory"))
        return 1;
    cli_path(images, sizeof images, "images");
    cli_path(text, sizeof text, "text.txt");
    write_images(images);
    cli_write_tiny_text(text);
    RUN(test_estimate_is_within_tolerance_of_the_measured_peak);
    RUN(test_a_run_that_does_not_fit_is_refused_before_it_starts);
    RUN(test_dry_run_prints_the_table_and_does_not_train);
    RUN(test_dry_run_takes_a_resumed_runs_settings);
    RUN(test_dry_run_of_a_cuda_run_needs_no_gpu);
    cli_cleanup();
    return harness_done();
}
