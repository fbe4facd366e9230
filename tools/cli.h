/*
 * cli.h - the ampc program's parts, shared between its files.
 *
 *   ampc.c        main: commands, --help, --version
 *   args.c        the train / eval options: table, parsing, help text,
 *                 defaults per model, the checks between options
 *   settings.c    a run's settings as JSON (kept in each checkpoint) and
 *                 back, and merging them with a resumed run's command line
 *   data.c        Fashion-MNIST and the text corpus in memory; batches
 *                 derived from (seed, step) alone
 *   build.c       the model, optimizer, precision and schedule of a run
 *   checkpoint_cli.c  DIR/checkpoint.safetensors: save, read settings, load
 *   train.c       the train command: the step and the loop
 *   dist_cli.c    one rank of `mpirun -np N ampc train`: start, output,
 *                 agreeing on errors, ending the job
 *   estimate.c    the memory a run will need, from its settings and shapes
 *   memcheck.c    that estimate against the memory available: --dry-run's
 *                 table, the refusal before a run that cannot fit
 *   eval.c        test accuracy / validation loss, and the eval command
 *   generate.c    the generate command: text sampled from a gpt checkpoint
 *   preflight.c   train's checks before it starts: --save takes files,
 *                 --log is not someone else's file
 *   progress.c    the live line on a terminal, plain lines otherwise
 *   diagnose.c    what is not finite when a run cannot train
 *   policy.c      the policy command: the autocast table
 *   log.c         the JSON-lines training log (log.h)
 *   plot*.c       `ampc plot`: the log drawn as SVG (plot.h)
 *
 * Exit codes: 0 done, 1 a run that failed (a missing file, a library
 * error), 2 a bad command line.
 */
#ifndef AMPC_CLI_H
#define AMPC_CLI_H

#include "ampc.h"

#include <limits.h>
#include <stdio.h>

#define CLI_MAX_HIDDEN 16
#define CLI_MAX_OPTS 64
/* The most optimizer steps a run takes (--steps, --stop-at, --save-every,
 * the total that --epochs makes, the step a checkpoint resumes from):
 * below 2^40, so with --accum <= 2^16 the micro-batch index step * accum
 * + j stays below 2^56, far from INT64_MAX. */
#define CLI_MAX_STEPS INT64_C(1000000000000)
#define EXIT_USAGE 2
#define PROFILE_DEFAULT_FILE "ampc-trace.json" /* --profile without a FILE */

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
/* Debian's `fortunes` package: amp_text_load reads the directory as one
 * corpus (its text files, not the .dat indexes). */
#define TEXT_CORPUS "/usr/share/games/fortunes"
#define CHECKPOINT_FILE "checkpoint.safetensors"
/* A buffer for a path option (shorter than PATH_MAX: args.c) with a name
 * inside it appended: DIR/checkpoint.safetensors. */
#define CLI_PATH_MAX (PATH_MAX + 64)

/* ------------------------------------------------------------- args.c */

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
    uint64_t seed;
    int64_t threads;       /* 0: every core */
    const char *device;    /* "cpu", "cuda" */
    const char *precision; /* "fp32", "bf16" (autocast) or "fp16" (autocast + scaler) */
    bool no_scaler;        /* fp16 without the grad scaler (to see underflow) */
    const char *param_dtype; /* "fp32", or "bf16" / "fp16": 16-bit parameters with f32 masters (Apex O2) */
    const char *optim_state; /* "fp32", "bf16" or "bf16-sr" (stochastic rounding): the optimizer's state */
    double init_scale;
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
    bool given[CLI_MAX_OPTS]; /* per option (args.c's table order): set on the command line */
} train_opts;

void train_opts_default(train_opts *o);
/* Parses the arguments after the command into o. Returns -1 to go on, or
 * an exit code: 0 after printing --help, EXIT_USAGE after a message on
 * stderr naming the bad option or value. eval = the eval command's subset
 * (a lone DIR argument is --resume DIR). */
int opts_parse(int argc, char **argv, train_opts *o, bool eval);
/* The command named in opts_parse's messages (default "ampc train"). */
void opts_set_command(const char *name);
void train_usage(FILE *f);
void eval_usage(FILE *f);
/* The eval command's help line for option `name` (without "--"), in eval's
 * words rather than train's; NULL where eval has none of its own. */
const char *eval_option_help(const char *name);
/* Fills the unset values from the model's defaults and checks the options
 * against each other; -1 or EXIT_USAGE (message printed). */
