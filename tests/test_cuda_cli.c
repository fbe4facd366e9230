/*
 * test_cuda_cli.c - `ampc train / eval --device cuda`, run as a user runs
 * it: the cnn on tiny images (against the CPU, resumed bit for bit, the
 * default fp16 with the scaler, the checkpoint evaluated on both devices)
 * and the GPT with --clip on tiny text (against the CPU, with and without
 * --log); the memory estimate's device part against the measured peak,
 * and a run refused when the device cannot hold it (on cudaemu, whose
 * device size CUDAEMU_MEM_MB sets). Skipped when the ampc binary is not
 * built beside this program.
 *
 * The ops are test_cuda.c's, training through the library
 * test_cuda_train.c's; what they share is cuda_rig.h.
 *
 * Without a GPU every test is reported as skipped (never as passed) and
 * the program exits 77, which CTest shows as "Skipped".
 */
#include "cuda_rig.h"
#include "test_cli_util.h"

#include "estimate.h"

/* ------------------------------------------------ ampc --device cuda */

static bool cli_ready;

/* The temp dir (made at the first call) and the ampc binary; false
 * (skipped) without the binary. */
static bool cli_setup(void)
{
    if (!cli_ready) {
        cli_init("test-cuda");
        cli_ready = true;
    }
    if (!cli_ampc[0]) { /* run by hand, without CTest's AMPC_BUILD_DIR: the ampc beside this program */
        char self[900];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) {
            self[len] = '\0';
            char *slash = strrchr(self, '/');
            if (slash)
                *slash = '\0';
            snprintf(cli_ampc, sizeof cli_ampc, "%s/ampc", self);
        }
    }
    return cli_have_binary();
}

/* The cnn on tiny images: a cuda run follows the cpu run in fp32; the
 * default precision on cuda is fp16 with the scaler; a cuda run stopped,
 * saved and resumed logs the same steps as one straight run, bit for bit;
 * its checkpoint evaluates the same on cuda and (nearly) on the cpu. */
