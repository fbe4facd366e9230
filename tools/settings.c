/*
 * settings.c - a run's settings as the JSON a checkpoint carries, and back.
 *
 *   {"ampc": "0.1.0",
 *    "settings": {"model": "cnn", "batch": 64, "lr": 0.002, ...},
 *    "run": {"features": 784, ..., "sched_step": 937, "skipped": 0, "world_size": 2,
 *            "total_steps": 1870}}
 *
 * "settings" holds every saved option (train's table, class SETTING or
 * SHAPE) that applies to the run, under its command-line name; reading
 * passes each value's text through the same parser as the command line,
 * so a checkpoint cannot smuggle in a value the command line would
 * refuse. "run" holds what the data decided (input shape, classes,
 * vocabulary), where the schedule stands, the ranks it ran on
 * (world_size; 0 or absent: one process) and the run's length in steps
 * (total_steps, which a resume keeps; 0 or absent: not recorded) and, for
 * gpt, the vocabulary's bytes in token order (vocab_bytes, hex; absent
 * from older checkpoints), or for a gpt on token files (--data-bin) that
 * its vocabulary is token ids (vocab_kind "token_ids") and the training
 * file's size and hash (data_bin_bytes, data_bin_hash), and the hash of
 * the --policy file it trained with (policy_hash). Older checkpoints also hold, with --hysteresis
 * N > 1, the overflows the scaler still let pass before it backed off
 * (hysteresis_left, 1..N), which is read; the library's checkpoint keeps
 * it now, beside the scaler's other state.
 *
 * settings_merge is the resume rule: the checkpoint's settings, with the
 * options given on the command line on top, except that a given option
 * of class SHAPE (the model's shape, the optimizer) that differs is an
 * error: the saved tensors could not be loaded into another shape.
 */
#include "settings.h"
#include "tokens.h"

#include "io/json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether row d's value is a string (train_opts points to the text). */
static bool is_text(const opt_def *d) { return d->kind == OPT_STR || d->kind == OPT_TEXT; }

/* Whether option d matters for run o (its model, optimizer, schedule and
 * precision): only those are saved. */
static bool applies(const opt_def *d, const train_opts *o)
{
    if (d->models && strcmp(d->models, o->model) != 0)
        return false;
    /* a text option without a value (a checkpoint's settings that never
     * named one: an mlp's without "data") has nothing to save */
    if (is_text(d) && !*(const char *const *)((const char *)o + d->off))
        return false;
    const char *n = d->name;
    if (strcmp(n, "momentum") == 0)
        return strcmp(o->optim, "sgd") == 0;
    if (strcmp(n, "beta1") == 0 || strcmp(n, "beta2") == 0 || strcmp(n, "eps") == 0)
        return strcmp(o->optim, "sgd") != 0;
    if (strcmp(n, "warmup-start-factor") == 0)
        return o->warmup > 0;
    if (strcmp(n, "step-size") == 0 || strcmp(n, "gamma") == 0)
        return strcmp(o->schedule, "step") == 0;
    if (strcmp(n, "min-lr") == 0)
        return strcmp(o->schedule, "cosine") == 0;
    bool scaler = strcmp(o->precision, "fp16") == 0 && !o->no_scaler;
    /* The grad scaler's options: with the scaler; the bounds and the fixed
     * scale only when set (0 is their "off", the default: not saved). */
    if (strcmp(n, "min-scale") == 0)
        return scaler && o->min_scale > 0;
    if (strcmp(n, "max-scale") == 0)
        return scaler && o->max_scale > 0;
    if (strcmp(n, "static-scale") == 0)
        return scaler && o->static_scale > 0;
    if (d->fp16 & OPT_FP16_SCALER)
        return scaler;
    if (strcmp(n, "epochs") == 0)
        return o->epochs > 0;
    if (strcmp(n, "steps") == 0)
        return o->steps > 0;
    if (strcmp(n, "clip") == 0)
        return o->clip > 0;
    if (strcmp(n, "flush-denormal") == 0) /* (older checkpoints: off) */
        return o->flush_denormal;
    /* token files: saved when given (a char run has none); so is the
     * autocast policy, which a resumed run and eval then run with */
    if (strcmp(n, "data-bin") == 0 || strcmp(n, "val-bin") == 0 || strcmp(n, "fp32-modules") == 0 ||
        strcmp(n, "policy") == 0)
        return *(const char *const *)((const char *)o + d->off) != NULL;
    if (strcmp(n, "vocab") == 0)
        return o->vocab > 0;
    if (strcmp(n, "data") == 0) /* token files replace the text */
        return !o->data_bin;
    return true;
}

