/*
 * test_cli_scaler.c - the grad scaler's knobs and the Quick Check through
 * the ampc program.
 *
 *   - Each knob's effect, read from the log's per-step scale and skipped
 *     flags: --growth-interval 2 doubles the scale every 2 clean steps,
 *     --growth-factor multiplies by it, --backoff-factor shrinks by it at
 *     an overflow, --hysteresis 2 backs off at the 2nd overflow only,
 *     --min-scale / --max-scale bound it, --static-scale holds it (and
 *     still skips the steps with inf/NaN gradients).
 *   - Bad values and combinations: exit 2 with a message naming the
 *     option (and the range, or the option it conflicts with).
 *   - Resume: the knobs are saved settings; a run stopped and resumed
 *     logs the straight run's losses and scales bit for bit; a knob given
 *     anew replaces the saved one from the resumed step on; a dynamic knob
 *     against a checkpoint's --static-scale is exit 2.
 *   - --health-every N: the log's f16_* keys at every N-th step only
 *     (the *_scaled ones with the scaler only), the progress line's
 *     report, `ampc plot`'s panel.
 *   - The stall: a deep narrow mlp whose fp16 gradients flush to zero
 *     without the scaler: the unscaled run's gradients are mostly exactly
 *     zero and its loss stays at chance, while the scaled run learns
 *     (docs/precision-table.md has the Fashion-MNIST run).
 */
#include "test_cli_util.h"

#include "checkpoint_cli.h"

#include <math.h>

static char tiny[256];

enum { MAX_STEPS = 256 };

typedef struct {
    int n;
    double scale[MAX_STEPS], loss[MAX_STEPS];
    bool skipped[MAX_STEPS];
    char text[MAX_STEPS][64]; /* the loss as logged: exact comparisons */
} run_log;

/* The log's lines, whole (cli_log_steps cuts them at step_ms). */
static int log_lines(const char *path, char **lines, int max, char **body)
{
    *body = cli_read_file(path, NULL);
    return *body ? cli_lines(*body, lines, max) : 0;
}

/* The step lines of the log at path. */
static bool read_log(const char *path, run_log *r)
{
    char *lines[MAX_STEPS], *body = NULL;
    r->n = cli_log_steps(path, lines, MAX_STEPS, &body);
    if (!body)
        return false;
    for (int i = 0; i < r->n; i++) {
        char v[64];
        r->scale[i] = cli_json_field(lines[i], "scale", v, sizeof v) ? atof(v) : NAN;
        r->skipped[i] = cli_json_field(lines[i], "skipped", v, sizeof v) && strcmp(v, "true") == 0;
        r->loss[i] = cli_json_field(lines[i], "loss", r->text[i], sizeof r->text[i]) ? atof(r->text[i]) : NAN;
    }
    free(body);
    return true;
}

/* Trains the tiny mlp in fp16 for `steps` with extra options, logging to
 * a fresh file; the log in *r. */
static bool train_logged(run_log *r, int steps, const char *extra)
{
    char log[512];
    cli_path(log, sizeof log, "knob.jsonl");
    int rc = cli_run("train --model mlp --data %s --hidden 8 --steps %d --batch 16 --threads 1 --precision fp16 "
                     "--log %s --log-mode replace %s",
                     tiny, steps, log, extra);
    CHECK_MSG(rc == 0, "%s: exit %d:\n%s", extra, rc, cli_out);
    bool ok = rc == 0 && read_log(log, r);
    CHECK_MSG(ok && r->n == steps, "%s: %d log lines", extra, r->n);
    return ok && r->n == steps;
}

/* r's scales equal want[0..n). */
static void expect_scales(const run_log *r, const double *want, int n, const char *what)
{
    for (int i = 0; i < n && i < r->n; i++)
        CHECK_MSG(r->scale[i] == want[i], "%s: step %d used scale %.17g, expected %.17g", what, i + 1, r->scale[i],
                  want[i]);
}

