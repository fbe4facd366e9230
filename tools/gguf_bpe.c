/*
 * gguf_bpe.c - the tokenizer keys of a GGUF file for a token-id gpt, from
 * the Hugging Face tokenizer.json beside its checkpoint: a byte-level BPE
 * (GPT-2's, or one the `tokenizers` package trained), written as
 * llama.cpp's convert_hf_to_gguf.py writes a "gpt2" vocabulary
 * (_set_vocab_gpt2): every id 0 .. vocab-1 a token, the ids the
 * tokenizer lacks (a vocabulary padded past it) "[PAD<id>]" of type
 * UNUSED; added special tokens CONTROL, other added ones USER_DEFINED,
 * the rest NORMAL; the merges as "a b" strings (older files write them
 * so, newer ones as [a, b] pairs); bos and eos the id of <|endoftext|>.
 */
#include "gguf_bpe.h"

#include "io/json.h"
#include "opts.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's token types (gguf-py's TokenType). */
enum { TOK_NORMAL = 1, TOK_UNUSED = 5, TOK_CONTROL = 3, TOK_USER_DEFINED = 4 };

/* The "type" of obj's member key, or "" when it has none. */
static const char *type_of(const json_value *obj, const char *key)
{
    const json_value *m = obj->type == JSON_OBJECT ? json_get(obj, key) : NULL;
    const json_value *t = m && m->type == JSON_OBJECT ? json_get(m, "type") : NULL;
    return t && t->type == JSON_STRING ? t->str : "";
}

/* Sets id's token (a string without NULs) and type; false with why. */
static bool put(const char **tokens, int32_t *types, int64_t vocab, uint64_t id, const json_value *s, int32_t type,
                const char *what, char *why, size_t n)
{
    if (id >= (uint64_t)vocab) {
        snprintf(why, n, "%s \"%.40s\" has id %llu; the model's vocabulary is %lld ids", what, s->str,
                 (unsigned long long)id, (long long)vocab);
        return false;
    }
    if (strlen(s->str) != s->len) {
        snprintf(why, n, "%s of id %llu holds a NUL, which GGUF's token strings cannot", what, (unsigned long long)id);
        return false;
    }
    tokens[id] = s->str;
    types[id] = type;
    return true;
}

