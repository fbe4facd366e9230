/*
 * checkpoint_convert.c - ckpt_convert: older checkpoint layouts read into
 * today's model, converted in memory before the reader checks anything.
 *
 * The one older layout with other tensors than today's is the gpt's before
 * the PyTorch names and the fused qkv (ampc 8353fe1 wrote it): parameters named
 * by index, each block's eight children in a row
 *   <b>.0 ln_1  <b>.1 q  <b>.2 k  <b>.3 v  <b>.4 proj  <b>.5 ln_2
 *   <b>.6 fc1   <b>.7 fc2,  <layers>.weight/bias ln_f,
 * and optimizer state by parameter index, 2 + 16 * layers + 2 of them.
 * Today's model (nn/gpt.c) has h.<b>.ln_1, h.<b>.attn.qkv = q, k, v
 * stacked along dim 0 (qkv.weight [3 width, width]: q's rows, then k's,
 * then v's), h.<b>.attn.proj, h.<b>.ln_2, h.<b>.mlp.fc1 / fc2, ln_f, and
 * 2 + 12 * layers + 2 optimizer parameters. Each old tensor is renamed;
 * q, k and v (their weights, biases, optimizer state and f32 masters) are
 * concatenated into new buffers, which must agree in dtype and shape, and
 * their optimizer step counts must be equal. The result is the same model
 * and optimizer state: the forward computes the same q, k and v.
 *
 * The mlp and cnn kept their names (torch.nn.Sequential's); their older
 * files differ only in the optimizer state's "optim.<index>.<key>", which
 * the reader accepts as it is (checkpoint_load.c, find_state).
 *
 * A file is taken as the old gpt layout when the model is a gpt and the
 * file has "0.1.weight" but no "h.0.ln_1.weight"; everything else is left
 * untouched, and tensors the conversion does not recognise keep their
 * names (the reader then reports them as unexpected).
 */
#include "io/checkpoint.h"

#include "base/base.h"
#include "nn/nn.h"
#include "tensor/tensor.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Remembers p (allocated) to be freed with the file; frees it and fails
 * when out of memory. */