static void test_growth_knobs(void)
{
    run_log r;
    /* From scale 1 nothing overflows: the scale grows after every 2nd
     * clean step (the log shows the scale each step used). */
    if (train_logged(&r, 8, "--init-scale 1 --growth-interval 2")) {
        const double want[] = {1, 1, 2, 2, 4, 4, 8, 8};
        expect_scales(&r, want, 8, "--growth-interval 2");
        CHECK_OUT("grad scaler: init scale 1, x2 after 2 clean steps, x0.5 at an overflow\n");
        for (int i = 0; i < r.n; i++)
            CHECK(!r.skipped[i]);
    }
    if (train_logged(&r, 5, "--init-scale 1 --growth-interval 1 --growth-factor 4")) {
        const double want[] = {1, 4, 16, 64, 256};
        expect_scales(&r, want, 5, "--growth-factor 4");
    }
    /* --max-scale caps the growth. */
    if (train_logged(&r, 6, "--init-scale 1 --growth-interval 1 --max-scale 4")) {
        const double want[] = {1, 2, 4, 4, 4, 4};
        expect_scales(&r, want, 6, "--max-scale 4");
    }
}

static void test_backoff_knobs(void)
{
    run_log r;
    /* 2^24 overflows this model's f16 gradients (test_cli.c's log test)
     * for the first few halvings: each such step is skipped and backs off. */
    const double s24 = 16777216.0;
    if (train_logged(&r, 3, "--init-scale 16777216")) {
        const double want[] = {s24, s24 / 2, s24 / 4};
        expect_scales(&r, want, 3, "default backoff");
        CHECK(r.skipped[0] && r.skipped[1]);
    }
    if (train_logged(&r, 3, "--init-scale 16777216 --backoff-factor 0.25")) {
        const double want[] = {s24, s24 / 4, s24 / 16};
        expect_scales(&r, want, 3, "--backoff-factor 0.25");
        CHECK(r.skipped[0] && r.skipped[1]);
    }
    /* --hysteresis 2: the first overflow is skipped at the same scale, the
     * second backs off, and each one after it until the scale grows. */
    if (train_logged(&r, 4, "--init-scale 16777216 --hysteresis 2")) {
        const double want[] = {s24, s24, s24 / 2, s24 / 4};
        expect_scales(&r, want, 4, "--hysteresis 2");
        CHECK(r.skipped[0] && r.skipped[1] && r.skipped[2]);
    }
    /* --min-scale: the backoff stops there, the steps still skip. */
    if (train_logged(&r, 5, "--init-scale 16777216 --min-scale 8388608 --max-skips 0")) {
        const double want[] = {s24, s24 / 2, s24 / 2, s24 / 2, s24 / 2};
        expect_scales(&r, want, 5, "--min-scale 2^23");
        for (int i = 0; i < r.n; i++)
            CHECK_MSG(r.skipped[i], "step %d at the floor 2^23 was not skipped", i + 1);
    }
}

static void test_static_scale(void)
{
    run_log r;
    /* A scale that overflows: every step is skipped, the scale holds. */
    if (train_logged(&r, 5, "--static-scale 16777216 --max-skips 0")) {
        for (int i = 0; i < r.n; i++) {
            CHECK_MSG(r.scale[i] == 16777216.0, "step %d used scale %g", i + 1, r.scale[i]);
            CHECK_MSG(r.skipped[i], "step %d with inf gradients was not skipped", i + 1);
        }
        CHECK_OUT("scaler: final scale 1.67772e+07, 5 steps skipped in all");
    }
    /* A scale that does not: no step skipped, no growth after 2000... nor
     * after 1 (the knobs are the dynamic scaler's: see the errors). */
    if (train_logged(&r, 6, "--static-scale 1024")) {
        for (int i = 0; i < r.n; i++) {
            CHECK_MSG(r.scale[i] == 1024.0, "step %d used scale %g", i + 1, r.scale[i]);
            CHECK(!r.skipped[i]);
        }
        CHECK_OUT("scaler: final scale 1024, 0 steps skipped in all");
        CHECK_OUT("grad scaler: a fixed scale 1024 (never grows or backs off");
    }
    /* --max-skips still stops a run whose fixed scale always overflows. */
    int rc = cli_run("train --model mlp --data %s --hidden 8 --steps 8 --batch 16 --threads 1 --precision fp16 "
                     "--static-scale 1e30 --max-skips 3",
                     tiny);
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("skipped 3 steps in a row");
    /* The advice names the knob that sets the scale: not --init-scale,
     * which --static-scale refuses. */
    CHECK_OUT("the backward pass overflows at scale 1e+30: try a smaller --static-scale (1e+30 now) or --lr");
    /* A --min-scale floor that still overflows: the floor is named. */
    rc = cli_run("train --model mlp --data %s --hidden 8 --steps 8 --batch 16 --threads 1 --precision fp16 "
                 "--init-scale 16777216 --min-scale 8388608 --max-skips 3",
                 tiny);
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("try a smaller --min-scale (the floor, 8.38861e+06 now) or --lr");
}

