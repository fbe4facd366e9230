/*
 * train_opts.h - a run's settings: train's options (train_opt_list.h's
 * rows), which eval and profile pick from and settings.c keeps in each
 * checkpoint; the defaults that depend on the model, and the checks
 * between options.
 *
 * Defines: CLI_MAX_HIDDEN, CLI_MAX_STEPS, PROFILE_DEFAULT_FILE, run_opt
 * (RO_* ids, RO_COUNT), train_opts, train_rows, train_opts_default,
 * opts_set_command, opts_table, opts_count, opts_find, opts_set,
 * opts_resolve, scaler_opts_of, is_gpt.
 */
#ifndef AMPC_TRAIN_OPTS_H
#define AMPC_TRAIN_OPTS_H

#include "ampc.h"
#include "opts.h"

#include <stdint.h>

#define CLI_MAX_HIDDEN 16
/* The most optimizer steps a run takes (--steps, --stop-at, --save-every,
 * the total that --epochs makes, the step a checkpoint resumes from):
 * below 2^40, so with --accum <= 2^16 the micro-batch index step * accum
 * + j stays below 2^56, far from INT64_MAX. */
#define CLI_MAX_STEPS INT64_C(1000000000000)
#define PROFILE_DEFAULT_FILE "ampc-trace.json" /* --profile without a FILE */

/* Each row's id: its place in train's table, and its flag in
 * train_opts.given. */
typedef enum {
#define X(field, ...) RO_##field,
#include "train_opt_list.h"
#undef X
    RO_COUNT
} run_opt;

/* A run's settings. Values left at their "unset" marks (NULL, 0, NAN) are
 * filled per model by opts_resolve. */
