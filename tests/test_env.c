/*
 * test_env.c - the environment is input too. Every variable the library
 * reads (AMPC_CPU_LIB, AMPC_GEMM_F16, AMPC_ONEDNN_SPLIT, AMPC_KEEP_CASTS,
 * AMPC_SPIN_US, AMPC_DIST_TIMEOUT) and the ampc program's own
 * (AMPC_MEMORY_LIMIT, AMPC_NO_MEMORY_CHECK, AMPC_FLUSH_DENORMAL):
 *
 *   - amp_check_environment refuses a value the variable does not take,
 *     naming the variable, the value and what it takes; unset and empty
 *     are the default; the documented values pass;
 *   - the ampc program refuses such a value before any command runs
 *     (exit 2, nothing read or written), never read as the default
 *     (AMPC_CPU_LIB=bogus / OWN / oneDNN would run on auto,
 *     AMPC_DIST_TIMEOUT=abc on 300 s, and AMPC_NO_MEMORY_CHECK=false turn
 *     the memory check off);
 *   - a documented value does what it says (AMPC_CPU_LIB=own is reported
 *     by --version).
 */
#include "test_cli_util.h"

#include <stdlib.h>

typedef struct {
    const char *name;
    const char *bad[6];
    const char *good[4];
} var_case;

static const var_case lib_vars[] = {
    {"AMPC_CPU_LIB", {"bogus", "OWN", "oneDNN", "own ", "auto,own"}, {"auto", "own", "onednn", ""}},
    {"AMPC_GEMM_F16", {"Widen", "fast", "1"}, {"auto", "widen", "split"}},
    {"AMPC_ONEDNN_SPLIT", {"yes", "2", "false", "00"}, {"0", "1"}},
    {"AMPC_KEEP_CASTS", {"no", "off", "-1"}, {"0", "1"}},
    {"AMPC_SPIN_US", {"abc", "-5", "1.5", "2e6", "nan"}, {"0", "50", "1000000"}},
    {"AMPC_DIST_TIMEOUT", {"abc", "0", "-1", "inf", "1e8", "10s"}, {"0.5", "300", "1e7"}},
};

static void test_library_refuses_values_a_variable_does_not_take(void)
{
    for (size_t i = 0; i < sizeof lib_vars / sizeof lib_vars[0]; i++) {
        const var_case *c = &lib_vars[i];
        for (int k = 0; k < 6 && c->bad[k]; k++) {
            setenv(c->name, c->bad[k], 1);
            CHECK_MSG(amp_check_environment() == AMP_ERR_ARG, "%s=%s accepted", c->name, c->bad[k]);
            char want[256];
            snprintf(want, sizeof want, "environment variable %s=%s is not ", c->name, c->bad[k]);
            CHECK_MSG(strstr(amp_last_error(), want) != NULL, "%s=%s: %s", c->name, c->bad[k], amp_last_error());
        }
        for (int k = 0; k < 4 && c->good[k]; k++) {
            setenv(c->name, c->good[k], 1);
            CHECK_MSG(amp_check_environment() == AMP_OK, "%s=%s refused: %s", c->name, c->good[k], amp_last_error());
        }
        unsetenv(c->name);
        CHECK_OK(amp_check_environment());
    }
}

/* A variable's setting and the refusal it must draw. */
typedef struct {
    const char *env, *needle;
} env_case;

static void test_the_program_refuses_them_before_any_command(void)
{
    static const env_case cases[] = {
        {"AMPC_CPU_LIB=bogus", "AMPC_CPU_LIB=bogus is not one of auto/own/onednn"},
        {"AMPC_CPU_LIB=OWN", "AMPC_CPU_LIB=OWN is not one of auto/own/onednn"},
        {"AMPC_CPU_LIB=oneDNN", "AMPC_CPU_LIB=oneDNN is not one of auto/own/onednn"},
        {"AMPC_DIST_TIMEOUT=abc", "AMPC_DIST_TIMEOUT=abc is not a number from 0.001 to 1e+07"},
        {"AMPC_SPIN_US=1.5", "AMPC_SPIN_US=1.5 is not an integer from 0 to 1e+06"},
        {"AMPC_NO_MEMORY_CHECK=false", "AMPC_NO_MEMORY_CHECK=false is not 0 or 1"},
        {"AMPC_NO_MEMORY_CHECK=no", "AMPC_NO_MEMORY_CHECK=no is not 0 or 1"},
        {"AMPC_MEMORY_LIMIT=lots", "AMPC_MEMORY_LIMIT=lots is not a number of bytes"},
        {"AMPC_FLUSH_DENORMAL=on", "AMPC_FLUSH_DENORMAL=on is not 0 or 1"},
    };
    char dir[512];
    cli_path(dir, sizeof dir, "ck");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *cmds[] = {"train --model mlp --data /nonexistent --steps 1 --save %s", "eval %s", "policy"};
        for (int k = 0; k < 3; k++) {
            char args[700];
            snprintf(args, sizeof args, cmds[k], dir);
            int rc = cli_run_env(cases[i].env, "%s", args);
            CHECK_MSG(rc == 2 && strstr(cli_out, cases[i].needle), "%s ampc %s: exit %d:\n%s", cases[i].env, args, rc,
                      cli_out);
        }
    }
    struct stat sb;
    CHECK_MSG(stat(dir, &sb) != 0, "--save's directory was made before the refusal");
    /* The documented values pass, and do what they say. */
    int rc = cli_run_env("AMPC_CPU_LIB=own", "--version");
    CHECK_MSG(rc == 0 && (strstr(cli_out, "off (AMPC_CPU_LIB=own)") || !strstr(cli_out, "oneDNN")), "exit %d:\n%s",
              rc, cli_out);
    CLI_OK_ENV("AMPC_CPU_LIB= AMPC_NO_MEMORY_CHECK=0 AMPC_MEMORY_LIMIT=4G AMPC_DIST_TIMEOUT=30 AMPC_FLUSH_DENORMAL=1",
               "policy");
}

int main(void)
{
    cli_init("test-env");
    RUN(test_library_refuses_values_a_variable_does_not_take);
    RUN_IF(cli_have_binary, test_the_program_refuses_them_before_any_command);
    cli_cleanup();
    return harness_done();
}
