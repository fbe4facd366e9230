/*
 * test_cli_stall.c - stalled updates of 16-bit weights through ampc train
 * (tools/stall.c, --master-weights, --weight-update sr).
 *
 * The run: a tiny gpt, Adam at lr 3e-6 for 200 steps in bf16 autocast,
 * --health-every 100; its linear weights in bf16 (--param-dtype bf16;
 * norms and embeddings stay f32), against the same run with f32 weights.
 * Adam's update is about lr per element, under half a bf16 unit in the
 * last place of most weights (about 0.02 here: half a unit is 6e-5).
 *   - --master-weights off: most updates are lost ("stalled" above 0.9,
 *     the worst parameter's above 0.95) and the loss falls clearly less
 *     than the f32 run's (measured: 0.020 against 0.035 over the run;
 *     the last 10 steps' mean 0.015 above the f32 run's).
 *   - fp32 master weights (the default): nothing stalls (below 1%), and
 *     the loss tracks the f32 run's (measured: within 1e-4).
 *   - --weight-update sr: the loss tracks the f32 run's as closely
 *     (measured: within 1e-4); the per-step fraction falls below the
 *     nearest-even run's but stays high by design (an update of a
 *     fraction f of a unit moves the weight with probability f).
 *   - Without 16-bit weights the health lines have no stalled keys; the
 *     progress line shows the measurement.
 *   - --weight-update sr resumes bit for bit (its bits are a function of
 *     the step counts the checkpoint keeps).
 *   - Refused, exit 2: the options without 16-bit weights, sr with fp16
 *     weights or with --master-weights on.
 */
#include "test_cli_util.h"

#include <math.h>

static char text[256];

enum { STEPS = 200, MAX_LINES = 256 };

typedef struct {
    int n;
    double loss[MAX_LINES];
    char loss_text[MAX_LINES][32];
    int n_health;
    double stalled[4], worst[4];
    bool has_stall_key;
} run_log;

#define TINY "--model gpt --data %s --layers 1 --width 32 --heads 2 --context 16 --batch 8 --threads 1 --precision bf16"

/* Runs the stall scenario with extra options (steps, health every
 * STEPS / 2), its log into *r. Exit code. */
static int stall_run(const char *extra, int steps, run_log *r)
{
    char log[512];
    cli_path(log, sizeof log, "stall.jsonl");
    int rc = cli_run("train " TINY " --steps %d --lr 3e-6 --schedule constant --health-every %d --log %s "
                     "--log-mode replace %s",
                     text, steps, steps / 2, log, extra);
    if (rc != 0)
        return rc;
    memset(r, 0, sizeof *r);
    char *lines[MAX_LINES], *body = cli_read_file(log, NULL); /* whole lines: the stalled keys follow step_ms */
    int n = body ? cli_lines(body, lines, MAX_LINES) : 0;
    for (int i = 0; i < n; i++) {
        char v[96];
        if (cli_json_field(lines[i], "loss", r->loss_text[i], sizeof r->loss_text[i]))
            r->loss[i] = atof(r->loss_text[i]);
        r->has_stall_key |= strstr(lines[i], "\"stalled\"") != NULL;
        if (r->n_health < 4 && cli_json_field(lines[i], "stalled", v, sizeof v)) {
            r->stalled[r->n_health] = atof(v);
            r->worst[r->n_health] = cli_json_field(lines[i], "stalled_worst_fraction", v, sizeof v) ? atof(v) : NAN;
            r->n_health++;
        }
    }
    r->n = n;
    free(body);
    return 0;
}

/* The mean loss of the last 10 steps. */
static double last10(const run_log *r)
{
    double s = 0;
    for (int i = r->n - 10; i < r->n; i++)
        s += r->loss[i];
    return s / 10;
}

