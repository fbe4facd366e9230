/*
 * cli.h - the ampc program's parts, shared between its files.
 *
 *   ampc.c   main: commands, --help, --version
 *   args.c   the train command's options: table, parsing, help text
 *   data.c   Fashion-MNIST in memory: loading, normalising, shuffling,
 *            batches copied into reused buffers
 *   train.c  the model, the optimizer, the training loop and the test
 *   policy.c the policy command: the autocast table
 *
 * Exit codes: 0 done, 1 a run that failed (a missing file, a library
 * error), 2 a bad command line.
 */
#ifndef AMPC_CLI_H
#define AMPC_CLI_H

#include "ampc.h"

#include <stdio.h>

#define CLI_MAX_HIDDEN 16
#define EXIT_USAGE 2

/* ------------------------------------------------------------- args.c */

/* The train command's settings. NAN in lr / weight_decay means "the
 * optimizer's default" (the defaults differ between SGD and Adam). */
typedef struct {
    const char *model;
    const char *data_dir;
    int64_t hidden[CLI_MAX_HIDDEN];
    int n_hidden;
    int64_t epochs;
    int64_t steps;        /* > 0: stop after this many steps, whatever the epochs */
    int64_t batch;
    double lr;
    const char *optim;    /* "sgd", "adam", "adamw" */
    double momentum;      /* SGD only */
    double weight_decay;
    uint64_t seed;
    int64_t threads;      /* 0: every core */
    const char *precision; /* "fp32", "bf16" (autocast) or "fp16" (autocast + scaler) */
    bool no_scaler;        /* fp16 without the grad scaler (to see underflow) */
    double init_scale;     /* the scaler's initial scale */
    int64_t growth_interval;
    int64_t log_every;    /* steps between progress lines */
} train_opts;

void train_opts_default(train_opts *o);
/* Parses the arguments after "train" into o. Returns -1 to go on, or an
 * exit code: 0 after printing --help, EXIT_USAGE after a message on stderr
 * naming the bad option or value. */
int train_parse(int argc, char **argv, train_opts *o);
void train_usage(FILE *f);
/* The learning rate to use: --lr, or the optimizer's default. */
double train_lr(const train_opts *o);

/* ------------------------------------------------------------- data.c */

/* Fashion-MNIST's pixel mean and std over the training set, after /255
 * (as in torchvision examples: Normalize((0.2860,), (0.3530,))). */
#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530

typedef struct {
    amp_tensor *x;       /* [n, features] f32, normalised */
    amp_tensor *y;       /* [n] i64 */
    int64_t n, features, classes;
} dataset;

/* Loads DIR/PREFIX-images-idx3-ubyte(.gz) and the labels beside it,
 * normalising the pixels. On failure prints why (naming the file) on
 * stderr and returns false. */
bool dataset_load(dataset *d, const char *dir, const char *prefix);
void dataset_free(dataset *d);

/* A seeded permutation of 0..n-1, different for each epoch. */
void shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch);

/* Input and label buffers for batches of `size` rows, plus a pair for the
 * smaller last batch; allocated once, refilled for every step. */
typedef struct {
    amp_tensor *x, *y;
    amp_tensor *tail_x, *tail_y;
    int64_t size, tail;
} batcher;

/* False (message printed) when out of memory. */
bool batcher_init(batcher *b, const dataset *d, int64_t size);
void batcher_free(batcher *b);
/* Batches in one pass over d. */
int64_t batcher_count(const batcher *b, const dataset *d);
/* Copies batch k's rows (rows idx[k*size ..], or k*size .. when idx is
 * NULL) into the buffers; *x and *y are the buffers to use. */
void batcher_fill(batcher *b, const dataset *d, const int64_t *idx, int64_t k, amp_tensor **x,
                  amp_tensor **y);

/* ------------------------------------------------------------ train.c */

/* Runs the train command; returns the exit code. */
int train_run(const train_opts *o);

/* ----------------------------------------------------------- policy.c */

/* `ampc policy [--markdown]`: the arguments after "policy". */
int policy_run(int argc, char **argv);

#endif
