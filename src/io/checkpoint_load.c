/*
 * checkpoint_load.c - amp_checkpoint_load: reads a checkpoint that
 * amp_checkpoint_save wrote (the layout is described in checkpoint.c), or
 * plain safetensors weights, into an already-built model and, when given,
 * optimizer and scaler.
 *
 * Order of work: read the whole file; check the header length against the
 * file size, parse the JSON, check every entry (known dtype, shape,
 * data_offsets matching the shape) and that the entries tile the data;
 * convert an older layout in memory (checkpoint_convert.c: a gpt saved
 * before the PyTorch names and the fused qkv); match the model's
 * parameters by name, the optimizer's state by parameter name (or, in
 * older files, by index: find_state), the optimizer's kind, parameter count and
 * keys, the scaler's state (dry-run on a scratch scaler); only then copy
 * anything in. Every error names the file and the problem.
 *
 * Every number is range-checked before use: the step, the optimizer's and
 * the scaler's counters in [0, CKPT_MAX_COUNT] (a step of -5 once sent the
 * CLI's batcher before its index array), the growth tracker below the
 * growth interval; weights and optimizer buffers must be finite, Adam's
 * exp_avg_sq (and max_exp_avg_sq) >= 0; the whole file must fit in this
 * machine's memory, and only a regular file is opened (io/file.h: a FIFO
 * would block the load). Tensors on
 * CUDA (a model moved there before the load) are filled with copies to
 * the device; such a copy failing (a device error) is the one way a load
 * can stop half-way.
 */
#include "io/checkpoint.h"

#include "amp/amp.h"
#include "base/base.h"
#include "io/file.h"
#include "io/json.h"
#include "tensor/tensor.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The safetensors library refuses headers over 100 MB; so does ampc. */
#define MAX_HEADER ((uint64_t)100 << 20)

amp_status ckpt_fail(const ckpt *c, amp_status st, const char *fmt, ...)
{
    char msg[2048]; /* (a nested library error may be in it) */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return amp_set_error(st, "checkpoint '%s': %s%s", c->path, msg,
                         c->converted ? " (an older gpt checkpoint, converted on load: index names -> PyTorch "
                                        "names, q, k, v -> qkv)"
                                      : "");
}

static amp_status read_all(ckpt *c)
{
    char why[160];
    int64_t size;
    FILE *f = file_fopen_read(c->path, file_mem_limit(), &size, why, sizeof why);
    if (!f)
        return ckpt_fail(c, AMP_ERR_IO, "%s", why);
    amp_status st = AMP_OK;
    if (!(c->file = malloc((size_t)size + 1)))
        st = ckpt_fail(c, AMP_ERR_MEMORY, "out of memory for %lld bytes", (long long)size);
    else if ((c->size = fread(c->file, 1, (size_t)size, f)) != (size_t)size || ferror(f))
        st = ckpt_fail(c, AMP_ERR_IO, "read failed after %zu of %lld bytes", c->size, (long long)size);
    fclose(f);
    return st;
}

int ckpt_by_name(const void *a, const void *b)
{
    return strcmp(((const in_entry *)a)->name, ((const in_entry *)b)->name);
}

