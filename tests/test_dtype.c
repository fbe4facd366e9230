/*
 * test_dtype.c - the dtype layer: f16/bf16 <-> f32 for every 16-bit
 * pattern, IEEE corner values, amp_convert between every pair of dtypes
 * (integers truncate, saturate and take NaN to 0), and every vector path
 * this CPU has against the scalar reference, on random and special
 * patterns, odd lengths and unaligned pointers.
 *
 * Expected values are computed here in double from the formats' fields,
 * or written out by hand from IEEE 754; the all-2^32 check of the
 * narrowing paths is tests/test_dtype_exhaustive.c.
 */
#include "harness.h"
#include "dtype/dtype.h"

#include <float.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The value of an IEEE binary16 pattern, decoded from its fields. */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0x1F)
        return m ? NAN : s * INFINITY;
    return e == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, e - 25);
}

/* ---------------------------------------------------- 16-bit round trips */

static void test_every_f16_pattern_widens_exactly_and_narrows_back(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = amp_f16_to_f32((uint16_t)h);
        uint32_t u = fbits(f);
        bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
        if (is_nan) {
            /* quiet bit set, the 10 payload bits at the top of f32's */
            uint32_t want = ((h & 0x8000u) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13);
            bad += u != want;
            bad += amp_f32_to_f16(f) != (uint16_t)(h | 0x200);
        } else {
            bad += (double)f != f16_value((uint16_t)h) || (u >> 31) != (h >> 15);
            bad += amp_f32_to_f16(f) != h;
        }
        if (bad && bad < 4)
            CHECK_MSG(0, "f16 0x%04x -> f32 0x%08x -> f16 0x%04x", h, u, amp_f32_to_f16(f));
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_every_bf16_pattern_widens_exactly_and_narrows_back(void)
{
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = amp_bf16_to_f32((uint16_t)b);
        bool is_nan = (b & 0x7F80) == 0x7F80 && (b & 0x7F);
        /* bf16 is f32's top half: widening is a shift, even for
         * signalling NaNs (as in PyTorch); narrowing then quiets them */
        bad += fbits(f) != b << 16;
        bad += amp_f32_to_bf16(f) != (uint16_t)(is_nan ? b | 0x40 : b);
        if (is_nan)
            bad += !isnan(f);
        if (bad && bad < 4)
            CHECK_MSG(0, "bf16 0x%04x -> f32 0x%08x -> 0x%04x", b, fbits(f), amp_f32_to_bf16(f));
    }
    CHECK_EQ_INT(bad, 0);
}

/* -------------------------------------------------------- IEEE corners */

