/*
 * preflight.h - train's checks before it loads anything (preflight.c):
 * --save takes files, --log is not someone else's file, --tensorboard's
 * directory takes files.
 *
 * Defines: preflight, save_dir_check, log_target_check, log_appends.
 */
#ifndef AMPC_PREFLIGHT_H
#define AMPC_PREFLIGHT_H

#include "train_opts.h"

/* The checks before a run loads anything: --log (and --log-mode), --save,
 * then --tensorboard. -1, or 1 / EXIT_USAGE after a message naming the path. */
int preflight(const train_opts *o);
/* DIR can hold a checkpoint: created when missing, then a file created,
 * written, renamed and removed there. -1 or 1 (message names DIR and the
 * system's reason). */
int save_dir_check(const char *dir);
/* --log FILE may be written: absent, empty, a character device, or an ampc
 * log with --log-mode (or --resume); never another file. -1, 1 or
 * EXIT_USAGE (message printed). */
int log_target_check(const train_opts *o);
/* Whether the log is appended to (else created / truncated). */
bool log_appends(const train_opts *o);

#endif
