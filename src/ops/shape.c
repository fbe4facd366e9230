/*
 * shape.c - ops that move elements without computing on them: reshape (a
 * view), permute (a copy in the new order; transpose is a permute),
 * cat, and to (the differentiable dtype cast autocast relies on).
 *
 * Every tensor is contiguous, so reshape can share its input's storage,
 * while permute must copy. The permute kernel first merges dims that stay
 * neighbours and drops size-1 dims, then copies either contiguous runs
 * (when the last dim keeps its place) or 2-D tiles, so that both the reads
 * and the writes stay within a few cache lines for any ndim.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN_WORK 32768

/* -------------------------------------------------------------- reshape */

amp_tensor *reshape_forward(node *n)
{
    amp_shape s;
    if (!reshape_infer(n, &s))
        return NULL;
    return tensor_view(n->in[0], s);
}

/* A view of gout: the engine owns gout until this node's backward is done,
 * and the gradient it accumulates is a tensor object of its own. */
amp_status reshape_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    gin[0] = tensor_view(gout, n->in[0]->shape);
    return gin[0] ? AMP_OK : amp_last_status();
}

/* -------------------------------------------------------------- permute */

/* One element type's tile and run loops, for element sizes 2, 4 and 8. */
#define DEFINE_TILE(T)                                                                            \
    static void tile_##T(const T *src, T *dst, int64_t a0, int64_t a1, int64_t b0, int64_t b1,      \
                         int64_t sa_in, int64_t sb_in, int64_t sa_out)                              \
    {                                                                                             \
        for (int64_t a = a0; a < a1; a++)                                                         \
            for (int64_t b = b0; b < b1; b++)                                                     \
                dst[a * sa_out + b] = src[a * sa_in + b * sb_in];                                 \
    }
DEFINE_TILE(uint16_t)
DEFINE_TILE(uint32_t)
DEFINE_TILE(uint64_t)

/* dst (contiguous, dims permuted: dst dim k is src dim perm[k]) from src
 * (contiguous, shape in), elements of es bytes. */
static void permute_copy(const void *src, amp_shape in, const int *perm, void *dst, size_t es)
{
    const int64_t total = shape_numel(in);
    if (total == 0)
        return;
    int64_t istr[AMP_MAX_DIMS], s = 1;
    for (int d = in.ndim - 1; d >= 0; d--) {
        istr[d] = s;
        s *= in.d[d];
    }
    /* Output dims with their strides into src, merged where two output
     * neighbours are neighbours in src too, size-1 dims dropped. */
    int m = 0;
    int64_t sz[AMP_MAX_DIMS], is[AMP_MAX_DIMS], os[AMP_MAX_DIMS];
    for (int k = 0; k < in.ndim; k++) {
        int64_t size = in.d[perm[k]], stride = istr[perm[k]];
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
        return;
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
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (total > PAR_MIN_WORK)
#endif
        for (int64_t o = 0; o < outer; o++) {
            int64_t rem = o, off = 0;
            for (int k = m - 2; k >= 0; k--) {
                off += (rem % sz[k]) * is[k];
                rem /= sz[k];
            }
            memcpy(dp + (size_t)(o * run) * es, sp + (size_t)off * es, (size_t)run * es);
        }
        return;
    }
    /* Tiles over two dims: the output's last (contiguous in dst) and the
     * one with the smallest stride into src (contiguous there when src's
     * last dim is not size 1). The other dims index the tile batch. */
    int kc = 0;
    for (int k = 1; k < m - 1; k++)
        if (is[k] < is[kc])
            kc = k;
    int q = 0;
    int64_t qsz[AMP_MAX_DIMS], qis[AMP_MAX_DIMS], qos[AMP_MAX_DIMS];
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
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (total > PAR_MIN_WORK)
#endif
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
        if (es == 2)
            tile_uint16_t((const uint16_t *)(const void *)s0, (uint16_t *)(void *)d0, a0, a1, b0, b1,
                          is[kc], is[m - 1], os[kc]);
        else if (es == 4)
            tile_uint32_t((const uint32_t *)(const void *)s0, (uint32_t *)(void *)d0, a0, a1, b0, b1,
                          is[kc], is[m - 1], os[kc]);
        else
            tile_uint64_t((const uint64_t *)(const void *)s0, (uint64_t *)(void *)d0, a0, a1, b0, b1,
                          is[kc], is[m - 1], os[kc]);
    }
}

