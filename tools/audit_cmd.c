/*
 * audit_cmd.c - `ampc audit`: what 16 bits moved in a run, per op call
 * site and per parameter, against an fp32 shadow (audit.h collects it):
 * a table worst first, --json for machines, --svg for a chart of the
 * sites' errors. Every train option that shapes the run applies (model,
 * data, precision, optimizer, schedule); nothing is saved or logged.
 */
#include "audit.h"
#include "cli.h"
#include "data.h"
#include "eval.h"
#include "memcheck.h"
#include "output_check.h"
#include "settings.h"
#include "trainer.h"

#include "io/file.h"
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Options that keep something or need a run audit does not make; the
 * anomaly check would need the node observer the audit holds. */
static const char *const refused[] = {"save",          "save-every",     "stop-at",      "resume",
                                      "log",           "log-mode",       "dry-run",      "epochs",
                                      "tensorboard",   "profile",        "profile-steps", "profile-warmup",
                                      "health-every",  "init-from",      "zero",         "detect-anomaly",
                                      "anomaly-continue"};

typedef struct {
    bool json;
    const char *svg;
    int64_t top;
} audit_args;

static const opt_def audit_rows[] = {
    {.name = "json", .meta = "", .kind = OPT_FLAG, .off = offsetof(audit_args, json),
     .help = "print the results as one JSON object instead of the tables"},
    {.name = "svg", .meta = "FILE", .kind = OPT_STR, .off = offsetof(audit_args, svg),
     .help = "also draw the sites' errors (worst first) as an SVG in FILE"},
    {.name = "top", .meta = "N", .kind = OPT_INT, .off = offsetof(audit_args, top), .lo = 0, .hi = 1e9,
     .help = "the table and the SVG show the N worst sites (default 30; 0: all)"},
};

static const opt_pick audit_picks[] = {
    {"model", NULL}, {"data", NULL}, {"precision", NULL}, {"param-dtype", NULL},
    {"steps", "steps audited (default 1)"}, {"batch", NULL}, {"lr", NULL}, {"optim", NULL}, {"seed", NULL},
};

const opt_cmd audit_options = {
    .who = "ampc audit",
    .usage = "usage: ampc audit [--json] [--svg FILE] [--top N] [train options]\n\n"
             "Runs --steps steps (default 1) of the training run in its precision beside an\n"
             "fp32 shadow: the same model with the audited weights widened to f32, no autocast,\n"
             "on the same batches with the same dropout draws and loss scale. Per op call site\n"
             "(module path and op, forward and backward) it reports the relative error of the\n"
             "values against the shadow's (max, mean, norm-wise), and the shares that flushed\n"
             "to zero, became subnormal or overflowed; per parameter, the update-to-weight\n"
             "ratio and the share of the updated elements that rounded to no change in the\n"
             "parameter's dtype (stalled). Sites worst first (mean relative error).\n"
             "CPU only. docs/debugging.md defines every column.\n\n",
    .footer = "  any ampc train option that shapes the run (--model, --data, --precision,\n"
              "  --param-dtype, --optim, --lr, --accum, --dropout, ...); not --save, --save-every,\n"
              "  --stop-at, --resume, --log, --log-mode, --dry-run, --epochs, --tensorboard,\n"
              "  --profile*, --health-every, --init-from, --zero, --detect-anomaly or\n"
              "  --anomaly-continue (see ampc train --help)\n\n"
              "example: ampc audit --model gpt --precision bf16 --steps 2 --svg audit.svg\n",
    .blocks = (const opt_block[]){
        {.rows = audit_rows, .n = sizeof audit_rows / sizeof audit_rows[0]},
        {.rows = train_rows, .n = RO_COUNT, .pick = audit_picks, .n_pick = sizeof audit_picks / sizeof audit_picks[0]},
        {.rows = train_rows, .n = RO_COUNT, .unlisted = true},
    },
    .n_blocks = 3,
};

