/*
 * json.h - the small JSON reader and writer behind the checkpoint format
 * (a safetensors header is one JSON object).
 *
 * The reader parses a whole document (RFC 8259) into a tree of values held
 * in one arena, freed at once; it refuses what the format refuses (invalid
 * UTF-8, raw control characters in strings, trailing text) and nests at
 * most JSON_MAX_DEPTH deep, so a hostile header cannot exhaust the stack.
 * Numbers are kept as their literal text: a checkpoint's offsets are u64,
 * which a double cannot hold exactly.
 *
 * The writer appends to a growable buffer; an allocation failure is
 * sticky (jb.oom) and checked once at the end.
 *
 * Defines: json_value, json_parse / json_free, json_get, json_u64,
 * json_utf8_valid, json_buf and its jb_* appenders.
 */
#ifndef AMPC_JSON_H
#define AMPC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    const char *str; /* STRING: decoded, NUL-terminated; NUMBER: the literal */
    size_t len; /* STRING: bytes (a \u0000 escape may put a NUL inside) */
    int n; /* ARRAY / OBJECT: how many items */
    json_value *items; /* ARRAY / OBJECT: the values, in document order */
    const char **keys; /* OBJECT: the decoded keys, parallel to items */
};

typedef struct json_doc json_doc;

/* Parses text[0..len). Returns the document (its root in *root) or NULL
 * with a message such as "at byte 17: expected ':'" in err. */
json_doc *json_parse(const char *text, size_t len, const json_value **root, char *err, size_t errn);
void json_free(json_doc *d);

/* The value of key in object v (the first, if repeated), or NULL. */
const json_value *json_get(const json_value *v, const char *key);
/* A number literal that is a non-negative integer fitting u64 (no sign,
 * fraction or exponent) into *out; false otherwise. */
bool json_u64(const json_value *v, uint64_t *out);
/* Whether s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
bool json_utf8_valid(const char *s, size_t n);

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} json_buf;

void jb_raw(json_buf *b, const char *s, size_t n);
void jb_puts(json_buf *b, const char *s);
void jb_printf(json_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a quoted JSON string: '"', '\\' and control characters escaped,
 * other bytes (UTF-8) as they are. */
void jb_string(json_buf *b, const char *s);
void jb_free(json_buf *b);

#endif
