/*
 * test_cli_anomaly.c - `ampc train --detect-anomaly` and
 * --anomaly-continue:
 *
 *   - an mlp in fp16 whose first step (lr 1000, Adam) moves every weight
 *     to +-1000: step 2's first linear (module "0") overflows f16 in
 *     forward from finite inputs; the run exits 1 with the "anomaly:" line
 *     naming it, a parseable "event":"anomaly" line in --log, and the last
 *     good step (1) saved to --save; `ampc plot` still reads the log;
 *   - a gpt in fp16 with the grad scaler and lr 1 overflows (at a scale of
 *     65536 in backward, later in forward): --anomaly-continue goes on,
 *     reports each distinct (phase, op, module) once on stderr and in the
 *     log, and names the op behind each skipped step;
 *   - without the option, or on a run that stays finite, nothing is said.
 */
#include "test_cli_util.h"

#include <stdlib.h>
#include <sys/stat.h>

static char text[256], big[256];

/* 8x8 images, every other pixel 255: after Adam's first step at lr 1000
 * the first linear's rows sum 32 such pixels times 1000. */
static void write_bright_images(const char *dir)
{
    enum { N = 64, P = 64 };
    unsigned char img[N * P], lab[N];
    for (int i = 0; i < N; i++) {
        lab[i] = (unsigned char)(i % 2);
        for (int k = 0; k < P; k++)
            img[i * P + k] = k % 2 ? (unsigned char)(i * 3 + k) : 255;
    }
    cli_write_idx_set(dir, N, 8, 8, img, lab);
}

#define MLP "train --model mlp --hidden 16 --batch 16 --threads 1 --steps 5 --precision fp16 --no-scaler " \
            "--lr 1000 --data %s "
#define GPT "train --model gpt --layers 1 --heads 2 --width 32 --context 16 --batch 4 --threads 1 " \
            "--precision fp16 --data %s "

/* Lines of text starting with prefix. */
static int count_lines(const char *text_, const char *prefix)
{
    int n = 0;
    size_t k = strlen(prefix);
    for (const char *p = text_; p && *p;) {
        if (strncmp(p, prefix, k) == 0)
            n++;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return n;
}

static void test_an_overflowing_linear_stops_the_run_naming_it(void)
{
    char log[300], ck[300], svg[300];
    cli_path(log, sizeof log, "mlp.jsonl");
    cli_path(ck, sizeof ck, "mlp-ck");
    cli_path(svg, sizeof svg, "mlp.svg");
    int rc = cli_run(MLP "--detect-anomaly --log %s --save %s", big, log, ck);
    CHECK_MSG(rc == 1, "exit %d, expected 1:\n%s", rc, cli_out);
    const char *want = "\nanomaly: op=linear module=0 phase=forward step=2 micro_batch=1 dtype=f16 category=lower ";
    CHECK_MSG(strstr(cli_out, want) != NULL, "no \"%s\" in:\n%s", want + 1, cli_out);
    CHECK_MSG(strstr(cli_out, "inputs_finite=true in0=f16[16,64]") != NULL, "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "in1=f16[16,64] min=-1000 max=1000 absmax=1000 nonfinite=0") != NULL, "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "the op overflowed f16 (largest 65504) from finite inputs") != NULL, "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "saved the last good step, 1, to") != NULL, "%s", cli_out);
    CHECK_EQ_INT(count_lines(cli_out, "anomaly: "), 1);
    char path[400];
    struct stat st;
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", ck);
    CHECK_MSG(stat(path, &st) == 0, "no %s", path);
    /* The log: step 1's record, then the event. */
    char *body = cli_read_file(log, NULL), *lines[8];
    CHECK(body != NULL);
    if (!body)
        return;
    int n = cli_lines(body, lines, 8);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK(cli_json_object_line(lines[1]));
        CHECK_MSG(strncmp(lines[1], "{\"event\":\"anomaly\",\"step\":2,\"micro_batch\":1,\"phase\":\"forward\","
                                    "\"op\":\"linear\",\"module\":\"0\",\"category\":\"lower\",\"dtype\":\"f16\",",
                          121) == 0,
                  "%s", lines[1]);
        char v[64];
        CHECK(cli_json_field(lines[1], "inputs_finite", v, sizeof v) && strcmp(v, "true") == 0);
        CHECK(cli_json_field(lines[1], "in1_shape", v, sizeof v) && strcmp(v, "\"16x64\"") == 0);
        CHECK(cli_json_field(lines[1], "in1_absmax", v, sizeof v) && strcmp(v, "1000") == 0);
        CHECK(cli_json_field(lines[1], "inputs", v, sizeof v) && strcmp(v, "3") == 0);
    }
    free(body);
    /* plot reads past the event: one step drawn */
    rc = cli_run("plot %s -o %s", log, svg);
    CHECK_MSG(rc == 0, "plot exit %d:\n%s", rc, cli_out);
}