static int by_offset(const void *a, const void *b)
{
    const in_entry *x = *(const in_entry *const *)a, *y = *(const in_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

in_entry *ckpt_find(const ckpt *c, const char *name)
{
    in_entry key = {.name = name};
    return c->n ? bsearch(&key, c->e, (size_t)c->n, sizeof *c->e, ckpt_by_name) : NULL;
}

#define find ckpt_find

/* One header entry: {"dtype", "shape", "data_offsets"}, sizes checked. */
static amp_status read_entry(const ckpt *c, const char *name, const json_value *v, in_entry *e)
{
    const json_value *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *off = json_get(v, "data_offsets");
    if (v->type != JSON_OBJECT || !dt || !sh || !off)
        return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s' lacks dtype, shape or data_offsets", name);
    e->name = name;
    if (dt->type != JSON_STRING || !ckpt_dtype_parse(dt->str, &e->dt))
        return ckpt_fail(c, AMP_ERR_FORMAT,
                       "tensor '%s' has dtype %s, which ampc does not read (F32, F16, BF16, I32, I64)", name,
                       dt->type == JSON_STRING ? dt->str : "(not a string)");
    if (sh->type != JSON_ARRAY || sh->n > AMP_MAX_DIMS)
        return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s': shape is not a list of at most %d sizes", name, AMP_MAX_DIMS);
    uint64_t bytes = amp_dtype_size(e->dt), d;
    e->shape.ndim = sh->n;
    for (int i = 0; i < sh->n; i++) {
        if (!json_u64(&sh->items[i], &d) || d > INT64_MAX || (d && bytes > UINT64_MAX / d))
            return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s': bad size in shape (dim %d)", name, i);
        e->shape.d[i] = (int64_t)d;
        bytes *= d;
    }
    if (off->type != JSON_ARRAY || off->n != 2 || !json_u64(&off->items[0], &e->begin) ||
        !json_u64(&off->items[1], &e->end) || e->begin > e->end)
        return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s': data_offsets is not [begin, end] with begin <= end", name);
    if (e->end - e->begin != bytes) {
        char s[CKPT_SHAPE_TEXT];
        return ckpt_fail(c, AMP_ERR_FORMAT,
                       "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                       " bytes, shape %s %s needs %" PRIu64,
                       name, e->begin, e->end, e->end - e->begin, ckpt_shape_text(e->shape, s, sizeof s),
                       ckpt_dtype_name(e->dt), bytes);
    }
    return AMP_OK;
}

/* The tensors' bytes must tile the data buffer exactly (as safetensors
 * requires): no gap, no overlap, nothing after. */
static amp_status check_layout(const ckpt *c, uint64_t data_len)
{
    const in_entry **o = malloc(((size_t)c->n + 1) * sizeof *o);
    if (!o)
        return ckpt_fail(c, AMP_ERR_MEMORY, "out of memory");
    for (int i = 0; i < c->n; i++)
        o[i] = &c->e[i];
    qsort(o, (size_t)c->n, sizeof *o, by_offset);
    uint64_t at = 0;
    amp_status st = AMP_OK;
    for (int i = 0; i < c->n && st == AMP_OK; i++) {
        if (o[i]->begin < at)
            st = ckpt_fail(c, AMP_ERR_FORMAT, "tensors '%s' and '%s' overlap in the data", o[i - 1]->name, o[i]->name);
        else if (o[i]->begin > at)
            st = ckpt_fail(c, AMP_ERR_FORMAT, "a gap of %" PRIu64 " bytes in the data before tensor '%s'",
                         o[i]->begin - at, o[i]->name);
        at = o[i]->end;
    }
    free(o);
    if (st == AMP_OK && at > data_len)
        st = ckpt_fail(c, AMP_ERR_FORMAT,
                       "truncated: the tensors need %" PRIu64 " bytes of data, the file has %" PRIu64,
                     at, data_len);
    else if (st == AMP_OK && at < data_len)
        st = ckpt_fail(c, AMP_ERR_FORMAT, "%" PRIu64 " bytes after the last tensor's data", data_len - at);
    return st;
}

static amp_status parse_header(ckpt *c)
{
    if (c->size < 8)
        return ckpt_fail(c, AMP_ERR_FORMAT, "truncated: %zu bytes, less than the 8-byte header length", c->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | c->file[i];
    if (n < 2 || n > MAX_HEADER)
        return ckpt_fail(c, AMP_ERR_FORMAT, "bad header length %" PRIu64 " (not a safetensors file?)", n);
    if (n > c->size - 8)
        return ckpt_fail(c, AMP_ERR_FORMAT, "truncated: header says %" PRIu64 " bytes, file has %zu after the length",
                         n,
                       c->size - 8);
    char err[128];
    const json_value *root;
    if (!(c->doc = json_parse((const char *)c->file + 8, (size_t)n, &root, err, sizeof err)))
        return ckpt_fail(c, AMP_ERR_FORMAT, "corrupt header JSON (%s)", err);
    if (root->type != JSON_OBJECT)
        return ckpt_fail(c, AMP_ERR_FORMAT, "the header is not a JSON object");
    if (!(c->e = calloc((size_t)root->n + 1, sizeof *c->e)))
        return ckpt_fail(c, AMP_ERR_MEMORY, "out of memory");
    for (int i = 0; i < root->n; i++) {
        const json_value *v = &root->items[i];
        amp_status st;
        if (strcmp(root->keys[i], "__metadata__") != 0) {
            if ((st = read_entry(c, root->keys[i], v, &c->e[c->n++])) != AMP_OK)
                return st;
            continue;
        }
        if (v->type != JSON_OBJECT)
            return ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ is not an object");
        for (int k = 0; k < v->n; k++)
            if (v->items[k].type != JSON_STRING)
                return ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ \"%s\" is not a string", v->keys[k]);
        c->meta = v;
    }
    qsort(c->e, (size_t)c->n, sizeof *c->e, ckpt_by_name);
    for (int i = 1; i < c->n; i++)
        if (strcmp(c->e[i - 1].name, c->e[i].name) == 0)
            return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s' appears twice", c->e[i].name);
    const json_value *fmt = json_get(c->meta, "format");
    if (fmt && !c->foreign && strcmp(fmt->str, CKPT_FORMAT) != 0)
        return ckpt_fail(c, AMP_ERR_FORMAT, "format \"%s\" is not one this ampc reads (" CKPT_FORMAT ")", fmt->str);
    c->data = c->file + 8 + n;
    for (int i = 0; i < c->n; i++)
        c->e[i].bytes = c->data + c->e[i].begin;
    return check_layout(c, (uint64_t)(c->size - 8 - n));
}

amp_status ckpt_open(ckpt *c)
{
    amp_status st =
        ckpt_host_le() ? AMP_OK : ckpt_fail(c, AMP_ERR_STATE, "safetensors is little-endian; this host is not");
    if (st == AMP_OK)
        st = read_all(c);
    if (st == AMP_OK)
        st = parse_header(c);
    return st;
}

void ckpt_close(ckpt *c)
{
    for (int i = 0; i < c->n_owned; i++)
        free(c->owned[i]);
    free(c->owned);
    free(c->e);
    json_free(c->doc);
    free(c->file);
    c->owned = NULL, c->e = NULL, c->doc = NULL, c->file = NULL;
    c->n_owned = c->n = 0;
}

static const char *meta_str(const ckpt *c, const char *key)
{
    const json_value *v = json_get(c->meta, key);
    return v ? v->str : NULL;
}

/* A metadata number (a double, an i64 or a u64): a missing key or a value
 * that does not parse completely is an error. */
static amp_status meta_num(const ckpt *c, const char *key, bool is_float, double *f, int64_t *i, uint64_t *u)
{
    const json_value *v = json_get(c->meta, key);
    if (!v)
        return ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ has no \"%s\"", key);
    const char *s = v->str;
    if (strlen(s) != v->len || (!is_float && !((*s >= '0' && *s <= '9') || (i && *s == '-'))))
        return ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ \"%s\" is \"%s\", not an integer", key, s);
    char *end = NULL;
    errno = 0;
    if (is_float)
        *f = strtod(s, &end);
    else if (i)
        *i = strtoll(s, &end, 10);
    else
        *u = strtoull(s, &end, 10);
    if (!*s || *end || errno || (u && *s == '-') || (is_float && !isfinite(*f)))
        return ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ \"%s\" is \"%s\", not %s", key, s,
                       is_float ? "a finite number" : "an integer");
    return AMP_OK;
}
static amp_status meta_f64(const ckpt *c, const char *key, double *v)
{
    return meta_num(c, key, true, v, NULL, NULL);
}

