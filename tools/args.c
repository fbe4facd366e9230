/*
 * args.c - the train and eval commands' options: one table gives each
 * option's name, kind, range, class (saved in checkpoints or not), the
 * models it applies to and its help line; the parser, --help and the
 * checkpoint settings (settings.c) all read it.
 *
 * Options take "--name value" or "--name=value". Every value is checked in
 * full (no trailing characters, no overflow, in range); a bad one is
 * reported with the option's name and the value as typed, exit code 2.
 * Defaults that depend on the model (data, batch, lr, length) are filled
 * by opts_resolve after parsing (and after merging a resumed checkpoint's
 * settings), which also refuses options that do not apply to the run.
 */
#include "cli.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define OFF(f) offsetof(train_opts, f)
/* name, meta, kind, class, field, lo, hi, choices, models, eval, help */
#define O(n, m, k, c, f, lo, hi, ch, mo, ev, h) {n, m, k, c, OFF(f), lo, hi, ch, mo, ev, h, 0}
/* The grad scaler's options, with their OPT_FP16_* bits (cli.h) last. */
#define OS(n, m, k, c, f, lo, hi, ch, mo, ev, h, sc) {n, m, k, c, OFF(f), lo, hi, ch, mo, ev, h, sc}
#define SC_SCALER (OPT_FP16 | OPT_FP16_SCALER)
#define SC_DYNAMIC (OPT_FP16 | OPT_FP16_SCALER | OPT_FP16_DYNAMIC)