static void put_value(json_buf *b, const opt_def *d, const train_opts *o)
{
    const void *f = (const char *)o + d->off;
    switch (d->kind) {
    case OPT_STR:
    case OPT_TEXT:
        jb_string(b, *(const char *const *)f);
        break;
    case OPT_INT:
        jb_printf(b, "%" PRId64, *(const int64_t *)f);
        break;
    case OPT_U64:
        jb_printf(b, "%" PRIu64, *(const uint64_t *)f);
        break;
    case OPT_REAL:
        jb_printf(b, "%.17g", *(const double *)f); /* exact when read back */
        break;
    case OPT_LIST:
        jb_puts(b, "[");
        for (int i = 0; i < o->n_hidden; i++)
            jb_printf(b, "%s%" PRId64, i ? "," : "", o->hidden[i]);
        jb_puts(b, "]");
        break;
    case OPT_FLAG:
        jb_puts(b, *(const bool *)f ? "true" : "false");
        break;
    }
}

char *settings_to_json(const train_opts *o, const run_info *ri)
{
    json_buf b = {0};
    jb_puts(&b, "{\"ampc\":");
    jb_string(&b, AMPC_VERSION);
    jb_puts(&b, ",\"settings\":{");
    bool first = true;
    for (int i = 0; i < RO_COUNT; i++) {
        const opt_def *d = &train_rows[i];
        if (d->cls == OC_RUN || !applies(d, o))
            continue;
        jb_printf(&b, "%s\"%s\":", first ? "" : ",", d->name);
        put_value(&b, d, o);
        first = false;
    }
    jb_printf(&b,
              "},\"run\":{\"features\":%" PRId64 ",\"channels\":%" PRId64 ",\"height\":%" PRId64
              ",\"width\":%" PRId64 ",\"classes\":%" PRId64 ",\"vocab\":%" PRId64 ",\"sched_step\":%" PRId64
              ",\"skipped\":%" PRId64 ",\"world_size\":%" PRId64 ",\"total_steps\":%" PRId64,
              ri->features, ri->channels, ri->height, ri->width, ri->classes, ri->vocab, ri->sched_step,
              ri->skipped, ri->world_size, ri->total_steps);
    if (ri->vocab_hex[0]) /* gpt: the vocabulary's bytes, which generate and eval compare */
        jb_printf(&b, ",\"vocab_bytes\":\"%s\"", ri->vocab_hex);
    if (ri->token_ids) /* gpt on token files: ids, no characters; the file trained on */
        jb_printf(&b, ",\"vocab_kind\":\"token_ids\",\"data_bin_bytes\":%" PRIu64 ",\"data_bin_hash\":\"%016" PRIx64
                  "\"", ri->data_bytes, ri->data_hash);
    if (ri->policy_hash) /* --policy's file as the run read it: a resume refuses another */
        jb_printf(&b, ",\"policy_hash\":\"%016" PRIx64 "\"", ri->policy_hash);
    jb_puts(&b, "}}");
    if (b.oom) {
        jb_free(&b);
        return NULL;
    }
    return b.p;
}

/* String values must outlive the document (train_opts points to them):
 * copies kept until settings_forget, reachable from here meanwhile. */
static char **kept;
static size_t n_kept, cap_kept;

static char *keep(const char *s)
{
    if (n_kept == cap_kept) {
        size_t cap = cap_kept ? 2 * cap_kept : 16;
        char **p = realloc(kept, cap * sizeof *p);
        if (!p)
            return NULL;
        kept = p;
        cap_kept = cap;
    }
    char *c = strdup(s);
    if (c)
        kept[n_kept++] = c;
    return c;
}

void settings_forget(void)
{
    for (size_t i = 0; i < n_kept; i++)
        free(kept[i]);
    free(kept);
    kept = NULL;
    n_kept = cap_kept = 0;
}

