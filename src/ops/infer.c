/*
 * infer.c - the host-side checks and result shapes shared by the CPU and
 * CUDA forwards (see infer.h): one copy of each op's validation, so both
 * backends reject the same inputs with the same messages.
 */
#include "ops/infer.h"
#include "ops/broadcast.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* --------------------------------------------------------------- binary */

bool binary_infer(const node *n, amp_shape *out, amp_dtype *dt)
{
    if (!op_require_float(n, 0) || !op_require_float(n, 1))
        return false;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    if (!bcast_shapes(a->shape, b->shape, out)) {
        char sa[96], sb[96];
        amp_set_error(AMP_ERR_SHAPE, "%s: shapes %s and %s cannot broadcast", op_name(n),
                      amp_shape_str(a->shape, sa, sizeof sa), amp_shape_str(b->shape, sb, sizeof sb));
        return false;
    }
    *dt = promote_tensors(a, b);
    return true;
}

/* ------------------------------------------------------------ sum, mean */

bool reduce_infer(const node *n, const reduce_params *p, reduce_dims *r)
{
    const amp_tensor *x = n->in[0];
    int nd = x->shape.ndim, ndims = (int)p->dims.n;
    bool keepdim = p->keepdim;
    /* As PyTorch, a 0-d tensor accepts dim 0 or -1 (and reduces nothing). */
    int range = nd > 0 ? nd : 1;
    r->mask = 0;
    if (ndims == 0) {
        r->mask = (1u << nd) - 1u;
    }
    for (int k = 0; k < ndims; k++) {
        int64_t d = p->dims.d[k];
        if (d < -range || d >= range) {
            amp_fail_null(AMP_ERR_ARG, "%s: dim %lld is out of range for a tensor of %d dims", op_name(n),
                          (long long)d, nd);
            return false;
        }
        int dd = (int)(d < 0 ? d + range : d);
        if (r->mask & (1u << dd)) {
            amp_fail_null(AMP_ERR_ARG, "%s: dim %d appears more than once in the list of dims", op_name(n),
                          dd);
            return false;
        }
        r->mask |= 1u << dd;
    }
    if (nd == 0)
        r->mask = 0;
    r->out.ndim = 0;
    r->keep = x->shape;
    r->count = 1;
    for (int i = 0; i < nd; i++) {
        bool red = (r->mask >> i) & 1u;
        if (red) {
            r->count *= x->shape.d[i];
            r->keep.d[i] = 1;
        }
        if (!red || keepdim)
            r->out.d[r->out.ndim++] = red ? 1 : x->shape.d[i];
    }
    return true;
}

/* ----------------------------------------------------------- layer_norm */

bool layer_norm_infer(const node *n, const layer_norm_params *p, ln_args *a)
{
    const amp_tensor *x = n->in[0];
    int k = (int)p->normalized_ndim;
    int hw = p->has_weight, hb = p->has_bias;
    if (n->n_in != 1 + hw + hb)
        return op_fail_shapes(n, "inputs do not match the weight/bias flags"), false;
    for (int i = 0; i < n->n_in; i++)
        if (!op_require_float(n, i))
            return false;
    if (k < 1 || k > x->shape.ndim) {
        char why[96];
        snprintf(why, sizeof why, "normalized_ndim %d must be in [1, %d]", k, x->shape.ndim);
        return op_fail_shapes(n, why), false;
    }
    amp_shape ns = {k, {0}};
    for (int d = 0; d < k; d++)
        ns.d[d] = x->shape.d[x->shape.ndim - k + d];
    a->x = x;
    a->w = hw ? n->in[1] : NULL;
    a->b = hb ? n->in[1 + hw] : NULL;
    for (int i = 1; i < n->n_in; i++) {
        if (!shape_equal(n->in[i]->shape, ns)) {
            char why[160], b[96];
            snprintf(why, sizeof why, "%s must have the normalized shape %s",
                     i == 1 && hw ? "weight" : "bias", amp_shape_str(ns, b, sizeof b));
            return op_fail_shapes(n, why), false;
        }
    }
    a->cols = shape_numel(ns);
    a->rows = a->cols ? x->numel / a->cols : 0;
    return true;
}

/* ---------------------------------------------------- one dim of a tensor */

