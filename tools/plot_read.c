/*
 * plot_read.c - reads a training log (JSON Lines, see log.h) for `ampc
 * plot`: a small strict parser for the flat objects log_step writes.
 *
 * Each line is a JSON object whose values are numbers, strings, true,
 * false or null; nested objects and arrays are refused (the log never
 * writes them, so one means the file is not an ampc log). Numbers follow
 * JSON's grammar exactly: "nan", "inf", hex and a leading '+' are errors,
 * as they would be for any JSON reader the log is meant for. Unknown keys
 * are ignored, so the format can grow. A malformed line is reported with
 * the file, the line and the column, and nothing is plotted.
 */
#include "plot.h"

#include "base/base.h"
#include "io/file.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { V_NUM, V_STR, V_TRUE, V_FALSE, V_NULL } vkind;

typedef struct {
    const char *s; /* the line */
    size_t i;      /* where the cursor is */
    const char *why;
    bool event;    /* the line has an "event" key: not a step's (log_event) */
} cursor;

static void skip_ws(cursor *c)
{
    while (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\r' || c->s[c->i] == '\n')
        c->i++;
}

static bool fail(cursor *c, const char *why)
{
    c->why = why;
    return false;
}

/* A string at the cursor; its first (out_n - 1) raw bytes go to out. */
static bool parse_string(cursor *c, char *out, size_t out_n)
{
    size_t k = 0;
    c->i++; /* the opening quote */
    for (;;) {
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '\0')
            return fail(c, "unterminated string");
        if (ch < 0x20)
            return fail(c, "control character in a string");
        c->i++;
        if (ch == '"')
            break;
        if (ch == '\\') {
            char e = c->s[c->i];
            if (e == 'u') {
                for (int j = 1; j <= 4; j++)
                    if (!isxdigit((unsigned char)c->s[c->i + (size_t)j]))
                        return fail(c, "bad \\u escape in a string");
                c->i += 5;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == '\0')
                return fail(c, "bad escape in a string");
            c->i++;
            ch = (unsigned char)e;
        }
        if (out && k + 1 < out_n)
            out[k++] = (char)ch;
    }
    if (out && out_n)
        out[k] = '\0';
    return true;
}

/* A number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool parse_number(cursor *c, double *v)
{
    const char *s = c->s;
    size_t i = c->i;
    if (s[i] == '-')
        i++;
    if (s[i] == '0')
        i++;
    else if (isdigit((unsigned char)s[i]))
        while (isdigit((unsigned char)s[i]))
            i++;
    else
        return fail(c, "bad number");
    if (s[i] == '.') {
        if (!isdigit((unsigned char)s[++i]))
            return fail(c, "bad number: no digits after '.'");
        while (isdigit((unsigned char)s[i]))
            i++;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        i++;
        if (s[i] == '+' || s[i] == '-')
            i++;
        if (!isdigit((unsigned char)s[i]))
            return fail(c, "bad number: no digits in the exponent");
        while (isdigit((unsigned char)s[i]))
            i++;
    }
    *v = strtod(s + c->i, NULL); /* the span is valid, strtod reads just it */
    c->i = i;
    return true;
}

static bool parse_word(cursor *c, const char *w)
{
    size_t n = strlen(w);
    if (strncmp(c->s + c->i, w, n) != 0)
        return fail(c, "unexpected character (a value is a number, string, true, false or null)");
    c->i += n;
    return true;
}

static bool parse_value(cursor *c, vkind *k, double *v)
{
    char ch = c->s[c->i];
    *v = NAN;
    switch (ch) {
    case '"': *k = V_STR; return parse_string(c, NULL, 0);
    case 't': *k = V_TRUE; return parse_word(c, "true");
    case 'f': *k = V_FALSE; return parse_word(c, "false");
    case 'n': *k = V_NULL; return parse_word(c, "null");
    case '{':
    case '[': return fail(c, "nested objects and arrays are not part of the log format");
    case '\0': return fail(c, "the line ends where a value should be");
    default: *k = V_NUM; return parse_number(c, v);
    }
}

/* Stores one key's value into pt; *has_step notes a "step" key. */
static bool store(cursor *c, const char *key, vkind k, double v, plot_point *pt, bool *has_step)
{
    bool num = k == V_NUM, null = k == V_NULL;
    if (strcmp(key, "event") == 0) {
        c->event = true;
    } else if (strcmp(key, "step") == 0) {
        if (!num)
            return fail(c, "\"step\" must be a number");
        if (!isfinite(v)) /* 1e999: JSON's grammar allows it, no double holds it */
            return fail(c, "\"step\" is out of range (not a finite double)");
        pt->step = v;
        *has_step = true;
    } else if (strcmp(key, "loss") == 0) {
        if (!num && !null)
            return fail(c, "\"loss\" must be a number or null");
        pt->loss = v; /* NAN for null */
        pt->has_loss = true;
    } else if (strcmp(key, "scale") == 0) {
        if (!num && !null)
            return fail(c, "\"scale\" must be a number or null");
        pt->scale = v > 0 ? v : NAN; /* a log2 axis: only positive scales */
    } else if (strcmp(key, "val_loss") == 0) {
        if (!num && !null)
            return fail(c, "\"val_loss\" must be a number or null");
        pt->val_loss = v;
    } else if (strncmp(key, "f16_", 4) == 0) {
        for (int h = 0; h < PLOT_HEALTH_N; h++)
            if (strcmp(key, plot_health_keys[h]) == 0) {
                if (!num && !null)
                    return fail(c, "an f16 health value must be a number or null");
                pt->health[h] = v >= 0 && v <= 1 ? v : NAN; /* a fraction; anything else is not drawn */
            }
    } else if (strcmp(key, "skipped") == 0) {
        if (k != V_TRUE && k != V_FALSE && !null)
            return fail(c, "\"skipped\" must be true or false");
        pt->skipped = k == V_TRUE;
    }
    return true;
}

