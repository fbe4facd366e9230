/*
 * pointwise.c (CPU) - the CPU backend's elementwise, reduction and layout
 * primitives: every pointwise formula over broadcast operands, gradient
 * accumulation, sums over a set of dims, argmax, permute and strided
 * slice copies.
 *
 * The map works in blocks that stay in L1: 16-bit operands are widened
 * block by block, each formula runs as its own loop over contiguous f32
 * runs (generated from backend/pointwise.h, so the compiler vectorises
 * it), and results are rounded once into the output's dtype. Sums
 * accumulate in double over fixed blocks, so results do not depend on the
 * number of threads. Every parallel loop is an amp_parallel_for
 * (base/parallel.h) over grains of a few thousand elements or more, or
 * runs on the caller alone where the work is small.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"
#include "base/base.h"
#include "base/parallel.h"
#include "dtype/dtype.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- the map */

/* A formula over n contiguous f32 values: out[j] = f(in[0][j], ...). */
typedef void (*pw_kernel)(float *out, const float *const *in, int64_t n, float s);

/* One loop per formula; operands it does not read are not touched (their
 * pointers may be NULL). */
#define PW_LOOP_1(name)                                                               \
    for (int64_t j = 0; j < n; j++)                                                   \
        o[j] = pw_##name(A[j], 0.0f, 0.0f, s);
#define PW_LOOP_2(name)                                                               \
    for (int64_t j = 0; j < n; j++)                                                   \
        o[j] = pw_##name(A[j], B[j], 0.0f, s);
#define PW_LOOP_3(name)                                                               \
    for (int64_t j = 0; j < n; j++)                                                   \
        o[j] = pw_##name(A[j], B[j], C[j], s);
#define PW_KERNEL(E, name, nin, expr)                                                 \
    static void k_##name(float *out, const float *const *in, int64_t n, float s)      \
    {                                                                                 \
        const float *restrict A = in[0];                                              \
        const float *restrict B = nin > 1 ? in[1] : NULL;                             \
        const float *restrict C = nin > 2 ? in[2] : NULL;                             \
        float *restrict o = out;                                                      \
        (void)B, (void)C, (void)s;                                                    \
        PW_LOOP_##nin(name)                                                           \
    }
AMP_PW_FORMULAS(PW_KERNEL)
#undef PW_KERNEL

/* GELU (tanh) is a transformer's costliest pointwise op; libm's expf and
 * tanhf keep the C loops scalar, so a vector version runs where the CPU
 * has one (simd.h). */
static void k_gelu_tanh_vec(float *out, const float *const *in, int64_t n, float s)
{
    simd_gelu_tanh_fn f = simd_pick_gelu_tanh();
    if (f)
        f(in[0], out, n);
    else
        k_gelu_tanh(out, in, n, s);
}

static void k_gelu_tanh_grad_vec(float *out, const float *const *in, int64_t n, float s)
{
    simd_gelu_tanh_grad_fn f = simd_pick_gelu_tanh_grad();
    if (f)
        f(in[0], in[1], out, n);
    else
        k_gelu_tanh_grad(out, in, n, s);
}

#define PW_COUNT_ONE(E, name, nin, expr) +1
_Static_assert((0 AMP_PW_FORMULAS(PW_COUNT_ONE)) == AMP_PW_COUNT, "pointwise.h: one formula per amp_pw_op");
#undef PW_COUNT_ONE

static const pw_kernel kernels[AMP_PW_COUNT] = {
#define PW_ENTRY(E, name, nin, expr) [AMP_PW_##E] = k_##name,
    AMP_PW_FORMULAS(PW_ENTRY)
#undef PW_ENTRY
};

static pw_kernel kernel_of(amp_pw_op op)
{
    if (op == AMP_PW_GELU_TANH)
        return k_gelu_tanh_vec;
    if (op == AMP_PW_GELU_TANH_GRAD)
        return k_gelu_tanh_grad_vec;
    return kernels[op];
}

/* Elements per block: the operands' blocks (5 x 4 KiB) stay in L1. */
#define EW_CHUNK 1024

/* relu and its gradient straight on f16 / bf16 bits: both only select
 * between an input and +0, so widening to f32 and rounding back (the
 * map's way, bit for bit the same result) is pure overhead. A NaN comes
 * out quieted, as that round trip leaves it. */
typedef struct {
    uint16_t inf, quiet; /* |bits| of inf; the quiet bit of a NaN */
} half_fmt;