static amp_status meta_i64(const ckpt *c, const char *key, int64_t *v)
{
    return meta_num(c, key, false, NULL, v, NULL);
}

static amp_status meta_u64(const ckpt *c, const char *key, uint64_t *v)
{
    return meta_num(c, key, false, NULL, NULL, v);
}

/* A metadata integer that must lie in [lo, hi]. */
static amp_status meta_i64_in(const ckpt *c, const char *key, int64_t lo, int64_t hi, int64_t *v)
{
    amp_status st = meta_i64(c, key, v);
    if (st == AMP_OK && (*v < lo || *v > hi))
        st = ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ \"%s\" is %" PRId64 ", outside [%" PRId64 ", %" PRId64 "]", key,
                     *v, lo, hi);
    return st;
}

/* Whether element i of a float tensor's raw bytes is finite (integer
 * dtypes always are); *v gets its value when it is an F32. By memcpy, not
 * load_f32: a file's data offsets need not be aligned. */
static bool elem_finite(amp_dtype dt, const unsigned char *p, size_t i, double *v)
{
    *v = 0;
    if (dt == AMP_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        *v = f;
        return isfinite(f);
    }
    if (dt == AMP_F16 || dt == AMP_BF16) {
        uint16_t u;
        memcpy(&u, p + 2 * i, 2);
        uint16_t e = dt == AMP_F16 ? 0x7c00 : 0x7f80; /* the exponent bits: all ones is inf / NaN */
        return (u & e) != e;
    }
    return true;
}

