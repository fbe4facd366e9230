/*
 * tokens.c - token files for the gpt: nanoGPT's train.bin / val.bin (raw
 * little-endian uint16, prepare.py's np.uint16 tofile) and llm.c's shards
 * (dev/data/data_common.py's write_datafile: 256 int32 - magic 20240520,
 * version 1, the token count - then the uint16 tokens).
 *
 * A file is memory-mapped, not read: a corpus of billions of tokens costs
 * no copy. It is checked whole once, when opened (every token below the
 * vocabulary, its length what the header says), and hashed on the way, so
 * that --resume can tell the run's file from another of the same size.
 *
 * The vocabulary size: --vocab, or what the data says beside the file (a
 * sidecar JSON written by python/ampc_tokens.py, or the meta.pkl nanoGPT's
 * char-level prepare.py pickles). A pickle is never executed: a reader of
 * the dozen opcodes a dict of strings and ints uses walks it, and refuses
 * every other opcode (GLOBAL, REDUCE, ...: those that would import or call).
 */
#include "tokens.h"

#include "checkpoint_cli.h"
#include "data.h"

#include "base/base.h"
#include "io/file.h"
#include "io/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* llm.c's other magics, named when a file carries one. */
#define LLMC_LLAMA3_MAGIC 20240801 /* LLaMA-3 shards: uint32 tokens, version 7 */
#define LLMC_MODEL_MAGIC 20240326  /* a model checkpoint (gpt2_124M.bin) */

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* A hash of every byte, 8 at a time (FNV-1a's prime on words): cheap
 * beside the scan, and any changed byte changes it in all likelihood. */
static uint64_t hash_bytes(const unsigned char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The header of an llm.c shard: its token count and where tokens start;
 * false with why. */
static bool llmc_header(const unsigned char *p, size_t len, tok_file *f, char *why, size_t n)
{
    int32_t magic = le32(p), version = le32(p + 4), count = le32(p + 8);
    if (magic == LLMC_LLAMA3_MAGIC) {
        snprintf(why, n, "byte 0: magic %d is llm.c's LLaMA-3 shard (uint32 tokens); ampc reads uint16 tokens "
                         "(llm.c's GPT-2 shards, magic %d, or nanoGPT's raw .bin)", magic, TOK_LLMC_MAGIC);
        return false;
    }
    if (magic != TOK_LLMC_MAGIC) {
        snprintf(why, n, "byte 0: magic %d is an llm.c model file, not a token shard (magic %d)", magic,
                 TOK_LLMC_MAGIC);
        return false;
    }
    if (len < TOK_LLMC_HEADER) {
        snprintf(why, n, "byte %zu: the file ends inside llm.c's %d-byte header", len, TOK_LLMC_HEADER);
        return false;
    }
    if (version != 1) {
        snprintf(why, n, "byte 4: llm.c header version %d; only version 1 (uint16 tokens) is read", version);
        return false;
    }
    uint64_t body = len - TOK_LLMC_HEADER;
    if (count < 0 || body != 2 * (uint64_t)count) {
        snprintf(why, n, "byte 8: the header's token count %d does not match the file: its %llu bytes after the "
                         "header hold %s%llu tokens", count, (unsigned long long)body,
                 body % 2 ? "an odd byte and " : "", (unsigned long long)(body / 2));
        return false;
    }
    f->llmc = true;
    f->offset = TOK_LLMC_HEADER;
    return true;
}

/* The first token of f at or past vocab, or -1: blocks without a branch
 * per token (the compiler vectorises them), the block that has one
 * searched again. */
static int64_t first_past(const tok_file *f, int64_t vocab)
{
    enum { BLOCK = 4096 };
    for (int64_t b = 0; b < f->n; b += BLOCK) {
        const int64_t end = b + BLOCK < f->n ? b + BLOCK : f->n;
        int any = 0;
        for (int64_t i = b; i < end; i++)
            any |= tok_at(f, i) >= vocab;
        for (int64_t i = b; any && i < end; i++)
            if (tok_at(f, i) >= vocab)
                return i;
    }
    return -1;
}

bool tok_parse(const unsigned char *p, size_t len, int64_t vocab, int64_t min_tokens, tok_file *f, char *why,
               size_t n)
{
    memset(f, 0, sizeof *f);
    if (len == 0) {
        snprintf(why, n, "byte 0: the file is empty (no tokens)");
        return false;
    }
    int32_t magic = len >= 4 ? le32(p) : 0;
    if (magic == TOK_LLMC_MAGIC || magic == LLMC_LLAMA3_MAGIC || magic == LLMC_MODEL_MAGIC) {
        if (!llmc_header(p, len, f, why, n))
            return false;
    } else if (len % 2) {
        snprintf(why, n, "byte %zu: an odd length (%zu bytes): uint16 tokens take 2 bytes each", len - 1, len);
        return false;
    }
    f->tok = p + f->offset;
    f->n = (int64_t)(len - (size_t)f->offset) / 2;
    if (f->n < min_tokens) {
        snprintf(why, n, "byte %zu: %lld tokens, fewer than one window takes (--context + 1 = %lld)", len,
                 (long long)f->n, (long long)min_tokens);
        return false;
    }
    int64_t bad = vocab > 0 ? first_past(f, vocab) : -1;
    if (bad >= 0) {
        snprintf(why, n, "byte %lld: token %lld (number %lld) is not below the vocabulary size %lld",
                 (long long)(f->offset + 2 * bad), (long long)tok_at(f, bad), (long long)bad, (long long)vocab);
        return false;
    }
    f->bytes = len;
    f->hash = hash_bytes(p, len);
    return true;
}

bool tok_open(tok_file *f, const char *path, const char *what, int64_t vocab, int64_t min_tokens)
{
    char why[512];
    int64_t size = 0;
    memset(f, 0, sizeof *f);
    int fd = file_open_read(path, 0, &size, why, sizeof why);
    if (fd < 0) {
        fprintf(stderr, "ampc: %s %s: %s\n", what, path, why);
        return false;
    }
    void *map = size > 0 ? mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) {
        fprintf(stderr, "ampc: %s %s: cannot map its %lld bytes: %s\n", what, path, (long long)size, strerror(err));
        return false;
    }
    if (!tok_parse(map, (size_t)size, vocab, min_tokens, f, why, sizeof why)) {
        fprintf(stderr, "ampc: %s %s: %s\n", what, path, why);
        if (map)
            munmap(map, (size_t)size);
        return false;
    }
    f->map = map;
    f->map_len = (size_t)size;
    return true;
}

void tok_close(tok_file *f)
{
    if (f->map)
        munmap(f->map, f->map_len);
    memset(f, 0, sizeof *f);
}

/* ---- meta.pkl: the opcodes of a pickled dict of str / int keys and
 * values (pickle protocols 2 to 5), walked on a small stack. */

typedef enum { PK_MARK, PK_DICT, PK_STR, PK_INT, PK_OTHER } pk_kind;

typedef struct {
    pk_kind kind;
    int dict;            /* PK_DICT: which (0: the outermost) */
    int64_t v;           /* PK_INT */
    const unsigned char *s;
    size_t len;          /* PK_STR */
} pk_item;

typedef struct {
    const unsigned char *p;
    size_t len, at;
    pk_item *stack, *memo;
    size_t sp, cap, n_memo;
    int dicts;
    int64_t vocab;
    char *why;
    size_t whyn;
} pk_reader;

static bool pk_fail(pk_reader *r, size_t at, const char *what)
{
    snprintf(r->why, r->whyn, "byte %zu: %s", at, what);
    return false;
}

/* n bytes of the opcode's argument at r->at; NULL when the file ends. */
static const unsigned char *pk_take(pk_reader *r, size_t n)
{
    if (n > r->len - r->at)
        return NULL;
    const unsigned char *q = r->p + r->at;
    r->at += n;
    return q;
}

static uint64_t pk_le(const unsigned char *q, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | q[i];
    return v;
}

static bool pk_push(pk_reader *r, pk_item it)
{
    if (r->sp == r->cap) /* the stack never holds more items than the file has bytes */
        return pk_fail(r, r->at, "the pickle's stack is deeper than its bytes allow");
    r->stack[r->sp++] = it;
    return true;
}

/* SETITEM / SETITEMS: pairs stack[from ..] into the dict just below them. */
static bool pk_set_items(pk_reader *r, size_t op_at, size_t from)
{
    if (from == 0 || r->stack[from - 1].kind != PK_DICT || (r->sp - from) % 2)
        return pk_fail(r, op_at, "SETITEM(S) without a dict and key / value pairs below it");
    if (r->stack[from - 1].dict == 0)
        for (size_t i = from; i < r->sp; i += 2) {
            const pk_item *k = &r->stack[i], *v = &r->stack[i + 1];
            if (k->kind == PK_STR && k->len == 10 && memcmp(k->s, "vocab_size", 10) == 0) {
                if (v->kind != PK_INT || v->v < 1 || v->v > TOK_MAX_VOCAB)
                    return pk_fail(r, op_at, "'vocab_size' is not a whole number from 1 to 65536");
                r->vocab = v->v;
            }
        }
    r->sp = from;
    return true;
}

static bool pk_step(pk_reader *r, bool *stop)
{
    size_t at = r->at;
    unsigned char op = r->p[r->at++];
    const unsigned char *q = NULL;
    pk_item it = {.kind = PK_OTHER};
    switch (op) {
    case 0x80: /* PROTO */
        if (!(q = pk_take(r, 1)) || q[0] < 2 || q[0] > 5)
            return pk_fail(r, at, "pickle protocol is not 2 to 5");
        return true;
    case 0x95: /* FRAME: a length only */
        return pk_take(r, 8) ? true : pk_fail(r, at, "the file ends inside a FRAME");
    case '}': /* EMPTY_DICT */
        return pk_push(r, (pk_item){.kind = PK_DICT, .dict = r->dicts++});
    case '(': /* MARK */
        return pk_push(r, (pk_item){.kind = PK_MARK});
    case 0x8c: case 'X': case 0x8d: { /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
        int w = op == 0x8c ? 1 : op == 'X' ? 4 : 8;
        if (!(q = pk_take(r, (size_t)w)))
            return pk_fail(r, at, "the file ends inside a string's length");
        uint64_t n = pk_le(q, w);
        if (n > r->len - r->at)
            return pk_fail(r, at, "a string runs past the end of the file");
        it = (pk_item){.kind = PK_STR, .s = r->p + r->at, .len = (size_t)n};
        r->at += (size_t)n;
        return pk_push(r, it);
    }
    case 'K': case 'M': case 'J': { /* BININT1, BININT2, BININT */
        int w = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        if (!(q = pk_take(r, (size_t)w)))
            return pk_fail(r, at, "the file ends inside an int");
        int64_t v = w == 4 ? (int64_t)le32(q) : (int64_t)pk_le(q, w);
        return pk_push(r, (pk_item){.kind = PK_INT, .v = v});
    }
    case 0x8a: { /* LONG1: n bytes, little-endian two's complement */
        if (!(q = pk_take(r, 1)) || q[0] > 8 || !pk_take(r, q[0]))
            return pk_fail(r, at, "a LONG1 int longer than 8 bytes or cut short");
        int n = q[0];
        uint64_t u = n ? pk_le(q + 1, n) : 0;
        if (n > 0 && n < 8 && (q[n] & 0x80))
            u |= ~0ull << (8 * n);
        return pk_push(r, (pk_item){.kind = PK_INT, .v = (int64_t)u});
    }
    case 'N': case 0x88: case 0x89: /* None, True, False */
        return pk_push(r, it);
    case 0x94: case 'q': case 'r': { /* MEMOIZE, BINPUT, LONG_BINPUT */
        uint64_t idx = r->n_memo;
        if (op != 0x94) {
            int w = op == 'q' ? 1 : 4;
            if (!(q = pk_take(r, (size_t)w)))
                return pk_fail(r, at, "the file ends inside a memo index");
            idx = pk_le(q, w);
        }
        if (r->sp == 0 || idx >= r->cap)
            return pk_fail(r, at, "a memo put with an empty stack or an index past the file's size");
        r->memo[idx] = r->stack[r->sp - 1];
        if (idx >= r->n_memo)
            r->n_memo = idx + 1;
        return true;
    }
    case 'h': case 'j': { /* BINGET, LONG_BINGET */
        int w = op == 'h' ? 1 : 4;
        if (!(q = pk_take(r, (size_t)w)))
            return pk_fail(r, at, "the file ends inside a memo index");
        uint64_t idx = pk_le(q, w);
        if (idx >= r->n_memo || r->memo[idx].kind == PK_MARK)
            return pk_fail(r, at, "a memo get of an index never put");
        return pk_push(r, r->memo[idx]);
    }
    case 's': /* SETITEM */
        if (r->sp < 3)
            return pk_fail(r, at, "SETITEM without a dict, key and value");
        return pk_set_items(r, at, r->sp - 2);
    case 'u': { /* SETITEMS: back to the MARK */
        size_t m = r->sp;
        while (m > 0 && r->stack[m - 1].kind != PK_MARK)
            m--;
        if (m == 0)
            return pk_fail(r, at, "SETITEMS without a MARK");
        memmove(&r->stack[m - 1], &r->stack[m], (r->sp - m) * sizeof *r->stack);
        r->sp--;
        return pk_set_items(r, at, m - 1);
    }
    case '.': /* STOP */
        if (r->sp != 1 || r->stack[0].kind != PK_DICT || r->stack[0].dict != 0)
            return pk_fail(r, at, "the pickle's value is not one dict");
        *stop = true;
        return true;
    default: {
        char what[200];
        const char *name = op == 'c' ? "GLOBAL" : op == 0x93 ? "STACK_GLOBAL" : op == 'R' ? "REDUCE"
                         : op == 'b' ? "BUILD" : op == 'i' ? "INST" : op == 'o' ? "OBJ"
                         : op == 0x81 ? "NEWOBJ" : op == 0x92 ? "NEWOBJ_EX" : "an opcode";
        snprintf(what, sizeof what, "opcode 0x%02x (%s) is not one of a pickled dict of strings and numbers "
                                    "(nanoGPT's meta.pkl): refused, nothing in the file is run", op, name);
        return pk_fail(r, at, what);
    }
    }
}

int64_t tok_pkl_vocab(const unsigned char *p, size_t len, char *why, size_t n)
{
    pk_reader r = {.p = p, .len = len, .cap = len + 1, .why = why, .whyn = n, .vocab = -1};
    r.stack = calloc(r.cap, sizeof *r.stack);
    r.memo = calloc(r.cap, sizeof *r.memo);
    bool ok = r.stack && r.memo, stop = false;
    if (!ok)
        snprintf(why, n, "out of memory for a %zu-byte pickle", len);
    for (size_t i = 0; i < r.cap && ok; i++)
        r.memo[i].kind = PK_MARK; /* "never put" */
    while (ok && !stop)
        ok = r.at < len ? pk_step(&r, &stop) : pk_fail(&r, len, "the pickle ends before its STOP");
    if (ok && r.vocab < 0)
        ok = pk_fail(&r, 0, "the pickled dict has no int 'vocab_size'");
    free(r.stack);
    free(r.memo);
    return ok ? r.vocab : -1;
}

int64_t tok_json_vocab(const char *p, size_t len, char *why, size_t n)
{
    char err[160];
    const json_value *root = NULL, *v;
    json_doc *d = json_parse(p, len, &root, err, sizeof err);
    uint64_t vocab = 0;
    if (!d)
        snprintf(why, n, "not JSON: %s", err);
    else if (root->type != JSON_OBJECT || !(v = json_get(root, "vocab_size")))
        snprintf(why, n, "byte 0: no \"vocab_size\" in the object");
    else if (!json_u64(v, &vocab) || vocab < 1 || vocab > TOK_MAX_VOCAB)
        snprintf(why, n, "\"vocab_size\" is not a whole number from 1 to %d", TOK_MAX_VOCAB);
    json_free(d);
    return vocab >= 1 && vocab <= TOK_MAX_VOCAB ? (int64_t)vocab : -1;
}

/* What the sidecar at path says (-1: there is none; -2 after a message). */
static int64_t sidecar_vocab(const char *path, bool pickle)
{
    char why[512];
    int64_t size = 0;
    if (access(path, F_OK) != 0)
        return -1;
    FILE *f = file_fopen_read(path, 1 << 24, &size, why, sizeof why);
    char *buf = f ? malloc((size_t)size + 1) : NULL;
    int64_t v = -2;
    if (!f)
        fprintf(stderr, "ampc: %s: %s\n", path, why);
    else if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size)
        fprintf(stderr, "ampc: %s: cannot read its %lld bytes\n", path, (long long)size);
    else if ((v = pickle ? tok_pkl_vocab((unsigned char *)buf, (size_t)size, why, sizeof why)
                         : tok_json_vocab(buf, (size_t)size, why, sizeof why)) < 0) {
        fprintf(stderr, "ampc: %s: %s\n", path, why);
        v = -2;
    }
    free(buf);
    if (f)
        fclose(f);
    return v;
}

