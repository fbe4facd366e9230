/*
 * hf.c - reading a Hugging Face transformers GPT-2 directory into ampc's
 * gpt layout (hf.h), and the table of names both directions share.
 *
 * What is read:
 *   config.json   a GPT2Config: model_type "gpt2"; n_layer, n_head,
 *                 n_embd, n_positions, vocab_size (at most 65536, the
 *                 token-id bound; GPT-2's 50257 fits), n_inner (null:
 *                 4 n_embd); activation_function gelu_new or
 *                 gelu_pytorch_tanh (the tanh GELU, --gelu tanh) or gelu
 *                 (the exact one, --gelu exact); layer_norm_epsilon 1e-5
 *                 (ampc's LayerNorm); tied embeddings; and refused where
 *                 GPT-2's options compute another model than ampc's:
 *                 scale_attn_weights false, scale_attn_by_inverse_layer_idx
 *                 or reorder_and_upcast_attn true, cross-attention
 *   model.safetensors (or model.safetensors.index.json and its shards)
 *                 read by the checkpoint reader (io/checkpoint.h: length,
 *                 JSON, dtype, shape and offsets of every entry, the data
 *                 tiled); names with or without "transformer."; F32, F16
 *                 or BF16; an lm_head.weight must equal wte's values; the
 *                 attention's mask buffers (attn.bias, attn.masked_bias)
 *                 of older files are ignored; any other tensor is refused
 *                 "ampc_settings" (optional, ampc export writes it): the
 *                 run's settings, kept as they are
 *   tokenizer.json (optional) its vocabulary, when it is one character a
 *                 token (hf_read_tokenizer_vocab); any other (GPT-2's own
 *                 BPE) makes the model one on token ids (import_hf.c); one
 *                 that is not JSON, or gives a token an id beyond
 *                 vocab_size, is refused
 * Files are opened as regular files only (io/file.h): a FIFO is refused,
 * not waited on.
 * Every refusal names the file and what is wrong in it.
 */
#include "hf.h"

#include "io/checkpoint.h"
#include "io/file.h"
#include "io/json.h"
#include "opts.h"
#include "tokens.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHO "ampc import"
#define MAX_JSON ((int64_t)64 << 20) /* config.json, the index, tokenizer.json */
#define MAX_SHARDS 64
#define PATH_LEN 4200

/* ------------------------------------------------------------ the names */

enum { D_W, D_3W, D_M, D_V, D_C, D_NONE };

static const struct {
    const char *ampc, *hf;
    int rows, cols;
    bool conv1d;
} block_rows[] = {
    {"ln_1.weight", "ln_1.weight", D_W, D_NONE, false},
    {"ln_1.bias", "ln_1.bias", D_W, D_NONE, false},
    {"attn.qkv.weight", "attn.c_attn.weight", D_3W, D_W, true},
    {"attn.qkv.bias", "attn.c_attn.bias", D_3W, D_NONE, false},
    {"attn.proj.weight", "attn.c_proj.weight", D_W, D_W, true},
    {"attn.proj.bias", "attn.c_proj.bias", D_W, D_NONE, false},
    {"ln_2.weight", "ln_2.weight", D_W, D_NONE, false},
    {"ln_2.bias", "ln_2.bias", D_W, D_NONE, false},
    {"mlp.fc1.weight", "mlp.c_fc.weight", D_M, D_W, true},
    {"mlp.fc1.bias", "mlp.c_fc.bias", D_M, D_NONE, false},
    {"mlp.fc2.weight", "mlp.c_proj.weight", D_W, D_M, true},
    {"mlp.fc2.bias", "mlp.c_proj.bias", D_W, D_NONE, false},
}, top_rows[] = {
    {"wte.weight", "wte.weight", D_V, D_W, false},
    {"wpe.weight", "wpe.weight", D_C, D_W, false},
    {"ln_f.weight", "ln_f.weight", D_W, D_NONE, false},
    {"ln_f.bias", "ln_f.bias", D_W, D_NONE, false},
};
#define N_BLOCK ((int)(sizeof block_rows / sizeof block_rows[0]))

