/*
 * plot.c - the drawing behind `ampc plot` (its command line is plot_cmd.c):
 * a training log as an SVG written by hand (no dependency), for any browser.
 *
 * Two panels share the step axis:
 *   - the loss: the raw per-step values (thin, light) and, for 90 steps or
 *     more, an exponential moving average (thick; debiased as in
 *     TensorBoard, over ~n/30 steps); validation losses as dots; a log10
 *     axis when the finite losses span more than two decades, else linear.
 *     A null loss (NaN / inf) is a red x along the top edge; a skipped step
 *     a red tick along the bottom edge.
 *   - the loss scale on a log2 axis, as a step line (it holds between
 *     updates), with each skipped step a red dot at the scale it used.
 *     Left out when the log has no scale (no grad scaler ran).
 *   - the f16 health of the gradients (ampc train --health-every): the
 *     share of elements that are zero, or would flush to zero, become
 *     subnormal or overflow in f16, unscaled and at the scale, in percent.
 *     Left out when the log has none.
 * Legends sit on each panel's title line, outside the data, so they never
 * hide a curve. Above 2 points per pixel a line keeps, per pixel column,
 * its first, lowest, highest and last point: the envelope stays exact and
 * a 100k-step log stays a small file.
 *
 * Each marker has a class (skip-tick, skip-dot, nan-mark, val-dot) and a
 * <title> tooltip; the loss line is the path with class loss-raw.
 */
#include "plot.h"

#include "base/base.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Layout, in SVG pixels. */
/* The page geometry (W, ML, PW, LOSS_TOP ...) is in plot.h. */

#define C_RAW "#8fb8de"
#define C_RAW_ALONE "#1f5fa8"
#define C_SMOOTH "#0b3d91"
#define C_VAL "#e6550d"
#define C_SCALE "#2b8a3e"
#define C_BAD "#d62728"
#define C_GRID "#e6e6e6"
#define C_FRAME "#9a9a9a"
#define C_TEXT "#222222"
#define C_MUTED "#666666"

typedef enum { AX_LIN, AX_LOG10, AX_LOG2 } ax_kind;

/* Pixels are clamped to this many either side of the page: a coordinate
 * is always a short finite number, whatever the data. */
#define PX_LIMIT 1e4
/* At most this many tick intervals on a linear axis: the tick loops count
 * (they never add a step until a bound, which stalls where lo + step ==
 * lo, as at 2^53). */
#define MAX_TICKS 40

typedef struct {
    ax_kind kind;
    double lo, hi; /* in axis units: the value, log10 or log2 of it; finite, lo < hi */
    double step;   /* linear tick spacing (axis units), finite and > 0 */
    int nticks;    /* linear: tick k (0..nticks) is at lo + k * step */
    double top, h; /* pixels; for the x axis: left, width */
} axis;

static double ax_units(const axis *a, double v)
{
    return a->kind == AX_LOG10 ? log10(v) : a->kind == AX_LOG2 ? log2(v) : v;
}

/* Where u (axis units) falls between lo (0) and hi (1); halved when hi -
 * lo overflows (ends near +-DBL_MAX). */
static double ax_frac(const axis *a, double u)
{
    double span = a->hi - a->lo;
    if (isfinite(span))
        return (u - a->lo) / span;
    return (u / 2 - a->lo / 2) / (a->hi / 2 - a->lo / 2);
}

static double clamp_px(double p) { return isnan(p) ? -PX_LIMIT : fmin(fmax(p, -PX_LIMIT), PX_LIMIT); }

/* The pixel of value v: y axes grow upwards. */
static double ax_y_units(const axis *a, double u) { return clamp_px(a->top + a->h * (1 - ax_frac(a, u))); }
static double ax_y(const axis *a, double v) { return ax_y_units(a, ax_units(a, v)); }
static double ax_x(const axis *a, double v) { return clamp_px(a->top + a->h * ax_frac(a, ax_units(a, v))); }

/* 1, 2 or 5 times a power of ten, about (hi - lo) / n; without overflow
 * for any finite ends. Not finite when the span is too small to divide. */
static double nice_step(double lo, double hi, int n)
{
    double raw = (hi / 2 - lo / 2) / n * 2, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
    return isfinite(step) ? step : raw; /* past DBL_MAX: the raw spacing */
}

/* Tick k of a linear axis. */
static double ax_tick(const axis *a, int k)
{
    double v = a->lo + k * a->step;
    if (!isfinite(v) || k == a->nticks) { /* the last tick is hi itself; interpolated where lo + k * step overflows */
        double t = (double)k / a->nticks;
        v = k == a->nticks ? a->hi : a->lo * (1 - t) + a->hi * t;
    }
    return v;
}

