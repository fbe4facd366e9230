/*
 * plot.h - `ampc plot`: a training log (JSON Lines, see log.h) drawn as an
 * SVG with panels over the step axis: the loss, the grad scaler's loss
 * scale with the skipped steps marked, and (--health-every) the f16
 * health of the gradients.
 *
 *   plot_read.c  the log reader: a small parser for flat JSON objects
 *   plot.c       the SVG
 *   plot_cmd.c   the command line
 */
#ifndef AMPC_PLOT_H
#define AMPC_PLOT_H

#include "ampc.h"
#include "opts.h"

/* `ampc plot LOG [-o OUT.svg]`: the arguments after "plot". Returns the
 * exit code: 0 written, 1 an unreadable / malformed log or unwritable
 * output (message on stderr), 2 a bad command line. */
int plot_run(int argc, char **argv);
/* Its options (plot_cmd.c's table). */
extern const opt_cmd plot_options;

typedef struct {
    int64_t steps;     /* step lines */
    int64_t skipped;   /* with "skipped":true */
    int64_t nonfinite; /* with "loss":null */
    int64_t val;       /* with a val_loss */
} plot_summary;

/* Reads log_path and writes the SVG to svg_path; sum (may be NULL) gets
 * what was read. Errors name the file (and line, for a malformed log). */
amp_status plot_file(const char *log_path, const char *svg_path, plot_summary *sum);

/* ------------------------------------------ between plot.c and plot_read.c */

/* The f16 health keys of a log line (log.h), in the health panel's order. */
#define PLOT_HEALTH_N 7
extern const char *const plot_health_keys[PLOT_HEALTH_N];

/* One step line of the log. NAN where the log has null or no value. */
typedef struct {
    double step;
    double loss;      /* NAN: "loss":null (non-finite) or no loss key */
    double scale;     /* NAN: no scaler */
    double val_loss;  /* NAN: none */
    bool has_loss;    /* the line has a "loss" key (null included) */
    bool skipped;
    double health[PLOT_HEALTH_N]; /* --health-every's f16_* fractions (plot_health_keys' order); NAN: none */
} plot_point;

typedef struct {
    plot_point *p;
    int64_t n, cap;
} plot_data;

/* Reads every line of path: each must be a flat JSON object (or blank);
 * objects without "step" (a header, notes) are passed over. A malformed
 * line is an AMP_ERR_FORMAT error "plot: PATH:LINE: why (column C)". */
amp_status plot_read(const char *path, plot_data *d);
void plot_data_free(plot_data *d);

/* The page geometry, in SVG user units (the tests check marks against it). */
#define W 960.0
#define ML 84.0 /* left margin: the y tick labels */
#define MR 28.0
#define PW (W - ML - MR)
#define LOSS_TOP 92.0
#define LOSS_H 300.0
#define SCALE_GAP 50.0 /* between the panels: the second title line */
#define SCALE_H 170.0
#define HEALTH_GAP 50.0 /* above the f16 health panel (drawn when the log has one) */
#define HEALTH_H 170.0
#define FOOT 52.0 /* below the last panel: x tick labels, "step" */

/* The default output for a log path: its .jsonl/.ndjson/.json/.log
 * extension replaced by .svg (malloc'd). */
char *default_output(const char *log);

#endif