static int64_t dim(const hf_shape *s, int d)
{
    const int64_t v[] = {s->width, 3 * s->width, s->mlp, s->vocab, s->context, 0};
    return v[d];
}

int hf_tensor_count(const hf_shape *s) { return 4 + N_BLOCK * (int)s->layers; }

void hf_tensor_at(const hf_shape *s, int k, hf_tensor *t)
{
    int top = k < 2 ? k : k >= 2 + N_BLOCK * (int)s->layers ? k - N_BLOCK * (int)s->layers : -1;
    if (top >= 0) {
        snprintf(t->ampc, sizeof t->ampc, "%s", top_rows[top].ampc);
        snprintf(t->hf, sizeof t->hf, "transformer.%s", top_rows[top].hf);
        t->rows = dim(s, top_rows[top].rows), t->cols = dim(s, top_rows[top].cols);
        t->conv1d = false;
        return;
    }
    int i = (k - 2) / N_BLOCK, r = (k - 2) % N_BLOCK;
    snprintf(t->ampc, sizeof t->ampc, "h.%d.%s", i, block_rows[r].ampc);
    snprintf(t->hf, sizeof t->hf, "transformer.h.%d.%s", i, block_rows[r].hf);
    t->rows = dim(s, block_rows[r].rows), t->cols = dim(s, block_rows[r].cols);
    t->conv1d = block_rows[r].conv1d;
}

/* ------------------------------------------------------------ JSON files */

/* A JSON file of dir read and parsed; NULL after a message (*rc set: 1
 * when it cannot be read, EXIT_USAGE when it is not JSON); *missing when
 * it does not exist (no message then, when quiet_missing). */
static json_doc *read_json(const char *path, const json_value **root, char **text, size_t *len, bool quiet_missing,
                           int *rc)
{
    char why[200];
    int64_t size;
    *text = NULL;
    FILE *f = file_fopen_read(path, MAX_JSON, &size, why, sizeof why);
    if (!f) {
        *rc = EXIT_USAGE;
        if (!quiet_missing)
            fprintf(stderr, WHO ": %s: %s\n", path, why);
        return NULL;
    }
    char *buf = malloc((size_t)size + 1);
    size_t got = buf ? fread(buf, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)size) {
        fprintf(stderr, WHO ": %s: %s\n", path, buf ? "read failed" : "out of memory");
        free(buf);
        *rc = 1;
        return NULL;
    }
    char err[160];
    json_doc *d = json_parse(buf, got, root, err, sizeof err);
    if (!d) {
        fprintf(stderr, WHO ": %s: not valid JSON (%s)\n", path, err);
        free(buf);
        *rc = EXIT_USAGE;
        return NULL;
    }
    if ((*root)->type != JSON_OBJECT) {
        fprintf(stderr, WHO ": %s: not a JSON object\n", path);
        json_free(d);
        free(buf);
        *rc = EXIT_USAGE;
        return NULL;
    }
    *text = buf, *len = got;
    return d;
}

/* Whether path names anything: stat, not open (opening a FIFO waits for a
 * writer); the reader then opens it with file_fopen_read or ckpt_open,
 * which take regular files only. */
static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* config key: a whole number in [lo, hi] (*v), or absent / null (*v =
 * def; def < 0: required). -1 or EXIT_USAGE after a message. */
static int cfg_int(const char *path, const json_value *root, const char *key, int64_t lo, int64_t hi, int64_t def,
                   int64_t *v)
{
    const json_value *j = json_get(root, key);
    uint64_t u;
    if (!j || j->type == JSON_NULL) {
        if (def >= 0) {
            *v = def;
            return -1;
        }
        fprintf(stderr, WHO ": %s: \"%s\" is missing (a GPT2Config has it)\n", path, key);
        return EXIT_USAGE;
    }
    if (!json_u64(j, &u) || u < (uint64_t)lo || u > (uint64_t)hi) {
        fprintf(stderr, WHO ": %s: \"%s\" is %s, not a whole number in [%" PRId64 ", %" PRId64 "]%s\n", path, key,
                j->type == JSON_NUMBER || j->type == JSON_STRING ? j->str : "not a number", lo, hi,
                !strcmp(key, "vocab_size") ? " (ampc's gpt takes at most 65536 token ids)" : "");
        return EXIT_USAGE;
    }
    *v = (int64_t)u;
    return -1;
}

