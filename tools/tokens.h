/*
 * tokens.h - token files for the gpt (tokens.c): nanoGPT's raw uint16
 * files and llm.c's shards (a 256 x int32 header, then uint16 tokens),
 * memory-mapped and checked once; where their vocabulary size is written
 * (--vocab, a JSON sidecar, nanoGPT's meta.pkl); and the training and
 * validation windows drawn from them.
 *
 * Defines: TOK_MAX_VOCAB, tok_file, tok_parse, tok_open, tok_close,
 * tok_pkl_vocab, tok_json_vocab, tok_data_vocab, tok_val_vocab, tok_starts, tok_fill.
 */
#ifndef AMPC_TOKENS_H
#define AMPC_TOKENS_H

#include "ampc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* uint16 token ids: 0 .. 65535. */
#define TOK_MAX_VOCAB 65536
/* llm.c's shard header (dev/data/data_common.py): 256 int32, magic and
 * version 1 (GPT-2, uint16 tokens), header[2] the token count. */
#define TOK_LLMC_MAGIC 20240520
#define TOK_LLMC_HEADER 1024

/* One token file, mapped read-only. */
typedef struct {
    const unsigned char *tok; /* the first token's two bytes (little-endian) */
    int64_t n;                /* tokens */
    int64_t offset;           /* the first token's byte offset: 0, or llm.c's header */
    uint64_t bytes, hash;     /* the file's size and a hash of all its bytes (resume's check) */
    bool llmc;                /* an llm.c shard */
    void *map;
    size_t map_len;
} tok_file;

/* Checks bytes p[0..len) as a token file for a vocabulary of vocab ids
 * (0: not checked) holding at least min_tokens tokens; fills f (no map).
 * False with why (n bytes) naming the byte offset of what is wrong. */
bool tok_parse(const unsigned char *p, size_t len, int64_t vocab, int64_t min_tokens, tok_file *f, char *why,
               size_t n);
/* Maps path and tok_parse's it; false after a message on stderr naming
 * the file (its option, `what`, e.g. "--data-bin"). */
bool tok_open(tok_file *f, const char *path, const char *what, int64_t vocab, int64_t min_tokens);
void tok_close(tok_file *f);
/* The id of token i. */
static inline int64_t tok_at(const tok_file *f, int64_t i) { return f->tok[2 * i] | f->tok[2 * i + 1] << 8; }

/* 'vocab_size' of the dict a nanoGPT prepare.py pickled (meta.pkl): read
 * with a reader of the few opcodes such a dict uses, never executed.
 * -1 with why naming the byte offset when the bytes are anything else. */
int64_t tok_pkl_vocab(const unsigned char *p, size_t len, char *why, size_t n);
/* "vocab_size" of a JSON sidecar ({"vocab_size": N}); -1 with why. */
int64_t tok_json_vocab(const char *p, size_t len, char *why, size_t n);
/* The vocabulary of the token file at train: given (--vocab, 0: none)
 * and what a sidecar beside it says (TRAIN.json, meta.json, meta.pkl in
 * its directory, the first that exists), which must agree; into *vocab.
 * -1, or 1 after a message (EXIT_USAGE when neither says). */
int tok_data_vocab(const char *train, int64_t given, int64_t *vocab, const char *who);
/* The validation file at val against the run's vocabulary: a sidecar
 * beside it (found as tok_data_vocab finds one) that says another size is
 * refused, naming both. -1, or EXIT_USAGE after a message. */
int tok_val_vocab(const char *val, int64_t vocab, const char *who);

/* Row starts of a batch: rows draws uniform in [0, n - context) (nanoGPT's
 * get_batch: torch.randint(len(data) - block_size)) from a generator seeded
 * with seed (a derive_seed of the run's seed and the micro-batch). */
void tok_starts(uint64_t seed, int64_t rows, int64_t n, int64_t context, int64_t *starts);
/* x[b] = tokens[i : i + T], y[b] = tokens[i + 1 : i + 1 + T] for the starts
 * tok_starts draws from seed; x, y are [B, T] i64. */
bool tok_fill(const tok_file *f, uint64_t seed, amp_tensor *x, amp_tensor *y);

#endif
