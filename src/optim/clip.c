/*
 * clip.c - amp_clip_grad_norm, as torch.nn.utils.clip_grad_norm_ with
 * norm_type 2 and error_if_nonfinite=False (torch/nn/utils/clip_grad.py).
 *
 * PyTorch computes total = ||(||g_1||, ..., ||g_n||)||, then multiplies
 * every gradient by clamp(max_norm / (total + 1e-6), max=1) without a
 * branch. Hence with a non-finite total the gradients change too: an inf
 * total gives a factor 0 (finite gradients become 0, infinite ones NaN),
 * a NaN total gives a NaN factor (every gradient becomes NaN). ampc does
 * the same; with a factor of exactly 1 it skips the (identity) multiply.
 * The sum of squares is accumulated in double.
 *
 * CUDA gradients are clipped on the device (cuda_clip_grad_norm: the sum,
 * the factor and the multiply all run there, in the same arithmetic); the
 * only wait for the GPU is reading the total back, which the double this
 * function returns needs. All gradients must be on one device.
 */
#include "backend/cuda/cuda_backend.h"
#include "base/base.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Adds the sum of g's squared elements to *acc; false when out of memory. */
static bool sum_squares(const amp_tensor *g, double *acc)
{
    float *tmp = NULL;
    const float *v = tensor_as_f32(g, &tmp);
    if (!v)
        return false;
    double s = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) reduction(+ : s) if (g->numel > 32768)
#endif
    for (int64_t j = 0; j < g->numel; j++)
        s += (double)v[j] * v[j];
    amp_free(tmp);
    *acc += s;
    return true;
}

/* g *= coef in g's dtype (computing in f32, rounding once). */
static amp_status scale(amp_tensor *g, float coef)
{
    if (g->dtype == AMP_F32) {
        float *v = tensor_f32(g);
        for (int64_t j = 0; j < g->numel; j++)
            v[j] *= coef;
        return AMP_OK;
    }
    float *tmp = NULL;
    if (!tensor_as_f32(g, &tmp))
        return AMP_ERR_MEMORY;
    for (int64_t j = 0; j < g->numel; j++)
        tmp[j] *= coef;
    tensor_store_f32(g, tmp);
    amp_free(tmp);
    return AMP_OK;
}

/* The CUDA path: every gradient of params[0..n) is on the device. */
static double clip_cuda(amp_tensor *const *params, int n, double max_norm)
{
    cuda_buf *bufs = calloc((size_t)(n > 0 ? n : 1), sizeof *bufs);
    if (!bufs) {
        amp_set_error(AMP_ERR_MEMORY, "clip_grad_norm: out of memory");
        return NAN;
    }
    double *dev_total = cuda_malloc(sizeof *dev_total); /* the total, on the device */
    if (!dev_total) {
        free(bufs);
        return NAN; /* cuda_malloc said why */
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (params[i]->grad)
            bufs[k++] = (cuda_buf){tensor_ptr(params[i]->grad), params[i]->grad->numel, params[i]->grad->dtype};
    double total = NAN;
    amp_status st = cuda_clip_grad_norm(bufs, k, max_norm, dev_total);
    if (st == AMP_OK) /* the synchronisation point: the host needs the value */
        st = cuda_copy(&total, AMP_CPU, dev_total, AMP_CUDA, sizeof total);
    cuda_free(dev_total);
    free(bufs);
    if (st != AMP_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", amp_last_error());
        amp_set_error(st, "clip_grad_norm: %s", why);
        return NAN;
    }
    return total;
}

double amp_clip_grad_norm(amp_tensor *const *params, int n, double max_norm)
{
    if (n < 0 || (n > 0 && !params)) {
        amp_set_error(AMP_ERR_ARG, "clip_grad_norm: bad parameter list (n = %d)", n);
        return NAN;
    }
    if (!(max_norm >= 0)) {
        amp_set_error(AMP_ERR_ARG, "clip_grad_norm: max_norm %g must be >= 0", max_norm);
        return NAN;
    }
    /* Check everything before anything changes: no NULLs, one device. */
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (!params[i]) {
            amp_set_error(AMP_ERR_ARG, "clip_grad_norm: parameter %d is NULL", i);
            return NAN;
        }
        if (!params[i]->grad)
            continue;
        if (first < 0) {
            first = i;
        } else if (tensor_device(params[i]->grad) != tensor_device(params[first]->grad)) {
            amp_set_error(AMP_ERR_DEVICE, "clip_grad_norm: parameter %d's gradient is on %s, parameter %d's on %s; "
                          "all gradients must be on one device",
                          first, amp_device_name(tensor_device(params[first]->grad)), i,
                          amp_device_name(tensor_device(params[i]->grad)));
            return NAN;
        }
    }
    if (first >= 0 && tensor_device(params[first]->grad) != AMP_CPU)
        return clip_cuda(params, n, max_norm);
    double ss = 0;
    for (int i = 0; i < n; i++)
        if (params[i]->grad && !sum_squares(params[i]->grad, &ss)) {
            amp_set_error(AMP_ERR_MEMORY, "clip_grad_norm: out of memory");
            return NAN;
        }
    double total = sqrt(ss);
    double coef = max_norm / (total + 1e-6);
    if (coef >= 1.0) /* clamp(max=1): a factor of 1 changes nothing */
        return total;
    for (int i = 0; i < n; i++)
        if (params[i]->grad && scale(params[i]->grad, (float)coef) != AMP_OK) {
            amp_set_error(AMP_ERR_MEMORY, "clip_grad_norm: out of memory");
            return NAN;
        }
    return total;
}
