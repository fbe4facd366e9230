/*
 * dtype.h - internal face of the dtype layer: element loads and stores in
 * float, and the conversion kernels behind amp_convert.
 *
 * Defines: load_f32/store_f32 (one element, any dtype), the scalar
 * reference converters, and the per-ISA vector converters that
 * amp_convert picks from at run time.
 */
#ifndef AMPC_DTYPE_H
#define AMPC_DTYPE_H

#include "ampc.h"

#include <string.h>

/* Scalar reference paths: the definition every vector path must match bit
 * for bit. */
void cvt_f32_to_f16_scalar(const float *src, uint16_t *dst, size_t n);
void cvt_f16_to_f32_scalar(const uint16_t *src, float *dst, size_t n);
void cvt_f32_to_bf16_scalar(const float *src, uint16_t *dst, size_t n);
void cvt_bf16_to_f32_scalar(const uint16_t *src, float *dst, size_t n);

/* The vector paths (convert_x86.c); callers check amp_cpu_features(). */
typedef void (*cvt_narrow_fn)(const float *src, uint16_t *dst, size_t n);
typedef void (*cvt_widen_fn)(const uint16_t *src, float *dst, size_t n);

/* amp_convert over the rows of a matrix: rows rows of cols elements from
 * src (dtype sdt, sld elements from row to row) to dst (ddt, dld), the
 * rows spread over the threads (amp_parallel_for) in grains of `grain`. */
void cvt_rows(const void *src, amp_dtype sdt, int64_t sld, void *dst, amp_dtype ddt, int64_t dld, int64_t rows,
              int64_t cols, int64_t grain);

/* The fastest converter this CPU has, honouring amp_cpu_limit(). */
cvt_narrow_fn cvt_pick_f32_to_f16(void);
cvt_narrow_fn cvt_pick_f32_to_bf16(void);
cvt_widen_fn cvt_pick_f16_to_f32(void);
cvt_widen_fn cvt_pick_bf16_to_f32(void);

/* Element i of a buffer of dtype dt, as float (integers converted). */
static inline float load_f32(const void *p, amp_dtype dt, size_t i)
{
    switch (dt) {
    case AMP_F32: return ((const float *)p)[i];
    case AMP_F16: return amp_f16_to_f32(((const uint16_t *)p)[i]);
    case AMP_BF16: return amp_bf16_to_f32(((const uint16_t *)p)[i]);
    case AMP_I32: return (float)((const int32_t *)p)[i];
    case AMP_I64: return (float)((const int64_t *)p)[i];
    default: return 0.0f;
    }
}

/* Integer label / index i of an i32 or i64 buffer. */
static inline int64_t load_i64(const void *p, amp_dtype dt, size_t i)
{
    return dt == AMP_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

#endif
