/*
 * anomaly_cli.h - train's --detect-anomaly and --anomaly-continue
 * (anomaly_cli.c): the library's anomaly check (amp_anomaly_*) around the
 * training steps, its reports on stderr and as "event":"anomaly" lines in
 * --log.
 *
 * Defines: anomaly_cli_begin, anomaly_cli_pass, anomaly_cli_after_pass,
 * anomaly_cli_stopped, anomaly_cli_halted, anomaly_cli_skipped, anomaly_cli_end.
 */
#ifndef AMPC_ANOMALY_CLI_H
#define AMPC_ANOMALY_CLI_H

#include "log.h"
#include "train_opts.h"

/* Turns the check on when o asks for it; lf (may be NULL) gets the
 * events. -1, or 1 with the message printed. */
int anomaly_cli_begin(const train_opts *o, log_file *lf);
/* Before micro-batch j (0-based) of step `step` (0-based). */
void anomaly_cli_pass(int64_t step, int64_t j);
/* After a micro-batch: a report not shown before goes to stderr and the
 * log. -1, or 1 when the log cannot be written (message printed). */
int anomaly_cli_after_pass(void);
/* Whether the micro-batch that just failed failed at an anomaly (the
 * check stops the run): the report is shown and logged here. */
bool anomaly_cli_stopped(void);
/* Whether anomaly_cli_stopped stopped the run. */
bool anomaly_cli_halted(void);
/* A step the grad scaler skipped: names the op whose inf/NaN came first
 * in it (a line on stderr). */
void anomaly_cli_skipped(int64_t step);
/* Turns the check off (before the evaluation). */
void anomaly_cli_end(void);

#endif
