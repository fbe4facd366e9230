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
 * number of threads.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"
#include "base/base.h"
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

/* Elements per task of the 16-bit loops. */
#define HALF_BLOCK 16384

static void relu_half(const uint16_t *restrict x, uint16_t *restrict y, int64_t n, half_fmt f)
{
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (n >= 4 * HALF_BLOCK) schedule(static))
    for (int64_t b = 0; b < n; b += HALF_BLOCK) {
        int64_t e = n - b < HALF_BLOCK ? n : b + HALF_BLOCK;
        for (int64_t j = b; j < e; j++) {
            uint16_t v = x[j], a = v & 0x7FFF;
            y[j] = a > f.inf ? (uint16_t)(v | f.quiet) : (v & 0x8000) ? 0 : v;
        }
    }
}

/* dx = g where y > 0 (not NaN), else +0. */
static void relu_grad_half(const uint16_t *restrict g, const uint16_t *restrict y, uint16_t *restrict dx, int64_t n,
                           half_fmt f)
{
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (n >= 4 * HALF_BLOCK) schedule(static))
    for (int64_t b = 0; b < n; b += HALF_BLOCK) {
        int64_t e = n - b < HALF_BLOCK ? n : b + HALF_BLOCK;
        for (int64_t j = b; j < e; j++) {
            uint16_t yv = y[j], ya = yv & 0x7FFF, gv = g[j];
            bool pos = !(yv & 0x8000) && ya != 0 && ya <= f.inf;
            uint16_t gq = (gv & 0x7FFF) > f.inf ? (uint16_t)(gv | f.quiet) : gv;
            dx[j] = pos ? gq : 0;
        }
    }
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
    const pw_kernel fn = kernel_of(op);
    /* The innermost (merged) dim is walked in blocks; each operand's stride
     * along it is 1 (contiguous) or 0 (broadcast). */
    const int last = p->nd - 1;
    const int64_t inner = p->d[last];
    const int64_t per_row = (inner + EW_CHUNK - 1) / EW_CHUNK;
    const int64_t tasks = numel / inner * per_row;
    const size_t osz = amp_dtype_size(odt);
    char *obase = out;
    const bool out_f32 = odt == AMP_F32;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (numel >= EW_PARALLEL_MIN) schedule(static))
    for (int64_t t = 0; t < tasks; t++) {
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
    return AMP_OK;
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

amp_status cpu_convert(const void *src, amp_dtype sdt, void *dst, amp_dtype ddt, int64_t n)
{
    const char *s = src;
    char *d = dst;
    const size_t es = amp_dtype_size(sdt), ed = amp_dtype_size(ddt);
    const int64_t blocks = (n + CONVERT_BLOCK - 1) / CONVERT_BLOCK;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (blocks > 1) schedule(static))
    for (int64_t b = 0; b < blocks; b++) {
        int64_t lo = b * CONVERT_BLOCK, len = n - lo < CONVERT_BLOCK ? n - lo : CONVERT_BLOCK;
        amp_convert(s + (size_t)lo * es, sdt, d + (size_t)lo * ed, ddt, (size_t)len);
    }
    return AMP_OK;
}