static void test_bf16_weights_stall_without_masters_and_the_remedies_fix_it(void)
{
    static run_log f32, off, masters, sr;
    CHECK(stall_run("--param-dtype fp32", STEPS, &f32) == 0);
    CHECK_MSG(stall_run("--param-dtype bf16 --master-weights off", STEPS, &off) == 0, "%s", cli_out);
    CHECK_OUT("stalled updates: ");
    CHECK(stall_run("--param-dtype bf16", STEPS, &masters) == 0);
    CHECK(stall_run("--param-dtype bf16 --weight-update sr", STEPS, &sr) == 0);
    CHECK(f32.n == STEPS && off.n == STEPS && masters.n == STEPS && sr.n == STEPS);
    CHECK_MSG(!f32.has_stall_key, "f32 weights: the log has stalled keys");
    CHECK(off.n_health == 2 && masters.n_health == 2 && sr.n_health == 2);
    const double ref = last10(&f32);
    for (int h = 0; h < off.n_health; h++) {
        CHECK_MSG(off.stalled[h] > 0.9 && off.worst[h] > 0.95, "masters off: stalled %g, worst %g", off.stalled[h],
                  off.worst[h]);
        CHECK_MSG(masters.stalled[h] < 0.01, "masters: stalled %g", masters.stalled[h]);
        CHECK_MSG(sr.stalled[h] < off.stalled[h], "sr: stalled %g, nearest %g", sr.stalled[h], off.stalled[h]);
    }
    CHECK_MSG(last10(&off) - ref > 0.005, "masters off: loss %g, f32 %g", last10(&off), ref);
    CHECK_MSG(fabs(last10(&masters) - ref) < 0.001, "masters: loss %g, f32 %g", last10(&masters), ref);
    CHECK_MSG(fabs(last10(&sr) - ref) < 0.001, "sr: loss %g, f32 %g", last10(&sr), ref);
}

static void test_sr_resumes_bit_for_bit(void)
{
    static run_log straight, resumed;
    CHECK(stall_run("--param-dtype bf16 --weight-update sr", 20, &straight) == 0);
    char ck[512], extra[700], log[512];
    cli_path(ck, sizeof ck, "ck");
    snprintf(extra, sizeof extra, "--param-dtype bf16 --weight-update sr --save %s --stop-at 10", ck);
    CHECK(stall_run(extra, 20, &resumed) == 0);
    cli_path(log, sizeof log, "stall.jsonl");
    CHECK_MSG(cli_run("train --resume %s --threads 1 --log %s --log-mode append", ck, log) == 0, "%s", cli_out);
    char *lines[MAX_LINES], *body = NULL;
    int n = cli_log_steps(log, lines, MAX_LINES, &body);
    CHECK_MSG(n == 20, "%d lines after the resume", n);
    for (int i = 0; i < n && i < straight.n; i++) {
        char v[32];
        CHECK(cli_json_field(lines[i], "loss", v, sizeof v));
        CHECK_MSG(strcmp(v, straight.loss_text[i]) == 0, "step %d: resumed loss %s, straight %s", i + 1, v,
                  straight.loss_text[i]);
    }
    free(body);
}

static void test_refused_combinations(void)
{
    const cli_refusal cases[] = {
        {"--weight-update sr", "--weight-update sr applies to 16-bit weights only"},
        {"--master-weights off", "--master-weights off applies to 16-bit weights only"},
        {"--param-dtype bf16 --weight-update sr --master-weights on", "--master-weights off"},
        {"--precision fp16 --param-dtype fp16 --weight-update sr", "--weight-update sr rounds bf16 weights"},
    };
    char prefix[600];
    snprintf(prefix, sizeof prefix, "train " TINY " --steps 1", text);
    cli_check_refusals(NULL, prefix, CLI_REFUSALS(cases));
}

int main(void)
{
    cli_init_tiny("test-cli-stall", NULL, text);
    RUN_IF(cli_have_binary, test_bf16_weights_stall_without_masters_and_the_remedies_fix_it);
    RUN_IF(cli_have_binary, test_sr_resumes_bit_for_bit);
    RUN_IF(cli_have_binary, test_refused_combinations);
    cli_cleanup();
    return harness_done();
}