bool dim_view_infer(const node *n, int64_t d, dim_view *v)
{
    const amp_tensor *x = n->in[0];
    int nd = x->shape.ndim, range = nd > 0 ? nd : 1;
    if (d < -range || d >= range) {
        amp_fail_null(AMP_ERR_ARG, "%s: dim %lld is out of range for a tensor of %d dims", op_name(n),
                      (long long)d, nd);
        return false;
    }
    int dim = (int)(d < 0 ? d + range : d);
    *v = (dim_view){1, nd > 0 ? x->shape.d[dim] : 1, 1};
    for (int i = 0; i < nd; i++) {
        if (i < dim)
            v->outer *= x->shape.d[i];
        if (i > dim)
            v->inner *= x->shape.d[i];
    }
    return true;
}

/* Input 0 a float tensor and input 1 indices, i32 or i64 (else the error
 * says `what`). */
static bool float_and_indices(const node *n, const char *what)
{
    if (!op_require_float(n, 0))
        return false;
    if (n->in[1]->dtype == AMP_I32 || n->in[1]->dtype == AMP_I64)
        return true;
    op_fail_dtype(n, 1, what);
    return false;
}

/* ------------------------------------------------------------ the losses */

bool cross_entropy_infer(const node *n)
{
    const amp_tensor *x = n->in[0], *t = n->in[1];
    if (!float_and_indices(n, "labels must be class indices (i32 or i64)"))
        return false;
    if (x->shape.ndim != 2 || t->shape.ndim != 1 || t->shape.d[0] != x->shape.d[0]) {
        op_fail_shapes(n, "expected logits [N, C] and labels [N]");
        return false;
    }
    return true;
}