/* config key: a number (*v), def when absent. */
static int cfg_real(const char *path, const json_value *root, const char *key, double def, double *v)
{
    const json_value *j = json_get(root, key);
    if (!j || j->type == JSON_NULL) {
        *v = def;
        return -1;
    }
    char *end = NULL;
    *v = j->type == JSON_NUMBER ? strtod(j->str, &end) : NAN;
    if (!end || *end || !isfinite(*v)) {
        fprintf(stderr, WHO ": %s: \"%s\" is not a number\n", path, key);
        return EXIT_USAGE;
    }
    return -1;
}

/* config key: a boolean that must be `want` (absent: def). */
static int cfg_bool(const char *path, const json_value *root, const char *key, bool def, bool want, const char *why)
{
    const json_value *j = json_get(root, key);
    bool v = def;
    if (j && j->type != JSON_NULL) {
        if (j->type != JSON_TRUE && j->type != JSON_FALSE) {
            fprintf(stderr, WHO ": %s: \"%s\" is not true or false\n", path, key);
            return EXIT_USAGE;
        }
        v = j->type == JSON_TRUE;
    }
    if (v == want)
        return -1;
    fprintf(stderr, WHO ": %s: \"%s\" is %s: %s\n", path, key, v ? "true" : "false", why);
    return EXIT_USAGE;
}