/* A linear axis over [lo, hi] (finite), widened to whole ticks. A span
 * too small to divide (equal ends, denormals, fewer than ~64 ulps of a
 * large number) is widened around its middle first: equal ends by 10%
 * (by 1 at 0), a narrow span to the 64 ulps. */
static void lin_axis(axis *a, double lo, double hi, int ticks)
{
    double mid = lo / 2 + hi / 2, mag = fmax(fabs(lo), fabs(hi));
    double min_span = fmax(mag * 0x1p-46, 1e-300); /* ~64 ulps of the larger end */
    if (!(hi / 2 - lo / 2 >= min_span / 2)) {
        double d = hi > lo ? min_span / 2 : fabs(mid) * 0.1; /* equal ends: 10% either side */
        if (!(d >= min_span / 2))
            d = mid == 0 ? 1 : min_span / 2;
        lo = fmax(mid - d, -DBL_MAX);
        hi = fmin(mid + d, DBL_MAX);
    }
    a->kind = AX_LIN;
    a->step = nice_step(lo, hi, ticks);
    double l = floor(lo / a->step + 1e-9) * a->step, h = ceil(hi / a->step - 1e-9) * a->step;
    a->lo = isfinite(l) && l <= lo ? l : lo;
    a->hi = isfinite(h) && h >= hi ? h : hi;
    double n = round((a->hi / 2 - a->lo / 2) / a->step * 2);
    if (!(n >= 1 && n <= MAX_TICKS)) { /* cannot happen for a nice step; just the ends then */
        n = 1;
        a->step = a->hi / 2 - a->lo / 2;
    }
    a->nticks = (int)n;
}

/* A tick label: enough decimals for the spacing; k / M for thousands and
 * millions; %g's form for very large or very small values. */
static void tick_label(char *buf, size_t n, double v, double step)
{
    if (fabs(v) < step * 1e-6)
        v = 0;
    if (step < 1e-4 || fabs(v) >= 1e12 || step >= 1e12) {
        /* digits enough to tell ticks apart: v's magnitude over the step */
        double r = fmax(fabs(v), step) / step;
        int d = (int)fmin(17, fmax(2, ceil(log10(r)) + 2));
        snprintf(buf, n, "%.*g", d, v);
        return;
    }
    if (step >= 1000) { /* ticks are whole thousands: "0", "2k", "4k" */
        if (v == 0)
            snprintf(buf, n, "0");
        else if (step >= 1e6)
            snprintf(buf, n, "%.0fM", v / 1e6);
        else
            snprintf(buf, n, "%.0fk", v / 1000);
        return;
    }
    int d = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    snprintf(buf, n, "%.*f", d, v);
}

/* A step number as text: %.15g, or %.17g where that is needed to tell
 * it from its neighbours (past 2^53). Returns buf (32 bytes). */
static const char *step_str(char *buf, double v)
{
    snprintf(buf, 32, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, 32, "%.17g", v);
    return buf;
}

static void decade_label(char *buf, size_t n, int k)
{
    if (k >= -4 && k <= 4)
        snprintf(buf, n, "%g", pow(10, k));
    else
        snprintf(buf, n, "1e%d", k);
}

/* -------------------------------------------------------- lines (paths) */

/* Writes one polyline as a path's d, with breaks (M) at non-finite y and
 * per-pixel-column decimation when asked. Decimated, a line has at most
 * five vertices per pixel column, whatever its points: a break inside a
 * column is not drawn (it would be invisible), so a log alternating
 * finite and NaN losses stays as small as any other. */
typedef struct {
    FILE *f;
    bool decimate, pen;
    bool have;  /* a column bucket is pending */
    bool gap;   /* a non-finite point came after the bucket */
    double col; /* its pixel column */
    double x, y_first, y_min, y_max, y_last;
    int min_first; /* whether the min came before the max */
} polyline;

static void pl_vertex(polyline *p, double x, double y)
{
    fprintf(p->f, "%s%.1f %.1f", p->pen ? "L" : "M", x, y);
    p->pen = true;
}

static void pl_flush(polyline *p)
{
    if (!p->have)
        return;
    p->have = false;
    pl_vertex(p, p->x, p->y_first);
    double a = p->min_first ? p->y_min : p->y_max, b = p->min_first ? p->y_max : p->y_min;
    if (a != p->y_first)
        pl_vertex(p, p->x, a);
    if (b != a)
        pl_vertex(p, p->x, b);
    if (p->y_last != b)
        pl_vertex(p, p->x, p->y_last);
}