/* Entry e's values: finite, and >= 0 when nonneg (Adam's second moments,
 * whose square roots the update takes). A weight or optimizer buffer that
 * is inf / NaN can only turn every later step into NaN: refused, naming
 * the tensor (Python's safetensors still opens the file to inspect it). */
static amp_status check_values(const ckpt *c, const in_entry *e, bool nonneg)
{
    const unsigned char *p = e->bytes;
    size_t n = (size_t)((e->end - e->begin) / amp_dtype_size(e->dt));
    for (size_t i = 0; i < n; i++) {
        double v;
        if (!elem_finite(e->dt, p, i, &v))
            return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s' holds a non-finite value (inf or NaN) at element %zu",
                           e->name, i);
        if (nonneg && v < 0)
            return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s' holds %g at element %zu; it must be >= 0", e->name, v, i);
    }
    return AMP_OK;
}

/* What the checks found, applied only when all passed. */
typedef struct {
    int64_t *steps; /* per optimizer parameter */
    double lr;
    int64_t total_steps;
    bool scaler; /* load sst into the scaler */
    amp_scaler_state sst;
    bool counts; /* and these counters */
    amp_scaler_counts cnt;
    int64_t hysteresis_left; /* > 0: and this (clamped to the scaler's hysteresis) */
    bool rng;
    amp_rng_state r;
    int64_t step;
    char *settings;
} plan;

static amp_status check_model(const ckpt *c, const amp_module *m)
{
    int n = amp_module_num_params(m);
    for (int i = 0; i < n; i++) {
        const char *name;
        amp_tensor *p = amp_module_param(m, i, &name);
        if (!p)
            return amp_last_status();
        in_entry *e = find(c, name);
        char a[CKPT_SHAPE_TEXT], b[CKPT_SHAPE_TEXT];
        if (!e)
            return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s' is missing (the model's parameter is %s %s)", name,
                           ckpt_shape_text(p->shape, a, sizeof a), ckpt_dtype_name(p->dtype));
        if (!shape_equal(e->shape, p->shape))
            return ckpt_fail(c, AMP_ERR_SHAPE, "tensor '%s' has shape %s, the model expects %s", name,
                           ckpt_shape_text(e->shape, a, sizeof a), ckpt_shape_text(p->shape, b, sizeof b));
        if (e->dt != p->dtype)
            return ckpt_fail(c, AMP_ERR_DTYPE, "tensor '%s' is %s, the model's parameter is %s", name,
                           ckpt_dtype_name(e->dt), ckpt_dtype_name(p->dtype));
        amp_status st = check_values(c, e, false);
        if (st != AMP_OK)
            return st;
        e->used = true;
    }
    return AMP_OK;
}

