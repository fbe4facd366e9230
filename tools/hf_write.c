/*
 * hf_write.c - writing ampc's gpt as a Hugging Face transformers
 * directory (hf.h: hf_write_dir):
 *
 *   config.json        a GPT2Config of the model's shape: activation
 *                      gelu_new (ampc's tanh GELU) or gelu (--gelu
 *                      exact), vocab_size the ids', layer_norm_epsilon
 *                      1e-5, tied embeddings, resid_pdrop = --dropout
 *                      and embd_pdrop = attn_pdrop = 0 (ampc drops after
 *                      each residual branch only), no bos / eos token (a
 *                      character vocabulary has no end-of-text token);
 *                      "ampc_settings": the run's settings (ampc's JSON,
 *                      as a string), which ampc import takes back
 *   model.safetensors  transformers' names ("transformer.h.0.attn.c_attn.weight")
 *                      and layouts (Conv1D weights [in, out]), one dtype,
 *                      __metadata__ {"format": "pt"}; the tied head is not
 *                      stored (lm_head.weight is wte.weight on load)
 *   tokenizer.json     for a character vocabulary: a BPE model without
 *                      merges whose tokens are the single characters, ids
 *                      ampc's; no normalizer and no pre-tokenizer, a Fuse
 *                      decoder (the tokens' text joined), so encode gives
 *                      ampc's ids and decode the text back. A vocabulary
 *                      with bytes of 0x80 and above (not characters on
 *                      their own) goes through GPT-2's ByteLevel
 *                      pre-tokenizer and decoder instead (without its
 *                      regex split), as GPT-2's own tokenizer does.
 *                      A model on token ids has no character vocabulary:
 *                      the checkpoint directory's tokenizer.json, when
 *                      it has one, is copied (hf_copy_tokenizer).
 *
 * Each file is written to "<name>.tmp" and renamed over the name, so a
 * failed export leaves the directory's earlier files whole.
 */
#include "hf.h"

#include "io/checkpoint.h"
#include "io/file.h"
#include "io/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHO "ampc export"
#define PATH_LEN 4200

static int fail(const char *path, const char *what)
{
    fprintf(stderr, WHO ": %s: %s%s%s\n", path, what, errno ? ": " : "", errno ? strerror(errno) : "");
    return 1;
}

/* out/name opened as out/name.tmp; NULL after a message. */
static FILE *open_tmp(const char *out, const char *name, char *path, char *tmp)
{
    snprintf(path, PATH_LEN, "%s/%s", out, name);
    snprintf(tmp, PATH_LEN + 8, "%s.tmp", path);
    errno = 0;
    FILE *f = fopen(tmp, "wb");
    if (!f)
        fail(tmp, "cannot create");
    return f;
}

/* Closes f and renames tmp over path; ok false: the writes failed, tmp removed. */
static int close_tmp(FILE *f, const char *path, const char *tmp, bool ok)
{
    errno = 0;
    ok = !ferror(f) && ok;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return -1;
    int rc = fail(tmp, ok ? "cannot rename into place" : "write failed");
    remove(tmp);
    return rc;
}

static int write_json(const char *out, const char *name, json_buf *b)
{
    char path[PATH_LEN], tmp[PATH_LEN + 8];
    if (b->oom) {
        fprintf(stderr, WHO ": out of memory\n");
        return 1;
    }
    FILE *f = open_tmp(out, name, path, tmp);
    if (!f)
        return 1;
    return close_tmp(f, path, tmp, fwrite(b->p, 1, b->len, f) == b->len);
}

static const char *torch_dtype(amp_dtype dt)
{
    return dt == AMP_BF16 ? "bfloat16" : dt == AMP_F16 ? "float16" : "float32";
}

static int write_config(const char *out, const hf_shape *s, amp_dtype dt, const char *settings)
{
    json_buf b = {0};
    jb_printf(&b,
              "{\n  \"model_type\": \"gpt2\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n"
              "  \"vocab_size\": %" PRId64 ",\n  \"n_positions\": %" PRId64 ",\n  \"n_ctx\": %" PRId64 ",\n"
              "  \"n_embd\": %" PRId64 ",\n  \"n_layer\": %" PRId64 ",\n  \"n_head\": %" PRId64 ",\n"
              "  \"n_inner\": %" PRId64 ",\n  \"activation_function\": \"%s\",\n"
              "  \"layer_norm_epsilon\": 1e-05,\n  \"resid_pdrop\": %.17g,\n  \"embd_pdrop\": 0.0,\n"
              "  \"attn_pdrop\": 0.0,\n  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
              "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
              "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n  \"bos_token_id\": null,\n"
              "  \"eos_token_id\": null,\n  \"dtype\": \"%s\"",
              s->vocab, s->context, s->context, s->width, s->layers, s->heads, s->mlp,
              s->gelu_exact ? "gelu" : "gelu_new", s->dropout, torch_dtype(dt));
    if (settings) {
        jb_puts(&b, ",\n  \"ampc_settings\": ");
        jb_string(&b, settings);
    }
    jb_puts(&b, "\n}\n");
    int rc = write_json(out, "config.json", &b);
    jb_free(&b);
    return rc;
}

/* Tensor t of w in transformers' layout (Conv1D transposed), as dt, into dst. */
static void hf_layout(const hf_tensor *t, const float *w, amp_dtype dt, void *dst, float *scratch)
{
    size_t n = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1);
    const float *src = w;
    if (t->conv1d) {
        for (size_t a = 0; a < (size_t)t->cols; a++)
            for (size_t r = 0; r < (size_t)t->rows; r++)
                scratch[a * (size_t)t->rows + r] = w[r * (size_t)t->cols + a];
        src = scratch;
    }
    amp_convert(src, AMP_F32, dst, dt, n);
}

