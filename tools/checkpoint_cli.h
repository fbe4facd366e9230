/*
 * checkpoint_cli.h - a run's DIR/checkpoint.safetensors (checkpoint_cli.c):
 * save, read its settings, load.
 *
 * Defines: CHECKPOINT_FILE, CLI_PATH_MAX, checkpoint_path,
 * checkpoint_read_settings, checkpoint_check_size, checkpoint_clean,
 * checkpoint_load_run, checkpoint_save_run.
 */
#ifndef AMPC_CHECKPOINT_CLI_H
#define AMPC_CHECKPOINT_CLI_H

#include "settings.h"
#include "train_opts.h"
#include "trainer.h"

#include <limits.h>
#include <stddef.h>

#define CHECKPOINT_FILE "checkpoint.safetensors"
/* A buffer for a path option (shorter than PATH_MAX: opts.c) with a name
 * inside it appended: DIR/checkpoint.safetensors. */
#define CLI_PATH_MAX (PATH_MAX + 64)

/* DIR/checkpoint.safetensors into buf. */
void checkpoint_path(char *buf, size_t n, const char *dir);
/* Reads the settings a checkpoint holds (without building a model);
 * -1, or 1 after a message naming the file. */
int checkpoint_read_settings(const char *dir, train_opts *ck, run_info *ri);
/* Checks that the checkpoint in DIR can hold the parameters of the model
 * o and ri describe (before building it: damaged settings could ask for
 * terabytes); -1, or 1 after a message naming the file. */
int checkpoint_check_size(const char *dir, const train_opts *o, const run_info *ri);
/* Removes the temporaries that saves into DIR killed before their rename
 * left (those of dead processes; a resumed run calls it). */
void checkpoint_clean(const char *dir);
/* Loads the checkpoint into t (optimizer and scaler too when load_state);
 * *step gets its step. -1 or 1 (message printed). */
int checkpoint_load_run(const char *dir, trainer *t, bool load_state, bool load_scaler, int64_t *step);
/* Saves t at step with o and ri as settings (creating DIR). -1 or 1. */
int checkpoint_save_run(const char *dir, const trainer *t, const train_opts *o, const run_info *ri,
                        int64_t step);

#endif