static half_fmt half_of(amp_dtype dt) { return dt == AMP_BF16 ? (half_fmt){0x7F80, 0x0040} : (half_fmt){0x7C00, 0x0200}; }

/* Elements per grain of the 16-bit loops. */
#define HALF_BLOCK 16384

/* Grain of n elements in grains of g: the caller alone below `least`. */
static int64_t grain_of(int64_t n, int64_t g, int64_t least) { return n >= least ? g : (n > 1 ? n : 1); }

typedef struct {
    const uint16_t *x, *g; /* relu: x; its gradient: g and y (in x) */
    uint16_t *out;
    half_fmt f;
} half_ctx;

static void relu_half_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const half_ctx *c = vc;
    const uint16_t *restrict x = c->x;
    uint16_t *restrict y = c->out;
    const half_fmt f = c->f;
    for (int64_t j = lo; j < hi; j++) {
        uint16_t v = x[j], a = v & 0x7FFF;
        y[j] = a > f.inf ? (uint16_t)(v | f.quiet) : (v & 0x8000) ? 0 : v;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HALF_X86 1
#include <immintrin.h>
#define TGT_BW __attribute__((target("avx512f,avx512bw")))

/* The loops above, 32 elements a step (the same selections, as masks). */

/* The lanes of [j, hi) among the 32 from j. */
static inline __mmask32 lanes32(int64_t j, int64_t hi)
{
    return hi - j >= 32 ? (__mmask32)~0u : (__mmask32)((1u << (hi - j)) - 1u);
}

/* v with its NaNs quieted (*nan: which lanes are NaN). */
TGT_BW static inline __m512i quieted(__m512i v, half_fmt f, __mmask32 *nan)
{
    *nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16((short)f.inf));
    return _mm512_or_si512(v, _mm512_maskz_mov_epi16(*nan, _mm512_set1_epi16((short)f.quiet)));
}

TGT_BW static void relu_half_range_bw(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const half_ctx *c = vc;
    for (int64_t j = lo; j < hi; j += 32) {
        const __mmask32 m = lanes32(j, hi);
        __mmask32 nan;
        const __m512i v = quieted(_mm512_maskz_loadu_epi16(m, c->x + j), c->f, &nan);
        const __mmask32 neg = _mm512_cmplt_epi16_mask(v, _mm512_setzero_si512()); /* the sign bit set */
        /* NaN: quieted; else a negative (or -0) to +0; else itself */
        _mm512_mask_storeu_epi16(c->out + j, m, _mm512_maskz_mov_epi16(~neg | nan, v));
    }
}

TGT_BW static void relu_grad_half_range_bw(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const half_ctx *c = vc;
    const __m512i inf = _mm512_set1_epi16((short)c->f.inf);
    for (int64_t j = lo; j < hi; j += 32) {
        const __mmask32 m = lanes32(j, hi);
        const __m512i yv = _mm512_maskz_loadu_epi16(m, c->x + j);
        __mmask32 gnan;
        const __m512i gq = quieted(_mm512_maskz_loadu_epi16(m, c->g + j), c->f, &gnan);
        /* y > 0 and not NaN: as a signed 16-bit word in (0, inf] */
        const __mmask32 pos = _mm512_cmpgt_epi16_mask(yv, _mm512_setzero_si512()) & _mm512_cmple_epi16_mask(yv, inf);
        _mm512_mask_storeu_epi16(c->out + j, m, _mm512_maskz_mov_epi16(pos, gq));
    }
}
#define RELU_HALF_BW relu_half_range_bw
#define RELU_GRAD_HALF_BW relu_grad_half_range_bw
#else
#define RELU_HALF_BW NULL
#define RELU_GRAD_HALF_BW NULL
#endif

/* The 16-bit loops' range function: the AVX-512BW one where the CPU has
 * it, else the plain one (the tests run both, lowering amp_cpu_limit for
 * the plain one). */
static amp_range_fn half_range(amp_range_fn plain, amp_range_fn bw)
{
#if defined(HALF_X86)
    const unsigned need = AMP_CPU_AVX512F | AMP_CPU_AVX512BW;
    if ((amp_cpu_features() & need) == need)
        return bw;
#endif
    (void)bw;
    return plain;
}

