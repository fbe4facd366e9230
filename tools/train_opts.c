/*
 * train_opts.c - train's options: the table (train_opt_list.h's rows),
 * train's --help and parsing, the defaults that depend on the model (data,
 * batch, lr, length), filled by opts_resolve after parsing (and after
 * merging a resumed checkpoint's settings), which also refuses options
 * that do not apply to the run. The parser, the value checks and --help's
 * layout are opts.c's; eval and profile pick rows from this table.
 */
#include "cli.h"
#include "checkpoint_cli.h"
#include "data.h"
#include "diagnose.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The grad scaler's options' OPT_FP16_* bits (opts.h). */
#define SC_SCALER (OPT_FP16 | OPT_FP16_SCALER)
#define SC_DYNAMIC (OPT_FP16 | OPT_FP16_SCALER | OPT_FP16_DYNAMIC)

const opt_def train_rows[RO_COUNT] = {
#define X(field, ...) [RO_##field] = {.off = offsetof(train_opts, field), __VA_ARGS__},
#include "train_opt_list.h"
#undef X
};

int opts_count(void) { return RO_COUNT; }
const opt_def *opts_table(void) { return train_rows; }
const opt_def *opts_find(const char *name) { return opt_find(train_rows, RO_COUNT, name); }

int opts_set(const opt_def *d, const char *v, train_opts *o, const char *who)
{
    o->given[d - train_rows] = true;
    return opt_set(d, v, o, who);
}

/* The command opts_resolve's messages name (eval and profile check train's
 * options too). */
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
    o->warmup_start_factor = NAN;
    o->gelu = "tanh";
    o->beta1 = 0.9; /* torch.optim.Adam's */
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->step_size = 1000;
    o->gamma = 0.1;
    o->device = "cpu";
    o->precision = "bf16";
    o->param_dtype = "fp32";
    o->optim_state = "fp32";
    o->init_scale = 65536.0;
    o->master_weights = "on";
    o->weight_update = "nearest";
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

/* train's --help around its options (opts.c prints them from the table). */
static const char train_usage[] =
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
    "of the data, gradients averaged over the ranks (docs/distributed.md).\n\n";

static const char train_footer[] =
    "\n--data defaults to " FMNIST_DIR " (Debian's dataset-fashion-mnist) for mlp and cnn,\n"
    "and to " TEXT_CORPUS " (Debian's fortunes, one corpus of its files) for gpt.\n"
    "\nBefore it builds the model, a run estimates its peak memory and stops (exit 1)\n"
    "when that cannot fit in the memory available: the cgroup's limit, MemAvailable,\n"
    "or AMPC_MEMORY_LIMIT=BYTES (600M, 4G) when set. --dry-run prints the estimate.\n";

const opt_cmd train_options = {
    .who = "ampc train",
    .usage = train_usage,
    .footer = train_footer,
    .blocks = (const opt_block[]){{.rows = train_rows, .n = RO_COUNT}},
    .n_blocks = 1,
};

/* argv without --init-scale auto (or =auto) into out (argc + 1 slots),
 * which sets o->init_scale_auto: auto is not a number for the table's
 * parser, and not "given" (a resumed run keeps its checkpoint's scale:
 * auto applies at step 0 only). Returns the new argc. */
static int take_init_scale_auto(int argc, char **argv, char **out, train_opts *o)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--init-scale=auto") == 0) {
            o->init_scale_auto = true;
            continue;
        }
        if (i + 1 < argc && strcmp(argv[i], "--init-scale") == 0 && strcmp(argv[i + 1], "auto") == 0) {
            o->init_scale_auto = true;
            i++;
            continue;
        }
        out[n++] = argv[i];
    }
    out[n] = NULL;
    return n;
}

int train_parse(int argc, char **argv, train_opts *o)
{
    opts_set_command(train_options.who);
    char **args = malloc((size_t)(argc + 1) * sizeof *args);
    if (!args) {
        fprintf(stderr, "%s: out of memory\n", train_options.who);
        return 1;
    }
    int rc = opt_parse(&train_options, &(opt_dst){o, o->given}, NULL, take_init_scale_auto(argc, argv, args, o), args);
    free(args);
    return rc;
}

/* When option `name`'s value came from the checkpoint of a resumed run (or
 * the one eval measures) rather than this command line, " (the
 * checkpoint's run has --name VALUE)" in buf, else "": a message then
 * names the cause, which the user did not type. */
