/*
 * test_cli_memory.c - the memory estimate and the check before a run
 * (tools/estimate.c, tools/memcheck.c), through the ampc program.
 *
 *   - The estimate meets the measured peak: for mlp, cnn and gpt in fp32,
 *     bf16 and fp16 at small sizes, the model's part of the estimate (the
 *     allocator's part minus the data set, both printed by --dry-run) is
 *     within MEM_TOLERANCE of the model's part of the peak a real run
 *     prints ('peak memory' minus the same data set), too low or too
 *     high; and for gpt with --checkpoint-activations.
 *   - A run that does not fit is refused before it allocates the model:
 *     AMPC_MEMORY_LIMIT below the estimate is exit 1 with the message
 *     (needed, available and from where, the biggest parts, what to try),
 *     and no training line; --no-memory-check runs it anyway.
 *   - The memory available: cgroup v2 and v1 limits read up the
 *     hierarchy from the process's cgroup (a made-up /proc and mounts),
 *     AMPC_MEMORY_LIMIT's sizes.
 *   - --dry-run prints the table (every category, total, available) and
 *     exits 0 without training; it resolves the options as the run would,
 *     a resumed checkpoint's settings included; a cuda run's estimate
 *     needs no GPU.
 */
#include "test_cli_util.h"

#include "estimate.h"
#include "memcheck.h"

static char images[256], text[256];

/* 28x28 images (the cnn's real shape), N of them in each split. */
static void write_images(const char *dir) { cli_write_noise_images(dir, 512, 1); }

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
                         "--data %s%s", text, model == 3 ? " --checkpoint-activations" : "");
    return buf;
}

static void test_estimate_is_within_tolerance_of_the_measured_peak(void)
{
    for (int m = 0; m < 4; m++) { /* mlp, cnn, gpt, gpt --checkpoint-activations */
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
            printf("  %-8s %s: estimate %.1f MiB, measured %.1f MiB (the data set's %.1f MiB apart), %+.1f%%\n",
                   m == 0 ? "mlp" : m == 1 ? "cnn" : m == 2 ? "gpt" : "gpt-ckpt", precisions[p], need, got, data, 100 * err);
            CHECK_MSG(err <= MEM_TOLERANCE && err >= -MEM_TOLERANCE,
                      "%s --precision %s: estimate %.1f MiB vs measured %.1f MiB (%+.1f%%, tolerance %.0f%%)", args,
                      precisions[p], need, got, 100 * err, 100 * MEM_TOLERANCE);
        }
    }
}

static void test_a_run_that_does_not_fit_is_refused_before_it_starts(void)
{
    const char *big = "train --model gpt --layers 4 --width 256 --heads 4 --context 64 --batch 32 --val-batches 1 "
                      "--threads 1 --precision fp32 --data";
    CHECK_EQ_INT(cli_run("%s %s --dry-run", big, text), 0);
    const char *tot = strstr(cli_out, "  total ");
    double need = tot ? atof(tot + 8 + strspn(tot + 8, " ")) : 0;
    CHECK_MSG(need * (1 - MEM_TOLERANCE) > 40.0 * 1048576, "the run (%.1f MiB) would fit in the 40 MiB cap:\n%s",
              need / 1048576, cli_out);

    CHECK_EQ_INT(cli_run_env("AMPC_MEMORY_LIMIT=40M", "%s %s --steps 1000", big, text), 1);
    CHECK_MSG(strstr(cli_out, "not enough memory for this run"), "no refusal:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "40.0 MiB are available") && strstr(cli_out, "(AMPC_MEMORY_LIMIT=40M)"),
              "what is available and from where is not said:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "the biggest parts: activation"), "the biggest parts are not named:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "--batch") && strstr(cli_out, "--accum") && strstr(cli_out, "bf16"),
              "no advice:\n%s", cli_out);
    /* refused before the model is built: the run's config lines come after it */
    CHECK_MSG(!strstr(cli_out, "model gpt") && !strstr(cli_out, "step "), "it started training:\n%s", cli_out);

    /* --no-memory-check, or AMPC_NO_MEMORY_CHECK=1, runs it anyway (one step) */
    CHECK_EQ_INT(cli_run_env("AMPC_MEMORY_LIMIT=40M", "%s %s --steps 1 --no-memory-check", big, text), 0);
    CHECK_MSG(strstr(cli_out, "val_loss"), "--no-memory-check did not run:\n%s", cli_out);
    CHECK_EQ_INT(cli_run_env("AMPC_MEMORY_LIMIT=40M AMPC_NO_MEMORY_CHECK=1", "%s %s --steps 1", big, text), 0);
    CHECK_MSG(strstr(cli_out, "val_loss"), "AMPC_NO_MEMORY_CHECK=1 did not run:\n%s", cli_out);
}

