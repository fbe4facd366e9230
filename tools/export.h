/*
 * export.h - `ampc export --format F DIR OUT` (export.c): a checkpoint
 * written in another program's format. export.c holds the command and
 * its table of formats (name -> writer); each format's writer lives in
 * its own file (export.c's export_hf through hf_write.c: Hugging Face
 * transformers; export_gguf.c: llama.cpp's GGUF).
 *
 * Defines: export_opts, export_hf, export_gguf.
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

/* A gpt checkpoint as a GGUF file for llama.cpp's gpt2 architecture
 * (export_gguf.c). The exit code: 0, or 1 after a message. */
int export_gguf(const export_opts *e);

#endif
