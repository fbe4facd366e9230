/*
 * test_cli_resume.c - checkpoints through the ampc program.
 *
 *   - Resuming is exact: a run of 2N steps and a run of N steps saved and
 *     resumed for N more log the same steps N+1..2N, bit for bit (loss,
 *     lr, scale, skipped, grad norm as printed), for an mlp in fp16 with
 *     the grad scaler (a huge initial scale and a short growth interval
 *     make the scaler's state matter), a cnn with momentum SGD, and a tiny
 *     gpt with dropout (the generator's state matters) stopped mid-run
 *     with --stop-at under a cosine schedule.
 *   - `ampc eval DIR` measures the saved model as the run did.
 *   - A resumed run keeps the model's shape: a conflicting --hidden /
 *     --model / --optim is exit 2, naming it.
 *   - A corrupt or truncated checkpoint is a clear error naming the file,
 *     exit 1, and the file is left as it was (nothing overwritten).
 *   - A number out of its range in a checkpoint (the step, a counter, a
 *     saved setting or run value) is exit 1 naming the file, the field,
 *     the value and the range, without a crash or UBSan report; options
 *     near INT64_MAX are exit 2 naming their range.
 *   - A resumed run's final checkpoint is the straight run's, byte for
 *     byte (the scaler's counters included), also one saved with 16-bit
 *     parameters before any step was taken (no f32 masters yet).
 */
#include "test_cli_util.h"

static char tiny[256], text[256];

/* Runs `args` for 2n steps straight (log A), and for n steps, saved, then
 * resumed (`resume_args` appended) for the rest (log C); steps n+1..2n of
 * A and C must be the same text. `first` gives the first part's length
 * options ("--steps n" or "--steps 2n --stop-at n"). */
static void check_resume(const char *what, const char *args, const char *first, const char *resume_args, int n)
{
    char la[512], lb[512], lc[512], dir[512];
    char name[128];
    snprintf(name, sizeof name, "%s-a.jsonl", what);
    cli_path(la, sizeof la, name);
    snprintf(name, sizeof name, "%s-b.jsonl", what);
    cli_path(lb, sizeof lb, name);
    snprintf(name, sizeof name, "%s-c.jsonl", what);
    cli_path(lc, sizeof lc, name);
    snprintf(name, sizeof name, "%s-ck", what);
    cli_path(dir, sizeof dir, name);

    int rc = cli_run("train %s --steps %d --log %s", args, 2 * n, la);
    CHECK_MSG(rc == 0, "%s: the straight run: exit %d:\n%s", what, rc, cli_out);
    rc = cli_run("train %s %s --save %s --log %s", args, first, dir, lb);
    CHECK_MSG(rc == 0, "%s: the first half: exit %d:\n%s", what, rc, cli_out);
    rc = cli_run("train --resume %s %s --log %s", dir, resume_args, lc);
    CHECK_MSG(rc == 0, "%s: the resumed half: exit %d:\n%s", what, rc, cli_out);
    CHECK_OUT("resumed from");

    char *ba, *bb, *bc, *a[256], *b[256], *c[256];
    int na = cli_log_steps(la, a, 256, &ba), nb = cli_log_steps(lb, b, 256, &bb), nc = cli_log_steps(lc, c, 256, &bc);
    CHECK_EQ_INT(na, 2 * n);
    CHECK_EQ_INT(nb, n);
    CHECK_EQ_INT(nc, n);
    for (int i = 0; i < n && i < nb && i < na; i++)
        CHECK_MSG(strcmp(a[i], b[i]) == 0, "%s: step %d differs before the save:\n  %s\n  %s", what, i + 1, a[i], b[i]);
    for (int i = 0; i < n && n + i < na && i < nc; i++)
        CHECK_MSG(strcmp(a[n + i], c[i]) == 0, "%s: step %d differs after resuming:\n  straight %s\n  resumed  %s",
                  what, n + i + 1, a[n + i], c[i]);
    free(ba);
    free(bb);
    free(bc);
}

static void test_resumed_mlp_fp16_with_scaler_continues_bit_for_bit(void)
{
    char args[1024];
    /* 2^24 skips the first steps; growth every 3 clean steps then grows
     * it back into overflow now and then: skips on both sides of the save. */
    snprintf(args, sizeof args,
             "--model mlp --data %s --hidden 8 --batch 16 --threads 1 --seed 11 --precision fp16 "
             "--init-scale 16777216 --growth-interval 3 --lr 0.01 --warmup 4",
             tiny);
    check_resume("mlp", args, "--steps 10", "--steps 20", 10);
    /* The log shows both kinds of steps, so the scaler's state was at stake. */
    char path[512];
    char *body = cli_read_file(cli_path(path, sizeof path, "mlp-a.jsonl"), NULL);
    CHECK(body && strstr(body, "\"skipped\":true") && strstr(body, "\"skipped\":false"));
    free(body);
}