static int read_config(const char *dir, hf_shape *s, char **ampc_settings)
{
    char path[PATH_LEN], *text;
    size_t len;
    const json_value *root;
    int rc = -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_doc *d = read_json(path, &root, &text, &len, false, &rc);
    if (!d)
        return rc;
    const json_value *mt = json_get(root, "model_type"), *act = json_get(root, "activation_function");
    int64_t inner = 0;
    double eps = 1e-5, embd = 0, attn = 0;
    if (!mt || mt->type != JSON_STRING || strcmp(mt->str, "gpt2") != 0) {
        fprintf(stderr, WHO ": %s: \"model_type\" is %s%s%s, not \"gpt2\" (ampc's gpt is GPT-2's architecture)\n",
                path, mt && mt->type == JSON_STRING ? "\"" : "", mt && mt->type == JSON_STRING ? mt->str : "missing",
                mt && mt->type == JSON_STRING ? "\"" : "");
        rc = EXIT_USAGE;
    } else if (act && (act->type != JSON_STRING || (strcmp(act->str, "gelu_new") != 0 &&
                                                    strcmp(act->str, "gelu_pytorch_tanh") != 0 &&
                                                    strcmp(act->str, "gelu") != 0))) {
        fprintf(stderr,
                WHO ": %s: \"activation_function\" is %s: ampc's gpt computes the tanh GELU (gelu_new, "
                "gelu_pytorch_tanh) or the exact one (gelu) only; another would give other outputs\n",
                path, act->type == JSON_STRING ? act->str : "not a string");
        rc = EXIT_USAGE;
    }
    s->gelu_exact = act && act->type == JSON_STRING && !strcmp(act->str, "gelu");
    if (rc < 0)
        rc = cfg_int(path, root, "n_layer", 1, 1024, -1, &s->layers);
    if (rc < 0)
        rc = cfg_int(path, root, "n_head", 1, 1024, -1, &s->heads);
    if (rc < 0)
        rc = cfg_int(path, root, "n_embd", 1, 1 << 16, -1, &s->width);
    if (rc < 0)
        rc = cfg_int(path, root, "n_positions", 1, 1 << 16, -1, &s->context);
    if (rc < 0)
        rc = cfg_int(path, root, "vocab_size", 1, TOK_MAX_VOCAB, -1, &s->vocab);
    if (rc < 0)
        rc = cfg_int(path, root, "n_inner", 1, 1 << 20, 4 * s->width <= (1 << 20) ? 4 * s->width : 0, &inner);
    if (rc < 0 && inner == 0) {
        fprintf(stderr, WHO ": %s: \"n_inner\" is null and 4 n_embd is more than ampc's --mlp-width allows\n", path);
        rc = EXIT_USAGE;
    }
    if (rc < 0 && s->width % s->heads != 0) {
        fprintf(stderr, WHO ": %s: \"n_embd\" %" PRId64 " is not divisible by \"n_head\" %" PRId64 "\n", path,
                s->width, s->heads);
        rc = EXIT_USAGE;
    }
    s->mlp = inner;
    if (rc < 0)
        rc = cfg_real(path, root, "layer_norm_epsilon", 1e-5, &eps);
    if (rc < 0 && fabs(eps - 1e-5) > 1e-12) {
        fprintf(stderr, WHO ": %s: \"layer_norm_epsilon\" is %g; ampc's LayerNorm uses 1e-5\n", path, eps);
        rc = EXIT_USAGE;
    }
    if (rc < 0)
        rc = cfg_real(path, root, "resid_pdrop", 0.1, &s->dropout);
    if (rc < 0)
        rc = cfg_real(path, root, "embd_pdrop", 0.1, &embd);
    if (rc < 0)
        rc = cfg_real(path, root, "attn_pdrop", 0.1, &attn);
    if (rc < 0 && !(s->dropout >= 0 && s->dropout <= 0.95)) {
        fprintf(stderr, WHO ": %s: \"resid_pdrop\" %g is outside ampc's --dropout range [0, 0.95]\n", path,
                s->dropout);
        rc = EXIT_USAGE;
    }
    if (rc < 0)
        rc = cfg_bool(path, root, "scale_attn_weights", true, true,
                      "ampc's attention always divides by sqrt(head width)");
    if (rc < 0)
        rc = cfg_bool(path, root, "scale_attn_by_inverse_layer_idx", false, false,
                      "ampc's attention does not scale by the layer's index");
    if (rc < 0)
        rc = cfg_bool(path, root, "reorder_and_upcast_attn", false, false,
                      "ampc's attention has no such reordering");
    if (rc < 0)
        rc = cfg_bool(path, root, "add_cross_attention", false, false, "ampc's gpt is a decoder alone");
    if (rc < 0)
        rc = cfg_bool(path, root, "tie_word_embeddings", true, true,
                      "ampc's head is tied to the token embedding");
    const json_value *as = json_get(root, "ampc_settings");
    if (rc < 0 && as && as->type == JSON_STRING && strlen(as->str) == as->len &&
        !(*ampc_settings = strdup(as->str))) {
        fprintf(stderr, WHO ": out of memory\n");
        rc = 1;
    }
    if (rc < 0 && (embd > 0 || attn > 0))
        printf("note: %s drops out embeddings (embd_pdrop %g) and attention probabilities (attn_pdrop %g); ampc "
               "drops after each residual branch only (resid_pdrop %g is its --dropout)\n",
               path, embd, attn, s->dropout);
    json_free(d);
    free(text);
    return rc;
}

/* ------------------------------------------------------------ tensors */

typedef struct {
    ckpt c[MAX_SHARDS];
    int n;
} shards;

static void shards_close(shards *sh)
{
    for (int i = 0; i < sh->n; i++) {
        ckpt_close(&sh->c[i]);
        free((char *)sh->c[i].path);
    }
    sh->n = 0;
}

static int open_shard(shards *sh, const char *dir, const char *name)
{
    for (int i = 0; i < sh->n; i++)
        if (strcmp(strrchr(sh->c[i].path, '/') + 1, name) == 0)
            return -1;
    if (sh->n == MAX_SHARDS) {
        fprintf(stderr, WHO ": %s: more than %d shards\n", dir, MAX_SHARDS);
        return EXIT_USAGE;
    }
    char *path = malloc(PATH_LEN);
    if (!path) {
        fprintf(stderr, WHO ": out of memory\n");
        return 1;
    }
    snprintf(path, PATH_LEN, "%s/%s", dir, name);
    ckpt *c = &sh->c[sh->n++];
    *c = (ckpt){.path = path, .n_params = -1, .foreign = true};
    if (ckpt_open(c) != AMP_OK) {
        fprintf(stderr, WHO ": %s\n", amp_last_error());
        return amp_last_status() == AMP_ERR_MEMORY ? 1 : EXIT_USAGE;
    }
    return -1;
}

