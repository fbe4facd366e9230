/*
 * gguf.c - the GGUF v3 writer (gguf.h): keys and tensors collected in
 * memory, written to a temporary file and renamed into place.
 */
#include "gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_VERSION 3

typedef struct {
    char *name;
    int ndim;
    int64_t ne[4];
    gguf_ggml_type type;
    void *data;
    size_t nbytes;
} tensor;

struct gguf_file {
    unsigned char *kv; /* the keys and values, encoded */
    size_t len, cap;
    uint64_t n_kv;
    tensor *t;
    int n_t, cap_t;
    bool oom; /* an add failed: gguf_write refuses */
};

gguf_file *gguf_new(void) { return calloc(1, sizeof(gguf_file)); }

void gguf_free(gguf_file *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_t; i++) {
        free(g->t[i].name);
        free(g->t[i].data);
    }
    free(g->t);
    free(g->kv);
    free(g);
}

static bool put(gguf_file *g, const void *p, size_t n)
{
    if (g->oom)
        return false;
    if (g->len + n > g->cap) {
        size_t cap = g->cap ? g->cap : 4096;
        while (cap < g->len + n)
            cap *= 2;
        unsigned char *kv = realloc(g->kv, cap);
        if (!kv)
            return !(g->oom = true);
        g->kv = kv;
        g->cap = cap;
    }
    memcpy(g->kv + g->len, p, n);
    g->len += n;
    return true;
}

/* Little-endian integers of 4 and 8 bytes, whatever the host's order. */
static bool put_u32(gguf_file *g, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    return put(g, b, 4);
}

static bool put_u64(gguf_file *g, uint64_t v)
{
    return put_u32(g, (uint32_t)v) && put_u32(g, (uint32_t)(v >> 32));
}

static bool put_str(gguf_file *g, const char *s)
{
    size_t n = strlen(s);
    return put_u64(g, n) && put(g, s, n);
}

static bool key(gguf_file *g, const char *k, gguf_type t)
{
    g->n_kv++;
    return put_str(g, k) && put_u32(g, (uint32_t)t);
}

bool gguf_kv_u32(gguf_file *g, const char *k, uint32_t v) { return key(g, k, GGUF_U32) && put_u32(g, v); }

bool gguf_kv_f32(gguf_file *g, const char *k, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return key(g, k, GGUF_F32) && put_u32(g, u);
}

bool gguf_kv_bool(gguf_file *g, const char *k, bool v)
{
    unsigned char b = v;
    return key(g, k, GGUF_BOOL) && put(g, &b, 1);
}

bool gguf_kv_str(gguf_file *g, const char *k, const char *v) { return key(g, k, GGUF_STRING) && put_str(g, v); }

bool gguf_kv_strs(gguf_file *g, const char *k, const char *const *v, size_t n)
{
    bool ok = key(g, k, GGUF_ARRAY) && put_u32(g, GGUF_STRING) && put_u64(g, n);
    for (size_t i = 0; ok && i < n; i++)
        ok = put_str(g, v[i]);
    return ok;
}

bool gguf_kv_i32s(gguf_file *g, const char *k, const int32_t *v, size_t n)
{
    bool ok = key(g, k, GGUF_ARRAY) && put_u32(g, GGUF_I32) && put_u64(g, n);
    for (size_t i = 0; ok && i < n; i++)
        ok = put_u32(g, (uint32_t)v[i]);
    return ok;
}

bool gguf_tensor(gguf_file *g, const char *name, int ndim, const int64_t *ne, gguf_ggml_type t, void *data,
                 size_t nbytes)
{
    if (!g->oom && g->n_t == g->cap_t) {
        int cap = g->cap_t ? 2 * g->cap_t : 64;
        tensor *nt = realloc(g->t, sizeof *nt * (size_t)cap);
        if (nt) {
            g->t = nt;
            g->cap_t = cap;
        } else {
            g->oom = true;
        }
    }
    char *copy = g->oom ? NULL : strdup(name);
    if (!copy || ndim < 1 || ndim > 4) {
        g->oom = true;
        free(copy);
        free(data);
        return false;
    }
    tensor *e = &g->t[g->n_t++];
    *e = (tensor){.name = copy, .ndim = ndim, .type = t, .data = data, .nbytes = nbytes};
    memcpy(e->ne, ne, sizeof *ne * (size_t)ndim);
    return true;
}

