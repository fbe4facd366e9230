/*
 * policy_file.c - an autocast policy and its JSON file (the format is in
 * policy_file.h): read, checked, written, applied to the library.
 */
#include "policy_file.h"

#include "base/base.h"
#include "io/file.h"
#include "io/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLICY_FORMAT "ampc-autocast-policy"
#define POLICY_MAX_BYTES (1 << 20) /* a policy names at most a few hundred modules */

static const char *const file_names[AMP_CAST_COUNT] = {"none", "lower", "fp32", "fp32_out", "promote", NULL};

amp_cast_category policy_category_parse(const char *s)
{
    for (int c = 0; c < AMP_CAST_COUNT; c++)
        if (file_names[c] && strcmp(s, file_names[c]) == 0)
            return (amp_cast_category)c;
    return AMP_CAST_COUNT;
}

const char *policy_category_name(amp_cast_category c)
{
    return (unsigned)c < AMP_CAST_COUNT && file_names[c] ? file_names[c] : "invalid";
}

static int op_index(const char *name)
{
    for (int op = 0; op < amp_op_count(); op++)
        if (strcmp(amp_op_name(op), name) == 0)
            return op;
    return -1;
}

void policy_free(policy *p)
{
    for (int i = 0; i < p->n_modules; i++)
        free(p->modules[i]);
    *p = (policy){0};
}

amp_status policy_add_module(policy *p, const char *path)
{
    if (!path || !*path)
        return amp_set_error(AMP_ERR_ARG, "policy: an empty module path (the root is not a module to keep)");
    for (int i = 0; i < p->n_modules; i++)
        if (strcmp(p->modules[i], path) == 0)
            return AMP_OK;
    if (p->n_modules == POLICY_MAX_MODULES)
        return amp_set_error(AMP_ERR_ARG, "policy: more than %d modules", POLICY_MAX_MODULES);
    if (!(p->modules[p->n_modules] = strdup(path)))
        return amp_set_error(AMP_ERR_MEMORY, "policy: out of memory");
    p->n_modules++;
    return AMP_OK;
}

amp_status policy_set_op(policy *p, const char *op, amp_cast_category cat)
{
    int idx = op ? op_index(op) : -1;
    if (idx < 0)
        return amp_set_error(AMP_ERR_ARG, "policy: unknown op \"%s\" (ampc policy lists them)", op ? op : "");
    if ((unsigned)cat >= AMP_CAST_COUNT || !file_names[cat])
        return amp_set_error(AMP_ERR_ARG, "policy: op \"%s\": not a category a policy sets", op);
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].op == idx) {
            p->ops[i].cat = cat;
            return AMP_OK;
        }
    if (p->n_ops == POLICY_MAX_OPS)
        return amp_set_error(AMP_ERR_ARG, "policy: more than %d ops", POLICY_MAX_OPS);
    p->ops[p->n_ops].op = idx;
    p->ops[p->n_ops].cat = cat;
    p->n_ops++;
    return AMP_OK;
}

/* The file's "modules" object into p; false after setting the error. */
static bool parse_modules(const json_value *m, const char *where, policy *p)
{
    if (m->type != JSON_OBJECT)
        return amp_set_error(AMP_ERR_FORMAT, "%s: \"modules\" must be an object of path: \"fp32\"", where), false;
    for (int i = 0; i < m->n; i++) {
        const char *k = m->keys[i];
        const json_value *v = &m->items[i];
        if (v->type != JSON_STRING || strcmp(v->str, "fp32") != 0)
            return amp_set_error(AMP_ERR_FORMAT, "%s: \"modules\": \"%s\": the value must be \"fp32\"", where, k),
                   false;
        if (!*k || strlen(k) != strcspn(k, " \t\r\n,"))
            return amp_set_error(AMP_ERR_FORMAT,
                                 "%s: \"modules\": \"%s\" is not a module path (PyTorch's dotted names, such "
                                 "as \"h.0.attn\")",
                                 where, k),
                   false;
        for (int j = 0; j < i; j++)
            if (strcmp(m->keys[j], k) == 0)
                return amp_set_error(AMP_ERR_FORMAT, "%s: \"modules\": \"%s\" is given twice", where, k), false;
        if (policy_add_module(p, k) != AMP_OK)
            return amp_set_error(AMP_ERR_FORMAT, "%s: \"modules\": %s", where, amp_last_error()), false;
    }
    return true;
}

/* The file's "ops" object into p; false after setting the error. */
static bool parse_ops(const json_value *m, const char *where, policy *p)
{
    if (m->type != JSON_OBJECT)
        return amp_set_error(AMP_ERR_FORMAT, "%s: \"ops\" must be an object of op: category", where), false;
    for (int i = 0; i < m->n; i++) {
        const char *k = m->keys[i];
        const json_value *v = &m->items[i];
        if (op_index(k) < 0)
            return amp_set_error(AMP_ERR_FORMAT, "%s: \"ops\": unknown op \"%s\" (ampc policy lists them)", where,
                                 k),
                   false;
        amp_cast_category c = v->type == JSON_STRING ? policy_category_parse(v->str) : AMP_CAST_COUNT;
        if (c == AMP_CAST_COUNT)
            return amp_set_error(AMP_ERR_FORMAT,
                                 "%s: \"ops\": \"%s\": unknown category %s%s%s (lower, fp32, fp32_out, promote "
                                 "or none)",
                                 where, k, v->type == JSON_STRING ? "\"" : "",
                                 v->type == JSON_STRING ? v->str : "(not a string)",
                                 v->type == JSON_STRING ? "\"" : ""),
                   false;
        for (int j = 0; j < i; j++)
            if (strcmp(m->keys[j], k) == 0)
                return amp_set_error(AMP_ERR_FORMAT, "%s: \"ops\": \"%s\" is given twice", where, k), false;
        if (policy_set_op(p, k, c) != AMP_OK)
            return amp_set_error(AMP_ERR_FORMAT, "%s: \"ops\": %s", where, amp_last_error()), false;
    }
    return true;
}

