/*
 * plot_cmd.c - the `ampc plot` command line: LOG [-o OUT.svg], the
 * default output name, and the messages and exit codes around plot_file.
 */
#include "plot.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *log, *out;
} plot_args;

static const opt_def plot_rows[] = {
    {.name = "output", .alias = 'o', .meta = "FILE", .kind = OPT_STR, .off = offsetof(plot_args, out),
     .help = "the SVG to write (default: LOG with its .jsonl, .json,\n"
             ".ndjson or .log extension replaced by .svg); an existing\n"
             "file is replaced only when it is an SVG"},
};

/* ampc plot LOG: one log, named by the argument that is not an option
 * ("-" alone is a name too). */
static int plot_log(const opt_cmd *c, const char *a, void *ctx)
{
    plot_args *p = ctx;
    if (a[0] == '-' && a[1] != '\0') {
        fprintf(stderr, "%s: unknown option '%s' (see ampc plot --help)\n", c->who, a);
        return EXIT_USAGE;
    }
    if (p->log) {
        fprintf(stderr, "%s: one log at a time ('%s' and '%s')\n", c->who, p->log, a);
        return EXIT_USAGE;
    }
    p->log = a;
    return -1;
}

const opt_cmd plot_options = {
    .who = "ampc plot",
    .usage = "usage: ampc plot LOG [-o OUT.svg]\n\n"
             "Draws a training log (JSON Lines, one object per optimizer step) as an SVG:\n"
             "the loss over the steps (log scale when it spans more than two decades,\n"
             "with a smoothed line), the grad scaler's loss scale on a log2 axis,\n"
             "with the skipped steps marked in red, and the f16 health of the gradients\n"
             "(ampc train --health-every: the share that is zero, would flush to zero,\n"
             "be subnormal or overflow in f16, unscaled and at the scale).\n\n",
    OPT_ONE_TABLE(plot_rows),
    .positional = plot_log,
};

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

/* The output may be written: not the log itself (under any name), and
 * never an existing file other than an SVG (a checkpoint given as -o
 * stays as it was). -1, or the exit code after a message. */
static int output_check(const char *log, const char *out)
{
    struct stat so, sl;
    if (stat(out, &so) != 0)
        return -1; /* a new file, or fopen will say why not */
    if (strcmp(out, log) == 0 || (stat(log, &sl) == 0 && so.st_dev == sl.st_dev && so.st_ino == sl.st_ino)) {
        fprintf(stderr, "ampc plot: the output %s would overwrite the log\n", out);
        return 2;
    }
    if (!S_ISREG(so.st_mode) || so.st_size == 0)
        return -1; /* a directory or device: fopen's error, or written through */
    char head[5] = {0};
    FILE *f = fopen(out, "rb");
    size_t got = f ? fread(head, 1, 4, f) : 0;
    if (f)
        fclose(f);
    if (got == 4 && memcmp(head, "<svg", 4) == 0)
        return -1;
    fprintf(stderr, "ampc plot: the output %s exists and is not an SVG (it does not start with <svg); it was left "
                    "untouched: give another -o\n", out);
    return 1;
}

int plot_run(int argc, char **argv)
{
    plot_args p = {0};
    int rc = opt_parse(&plot_options, &(opt_dst){&p, NULL}, &p, argc, argv);
    if (rc >= 0)
        return rc;
    if (!p.log) {
        opt_usage(stderr, &plot_options);
        return EXIT_USAGE;
    }
    const char *log = p.log, *out = p.out;
    char *def = out ? NULL : default_output(log);
    if (!out && !def) {
        fprintf(stderr, "ampc plot: out of memory\n");
        return 1;
    }
    const char *path = out ? out : def;
    rc = output_check(log, path);
    if (rc >= 0) {
        free(def);
        return rc;
    }
    plot_summary s;
    rc = 0;
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