/* The entry of optimizer parameter i's state `key` ("master": its f32
 * master): "optim.<name>.<key>" (ckpt_optim_param_name), else the index
 * form "optim.<i>.<key>" of files written before the names; the first
 * name into shown (for messages). */
static in_entry *find_state(const ckpt *c, const amp_module *m, const amp_optim *o, int i, const char *key,
                            char *shown, size_t n)
{
    char pn[24], legacy[64];
    const char *name = ckpt_optim_param_name(m, o, i, pn, sizeof pn);
    int len = snprintf(shown, n, "optim.%s.%s", name, key);
    in_entry *e = len >= 0 && (size_t)len < n ? find(c, shown) : NULL;
    if (!e) {
        snprintf(legacy, sizeof legacy, "optim.%d.%s", i, key);
        e = find(c, legacy);
    }
    return e;
}

static amp_status check_optim(const ckpt *c, const amp_module *m, const amp_optim *o, plan *pl)
{
    if (optim_first_sharded(o) >= 0)
        return ckpt_fail(c, AMP_ERR_STATE, "cannot be loaded into an optimizer whose state is sharded over the ranks "
                       "(ZeRO-1, parameter %d): amp_zero_gather_state first, amp_zero_shard_state after",
                       optim_first_sharded(o));
    const char *kind = meta_str(c, "optim.kind");
    if (!kind)
        return ckpt_fail(c, AMP_ERR_FORMAT, "has no optimizer state, but a %s optimizer was given", o->name);
    if (!optim_find(kind))
        return ckpt_fail(c, AMP_ERR_FORMAT, "holds state of an unknown optimizer kind \"%s\"", kind);
    if (strcmp(kind, o->name) != 0)
        return ckpt_fail(c, AMP_ERR_STATE, "holds %s optimizer state, but the optimizer given is %s", kind, o->name);
    int64_t np;
    amp_status st;
    if ((c->n_params < 0 ? (st = meta_i64(c, "optim.n_params", &np)) : (np = c->n_params, st = AMP_OK)) ||
        (st = meta_f64(c, "optim.lr", &pl->lr)) ||
        (st = meta_i64_in(c, "optim.total_steps", 0, CKPT_MAX_COUNT, &pl->total_steps)))
        return st;
    if (np != o->n)
        return ckpt_fail(c, AMP_ERR_SHAPE, "holds state for %" PRId64 " optimizer parameters, the %s optimizer has %d",
                       np, o->name, o->n);
    if (!(pl->lr >= 0))
        return ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ \"optim.lr\" is %g, it must be >= 0", pl->lr);
    in_entry *se = find(c, "optim.steps");
    if (!se || se->dt != AMP_I64 || se->shape.ndim != 1 || se->shape.d[0] != o->n)
        return ckpt_fail(c, AMP_ERR_FORMAT, "tensor 'optim.steps' is missing or not I64 [%d]", o->n);
    se->used = true;
    if (!(pl->steps = malloc((size_t)o->n * sizeof *pl->steps)))
        return ckpt_fail(c, AMP_ERR_MEMORY, "out of memory");
    memcpy(pl->steps, se->bytes, (size_t)o->n * sizeof *pl->steps);
    const char *keys[OPTIM_MAX_STATE];
    int nk = ckpt_optim_keys(o, keys);
    for (int i = 0; i < o->n; i++) {
        if (pl->steps[i] < 0 || pl->steps[i] > CKPT_MAX_COUNT)
            return ckpt_fail(c, AMP_ERR_FORMAT,
                           "tensor 'optim.steps' element %d is %" PRId64 ", outside [0, %" PRId64 "]", i,
                           pl->steps[i], CKPT_MAX_COUNT);
        for (int k = 0; k < nk && pl->steps[i] > 0; k++) {
            char name[256], a[CKPT_SHAPE_TEXT], b[CKPT_SHAPE_TEXT];
            in_entry *e = find_state(c, m, o, i, keys[k], name, sizeof name);
            if (!e)
                return ckpt_fail(c, AMP_ERR_FORMAT, "tensor '%s' is missing (the %s optimizer given keeps it)", name,
                               o->name);
            if (!shape_equal(e->shape, o->params[i]->shape))
                return ckpt_fail(c, AMP_ERR_SHAPE, "tensor '%s' is %s %s, the optimizer's parameter %d is %s", name,
                               ckpt_shape_text(e->shape, a, sizeof a), ckpt_dtype_name(e->dt), i,
                               ckpt_shape_text(o->params[i]->shape, b, sizeof b));
            if (e->dt != o->state_dt)
                return ckpt_fail(c, AMP_ERR_DTYPE,
                               "tensor '%s' is %s, the optimizer given keeps its state in %s (saved with another "
                               "optimizer state dtype, --optim-state?)",
                               name, ckpt_dtype_name(e->dt), ckpt_dtype_name(o->state_dt));
            amp_status st = check_values(c, e, strstr(keys[k], "exp_avg_sq") != NULL);
            if (st != AMP_OK)
                return st;
            e->used = true;
        }
        /* The f32 master of a 16-bit parameter (master weights on). */
        if (pl->steps[i] > 0 && optim_wants_master(o, i)) {
            const amp_tensor *p = o->params[i];
            char name[256], a[CKPT_SHAPE_TEXT], b[CKPT_SHAPE_TEXT];
            in_entry *e = find_state(c, m, o, i, "master", name, sizeof name);
            if (!e)
                return ckpt_fail(c, AMP_ERR_FORMAT,
                               "tensor '%s' is missing (the optimizer given keeps f32 master weights; saved "
                               "without them, another --param-dtype?)",
                               name);
            if (e->dt != AMP_F32 || !shape_equal(e->shape, p->shape))
                return ckpt_fail(c, AMP_ERR_SHAPE, "tensor '%s' is %s %s, parameter %d's f32 master must be F32 %s",
                               name, ckpt_dtype_name(e->dt), ckpt_shape_text(e->shape, a, sizeof a), i,
                               ckpt_shape_text(p->shape, b, sizeof b));
            amp_status st = check_values(c, e, false);
            if (st != AMP_OK)
                return st;
            e->used = true;
        }
    }
    for (int i = 0; i < c->n; i++)
        if (!c->e[i].used && strncmp(c->e[i].name, "optim.", 6) == 0 && strstr(c->e[i].name, ".master"))
            return ckpt_fail(c, AMP_ERR_STATE,
                           "tensor '%s' is an f32 master weight, but the optimizer given keeps none for that "
                           "parameter (saved with master weights, another --param-dtype?)",
                           c->e[i].name);
    for (int i = 0; i < c->n; i++)
        if (!c->e[i].used && strncmp(c->e[i].name, "optim.", 6) == 0)
            return ckpt_fail(c, AMP_ERR_STATE,
                           "tensor '%s' is not state the %s optimizer given keeps "
                           "(saved with other options?)",
                           c->e[i].name, o->name);
    return AMP_OK;
}

