/*
 * profile_cmd.c - `ampc profile`: the same run in several precisions
 * (--precision fp32,bf16,fp16), each --profile-warmup steps then
 * --profile-steps profiled ones, printed side by side: step time, the
 * phase split, autocast's casts, GFLOP/s, the top ops, and what mixed
 * precision moved against the first precision given. Every other train
 * option applies to each run; nothing is saved, logged or evaluated.
 */
#include "cli.h"
#include "data.h"
#include "eval.h"
#include "profile_train.h"
#include "settings.h"
#include "train.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PREC 3

static const char *const prec_names[MAX_PREC] = {"fp32", "bf16", "fp16"};

/* Options that make no sense for a few steps that leave nothing behind. */
static const char *const refused[] = {"save", "save-every", "stop-at", "resume", "log", "log-mode",
                                      "dry-run", "epochs", "steps", "health-every", "tensorboard"};

/* profile's own options; the rest are train's. */
typedef struct {
    const char *precisions; /* LIST */
    int64_t repeat;
} profile_args;

static const opt_def profile_rows[] = {
    {.name = "precision", .meta = "LIST", .kind = OPT_STR, .off = offsetof(profile_args, precisions),
     .help = "fp32, bf16, fp16, comma-separated, each at most once"},
    /* Given last without a number, the number is the empty text: refused
     * as one. */
    {.name = "repeat", .meta = "N", .kind = OPT_INT, .off = offsetof(profile_args, repeat), .lo = 1, .hi = 100,
     .absent = "",
     .help = "run the precisions round-robin N times (1 to 100, default 1)\n"
             "and show each time's median (a busy machine's spikes drop out)"},
};

/* Train's --profile options, in profile's words. */
static const opt_pick profile_picks[] = {
    {"profile", "also write each precision's trace (default " PROFILE_DEFAULT_FILE ")"},
    {"profile-steps", "steps profiled per precision (default 5)"},
    {"profile-warmup", "steps before the profiled ones (default 2)"},
};

const opt_cmd profile_options = {
    .who = "ampc profile",
    .usage = "usage: ampc profile [--precision LIST] [train options]\n\n"
             "Runs the same training in each precision of LIST (default fp32,bf16,fp16):\n"
             "--profile-warmup steps (default 2), then --profile-steps steps (default 5) under\n"
             "the profiler, and prints them side by side: the step time, its split into data /\n"
             "forward / backward / optimizer / other, autocast's casts, GFLOP/s, the top ops by\n"
             "self time, and what mixed precision moved against the first precision of LIST.\n"
             "Nothing is saved, logged or evaluated. --profile FILE also writes each run's\n"
             "trace, FILE with the precision before its extension (ampc-trace-bf16.json).\n\n",
    .footer = "  any ampc train option (--model, --batch, --threads, --device ...) except\n"
              "  --save, --save-every, --stop-at, --resume, --log, --log-mode, --dry-run,\n"
              "  --epochs, --steps and --tensorboard (see ampc train --help)\n\n"
              "example: ampc profile --model gpt --precision fp32,bf16\n"
              "docs/profiling.md walks through it.\n",
    .blocks = (const opt_block[]){
        {.rows = profile_rows, .n = sizeof profile_rows / sizeof profile_rows[0]},
        {.rows = train_rows, .n = RO_COUNT, .pick = profile_picks,
         .n_pick = sizeof profile_picks / sizeof profile_picks[0]},
        {.rows = train_rows, .n = RO_COUNT, .unlisted = true},
    },
    .n_blocks = 3,
};

/* Parses LIST into idx[] (indexes into prec_names); the count, or -1
 * after a message. */
static int parse_precisions(const char *list, int *idx)
{
    int n = 0;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        int k = -1;
        for (int i = 0; i < MAX_PREC; i++)
            if (len == strlen(prec_names[i]) && strncmp(p, prec_names[i], len) == 0)
                k = i;
        if (k < 0) {
            fprintf(stderr, "ampc profile: --precision: '%.*s' in '%s' is not fp32, bf16 or fp16 (see ampc profile "
                            "--help)\n", (int)len, p, list);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (idx[i] == k) {
                fprintf(stderr, "ampc profile: --precision: %s is in '%s' twice\n", prec_names[k], list);
                return -1;
            }
        idx[n++] = k;
        if (!p[len])
            return n;
        p += len + 1;
    }
}