static void pl_point(polyline *p, double x, double y)
{
    if (!isfinite(y)) { /* a gap */
        if (p->decimate) {
            p->gap = true;
            return;
        }
        p->pen = false;
        return;
    }
    if (!p->decimate) {
        pl_vertex(p, x, y);
        return;
    }
    double col = floor(x);
    if (p->have && col == p->col) {
        if (y < p->y_min) {
            p->y_min = y;
            p->min_first = 0;
        }
        if (y > p->y_max) {
            p->y_max = y;
            p->min_first = 1;
        }
        p->y_last = y;
        return;
    }
    pl_flush(p);
    *p = (polyline){.f = p->f, .decimate = true, .pen = p->pen && !p->gap, .have = true, .col = col, .x = x,
                    .y_first = y, .y_min = y, .y_max = y, .y_last = y, .min_first = 1};
}

/* Whether a marker of one kind may go in pixel column x: one per column
 * (the points come in step order), so markers stay as few as the columns. */
typedef struct {
    double col;
} mark_col;

static bool mark_once(mark_col *m, double x)
{
    double col = floor(x);
    if (col == m->col)
        return false;
    m->col = col;
    return true;
}

/* ------------------------------------------------------------- drawing */

typedef struct {
    FILE *f;
    const plot_data *d;
    axis x;
    double x_lo, x_hi; /* steps */
    bool has_scale, smooth, has_health;
    int64_t skipped, nonfinite, val, finite;
} plot;

static void text(FILE *f, double x, double y, const char *anchor, const char *style, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" %s>", x, y, anchor, style);
    for (; *s; s++) /* XML-escape: the title holds a file name */
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        default: fputc((unsigned char)*s < 0x20 ? '?' : *s, f); /* control characters are not XML */
        }
    fputs("</text>\n", f);
}

/* A legend: items laid out leftwards from the panel's right edge on its
 * title line. kind: 'l' line, 'd' dot, 't' red tick, 'x' red cross. */
typedef struct {
    char kind;
    const char *color, *label;
    double width;
} legend_item;

static void legend(FILE *f, double y, const legend_item *it, int n)
{
    double x = ML + PW;
    for (int i = n - 1; i >= 0; i--) {
        double tw = 6.3 * (double)strlen(it[i].label); /* ~11 px sans-serif */
        x -= tw;
        text(f, x, y, "start", "font-size=\"11\" fill=\"" C_TEXT "\"", it[i].label);
        double sx = x - 26, cy = y - 4;
        switch (it[i].kind) {
        case 'l':
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"/>\n",
                    sx, cy, sx + 20, cy, it[i].color, it[i].width);
            break;
        case 'd':
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", sx + 10, cy, it[i].color);
            break;
        case 't':
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" C_BAD "\" stroke-width=\"2\"/>\n",
                    sx + 10, cy - 6, sx + 10, cy + 5);
            break;
        default:
            fprintf(f, "<path d=\"M%.1f %.1fl7 7m0 -7l-7 7\" stroke=\"" C_BAD "\" stroke-width=\"2\" fill=\"none\"/>\n",
                    sx + 6.5, cy - 3.5);
        }
        x = sx - 14;
    }
}

/* Frame, grid, y labels of a panel, and the x grid. */
static void panel_frame(plot *p, const axis *y, const char *title, const char *clip)
{
    FILE *f = p->f;
    text(f, ML, y->top - 10, "start", "font-size=\"13\" font-weight=\"bold\" fill=\"" C_TEXT "\"", title);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fcfcfc\"/>\n", ML, y->top,
            PW, y->h);
    fprintf(f, "<clipPath id=\"%s\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
            clip, ML, y->top, PW, y->h);
    char buf[32];
    fprintf(f, "<g stroke=\"" C_GRID "\" stroke-width=\"1\">\n");
    for (int k = 0; k <= p->x.nticks; k++) {
        double px = ax_x(&p->x, ax_tick(&p->x, k));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px, y->top, px, y->top + y->h);
    }
    /* Log axes: a major line every `step` powers (at most about 8 of them);
     * minor lines at 2..9 x 10^k when each decade has a line. Counted in
     * axis units, so no power is computed that over- or underflows. */
    double step = 1, first = y->lo;
    int n_major = y->nticks;
    if (y->kind != AX_LIN) {
        step = fmax(1, ceil((y->hi - y->lo) / (y->kind == AX_LOG2 ? 6 : 8)));
        first = ceil(y->lo / step - 1e-9) * step;
        n_major = (int)floor((y->hi - first) / step + 1e-9);
    }
    if (y->kind == AX_LOG10 && step == 1)
        for (int k = (int)y->lo; k < (int)y->hi; k++)
            for (int m = 2; m <= 9; m++) {
                double py = ax_y_units(y, k + log10(m));
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#f1f1f1\"/>\n", ML,
                        py, ML + PW, py);
            }
    fputs("</g>\n", f);
    /* Major y lines and labels. */
    for (int k = 0; k <= n_major; k++) {
        double u = y->kind == AX_LIN ? ax_tick(y, k) : first + k * step;
        double py = ax_y_units(y, u);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d4d4d4\"/>\n", ML, py,
                ML + PW, py);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" C_FRAME "\"/>\n", ML - 5,
                py, ML, py);
        if (y->kind == AX_LOG2) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\" fill=\"" C_TEXT
                       "\">2<tspan dy=\"-5\" font-size=\"8\">%d</tspan></text>\n",
                    ML - 8 - (u >= 10 || u < 0 ? 10 : 5), py + 4, (int)u);
            continue;
        }
        if (y->kind == AX_LOG10)
            decade_label(buf, sizeof buf, (int)lround(u));
        else
            tick_label(buf, sizeof buf, u, y->step);
        text(f, ML - 8, py + 4, "end", "font-size=\"11\" fill=\"" C_TEXT "\"", buf);
    }
}