int opts_resolve(train_opts *o);
/* The grad scaler's options of run o (--static-scale: min = max = init =
 * S); enabled for fp16 without --no-scaler. */
amp_scaler_opts scaler_opts_of(const train_opts *o);
bool is_gpt(const train_opts *o);

/* The option table, for settings.c. */
typedef enum { OPT_STR, OPT_INT, OPT_U64, OPT_REAL, OPT_LIST, OPT_FLAG } opt_kind;
typedef enum {
    OC_SETTING, /* saved; on resume, the checkpoint's unless given */
    OC_SHAPE,   /* saved; on resume, a different value is an error */
    OC_RUN,     /* not saved: this invocation's only */
} opt_class;
typedef struct {
    const char *name;
    const char *meta;
    opt_kind kind;
    opt_class cls;
    size_t off;          /* into train_opts */
    double lo, hi;       /* OPT_INT / OPT_REAL / OPT_LIST items: inclusive range */
    const char *choices; /* OPT_STR: "a|b|c", or NULL for any text */
    const char *models;  /* NULL, or the models it applies to, "mlp" / "gpt" */
    bool eval;           /* also an eval option */
    const char *help;
    unsigned fp16;       /* the grad scaler's options: OPT_FP16_* bits, 0 for the others */
} opt_def;
/* opt_def.fp16: an fp16 option (ampc profile refuses it without fp16 in
 * its list), one that needs the grad scaler (refused with bf16, fp32 or
 * --no-scaler; saved only with the scaler), one of the dynamic scaler's
 * (refused with --static-scale). */
enum { OPT_FP16 = 1, OPT_FP16_SCALER = 2, OPT_FP16_DYNAMIC = 4 };
int opts_count(void);
const opt_def *opts_table(void);
const opt_def *opts_find(const char *name);
/* Stores value text v of option d into o (and marks it given); -1 when
 * fine, else EXIT_USAGE after a message that starts with who. */
int opts_set(const opt_def *d, const char *v, train_opts *o, const char *who);

/* --------------------------------------------------------- settings.c */

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

/* ------------------------------------------------------------- data.c */

/* Fashion-MNIST's pixel mean and std over the training set, after /255
 * (as in torchvision examples: Normalize((0.2860,), (0.3530,))). */
#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530

typedef struct {
    amp_tensor *x;       /* [n, features] f32, normalised */
    amp_tensor *y;       /* [n] i64 */
    int64_t n, features, classes;
    int64_t height, width; /* the images' shape (features = height * width) */
    char images[4096];     /* the images' file, for messages */
} dataset;

/* Loads DIR/PREFIX-images-idx3-ubyte(.gz) and the labels beside it,
 * normalising the pixels. On failure prints why (naming the file) on
 * stderr and returns false. */
bool dataset_load(dataset *d, const char *dir, const char *prefix);
void dataset_free(dataset *d);

/* A seeded permutation of 0..n-1, different for each epoch. */
void shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch);
/* A seed for item k of a stream derived from seed (splitmix64). */
uint64_t derive_seed(uint64_t seed, uint64_t stream, uint64_t k);

/* Batch buffers shaped [size, features] (mlp) or [size, 1, h, w] (cnn),
 * allocated once and refilled. */
typedef struct {
    amp_tensor *x, *y;
    amp_tensor *tail_x, *tail_y; /* the smaller last batch of a pass (evaluation) */
    int64_t size, tail;
    int64_t *idx;      /* the current epoch's order (training), padded to a multiple of world */
    int64_t epoch;     /* whose order idx holds; -1: none */
    uint64_t seed;
    int rank, world;   /* training: this rank's shard of world (DistributedSampler) */
    int64_t per_rank;  /* training: the shard's rows per epoch, ceil(n / world) */
} batcher;

bool batcher_init(batcher *b, const dataset *d, int64_t size, bool image, bool with_tail);
/* The same, for a training batcher (no tail) drawing rank's shard of world
 * ranks (batcher_init's is rank 0 of 1). */
bool batcher_init_shard(batcher *b, const dataset *d, int64_t size, bool image, int rank, int world);
void batcher_free(batcher *b);
/* Training: full batches per epoch of this rank's shard (the last partial
 * one is dropped, on every rank alike). */
int64_t batcher_epoch_batches(const batcher *b, const dataset *d);
/* Training micro-batch m of the run (m counts from 0 across epochs): its
 * rows depend on (seed, m, rank, world) only, so a resumed run continues
 * the order. With world ranks, DistributedSampler's: epoch e's permutation
 * of all n rows from (seed, e), the same on every rank, padded to a
 * multiple of world by repeating its first rows; rank r takes positions
 * r, r + world, r + 2 world ...; micro-batch k of the epoch is the k-th
 * run of size of those. One rank: the permutation in order. */