/* The keys from the parsed tokenizer.json root into g; false with why. */
static bool bpe_keys(gguf_file *g, const json_value *root, int64_t vocab, char *why, size_t n)
{
    const json_value *model = root->type == JSON_OBJECT ? json_get(root, "model") : NULL;
    const json_value *tv = model && model->type == JSON_OBJECT ? json_get(model, "vocab") : NULL;
    const json_value *merges = tv ? json_get(model, "merges") : NULL;
    const json_value *added = root->type == JSON_OBJECT ? json_get(root, "added_tokens") : NULL;
    if (!model || strcmp(type_of(root, "model"), "BPE") != 0 || !tv || tv->type != JSON_OBJECT || !merges ||
        merges->type != JSON_ARRAY) {
        snprintf(why, n, "its model is not a BPE with a vocab and merges (\"model\": {\"type\": \"BPE\", ...})");
        return false;
    }
    if (strcmp(type_of(root, "pre_tokenizer"), "ByteLevel") != 0 || strcmp(type_of(root, "decoder"), "ByteLevel") != 0) {
        snprintf(why, n, "its pre_tokenizer (\"%.30s\") and decoder (\"%.30s\") are not both ByteLevel, as "
                         "llama.cpp's gpt2 tokenizer reads",
                 type_of(root, "pre_tokenizer"), type_of(root, "decoder"));
        return false;
    }
    const char **tokens = calloc((size_t)vocab, sizeof *tokens);
    int32_t *types = calloc((size_t)vocab, sizeof *types);
    const char **pairs = calloc(merges->n ? (size_t)merges->n : 1, sizeof *pairs);
    char *pads = malloc((size_t)vocab * 32), *joined = NULL;
    size_t room = 0;
    bool ok = tokens && types && pairs && pads;
    if (!ok)
        snprintf(why, n, "out of memory");
    for (int i = 0; ok && i < merges->n; i++) {
        const json_value *m = &merges->items[i];
        bool pair = m->type == JSON_ARRAY && m->n == 2 && m->items[0].type == JSON_STRING &&
                    m->items[1].type == JSON_STRING;
        if (!pair && m->type != JSON_STRING) {
            snprintf(why, n, "model.merges[%d] is neither a string \"a b\" nor a pair [\"a\", \"b\"]", i);
            ok = false;
        }
        room += pair ? m->items[0].len + m->items[1].len + 2 : 0;
    }
    if (ok && room && !(joined = malloc(room))) {
        snprintf(why, n, "out of memory");
        ok = false;
    }
    for (int i = 0, at = 0; ok && i < merges->n; i++) {
        const json_value *m = &merges->items[i];
        if (m->type == JSON_STRING) {
            pairs[i] = m->str;
            continue;
        }
        pairs[i] = joined + at;
        at += sprintf(joined + at, "%s %s", m->items[0].str, m->items[1].str) + 1;
    }
    uint64_t id, eos = 0;
    bool have_eos = false;
    for (int i = 0; ok && i < tv->n; i++) {
        json_value key = {.type = JSON_STRING, .str = tv->keys[i], .len = strlen(tv->keys[i])};
        if (!json_u64(&tv->items[i], &id)) {
            snprintf(why, n, "model.vocab[\"%.40s\"] is not an id", tv->keys[i]);
            ok = false;
        } else
            ok = put(tokens, types, vocab, id, &key, TOK_NORMAL, "model.vocab's token", why, n);
    }
    for (int i = 0; ok && added && added->type == JSON_ARRAY && i < added->n; i++) {
        const json_value *a = &added->items[i], *aid = a->type == JSON_OBJECT ? json_get(a, "id") : NULL;
        const json_value *content = aid ? json_get(a, "content") : NULL, *sp = aid ? json_get(a, "special") : NULL;
        if (!aid || !json_u64(aid, &id) || !content || content->type != JSON_STRING) {
            snprintf(why, n, "added_tokens[%d] has no id and string content", i);
            ok = false;
        } else
            ok = put(tokens, types, vocab, id, content, sp && sp->type == JSON_TRUE ? TOK_CONTROL : TOK_USER_DEFINED,
                     "added token", why, n);
    }
    for (int64_t i = 0; ok && i < vocab; i++) {
        if (!tokens[i]) {
            tokens[i] = pads + 32 * i;
            snprintf(pads + 32 * i, 32, "[PAD%lld]", (long long)i);
            types[i] = TOK_UNUSED;
        }
        /* <|endoftext|> ends GPT-2's texts; without one, the newline's token. */
        if (strcmp(tokens[i], "<|endoftext|>") == 0 || (!have_eos && strcmp(tokens[i], "\xC4\x8A") == 0)) {
            have_eos = have_eos || strcmp(tokens[i], "<|endoftext|>") == 0;
            eos = (uint64_t)i;
        }
    }
    if (ok &&
        !(gguf_kv_str(g, "tokenizer.ggml.model", "gpt2") && gguf_kv_str(g, "tokenizer.ggml.pre", "gpt-2") &&
          gguf_kv_strs(g, "tokenizer.ggml.tokens", tokens, (size_t)vocab) &&
          gguf_kv_i32s(g, "tokenizer.ggml.token_type", types, (size_t)vocab) &&
          gguf_kv_strs(g, "tokenizer.ggml.merges", pairs, (size_t)merges->n) &&
          gguf_kv_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)eos) &&
          gguf_kv_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)eos) &&
          gguf_kv_bool(g, "tokenizer.ggml.add_bos_token", false))) {
        snprintf(why, n, "out of memory");
        ok = false;
    }
    free(tokens);
    free(types);
    free(pairs);
    free(pads);
    free(joined);
    return ok;
}

int gguf_bpe_keys(gguf_file *g, const char *path, int64_t vocab, const char *who)
{
    size_t len = 0;
    char *text = tokenizer_read(path, "", &len, who), why[512], err[160];
    if (!text)
        return EXIT_USAGE;
    const json_value *root = NULL;
    json_doc *doc = json_parse(text, len, &root, err, sizeof err);
    bool ok = doc && bpe_keys(g, root, vocab, why, sizeof why);
    if (!ok)
        fprintf(stderr, "%s: %s: %s%s\n", who, path, doc ? "" : "not JSON: ", doc ? why : err);
    json_free(doc);
    free(text);
    return ok ? -1 : doc && strcmp(why, "out of memory") == 0 ? 1 : EXIT_USAGE;
}
