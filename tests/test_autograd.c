/*
 * test_autograd.c - the tape: leaves, accumulation, freed graphs, no-grad,
 * errors that keep the first message, and the pool.
 */
#include "harness.h"

static void test_error_is_per_thread_and_clearable(void)
{
    amp_clear_error();
    CHECK_EQ_INT(amp_last_status(), AMP_OK);
    CHECK(strcmp(amp_last_error(), "") == 0);
    CHECK(amp_item(NULL) != amp_item(NULL)); /* NaN */
    CHECK_ERROR(AMP_ERR_ARG, "NULL tensor");
}

int main(void)
{
    RUN(test_error_is_per_thread_and_clearable);
    return harness_done();
}