/* The shards: model.safetensors, or those model.safetensors.index.json's
 * weight_map names (plain file names in dir). */
static int open_weights(const char *dir, shards *sh)
{
    char path[PATH_LEN], *text;
    size_t len;
    const json_value *root;
    int rc = -1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (exists(path))
        return open_shard(sh, dir, "model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_doc *d = read_json(path, &root, &text, &len, true, &rc);
    if (!d) {
        if (!exists(path)) {
            char bin[PATH_LEN];
            snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
            fprintf(stderr, WHO ": %s/model.safetensors is missing (nor is there a model.safetensors.index.json)%s\n",
                    dir, exists(bin) ? "; pytorch_model.bin (a pickle) is not read: save_pretrained(..., "
                                       "safe_serialization=True) writes safetensors" : "");
        }
        return rc;
    }
    const json_value *map = json_get(root, "weight_map");
    if (!map || map->type != JSON_OBJECT || map->n == 0) {
        fprintf(stderr, WHO ": %s: \"weight_map\" is not an object of tensor names to files\n", path);
        rc = EXIT_USAGE;
    }
    for (int i = 0; rc < 0 && i < map->n; i++) {
        const json_value *f = &map->items[i];
        if (f->type != JSON_STRING || !*f->str || strchr(f->str, '/') || !strcmp(f->str, ".") ||
            !strcmp(f->str, "..") || strlen(f->str) != f->len) {
            fprintf(stderr, WHO ": %s: \"weight_map\" \"%s\" is not a file name in %s\n", path, map->keys[i], dir);
            rc = EXIT_USAGE;
        } else {
            rc = open_shard(sh, dir, f->str);
        }
    }
    json_free(d);
    free(text);
    return rc;
}

/* The entry called name, or name without its "transformer." (a
 * GPT2Model's save); NULL when no shard has either; *in its shard. */
static in_entry *find_entry(shards *sh, const char *name, ckpt **in)
{
    in_entry *e = NULL;
    for (int p = 0; p < 2 && !e; p++)
        for (int i = 0; i < sh->n && !e; i++)
            if ((e = ckpt_find(&sh->c[i], p ? name + strlen("transformer.") : name)))
                *in = &sh->c[i];
    return e;
}

static float to_f32(const in_entry *e, size_t i)
{
    float f;
    uint16_t u;
    if (e->dt == AMP_F32) {
        memcpy(&f, e->bytes + 4 * i, 4);
        return f;
    }
    memcpy(&u, e->bytes + 2 * i, 2);
    amp_convert(&u, e->dt, &f, AMP_F32, 1);
    return f;
}

/* Tensor t from its entry into w (ampc's layout, f32). */
static int read_tensor(shards *sh, const hf_tensor *t, float **w)
{
    ckpt *c = NULL;
    in_entry *e = find_entry(sh, t->hf, &c);
    if (!e) {
        fprintf(stderr, WHO ": %s: tensor '%s' is missing (nor is there '%s')\n", sh->c[0].path, t->hf,
                t->hf + strlen("transformer."));
        return EXIT_USAGE;
    }
    e->used = true;
    int64_t r = t->conv1d ? t->cols : t->rows, k = t->conv1d ? t->rows : t->cols;
    bool shape_ok = t->cols ? e->shape.ndim == 2 && e->shape.d[0] == r && e->shape.d[1] == k
                            : e->shape.ndim == 1 && e->shape.d[0] == r;
    char have[CKPT_SHAPE_TEXT], want[64];
    if (!shape_ok) {
        if (t->cols)
            snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]%s", r, k, t->conv1d ? " (Conv1D: [in, out])" : "");
        else
            snprintf(want, sizeof want, "[%" PRId64 "]", r);
        fprintf(stderr, WHO ": %s: tensor '%s' has shape %s; config.json's model needs %s\n", c->path, e->name,
                ckpt_shape_text(e->shape, have, sizeof have), want);
        return EXIT_USAGE;
    }
    if (e->dt != AMP_F32 && e->dt != AMP_F16 && e->dt != AMP_BF16) {
        fprintf(stderr, WHO ": %s: tensor '%s' is %s; weights are read in F32, F16 or BF16\n", c->path, e->name,
                ckpt_dtype_name(e->dt));
        return EXIT_USAGE;
    }
    size_t n = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1);
    if (!(*w = malloc(n * sizeof **w))) {
        fprintf(stderr, WHO ": out of memory for tensor '%s'\n", e->name);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        /* ampc's [rows, cols] element (i / cols, i % cols) is at (i % cols, i / cols) in the Conv1D [cols, rows] */
        size_t at = t->conv1d ? (i % (size_t)t->cols) * (size_t)t->rows + i / (size_t)t->cols : i;
        (*w)[i] = to_f32(e, at);
        if (!isfinite((*w)[i])) {
            fprintf(stderr, WHO ": %s: tensor '%s' holds a non-finite value at element %zu\n", c->path, e->name, at);
            return EXIT_USAGE;
        }
    }
    return -1;
}