static const opt_def opts[] = {
    O("model", "NAME", OPT_STR, OC_SHAPE, model, 0, 0, "mlp|cnn|gpt", NULL, false,
      "mlp or cnn on Fashion-MNIST, gpt on a text corpus (default cnn)"),
    O("data", "PATH", OPT_STR, OC_SETTING, data, 0, 0, NULL, NULL, true,
      "Fashion-MNIST IDX directory (mlp, cnn), text file or directory (gpt)"),
    O("hidden", "N,N,..", OPT_LIST, OC_SHAPE, hidden, 1, 1 << 20, NULL, "mlp", false,
      "mlp: hidden layer widths, \"none\" for a linear model (default 256,128)"),
    O("layers", "N", OPT_INT, OC_SHAPE, layers, 1, 1024, NULL, "gpt", false, "gpt: transformer blocks (default 2)"),
    O("heads", "N", OPT_INT, OC_SHAPE, heads, 1, 1024, NULL, "gpt", false,
      "gpt: attention heads, dividing --width (default 4)"),
    O("width", "N", OPT_INT, OC_SHAPE, width, 1, 1 << 16, NULL, "gpt", false, "gpt: embedding width (default 128)"),
    O("context", "N", OPT_INT, OC_SHAPE, context, 1, 1 << 16, NULL, "gpt", false,
      "gpt: tokens per sequence (default 64)"),
    O("mlp-width", "N", OPT_INT, OC_SHAPE, mlp_width, 1, 1 << 20, NULL, "gpt", false,
      "gpt: each block's MLP width (default 4 * width)"),
    O("dropout", "P", OPT_REAL, OC_SETTING, dropout, 0, 0.95, NULL, "gpt", false, "gpt: dropout probability (default 0)"),
    O("checkpoint-activations", "", OPT_FLAG, OC_SETTING, checkpoint_activations, 0, 0, NULL, "gpt", false,
      "gpt: keep only each block's input and recompute the block in backward (less memory, ~1/3 more time)"),

    O("epochs", "N", OPT_INT, OC_SETTING, epochs, 1, 1e6, NULL, NULL, false,
      "passes over the training set (default 3; gpt: see --steps)"),
    O("steps", "N", OPT_INT, OC_SETTING, steps, 1, (double)CLI_MAX_STEPS, NULL, NULL, false,
      "optimizer steps, instead of --epochs (default: gpt 1000)"),
    O("batch", "B", OPT_INT, OC_SETTING, batch, 1, 1 << 20, NULL, NULL, true,
      "examples (gpt: sequences) per micro-batch (default: cnn 64, mlp 128, gpt 32)"),
    O("accum", "N", OPT_INT, OC_SETTING, accum, 1, 1 << 16, NULL, NULL, false,
      "micro-batches per optimizer step (gradient accumulation; default 1)"),
    O("optim", "NAME", OPT_STR, OC_SHAPE, optim, 0, 0, "sgd|adam|adamw", NULL, false,
      "optimizer: sgd, adam or adamw (default adam)"),
    O("lr", "X", OPT_REAL, OC_SETTING, lr, 1e-12, 1e3, NULL, NULL, false,
      "learning rate (default: sgd 0.05; adam/adamw: cnn 0.003, gpt 0.002, mlp 0.001)"),
    O("momentum", "X", OPT_REAL, OC_SETTING, momentum, 0, 0.9999, NULL, NULL, false, "sgd: momentum (default 0.9)"),
    O("weight-decay", "X", OPT_REAL, OC_SETTING, weight_decay, 0, 10, NULL, NULL, false,
      "weight decay (default 0; adamw 0.01)"),
    O("schedule", "NAME", OPT_STR, OC_SETTING, schedule, 0, 0, "constant|step|cosine", NULL, false,
      "lr schedule: constant, step or cosine (default: mlp constant, else cosine)"),
    O("warmup", "N", OPT_INT, OC_SETTING, warmup, 0, 1e12, NULL, NULL, false,
      "linear lr warm-up over the first N steps (default: gpt 100 or steps/10, else 0)"),
    O("step-size", "N", OPT_INT, OC_SETTING, step_size, 1, 1e12, NULL, NULL, false,
      "step schedule: multiply the lr by --gamma every N steps (default 1000)"),
    O("gamma", "X", OPT_REAL, OC_SETTING, gamma, 0, 1, NULL, NULL, false, "step schedule: the factor (default 0.1)"),
    O("min-lr", "X", OPT_REAL, OC_SETTING, min_lr, 0, 1e3, NULL, NULL, false,
      "cosine schedule: the final lr (default 0)"),
    O("clip", "X", OPT_REAL, OC_SETTING, clip, 1e-12, 1e12, NULL, NULL, false,
      "clip the global gradient norm to X (default: measured, not clipped)"),
    O("seed", "S", OPT_U64, OC_SETTING, seed, 0, 0, NULL, NULL, true,
      "seed for the weights, the data order and dropout (default 0)"),
    O("threads", "T", OPT_INT, OC_RUN, threads, 0, 1024, NULL, NULL, true, "kernel threads, 0 for every core (default 0)"),
    O("device", "NAME", OPT_STR, OC_RUN, device, 0, 0, "cpu|cuda", NULL, true, "cpu or cuda (default cpu)"),

    O("precision", "P", OPT_STR, OC_SETTING, precision, 0, 0, "fp32|bf16|fp16", NULL, true,
      "fp32, bf16 autocast, or fp16 autocast with the grad scaler (default bf16; fp16 with --device cuda)"),
    OS("no-scaler", "", OPT_FLAG, OC_SETTING, no_scaler, 0, 0, NULL, NULL, false, "fp16 without the grad scaler",
       OPT_FP16),
    O("param-dtype", "DT", OPT_STR, OC_SHAPE, param_dtype, 0, 0, "fp32|bf16|fp16", NULL, false,
      "bf16 / fp16 (= --precision): weights in 16 bits, norms and embeddings fp32, fp32 masters in the "
      "optimizer (Apex O2; default fp32)"),
    O("optim-state", "DT", OPT_STR, OC_SHAPE, optim_state, 0, 0, "fp32|bf16|bf16-sr", NULL, false,
      "optimizer state (Adam's moments, SGD's momentum): fp32, bf16, or bf16-sr (stochastic rounding); "
      "updated in fp32 (default fp32)"),
    OS("init-scale", "X", OPT_REAL, OC_SETTING, init_scale, 1e-30, 1e30, NULL, NULL, false,
      "the grad scaler's initial scale (default 65536)", SC_DYNAMIC),
    OS("growth-interval", "N", OPT_INT, OC_SETTING, growth_interval, 1, 1e12, NULL, NULL, false,
      "clean steps before the scale grows (default 2000)", SC_DYNAMIC),
    OS("growth-factor", "X", OPT_REAL, OC_SETTING, growth_factor, 1, 1e6, NULL, NULL, false,
      "the scale is multiplied by X (> 1) after --growth-interval clean steps (default 2)", SC_DYNAMIC),
    OS("backoff-factor", "X", OPT_REAL, OC_SETTING, backoff_factor, 0, 1, NULL, NULL, false,
      "the scale is multiplied by X (between 0 and 1) at a step with inf/NaN gradients (default 0.5)", SC_DYNAMIC),
    OS("hysteresis", "N", OPT_INT, OC_SETTING, hysteresis, 1, 1e6, NULL, NULL, false,
      "the first N-1 steps with inf/NaN gradients since the scale last grew keep the scale; the N-th "
      "and each one after it back off, until the scale grows (Megatron-LM; default 1: every one backs off); "
      "every such step is skipped", SC_DYNAMIC),
    OS("min-scale", "X", OPT_REAL, OC_SETTING, min_scale, 1e-30, 1e30, NULL, NULL, false,
      "the scale never backs off below X (0: no bound, the default)", SC_DYNAMIC),
    OS("max-scale", "X", OPT_REAL, OC_SETTING, max_scale, 1e-30, 1e30, NULL, NULL, false,
      "the scale never grows above X (0: no bound, the default)", SC_DYNAMIC),
    OS("static-scale", "S", OPT_REAL, OC_SETTING, static_scale, 1e-30, 1e30, NULL, NULL, false,
      "a fixed scale S: never grows or backs off; a step with inf/NaN gradients is still skipped "
      "(not with the dynamic scaler's options; 0: dynamic, the default)", SC_SCALER),
    O("health-every", "N", OPT_INT, OC_RUN, health_every, 1, 1e12, NULL, NULL, false,
      "every N steps, the f16 health of the gradients in the log and the progress line: the share "
      "of elements that f16 flushes to zero, makes subnormal, or overflows, at the scale and unscaled "
      "(default: off)"),
    OS("max-skips", "N", OPT_INT, OC_SETTING, max_skips, 0, 1e12, NULL, NULL, false,
      "stop with an error after N steps skipped in a row (inf/NaN at every scale), 0: never (default 32)", SC_SCALER),

    O("val-batches", "N", OPT_INT, OC_SETTING, val_batches, 1, 1e6, NULL, "gpt", true,
      "gpt: validation batches for the val loss (default 20)"),
    O("save", "DIR", OPT_STR, OC_RUN, save, 0, 0, NULL, NULL, false,
      "save DIR/" CHECKPOINT_FILE " every --save-every steps and at the end"),
    O("save-every", "N", OPT_INT, OC_RUN, save_every, 0, (double)CLI_MAX_STEPS, NULL, NULL, false,
      "steps between checkpoints, 0 for the end only (default 1000)"),
    O("stop-at", "N", OPT_INT, OC_RUN, stop_at, 1, (double)CLI_MAX_STEPS, NULL, NULL, false,
      "stop after step N and save, to --resume later (the lr schedule spans the run)"),
    O("resume", "DIR", OPT_STR, OC_RUN, resume, 0, 0, NULL, NULL, true,
      "continue the run saved in DIR (its settings; saves there unless --save)"),
    O("log", "FILE", OPT_STR, OC_RUN, log, 0, 0, NULL, NULL, false,
      "write one JSON line per optimizer step to FILE (see ampc plot); never over a non-log file"),
    O("log-mode", "MODE", OPT_STR, OC_RUN, log_mode, 0, 0, "append|replace", NULL, false,
      "an existing log at --log: append or replace (default: refused; append on --resume)"),
    O("log-every", "N", OPT_INT, OC_RUN, log_every, 1, 1e12, NULL, NULL, false,
      "steps between progress lines (default: about 20 a run)"),
    O("profile", "[FILE]", OPT_STR, OC_RUN, profile, 0, 0, NULL, NULL, false,
      "after the warm-up, profile steps: print the op table and the verdict, write the trace to FILE "
      "(default " PROFILE_DEFAULT_FILE ", for ui.perfetto.dev; docs/profiling.md)"),
    O("profile-steps", "N", OPT_INT, OC_RUN, profile_steps, 1, 1e6, NULL, NULL, false,
      "--profile: steps profiled (default 5)"),
    O("profile-warmup", "N", OPT_INT, OC_RUN, profile_warmup, 0, 1e6, NULL, NULL, false,
      "--profile: steps run before profiling starts, after the start or resume (default 2)"),
    O("dry-run", "", OPT_FLAG, OC_RUN, dry_run, 0, 0, NULL, NULL, false,
      "print the memory the run needs (estimated) and what is available, and stop"),
    O("no-memory-check", "", OPT_FLAG, OC_RUN, no_memory_check, 0, 0, NULL, NULL, false,
      "run even when the memory estimate does not fit (also AMPC_NO_MEMORY_CHECK=1)"),
    O("memory", "", OPT_FLAG, OC_RUN, memory, 0, 0, NULL, NULL, false,
      "at the end, print the memory per category (parameters, gradients, optimizer state, activations, "
      "cast cache, temporaries, workspace, data) and per phase, on each device"),

    O("bucket-mb", "X", OPT_REAL, OC_RUN, bucket_mb, 1e-3, 1e6, NULL, NULL, false,
      "under mpirun: gradients all-reduced in buckets of X MiB during backward (default 25)"),
    O("compress", "DT", OPT_STR, OC_RUN, compress, 0, 0, "none|bf16|fp16", NULL, false,
      "under mpirun: send the gradient buckets rounded to bf16 / fp16, summed in fp32 (default none)"),
    O("zero", "N", OPT_INT, OC_RUN, zero, 0, 1, NULL, NULL, false,
      "under mpirun: 1 shards the optimizer state over the ranks (ZeRO stage 1; default 0: DDP)"),
    O("dist-timeout", "S", OPT_REAL, OC_RUN, dist_timeout, 1e-3, 1e7, NULL, NULL, false,
      "under mpirun: seconds a rank waits for the others before it ends the job (default "
      "AMPC_DIST_TIMEOUT or 300)"),
};
#define N_OPTS (int)(sizeof opts / sizeof opts[0])
_Static_assert(N_OPTS <= CLI_MAX_OPTS, "raise CLI_MAX_OPTS");

