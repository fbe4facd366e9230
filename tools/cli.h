/*
 * cli.h - the ampc program's commands: each one's entry point, its
 * options (the table its file declares, opts.h) and its parsing alone
 * (for tests and fuzzers). The program's files, and the header of each
 * part's shared names:
 *
 *   ampc.c        main: commands, --help, --version
 *   opts.c        option tables: parsing, value checks, --help (opts.h)
 *   train_opts.c  train's options: its table (train_opt_list.h), --help,
 *                 defaults per model, the checks between options; eval
 *                 and profile pick from it (train_opts.h)
 *   settings.c    a run's settings as JSON (kept in each checkpoint) and
 *                 back, and merging them with a resumed run's command line
 *                 (settings.h)
 *   data.c        Fashion-MNIST and the text corpus in memory; batches
 *                 derived from (seed, step) alone (data.h)
 *   build.c       the model, optimizer, precision and schedule of a run
 *                 (trainer.h)
 *   checkpoint_cli.c  DIR/checkpoint.safetensors: save, read settings, load
 *                 (checkpoint_cli.h)
 *   train.c       the train command: the step and the loop (train.h)
 *   dist_cli.c    one rank of `mpirun -np N ampc train`: start, output,
 *                 agreeing on errors, ending the job (dist_cli.h)
 *   estimate.c    the memory a run will need, from its settings and shapes
 *                 (estimate.h)
 *   memcheck.c    that estimate against the memory available: --dry-run's
 *                 table, the refusal before a run that cannot fit
 *                 (memcheck.h)
 *   eval.c        test accuracy / validation loss, and the eval command
 *                 (eval.h)
 *   generate.c    the generate command: text sampled from a gpt checkpoint
 *   preflight.c   train's checks before it starts: --save takes files,
 *                 --log is not someone else's file (preflight.h)
 *   progress.c    the live line on a terminal, plain lines otherwise
 *                 (progress.h)
 *   diagnose.c    what is not finite when a run cannot train (diagnose.h)
 *   profile_train.c  train --profile: the steps profiled (profile_train.h)
 *   profile_cmd.c the profile command: precisions side by side
 *   policy.c      the policy command: the autocast table
 *   policy_search.c  `ampc policy search`: the fastest policy within a
 *                 tolerance (policy_search.h)
 *   policy_file.c the autocast policy file: read, write, apply
 *                 (policy_file.h); run_policy.c a run's --policy and
 *                 --fp32-modules (run_policy.h)
 *   log.c         the JSON-lines training log (log.h)
 *   export*.c     the export command: a checkpoint in another program's
 *                 format (a table of formats, export.h; hf: hf_write.c;
 *                 gguf: export_gguf.c, gguf.c writes GGUF files: gguf.h)
 *   import_hf.c   the import command: a Hugging Face GPT-2 directory as a
 *                 checkpoint (hf.c reads it; hf.h)
 *   plot*.c       `ampc plot`: the log drawn as SVG (plot.h)
 *   audit*.c      `ampc audit`: a run against an fp32 shadow, per op call
 *                 site and parameter (audit.h collects, audit_cmd.c prints)
 *   tensorboard.c train --tensorboard: TensorBoard event files (tensorboard.h),
 *                 their bytes encoded by tb_encode.c (tb_encode.h)
 *
 * Exit codes: 0 done, 1 a run that failed (a missing file, a library
 * error), 2 (EXIT_USAGE) a bad command line.
 *
 * Defines: train_main, train_options, train_parse, eval_run, eval_options,
 * eval_parse, generate_main, generate_options, generate_parse,
 * profile_main, profile_options, profile_parse, policy_run,
 * policy_options, convert_args, convert_positional, convert_parse,
 * export_main, export_options, export_parse, import_main, import_options,
 * audit_main, audit_options, audit_parse.
 * (plot's: plot.h.)
 */
#ifndef AMPC_CLI_H
#define AMPC_CLI_H

#include "opts.h"
#include "train_opts.h"

/* Each command's entry point takes the arguments after its name and
 * returns the exit code; its parse returns -1 to go on, or the exit code
 * after --help (0) or a message naming the bad option (EXIT_USAGE). */

/* `ampc train` (train.c; its table and parse: train_opts.c). */
int train_main(int argc, char **argv);
extern const opt_cmd train_options;
int train_parse(int argc, char **argv, train_opts *o);

/* `ampc eval DIR` (eval.c): train's rows it takes, in its own words; a
 * lone DIR argument is --resume DIR. */
int eval_run(int argc, char **argv);
extern const opt_cmd eval_options;
int eval_parse(int argc, char **argv, train_opts *o);

/* `ampc generate DIR` (generate.c). */
int generate_main(int argc, char **argv);
extern const opt_cmd generate_options;
int generate_parse(int argc, char **argv);

/* `ampc profile` (profile_cmd.c): its own rows, then every train option
 * (some of them refused after parsing). */
int profile_main(int argc, char **argv);
extern const opt_cmd profile_options;
int profile_parse(int argc, char **argv);
/* `ampc audit` (audit_cmd.c): its own rows, then train's (audit.h). */
int audit_main(int argc, char **argv);
extern const opt_cmd audit_options;
int audit_parse(int argc, char **argv);

/* `ampc policy [--markdown]` (policy.c). */
int policy_run(int argc, char **argv);
extern const opt_cmd policy_options;

/* `ampc export [--format F] DIR OUT` (export.c) and `ampc import
 * [--format hf] HF_DIR OUT` (import_hf.c): their arguments; the two
 * directories (the first argument that is not an option, then the
 * second), and a command line parsed (a message naming `what` when a
 * directory is missing). */
typedef struct {
    const char *format, *dtype, *dir, *out;
    const char *data, *name; /* export's --data and --name (export.h) */
} convert_args;
int convert_positional(const opt_cmd *c, const char *arg, void *ctx);
int convert_parse(const opt_cmd *c, int argc, char **argv, convert_args *a, const char *what);

int export_main(int argc, char **argv);
extern const opt_cmd export_options;
int export_parse(int argc, char **argv); /* the command line checked only (fuzz_args) */

/* `ampc import [--format hf] HF_DIR OUT` (import_hf.c). */
int import_main(int argc, char **argv);
extern const opt_cmd import_options;

#endif
