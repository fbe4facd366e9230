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
 * amp_clip_grad_norm_tensor is the same clipping, with the total left in a
 * new 0-d f32 tensor on the gradients' device (PyTorch returns a 0-d
 * tensor too); amp_clip_grad_norm returns it as a host double. Both are
 * clip() below, which only delivers the total differently: as the double
 * itself, or rounded once to f32 into the tensor.
 *
 * The clipping is the gradients' backend's two clipping primitives,
 * grad_sumsq then clip_by_sumsq with that one sum (the sum, the factor and
 * the multiply all run there, in the same arithmetic on every backend;
 * ZeRO-1 puts its all-gather of the ranks' sums between them); the total
 * lands in the backend's memory. The only
 * wait for a GPU is reading it back, which the double amp_clip_grad_norm
 * returns needs and the tensor does not. All gradients must be on one
 * device.
 */
#include "backend/backend.h"
#include "base/base.h"
#include "comm/comm.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The last error again, its message prefixed with "fn: ". */
static amp_status prefixed(amp_status st, const char *fn)
{
    char why[400];
    snprintf(why, sizeof why, "%s", amp_last_error());
    return amp_set_error(st, "%s: %s", fn, why);
}

amp_status optim_clip_bufs(amp_device dev, const be_buf *bufs, int k, int ranks, double max_norm, const char *fn,
                           double *host, amp_tensor **out)
{
    const amp_backend *be = backend_of(dev);
    if (!be->grad_sumsq || !be->clip_by_sumsq)
        return backend_missing(be, fn, !be->grad_sumsq ? "grad_sumsq" : "clip_by_sumsq");
    /* in the backend's memory: [0, ranks) the ranks' sums of squares (one
     * rank: [0] is this one's), then this rank's, then the total */
    double *sums = be->alloc((size_t)(ranks + 2) * sizeof *sums), *mine = sums ? &sums[ranks] : NULL;
    /* made before anything changes: without memory, nothing is clipped */
    amp_tensor *t = host ? NULL : tensor_new_on(AMP_SHAPE(), AMP_F32, dev);
    amp_status st = !sums          ? amp_set_error(AMP_ERR_MEMORY, "%s: out of %s memory", fn, be->name)
                    : !host && !t  ? amp_last_status()
                                   : AMP_OK;
    if (st == AMP_OK)
        st = be->grad_sumsq(bufs, k, ranks > 1 ? mine : &sums[0]);
    if (ranks > 1) {
        /* every rank reaches the all-gather, or none does: a failure here
         * is every rank's error, naming this rank */
        st = comm_agree(st, fn);
        if (st == AMP_OK)
            st = comm_allgather(mine, sums, 1, AMP_I64, dev, NULL); /* doubles, as bits */
    }
    if (st == AMP_OK)
        st = be->clip_by_sumsq(bufs, k, sums, ranks, max_norm, host ? &sums[ranks + 1] : NULL,
                               host ? NULL : tensor_f32(t));
    if (st == AMP_OK && host) /* on a GPU, the synchronisation point: the host needs the value */
        st = be->copy(host, AMP_CPU, &sums[ranks + 1], dev, sizeof *host);
    if (st == AMP_OK && out)
        *out = t;
    else
        amp_tensor_free(t);
    if (sums)
        be->free(sums);
    return st;
}

/* Every gradient of params[0..n) is on dev, at least one exists. The
 * total goes to *host (read back: on a GPU, the wait) or into *out, a new
 * 0-d f32 tensor on dev (no wait). */
static amp_status clip_on(amp_device dev, amp_tensor *const *params, int n, double max_norm, const char *fn,
                          double *host, amp_tensor **out)
{
    be_buf *bufs = calloc((size_t)(n > 0 ? n : 1), sizeof *bufs);
    if (!bufs)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", fn);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (params[i]->grad)
            bufs[k++] = (be_buf){tensor_ptr(params[i]->grad), params[i]->grad->numel, params[i]->grad->dtype};
    amp_status st = optim_clip_bufs(dev, bufs, k, 1, max_norm, fn, host, out);
    free(bufs);
    return st == AMP_OK ? AMP_OK : prefixed(st, fn);
}

/* The one implementation of both entry points (fn names the caller in
 * messages): checks, clips, and delivers the total to *host (a double) when
 * host is not NULL, else into *out (a new 0-d f32 tensor on the gradients'
 * device; with no gradient, a zero on params[0]'s device, the CPU when n is
 * 0). On error nothing is written and, but for a failure part way through
 * the scaling itself (out of memory on the CPU, a failed launch), no
 * gradient has changed. */
static amp_status clip(amp_tensor *const *params, int n, double max_norm, const char *fn, double *host,
                       amp_tensor **out)
{
    if (n < 0 || (n > 0 && !params))
        return amp_set_error(AMP_ERR_ARG, "%s: bad parameter list (n = %d)", fn, n);
    if (!(max_norm >= 0))
        return amp_set_error(AMP_ERR_ARG, "%s: max_norm %g must be >= 0", fn, max_norm);
    /* Check everything before anything changes: no NULLs, one device. */
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (!params[i])
            return amp_set_error(AMP_ERR_ARG, "%s: parameter %d is NULL", fn, i);
        if (!params[i]->grad)
            continue;
        if (first < 0) {
            first = i;
        } else if (tensor_device(params[i]->grad) != tensor_device(params[first]->grad)) {
            return amp_set_error(AMP_ERR_DEVICE, "%s: parameter %d's gradient is on %s, parameter %d's on %s; "
                                 "all gradients must be on one device",
                                 fn, first, amp_device_name(tensor_device(params[first]->grad)), i,
                                 amp_device_name(tensor_device(params[i]->grad)));
        }
    }
    if (first >= 0)
        return clip_on(tensor_device(params[first]->grad), params, n, max_norm, fn, host, out);
    /* No gradient: a total of 0, as a zero tensor where the parameters are
     * (PyTorch: on the CPU when there are none). */
    if (host) {
        *host = 0.0;
        return AMP_OK;
    }
    *out = tensor_zeros_on(AMP_SHAPE(), AMP_F32, n > 0 ? tensor_device(params[0]) : AMP_CPU);
    return *out ? AMP_OK : prefixed(amp_last_status(), fn);
}

double amp_clip_grad_norm(amp_tensor *const *params, int n, double max_norm)
{
    double total;
    amp_phase_begin(AMP_PHASE_UNSCALE);
    amp_status st = clip(params, n, max_norm, "clip_grad_norm", &total, NULL);
    amp_phase_end(AMP_PHASE_UNSCALE);
    return st == AMP_OK ? total : NAN;
}

amp_tensor *amp_clip_grad_norm_tensor(amp_tensor *const *params, int n, double max_norm)
{
    amp_tensor *total = NULL;
    amp_phase_begin(AMP_PHASE_UNSCALE);
    amp_status st = clip(params, n, max_norm, "clip_grad_norm_tensor", NULL, &total);
    amp_phase_end(AMP_PHASE_UNSCALE);
    return st == AMP_OK ? total : NULL;
}
