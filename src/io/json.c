/*
 * json.c - a small JSON reader (to a tree in an arena) and writer (to a
 * growable buffer), enough for safetensors headers; see json.h.
 */
#include "io/json.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ arena */

/* Values, keys and strings live in a chain of blocks freed together: a
 * header is parsed once, read, and dropped. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    max_align_t data[];
} block;

struct json_doc {
    block *head;
};

#define BLOCK_MIN ((size_t)64 * 1024)

static void *arena_alloc(json_doc *d, size_t n)
{
    const size_t a = sizeof(max_align_t);
    n = (n + a - 1) / a * a;
    if (!n)
        n = a;
    if (!d->head || d->head->cap - d->head->used < n) {
        size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;
        block *b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = d->head;
        b->used = 0;
        b->cap = cap;
        d->head = b;
    }
    void *p = (char *)d->head->data + d->head->used;
    d->head->used += n;
    return p;
}

void json_free(json_doc *d)
{
    if (!d)
        return;
    for (block *b = d->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(d);
}

/* ------------------------------------------------------------------ UTF-8 */

bool json_utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

/* ----------------------------------------------------------------- parser */

typedef struct {
    const char *s;
    size_t n, i;
    json_doc *d;
    char *err;
    size_t errn;
    int depth;
} parser;

static bool fail(parser *p, const char *what)
{
    snprintf(p->err, p->errn, "at byte %zu: %s", p->i, what);
    return false;
}

static bool oom(parser *p) { return fail(p, "out of memory"); }

static void skip_ws(parser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(const char *s)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A \u escape at p->i (pointing at the 'u'), a surrogate pair included. */
static bool unicode_escape(parser *p, unsigned *cp)
{
    int hi = p->n - p->i > 4 ? hex4(p->s + p->i + 1) : -1;
    if (hi < 0)
        return fail(p, "bad \\u escape");
    p->i += 5;
    if (hi >= 0xDC00 && hi <= 0xDFFF)
        return fail(p, "lone low surrogate in \\u escape");
    if (hi >= 0xD800 && hi <= 0xDBFF) {
        int lo = p->n - p->i > 5 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' ? hex4(p->s + p->i + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail(p, "high surrogate without its low half in \\u escape");
        p->i += 6;
        *cp = 0x10000 + (((unsigned)hi - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
    } else {
        *cp = (unsigned)hi;
    }
    return true;
}

/* A string at p->i (the opening quote): decoded into the arena. The
 * decoded form is never longer than the source text. */
static bool parse_string(parser *p, const char **out, size_t *out_len)
{
    size_t end = p->i + 1;
    while (end < p->n && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n)
        return fail(p, "unterminated string");
    char *o = arena_alloc(p->d, end - p->i);
    if (!o)
        return oom(p);
    size_t k = 0;
    p->i++;
    while (p->s[p->i] != '"') {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20)
            return fail(p, "control character in string");
        if (c != '\\') {
            o[k++] = (char)c;
            p->i++;
            continue;
        }
        char e = p->s[++p->i];
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *f = e ? strchr(from, e) : NULL;
        if (f) {
            o[k++] = to[f - from];
            p->i++;
        } else if (e == 'u') {
            unsigned cp;
            if (!unicode_escape(p, &cp))
                return false;
            k += put_utf8(o + k, cp);
        } else {
            return fail(p, "bad escape in string");
        }
    }
    p->i++;
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return true;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool parse_number(parser *p, json_value *v)
{
    size_t start = p->i, i = p->i;
    if (i < p->n && p->s[i] == '-')
        i++;
    if (i < p->n && p->s[i] == '0') {
        i++;
    } else if (i < p->n && is_digit(p->s[i])) {
        while (i < p->n && is_digit(p->s[i]))
            i++;
    } else {
        return fail(p, "bad number");
    }
    if (i < p->n && p->s[i] == '.') {
        if (++i >= p->n || !is_digit(p->s[i]))
            return fail(p, "bad number: no digit after '.'");
        while (i < p->n && is_digit(p->s[i]))
            i++;
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-'))
            i++;
        if (i >= p->n || !is_digit(p->s[i]))
            return fail(p, "bad number: no digit in the exponent");
        while (i < p->n && is_digit(p->s[i]))
            i++;
    }
    char *lit = arena_alloc(p->d, i - start + 1);
    if (!lit)
        return oom(p);
    memcpy(lit, p->s + start, i - start);
    lit[i - start] = '\0';
    v->type = JSON_NUMBER;
    v->str = lit;
    v->len = i - start;
    p->i = i;
    return true;
}

static bool parse_value(parser *p, json_value *v);

/* An array or object at p->i: items gathered in a scratch vector, then
 * moved into the arena. */
static bool parse_container(parser *p, json_value *v, bool object)
{
    const char close = object ? '}' : ']';
    if (++p->depth > JSON_MAX_DEPTH)
        return fail(p, "nested too deep");
    p->i++;
    json_value *items = NULL;
    const char **keys = NULL;
    int n = 0, cap = 0;
    bool ok = true;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
    } else {
        for (;;) {
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                json_value *ni = realloc(items, (size_t)cap * sizeof *ni);
                const char **nk = ni ? realloc(keys, (size_t)cap * sizeof *nk) : NULL;
                if (ni)
                    items = ni;
                if (nk)
                    keys = nk;
                if (!ni || !nk) {
                    ok = oom(p);
                    break;
                }
            }
            skip_ws(p);
            keys[n] = NULL;
            if (object) {
                size_t klen;
                if (p->i >= p->n || p->s[p->i] != '"') {
                    ok = fail(p, "expected a string key");
                    break;
                }
                if (!(ok = parse_string(p, &keys[n], &klen)))
                    break;
                skip_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') {
                    ok = fail(p, "expected ':'");
                    break;
                }
                p->i++;
            }
            if (!(ok = parse_value(p, &items[n])))
                break;
            n++;
            skip_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == close) {
                p->i++;
                break;
            }
            ok = fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
            break;
        }
    }
    if (ok) {
        v->type = object ? JSON_OBJECT : JSON_ARRAY;
        v->n = n;
        v->items = arena_alloc(p->d, (size_t)n * sizeof *items);
        v->keys = object ? arena_alloc(p->d, (size_t)n * sizeof *keys) : NULL;
        if (!v->items || (object && !v->keys)) {
            ok = oom(p);
        } else {
            if (n)
                memcpy(v->items, items, (size_t)n * sizeof *items);
            if (object && n)
                memcpy(v->keys, keys, (size_t)n * sizeof *keys);
        }
    }
    free(items);
    free(keys);
    p->depth--;
    return ok;
}