bool mse_loss_infer(const node *n)
{
    if (!op_require_float(n, 0) || !op_require_float(n, 1))
        return false;
    if (!shape_equal(n->in[0]->shape, n->in[1]->shape)) {
        op_fail_shapes(n, "input and target must have the same shape");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ embedding */

bool embedding_infer(const node *n, amp_shape *out)
{
    const amp_tensor *w = n->in[0], *idx = n->in[1];
    if (!float_and_indices(n, "indices must be i32 or i64"))
        return false;
    if (w->shape.ndim != 2) {
        op_fail_shapes(n, "weight must be 2-D [num_embeddings, embedding_dim]");
        return false;
    }
    if (idx->shape.ndim > AMP_MAX_DIMS - 1) {
        op_fail_shapes(n, "indices have too many dims for one more");
        return false;
    }
    *out = idx->shape;
    out->d[out->ndim++] = w->shape.d[1];
    return true;
}

/* ------------------------------------------------------ broadcast plans */

int bcast_plan(amp_shape out, const amp_shape *in, int nin, int64_t *d, int64_t (*st)[AMP_MAX_DIMS])
{
    int64_t cs[EW_MAX_IN][AMP_MAX_DIMS];
    for (int k = 0; k < nin; k++) {
        amp_shape s = in[k];
        int lead = out.ndim - s.ndim;
        int64_t stride = 1;
        for (int i = out.ndim - 1; i >= 0; i--) {
            int j = i - lead;
            if (j < 0 || s.d[j] == 1) {
                cs[k][i] = 0;
            } else {
                cs[k][i] = stride;
                stride *= s.d[j];
            }
        }
    }
    int nd = 0;
    for (int i = 0; i < out.ndim; i++) {
        if (out.d[i] == 1)
            continue;
        if (nd > 0) {
            int q = nd - 1;
            bool merge = true;
            for (int k = 0; k < nin; k++)
                merge = merge && st[k][q] == cs[k][i] * out.d[i];
            if (merge) {
                d[q] *= out.d[i];
                for (int k = 0; k < nin; k++)
                    st[k][q] = cs[k][i];
                continue;
            }
        }
        d[nd] = out.d[i];
        for (int k = 0; k < nin; k++)
            st[k][nd] = cs[k][i];
        nd++;
    }
    if (nd == 0) { /* a single element */
        nd = 1;
        d[0] = 1;
        for (int k = 0; k < nin; k++)
            st[k][0] = 0;
    }
    return nd;
}

unsigned sum_to_shape_mask(amp_shape big, amp_shape small)
{
    unsigned mask = 0;
    int lead = big.ndim - small.ndim;
    for (int i = 0; i < big.ndim; i++) {
        int j = i - lead;
        if (j < 0 || (small.d[j] == 1 && big.d[i] != 1))
            mask |= 1u << i;
    }
    return mask;
}

/* -------------------------------------------------------------- reshape */

bool reshape_infer(const node *n, const reshape_params *p, amp_shape *out)
{
    const amp_tensor *x = n->in[0];
    amp_shape req = {(int)p->shape.n, {0}};
    int infer = -1;
    int64_t known = 1;
    const char *why = NULL;
    for (int k = 0; k < req.ndim; k++) {
        req.d[k] = p->shape.d[k];
        if (req.d[k] == -1) {
            if (infer >= 0)
                why = "only one dim can be -1";
            infer = k;
        } else if (req.d[k] < 0) {
            why = "sizes must be >= 0 or -1";
        } else {
            known *= req.d[k];
        }
    }
    if (!why && infer >= 0) {
        if (known == 0)
            why = "the -1 dim is ambiguous beside a zero-sized dim";
        else if (x->numel % known != 0)
            why = "the element counts do not match";
        else
            req.d[infer] = x->numel / known;
    }
    if (!why && shape_numel(req) != x->numel)
        why = "the element counts do not match";
    if (why) {
        char a[96], b[96];
        amp_shape shown = {(int)p->shape.n, {0}};
        for (int k = 0; k < shown.ndim; k++)
            shown.d[k] = p->shape.d[k];
        amp_set_error(AMP_ERR_SHAPE, "%s: cannot view shape %s (%lld elements) as %s: %s", op_name(n),
                      amp_shape_str(x->shape, a, sizeof a), (long long)x->numel,
                      amp_shape_str(shown, b, sizeof b), why);
        return false;
    }
    *out = req;
    return true;
}

/* -------------------------------------------------------------- permute */

bool permute_infer(const node *n, const permute_params *p, int *perm)
{
    const int nd = n->in[0]->shape.ndim;
    const int64_t *dims = p->dims.d;
    bool seen[AMP_MAX_DIMS] = {false}, ok = p->dims.n == nd;
    for (int k = 0; k < nd; k++) {
        int d = (dims[k] >= -nd && dims[k] < nd) ? shape_dim(nd, (int)dims[k]) : -1;
        if (d < 0 || seen[d])
            ok = false;
        else
            seen[d] = true;
        perm[k] = d;
    }
    if (ok)
        return true;
    char why[200];
    size_t len = (size_t)snprintf(why, sizeof why, "dims (");
    for (int k = 0; k < nd && len < sizeof why; k++)
        len += (size_t)snprintf(why + len, sizeof why - len, k ? ", %lld" : "%lld", (long long)dims[k]);
    if (len < sizeof why)
        snprintf(why + len, sizeof why - len, ") are not a permutation of 0..%d", nd - 1);
    op_fail_shapes(n, why);
    return false;
}

/* ------------------------------------------------------------------ cat */

bool cat_infer(const node *n, const dim_params *p, amp_shape *out, amp_dtype *dtype, int *dim_out)
{
    const amp_tensor *t0 = n->in[0];
    const int nd = t0->shape.ndim;
    if (nd == 0) {
        op_fail_shapes(n, "zero-dimensional tensors cannot be concatenated");
        return false;
    }
    const int dim = shape_dim(nd, (int)p->dim);
    if (dim < 0) {
        amp_set_error(AMP_ERR_ARG, "%s: dim %lld out of range for %d dims", op_name(n), (long long)p->dim, nd);
        return false;
    }
    amp_dtype dt = t0->dtype;
    amp_shape s = t0->shape;
    for (int i = 1; i < n->n_in; i++) {
        const amp_tensor *t = n->in[i];
        if (t->dtype != dt) {
            /* PyTorch's promotion among floats: any two different float
             * dtypes give f32 (f32 wins, f16 + bf16 has no 16-bit home). */
            if (!amp_dtype_is_float(t->dtype) || !amp_dtype_is_float(dt)) {
                amp_set_error(AMP_ERR_DTYPE,
                              "%s: tensor %d has dtype %s but tensor 0 has %s (integer "
                              "tensors must all have the same dtype)",
                              op_name(n), i, amp_dtype_name(t->dtype), amp_dtype_name(t0->dtype));
                return false;
            }
            dt = AMP_F32;
        }
        bool fits = t->shape.ndim == nd;
        for (int d = 0; fits && d < nd; d++)
            fits = d == dim || t->shape.d[d] == t0->shape.d[d];
        if (!fits) {
            char a[96], b[96];
            amp_set_error(AMP_ERR_SHAPE,
                          "%s: tensor %d has shape %s but tensor 0 has %s (sizes must match "
                          "except in dim %d)",
                          op_name(n), i, amp_shape_str(t->shape, a, sizeof a),
                          amp_shape_str(t0->shape, b, sizeof b), dim);
            return false;
        }
        s.d[dim] += t->shape.d[dim];
    }
    *out = s;
    *dtype = dt;
    *dim_out = dim;
    return true;
}

/* --------------------------------------------------------------- narrow */

bool narrow_infer(const node *n, const narrow_params *p, amp_shape *out, int *dim_out)
{
    const amp_tensor *x = n->in[0];
    const int nd = x->shape.ndim;
    const int64_t d_in = p->dim, start = p->start, len = p->length;
    const int dim = (nd > 0 && d_in >= -nd && d_in < nd) ? shape_dim(nd, (int)d_in) : -1;
    if (dim < 0) {
        amp_set_error(AMP_ERR_ARG, "%s: dim %lld out of range for %d dims", op_name(n), (long long)d_in, nd);
        return false;
    }
    const int64_t size = x->shape.d[dim];
    if (start < 0 || len < 0 || start > size || len > size - start) {
        char why[160];
        snprintf(why, sizeof why, "elements [%lld, %lld + %lld) are not within dim %d of size %lld",
                 (long long)start, (long long)start, (long long)len, dim, (long long)size);
        op_fail_shapes(n, why);
        return false;
    }
    *out = x->shape;
    out->d[dim] = len;
    *dim_out = dim;
    return true;
}

/* ------------------------------------------------------------ matmul */

bool matmul_infer(const node *n, mm_plan *pl)
{
    amp_shape a = n->in[0]->shape, b = n->in[1]->shape;
    int da = a.ndim, db = b.ndim;
    if (da < 1 || db < 1) {
        op_fail_shapes(n, "both inputs need at least one dim");
        return false;
    }
    int64_t Ka = a.d[da - 1], Kb = db == 1 ? b.d[0] : b.d[db - 2];
    if (Ka != Kb) {
        op_fail_shapes(n, "the last dim of a and the contracted dim of b differ");
        return false;
    }
    *pl = (mm_plan){.batch = 1, .K = Ka, .N = db == 1 ? 1 : b.d[db - 1]};
    amp_shape out = {0};
    if (db <= 2) {
        /* Fold every leading dim of a into M. */
        pl->M = 1;
        for (int i = 0; i < da - 1; i++) {
            pl->M *= a.d[i];
            out.d[out.ndim++] = a.d[i];
        }
    } else {
        if (da >= 3 && (da != db || memcmp(a.d, b.d, sizeof(int64_t) * (size_t)(da - 2)) != 0)) {
            op_fail_shapes(n, "batch dims differ (broadcasting them is not supported)");
            return false;
        }
        for (int i = 0; i < db - 2; i++) {
            out.d[out.ndim++] = b.d[i];
            pl->batch *= b.d[i];
        }
        pl->M = da == 1 ? 1 : a.d[da - 2];
        if (da >= 2)
            out.d[out.ndim++] = pl->M;
        pl->sa = da >= 3 ? pl->M * pl->K : 0;
        pl->sb = pl->K * pl->N;
    }
    if (db >= 2)
        out.d[out.ndim++] = pl->N;
    pl->out = out;
    return true;
}

bool same_float_dtypes(const node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (!op_require_float(n, i))
            return false;
    for (int i = 1; i < n->n_in; i++)
        if (n->in[i]->dtype != n->in[0]->dtype) {
            amp_fail_null(AMP_ERR_DTYPE, "%s: dtypes %s and %s differ", op_name(n),
                          amp_dtype_name(n->in[0]->dtype), amp_dtype_name(n->in[i]->dtype));
            return false;
        }
    return true;
}

/* ------------------------------------------------------------ linear */

bool linear_infer(const node *n, const linear_params *p, lin_plan *pl)
{
    const amp_tensor *x = n->in[0], *w = n->in[1];
    bool has_bias = lin_has_bias(n, p);
    if (x->shape.ndim < 1 || w->shape.ndim != 2) {
        op_fail_shapes(n, "need x [.., in] and weight [out, in]");
        return false;
    }
    pl->in = w->shape.d[1];
    pl->out = w->shape.d[0];
    if (x->shape.d[x->shape.ndim - 1] != pl->in) {
        op_fail_shapes(n, "the last dim of x and the weight's in_features differ");
        return false;
    }
    if (has_bias && (n->in[2]->shape.ndim != 1 || n->in[2]->shape.d[0] != pl->out)) {
        op_fail_shapes(n, "the bias must be [out_features]");
        return false;
    }
    pl->rows = 1;
    for (int i = 0; i < x->shape.ndim - 1; i++)
        pl->rows *= x->shape.d[i];
    return true;
}

/* --------------------------------------------------------- attention */

/* PyTorch's default scale, 1 / sqrt(E), computed in double then rounded. */
static float sdpa_scale(int64_t d) { return d > 0 ? (float)(1.0 / sqrt((double)d)) : 1.0f; }

/* ATTN_QKV: one input qkv [B, T, 3, H, d]. */
static bool attention_qkv_infer(const node *n, const attention_params *p, attn_plan *pl)
{
    const amp_tensor *x = n->in[0];
    if (n->n_in != 1) {
        amp_set_error(AMP_ERR_ARG, "%s: the fused qkv layout takes one input, not %d", op_name(n), n->n_in);
        return false;
    }
    if (!op_require_float(n, 0))
        return false;
    if (x->shape.ndim != 5 || x->shape.d[2] != 3) {
        op_fail_shapes(n, "the fused qkv layout takes qkv [B, T, 3, H, d]");
        return false;
    }
    const int64_t H = x->shape.d[3], d = x->shape.d[4];
    pl->T = x->shape.d[1];
    pl->d = d;
    pl->hgroup = H;
    pl->ld = 3 * H * d;
    pl->out_ld = H * d;
    pl->Tk = pl->kv_ld = 0;
    pl->heads = x->shape.d[0] * H;
    pl->scale = sdpa_scale(d);
    pl->causal = p->causal;
    return true;
}

bool attention_infer(const node *n, const attention_params *p, attn_plan *pl)
{
    if (p->layout == ATTN_QKV)
        return attention_qkv_infer(n, p, pl);
    pl->out_ld = 0;
    for (int i = 0; i < 3; i++)
        if (!op_require_float(n, i))
            return false;
    const amp_tensor *q = n->in[0];
    if (n->in[1]->dtype != q->dtype || n->in[2]->dtype != q->dtype) {
        op_fail_dtype(n, n->in[1]->dtype != q->dtype ? 1 : 2,
                      "q, k and v must have one dtype (autocast casts them to one)");
        return false;
    }
    if (q->shape.ndim < 2) {
        op_fail_shapes(n, "q, k and v need at least 2 dims [.., T, d]");
        return false;
    }
    if (p->layout != ATTN_HEADS_FIRST && p->layout != ATTN_BTHD && p->layout != ATTN_CACHED) {
        amp_set_error(AMP_ERR_ARG, "%s: unknown layout %d", op_name(n), (int)p->layout);
        return false;
    }
    const bool cached = p->layout == ATTN_CACHED;
    if (cached) { /* q [B, T, H, d], k and v [Tk, B, H, d] with Tk >= T */
        const amp_tensor *k = n->in[1];
        if (q->shape.ndim != 4 || !shape_equal(k->shape, n->in[2]->shape) || k->shape.ndim != 4 ||
            k->shape.d[1] != q->shape.d[0] || k->shape.d[2] != q->shape.d[2] || k->shape.d[3] != q->shape.d[3] ||
            k->shape.d[0] < q->shape.d[1]) {
            op_fail_shapes(n, "cached attention takes q [B, T, H, d] and k, v [Tk, B, H, d] with Tk >= T");
            return false;
        }
    } else if (!shape_equal(q->shape, n->in[1]->shape) || !shape_equal(q->shape, n->in[2]->shape)) {
        op_fail_shapes(n, "q, k and v must have the same shape [.., T, d]");
        return false;
    }
    int nd = q->shape.ndim;
    pl->T = q->shape.d[nd - 2];
    pl->d = q->shape.d[nd - 1];
    pl->hgroup = pl->ld = 0;
    pl->Tk = cached ? n->in[1]->shape.d[0] : 0;
    pl->kv_ld = cached ? q->shape.d[0] * q->shape.d[2] * q->shape.d[3] : 0;
    if (p->layout == ATTN_BTHD || cached) { /* [B, T, H, d] */
        if (nd != 4) {
            op_fail_shapes(n, "q, k and v must be [B, T, H, d] in this layout");
            return false;
        }
        pl->T = q->shape.d[1];
        pl->hgroup = q->shape.d[2];
        pl->ld = q->shape.d[2] * q->shape.d[3];
    }
    pl->heads = pl->T * pl->d > 0 ? q->numel / (pl->T * pl->d) : 0;
    pl->scale = sdpa_scale(pl->d);
    pl->causal = p->causal;
    return true;
}

/* ------------------------------------------------------------ conv2d */

bool conv2d_infer(const node *n, const conv2d_params *p, conv2d_shape *g)
{
    const amp_tensor *x = n->in[0], *w = n->in[1];
    g->bias = p->has_bias && n->n_in > 2;
    g->relu = p->act == OP_ACT_RELU;
    g->s = p->stride;
    g->p = p->padding;
    if (p->act != OP_ACT_NONE && p->act != OP_ACT_RELU) {
        amp_fail_null(AMP_ERR_ARG, "%s: no fused activation %d (it fuses none or relu)", op_name(n), (int)p->act);
        return false;
    }
    if (x->shape.ndim != 4 || w->shape.ndim != 4) {
        op_fail_shapes(n, "need x [N, C, H, W] and weight [O, C, kh, kw]");
        return false;
    }
    g->N = x->shape.d[0], g->C = x->shape.d[1], g->H = x->shape.d[2], g->W = x->shape.d[3];
    g->O = w->shape.d[0], g->kh = w->shape.d[2], g->kw = w->shape.d[3];
    if (w->shape.d[1] != g->C) {
        op_fail_shapes(n, "input channels of x and weight differ");
        return false;
    }
    if (g->H + 2 * g->p < g->kh || g->W + 2 * g->p < g->kw || g->kh < 1 || g->kw < 1) {
        op_fail_shapes(n, "the padded input is smaller than the kernel");
        return false;
    }
    if (g->bias && (n->in[2]->shape.ndim != 1 || n->in[2]->shape.d[0] != g->O)) {
        op_fail_shapes(n, "the bias must be [out_channels]");
        return false;
    }
    g->Ho = (g->H + 2 * g->p - g->kh) / g->s + 1;
    g->Wo = (g->W + 2 * g->p - g->kw) / g->s + 1;
    g->ckk = g->C * g->kh * g->kw;
    g->l = g->Ho * g->Wo;
    return true;
}

/* ------------------------------------------------------------- pools */

bool pool_infer(const node *n, const pool2d_params *p, pool_shape *g)
{
    const amp_tensor *x = n->in[0];
    if (!op_require_float(n, 0))
        return false;
    int nd = x->shape.ndim;
    if (nd != 3 && nd != 4) {
        op_fail_shapes(n, "need x [N, C, H, W] or [C, H, W]");
        return false;
    }
    g->k = p->kernel, g->s = p->stride, g->p = p->padding;
    g->H = x->shape.d[nd - 2], g->W = x->shape.d[nd - 1];
    g->planes = 1;
    for (int i = 0; i < nd - 2; i++)
        g->planes *= x->shape.d[i];
    if (g->H + 2 * g->p < g->k || g->W + 2 * g->p < g->k) {
        char why[96];
        snprintf(why, sizeof why, "the padded input is smaller than the %lldx%lld window", (long long)g->k,
                 (long long)g->k);
        op_fail_shapes(n, why);
        return false;
    }
    if (g->H * g->W > INT32_MAX) {
        op_fail_shapes(n, "a plane has more elements than the i32 argmax can index");
        return false;
    }
    g->Ho = (g->H + 2 * g->p - g->k) / g->s + 1;
    g->Wo = (g->W + 2 * g->p - g->k) / g->s + 1;
    return true;
}
