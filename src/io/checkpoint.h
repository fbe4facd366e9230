/*
 * checkpoint.h - what the checkpoint writer (checkpoint.c) and reader
 * (checkpoint_load.c) share: the format's name and dtype names, and the
 * optimizer state keys. The file layout is described in checkpoint.c.
 *
 * Defines: CKPT_FORMAT, CKPT_MAX_COUNT, ckpt_dtype_name / ckpt_dtype_parse,
 * ckpt_host_le, ckpt_shape_text, ckpt_remove_stale_temps, ckpt_optim_keys.
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

#endif
