/*
 * opts.c - the option tables' parser, setter and --help printer (opts.h).
 * Nothing here knows a command: each passes its table (opt_cmd) and the
 * structs its values go to.
 */
#include "opts.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A refused value v of row d: "who: --name: what (see who --help)", or in
 * the row's own words "who: --name 'v': says". EXIT_USAGE. */
static int bad(const char *who, const opt_def *d, const char *v, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(const char *who, const opt_def *d, const char *v, const char *fmt, ...)
{
    if (d->says) {
        fprintf(stderr, "%s: --%s '%s': %s\n", who, d->name, v, d->says);
        return EXIT_USAGE;
    }
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: --%s: ", who, d->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see %s --help)\n", who);
    va_end(ap);
    return EXIT_USAGE;
}

/* Row d given last, without its value. EXIT_USAGE. */
static int missing(const char *who, const opt_def *d)
{
    if (d->says) {
        fprintf(stderr, "%s: --%s needs a value (see %s --help)\n", who, d->name, who);
        return EXIT_USAGE;
    }
    return bad(who, d, "", "needs a value (%s)", d->meta ? d->meta : "");
}

int opt_unexpected(const opt_cmd *c, const char *arg)
{
    fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n", c->who, arg, c->who);
    return EXIT_USAGE;
}

/* A whole decimal number in [lo, hi]: an optional '-', then digits and
 * nothing else; false when v is anything else or overflows. */
static bool parse_int(const char *v, double lo, double hi, int64_t *out)
{
    const char *digits = v + (*v == '-');
    if (!(*digits >= '0' && *digits <= '9'))
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno == ERANGE || (double)x < lo || (double)x > hi)
        return false;
    *out = x;
    return true;
}

static int parse_list(const opt_def *d, const char *v, void *dst, const char *who)
{
    int64_t *items = (int64_t *)((char *)dst + d->off);
    int *count = (int *)((char *)dst + d->count_off);
    *count = 0;
    if (strcmp(v, "none") == 0)
        return -1;
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        int64_t w;
        if (len >= sizeof item)
            return bad(who, d, v, "'%s' is not a list of layer widths (an item is too long)", v);
        memcpy(item, p, len);
        item[len] = '\0';
        if (!parse_int(item, d->lo, d->hi, &w))
            return bad(who, d, v, "'%s' is not a list of layer widths %.0f..%.0f (bad item '%s')", v, d->lo, d->hi,
                       item);
        if (*count == d->cap)
            return bad(who, d, v, "'%s' has more than %d layers", v, d->cap);
        items[(*count)++] = w;
        if (!comma)
            return -1;
        p = comma + 1;
    }
}

int opt_set(const opt_def *d, const char *v, void *dst, const char *who)
{
    void *field = (char *)dst + d->off;
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
                return bad(who, d, v, "unknown value '%s' (choose from %s)", v, d->choices);
        } else if (!*v) {
            return bad(who, d, v, "needs a non-empty value (%s)", d->meta ? d->meta : "");
        } else if (strlen(v) >= PATH_MAX) {
            return bad(who, d, v, "the path is %zu bytes long; the system takes paths of fewer than %d (PATH_MAX)",
                       strlen(v), PATH_MAX);
        }
        *(const char **)field = v;
        return -1;
    case OPT_TEXT:
        *(const char **)field = v;
        return -1;
    case OPT_INT:
        if (!parse_int(v, d->lo, d->hi, (int64_t *)field))
            return bad(who, d, v, "'%s' is not a whole number from %.0f to %.0f", v, d->lo, d->hi);
        return -1;
    case OPT_U64: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (!(*v >= '0' && *v <= '9') || *end || errno == ERANGE)
            return bad(who, d, v, "'%s' is not a whole number from 0 to 2^64-1", v);
        *(uint64_t *)field = x;
        return -1;
    }
    case OPT_REAL: {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end)
            return bad(who, d, v, "'%s' is not a number", v);
        if (x == 0 && d->zero_off) {
            *(double *)field = 0;
            return -1;
        }
        if (!(x >= d->lo && x <= d->hi))
            return bad(who, d, v, "%s is out of range (%s%g to %g)", v, d->zero_off ? "0: off, or " : "", d->lo,
                       d->hi);
        *(double *)field = x;
        return -1;
    }
    case OPT_LIST:
        return parse_list(d, v, dst, who);
    case OPT_FLAG:
        *(bool *)field = true;
        return -1;
    }
    return -1;
}