typedef struct {
    const char *model;     /* "mlp", "cnn", "gpt" */
    const char *data;      /* IDX dir (mlp, cnn) or text file / dir (gpt) */
    int64_t hidden[CLI_MAX_HIDDEN];
    int n_hidden;
    int64_t layers, heads, width, context, mlp_width;
    double dropout;
    bool checkpoint_activations; /* gpt: amp_checkpoint around each block */
    bool no_bias;          /* gpt: linears and LayerNorms without biases */
    const char *gelu;      /* gpt: "tanh" or "exact" (erf) */
    int64_t epochs;        /* 0: unset */
    int64_t steps;         /* > 0: this many optimizer steps, whatever the epochs */
    int64_t batch;         /* per micro-batch; 0: the model's default */
    int64_t accum;         /* micro-batches per optimizer step */
    const char *optim;     /* "sgd", "adam", "adamw" */
    double lr;             /* NAN: the optimizer's default */
    double momentum;       /* SGD only */
    double weight_decay;   /* NAN: the optimizer's default */
    const char *schedule;  /* "constant", "step", "cosine" */
    int64_t warmup, step_size;
    double gamma, min_lr;
    double clip;           /* > 0: clip the global grad norm to this */
    double beta1, beta2, eps; /* adam / adamw */
    bool decay_all;        /* weight decay on every parameter, not the >= 2-D ones only */
    double warmup_start_factor; /* NAN: 1 / (warmup + 1) */
    uint64_t seed;
    int64_t threads;       /* 0: every core */
    bool flush_denormal;   /* subnormals flushed to zero (amp_set_flush_denormal); AMPC_FLUSH_DENORMAL=1 too */
    const char *device;    /* "cpu", "cuda" */
    const char *precision; /* "fp32", "bf16" (autocast) or "fp16" (autocast + scaler) */
    bool no_scaler;        /* fp16 without the grad scaler (to see underflow) */
    const char *param_dtype; /* "fp32", or "bf16" / "fp16": 16-bit parameters with f32 masters (Apex O2) */
    const char *optim_state; /* "fp32", "bf16" or "bf16-sr" (stochastic rounding): the optimizer's state */
    const char *master_weights; /* "on" (16-bit parameters get f32 masters) or "off" */
    const char *weight_update;  /* "nearest" or "sr": how a bf16 weight without a master is stored */
    double init_scale;
    bool init_scale_auto;  /* --init-scale auto: measured on step 0 (scale_calib.h) */
    int64_t growth_interval;
    /* The grad scaler's other knobs (amp_scaler_opts; 0: the library's
     * default / off) and --static-scale (> 0: the scale fixed there). */
    double growth_factor, backoff_factor, min_scale, max_scale, static_scale;
    int64_t hysteresis;
    int64_t health_every;  /* > 0: the f16 health of the gradients every N steps */
    int64_t max_skips;     /* stop after this many steps skipped in a row; 0: never */
    int64_t val_batches;   /* gpt: validation batches */
    const char *save;      /* checkpoint directory, or NULL */
    int64_t save_every;    /* 0: only at the end */
    int64_t stop_at;       /* > 0: stop after this step (and save), to resume later */
    const char *resume;    /* checkpoint directory to continue from, or NULL */
    const char *log;       /* JSON-lines log file, or NULL */
    const char *log_mode;  /* "append", "replace" an existing log, or NULL (see preflight.c) */
    int64_t log_every;     /* steps between plain progress lines; 0: about 20 a run */
    const char *profile;   /* --profile: the trace file, or NULL (profiler off) */
    int64_t profile_steps, profile_warmup;
    bool dry_run;          /* print the memory estimate and stop */
    bool no_memory_check;  /* run even when the estimate does not fit */
    bool memory;           /* print the memory categories table at the end */
    /* Data-parallel (under mpirun; dist_cli.c): */
    double bucket_mb;      /* DDP's bucket size in MiB (default 25) */
    const char *compress;  /* "none", "bf16", "fp16": DDP's bucket compression */
    int64_t zero;          /* 1: ZeRO stage 1 instead of DDP */
    double dist_timeout;   /* seconds any wait for the other ranks may last; 0: AMPC_DIST_TIMEOUT or 300 */
    const char *tensorboard; /* TensorBoard event files into this directory, or NULL (tensorboard.h) */
    /* gpt on token files (tokens.c) instead of --data's text: */
    const char *data_bin, *val_bin; /* nanoGPT / llm.c uint16 token files, or NULL */
    int64_t vocab;         /* token ids 0 .. vocab-1; 0: what the data says beside --data-bin */
    const char *init_from; /* a checkpoint directory whose weights a new run starts from, or NULL */
    bool detect_anomaly;   /* check every op for inf/NaN (anomaly_cli.c) */
    bool anomaly_continue; /* report each such op once and go on (implies detect_anomaly) */
    const char *fp32_modules; /* "h.0.attn,ln_f": modules kept in f32 under autocast, or NULL */
    const char *policy;    /* an autocast policy file (policy_file.h), or NULL */
    bool given[RO_COUNT];  /* per row of train's table (RO_* ids): set on the command line */
} train_opts;

/* Train's table: row RO_x writes train_opts' member x. */
extern const opt_def train_rows[RO_COUNT];

void train_opts_default(train_opts *o);
/* The command named in opts_resolve's messages (default "ampc train";
 * eval and profile check train's options too). */
void opts_set_command(const char *name);
/* Fills the unset values from the model's defaults and checks the options
 * against each other; -1 or EXIT_USAGE (message printed). */
int opts_resolve(train_opts *o);
/* Sets the process up for run o before any kernel runs: the thread count
 * (--threads) and flushing subnormals (--flush-denormal). -1, or 1 after a
 * message starting with who when this CPU cannot flush. */
int opts_apply_cpu(const train_opts *o, const char *who);
/* AMPC_FLUSH_DENORMAL: unset, empty, 0 or 1, else EXIT_USAGE after a
 * message naming it (the program's check of its environment). */
int opts_env_check(void);
/* The grad scaler's options of run o (--static-scale: min = max = init =
 * S); enabled for fp16 without --no-scaler. */
amp_scaler_opts scaler_opts_of(const train_opts *o);
bool is_gpt(const train_opts *o);

/* Train's table for lookups by name (settings.c reads options by the
 * names a checkpoint keeps): its rows, their count, the row called name
 * (NULL when none is). */
int opts_count(void);
const opt_def *opts_table(void);
const opt_def *opts_find(const char *name);
/* Stores value text v of train's row d into o and marks it given; -1 when
 * fine, else EXIT_USAGE after a message that starts with who. */
int opts_set(const opt_def *d, const char *v, train_opts *o, const char *who);

#endif