int opts_count(void) { return N_OPTS; }
const opt_def *opts_table(void) { return opts; }

const opt_def *opts_find(const char *name)
{
    for (int k = 0; k < N_OPTS; k++)
        if (strcmp(opts[k].name, name) == 0)
            return &opts[k];
    return NULL;
}

static int opt_index(const char *name) { return (int)(opts_find(name) - opts); }

/* The command whose options are parsed, for messages ("ampc profile"
 * and "ampc eval" check train's options too). */
static const char *opts_command = "ampc train";
void opts_set_command(const char *name) { opts_command = name; }

/* A message about the options on stderr, in the command's name. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", opts_command);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

void train_opts_default(train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = "cnn";
    o->hidden[0] = 256;
    o->hidden[1] = 128;
    o->n_hidden = 2;
    o->layers = 2;
    o->heads = 4;
    o->width = 128;
    o->context = 64;
    o->accum = 1;
    o->optim = "adam";
    o->lr = NAN;
    o->momentum = 0.9;
    o->weight_decay = NAN;
    o->warmup = -1; /* unset */
    o->step_size = 1000;
    o->gamma = 0.1;
    o->device = "cpu";
    o->precision = "bf16";
    o->param_dtype = "fp32";
    o->optim_state = "fp32";
    o->init_scale = 65536.0;
    o->growth_interval = 2000;
    o->growth_factor = 2.0;
    o->backoff_factor = 0.5;
    o->hysteresis = 1;
    o->max_skips = DEFAULT_MAX_SKIPS;
    o->val_batches = 20;
    o->save_every = 1000;
    o->profile_steps = 5;
    o->profile_warmup = 2;
    o->bucket_mb = 25;
    o->compress = "none";
}