static amp_status check_scaler(const ckpt *c, const amp_scaler *s, plan *pl)
{
    const char *en = meta_str(c, "scaler.enabled");
    if (!en)
        return ckpt_fail(c, AMP_ERR_FORMAT, "has no scaler state, but a scaler was given");
    if (strcmp(en, "true") != 0 && strcmp(en, "false") != 0)
        return ckpt_fail(c, AMP_ERR_FORMAT, "__metadata__ \"scaler.enabled\" is \"%s\", not true or false", en);
    if (!amp_scaler_is_enabled(s))
        return AMP_OK; /* a disabled scaler has no state to load (as GradScaler) */
    if (strcmp(en, "false") == 0)
        return ckpt_fail(c, AMP_ERR_STATE, "was saved from a disabled scaler, but the scaler given is enabled");
    amp_scaler_state *t = &pl->sst;
    amp_status st;
    t->valid = true;
    if ((st = meta_f64(c, "scaler.scale", &t->scale)) ||
        (st = meta_f64(c, "scaler.growth_factor", &t->growth_factor)) ||
        (st = meta_f64(c, "scaler.backoff_factor", &t->backoff_factor)) ||
        (st = meta_i64_in(c, "scaler.growth_interval", 1, CKPT_MAX_COUNT, &t->growth_interval)) ||
        (st = meta_i64_in(c, "scaler.growth_tracker", 0, t->growth_interval - 1, &t->growth_tracker)))
        return st;
    /* The counters amp_scaler_get_counts reports (files may lack them). */
    if (meta_str(c, "scaler.steps") || meta_str(c, "scaler.skipped")) {
        if ((st = meta_i64_in(c, "scaler.steps", 0, CKPT_MAX_COUNT, &pl->cnt.steps)) ||
            (st = meta_i64_in(c, "scaler.skipped", 0, CKPT_MAX_COUNT, &pl->cnt.skipped)))
            return st;
        /* (older files lack the streak: a resumed run's starts at 0) */
        if (meta_str(c, "scaler.skipped_in_a_row") &&
            (st = meta_i64_in(c, "scaler.skipped_in_a_row", 0, pl->cnt.skipped, &pl->cnt.skipped_in_a_row)))
            return st;
        pl->counts = true;
    }
    /* The hysteresis count (older files lack it: the count starts full).
     * A scaler given a smaller hysteresis than the run that saved it
     * continues from its own largest count. */
    if (meta_str(c, "scaler.hysteresis_left") &&
        (st = meta_i64_in(c, "scaler.hysteresis_left", 1, INT_MAX, &pl->hysteresis_left)))
        return st;
    /* A dry run on a scratch scaler: the same checks the real load makes. */
    amp_scaler *scratch = amp_scaler_new(amp_scaler_defaults());
    st = scratch ? amp_scaler_state_load(scratch, *t) : amp_last_status();
    amp_scaler_free(scratch);
    if (st != AMP_OK)
        return ckpt_fail(c, AMP_ERR_FORMAT, "bad scaler state (%s)", amp_last_error());
    pl->scaler = true;
    return AMP_OK;
}

