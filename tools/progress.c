/*
 * progress.c - what a training run shows while it runs. On a terminal, a
 * live status line rewritten in place (at most 5 times a second): step /
 * total, loss, the scaler's scale and skipped steps, throughput and the
 * time left. Otherwise (a pipe, a file, CI) one plain line every --log-every
 * steps, with the mean loss since the previous line; the terminal gets
 * those too, so a finished run leaves its history on the screen.
 */
#include "progress.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_begin(progress *p, const train_opts *o, int64_t first_step, int64_t total, int64_t per_step,
                    bool tokens)
{
    /* Under mpirun a rank's stdout is a pseudo-terminal of Open MPI's even
     * when the user's is a pipe or a file: plain lines there. */
    *p = (progress){.live = isatty(STDOUT_FILENO) != 0 && amp_dist_world_size() == 1,
                    .unit = tokens ? "tokens" : "samples",
                    .per_step = per_step,
                    .first = first_step,
                    .total = total,
                    .every = o->log_every};
    if (p->every <= 0) {
        int64_t left = total - first_step;
        p->every = left >= 20 ? left / 20 : 1;
    }
    p->t_start = p->t_window = p->t_live = now_s();
}

static void eta(char *buf, size_t n, double s)
{
    if (!(s >= 0) || s > 1e7)
        snprintf(buf, n, "?");
    else if (s >= 3600)
        snprintf(buf, n, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else
        snprintf(buf, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

void progress_step(progress *p, int64_t step, double loss, const trainer *t, int64_t skipped)
{
    char scale[96] = "", left[32];
    if (amp_scaler_is_enabled(t->scaler))
        snprintf(scale, sizeof scale, " scale %g skipped %lld", amp_scaler_get_scale(t->scaler),
                 (long long)skipped);
    p->loss_sum += loss;
    p->loss_n++;
    p->steps_window++;
    double tn = now_s(), done = (double)(step - p->first);
    eta(left, sizeof left, (tn - p->t_start) / done * (double)(p->total - step));
    if ((step - p->first) % p->every == 0 || step == p->total) {
        double rate = (double)p->steps_window * (double)p->per_step / (tn - p->t_window); /* up to 1e12 x 2^52 */
        printf("%sstep %lld/%lld loss %.4f lr %.3g%s %.0f %s/s %.1f s, eta %s\n%s", p->live ? "\r\033[K" : "",
               (long long)step, (long long)p->total, p->loss_sum / (double)p->loss_n,
               amp_optim_get_lr(t->opt), scale, rate, p->unit, tn - p->t_start, left, p->health);
        p->health[0] = '\0';
        fflush(stdout);
        p->loss_sum = 0;
        p->loss_n = 0;
        p->steps_window = 0;
        p->t_window = tn;
    } else if (p->live && tn - p->t_live > 0.2) {
        double rate = done * (double)p->per_step / (tn - p->t_start);
        printf("\r\033[Kstep %lld/%lld loss %.4f%s %.0f %s/s eta %s", (long long)step, (long long)p->total, loss,
               scale, rate, p->unit, left);
        fflush(stdout);
        p->t_live = tn;
    }
}

void progress_clear(progress *p)
{
    if (p->live) {
        printf("\r\033[K");
        fflush(stdout);
    }
}

/* A share in percent, short and never rounded across an edge: "0%" and
 * "100%" only when none or all, "<0.001%" and ">99.9%" at the ends,
 * three decimals below 0.1% ("0.012%"), one above ("45.3%"). */
static void pct(char *buf, size_t n, int64_t k, int64_t of)
{
    double v = of > 0 ? 100.0 * (double)k / (double)of : 0;
    if (k <= 0 || of <= 0)
        snprintf(buf, n, "0%%");
    else if (k >= of)
        snprintf(buf, n, "100%%");
    else if (v < 0.001)
        snprintf(buf, n, "<0.001%%");
    else if (v < 0.1)
        snprintf(buf, n, "%.3f%%", v);
    else if (v >= 99.95)
        snprintf(buf, n, ">99.9%%");
    else
        snprintf(buf, n, "%.1f%%", v);
}

void progress_health(progress *p, int64_t step, double scale, const amp_f16_health *at_scale,
                     const amp_f16_health *unscaled)
{
    const amp_f16_health *u = unscaled;
    char z[16], f[16], sub[16], ov[16], sf[16], ss[16], so[16], at[160] = "";
    pct(z, sizeof z, u->zero, u->numel);
    pct(f, sizeof f, u->underflow, u->numel);
    pct(sub, sizeof sub, u->subnormal, u->numel);
    pct(ov, sizeof ov, u->overflow + u->nonfinite, u->numel);
    if (at_scale) {
        pct(sf, sizeof sf, at_scale->underflow, at_scale->numel);
        pct(ss, sizeof ss, at_scale->subnormal, at_scale->numel);
        pct(so, sizeof so, at_scale->overflow + at_scale->nonfinite, at_scale->numel);
        snprintf(at, sizeof at, "; at scale %g: flush %s subnormal %s overflow %s", scale, sf, ss, so);
    }
    snprintf(p->health, sizeof p->health,
             "  f16 health of the gradients at step %lld: zero %s; unscaled: flush %s subnormal %s overflow %s%s\n",
             (long long)step, z, f, sub, ov, at);
}

void progress_stall(progress *p, double fraction, const char *worst, double worst_fraction)
{
    size_t at = strlen(p->health);
    if (at > 0 && p->health[at - 1] == '\n') /* the health line gets a second line */
        at--;
    char f[16], w[16];
    if (isnan(fraction)) {
        snprintf(p->health + at, sizeof p->health - at, "\n  stalled updates: not measured (a skipped step)\n");
        return;
    }
    pct(f, sizeof f, (int64_t)llround(fraction * 1e6), 1000000);
    pct(w, sizeof w, (int64_t)llround(worst_fraction * 1e6), 1000000);
    snprintf(p->health + at, sizeof p->health - at, "\n  stalled updates: %s of the 16-bit weights; worst %s %s\n", f,
             worst ? worst : "-", w);
}