static bool given(const train_opts *o, const char *name) { return o->given[opts_find(name) - train_rows]; }

static int parse(int argc, char **argv, audit_args *a, train_opts *o)
{
    *a = (audit_args){.top = 30};
    train_opts_default(o);
    opts_set_command(audit_options.who);
    const opt_dst dst[] = {{a, NULL}, {o, o->given}, {o, o->given}};
    int rc = opt_parse(&audit_options, dst, NULL, argc, argv);
    for (size_t i = 0; rc < 0 && i < sizeof refused / sizeof refused[0]; i++)
        if (given(o, refused[i])) {
            fprintf(stderr, "ampc audit: --%s is not an ampc audit option (it runs --steps steps and keeps "
                            "nothing; see ampc audit --help)\n", refused[i]);
            rc = EXIT_USAGE;
        }
    /* The audit measures full autocast (--precision) against fp32; a
     * policy would not be applied, and its table would look like one. */
    for (size_t i = 0; rc < 0 && i < 2; i++)
        if (given(o, i ? "fp32-modules" : "policy")) {
            fprintf(stderr, "ampc audit: --%s: the audit measures full autocast (--precision) against fp32 and "
                            "applies no policy; leave it out (ampc policy search audits the candidates itself)\n",
                    i ? "fp32-modules" : "policy");
            rc = EXIT_USAGE;
        }
    if (rc < 0 && given(o, "device") && strcmp(o->device, "cpu") != 0) {
        fprintf(stderr, "ampc audit: --device %s: the audit runs on the CPU only (it reads every op's values)\n",
                o->device);
        rc = EXIT_USAGE;
    }
    if (rc < 0 && a->svg)
        rc = output_check("ampc audit", "--svg", a->svg, o);
    if (rc < 0 && !given(o, "steps"))
        o->steps = 1;
    if (rc < 0)
        rc = opts_resolve(o);
    return rc;
}

static double frac(int64_t part, int64_t whole) { return whole > 0 ? (double)part / (double)whole : 0; }

static const char *pass_name(const amp_audit_site *s) { return s->backward ? "backward" : "forward"; }

/* "h.0.attn" or "(root)" for ops outside every module. */
static const char *scope_label(const amp_audit_site *s) { return s->scope[0] ? s->scope : "(root)"; }

static int shown(const audit_args *a, const audit_result *r)
{
    return a->top > 0 && a->top < r->n_sites ? (int)a->top : r->n_sites;
}

static void print_tables(const audit_args *a, const train_opts *o, const audit_result *r)
{
    printf("ampc audit: %s against an fp32 shadow, %lld step%s (%lld skipped by the grad scaler)\n", o->precision,
           (long long)r->steps, r->steps == 1 ? "" : "s", (long long)r->skipped);
    printf("\n%-26s %-30s %-3s %-5s %10s %10s %10s %9s %9s %9s\n", "module", "op", "", "dtype", "max rel",
           "mean rel", "norm rel", "flushed", "subnorm", "overflow");
    int n = shown(a, r);
    for (int i = 0; i < n; i++) {
        const amp_audit_site *s = r->sites[i];
        printf("%-26s %-30s %-3s %-5s %10.3g %10.3g %10.3g %8.3f%% %8.3f%% %8.3f%%%s%s\n", scope_label(s), s->op,
               s->backward ? "bwd" : "fwd", amp_dtype_name(s->dtype), s->max_rel, audit_mean_rel(s),
               audit_norm_rel(s), 100 * frac(s->flushed, s->values), 100 * frac(s->subnormal, s->values),
               100 * frac(s->overflow, s->values), s->overflow_made ? "  (overflows from finite inputs)" : "",
               s->unmatched ? "  (unmatched calls)" : "");
    }
    if (n < r->n_sites)
        printf("... %d more sites (--top 0 shows all)\n", r->n_sites - n);
    printf("\n%-40s %-5s %14s %9s\n", "parameter", "dtype", "update/weight", "stalled");
    for (int i = 0; i < r->n_params; i++) {
        const audit_param *p = &r->params[i];
        printf("%-40s %-5s %14.3g %8.3f%%\n", p->name, amp_dtype_name(p->dtype), audit_update_ratio(p),
               100 * audit_stalled(p));
    }
}

