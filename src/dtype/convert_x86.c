/*
 * convert_x86.c - vector conversion paths, chosen at run time.
 *
 * Placeholder dispatch: scalar everywhere until the vector kernels land.
 */
#include "dtype/dtype.h"
#include "base/base.h"

cvt_narrow_fn cvt_pick_f32_to_f16(void) { return cvt_f32_to_f16_scalar; }
cvt_narrow_fn cvt_pick_f32_to_bf16(void) { return cvt_f32_to_bf16_scalar; }
cvt_widen_fn cvt_pick_f16_to_f32(void) { return cvt_f16_to_f32_scalar; }
cvt_widen_fn cvt_pick_bf16_to_f32(void) { return cvt_bf16_to_f32_scalar; }