static int bad_settings(const char *where, const char *what, const char *key)
{
    fprintf(stderr, "ampc: %s: the run settings in its metadata are malformed (%s%s%s)\n", where, what,
            key ? ": " : "", key ? key : "");
    return 1;
}

/* One saved option's value, as command-line text, into ck. */
static int set_from_json(const opt_def *d, const json_value *v, train_opts *ck, const char *where)
{
    char text[1024];
    switch (v->type) {
    case JSON_STRING:
    case JSON_NUMBER:
        if (strlen(v->str) >= sizeof text)
            return bad_settings(where, "a value too long", d->name);
        snprintf(text, sizeof text, "%s", v->str);
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        if (d->kind != OPT_FLAG)
            return bad_settings(where, "true / false for a value", d->name);
        if (v->type == JSON_FALSE)
            return -1;
        text[0] = '\0';
        break;
    case JSON_ARRAY: {
        size_t n = 0;
        text[0] = '\0';
        for (int i = 0; i < v->n && n < sizeof text - 32; i++) {
            if (v->items[i].type != JSON_NUMBER)
                return bad_settings(where, "a list with a non-number", d->name);
            n += (size_t)snprintf(text + n, sizeof text - n, "%s%s", i ? "," : "", v->items[i].str);
        }
        if (v->n == 0)
            snprintf(text, sizeof text, "none");
        break;
    }
    default:
        return bad_settings(where, "a value of the wrong type", d->name);
    }
    if (d->kind == OPT_FLAG && v->type != JSON_TRUE)
        return bad_settings(where, "a flag that is not true / false", d->name);
    if ((d->kind == OPT_LIST) != (v->type == JSON_ARRAY))
        return bad_settings(where, "a list where none belongs, or none where one does", d->name);
    /* Only a string is pointed to by ck; numbers are parsed from text. */
    char *value = is_text(d) ? keep(text) : text;
    if (!value) {
        fprintf(stderr, "ampc: out of memory\n");
        return 1;
    }
    char who[512];
    snprintf(who, sizeof who, "ampc: %s: saved setting", where);
    return opts_set(d, value, ck, who) >= 0 ? 1 : -1;
}

/* run.<key>: a whole number in [lo, hi]; -1, or 1 after a message naming
 * the file, the field, the value and the range. */
static int get_run_value(const json_value *run, const char *key, int64_t lo, int64_t hi, int64_t *out,
                         const char *where)
{
    const json_value *v = json_get(run, key);
    if (!v || v->type != JSON_NUMBER)
        return bad_settings(where, "a missing or non-number run value", key);
    char *end;
    errno = 0;
    long long x = strtoll(v->str, &end, 10);
    if (*end || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "ampc: %s: the saved run value \"%s\" is %s, outside [%" PRId64 ", %" PRId64 "]\n", where, key,
                v->str, lo, hi);
        return 1;
    }
    *out = x;
    return -1;
}

/* A token-file run's values (vocab_kind "token_ids", the training file's
 * size and hash); a char vocabulary (no vocab_kind) has at most 256
 * tokens. -1, or 1 after a message. */
static int token_ids_from_json(const json_value *run, run_info *ri, const char *where)
{
    const json_value *k = json_get(run, "vocab_kind"), *h = json_get(run, "data_bin_hash");
    if (!k)
        return ri->vocab > 256 ? bad_settings(where, "a character vocabulary of more than 256 tokens", "vocab") : -1;
    if (k->type != JSON_STRING || strcmp(k->str, "token_ids") != 0)
        return bad_settings(where, "a vocabulary kind other than \"token_ids\"", "vocab_kind");
    ri->token_ids = true;
    int64_t bytes = 0;
    int rc = get_run_value(run, "data_bin_bytes", 0, INT64_MAX, &bytes, where);
    char *end = NULL;
    if (rc < 0 && (!h || h->type != JSON_STRING || strlen(h->str) != 16 ||
                   (ri->data_hash = strtoull(h->str, &end, 16), *end)))
        rc = bad_settings(where, "a hash that is not 16 hex digits", "data_bin_hash");
    ri->data_bytes = (uint64_t)bytes;
    return rc;
}

