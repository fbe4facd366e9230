/*
 * device.c - copies between devices (amp_to_device) and moving a leaf in
 * place (amp_tensor_move), through the devices' backends. (The amp_cuda_*
 * queries live with the CUDA backend, src/backend/cuda/device_api.c;
 * moving a module's parameters, amp_module_to, in src/nn/module.c.)
 *
 * Moving a leaf swaps its storage for a copy on the other device and bumps
 * the storage version, so a cast the autocast cache made from the old
 * storage is never served again. tensor_retype swaps it the same way for
 * a copy in another dtype (amp_module_to_dtype).
 */
#include "backend/backend.h"
#include "base/base.h"
#include "tensor/tensor.h"

/* A new tensor on dev holding t's bytes, copied by the backend of the
 * device that is not the host (the CPU's within host memory). The copy is
 * for what t is for: it takes t's memory category (a graph's hold on t is
 * not copied). */
static amp_tensor *copy_to(const amp_tensor *t, amp_device dev)
{
    amp_mem_category prev = amp_memory_set_category((amp_mem_category)t->storage->category);
    amp_tensor *c = tensor_new_on(t->shape, t->dtype, dev);
    amp_memory_set_category(prev);
    if (!c)
        return NULL;
    size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
    amp_device src = tensor_device(t);
    const amp_backend *be = backend_of(dev != AMP_CPU ? dev : src);
    if (be->copy(tensor_ptr(c), dev, tensor_ptr(t), src, nb) != AMP_OK) {
        amp_tensor_free(c);
        return NULL;
    }
    return c;
}

amp_tensor *amp_to_device(const amp_tensor *t, amp_device dev)
{
    if (!t)
        return amp_last_status() != AMP_OK ? NULL : amp_fail_null(AMP_ERR_ARG, "to_device: NULL tensor");
    if (backend_check(dev, "to_device") != AMP_OK)
        return NULL;
    return copy_to(t, dev);
}

amp_status amp_tensor_move(amp_tensor *t, amp_device dev)
{
    if (!t)
        return amp_set_error(AMP_ERR_ARG, "tensor_move: NULL tensor");
    if (backend_check(dev, "tensor_move") != AMP_OK)
        return amp_last_status();
    if (t->grad_fn)
        return amp_set_error(AMP_ERR_STATE,
                             "tensor_move: only a leaf tensor can move in place (this one was made by an op; "
                             "use amp_to_device for a copy)");
    if (tensor_device(t) == dev)
        return AMP_OK;
    amp_tensor *c = copy_to(t, dev);
    if (!c)
        return amp_last_status();
    if (t->grad) {
        amp_status st = amp_tensor_move(t->grad, dev);
        if (st != AMP_OK) {
            amp_tensor_free(c);
            return st;
        }
    }
    /* Swap storages: t gets the copy, c takes t's reference to the old one
     * and drops it. */
    amp_storage *old = t->storage;
    size_t old_offset = t->offset;
    t->storage = c->storage;
    t->offset = 0;
    t->storage->version = old->version + 1;
    c->storage = old;
    c->offset = old_offset;
    amp_tensor_free(c);
    return AMP_OK;
}

amp_status tensor_retype(amp_tensor *t, amp_dtype dt)
{
    if (t->grad_fn)
        return amp_set_error(AMP_ERR_STATE, "tensor_retype: only a leaf tensor can change dtype in place");
    if (t->dtype == dt)
        return AMP_OK;
    amp_tensor *c = tensor_convert(t, dt);
    if (!c)
        return amp_last_status();
    tensor_set_category(c, AMP_MEM_PARAMETERS);
    amp_tensor_free(t->grad);
    t->grad = NULL;
    /* Swap storages, as amp_tensor_move does. */
    amp_storage *old = t->storage;
    size_t old_offset = t->offset;
    t->storage = c->storage;
    t->offset = 0;
    t->dtype = dt;
    t->storage->version = old->version + 1;
    c->storage = old;
    c->offset = old_offset;
    amp_tensor_free(c);
    return AMP_OK;
}