static void *own(ckpt *c, void *p)
{
    if (!p)
        return NULL;
    if (c->n_owned == c->cap_owned) {
        int cap = c->cap_owned ? 2 * c->cap_owned : 64;
        void **o = realloc(c->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(p);
            return NULL;
        }
        c->owned = o;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = p;
    return p;
}

static char *own_str(ckpt *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *own_str(ckpt *c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof buf)
        return NULL;
    return own(c, strdup(buf));
}

/* Where an old parameter index went: today's index, and which third of
 * qkv it is (0 q, 1 k, 2 v) or -1 for a whole tensor; false when the index
 * is past the old model's count. */
static bool map_index(int64_t j, int64_t L, int64_t *to, int *part)
{
    *part = -1;
    if (j < 0 || j >= 2 + 16 * L + 2)
        return false;
    if (j < 2) {
        *to = j;
    } else if (j >= 2 + 16 * L) {
        *to = 2 + 12 * L + (j - 2 - 16 * L);
    } else {
        int64_t b = (j - 2) / 16, r = (j - 2) % 16;
        if (r < 2) {
            *to = 2 + 12 * b + r;
        } else if (r < 8) {
            *to = 2 + 12 * b + 2 + (r & 1); /* q.weight q.bias k.weight ... -> qkv.weight / qkv.bias */
            *part = (int)(r - 2) / 2;
        } else {
            *to = 2 + 12 * b + r - 4;
        }
    }
    return true;
}

/* The old parameter name of index j ("wte.weight", "3.6.bias", "4.weight"). */
static void old_param_name(int64_t j, int64_t L, char *buf, size_t n)
{
    static const char *const wb[2] = {"weight", "bias"};
    if (j < 2)
        snprintf(buf, n, "%s.weight", j ? "wpe" : "wte");
    else if (j >= 2 + 16 * L)
        snprintf(buf, n, "%" PRId64 ".%s", L, wb[(j - 2 - 16 * L) & 1]);
    else
        snprintf(buf, n, "%" PRId64 ".%" PRId64 ".%s", (j - 2) / 16, (j - 2) % 16 / 2, wb[(j - 2) % 2]);
}

/* One tensor of the converted file: a renamed old entry (src[0], part -1)
 * or q, k, v concatenated (src[0..2]). */
typedef struct {
    const char *name;
    in_entry *src[3];
    bool fused;
} target;

/* Adds (or finds) the target called name. */
static target *target_of(target *t, int *nt, const char *name)
{
    for (int i = 0; i < *nt; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    t[*nt] = (target){.name = name};
    return &t[(*nt)++];
}

/* The converted tensor of a fused target: q, k, v present, alike, stacked. */
static amp_status fuse(ckpt *c, const target *t, in_entry *out)
{
    const in_entry *q = t->src[0], *k = t->src[1], *v = t->src[2];
    if (!q || !k || !v)
        return ckpt_fail(c, AMP_ERR_FORMAT,
                       "an older gpt checkpoint (index names, separate q, k, v) is converted on load, but '%s' "
                       "lacks its %s part", t->name, !q ? "q" : !k ? "k" : "v");
    char a[CKPT_SHAPE_TEXT], b[CKPT_SHAPE_TEXT];
    for (int i = 1; i < 3; i++)
        if (t->src[i]->dt != q->dt || !shape_equal(t->src[i]->shape, q->shape) || q->shape.ndim < 1)
            return ckpt_fail(c, AMP_ERR_SHAPE,
                           "an older gpt checkpoint is converted on load (qkv = cat(q, k, v)), but for '%s' "
                           "'%s' is %s %s and '%s' is %s %s",
                           t->name, q->name, ckpt_dtype_name(q->dt), ckpt_shape_text(q->shape, a, sizeof a),
                           t->src[i]->name, ckpt_dtype_name(t->src[i]->dt),
                           ckpt_shape_text(t->src[i]->shape, b, sizeof b));
    const uint64_t bytes = q->end - q->begin;
    unsigned char *buf = own(c, malloc(3 * bytes + 1));
    if (!buf)
        return ckpt_fail(c, AMP_ERR_MEMORY, "out of memory converting an older gpt checkpoint");
    for (int i = 0; i < 3; i++)
        memcpy(buf + (uint64_t)i * bytes, t->src[i]->bytes, bytes);
    *out = *q;
    out->name = t->name;
    out->shape.d[0] *= 3;
    out->begin = 0;
    out->end = 3 * bytes;
    out->bytes = buf;
    out->used = false;
    return AMP_OK;
}

/* optim.steps of the old file (I64 [2 + 16 L + 2]) for today's indices;
 * q, k and v must have taken the same number of steps. */
static amp_status convert_steps(ckpt *c, const in_entry *old, int64_t L, in_entry *out)
{
    const int64_t n_old = 2 + 16 * L + 2, n_new = 2 + 12 * L + 2;
    if (old->dt != AMP_I64 || old->shape.ndim != 1 || old->shape.d[0] != n_old)
        return ckpt_fail(c, AMP_ERR_FORMAT,
                       "an older gpt checkpoint is converted on load, but its 'optim.steps' is not I64 [%" PRId64
                       "] (the %" PRId64 "-layer model's parameters before qkv was fused)",
                       n_old, L);
    int64_t *steps = own(c, malloc((size_t)n_new * sizeof *steps)), *seen = malloc((size_t)n_new * sizeof *seen);
    if (!steps || !seen) {
        free(seen);
        return ckpt_fail(c, AMP_ERR_MEMORY, "out of memory converting an older gpt checkpoint");
    }
    for (int64_t i = 0; i < n_new; i++)
        seen[i] = -1;
    amp_status st = AMP_OK;
    for (int64_t j = 0; j < n_old && st == AMP_OK; j++) {
        int64_t to, s;
        int part;
        memcpy(&s, old->bytes + 8 * j, 8);
        map_index(j, L, &to, &part);
        if (seen[to] >= 0 && steps[to] != s) {
            char a[48];
            old_param_name(j, L, a, sizeof a);
            st = ckpt_fail(c, AMP_ERR_FORMAT,
                         "an older gpt checkpoint is converted on load (qkv = cat(q, k, v)), but '%s' took %" PRId64
                         " optimizer steps and the q, k or v before it %" PRId64,
                         a, s, steps[to]);
        }
        steps[to] = s;
        seen[to] = 1;
    }
    free(seen);
    *out = *old;
    out->shape.d[0] = n_new;
    out->begin = 0;
    out->end = (uint64_t)n_new * 8;
    out->bytes = (const unsigned char *)steps;
    return st;
}

/* Parses "<digits>" at *s up to the next '.' or the end; advances *s. */
static bool digits(const char **s, int64_t *v)
{
    const char *p = *s;
    int64_t x = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (x > (INT64_MAX - 9) / 10)
            return false;
        x = x * 10 + (*p - '0');
    }
    *s = p;
    *v = x;
    return true;
}

/* The old parameter index of name ("3.6.bias" -> 2 + 3 * 16 + 13), or -1. */
static int64_t old_index(const char *name, int64_t L)
{
    if (!strcmp(name, "wte.weight"))
        return 0;
    if (!strcmp(name, "wpe.weight"))
        return 1;
    const char *p = name;
    int64_t b, j;
    if (!digits(&p, &b) || *p++ != '.')
        return -1;
    if (b == L && (!strcmp(p, "weight") || !strcmp(p, "bias")))
        return 2 + 16 * L + (*p == 'b');
    if (b >= L || !digits(&p, &j) || j > 7 || *p++ != '.' || (strcmp(p, "weight") && strcmp(p, "bias")))
        return -1;
    return 2 + 16 * b + 2 * j + (*p == 'b');
}

amp_status ckpt_convert(ckpt *c, const amp_module *m)
{
    if (strcmp(m->kind, "gpt") != 0 || ckpt_find(c, "h.0.ln_1.weight") || !ckpt_find(c, "0.1.weight"))
        return AMP_OK;
    const int64_t L = m->cfg_i[3];
    target *t = calloc((size_t)c->n + 1, sizeof *t);
    in_entry *ne = calloc((size_t)c->n + 1, sizeof *ne);
    if (!t || !ne) {
        free(t);
        free(ne);
        return ckpt_fail(c, AMP_ERR_MEMORY, "out of memory converting an older gpt checkpoint");
    }
    int nt = 0, nn = 0;
    amp_status st = AMP_OK;
    for (int i = 0; i < c->n && st == AMP_OK; i++) {
        in_entry *e = &c->e[i];
        const char *key = NULL;
        int64_t j = -1;
        if (!strcmp(e->name, "optim.steps")) {
            st = convert_steps(c, e, L, &ne[nn++]);
            continue;
        }
        if (!strncmp(e->name, "optim.", 6)) {
            /* "optim.<index>.<key>" */
            const char *p = e->name + 6;
            if (digits(&p, &j) && *p == '.' && !strchr(p + 1, '.'))
                key = p + 1;
            else
                j = -1;
        } else {
            j = old_index(e->name, L);
        }
        int64_t to;
        int part;
        if (j < 0 || !map_index(j, L, &to, &part) || to >= amp_module_num_params(m)) {
            ne[nn++] = *e; /* not the old layout's: left as it is */
            continue;
        }
        const char *pname;
        if (!amp_module_param(m, (int)to, &pname) || !pname) {
            st = amp_last_status();
            break;
        }
        const char *name = key ? own_str(c, "optim.%s.%s", pname, key) : own_str(c, "%s", pname);
        if (!name) {
            st = ckpt_fail(c, AMP_ERR_MEMORY, "out of memory converting an older gpt checkpoint");
            break;
        }
        if (part < 0) {
            ne[nn] = *e;
            ne[nn++].name = name;
            continue;
        }
        target *g = target_of(t, &nt, name);
        g->fused = true;
        g->src[part] = e;
    }
    for (int i = 0; i < nt && st == AMP_OK; i++)
        st = fuse(c, &t[i], &ne[nn++]);
    free(t);
    if (st != AMP_OK) {
        free(ne);
        return st;
    }
    free(c->e);
    c->e = ne;
    c->n = nn;
    qsort(c->e, (size_t)c->n, sizeof *c->e, ckpt_by_name);
    for (int i = 1; i < c->n; i++)
        if (strcmp(c->e[i - 1].name, c->e[i].name) == 0)
            return ckpt_fail(c, AMP_ERR_FORMAT,
                           "an older gpt checkpoint is converted on load, but it holds both '%s' and a tensor "
                           "that converts to that name",
                           c->e[i].name);
    c->n_params = 2 + 12 * L + 2;
    c->converted = true;
    amp_warn("checkpoint '%s': an older gpt checkpoint (index names, separate q, k, v linears), converted on "
             "load: PyTorch-style names, qkv = cat(q, k, v); the next save writes the new layout",
             c->path);
    return AMP_OK;
}