bool batcher_train(batcher *b, const dataset *d, int64_t m, amp_tensor **x, amp_tensor **y);
/* Evaluation: batch k of one in-order pass, the last one smaller. */
int64_t batcher_count(const batcher *b, const dataset *d);
void batcher_fill(batcher *b, const dataset *d, int64_t k, amp_tensor **x, amp_tensor **y);

/* The text corpus and [batch, context] token buffers. */
typedef struct {
    amp_text *text;
    amp_tensor *x, *y;
} text_data;

/* Loads path (file or directory); false (message naming it) on failure.
 * The token buffers x, y are left NULL: data_buffers makes them. */
bool text_load(text_data *t, const char *path, int64_t batch, int64_t context);
void text_free(text_data *t);
/* Micro-batches per "epoch" of each of world ranks: together as many
 * tokens as the training split holds. */
int64_t text_epoch_batches(const text_data *t, int64_t batch, int64_t context, int world);

/* Everything a run reads: the training and test sets (mlp, cnn) or the
 * corpus (gpt), with their batch buffers. */
typedef struct {
    bool gpt;
    dataset train, test;
    batcher tb, eb;
    text_data text;
} run_data;

/* Loads o's data (the training set too when train) and fills ri's input
 * shape, classes and vocabulary from it; -1, or 1 after a message naming
 * the file. */
int data_open(run_data *rd, const train_opts *o, run_info *ri, bool train);
void data_close(run_data *rd);
/* The gpt's [batch, context] token buffers (nothing for mlp and cnn, whose
 * batch buffers data_open makes, cut to the data set): made after the
 * memory check, which counts them, so that a huge --batch x --context is
 * an estimate that does not fit, not a failed allocation. -1, or 1 after
 * a message. */
int data_buffers(run_data *rd, const train_opts *o);
/* Checks that the data fits the checkpoint's model; -1 or 1. */
int data_check(const run_info *have, const run_info *saved, const train_opts *o, const char *where);
/* ri->vocab and ri->vocab_hex from text's vocabulary. */
void vocab_record(const amp_text *text, run_info *ri);
/* The vocabulary of --data (have) against the one the checkpoint recorded
 * (saved; sizes already equal): -1 when they are the same bytes, or when
 * the checkpoint predates the record (a warning on stderr then); 1 after
 * a message naming the first id whose byte differs. */
int vocab_check(const run_info *have, const run_info *saved, const char *data, const char *where,
                const char *who);
/* Micro-batches in one epoch. */
int64_t data_epoch_batches(const run_data *rd, const train_opts *o);

/* ------------------------------------------------------------ build.c */

/* Everything a step needs. */
typedef struct {
    amp_module *model;
    amp_optim *opt;
    amp_scaler *scaler;   /* always present; disabled unless fp16 with scaler */
    bool autocast;
    amp_dtype dtype;      /* the autocast dtype */
    amp_sched sched;
    amp_tensor **params;
    int n_params;
    int64_t n_weights;    /* parameter elements */
} trainer;

/* Seeds the generator and builds the run's model (for ri's shapes),
 * optimizer, scaler and schedule (total optimizer steps for cosine);
 * false (message printed) on failure. */
bool trainer_build(trainer *t, const train_opts *o, const run_info *ri, int64_t total_steps);
void trainer_free(trainer *t);
/* "cnn 784-...-10" style description into buf. */
const char *model_describe(const train_opts *o, const run_info *ri, char *buf, size_t n);

/* --------------------------------------------------- checkpoint_cli.c */

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

/* ------------------------------------------------------------- eval.c */

/* Share of d's images whose argmax logit is their label; -1 (error set)
 * on failure. */
double eval_accuracy(trainer *t, const dataset *d, batcher *b);
/* Mean cross-entropy over o->val_batches validation batches of the text,
 * drawn from seed `windows` (0: the windows train's closing evaluation
 * measures, whatever the run's seed); NAN (error set) on failure. */
double eval_text_loss(trainer *t, const train_opts *o, text_data *td, uint64_t windows);
/* `ampc eval`: the arguments after "eval". */
int eval_run(int argc, char **argv);

/* --------------------------------------------------------- progress.c */