static void relu_half(const uint16_t *x, uint16_t *y, int64_t n, half_fmt f)
{
    half_ctx c = {x, NULL, y, f};
    amp_parallel_for(n, grain_of(n, HALF_BLOCK, 4 * HALF_BLOCK), half_range(relu_half_range, RELU_HALF_BW), &c);
}

/* dx = g where y > 0 (not NaN), else +0. */
static void relu_grad_half_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const half_ctx *c = vc;
    const uint16_t *restrict g = c->g, *restrict y = c->x;
    uint16_t *restrict dx = c->out;
    const half_fmt f = c->f;
    for (int64_t j = lo; j < hi; j++) {
        uint16_t yv = y[j], ya = yv & 0x7FFF, gv = g[j];
        bool pos = !(yv & 0x8000) && ya != 0 && ya <= f.inf;
        uint16_t gq = (gv & 0x7FFF) > f.inf ? (uint16_t)(gv | f.quiet) : gv;
        dx[j] = pos ? gq : 0;
    }
}

static void relu_grad_half(const uint16_t *g, const uint16_t *y, uint16_t *dx, int64_t n, half_fmt f)
{
    half_ctx c = {y, g, dx, f};
    amp_parallel_for(n, grain_of(n, HALF_BLOCK, 4 * HALF_BLOCK), half_range(relu_grad_half_range, RELU_GRAD_HALF_BW),
                     &c);
}

/* Whether relu (or its gradient) can run on the 16-bit bits: every
 * operand contiguous, of the output's 16-bit dtype. */
static bool relu_on_bits(amp_pw_op op, amp_dtype odt, int nin, const amp_dtype *idt, const be_pw_plan *p)
{
    if ((op != AMP_PW_RELU && op != AMP_PW_RELU_GRAD) || (odt != AMP_F16 && odt != AMP_BF16) || p->nd != 1)
        return false;
    for (int k = 0; k < nin; k++)
        if (idt[k] != odt || p->st[k][0] != 1)
            return false;
    return true;
}

/* What the map's blocks share. */
typedef struct {
    pw_kernel fn;
    void *out;
    amp_dtype odt;
    int nin;
    const void *const *in;
    const amp_dtype *idt;
    const be_pw_plan *p;
    float s0;
    int64_t inner, per_row;
} map_ctx;

static void map_range(void *vc, int64_t lo, int64_t hi, int tid);

amp_status cpu_pointwise(amp_pw_op op, void *out, amp_dtype odt, int64_t numel, int nin, const void *const *in,
                         const amp_dtype *idt, const be_pw_plan *p, float s0)
{
    if ((unsigned)op >= AMP_PW_COUNT || nin != pw_arity(op) || p->nd < 1 || p->nd > BE_MAX_DIMS)
        return amp_set_error(AMP_ERR_ARG, "pointwise: formula %d with %d operands over %d dims", (int)op, nin, p->nd);
    if (numel == 0)
        return AMP_OK;
    if (relu_on_bits(op, odt, nin, idt, p)) {
        if (op == AMP_PW_RELU)
            relu_half(in[0], out, numel, half_of(odt));
        else
            relu_grad_half(in[0], in[1], out, numel, half_of(odt));
        return AMP_OK;
    }
    /* The innermost (merged) dim is walked in blocks; each operand's stride
     * along it is 1 (contiguous) or 0 (broadcast). */
    const int64_t inner = p->d[p->nd - 1];
    const int64_t per_row = (inner + EW_CHUNK - 1) / EW_CHUNK;
    const int64_t tasks = numel / inner * per_row;
    map_ctx c = {kernel_of(op), out, odt, nin, in, idt, p, s0, inner, per_row};
    /* Grains of 8 blocks (8192 elements at most). */
    amp_parallel_for(tasks, numel >= EW_PARALLEL_MIN ? 8 : tasks, map_range, &c);
    return AMP_OK;
}

