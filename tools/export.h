/*
 * export.h - `ampc export --format F DIR OUT` (export.c): a checkpoint
 * written in another program's format. export.c holds the command and
 * its table of formats (name -> writer); each format's writer lives in
 * its own file (export.c's export_hf through hf_write.c: Hugging Face
 * transformers; export_gguf.c: llama.cpp's GGUF).
 *
 * Defines: export_opts, export_hf, export_gguf, EXPORT_NAME_MAX,
 * export_name_ok, export_values_fit.
 */
#ifndef AMPC_EXPORT_H
#define AMPC_EXPORT_H

#include "cli.h"

/* What a writer is asked for: dir (the checkpoint: DIR train --save
 * wrote, or its .safetensors file), out, format (a row of export.c's
 * table), dtype ("f32", "f16", "bf16", or NULL: the format's default),
 * data (gguf: the training text, for a vocabulary the checkpoint does not
 * record, or NULL), name (gguf: the model's name in the file, or NULL:
 * DIR's last component). */
typedef convert_args export_opts;

/* The longest model name written (GGUF's general.name), in bytes. */
#define EXPORT_NAME_MAX 255

/* Whether name (called `what` in the message) is a model name a GGUF file
 * holds: valid UTF-8 of at most EXPORT_NAME_MAX bytes; false after a
 * message. */
bool export_name_ok(const char *name, const char *what);

/* Whether each of the n values f (tensor `name` of the checkpoint
 * `where`) is finite and stays so in dt (an f16 beyond 65504 rounds to
 * inf); false after a message naming the first that is not and what to
 * do. */
bool export_values_fit(const float *f, int64_t n, amp_dtype dt, const char *where, const char *name);

/* A gpt checkpoint as a GGUF file for llama.cpp's gpt2 architecture
 * (export_gguf.c). The exit code: 0, or 1 after a message (EXIT_USAGE:
 * a default name, DIR's last component, that GGUF cannot hold). */
int export_gguf(const export_opts *e);

#endif