amp_status policy_parse(const char *text, size_t len, const char *where, policy *p)
{
    *p = (policy){0};
    char err[160];
    const json_value *root;
    json_doc *d = json_parse(text, len, &root, err, sizeof err);
    if (!d)
        return amp_set_error(AMP_ERR_FORMAT, "%s: not valid JSON (%s)", where, err);
    bool ok = true;
    if (root->type != JSON_OBJECT) {
        amp_set_error(AMP_ERR_FORMAT, "%s: not a JSON object (a policy is {\"format\": \"" POLICY_FORMAT
                                      "\", ...})",
                      where);
        ok = false;
    }
    for (int i = 0; ok && i < root->n; i++) {
        const char *k = root->keys[i];
        if (strcmp(k, "format") != 0 && strcmp(k, "version") != 0 && strcmp(k, "modules") != 0 &&
            strcmp(k, "ops") != 0) {
            amp_set_error(AMP_ERR_FORMAT, "%s: unknown key \"%s\" (a policy has format, version, modules, ops)",
                          where, k);
            ok = false;
        }
    }
    const json_value *f = ok ? json_get(root, "format") : NULL;
    if (ok && (!f || f->type != JSON_STRING || strcmp(f->str, POLICY_FORMAT) != 0)) {
        amp_set_error(AMP_ERR_FORMAT, "%s: \"format\" must be \"" POLICY_FORMAT "\"", where);
        ok = false;
    }
    const json_value *v = ok ? json_get(root, "version") : NULL;
    uint64_t version = 0;
    if (ok && (!v || !json_u64(v, &version) || version != 1)) {
        amp_set_error(AMP_ERR_FORMAT, "%s: \"version\" must be 1 (the only version this ampc reads)", where);
        ok = false;
    }
    const json_value *m = ok ? json_get(root, "modules") : NULL;
    if (m)
        ok = parse_modules(m, where, p);
    const json_value *o = ok ? json_get(root, "ops") : NULL;
    if (o)
        ok = parse_ops(o, where, p);
    json_free(d);
    if (!ok) {
        policy_free(p);
        return AMP_ERR_FORMAT;
    }
    return AMP_OK;
}

amp_status policy_read(const char *path, policy *p, uint64_t *hash)
{
    *p = (policy){0};
    char why[200];
    int64_t size;
    FILE *f = file_fopen_read(path, POLICY_MAX_BYTES, &size, why, sizeof why);
    if (!f)
        return amp_set_error(AMP_ERR_IO, "%s: %s", path, why);
    char *buf = malloc((size_t)size + 1);
    size_t got = buf ? fread(buf, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)size) {
        free(buf);
        return amp_set_error(buf ? AMP_ERR_IO : AMP_ERR_MEMORY, "%s: %s", path,
                             buf ? "read failed" : "out of memory");
    }
    uint64_t h = 14695981039346656037ull; /* FNV-1a 64's offset basis and prime */
    for (size_t i = 0; i < got; i++)
        h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
    if (hash)
        *hash = h;
    amp_status st = policy_parse(buf, got, path, p);
    free(buf);
    return st;
}

char *policy_to_json(const policy *p)
{
    json_buf b = {0};
    jb_puts(&b, "{\"format\": \"" POLICY_FORMAT "\", \"version\": 1,\n \"modules\": {");
    for (int i = 0; i < p->n_modules; i++) {
        jb_puts(&b, i ? ", " : "");
        jb_string(&b, p->modules[i]);
        jb_puts(&b, ": \"fp32\"");
    }
    jb_puts(&b, "},\n \"ops\": {");
    for (int i = 0; i < p->n_ops; i++)
        jb_printf(&b, "%s\"%s\": \"%s\"", i ? ", " : "", amp_op_name(p->ops[i].op),
                  policy_category_name(p->ops[i].cat));
    jb_puts(&b, "}}\n");
    if (b.oom) {
        jb_free(&b);
        return NULL;
    }
    return b.p;
}

amp_status policy_write(const char *path, const policy *p)
{
    char *text = policy_to_json(p);
    if (!text)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", path);
    char why[200];
    FILE *f = file_fopen_write(path, false, why, sizeof why);
    if (!f) {
        free(text);
        return amp_set_error(AMP_ERR_IO, "cannot write %s: %s", path, why);
    }
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    free(text);
    return ok ? AMP_OK : amp_set_error(AMP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
}

const char *policy_module_list(const policy *p, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n_modules && at < n; i++) {
        int w = snprintf(buf + at, n - at, "%s%s", i ? "," : "", p->modules[i]);
        at += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

const char *policy_op_list(const policy *p, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n_ops && at < n; i++) {
        int w = snprintf(buf + at, n - at, "%s%s=%s", i ? "," : "", amp_op_name(p->ops[i].op),
                         policy_category_name(p->ops[i].cat));
        at += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

amp_status policy_apply(const policy *p, amp_device dev)
{
    policy_reset(dev);
    amp_status st = amp_autocast_set_fp32_modules((const char *const *)p->modules, p->n_modules);
    for (int i = 0; st == AMP_OK && i < p->n_ops; i++)
        st = amp_autocast_set_category(amp_op_name(p->ops[i].op), dev, p->ops[i].cat);
    return st;
}

void policy_reset(amp_device dev)
{
    amp_autocast_set_fp32_modules(NULL, 0);
    for (int op = 0; op < amp_op_count(); op++)
        amp_autocast_set_category(amp_op_name(op), dev, AMP_CAST_COUNT);
}
