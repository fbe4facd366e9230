/*
 * scope.c - the current module's path per thread, and the set of modules
 * kept out of autocast's lowering (scope.h).
 */
#include "ops/scope.h"
#include "ops/ops.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local const char *current = "";

/* The modules kept in f32: set before a run, read by every thread. */
static char **fp32_paths;
static size_t *fp32_lens;
static _Atomic long *fp32_hits;
static int n_fp32;

const char *op_scope_current(void) { return current; }

/* Whether path is p or lies under it ("h.0.attn.qkv" under "h.0.attn"). */
static bool under(const char *path, const char *p, size_t len)
{
    return strncmp(path, p, len) == 0 && (path[len] == '\0' || path[len] == '.');
}

static bool kept_fp32(const char *path)
{
    bool hit = false;
    for (int i = 0; i < n_fp32; i++)
        if (under(path, fp32_paths[i], fp32_lens[i])) {
            atomic_fetch_add(&fp32_hits[i], 1);
            hit = true;
        }
    return hit;
}

void op_scope_enter(op_scope *s, const char *path)
{
    s->prev = current;
    s->changed_fp32 = false;
    current = path ? path : "";
    if (n_fp32 > 0 && kept_fp32(current)) {
        s->prev_fp32 = autocast_fp32_scope_set(true);
        s->changed_fp32 = true;
    }
}

void op_scope_leave(op_scope *s)
{
    current = s->prev;
    if (s->changed_fp32)
        autocast_fp32_scope_set(s->prev_fp32);
}

static void fp32_clear(void)
{
    for (int i = 0; i < n_fp32; i++)
        free(fp32_paths[i]);
    free(fp32_paths);
    free(fp32_lens);
    free((void *)fp32_hits);
    fp32_paths = NULL;
    fp32_lens = NULL;
    fp32_hits = NULL;
    n_fp32 = 0;
}

amp_status amp_autocast_set_fp32_modules(const char *const *paths, int n)
{
    if (n < 0 || (n > 0 && !paths))
        return amp_set_error(AMP_ERR_ARG, "autocast_set_fp32_modules: %d paths from %s", n,
                             paths ? "a list" : "NULL");
    for (int i = 0; i < n; i++) {
        const char *p = paths[i];
        if (!p || !*p || p[0] == '.' || p[strlen(p) - 1] == '.' || strstr(p, ".."))
            return amp_set_error(AMP_ERR_ARG,
                                 "autocast_set_fp32_modules: path %d \"%s\" is not a module path "
                                 "(names joined by dots: \"h.0.attn\", \"fc1\")",
                                 i, p ? p : "(null)");
    }
    fp32_clear();
    if (n == 0)
        return AMP_OK;
    fp32_paths = calloc((size_t)n, sizeof *fp32_paths);
    fp32_lens = calloc((size_t)n, sizeof *fp32_lens);
    fp32_hits = calloc((size_t)n, sizeof *fp32_hits);
    if (!fp32_paths || !fp32_lens || !fp32_hits) {
        fp32_clear();
        return amp_set_error(AMP_ERR_MEMORY, "autocast_set_fp32_modules: out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (!(fp32_paths[i] = strdup(paths[i]))) {
            n_fp32 = i;
            fp32_clear();
            return amp_set_error(AMP_ERR_MEMORY, "autocast_set_fp32_modules: out of memory");
        }
        fp32_lens[i] = strlen(paths[i]);
        n_fp32 = i + 1;
    }
    return AMP_OK;
}

long amp_autocast_fp32_module_hits(int i)
{
    return i >= 0 && i < n_fp32 ? atomic_load(&fp32_hits[i]) : -1;
}

/* ------------------------------------------------- named regions (ampc.h) */

#define USER_DEPTH 64

static _Thread_local op_scope user_stack[USER_DEPTH];
static _Thread_local int user_depth;

/* The paths amp_scope_begin was given, each kept once for the process
 * (nodes made inside point at them). */
static char **interned;
static size_t n_interned, cap_interned;
static atomic_flag intern_lock = ATOMIC_FLAG_INIT;

static const char *intern(const char *path)
{
    while (atomic_flag_test_and_set(&intern_lock))
        ;
    const char *found = NULL;
    for (size_t i = 0; i < n_interned && !found; i++)
        if (strcmp(interned[i], path) == 0)
            found = interned[i];
    if (!found && n_interned == cap_interned) {
        size_t cap = cap_interned ? 2 * cap_interned : 16;
        char **v = realloc(interned, cap * sizeof *v);
        if (v) {
            interned = v;
            cap_interned = cap;
        }
    }
    if (!found && n_interned < cap_interned && (interned[n_interned] = strdup(path)))
        found = interned[n_interned++];
    atomic_flag_clear(&intern_lock);
    return found;
}

amp_status amp_scope_begin(const char *path)
{
    if (!path)
        return amp_set_error(AMP_ERR_ARG, "scope_begin: NULL path");
    if (user_depth == USER_DEPTH)
        return amp_set_error(AMP_ERR_STATE, "scope_begin: %d scopes open; is an amp_scope_end missing?",
                             USER_DEPTH);
    const char *p = intern(path);
    if (!p)
        return amp_set_error(AMP_ERR_MEMORY, "scope_begin: out of memory");
    op_scope_enter(&user_stack[user_depth++], p);
    return AMP_OK;
}

amp_status amp_scope_end(void)
{
    if (user_depth == 0)
        return amp_set_error(AMP_ERR_STATE, "scope_end: no scope is open (an amp_scope_end without its "
                                            "amp_scope_begin)");
    op_scope_leave(&user_stack[--user_depth]);
    return AMP_OK;
}

const char *amp_scope_current(void) { return current; }
