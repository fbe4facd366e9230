/*
 * convert.c - dtype names, the scalar reference conversions, and
 * amp_convert's dispatch.
 *
 * The scalar functions define the results: round to nearest even, +-inf
 * kept, NaN stays a quiet NaN (the quiet bit set, the top payload bits
 * kept, as the x86 conversion instructions do), overflow to inf, and
 * subnormals handled both ways.
 */
#include "dtype/dtype.h"
#include "base/base.h"
#include "base/parallel.h"

#include <math.h>

static const char *const dtype_names[AMP_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "i64"};
static const size_t dtype_sizes[AMP_DTYPE_COUNT] = {4, 2, 2, 4, 8};

const char *amp_dtype_name(amp_dtype dt)
{
    return (unsigned)dt < AMP_DTYPE_COUNT ? dtype_names[dt] : "invalid";
}

size_t amp_dtype_size(amp_dtype dt) { return (unsigned)dt < AMP_DTYPE_COUNT ? dtype_sizes[dt] : 0; }

bool amp_dtype_is_float(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t amp_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;

    if (ax > 0x7F800000u) /* NaN: quiet it, keep the top 9 payload bits */
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
    if (ax >= 0x477FF000u) /* >= 65520 (halfway past 65504) rounds to inf */
        return (uint16_t)(sign | 0x7C00u);
    if (ax >= 0x38800000u) { /* normal in f16: rebias 127 -> 15, round at bit 13 */
        uint32_t r = ax - 0x38000000u;
        r += 0x0FFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) /* <= 2^-25: rounds (ties to even) to zero */
        return sign;
    /* Subnormal in f16: units of 2^-24. value = mant * 2^(e-150). */
    uint32_t e = ax >> 23;
    uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

float amp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) /* inf, or NaN made quiet */
        return bits_f32(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t amp_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: quiet, keep payload top */
        return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7FFFu + ((x >> 16) & 1u); /* round to nearest even; overflow -> inf */
    return (uint16_t)(x >> 16);
}

float amp_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* The scalar loops (convert_x86.c's tails and fallback): dst[i] =
 * conv(src[i]), one per direction and 16-bit type. */
#define CVT_SCALAR(name, S, D, conv)                                                                              \
    void name(const S *src, D *dst, size_t n)                                                                     \
    {                                                                                                             \
        for (size_t i = 0; i < n; i++)                                                                            \
            dst[i] = conv(src[i]);                                                                                \
    }
CVT_SCALAR(cvt_f32_to_f16_scalar, float, uint16_t, amp_f32_to_f16)
CVT_SCALAR(cvt_f16_to_f32_scalar, uint16_t, float, amp_f16_to_f32)
CVT_SCALAR(cvt_f32_to_bf16_scalar, float, uint16_t, amp_f32_to_bf16)
CVT_SCALAR(cvt_bf16_to_f32_scalar, uint16_t, float, amp_bf16_to_f32)
#undef CVT_SCALAR

/* Float to integer: truncate toward zero, NaN -> 0, saturate at the ends. */
static int64_t to_int(double v, amp_dtype dt)
{
    double lo = dt == AMP_I32 ? (double)INT32_MIN : -9223372036854775808.0;
    double hi = dt == AMP_I32 ? (double)INT32_MAX : 9223372036854775807.0;
    if (isnan(v))
        return 0;
    if (v <= lo)
        return dt == AMP_I32 ? INT32_MIN : INT64_MIN;
    if (v >= hi)
        return dt == AMP_I32 ? INT32_MAX : INT64_MAX;
    return (int64_t)v;
}

static double load_double(const void *p, amp_dtype dt, size_t i)
{
    switch (dt) {
    case AMP_I32: return (double)((const int32_t *)p)[i];
    case AMP_I64: return (double)((const int64_t *)p)[i];
    default: return (double)load_f32(p, dt, i);
    }
}

static void store_double(void *p, amp_dtype dt, size_t i, double v)
{
    switch (dt) {
    case AMP_F32: ((float *)p)[i] = (float)v; break;
    case AMP_F16: ((uint16_t *)p)[i] = amp_f32_to_f16((float)v); break;
    case AMP_BF16: ((uint16_t *)p)[i] = amp_f32_to_bf16((float)v); break;
    case AMP_I32: ((int32_t *)p)[i] = (int32_t)to_int(v, AMP_I32); break;
    case AMP_I64: ((int64_t *)p)[i] = to_int(v, AMP_I64); break;
    default: break;
    }
}

void amp_convert(const void *src, amp_dtype sdt, void *dst, amp_dtype ddt, size_t n)
{
    if (n == 0 || (unsigned)sdt >= AMP_DTYPE_COUNT || (unsigned)ddt >= AMP_DTYPE_COUNT)
        return;
    if (sdt == ddt) {
        memmove(dst, src, n * amp_dtype_size(sdt));
        return;
    }
    if (sdt == AMP_F32 && ddt == AMP_F16)
        return cvt_pick_f32_to_f16()(src, dst, n);
    if (sdt == AMP_F32 && ddt == AMP_BF16)
        return cvt_pick_f32_to_bf16()(src, dst, n);
    if (sdt == AMP_F16 && ddt == AMP_F32)
        return cvt_pick_f16_to_f32()(src, dst, n);
    if (sdt == AMP_BF16 && ddt == AMP_F32)
        return cvt_pick_bf16_to_f32()(src, dst, n);
    /* Between two 16-bit floats, go through f32 (exact widening, one
     * rounding), matching PyTorch's .to(). i32 goes through double (exact);
     * i64 to a float type rounds once, through float. */
    for (size_t i = 0; i < n; i++) {
        if (amp_dtype_is_float(sdt) && amp_dtype_is_float(ddt))
            store_double(dst, ddt, i, (double)load_f32(src, sdt, i));
        else if (sdt == AMP_I64 && ddt == AMP_I32)
            ((int32_t *)dst)[i] = (int32_t)((const int64_t *)src)[i];
        else if (sdt == AMP_I32 && ddt == AMP_I64)
            ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
        else if (sdt == AMP_I64 && amp_dtype_is_float(ddt))
            /* int64 -> float in one rounding, as C and PyTorch do; through
             * double it would round twice above 2^53. */
            store_double(dst, ddt, i, (double)(float)((const int64_t *)src)[i]);
        else
            store_double(dst, ddt, i, load_double(src, sdt, i));
    }
}

typedef struct {
    const char *src;
    amp_dtype sdt;
    int64_t sld;
    char *dst;
    amp_dtype ddt;
    int64_t dld, cols;
} rows_job;

static void rows_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const rows_job *j = ctx;
    const size_t es = amp_dtype_size(j->sdt), ed = amp_dtype_size(j->ddt);
    for (int64_t r = lo; r < hi; r++)
        amp_convert(j->src + (size_t)(r * j->sld) * es, j->sdt, j->dst + (size_t)(r * j->dld) * ed, j->ddt,
                    (size_t)j->cols);
}

void cvt_rows(const void *src, amp_dtype sdt, int64_t sld, void *dst, amp_dtype ddt, int64_t dld, int64_t rows,
              int64_t cols, int64_t grain)
{
    rows_job j = {src, sdt, sld, dst, ddt, dld, cols};
    amp_parallel_for(rows, grain, rows_range, &j);
}