bool is_gpt(const train_opts *o) { return strcmp(o->model, "gpt") == 0; }

static void usage_lines(FILE *f, bool eval)
{
    for (int i = 0; i < N_OPTS; i++) {
        if (eval && !opts[i].eval)
            continue;
        char left[40];
        snprintf(left, sizeof left, "--%s %s", opts[i].name, opts[i].meta);
        const char *own = eval ? eval_option_help(opts[i].name) : NULL; /* eval's words (eval.c) */
        fprintf(f, "  %-22s %s\n", left, own ? own : opts[i].help);
    }
    fprintf(f, "  %-22s %s\n", "-h, --help", "this text");
}

void train_usage(FILE *f)
{
    fprintf(f,
            "usage: ampc train [options]\n\n"
            "Trains a model and evaluates it: mlp / cnn on Fashion-MNIST (the last line\n"
            "reads \"test_accuracy 0.XXXX\"), gpt on a text corpus (validation loss and\n"
            "perplexity). The default is a CNN in bf16 autocast, about a minute on two cores.\n\n"
            "One optimizer step runs --accum micro-batches of --batch examples (each\n"
            "loss divided by --accum), then unscales, measures (--clip: clips) the\n"
            "gradient norm and steps through the grad scaler. A step the scaler skipped\n"
            "(inf/NaN gradients) does not advance the lr schedule: the schedule holds.\n"
            "Each step's data depends on (--seed, step) alone, so --resume continues the\n"
            "run exactly where it stopped. On resume, settings come from the checkpoint;\n"
            "options given override them, but not the model's shape or the optimizer.\n"
            "Under mpirun -np N each process is one rank of a data-parallel run: its shard\n"
            "of the data, gradients averaged over the ranks (docs/distributed.md).\n\n"
            "options:\n");
    usage_lines(f, false);
    fprintf(f, "\n--data defaults to %s (Debian's dataset-fashion-mnist) for mlp and cnn,\n"
               "and to %s (Debian's fortunes, one corpus of its files) for gpt.\n",
            FMNIST_DIR, TEXT_CORPUS);
    fprintf(f, "\nBefore it builds the model, a run estimates its peak memory and stops (exit 1)\n"
               "when that cannot fit in the memory available: the cgroup's limit, MemAvailable,\n"
               "or AMPC_MEMORY_LIMIT=BYTES (600M, 4G) when set. --dry-run prints the estimate.\n");
}

