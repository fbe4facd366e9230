/*
 * plot_cmd.c - the `ampc plot` command line: LOG [-o OUT.svg], the
 * default output name, and the messages and exit codes around plot_file.
 */
#include "plot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void plot_usage(FILE *f)
{
    fprintf(f, "usage: ampc plot LOG [-o OUT.svg]\n\n"
               "Draws a training log (JSON Lines, one object per optimizer step) as an SVG:\n"
               "the loss over the steps (log scale when it spans more than two decades,\n"
               "with a smoothed line), and the grad scaler's loss scale on a log2 axis,\n"
               "with the skipped steps marked in red.\n\n"
               "options:\n"
               "  -o, --output FILE  the SVG to write (default: LOG with its .jsonl, .json,\n"
               "                     .ndjson or .log extension replaced by .svg)\n"
               "  -h, --help         this help\n");
}

/* LOG's name with a log extension replaced by .svg (malloc'd). */
char *default_output(const char *log)
{
    static const char *const exts[] = {".jsonl", ".ndjson", ".json", ".log"};
    size_t n = strlen(log);
    const char *base = strrchr(log, '/');
    base = base ? base + 1 : log;
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        size_t k = strlen(exts[i]);
        if (n > k && (size_t)(log + n - base) > k && strcmp(log + n - k, exts[i]) == 0) {
            n -= k;
            break;
        }
    }
    char *out = malloc(n + 5);
    if (out) {
        memcpy(out, log, n);
        memcpy(out + n, ".svg", 5);
    }
    return out;
}

int plot_run(int argc, char **argv)
{
    const char *log = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            plot_usage(stdout);
            return 0;
        }
        if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ampc plot: %s needs a file name\n", a);
                return 2;
            }
            out = argv[++i];
        } else if (strncmp(a, "--output=", 9) == 0) {
            out = a + 9;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "ampc plot: unknown option '%s' (see ampc plot --help)\n", a);
            return 2;
        } else if (log) {
            fprintf(stderr, "ampc plot: one log at a time ('%s' and '%s')\n", log, a);
            return 2;
        } else {
            log = a;
        }
    }
    if (!log) {
        plot_usage(stderr);
        return 2;
    }
    char *def = out ? NULL : default_output(log);
    if (!out && !def) {
        fprintf(stderr, "ampc plot: out of memory\n");
        return 1;
    }
    const char *path = out ? out : def;
    if (strcmp(path, log) == 0) {
        fprintf(stderr, "ampc plot: the output %s would overwrite the log\n", path);
        free(def);
        return 2;
    }
    plot_summary s;
    int rc = 0;
    if (plot_file(log, path, &s) != AMP_OK) {
        fprintf(stderr, "ampc %s\n", amp_last_error());
        rc = 1;
    } else {
        printf("wrote %s: %lld steps, %lld skipped, %lld NaN/inf losses\n", path, (long long)s.steps,
               (long long)s.skipped, (long long)s.nonfinite);
    }
    free(def);
    return rc;
}