static int write_weights(const char *out, const hf_shape *s, const float *const *w, amp_dtype dt)
{
    int n = hf_tensor_count(s);
    size_t es = amp_dtype_size(dt), most = 0;
    uint64_t at = 0;
    json_buf b = {0};
    jb_puts(&b, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int k = 0; k < n; k++) {
        hf_tensor t;
        hf_tensor_at(s, k, &t);
        size_t numel = (size_t)t.rows * (size_t)(t.cols ? t.cols : 1);
        most = numel > most ? numel : most;
        jb_puts(&b, ",");
        jb_string(&b, t.hf);
        if (t.cols)
            jb_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[%" PRId64 ",%" PRId64 "]", ckpt_dtype_name(dt),
                      t.conv1d ? t.cols : t.rows, t.conv1d ? t.rows : t.cols);
        else
            jb_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[%" PRId64 "]", ckpt_dtype_name(dt), t.rows);
        jb_printf(&b, ",\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", at, at + numel * es);
        at += numel * es;
    }
    jb_puts(&b, "}");
    while (b.len % 8) /* the data starts 8-aligned (as safetensors writes it) */
        jb_puts(&b, " ");
    char path[PATH_LEN], tmp[PATH_LEN + 8];
    float *scratch = malloc(most * sizeof *scratch);
    void *buf = malloc(most * es);
    if (b.oom || !scratch || !buf) {
        fprintf(stderr, WHO ": out of memory\n");
        free(scratch), free(buf), jb_free(&b);
        return 1;
    }
    FILE *f = open_tmp(out, "model.safetensors", path, tmp);
    int rc = 1;
    if (f) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++)
            len8[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
        bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(b.p, 1, b.len, f) == b.len;
        for (int k = 0; ok && k < n; k++) {
            hf_tensor t;
            hf_tensor_at(s, k, &t);
            size_t numel = (size_t)t.rows * (size_t)(t.cols ? t.cols : 1);
            hf_layout(&t, w[k], dt, buf, scratch);
            ok = fwrite(buf, es, numel, f) == numel;
        }
        rc = close_tmp(f, path, tmp, ok);
    }
    free(scratch), free(buf), jb_free(&b);
    return rc;
}

/* Code point cp as UTF-8 into s (NUL-terminated). */
static void utf8(uint32_t cp, char s[4])
{
    if (cp < 0x80) {
        s[0] = (char)cp, s[1] = '\0';
    } else {
        s[0] = (char)(0xc0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3f)), s[2] = '\0';
    }
}

static int write_tokenizer(const char *out, const char *hex)
{
    size_t v = strlen(hex) / 2;
    unsigned bytes[HF_MAX_VOCAB];
    bool high = false;
    for (size_t i = 0; i < v; i++) {
        sscanf(hex + 2 * i, "%2x", &bytes[i]);
        high |= bytes[i] >= 0x80 || bytes[i] == 0; /* (a NUL is no JSON key of ours) */
    }
    uint32_t bl[256];
    hf_byte_level(bl);
    const char *bytelevel = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, "
                            "\"use_regex\": false}";
    json_buf b = {0};
    jb_printf(&b,
              "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [],\n"
              "  \"normalizer\": null,\n  \"pre_tokenizer\": %s,\n  \"post_processor\": null,\n"
              "  \"decoder\": %s,\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
              "    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n"
              "    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n"
              "    \"ignore_merges\": false,\n    \"vocab\": {",
              high ? bytelevel : "null", high ? bytelevel : "{\"type\": \"Fuse\"}");
    for (size_t i = 0; i < v; i++) {
        char s[4];
        utf8(high ? bl[bytes[i]] : bytes[i], s);
        jb_puts(&b, i ? ", " : "");
        jb_string(&b, s);
        jb_printf(&b, ": %zu", i);
    }
    jb_puts(&b, "},\n    \"merges\": []\n  }\n}\n");
    int rc = write_json(out, "tokenizer.json", &b);
    jb_free(&b);
    return rc;
}

int hf_write_dir(const char *out, const hf_shape *s, const float *const *w, amp_dtype dt, const char *vocab_hex,
                 const char *settings)
{
    errno = 0;
    if (mkdir(out, 0777) != 0 && errno != EEXIST)
        return fail(out, "cannot create the directory");
    int rc = write_weights(out, s, w, dt);
    if (rc < 0)
        rc = write_config(out, s, dt, settings);
    if (rc < 0 && vocab_hex && *vocab_hex)
        rc = write_tokenizer(out, vocab_hex);
    return rc;
}

int hf_copy_tokenizer(const char *dir, const char *out, const char *who, bool *copied)
{
    char from[PATH_LEN], to[PATH_LEN], tmp[PATH_LEN + 8], why[200];
    snprintf(from, sizeof from, "%s/tokenizer.json", dir);
    *copied = false;
    struct stat sb;
    if (stat(from, &sb) != 0)
        return -1;
    int64_t size;
    FILE *f = file_fopen_read(from, (int64_t)64 << 20, &size, why, sizeof why);
    char *buf = f ? malloc((size_t)size + 1) : NULL;
    bool ok = buf && fread(buf, 1, (size_t)size, f) == (size_t)size;
    if (f)
        fclose(f);
    if (!ok) {
        fprintf(stderr, "%s: %s: %s\n", who, from, f ? (buf ? "read failed" : "out of memory") : why);
        free(buf);
        return 1;
    }
    FILE *g = open_tmp(out, "tokenizer.json", to, tmp);
    int rc = g ? close_tmp(g, to, tmp, fwrite(buf, 1, (size_t)size, g) == (size_t)size) : 1;
    free(buf);
    *copied = rc < 0;
    return rc;
}