/* The vocabulary a sidecar beside the token file at path says (path.json,
 * meta.json or meta.pkl in its directory, the first that exists), that
 * sidecar's name in which: -1 when none exists, -2 after a message. */
static int64_t file_vocab(const char *path, char which[CLI_PATH_MAX])
{
    char paths[3][CLI_PATH_MAX];
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path) : 1;
    const char *d = slash ? path : ".";
    snprintf(paths[0], sizeof paths[0], "%s.json", path);
    snprintf(paths[1], sizeof paths[1], "%.*s/meta.json", dir, d);
    snprintf(paths[2], sizeof paths[2], "%.*s/meta.pkl", dir, d);
    memcpy(which, paths[0], CLI_PATH_MAX);
    for (int i = 0; i < 3; i++) {
        int64_t v = sidecar_vocab(paths[i], i == 2);
        if (v != -1) {
            memcpy(which, paths[i], CLI_PATH_MAX);
            return v;
        }
    }
    return -1;
}

int tok_data_vocab(const char *train, int64_t given, int64_t *vocab, const char *who)
{
    char which[CLI_PATH_MAX];
    int64_t v = file_vocab(train, which);
    if (v == -2)
        return EXIT_USAGE;
    if (v > 0 && given > 0 && given != v) {
        fprintf(stderr, "%s: --vocab %lld, but %s says vocab_size %lld: give the data's (or leave --vocab out)\n",
                who, (long long)given, which, (long long)v);
        return EXIT_USAGE;
    }
    if (v > 0 || given > 0) {
        *vocab = v > 0 ? v : given;
        return -1;
    }
    fprintf(stderr, "%s: --data-bin %s: its vocabulary size is not written beside it (%s, meta.json or meta.pkl "
                    "in its directory): give --vocab N\n", who, train, which);
    return EXIT_USAGE;
}