static void panel_border(FILE *f, const axis *y)
{
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"" C_FRAME "\"/>\n",
            ML, y->top, PW, y->h);
}

/* The loss axis: log10 when the finite values span more than two decades. */
static void loss_axis(plot *p, axis *y)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < p->d->n; i++) {
        const plot_point *pt = &p->d->p[i];
        for (int k = 0; k < 2; k++) {
            double v = k ? pt->val_loss : pt->loss;
            if (isfinite(v)) {
                lo = fmin(lo, v);
                hi = fmax(hi, v);
            }
        }
    }
    y->top = LOSS_TOP;
    y->h = LOSS_H;
    if (!isfinite(lo)) { /* nothing finite: an empty 0..1 panel */
        lin_axis(y, 0, 1, 5);
        return;
    }
    if (lo > 0 && hi / lo > 100) {
        y->kind = AX_LOG10;
        y->lo = floor(log10(lo));
        y->hi = ceil(log10(hi));
        return;
    }
    double pad = (hi / 2 - lo / 2) * 0.08; /* 4% of hi - lo, which may overflow */
    double plo = fmax(lo - pad, -DBL_MAX), phi = fmin(hi + pad, DBL_MAX);
    lin_axis(y, lo >= 0 && plo < 0 ? 0 : plo, phi, 6);
}