static void test_bad_values_are_refused(void)
{
    static const cli_refusal cases[] = {
        {"--growth-factor 1", "--growth-factor 1 must be above 1"},
        {"--growth-factor 0.5", "--growth-factor: 0.5 is out of range (1 to 1e+06)"},
        {"--growth-factor x", "--growth-factor: 'x' is not a number"},
        {"--backoff-factor 1", "--backoff-factor 1 must be between 0 and 1, both excluded"},
        {"--backoff-factor 0", "--backoff-factor 0 must be between 0 and 1, both excluded"},
        {"--backoff-factor 2", "--backoff-factor: 2 is out of range (0 to 1)"},
        /* factors that round to 1 in fp32 would never move the scale */
        {"--growth-factor 1.00000001", "--growth-factor 1.0000000099999999 rounds to 1 in fp32"},
        {"--backoff-factor 0.99999999", "--backoff-factor 0.99999998999999995 is within 2^-24 of 1"},
        {"--hysteresis 0", "--hysteresis: '0' is not a whole number from 1 to 1000000"},
        {"--hysteresis 1.5", "--hysteresis: '1.5' is not a whole number"},
        {"--min-scale -1", "--min-scale: -1 is out of range (0: off, or 1e-30 to 1e+30)"},
        {"--static-scale 1e-40", "--static-scale: 1e-40 is out of range (0: off, or 1e-30 to 1e+30)"},
        {"--max-scale 1e40", "--max-scale: 1e40 is out of range (0: off, or 1e-30 to 1e+30)"},
        {"--static-scale -1", "--static-scale: -1 is out of range"},
        {"--min-scale 100 --max-scale 10 --init-scale 50", "--min-scale 100 is above --max-scale 10"},
        {"--max-scale 1024", "--init-scale 65536 is above --max-scale 1024 (give --init-scale at most 1024)"},
        {"--min-scale 1e6", "--init-scale 65536 is below --min-scale 1e+06"},
        {"--static-scale 8 --growth-interval 3", "--growth-interval is an option of the dynamic grad scaler, but "
                                                 "--static-scale 8 fixes the scale"},
        {"--static-scale 8 --init-scale 8", "--init-scale is an option of the dynamic grad scaler"},
        {"--static-scale 8 --hysteresis 2", "--hysteresis is an option of the dynamic grad scaler"},
        {"--static-scale 8 --min-scale 2", "--min-scale is an option of the dynamic grad scaler"},
        {"--health-every 0", "--health-every: '0' is not a whole number from 1 to"},
        {"--init-scale 16777216 --backoff-factor 1e-300", "--backoff-factor 1e-300 takes the scale 1.67772e+07 to 0 "
                                                          "at the first overflow"},
        {"--init-scale 1 --backoff-factor 1e-38", "--backoff-factor 1e-38 takes the scale 1 to 1e-38"},
    };
    char train[400];
    snprintf(train, sizeof train, "train --model mlp --data %s --precision fp16 --steps 1", tiny);
    cli_check_refusals(NULL, train, CLI_REFUSALS(cases));
    /* Meaningful with the scaler only: bf16, fp32 and --no-scaler refuse
     * every knob, naming it. */
    const char *knobs[] = {"--growth-factor 3", "--backoff-factor 0.25", "--hysteresis 2", "--min-scale 1",
                           "--max-scale 1e6",   "--static-scale 1024"};
    const char *runs[] = {"--precision bf16", "--precision fp32", "--precision fp16 --no-scaler"};
    for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++)
        for (size_t p = 0; p < sizeof runs / sizeof runs[0]; p++) {
            int rc = cli_run("train --model mlp --data %s --steps 1 %s %s", tiny, runs[p], knobs[k]);
            char want[96];
            snprintf(want, sizeof want, "%.*s applies to --precision fp16 with the scaler only",
                     (int)strcspn(knobs[k], " "), knobs[k]);
            CHECK_MSG(rc == 2 && strstr(cli_out, want), "%s %s: exit %d, no \"%s\" in:\n%s", runs[p], knobs[k], rc,
                      want, cli_out);
        }
}