static void test_resumed_cnn_with_momentum_continues_bit_for_bit(void)
{
    char args[1024];
    /* --batch 100 of 256 rows: two batches an epoch, so 6 steps cross epochs. */
    snprintf(args, sizeof args, "--model cnn --data %s --batch 100 --threads 1 --optim sgd --lr 0.05 --precision bf16 "
             "--schedule constant",
             tiny);
    check_resume("cnn", args, "--steps 3", "--steps 6", 3);
}

static void test_resumed_gpt_stopped_mid_cosine_continues_bit_for_bit(void)
{
    char args[1024];
    snprintf(args, sizeof args,
             "--model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 4 --dropout 0.1 "
             "--schedule cosine --lr 0.01 --val-batches 2 --threads 1 --precision fp16 --growth-interval 2 "
             "--accum 2",
             text);
    check_resume("gpt", args, "--steps 12 --stop-at 6", "", 6);
}

static void test_eval_of_a_checkpoint_matches_the_run(void)
{
    char dir[512];
    cli_path(dir, sizeof dir, "evalck");
    CLI_OK("train --model mlp --data %s --hidden 8 --batch 16 --steps 20 --threads 1 --save %s", tiny, dir);
    double acc = cli_value_after("test_accuracy ");
    CHECK_EQ_INT(cli_run("eval %s --threads 1", dir), 0);
    CHECK_NEAR(cli_value_after("test_accuracy "), acc, 0);
    CHECK_OUT("step 20");
    CHECK_EQ_INT(cli_run("eval --resume %s", dir), 0);
    CHECK_NEAR(cli_value_after("test_accuracy "), acc, 0);

    cli_path(dir, sizeof dir, "evalgpt");
    CLI_OK("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 4 --steps 5 "
           "--val-batches 3 --threads 1 --save %s",
           text, dir);
    double val = cli_value_after("val_loss ");
    CHECK_EQ_INT(cli_run("eval %s", dir), 0);
    CHECK_NEAR(cli_value_after("val_loss "), val, 0);
    CHECK_OUT("perplexity");
}

static void test_resume_refuses_a_different_model_shape(void)
{
    char dir[512];
    cli_path(dir, sizeof dir, "shapeck");
    CLI_OK("train --model mlp --data %s --hidden 8 --batch 16 --steps 2 --threads 1 --save %s", tiny, dir);
    char *before = cli_read_file(cli_path((char[600]){0}, 600, "shapeck/checkpoint.safetensors"), NULL);
    CHECK_EQ_INT(cli_run("train --resume %s --hidden 9", dir), 2);
    CHECK_OUT("--hidden 9 conflicts");
    CHECK_OUT("saved with --hidden 8");
    CHECK_EQ_INT(cli_run("train --resume %s --model cnn", dir), 2);
    CHECK_OUT("--model cnn conflicts");
    CHECK_EQ_INT(cli_run("train --resume %s --optim sgd", dir), 2);
    CHECK_OUT("--optim sgd conflicts");
    /* The same shape given again is fine, and so is a new length. */
    CHECK_EQ_INT(cli_run("train --resume %s --hidden 8 --steps 3", dir), 0);
    CHECK_OUT("resumed from");
    free(before);
}

/* Copies src to dst with `keep` bytes, or with byte `at` replaced. */
static bool copy_damaged(const char *src, const char *dst, long keep, long at)
{
    size_t n;
    char *p = cli_read_file(src, &n);
    if (!p)
        return false;
    if (keep >= 0 && (size_t)keep < n)
        n = (size_t)keep;
    if (at >= 0 && (size_t)at < n)
        p[at] = '}';
    FILE *f = fopen(dst, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f)
        fclose(f);
    free(p);
    return ok;
}

