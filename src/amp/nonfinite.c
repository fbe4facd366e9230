/*
 * nonfinite.c - finding inf/NaN: how many a tensor holds, and which
 * parameter of an optimizer first has a non-finite gradient. Diagnostics
 * for a run whose steps the scaler keeps skipping (the scaler itself only
 * records "some gradient was not finite", in its fused pass): they read
 * every element, and a CUDA tensor is copied to the host first (a wait).
 */
#include "base/base.h"
#include "dtype/dtype.h"
#include "tensor/tensor.h"

#include <math.h>

/* Inf/NaN elements of a host buffer of a float dtype (f16 / bf16 widen
 * exactly, inf and NaN included). */
static int64_t count_host(const void *p, amp_dtype dt, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !isfinite(load_f32(p, dt, (size_t)i));
    return bad;
}

int64_t amp_tensor_count_nonfinite(const amp_tensor *t)
{
    if (!t) {
        amp_set_error(AMP_ERR_ARG, "tensor_count_nonfinite: NULL tensor");
        return -1;
    }
    if (!amp_dtype_is_float(t->dtype) || t->numel == 0)
        return 0;
    if (!tensor_on_cuda(t))
        return count_host(tensor_ptr(t), t->dtype, t->numel);
    amp_tensor *h = amp_to_device(t, AMP_CPU);
    if (!h)
        return -1;
    int64_t n = count_host(tensor_ptr(h), h->dtype, h->numel);
    amp_tensor_free(h);
    return n;
}

amp_status amp_optim_find_nonfinite_grad(const amp_optim *o, int *index, int64_t *count)
{
    if (!o || !index)
        return amp_set_error(AMP_ERR_ARG, "optim_find_nonfinite_grad: NULL %s", o ? "index" : "optimizer");
    *index = -1;
    if (count)
        *count = 0;
    for (int i = 0, n = amp_optim_num_params(o); i < n; i++) {
        const amp_tensor *g = amp_tensor_grad(amp_optim_param(o, i));
        if (!g)
            continue;
        int64_t bad = amp_tensor_count_nonfinite(g);
        if (bad < 0)
            return amp_last_status();
        if (bad > 0) {
            *index = i;
            if (count)
                *count = bad;
            return AMP_OK;
        }
    }
    return AMP_OK;
}
