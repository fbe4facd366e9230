/*
 * args.c - the train command's options: one table gives each option's
 * name, kind, range and help line; the parser and --help both read it.
 *
 * Options take "--name value" or "--name=value". Every value is checked in
 * full (no trailing characters, no overflow, in range); a bad one is
 * reported with the option's name and the value as typed, exit code 2.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OPT_STR, OPT_INT, OPT_U64, OPT_REAL, OPT_LIST, OPT_FLAG } opt_kind;

typedef struct {
    const char *name;
    const char *meta;
    opt_kind kind;
    size_t off;           /* into train_opts */
    double lo, hi;        /* OPT_INT / OPT_REAL / OPT_LIST items: inclusive range */
    const char *choices;  /* OPT_STR: "a|b|c", or NULL for any text */
    const char *help;
} opt_def;

#define OFF(f) offsetof(train_opts, f)

static const opt_def opts[] = {
    {"model", "NAME", OPT_STR, OFF(model), 0, 0, "mlp", "model to train (default mlp)"},
    {"data", "DIR", OPT_STR, OFF(data_dir), 0, 0, NULL,
     "Fashion-MNIST IDX files, .gz or not (default /usr/share/datasets/fashion-mnist)"},
    {"hidden", "N,N,..", OPT_LIST, OFF(hidden), 1, 1 << 20, NULL,
     "hidden layer widths, \"none\" for a linear model (default 256,128)"},
    {"epochs", "N", OPT_INT, OFF(epochs), 1, 1e6, NULL, "passes over the training set (default 3)"},
    {"steps", "N", OPT_INT, OFF(steps), 1, 1e12, NULL, "stop after N steps instead (default: epochs)"},
    {"batch", "B", OPT_INT, OFF(batch), 1, 1 << 20, NULL, "batch size (default 128)"},
    {"lr", "X", OPT_REAL, OFF(lr), 1e-12, 1e3, NULL,
     "learning rate (default 0.05 for sgd, 0.001 for adam/adamw)"},
    {"optim", "NAME", OPT_STR, OFF(optim), 0, 0, "sgd|adam|adamw", "optimizer: sgd, adam or adamw (default sgd)"},
    {"momentum", "X", OPT_REAL, OFF(momentum), 0, 0.9999, NULL, "SGD momentum (default 0.9)"},
    {"weight-decay", "X", OPT_REAL, OFF(weight_decay), 0, 10, NULL,
     "weight decay (default 0; 0.01 for adamw)"},
    {"seed", "S", OPT_U64, OFF(seed), 0, 0, NULL, "seed for the weights and the shuffling (default 0)"},
    {"threads", "T", OPT_INT, OFF(threads), 0, 1024, NULL, "kernel threads, 0 for every core (default 0)"},
    {"precision", "P", OPT_STR, OFF(precision), 0, 0, "fp32|bf16|fp16",
     "fp32, bf16 autocast, or fp16 autocast with the grad scaler (default fp32)"},
    {"no-scaler", "", OPT_FLAG, OFF(no_scaler), 0, 0, NULL, "fp16 without the grad scaler"},
    {"init-scale", "X", OPT_REAL, OFF(init_scale), 1e-30, 1e30, NULL,
     "the grad scaler's initial scale (default 65536)"},
    {"growth-interval", "N", OPT_INT, OFF(growth_interval), 1, 1e12, NULL,
     "clean steps before the scale grows (default 2000)"},
    {"log-every", "N", OPT_INT, OFF(log_every), 1, 1e12, NULL, "steps between progress lines (default 100)"},
};
#define N_OPTS (int)(sizeof opts / sizeof opts[0])

void train_opts_default(train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = "mlp";
    o->data_dir = "/usr/share/datasets/fashion-mnist";
    o->hidden[0] = 256;
    o->hidden[1] = 128;
    o->n_hidden = 2;
    o->epochs = 3;
    o->steps = 0;
    o->batch = 128;
    o->lr = NAN;
    o->optim = "sgd";
    o->momentum = 0.9;
    o->weight_decay = NAN;
    o->seed = 0;
    o->threads = 0;
    o->precision = "fp32";
    o->no_scaler = false;
    o->init_scale = 65536.0;
    o->growth_interval = 2000;
    o->log_every = 100;
}

double train_lr(const train_opts *o)
{
    if (!isnan(o->lr))
        return o->lr;
    return strcmp(o->optim, "sgd") == 0 ? 0.05 : 1e-3;
}