/* Blocks [lo, hi) of the map (see cpu_pointwise). */
static void map_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const map_ctx *mc = vc;
    const pw_kernel fn = mc->fn;
    const be_pw_plan *p = mc->p;
    const int nin = mc->nin, last = p->nd - 1;
    const void *const *in = mc->in;
    const amp_dtype *idt = mc->idt, odt = mc->odt;
    const int64_t inner = mc->inner, per_row = mc->per_row;
    const float s0 = mc->s0;
    const size_t osz = amp_dtype_size(odt);
    char *obase = mc->out;
    const bool out_f32 = odt == AMP_F32;
    for (int64_t t = lo; t < hi; t++) {
        float buf[BE_PW_MAX_IN][EW_CHUNK], obuf[EW_CHUNK];
        const float *src[BE_PW_MAX_IN] = {0};
        int64_t row = t / per_row, c0 = (t % per_row) * EW_CHUNK;
        int64_t len = inner - c0 < EW_CHUNK ? inner - c0 : EW_CHUNK;
        int64_t off[BE_PW_MAX_IN] = {0};
        int64_t r = row;
        for (int i = last - 1; i >= 0; i--) {
            int64_t ix = r % p->d[i];
            r /= p->d[i];
            for (int k = 0; k < nin; k++)
                off[k] += ix * p->st[k][i];
        }
        for (int k = 0; k < nin; k++) {
            int64_t o = off[k] + c0 * p->st[k][last];
            if (p->st[k][last] == 0) {
                float v = load_f32(in[k], idt[k], (size_t)o);
                for (int64_t j = 0; j < len; j++)
                    buf[k][j] = v;
                src[k] = buf[k];
            } else if (idt[k] == AMP_F32) {
                src[k] = (const float *)in[k] + o;
            } else {
                amp_convert((const char *)in[k] + (size_t)o * amp_dtype_size(idt[k]), idt[k], buf[k], AMP_F32,
                            (size_t)len);
                src[k] = buf[k];
            }
        }
        int64_t oo = row * inner + c0;
        if (out_f32) {
            fn((float *)(void *)obase + oo, src, len, s0);
        } else {
            fn(obuf, src, len, s0);
            amp_convert(obuf, AMP_F32, obase + (size_t)oo * osz, odt, (size_t)len);
        }
    }
}

const float *cpu_as_f32(const void *p, amp_dtype dt, int64_t n, float **tmp)
{
    *tmp = NULL;
    if (dt == AMP_F32)
        return p;
    *tmp = amp_alloc((size_t)n * sizeof(float));
    if (*tmp)
        amp_convert(p, dt, *tmp, AMP_F32, (size_t)n);
    return *tmp;
}

/* Elements per task of a threaded conversion: big enough that the
 * threads' start-up is paid back, small enough to share the work. */
#define CONVERT_BLOCK 65536

/* A conversion or accumulation of src (sdt) into dst (ddt). */
typedef struct {
    const void *src;
    amp_dtype sdt;
    void *dst;
    amp_dtype ddt;
} copy_ctx;

static void convert_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const copy_ctx *c = vc;
    amp_convert((const char *)c->src + (size_t)lo * amp_dtype_size(c->sdt), c->sdt,
                (char *)c->dst + (size_t)lo * amp_dtype_size(c->ddt), c->ddt, (size_t)(hi - lo));
}

amp_status cpu_convert(const void *src, amp_dtype sdt, void *dst, amp_dtype ddt, int64_t n)
{
    copy_ctx c = {src, sdt, dst, ddt};
    amp_parallel_for(n, CONVERT_BLOCK, convert_range, &c);
    return AMP_OK;
}

static void accumulate_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const copy_ctx *c = vc;
    const amp_dtype ddt = c->ddt, sdt = c->sdt;
    if (ddt == AMP_F32 && sdt == AMP_F32) {
        float *restrict a = c->dst;
        const float *restrict b = c->src;
        for (int64_t i = lo; i < hi; i++)
            a[i] += b[i];
        return;
    }
    float a[EW_CHUNK], b[EW_CHUNK];
    const size_t ed = amp_dtype_size(ddt), es = amp_dtype_size(sdt);
    for (int64_t k = lo; k < hi; k += EW_CHUNK) {
        size_t len = (size_t)(hi - k < EW_CHUNK ? hi - k : EW_CHUNK);
        char *d = (char *)c->dst + (size_t)k * ed;
        amp_convert(d, ddt, a, AMP_F32, len);
        amp_convert((const char *)c->src + (size_t)k * es, sdt, b, AMP_F32, len);
        for (size_t i = 0; i < len; i++)
            a[i] += b[i];
        amp_convert(a, AMP_F32, d, ddt, len);
    }
}

/* dst += src in dst's dtype: f32 sums, one rounding (elementwise, so the
 * threads' shares do not change a bit). */
amp_status cpu_accumulate(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n)
{
    copy_ctx c = {src, sdt, dst, ddt};
    amp_parallel_for(n, grain_of(n, CONVERT_BLOCK, EW_PARALLEL_MIN), accumulate_range, &c);
    return AMP_OK;
}

