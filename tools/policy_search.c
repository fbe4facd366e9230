/*
 * policy_search.c - `ampc policy search --tolerance T`: the fastest
 * autocast policy whose training stays within T of the fp32 run.
 *
 * Every trial trains the same run (same seed, data and starting weights)
 * for --steps steps and compares its final loss (the mean of the last
 * quarter of the steps) with the fp32 run's: within T when
 * |loss - loss_fp32| <= T * |loss_fp32|. The full autocast policy is
 * tried first. When it is not within T, the candidate moves - each module
 * of the model kept in f32, each op autocast lowers put in f32 - are
 * ordered by the precision audit's ranking of what 16 bits moved
 * (order_candidates, audit.h) and added greedily (policy_search_greedy):
 * a move that brings the loss closer to the fp32 run's is kept, until the
 * policy is within T; then each kept move but the last is dropped again
 * if the policy stays within T without it. A move inside a module already
 * kept is skipped. At most --max-trials trainings run after the two
 * references.
 */
#include "audit.h"
#include "cli.h"
#include "data.h"
#include "eval.h"
#include "init_from.h"
#include "output_check.h"
#include "policy_file.h"
#include "policy_search.h"
#include "run_policy.h"
#include "settings.h"
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


typedef struct {
    double tolerance;
    const char *out;
    int64_t max_trials;
} search_args;

static const opt_def search_rows[] = {
    {.name = "tolerance", .meta = "T", .kind = OPT_REAL, .off = offsetof(search_args, tolerance), .lo = 0,
     .hi = 100, .help = "the final loss may differ from the fp32 run's by T of it (0.02: 2%; required)"},
    {.name = "out", .meta = "FILE", .kind = OPT_STR, .off = offsetof(search_args, out),
     .help = "write the policy found to FILE (default policy.json)"},
    {.name = "max-trials", .meta = "N", .kind = OPT_INT, .off = offsetof(search_args, max_trials), .lo = 1,
     .hi = 1000, .help = "trainings the search may run after the fp32 and full autocast ones (default 16)"},
};

/* Train options a search sets itself, or that leave something behind. */
static const char *const refused[] = {"save", "save-every", "stop-at", "resume", "log", "log-mode", "dry-run",
                                      "epochs", "tensorboard", "profile", "policy", "fp32-modules", "memory"};

const opt_cmd policy_search_options = {
    .who = "ampc policy search",
    .usage = "usage: ampc policy search --tolerance T [--out FILE] [train options]\n\n"
             "Finds the fastest autocast policy (modules kept in f32, ops put in f32) whose\n"
             "training stays within T of the fp32 run: the same run (seed, data, --init-from\n"
             "weights) trained for --steps steps (default 100), its final loss (the mean of the\n"
             "last quarter of the steps) against the fp32 run's. Tries the full autocast policy\n"
             "(--precision, default bf16), then adds the moves the audit's ranking (ampc audit)\n"
             "puts first, greedily, and drops those the result does not need. Prints each\n"
             "trial and a table (loss delta, step time, speed-up against fp32 and against\n"
             "full autocast) and writes the policy for train --policy FILE.\n\n",
    .footer = "  any ampc train option (--model, --data, --steps, --init-from, --precision ...)\n"
              "  except --save, --save-every, --stop-at, --resume, --log, --log-mode, --dry-run,\n"
              "  --epochs, --tensorboard, --profile, --memory, --policy and --fp32-modules\n\n"
              "example: ampc policy search --model gpt --data corpus.txt --precision fp16 --tolerance 0.02\n"
              "docs/debugging.md describes the search.\n",
    .blocks = (const opt_block[]){
        {.rows = search_rows, .n = sizeof search_rows / sizeof search_rows[0]},
        {.rows = train_rows, .n = RO_COUNT, .unlisted = true},
    },
    .n_blocks = 2,
};

typedef struct {
    train_opts o;      /* the lowered run's options, resolved */
    train_opts o32;    /* the fp32 run's */
    run_data rd;
    run_info ri, init;
    amp_device dev;
    search_outcome ref32, full;
} search;

static bool within(double ref, double loss, double tol)
{
    return isfinite(loss) && fabs(loss - ref) <= tol * fabs(ref);
}

static double rel_delta(double ref, double loss)
{
    return isfinite(loss) ? (loss - ref) / fabs(ref) : INFINITY;
}