/* dst += src in dst's dtype: f32 sums, one rounding. */
amp_status cpu_accumulate(void *dst, amp_dtype ddt, const void *src, amp_dtype sdt, int64_t n)
{
    if (ddt == AMP_F32 && sdt == AMP_F32) {
        float *restrict a = dst;
        const float *restrict b = src;
        for (int64_t i = 0; i < n; i++)
            a[i] += b[i];
        return AMP_OK;
    }
    float a[EW_CHUNK], b[EW_CHUNK];
    const size_t ed = amp_dtype_size(ddt), es = amp_dtype_size(sdt);
    for (int64_t lo = 0; lo < n; lo += EW_CHUNK) {
        size_t len = (size_t)(n - lo < EW_CHUNK ? n - lo : EW_CHUNK);
        char *d = (char *)dst + (size_t)lo * ed;
        amp_convert(d, ddt, a, AMP_F32, len);
        amp_convert((const char *)src + (size_t)lo * es, sdt, b, AMP_F32, len);
        for (size_t i = 0; i < len; i++)
            a[i] += b[i];
        amp_convert(a, AMP_F32, d, ddt, len);
    }
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

/* sum_run over fixed blocks in parallel; for calls outside a parallel loop. */
static double sum_long(const float *x, int64_t n)
{
    if (n < 4 * SUM_BLOCK)
        return sum_run(x, n);
    int64_t nb = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    double *part = malloc((size_t)nb * sizeof *part);
    if (!part)
        return sum_run(x, n);
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) schedule(static))
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * SUM_BLOCK;
        part[b] = sum_run(x + lo, n - lo < SUM_BLOCK ? n - lo : SUM_BLOCK);
    }
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
        OMP_PRAGMA(omp parallel for num_threads(nt) if (par) schedule(static))
        for (int64_t i = 0; i < rows; i++)
            dst[i] = sum_run(x + i * len, len);
        return;
    }
    if (p.nd == 2) { /* [R, cols]: column sums, as for a bias gradient */
        int64_t rows = p.d[0], cols = p.d[1];
        int64_t nblk = (cols + COL_BLOCK - 1) / COL_BLOCK;
        OMP_PRAGMA(omp parallel for num_threads(nt) if (par && nblk > 1) schedule(static))
        for (int64_t b = 0; b < nblk; b++) {
            int64_t j0 = b * COL_BLOCK, j1 = j0 + COL_BLOCK < cols ? j0 + COL_BLOCK : cols;
            double *restrict d = dst;
            for (int64_t i = 0; i < rows; i++) {
                const float *restrict xr = x + i * cols;
                for (int64_t j = j0; j < j1; j++)
                    d[j] += xr[j];
            }
        }
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
    int64_t m = outer * inner;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (m * len >= EW_PARALLEL_MIN) schedule(static))
    for (int64_t j = 0; j < m; j++) {
        int64_t base = (j / inner) * len * inner + j % inner;
        o[j] = is_float ? argmax_float(xf + base, len, inner) : argmax_int(x, dt, base, len, inner);
    }
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
        const int64_t run = sz[m - 1], outer = total / run;
        OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (total > EW_PARALLEL_MIN))
        for (int64_t o = 0; o < outer; o++) {
            int64_t rem = o, off = 0;
            for (int k = m - 2; k >= 0; k--) {
                off += (rem % sz[k]) * is[k];
                rem /= sz[k];
            }
            memcpy(dp + (size_t)(o * run) * es, sp + (size_t)off * es, (size_t)run * es);
        }
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
    enum { T = 32 };
    const int64_t A = sz[kc], B = sz[m - 1], ta = (A + T - 1) / T, tb = (B + T - 1) / T;
    const int64_t units = (total / (A * B)) * ta * tb;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (total > EW_PARALLEL_MIN))
    for (int64_t u = 0; u < units; u++) {
        int64_t o = u / (ta * tb), t = u % (ta * tb), ioff = 0, ooff = 0;
        for (int k = q - 1; k >= 0; k--) {
            ioff += (o % qsz[k]) * qis[k];
            ooff += (o % qsz[k]) * qos[k];
            o /= qsz[k];
        }
        const int64_t a0 = (t / tb) * T, b0 = (t % tb) * T;
        const int64_t a1 = a0 + T < A ? a0 + T : A, b1 = b0 + T < B ? b0 + T : B;
        const char *s0 = sp + (size_t)ioff * es;
        char *d0 = dp + (size_t)ooff * es;
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
    return AMP_OK;
}

/* ----------------------------------------------------------- slice copy */

amp_status cpu_copy_2d(const void *src, amp_dtype sdt, int64_t sld, int64_t soff, void *dst, amp_dtype ddt,
                       int64_t dld, int64_t doff, int64_t rows, int64_t cols)
{
    const size_t es = amp_dtype_size(sdt), ed = amp_dtype_size(ddt);
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (rows > 1 && rows * cols > EW_PARALLEL_MIN))
    for (int64_t r = 0; r < rows; r++)
        amp_convert((const char *)src + (size_t)(r * sld + soff) * es, sdt, (char *)dst + (size_t)(r * dld + doff) * ed,
                    ddt, (size_t)cols);
    return AMP_OK;
}
