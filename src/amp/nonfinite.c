/*
 * nonfinite.c - finding inf/NaN: how many a tensor holds, and which
 * parameter of an optimizer first has a non-finite gradient. Diagnostics
 * for a run whose steps the scaler keeps skipping (the scaler itself only
 * records "some gradient was not finite", in its fused pass): they read
 * every element, and a CUDA tensor is copied to the host first (a wait).
 */
#include "base/base.h"
#include "tensor/tensor.h"

#include <string.h>

/* Inf/NaN elements of a host buffer: the exponent bits all ones. */
static int64_t count_host(const void *p, amp_dtype dt, int64_t n)
{
    int64_t bad = 0;
    if (dt == AMP_F32) {
        const uint32_t *b = p;
        for (int64_t i = 0; i < n; i++)
            bad += (b[i] & 0x7F800000u) == 0x7F800000u;
    } else if (dt == AMP_F16 || dt == AMP_BF16) {
        const uint16_t *b = p;
        const uint16_t e = dt == AMP_F16 ? 0x7C00u : 0x7F80u;
        for (int64_t i = 0; i < n; i++)
            bad += (b[i] & e) == e;
    }
    return bad; /* integers are always finite */
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