/* The policy of candidates c[pick[0 .. n)]. */
static amp_status policy_of(const search_move *c, const int *pick, int n, policy *p)
{
    *p = (policy){0};
    amp_status st = AMP_OK;
    for (int i = 0; i < n && st == AMP_OK; i++)
        st = c[pick[i]].op < 0 ? policy_add_module(p, c[pick[i]].path)
                               : policy_set_op(p, amp_op_name(c[pick[i]].op), AMP_CAST_FP32);
    return st;
}

/* Trains o under p; one line per trial. -1 or an exit code. */
static int trial(search *s, const train_opts *o, const policy *p, const char *label, search_outcome *out)
{
    if (policy_apply(p, s->dev) != AMP_OK) {
        fprintf(stderr, "ampc policy search: %s\n", amp_last_error());
        return 1;
    }
    int rc = train_trial(o, &s->rd, &s->ri, &s->init, &out->loss, &out->step_ms, &out->finite_steps);
    policy_reset(s->dev);
    if (rc >= 0)
        return rc;
    printf("  %-40s loss %-12.7g step %8.3f ms", label, out->loss, out->step_ms);
    if (!isfinite(out->loss))
        printf("  (non-finite from step %lld)", (long long)out->finite_steps + 1);
    printf("\n");
    fflush(stdout);
    return -1;
}

/* The model's modules as candidates (run_policy_modules), then each op
 * autocast lowers on dev. Returns the count. */
static int list_candidates(const amp_module *m, amp_device dev, search_move *c, int max)
{
    run_module *all = calloc(RUN_MAX_MODULES, sizeof *all);
    int nm = all ? run_policy_modules(m, all, RUN_MAX_MODULES) : 0, n = 0;
    int64_t total = 0;
    for (int i = 0; i < amp_module_num_params(m); i++)
        total += amp_tensor_numel(amp_module_param(m, i, NULL));
    for (int i = 0; i < nm && n < max; i++, n++) {
        c[n] = (search_move){.op = -1, .weight = all[i].params};
        snprintf(c[n].path, sizeof c[n].path, "%s", all[i].path);
    }
    free(all);
    for (int op = 0; op < amp_op_count() && n < max; op++)
        if (amp_autocast_category(amp_op_name(op), dev) == AMP_CAST_LOWER) {
            c[n] = (search_move){.op = op, .weight = total};
            snprintf(c[n].path, sizeof c[n].path, "op %s", amp_op_name(op));
            n++;
        }
    return n;
}

static int by_score(const void *a, const void *b)
{
    const search_move *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    if (x->weight != y->weight) /* the smaller move is the faster policy */
        return x->weight < y->weight ? -1 : 1;
    return strcmp(x->path, y->path);
}

/* Whether scope is the module path or lies under it. */
static bool in_module(const char *scope, const char *path)
{
    size_t len = strlen(path);
    return strncmp(scope, path, len) == 0 && (scope[len] == '\0' || scope[len] == '.');
}

/* Whether move c covers site s: a module the site ran in (or under), or
 * the site's op. */
static bool covers(const search_move *c, const amp_audit_site *s)
{
    return c->op >= 0 ? strcmp(amp_op_name(c->op), s->op) == 0 : in_module(s->scope, c->path);
}

/* Whether 16 bits made non-finite values at s (where the fp32 shadow's
 * were finite: a shadow that is not finite itself has nothing to search). */
static bool broke(const amp_audit_site *s) { return s->overflow > 0 || s->finite < s->values; }

/* A broken site in the order order_candidates ranks them. */
typedef struct {
    const amp_audit_site *site;
    int seen, group, depth;
} broken_site;

static int by_group(const void *a, const void *b)
{
    const broken_site *x = a, *y = b;
    if (x->group != y->group)
        return x->group - y->group;
    if (x->depth != y->depth) /* the innermost module first: the outer one's op consumed its values */
        return y->depth - x->depth;
    return x->seen - y->seen;
}

/* The broken sites of one phase (backward or not) into out, in the order
 * they ran, except that a site in a module and the sites in the modules
 * around it (a block's residual add after the layer in it that broke:
 * the audit keeps one site per module and op, placed where its first
 * call ran) go together, innermost first. Returns the count. */
static int broken_in_order(const amp_audit *a, bool backward, broken_site *out, int max)
{
    int n = 0;
    for (int j = 0; j < amp_audit_num_sites(a) && n < max; j++) {
        const amp_audit_site *s = amp_audit_site_at(a, j);
        if (s->calls > 0 && broke(s) && s->backward == backward)
            out[n++] = (broken_site){.site = s, .seen = n};
    }
    for (int i = 0; i < n; i++) {
        out[i].group = i;
        out[i].depth = 0;
        for (const char *p = out[i].site->scope; *p; p++)
            out[i].depth += *p == '.';
        for (int j = 0; j < i && out[i].group == i; j++) /* the first related site's place */
            if (*out[i].site->scope && *out[j].site->scope &&
                (in_module(out[i].site->scope, out[j].site->scope) || in_module(out[j].site->scope, out[i].site->scope)))
                out[i].group = out[j].group;
    }
    qsort(out, (size_t)n, sizeof *out, by_group);
    return n;
}

