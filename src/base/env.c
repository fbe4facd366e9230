/*
 * env.c - the environment variables the library reads, in one table: each
 * one's name, the values it takes and what it does. The readers (the CPU
 * backend's kernel choices, the thread pool, autocast's kept casts, the
 * communication timeout) take their value from here, and
 * amp_check_environment refuses a value outside the table, so that a
 * typing slip (AMPC_CPU_LIB=OWN, AMPC_DIST_TIMEOUT=abc) is an error naming
 * the variable rather than the default, silently.
 *
 * An unset or empty variable is the default. A choice is matched exactly
 * (case matters: the documented spellings only). A number is the whole
 * text (strtod's syntax), finite and inside the row's range.
 */
#include "base/env.h"

#include "base/base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *choices; /* "a|b|c"; NULL: a number in [lo, hi] */
    double lo, hi;
    bool integer;
    const char *what;
} env_def;

static const env_def defs[ENV_COUNT] = {
    [ENV_CPU_LIB] = {"AMPC_CPU_LIB", "auto|own|onednn", 0, 0, false,
                     "the CPU's matrix products and convolutions: oneDNN where faster, ampc's own kernels only, "
                     "or oneDNN for all it can do"},
    [ENV_GEMM_F16] = {"AMPC_GEMM_F16", "auto|widen|split", 0, 0, false,
                      "f16 products: the split kernel from its threshold, always widened to f32, or always split"},
    [ENV_ONEDNN_SPLIT] = {"AMPC_ONEDNN_SPLIT", "0|1", 0, 0, false,
                          "1: ampc's threads cut oneDNN's large calls; 0: oneDNN runs its own OpenMP team"},
    [ENV_KEEP_CASTS] = {"AMPC_KEEP_CASTS", "0|1", 0, 0, false,
                        "1: autocast keeps a weight's 16-bit copy across regions while the weight is unchanged"},
    [ENV_SPIN_US] = {"AMPC_SPIN_US", NULL, 0, 1e6, true,
                     "microseconds the thread pool's workers spin before they sleep"},
    [ENV_DIST_TIMEOUT] = {"AMPC_DIST_TIMEOUT", NULL, 1e-3, 1e7, false,
                          "seconds a data-parallel wait for the other ranks may last"},
};

/* Whether text is one of the '|'-separated choices; its index in *k. */
static bool find_choice(const char *choices, const char *text, int *k)
{
    size_t len = strlen(text);
    int i = 0;
    for (const char *p = choices;; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, text, n) == 0) {
            *k = i;
            return true;
        }
        if (!bar)
            return false;
        p = bar + 1;
    }
}

/* Whether text is a number the row takes; its value in *v. */
static bool parse_number(const env_def *d, const char *text, double *v)
{
    char *end = NULL;
    double x = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(x) || x < d->lo || x > d->hi)
        return false;
    if (d->integer && x != floor(x))
        return false;
    *v = x;
    return true;
}

bool env_value_ok(env_var v, const char *text)
{
    if ((unsigned)v >= ENV_COUNT || !text)
        return false;
    if (!*text)
        return true;
    const env_def *d = &defs[v];
    int k;
    double x;
    return d->choices ? find_choice(d->choices, text, &k) : parse_number(d, text, &x);
}

const char *env_name(env_var v) { return (unsigned)v < ENV_COUNT ? defs[v].name : "?"; }

int env_choice(env_var v, int dflt)
{
    const char *text = getenv(defs[v].name);
    int k;
    if (!text || !*text || !defs[v].choices || !find_choice(defs[v].choices, text, &k))
        return dflt;
    return k;
}

double env_number(env_var v, double dflt)
{
    const char *text = getenv(defs[v].name);
    double x;
    if (!text || !*text || defs[v].choices || !parse_number(&defs[v], text, &x))
        return dflt;
    return x;
}

/* The message for row d's bad value text. */
static amp_status refuse(const env_def *d, const char *text)
{
    if (d->choices) {
        char list[128];
        snprintf(list, sizeof list, "%s", d->choices);
        for (char *p = list; *p; p++)
            if (*p == '|')
                *p = '/';
        return amp_set_error(AMP_ERR_ARG, "environment variable %s=%.200s is not one of %s (%s); unset it for "
                                          "the default",
                             d->name, text, list, d->what);
    }
    return amp_set_error(AMP_ERR_ARG, "environment variable %s=%.200s is not %s from %g to %g (%s); unset "
                                      "it for the default",
                         d->name, text, d->integer ? "an integer" : "a number", d->lo, d->hi, d->what);
}

amp_status amp_check_environment(void)
{
    for (int i = 0; i < ENV_COUNT; i++) {
        const char *text = getenv(defs[i].name);
        if (text && !env_value_ok((env_var)i, text))
            return refuse(&defs[i], text);
    }
    return AMP_OK;
}