static void loss_panel(plot *p)
{
    FILE *f = p->f;
    const plot_data *d = p->d;
    char sb[32];
    axis y = {0};
    loss_axis(p, &y);
    panel_frame(p, &y, y.kind == AX_LOG10 ? "Training loss (log scale)" : "Training loss", "clip-loss");
    fputs("<g clip-path=\"url(#clip-loss)\" fill=\"none\" stroke-linejoin=\"round\">\n", f);
    bool decimate = (double)p->finite > 2 * PW;
    fprintf(f, "<path class=\"loss-raw\" stroke=\"%s\" stroke-width=\"%s\" d=\"", p->smooth ? C_RAW : C_RAW_ALONE,
            p->smooth ? "1" : "1.6");
    polyline pl = {.f = f, .decimate = decimate};
    for (int64_t i = 0; i < d->n; i++)
        if (d->p[i].has_loss)
            pl_point(&pl, ax_x(&p->x, d->p[i].step), isfinite(d->p[i].loss) ? ax_y(&y, d->p[i].loss) : NAN);
    pl_flush(&pl);
    fputs("\"/>\n", f);
    if (p->finite <= 30) /* a short log: show the points themselves */
        for (int64_t i = 0; i < d->n; i++)
            if (isfinite(d->p[i].loss))
                fprintf(f, "<circle class=\"loss-dot\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"" C_RAW_ALONE "\"/>\n",
                        ax_x(&p->x, d->p[i].step), ax_y(&y, d->p[i].loss));
    if (p->smooth) {
        /* EMA over ~n/30 steps, debiased (divided by 1 - a^k) so it starts
         * at the first values instead of at zero. */
        double w = fmin(100, (double)p->finite / 30), a = 1 - 2 / (w + 1), ema = 0, wsum = 0;
        fprintf(f, "<path class=\"loss-smooth\" stroke=\"" C_SMOOTH "\" stroke-width=\"2.2\" d=\"");
        pl = (polyline){.f = f, .decimate = decimate};
        for (int64_t i = 0; i < d->n; i++) {
            double v = d->p[i].loss;
            if (!isfinite(v))
                continue;
            double u = y.kind == AX_LOG10 ? log10(v) : v; /* average what is drawn */
            ema = a * ema + (1 - a) * u;
            wsum = a * wsum + (1 - a);
            double s = ema / wsum;
            pl_point(&pl, ax_x(&p->x, d->p[i].step), y.kind == AX_LOG10 ? ax_y_units(&y, s) : ax_y(&y, s));
        }
        pl_flush(&pl);
        fputs("\"/>\n", f);
    }
    if (p->val) {
        fprintf(f, "<path stroke=\"" C_VAL "\" stroke-width=\"1.2\" stroke-dasharray=\"4 3\" d=\"");
        pl = (polyline){.f = f, .decimate = (double)p->val > 2 * PW};
        for (int64_t i = 0; i < d->n; i++)
            if (isfinite(d->p[i].val_loss))
                pl_point(&pl, ax_x(&p->x, d->p[i].step), ax_y(&y, d->p[i].val_loss));
        pl_flush(&pl);
        fputs("\"/>\n", f);
        mark_col mc = {NAN};
        for (int64_t i = 0; i < d->n; i++)
            if (isfinite(d->p[i].val_loss) && mark_once(&mc, ax_x(&p->x, d->p[i].step)))
                fprintf(f, "<circle class=\"val-dot\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"" C_VAL
                           "\" stroke=\"white\"><title>step %s: val loss %.4g</title></circle>\n",
                        ax_x(&p->x, d->p[i].step), ax_y(&y, d->p[i].val_loss), step_str(sb, d->p[i].step),
                        d->p[i].val_loss);
    }
    fputs("</g>\n", f);
    mark_col skip_col = {NAN}, nan_col = {NAN};
    for (int64_t i = 0; i < d->n; i++) {
        const plot_point *pt = &d->p[i];
        double px = ax_x(&p->x, pt->step);
        if (pt->skipped && mark_once(&skip_col, px))
            fprintf(f, "<line class=\"skip-tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" C_BAD
                       "\" stroke-width=\"1.5\"><title>step %s: skipped</title></line>\n",
                    px, y.top + y.h, px, y.top + y.h - 12, step_str(sb, pt->step));
        if (pt->has_loss && !isfinite(pt->loss) && mark_once(&nan_col, px))
            fprintf(f, "<path class=\"nan-mark\" d=\"M%.1f %.1fl7 7m0 -7l-7 7\" stroke=\"" C_BAD
                       "\" stroke-width=\"2\" fill=\"none\"><title>step %s: loss NaN/inf</title></path>\n",
                    px - 3.5, y.top + 4, step_str(sb, pt->step));
    }
    panel_border(f, &y);
    legend_item it[5];
    int n = 0;
    it[n++] = (legend_item){'l', p->smooth ? C_RAW : C_RAW_ALONE, "loss", p->smooth ? 1.5 : 2};
    if (p->smooth)
        it[n++] = (legend_item){'l', C_SMOOTH, "smoothed (EMA)", 2.5};
    if (p->val)
        it[n++] = (legend_item){'d', C_VAL, "val loss", 0};
    if (p->skipped)
        it[n++] = (legend_item){'t', C_BAD, "skipped step", 0};
    if (p->nonfinite)
        it[n++] = (legend_item){'x', C_BAD, "loss NaN/inf", 0};
    legend(f, y.top - 10, it, n);
}

/* The scale line's changes pending in one pixel column. */
typedef struct {
    bool have;
    double col, x, lo, hi, last;
} scale_col;

static void sc_flush(FILE *f, scale_col *c)
{
    if (!c->have)
        return;
    c->have = false;
    fprintf(f, "H%.1f", c->x);
    if (c->lo != c->last)
        fprintf(f, "V%.1f", c->lo);
    if (c->hi != c->last && c->hi != c->lo)
        fprintf(f, "V%.1f", c->hi);
    fprintf(f, "V%.1f", c->last);
}