/*
 * The order the greedy search tries the moves in, best first, from the
 * precision audit (audit.h, `ampc audit`'s ranking): the run audited for
 * its --steps under full autocast against its fp32 shadow (on the CPU):
 * the forward call sites that made infs from finite inputs first, then the
 * call sites whose 16-bit values went non-finite (overflowed to inf, or
 * NaN from one: left out of the relative error) first, in the order they
 * ran, forward before backward (the forward's first is the cause, those
 * after it its spreading), then the rest in the audit's order, worst
 * first. A move
 * scores the rank of the worst site it covers, so the layer that broke
 * and every module around it tie at the top; ties go to the move keeping
 * fewer parameters in f32, the faster policy. A move that covers no
 * audited site scores infinity and comes last. -1 or an exit code.
 */
static int order_candidates(search *s, search_move *c, int n)
{
    train_opts o = s->o; /* all --steps: a run that breaks late breaks in the audit too */
    o.device = "cpu";
    run_info ri = s->ri;
    audit_result r;
    policy_reset(s->dev);
    int rc = audit_collect(&o, &s->rd, &ri, o.init_from ? &s->init : NULL, &r);
    if (rc >= 0)
        return rc;
    const amp_audit_site **ranked = malloc(sizeof *ranked * (size_t)(r.n_sites > 0 ? r.n_sites : 1));
    if (!ranked) {
        fprintf(stderr, "ampc policy search: out of memory\n");
        audit_result_free(&r);
        return 1;
    }
    broken_site *b = malloc(sizeof *b * (size_t)(r.n_sites > 0 ? r.n_sites : 1));
    int k = 0;
    /* First the forward sites that made infs from finite inputs (the
     * audit's worst: where an overflow starts), in the order they ran. */
    for (int j = 0; j < amp_audit_num_sites(r.audit); j++) {
        const amp_audit_site *st = amp_audit_site_at(r.audit, j);
        if (!st->backward && st->overflow_made > 0)
            ranked[k++] = st;
    }
    const int made = k;
    for (int pass = 0; b && pass < 2; pass++) { /* the forward's, then the backward's */
        int nb = broken_in_order(r.audit, pass == 1, b, r.n_sites);
        for (int j = 0; j < nb; j++) {
            bool seen = false;
            for (int i = 0; i < made && !seen; i++)
                seen = ranked[i] == b[j].site;
            if (!seen)
                ranked[k++] = b[j].site;
        }
    }
    free(b);
    for (int j = 0; j < r.n_sites; j++)
        if (!broke(r.sites[j]))
            ranked[k++] = r.sites[j];
    for (int i = 0; i < n; i++) {
        c[i].score = INFINITY;
        for (int j = 0; j < k && isinf(c[i].score); j++)
            if (covers(&c[i], ranked[j]))
                c[i].score = j;
    }
    free(ranked);
    audit_result_free(&r);
    qsort(c, (size_t)n, sizeof *c, by_score);
    return -1;
}

/* Whether move k lies inside a module already picked (or is one). */
static bool covered(const search_move *c, const int *pick, int n, int k)
{
    if (c[k].op >= 0)
        return false;
    for (int i = 0; i < n; i++) {
        const search_move *m = &c[pick[i]];
        size_t len = strlen(m->path);
        if (m->op < 0 && strncmp(c[k].path, m->path, len) == 0 && (c[k].path[len] == '\0' || c[k].path[len] == '.'))
            return true;
    }
    return false;
}