typedef struct {
    bool live;          /* stdout is a terminal: a \r status line */
    const char *unit;   /* "samples" or "tokens" */
    int64_t per_step;   /* samples or tokens per optimizer step */
    int64_t first, total, every;
    double t_start, t_window, t_live;
    double loss_sum;
    int64_t loss_n, steps_window;
    char health[320];   /* --health-every: the last measurement, shown on the next plain line */
} progress;

void progress_begin(progress *p, const train_opts *o, int64_t first_step, int64_t total,
                    int64_t per_step, bool tokens);
void progress_step(progress *p, int64_t step, double loss, const trainer *t, int64_t skipped);
/* Clears the live line (before other output). */
void progress_clear(progress *p);
/* --health-every: the f16 health measured at step (at_scale NULL without
 * the scaler), shown on the next plain progress line. */
void progress_health(progress *p, int64_t step, double scale, const amp_f16_health *at_scale,
                     const amp_f16_health *unscaled);
double now_s(void);

/* ---------------------------------------------------- profile_train.c */

/* `ampc train --profile`: which steps are profiled, and the profiler
 * around them. */
typedef struct {
    const train_opts *o;
    int64_t start, end; /* steps [start, end) profiled; none when o->profile is NULL */
    bool on;
} profile_window;
/* --profile's trace file can be written (checked before anything loads:
 * a file made and removed beside it). -1 or 1 (message names the path). */
int profile_preflight(const train_opts *o);
/* The window of a run from step first to stop: the steps after the
 * warm-up. -1, or EXIT_USAGE when the warm-up leaves none (message). */
int profile_window_init(profile_window *w, const train_opts *o, int64_t first, int64_t stop);
/* Around train step `step`: start the profiler at the window's start;
 * mark the step, and at the window's end stop, print the table and the
 * verdict (clearing the progress line) and write the trace. A trace that
 * cannot be written is a warning: training goes on. */
void profile_step_begin(profile_window *w, int64_t step);
void profile_step_end(profile_window *w, int64_t step, progress *pg);
/* A run that stops inside the window: the profiler off, nothing printed. */
void profile_abort(profile_window *w);
/* `ampc profile`: the arguments after "profile". */
int profile_main(int argc, char **argv);

/* --------------------------------------------------------- diagnose.c */

/* --max-skips' default. Each skip halves the scale (backoff 0.5), so 32 in
 * a row take the default 65536 = 2^16 down to 2^-16: an fp16 gradient has
 * overflowed at every scale from the start to where every gradient below
 * 1 flushes to zero (f16's smallest subnormal is 2^-24). An overflow the
 * scaler can fix is fixed in fewer (PyTorch runs skip a handful of steps
 * at the start); a run still skipping holds inf/NaN at any scale. */
#define DEFAULT_MAX_SKIPS 32

/* train.c's micro-batch m of the run, on the model's device. */
typedef bool (*batch_fn)(void *ctx, int64_t m, amp_tensor **x, amp_tensor **y);
/* One micro-batch's loss as a training step computes it: the forward and
 * cross-entropy inside autocast when the run has it (on dev), the gpt's
 * [B, T, V] logits as one row per position, divided by --accum. NULL on
 * error (amp_last_error says why). diagnose_step re-runs a step with it. */
amp_tensor *micro_batch_loss(const trainer *t, const train_opts *o, const run_info *ri, bool gpt, amp_device dev,
                             amp_tensor *x, amp_tensor *y);
/* Inf/NaN values in the inputs of steps first..last (0-based), of *total;
 * -1 (error set) on failure. */
int64_t count_bad_inputs(const train_opts *o, int64_t first, int64_t last, batch_fn fn, void *ctx, int64_t *total);
/* Re-runs step `step`'s forward and backward (the scaler skipped it, so
 * nothing changed since) and says on stderr what is not finite: the
 * weights (which tensor), each micro-batch's inputs (how many values), its
 * loss, the first parameter whose gradient is not (name, shape, how many),
 * then a hint. Leaves the gradients zeroed. */
void diagnose_step(trainer *t, const train_opts *o, const run_info *ri, bool gpt, int64_t step, batch_fn fn,
                   void *ctx);

/* ------------------------------------------------------------ train.c */

/* `ampc train`: the arguments after "train". */
int train_main(int argc, char **argv);
/* `ampc profile`: o's run on rd's data (no checkpoint, log or evaluation)
 * for o->profile_warmup + o->profile_steps optimizer steps, the last
 * profile_steps of them profiled; the profiler's results stay readable
 * (amp_profiler_summary ...). -1 or an exit code (message printed). */
