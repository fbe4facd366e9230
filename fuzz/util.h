/*
 * util.h - what the fuzz targets share: the input written to a file (the
 * loaders take paths), and the small training run the checkpoint target
 * loads into and fuzz_seeds saves from.
 *
 * Defines: fuzz_file, fuzz_dir, fuzz_run, fuzz_run_make / fuzz_run_free.
 */
#ifndef AMPC_FUZZ_UTIL_H
#define AMPC_FUZZ_UTIL_H

#include "ampc.h"

#include <stddef.h>
#include <stdint.h>

/* This process's scratch directory (under $TMPDIR, else /tmp), made on
 * first use and removed with what fuzz_file wrote when the process exits. */
const char *fuzz_dir(void);
/* Writes data[0..size) to fuzz_dir()/name (replacing it) and returns its
 * path (a static buffer per name slot; at most 4 names per process). A
 * failure to write is the harness's fault: it prints why and exits. */
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);

/* mlp 4-8-3 with an optimizer and an enabled grad scaler, seeded: what the
 * checkpoint seeds are saved from. FUZZ_LEVERS: the model in bf16 with
 * Adam keeping f32 masters and its state in bf16 (--param-dtype bf16
 * --optim-state bf16); its steps run under bf16 autocast. FUZZ_GPT: a gpt
 * (vocab 3, context 4, width 4, 2 layers, 1 head, mlp 4: the seeds
 * gpt-*.safetensors) with Adam, so that gpt files reach the conversion of
 * older checkpoints (src/io/checkpoint_convert.c). */
typedef enum { FUZZ_ADAM, FUZZ_SGD, FUZZ_LEVERS, FUZZ_GPT } fuzz_kind;
typedef struct {
    amp_module *m;
    amp_optim *o;
    amp_scaler *s;
    fuzz_kind kind;
} fuzz_run;

void fuzz_run_make(fuzz_run *r, fuzz_kind kind);
void fuzz_run_free(fuzz_run *r);

#endif
