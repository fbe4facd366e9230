/*
 * test_cli_checkpoint_activations.c - `ampc train --model gpt
 * --checkpoint-activations` through the ampc program.
 *
 *   - The run logs the same steps as without the option, bit for bit (loss,
 *     lr, scale, grad norm as printed), and the same validation loss, for a
 *     gpt with dropout in fp16 with the grad scaler and gradient
 *     accumulation, and in bf16; its peak memory is lower.
 *   - The option is saved in the checkpoint's settings: a resumed run
 *     checkpoints again (its model line says so) and continues the
 *     straight run bit for bit; `ampc eval` of the checkpoint works.
 *   - A gpt run refused for lack of memory suggests the option.
 *   - For --model mlp / cnn it is refused (exit 2), naming the option.
 */
#include "test_cli_util.h"

static char text[256], images[256];

/* Whether logs a and b hold the same n step lines; says where not. */
static void check_same_logs(const char *what, const char *a, const char *b, int n)
{
    char *ba, *bb, *la[64], *lb[64];
    int na = cli_log_steps(a, la, 64, &ba), nb = cli_log_steps(b, lb, 64, &bb);
    CHECK_EQ_INT(na, n);
    CHECK_EQ_INT(nb, n);
    for (int i = 0; i < na && i < nb; i++)
        CHECK_MSG(strcmp(la[i], lb[i]) == 0, "%s: step %d differs:\n  %s\n  %s", what, i + 1, la[i], lb[i]);
    free(ba);
    free(bb);
}

static const char *gpt_args(char *buf, size_t n, const char *precision)
{
    snprintf(buf, n,
             "--model gpt --data %s --layers 2 --heads 2 --width 32 --context 32 --batch 8 --dropout 0.2 "
             "--lr 0.01 --val-batches 2 --threads 1 --precision %s --accum 2 --steps 8",
             text, precision);
    return buf;
}

static void test_same_steps_and_less_memory(void)
{
    const char *precisions[2] = {"fp16", "bf16"};
    for (int p = 0; p < 2; p++) {
        char args[1024], la[512], lb[512], name[64];
        gpt_args(args, sizeof args, precisions[p]);
        snprintf(name, sizeof name, "plain-%s.jsonl", precisions[p]);
        cli_path(la, sizeof la, name);
        snprintf(name, sizeof name, "ckpt-%s.jsonl", precisions[p]);
        cli_path(lb, sizeof lb, name);
        CLI_OK("train %s --log %s", args, la);
        double val = cli_value_after("val_loss "), peak = cli_value_after("peak memory ");
        CHECK_MSG(!strstr(cli_out, "checkpointed activations"), "checkpointing without the option:\n%s", cli_out);
        CLI_OK("train %s --checkpoint-activations --log %s", args, lb);
        CHECK_OUT("checkpointed activations");
        double val_ck = cli_value_after("val_loss "), peak_ck = cli_value_after("peak memory ");
        check_same_logs(precisions[p], la, lb, 8);
        CHECK_MSG(val > 0 && val == val_ck, "%s: val_loss %.4f without checkpointing, %.4f with", precisions[p], val,
                  val_ck);
        CHECK_MSG(peak_ck > 0 && peak_ck < peak, "%s: peak memory %.1f MiB with checkpointing, %.1f without",
                  precisions[p], peak_ck, peak);
    }
}

static void test_saved_and_resumed(void)
{
    char args[1024], la[512], lc[512], dir[512];
    gpt_args(args, sizeof args, "fp16");
    cli_path(la, sizeof la, "straight.jsonl");
    cli_path(lc, sizeof lc, "resumed.jsonl");
    cli_path(dir, sizeof dir, "ck");
    /* the straight run with the option; the same stopped at 4 and resumed
     * without it: the checkpoint's settings bring it back */
    CLI_OK("train %s --checkpoint-activations --log %s", args, la);
    CLI_OK("train %s --checkpoint-activations --stop-at 4 --save %s", args, dir);
    char ckfile[600];
    snprintf(ckfile, sizeof ckfile, "%s/checkpoint.safetensors", dir);
    char *body = cli_read_file(ckfile, NULL);
    CHECK_MSG(body && strstr(body + 8, "\\\"checkpoint-activations\\\":true"), "not in the checkpoint's settings");
    free(body);
    CLI_OK("train --resume %s --log %s", dir, lc);
    CHECK_OUT("resumed from");
    CHECK_OUT("checkpointed activations");
    char *ba, *bc, *a[64], *c[64];
    int na = cli_log_steps(la, a, 64, &ba), nc = cli_log_steps(lc, c, 64, &bc);
    CHECK_EQ_INT(na, 8);
    CHECK_EQ_INT(nc, 4);
    for (int i = 0; i < 4 && 4 + i < na && i < nc; i++)
        CHECK_MSG(strcmp(a[4 + i], c[i]) == 0, "step %d differs after resuming:\n  straight %s\n  resumed  %s", 5 + i,
                  a[4 + i], c[i]);
    free(ba);
    free(bc);
    int rc = cli_run("eval %s", dir);
    CHECK_MSG(rc == 0 && strstr(cli_out, "val_loss "), "eval: exit %d:\n%s", rc, cli_out);
    /* and --dry-run of the resumed run estimates it checkpointed */
    rc = cli_run("train --resume %s --dry-run", dir);
    CHECK_MSG(rc == 0 && strstr(cli_out, "checkpointed activations"), "dry run: exit %d:\n%s", rc, cli_out);
}

/* A gpt run that does not fit is told to try the option (and one that
 * has it is not). */
static void test_suggested_when_a_run_does_not_fit(void)
{
    const char *big = "train --model gpt --layers 4 --width 256 --heads 4 --context 64 --batch 32 --val-batches 1 "
                      "--threads 1 --steps 10 --data";
    for (int ck = 0; ck < 2; ck++) {
        int rc = cli_run_env("AMPC_MEMORY_LIMIT=20M", "%s %s%s", big, text, ck ? " --checkpoint-activations" : "");
        CHECK_MSG(rc == 1, "not refused:\n%s", cli_out);
        CHECK_OUT("not enough memory for this run");
        if (ck)
            CHECK_MSG(!strstr(cli_out, "--checkpoint-activations ("), "suggested though given:\n%s", cli_out);
        else
            CHECK_OUT("--checkpoint-activations (each block recomputed in backward)");
    }
}

static void test_refused_for_mlp_and_cnn(void)
{
    const char *models[2] = {"mlp", "cnn"};
    for (int m = 0; m < 2; m++) {
        int rc = cli_run("train --model %s --data %s --steps 1 --checkpoint-activations", models[m], images);
        CHECK_EQ_INT(rc, 2);
        CHECK_OUT("--checkpoint-activations applies to --model gpt only");
    }
    CHECK_EQ_INT(cli_run("train --model gpt --data %s --checkpoint-activations=yes", text), 2);
    CHECK_OUT("--checkpoint-activations: takes no value");
    CHECK_EQ_INT(cli_run("train --help"), 0);
    CHECK_OUT("--checkpoint-activations");
}

int main(void)
{
    cli_init_tiny("test-cli-ckpt-act", images, text);
    RUN_IF(cli_have_binary, test_same_steps_and_less_memory);
    RUN_IF(cli_have_binary, test_saved_and_resumed);
    RUN_IF(cli_have_binary, test_suggested_when_a_run_does_not_fit);
    RUN_IF(cli_have_binary, test_refused_for_mlp_and_cnn);
    cli_cleanup();
    return harness_done();
}
