/*
 * sched.c - learning-rate schedules as closed forms of the step count.
 *
 * They match torch.optim.lr_scheduler (which computes them recursively,
 * equal to rounding):
 *   STEP      StepLR:             base * gamma^floor(t / step_size)
 *   COSINE    CosineAnnealingLR:  min + (base - min) * (1 + cos(pi t / T_max)) / 2
 *             (past T_max the curve rises again, as PyTorch's does)
 *   CONSTANT  base
 * With warmup_steps = W > 0 the schedule is SequentialLR([LinearLR(
 * start_factor, 1.0, total_iters=W), schedule], milestones=[W]): steps
 * t < W give base * (f + (1 - f) * t / W), and the schedule then runs with
 * its own count restarting at 0 (t - W). Unlike LinearLR, a start factor
 * of 0 is allowed (the closed form has no division by it).
 */
#include "base/base.h"

#include <math.h>

static bool finite_nonneg(double v) { return v >= 0 && !isinf(v); }

static double sched_fail(const char *why, double v)
{
    amp_set_error(AMP_ERR_ARG, "sched_lr: %s %g", why, v);
    return NAN;
}

/* Whether a kind's own two settings are valid: a count of steps (>= 1)
 * and a value (finite, >= 0), each named as its message names it; else
 * false with the error set. */
static bool kind_settings_ok(const char *count_name, int64_t count, const char *value_name, double value)
{
    if (count < 1)
        amp_set_error(AMP_ERR_ARG, "sched_lr: %s must be >= 1, got %g", count_name, (double)count);
    else if (!finite_nonneg(value))
        amp_set_error(AMP_ERR_ARG, "sched_lr: %s must be finite and >= 0, got %g", value_name, value);
    else
        return true;
    return false;
}

double amp_sched_lr(const amp_sched *s, int64_t t)
{
    if (!s) {
        amp_set_error(AMP_ERR_ARG, "sched_lr: NULL schedule");
        return NAN;
    }
    if (t < 0)
        return sched_fail("step must be >= 0, got", (double)t);
    if (!finite_nonneg(s->base_lr))
        return sched_fail("base_lr must be finite and >= 0, got", s->base_lr);
    if (s->warmup_steps < 0)
        return sched_fail("warmup_steps must be >= 0, got", (double)s->warmup_steps);
    if (s->warmup_steps > 0 && !(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1))
        return sched_fail("warmup_start_factor must be in [0, 1], got", s->warmup_start_factor);

    switch (s->kind) {
    case AMP_SCHED_CONSTANT:
        break;
    case AMP_SCHED_STEP:
        if (!kind_settings_ok("STEP: step_size", s->step_size, "STEP: gamma", s->gamma))
            return NAN;
        break;
    case AMP_SCHED_COSINE:
        if (!kind_settings_ok("COSINE: total_steps (T_max)", s->total_steps, "COSINE: min_lr", s->min_lr))
            return NAN;
        break;
    default:
        return sched_fail("unknown schedule kind", (double)s->kind);
    }

    if (t < s->warmup_steps) {
        double f = s->warmup_start_factor;
        return s->base_lr * (f + (1.0 - f) * (double)t / (double)s->warmup_steps);
    }
    int64_t u = t - s->warmup_steps;
    if (s->kind == AMP_SCHED_STEP)
        return s->base_lr * pow(s->gamma, (double)(u / s->step_size));
    if (s->kind == AMP_SCHED_COSINE)
        return s->min_lr +
               (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * (double)u / (double)s->total_steps)) / 2.0;
    return s->base_lr;
}
