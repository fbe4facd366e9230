/*
 * gguf.h - a GGUF v3 writer (gguf.c): the file llama.cpp and ggml load.
 * Metadata keys and tensors are collected in memory, in the order they
 * are added, then written in one go (gguf_write): a temporary beside the
 * target, fsynced and renamed over it, so a failure leaves no partial
 * file and any earlier one as it was.
 *
 * The layout (ggml's docs/gguf.md): "GGUF", version 3, the tensor and key
 * counts (u64), each key (a string: u64 length and bytes, no NUL) with its
 * value type (u32) and value, each tensor's name, dimensions (u32 count,
 * u64 each, ne[0] the fastest-varying), ggml type (u32) and offset (u64,
 * from the data section's start), padding to general.alignment, then the
 * tensors' bytes, each one padded to the alignment. Everything is
 * little-endian.
 *
 * Defines: GGUF_ALIGNMENT, gguf_type, gguf_ggml_type, gguf_file,
 * gguf_new, gguf_free, gguf_kv_u32, gguf_kv_f32, gguf_kv_bool,
 * gguf_kv_str, gguf_kv_strs, gguf_kv_i32s, gguf_tensor, gguf_write.
 */
#ifndef AMPC_GGUF_H
#define AMPC_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* general.alignment: ggml's default (GGUF_DEFAULT_ALIGNMENT). */
#define GGUF_ALIGNMENT 32

/* The metadata value types (gguf_type in ggml's gguf.h). */
typedef enum {
    GGUF_U32 = 4,
    GGUF_I32 = 5,
    GGUF_F32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
} gguf_type;

/* The tensor types written here (ggml_type in ggml.h). */
typedef enum {
    GGML_F32 = 0,
    GGML_F16 = 1,
    GGML_BF16 = 30,
} gguf_ggml_type;

typedef struct gguf_file gguf_file;

/* An empty file, or NULL when out of memory. */
gguf_file *gguf_new(void);
void gguf_free(gguf_file *g);

/* Metadata, in the order added. Each returns false when out of memory
 * (then gguf_write fails too, so a caller may check once at the end). */
bool gguf_kv_u32(gguf_file *g, const char *key, uint32_t v);
bool gguf_kv_f32(gguf_file *g, const char *key, float v);
bool gguf_kv_bool(gguf_file *g, const char *key, bool v);
bool gguf_kv_str(gguf_file *g, const char *key, const char *v);
/* An array of n strings (n may be 0). */
bool gguf_kv_strs(gguf_file *g, const char *key, const char *const *v, size_t n);
bool gguf_kv_i32s(gguf_file *g, const char *key, const int32_t *v, size_t n);

/* A tensor of ndim (1 to 4) dimensions ne[0 .. ndim), ne[0] the
 * fastest-varying, its nbytes bytes of type t at data; g takes data (a
 * malloc'd buffer: freed with g, or at once when this fails). */
bool gguf_tensor(gguf_file *g, const char *name, int ndim, const int64_t *ne, gguf_ggml_type t, void *data,
                 size_t nbytes);

/* Writes g to path (temporary, fsync, rename; a character device such as
 * /dev/null is written directly). 0, or an errno value with what (n
 * bytes) saying which step failed; nothing is left at path then. */
int gguf_write(const gguf_file *g, const char *path, char *what, size_t n);

#endif
