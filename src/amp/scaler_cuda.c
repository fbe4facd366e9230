/*
 * scaler_cuda.c - the grad scaler with its state on the GPU (see
 * scaler_impl.h): when scale() met a CUDA loss, the scale is a CUDA tensor
 * and what update() changes (tracker, hysteresis, history, counts, each
 * optimizer's found_inf) is a cuda_scaler_state on the device. unscale is
 * one multi-tensor kernel, step launches the fused optimizer guarded by
 * found_inf, update runs PyTorch's rule on the device: an iteration never
 * waits for the GPU. The getters copy the state back, and that is the
 * synchronisation point (amp_scaler_get_scale, as scaler.get_scale()).
 */
#include "amp/scaler_impl.h"
#include "base/base.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>

float scaler_cuda_get_scale(const amp_scaler *s)
{
    float v = NAN;
    cuda_copy(&v, AMP_CPU, tensor_ptr(s->scale_t), AMP_CUDA, sizeof v);
    return v;
}

void scaler_cuda_set_scale(amp_scaler *s, float v)
{
    cuda_copy(tensor_ptr(s->scale_t), AMP_CUDA, &v, AMP_CPU, sizeof v);
}

/* The device state to and from the host. */
amp_status scaler_cuda_pull(const amp_scaler *s, cuda_scaler_state *st)
{
    return cuda_copy(st, AMP_CPU, s->dev, AMP_CUDA, sizeof *st);
}

static amp_status dev_push(amp_scaler *s, const cuda_scaler_state *st)
{
    return cuda_copy(s->dev, AMP_CUDA, st, AMP_CPU, sizeof *st);
}

/* Optimizer record r's found_inf on the device. */
static float *dev_found(const amp_scaler *s, const opt_record *r) { return &s->dev->found_inf[r - s->recs]; }

/* The device state into the host's fields and back, for the rare calls
 * that run the host's logic on it (update_to, state_load). */
amp_status scaler_cuda_to_host(amp_scaler *s)
{
    cuda_scaler_state st;
    amp_status rc = scaler_cuda_pull(s, &st);
    if (rc != AMP_OK)
        return rc;
    s->tracker = st.tracker;
    s->hysteresis_left = (int)st.hysteresis_left;
    s->updates = st.updates;
    s->counts = (amp_scaler_counts){st.steps, st.skipped};
    s->hist_len = (int)st.hist_len;
    for (int k = 0; k < s->hist_len; k++)
        s->hist[k] = (amp_scale_change){st.hist_update[k], st.hist_old[k], st.hist_new[k]};
    return AMP_OK;
}

amp_status scaler_cuda_from_host(amp_scaler *s)
{
    cuda_scaler_state st;
    amp_status rc = scaler_cuda_pull(s, &st);
    if (rc != AMP_OK)
        return rc;
    st.tracker = s->tracker;
    st.hysteresis_left = s->hysteresis_left;
    st.updates = s->updates;
    st.steps = s->counts.steps;
    st.skipped = s->counts.skipped;
    st.hist_len = s->hist_len;
    for (int k = 0; k < s->hist_len; k++) {
        st.hist_update[k] = s->hist[k].update;
        st.hist_old[k] = (float)s->hist[k].old_scale;
        st.hist_new[k] = (float)s->hist[k].new_scale;
    }
    return dev_push(s, &st);
}

/* The scale on CUDA, and the device state from the host's (which may have
 * been loaded from a checkpoint before the first scale()). */
amp_status scaler_cuda_start(amp_scaler *s)
{
    amp_tensor *t = tensor_new_on(AMP_SHAPE(), AMP_F32, AMP_CUDA);
    cuda_scaler_state *d = t ? cuda_malloc(sizeof *d) : NULL;
    cuda_scaler_state *h = d ? calloc(1, sizeof *h) : NULL;
    amp_status st = h ? amp_tensor_fill(t, s->o.init_scale) : amp_last_status() ? amp_last_status() : AMP_ERR_MEMORY;
    if (st == AMP_OK) {
        h->tracker = s->tracker;
        h->hysteresis_left = s->hysteresis_left;
        h->updates = s->updates;
        h->steps = s->counts.steps;
        h->skipped = s->counts.skipped;
        h->hist_len = s->hist_len;
        for (int k = 0; k < s->hist_len; k++) {
            h->hist_update[k] = s->hist[k].update;
            h->hist_old[k] = (float)s->hist[k].old_scale;
            h->hist_new[k] = (float)s->hist[k].new_scale;
        }
        st = cuda_copy(d, AMP_CUDA, h, AMP_CPU, sizeof *h);
    }
    free(h);
    if (st != AMP_OK) {
        amp_tensor_free(t);
        cuda_free(d);
        return st;
    }
    s->scale_t = t;
    s->dev = d;
    return AMP_OK;
}


/* One multi-tensor launch over o's f32 and bf16 gradients on the device;
 * found_inf stays there (zeroed first). */
amp_status scaler_cuda_unscale(amp_scaler *s, amp_optim *o, opt_record *r)
{
    if (r - s->recs >= CUDA_SCALER_MAX_RECORDS)
        return amp_set_error(AMP_ERR_ARG, "scaler: more than %d optimizers in one iteration on cuda",
                             CUDA_SCALER_MAX_RECORDS);
    int n = amp_optim_num_params(o), k = 0;
    cuda_buf *bufs = calloc((size_t)(n > 0 ? n : 1), sizeof *bufs);
    if (!bufs)
        return amp_set_error(AMP_ERR_MEMORY, "scaler: out of memory");
    for (int i = 0; i < n; i++) {
        amp_tensor *g = amp_tensor_grad(amp_optim_param(o, i));
        if (g && (g->dtype == AMP_F32 || g->dtype == AMP_BF16))
            bufs[k++] = (cuda_buf){tensor_ptr(g), g->numel, g->dtype};
    }
    /* found_inf = 0 by a one-element fill kernel: no copy from the host */
    const float zero = 0.0f;
    amp_status st = cuda_fill_pattern(dev_found(s, r), 1, &zero, sizeof zero);
    if (st == AMP_OK && k > 0)
        st = cuda_unscale(bufs, k, tensor_f32(s->scale_t), dev_found(s, r));
    free(bufs);
    if (st != AMP_OK)
        return st;
    r->recorded = k > 0;
    r->found_inf = false; /* known on the device only */
    r->stage = STAGE_UNSCALED;
    return AMP_OK;
}


/* Runs o's step on the device, skipped there when r's found_inf is set,
 * and counts it; *skipped needs the flag on the host (a synchronisation). */
amp_status scaler_cuda_step(amp_scaler *s, amp_optim *o, opt_record *r, bool *skipped)
{
    amp_status st = optim_step_guarded(o, dev_found(s, r));
    if (st == AMP_OK)
        st = cuda_scaler_count(s->dev, (int)(r - s->recs));
    if (st == AMP_OK && skipped) {
        float f = 0;
        st = cuda_copy(&f, AMP_CPU, dev_found(s, r), AMP_CUDA, sizeof f);
        *skipped = f != 0.0f;
    }
    return st;
}

amp_status scaler_cuda_update(amp_scaler *s)
{
    uint64_t records = 0;
    for (int i = 0; i < s->n_recs; i++)
        if (s->recs[i].recorded)
            records |= 1ull << i;
    cuda_scaler_opts co = {s->o.growth_factor, s->o.backoff_factor, s->o.min_scale, s->o.max_scale,
                           s->o.growth_interval, s->o.hysteresis};
    return cuda_scaler_update(tensor_f32(s->scale_t), s->dev, records, co);
}