/* A scale backed off to 0 (or an f32 subnormal) stops the run, naming
 * it: at 0 the next step would be taken with NaN gradients. The lr 1000
 * step makes the weights blow up in f16, so most steps after it have
 * inf/NaN gradients and back off by 1e-10: 65536 -> 6.6e-6 -> ... ->
 * 6.6e-36 -> 0 in f32 (the step it happens at depends on the data). */
static void test_scale_reaching_zero_stops(void)
{
    int rc = cli_run("train --model mlp --data %s --hidden 8 --steps 20 --batch 16 --threads 1 --precision fp16 "
                     "--optim sgd --lr 1000 --backoff-factor 1e-10 --max-skips 0",
                     tiny);
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("the grad scaler backed off to scale 0 after step ");
    CHECK_OUT("give a larger --backoff-factor (1e-10 now) or a --min-scale floor");
    /* A --min-scale floor holds it: the run goes on, every step skipped. */
    CLI_OK("train --model mlp --data %s --hidden 8 --steps 20 --batch 16 --threads 1 --precision fp16 "
           "--optim sgd --lr 1000 --backoff-factor 1e-10 --max-skips 0 --min-scale 1e-30",
           tiny);
    CHECK_OUT("scaler: final scale 1e-30, ");
}

/* A run with `knobs` stopped at step `stop` and resumed logs the
 * straight run's losses and scales exactly over `steps` (the knobs came
 * back from the checkpoint: none is given on the resuming command line);
 * the checkpoint's settings hold each of `saved`. Returns the straight
 * run's last scale. */
static double resume_matches(const char *knobs, int steps, int stop, const char *const *saved, int n_saved)
{
    char straight[512], part[512], dir[512];
    cli_path(straight, sizeof straight, "straight.jsonl");
    cli_path(part, sizeof part, "part.jsonl");
    cli_path(dir, sizeof dir, "ck");
    const char *common = "train --model mlp --hidden 8 --batch 16 --threads 1 --precision fp16 --log-mode replace";
    CLI_OK("%s --data %s --steps %d %s --log %s", common, tiny, steps, knobs, straight);
    CLI_OK("%s --data %s --steps %d %s --log %s --save %s --stop-at %d", common, tiny, steps, knobs, part, dir,
           stop);
    char ck[600];
    snprintf(ck, sizeof ck, "%s/%s", dir, CHECKPOINT_FILE);
    size_t len = 0;
    char *file = cli_read_file(ck, &len);
    CHECK(file != NULL && len > 8);
    const char *header = file && len > 8 ? file + 8 : ""; /* safetensors: a u64 length, then the JSON header */
    for (int i = 0; i < n_saved; i++)
        CHECK_MSG(strstr(header, saved[i]) != NULL, "the checkpoint's settings lack %s", saved[i]);
    free(file);
    int rc = cli_run("train --resume %s --log %s", dir, part);
    CHECK_MSG(rc == 0, "resume: exit %d:\n%s", rc, cli_out);
    run_log a, b;
    bool ok = read_log(straight, &a) && read_log(part, &b);
    CHECK(ok);
    if (!ok)
        return NAN;
    CHECK_EQ_INT(a.n, steps);
    CHECK_EQ_INT(b.n, steps);
    for (int i = 0; i < a.n && i < b.n; i++) {
        CHECK_MSG(a.scale[i] == b.scale[i], "%s: step %d: scale %g straight, %g resumed", knobs, i + 1, a.scale[i],
                  b.scale[i]);
        CHECK_MSG(a.skipped[i] == b.skipped[i], "%s: step %d: skipped differs", knobs, i + 1);
        CHECK_MSG(strcmp(a.text[i], b.text[i]) == 0, "%s: step %d: loss %s straight, %s resumed", knobs, i + 1,
                  a.text[i], b.text[i]);
    }
    return a.n == steps ? a.scale[steps - 1] : NAN;
}

