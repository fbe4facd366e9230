/*
 * zero_net.h - the net the ZeRO-1 tests train, test_zero.c on the CPU and
 * test_nccl_cuda.c on CUDA through NCCL:
 *
 *   net, make_net, free_net   a small MLP 7 -> 13 -> 5 (seeded, the same
 *                             on every rank) and its optimizer, SGD (lr
 *                             0.05, momentum 0.9, weight decay 1e-3) or
 *                             AdamW (lr 1e-2), on a device
 *   fwd_bwd                   forward and backward of rank r's batch of
 *                             step t
 *   diff_params               the elements whose bits differ between two
 *                             nets, and the largest relative difference
 *
 * Header-only (static inline), beside harness.h; snapshot.h's copy_f32
 * reads the parameters from either device.
 */
#ifndef AMPC_TESTS_DIST_ZERO_NET_H
#define AMPC_TESTS_DIST_ZERO_NET_H

#include "harness.h"
#include "snapshot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ZIN = 7, ZHID = 13, ZCLS = 5, ZB = 8, ZMAXP = 8 };
enum { SGD = 0, ADAMW = 1 };

typedef struct {
    amp_module *m;
    amp_tensor *p[ZMAXP];
    int n;
    amp_optim *o;
    amp_device dev;
} net;

/* kind: SGD or ADAMW. */
static inline net make_net(int kind, amp_device dev)
{
    net a = {0};
    a.dev = dev;
    amp_manual_seed(1234);
    const int64_t hidden[1] = {ZHID};
    a.m = amp_model_mlp(ZIN, hidden, 1, ZCLS);
    if (dev != AMP_CPU)
        CHECK_OK(amp_module_to(a.m, dev));
    a.n = amp_module_params(a.m, a.p, ZMAXP);
    if (kind == SGD) {
        amp_sgd_opts so = amp_sgd_defaults();
        so.lr = 0.05, so.momentum = 0.9, so.weight_decay = 1e-3;
        a.o = amp_optim_sgd(a.p, a.n, so);
    } else {
        amp_adam_opts ao = amp_adamw_defaults();
        ao.lr = 1e-2;
        a.o = amp_optim_adamw(a.p, a.n, ao);
    }
    return a;
}

static inline void free_net(net *a)
{
    amp_optim_free(a->o);
    amp_module_free(a->m);
}

/* Rank r's batch of step t: inputs from an LCG, labels mod ZCLS, on the
 * net's device; the loss scaled by scaler (when not NULL). */
static inline void fwd_bwd(net *a, int t, int r, amp_scaler *scaler)
{
    float x[ZB * ZIN];
    int64_t y[ZB];
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(t * 16 + r + 1);
    for (int i = 0; i < ZB * ZIN; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 4.0 - 2.0);
    }
    for (int i = 0; i < ZB; i++)
        y[i] = (int64_t)((s >> (8 + i)) % ZCLS);
    amp_tensor *xt = amp_from_data(AMP_SHAPE(ZB, ZIN), AMP_F32, x);
    amp_tensor *yt = amp_from_data(AMP_SHAPE(ZB), AMP_I64, y);
    if (a->dev != AMP_CPU) {
        CHECK_OK(amp_tensor_move(xt, a->dev));
        CHECK_OK(amp_tensor_move(yt, a->dev));
    }
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(a->m, xt), yt);
    if (scaler)
        loss = amp_scaler_scale(scaler, loss);
    CHECK_OK(amp_backward(loss));
    amp_tensor_free(xt);
    amp_tensor_free(yt);
    amp_temps_free();
}

/* Elements of a's parameters that differ from b's in their bits; the
 * largest |difference| / (1 + |b|) to *rel (when not NULL). */
static inline int64_t diff_params(const net *a, const net *b, double *rel)
{
    int64_t bad = 0;
    if (rel)
        *rel = 0;
    for (int i = 0; i < a->n; i++) {
        float *x = copy_f32(a->p[i]), *y = copy_f32(b->p[i]);
        for (int64_t j = 0; x && y && j < amp_tensor_numel(a->p[i]); j++) {
            bad += memcmp(&x[j], &y[j], sizeof(float)) != 0;
            double d = fabs((double)x[j] - y[j]) / (1 + fabs((double)y[j]));
            if (rel && d > *rel)
                *rel = d;
        }
        free(x);
        free(y);
    }
    return bad;
}

#endif
