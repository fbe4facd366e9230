/*
 * health.c - the f16 health of gradients (the lesson's "Quick Check"): how
 * many gradient elements f16 would flush to zero, make subnormal or
 * overflow, at a loss scale and unscaled. Diagnostics, not per-step work:
 * each gradient is read on the host (a CUDA one copied there first, a
 * wait), so ampc train calls them every --health-every steps only.
 *
 *   amp_scaler_f16_health  one parameter at the scaler's scale: underflow
 *                          and overflow counts (a wrapper of the next)
 *   amp_grad_f16_health    many parameters, any device: zero, flush,
 *                          subnormal, overflow, inf/NaN, at a scale and
 *                          unscaled from one read
 */
#include "amp/amp.h"
#include "backend/backend.h"
#include "base/base.h"
#include "dtype/dtype.h"
#include "tensor/tensor.h"

#include <math.h>

static void f16_class(double v, amp_f16_health *h);

/* amp_grad_f16_health over the one parameter at the scaler's scale: its
 * underflow, and its overflow with the inf/NaN elements (which no scale
 * makes finite). */
amp_status amp_scaler_f16_health(const amp_scaler *s, const amp_tensor *param, int64_t *underflow,
                                 int64_t *overflow)
{
    if (!s || !param || !underflow || !overflow)
        return amp_set_error(AMP_ERR_ARG, "scaler_f16_health: NULL argument");
    *underflow = *overflow = 0;
    amp_tensor *p = (amp_tensor *)param; /* read only: the list type is amp_grad_f16_health's */
    amp_f16_health h;
    amp_status rc = amp_grad_f16_health(&p, 1, amp_scaler_get_scale(s), &h, NULL);
    if (rc != AMP_OK)
        return rc;
    *underflow = h.underflow;
    *overflow = h.overflow + h.nonfinite;
    return AMP_OK;
}

/* The f16 class of |v| (|g * scale|: the product of two f32 values,
 * exact in double) into h: the thresholds are f16's rounding boundaries. */
static void f16_class(double v, amp_f16_health *h)
{
    if (v <= 0x1p-25) /* ties to even: 2^-25 itself rounds to 0 */
        h->underflow++;
    else if (v < 0x1p-14 - 0x1p-25) /* the tie below 2^-14 rounds up to it */
        h->subnormal++;
    else if (v >= 65520.0) /* 65504 + half an ulp (16) ties to inf */
        h->overflow++;
}

amp_status amp_grad_f16_health(amp_tensor *const *params, int n, double scale, amp_f16_health *at_scale,
                               amp_f16_health *unscaled)
{
    if (!at_scale || (n > 0 && !params) || n < 0)
        return amp_set_error(AMP_ERR_ARG, "grad_f16_health: NULL or negative argument");
    if (!(scale > 0) || !isfinite(scale))
        return amp_set_error(AMP_ERR_ARG, "grad_f16_health: scale %g must be positive and finite", scale);
    amp_f16_health a = {0}, u = {0};
    void *host = NULL;
    size_t cap = 0;
    amp_status rc = AMP_OK;
    for (int p = 0; p < n && rc == AMP_OK; p++) {
        const amp_tensor *g = params[p] ? params[p]->grad : NULL;
        if (!g || g->numel == 0)
            continue;
        size_t nbytes = (size_t)g->numel * amp_dtype_size(g->dtype);
        if (nbytes > cap) {
            amp_free(host);
            cap = 0;
            if (!(host = amp_alloc(nbytes))) {
                rc = amp_set_error(AMP_ERR_MEMORY, "grad_f16_health: out of memory (%zu bytes)", nbytes);
                break;
            }
            cap = nbytes;
        }
        if ((rc = backend_of(tensor_device(g))->copy(host, AMP_CPU, tensor_ptr(g), tensor_device(g), nbytes)) !=
            AMP_OK)
            break;
        a.numel += g->numel;
        for (int64_t i = 0; i < g->numel; i++) {
            double v = fabs((double)load_f32(host, g->dtype, (size_t)i));
            if (v == 0) {
                a.zero++;
            } else if (!isfinite(v)) {
                a.nonfinite++;
            } else {
                f16_class(v * scale, &a);
                if (unscaled)
                    f16_class(v, &u);
            }
        }
    }
    amp_free(host);
    if (rc != AMP_OK)
        return rc;
    u.numel = a.numel;
    u.zero = a.zero;
    u.nonfinite = a.nonfinite;
    *at_scale = a;
    if (unscaled)
        *unscaled = u;
    return AMP_OK;
}
