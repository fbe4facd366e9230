/*
 * device.c - the public device API: whether CUDA is there and its
 * settings, copies between devices (amp_to_device), and moving leaves and
 * modules in place (amp_tensor_move, amp_module_to).
 *
 * Moving a leaf swaps its storage for a copy on the other device and bumps
 * the storage version, so a cast the autocast cache made from the old
 * storage is never served again.
 */
#include "backend/cuda/cuda_backend.h"
#include "base/base.h"
#include "tensor/tensor.h"

#include <stdio.h>
#include <string.h>

bool amp_cuda_available(void) { return cuda_device_count() > 0; }
int amp_cuda_device_count(void) { return cuda_device_count(); }
bool amp_cuda_bf16_supported(void) { return cuda_device_count() > 0 && cuda_compute_capability() >= 80; }
void amp_cuda_allow_tf32(bool on) { cuda_set_tf32(on); }
bool amp_cuda_tf32_allowed(void) { return cuda_get_tf32(); }
amp_status amp_cuda_synchronize(void) { return cuda_synchronize(); }
amp_memory_stats amp_cuda_memory_get_stats(void) { return cuda_memory_stats(); }
void amp_cuda_memory_reset_peak(void) { cuda_memory_reset_peak(); }
void amp_cuda_empty_cache(void) { cuda_empty_cache(); }

amp_status amp_cuda_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return amp_set_error(AMP_ERR_ARG, "cuda_mem_get_info: NULL argument");
    return cuda_mem_info(free_bytes, total_bytes);
}

static amp_status check_device(amp_device dev, const char *fn)
{
    if (dev == AMP_CPU)
        return AMP_OK;
    if (dev != AMP_CUDA)
        return amp_set_error(AMP_ERR_DEVICE, "%s: invalid device %d", fn, (int)dev);
    if (cuda_device_count() < 1)
        return amp_set_error(AMP_ERR_DEVICE, "%s: cuda is not available (%s)", fn, cuda_unavailable_reason());
    return AMP_OK;
}

/* A new tensor on dev holding t's bytes. */
static amp_tensor *copy_to(const amp_tensor *t, amp_device dev)
{
    amp_tensor *c = tensor_new_on(t->shape, t->dtype, dev);
    if (!c)
        return NULL;
    size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
    amp_device src = tensor_device(t);
    if (src == AMP_CPU && dev == AMP_CPU) {
        memcpy(tensor_ptr(c), tensor_ptr(t), nb);
    } else if (cuda_copy(tensor_ptr(c), dev, tensor_ptr(t), src, nb) != AMP_OK) {
        amp_tensor_free(c);
        return NULL;
    }
    return c;
}

amp_tensor *amp_to_device(const amp_tensor *t, amp_device dev)
{
    if (!t)
        return amp_last_status() != AMP_OK ? NULL : amp_fail_null(AMP_ERR_ARG, "to_device: NULL tensor");
    if (check_device(dev, "to_device") != AMP_OK)
        return NULL;
    return copy_to(t, dev);
}

amp_status amp_tensor_move(amp_tensor *t, amp_device dev)
{
    if (!t)
        return amp_set_error(AMP_ERR_ARG, "tensor_move: NULL tensor");
    if (check_device(dev, "tensor_move") != AMP_OK)
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

amp_status amp_module_to(amp_module *m, amp_device dev)
{
    if (!m)
        return amp_set_error(AMP_ERR_ARG, "module_to: NULL module");
    if (check_device(dev, "module_to") != AMP_OK)
        return amp_last_status();
    int n = amp_module_num_params(m);
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        amp_tensor *p = amp_module_param(m, i, &name);
        amp_status st = p ? amp_tensor_move(p, dev) : amp_last_status();
        if (st != AMP_OK) {
            char why[400];
            snprintf(why, sizeof why, "%s", amp_last_error());
            return amp_set_error(st, "module_to: parameter %d (%s) could not move to %s: %s", i, name ? name : "?",
                                 amp_device_name(dev), why);
        }
    }
    return AMP_OK;
}