/* ----------------------------------------------------------------- sums */

/* Blocks of a long sum: fixed, so the result does not depend on how many
 * threads summed them. */
#define SUM_BLOCK 16384
/* Columns per task when summing a [rows, cols] block over its rows. */
#define COL_BLOCK 512

/* Four double accumulators: exact enough for any f32 input length that
 * fits in memory (error ~ n * 2^-53 of the sum of magnitudes) and
 * independent chains the CPU can overlap. */
static double sum_run(const float *x, int64_t n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
    }
    for (; i < n; i++)
        s0 += x[i];
    return (s0 + s1) + (s2 + s3);
}

/* Sums of runs: run b is x[b * stride, + len) (the last one shorter when
 * stride == len and n runs out), into part[b]. */
typedef struct {
    const float *x;
    int64_t n, len;
    double *part;
} sum_ctx;

static void sum_block_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const sum_ctx *c = vc;
    for (int64_t b = lo; b < hi; b++) {
        int64_t o = b * c->len;
        c->part[b] = sum_run(c->x + o, c->n - o < c->len ? c->n - o : c->len);
    }
}

/* Column sums of a [rows, cols] block: columns [j0, j1) of each row
 * added into dst (zeroed), one COL_BLOCK per index. */
typedef struct {
    const float *x;
    int64_t rows, cols;
    double *dst;
} col_ctx;

static void col_block_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const col_ctx *c = vc;
    for (int64_t b = lo; b < hi; b++) {
        int64_t j0 = b * COL_BLOCK, j1 = j0 + COL_BLOCK < c->cols ? j0 + COL_BLOCK : c->cols;
        double *restrict d = c->dst;
        for (int64_t i = 0; i < c->rows; i++) {
            const float *restrict xr = c->x + i * c->cols;
            for (int64_t j = j0; j < j1; j++)
                d[j] += xr[j];
        }
    }
}

/* sum_run over fixed blocks in parallel. */
static double sum_long(const float *x, int64_t n)
{
    if (n < 4 * SUM_BLOCK)
        return sum_run(x, n);
    int64_t nb = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    double *part = malloc((size_t)nb * sizeof *part);
    if (!part)
        return sum_run(x, n);
    sum_ctx c = {x, n, SUM_BLOCK, part};
    amp_parallel_for(nb, 1, sum_block_range, &c);
    double s = 0;
    for (int64_t b = 0; b < nb; b++)
        s += part[b];
    free(part);
    return s;
}

/* x's shape with size-1 dims dropped and neighbouring dims that are all
 * summed or all kept merged (x is contiguous, so neighbours always merge):
 * what is left alternates kept and summed runs. */
typedef struct {
    int nd;
    int64_t d[BE_MAX_DIMS];
    bool red[BE_MAX_DIMS];
} sum_plan;

static void sum_plan_build(sum_plan *p, amp_shape s, unsigned mask)
{
    p->nd = 0;
    for (int i = 0; i < s.ndim; i++) {
        if (s.d[i] == 1)
            continue;
        bool r = (mask >> i) & 1u;
        if (p->nd > 0 && p->red[p->nd - 1] == r) {
            p->d[p->nd - 1] *= s.d[i];
        } else {
            p->d[p->nd] = s.d[i];
            p->red[p->nd] = r;
            p->nd++;
        }
    }
}

static int64_t numel_of(amp_shape s)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= s.d[i];
    return n;
}

