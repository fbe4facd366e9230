/*
 * dist_cli.h - one rank of `mpirun -np N ampc train` (dist_cli.c): start,
 * output, agreeing on errors, ending the job.
 *
 * Defines: dist_launched, dist_on, dist_check_opts, dist_output,
 * dist_begin, dist_agree, dist_local_ranks, dist_same_settings,
 * dist_same_step, dist_timeout_s, dist_abort, dist_end.
 */
#ifndef AMPC_DIST_CLI_H
#define AMPC_DIST_CLI_H

#include "settings.h"
#include "train_opts.h"

/* comm_launched_size(): the ranks an MPI launcher started, -1 without one. */
int dist_launched(void);
/* Whether this run is one rank of a data-parallel job (dist_begin ran
 * amp_dist_init). */
bool dist_on(void);
/* The data-parallel options against the launch (before anything else);
 * -1 or EXIT_USAGE (message printed). */
int dist_check_opts(const train_opts *o);
/* Started by an MPI launcher on several ranks: rank 0 alone on stdout,
 * "ampc: rank R: " before each stderr line (the launcher's rank), a line
 * saying so when mpirun ends this rank (SIGTERM). Else nothing. */
void dist_output(void);
/* Under an MPI launcher: amp_dist_init, --dist-timeout, the default threads
 * per rank into o. -1, or 1 after a message (no MPI in the build). */
int dist_begin(train_opts *o);
/* Every rank's rc of a setup stage (-1: go on) made one: the largest exit
 * code any rank has, -1 when none has. A plain run's rc as it is. */
int dist_agree(int rc);
/* The ranks of this job on this node (OMPI_COMM_WORLD_LOCAL_SIZE); 1 in a
 * plain run. */
int dist_local_ranks(void);
/* Whether every rank has the same settings and data shapes (o and ri as
 * a checkpoint would keep them): -1, or EXIT_USAGE after a message. A
 * collective: every rank calls it at the same point. */
int dist_same_settings(const train_opts *o, const run_info *ri);
/* Whether every rank starts at the same step (a resumed run's: the step
 * of its checkpoint, `where`; 0 without one): -1, or EXIT_USAGE after a
 * message naming each rank's step. A collective, called by every rank at
 * the same point, after the checkpoints are read and before any step or
 * save. */
int dist_same_step(int64_t step, const char *where);
/* Seconds a wait for the other ranks may last (--dist-timeout,
 * AMPC_DIST_TIMEOUT, else 300). */
double dist_timeout_s(void);
/* A data-parallel run: prints why and ends every rank (MPI_Abort with rc);
 * returns (doing nothing) in a plain run. */
void dist_abort(int rc, const char *why);
/* The end of a data-parallel run: amp_dist_finalize (waits for every
 * rank). Returns rc (1 when rc was 0 and finalizing failed); when the
 * ranks cannot end together (comm_failed), ends the job (dist_abort). */
int dist_end(int rc);

#endif