static bool literal(parser *p, const char *word, json_type t, json_value *v)
{
    size_t n = strlen(word);
    if (p->n - p->i < n || memcmp(p->s + p->i, word, n) != 0)
        return fail(p, "unexpected character");
    p->i += n;
    v->type = t;
    return true;
}

static bool parse_value(parser *p, json_value *v)
{
    memset(v, 0, sizeof *v);
    skip_ws(p);
    if (p->i >= p->n)
        return fail(p, "unexpected end of text");
    switch (p->s[p->i]) {
    case '{':
        return parse_container(p, v, true);
    case '[':
        return parse_container(p, v, false);
    case '"':
        v->type = JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    case 't':
        return literal(p, "true", JSON_TRUE, v);
    case 'f':
        return literal(p, "false", JSON_FALSE, v);
    case 'n':
        return literal(p, "null", JSON_NULL, v);
    default:
        if (p->s[p->i] == '-' || is_digit(p->s[p->i]))
            return parse_number(p, v);
        return fail(p, "unexpected character");
    }
}

json_doc *json_parse(const char *text, size_t len, const json_value **root, char *err, size_t errn)
{
    if (errn)
        err[0] = '\0';
    if (!json_utf8_valid(text, len)) {
        snprintf(err, errn, "not valid UTF-8");
        return NULL;
    }
    json_doc *d = calloc(1, sizeof *d);
    json_value *v = d ? arena_alloc(d, sizeof *v) : NULL;
    if (!v) {
        json_free(d);
        snprintf(err, errn, "out of memory");
        return NULL;
    }
    parser p = {.s = text, .n = len, .d = d, .err = err, .errn = errn};
    bool ok = parse_value(&p, v);
    if (ok) {
        skip_ws(&p);
        if (p.i < p.n)
            ok = fail(&p, "text after the end of the document");
    }
    if (!ok) {
        json_free(d);
        return NULL;
    }
    *root = v;
    return d;
}

const json_value *json_get(const json_value *v, const char *key)
{
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

bool json_u64(const json_value *v, uint64_t *out)
{
    if (!v || v->type != JSON_NUMBER || !v->len)
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->str[i];
        if (!is_digit(c))
            return false; /* sign, fraction or exponent */
        unsigned d = (unsigned)(c - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *out = x;
    return true;
}

/* ----------------------------------------------------------------- writer */

static bool jb_reserve(json_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->cap - b->len > extra)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void jb_raw(json_buf *b, const char *s, size_t n)
{
    if (!jb_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void jb_puts(json_buf *b, const char *s) { jb_raw(b, s, strlen(s)); }

void jb_printf(json_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (!jb_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void jb_string(json_buf *b, const char *s)
{
    /* the characters written as a backslash and a letter (or themselves) */
    static const char special[] = "\"\\\n\r\t", letter[] = "\"\\nrt";
    jb_raw(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        const char *sp = strchr(special, *c);
        if (sp) {
            const char esc[2] = {'\\', letter[sp - special]};
            jb_raw(b, esc, 2);
        } else if (*c < 0x20) {
            jb_printf(b, "\\u%04x", *c);
        } else {
            jb_raw(b, (const char *)c, 1);
        }
    }
    jb_raw(b, "\"", 1);
}

void jb_free(json_buf *b)
{
    free(b->p);
    *b = (json_buf){0};
}