amp_tensor *permute_forward(node *n)
{
    const amp_tensor *x = n->in[0];
    int perm[AMP_MAX_DIMS];
    if (!permute_infer(n, perm))
        return NULL;
    amp_shape s = x->shape;
    for (int k = 0; k < s.ndim; k++)
        s.d[k] = x->shape.d[perm[k]];
    amp_tensor *out = tensor_new(s, x->dtype);
    if (out)
        permute_copy(tensor_ptr(x), x->shape, perm, tensor_ptr(out), amp_dtype_size(x->dtype));
    return out;
}

/* The inverse permutation applied to gout. */
amp_status permute_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    int perm[AMP_MAX_DIMS], inv[AMP_MAX_DIMS];
    if (!permute_infer(n, perm))
        return amp_last_status();
    for (int k = 0; k < gout->shape.ndim; k++)
        inv[perm[k]] = k;
    gin[0] = tensor_new(n->in[0]->shape, gout->dtype);
    if (!gin[0])
        return amp_last_status();
    permute_copy(tensor_ptr(gout), gout->shape, inv, tensor_ptr(gin[0]), amp_dtype_size(gout->dtype));
    return AMP_OK;
}

/* ------------------------------------------------------------------ cat */

/* The product of t's sizes from dim d on. */
static int64_t inner_from(const amp_tensor *t, int d)
{
    int64_t s = 1;
    for (int k = d; k < t->shape.ndim; k++)
        s *= t->shape.d[k];
    return s;
}

amp_tensor *cat_forward(node *n)
{
    amp_shape s;
    amp_dtype dt;
    int dim;
    if (!cat_infer(n, &s, &dt, &dim))
        return NULL;
    amp_tensor *out = tensor_new(s, dt);
    if (!out)
        return NULL;
    const int64_t outer = out->numel ? shape_numel(s) / inner_from(out, dim) : 0;
    const int64_t inner_out = inner_from(out, dim);
    const size_t eo = amp_dtype_size(dt);
    char *dp = tensor_ptr(out);
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (out->numel > PAR_MIN_WORK && outer > 1)
#endif
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = 0;
        for (int i = 0; i < n->n_in; i++) {
            const amp_tensor *t = n->in[i];
            const int64_t inner = inner_from(t, dim);
            const char *sp = (const char *)tensor_ptr(t) + (size_t)(o * inner) * amp_dtype_size(t->dtype);
            amp_convert(sp, t->dtype, dp + (size_t)(o * inner_out + off) * eo, dt, (size_t)inner);
            off += inner;
        }
    }
    return out;
}

/* Each input's slice of gout, in that input's dtype. */
amp_status cat_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const int dim = shape_dim(gout->shape.ndim, (int)n->p.i[0]);
    const int64_t inner_out = inner_from(gout, dim);
    const int64_t outer = inner_out ? gout->numel / inner_out : 0;
    const size_t eg = amp_dtype_size(gout->dtype);
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        const amp_tensor *t = n->in[i];
        const int64_t inner = inner_from(t, dim);
        if (in_needs_grad(n, i)) {
            amp_tensor *g = tensor_new(t->shape, t->dtype);
            if (!g)
                return amp_last_status();
            const size_t es = amp_dtype_size(t->dtype);
            const char *sp = tensor_ptr(gout);
            char *dp = tensor_ptr(g);
            for (int64_t o = 0; o < outer; o++)
                amp_convert(sp + (size_t)(o * inner_out + off) * eg, gout->dtype,
                            dp + (size_t)(o * inner) * es, t->dtype, (size_t)inner);
            gin[i] = g;
        }
        off += inner;
    }
    return AMP_OK;
}

/* ------------------------------------------------------------------- to */

amp_tensor *to_forward(node *n)
{
    const amp_dtype dt = (amp_dtype)n->p.i[0];
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_DTYPE, "%s: invalid dtype %d", op_name(n), (int)dt);
    return ew_convert(n->in[0], dt);
}

/* The gradient goes back in the input's dtype; a cast to or from an
 * integer dtype carries none. */
amp_status to_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *x = n->in[0];
    if (!in_needs_grad(n, 0) || !amp_dtype_is_float(x->dtype) || !amp_dtype_is_float(gout->dtype))
        return AMP_OK;
    gin[0] = ew_convert(gout, x->dtype);
    return gin[0] ? AMP_OK : amp_last_status();
}