/* dst[kept index] = sum of x over the masked dims; dst has dst_n entries. */
static void sum_dims(const float *x, amp_shape s, unsigned mask, double *dst, int64_t dst_n)
{
    for (int64_t j = 0; j < dst_n; j++)
        dst[j] = 0;
    int64_t numel = numel_of(s);
    if (numel == 0)
        return;
    sum_plan p;
    sum_plan_build(&p, s, mask);
    if (p.nd == 0) {
        dst[0] = x[0];
        return;
    }
    bool par = numel >= EW_PARALLEL_MIN;
    int nt = amp_threads();
    if (p.nd == 1) {
        if (p.red[0])
            dst[0] = sum_long(x, numel);
        else
            for (int64_t j = 0; j < numel; j++)
                dst[j] = x[j];
        return;
    }
    if (p.nd == 2 && p.red[1]) { /* [rows, R]: one sum per row */
        int64_t rows = p.d[0], len = p.d[1];
        if (rows < 4 * nt && par) {
            for (int64_t i = 0; i < rows; i++)
                dst[i] = sum_long(x + i * len, len);
            return;
        }
        sum_ctx c = {x, numel, len, dst};
        int64_t g = 8192 / len;
        amp_parallel_for(rows, par ? (g > 1 ? g : 1) : rows, sum_block_range, &c);
        return;
    }
    if (p.nd == 2) { /* [R, cols]: column sums, as for a bias gradient */
        int64_t rows = p.d[0], cols = p.d[1];
        int64_t nblk = (cols + COL_BLOCK - 1) / COL_BLOCK;
        col_ctx c = {x, rows, cols, dst};
        amp_parallel_for(nblk, par ? 1 : nblk, col_block_range, &c);
        return;
    }
    /* The general case: walk the rows of the innermost run, adding each row
     * (or its sum, when the innermost run is summed) into its output slot. */
    int last = p.nd - 1;
    int64_t len = p.d[last], ost[BE_MAX_DIMS], idx[BE_MAX_DIMS] = {0}, st = 1;
    for (int i = last; i >= 0; i--) {
        ost[i] = p.red[i] ? 0 : st;
        if (!p.red[i])
            st *= p.d[i];
    }
    int64_t rows = numel / len;
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = 0;
        for (int i = 0; i < last; i++)
            o += idx[i] * ost[i];
        const float *xr = x + r * len;
        if (p.red[last]) {
            dst[o] += sum_run(xr, len);
        } else {
            for (int64_t j = 0; j < len; j++)
                dst[o + j] += xr[j];
        }
        for (int i = last - 1; i >= 0; i--) {
            if (++idx[i] < p.d[i])
                break;
            idx[i] = 0;
        }
    }
}

amp_status cpu_reduce_sum(const void *x, amp_dtype xdt, amp_shape shape, unsigned mask, double scale, void *out,
                          amp_dtype odt, int64_t out_n)
{
    int64_t xn = numel_of(shape);
    double *acc = amp_alloc((size_t)out_n * sizeof(double));
    float *xtmp = NULL, *otmp = NULL;
    if (xdt != AMP_F32 && (xtmp = amp_alloc((size_t)xn * sizeof(float))))
        amp_convert(x, xdt, xtmp, AMP_F32, (size_t)xn);
    const float *xf = xdt == AMP_F32 ? (const float *)x : xtmp;
    float *of = odt == AMP_F32 ? (float *)out : (otmp = amp_alloc((size_t)out_n * sizeof(float)));
    amp_status st = AMP_OK;
    if (!acc || !xf || !of) {
        st = amp_set_error(AMP_ERR_MEMORY, "sum: out of memory for %lld elements", (long long)xn);
    } else {
        sum_dims(xf, shape, mask, acc, out_n);
        for (int64_t j = 0; j < out_n; j++)
            of[j] = (float)(acc[j] * scale);
        if (otmp)
            amp_convert(otmp, AMP_F32, out, odt, (size_t)out_n);
    }
    amp_free(acc);
    amp_free(xtmp);
    amp_free(otmp);
    return st;
}

/* --------------------------------------------------------------- argmax */

/* The first index of the largest value in each run of len values spaced
 * stride apart; a NaN counts as larger than anything (PyTorch's rule), so
 * the first NaN wins. */
static int64_t argmax_float(const float *x, int64_t len, int64_t stride)
{
    int64_t best = 0;
    float bv = x[0];
    for (int64_t k = 1; k < len && bv == bv; k++) {
        float v = x[k * stride];
        if (v > bv || v != v) {
            bv = v;
            best = k;
        }
    }
    return best;
}

static int64_t argmax_int(const void *x, amp_dtype dt, int64_t base, int64_t len, int64_t stride)
{
    int64_t best = 0, bv = load_i64(x, dt, (size_t)base);
    for (int64_t k = 1; k < len; k++) {
        int64_t v = load_i64(x, dt, (size_t)(base + k * stride));
        if (v > bv) {
            bv = v;
            best = k;
        }
    }
    return best;
}

typedef struct {
    const void *x;
    const float *xf; /* x as f32 for a float dtype, else NULL */
    amp_dtype dt;
    int64_t len, inner;
    int64_t *o;
} argmax_ctx;