/* lm_head.weight, when present, is the tied head: wte's values. Other
 * tensors but the attention masks are refused. */
static int check_rest(shards *sh, const float *wte, int64_t n)
{
    for (int s = 0; s < sh->n; s++) {
        ckpt *c = &sh->c[s];
        for (int i = 0; i < c->n; i++) {
            in_entry *e = &c->e[i];
            size_t len = strlen(e->name);
            if (e->used || (len > 10 && !strcmp(e->name + len - 10, ".attn.bias")) ||
                (len > 17 && !strcmp(e->name + len - 17, ".attn.masked_bias")))
                continue;
            if (strcmp(e->name, "lm_head.weight") != 0) {
                fprintf(stderr, WHO ": %s: unexpected tensor '%s' (not part of a GPT2LMHeadModel of this config)\n",
                        c->path, e->name);
                return EXIT_USAGE;
            }
            int64_t numel = 1;
            for (int d = 0; d < e->shape.ndim; d++)
                numel *= e->shape.d[d];
            bool same = (e->dt == AMP_F32 || e->dt == AMP_F16 || e->dt == AMP_BF16) && numel == n;
            for (int64_t k = 0; same && k < n; k++)
                same = to_f32(e, (size_t)k) == wte[k];
            if (!same) {
                fprintf(stderr, WHO ": %s: tensor 'lm_head.weight' differs from the token embedding wte; ampc's "
                                "head is tied to it (an untied head cannot be imported)\n", c->path);
                return EXIT_USAGE;
            }
        }
    }
    return -1;
}

void hf_model_free(hf_model *m)
{
    for (int i = 0; m->w && i < m->n; i++)
        free(m->w[i]);
    free(m->w);
    free(m->ampc_settings);
    m->w = NULL, m->n = 0, m->ampc_settings = NULL;
}

/* One more than the largest id a tokenizer.json gives a token: its
 * model's "vocab" (token -> id, as BPE and WordLevel keep it) and its
 * "added_tokens"; 0 when it has neither. */
static int64_t tokenizer_top(const json_value *root)
{
    uint64_t top = 0, id;
    const json_value *v = json_get(json_get(root, "model"), "vocab"), *added = json_get(root, "added_tokens");
    for (int i = 0; v && v->type == JSON_OBJECT && i < v->n; i++)
        if (json_u64(&v->items[i], &id) && id >= top)
            top = id < INT64_MAX ? id + 1 : INT64_MAX;
    for (int i = 0; added && added->type == JSON_ARRAY && i < added->n; i++)
        if (json_u64(json_get(&added->items[i], "id"), &id) && id >= top)
            top = id < INT64_MAX ? id + 1 : INT64_MAX;
    return (int64_t)top;
}