void train_usage(FILE *f)
{
    fprintf(f, "usage: ampc train [options]\n\n"
               "Trains a classifier on Fashion-MNIST and prints its test accuracy\n"
               "(the last line reads \"test_accuracy 0.XXXX\").\n\noptions:\n");
    for (int i = 0; i < N_OPTS; i++) {
        char left[40];
        snprintf(left, sizeof left, "--%s %s", opts[i].name, opts[i].meta);
        fprintf(f, "  %-22s %s\n", left, opts[i].help);
    }
    fprintf(f, "  %-22s %s\n", "-h, --help", "this text");
}

/* Prints "ampc train: --name: ..." and returns EXIT_USAGE. */
static int bad(const opt_def *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const opt_def *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ampc train: --%s: ", d->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see ampc train --help)\n");
    va_end(ap);
    return EXIT_USAGE;
}

/* A whole decimal integer in [lo, hi]; false when v is anything else. */
static bool parse_int(const char *v, double lo, double hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE || (double)x < lo || (double)x > hi)
        return false;
    *out = x;
    return true;
}

static int parse_list(const opt_def *d, const char *v, train_opts *o)
{
    o->n_hidden = 0;
    if (strcmp(v, "none") == 0)
        return -1;
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        int64_t w;
        if (len >= sizeof item)
            return bad(d, "'%s' is not a list of layer widths (an item is too long)", v);
        memcpy(item, p, len);
        item[len] = '\0';
        if (!parse_int(item, d->lo, d->hi, &w))
            return bad(d, "'%s' is not a list of layer widths 1..%.0f (bad item '%s')", v, d->hi, item);
        if (o->n_hidden == CLI_MAX_HIDDEN)
            return bad(d, "'%s' has more than %d layers", v, CLI_MAX_HIDDEN);
        o->hidden[o->n_hidden++] = w;
        if (!comma)
            return -1;
        p = comma + 1;
    }
}

/* Stores value v of option d into o; -1 when fine, else EXIT_USAGE. */
static int set_option(const opt_def *d, const char *v, train_opts *o)
{
    void *field = (char *)o + d->off;
    switch (d->kind) {
    case OPT_STR:
        if (d->choices) {
            size_t n = strlen(v);
            const char *c = d->choices;
            bool found = false;
            while (*c && !found) {
                size_t len = strcspn(c, "|");
                found = n && len == n && strncmp(c, v, n) == 0;
                c += len + (c[len] == '|');
            }
            if (!found)
                return bad(d, "unknown value '%s' (choose from %s)", v, d->choices);
        }
        *(const char **)field = v;
        return -1;
    case OPT_INT:
        if (!parse_int(v, d->lo, d->hi, (int64_t *)field))
            return bad(d, "'%s' is not a whole number from %.0f to %.0f", v, d->lo, d->hi);
        return -1;
    case OPT_U64: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || errno == ERANGE || v[strspn(v, " \t")] == '-')
            return bad(d, "'%s' is not a whole number from 0 to 2^64-1", v);
        *(uint64_t *)field = x;
        return -1;
    }
    case OPT_REAL: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end)
            return bad(d, "'%s' is not a number", v);
        if (!(x >= d->lo && x <= d->hi))
            return bad(d, "%s is out of range (%g to %g)", v, d->lo, d->hi);
        *(double *)field = x;
        return -1;
    }
    case OPT_LIST:
        return parse_list(d, v, o);
    case OPT_FLAG:
        *(bool *)field = true;
        return -1;
    }
    return -1;
}

int train_parse(int argc, char **argv, train_opts *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            train_usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            fprintf(stderr, "ampc train: unexpected argument '%s' (see ampc train --help)\n", a);
            return EXIT_USAGE;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opt_def *d = NULL;
        for (int k = 0; k < N_OPTS && !d; k++)
            if (strlen(opts[k].name) == len && strncmp(opts[k].name, name, len) == 0)
                d = &opts[k];
        if (!d) {
            fprintf(stderr, "ampc train: unknown option '%.*s' (see ampc train --help)\n",
                    (int)(len + 2), a);
            return EXIT_USAGE;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (d->kind == OPT_FLAG) {
            if (v)
                return bad(d, "takes no value (got '%s')", v);
            v = "";
        } else if (!v) {
            if (i + 1 >= argc)
                return bad(d, "needs a value (%s)", d->meta);
            v = argv[++i];
        }
        int rc = set_option(d, v, o);
        if (rc >= 0)
            return rc;
    }
    if (o->no_scaler && strcmp(o->precision, "fp16") != 0) {
        fprintf(stderr, "ampc train: --no-scaler applies to --precision fp16 only (precision is %s)\n",
                o->precision);
        return EXIT_USAGE;
    }
    return -1;
}
