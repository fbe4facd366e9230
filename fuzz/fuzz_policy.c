/*
 * fuzz_policy.c - libFuzzer target: the autocast policy file `train
 * --policy` reads and `ampc policy search` writes (tools/policy_file.c).
 * A file that parses is written back and read again: the second reading
 * must give the same modules and ops (the writer's output is always a
 * file the reader takes). What the reader refuses it says.
 * Seeds: fuzz/corpus/policy.
 */
#include "policy_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_policy: %s\n", what);
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    policy p, q;
    if (policy_parse((const char *)data, size, "policy.json", &p) != AMP_OK) {
        check(strncmp(amp_last_error(), "policy.json: ", 13) == 0, "a refusal that does not name the file");
        return 0;
    }
    char *text = policy_to_json(&p);
    check(text != NULL, "the writer failed");
    check(policy_parse(text, strlen(text), "written", &q) == AMP_OK, "the writer's output does not read back");
    check(p.n_modules == q.n_modules && p.n_ops == q.n_ops, "a different policy read back");
    for (int i = 0; i < p.n_modules; i++)
        check(strcmp(p.modules[i], q.modules[i]) == 0, "a module changed on the way back");
    for (int i = 0; i < p.n_ops; i++)
        check(p.ops[i].op == q.ops[i].op && p.ops[i].cat == q.ops[i].cat, "an op changed on the way back");
    free(text);
    policy_free(&p);
    policy_free(&q);
    return 0;
}