/* The label of a policy: its moves, or what it is. */
static const char *describe(const search_move *c, const int *pick, int n, char *buf, size_t cap)
{
    size_t at = 0;
    snprintf(buf, cap, "%s", n ? "" : "full autocast");
    for (int i = 0; i < n && at < cap; i++) {
        int w = snprintf(buf + at, cap - at, "%s%s%s", i ? " + " : "", c[pick[i]].op < 0 ? "f32 " : "",
                         c[pick[i]].path);
        at += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* Whether outcome a is closer to the fp32 run's loss than b: a finite
 * loss is closer than none; of two finite ones, the nearer; of two runs
 * that broke, the one that trained longer before it broke. */
static bool closer(double ref, const search_outcome *a, const search_outcome *b)
{
    const bool fa = isfinite(a->loss), fb = isfinite(b->loss);
    if (fa != fb)
        return fa;
    if (!fa)
        return a->finite_steps > b->finite_steps;
    return fabs(rel_delta(ref, a->loss)) < fabs(rel_delta(ref, b->loss));
}

int policy_search_greedy(search_plan *sp, const search_move *c, int nc, search_outcome full, int *pick,
                         int *n, search_outcome *best, bool *found)
{
    *n = 0;
    *best = full;
    *found = within(sp->ref_loss, full.loss, sp->tolerance);
    int rc = -1;
    for (int k = 0; k < nc && !*found && rc < 0 && sp->trials < sp->max_trials; k++) {
        if (!isfinite(c[k].score) && isfinite(best->loss))
            break; /* the rest change nothing the forward shows */
        if (covered(c, pick, *n, k))
            continue;
        pick[*n] = k;
        search_outcome r;
        sp->trials++;
        if ((rc = sp->trial(sp->ctx, c, pick, *n + 1, &r)) >= 0)
            return rc;
        if (closer(sp->ref_loss, &r, best)) { /* kept: it brought the run closer */
            (*n)++;
            *best = r;
            *found = within(sp->ref_loss, r.loss, sp->tolerance);
        }
    }
    /* Each kept move dropped again where the policy stays within T (but the
     * last: the policy without it was the one before, not within T). */
    for (int i = *n - 2; i >= 0 && *found && *n > 1 && sp->trials < sp->max_trials; i--) {
        int without[POLICY_SEARCH_MAX_MOVES], m = 0;
        for (int j = 0; j < *n; j++)
            if (j != i)
                without[m++] = pick[j];
        search_outcome r;
        sp->trials++;
        if ((rc = sp->trial(sp->ctx, c, without, m, &r)) >= 0)
            return rc;
        if (within(sp->ref_loss, r.loss, sp->tolerance)) {
            memcpy(pick, without, (size_t)m * sizeof *pick);
            *n = m;
            *best = r;
        }
    }
    return -1;
}

/* search_plan's trial for the real runs: ctx is the search. */
static int train_moves(void *ctx, const search_move *c, const int *pick, int n, search_outcome *out)
{
    search *s = ctx;
    char label[1024];
    policy p;
    if (policy_of(c, pick, n, &p) != AMP_OK) {
        fprintf(stderr, "ampc policy search: %s\n", amp_last_error());
        return 1;
    }
    int rc = trial(s, &s->o, &p, describe(c, pick, n, label, sizeof label), out);
    policy_free(&p);
    return rc;
}

static void table_row(const search *s, const char *name, const search_outcome *r)
{
    printf("%-44s %+10.4f%% %10.3f %8.2fx %8.2fx\n", name, 100 * rel_delta(s->ref32.loss, r->loss), r->step_ms,
           r->step_ms > 0 ? s->ref32.step_ms / r->step_ms : 0, r->step_ms > 0 ? s->full.step_ms / r->step_ms : 0);
}

static bool given(const train_opts *o, const char *name) { return o->given[opts_find(name) - train_rows]; }

/* Parses the command line into a and s->o, s->o32 (resolved). -1 or an
 * exit code. */
static int parse_all(int argc, char **argv, search_args *a, search *s)
{
    *a = (search_args){.tolerance = NAN, .out = "policy.json", .max_trials = 16};
    train_opts_default(&s->o);
    opts_set_command(policy_search_options.who);
    const opt_dst dst[] = {{a, NULL}, {&s->o, s->o.given}};
    int rc = opt_parse(&policy_search_options, dst, NULL, argc, argv);
    for (size_t i = 0; rc < 0 && i < sizeof refused / sizeof refused[0]; i++)
        if (given(&s->o, refused[i])) {
            fprintf(stderr, "ampc policy search: --%s is not a policy search option (the search trains and keeps "
                            "only the policy; see ampc policy search --help)\n",
                    refused[i]);
            rc = EXIT_USAGE;
        }
    if (rc < 0 && isnan(a->tolerance)) {
        fprintf(stderr, "ampc policy search: give --tolerance T: how far from the fp32 run's final loss the "
                        "policy's may be (0.02: 2%%)\n");
        rc = EXIT_USAGE;
    }
    if (rc < 0) /* before any trial: nothing found is lost to a bad path */
        rc = output_check("ampc policy search", "--out", a->out, &s->o);
    if (rc < 0 && !given(&s->o, "steps"))
        s->o.steps = 100;
    if (rc < 0 && s->o.init_from)
        rc = init_from_settings(&s->o, &s->init);
    if (rc < 0)
        rc = opts_resolve(&s->o);
    if (rc < 0 && strcmp(s->o.precision, "fp32") == 0) {
        fprintf(stderr, "ampc policy search: --precision fp32 has nothing to search: give bf16 or fp16, the "
                        "precision the policy lowers to\n");
        rc = EXIT_USAGE;
    }
    if (rc < 0) {
        s->o32 = s->o;
        s->o32.precision = "fp32";
        s->o32.no_scaler = false;
        s->o32.param_dtype = "fp32";
    }
    return rc;
}

int policy_search_parse(int argc, char **argv)
{
    search_args a;
    search *s = calloc(1, sizeof *s);
    int rc = s ? parse_all(argc, argv, &a, s) : 1;
    free(s);
    return rc;
}

int policy_search_main(int argc, char **argv)
{
    search_args a;
    search *s = calloc(1, sizeof *s);
    search_move *c = calloc(POLICY_SEARCH_MAX_MOVES, sizeof *c);
    int rc = s && c ? parse_all(argc, argv, &a, s) : 1;
    if (rc < 0)
        rc = device_check(&s->o, "ampc policy search");
    if (rc < 0)
        rc = opts_apply_cpu(&s->o, "ampc policy search");
    bool open = false;
    if (rc < 0) {
        s->dev = strcmp(s->o.device, "cuda") == 0 ? AMP_CUDA : AMP_CPU;
        open = (rc = data_open(&s->rd, &s->o, &s->ri, true)) < 0;
    }
    if (rc < 0)
        rc = data_buffers(&s->rd, &s->o);
    char desc[256];
    if (rc < 0) {
        printf("ampc policy search: %s, %s, %lld steps, tolerance %g\n",
               model_describe(&s->o, &s->ri, desc, sizeof desc), s->o.precision, (long long)s->o.steps,
               a.tolerance);
        fflush(stdout);
    }
    policy none = {0};
    if (rc < 0)
        rc = trial(s, &s->o32, &none, "fp32 (reference)", &s->ref32);
    if (rc < 0 && !isfinite(s->ref32.loss)) {
        fprintf(stderr, "ampc policy search: the fp32 run's loss is not finite: nothing to compare with\n");
        rc = 1;
    }
    if (rc < 0)
        rc = trial(s, &s->o, &none, "full autocast", &s->full);
    int nc = 0, pick[POLICY_SEARCH_MAX_MOVES], n = 0;
    search_outcome best = {0};
    bool found = false;
    if (rc < 0 && !within(s->ref32.loss, s->full.loss, a.tolerance)) {
        policy_reset(s->dev);
        trainer t;
        if (!trainer_build(&t, &s->o, &s->ri, 1)) {
            rc = 1;
        } else {
            nc = list_candidates(t.model, s->dev, c, POLICY_SEARCH_MAX_MOVES);
            trainer_free(&t);
            rc = order_candidates(s, c, nc);
        }
    }
    search_plan plan = {.ref_loss = s->ref32.loss, .tolerance = a.tolerance, .max_trials = (int)a.max_trials,
                        .trial = train_moves, .ctx = s};
    if (rc < 0)
        rc = policy_search_greedy(&plan, c, nc, s->full, pick, &n, &best, &found);
    policy p = {0};
    if (rc < 0 && policy_of(c, pick, n, &p) != AMP_OK) {
        fprintf(stderr, "ampc policy search: %s\n", amp_last_error());
        rc = 1;
    }
    if (rc < 0) {
        char label[1024];
        printf("\n%-44s %11s %10s %9s %9s\n", "policy", "loss delta", "step ms", "vs fp32", "vs autocast");
        table_row(s, "fp32", &s->ref32);
        table_row(s, "full autocast", &s->full);
        if (n > 0)
            table_row(s, describe(c, pick, n, label, sizeof label), &best);
        if (!found) {
            fprintf(stderr, "ampc policy search: no policy within %g of the fp32 run's loss after %d trials (the "
                            "closest above); nothing written: give more --max-trials, a larger --tolerance, or "
                            "keep fp32\n",
                    a.tolerance, plan.trials);
            rc = 1;
        } else if (policy_write(a.out, &p) != AMP_OK) {
            fprintf(stderr, "ampc policy search: %s\n", amp_last_error());
            rc = 1;
        } else {
            printf("policy written to %s (train with: ampc train --policy %s ...)\n", a.out, a.out);
        }
    }
    policy_free(&p);
    if (open)
        data_close(&s->rd);
    free(c);
    free(s);
    return rc < 0 ? 0 : rc;
}