int settings_from_json(const char *text, const char *where, train_opts *ck, run_info *ri)
{
    char err[256];
    const json_value *root;
    json_doc *doc = json_parse(text, strlen(text), &root, err, sizeof err);
    if (!doc)
        return bad_settings(where, err, NULL);
    int rc = -1;
    const json_value *s = json_get(root, "settings"), *run = json_get(root, "run");
    if (root->type != JSON_OBJECT || !s || s->type != JSON_OBJECT || !run || run->type != JSON_OBJECT) {
        rc = bad_settings(where, "no \"settings\" and \"run\" objects", NULL);
        goto out;
    }
    for (int i = 0; i < s->n && rc < 0; i++) {
        const opt_def *d = opts_find(s->keys[i]);
        if (!d || d->cls == OC_RUN)
            rc = bad_settings(where, "an option this ampc does not know", s->keys[i]);
        else
            rc = set_from_json(d, &s->items[i], ck, where);
    }
    /* Checkpoints older than these settings ran with weight decay on
     * every parameter and a warm-up from lr 0: resumed, they keep it. */
    if (rc < 0 && !json_get(s, "decay-all"))
        ck->decay_all = true;
    if (rc < 0 && !json_get(s, "warmup-start-factor"))
        ck->warmup_start_factor = 0;
    /* Ranges: an IDX dimension is a u32; token ids are uint16 (a
     * byte-level vocabulary, at most 256 tokens, is checked after); a run
     * takes at most CLI_MAX_STEPS steps. */
    static const struct {
        const char *key;
        int64_t hi;
    } keys[] = {{"features", UINT32_MAX}, {"channels", 1}, {"height", UINT32_MAX},
                {"width", UINT32_MAX},    {"classes", UINT32_MAX}, {"vocab", TOK_MAX_VOCAB},
                {"sched_step", CLI_MAX_STEPS}, {"skipped", CLI_MAX_STEPS}};
    int64_t *fields[] = {&ri->features, &ri->channels, &ri->height, &ri->width,
                         &ri->classes,  &ri->vocab,    &ri->sched_step, &ri->skipped};
    for (int i = 0; i < 8 && rc < 0; i++)
        rc = get_run_value(run, keys[i].key, 0, keys[i].hi, fields[i], where);
    rc = rc < 0 ? token_ids_from_json(run, ri, where) : rc;
    const json_value *ph = json_get(run, "policy_hash");
    char *ph_end = NULL;
    if (rc < 0 && ph &&
        (ph->type != JSON_STRING || strlen(ph->str) != 16 || (ri->policy_hash = strtoull(ph->str, &ph_end, 16), *ph_end)))
        rc = bad_settings(where, "a hash that is not 16 hex digits", "policy_hash");
    /* The ranks it was saved on: absent from checkpoints older than
     * data-parallel training (one rank, read as 0). */
    if (rc < 0 && json_get(run, "world_size"))
        rc = get_run_value(run, "world_size", 0, 1 << 24, &ri->world_size, where);
    /* The run's length: absent from checkpoints older than it. */
    if (rc < 0 && json_get(run, "total_steps"))
        rc = get_run_value(run, "total_steps", 0, CLI_MAX_STEPS, &ri->total_steps, where);
    /* --hysteresis's count, in older files (absent: no hysteresis, or a
     * file whose scaler state holds it). */
    if (rc < 0 && json_get(run, "hysteresis_left"))
        rc = get_run_value(run, "hysteresis_left", 1, 1000000, &ri->hysteresis_left, where);
    /* gpt's vocabulary bytes (absent from older checkpoints): 2 lowercase
     * hex digits per token, as many as "vocab". */
    const json_value *vb = json_get(run, "vocab_bytes");
    if (rc < 0 && vb) {
        bool ok = vb->type == JSON_STRING && strlen(vb->str) == (size_t)(2 * ri->vocab);
        for (const char *p = ok ? vb->str : ""; *p && ok; p++)
            ok = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f');
        if (ok)
            snprintf(ri->vocab_hex, sizeof ri->vocab_hex, "%s", vb->str);
        else
            rc = bad_settings(where, "the run value \"vocab_bytes\" is not 2 hex digits per token of \"vocab\"",
                              NULL);
    }
    int64_t hw;
    if (rc < 0 && (__builtin_mul_overflow(ri->height, ri->width, &hw) || hw != ri->features)) {
        fprintf(stderr, "ampc: %s: the saved run values disagree: features %" PRId64 " is not height %" PRId64
                        " x width %" PRId64 "\n", where, ri->features, ri->height, ri->width);
        rc = 1;
    }
out:
    json_free(doc);
    return rc;
}