static void test_resume_keeps_the_knobs(void)
{
    const char *saved[] = {"\\\"growth-factor\\\":3", "\\\"backoff-factor\\\":0.25", "\\\"hysteresis\\\":2",
                           "\\\"min-scale\\\":0.5", "\\\"max-scale\\\":100", "\\\"growth-interval\\\":2"};
    double last = resume_matches("--init-scale 4 --growth-interval 2 --growth-factor 3 --backoff-factor 0.25 "
                                 "--hysteresis 2 --min-scale 0.5 --max-scale 100",
                                 10, 5, saved, 6);
    CHECK_MSG(last > 4, "the scale never grew: %g", last); /* the test sees the knobs */
    /* Stopped between two overflows of a --hysteresis 3 run: the resumed
     * run continues the count (the scaler's state in the checkpoint's
     * metadata), so it backs off at the same step as the straight run. */
    const char *left[] = {"\"scaler.hysteresis_left\":\"2\""};
    resume_matches("--init-scale 16777216 --hysteresis 3", 5, 1, left, 1);
    const char *fixed[] = {"\\\"static-scale\\\":1024"};
    CHECK(resume_matches("--static-scale 1024", 6, 3, fixed, 1) == 1024);
}

/* A knob given on the resuming command line replaces the saved one from
 * there on; --static-scale saved refuses a dynamic knob. */
static void test_resume_with_new_knobs(void)
{
    char dir[512], log[512];
    cli_path(dir, sizeof dir, "ck2");
    cli_path(log, sizeof log, "new.jsonl");
    const char *common = "train --model mlp --hidden 8 --steps 8 --batch 16 --threads 1 --precision fp16";
    CLI_OK("%s --data %s --init-scale 1 --save %s --stop-at 4", common, tiny, dir);
    /* Saved with the default interval (2000): the scale was 1 at step 4;
     * --growth-interval 1 anew doubles it at every step from step 5. */
    CLI_OK("train --resume %s --growth-interval 1 --log %s --log-mode replace", dir, log);
    run_log r;
    bool ok = read_log(log, &r) && r.n == 4;
    CHECK_MSG(ok, "resumed log: %d lines", r.n);
    if (ok) {
        const double want[] = {1, 2, 4, 8};
        expect_scales(&r, want, 4, "resumed with --growth-interval 1");
    }
    /* --max-scale anew below the saved scale (and the checkpoint's
     * --init-scale, 65536 by default): the saved scale is clamped to it,
     * not refused for an --init-scale this command line never gave. */
    cli_path(dir, sizeof dir, "ck4");
    CLI_OK("%s --data %s --save %s --stop-at 4", common, tiny, dir);
    CLI_OK("train --resume %s --max-scale 1024 --log %s --log-mode replace", dir, log);
    CHECK_OUT("the saved scale 65536 is now 1024");
    ok = read_log(log, &r) && r.n == 4;
    CHECK_MSG(ok, "resumed log: %d lines", r.n);
    if (ok) {
        const double want[] = {1024, 1024, 1024, 1024};
        expect_scales(&r, want, 4, "resumed with --max-scale 1024");
    }
    /* --min-scale anew above it: clamped up (a fresh checkpoint: the
     * resumed run saved its --max-scale in ck4). */
    cli_path(dir, sizeof dir, "ck5");
    CLI_OK("%s --data %s --save %s --stop-at 4", common, tiny, dir);
    CLI_OK("train --resume %s --min-scale 1e6 --log %s --log-mode replace", dir, log);
    CHECK_OUT("the saved scale 65536 is now 1e+06");
    /* An --init-scale given with them is still checked. */
    int rc = cli_run("train --resume %s --steps 12 --max-scale 1e7 --init-scale 1e8", dir);
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("--init-scale 1e+08 is above --max-scale 1e+07");
    /* --static-scale anew on a dynamic run: the scale restarts there and
     * holds. */
    cli_path(dir, sizeof dir, "ck3");
    CLI_OK("%s --data %s --init-scale 1 --save %s --stop-at 4", common, tiny, dir);
    CLI_OK("train --resume %s --static-scale 32 --log %s --log-mode replace", dir, log);
    CHECK_OUT("the saved scale 1 is now 32");
    ok = read_log(log, &r) && r.n == 4;
    CHECK_MSG(ok, "resumed log: %d lines", r.n);
    if (ok) {
        const double want[] = {32, 32, 32, 32};
        expect_scales(&r, want, 4, "resumed with --static-scale 32");
    }
    /* That checkpoint is now a static one: a dynamic knob is refused,
     * naming where the fixed scale comes from. */
    rc = cli_run("train --resume %s --steps 10 --hysteresis 2", dir);
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("--hysteresis is an option of the dynamic grad scaler, but --static-scale 32 (the checkpoint's) "
              "fixes the scale: give one or the other (--static-scale 0 makes it dynamic)");
    /* --static-scale 0 anew makes it dynamic again: the saved scale 32
     * goes on, and grows every clean step with --growth-interval 1. */
    CLI_OK("train --resume %s --steps 12 --static-scale 0 --growth-interval 1 --log %s --log-mode replace", dir,
           log);
    ok = read_log(log, &r) && r.n == 4;
    CHECK_MSG(ok, "resumed log: %d lines", r.n);
    if (ok) {
        const double want[] = {32, 64, 128, 256};
        expect_scales(&r, want, 4, "resumed with --static-scale 0 --growth-interval 1");
    }
    /* A checkpoint's bound dropped with 0: ck4 saved --max-scale 1024;
     * --max-scale 0 lets the scale grow past it. */
    cli_path(dir, sizeof dir, "ck4");
    CLI_OK("train --resume %s --steps 12 --max-scale 0 --growth-interval 1 --log %s --log-mode replace", dir,
           log);
    ok = read_log(log, &r) && r.n == 4;
    CHECK_MSG(ok, "resumed log: %d lines", r.n);
    if (ok) {
        const double want[] = {1024, 2048, 4096, 8192};
        expect_scales(&r, want, 4, "resumed with --max-scale 0 --growth-interval 1");
    }
}

