/*
 * scaler_rule.h - the grad scaler's update rule, once, for every backend:
 * PyTorch's _amp_update_scale_ (back off on a found inf/NaN after the
 * hysteresis runs out, grow after growth_interval clean steps; products
 * in double, stored as f32; min/max clamps) and the history of changes,
 * as inline functions that the C compiler and nvcc both compile (the CPU
 * backend runs them on host memory, the CUDA backend in a one-thread
 * kernel on the device's copy of the state).
 */
#ifndef AMPC_SCALER_RULE_H
#define AMPC_SCALER_RULE_H

#include "backend/backend.h"

/* Appends a change of the scale to st's history (the oldest one dropped
 * when it is full). */
PW_FN void be_scaler_remember(be_scaler_state *st, float old, float now)
{
    if (old == now)
        return;
    if (st->hist_len == BE_SCALER_HISTORY) {
        for (int k = 1; k < BE_SCALER_HISTORY; k++) {
            st->hist_update[k - 1] = st->hist_update[k];
            st->hist_old[k - 1] = st->hist_old[k];
            st->hist_new[k - 1] = st->hist_new[k];
        }
        st->hist_len--;
    }
    st->hist_update[st->hist_len] = st->updates;
    st->hist_old[st->hist_len] = old;
    st->hist_new[st->hist_len] = now;
    st->hist_len++;
}

/* One update: found = any found_inf[r] with bit r of records set. */
PW_FN void be_scaler_update_rule(float *scale, be_scaler_state *st, uint64_t records, be_scaler_opts o)
{
    bool found = false;
    for (int r = 0; r < BE_SCALER_MAX_RECORDS; r++)
        if (((records >> r) & 1u) && st->found_inf[r] != 0.0f)
            found = true;
    const float old = *scale;
    float now = old;
    st->skip_streak = found ? st->skip_streak + 1 : 0;
    if (found) {
        st->tracker = 0;
        if (--st->hysteresis_left <= 0) {
            double b = (double)old * o.backoff_factor;
            if (o.min_scale > 0 && b < o.min_scale)
                b = o.min_scale;
            now = (float)b;
            st->hysteresis_left = 1; /* keep backing off until the scale grows again */
        }
    } else if (++st->tracker == o.growth_interval) {
        double g = (double)old * o.growth_factor;
        if (o.max_scale > 0 && g > o.max_scale)
            g = o.max_scale;
        float gf = (float)g;
        if (isfinite(gf))
            now = gf;
        st->tracker = 0;
        st->hysteresis_left = o.hysteresis > 1 ? o.hysteresis : 1;
    }
    *scale = now;
    be_scaler_remember(st, old, now);
    st->updates++;
}

#endif
