/*
 * hf.h - Hugging Face transformers' GPT-2 layout of ampc's gpt (hf.c):
 * the tensor names both ways, reading a transformers directory
 * (config.json + model.safetensors, or a sharded index), and writing
 * one (config.json, model.safetensors, tokenizer.json for a character
 * vocabulary). `ampc export --format hf` (export.c) and `ampc import
 * --format hf` (import_hf.c) are built on it; docs/interop.md,
 * "Hugging Face transformers".
 *
 * Both directions go through f32 buffers in ampc's layout (a linear's
 * weight [out, in]); transformers' GPT-2 keeps its linears as Conv1D,
 * weight [in, out], so those are transposed on the way.
 *
 * Defines: HF_MAX_VOCAB, hf_shape, hf_tensor, hf_tensor_count,
 * hf_tensor_at, hf_model, hf_read_dir, hf_read_tokenizer_vocab,
 * hf_model_free, hf_byte_level, hf_write_dir, hf_copy_tokenizer.
 */
#ifndef AMPC_HF_H
#define AMPC_HF_H

#include "ampc.h"

#include <stdbool.h>
#include <stdint.h>

/* A character vocabulary (one byte a token) has at most 256 tokens
 * (settings.c's bound); a larger one is token ids (tokens.h's
 * TOK_MAX_VOCAB at most). */
#define HF_MAX_VOCAB 256

/* The shape of a gpt, in ampc's words. */
typedef struct {
    int64_t layers, heads, width, mlp, context, vocab;
    double dropout; /* resid_pdrop: ampc drops after each residual branch only */
    bool gelu_exact; /* activation_function "gelu" (--gelu exact); else the tanh GELU */
} hf_shape;

/* One tensor: its ampc name ("h.0.attn.qkv.weight") and transformers'
 * ("transformer.h.0.attn.c_attn.weight"), ampc's shape [rows] or [rows,
 * cols], and whether transformers stores it transposed (Conv1D). */
typedef struct {
    char ampc[64], hf[96];
    int64_t rows, cols; /* cols 0: one dimension */
    bool conv1d;
} hf_tensor;

/* How many tensors a gpt of shape s has (the tied head has none). */
int hf_tensor_count(const hf_shape *s);
/* Tensor k (0 .. hf_tensor_count) of shape s into t. */
void hf_tensor_at(const hf_shape *s, int k, hf_tensor *t);

/* A transformers GPT-2 read into ampc's layout: w[k] holds tensor k
 * (hf_tensor_at) in f32, rows * max(cols, 1) values. */
typedef struct {
    hf_shape s;
    float **w;
    int n;
    char vocab_hex[2 * HF_MAX_VOCAB + 1]; /* from tokenizer.json when it is a character vocabulary; else "" */
    char *ampc_settings; /* config.json's "ampc_settings" (an export's run settings), or NULL */
    bool tokenizer;      /* the directory has a tokenizer.json */
} hf_model;

/* Reads dir/config.json and dir/model.safetensors (or the shards that
 * dir/model.safetensors.index.json lists) into m, checking that ampc's
 * gpt computes the same model. -1, or the exit code (EXIT_USAGE for a
 * bad directory, 1 for a failed read) after a message naming the file
 * (and byte offset or tensor). m is to be freed with hf_model_free
 * either way. */
int hf_read_dir(const char *dir, hf_model *m);
void hf_model_free(hf_model *m);
/* The byte each id of a tokenizer.json text stands for, when it is a
 * character vocabulary as hf_write_dir writes it (a BPE or WordLevel
 * model of single characters, ids 0 .. vocab-1, plain or through GPT-2's
 * ByteLevel map) into hex (2 digits a token); false (hex "") otherwise. */
bool hf_read_tokenizer_vocab(const char *text, size_t len, int64_t vocab, char hex[2 * HF_MAX_VOCAB + 1]);

/* GPT-2's ByteLevel map (bytes_to_unicode): byte b stands for code point
 * bl[b], printable bytes for themselves, the others for 256, 257, ... */
void hf_byte_level(uint32_t bl[256]);

/* Writes out/config.json (a GPT2Config; with settings, the run's settings
 * JSON, as "ampc_settings"), out/model.safetensors (w[k] in ampc's layout
 * and f32, stored as dt with transformers' names and layouts) and, when
 * vocab_hex is not "", out/tokenizer.json (one token per byte, ids as
 * ampc's), creating out. -1, or 1 after a message. */
int hf_write_dir(const char *out, const hf_shape *s, const float *const *w, amp_dtype dt, const char *vocab_hex,
                 const char *settings);
/* dir/tokenizer.json copied to out/tokenizer.json when there is one
 * (*copied says whether it was); -1, or 1 after a message of who's. */
int hf_copy_tokenizer(const char *dir, const char *out, const char *who, bool *copied);

#endif