static void scale_panel(plot *p)
{
    char sb[32];
    FILE *f = p->f;
    const plot_data *d = p->d;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < d->n; i++)
        if (isfinite(d->p[i].scale)) {
            lo = fmin(lo, log2(d->p[i].scale));
            hi = fmax(hi, log2(d->p[i].scale));
        }
    /* Half a binade of room above and below, so the line never runs
     * along the frame. */
    if (hi - lo < 2) {
        lo -= 1;
        hi += 1;
    }
    axis y = {.kind = AX_LOG2, .lo = lo - 0.5, .hi = hi + 0.5, .top = LOSS_TOP + LOSS_H + SCALE_GAP, .h = SCALE_H};
    panel_frame(p, &y, "Loss scale (log2)", "clip-scale");
    fputs("<g clip-path=\"url(#clip-scale)\">\n", f);
    fputs("<path class=\"scale\" fill=\"none\" stroke=\"" C_SCALE "\" stroke-width=\"1.8\" stroke-linecap=\"round\" d=\"", f);
    /* A step line: the scale holds until the step that changes it, so
     * only changes (and each run's end) need vertices. The changes within
     * one pixel column are drawn as one vertical run over their range, so
     * a scale that changes at every step still costs a few vertices per
     * column. */
    bool pen = false;
    double held = NAN, last_x = 0;
    scale_col c = {.have = false};
    for (int64_t i = 0; i <= d->n; i++) {
        double s = i < d->n ? d->p[i].scale : NAN;
        double px = i < d->n ? ax_x(&p->x, d->p[i].step) : 0;
        if (!isfinite(s)) {
            sc_flush(f, &c);
            if (pen)
                fprintf(f, "H%.1f", last_x);
            pen = false;
            continue;
        }
        double py = ax_y(&y, s);
        if (!pen) {
            fprintf(f, "M%.1f %.1f", px, py);
        } else if (py != held) {
            if (c.have && floor(px) == c.col) {
                c.lo = fmin(c.lo, py);
                c.hi = fmax(c.hi, py);
                c.last = py;
            } else {
                sc_flush(f, &c);
                c = (scale_col){.have = true, .col = floor(px), .x = px, .lo = py, .hi = py, .last = py};
            }
        }
        pen = true;
        held = py;
        last_x = px;
    }
    fputs("\"/>\n</g>\n", f);
    mark_col skip_col = {NAN};
    for (int64_t i = 0; i < d->n; i++) {
        const plot_point *pt = &d->p[i];
        double px = ax_x(&p->x, pt->step);
        if (!pt->skipped || !mark_once(&skip_col, px))
            continue;
        if (isfinite(pt->scale))
            fprintf(f, "<circle class=\"skip-dot\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"" C_BAD
                       "\" stroke=\"white\" stroke-width=\"0.8\"><title>step %s: skipped at scale %.9g</title></circle>\n",
                    px, ax_y(&y, pt->scale), step_str(sb, pt->step), pt->scale);
        else
            fprintf(f, "<line class=\"skip-tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" C_BAD
                       "\" stroke-width=\"1.5\"/>\n",
                    px, y.top + y.h, px, y.top + y.h - 12);
    }
    panel_border(f, &y);
    legend_item it[2] = {{'l', C_SCALE, "loss scale", 2}, {'d', C_BAD, "skipped step (inf/NaN grads)", 0}};
    legend(f, y.top - 10, it, p->skipped ? 2 : 1);
}

const char *const plot_health_keys[PLOT_HEALTH_N] = {
    "f16_zero",         "f16_flush",           "f16_subnormal",      "f16_overflow",
    "f16_flush_scaled", "f16_subnormal_scaled", "f16_overflow_scaled"};

/* The f16 health panel (--health-every): each share of the gradients'
 * elements, in percent on a linear axis from 0, as lines through the
 * measured steps (dots too when they are few): unscaled solid, at the
 * scale dashed. */
static void health_panel(plot *p, double top)
{
    static const char *const color[PLOT_HEALTH_N] = {C_MUTED, C_VAL, "#f2a33a", C_BAD, C_SCALE, "#69b86f", "#7b2d8e"};
    /* Short: seven fit on the title line beside the title. */
    static const char *const label[PLOT_HEALTH_N] = {"zero",    "flush",   "subn.",     "overflow",
                                                    "flush@S", "subn.@S", "overflow@S"};
    FILE *f = p->f;
    const plot_data *d = p->d;
    double hi = 0;
    int64_t count[PLOT_HEALTH_N] = {0};
    for (int64_t i = 0; i < d->n; i++)
        for (int h = 0; h < PLOT_HEALTH_N; h++)
            if (isfinite(d->p[i].health[h])) {
                hi = fmax(hi, 100 * d->p[i].health[h]);
                count[h]++;
            }
    axis y = {.top = top, .h = HEALTH_H};
    lin_axis(&y, 0, fmax(hi * 1.08, 1e-3), 5);
    panel_frame(p, &y, "f16 health (%), @S: at the scale", "clip-health");
    fputs("<g clip-path=\"url(#clip-health)\" fill=\"none\" stroke-linejoin=\"round\">\n", f);
    legend_item it[PLOT_HEALTH_N];
    int n = 0;
    for (int h = 0; h < PLOT_HEALTH_N; h++) {
        if (!count[h])
            continue;
        fprintf(f, "<path class=\"health-%s\" stroke=\"%s\" stroke-width=\"1.6\"%s d=\"", plot_health_keys[h] + 4,
                color[h], h >= 4 ? " stroke-dasharray=\"5 3\"" : "");
        polyline pl = {.f = f, .decimate = (double)count[h] > 2 * PW};
        for (int64_t i = 0; i < d->n; i++)
            if (isfinite(d->p[i].health[h]))
                pl_point(&pl, ax_x(&p->x, d->p[i].step), ax_y(&y, 100 * d->p[i].health[h]));
        pl_flush(&pl);
        fputs("\"/>\n", f);
        if (count[h] <= 30)
            for (int64_t i = 0; i < d->n; i++)
                if (isfinite(d->p[i].health[h]))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.2\" fill=\"%s\"/>\n",
                            ax_x(&p->x, d->p[i].step), ax_y(&y, 100 * d->p[i].health[h]), color[h]);
        it[n++] = (legend_item){'l', color[h], label[h], 1.6};
    }
    fputs("</g>\n", f);
    panel_border(f, &y);
    legend(f, y.top - 10, it, n);
}

