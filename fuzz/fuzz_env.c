/*
 * fuzz_env.c - libFuzzer target: the input's first byte picks one of the
 * environment variables ampc reads, the rest (up to a NUL) is its value.
 * The library's table (src/base/env.c: amp_check_environment, env_choice,
 * env_number) and the program's own three (tools/memcheck.c: mem_env_check,
 * mem_parse_bytes; tools/train_opts.c: opts_env_check) read it; a value amp_check_environment passes must be
 * one the reader takes (a choice found, a number in the row's range), and
 * a value it refuses must be read as the default. Seeds: fuzz/corpus/env.
 */
#include "base/env.h"
#include "memcheck.h"
#include "train_opts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const cli_vars[] = {"AMPC_MEMORY_LIMIT", "AMPC_NO_MEMORY_CHECK", "AMPC_FLUSH_DENORMAL"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int n_vars = ENV_COUNT + (int)(sizeof cli_vars / sizeof cli_vars[0]);
    const int pick = data[0] % n_vars;
    char *value = malloc(size);
    if (!value)
        return 0;
    memcpy(value, data + 1, size - 1);
    value[size - 1] = '\0';
    const char *name = pick < ENV_COUNT ? env_name((env_var)pick) : cli_vars[pick - ENV_COUNT];
    setenv(name, value, 1);
    if (pick < ENV_COUNT) {
        const env_var v = (env_var)pick;
        const bool ok = amp_check_environment() == AMP_OK;
        if (ok != env_value_ok(v, value))
            __builtin_trap(); /* the check and the table disagree */
        const int choice = env_choice(v, -1);
        const double number = env_number(v, NAN);
        /* A value the check passes is read as itself (unless empty: the
         * default); one it refuses is read as the default. */
        const bool read = choice >= 0 || !isnan(number);
        if (*value && read != ok)
            __builtin_trap();
        if (!isnan(number) && !isfinite(number))
            __builtin_trap();
    } else {
        uint64_t bytes;
        (void)mem_parse_bytes(value, &bytes);
        (void)mem_env_check();
        /* AMPC_FLUSH_DENORMAL: "", 0 and 1 pass, anything else is refused */
        const bool flag = !*value || strcmp(value, "0") == 0 || strcmp(value, "1") == 0;
        if (pick - ENV_COUNT == 2 && (opts_env_check() < 0) != flag)
            __builtin_trap();
    }
    unsetenv(name);
    free(value);
    return 0;
}
