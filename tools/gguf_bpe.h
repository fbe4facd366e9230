/*
 * gguf_bpe.h - a GGUF file's tokenizer keys from a byte-level BPE
 * tokenizer.json (gguf_bpe.c), for `ampc export --format gguf` of a gpt
 * trained on token ids.
 *
 * Defines: gguf_bpe_keys.
 */
#ifndef AMPC_GGUF_BPE_H
#define AMPC_GGUF_BPE_H

#include "gguf.h"

#include <stdint.h>

/* The tokenizer.ggml.* keys of the tokenizer.json at path, its ids
 * 0 .. vocab-1, into g: -1, or after a message on stderr naming path
 * (who: the command) EXIT_USAGE (a file that cannot be read, or is not a
 * byte-level BPE tokenizer.json of ids below vocab) or 1 (out of memory). */
int gguf_bpe_keys(gguf_file *g, const char *path, int64_t vocab, const char *who);

#endif
