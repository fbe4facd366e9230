/*
 * profile_train.c - `ampc train --profile [FILE]`: the profiler around
 * --profile-steps training steps after --profile-warmup steps (counted from
 * the start, or from the step a resumed run starts at), then the op table,
 * the verdict and the trace. The trace replaces only an earlier ampc trace
 * (or an empty file): never a file the user had for something else. Profiling records; it changes no value the
 * step computes, so the losses are those of the same run without it.
 */
#include "profile_train.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE_ROWS 20 /* the table's longest rows */

/* Whether path starts as the traces amp_profiler_write_trace writes. */
static bool is_trace(const char *path)
{
    static const char head[] = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"ampc ";
    char buf[sizeof head - 1];
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return n == sizeof buf && memcmp(buf, head, sizeof buf) == 0;
}

int profile_preflight(const train_opts *o)
{
    if (!o->profile)
        return -1;
    struct stat st;
    if (stat(o->profile, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fprintf(stderr, "ampc: --profile: '%s' is a directory; give a file name for the trace\n", o->profile);
            return 1;
        }
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "ampc: --profile: '%s' is not a regular file (the trace replaces its file)\n",
                    o->profile);
            return 1;
        }
        if (st.st_size > 0 && !is_trace(o->profile)) {
            fprintf(stderr, "ampc: --profile: '%s' exists and is not an ampc trace: not replaced (remove it or "
                            "give another FILE)\n", o->profile);
            return 1;
        }
    }
    /* The trace is written to a temporary beside FILE, then renamed: both
     * need the directory writable. Try it now, before hours of training. */
    size_t n = strlen(o->profile) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        fprintf(stderr, "ampc: --profile: out of memory\n");
        return 1;
    }
    snprintf(tmp, n, "%s.tmp%ld", o->profile, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int err = f ? 0 : errno;
    if (f) {
        fclose(f);
        remove(tmp);
    }
    free(tmp);
    if (!f) {
        fprintf(stderr, "ampc: --profile: cannot write the trace '%s': %s\n", o->profile, strerror(err));
        return 1;
    }
    if (access(o->profile, F_OK) == 0 && access(o->profile, W_OK) != 0) {
        fprintf(stderr, "ampc: --profile: cannot write the trace '%s': %s\n", o->profile, strerror(errno));
        return 1;
    }
    return -1;
}

int profile_window_init(profile_window *w, const train_opts *o, int64_t first, int64_t stop)
{
    *w = (profile_window){.o = o, .start = stop, .end = stop};
    if (!o->profile)
        return -1;
    if (stop - first <= o->profile_warmup) {
        fprintf(stderr, "ampc: --profile: the run takes %lld step%s (from step %lld), not more than "
                        "--profile-warmup %lld: no step left to profile (lower --profile-warmup or add --steps)\n",
                (long long)(stop - first), stop - first == 1 ? "" : "s", (long long)first,
                (long long)o->profile_warmup);
        return EXIT_USAGE;
    }
    w->start = first + o->profile_warmup;
    w->end = stop - w->start > o->profile_steps ? w->start + o->profile_steps : stop;
    return -1;
}

void profile_step_begin(profile_window *w, int64_t step)
{
    if (step != w->start || w->on)
        return;
    if (amp_profiler_start(NULL) != AMP_OK)
        fprintf(stderr, "ampc: --profile: %s; training goes on without it\n", amp_last_error());
    else
        w->on = true;
}

void profile_step_end(profile_window *w, int64_t step, progress *pg)
{
    if (!w->on)
        return;
    amp_profiler_step();
    if (step + 1 < w->end)
        return;
    w->on = false;
    progress_clear(pg);
    if (amp_profiler_stop() != AMP_OK) {
        fprintf(stderr, "ampc: --profile: %s\n", amp_last_error());
        return;
    }
    int64_t n = w->end - w->start;
    printf("\nprofile of steps %lld to %lld (%lld step%s after %lld of warm-up):\n\n", (long long)w->start + 1,
           (long long)w->end, (long long)n, n == 1 ? "" : "s", (long long)w->o->profile_warmup);
    if (amp_profiler_print_table(stdout, TABLE_ROWS) != AMP_OK || amp_profiler_print_verdict(stdout) != AMP_OK)
        fprintf(stderr, "ampc: --profile: %s\n", amp_last_error());
    if (amp_profiler_write_trace(w->o->profile) != AMP_OK)
        fprintf(stderr, "ampc: --profile: %s; training goes on\n", amp_last_error());
    else
        printf("trace written to %s (open it in https://ui.perfetto.dev or chrome://tracing)\n\n", w->o->profile);
    fflush(stdout);
    amp_profiler_reset(); /* the events' memory back before training goes on */
}

void profile_abort(profile_window *w)
{
    if (w->on)
        amp_profiler_reset();
    w->on = false;
}