void eval_usage(FILE *f)
{
    fprintf(f, "usage: ampc eval DIR [options]   (or ampc eval --resume DIR)\n\n"
               "Loads DIR/" CHECKPOINT_FILE " (or DIR itself when it is a .safetensors file) and\n"
               "measures the model with its saved settings:\n"
               "test accuracy (mlp, cnn; last line \"test_accuracy 0.XXXX\") or validation\n"
               "loss and perplexity (gpt).\n\noptions:\n");
    usage_lines(f, true);
}

/* Prints "ampc CMD: --name: ..." and returns EXIT_USAGE. */
static int bad(const char *who, const opt_def *d, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(const char *who, const opt_def *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: --%s: ", who, d->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see %s --help)\n", who);
    va_end(ap);
    return EXIT_USAGE;
}

/* The grad scaler's bounds and fixed scale: 0 is "off" (their default,
 * and how a resumed run drops the checkpoint's), else in the range. */
static bool zero_is_off(const opt_def *d)
{
    return strcmp(d->name, "min-scale") == 0 || strcmp(d->name, "max-scale") == 0 ||
           strcmp(d->name, "static-scale") == 0;
}

/* A whole decimal integer in [lo, hi]; false when v is anything else. */
static bool parse_int(const char *v, double lo, double hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE || (double)x < lo || (double)x > hi)
        return false;
    *out = x;
    return true;
}

static int parse_list(const opt_def *d, const char *v, train_opts *o, const char *who)
{
    o->n_hidden = 0;
    if (strcmp(v, "none") == 0)
        return -1;
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        int64_t w;
        if (len >= sizeof item)
            return bad(who, d, "'%s' is not a list of layer widths (an item is too long)", v);
        memcpy(item, p, len);
        item[len] = '\0';
        if (!parse_int(item, d->lo, d->hi, &w))
            return bad(who, d, "'%s' is not a list of layer widths 1..%.0f (bad item '%s')", v, d->hi, item);
        if (o->n_hidden == CLI_MAX_HIDDEN)
            return bad(who, d, "'%s' has more than %d layers", v, CLI_MAX_HIDDEN);
        o->hidden[o->n_hidden++] = w;
        if (!comma)
            return -1;
        p = comma + 1;
    }
}

int opts_set(const opt_def *d, const char *v, train_opts *o, const char *who)
{
    void *field = (char *)o + d->off;
    o->given[d - opts] = true;
    switch (d->kind) {
    case OPT_STR:
        if (d->choices) {
            size_t n = strlen(v);
            const char *c = d->choices;
            bool found = false;
            while (*c && !found) {
                size_t len = strcspn(c, "|");
                found = n && len == n && strncmp(c, v, n) == 0;
                c += len + (c[len] == '|');
            }
            if (!found)
                return bad(who, d, "unknown value '%s' (choose from %s)", v, d->choices);
        } else if (!*v) {
            return bad(who, d, "needs a non-empty value (%s)", d->meta);
        } else if (strlen(v) >= PATH_MAX) { /* (the options without choices are paths) */
            return bad(who, d, "the path is %zu bytes long; the system takes paths of fewer than %d (PATH_MAX)",
                       strlen(v), PATH_MAX);
        }
        *(const char **)field = v;
        return -1;
    case OPT_INT:
        if (!parse_int(v, d->lo, d->hi, (int64_t *)field))
            return bad(who, d, "'%s' is not a whole number from %.0f to %.0f", v, d->lo, d->hi);
        return -1;
    case OPT_U64: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || errno == ERANGE || v[strspn(v, " \t")] == '-')
            return bad(who, d, "'%s' is not a whole number from 0 to 2^64-1", v);
        *(uint64_t *)field = x;
        return -1;
    }
    case OPT_REAL: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end)
            return bad(who, d, "'%s' is not a number", v);
        if (x == 0 && zero_is_off(d)) {
            *(double *)field = 0;
            return -1;
        }
        if (!(x >= d->lo && x <= d->hi))
            return bad(who, d, "%s is out of range (%s%g to %g)", v, zero_is_off(d) ? "0: off, or " : "", d->lo,
                       d->hi);
        *(double *)field = x;
        return -1;
    }
    case OPT_LIST:
        return parse_list(d, v, o, who);
    case OPT_FLAG:
        *(bool *)field = true;
        return -1;
    }
    return -1;
}