static amp_status check_rest(const ckpt *c, const amp_optim *o, plan *pl)
{
    for (int i = 0; i < c->n; i++)
        if (!c->e[i].used && (o || strncmp(c->e[i].name, "optim.", 6) != 0))
            return ckpt_fail(c, AMP_ERR_FORMAT, "unexpected tensor '%s' (the model has no parameter of that name)",
                           c->e[i].name);
    amp_status st;
    if (meta_str(c, "step") && (st = meta_i64_in(c, "step", 0, CKPT_MAX_COUNT, &pl->step)))
        return st;
    if (meta_str(c, "rng.seed") || meta_str(c, "rng.offset")) {
        if ((st = meta_u64(c, "rng.seed", &pl->r.seed)) || (st = meta_u64(c, "rng.offset", &pl->r.offset)))
            return st;
        pl->rng = true;
    }
    const json_value *v = json_get(c->meta, "settings");
    if (v && !(pl->settings = malloc(v->len + 1)))
        return ckpt_fail(c, AMP_ERR_MEMORY, "out of memory");
    if (v)
        memcpy(pl->settings, v->str, v->len + 1);
    return AMP_OK;
}

/* The bytes of entry e (t's dtype and size, checked) into t on its device
 * (a copy to a GPU is the only step here that can fail after the checks). */