static void test_corrupt_or_truncated_checkpoint_is_a_clear_error_and_untouched(void)
{
    char good[512], goodfile[600];
    cli_path(good, sizeof good, "good");
    CLI_OK("train --model mlp --data %s --hidden 8 --batch 16 --steps 2 --threads 1 --save %s", tiny, good);
    snprintf(goodfile, sizeof goodfile, "%s/checkpoint.safetensors", good);
    size_t full;
    char *orig = cli_read_file(goodfile, &full);
    CHECK(orig != NULL);
    if (!orig)
        return;
    struct {
        const char *name;
        long keep, at;
        const char *why;
    } cases[] = {
        {"short", 4, -1, "truncated"},              /* not even the header length */
        {"halfheader", 40, -1, "truncated"},        /* inside the JSON header */
        {"halfdata", (long)full / 2, -1, "ckpt"},   /* inside the tensors */
        {"badjson", -1, 20, "ckpt"},                /* a '}' in the header's JSON */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512], file[600];
        cli_path(dir, sizeof dir, cases[i].name);
        mkdir(dir, 0700);
        snprintf(file, sizeof file, "%s/checkpoint.safetensors", dir);
        CHECK(copy_damaged(goodfile, file, cases[i].keep, cases[i].at));
        size_t n0 = 0;
        char *before = cli_read_file(file, &n0);
        for (int cmd = 0; cmd < 2; cmd++) {
            int rc = cmd == 0 ? cli_run("train --resume %s --steps 4", dir) : cli_run("eval %s", dir);
            CHECK_MSG(rc == 1, "%s (%s): exit %d, expected 1:\n%s", cases[i].name, cmd ? "eval" : "train", rc, cli_out);
            CHECK_OUT(file);
            CHECK_MSG(strstr(cli_out, "Segmentation") == NULL && strstr(cli_out, "Sanitizer") == NULL, "%s", cli_out);
            if (strcmp(cases[i].why, "ckpt") != 0)
                CHECK_OUT(cases[i].why);
        }
        size_t n1 = 0;
        char *after = cli_read_file(file, &n1);
        CHECK_MSG(before && after && n0 == n1 && memcmp(before, after, n0) == 0, "%s: the checkpoint changed",
                  cases[i].name);
        free(before);
        free(after);
    }
    /* A missing checkpoint names the file too. */
    CHECK_EQ_INT(cli_run("train --resume %s/nothing-here", tmpdir), 1);
    CHECK_OUT("nothing-here/checkpoint.safetensors");
    free(orig);
}

/* Copies checkpoint src to dst with the number after `pattern` in its
 * header (a __metadata__ value, or one inside the settings' escaped JSON)
 * replaced by val; the header's length is rewritten to match. */
static bool edit_number(const char *src, const char *dst, const char *pattern, const char *val)
{
    size_t n;
    char *p = cli_read_file(src, &n);
    if (!p || n < 8)
        return false;
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | (unsigned char)p[i];
    char *hdr = strndup(p + 8, (size_t)h), *at = strstr(hdr, pattern);
    bool ok = at != NULL;
    if (ok) {
        char *v = at + strlen(pattern), *end = v + strspn(v, "-0123456789");
        size_t k = (size_t)(v - hdr), nh = k + strlen(val) + strlen(end);
        char *out = malloc(8 + nh + (n - 8 - (size_t)h));
        memcpy(out + 8, hdr, k);
        memcpy(out + 8 + k, val, strlen(val));
        memcpy(out + 8 + k + strlen(val), end, strlen(end));
        memcpy(out + 8 + nh, p + 8 + h, n - 8 - (size_t)h);
        for (int i = 0; i < 8; i++)
            out[i] = (char)((uint64_t)nh >> (8 * i));
        FILE *f = fopen(dst, "wb");
        ok = f && fwrite(out, 1, 8 + nh + (n - 8 - (size_t)h), f) == 8 + nh + (n - 8 - (size_t)h);
        if (f)
            fclose(f);
        free(out);
    }
    free(hdr);
    free(p);
    return ok;
}

#define NO_CRASH()                                                                                             \
    CHECK_MSG(!strstr(cli_out, "Segmentation") && !strstr(cli_out, "Sanitizer") &&                           \
                  !strstr(cli_out, "runtime error"),                                                          \
              "a crash or undefined behaviour:\n%s", cli_out)

/* A checkpoint whose step is -5 would have --resume read before the
 * batcher's index array, a saved counter near INT64_MAX overflow in
 * train.c: every number is range-checked on load, the error names the
 * file, the field, the value and the range. */
