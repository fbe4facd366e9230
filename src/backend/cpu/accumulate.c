/*
 * accumulate.c - the CPU backend's accumulate primitive (backend.h):
 * dst[i] += src[i] in dst's dtype, autograd's gradient accumulation.
 *
 * f32 into f32 is a plain loop; otherwise blocks of both are widened to
 * f32 (exact), added in f32 and rounded once into dst's dtype with the
 * dtype layer's conversions, so every element gets the same bits whatever
 * the block it lands in.
 */
#include "backend/cpu/cpu_backend.h"

#include "base/base.h"

/* Elements per widened block (two f32 buffers of it on the stack). */
#define ACC_BLOCK 1024

amp_status cpu_accumulate(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n)
{
    if (ddt == AMP_F32 && sdt == AMP_F32) {
        float *a = dst;
        const float *b = src;
        for (int64_t i = 0; i < n; i++)
            a[i] += b[i];
        return AMP_OK;
    }
    float a[ACC_BLOCK], b[ACC_BLOCK];
    const size_t des = amp_dtype_size(ddt), ses = amp_dtype_size(sdt);
    for (int64_t lo = 0; lo < n; lo += ACC_BLOCK) {
        const size_t len = (size_t)(n - lo < ACC_BLOCK ? n - lo : ACC_BLOCK);
        void *d = (char *)dst + (size_t)lo * des;
        amp_convert(d, ddt, a, AMP_F32, len);
        amp_convert((const char *)src + (size_t)lo * ses, sdt, b, AMP_F32, len);
        for (size_t i = 0; i < len; i++)
            a[i] = a[i] + b[i];
        amp_convert(a, AMP_F32, d, ddt, len);
    }
    return AMP_OK;
}
