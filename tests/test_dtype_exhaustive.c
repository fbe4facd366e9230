/*
 * test_dtype_exhaustive.c - all 2^32 f32 bit patterns through f32 -> f16
 * and f32 -> bf16: every vector path this CPU has gives the scalar
 * reference's bits, and so does the raw hardware instruction (F16C
 * VCVTPS2PH, AVX512-BF16 VCVTNEPS2BF16) apart from documented differences,
 * which are asserted exactly rather than ignored.
 *
 * The patterns go in chunks spread over OpenMP threads. Under a sanitizer,
 * in an unoptimised build, or with AMPC_TEST_QUICK=1 it checks every
 * 4099th pattern plus a set of special ones (every exponent with mantissas
 * at both formats' rounding points), and says so.
 */
#include "harness.h"
#include "dtype/dtype.h"

#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif


/* OpenMP pragmas that vanish (without unknown-pragma warnings) in a build
 * without OpenMP; the parallel block then runs once, serially. */
#ifdef _OPENMP
#define OMP(x) _Pragma(#x)
#else
#define OMP(x)
#endif

/* CHUNK patterns per task: small enough that a task's buffers stay in L1,
 * and a power of two below 2^23, so a chunk of the full sweep has one sign
 * and exponent. */
enum { CHUNK = 1 << 12, STRIDE = 4099, MAXPATHS = 4 };

typedef void (*narrow_fn)(const float *src, uint16_t *dst, size_t n);

/* ------------------------------------------------ raw hardware instructions */

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) static void hw_vcvtps2ph(const float *s, uint16_t *d, size_t n)
{
    for (size_t i = 0; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10)
#define HAVE_BF16_TARGET 1
__attribute__((target("avx512f,avx512bf16"))) static void hw_vcvtneps2bf16(const float *s, uint16_t *d, size_t n)
{
    for (size_t i = 0; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + i)));
}
#endif
#endif

/* -------------------------------------------------------------- classes */

enum { C_ZERO, C_SUBNORMAL, C_NORMAL, C_INF, C_NAN, NCLASS };
static const char *const class_names[NCLASS] = {"zero", "subnormal", "normal", "inf", "NaN"};

static int f32_class(uint32_t x)
{
    uint32_t e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
    if (e == 0)
        return m ? C_SUBNORMAL : C_ZERO;
    if (e == 0xFF)
        return m ? C_NAN : C_INF;
    return C_NORMAL;
}


/* --------------------------------------------------------------- driver */

typedef struct {
    const char *name;
    narrow_fn fn;
    uint64_t bad;      /* lanes that differ from what is expected */
    uint64_t by_class[NCLASS];
    uint32_t first;    /* lowest differing pattern */
    uint16_t got, want;
    uint64_t documented; /* hardware only: lanes that differ from the reference as documented */
} checked;

typedef struct {
    const char *what;
    narrow_fn ref;
    checked path[MAXPATHS];
    int npaths;
    checked hw;
    /* VCVTNEPS2BF16 treats subnormal inputs as zero whatever MXCSR says
     * (Intel SDM, convert_fp32_to_bfloat16): a signed zero where the
     * reference rounds. Everywhere else hardware must equal the reference. */
    bool hw_flushes_subnormals;
} conversion;

static void note_bad(checked *c, uint32_t x, uint16_t got, uint16_t want)
{
    c->bad++;
    c->by_class[f32_class(x)]++;
    if (c->bad == 1 || x < c->first) {
        c->first = x;
        c->got = got;
        c->want = want;
    }
}

static void merge(checked *into, const checked *from)
{
    if (from->bad && (!into->bad || from->first < into->first)) {
        into->first = from->first;
        into->got = from->got;
        into->want = from->want;
    }
    into->bad += from->bad;
    into->documented += from->documented;
    for (int k = 0; k < NCLASS; k++)
        into->by_class[k] += from->by_class[k];
}

/* Every exponent, both signs, mantissas at and around the rounding points
 * of f16 (bit 13, and the subnormal shifts) and bf16 (bit 16). */
static size_t special_patterns(uint32_t *out)
{
    uint32_t mant[200];
    size_t nm = 0;
    mant[nm++] = 0, mant[nm++] = 0x7FFFFF, mant[nm++] = 0x7FFFFE;
    for (int k = 1; k < 23; k++) {
        uint32_t p = 1u << k, top = 0x7FFFFFu & ~(p - 1);
        mant[nm++] = p - 1, mant[nm++] = p, mant[nm++] = p + 1;
        mant[nm++] = (p | p >> 1) - 1, mant[nm++] = p | p >> 1, mant[nm++] = (p | p >> 1) + 1;
        mant[nm++] = top, mant[nm++] = top - 1;
    }
    size_t n = 0;
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t e = 0; e < 256; e++)
            for (size_t i = 0; i < nm; i++)
                out[n++] = s << 31 | e << 23 | (mant[i] & 0x7FFFFFu);
    return n;
}

