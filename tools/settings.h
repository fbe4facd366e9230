/*
 * settings.h - a run's settings as the JSON each checkpoint keeps
 * (settings.c), and the resume rule that merges them with a command line.
 *
 * Defines: run_info, settings_to_json, settings_from_json,
 * settings_forget, settings_merge, settings_same_value, settings_describe,
 * settings_copy_value.
 */
#ifndef AMPC_SETTINGS_H
#define AMPC_SETTINGS_H

#include "train_opts.h"

/* What a run learns from its data and keeps in its checkpoint, beside the
 * options: the shapes the model was built for and the schedule's place. */
typedef struct {
    int64_t features, channels, height, width, classes; /* mlp / cnn */
    int64_t vocab;                                      /* gpt */
    int64_t sched_step; /* optimizer steps taken (a skipped one is not) */
    int64_t skipped;    /* steps the scaler skipped so far */
    int64_t world_size; /* ranks the run was saved on; 0: not recorded (one) */
    int64_t total_steps; /* the run's optimizer steps in all; 0: not recorded */
    int64_t hysteresis_left; /* older checkpoints: --hysteresis N > 1's overflows left before a backoff; 0: not recorded */
    bool token_ids;      /* gpt on token files (--data-bin): vocab is a count of ids, not characters */
    uint64_t data_bytes, data_hash; /* token_ids: the training file's size and hash (tokens.c) */
    uint64_t policy_hash; /* the --policy file's hash (run_policy.h) the run trained with; 0: none recorded */
    char vocab_hex[513]; /* gpt: the vocabulary's bytes in id order, two hex digits each; "": not recorded */
} run_info;

/* The settings and run info as one JSON object (malloc'd; NULL when out of
 * memory). */
char *settings_to_json(const train_opts *o, const run_info *ri);
/* Parses what settings_to_json wrote into ck (from train_opts_default)
 * and ri; `where` names the file for messages. -1 or 1 (message printed). */
int settings_from_json(const char *text, const char *where, train_opts *ck, run_info *ri);
/* Frees the copies of string values settings_from_json keeps for the
 * options it fills (they live until then); for tests and fuzz targets
 * that read settings many times in one process. */
void settings_forget(void);
/* A resumed run's options: the checkpoint's, with what the command line o
 * gave on top; a given model-shape option that differs is an error. Result
 * in o. -1 or EXIT_USAGE. */
int settings_merge(train_opts *o, const train_opts *ck, const char *where);

/* One option's value (train's row d) in a and b: equal; as typed, into
 * buf; copied from src into dst. */
bool settings_same_value(const opt_def *d, const train_opts *a, const train_opts *b);
void settings_describe(const opt_def *d, const train_opts *o, char *buf, size_t n);
void settings_copy_value(const opt_def *d, train_opts *dst, const train_opts *src);

#endif
