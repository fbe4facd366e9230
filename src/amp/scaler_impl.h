/*
 * scaler_impl.h - the grad scaler's object, shared by scaler.c (the host
 * logic: stages, the update rule on the CPU, messages, getters) and
 * scaler_cuda.c (the same steps with the state on the device).
 *
 * Each optimizer the scaler meets in an iteration gets a record (its
 * stage, whether unscale saw a gradient, and, on the CPU, whether one was
 * inf/NaN; on CUDA that flag lives in the device state, at the record's
 * index). Records are dropped at update.
 */
#ifndef AMPC_SCALER_IMPL_H
#define AMPC_SCALER_IMPL_H

#include "amp/amp.h"
#include "backend/cuda/cuda_backend.h"

enum { STAGE_READY = 0, STAGE_UNSCALED, STAGE_STEPPED };

typedef struct {
    amp_optim *opt;
    int stage;
    bool recorded;  /* unscale saw at least one gradient */
    bool found_inf; /* CPU only */
} opt_record;

#define HISTORY 64

struct amp_scaler {
    amp_scaler_opts o;
    bool started;        /* scale() has been called: _scale is not None */
    amp_tensor *scale_t; /* 0-d f32, the scale scale() multiplies by */
    int64_t tracker;
    int hysteresis_left;
    opt_record *recs;
    int n_recs, cap_recs;
    amp_scaler_counts counts;
    int64_t updates;
    amp_scale_change hist[HISTORY];
    int hist_len;
    cuda_scaler_state *dev; /* CUDA: the state on the device, else NULL */
};

/* scaler_cuda.c. Start: the scale on CUDA and the device state made from
 * the host's fields (which a state_load may have set before). */
amp_status scaler_cuda_start(amp_scaler *s);
float scaler_cuda_get_scale(const amp_scaler *s); /* waits for the GPU */
void scaler_cuda_set_scale(amp_scaler *s, float v);
/* The device state copied out (waits for the GPU), and the host's fields
 * from / into it (for update_to and state_load, which run host logic). */
amp_status scaler_cuda_pull(const amp_scaler *s, cuda_scaler_state *st);
amp_status scaler_cuda_to_host(amp_scaler *s);
amp_status scaler_cuda_from_host(amp_scaler *s);
/* unscale / step / update of one iteration, on the device. */
amp_status scaler_cuda_unscale(amp_scaler *s, amp_optim *o, opt_record *r);
amp_status scaler_cuda_step(amp_scaler *s, amp_optim *o, opt_record *r, bool *skipped);
amp_status scaler_cuda_update(amp_scaler *s);

#endif
