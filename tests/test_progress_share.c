/*
 * test_progress_share.c - the shares in the progress line's f16 health
 * report (--health-every): none and all are "0%" and "100%", a tiny share
 * is "<0.001%" (not "1.2e-05%"), a near-whole one ">99.9%" (not "100.0%"),
 * small ones keep three decimals, the rest one.
 *
 * The program's parts come from the ampc_tools library (CMakeLists.txt).
 */
#include "harness.h"

#include "progress.h"

#include <string.h>

/* The report for an unscaled health whose zero count is k of n. */
static const char *zero_share(progress *p, int64_t k, int64_t n)
{
    amp_f16_health h = {0};
    h.numel = n;
    h.zero = k;
    memset(p, 0, sizeof *p);
    progress_health(p, 7, 1.0, NULL, &h);
    return p->health;
}

static void test_shares(void)
{
    const struct {
        int64_t k, n;
        const char *want;
    } cases[] = {
        {0, 1000, "zero 0%;"},
        {1000, 1000, "zero 100%;"},
        {12, 100000000, "zero <0.001%;"},      /* 1.2e-05 % */
        {12, 100000, "zero 0.012%;"},          /* 0.012 % */
        {453, 1000, "zero 45.3%;"},            /* 45.3 % */
        {9996, 10000, "zero >99.9%;"},         /* 99.96 %: not all */
        {9994, 10000, "zero 99.9%;"},          /* 99.94 % */
        {1, 0, "zero 0%;"},                    /* no elements */
    };
    progress p;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *line = zero_share(&p, cases[i].k, cases[i].n);
        CHECK_MSG(strstr(line, cases[i].want) != NULL, "%lld of %lld: no \"%s\" in %s", (long long)cases[i].k,
                  (long long)cases[i].n, cases[i].want, line);
    }
    CHECK(strstr(zero_share(&p, 3, 7), "at step 7: zero 42.9%;") != NULL);
}

int main(void)
{
    RUN(test_shares);
    return harness_done();
}
