/*
 * test_policy_doc.c - docs/autocast-policy.md is what `ampc policy
 * --markdown` prints, so the published policy cannot drift from the table.
 */
#include "harness.h"

#include <stdlib.h>

static char *slurp(FILE *f)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    return buf;
}

static void test_policy_doc_matches_the_table(void)
{
    const char *src = getenv("AMPC_SOURCE_DIR"), *bld = getenv("AMPC_BUILD_DIR");
    if (!src || !bld) {
        harness_skip("AMPC_SOURCE_DIR / AMPC_BUILD_DIR not set (run through ctest)");
        return;
    }
    char path[1024], cmd[1100];
    snprintf(path, sizeof path, "%s/docs/autocast-policy.md", src);
    snprintf(cmd, sizeof cmd, "%s/ampc policy --markdown", bld);
    FILE *doc = fopen(path, "r");
    FILE *out = popen(cmd, "r");
    CHECK(doc != NULL && out != NULL);
    if (!doc || !out)
        return;
    char *a = slurp(doc), *b = slurp(out);
    fclose(doc);
    CHECK_EQ_INT(pclose(out), 0);
    CHECK_MSG(strcmp(a, b) == 0,
              "docs/autocast-policy.md is stale: regenerate with `ampc policy --markdown > "
              "docs/autocast-policy.md`");
    CHECK(strstr(b, "| matmul | lower | lower |") != NULL);
    CHECK(strstr(b, "| softmax | unlisted | fp32_out |") != NULL);
    free(a);
    free(b);
}

int main(void)
{
    RUN(test_policy_doc_matches_the_table);
    return harness_done();
}
