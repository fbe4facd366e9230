/*
 * broadcast.c - broadcasting, the blocked elementwise map and sums over
 * dims (see broadcast.h).
 *
 * Both the map and the sums first simplify the shape the way PyTorch's
 * TensorIterator does: size-1 dims are dropped and neighbouring dims that
 * every operand walks contiguously are merged. After that, the common
 * cases are one flat run (same shapes), rows against a row vector (a
 * bias), or a [rows, cols] block summed along one side, and each gets a
 * plain loop over contiguous memory.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

#include <stdlib.h>
#include <string.h>

bool bcast_shapes(amp_shape a, amp_shape b, amp_shape *out)
{
    int nd = a.ndim > b.ndim ? a.ndim : b.ndim;
    amp_shape s = {nd, {0}};
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a.ndim), ib = i - (nd - b.ndim);
        int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        s.d[i] = da == 1 ? db : da;
    }
    *out = s;
    return true;
}

amp_dtype promote_float(amp_dtype a, amp_dtype b) { return a == b ? a : AMP_F32; }

amp_dtype promote_tensors(const amp_tensor *a, const amp_tensor *b)
{
    bool a0 = a->shape.ndim == 0, b0 = b->shape.ndim == 0;
    if (a0 != b0) /* a 0-d float tensor does not widen a dimensioned one */
        return a0 ? b->dtype : a->dtype;
    return promote_float(a->dtype, b->dtype);
}

void ew_scale(float *out, const float *const *in, int64_t n, const void *ctx)
{
    const float *restrict x = in[0];
    float *restrict o = out, s = *(const float *)ctx;
    for (int64_t j = 0; j < n; j++)
        o[j] = x[j] * s;
}

void ew_divide(float *out, const float *const *in, int64_t n, const void *ctx)
{
    const float *restrict x = in[0];
    float *restrict o = out, s = *(const float *)ctx;
    for (int64_t j = 0; j < n; j++)
        o[j] = x[j] / s;
}

/* ------------------------------------------------------ elementwise map */

/* Elements per block: the operands' blocks (5 x 4 KiB) stay in L1. */
#define EW_CHUNK 1024

/* The result's shape, simplified, with each operand's element strides
 * along it (0 where the operand is broadcast). */
typedef struct {
    int nd;
    int64_t d[AMP_MAX_DIMS];
    int64_t st[EW_MAX_IN][AMP_MAX_DIMS];
} ew_plan;

static void ew_plan_build(ew_plan *p, amp_shape out, const ew_arg *in, int nin)
{
    amp_shape shapes[EW_MAX_IN];
    for (int k = 0; k < nin; k++)
        shapes[k] = in[k].shape;
    p->nd = bcast_plan(out, shapes, nin, p->d, p->st);
}

void ew_map(amp_tensor *out, const ew_arg *in, int nin, ew_fn fn, const void *ctx)
{
    int64_t numel = out->numel;
    if (numel == 0)
        return;
    ew_plan p;
    ew_plan_build(&p, out->shape, in, nin);
    /* The innermost (merged) dim is walked in blocks; each operand's stride
     * along it is 1 (contiguous) or 0 (broadcast). */
    int last = p.nd - 1;
    int64_t inner = p.d[last];
    int64_t per_row = (inner + EW_CHUNK - 1) / EW_CHUNK;
    int64_t tasks = numel / inner * per_row;
    size_t osz = amp_dtype_size(out->dtype);
    char *obase = tensor_ptr(out);
    bool out_f32 = out->dtype == AMP_F32;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (numel >= EW_PARALLEL_MIN) schedule(static))
    for (int64_t t = 0; t < tasks; t++) {
        float buf[EW_MAX_IN][EW_CHUNK], obuf[EW_CHUNK];
        const float *src[EW_MAX_IN] = {0};
        int64_t row = t / per_row, c0 = (t % per_row) * EW_CHUNK;
        int64_t len = inner - c0 < EW_CHUNK ? inner - c0 : EW_CHUNK;
        int64_t off[EW_MAX_IN] = {0};
        int64_t r = row;
        for (int i = last - 1; i >= 0; i--) {
            int64_t ix = r % p.d[i];
            r /= p.d[i];
            for (int k = 0; k < nin; k++)
                off[k] += ix * p.st[k][i];
        }
        for (int k = 0; k < nin; k++) {
            int64_t o = off[k] + c0 * p.st[k][last];
            if (p.st[k][last] == 0) {
                float v = load_f32(in[k].data, in[k].dt, (size_t)o);
                for (int64_t j = 0; j < len; j++)
                    buf[k][j] = v;
                src[k] = buf[k];
            } else if (in[k].dt == AMP_F32) {
                src[k] = (const float *)in[k].data + o;
            } else {
                amp_convert((const char *)in[k].data + (size_t)o * amp_dtype_size(in[k].dt), in[k].dt,
                            buf[k], AMP_F32, (size_t)len);
                src[k] = buf[k];
            }
        }
        int64_t oo = row * inner + c0;
        if (out_f32) {
            fn((float *)obase + oo, src, len, ctx);
        } else {
            fn(obuf, src, len, ctx);
            amp_convert(obuf, AMP_F32, obase + (size_t)oo * osz, out->dtype, (size_t)len);
        }
    }
}

amp_tensor *ew_new(amp_shape shape, amp_dtype dt, const ew_arg *in, int nin, ew_fn fn, const void *ctx)
{
    amp_tensor *out = tensor_new(shape, dt);
    if (out)
        ew_map(out, in, nin, fn, ctx);
    return out;
}