/* A number for JSON: non-finite ones as null. */
static void jb_num(json_buf *b, double v)
{
    if (isfinite(v))
        jb_printf(b, "%.9g", v);
    else
        jb_puts(b, "null");
}

static bool print_json(const train_opts *o, const audit_result *r)
{
    json_buf b = {0};
    jb_printf(&b, "{\"format\":\"ampc-audit\",\"version\":1,\"model\":");
    jb_string(&b, o->model);
    jb_puts(&b, ",\"precision\":");
    jb_string(&b, o->precision);
    jb_printf(&b, ",\"steps\":%lld,\"skipped\":%lld,\"sites\":[", (long long)r->steps, (long long)r->skipped);
    for (int i = 0; i < r->n_sites; i++) {
        const amp_audit_site *s = r->sites[i];
        jb_puts(&b, i ? ",{\"module\":" : "{\"module\":");
        jb_string(&b, s->scope);
        jb_puts(&b, ",\"op\":");
        jb_string(&b, s->op);
        jb_printf(&b, ",\"pass\":\"%s\",\"dtype\":\"%s\",\"calls\":%lld,\"unmatched\":%lld,\"values\":%lld,"
                      "\"max_rel\":", pass_name(s), amp_dtype_name(s->dtype), (long long)s->calls,
                  (long long)s->unmatched, (long long)s->values);
        jb_num(&b, s->max_rel);
        jb_puts(&b, ",\"mean_rel\":");
        jb_num(&b, audit_mean_rel(s));
        jb_puts(&b, ",\"norm_rel\":");
        jb_num(&b, audit_norm_rel(s));
        jb_printf(&b, ",\"flushed\":%.9g,\"subnormal\":%.9g,\"overflow\":%.9g,\"overflow_made\":%.9g}",
                  frac(s->flushed, s->values), frac(s->subnormal, s->values), frac(s->overflow, s->values),
                  frac(s->overflow_made, s->values));
    }
    jb_puts(&b, "],\"params\":[");
    for (int i = 0; i < r->n_params; i++) {
        const audit_param *p = &r->params[i];
        jb_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        jb_string(&b, p->name);
        jb_printf(&b, ",\"dtype\":\"%s\",\"numel\":%lld,\"steps\":%d,\"update_ratio\":", amp_dtype_name(p->dtype),
                  (long long)p->numel, p->steps);
        jb_num(&b, audit_update_ratio(p));
        jb_printf(&b, ",\"moved\":%lld,\"stalled\":%.9g}", (long long)p->moved, audit_stalled(p));
    }
    jb_puts(&b, "]}\n");
    bool ok = !b.oom;
    if (ok)
        fwrite(b.p, 1, b.len, stdout);
    else
        fprintf(stderr, "ampc audit: out of memory for the JSON\n");
    jb_free(&b);
    return ok;
}

/* s with XML's special characters escaped. */
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

/* The SVG: a row per site (worst first), a bar to its mean relative error
 * and a tick at its largest, on a log axis of decades from 1e-8 (an
 * error of 0 draws no bar). */
#define SVG_W 1080.0
#define SVG_LEFT 420.0
#define SVG_RIGHT 160.0
#define SVG_TOP 70.0
#define SVG_ROW 18.0
#define SVG_LO -8 /* the axis' first decade */

static double svg_x(double v, int hi)
{
    double d = v > 0 ? log10(v) : SVG_LO;
    d = fmin(fmax(d, SVG_LO), hi);
    return SVG_LEFT + (SVG_W - SVG_LEFT - SVG_RIGHT) * (d - SVG_LO) / (hi - SVG_LO);
}