static void test_out_of_range_checkpoint_numbers_are_clear_errors(void)
{
    char good[512], goodfile[600];
    cli_path(good, sizeof good, "ranges");
    CLI_OK("train --model mlp --data %s --hidden 8 --batch 16 --steps 4 --threads 1 --precision fp16 "
           "--save %s",
           tiny, good);
    snprintf(goodfile, sizeof goodfile, "%s/checkpoint.safetensors", good);
    /* cmds: which commands refuse it, train 1 and / or eval 2: eval does
     * not read the optimizer's and scaler's state or the schedule's
     * counts; train builds the model for its data's classes (a
     * checkpoint claiming more then loads as it should). */
    static const struct {
        const char *pattern, *val, *needle;
        int cmds;
    } cases[] = {
        {"\"step\":\"", "-5", "__metadata__ \"step\" is -5, outside [0, 9007199254740992]", 3},
        {"\"step\":\"", "9223372036854775000", "\"step\" is 9223372036854775000, outside [0, ", 3},
        {"\"scaler.growth_tracker\":\"", "9223372036854775807", "\"scaler.growth_tracker\" is 9223372036854775807", 1},
        {"\"scaler.steps\":\"", "-1", "\"scaler.steps\" is -1, outside [0, ", 1},
        {"\\\"sched_step\\\":", "9223372036854775807",
         "the saved run value \"sched_step\" is 9223372036854775807, outside [0, 1000000000000]", 3},
        {"\\\"skipped\\\":", "9223372036854775807",
         "the saved run value \"skipped\" is 9223372036854775807, outside [0, 1000000000000]", 3},
        {"\\\"skipped\\\":", "1", "sched_step 4 + skipped 1 are not the step 4 it was saved at", 1},
        {"\\\"features\\\":", "17", "features 17 is not height 4 x width 4", 3},
        /* 2^32 - 1 classes: a 34-billion-weight layer (ASan aborted on the allocation) */
        {"\\\"classes\\\":", "4294967295", "its settings describe a model of at least 34359738488 parameters",
         false},
        {"\\\"steps\\\":", "9223372036854775807", "--steps: '9223372036854775807' is not a whole number from 1 to",
         false},
        {"\\\"batch\\\":", "9223372036854775807", "--batch: '9223372036854775807' is not a whole number", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512], file[600];
        snprintf(dir, sizeof dir, "%s/bad%zu", tmpdir, i);
        mkdir(dir, 0700);
        snprintf(file, sizeof file, "%s/checkpoint.safetensors", dir);
        CHECK_MSG(edit_number(goodfile, file, cases[i].pattern, cases[i].val), "cannot edit %s", cases[i].pattern);
        for (int cmd = 0; cmd < 2; cmd++) {
            if (!(cases[i].cmds & (1 << cmd)))
                continue;
            int rc = cmd == 0 ? cli_run("train --resume %s --steps 10", dir) : cli_run("eval %s", dir);
            CHECK_MSG(rc == 1, "%s = %s (%s): exit %d, expected 1:\n%s", cases[i].pattern, cases[i].val,
                      cmd ? "eval" : "train", rc, cli_out);
            CHECK_OUT(file);
            CHECK_OUT(cases[i].needle);
            NO_CRASH();
        }
    }
}

/* Options near INT64_MAX on the command line are refused, naming the
 * option and the range, before any product of them is formed. */
static void test_huge_options_are_refused_with_their_range(void)
{
    static const char *opts[] = {"steps", "epochs", "batch", "accum", "save-every", "stop-at", "warmup"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        int rc = cli_run("train --model mlp --data %s --%s 9223372036854775807", tiny, opts[i]);
        CHECK_MSG(rc == 2, "--%s: exit %d, expected 2:\n%s", opts[i], rc, cli_out);
        char want[128];
        snprintf(want, sizeof want, "--%s: '9223372036854775807' is not a whole number from", opts[i]);
        CHECK_OUT(want);
        NO_CRASH();
    }
}

/* The scaler's steps / skipped counters continue on resume, with the rest:
 * the resumed run's checkpoint is the straight run's, byte for byte. */
static void test_resumed_run_saves_the_straight_runs_checkpoint_byte_for_byte(void)
{
    char args[1024], a[512], b[512], fa[600];
    snprintf(args, sizeof args,
             "--model mlp --data %s --hidden 8 --batch 16 --threads 1 --seed 11 --precision fp16 "
             "--init-scale 16777216 --growth-interval 3 --lr 0.01 --warmup 4 --steps 20",
             tiny);
    cli_path(a, sizeof a, "same-a");
    cli_path(b, sizeof b, "same-b");
    CLI_OK("train %s --save %s", args, a);
    CLI_OK("train %s --stop-at 10 --save %s", args, b);
    CLI_OK("train --resume %s", b);
    snprintf(fa, sizeof fa, "%s/checkpoint.safetensors", a);
    size_t na = 0;
    char *pa = cli_read_file(fa, &na), why[512];
    CHECK_MSG(pa && na > 8 && strstr(pa + 8, "\"scaler.skipped\":\"") && !strstr(pa + 8, "\"scaler.skipped\":\"0\""),
              "the run should skip steps"); /* (the header after its 8-byte length) */
    free(pa);
    CHECK_MSG(cli_same_checkpoint(a, b, why, sizeof why), "%s", why);
}