/* Elements per task of a threaded conversion: big enough that the
 * threads' start-up is paid back, small enough to share the work. */
#define CONVERT_BLOCK 65536

amp_tensor *ew_convert(const amp_tensor *t, amp_dtype dt)
{
    amp_tensor *out = tensor_new(t->shape, dt);
    if (!out)
        return NULL;
    const char *src = tensor_ptr(t);
    char *dst = tensor_ptr(out);
    const size_t es = amp_dtype_size(t->dtype), ed = amp_dtype_size(dt);
    const int64_t n = t->numel, blocks = (n + CONVERT_BLOCK - 1) / CONVERT_BLOCK;
    OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (blocks > 1) schedule(static))
    for (int64_t b = 0; b < blocks; b++) {
        int64_t lo = b * CONVERT_BLOCK, len = n - lo < CONVERT_BLOCK ? n - lo : CONVERT_BLOCK;
        amp_convert(src + (size_t)lo * es, t->dtype, dst + (size_t)lo * ed, dt, (size_t)len);
    }
    return out;
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
    int64_t d[AMP_MAX_DIMS];
    bool red[AMP_MAX_DIMS];
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

/* dst[kept index] = sum of x over the masked dims; dst has dst_n entries. */
static void sum_dims(const float *x, amp_shape s, unsigned mask, double *dst, int64_t dst_n)
{
    for (int64_t j = 0; j < dst_n; j++)
        dst[j] = 0;
    int64_t numel = shape_numel(s);
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
    int64_t len = p.d[last], ost[AMP_MAX_DIMS], idx[AMP_MAX_DIMS] = {0}, st = 1;
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

amp_tensor *reduce_sum(const ew_arg *x, unsigned mask, double scale, amp_shape out_shape, amp_dtype dt)
{
    amp_tensor *out = tensor_new(out_shape, dt);
    if (!out)
        return NULL;
    int64_t xn = shape_numel(x->shape), on = out->numel;
    double *acc = amp_alloc((size_t)on * sizeof(double));
    float *xtmp = NULL, *otmp = NULL;
    if (x->dt != AMP_F32) {
        xtmp = amp_alloc((size_t)xn * sizeof(float));
        if (xtmp)
            amp_convert(x->data, x->dt, xtmp, AMP_F32, (size_t)xn);
    }
    const float *xf = x->dt == AMP_F32 ? (const float *)x->data : xtmp;
    float *of = dt == AMP_F32 ? tensor_f32(out) : (otmp = amp_alloc((size_t)on * sizeof(float)));
    if (!acc || !xf || !of) {
        amp_free(acc);
        amp_free(xtmp);
        amp_free(otmp);
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "sum: out of memory for %lld elements", (long long)xn);
    }
    sum_dims(xf, x->shape, mask, acc, on);
    for (int64_t j = 0; j < on; j++)
        of[j] = (float)(acc[j] * scale);
    if (otmp)
        tensor_store_f32(out, otmp);
    amp_free(acc);
    amp_free(xtmp);
    amp_free(otmp);
    return out;
}

/* ------------------------------------------------- over the backend */

amp_tensor *op_pointwise(amp_pw_op op, amp_shape shape, amp_dtype dt, amp_device dev, const ew_arg *in, int nin,
                         float s0)
{
    const amp_backend *be = backend_of(dev);
    if (!be->pointwise) {
        backend_missing(be, "pointwise", "pointwise");
        return NULL;
    }
    amp_tensor *out = tensor_new_on(shape, dt, dev);
    if (!out)
        return NULL;
    be_pw_plan p;
    amp_shape shapes[BE_PW_MAX_IN];
    const void *ptr[BE_PW_MAX_IN];
    amp_dtype dts[BE_PW_MAX_IN];
    for (int k = 0; k < nin; k++) {
        shapes[k] = in[k].shape;
        ptr[k] = in[k].data;
        dts[k] = in[k].dt;
    }
    memset(&p, 0, sizeof p);
    p.nd = bcast_plan(shape, shapes, nin, p.d, p.st);
    if (out->numel > 0 && be->pointwise(op, tensor_ptr(out), dt, out->numel, nin, ptr, dts, &p, s0) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

amp_tensor *op_reduce_sum(const ew_arg *x, amp_device dev, unsigned mask, double scale, amp_shape out_shape,
                          amp_dtype dt)
{
    const amp_backend *be = backend_of(dev);
    if (!be->reduce_sum) {
        backend_missing(be, "sum", "reduce_sum");
        return NULL;
    }
    amp_tensor *out = tensor_new_on(out_shape, dt, dev);
    if (out && be->reduce_sum(x->data, x->dt, x->shape, mask, scale, tensor_ptr(out), dt, out->numel) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

amp_tensor *sum_to_shape(const amp_tensor *g, amp_shape small, amp_dtype dt, double scale)
{
    ew_arg a = ew_arg_of(g);
    if (shape_equal(g->shape, small)) {
        if (scale == 1.0)
            return tensor_convert(g, dt);
        return op_pointwise(AMP_PW_MUL_S, small, dt, tensor_device(g), &a, 1, (float)scale);
    }
    const unsigned mask = sum_to_shape_mask(g->shape, small);
    return op_reduce_sum(&a, tensor_device(g), mask, scale, small, dt);
}
