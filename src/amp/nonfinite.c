/*
 * nonfinite.c - finding inf/NaN: how many a tensor holds, and which
 * parameter of an optimizer first has a non-finite gradient. Diagnostics
 * for a run whose steps the scaler keeps skipping (the scaler itself only
 * records "some gradient was not finite", in its fused pass): the tensor's
 * backend counts every element (count_nonfinite) and the count is copied
 * to the host (on a GPU, a wait).
 */
#include "backend/backend.h"
#include "base/base.h"
#include "tensor/tensor.h"

/* The backend's count into *count, in its memory. */
static amp_status count_on(const amp_backend *be, const amp_tensor *t, int64_t *count)
{
    BACKEND_CALL(be, "tensor_count_nonfinite", count_nonfinite, tensor_ptr(t), t->dtype, t->numel, count);
    return AMP_OK;
}

int64_t amp_tensor_count_nonfinite(const amp_tensor *t)
{
    if (!t) {
        amp_set_error(AMP_ERR_ARG, "tensor_count_nonfinite: NULL tensor");
        return -1;
    }
    if (!amp_dtype_is_float(t->dtype) || t->numel == 0)
        return 0;
    const amp_backend *be = backend_of(tensor_device(t));
    int64_t *d = be->alloc(sizeof *d), n = -1;
    if (!d) {
        amp_set_error(AMP_ERR_MEMORY, "tensor_count_nonfinite: out of %s memory", be->name);
        return -1;
    }
    if (count_on(be, t, d) != AMP_OK || be->copy(&n, AMP_CPU, d, be->device, sizeof n) != AMP_OK)
        n = -1;
    be->free(d);
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
