/*
 * checkpoint.h - what the checkpoint writer (checkpoint.c) and reader
 * (checkpoint_load.c) share: the format's name and dtype names, and the
 * optimizer state keys. The file layout is described in checkpoint.c.
 *
 * Defines: CKPT_FORMAT, CKPT_MAX_COUNT, ckpt_dtype_name / ckpt_dtype_parse,
 * ckpt_host_le, ckpt_shape_text, ckpt_remove_stale_temps, ckpt_optim_keys,
 * ckpt_optim_param_name; the reader's file and entries (ckpt, in_entry)
 * with ckpt_open / ckpt_close, and what converts older layouts on load (ckpt_convert,
 * checkpoint_convert.c).
 */
#ifndef AMPC_CHECKPOINT_H
#define AMPC_CHECKPOINT_H

#include "ampc.h"
#include "optim/optim.h"

/* __metadata__ "format" of the files ampc writes and reads. */
#define CKPT_FORMAT "ampc-1"
/* The largest step or counter a checkpoint may hold: 2^53, exact in a
 * double and more steps than any run takes (285 years at 1 us a step);
 * bounded so that counting on from a loaded value cannot overflow. */
#define CKPT_MAX_COUNT ((int64_t)1 << 53)
/* Room for ckpt_shape_text of any shape. */
#define CKPT_SHAPE_TEXT (AMP_MAX_DIMS * 24 + 4)

/* The safetensors name of dt ("F32", "BF16", ...); "?" for none. */
const char *ckpt_dtype_name(amp_dtype dt);
/* The dtype called s in safetensors, if ampc has it. */
bool ckpt_dtype_parse(const char *s, amp_dtype *dt);
/* Whether this host stores integers little-endian (the format's order). */
bool ckpt_host_le(void);
/* "[10, 784]" into buf. */
const char *ckpt_shape_text(amp_shape s, char *buf, size_t n);
/* Removes the temporaries "<path>.tmp.<pid>" (regular files) that saves
 * killed before their rename left, of pids that are not live processes;
 * best effort, silent. amp_checkpoint_save calls it before it writes. */
void ckpt_remove_stale_temps(const char *path);
/* The state keys o keeps per parameter, in PyTorch's names; returns how
 * many. */
int ckpt_optim_keys(const amp_optim *o, const char *keys[OPTIM_MAX_STATE]);

/* The name optimizer parameter i goes by in "optim.<name>.<key>": the
 * module's name for that tensor ("h.0.attn.qkv.weight"), or its index
 * ("7") when the optimizer holds a tensor that is not m's parameter
 * (written into buf). Files before the names used the index always; the
 * reader accepts both. */
const char *ckpt_optim_param_name(const amp_module *m, const amp_optim *o, int i, char *buf, size_t n);

/* ------------------------------------------------------------ the reader */

/* One tensor of the file, its bytes at `bytes` (inside the file, or a
 * buffer of the conversion's). */
typedef struct {
    const char *name;
    amp_dtype dt;
    amp_shape shape;
    uint64_t begin, end;
    const unsigned char *bytes;
    bool used;
} in_entry;

typedef struct {
    const char *path;
    unsigned char *file;
    size_t size;
    struct json_doc *doc;
    const struct json_value *meta;
    in_entry *e; /* sorted by name */
    int n;
    const unsigned char *data;
    /* Set by ckpt_convert: the optimizer's parameter count the converted
     * state is for (else -1: the file's "optim.n_params"), and what it
     * allocated (freed with the file). */
    int64_t n_params;
    bool converted; /* errors say so */
    bool foreign;   /* set before ckpt_open: any __metadata__ "format" (a Hugging Face file's "pt") */
    void **owned;
    int n_owned, cap_owned;
} ckpt;

/* Reads c->path whole and checks its header (length, JSON, every entry's
 * dtype, shape and data_offsets, the entries tiling the data); c->e then
 * lists the tensors, sorted by name. Errors name the file (ckpt_fail).
 * ckpt_close frees what it read, whatever it returned. */
amp_status ckpt_open(ckpt *c);
void ckpt_close(ckpt *c);
/* qsort's order of in_entry by name. */
int ckpt_by_name(const void *a, const void *b);
/* c's entry called name, or NULL (c->e sorted by name). */
in_entry *ckpt_find(const ckpt *c, const char *name);
/* An error about c's file: "checkpoint '<path>': <message>". */
amp_status ckpt_fail(const ckpt *c, amp_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Rewrites an older file's entries for model m in place, before anything
 * is checked: a gpt saved before the names (index names "3.1.weight",
 * separate q, k, v linears, optimizer state "optim.<index>.<key>") gets
 * today's names and its q, k and v (weights, biases, their optimizer
 * state and masters) concatenated into qkv. Anything else is left as it
 * is. An older gpt file that does not fit m is an error naming the
 * conversion. */
amp_status ckpt_convert(ckpt *c, const amp_module *m);

#endif