bool settings_same_value(const opt_def *d, const train_opts *a, const train_opts *b)
{
    const void *fa = (const char *)a + d->off, *fb = (const char *)b + d->off;
    switch (d->kind) {
    case OPT_STR:
    case OPT_TEXT:
        return strcmp(*(const char *const *)fa, *(const char *const *)fb) == 0;
    case OPT_INT:
        return *(const int64_t *)fa == *(const int64_t *)fb;
    case OPT_U64:
        return *(const uint64_t *)fa == *(const uint64_t *)fb;
    case OPT_REAL:
        return *(const double *)fa == *(const double *)fb;
    case OPT_FLAG:
        return *(const bool *)fa == *(const bool *)fb;
    case OPT_LIST:
        return a->n_hidden == b->n_hidden && memcmp(a->hidden, b->hidden, sizeof a->hidden[0] * (size_t)a->n_hidden) == 0;
    }
    return false;
}

void settings_describe(const opt_def *d, const train_opts *o, char *buf, size_t n)
{
    if (is_text(d)) {
        snprintf(buf, n, "%s", *(const char *const *)((const char *)o + d->off));
        return;
    }
    if (d->kind == OPT_LIST) { /* as typed: 256,128 */
        size_t k = 0;
        buf[0] = '\0';
        for (int i = 0; i < o->n_hidden && k < n; i++)
            k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)o->hidden[i]);
        if (!o->n_hidden)
            snprintf(buf, n, "none");
        return;
    }
    json_buf b = {0};
    put_value(&b, d, o);
    snprintf(buf, n, "%s", b.oom || !b.p ? "?" : b.p);
    jb_free(&b);
}

void settings_copy_value(const opt_def *d, train_opts *dst, const train_opts *src)
{
    size_t size = is_text(d) ? sizeof(const char *)
                  : d->kind == OPT_FLAG ? sizeof(bool)
                  : d->kind == OPT_LIST ? sizeof dst->hidden
                                        : sizeof(int64_t); /* int64_t, uint64_t, double */
    memcpy((char *)dst + d->off, (const char *)src + d->off, size);
    if (d->kind == OPT_LIST)
        dst->n_hidden = src->n_hidden;
}

int settings_merge(train_opts *o, const train_opts *ck, const char *where)
{
    bool length_given = o->given[RO_epochs] || o->given[RO_steps];
    for (int i = 0; i < RO_COUNT; i++) {
        const opt_def *d = &train_rows[i];
        if (d->cls == OC_RUN)
            continue;
        if (i == RO_epochs || i == RO_steps) {
            /* The run's length is one choice: both from the command line
             * when it gives either, else both from the checkpoint. */
            if (!length_given)
                settings_copy_value(d, o, ck);
            continue;
        }
        if (!o->given[i]) {
            settings_copy_value(d, o, ck);
            continue;
        }
        /* Options of another model were never saved: their values here are
         * the defaults, and opts_resolve refuses them anyway. */
        if (d->cls == OC_SHAPE && (!d->models || strcmp(d->models, ck->model) == 0) &&
            !settings_same_value(d, o, ck)) {
            char mine[256], theirs[256];
            settings_describe(d, o, mine, sizeof mine);
            settings_describe(d, ck, theirs, sizeof theirs);
            fprintf(stderr,
                    "ampc: --%s %s conflicts with the checkpoint %s, saved with --%s %s (a resumed run keeps "
                    "its model's shape and optimizer; leave --%s out)\n",
                    d->name, mine, where, d->name, theirs, d->name);
            return EXIT_USAGE;
        }
    }
    /* A precision given anew leaves the checkpoint's --no-scaler behind. */
    if (o->given[RO_precision] && !o->given[RO_no_scaler])
        o->no_scaler = false;
    return -1;
}