static amp_status fill(const ckpt *c, const in_entry *e, amp_tensor *t)
{
    (void)c;
    return amp_tensor_copy_in(t, e->bytes, t->dtype);
}

/* Every check passed: copy in. */
static amp_status apply(const ckpt *c, amp_module *m, amp_optim *o, amp_scaler *s, plan *pl)
{
    if (o) {
        const char *keys[OPTIM_MAX_STATE];
        int nk = ckpt_optim_keys(o, keys);
        for (int i = 0; i < o->n; i++) {
            amp_status st = amp_optim_set_param_steps(o, i, pl->steps[i]);
            if (st != AMP_OK)
                return st;
            for (int k = 0; k < nk && pl->steps[i] > 0; k++) {
                char name[256];
                const in_entry *e = find_state(c, m, o, i, keys[k], name, sizeof name);
                st = fill(c, e, amp_optim_state_tensor(o, i, keys[k]));
                if (st != AMP_OK)
                    return st;
            }
        }
        amp_optim_set_steps(o, pl->total_steps);
        amp_optim_set_lr(o, pl->lr);
    }
    for (int i = 0, n = amp_module_num_params(m); i < n; i++) {
        const char *name;
        amp_tensor *p = amp_module_param(m, i, &name);
        amp_status st = fill(c, find(c, name), p);
        if (st != AMP_OK)
            return st;
    }
    /* Masters after the parameters: each is re-seeded from its loaded
     * parameter (in step with it), then, after a step, overwritten by the
     * saved one. */
    for (int i = 0; o && i < o->n; i++) {
        amp_status st = optim_sync_master(o, i);
        if (st == AMP_OK && optim_master(o, i) && pl->steps[i] > 0) {
            char name[256];
            st = fill(c, find_state(c, m, o, i, "master", name, sizeof name), optim_master(o, i));
        }
        if (st != AMP_OK)
            return st;
    }
    amp_status st;
    if (pl->scaler && (st = amp_scaler_state_load(s, pl->sst)) != AMP_OK)
        return st;
    if (pl->counts && (st = scaler_counts_load(s, pl->cnt)) != AMP_OK)
        return st;
    if (pl->scaler && pl->hysteresis_left > 0) {
        int most = scaler_hysteresis_most(s);
        if ((st = amp_scaler_set_hysteresis_left(s, pl->hysteresis_left < most ? (int)pl->hysteresis_left : most)) !=
            AMP_OK)
            return st;
    }
    if (pl->rng)
        amp_rng_set_state(pl->r);
    return AMP_OK;
}

amp_status amp_checkpoint_load(const char *path, amp_module *m, amp_optim *o, amp_scaler *s, int64_t *step,
                               char **settings_json)
{
    if (settings_json)
        *settings_json = NULL;
    if (!path || !m)
        return amp_set_error(AMP_ERR_ARG, "checkpoint_load: NULL %s", path ? "module" : "path");
    ckpt c = {.path = path, .n_params = -1};
    plan pl = {0};
    amp_status st = ckpt_open(&c);
    if (st == AMP_OK)
        st = ckpt_convert(&c, m);
    if (st == AMP_OK)
        st = check_model(&c, m);
    if (st == AMP_OK && o)
        st = check_optim(&c, m, o, &pl);
    if (st == AMP_OK && s)
        st = check_scaler(&c, s, &pl);
    if (st == AMP_OK)
        st = check_rest(&c, o, &pl);
    if (st == AMP_OK)
        st = apply(&c, m, o, s, &pl);
    if (st == AMP_OK) {
        if (step)
            *step = pl.step;
        if (settings_json)
            *settings_json = pl.settings, pl.settings = NULL;
    }
    free(pl.settings);
    free(pl.steps);
    ckpt_close(&c);
    return st;
}