/* The x tick labels under the lowest panel. */
static void x_labels(plot *p, double bottom)
{
    char buf[32];
    for (int k = 0; k <= p->x.nticks; k++) {
        double v = ax_tick(&p->x, k), px = ax_x(&p->x, v);
        fprintf(p->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" C_FRAME "\"/>\n", px,
                bottom, px, bottom + 5);
        tick_label(buf, sizeof buf, v, p->x.step);
        text(p->f, px, bottom + 18, "middle", "font-size=\"11\" fill=\"" C_TEXT "\"", buf);
    }
    text(p->f, ML + PW / 2, bottom + 40, "middle", "font-size=\"12\" fill=\"" C_TEXT "\"", "step");
}

/* The subtitle: counts and the run's end points. */
static void summary(plot *p, char *buf, size_t n)
{
    const plot_data *d = p->d;
    char s_lo[32], s_hi[32];
    size_t k = (size_t)snprintf(buf, n, "%lld step%s (%s to %s)", (long long)d->n, d->n == 1 ? "" : "s",
                                step_str(s_lo, p->x_lo), step_str(s_hi, p->x_hi));
    double last = NAN, best = INFINITY, best_step = 0, s0 = NAN, s1 = NAN;
    for (int64_t i = 0; i < d->n; i++) {
        if (isfinite(d->p[i].loss)) {
            last = d->p[i].loss;
            if (last < best) {
                best = last;
                best_step = d->p[i].step;
            }
        }
        if (isfinite(d->p[i].scale)) {
            s1 = d->p[i].scale;
            if (!isfinite(s0))
                s0 = s1;
        }
    }
    if (k < n && isfinite(last))
        k += (size_t)snprintf(buf + k, n - k, "  |  last loss %.4g, lowest %.4g at step %s", last, best,
                              step_str(s_lo, best_step));
    if (k < n && p->has_scale)
        k += (size_t)snprintf(buf + k, n - k, "  |  scale %.6g to %.6g, %lld skipped (%.2f%%)", s0, s1,
                              (long long)p->skipped, 100.0 * (double)p->skipped / (double)d->n);
    else if (k < n && p->skipped)
        k += (size_t)snprintf(buf + k, n - k, "  |  %lld skipped", (long long)p->skipped);
    if (k < n && p->nonfinite)
        snprintf(buf + k, n - k, "  |  %lld NaN/inf losses", (long long)p->nonfinite);
}

static void draw(plot *p, const char *name)
{
    FILE *f = p->f;
    const plot_data *d = p->d;
    p->x_lo = INFINITY;
    p->x_hi = -INFINITY;
    for (int64_t i = 0; i < d->n; i++) {
        const plot_point *pt = &d->p[i];
        p->x_lo = fmin(p->x_lo, pt->step);
        p->x_hi = fmax(p->x_hi, pt->step);
        p->skipped += pt->skipped;
        p->nonfinite += pt->has_loss && !isfinite(pt->loss);
        p->finite += isfinite(pt->loss);
        p->val += isfinite(pt->val_loss);
        p->has_scale |= isfinite(pt->scale) != 0;
        for (int k = 0; k < PLOT_HEALTH_N; k++)
            p->has_health |= isfinite(pt->health[k]) != 0;
    }
    p->smooth = p->finite >= 90;
    lin_axis(&p->x, p->x_lo, p->x_hi < p->x_lo + 8 ? p->x_lo + 8 : p->x_hi, 8);
    p->x.top = ML;
    p->x.h = PW;
    double health_top = LOSS_TOP + LOSS_H + (p->has_scale ? SCALE_GAP + SCALE_H : 0) + HEALTH_GAP;
    double bottom = health_top - HEALTH_GAP + (p->has_health ? HEALTH_GAP + HEALTH_H : 0);
    double h = bottom + FOOT;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            W, h, W, h);
    fprintf(f, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, h);
    char title[512], sub[512];
    snprintf(title, sizeof title, "ampc training log: %s", name);
    text(f, ML, 30, "start", "font-size=\"17\" font-weight=\"bold\" fill=\"" C_TEXT "\"", title);
    summary(p, sub, sizeof sub);
    text(f, ML, 52, "start", "font-size=\"12\" fill=\"" C_MUTED "\"", sub);
    loss_panel(p);
    if (p->has_scale)
        scale_panel(p);
    if (p->has_health)
        health_panel(p, health_top);
    x_labels(p, bottom);
    fputs("</svg>\n", f);
}

