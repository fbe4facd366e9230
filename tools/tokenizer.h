/*
 * tokenizer.h - a Hugging Face tokenizer.json read for decoding only
 * (tokenizer.c): token id -> the bytes it stands for, so that `ampc
 * generate --tokenizer FILE` prints text from a model trained on ids.
 *
 * Defines: tok_decoder, tokenizer_parse, tokenizer_read, tokenizer_load, tokenizer_piece,
 * tokenizer_free.
 */
#ifndef AMPC_TOKENIZER_H
#define AMPC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char **piece;  /* id -> its bytes (NULL: no such id) */
    size_t *len;
    int64_t n;     /* ids 0 .. n-1 */
    bool spaces;   /* no decoder: tokens joined by spaces, as `tokenizers` decodes */
} tok_decoder;

/* Parses the JSON text[0..len); false with why (n bytes). */
bool tokenizer_parse(tok_decoder *d, const char *text, size_t len, char *why, size_t n);
/* path's bytes (malloc'd, *len of them), or NULL after a message on
 * stderr naming it (after what, such as "--tokenizer "; who: the command). */
char *tokenizer_read(const char *path, const char *what, size_t *len, const char *who);
/* Reads path; false after a message on stderr naming it (who: the command). */
bool tokenizer_load(tok_decoder *d, const char *path, const char *who);
/* id's bytes, or NULL when the tokenizer has no such id. */
const char *tokenizer_piece(const tok_decoder *d, int64_t id, size_t *len);
void tokenizer_free(tok_decoder *d);

#endif
