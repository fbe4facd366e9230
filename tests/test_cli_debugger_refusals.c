/*
 * test_cli_debugger_refusals.c - the precision debugger's commands (ampc
 * audit, ampc policy search, train's weight options) refuse what they
 * cannot do before they run, exit 2, naming what was wrong:
 *
 *   - an output path that is a FIFO (its open would wait for a reader
 *     forever), refused before the run, not after every trial of a search;
 *   - --policy and --fp32-modules given to the audit, which measures full
 *     autocast and applies neither (its table would pass for the policy's);
 *   - fp16 weights without fp32 masters, whose f16 gradients the grad
 *     scaler those weights need cannot unscale (a run could not pass step 1);
 *   - an output that is the run's own --data (under any name: a symlink
 *     too) is refused: writing the result there would replace the corpus;
 *   - an existing --out file is left as it was by a refused search;
 *   - a log that starts with an event (--init-scale auto's calibration)
 *     is the run's own: --resume goes on appending to it.
 *
 * Each command runs under `timeout`: a hang fails the test instead of
 * stalling the suite.
 */
#include "test_cli_util.h"

#include <sys/stat.h>

#define LIMIT "timeout 120"

static char fifo[256], policy_path[256], text[256];

static void test_a_fifo_output_is_refused_before_the_run(void)
{
    char args[2][1024];
    snprintf(args[0], sizeof args[0], "audit --model mlp --steps 1 --svg '%s'", fifo);
    snprintf(args[1], sizeof args[1], "policy search --model mlp --steps 2 --tolerance 0.5 --out '%s'", fifo);
    const cli_refusal cases[] = {{args[0], "--svg"}, {args[0], "a FIFO"}, {args[1], "--out"}, {args[1], "a FIFO"}};
    cli_check_refusals(LIMIT, "", CLI_REFUSALS(cases));
    /* refused before the fp32 reference trained: nothing was run */
    cli_run_env(LIMIT, "%s", args[1]);
    CHECK_MSG(strstr(cli_out, "fp32 (reference)") == NULL, "a trial ran before the refusal:\n%s", cli_out);
}

static void test_the_audit_refuses_a_policy_it_would_not_apply(void)
{
    char args[1024];
    snprintf(args, sizeof args, "audit --model mlp --steps 1 --policy '%s'", policy_path);
    const cli_refusal cases[] = {
        {args, "--policy: the audit measures full autocast"},
        {"audit --model mlp --steps 1 --fp32-modules 0", "--fp32-modules: the audit measures full autocast"},
    };
    cli_check_refusals(LIMIT, "", CLI_REFUSALS(cases));
}

static void test_fp16_weights_without_masters_are_refused(void)
{
    char gpt[1024];
    snprintf(gpt, sizeof gpt,
             "train --model gpt --data '%s' --layers 1 --width 16 --heads 2 --context 8 --batch 4 --steps 2 "
             "--precision fp16 --param-dtype fp16 --master-weights off",
             text);
    const cli_refusal cases[] = {
        {"train --model mlp --steps 2 --precision fp16 --param-dtype fp16 --master-weights off",
         "--master-weights off with --param-dtype fp16"},
        {gpt, "--master-weights off with --param-dtype fp16"},
    };
    cli_check_refusals(LIMIT, "", CLI_REFUSALS(cases));
    /* with the masters kept, the same run trains */
    CLI_OK("train --model mlp --steps 2 --precision fp16 --param-dtype fp16");
}

static void test_an_output_over_the_runs_data_is_refused(void)
{
    char link[256], before_len[32];
    size_t len0 = 0, len1 = 0;
    char *before = cli_read_file(text, &len0);
    CHECK(before != NULL);
    CHECK(symlink(text, cli_path(link, sizeof link, "corpus-link.txt")) == 0);
    char args[3][1200];
    const char *gpt = "--model gpt --layers 1 --width 16 --heads 2 --context 8 --batch 4 --steps 2";
    snprintf(args[0], sizeof args[0], "audit %s --data '%s' --svg '%s'", gpt, text, text);
    snprintf(args[1], sizeof args[1], "audit %s --data '%s' --svg '%s'", gpt, text, link);
    snprintf(args[2], sizeof args[2], "policy search %s --data '%s' --tolerance 1 --out '%s'", gpt, text, link);
    const cli_refusal cases[] = {
        {args[0], "it is the run's --data"}, {args[1], "it is the run's --data"}, {args[2], "it is the run's --data"}};
    cli_check_refusals(LIMIT, "", CLI_REFUSALS(cases));
    char *after = cli_read_file(text, &len1);
    snprintf(before_len, sizeof before_len, "%zu", len0);
    CHECK_MSG(after && len1 == len0 && memcmp(before, after, len0) == 0, "the corpus (%s bytes) changed",
              before_len);
    free(before);
    free(after);
}

static void test_a_refused_search_leaves_its_out_file(void)
{
    static const char keep[] = "{\"format\": \"ampc-autocast-policy\", \"version\": 1}\n";
    FILE *f = fopen(policy_path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(keep, f);
    fclose(f);
    CHECK_EQ_INT(cli_run_env(LIMIT, "policy search --model mlp --steps 2 --tolerance nan --out '%s'", policy_path), 2);
    size_t len = 0;
    char *got = cli_read_file(policy_path, &len);
    CHECK_MSG(got && len == strlen(keep) && memcmp(got, keep, len) == 0, "--out changed: %s", got ? got : "(gone)");
    free(got);
}

static void test_a_log_starting_with_an_event_is_resumed(void)
{
#define EVENT "{\"event\":\"init_scale_auto\""
    char ck[256], log[256];
    cli_path(ck, sizeof ck, "ck-auto");
    cli_path(log, sizeof log, "auto.jsonl");
    const char *gpt = "--model gpt --layers 1 --width 16 --heads 2 --context 8 --batch 4 --precision fp16 "
                      "--init-scale auto --threads 1";
    CLI_OK("train %s --data '%s' --steps 2 --save '%s' --log '%s'", gpt, text, ck, log);
    size_t len = 0;
    char *first = cli_read_file(log, &len);
    CHECK_MSG(first && strncmp(first, EVENT, strlen(EVENT)) == 0, "the log starts: %.80s",
              first ? first : "(none)");
    free(first);
    CLI_OK("train %s --data '%s' --steps 4 --resume '%s' --log '%s'", gpt, text, ck, log);
    char *all = cli_read_file(log, &len);
    CHECK_MSG(all && strstr(all, "{\"step\":4,") != NULL && strstr(all, "{\"step\":2,") != NULL,
              "steps 2 and 4 not both in the log:\n%s", all ? all : "(none)");
    free(all);
}

int main(void)
{
    cli_init("debugger_refusals");
    if (cli_have_binary()) {
        cli_path(fifo, sizeof fifo, "out.fifo");
        cli_path(policy_path, sizeof policy_path, "policy.json");
        cli_write_tiny_text(cli_path(text, sizeof text, "text.txt"));
        CHECK(mkfifo(fifo, 0600) == 0);
        RUN(test_a_log_starting_with_an_event_is_resumed);
        RUN(test_a_refused_search_leaves_its_out_file);
        RUN(test_a_fifo_output_is_refused_before_the_run);
        RUN(test_the_audit_refuses_a_policy_it_would_not_apply);
        RUN(test_fp16_weights_without_masters_are_refused);
        RUN(test_an_output_over_the_runs_data_is_refused);
    }
    cli_cleanup();
    return harness_done();
}