static void test_dry_run_prints_the_table_and_does_not_train(void)
{
    CHECK_EQ_INT(cli_run("train --model gpt --data %s --steps 1000000 --dry-run", text), 0);
    for (int c = 0; c < MEM_CATS; c++)
        CHECK_MSG(strstr(cli_out, mem_cat_name((mem_cat)c)), "no row %s:\n%s", mem_cat_name((mem_cat)c), cli_out);
    CHECK_MSG(strstr(cli_out, "  total "), "no total:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "available: "), "no available line:\n%s", cli_out);
    CHECK_MSG(!strstr(cli_out, "val_loss") && !strstr(cli_out, "step "), "it trained:\n%s", cli_out);
}

static void test_dry_run_takes_a_resumed_runs_settings(void)
{
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
    CHECK_EQ_INT(cli_run("train --model gpt --data %s --device cuda --dry-run", text), 0);
    CHECK_MSG(strstr(cli_out, "on the cuda device") && strstr(cli_out, "device memory available: "),
              "no device table:\n%s", cli_out);
}

/* Writes text into dir/name (dir made first). */
static void put(const char *dir, const char *name, const char *text)
{
    char cmd[1024], path[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

/* A made-up /proc/self and cgroup mounts: v2 with the limit on the
 * parent of the process's cgroup, v1's memory controller mounted from a
 * container's root; the smallest budget wins and names its files. */
static void test_cgroup_limits_are_read_up_the_hierarchy(void)
{
    char proc[512], v2[512], v1[512], dir[1024], text[2048];
    cli_path(proc, sizeof proc, "proc");
    cli_path(v2, sizeof v2, "cg2");
    cli_path(v1, sizeof v1, "cg1");
    snprintf(text, sizeof text,
             "25 1 0:22 / /proc rw - proc proc rw\n"
             "30 23 0:26 / %s rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
             "31 23 0:27 / /somewhere/cpu rw - cgroup cgroup rw,cpu\n"
             "40 23 0:30 /ctr %s rw - cgroup cgroup rw,memory\n",
             v2, v1);
    put(proc, "mountinfo", text);
    put(proc, "cgroup", "5:cpu:/ctr/job\n4:memory:/ctr/job\n0::/a/b\n");
    /* v2: /a/b has no limit, /a has 600 MiB with 100 MiB used, 10 MiB of it inactive file cache */
    snprintf(dir, sizeof dir, "%s/a/b", v2);
    put(dir, "memory.max", "max\n");
    put(dir, "memory.current", "1000\n");
    snprintf(dir, sizeof dir, "%s/a", v2);
    put(dir, "memory.max", "629145600\n");
    put(dir, "memory.current", "104857600\n");
    put(dir, "memory.stat", "anon 94371840\nfile 10485760\ninactive_file 10485760\n");
    /* v1, seen from the container (its root /ctr is the mount's root): job
     * has no limit (v1's huge number), the container 1 GiB */
    snprintf(dir, sizeof dir, "%s/job", v1);
    put(dir, "memory.limit_in_bytes", "9223372036854771712\n");
    put(dir, "memory.usage_in_bytes", "1000\n");
    put(v1, "memory.limit_in_bytes", "1073741824\n");
    put(v1, "memory.usage_in_bytes", "0\n");

    mem_budget b;
    memset(&b, 0, sizeof b);
    mem_budget_cgroups(&b, proc, 5 << 20);
    CHECK(b.known);
    CHECK_EQ_INT((long long)b.bytes, (600LL - 100 + 10 + 5) << 20);
    snprintf(dir, sizeof dir, "cgroup v2 %s/a: memory.max 600.0 MiB - memory.current 100.0 MiB", v2);
    CHECK_MSG(strstr(b.source, dir), "source: %s", b.source);

    /* v1's limit the smaller: it wins */
    put(v1, "memory.limit_in_bytes", "314572800\n");
    memset(&b, 0, sizeof b);
    mem_budget_cgroups(&b, proc, 0);
    CHECK_EQ_INT((long long)b.bytes, 300LL << 20);
    snprintf(dir, sizeof dir, "cgroup v1 %s: memory.limit_in_bytes 300.0 MiB", v1);
    CHECK_MSG(strstr(b.source, dir), "source: %s", b.source);

    /* no limit anywhere: nothing known */
    snprintf(dir, sizeof dir, "%s/a", v2);
    put(dir, "memory.max", "max\n");
    put(v1, "memory.limit_in_bytes", "9223372036854771712\n");
    memset(&b, 0, sizeof b);
    mem_budget_cgroups(&b, proc, 0);
    CHECK(!b.known);
}

static void test_memory_limit_takes_sizes_with_units(void)
{
    uint64_t v = 0;
    CHECK(mem_parse_bytes("600000000", &v) && v == 600000000ull);
    CHECK(mem_parse_bytes("600M", &v) && v == 600ull << 20);
    CHECK(mem_parse_bytes("4G", &v) && v == 4ull << 30);
    CHECK(mem_parse_bytes("512KiB", &v) && v == 512ull << 10);
    CHECK(mem_parse_bytes("2gb", &v) && v == 2ull << 30);
    CHECK(!mem_parse_bytes("", &v) && !mem_parse_bytes("-1", &v) && !mem_parse_bytes("1.5G", &v) &&
          !mem_parse_bytes("12 M", &v) && !mem_parse_bytes("99999999999999999999", &v) &&
          !mem_parse_bytes("20000000000G", &v));
}

int main(void)
{
    cli_init("memory");
    cli_path(images, sizeof images, "images");
    cli_path(text, sizeof text, "text.txt");
    write_images(images);
    cli_write_tiny_text(text);
    RUN_IF(cli_have_binary, test_estimate_is_within_tolerance_of_the_measured_peak);
    RUN_IF(cli_have_binary, test_a_run_that_does_not_fit_is_refused_before_it_starts);
    RUN_IF(cli_have_binary, test_dry_run_prints_the_table_and_does_not_train);
    RUN_IF(cli_have_binary, test_dry_run_takes_a_resumed_runs_settings);
    RUN_IF(cli_have_binary, test_dry_run_of_a_cuda_run_needs_no_gpu);
    RUN(test_cgroup_limits_are_read_up_the_hierarchy);
    RUN(test_memory_limit_takes_sizes_with_units);
    cli_cleanup();
    return harness_done();
}
