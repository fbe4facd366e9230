/*
 * profile_out.c - what the profiler's events become: the Chrome trace, the
 * key_averages table, the verdict and the summary. (Skeleton: filled in by
 * the profiler's outputs work.)
 */
#include "base/profile.h"

static amp_status not_built(const char *fn)
{
    return amp_set_error(AMP_ERR_STATE, "%s: not built yet", fn);
}

amp_status amp_profiler_write_trace(const char *path)
{
    (void)path;
    return not_built("profiler_write_trace");
}

amp_status amp_profiler_print_table(FILE *f, int max_rows)
{
    (void)f;
    (void)max_rows;
    return not_built("profiler_print_table");
}

amp_status amp_profiler_print_verdict(FILE *f)
{
    (void)f;
    return not_built("profiler_print_verdict");
}

amp_status amp_profiler_summary(amp_profile_summary *out)
{
    (void)out;
    return not_built("profiler_summary");
}