static const char *from_checkpoint(const train_opts *o, const char *name, char *buf, size_t n)
{
    const opt_def *d = opts_find(name);
    buf[0] = '\0';
    if (!o->resume || !d || o->given[d - train_rows])
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
    if (applies || !o->given[opts_find(name) - train_rows])
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
    for (int i = 0; i < RO_COUNT; i++)
        if ((train_rows[i].fp16 & OPT_FP16_SCALER) &&
            refuse(o, train_rows[i].name, scaler, "--precision fp16 with the scaler", cause))
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
static bool check_levers(train_opts *o)
{
    const char *pd = o->param_dtype;
    if (strcmp(pd, "fp32") != 0 && strcmp(pd, o->precision) != 0) {
        if (o->resume && !o->given[RO_param_dtype]) /* the checkpoint's weights (eval, a resumed run) */
            say("--precision %s cannot run the checkpoint's weights, which it stores in %s (its run had "
                "--param-dtype %s: weights in autocast's dtype); give --precision %s, or leave --precision out\n",
                o->precision, pd, pd, pd);
        else
            say("--param-dtype %s needs --precision %s (the weights are stored in autocast's dtype; "
                "precision is %s)\n",
                pd, pd, o->precision);
        return true;
    }
    /* (the defaults, on and nearest, are what f32 weights do anyway: a
     * checkpoint's settings hold them) */
    const bool off = strcmp(o->master_weights, "off") == 0, sr = strcmp(o->weight_update, "sr") == 0;
    if (strcmp(pd, "fp32") == 0 && (off || sr)) {
        say("--%s applies to 16-bit weights only: give --param-dtype bf16 (or fp16) with it\n",
            off ? "master-weights off" : "weight-update sr");
        return true;
    }
    if (sr) {
        if (strcmp(pd, "bf16") != 0) {
            say("--weight-update sr rounds bf16 weights (parameters are %s): give --param-dtype bf16\n", pd);
            return true;
        }
        if (o->given[RO_master_weights] && strcmp(o->master_weights, "on") == 0) {
            say("--weight-update sr stores the bf16 weight itself, in place of fp32 master weights: give "
                "--master-weights off, or leave it out\n");
            return true;
        }
        o->master_weights = "off"; /* (the checkpoint keeps it so) */
    }
    if (strcmp(pd, "fp16") == 0 && off) {
        say("--master-weights off with --param-dtype fp16: the grad scaler fp16 weights need cannot unscale "
            "f16 gradients (PyTorch refuses it too); keep the fp32 masters, or give --param-dtype bf16\n");
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
        for (int i = 0; i < RO_COUNT; i++)
            if ((train_rows[i].fp16 & OPT_FP16_DYNAMIC) && o->given[i]) {
                say(
                        "--%s is an option of the dynamic grad scaler, but --static-scale %g%s fixes "
                        "the scale: give one or the other%s\n",
                        train_rows[i].name, o->static_scale,
                        o->given[RO_static_scale] ? "" : " (the checkpoint's)",
                        o->given[RO_static_scale] ? "" : " (--static-scale 0 makes it dynamic)");
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
    const bool init_given = (o->given[RO_init_scale] || !o->resume) && !o->init_scale_auto;
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
                o->resume && !o->given[RO_min_scale] ? " (the checkpoint's)" : "", o->max_scale,
                o->resume && !o->given[RO_max_scale] ? " (the checkpoint's)" : "");
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

/* The environment's --flush-denormal: "1" (opts_env_check refused any
 * value but "", "0" and "1" before a command ran). */
#define FLUSH_ENV "AMPC_FLUSH_DENORMAL"

static bool flush_env_on(void)
{
    const char *v = getenv(FLUSH_ENV);
    return v && strcmp(v, "1") == 0;
}

int opts_env_check(void)
{
    const char *v = getenv(FLUSH_ENV);
    if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        fprintf(stderr, "ampc: environment variable " FLUSH_ENV "=%.200s is not 0 or 1 (1 flushes subnormal "
                        "floats to zero, as --flush-denormal); unset it for the default, 0\n",
                v);
        return EXIT_USAGE;
    }
    return -1;
}

int opts_apply_cpu(const train_opts *o, const char *who)
{
    amp_set_num_threads((int)o->threads);
    /* (off leaves the registers as the process started: nothing to undo) */
    if (o->flush_denormal && amp_set_flush_denormal(true) != AMP_OK) {
        fprintf(stderr, "%s: --flush-denormal%s: %s\n", who, o->given[RO_flush_denormal] ? "" : " (" FLUSH_ENV
                "=1, or the checkpoint's run)", amp_last_error());
        return 1;
    }
    return -1;
}

int opts_resolve(train_opts *o)
{
    if (flush_env_on()) /* a setting the run keeps, as the option */
        o->flush_denormal = true;
    bool gpt = is_gpt(o), cnn = strcmp(o->model, "cnn") == 0;
    bool sgd = strcmp(o->optim, "sgd") == 0;
    /* Options for another model, optimizer or schedule are a mistake. */
    for (int i = 0; i < RO_COUNT; i++) {
        const char *m = train_rows[i].models;
        if (m && o->given[i] && strcmp(m, o->model) != 0) {
            say("--%s applies to --model %s only (the %smodel is %s)\n", train_rows[i].name, m,
                o->resume && !o->given[RO_model] ? "checkpoint's " : "", o->model);
            return EXIT_USAGE;
        }
    }
    /* On cuda the default is PyTorch's: autocast to float16, with the grad
     * scaler. A resumed run keeps its checkpoint's precision. */
    if (strcmp(o->device, "cuda") == 0 && !o->given[RO_precision] && !o->resume)
        o->precision = "fp16";
    if (!o->schedule)
        o->schedule = cnn || gpt ? "cosine" : "constant";
    bool step = strcmp(o->schedule, "step") == 0, cosine = strcmp(o->schedule, "cosine") == 0;
    bool scaler = strcmp(o->precision, "fp16") == 0 && !o->no_scaler;
    if (refuse(o, "momentum", sgd, "--optim sgd", "optim") ||
        refuse(o, "step-size", step, "--schedule step", "schedule") ||
        refuse(o, "gamma", step, "--schedule step", "schedule") ||
        refuse(o, "min-lr", cosine, "--schedule cosine", "schedule") || refuse_scaler_opts(o, scaler) ||
        refuse(o, "beta1", !sgd, "--optim adam or adamw", "optim") ||
        refuse(o, "beta2", !sgd, "--optim adam or adamw", "optim") ||
        refuse(o, "eps", !sgd, "--optim adam or adamw", "optim"))
        return EXIT_USAGE;
    if (o->beta1 >= 1 || o->beta2 >= 1) { /* the table's range is [0, 1]; Adam's is [0, 1) */
        say("--%s %g is out of range (0 <= beta < 1)\n", o->beta1 >= 1 ? "beta1" : "beta2",
            o->beta1 >= 1 ? o->beta1 : o->beta2);
        return EXIT_USAGE;
    }
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
    if (o->init_scale_auto && (!scaler || o->static_scale > 0)) {
        say("--init-scale auto measures the dynamic grad scaler's first scale: it needs --precision fp16 with the "
            "scaler and no --static-scale (precision is %s%s)\n",
            o->precision, o->no_scaler ? ", --no-scaler" : o->static_scale > 0 ? ", a --static-scale" : "");
        return EXIT_USAGE;
    }
    if (o->health_every > 0 && o->zero == 1) {
        say("--health-every does not apply with --zero 1 (each rank holds only its shard "
                        "of the gradients; measure with DDP, the default)\n");
        return EXIT_USAGE;
    }
    if (o->given[RO_epochs] && o->given[RO_steps]) {
        say("give --epochs or --steps, not both\n");
        return EXIT_USAGE;
    }
    if (!o->data_bin && (o->given[RO_val_bin] || o->given[RO_vocab])) {
        say("--%s needs --data-bin FILE (token files)\n", o->given[RO_val_bin] ? "val-bin" : "vocab");
        return EXIT_USAGE;
    }
    if (o->data_bin && o->given[RO_data]) {
        say("give --data (a text) or --data-bin (token ids), not both\n");
        return EXIT_USAGE;
    }
    if ((o->given[RO_save_every] || o->stop_at) && !o->save && !o->resume) {
        say("--%s needs --save DIR\n", o->stop_at ? "stop-at" : "save-every");
        return EXIT_USAGE;
    }
    if (!o->profile && (o->given[RO_profile_steps] || o->given[RO_profile_warmup])) {
        say("--%s needs --profile [FILE]\n",
                o->given[RO_profile_steps] ? "profile-steps" : "profile-warmup");
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
    /* nanoGPT's warm-up, lr * (t + 1) / (warmup + 1), is LinearLR's with
     * this start factor: the first step does not run at lr 0. */
    if (isnan(o->warmup_start_factor))
        o->warmup_start_factor = 1.0 / (double)(o->warmup + 1);
    if (o->given[RO_warmup_start_factor] && o->warmup == 0) {
        say("--warmup-start-factor sets the warm-up's first lr, but the warm-up is 0 steps (%s): give --warmup N "
            "(N > 0) with it, or leave it out\n", o->given[RO_warmup] ? "--warmup 0"
                                                   : o->resume ? "the checkpoint's run's"
                                                   : gpt ? "the default: a tenth of --steps, rounded down"
                                                         : "the default for this model");
        return EXIT_USAGE;
    }
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