static void test_cli_trains_and_checkpoints_on_cuda(void)
{
    if (!gpu() || !cli_setup())
        return;
    enum { STEPS = 8 };
    char tiny[256], lcpu[512], lcuda[512], la[512], lc[512], ck[512];
    cli_write_tiny_images(cli_path(tiny, sizeof tiny, "tiny"));
    cli_path(lcpu, sizeof lcpu, "cpu.jsonl");
    cli_path(lcuda, sizeof lcuda, "cuda.jsonl");
    cli_path(la, sizeof la, "a.jsonl");
    cli_path(lc, sizeof lc, "c.jsonl");
    cli_path(ck, sizeof ck, "ck");
    char common[1024];
    snprintf(common, sizeof common, "train --model cnn --data %s --batch 16 --threads 2 --schedule cosine", tiny);

    /* fp32: the same losses as the CPU's, to GEMM summation order */
    int rc = cli_run("%s --steps %d --precision fp32 --device cpu --log %s", common, STEPS, lcpu);
    CHECK_MSG(rc == 0, "cpu run: exit %d:\n%s", rc, cli_out);
    rc = cli_run("%s --steps %d --precision fp32 --device cuda --log %s", common, STEPS, lcuda);
    CHECK_MSG(rc == 0, "cuda run: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("on cuda");
    CHECK_OUT("peak device memory");
    CHECK_OUT("test_accuracy");
    double lc1[STEPS], lc2[STEPS];
    int n1 = cli_log_field(lcpu, "loss", lc1, NULL, STEPS), n2 = cli_log_field(lcuda, "loss", lc2, NULL, STEPS);
    CHECK_EQ_INT(n1, STEPS);
    CHECK_EQ_INT(n2, STEPS);
    for (int i = 0; i < n1 && i < n2; i++)
        CHECK_MSG(close_to(lc1[i], lc2[i], 1e-4), "fp32 step %d: loss %.7g on cuda, %.7g on the cpu", i + 1, lc2[i],
                  lc1[i]);

    /* the default precision there: fp16 with the scaler; no --log, so the
     * losses are read at the progress lines only */
    rc = cli_run("%s --steps %d --device cuda --log-every 4", common, STEPS);
    CHECK_MSG(rc == 0, "cuda fp16 run: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("precision fp16 with the grad scaler, on cuda");
    CHECK_OUT("scaler: final scale");
    CHECK_MSG(isfinite(cli_value_after("loss ")), "no finite loss in the progress lines:\n%s", cli_out);

    /* stop at STEPS / 2, save, resume: the same log as straight through */
    rc = cli_run("%s --steps %d --device cuda --log %s", common, STEPS, la);
    CHECK_MSG(rc == 0, "straight cuda run: exit %d:\n%s", rc, cli_out);
    rc = cli_run("%s --steps %d --stop-at %d --device cuda --save %s", common, STEPS, STEPS / 2, ck);
    CHECK_MSG(rc == 0, "first half: exit %d:\n%s", rc, cli_out);
    rc = cli_run("train --resume %s --device cuda --threads 2 --log %s", ck, lc);
    CHECK_MSG(rc == 0, "resumed half: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
    double acc = cli_value_after("test_accuracy ");
    const char *keys[3] = {"loss", "lr", "scale"};
    for (int k = 0; k < 3; k++) {
        double va[STEPS], vc[STEPS];
        char ta[STEPS][64], tc[STEPS][64];
        int na = cli_log_field(la, keys[k], va, ta, STEPS), nc = cli_log_field(lc, keys[k], vc, tc, STEPS);
        CHECK_EQ_INT(na, STEPS);
        CHECK_EQ_INT(nc, STEPS / 2);
        for (int i = 0; i < STEPS / 2 && i < nc && STEPS / 2 + i < na; i++)
            CHECK_MSG(strcmp(ta[STEPS / 2 + i], tc[i]) == 0, "resumed on cuda: step %d %s %s, straight %s",
                      STEPS / 2 + i + 1, keys[k], tc[i], ta[STEPS / 2 + i]);
    }
    /* the checkpoint: the same accuracy on cuda, about the same on the cpu */
    rc = cli_run("eval %s --device cuda", ck);
    CHECK_MSG(rc == 0, "eval on cuda: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(cli_value_after("test_accuracy ") == acc, "eval on cuda: accuracy %g, the run ended with %g",
              cli_value_after("test_accuracy "), acc);
    rc = cli_run("eval %s --device cpu", ck);
    CHECK_MSG(rc == 0, "eval on the cpu: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(fabs(cli_value_after("test_accuracy ") - acc) <= 0.02, "eval on the cpu: accuracy %g, cuda %g",
              cli_value_after("test_accuracy "), acc);
}

/* The progress lines' "step k/STEPS loss X" values and the val_loss of
 * the last run's output, into v[0..steps]; false if one is missing. */
static bool run_losses(int steps, double *v)
{
    bool ok = true;
    for (int k = 1; k <= steps; k++) {
        char label[48];
        snprintf(label, sizeof label, "step %d/%d loss ", k, steps);
        v[k - 1] = cli_value_after(label);
        ok = ok && strstr(cli_out, label) != NULL;
    }
    v[steps] = cli_value_after("val_loss ");
    return ok && strstr(cli_out, "val_loss ") != NULL;
}

/* ampc train --model gpt --clip on cuda (both refused before): fp32 follows
 * the CPU's run step for step, losses and grad norms (measured and clipped
 * on the device, read at each --log record), and the clipping bites (max
 * norm below the norms). Without --log nothing reads the norm
 * (amp_clip_grad_norm_tensor), and the run is the --log run, loss for loss
 * to the printed digits: still clipped (a run without --clip differs),
 * still the CPU's. */
static void test_cli_gpt_with_clip_on_cuda(void)
{
    if (!gpu() || !cli_setup())
        return;
    enum { STEPS = 6 };
    char text[256], lcpu[512], lcuda[512];
    cli_write_tiny_text(cli_path(text, sizeof text, "tiny.txt"));
    cli_path(lcpu, sizeof lcpu, "gpt-cpu.jsonl");
    cli_path(lcuda, sizeof lcuda, "gpt-cuda.jsonl");
    char common[1024];
    snprintf(common, sizeof common,
             "train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 8 --steps %d "
             "--lr 0.01 --val-batches 2 --threads 2 --precision fp32 --log-every 1",
             text, STEPS);
    double cpu[STEPS + 1], logged[STEPS + 1], quiet[STEPS + 1], unclipped[STEPS + 1];
    int rc = cli_run("%s --clip 0.05 --device cpu --log %s", common, lcpu);
    CHECK_MSG(rc == 0, "gpt cpu run: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(run_losses(STEPS, cpu), "gpt cpu run: a loss is missing:\n%s", cli_out);
    rc = cli_run("%s --clip 0.05 --device cuda --log %s", common, lcuda);
    CHECK_MSG(rc == 0, "gpt cuda run: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("on cuda");
    CHECK_MSG(run_losses(STEPS, logged) && isfinite(logged[STEPS]), "gpt cuda run: a loss is missing:\n%s", cli_out);
    const char *keys[2] = {"loss", "grad_norm"};
    for (int k = 0; k < 2; k++) {
        double a[STEPS], b[STEPS];
        int na = cli_log_field(lcpu, keys[k], a, NULL, STEPS), nb = cli_log_field(lcuda, keys[k], b, NULL, STEPS);
        CHECK_EQ_INT(na, STEPS);
        CHECK_EQ_INT(nb, STEPS);
        for (int i = 0; i < na && i < nb; i++) {
            CHECK_MSG(isfinite(b[i]) && close_to(a[i], b[i], 1e-4), "gpt step %d: %s %.7g on cuda, %.7g on the cpu",
                      i + 1, keys[k], b[i], a[i]);
            if (k == 1)
                CHECK_MSG(b[i] > 0.05, "gpt step %d: grad norm %g is not above --clip 0.05", i + 1, b[i]);
        }
    }

    rc = cli_run("%s --clip 0.05 --device cuda", common);
    CHECK_MSG(rc == 0, "gpt cuda run without --log: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(run_losses(STEPS, quiet), "gpt cuda run without --log: a loss is missing:\n%s", cli_out);
    rc = cli_run("%s --device cuda", common);
    CHECK_MSG(rc == 0, "gpt cuda run without --clip: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(run_losses(STEPS, unclipped), "gpt cuda run without --clip: a loss is missing:\n%s", cli_out);
    for (int i = 0; i <= STEPS; i++) {
        const char *what = i < STEPS ? "loss" : "val_loss";
        CHECK_MSG(quiet[i] == logged[i], "gpt step %d: %s %.4f without --log, %.4f with", i + 1, what, quiet[i],
                  logged[i]);
        CHECK_MSG(close_to(cpu[i], quiet[i], 2e-4), "gpt step %d: %s %.4f on cuda, %.4f on the cpu", i + 1, what,
                  quiet[i], cpu[i]);
    }
    CHECK_MSG(unclipped[STEPS] != quiet[STEPS], "val_loss %.4f with --clip 0.05 and without: not clipped?",
              quiet[STEPS]);
}

/* 28x28 images (the cnn's real shape), 160 of each split: an evaluation
 * pass of 128, as with Fashion-MNIST. */
static void write_images(const char *dir) { cli_write_noise_images(dir, 160, 3); }

/* --dry-run's device total and a 2-step run's 'peak device memory' agree
 * within MEM_TOLERANCE (10%, tools/estimate.h) for the three models in each
 * precision (AMPC_TEST_QUICK=1: fp16 only). */
static void test_cli_device_memory_estimate_meets_the_peak(void)
{
    if (!gpu() || !cli_setup())
        return;
    char images[256], text[256];
    cli_path(images, sizeof images, "images28");
    write_images(images);
    cli_write_tiny_text(cli_path(text, sizeof text, "mem.txt"));
    const char *precisions[3] = {"fp32", "bf16", "fp16"};
    for (int m = 0; m < 3; m++) {
        char args[1024];
        if (m == 0)
            snprintf(args, sizeof args, "--model mlp --hidden 1024 --batch 256 --data %s", images);
        else if (m == 1)
            snprintf(args, sizeof args, "--model cnn --batch 16 --data %s", images);
        else
            snprintf(args, sizeof args, "--model gpt --layers 2 --width 64 --heads 4 --context 32 --batch 8 "
                                        "--val-batches 1 --data %s", text);
        const char *quick = getenv("AMPC_TEST_QUICK"); /* sanitizers: fp16, cuda's default, only */
        for (int p = quick && *quick == '1' ? 2 : 0; p < 3; p++) {
            if (p == 1 && !amp_cuda_bf16_supported())
                continue;
            int rc = cli_run("train %s --device cuda --precision %s --threads 2 --dry-run", args, precisions[p]);
            CHECK_MSG(rc == 0, "%s %s --dry-run: exit %d:\n%s", args, precisions[p], rc, cli_out);
            const char *dev = strstr(cli_out, "on the cuda device");
            const char *tot = dev ? strstr(dev, "  total ") : NULL;
            double est = tot ? atof(tot + 8 + strspn(tot + 8, " ")) : -1; /* bytes */
            rc = cli_run("train %s --device cuda --precision %s --threads 2 --steps 2", args, precisions[p]);
            CHECK_MSG(rc == 0, "%s %s: exit %d:\n%s", args, precisions[p], rc, cli_out);
            double peak = cli_value_after("peak device memory ") * 1024 * 1024;
            CHECK_MSG(est > 0 && peak > 0, "%s %s: no estimate or peak", args, precisions[p]);
            double err = est / peak - 1;
            printf("  %-5s %s: device estimate %.1f MiB, measured %.1f MiB, %+.1f%%\n",
                   m == 0 ? "mlp" : m == 1 ? "cnn" : "gpt", precisions[p], est / 1048576, peak / 1048576, 100 * err);
            CHECK_MSG(err <= MEM_TOLERANCE && err >= -MEM_TOLERANCE, "%s %s: device estimate %.1f MiB vs %.1f MiB",
                      args, precisions[p], est / 1048576, peak / 1048576);
        }
    }
}

/* On cudaemu, a device of 40 MiB: the cnn's eval pass (its im2col
 * workspace for 128 images and cuBLASLt's 32 MiB) cannot fit, and the run
 * stops before it moves anything there. */
static void test_cli_refuses_a_run_the_device_cannot_hold(void)
{
#ifndef AMPC_CUDA_EMU
    harness_skip("needs cudaemu (CUDAEMU_MEM_MB sets its device's size)");
    return;
#endif
    if (!gpu() || !cli_setup())
        return;
    char images[256], cmd[2048];
    cli_path(images, sizeof images, "images28");
    write_images(images);
    snprintf(cmd, sizeof cmd, "CUDAEMU_MEM_MB=40 '%s' train --model cnn --batch 16 --data %s --device cuda "
             "--steps 2 --threads 2 2>&1", cli_ampc, images);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    size_t n = fread(cli_out, 1, sizeof cli_out - 1, f);
    cli_out[n] = '\0';
    int st = pclose(f);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 1);
    CHECK_MSG(strstr(cli_out, "not enough device memory for this run") && strstr(cli_out, "cudaMemGetInfo"),
              "no refusal naming the device:\n%s", cli_out);
    CHECK_MSG(!strstr(cli_out, "on cuda\n") && !strstr(cli_out, "peak device memory"), "it trained:\n%s", cli_out);
}

/* --health-every on cuda: the gradients and the scale read at those
 * steps only; the log's f16_* keys at steps 2 and 4 (the scaled ones
 * too: fp16 with the scaler), and the progress line's report without
 * --log. */
static void test_cli_health_every_on_cuda(void)
{
    if (!gpu() || !cli_setup())
        return;
    char tiny[256], log[512];
    cli_write_tiny_images(cli_path(tiny, sizeof tiny, "tiny-h"));
    cli_path(log, sizeof log, "health.jsonl");
    const char *common = "train --model mlp --hidden 8 --batch 16 --threads 2 --steps 4 --device cuda "
                         "--precision fp16 --health-every 2";
    CLI_OK("%s --data %s --log %s", common, tiny, log);
    double v[8];
    CHECK_EQ_INT(cli_log_field(log, "f16_zero", v, NULL, 8), 2);
    CHECK_EQ_INT(cli_log_field(log, "f16_flush_scaled", v, NULL, 8), 2);
    CHECK_EQ_INT(cli_log_field(log, "f16_subnormal", v, NULL, 8), 2);
    for (int i = 0; i < 2; i++)
        CHECK(v[i] >= 0 && v[i] <= 1);
    CLI_OK("%s --data %s --log-every 2", common, tiny);
    CHECK_OUT("f16 health of the gradients at step 4: zero ");
    CHECK_OUT("; at scale ");
}

int main(void)
{
    RUN(test_cli_trains_and_checkpoints_on_cuda);
    RUN(test_cli_gpt_with_clip_on_cuda);
    RUN(test_cli_device_memory_estimate_meets_the_peak);
    RUN(test_cli_refuses_a_run_the_device_cannot_hold);
    RUN(test_cli_health_every_on_cuda);
    if (cli_ready)
        cli_cleanup();
    return cuda_rig_done();
}