/* The bits of src[i]. */
static inline uint32_t bits_at(const float *src, size_t i)
{
    uint32_t x;
    memcpy(&x, &src[i], 4);
    return x;
}

/* Runs every path and the hardware over the n patterns in src (which hold
 * no subnormal if !may_be_subnormal). */
static void check_chunk(conversion *cv, checked *local, checked *hw_local, const float *src, size_t n,
                        bool may_be_subnormal, uint16_t *ref, uint16_t *out, uint16_t *want)
{
    cv->ref(src, ref, n);
    for (int p = 0; p < cv->npaths; p++) {
        cv->path[p].fn(src, out, n);
        if (memcmp(out, ref, n * 2) != 0)
            for (size_t i = 0; i < n; i++)
                if (out[i] != ref[i])
                    note_bad(&local[p], bits_at(src, i), out[i], ref[i]);
    }
    if (!cv->hw.fn)
        return;
    /* What the hardware should give: the reference, or a signed zero for
     * the subnormals of an instruction that flushes them. */
    uint32_t doc = 0;
    if (cv->hw_flushes_subnormals && may_be_subnormal) {
        for (size_t i = 0; i < n; i++) { /* branch-free, so it vectorises */
            uint32_t x = bits_at(src, i);
            uint32_t sub = ((x & 0x7F800000u) == 0) & ((x & 0x7FFFFFu) != 0);
            uint32_t w = sub ? (x >> 16) & 0x8000u : ref[i];
            doc += w != ref[i];
            want[i] = (uint16_t)w;
        }
    } else {
        memcpy(want, ref, n * 2);
    }
    size_t nv = n & ~(size_t)15; /* the hardware runs whole vectors only */
    cv->hw.fn(src, out, nv);
    memcpy(out + nv, want + nv, (n - nv) * 2);
    if (memcmp(out, want, n * 2) != 0)
        for (size_t i = 0; i < n; i++)
            if (out[i] != want[i])
                note_bad(hw_local, bits_at(src, i), out[i], want[i]);
    hw_local->documented += doc;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Checks conversion cv over all 2^32 patterns (list == NULL) or over the
 * nlist patterns of list, in chunks of CHUNK. */
static void run_conversion(conversion *cv, const uint32_t *list, size_t nlist)
{
    uint64_t nchunks = list ? (nlist + CHUNK - 1) / CHUNK : (1ull << 32) / CHUNK;
    int fail_alloc = 0;
    OMP(omp parallel num_threads(amp_get_num_threads()))
    {
        float *src = malloc(CHUNK * 4);
        uint16_t *ref = malloc(CHUNK * 2), *out = malloc(CHUNK * 2), *want = malloc(CHUNK * 2);
        checked local[MAXPATHS], hw_local;
        memset(local, 0, sizeof local);
        memset(&hw_local, 0, sizeof hw_local);
        if (!src || !ref || !out || !want) {
            OMP(omp atomic)
            fail_alloc++;
        } else {
            OMP(omp for schedule(dynamic, 16))
            for (int64_t c = 0; c < (int64_t)nchunks; c++) {
                size_t n = CHUNK;
                /* a chunk of the full sweep has one sign and exponent */
                bool may_be_subnormal = list || (((uint32_t)c * CHUNK) & 0x7F800000u) == 0;
                if (list) {
                    size_t at = (size_t)c * CHUNK;
                    n = at + CHUNK <= nlist ? CHUNK : nlist - at;
                    memcpy(src, list + at, n * 4);
                } else {
                    for (uint32_t i = 0; i < CHUNK; i++) {
                        uint32_t x = (uint32_t)c * CHUNK + i;
                        memcpy(&src[i], &x, 4);
                    }
                }
                check_chunk(cv, local, &hw_local, src, n, may_be_subnormal, ref, out, want);
            }
        }
        OMP(omp critical)
        {
            for (int k = 0; k < cv->npaths; k++)
                merge(&cv->path[k], &local[k]);
            merge(&cv->hw, &hw_local);
        }
        free(src), free(ref), free(out), free(want);
    }
    CHECK_MSG(fail_alloc == 0, "out of memory");
}

static void report(const char *what, const checked *c)
{
    if (!c->bad)
        return;
    char classes[200] = "";
    for (int k = 0; k < NCLASS; k++)
        if (c->by_class[k])
            snprintf(classes + strlen(classes), sizeof classes - strlen(classes), " %s:%llu", class_names[k],
                     (unsigned long long)c->by_class[k]);
    CHECK_MSG(0, "%s %s: %llu patterns differ (by input class:%s); first 0x%08x -> 0x%04x, want 0x%04x", what,
              c->name, (unsigned long long)c->bad, classes, c->first, c->got, c->want);
}

static bool quick_mode(void)
{
#ifdef SLOW_BUILD
    return true;
#else
    const char *q = getenv("AMPC_TEST_QUICK");
    return q && strcmp(q, "1") == 0;
#endif
}

static const struct {
    const char *name;
    unsigned mask;
} masks[] = {{"F16C", AMP_CPU_F16C}, {"AVX2", AMP_CPU_AVX2}, {"AVX-512F", AMP_CPU_AVX512F},
             {"AVX512-BF16", AMP_CPU_AVX512F | AMP_CPU_AVX512BF16}};

/* The distinct vector paths amp_cpu_limit can select for one conversion. */
static void collect_paths(conversion *cv, cvt_narrow_fn (*picker)(void))
{
    amp_cpu_limit(~0u);
    unsigned have = amp_cpu_features();
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        if ((have & masks[m].mask) != masks[m].mask)
            continue;
        amp_cpu_limit(masks[m].mask);
        cvt_narrow_fn fn = picker();
        amp_cpu_limit(~0u);
        bool seen = fn == cv->ref;
        for (int p = 0; p < cv->npaths; p++)
            seen |= cv->path[p].fn == fn;
        if (!seen && cv->npaths < MAXPATHS)
            cv->path[cv->npaths++] = (checked){.name = masks[m].name, .fn = fn};
    }
}