/* Puts the points in step order, keeping the log's order among equal
 * steps (a resumed run's log may repeat steps): the drawing then meets
 * each pixel column once, which is what bounds its size. */
typedef struct {
    plot_point p;
    int64_t i;
} ranked_point;

static int by_step(const void *a, const void *b)
{
    const ranked_point *x = a, *y = b;
    if (x->p.step != y->p.step)
        return x->p.step < y->p.step ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static amp_status sort_by_step(plot_data *d, const char *path)
{
    int64_t k = 1;
    while (k < d->n && d->p[k - 1].step <= d->p[k].step)
        k++;
    if (k >= d->n)
        return AMP_OK;
    ranked_point *r = malloc(sizeof *r * (size_t)d->n);
    if (!r)
        return amp_set_error(AMP_ERR_MEMORY, "plot: %s: out of memory sorting %lld steps", path, (long long)d->n);
    for (int64_t i = 0; i < d->n; i++)
        r[i] = (ranked_point){d->p[i], i};
    qsort(r, (size_t)d->n, sizeof *r, by_step);
    for (int64_t i = 0; i < d->n; i++)
        d->p[i] = r[i].p;
    free(r);
    return AMP_OK;
}

amp_status plot_file(const char *log_path, const char *svg_path, plot_summary *sum)
{
    if (!log_path || !svg_path)
        return amp_set_error(AMP_ERR_ARG, "plot: NULL %s path", !log_path ? "log" : "output");
    plot_data d;
    amp_status st = plot_read(log_path, &d);
    if (st == AMP_OK && (st = sort_by_step(&d, log_path)) != AMP_OK)
        plot_data_free(&d);
    if (st != AMP_OK)
        return st;
    /* A file (new, or an earlier SVG) is written whole to a temporary
     * beside it, then renamed over it: a full disk or a failed write leaves
     * the earlier SVG as it was and no half-written one. A device
     * (/dev/stdout, /dev/null) is written directly, and never unlinked
     * (unlinking /dev/full after its write error would delete the device,
     * as root). A symbolic link's target is what gets replaced. */
    char *real = NULL, *tmp = NULL;
    struct stat so;
    bool device = stat(svg_path, &so) == 0 && !S_ISREG(so.st_mode);
    const char *dest = svg_path;
    if (!device && lstat(svg_path, &so) == 0 && S_ISLNK(so.st_mode) && (real = realpath(svg_path, NULL)))
        dest = real;
    size_t tn = strlen(dest) + 32;
    if (!device && !(tmp = malloc(tn))) {
        free(real);
        plot_data_free(&d);
        return amp_set_error(AMP_ERR_MEMORY, "plot: out of memory");
    }
    if (tmp)
        snprintf(tmp, tn, "%s.tmp.%ld", dest, (long)getpid());
    const char *target = device ? svg_path : tmp;
    FILE *f = fopen(target, "w");
    if (!f) {
        st = amp_set_error(AMP_ERR_IO, "plot: cannot create %s: %s", target, strerror(errno));
        free(tmp);
        free(real);
        plot_data_free(&d);
        return st;
    }
    const char *name = strrchr(log_path, '/');
    plot p = {.f = f, .d = &d};
    draw(&p, name ? name + 1 : log_path);
    int err = ferror(f) || fflush(f) != 0 ? (errno ? errno : EIO) : 0;
    if (!err && !device && fsync(fileno(f)) != 0)
        err = errno;
    if (fclose(f) != 0 && !err)
        err = errno ? errno : EIO;
    if (!err && !device && rename(tmp, dest) != 0)
        err = errno;
    if (err) {
        st = amp_set_error(AMP_ERR_IO, "plot: cannot write %s: %s%s", svg_path, strerror(err),
                           device ? "" : " (an earlier file there is left as it was)");
        if (!device)
            unlink(tmp);
    } else if (sum) {
        *sum = (plot_summary){d.n, p.skipped, p.nonfinite, p.val};
    }
    free(tmp);
    free(real);
    plot_data_free(&d);
    return st;
}