/* --health-every 3 over 7 steps: steps 3 and 6 carry the f16_* keys, as
 * fractions that add up; with the scaler the *_scaled ones too (and at
 * scale 2^16 fewer elements flush than unscaled); bf16 has no scaled
 * ones. The progress line reports it; `ampc plot` draws the panel. */
static void test_health_every(void)
{
    char log[512], svg[512];
    cli_path(log, sizeof log, "health.jsonl");
    cli_path(svg, sizeof svg, "health.svg");
    const char *precisions[] = {"fp16", "bf16"};
    for (int p = 0; p < 2; p++) {
        CLI_OK("train --model mlp --data %s --hidden 8 --steps 7 --batch 16 --threads 1 --precision %s "
               "--health-every 3 --log-every 3 --log %s --log-mode replace",
               tiny, precisions[p], log);
        CHECK_OUT("f16 health of the gradients at step 3: zero ");
        CHECK_OUT("f16 health of the gradients at step 6: zero ");
        CHECK_MSG((strstr(cli_out, "; at scale 65536: flush ") != NULL) == (p == 0), "%s: scaled report?\n%s",
                  precisions[p], cli_out);
        char *lines[16], *body = NULL;
        int n = log_lines(log, lines, 16, &body);
        CHECK_EQ_INT(n, 7);
        for (int i = 0; i < n; i++) {
            char v[64];
            bool due = (i + 1) % 3 == 0;
            const char *keys[] = {"f16_zero", "f16_flush", "f16_subnormal", "f16_overflow"};
            double sum = 0;
            for (int k = 0; k < 4; k++) {
                bool has = cli_json_field(lines[i], keys[k], v, sizeof v);
                CHECK_MSG(has == due, "%s step %d: %s %s", precisions[p], i + 1, keys[k], has ? "present" : "absent");
                if (has) {
                    CHECK_MSG(atof(v) >= 0 && atof(v) <= 1, "%s = %s", keys[k], v);
                    sum += atof(v);
                }
            }
            CHECK_MSG(sum <= 1 + 1e-5, "step %d: the shares add up to %g", i + 1, sum);
            bool scaled = cli_json_field(lines[i], "f16_flush_scaled", v, sizeof v);
            CHECK_MSG(scaled == (due && p == 0), "%s step %d: f16_flush_scaled %s", precisions[p], i + 1,
                      scaled ? "present" : "absent");
            if (scaled) {
                char u[64];
                CHECK(cli_json_field(lines[i], "f16_flush", u, sizeof u));
                CHECK_MSG(atof(v) <= atof(u), "flushed at scale 2^16 %s > unscaled %s", v, u);
            }
        }
        free(body);
        if (p == 0) {
            CHECK_EQ_INT(cli_run("plot %s -o %s", log, svg), 0);
            char *pic = cli_read_file(svg, NULL);
            CHECK_MSG(pic && strstr(pic, "f16 health (%)") && strstr(pic, "class=\"health-zero\"") &&
                          strstr(pic, "class=\"health-flush_scaled\""),
                      "no health panel in %s", svg);
            free(pic);
        }
    }
}

