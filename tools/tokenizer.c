/*
 * tokenizer.c - decoding token ids through a Hugging Face tokenizer.json,
 * as the `tokenizers` package's Tokenizer.decode does it for the files it
 * writes: the model's "vocab" (token string -> id) inverted, the added
 * tokens beside it (special ones decode to nothing: decode's
 * skip_special_tokens=True), then the decoder: "ByteLevel" (GPT-2's
 * byte-level BPE) maps each character of a token back to the byte GPT-2's
 * bytes_to_unicode gave it; no decoder joins the tokens with spaces.
 * Other decoders (Metaspace, WordPiece, Sequence ...) are refused by name.
 */
#include "tokenizer.h"

#include "io/file.h"
#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS (1 << 24)

/* GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py), inverted: the
 * printable Latin-1 bytes stand for themselves, the other 68 bytes are
 * 256 + k in byte order. cp -> byte, -1 where no byte maps to cp. */
static void byte_level_table(int inv[324])
{
    for (int c = 0; c < 324; c++)
        inv[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        inv[printable ? b : 256 + extra++] = b;
    }
}

/* One UTF-8 character of s[0..n) (valid: json.c checked it): its code
 * point, and its length in *w. */
static uint32_t utf8_next(const unsigned char *s, size_t n, int *w)
{
    int k = s[0] < 0x80 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : 4;
    if ((size_t)k > n)
        k = 1;
    uint32_t cp = k == 1 ? s[0] : s[0] & (0xFF >> (k + 1));
    for (int i = 1; i < k; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    *w = k;
    return cp;
}

/* Stores id's piece: the token string s, through the byte-level map
 * (byte_level) or as it is. */
static bool put_piece(tok_decoder *d, uint64_t id, const char *s, size_t n, const int *byte_level)
{
    char *p = malloc(n + 1);
    if (!p)
        return false;
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        int w;
        uint32_t cp = utf8_next((const unsigned char *)s + i, n - i, &w);
        if (byte_level && cp < 324 && byte_level[cp] >= 0)
            p[out++] = (char)byte_level[cp];
        else
            for (int k = 0; k < w; k++)
                p[out++] = s[i + (size_t)k];
        i += (size_t)w;
    }
    free(d->piece[id]);
    d->piece[id] = p;
    d->len[id] = out;
    return true;
}

bool tokenizer_parse(tok_decoder *d, const char *text, size_t len, char *why, size_t n)
{
    memset(d, 0, sizeof *d);
    char err[160];
    const json_value *root = NULL;
    json_doc *doc = json_parse(text, len, &root, err, sizeof err);
    if (!doc) {
        snprintf(why, n, "not JSON: %s", err);
        return false;
    }
    const json_value *model = root->type == JSON_OBJECT ? json_get(root, "model") : NULL;
    const json_value *vocab = model && model->type == JSON_OBJECT ? json_get(model, "vocab") : NULL;
    const json_value *dec = root->type == JSON_OBJECT ? json_get(root, "decoder") : NULL;
    const json_value *added = root->type == JSON_OBJECT ? json_get(root, "added_tokens") : NULL;
    const json_value *type = dec && dec->type == JSON_OBJECT ? json_get(dec, "type") : NULL;
    bool ok = false;
    int table[324], *byte_level = NULL;
    if (!vocab || vocab->type != JSON_OBJECT) {
        snprintf(why, n, "no \"model\": {\"vocab\": {token: id, ...}} (a BPE or WordLevel model)");
        goto out;
    }
    if (dec && dec->type != JSON_NULL &&
        (!type || type->type != JSON_STRING || strcmp(type->str, "ByteLevel") != 0)) {
        snprintf(why, n, "decoder \"%.40s\" is not read (ByteLevel, or none)",
                 type && type->type == JSON_STRING ? type->str : "?");
        goto out;
    }
    if (dec && dec->type != JSON_NULL) {
        byte_level_table(table);
        byte_level = table;
    }
    d->spaces = !byte_level;
    if (added && added->type != JSON_ARRAY)
        added = NULL;
    /* the ids' range first: one table of pieces */
    uint64_t id, top = 0;
    for (int i = 0; i < vocab->n; i++) {
        if (!json_u64(&vocab->items[i], &id) || id >= MAX_IDS) {
            snprintf(why, n, "model.vocab[\"%.40s\"] is not an id from 0 to %d", vocab->keys[i], MAX_IDS - 1);
            goto out;
        }
        top = id + 1 > top ? id + 1 : top;
    }
    for (int i = 0; added && i < added->n; i++) {
        const json_value *a = &added->items[i], *aid = a->type == JSON_OBJECT ? json_get(a, "id") : NULL;
        const json_value *content = aid ? json_get(a, "content") : NULL;
        if (!aid || !json_u64(aid, &id) || id >= MAX_IDS || !content || content->type != JSON_STRING) {
            snprintf(why, n, "added_tokens[%d] has no id from 0 to %d and string content", i, MAX_IDS - 1);
            goto out;
        }
        top = id + 1 > top ? id + 1 : top;
    }
    d->n = (int64_t)top;
    d->piece = calloc(top ? top : 1, sizeof *d->piece);
    d->len = calloc(top ? top : 1, sizeof *d->len);
    if (!d->piece || !d->len) {
        snprintf(why, n, "out of memory for %llu tokens", (unsigned long long)top);
        goto out;
    }
    for (int i = 0; i < vocab->n; i++) {
        json_u64(&vocab->items[i], &id);
        if (!put_piece(d, id, vocab->keys[i], strlen(vocab->keys[i]), byte_level)) {
            snprintf(why, n, "out of memory");
            goto out;
        }
    }
    for (int i = 0; added && i < added->n; i++) {
        const json_value *a = &added->items[i], *content = json_get(a, "content"), *sp = json_get(a, "special");
        json_u64(json_get(a, "id"), &id);
        bool special = sp && sp->type == JSON_TRUE;
        if (!put_piece(d, id, content->str, special ? 0 : content->len, byte_level)) {
            snprintf(why, n, "out of memory");
            goto out;
        }
    }
    ok = true;
out:
    json_free(doc);
    if (!ok)
        tokenizer_free(d);
    return ok;
}

char *tokenizer_read(const char *path, const char *what, size_t *len, const char *who)
{
    char why[512];
    int64_t size = 0;
    FILE *f = file_fopen_read(path, 1ll << 30, &size, why, sizeof why);
    char *buf = f ? malloc((size_t)size + 1) : NULL;
    if (!f)
        fprintf(stderr, "%s: %s%s: %s\n", who, what, path, why);
    else if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: %s%s: cannot read its %lld bytes\n", who, what, path, (long long)size);
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    *len = (size_t)size;
    return buf;
}

bool tokenizer_load(tok_decoder *d, const char *path, const char *who)
{
    char why[512];
    size_t size = 0;
    memset(d, 0, sizeof *d);
    char *buf = tokenizer_read(path, "--tokenizer ", &size, who);
    bool ok = buf && tokenizer_parse(d, buf, size, why, sizeof why);
    if (buf && !ok)
        fprintf(stderr, "%s: --tokenizer %s: %s\n", who, path, why);
    free(buf);
    return ok;
}

const char *tokenizer_piece(const tok_decoder *d, int64_t id, size_t *len)
{
    if (id < 0 || id >= d->n || !d->piece[id])
        return NULL;
    *len = d->len[id];
    return d->piece[id];
}

void tokenizer_free(tok_decoder *d)
{
    for (int64_t i = 0; d->piece && i < d->n; i++)
        free(d->piece[i]);
    free(d->piece);
    free(d->len);
    memset(d, 0, sizeof *d);
}
