/*
 * output_check.h - whether a file a command writes only after a long run
 * (ampc audit --svg, ampc policy search --out) can be written, checked
 * before the run: nothing measured is lost to a bad path, and no input of
 * the run is overwritten by its result.
 *
 * Defines: output_check.
 */
#ifndef AMPC_OUTPUT_CHECK_H
#define AMPC_OUTPUT_CHECK_H

#include "train_opts.h"

/* path (given as --opt to the command who) against what writing it needs:
 * not a folder, a FIFO or anything else file_fopen_write refuses; in a
 * folder that exists and takes files; not one of the run's inputs (--data,
 * --data-bin, --val-bin, --init-from's checkpoint) under any name. -1, or
 * EXIT_USAGE after a message naming the option and the path. */
int output_check(const char *who, const char *opt, const char *path, const train_opts *o);

#endif