static bool write_svg(const char *path, const audit_args *a, const train_opts *o, const audit_result *r)
{
    char why[200];
    FILE *f = file_fopen_write(path, false, why, sizeof why);
    if (!f) {
        fprintf(stderr, "ampc audit: --svg %s: %s\n", path, why);
        return false;
    }
    int n = shown(a, r), hi = 0;
    for (int i = 0; i < n; i++)
        while (r->sites[i]->max_rel > pow(10, hi) && hi < 8)
            hi++;
    const double h = SVG_TOP + SVG_ROW * (n > 0 ? n : 1) + 50;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
               SVG_W, h, SVG_W, h);
    fputs("<text x=\"12\" y=\"24\" font-size=\"15\">ampc audit: ", f);
    xml_text(f, o->model);
    fputs(" in ", f);
    xml_text(f, o->precision);
    fprintf(f, " against fp32, %lld step%s: relative error per call site (bar: mean, tick: max; red: values that "
            "overflowed to inf)</text>\n",
            (long long)r->steps, r->steps == 1 ? "" : "s");
    const double bottom = SVG_TOP + SVG_ROW * n;
    for (int d = SVG_LO; d <= hi; d++) {
        double x = svg_x(pow(10, d), hi);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, SVG_TOP - 6, x,
                bottom);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">1e%d</text>\n", x, bottom + 16, d);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">relative error against the fp32 shadow</text>\n",
            (SVG_LEFT + SVG_W - SVG_RIGHT) / 2, bottom + 36);
    for (int i = 0; i < n; i++) {
        const amp_audit_site *s = r->sites[i];
        double y = SVG_TOP + SVG_ROW * i, mean = audit_mean_rel(s);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", SVG_LEFT - 8, y + 12);
        xml_text(f, scope_label(s));
        fputs(" ", f);
        xml_text(f, s->op);
        fprintf(f, " %s</text>\n", s->backward ? "bwd" : "fwd");
        if (mean > 0)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", SVG_LEFT,
                    y + 3, svg_x(mean, hi) - SVG_LEFT, SVG_ROW - 6, s->backward ? "#d95f02" : "#1b9e77");
        if (s->max_rel > 0)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                    svg_x(s->max_rel, hi), y + 1, svg_x(s->max_rel, hi), y + SVG_ROW - 1);
        if (s->overflow > 0) /* an infinite error has no bar: its share, in red, in the margin */
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c00\">inf %.3g%%%s</text>\n", SVG_W - SVG_RIGHT + 8,
                    y + 12, 100 * frac(s->overflow, s->values), s->overflow_made ? " made here" : "");
    }
    fputs("</svg>\n", f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok)
        fprintf(stderr, "ampc audit: --svg %s: write failed\n", path);
    return ok;
}

int audit_parse(int argc, char **argv)
{
    audit_args a;
    train_opts o;
    return parse(argc, argv, &a, &o);
}

int audit_main(int argc, char **argv)
{
    audit_args a;
    train_opts o;
    int rc = parse(argc, argv, &a, &o);
    if (rc < 0)
        rc = opts_apply_cpu(&o, "ampc audit");
    if (rc >= 0)
        return rc;
    run_data rd;
    run_info ri = {0};
    if ((rc = data_open(&rd, &o, &ri, true)) >= 0)
        return rc;
    rc = mem_check(&o, &ri, &rd, false);
    if (rc < 0)
        rc = data_buffers(&rd, &o);
    audit_result r;
    if (rc < 0)
        rc = audit_collect(&o, &rd, &ri, NULL, &r);
    data_close(&rd);
    if (rc >= 0)
        return rc;
    bool ok = a.json ? print_json(&o, &r) : (print_tables(&a, &o, &r), true);
    if (ok && a.svg) {
        ok = write_svg(a.svg, &a, &o, &r);
        if (ok && !a.json)
            printf("\nSVG written to %s\n", a.svg);
    }
    audit_result_free(&r);
    return ok ? 0 : 1;
}