static void argmax_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const argmax_ctx *c = vc;
    for (int64_t j = lo; j < hi; j++) {
        int64_t base = (j / c->inner) * c->len * c->inner + j % c->inner;
        c->o[j] = c->xf ? argmax_float(c->xf + base, c->len, c->inner) : argmax_int(c->x, c->dt, base, c->len, c->inner);
    }
}

amp_status cpu_argmax(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, int64_t *o)
{
    bool is_float = amp_dtype_is_float(dt);
    int64_t total = outer * len * inner;
    float *tmp = NULL;
    const float *xf = NULL;
    if (is_float && dt != AMP_F32) {
        if (!(tmp = amp_alloc((size_t)total * sizeof(float))))
            return amp_set_error(AMP_ERR_MEMORY, "argmax: out of memory");
        amp_convert(x, dt, tmp, AMP_F32, (size_t)total);
    }
    if (is_float)
        xf = tmp ? tmp : (const float *)x;
    int64_t m = outer * inner, g = len > 0 ? 8192 / len : m;
    argmax_ctx c = {x, is_float ? xf : NULL, dt, len, inner, o};
    amp_parallel_for(m, m * len >= EW_PARALLEL_MIN ? (g > 1 ? g : 1) : m, argmax_range, &c);
    amp_free(tmp);
    return AMP_OK;
}

/* -------------------------------------------------------------- permute */

/* One element type's tile loop, for element sizes 2, 4 and 8. */
#define DEFINE_TILE(T)                                                                            \
    static void tile_##T(const T *src, T *dst, int64_t a0, int64_t a1, int64_t b0, int64_t b1,      \
                         int64_t sa_in, int64_t sb_in, int64_t sa_out)                              \
    {                                                                                             \
        for (int64_t a = a0; a < a1; a++)                                                         \
            for (int64_t b = b0; b < b1; b++)                                                     \
                dst[a * sa_out + b] = src[a * sa_in + b * sb_in];                                 \
    }
DEFINE_TILE(uint8_t)
DEFINE_TILE(uint16_t)
DEFINE_TILE(uint32_t)
DEFINE_TILE(uint64_t)

/* A permute's merged dims (see cpu_permute): sizes, strides into src
 * and dst; for the tiled case the tile dims and the batch dims. */
typedef struct {
    const char *sp;
    char *dp;
    size_t es;
    int m, q, kc;
    const int64_t *sz, *is, *os, *qsz, *qis, *qos;
    int64_t run, A, B, ta, tb;
} perm_ctx;

/* Contiguous runs [lo, hi) of the output (src's last dim kept). */
static void perm_run_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const perm_ctx *c = vc;
    for (int64_t o = lo; o < hi; o++) {
        int64_t rem = o, off = 0;
        for (int k = c->m - 2; k >= 0; k--) {
            off += (rem % c->sz[k]) * c->is[k];
            rem /= c->sz[k];
        }
        memcpy(c->dp + (size_t)(o * c->run) * c->es, c->sp + (size_t)off * c->es, (size_t)c->run * c->es);
    }
}

enum { PERM_TILE = 32 };

/* Tiles [lo, hi) of the transposing case. */
static void perm_tile_range(void *vc, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const perm_ctx *c = vc;
    const int m = c->m, kc = c->kc;
    const size_t es = c->es;
    const int64_t T = PERM_TILE, A = c->A, B = c->B, ta = c->ta, tb = c->tb;
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / (ta * tb), t = u % (ta * tb), ioff = 0, ooff = 0;
        for (int k = c->q - 1; k >= 0; k--) {
            ioff += (o % c->qsz[k]) * c->qis[k];
            ooff += (o % c->qsz[k]) * c->qos[k];
            o /= c->qsz[k];
        }
        const int64_t a0 = (t / tb) * T, b0 = (t % tb) * T;
        const int64_t a1 = a0 + T < A ? a0 + T : A, b1 = b0 + T < B ? b0 + T : B;
        const char *s0 = c->sp + (size_t)ioff * es;
        char *d0 = c->dp + (size_t)ooff * es;
        const int64_t *is = c->is, *os = c->os;
        if (es == 1)
            tile_uint8_t((const uint8_t *)s0, (uint8_t *)d0, a0, a1, b0, b1, is[kc], is[m - 1], os[kc]);
        else if (es == 2)
            tile_uint16_t((const uint16_t *)(const void *)s0, (uint16_t *)(void *)d0, a0, a1, b0, b1, is[kc],
                          is[m - 1], os[kc]);
        else if (es == 4)
            tile_uint32_t((const uint32_t *)(const void *)s0, (uint32_t *)(void *)d0, a0, a1, b0, b1, is[kc],
                          is[m - 1], os[kc]);
        else
            tile_uint64_t((const uint64_t *)(const void *)s0, (uint64_t *)(void *)d0, a0, a1, b0, b1, is[kc],
                          is[m - 1], os[kc]);
    }
}

