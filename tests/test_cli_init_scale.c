/*
 * test_cli_init_scale.c - ampc train --init-scale auto (tools/scale_calib.c).
 *
 *   - The scale found follows the rule: the log's first line (the
 *     calibration record) holds probes whose largest finite scale is
 *     S_max and whose next power of two is not finite, and the scale is
 *     S_max / 16 (the margin; growth_factor when larger); no step is
 *     skipped where a first scale above the boundary skips the first steps.
 *   - The default gpt's first 100 steps in fp16: the fixed default scale
 *     (65536) skips some as its gradients grow, auto none.
 *   - The probes leave no trace: the run equals, loss for loss (dropout on,
 *     so the generator matters), the run started with --init-scale at the
 *     scale found.
 *   - Refused (exit 2, a message naming it) without the dynamic scaler:
 *     bf16, --no-scaler, --static-scale.
 *   - A resumed run keeps its checkpoint's scale: auto applies at step 0.
 */
#include "test_cli_util.h"

#include <math.h>

static char text[256];

enum { MAX_LINES = 64 };

/* --max-scale lifts auto's cap (65536) above this model's boundary
 * (131072 finite, 262144 not), so the probes find it. */
#define AUTO "--init-scale auto --max-scale 1e9"

/* The tiny gpt in fp16 with dropout (the generator matters), `steps`
 * steps, logged to name; extra options after. The exit code. */
static int train_gpt(const char *name, int steps, const char *extra)
{
    char log[512];
    cli_path(log, sizeof log, name);
    return cli_run("train --model gpt --data %s --layers 1 --width 32 --heads 2 --context 16 --batch 8 "
                   "--dropout 0.1 --steps %d --threads 1 --precision fp16 --log %s --log-mode replace %s",
                   text, steps, log, extra);
}

/* The log's lines (body owns them). */
static int log_lines(const char *name, char **lines, char **body)
{
    char log[512];
    cli_path(log, sizeof log, name);
    *body = cli_read_file(log, NULL);
    return *body ? cli_lines(*body, lines, MAX_LINES) : 0;
}

/* The skipped steps of a log's step lines. */
static int skipped_steps(char **lines, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        char v[32];
        k += cli_json_field(lines[i], "skipped", v, sizeof v) && strcmp(v, "true") == 0;
    }
    return k;
}

static void test_auto_follows_the_rule_and_skips_nothing(void)
{
    const int steps = 12;
    int rc = train_gpt("auto.jsonl", steps, AUTO);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, cli_out);
    CHECK_OUT("init scale auto: ");
    char *lines[MAX_LINES], *body;
    int n = log_lines("auto.jsonl", lines, &body);
    CHECK_MSG(n == steps + 1, "%d log lines, expected the calibration's and %d steps", n, steps);
    if (n < 2) {
        free(body);
        return;
    }
    /* The event: {"event":"init_scale_auto","scale":S,"largest_finite":M,...,"probed":"1:finite ..."} */
    const char *rec = lines[0];
    char v[64];
    CHECK_MSG(strncmp(rec, "{\"event\":\"init_scale_auto\",", 27) == 0, "first line: %s", rec);
    double s = cli_json_field(rec, "scale", v, sizeof v) ? atof(v) : NAN;
    double m = cli_json_field(rec, "largest_finite", v, sizeof v) ? atof(v) : NAN;
    CHECK_MSG(s == m / 16 && strstr(rec, "\"capped\":false"), "scale %g, largest finite %g: %s", s, m, rec);
    /* The probes saw m finite and 2m not (unless capped). */
    char probe[96];
    snprintf(probe, sizeof probe, "%.17g:finite", m);
    CHECK_MSG(strstr(rec, probe) != NULL, "no finite probe at %g: %s", m, rec);
    snprintf(probe, sizeof probe, "%.17g:inf", 2 * m);
    CHECK_MSG(strstr(rec, probe) != NULL, "no overflowing probe at %g: %s", 2 * m, rec);
    CHECK(cli_json_field(lines[1], "scale", v, sizeof v) && atof(v) == s);
    CHECK_MSG(skipped_steps(lines + 1, n - 1) == 0, "auto skipped %d steps", skipped_steps(lines + 1, n - 1));
    free(body);
    /* A first scale 4x above the boundary: the first steps are skipped
     * while the scaler backs off to it. */
    char extra[64];
    snprintf(extra, sizeof extra, "--init-scale %.17g", 4 * m);
    rc = train_gpt("high.jsonl", steps, extra);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, cli_out);
    n = log_lines("high.jsonl", lines, &body);
    CHECK_MSG(skipped_steps(lines, n) >= 2, "--init-scale %g skipped %d steps", 4 * m, skipped_steps(lines, n));
    free(body);
}