static void test_continue_reports_each_distinct_op_once_and_goes_on(void)
{
    char log[300];
    cli_path(log, sizeof log, "gpt.jsonl");
    int rc = cli_run(GPT "--lr 1 --steps 12 --anomaly-continue --log %s", text, log);
    CHECK_MSG(rc == 0, "exit %d, expected 0:\n%s", rc, cli_out);
    int shown = count_lines(cli_out, "anomaly: op=");
    CHECK_MSG(shown >= 1, "no anomaly line in:\n%s", cli_out);
    CHECK_MSG(strstr(cli_out, "skipped by the grad scaler; its first inf/NaN: op=") != NULL, "%s", cli_out);
    CHECK_MSG(strstr(cli_out, "step 12/12") != NULL, "the run did not go on:\n%s", cli_out);
    char *body = cli_read_file(log, NULL), *lines[64];
    CHECK(body != NULL);
    if (!body)
        return;
    int n = cli_lines(body, lines, 64), events = 0, steps = 0;
    char keys[64][256];
    for (int i = 0; i < n; i++) {
        CHECK_MSG(cli_json_object_line(lines[i]), "line %d: %s", i + 1, lines[i]);
        if (strncmp(lines[i], "{\"step\":", 8) == 0) {
            steps++;
            continue;
        }
        CHECK_MSG(strncmp(lines[i], "{\"event\":\"anomaly\",", 19) == 0, "%s", lines[i]);
        if (events == 64)
            break;
        char phase[32] = "", op[64] = "", module[128] = "", v[16] = "";
        CHECK(cli_json_field(lines[i], "phase", phase, sizeof phase));
        CHECK(cli_json_field(lines[i], "op", op, sizeof op));
        CHECK(cli_json_field(lines[i], "module", module, sizeof module));
        CHECK(cli_json_field(lines[i], "continued", v, sizeof v) && strcmp(v, "true") == 0);
        snprintf(keys[events], sizeof keys[events], "%s %s %s", phase, op, module);
        for (int k = 0; k < events; k++)
            CHECK_MSG(strcmp(keys[k], keys[events]) != 0, "reported twice: %s", keys[events]);
        events++;
    }
    CHECK_EQ_INT(steps, 12);
    CHECK_EQ_INT(events, shown);
    free(body);
}

static void test_nothing_is_said_without_the_option_or_an_anomaly(void)
{
    int rc = cli_run(GPT "--lr 1 --steps 6", text);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, cli_out);
    CHECK_MSG(strstr(cli_out, "anomaly:") == NULL && strstr(cli_out, "inf/NaN") == NULL, "%s", cli_out);
    rc = cli_run("train --model gpt --layers 1 --heads 2 --width 32 --context 16 --batch 4 --threads 1 "
                 "--precision fp32 --steps 4 --data %s --detect-anomaly",
                 text);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, cli_out);
    CHECK_MSG(strstr(cli_out, "anomaly:") == NULL && strstr(cli_out, "inf/NaN") == NULL, "%s", cli_out);
}

int main(void)
{
    cli_init_tiny("test-cli-anomaly", NULL, text);
    cli_path(big, sizeof big, "bright");
    mkdir(big, 0700);
    write_bright_images(big);
    RUN_IF(cli_have_binary, test_an_overflowing_linear_stops_the_run_naming_it);
    RUN_IF(cli_have_binary, test_continue_reports_each_distinct_op_once_and_goes_on);
    RUN_IF(cli_have_binary, test_nothing_is_said_without_the_option_or_an_anomaly);
    cli_cleanup();
    return harness_done();
}
