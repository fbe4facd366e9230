/*
 * ddp_mlp.h - the model and data the DDP tests train, test_ddp.c on the
 * CPU through MPI and test_nccl_cuda.c on CUDA through NCCL:
 *
 *   IN, HID, CLS, B   the MLP's sizes (IN -> HID -> HID -> CLS) and the
 *                     rows a rank takes of each batch of 2B
 *   make_mlp          the MLP, seeded (the same on every rank), on a device
 *   mix               the hash the batches are made from
 *   batch_rows        rows [lo, hi) of batch `step`
 *   ddp_rig           the MLP with its optimizer, a scaler and a DDP
 *
 * Header-only (static inline), beside harness.h.
 */
#ifndef AMPC_TESTS_DIST_DDP_MLP_H
#define AMPC_TESTS_DIST_DDP_MLP_H

#include "harness.h"
#include "tensor/tensor.h"

enum { IN = 16, HID = 32, CLS = 4, B = 8, DDP_MAXP = 16 };

static inline amp_module *make_mlp(amp_device dev)
{
    amp_manual_seed(1234);
    const int64_t h[2] = {HID, HID};
    amp_module *m = amp_model_mlp(IN, h, 2, CLS);
    if (dev != AMP_CPU)
        CHECK_OK(amp_module_to(m, dev));
    return m;
}

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 32);
}

/* Rows [lo, hi) of batch `step` (2B rows, the same on every rank) on dev,
 * as temporaries (amp_temps_free releases them); with poison, an inf in
 * the first row's first input. */
static inline void batch_rows(int step, int lo, int hi, amp_device dev, bool poison, amp_tensor **x,
                              amp_tensor **y)
{
    float xs[2 * B * IN];
    int64_t ys[2 * B];
    for (int i = 0; i < 2 * B; i++) {
        for (int j = 0; j < IN; j++)
            xs[i * IN + j] =
                (float)(mix((uint64_t)step * 100003u + (uint64_t)i * 131u + (uint64_t)j) % 2001) / 1000.0f - 1.0f;
        ys[i] = (int64_t)(mix((uint64_t)step * 7919u + (uint64_t)i) % CLS);
    }
    if (poison)
        xs[lo * IN] = INFINITY;
    *x = pool_add(amp_from_data(AMP_SHAPE(hi - lo, IN), AMP_F32, xs + lo * IN));
    *y = pool_add(amp_from_data(AMP_SHAPE(hi - lo), AMP_I64, ys + lo));
    if (dev != AMP_CPU) {
        CHECK_OK(amp_tensor_move(*x, dev));
        CHECK_OK(amp_tensor_move(*y, dev));
    }
}

typedef struct {
    amp_module *m;
    amp_tensor *p[DDP_MAXP];
    int n;
    amp_optim *o;
    amp_scaler *s;
    amp_ddp *d;
} ddp_rig;

static inline void ddp_rig_free(ddp_rig *r)
{
    amp_ddp_free(r->d);
    amp_scaler_free(r->s);
    amp_optim_free(r->o);
    amp_module_free(r->m);
}

/* The MLP on dev, its parameters, Adam (defaults) or plain SGD over them,
 * a default scaler and a default DDP; false (checked, and r freed) when
 * one could not be made. */
static inline bool ddp_rig_make(ddp_rig *r, amp_device dev, bool adam)
{
    r->m = make_mlp(dev);
    r->n = amp_module_params(r->m, r->p, DDP_MAXP);
    r->o = adam ? amp_optim_adam(r->p, r->n, amp_adam_defaults()) : amp_optim_sgd(r->p, r->n, amp_sgd_defaults());
    r->s = amp_scaler_new(amp_scaler_defaults());
    r->d = amp_ddp_new(r->p, r->n, amp_ddp_defaults());
    CHECK(r->d && r->o && r->s);
    if (r->d && r->o && r->s)
        return true;
    ddp_rig_free(r);
    return false;
}

#endif