/* FILE with "-prec" before its extension: ampc-trace.json -> ampc-trace-bf16.json. */
static void trace_name(char *buf, size_t n, const char *file, const char *prec)
{
    const char *slash = strrchr(file, '/'), *dot = strrchr(file, '.');
    if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : file))
        snprintf(buf, n, "%s-%s", file, prec);
    else
        snprintf(buf, n, "%.*s-%s%s", (int)(dot - file), file, prec, dot);
}

static bool given(const train_opts *o, const char *name) { return o->given[opts_find(name) - train_rows]; }

/* The options of the run in precision prec: o's, the scaler's options
 * only for fp16, resolved. -1 or EXIT_USAGE. */
static int options_for(const train_opts *o, const char *prec, train_opts *out)
{
    *out = *o;
    out->precision = prec;
    out->given[RO_precision] = true;
    out->profile = NULL; /* the run's own trace is written apart (traces[]) */
    out->given[RO_profile_steps] = false;
    out->given[RO_profile_warmup] = false;
    if (strcmp(prec, "fp16") != 0) {
        out->no_scaler = false;
        for (int i = 0; i < RO_COUNT; i++)
            if (train_rows[i].fp16)
                out->given[i] = false;
    }
    return opts_resolve(out);
}

static int by_step_ms(const void *a, const void *b)
{
    const amp_profile_summary *x = a, *y = b;
    return (x->step_ms > y->step_ms) - (x->step_ms < y->step_ms);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the double at byte offset off of runs[0..n). */
static double median(const amp_profile_summary *runs, int n, size_t off)
{
    double v[100];
    for (int i = 0; i < n; i++)
        memcpy(&v[i], (const char *)&runs[i] + off, sizeof v[i]);
    qsort(v, (size_t)n, sizeof v[0], by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double speedup(double base, double now) { return now > 0 ? base / now : 0; }

static void say_ratio(double r, const char *what)
{
    if (r >= 1.005)
        printf("%s %.2fx faster", what, r);
    else if (r > 0 && r <= 0.995)
        printf("%s %.2fx slower", what, 1 / r);
    else
        printf("%s unchanged", what);
}

static double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

static double optim_ms(const amp_profile_summary *s)
{
    return s->phase_ms[AMP_PHASE_OPTIMIZER] + s->phase_ms[AMP_PHASE_UNSCALE] + s->phase_ms[AMP_PHASE_SCALER_UPDATE];
}

static void print_side_by_side(const int *idx, int n, const amp_profile_summary *s)
{
    printf("\n%-22s", "");
    for (int i = 0; i < n; i++)
        printf(" %12s", prec_names[idx[i]]);
    printf("\n%-22s", "step ms");
    for (int i = 0; i < n; i++)
        printf(" %12.3f", s[i].step_ms);
    const struct {
        const char *label;
        int phase; /* -1: the optimizer group */
    } rows[] = {{"  data", AMP_PHASE_DATA},           {"  forward", AMP_PHASE_FORWARD},
                {"  backward", AMP_PHASE_BACKWARD},   {"  optimizer (all)", -1},
                {"    unscale", AMP_PHASE_UNSCALE},   {"    step", AMP_PHASE_OPTIMIZER},
                {"    scaler update", AMP_PHASE_SCALER_UPDATE}, {"  checkpoint save", AMP_PHASE_CHECKPOINT},
                {"  other", AMP_PHASE_OTHER}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        bool any = false;
        for (int i = 0; i < n; i++)
            any |= (rows[r].phase < 0 ? optim_ms(&s[i]) : s[i].phase_ms[rows[r].phase]) > 0;
        if (!any && rows[r].phase == AMP_PHASE_CHECKPOINT)
            continue;
        printf("\n%-22s", rows[r].label);
        for (int i = 0; i < n; i++) {
            double ms = rows[r].phase < 0 ? optim_ms(&s[i]) : s[i].phase_ms[rows[r].phase];
            char cell[32];
            snprintf(cell, sizeof cell, "%.1f%%", pct(ms, s[i].step_ms));
            printf(" %12s", cell);
        }
    }
    printf("\n%-22s", "casts a step");
    for (int i = 0; i < n; i++)
        printf(" %12lld", (long long)s[i].casts);
    printf("\n%-22s", "cast ms a step");
    for (int i = 0; i < n; i++)
        printf(" %12.3f", s[i].cast_ms);
    printf("\n%-22s", "cast % of the step");
    for (int i = 0; i < n; i++) {
        char cell[32];
        snprintf(cell, sizeof cell, "%.1f%%", pct(s[i].cast_ms, s[i].step_ms));
        printf(" %12s", cell);
    }
    printf("\n%-22s", "cast cache hits a step");
    for (int i = 0; i < n; i++)
        printf(" %12lld", (long long)s[i].cast_cache_hits);
    printf("\n%-22s", "GFLOP/s (ops)");
    for (int i = 0; i < n; i++) {
        if (s[i].gflop > 0 && s[i].step_ms > 0)
            printf(" %12.1f", s[i].gflop / (s[i].step_ms / 1e3));
        else
            printf(" %12s", "-");
    }
    printf("\n\ntop ops by self time (ms a step, %% of the step):\n");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3 && s[i].top[k].name[0]; k++)
            printf("  %-5s %d. %-64s %9.3f %5.1f%%\n", k ? "" : prec_names[idx[i]], k + 1, s[i].top[k].name,
                   s[i].top[k].ms, pct(s[i].top[k].ms, s[i].step_ms));
    if (n < 2)
        return;
    printf("\nwhat moved (against %s):\n", prec_names[idx[0]]);
    for (int i = 1; i < n; i++) {
        printf("  %s: ", prec_names[idx[i]]);
        say_ratio(speedup(s[0].step_ms, s[i].step_ms), "step");
        printf(" (%.3f -> %.3f ms); ", s[0].step_ms, s[i].step_ms);
        say_ratio(speedup(s[0].phase_ms[AMP_PHASE_FORWARD], s[i].phase_ms[AMP_PHASE_FORWARD]), "forward");
        printf(", ");
        say_ratio(speedup(s[0].phase_ms[AMP_PHASE_BACKWARD], s[i].phase_ms[AMP_PHASE_BACKWARD]), "backward");
        printf(", ");
        say_ratio(speedup(optim_ms(&s[0]), optim_ms(&s[i])), "optimizer");
        printf("; casts cost %.1f%% of the step (%lld a step)\n", pct(s[i].cast_ms, s[i].step_ms),
               (long long)s[i].casts);
    }
}

/* Parses profile's command line into p and o, and the precisions of its
 * LIST into idx[0 .. *n); then refuses the train options that make no
 * sense here. -1 or an exit code. */
static int parse_all(int argc, char **argv, profile_args *p, train_opts *o, int *idx, int *n)
{
    *p = (profile_args){.precisions = "fp32,bf16,fp16", .repeat = 1};
    train_opts_default(o);
    opts_set_command(profile_options.who);
    const opt_dst dst[] = {{p, NULL}, {o, o->given}, {o, o->given}};
    int rc = opt_parse(&profile_options, dst, NULL, argc, argv);
    if (rc < 0 && (*n = parse_precisions(p->precisions, idx)) < 0)
        rc = EXIT_USAGE;
    for (size_t i = 0; rc < 0 && i < sizeof refused / sizeof refused[0]; i++)
        if (given(o, refused[i])) {
            fprintf(stderr, "ampc profile: --%s is not an ampc profile option (it runs --profile-warmup + "
                            "--profile-steps steps and keeps nothing; see ampc profile --help)\n", refused[i]);
            rc = EXIT_USAGE;
        }
    bool fp16 = false;
    for (int k = 0; rc < 0 && k < *n; k++)
        fp16 |= idx[k] == 2;
    for (int i = 0; rc < 0 && i < RO_COUNT; i++)
        if (train_rows[i].fp16 && o->given[i] && !fp16) {
            fprintf(stderr, "ampc profile: --%s applies to fp16 only, which --precision %s does not hold\n",
                    train_rows[i].name, p->precisions);
            rc = EXIT_USAGE;
        }
    return rc;
}

int profile_parse(int argc, char **argv)
{
    profile_args p;
    train_opts o;
    int idx[MAX_PREC], n = 0;
    return parse_all(argc, argv, &p, &o, idx, &n);
}

int profile_main(int argc, char **argv)
{
    profile_args p;
    train_opts o;
    int idx[MAX_PREC], n = 0;
    int rc = parse_all(argc, argv, &p, &o, idx, &n);
    if (rc >= 0)
        return rc;
    const int repeat = (int)p.repeat;
    o.steps = o.profile_warmup + o.profile_steps;
    train_opts run[MAX_PREC];
    for (int i = 0; i < n && rc < 0; i++)
        rc = options_for(&o, prec_names[idx[i]], &run[i]);
    char traces[MAX_PREC][4096];
    for (int i = 0; i < n && rc < 0; i++) {
        if (!o.profile)
            break;
        trace_name(traces[i], sizeof traces[i], o.profile, prec_names[idx[i]]);
        run[i].profile = traces[i];
        rc = profile_preflight(&run[i]);
    }
    if (rc < 0)
        rc = device_check(&run[0], "ampc profile");
    if (rc < 0)
        rc = opts_apply_cpu(&o, "ampc profile");
    if (rc >= 0)
        return rc;
    run_data rd;
    run_info ri = {0};
    if ((rc = data_open(&rd, &run[0], &ri, true)) >= 0)
        return rc;
    char desc[256];
    printf("ampc profile: %s, batch %lld", model_describe(&run[0], &ri, desc, sizeof desc), (long long)run[0].batch);
    if (run[0].accum > 1)
        printf(" x %lld accumulated", (long long)run[0].accum);
    printf(", %s, threads %d, kernels %s\n", run[0].device, amp_get_num_threads(), amp_cpu_kernels());
    printf("each precision: %lld warm-up step%s, then %lld profiled", (long long)o.profile_warmup,
           o.profile_warmup == 1 ? "" : "s", (long long)o.profile_steps);
    if (repeat > 1)
        printf("; %d runs each, round-robin: each time is its median (top ops: the median run's)", repeat);
    printf("\n");
    fflush(stdout);
    /* Round-robin (fp32 bf16 fp16 fp32 bf16 ...), so a machine that gets
     * busier or quieter meanwhile weighs on each precision alike; each
     * precision shows its median run by step time. */
    amp_profile_summary *all = calloc((size_t)(repeat * n), sizeof *all), sum[MAX_PREC];
    if (!all) {
        fprintf(stderr, "ampc profile: out of memory\n");
        rc = 1;
    }
    for (int r = 0; r < repeat && rc < 0; r++)
        for (int i = 0; i < n && rc < 0; i++) {
            amp_profiler_reset();
            rc = train_profile_run(&run[i], &rd, &ri);
            if (rc < 0 && amp_profiler_summary(&all[i * repeat + r]) != AMP_OK) {
                fprintf(stderr, "ampc profile: %s: %s\n", prec_names[idx[i]], amp_last_error());
                rc = 1;
            }
            if (rc < 0 && o.profile && r == repeat - 1) { /* the last run's trace */
                if (amp_profiler_write_trace(traces[i]) != AMP_OK) {
                    fprintf(stderr, "ampc profile: %s\n", amp_last_error());
                    rc = 1;
                } else {
                    printf("%s: trace written to %s\n", prec_names[idx[i]], traces[i]);
                }
            }
            fflush(stdout);
        }
    for (int i = 0; i < n && rc < 0; i++) {
        amp_profile_summary *runs = &all[i * repeat];
        qsort(runs, (size_t)repeat, sizeof *runs, by_step_ms);
        sum[i] = runs[(repeat - 1) / 2];
        /* Each time its own median: one run's spike in one phase (the
         * machine busy elsewhere) moves none of them. */
        for (int p = 0; p < AMP_PHASE_COUNT; p++)
            sum[i].phase_ms[p] = median(runs, repeat, offsetof(amp_profile_summary, phase_ms) + p * sizeof(double));
        sum[i].cast_ms = median(runs, repeat, offsetof(amp_profile_summary, cast_ms));
    }
    free(all);
    amp_profiler_reset();
    data_close(&rd);
    if (rc >= 0)
        return rc;
    print_side_by_side(idx, n, sum);
    return 0;
}