const opt_def *opt_find(const opt_def *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return &rows[i];
    return NULL;
}

/* Row i of block b (its i-th pick when it picks), or NULL for a pick
 * that names no row (tests/test_cli_opts.c checks there is none). */
static const opt_def *block_row(const opt_block *b, int i, const char **help)
{
    const opt_def *d = b->pick ? opt_find(b->rows, b->n, b->pick[i].name) : &b->rows[i];
    if (help)
        *help = b->pick && b->pick[i].help ? b->pick[i].help : d ? d->help : NULL;
    return d;
}

static int block_size(const opt_block *b) { return b->pick ? b->n_pick : b->n; }

/* The row of c that --name (len bytes of name) or -alias names, and its
 * block in *k; NULL when none does. */
static const opt_def *lookup(const opt_cmd *c, const char *name, size_t len, char alias, int *k)
{
    for (*k = 0; *k < c->n_blocks; (*k)++) {
        const opt_block *b = &c->blocks[*k];
        for (int i = 0; i < block_size(b); i++) {
            const opt_def *d = block_row(b, i, NULL);
            if (d && (alias ? d->alias == alias : strlen(d->name) == len && strncmp(d->name, name, len) == 0))
                return d;
        }
    }
    return NULL;
}

int opt_parse(const opt_cmd *c, const opt_dst *dst, void *ctx, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            opt_usage(stdout, c);
            return 0;
        }
        const opt_def *d = NULL;
        const char *v = NULL;
        int k = 0;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            if (!(d = lookup(c, name, len, 0, &k))) {
                fprintf(stderr, "%s: unknown option '%.*s' (see %s --help)\n", c->who, (int)(len + 2), a, c->who);
                return EXIT_USAGE;
            }
            v = eq ? eq + 1 : NULL;
        } else if (!(a[0] == '-' && a[1] && !a[2] && (d = lookup(c, NULL, 0, a[1], &k)))) {
            int rc = c->positional ? c->positional(c, a, ctx) : opt_unexpected(c, a);
            if (rc >= 0)
                return rc;
            continue;
        }
        if (d->kind == OPT_FLAG) {
            if (v)
                return bad(c->who, d, v, "takes no value (got '%s')", v);
            v = "";
        } else if (!v) {
            /* An optional value ("[FILE]") is the next argument unless that
             * is an option. */
            bool optional = d->meta && d->meta[0] == '[';
            if (i + 1 < argc && !(optional && argv[i + 1][0] == '-'))
                v = argv[++i];
            else if (d->absent)
                v = d->absent;
            else
                return missing(c->who, d);
        }
        if (dst[k].given)
            dst[k].given[d - c->blocks[k].rows] = true;
        int rc = opt_set(d, v, dst[k].dst, c->who);
        if (rc >= 0)
            return rc;
    }
    return -1;
}

void opt_help_line(FILE *f, const char *left, const char *help)
{
    fprintf(f, "  %-22s ", left);
    for (const char *p = help;;) {
        size_t n = strcspn(p, "\n");
        fprintf(f, "%.*s\n", (int)n, p);
        if (!p[n])
            break;
        p += n + 1;
        fprintf(f, "%25s", ""); /* under the first line's text */
    }
}

void opt_usage(FILE *f, const opt_cmd *c)
{
    fputs(c->usage, f);
    fputs("options:\n", f);
    for (int k = 0; k < c->n_blocks; k++) {
        const opt_block *b = &c->blocks[k];
        for (int i = 0; i < block_size(b) && !b->unlisted; i++) {
            const char *help;
            const opt_def *d = block_row(b, i, &help);
            if (!d)
                continue;
            char left[64];
            const char *meta = d->meta ? d->meta : "";
            if (d->alias)
                snprintf(left, sizeof left, "-%c, --%s %s", d->alias, d->name, meta);
            else
                snprintf(left, sizeof left, "--%s %s", d->name, meta);
            opt_help_line(f, left, help);
        }
    }
    opt_help_line(f, "-h, --help", "this text");
    if (c->footer)
        fputs(c->footer, f);
}