/* Parses one line; true with *has_step set, or false with c->why and
 * c->i at the problem. */
static bool parse_line(cursor *c, plot_point *pt, bool *has_step)
{
    *pt = (plot_point){.step = NAN, .loss = NAN, .scale = NAN, .val_loss = NAN};
    for (int h = 0; h < PLOT_HEALTH_N; h++)
        pt->health[h] = NAN;
    *has_step = false;
    skip_ws(c);
    if (c->s[c->i] != '{')
        return fail(c, "expected '{': each line is one JSON object");
    c->i++;
    skip_ws(c);
    if (c->s[c->i] == '}') {
        c->i++;
    } else {
        for (;;) {
            char key[32];
            if (c->s[c->i] != '"')
                return fail(c, "expected a key in double quotes");
            if (!parse_string(c, key, sizeof key))
                return false;
            skip_ws(c);
            if (c->s[c->i] != ':')
                return fail(c, "expected ':' after a key");
            c->i++;
            skip_ws(c);
            vkind k;
            double v;
            size_t at = c->i;
            if (!parse_value(c, &k, &v))
                return false;
            if (!store(c, key, k, v, pt, has_step)) {
                c->i = at;
                return false;
            }
            skip_ws(c);
            if (c->s[c->i] == ',') {
                c->i++;
                skip_ws(c);
                continue;
            }
            if (c->s[c->i] == '}') {
                c->i++;
                break;
            }
            return fail(c, c->s[c->i] ? "expected ',' or '}'" : "the line ends inside the object");
        }
    }
    skip_ws(c);
    if (c->s[c->i] != '\0')
        return fail(c, "text after the object (one object per line)");
    return true;
}

static bool blank(const char *s)
{
    for (; *s; s++)
        if (!isspace((unsigned char)*s))
            return false;
    return true;
}

static amp_status push(plot_data *d, const plot_point *pt, const char *path)
{
    if (d->n == d->cap) {
        int64_t cap = d->cap ? 2 * d->cap : 1024;
        plot_point *p = realloc(d->p, (size_t)cap * sizeof *p);
        if (!p)
            return amp_set_error(AMP_ERR_MEMORY, "plot: %s: out of memory at %lld steps", path,
                                 (long long)d->n);
        d->p = p;
        d->cap = cap;
    }
    d->p[d->n++] = *pt;
    return AMP_OK;
}

amp_status plot_read(const char *path, plot_data *d)
{
    *d = (plot_data){0};
    char why[160];
    int64_t size;
    FILE *f = file_fopen_read(path, 0, &size, why, sizeof why); /* a FIFO would block */
    if (!f)
        return amp_set_error(AMP_ERR_IO, "plot: %s: %s", path, why);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    amp_status st = AMP_OK;
    ssize_t len;
    while (st == AMP_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(line)) {
            st = amp_set_error(AMP_ERR_FORMAT, "plot: %s:%ld: a NUL byte in the line (column %zu)", path,
                               lineno, strlen(line) + 1);
            break;
        }
        if (len > 0 && line[len - 1] == '\n') /* so "unterminated" reads as such */
            line[--len] = '\0';
        if (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        if (blank(line))
            continue;
        cursor c = {.s = line};
        plot_point pt;
        bool has_step;
        if (!parse_line(&c, &pt, &has_step))
            st = amp_set_error(AMP_ERR_FORMAT, "plot: %s:%ld: %s (column %zu)", path, lineno, c.why,
                               c.i + 1);
        else if (has_step && !c.event)
            st = push(d, &pt, path);
    }
    if (st == AMP_OK && ferror(f))
        st = amp_set_error(AMP_ERR_IO, "plot: cannot read %s: %s", path, strerror(errno));
    if (st == AMP_OK && d->n == 0)
        st = amp_set_error(AMP_ERR_FORMAT, "plot: %s: no step lines (objects with a \"step\") to plot",
                           path);
    free(line);
    fclose(f);
    if (st != AMP_OK)
        plot_data_free(d);
    return st;
}

void plot_data_free(plot_data *d)
{
    free(d->p);
    *d = (plot_data){0};
}
