/*
 * test_cli_flush_denormal.c - `--flush-denormal` and AMPC_FLUSH_DENORMAL
 * as a user runs them: the run says it flushes, its log's start record
 * holds "flush_denormal":true (a run without it writes none), its
 * checkpoint keeps the setting for --resume and eval, generate takes it,
 * and a value of the variable other than 0 or 1 is refused (exit 2)
 * naming it.
 */
#include "test_cli_util.h"

static char text[256];

#define GPT "--model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 4 --threads 2 --val-batches 1 "
#define FLUSHED "subnormals flushed to zero"

/* The log's first line into buf. */
static void first_line(const char *log, char *buf, size_t n)
{
    char *body = cli_read_file(log, NULL);
    CHECK(body != NULL);
    snprintf(buf, n, "%.*s", body ? (int)strcspn(body, "\n") : 0, body ? body : "");
    free(body);
}

static void test_the_option_is_said_logged_and_kept_on_resume(void)
{
    char ck[512], log[512], rec[512];
    cli_path(ck, sizeof ck, "run");
    cli_path(log, sizeof log, "run.jsonl");
    CLI_OK("train " GPT "--precision fp32 --steps 3 --stop-at 2 --flush-denormal --save %s --log %s", text, ck, log);
    CHECK_OUT("precision fp32, " FLUSHED);
    first_line(log, rec, sizeof rec);
    CHECK_MSG(strcmp(rec, "{\"event\":\"start\",\"flush_denormal\":true}") == 0, "start record %s", rec);
    /* The checkpoint keeps it: the resumed run flushes without the option,
     * and its part of the log starts with the record again. */
    CLI_OK("train --resume %s --log %s", ck, log);
    CHECK_OUT(FLUSHED);
    char *body = cli_read_file(log, NULL);
    CHECK_MSG(test_count(body, "{\"event\":\"start\",\"flush_denormal\":true}") == 2, "log:\n%s", body ? body : "");
    free(body);
    CLI_OK("eval %s", ck);
    CHECK_OUT("step 3");
    CHECK_OUT(FLUSHED);
    CLI_OK("generate %s --tokens 4 --quiet --flush-denormal", ck);
}

static void test_without_it_nothing_changes(void)
{
    char ck[512], log[512], rec[512];
    cli_path(ck, sizeof ck, "plain");
    cli_path(log, sizeof log, "plain.jsonl");
    CLI_OK("train " GPT "--precision fp32 --steps 1 --save %s --log %s", text, ck, log);
    CHECK_MSG(strstr(cli_out, FLUSHED) == NULL, "output:\n%s", cli_out);
    first_line(log, rec, sizeof rec);
    CHECK_MSG(strncmp(rec, "{\"step\":1,", 10) == 0, "first line %s", rec);
    /* AMPC_FLUSH_DENORMAL=0 is the default, and "" too */
    CLI_OK_ENV("AMPC_FLUSH_DENORMAL=0", "train " GPT "--precision fp32 --steps 1", text);
    CHECK_MSG(strstr(cli_out, FLUSHED) == NULL, "output:\n%s", cli_out);
    CLI_OK_ENV("AMPC_FLUSH_DENORMAL=", "train " GPT "--precision fp32 --steps 1", text);
    CHECK_MSG(strstr(cli_out, FLUSHED) == NULL, "output:\n%s", cli_out);
}

static void test_the_environment_variable_is_the_option(void)
{
    char ck[512], log[512], rec[512];
    cli_path(ck, sizeof ck, "env");
    cli_path(log, sizeof log, "env.jsonl");
    CLI_OK_ENV("AMPC_FLUSH_DENORMAL=1", "train " GPT "--steps 2 --stop-at 1 --save %s --log %s", text, ck, log);
    CHECK_OUT("precision bf16, " FLUSHED);
    first_line(log, rec, sizeof rec);
    CHECK_MSG(strcmp(rec, "{\"event\":\"start\",\"flush_denormal\":true}") == 0, "start record %s", rec);
    CLI_OK("train --resume %s", ck); /* recorded in the run: kept without the variable */
    CHECK_OUT(FLUSHED);
}

static void test_a_bad_value_of_the_variable_is_refused(void)
{
    static const char *const bad[] = {"AMPC_FLUSH_DENORMAL=yes", "AMPC_FLUSH_DENORMAL=2",
                                      "AMPC_FLUSH_DENORMAL=' 1'", "AMPC_FLUSH_DENORMAL=true"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cli_run_env(bad[i], "train " GPT "--steps 1", text);
        CHECK_MSG(rc == 2, "%s: exit %d, expected 2:\n%s", bad[i], rc, cli_out);
        CHECK_MSG(strstr(cli_out, "environment variable AMPC_FLUSH_DENORMAL=") && strstr(cli_out, "is not 0 or 1"),
                  "%s:\n%s", bad[i], cli_out);
        CHECK_MSG(strstr(cli_out, "step 1") == NULL, "%s trained:\n%s", bad[i], cli_out);
    }
}

int main(void)
{
    cli_init_tiny("test-cli-flush-denormal", NULL, text);
    RUN_IF(cli_have_binary, test_the_option_is_said_logged_and_kept_on_resume);
    RUN_IF(cli_have_binary, test_without_it_nothing_changes);
    RUN_IF(cli_have_binary, test_the_environment_variable_is_the_option);
    RUN_IF(cli_have_binary, test_a_bad_value_of_the_variable_is_refused);
    cli_cleanup();
    return harness_done();
}