int train_profile_run(const train_opts *o, run_data *rd, run_info *ri);
/* --device cuda without a usable GPU: the clear error naming the device and
 * the library's reason; -1 for cpu or an available GPU, else 1 after it. */
int device_check(const train_opts *o, const char *who);

/* --------------------------------------------------------- generate.c */

/* `ampc generate DIR`: the arguments after "generate". */
int generate_main(int argc, char **argv);
/* generate's option parsing alone (nothing read): -1 to go on, or the exit
 * code after --help (0) or a message naming the bad option (EXIT_USAGE). */
int generate_parse(int argc, char **argv);

/* --------------------------------------------------------- dist_cli.c */

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

/* -------------------------------------------------------- preflight.c */

/* The checks before a run loads anything: --log (and --log-mode) then
 * --save. -1, or 1 / EXIT_USAGE after a message naming the path. */
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

/* --------------------------------------------------------- estimate.c */

/* The estimate's categories (estimate.c's head comment says what each
 * holds). */
typedef enum {
    MEM_DATA, MEM_PARAMS, MEM_GRADS, MEM_OPTIM, MEM_CASTS, MEM_ACTS, MEM_ACT_GRADS, MEM_WORK, MEM_PROGRAM,
    MEM_CATS
} mem_cat;

/* How far the estimate may be from the measured peak, either way (tests/
 * test_cli_memory.c holds it to this; memcheck.c refuses a run whose
 * total does not fit, and warns when total * (1 - MEM_TOLERANCE) does not). */
#define MEM_TOLERANCE 0.10

typedef struct {
    uint64_t host[MEM_CATS]; /* bytes per category, host memory */
    uint64_t dev[MEM_CATS];  /* --device cuda: on the GPU */
    uint64_t host_total, dev_total;
    uint64_t tracked;      /* of host_total, what amp_memory_get_stats counts (the 'peak memory' line) */
    uint64_t tracked_data; /* of that, the data set's tensors */
    int64_t params;        /* parameter elements */
    bool eval_peak;        /* the peak is in the evaluation pass (a batch of eval_batch), not a training step */
    int64_t eval_batch;
} mem_estimate;

/* The peak of a run of o on rd's data (shapes in ri), with `threads`
 * kernel threads; no model is built. host[MEM_PROGRAM] is left 0: it is
 * measured (memcheck.c). */
void mem_estimate_run(const train_opts *o, const run_info *ri, const run_data *rd, int threads, mem_estimate *e);
const char *mem_cat_name(mem_cat c);
/* Parameter elements of o's model. */
int64_t mem_param_count(const train_opts *o, const run_info *ri);
/* The bytes the caching allocator takes for a request of n (base/memory.c's
 * size classes). */
uint64_t mem_block(uint64_t n);

/* --------------------------------------------------------- memcheck.c */

/* What the whole process may hold, and where that number came from. */
typedef struct {
    bool known;
    uint64_t bytes;
    char source[4096];
} mem_budget;

/* The smallest of AMPC_MEMORY_LIMIT, the cgroup (v2, v1) limits and
 * MemAvailable, each made a budget for the whole process. */
void mem_budget_get(mem_budget *b);
/* Takes the cgroup limits (v2, then v1's memory controller) into b, for
 * a process with rss resident bytes whose mountinfo and cgroup files are
 * in proc ("/proc/self"; another directory in tests). */
void mem_budget_cgroups(mem_budget *b, const char *proc, uint64_t rss);
/* The cuda device's: its free memory (cudaMemGetInfo) and what ampc's
 * cache holds; not known without a GPU. */
void mem_budget_device(mem_budget *b);
/* The environment variables of the memory check: AMPC_MEMORY_LIMIT a
 * number of bytes, AMPC_NO_MEMORY_CHECK 0 or 1 (unset or empty: the
 * defaults). -1, or EXIT_USAGE after a message naming the variable. */
int mem_env_check(void);
/* Bytes in "600000000", "600M", "4G", "512KiB"; false when not. */
bool mem_parse_bytes(const char *s, uint64_t *out);
/* This process's resident memory (VmRSS). */
uint64_t mem_rss(void);
/* After the data is loaded, before the model: --dry-run prints the
 * estimate and returns 0; otherwise -1 to go on, or 1 after a message
 * when the run cannot fit. */
int mem_check(const train_opts *o, const run_info *ri, const run_data *rd, bool dry_run);

/* ----------------------------------------------------------- policy.c */

/* `ampc policy [--markdown]`: the arguments after "policy". */
int policy_run(int argc, char **argv);

#endif