int hf_read_dir(const char *dir, hf_model *m)
{
    memset(m, 0, sizeof *m);
    int rc = read_config(dir, &m->s, &m->ampc_settings);
    shards sh = {.n = 0};
    if (rc < 0)
        rc = open_weights(dir, &sh);
    int n = rc < 0 ? hf_tensor_count(&m->s) : 0;
    if (rc < 0 && !(m->w = calloc((size_t)n, sizeof *m->w))) {
        fprintf(stderr, WHO ": out of memory\n");
        rc = 1;
    }
    m->n = rc < 0 ? n : 0;
    for (int k = 0; rc < 0 && k < n; k++) {
        hf_tensor t;
        hf_tensor_at(&m->s, k, &t);
        rc = read_tensor(&sh, &t, &m->w[k]);
    }
    if (rc < 0)
        rc = check_rest(&sh, m->w[0], m->s.vocab * m->s.width);
    shards_close(&sh);
    if (rc >= 0)
        return rc;
    char path[PATH_LEN], *text;
    size_t len;
    const json_value *root;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    m->tokenizer = exists(path);
    json_doc *d = m->tokenizer ? read_json(path, &root, &text, &len, false, &rc) : NULL;
    if (m->tokenizer && !d)
        return rc;
    if (d) {
        int64_t top = tokenizer_top(root);
        if (top > m->s.vocab) {
            fprintf(stderr, WHO ": %s: token id %" PRId64 " is beyond config.json's vocab_size %" PRId64
                            " (the model has no such token): not this model's tokenizer\n",
                    path, top - 1, m->s.vocab);
            rc = EXIT_USAGE;
        } else {
            hf_read_tokenizer_vocab(text, len, m->s.vocab, m->vocab_hex);
        }
        json_free(d);
        free(text);
    }
    return rc;
}

/* ------------------------------------------------------------ tokenizer.json */

void hf_byte_level(uint32_t bl[256])
{
    uint32_t extra = 256;
    for (int b = 0; b < 256; b++)
        bl[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174) ? (uint32_t)b : extra++;
}

/* The one code point UTF-8 text s holds, or UINT32_MAX. */
static uint32_t one_code_point(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 1 && u[0] < 0x80)
        return u[0];
    if (n == 2 && (u[0] & 0xe0) == 0xc0)
        return (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f);
    return UINT32_MAX;
}

bool hf_read_tokenizer_vocab(const char *text, size_t len, int64_t vocab, char hex[2 * HF_MAX_VOCAB + 1])
{
    hex[0] = '\0';
    const json_value *root;
    char err[64];
    json_doc *d = json_parse(text, len, &root, err, sizeof err);
    if (!d)
        return false;
    const json_value *model = json_get(root, "model"), *pre = json_get(root, "pre_tokenizer");
    const json_value *type = json_get(model, "type"), *v = json_get(model, "vocab"), *pt = json_get(pre, "type");
    bool byte_lvl = pt && pt->type == JSON_STRING && !strcmp(pt->str, "ByteLevel");
    bool ok = model && model->type == JSON_OBJECT && type && type->type == JSON_STRING &&
              (!strcmp(type->str, "BPE") || !strcmp(type->str, "WordLevel")) && v && v->type == JSON_OBJECT &&
              v->n == vocab && vocab <= HF_MAX_VOCAB && (!pre || pre->type == JSON_NULL || byte_lvl);
    uint32_t bl[256];
    hf_byte_level(bl);
    int byte_of[HF_MAX_VOCAB];
    for (int i = 0; i < HF_MAX_VOCAB; i++)
        byte_of[i] = -1;
    for (int i = 0; ok && i < v->n; i++) {
        uint64_t id;
        uint32_t cp = one_code_point(v->keys[i], strlen(v->keys[i]));
        int b = -1;
        for (int k = 0; k < 256 && b < 0 && cp != UINT32_MAX; k++)
            if (byte_lvl ? bl[k] == cp : (uint32_t)k == cp && cp < 0x80)
                b = k;
        ok = b >= 0 && json_u64(&v->items[i], &id) && id < (uint64_t)vocab && byte_of[id] < 0;
        if (ok)
            byte_of[id] = b;
    }
    for (int64_t id = 0; ok && id < vocab; id++)
        snprintf(hex + 2 * id, 3, "%02x", (unsigned)byte_of[id]);
    if (!ok)
        hex[0] = '\0';
    json_free(d);
    return ok;
}