int opts_parse(int argc, char **argv, train_opts *o, bool eval)
{
    const char *who = eval ? "ampc eval" : opts_command;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (eval)
                eval_usage(stdout);
            else
                train_usage(stdout);
            return 0;
        }
        if (eval && a[0] != '-' && !o->resume) {
            o->resume = a; /* ampc eval DIR */
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n", who, a, who);
            return EXIT_USAGE;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opt_def *d = NULL;
        for (int k = 0; k < N_OPTS && !d; k++)
            if (strlen(opts[k].name) == len && strncmp(opts[k].name, name, len) == 0 && (!eval || opts[k].eval))
                d = &opts[k];
        if (!d) {
            fprintf(stderr, "%s: unknown option '%.*s' (see %s --help)\n", who, (int)(len + 2), a, who);
            return EXIT_USAGE;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (d->kind == OPT_FLAG) {
            if (v)
                return bad(who, d, "takes no value (got '%s')", v);
            v = "";
        } else if (!v && d->meta[0] == '[') { /* an optional value: the next argument unless it is an option */
            v = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : PROFILE_DEFAULT_FILE;
        } else if (!v) {
            if (i + 1 >= argc)
                return bad(who, d, "needs a value (%s)", d->meta);
            v = argv[++i];
        }
        int rc = opts_set(d, v, o, who);
        if (rc >= 0)
            return rc;
    }
    if (eval && !o->resume) {
        fprintf(stderr, "ampc eval: which checkpoint? give its directory: ampc eval DIR (see ampc eval --help)\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* When option `name`'s value came from the checkpoint of a resumed run (or
 * the one eval measures) rather than this command line, " (the
 * checkpoint's run has --name VALUE)" in buf, else "": a message then
 * names the cause, which the user did not type. */
static const char *from_checkpoint(const train_opts *o, const char *name, char *buf, size_t n)
{
    const opt_def *d = opts_find(name);
    buf[0] = '\0';
    if (!o->resume || !d || o->given[d - opts])
        return buf;
    const void *f = (const char *)o + d->off;
    if (d->kind == OPT_FLAG)
        snprintf(buf, n, " (the checkpoint's run has --%s)", name);
    else if (d->kind == OPT_STR && *(const char *const *)f)
        snprintf(buf, n, " (the checkpoint's run has --%s %s)", name, *(const char *const *)f);
    return buf;
}

/* Refuses option `name` when given on the command line but not applying:
 * `what` says when it does; `cause` is the option that rules it out. */
static bool refuse(const train_opts *o, const char *name, bool applies, const char *what, const char *cause)
{
    if (applies || !o->given[opt_index(name)])
        return false;
    char why[512];
    say("--%s applies to %s only%s (see %s --help)\n", name, what, from_checkpoint(o, cause, why, sizeof why),
        opts_command);
    return true;
}

/* The options that need the grad scaler (OPT_FP16_SCALER), refused
 * without it. */
static bool refuse_scaler_opts(const train_opts *o, bool scaler)
{
    const char *cause = o->no_scaler ? "no-scaler" : "precision";
    for (int i = 0; i < N_OPTS; i++)
        if ((opts[i].fp16 & OPT_FP16_SCALER) &&
            refuse(o, opts[i].name, scaler, "--precision fp16 with the scaler", cause))
            return true;
    return false;
}

/* --param-dtype and --optim-state (the memory levers): true after a
 * message when the combination cannot run. 16-bit weights are autocast's
 * own dtype, so that the ops need no cast (and autocast no cached copies,
 * the saving): bf16 with --precision bf16, fp16 with fp16. fp16 weights
 * need the grad scaler: their gradients are f16, and without scaling the
 * small ones underflow to zero in backward (the scaler also unscales them
 * into f32 for the f32 masters). */
static bool check_levers(const train_opts *o)
{
    const char *pd = o->param_dtype;
    if (strcmp(pd, "fp32") != 0 && strcmp(pd, o->precision) != 0) {
        if (o->resume && !o->given[opt_index("param-dtype")]) /* the checkpoint's weights (eval, a resumed run) */
            say("--precision %s cannot run the checkpoint's weights, which it stores in %s (its run had "
                "--param-dtype %s: weights in autocast's dtype); give --precision %s, or leave --precision out\n",
                o->precision, pd, pd, pd);
        else
            say("--param-dtype %s needs --precision %s (the weights are stored in autocast's dtype; "
                "precision is %s)\n",
                pd, pd, o->precision);
        return true;
    }
    if (strcmp(pd, "fp16") == 0 && o->no_scaler) {
        say("--param-dtype fp16 needs the grad scaler (drop --no-scaler): unscaled f16 "
                        "gradients underflow to zero\n");
        return true;
    }
    return false;
}

/* The grad scaler's options against each other (each one's range is in
 * the table): true after a message naming the option when they cannot
 * run. Then amp_scaler_new's own checks, the last word. On resume a
 * value may come from the checkpoint: "given" is this command line's. */
static bool check_scaler(const train_opts *o)
{
    if (o->static_scale > 0) {
        for (int i = 0; i < N_OPTS; i++)
            if ((opts[i].fp16 & OPT_FP16_DYNAMIC) && o->given[i]) {
                say(
                        "--%s is an option of the dynamic grad scaler, but --static-scale %g%s fixes "
                        "the scale: give one or the other%s\n",
                        opts[i].name, o->static_scale,
                        o->given[opt_index("static-scale")] ? "" : " (the checkpoint's)",
                        o->given[opt_index("static-scale")] ? "" : " (--static-scale 0 makes it dynamic)");
                return true;
            }
    }
    if (!(o->growth_factor > 1)) {
        say("--growth-factor %g must be above 1 (the scale grows by it; up to 1e6)\n",
                o->growth_factor);
        return true;
    }
    if (!(o->backoff_factor > 0 && o->backoff_factor < 1)) {
        say("--backoff-factor %g must be between 0 and 1, both excluded (the scale "
                        "shrinks by it)\n", o->backoff_factor);
        return true;
    }
    /* The scale is an fp32: a factor within 2^-24 of 1 never moves it
     * (amp_scaler_new's rule, said here in the option's name). */
    if (!(o->growth_factor > 1.0 + 0x1p-24)) {
        say("--growth-factor %.17g rounds to 1 in fp32: the scale (an fp32) would never grow; "
                        "give one above 1 + 2^-24 (1.0000001 or more)\n", o->growth_factor);
        return true;
    }
    if (!(o->backoff_factor <= 1.0 - 0x1p-24)) {
        say("--backoff-factor %.17g is within 2^-24 of 1: the scale (an fp32) would never "
                        "back off; give one of at most 1 - 2^-24 (0.99999994)\n", o->backoff_factor);
        return true;
    }
    /* On resume the scale is the checkpoint's, clamped to new bounds
     * (train.c's scaler_resume): an --init-scale only the checkpoint
     * holds is not checked against them. */
    const bool init_given = o->given[opt_index("init-scale")] || !o->resume;
    /* A factor that backs the first overflow's scale off to 0 or an f32
     * subnormal (whose inverse is infinite) makes the next step's update
     * NaN: refused, unless a --min-scale floor holds the scale up. Later
     * backoffs there: train.c's watch_scale stops the run. */
    const float first = (float)(o->init_scale * o->backoff_factor);
    if (o->static_scale == 0 && !(o->min_scale > 0) && !(first >= FLT_MIN)) {
        say(
                "--backoff-factor %g takes the scale %g%s to %g at the first overflow, below f32's "
                "smallest normal (%g): the next step's update would be NaN; give a larger factor or a "
                "--min-scale floor\n",
                o->backoff_factor, o->init_scale, init_given ? "" : " (the checkpoint's --init-scale)", (double)first,
                (double)FLT_MIN);
        return true;
    }
    if (o->min_scale > 0 && o->max_scale > 0 && o->min_scale > o->max_scale) {
        say("--min-scale %g%s is above --max-scale %g%s\n", o->min_scale,
                o->resume && !o->given[opt_index("min-scale")] ? " (the checkpoint's)" : "", o->max_scale,
                o->resume && !o->given[opt_index("max-scale")] ? " (the checkpoint's)" : "");
        return true;
    }
    if (o->static_scale == 0 && init_given && o->min_scale > 0 && o->init_scale < o->min_scale) {
        say("--init-scale %g is below --min-scale %g (give --init-scale at least %g)\n",
                o->init_scale, o->min_scale, o->min_scale);
        return true;
    }
    if (o->static_scale == 0 && init_given && o->max_scale > 0 && o->init_scale > o->max_scale) {
        say("--init-scale %g is above --max-scale %g (give --init-scale at most %g)\n",
                o->init_scale, o->max_scale, o->max_scale);
        return true;
    }
    amp_scaler *s = amp_scaler_new(scaler_opts_of(o));
    if (!s) {
        say("the grad scaler's options: %s\n", amp_last_error());
        return true;
    }
    amp_scaler_free(s);
    return false;
}

amp_scaler_opts scaler_opts_of(const train_opts *o)
{
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = strcmp(o->precision, "fp16") == 0 && !o->no_scaler;
    so.growth_factor = o->growth_factor;
    so.backoff_factor = o->backoff_factor;
    so.growth_interval = o->growth_interval;
    so.hysteresis = (int)o->hysteresis;
    so.min_scale = o->min_scale;
    so.max_scale = o->max_scale;
    so.init_scale = o->init_scale;
    if (o->static_scale > 0) {
        /* A fixed scale: the bounds pin it, so a backoff or a growth
         * clamps back to it (the update rule's clamps); the inf/NaN check
         * and the skip are the scaler's as ever. The f32 value itself, so
         * that the clamp gives back the same f32. */
        double s = (double)(float)o->static_scale;
        so.init_scale = so.min_scale = so.max_scale = s;
    }
    return so;
}

int opts_resolve(train_opts *o)
{
    bool gpt = is_gpt(o), cnn = strcmp(o->model, "cnn") == 0;
    bool sgd = strcmp(o->optim, "sgd") == 0;
    /* Options for another model, optimizer or schedule are a mistake. */
    for (int i = 0; i < N_OPTS; i++) {
        const char *m = opts[i].models;
        if (m && o->given[i] && strcmp(m, o->model) != 0) {
            say("--%s applies to --model %s only (the %smodel is %s)\n", opts[i].name, m,
                o->resume && !o->given[opt_index("model")] ? "checkpoint's " : "", o->model);
            return EXIT_USAGE;
        }
    }
    /* On cuda the default is PyTorch's: autocast to float16, with the grad
     * scaler. A resumed run keeps its checkpoint's precision. */
    if (strcmp(o->device, "cuda") == 0 && !o->given[opt_index("precision")] && !o->resume)
        o->precision = "fp16";
    if (!o->schedule)
        o->schedule = cnn || gpt ? "cosine" : "constant";
    bool step = strcmp(o->schedule, "step") == 0, cosine = strcmp(o->schedule, "cosine") == 0;
    bool scaler = strcmp(o->precision, "fp16") == 0 && !o->no_scaler;
    if (refuse(o, "momentum", sgd, "--optim sgd", "optim") ||
        refuse(o, "step-size", step, "--schedule step", "schedule") ||
        refuse(o, "gamma", step, "--schedule step", "schedule") ||
        refuse(o, "min-lr", cosine, "--schedule cosine", "schedule") || refuse_scaler_opts(o, scaler))
        return EXIT_USAGE;
    if (o->no_scaler && strcmp(o->precision, "fp16") != 0) {
        char why[512];
        say("--no-scaler applies to --precision fp16 only (precision is %s%s)\n", o->precision,
            from_checkpoint(o, "precision", why, sizeof why));
        return EXIT_USAGE;
    }
    if (check_levers(o))
        return EXIT_USAGE;
    if (scaler && check_scaler(o))
        return EXIT_USAGE;
    if (o->health_every > 0 && o->zero == 1) {
        say("--health-every does not apply with --zero 1 (each rank holds only its shard "
                        "of the gradients; measure with DDP, the default)\n");
        return EXIT_USAGE;
    }
    if (o->given[opt_index("epochs")] && o->given[opt_index("steps")]) {
        say("give --epochs or --steps, not both\n");
        return EXIT_USAGE;
    }
    if ((o->given[opt_index("save-every")] || o->stop_at) && !o->save && !o->resume) {
        say("--%s needs --save DIR\n", o->stop_at ? "stop-at" : "save-every");
        return EXIT_USAGE;
    }
    if (!o->profile && (o->given[opt_index("profile-steps")] || o->given[opt_index("profile-warmup")])) {
        say("--%s needs --profile [FILE]\n",
                o->given[opt_index("profile-steps")] ? "profile-steps" : "profile-warmup");
        return EXIT_USAGE;
    }

    if (!o->data)
        o->data = gpt ? TEXT_CORPUS : FMNIST_DIR;
    if (!o->batch)
        o->batch = gpt ? 32 : cnn ? 64 : 128;
    if (isnan(o->lr))
        o->lr = sgd ? 0.05 : cnn ? 0.003 : gpt ? 0.002 : 1e-3;
    if (isnan(o->weight_decay))
        o->weight_decay = strcmp(o->optim, "adamw") == 0 ? 0.01 : 0.0;
    if (!o->epochs && !o->steps) {
        /* The cnn's default is the main job: 3 epochs, about 45 s on two
         * quiet cores (AVX512-BF16), 92% test accuracy. */
        if (gpt)
            o->steps = 1000;
        else
            o->epochs = 3;
    }
    if (o->warmup < 0) /* a transformer wants its lr to rise gently */
        o->warmup = !gpt ? 0 : o->steps > 0 && o->steps / 10 < 100 ? o->steps / 10 : 100;
    if (gpt) {
        if (!o->mlp_width)
            o->mlp_width = 4 * o->width;
        if (o->width % o->heads != 0) {
            say("--width %lld is not divisible by --heads %lld\n", (long long)o->width,
                    (long long)o->heads);
            return EXIT_USAGE;
        }
    }
    return -1;
}