static void exhaustive(conversion *cv, cvt_narrow_fn (*picker)(void))
{
    collect_paths(cv, picker);
    bool quick = quick_mode();
    uint32_t *list = NULL;
    size_t nlist = 0;
    if (quick) {
        list = malloc(((1ull << 32) / STRIDE + 1 + 2 * 256 * 200) * 4);
        if (!list) {
            CHECK_MSG(0, "out of memory");
            return;
        }
        for (uint64_t x = 0; x < (1ull << 32); x += STRIDE)
            list[nlist++] = (uint32_t)x;
        nlist += special_patterns(list + nlist);
    }
    double t0 = now();
    run_conversion(cv, list, nlist);
    double dt = now() - t0;
    uint64_t count = quick ? nlist : 1ull << 32;
    printf("  %s: %llu patterns%s, %d vector path(s)%s, hardware %s, %.2f s on %d thread(s)\n", cv->what,
           (unsigned long long)count, quick ? " (QUICK: every 4099th + specials, not all 2^32)" : " (all 2^32)",
           cv->npaths, cv->npaths ? "" : " (none on this CPU)", cv->hw.fn ? cv->hw.name : "not on this CPU", dt,
           amp_get_num_threads());
    for (int p = 0; p < cv->npaths; p++)
        printf("    path %-12s == scalar reference: %s\n", cv->path[p].name, cv->path[p].bad ? "NO" : "yes");
    for (int p = 0; p < cv->npaths; p++)
        report(cv->what, &cv->path[p]);
    report(cv->what, &cv->hw);
    if (cv->hw.fn && !cv->hw.bad && !cv->hw_flushes_subnormals)
        printf("    %s == scalar reference: yes, on every pattern\n", cv->hw.name);
    else if (cv->hw.fn && !cv->hw.bad)
        printf("    %s == scalar reference except on f32 subnormals, which it flushes to a signed zero "
               "(documented; %llu of them differ from the reference's rounding)\n",
               cv->hw.name, (unsigned long long)cv->hw.documented);
    free(list);
}

static void test_f32_to_f16_every_pattern(void)
{
    conversion cv = {.what = "f32->f16", .ref = cvt_f32_to_f16_scalar, .hw_flushes_subnormals = false};
#if defined(__x86_64__)
    amp_cpu_limit(~0u);
    if (amp_cpu_features() & AMP_CPU_F16C)
        cv.hw = (checked){.name = "VCVTPS2PH (F16C)", .fn = hw_vcvtps2ph};
#endif
    exhaustive(&cv, cvt_pick_f32_to_f16);
    if (cv.hw.fn)
        CHECK_EQ_INT(cv.hw.documented, 0); /* F16C agrees everywhere */
}

static void test_f32_to_bf16_every_pattern(void)
{
    conversion cv = {.what = "f32->bf16", .ref = cvt_f32_to_bf16_scalar, .hw_flushes_subnormals = true};
#if defined(HAVE_BF16_TARGET)
    amp_cpu_limit(~0u);
    if ((amp_cpu_features() & (AMP_CPU_AVX512F | AMP_CPU_AVX512BF16)) == (AMP_CPU_AVX512F | AMP_CPU_AVX512BF16))
        cv.hw = (checked){.name = "VCVTNEPS2BF16 (AVX512-BF16)", .fn = hw_vcvtneps2bf16};
#endif
    exhaustive(&cv, cvt_pick_f32_to_bf16);
    /* The reference rounds a subnormal to nonzero when its mantissa is over
     * half of bf16's smallest subnormal (0x8000): 0x7F7FFF mantissas per
     * sign, each flushed to zero by the instruction. */
    if (cv.hw.fn && !quick_mode())
        CHECK_EQ_INT(cv.hw.documented, 2 * (0x7FFFFF - 0x8000));
}

int main(void)
{
    RUN(test_f32_to_f16_every_pattern);
    RUN(test_f32_to_bf16_every_pattern);
    return harness_done();
}
