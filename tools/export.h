/*
 * export.h - `ampc export --format F DIR OUT` (export.c): a checkpoint
 * written in another program's format. export.c holds the command and
 * its table of formats (name -> writer); each format's writer lives in
 * its own file (export_gguf.c: llama.cpp's GGUF).
 *
 * Defines: export_opts, export_gguf.
 */
#ifndef AMPC_EXPORT_H
#define AMPC_EXPORT_H

/* What a writer is asked for. */
typedef struct {
    const char *dir;    /* the checkpoint: DIR train --save wrote, or its .safetensors file */
    const char *out;    /* the file to write */
    const char *format; /* a row of export.c's table */
    const char *dtype;  /* "f32", "f16", "bf16", or NULL: the checkpoint's own */
    const char *data;   /* the training text (a vocabulary the checkpoint does not record), or NULL */
    const char *name;   /* the model's name in the file, or NULL: DIR's last component */
} export_opts;

/* A gpt checkpoint as a GGUF file for llama.cpp's gpt2 architecture
 * (export_gguf.c). The exit code: 0, or 1 after a message. */
int export_gguf(const export_opts *e);

#endif
