/*
 * fuzz_args.c - libFuzzer target: the input is a command line, one
 * argument per line (a NUL byte ends an argument too), parsed as the
 * train command's options and as the eval command's (train_parse,
 * eval_parse), then checked and completed (opts_resolve) when the parse
 * goes on; and as the generate, profile and export commands'
 * (generate_parse, profile_parse: their own rows, profile's before
 * train's; export_parse; audit_parse; policy_search_parse, `ampc policy
 * search`'s). Seeds:
 * fuzz/corpus/args.
 */
#include "cli.h"
#include "policy_search.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 128

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    for (size_t i = 0, start = 0; i <= size && argc < MAX_ARGS; i++) {
        if (i < size && buf[i] != '\n' && buf[i] != '\0')
            continue;
        if (i < size || i > start) /* no empty argument after the last separator */
            argv[argc++] = buf + start;
        buf[i] = '\0';
        start = i + 1;
    }
    argv[argc] = NULL;
    for (int eval = 0; eval < 2; eval++) {
        train_opts o;
        train_opts_default(&o);
        if ((eval ? eval_parse(argc, argv, &o) : train_parse(argc, argv, &o)) < 0)
            opts_resolve(&o);
    }
    generate_parse(argc, argv);
    profile_parse(argc, argv);
    export_parse(argc, argv);
    audit_parse(argc, argv);
    policy_search_parse(argc, argv);
    free(buf);
    return 0;
}