/* The default gpt's 200 steps of training take minutes in a sanitized or
 * unoptimized build (SLOW_BUILD, harness.h), where they would check no
 * memory the tiny gpt's runs above do not: the optimized build's only. */

/* The default gpt (its corpus, its shape), 100 steps in fp16 on one thread. */
static void test_the_default_gpt_skips_at_65536_and_not_with_auto(void)
{
#ifdef SLOW_BUILD
    harness_skip("a sanitized or unoptimized build: the optimized build's run of this test checks the numbers");
    return;
#endif
    int rc = cli_run("train --model gpt --precision fp16 --steps 100 --threads 1");
    const char *at = strstr(cli_out, "steps skipped in all");
    CHECK_MSG(rc == 0 && at, "exit %d:\n%s", rc, cli_out);
    const char *line = at ? strstr(cli_out, "scaler: final scale") : NULL;
    long skipped = line ? strtol(strchr(line, ',') + 1, NULL, 10) : -1;
    CHECK_MSG(skipped > 0, "the fixed scale skipped %ld steps:\n%s", skipped, cli_out);
    rc = cli_run("train --model gpt --precision fp16 --steps 100 --threads 1 --init-scale auto");
    CHECK_MSG(rc == 0 && strstr(cli_out, "init scale auto: 4096 ") && strstr(cli_out, ", 0 steps skipped in all"),
              "exit %d:\n%s", rc, cli_out);
}

/* The probes leave the generator, the data order and the weights as they
 * were: auto's run is the run at its scale, loss for loss. */
static void test_auto_equals_the_run_at_its_scale(void)
{
    const int steps = 6;
    char *a[MAX_LINES], *b[MAX_LINES], *body_a, *body_b;
    CHECK(train_gpt("same_auto.jsonl", steps, AUTO) == 0);
    int na = log_lines("same_auto.jsonl", a, &body_a);
    char v[64] = "", extra[96];
    CHECK(na == steps + 1 && cli_json_field(a[1], "scale", v, sizeof v));
    snprintf(extra, sizeof extra, "--init-scale %s --max-scale 1e9", v);
    CHECK(train_gpt("same_fixed.jsonl", steps, extra) == 0);
    int nb = log_lines("same_fixed.jsonl", b, &body_b);
    CHECK_MSG(nb == steps, "%d lines", nb);
    for (int i = 0; i < steps && i + 1 < na && i < nb; i++) {
        char la[64], lb[64], ga[64], gb[64];
        CHECK(cli_json_field(a[i + 1], "loss", la, sizeof la) && cli_json_field(b[i], "loss", lb, sizeof lb));
        CHECK(cli_json_field(a[i + 1], "grad_norm", ga, sizeof ga) && cli_json_field(b[i], "grad_norm", gb, sizeof gb));
        CHECK_MSG(strcmp(la, lb) == 0 && strcmp(ga, gb) == 0, "step %d: loss %s vs %s, grad_norm %s vs %s", i + 1,
                  la, lb, ga, gb);
    }
    free(body_a);
    free(body_b);
}

static void test_auto_needs_the_dynamic_scaler(void)
{
    const char *cases[] = {"--precision bf16", "--no-scaler", "--static-scale 1024"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char extra[128];
        snprintf(extra, sizeof extra, "--init-scale auto %s", cases[i]);
        int rc = train_gpt("refused.jsonl", 2, extra);
        CHECK_MSG(rc == 2, "%s: exit %d", cases[i], rc);
        CHECK_MSG(strstr(cli_out, "--init-scale auto") || strstr(cli_out, "--init-scale applies"), "%s: %s",
                  cases[i], cli_out);
    }
}

static void test_resume_keeps_the_saved_scale(void)
{
    char ck[512], extra[700];
    cli_path(ck, sizeof ck, "ck");
    snprintf(extra, sizeof extra, "--init-scale 1024 --save %s --stop-at 2", ck);
    CHECK(train_gpt("first.jsonl", 4, extra) == 0);
    CHECK(cli_run("train --resume %s --init-scale auto --threads 1", ck) == 0);
    CHECK_OUT("--init-scale auto applies at step 0 only: the run goes on at its checkpoint's scale 1024");
}

int main(void)
{
    cli_init_tiny("test-cli-init-scale", NULL, text);
    RUN_IF(cli_have_binary, test_auto_follows_the_rule_and_skips_nothing);
    RUN_IF(cli_have_binary, test_auto_equals_the_run_at_its_scale);
    RUN_IF(cli_have_binary, test_the_default_gpt_skips_at_65536_and_not_with_auto);
    RUN_IF(cli_have_binary, test_auto_needs_the_dynamic_scaler);
    RUN_IF(cli_have_binary, test_resume_keeps_the_saved_scale);
    cli_cleanup();
    return harness_done();
}