int tok_val_vocab(const char *val, int64_t vocab, const char *who)
{
    char which[CLI_PATH_MAX];
    int64_t v = file_vocab(val, which);
    if (v == -2)
        return EXIT_USAGE;
    if (v < 0 || v == vocab)
        return -1;
    fprintf(stderr, "%s: --val-bin %s: %s says vocab_size %lld, but the run's token ids number %lld: the file "
                    "comes from another tokenizer than the training data's (give a --val-bin of the same one)\n",
            who, val, which, (long long)v, (long long)vocab);
    return EXIT_USAGE;
}

/* The next row's start, uniform in [0, n - context). */
static int64_t next_start(uint64_t *s, int64_t n, int64_t context)
{
    return (int64_t)draw_below(s, (uint64_t)(n - context));
}

void tok_starts(uint64_t seed, int64_t rows, int64_t n, int64_t context, int64_t *starts)
{
    uint64_t s = seed;
    for (int64_t b = 0; b < rows; b++)
        starts[b] = next_start(&s, n, context);
}

bool tok_fill(const tok_file *f, uint64_t seed, amp_tensor *x, amp_tensor *y)
{
    if (!f->tok || amp_tensor_ndim(x) != 2 || amp_tensor_dtype(x) != AMP_I64 || amp_tensor_dtype(y) != AMP_I64 ||
        amp_tensor_numel(y) != amp_tensor_numel(x)) {
        amp_set_error(AMP_ERR_SHAPE, "token batch: x and y must be [B, T] i64");
        return false;
    }
    const int64_t rows = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1);
    if (f->n < T + 1) {
        amp_set_error(AMP_ERR_SHAPE, "token batch: %lld tokens hold no window of %lld + 1", (long long)f->n,
                      (long long)T);
        return false;
    }
    int64_t *bx = amp_tensor_data(x), *by = amp_tensor_data(y);
    uint64_t s = seed;
    for (int64_t b = 0; b < rows; b++) {
        int64_t i = next_start(&s, f->n, T);
        for (int64_t t = 0; t < T; t++) {
            bx[b * T + t] = tok_at(f, i + t);
            by[b * T + t] = tok_at(f, i + t + 1);
        }
    }
    return true;
}