static size_t padded(size_t n) { return (n + GGUF_ALIGNMENT - 1) / GGUF_ALIGNMENT * GGUF_ALIGNMENT; }

/* The header: magic, version, counts, the keys, then the tensor infos
 * (offsets from the data section), padded to the alignment; into a fresh
 * g-like buffer h. */
static bool header(const gguf_file *g, gguf_file *h)
{
    bool ok = put(h, "GGUF", 4) && put_u32(h, GGUF_VERSION) && put_u64(h, (uint64_t)g->n_t) &&
              put_u64(h, g->n_kv) && put(h, g->kv, g->len);
    size_t off = 0;
    for (int i = 0; ok && i < g->n_t; i++) {
        const tensor *e = &g->t[i];
        ok = put_str(h, e->name) && put_u32(h, (uint32_t)e->ndim);
        for (int d = 0; ok && d < e->ndim; d++)
            ok = put_u64(h, (uint64_t)e->ne[d]);
        ok = ok && put_u32(h, (uint32_t)e->type) && put_u64(h, off);
        off += padded(e->nbytes);
    }
    static const unsigned char zeros[GGUF_ALIGNMENT];
    return ok && put(h, zeros, padded(h->len) - h->len);
}

/* Writes the whole file to f; 0 or errno. */
static int write_all(const gguf_file *g, FILE *f)
{
    static const unsigned char zeros[GGUF_ALIGNMENT];
    gguf_file h = {0};
    if (!header(g, &h)) {
        free(h.kv);
        return ENOMEM;
    }
    errno = 0;
    bool ok = fwrite(h.kv, 1, h.len, f) == h.len;
    free(h.kv);
    for (int i = 0; ok && i < g->n_t; i++) {
        size_t pad = padded(g->t[i].nbytes) - g->t[i].nbytes;
        ok = fwrite(g->t[i].data, 1, g->t[i].nbytes, f) == g->t[i].nbytes && fwrite(zeros, 1, pad, f) == pad;
    }
    if (!ok || fflush(f) != 0)
        return errno ? errno : EIO;
    return 0;
}

int gguf_write(const gguf_file *g, const char *path, char *what, size_t n)
{
    if (g->oom) {
        snprintf(what, n, "collect its contents");
        return ENOMEM;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode)) {
        snprintf(what, n, "replace it");
        return S_ISDIR(sb.st_mode) ? EISDIR : EEXIST;
    }
    bool device = stat(path, &sb) == 0 && S_ISCHR(sb.st_mode);
    size_t tn = strlen(path) + 32;
    char *tmp = malloc(tn);
    if (!tmp) {
        snprintf(what, n, "allocate");
        return ENOMEM;
    }
    snprintf(tmp, tn, "%s.tmp.%ld", path, (long)getpid());
    const char *target = device ? path : tmp;
    FILE *f = fopen(target, "wb");
    if (!f) {
        int err = errno;
        snprintf(what, n, "create %s", target);
        free(tmp);
        return err;
    }
    int err = write_all(g, f);
    snprintf(what, n, "write it");
    if (!err && !device && fsync(fileno(f)) != 0)
        err = errno, snprintf(what, n, "fsync it");
    if (fclose(f) != 0 && !err)
        err = errno ? errno : EIO, snprintf(what, n, "close it");
    if (!err && !device && rename(tmp, path) != 0)
        err = errno, snprintf(what, n, "rename the temporary file over it");
    if (err && !device)
        unlink(tmp);
    free(tmp);
    return err;
}
