/*
 * stall.c - the stalled-update fraction (what counts and why: stall.h).
 * Diagnostics at --health-every's steps only: each 16-bit parameter's
 * stored weight and gradient are copied to the host (a wait on a GPU).
 */
#include "stall.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_16bit(const amp_tensor *p)
{
    amp_dtype dt = amp_tensor_dtype(p);
    return dt == AMP_BF16 || dt == AMP_F16;
}

/* The weight the next step starts from: the f32 master when the optimizer
 * keeps one, else the parameter. */
static const amp_tensor *stored(const trainer *t, int i)
{
    amp_tensor *m = amp_optim_master(t->opt, i);
    return m ? m : t->params[i];
}

void stall_free(stall_probe *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->before ? s->before[i] : NULL);
        free(s->moving ? s->moving[i] : NULL);
    }
    free(s->before);
    free(s->moving);
    memset(s, 0, sizeof *s);
}

/* The n elements of t as f32 on the host (malloc'd), or NULL. */
static float *host_f32(const amp_tensor *t, int64_t n)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (h && amp_tensor_copy_out(t, h, AMP_F32) != AMP_OK) {
        free(h);
        return NULL;
    }
    return h;
}

amp_status stall_begin(stall_probe *s, const trainer *t, bool every_param)
{
    memset(s, 0, sizeof *s);
    bool any = false;
    for (int i = 0; i < t->n_params; i++)
        any = any || every_param || is_16bit(t->params[i]);
    if (!any)
        return AMP_OK;
    s->n = t->n_params;
    s->before = calloc((size_t)s->n, sizeof *s->before);
    s->moving = calloc((size_t)s->n, sizeof *s->moving);
    if (!s->before || !s->moving) {
        stall_free(s);
        return AMP_ERR_MEMORY;
    }
    for (int i = 0; i < s->n; i++) {
        const amp_tensor *p = t->params[i], *g = amp_tensor_grad(p);
        if ((!every_param && !is_16bit(p)) || !g)
            continue;
        const int64_t n = amp_tensor_numel(p);
        float *gh = host_f32(g, n);
        const amp_tensor *w = stored(t, i);
        s->before[i] = w ? host_f32(w, n) : NULL;
        s->moving[i] = malloc((size_t)(n > 0 ? n : 1));
        if (!gh || !s->before[i] || !s->moving[i]) {
            free(gh);
            stall_free(s);
            return AMP_ERR_MEMORY;
        }
        for (int64_t k = 0; k < n; k++)
            s->moving[i][k] = gh[k] != 0 && isfinite(gh[k]);
        free(gh);
    }
    return AMP_OK;
}

amp_status stall_end(stall_probe *s, const trainer *t, bool skipped, stall_result *r, stall_param *per)
{
    *r = (stall_result){.fraction = NAN, .worst_fraction = NAN};
    if (per)
        memset(per, 0, sizeof *per * (size_t)t->n_params);
    amp_status st = AMP_OK;
    int64_t stalled = 0, moving = 0;
    for (int i = 0; i < s->n && !skipped && st == AMP_OK; i++) {
        if (!s->before[i])
            continue;
        const int64_t n = amp_tensor_numel(t->params[i]);
        float *after = host_f32(stored(t, i), n);
        if (!after) {
            st = AMP_ERR_MEMORY;
            break;
        }
        int64_t st_i = 0, mv_i = 0;
        double change_sq = 0, weight_sq = 0;
        for (int64_t k = 0; k < n; k++) {
            const double was = s->before[i][k], d = (double)after[k] - was;
            change_sq += d * d;
            weight_sq += was * was;
            if (!s->moving[i][k])
                continue;
            mv_i++;
            st_i += after[k] == s->before[i][k];
        }
        free(after);
        if (per)
            per[i] = (stall_param){mv_i, st_i, change_sq, weight_sq};
        stalled += st_i;
        moving += mv_i;
        double f = mv_i > 0 ? (double)st_i / (double)mv_i : NAN;
        if (mv_i > 0 && (!r->worst || f > r->worst_fraction)) {
            const char *name = NULL;
            amp_module_param(t->model, i, &name);
            r->worst = name ? name : "?";
            r->worst_fraction = f;
        }
    }
    if (st == AMP_OK && moving > 0)
        r->fraction = (double)stalled / (double)moving;
    stall_free(s);
    return st;
}