/* Every f16_* value of the last health line of the log at path. */
static double last_health(const char *path, const char *key)
{
    char *lines[MAX_STEPS], *body = NULL;
    int n = log_lines(path, lines, MAX_STEPS, &body);
    double v = -1;
    for (int i = 0; i < n; i++) {
        char b[64];
        if (cli_json_field(lines[i], key, b, sizeof b))
            v = atof(b);
    }
    free(body);
    return v;
}

/* The stall: 16 hidden layers of 16 with 64 x 16 accumulated samples a
 * step (each micro-batch's loss divided by 16): the gradients shrink
 * layer by layer, and in an fp16 backward without the scaler most flush
 * to zero, so the unscaled run stays at chance (ln 2 = 0.6931 on the
 * two-class set) while the scaled run learns it. Measured: at step 50
 * 93% of the unscaled run's gradient elements are zero against 52% of
 * the scaled run's (dead ReLUs: the fp32 run has 53%); the loss over
 * steps 76-80 is 0.6931 unscaled, below 0.03 scaled (and in fp32). The
 * thresholds leave a wide margin on both sides. */
static void test_unscaled_fp16_stalls(void)
{
    char log[2][512];
    double loss[2] = {NAN, NAN}, zero[2];
    const char *runs[] = {"", "--no-scaler"};
    for (int i = 0; i < 2; i++) {
        cli_path(log[i], sizeof log[i], i ? "stall-unscaled.jsonl" : "stall-scaled.jsonl");
        CLI_OK("train --model mlp --data %s --hidden 16,16,16,16,16,16,16,16,16,16,16,16,16,16,16,16 "
               "--batch 64 --accum 16 --steps 80 --lr 0.003 --threads 1 --precision fp16 %s "
               "--health-every 50 --log %s",
               tiny, runs[i], log[i]);
        run_log r;
        if (read_log(log[i], &r) && r.n == 80) {
            loss[i] = 0;
            for (int k = 75; k < 80; k++)
                loss[i] += r.loss[k] / 5;
        }
        zero[i] = last_health(log[i], "f16_zero"); /* step 50's */
    }
    CHECK_MSG(zero[1] > 0.85, "unscaled fp16: only %g of the gradient elements are zero", zero[1]);
    CHECK_MSG(zero[0] >= 0 && zero[0] < 0.7, "scaled fp16: %g of the gradient elements are zero", zero[0]);
    CHECK_MSG(loss[1] > 0.68, "unscaled fp16 learned: loss %g (chance: ln 2 = 0.6931)", loss[1]);
    CHECK_MSG(loss[0] < 0.2, "scaled fp16 did not learn: loss %g", loss[0]);
}

int main(void)
{
    cli_init_tiny("test-cli-scaler", tiny, NULL);
    RUN_IF(cli_have_binary, test_growth_knobs);
    RUN_IF(cli_have_binary, test_backoff_knobs);
    RUN_IF(cli_have_binary, test_static_scale);
    RUN_IF(cli_have_binary, test_bad_values_are_refused);
    RUN_IF(cli_have_binary, test_scale_reaching_zero_stops);
    RUN_IF(cli_have_binary, test_resume_keeps_the_knobs);
    RUN_IF(cli_have_binary, test_resume_with_new_knobs);
    RUN_IF(cli_have_binary, test_health_every);
    RUN_IF(cli_have_binary, test_unscaled_fp16_stalls);
    cli_cleanup();
    return harness_done();
}