amp_status cpu_permute(const void *src, void *dst, size_t es, int nd, const int64_t *od, const int64_t *ist)
{
    if (nd < 0 || nd > BE_MAX_DIMS || (es != 1 && es != 2 && es != 4 && es != 8))
        return amp_set_error(AMP_ERR_ARG, "permute: %d dims of %zu-byte elements", nd, es);
    int64_t total = 1;
    for (int k = 0; k < nd; k++)
        total *= od[k];
    if (total == 0)
        return AMP_OK;
    /* Output dims with their strides into src, merged where two output
     * neighbours are neighbours in src too, size-1 dims dropped. */
    int m = 0;
    int64_t sz[BE_MAX_DIMS], is[BE_MAX_DIMS], os[BE_MAX_DIMS], s;
    for (int k = 0; k < nd; k++) {
        int64_t size = od[k], stride = ist[k];
        if (size == 1)
            continue;
        if (m > 0 && is[m - 1] == stride * size) {
            sz[m - 1] *= size;
            is[m - 1] = stride;
        } else {
            sz[m] = size;
            is[m] = stride;
            m++;
        }
    }
    if (m == 0 || (m == 1 && is[0] == 1)) {
        memcpy(dst, src, (size_t)total * es);
        return AMP_OK;
    }
    s = 1;
    for (int k = m - 1; k >= 0; k--) {
        os[k] = s;
        s *= sz[k];
    }
    const char *sp = src;
    char *dp = dst;
    if (is[m - 1] == 1) {
        /* The last dim keeps its place: contiguous runs. */
        const int64_t run = sz[m - 1], outer = total / run, g = 8192 / run;
        perm_ctx c = {.sp = sp, .dp = dp, .es = es, .m = m, .sz = sz, .is = is, .run = run};
        amp_parallel_for(outer, total > EW_PARALLEL_MIN ? (g > 1 ? g : 1) : outer, perm_run_range, &c);
        return AMP_OK;
    }
    /* Tiles over two dims: the output's last (contiguous in dst) and the
     * one with the smallest stride into src (contiguous there when src's
     * last dim is not size 1). The other dims index the tile batch. */
    int kc = 0;
    for (int k = 1; k < m - 1; k++)
        if (is[k] < is[kc])
            kc = k;
    int q = 0;
    int64_t qsz[BE_MAX_DIMS], qis[BE_MAX_DIMS], qos[BE_MAX_DIMS];
    for (int k = 0; k < m - 1; k++)
        if (k != kc) {
            qsz[q] = sz[k];
            qis[q] = is[k];
            qos[q] = os[k];
            q++;
        }
    const int64_t T = PERM_TILE, A = sz[kc], B = sz[m - 1], ta = (A + T - 1) / T, tb = (B + T - 1) / T;
    const int64_t units = (total / (A * B)) * ta * tb;
    perm_ctx c = {sp, dp, es, m, q, kc, sz, is, os, qsz, qis, qos, 0, A, B, ta, tb};
    /* Grains of 8 tiles (8192 elements at most). */
    amp_parallel_for(units, total > EW_PARALLEL_MIN ? 8 : units, perm_tile_range, &c);
    return AMP_OK;
}

/* ----------------------------------------------------------- slice copy */

amp_status cpu_copy_2d(const void *src, amp_dtype sdt, int64_t sld, int64_t soff, void *dst, amp_dtype ddt,
                       int64_t dld, int64_t doff, int64_t rows, int64_t cols)
{
    const int64_t g = cols > 0 ? 8192 / cols : rows;
    cvt_rows((const char *)src + (size_t)soff * amp_dtype_size(sdt), sdt, sld,
             (char *)dst + (size_t)doff * amp_dtype_size(ddt), ddt, dld, rows, cols,
             rows > 1 && rows * cols > EW_PARALLEL_MIN ? (g > 1 ? g : 1) : rows);
    return AMP_OK;
}
