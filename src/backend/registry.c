/*
 * registry.c - the backends, one line each, and what the core asks of
 * them: backend_of(device), the device's name, the availability check,
 * the error for a primitive a backend lacks. A new backend is a folder
 * under src/backend/ with its table, a line here and its amp_device value
 * in ampc.h.
 */
#include "backend/backend.h"
#include "base/base.h"

extern const amp_backend amp_backend_cpu;
extern const amp_backend amp_backend_cuda;

static const amp_backend *const backends[AMP_DEVICE_COUNT] = {
    [AMP_CPU] = &amp_backend_cpu,
    [AMP_CUDA] = &amp_backend_cuda,
};

static bool never(void) { return false; }
static const char *no_backend_reason(void) { return "no backend for this device"; }
static const amp_backend none = {.name = "none", .available = never, .unavailable_reason = no_backend_reason};

const amp_backend *backend_of(amp_device dev)
{
    if ((unsigned)dev >= AMP_DEVICE_COUNT || !backends[dev])
        return &none;
    return backends[dev];
}

const char *amp_device_name(amp_device dev)
{
    return (unsigned)dev < AMP_DEVICE_COUNT && backends[dev] ? backends[dev]->name : "invalid";
}

amp_status backend_check(amp_device dev, const char *who)
{
    if ((unsigned)dev >= AMP_DEVICE_COUNT)
        return amp_set_error(AMP_ERR_DEVICE, "%s: invalid device %d", who, (int)dev);
    const amp_backend *be = backend_of(dev);
    if (be->available && be->available())
        return AMP_OK;
    return amp_set_error(AMP_ERR_DEVICE, "%s: %s is not available (%s)", who, amp_device_name(dev),
                         be->unavailable_reason ? be->unavailable_reason() : "no backend");
}

amp_status backend_missing(const amp_backend *be, const char *who, const char *primitive)
{
    return amp_set_error(AMP_ERR_DEVICE, "%s: the %s backend has no %s", who, be->name, primitive);
}