static void test_f16_ieee_corner_values(void)
{
    static const struct { float in; uint16_t out; } cases[] = {
        {65504.0f, 0x7BFF},                 /* largest finite f16 */
        {65519.99f, 0x7BFF},                /* just under halfway to 2^16 */
        {65520.0f, 0x7C00},                 /* halfway: ties to even = inf */
        {-65520.0f, 0xFC00},
        {1e6f, 0x7C00},
        {FLT_MAX, 0x7C00},
        {0x1p-24f, 0x0001},                 /* smallest subnormal */
        {0x1p-25f, 0x0000},                 /* half of it: ties to even = 0 */
        {-0x1p-25f, 0x8000},
        {0x1.000002p-25f, 0x0001},          /* just above half */
        {0x3p-26f, 0x0001},                 /* 0.75 ulp */
        {0x3p-25f, 0x0002},                 /* 1.5 ulp ties to even = 2 */
        {0x5p-25f, 0x0002},                 /* 2.5 ulp ties to even = 2 */
        {0x3FFp-24f, 0x03FF},               /* largest subnormal */
        {0x7FFp-25f, 0x0400},               /* tie between it and 2^-14 */
        {0x1p-14f, 0x0400},                 /* smallest normal */
        {1.0f + 0x1p-11f, 0x3C00},          /* tie, even below */
        {1.0f + 0x3p-11f, 0x3C02},          /* tie, even above */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1e-40f, 0x0000},                   /* f32 subnormals vanish */
        {-1e-40f, 0x8000},
        {INFINITY, 0x7C00},
        {-INFINITY, 0xFC00},
        {-2.0f, 0xC000},
        {0.1f, 0x2E66},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(amp_f32_to_f16(cases[i].in) == cases[i].out, "%a -> 0x%04x, want 0x%04x", cases[i].in,
                  amp_f32_to_f16(cases[i].in), cases[i].out);
    /* NaNs: quiet, sign and the top payload bits kept */
    static const uint32_t nan_in[] = {0x7F800001, 0x7F802000, 0x7FC00000, 0xFFFFFFFF, 0x7FBFFFFF};
    static const uint16_t nan_out[] = {0x7E00, 0x7E01, 0x7E00, 0xFFFF, 0x7FFF};
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(amp_f32_to_f16(bitsf(nan_in[i])), nan_out[i]);
    CHECK(amp_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(amp_f16_to_f32(0x03FF) == 0x3FFp-24f);
    CHECK(amp_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(fbits(amp_f16_to_f32(0x8000)) == 0x80000000u);
    CHECK(amp_f16_to_f32(0xFC00) == -INFINITY);
    CHECK_EQ_INT(fbits(amp_f16_to_f32(0x7C01)), 0x7FC02000); /* signalling NaN made quiet */
}

static void test_bf16_ieee_corner_values(void)
{
    static const struct { uint32_t in; uint16_t out; } cases[] = {
        {0x7F7F0000, 0x7F7F}, /* largest finite bf16, 3.3895314e38 */
        {0x7F7F7FFF, 0x7F7F}, /* just under halfway to inf */
        {0x7F7F8000, 0x7F80}, /* halfway, odd below: ties to even = inf */
        {0x7F7FFFFF, 0x7F80}, /* FLT_MAX overflows */
        {0xFF7FFFFF, 0xFF80},
        {0x3F808000, 0x3F80}, /* 1 + 2^-8: tie, even below */
        {0x3F818000, 0x3F82}, /* tie, even above */
        {0x3F808001, 0x3F81},
        {0x00000000, 0x0000},
        {0x80000000, 0x8000},
        {0x7F800000, 0x7F80},
        {0xFF800000, 0xFF80},
        {0x00010000, 0x0001}, /* smallest bf16 subnormal, exact */
        {0x00008000, 0x0000}, /* half of it: ties to even = 0 */
        {0x00008001, 0x0001},
        {0x00018000, 0x0002}, /* 1.5: ties to even = 2 */
        {0x007FFFFF, 0x0080}, /* largest f32 subnormal rounds up to 2^-126 */
        {0x807F0000, 0x807F}, /* largest negative bf16 subnormal, exact */
        {0x80000001, 0x8000},
        {0x7F800001, 0x7FC0}, /* signalling NaN made quiet */
        {0xFFBFFFFF, 0xFFFF}, /* payload top kept, sign kept */
        {0x7FC00000, 0x7FC0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(amp_f32_to_bf16(bitsf(cases[i].in)) == cases[i].out, "0x%08x -> 0x%04x, want 0x%04x",
                  cases[i].in, amp_f32_to_bf16(bitsf(cases[i].in)), cases[i].out);
    CHECK((double)amp_bf16_to_f32(0x7F7F) == ldexp(255, 120));
    CHECK_NEAR(amp_bf16_to_f32(0x7F7F), 3.3895314e38, 1e31);
    CHECK((double)amp_bf16_to_f32(0x0001) == ldexp(1, -133));
    CHECK((double)amp_bf16_to_f32(0x0080) == ldexp(1, -126));
    CHECK(amp_bf16_to_f32(0xFF80) == -INFINITY);
}

/* --------------------------------------------------------- amp_convert */

static const amp_dtype all_dtypes[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_I32, AMP_I64};

/* Saturating truncation toward zero, NaN -> 0 (ampc's rule; C leaves
 * these cases undefined). */
static int64_t trunc_sat(double v, amp_dtype dt)
{
    double lim = dt == AMP_I32 ? 2147483648.0 : 9223372036854775808.0;
    if (isnan(v))
        return 0;
    if (v >= lim)
        return dt == AMP_I32 ? INT32_MAX : INT64_MAX;
    if (v <= -lim)
        return dt == AMP_I32 ? INT32_MIN : INT64_MIN;
    return (int64_t)trunc(v);
}

/* One element of a buffer of dtype dt, as the bits / value it holds. */
typedef union { float f; uint16_t h; int32_t i32; int64_t i64; } elem;

static elem expected(const void *src, amp_dtype s, size_t i, amp_dtype d)
{
    elem r = {0};
    if (s == d) {
        memcpy(&r, (const char *)src + i * amp_dtype_size(s), amp_dtype_size(s));
        return r;
    }
    bool sint = s == AMP_I32 || s == AMP_I64;
    int64_t iv = sint ? load_i64(src, s, i) : 0;
    /* Integers reach a float dtype through float (one C rounding), as
     * PyTorch's .to() does; floats widen exactly. */
    float f = sint ? (s == AMP_I32 ? (float)(int32_t)iv : (float)iv) : load_f32(src, s, i);
    switch (d) {
    case AMP_F32: r.f = f; break;
    case AMP_F16: r.h = amp_f32_to_f16(f); break;
    case AMP_BF16: r.h = amp_f32_to_bf16(f); break;
    case AMP_I32: r.i32 = sint ? (int32_t)(uint32_t)(uint64_t)iv : (int32_t)trunc_sat(f, AMP_I32); break;
    case AMP_I64: r.i64 = sint ? iv : trunc_sat(f, AMP_I64); break;
    default: break;
    }
    return r;
}

static void fill_from(void *dst, amp_dtype dt, const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case AMP_F32: ((float *)dst)[i] = (float)v[i]; break;
        case AMP_F16: ((uint16_t *)dst)[i] = amp_f32_to_f16((float)v[i]); break;
        case AMP_BF16: ((uint16_t *)dst)[i] = amp_f32_to_bf16((float)v[i]); break;
        case AMP_I32: ((int32_t *)dst)[i] = (int32_t)trunc_sat(v[i], AMP_I32); break;
        case AMP_I64: ((int64_t *)dst)[i] = trunc_sat(v[i], AMP_I64); break;
        default: break;
        }
    }
}

static void test_convert_between_every_pair_of_dtypes(void)
{
    /* |i64| stays <= 2^53 apart from the ends, where one and two roundings
     * agree (convert.c goes through double). */
    static const double vals[] = {0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 2.9, -2.9, 0.1, 1e-6, 1e-40, 65504,
                                  65519, 65520, 1e5, -1e5, 16777217, 2147483520, 2147483647.0, -2147483648.0,
                                  3e9, -3e9, 0x1p40 + 0x1p16, 0x1p53, 1e19, -1e19, 3e38, 9.9e37, INFINITY,
                                  -INFINITY, NAN, -NAN, 257, 259, 2049, 2051, 4097};
    enum { N = sizeof vals / sizeof vals[0] };
    for (int a = 0; a < 5; a++) {
        for (int b = 0; b < 5; b++) {
            amp_dtype s = all_dtypes[a], d = all_dtypes[b];
            int64_t src[N], dst[N + 1]; /* 8-byte slots hold any dtype */
            fill_from(src, s, vals, N);
            memset(dst, 0xA5, sizeof dst);
            amp_convert(src, s, dst, d, N);
            size_t es = amp_dtype_size(d);
            for (size_t i = 0; i < N; i++) {
                elem want = expected(src, s, i, d);
                CHECK_MSG(memcmp((char *)dst + i * es, &want, es) == 0, "%s -> %s, element %zu (%.9g)",
                          amp_dtype_name(s), amp_dtype_name(d), i, vals[i]);
            }
            const unsigned char *tail = (const unsigned char *)dst + N * es;
            CHECK_MSG(tail[0] == 0xA5 && tail[es - 1] == 0xA5, "%s -> %s wrote past n", amp_dtype_name(s),
                      amp_dtype_name(d));
            amp_convert(src, s, dst, d, 0); /* n == 0 touches nothing */
            CHECK(tail[0] == 0xA5);
        }
    }
}

static void test_float_to_int_truncates_saturates_and_zeroes_nan(void)
{
    static const float in[] = {2.9f, -2.9f, 0.5f, -0.99f, NAN, -NAN, INFINITY, -INFINITY, 3e9f, -3e9f,
                               2147483520.0f, -2147483648.0f, 2147483648.0f, 1e19f, -1e19f, 0x1.fffffep62f};
    static const int32_t want32[] = {2, -2, 0, 0, 0, 0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN,
                                     2147483520, INT32_MIN, INT32_MAX, INT32_MAX, INT32_MIN, INT32_MAX};
    static const int64_t want64[] = {2, -2, 0, 0, 0, 0, INT64_MAX, INT64_MIN, 3000000000LL, -3000000000LL,
                                     2147483520, -2147483648LL, 2147483648LL, INT64_MAX, INT64_MIN,
                                     9223371487098961920LL};
    enum { N = sizeof in / sizeof in[0] };
    int32_t o32[N];
    int64_t o64[N];
    amp_convert(in, AMP_F32, o32, AMP_I32, N);
    amp_convert(in, AMP_F32, o64, AMP_I64, N);
    for (int i = 0; i < N; i++) {
        CHECK_MSG(o32[i] == want32[i], "f32 %a -> i32 %d, want %d", in[i], o32[i], want32[i]);
        CHECK_MSG(o64[i] == want64[i], "f32 %a -> i64 %lld, want %lld", in[i], (long long)o64[i],
                  (long long)want64[i]);
    }
    /* the same through the 16-bit types */
    uint16_t h[4] = {0x7BFF, 0xC100, 0x7C00, 0x7E00}; /* 65504, -2.5, inf, NaN */
    int32_t w[4];
    amp_convert(h, AMP_F16, w, AMP_I32, 4);
    CHECK(w[0] == 65504 && w[1] == -2 && w[2] == INT32_MAX && w[3] == 0);
    uint16_t b[3] = {0x7F7F, 0xFF7F, 0xBFC0}; /* +-3.39e38, -1.5 */
    int64_t w64[3];
    amp_convert(b, AMP_BF16, w64, AMP_I64, 3);
    CHECK(w64[0] == INT64_MAX && w64[1] == INT64_MIN && w64[2] == -1);
}

static void test_int_to_float_rounds_like_pytorch(void)
{
    /* i64 -> f32 rounds once (through double it would round twice). */
    int64_t i64big = ((int64_t)1 << 60) + ((int64_t)1 << 36) + 1;
    float fb;
    amp_convert(&i64big, AMP_I64, &fb, AMP_F32, 1);
    CHECK(fb == 0x1p60f + 0x1p37f);
    /* PyTorch 2.x: torch.tensor([...], dtype=int32).to(half / bfloat16) */
    static const int32_t in[] = {2049, 2051, 65519, 65520, -65536, 16777217, 16842753, 259, INT32_MIN};
    static const uint16_t f16[] = {0x6800, 0x6802, 0x7BFF, 0x7C00, 0xFC00, 0x7C00, 0x7C00, 0x5C0C, 0xFC00};
    /* 16842753 = 2^24 + 2^16 + 1 goes int -> float -> bf16 in PyTorch:
     * 2^24 + 2^16 is then a tie that goes to 2^24 */
    static const uint16_t bf16[] = {0x4500, 0x4500, 0x4780, 0x4780, 0xC780, 0x4B80, 0x4B80, 0x4382, 0xCF00};
    uint16_t h[9], b[9];
    amp_convert(in, AMP_I32, h, AMP_F16, 9);
    amp_convert(in, AMP_I32, b, AMP_BF16, 9);
    for (int i = 0; i < 9; i++) {
        CHECK_MSG(h[i] == f16[i], "i32 %d -> f16 0x%04x, want 0x%04x", in[i], h[i], f16[i]);
        CHECK_MSG(b[i] == bf16[i], "i32 %d -> bf16 0x%04x, want 0x%04x", in[i], b[i], bf16[i]);
    }
    int64_t big[3] = {(int64_t)1 << 53, -((int64_t)1 << 62), INT64_MAX};
    float f[3];
    amp_convert(big, AMP_I64, f, AMP_F32, 3);
    CHECK(f[0] == 0x1p53f && f[1] == -0x1p62f && f[2] == 0x1p63f);
    int64_t wide[3] = {((int64_t)1 << 32) + 5, -1, (int64_t)1 << 31};
    int32_t narrow[3];
    amp_convert(wide, AMP_I64, narrow, AMP_I32, 3); /* wraps, as PyTorch */
    CHECK(narrow[0] == 5 && narrow[1] == -1 && narrow[2] == INT32_MIN);
}

static void test_f16_bf16_go_through_f32_with_one_rounding(void)
{
    uint16_t h[4] = {0x3C01, 0x7BFF, 0x0001, 0x7C01}; /* 1+2^-10, 65504, 2^-24, sNaN */
    uint16_t b[4];
    amp_convert(h, AMP_F16, b, AMP_BF16, 4);
    CHECK_EQ_INT(b[0], 0x3F80); /* 1 + 2^-10 is below bf16's half ulp */
    CHECK_EQ_INT(b[1], 0x4780); /* 65504 rounds up to 65536 */
    CHECK_EQ_INT(b[2], 0x3380); /* 2^-24 is normal in bf16 */
    CHECK_EQ_INT(b[3], 0x7FC0);
    uint16_t b2[4] = {0x4780, 0x3F81, 0x3380, 0x7F81}; /* 65536, 1+2^-7, 2^-24, sNaN */
    amp_convert(b2, AMP_BF16, h, AMP_F16, 4);
    CHECK_EQ_INT(h[0], 0x7C00);
    CHECK_EQ_INT(h[1], 0x3C08);
    CHECK_EQ_INT(h[2], 0x0001);
    CHECK_EQ_INT(h[3], 0x7E08); /* quiet, payload bit 16 of f32 kept */
}

/* --------------------------------------------------------- vector paths */

typedef struct {
    const char *name;
    unsigned mask;
} cpu_path;

static const cpu_path paths[] = {
    {"F16C", AMP_CPU_F16C},
    {"AVX2", AMP_CPU_AVX2},
    {"AVX-512F", AMP_CPU_AVX512F},
    {"AVX512-BF16", AMP_CPU_AVX512F | AMP_CPU_AVX512BF16},
    {"all", ~0u},
};
enum { NPATHS = sizeof paths / sizeof paths[0] };

/* The four converters as amp_cpu_limit(mask) makes the pickers choose. */
typedef struct {
    cvt_narrow_fn to16, tobf;
    cvt_widen_fn from16, frombf;
} cvt_set;

static cvt_set pick(unsigned mask)
{
    amp_cpu_limit(mask);
    cvt_set s = {cvt_pick_f32_to_f16(), cvt_pick_f32_to_bf16(), cvt_pick_f16_to_f32(), cvt_pick_bf16_to_f32()};
    amp_cpu_limit(~0u);
    return s;
}

static bool has_features(unsigned mask)
{
    amp_cpu_limit(~0u);
    return mask == ~0u || (amp_cpu_features() & mask) == mask;
}

static void test_pickers_honour_the_cpu_mask(void)
{
    cvt_set s = pick(0);
    CHECK(s.to16 == cvt_f32_to_f16_scalar && s.tobf == cvt_f32_to_bf16_scalar);
    CHECK(s.from16 == cvt_f16_to_f32_scalar && s.frombf == cvt_bf16_to_f32_scalar);
    if (has_features(AMP_CPU_F16C)) {
        s = pick(AMP_CPU_F16C);
        CHECK(s.to16 != cvt_f32_to_f16_scalar && s.from16 != cvt_f16_to_f32_scalar);
        CHECK(s.tobf == cvt_f32_to_bf16_scalar); /* F16C has no bf16 */
    }
    if (has_features(AMP_CPU_AVX512F)) {
        s = pick(AMP_CPU_AVX512F);
        CHECK(s.tobf != cvt_f32_to_bf16_scalar && s.frombf != cvt_bf16_to_f32_scalar);
        CHECK(s.to16 != pick(AMP_CPU_F16C).to16);
    }
    if (has_features(AMP_CPU_AVX512F | AMP_CPU_AVX512BF16))
        CHECK(pick(AMP_CPU_AVX512F | AMP_CPU_AVX512BF16).tobf != pick(AMP_CPU_AVX512F).tobf);
    unsigned f = amp_cpu_features();
    printf("  cpu features: %s%s%s%s%s\n", f & AMP_CPU_F16C ? "f16c " : "", f & AMP_CPU_AVX2 ? "avx2 " : "",
           f & AMP_CPU_AVX512F ? "avx512f " : "", f & AMP_CPU_AVX512BW ? "avx512bw " : "",
           f & AMP_CPU_AVX512BF16 ? "avx512bf16" : "");
}

/* Random f32 patterns biased towards the places rounding can go wrong:
 * raw bits (NaN, inf, subnormals included), f16's range, and ties of both
 * formats. */
static uint32_t tricky_f32(uint64_t *seed)
{
    uint64_t r = splitmix(seed);
    uint32_t x = (uint32_t)r;
    switch ((r >> 32) & 7) {
    case 0: case 1: return x;
    case 2: return (x & 0x807FFFFFu) | ((uint32_t)(95 + (r >> 40) % 50) << 23); /* f16 range, subnormals */
    case 3: return (x & 0xFFFF0000u) | 0x8000u;                                 /* bf16 tie */
    case 4: return (x & 0xFFFFE000u) | 0x1000u;                                 /* f16 tie (normal) */
    case 5: return (x & 0x80FFFFFFu) | ((r >> 40) & 1 ? 0x7F000000u : 0u);      /* near inf / zero */
    case 6: return (x & 0x807FFFFFu) | (r >> 40 & 1 ? 0x7F800000u : 0u);        /* NaN / subnormal */
    default: return (x & 0x8003FFFFu) | ((uint32_t)(0x38000000u + ((r >> 40) & 0x1Fu) * 0x00800000u)) /* near 2^-15 */;
    }
}

enum { RANDOM_N = 1 << 20 };

static void test_every_vector_path_matches_scalar(void)
{
    float *f = malloc(RANDOM_N * sizeof(float)), *fa = malloc(RANDOM_N * sizeof(float)),
          *fb = malloc(RANDOM_N * sizeof(float));
    uint16_t *ha = malloc(RANDOM_N * 2), *hb = malloc(RANDOM_N * 2), *h = malloc(RANDOM_N * 2);
    if (!f || !fa || !fb || !ha || !hb || !h) {
        CHECK_MSG(0, "out of memory");
        goto out;
    }
    uint64_t seed = 2024;
    for (size_t i = 0; i < RANDOM_N; i++) {
        uint32_t x = tricky_f32(&seed);
        memcpy(&f[i], &x, 4);
        h[i] = (uint16_t)(i < 65536 ? i : splitmix(&seed)); /* every 16-bit pattern, then random */
    }
    for (int p = 0; p < NPATHS; p++) {
        if (!has_features(paths[p].mask)) {
            printf("  (%s: not on this CPU, skipped)\n", paths[p].name);
            continue;
        }
        cvt_set s = pick(paths[p].mask);
        struct { const char *what; int bad; } r[4] = {{"f32->f16", 0}, {"f32->bf16", 0}, {"f16->f32", 0}, {"bf16->f32", 0}};
        /* two passes of each: the patterns, then shifted by 7 so every
         * pattern also takes the scalar tail of some vector */
        for (size_t off = 0; off < 14; off += 7) {
            size_t n = RANDOM_N - off;
            cvt_f32_to_f16_scalar(f + off, ha, n), s.to16(f + off, hb, n);
            r[0].bad += memcmp(ha, hb, n * 2) != 0;
            cvt_f32_to_bf16_scalar(f + off, ha, n), s.tobf(f + off, hb, n);
            r[1].bad += memcmp(ha, hb, n * 2) != 0;
            cvt_f16_to_f32_scalar(h + off, fa, n), s.from16(h + off, fb, n);
            r[2].bad += memcmp(fa, fb, n * 4) != 0;
            cvt_bf16_to_f32_scalar(h + off, fa, n), s.frombf(h + off, fb, n);
            r[3].bad += memcmp(fa, fb, n * 4) != 0;
        }
        for (int k = 0; k < 4; k++)
            CHECK_MSG(r[k].bad == 0, "%s path %s differs from the scalar reference", paths[p].name, r[k].what);
        /* amp_convert takes the same path */
        amp_cpu_limit(paths[p].mask);
        amp_convert(f, AMP_F32, ha, AMP_F16, RANDOM_N);
        amp_cpu_limit(~0u);
        cvt_f32_to_f16_scalar(f, hb, RANDOM_N);
        CHECK_MSG(memcmp(ha, hb, RANDOM_N * 2) == 0, "amp_convert f32->f16 under %s", paths[p].name);
    }
out:
    free(f), free(fa), free(fb), free(ha), free(hb), free(h);
}

static void test_odd_lengths_and_unaligned_pointers(void)
{
    static const size_t lens[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 1023};
    enum { CAP = 1100, GUARD = 40 };
    float src[CAP], fo[CAP + 2 * GUARD], fr[CAP];
    uint16_t hsrc[CAP], ho[CAP + 2 * GUARD], hr[CAP];
    uint64_t seed = 7;
    for (size_t i = 0; i < CAP; i++) {
        uint32_t x = tricky_f32(&seed);
        memcpy(&src[i], &x, 4);
        hsrc[i] = (uint16_t)splitmix(&seed);
    }
    for (int p = 0; p < NPATHS; p++) {
        if (!has_features(paths[p].mask))
            continue;
        cvt_set s = pick(paths[p].mask);
        cvt_narrow_fn nf[2] = {s.to16, s.tobf}, nr[2] = {cvt_f32_to_f16_scalar, cvt_f32_to_bf16_scalar};
        cvt_widen_fn wf[2] = {s.from16, s.frombf}, wr[2] = {cvt_f16_to_f32_scalar, cvt_bf16_to_f32_scalar};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            for (size_t so = 0; so < 4; so += 3) {     /* source offset 0 or 3 elements */
                for (size_t d = 1; d < GUARD; d += 18) { /* dst offset 1, 19, ... */
                    size_t n = lens[li];
                    for (int k = 0; k < 2; k++) {
                        memset(ho, 0xAB, sizeof ho);
                        nf[k](src + so, ho + GUARD + d, n);
                        nr[k](src + so, hr, n);
                        bool ok = memcmp(ho + GUARD + d, hr, n * 2) == 0;
                        for (size_t g = 0; g < GUARD + d; g++)
                            ok &= ho[g] == 0xABAB;
                        for (size_t g = GUARD + d + n; g < CAP + 2 * GUARD; g++)
                            ok &= ho[g] == 0xABAB;
                        CHECK_MSG(ok, "%s narrow %d, n %zu, src +%zu, dst +%zu", paths[p].name, k, n, so, d);
                        memset(fo, 0xAB, sizeof fo);
                        wf[k](hsrc + so, fo + GUARD + d, n);
                        wr[k](hsrc + so, fr, n);
                        ok = memcmp(fo + GUARD + d, fr, n * 4) == 0;
                        for (size_t g = 0; g < GUARD + d; g++)
                            ok &= fbits(fo[g]) == 0xABABABABu;
                        for (size_t g = GUARD + d + n; g < CAP + 2 * GUARD; g++)
                            ok &= fbits(fo[g]) == 0xABABABABu;
                        CHECK_MSG(ok, "%s widen %d, n %zu, src +%zu, dst +%zu", paths[p].name, k, n, so, d);
                    }
                }
            }
        }
    }
}

/* Programs often set flush-to-zero / denormals-are-zero for speed, or
 * another rounding mode: no path may read MXCSR. */
static void test_paths_ignore_ftz_daz_and_rounding_mode(void)
{
#if defined(__x86_64__)
    enum { N = 1 << 17 };
    float *f = malloc(N * sizeof(float)), *fa = malloc(N * sizeof(float)), *fb = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * 2), *ha = malloc(N * 2), *hb = malloc(N * 2);
    if (!f || !fa || !fb || !h || !ha || !hb) {
        CHECK_MSG(0, "out of memory");
    } else {
        uint64_t seed = 99;
        for (uint32_t i = 0; i < N; i++) {
            uint32_t x = i < 65536 ? i << 16 | i : tricky_f32(&seed); /* all f32 subnormal exponents too */
            memcpy(&f[i], &x, 4);
            h[i] = (uint16_t)i;
        }
        /* the reference, computed under the default MXCSR */
        uint16_t *r16 = malloc(N * 2), *rbf = malloc(N * 2);
        float *w16 = malloc(N * sizeof(float)), *wbf = malloc(N * sizeof(float));
        if (r16 && rbf && w16 && wbf) {
            cvt_f32_to_f16_scalar(f, r16, N), cvt_f32_to_bf16_scalar(f, rbf, N);
            cvt_f16_to_f32_scalar(h, w16, N), cvt_bf16_to_f32_scalar(h, wbf, N);
            unsigned saved = _mm_getcsr();
            static const unsigned modes[] = {0x8040 | 0x6000, 0x8040 | 0x2000, 0x0040 | 0x4000};
            for (int m = 0; m < 3; m++) {
                for (int p = -1; p < NPATHS; p++) {
                    if (p >= 0 && !has_features(paths[p].mask))
                        continue;
                    cvt_set s = p < 0 ? pick(0) : pick(paths[p].mask);
                    _mm_setcsr((saved & ~0xE040u) | modes[m]); /* FTZ/DAZ and a rounding mode */
                    s.to16(f, ha, N), s.tobf(f, hb, N);
                    s.from16(h, fa, N), s.frombf(h, fb, N);
                    _mm_setcsr(saved);
                    const char *name = p < 0 ? "scalar" : paths[p].name;
                    CHECK_MSG(memcmp(ha, r16, N * 2) == 0, "%s f32->f16 under MXCSR 0x%x", name, modes[m]);
                    CHECK_MSG(memcmp(hb, rbf, N * 2) == 0, "%s f32->bf16 under MXCSR 0x%x", name, modes[m]);
                    CHECK_MSG(memcmp(fa, w16, N * 4) == 0, "%s f16->f32 under MXCSR 0x%x", name, modes[m]);
                    CHECK_MSG(memcmp(fb, wbf, N * 4) == 0, "%s bf16->f32 under MXCSR 0x%x", name, modes[m]);
                }
            }
        } else {
            CHECK_MSG(0, "out of memory");
        }
        free(r16), free(rbf), free(w16), free(wbf);
    }
    free(f), free(fa), free(fb), free(h), free(ha), free(hb);
#else
    harness_skip("MXCSR is x86's");
#endif
}

int main(void)
{
    RUN(test_every_f16_pattern_widens_exactly_and_narrows_back);
    RUN(test_every_bf16_pattern_widens_exactly_and_narrows_back);
    RUN(test_f16_ieee_corner_values);
    RUN(test_bf16_ieee_corner_values);
    RUN(test_convert_between_every_pair_of_dtypes);
    RUN(test_float_to_int_truncates_saturates_and_zeroes_nan);
    RUN(test_int_to_float_rounds_like_pytorch);
    RUN(test_f16_bf16_go_through_f32_with_one_rounding);
    RUN(test_pickers_honour_the_cpu_mask);
    RUN(test_every_vector_path_matches_scalar);
    RUN(test_odd_lengths_and_unaligned_pointers);
    RUN(test_paths_ignore_ftz_daz_and_rounding_mode);
    return harness_done();
}