/* 16-bit parameters keep f32 masters in the optimizer only after its
 * first step: a run whose every step so far was skipped saves 2 bytes a
 * parameter. Such a checkpoint loads (the size check counts the storage
 * dtype), evaluates, and resumes to the straight run's file. */
static void test_16bit_weights_saved_before_any_step_load_and_resume(void)
{
    char args[1024], a[512], b[512], why[512];
    /* The huge scale overflows every gradient; the tiny backoff brings it
     * down to where steps are taken after the first skip. A wide layer:
     * the weights, not the header, make most of the file. */
    snprintf(args, sizeof args,
             "--model mlp --data %s --hidden 1024 --batch 16 --threads 1 --precision fp16 --param-dtype fp16 "
             "--init-scale 1e30 --backoff-factor 1e-26 --steps 3",
             tiny);
    cli_path(a, sizeof a, "p16-a");
    cli_path(b, sizeof b, "p16-b");
    CLI_OK("train %s --save %s", args, a);
    int rc = cli_run("train %s --stop-at 1 --save %s", args, b);
    CHECK_MSG(rc == 0 && strstr(cli_out, "skipped 1"), "the first step should be skipped: exit %d:\n%s", rc, cli_out);
    rc = cli_run("eval %s", b);
    CHECK_MSG(rc == 0 && strstr(cli_out, "test_accuracy"), "eval: exit %d:\n%s", rc, cli_out);
    rc = cli_run("train --resume %s", b);
    CHECK_MSG(rc == 0 && strstr(cli_out, "resumed from"), "resume: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(cli_same_checkpoint(a, b, why, sizeof why), "the resumed run's checkpoint: %s", why);
}

/* --stop-at at or before the step a checkpoint was saved at would train
 * nothing: refused naming both steps, not exit 0 without a word, and the
 * checkpoint is left as it was. */
static void test_stop_at_not_after_the_saved_step_is_refused(void)
{
    char dir[512], f[600];
    cli_path(dir, sizeof dir, "stop-at");
    CLI_OK("train --model mlp --data %s --hidden 8 --batch 16 --threads 1 --steps 8 --stop-at 4 --save %s",
           tiny, dir);
    snprintf(f, sizeof f, "%s/checkpoint.safetensors", dir);
    size_t n0 = 0, n1 = 0;
    char *before = cli_read_file(f, &n0);
    const int stops[] = {2, 4};
    for (int i = 0; i < 2; i++) {
        int rc = cli_run("train --resume %s --stop-at %d", dir, stops[i]);
        char want[128];
        snprintf(want, sizeof want, "--stop-at %d is not after step 4, where", stops[i]);
        CHECK_MSG(rc == 2 && strstr(cli_out, want) && strstr(cli_out, "train on to step 8"), "--stop-at %d: exit %d:\n%s",
                  stops[i], rc, cli_out);
    }
    char *after = cli_read_file(f, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    int rc = cli_run("train --resume %s --stop-at 5", dir);
    CHECK_MSG(rc == 0 && strstr(cli_out, "stopped at step 5 of 8"), "exit %d:\n%s", rc, cli_out);
}

int main(void)
{
    cli_init_tiny("test-cli-resume", tiny, text);
    RUN_IF(cli_have_binary, test_resumed_mlp_fp16_with_scaler_continues_bit_for_bit);
    RUN_IF(cli_have_binary, test_resumed_cnn_with_momentum_continues_bit_for_bit);
    RUN_IF(cli_have_binary, test_resumed_gpt_stopped_mid_cosine_continues_bit_for_bit);
    RUN_IF(cli_have_binary, test_eval_of_a_checkpoint_matches_the_run);
    RUN_IF(cli_have_binary, test_resume_refuses_a_different_model_shape);
    RUN_IF(cli_have_binary, test_corrupt_or_truncated_checkpoint_is_a_clear_error_and_untouched);
    RUN_IF(cli_have_binary, test_out_of_range_checkpoint_numbers_are_clear_errors);
    RUN_IF(cli_have_binary, test_huge_options_are_refused_with_their_range);
    RUN_IF(cli_have_binary, test_resumed_run_saves_the_straight_runs_checkpoint_byte_for_byte);
    RUN_IF(cli_have_binary, test_16bit_weights_saved_before_any_step_load_and_resume);
    RUN_IF(cli_have_binary, test_stop_at_not_after_the_saved_step_is_refused);
    cli_cleanup();
    return harness_done();
}
