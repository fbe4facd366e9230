/*
 * softmax.c - softmax and log_softmax along any dim, and the two losses:
 * cross_entropy (fused log_softmax + NLL, mean over non-ignored labels)
 * and mse_loss (mean squared error).
 *
 * All of them compute in f32 (16-bit inputs are widened, results rounded
 * once) and subtract the running max before exponentiating, so logits of
 * any magnitude stay finite; sums accumulate in double. softmax and
 * log_softmax save their output for backward, as PyTorch does;
 * cross_entropy saves each row's max and log-sum-exp so its fused
 * backward, (softmax - onehot) * g / count, needs no second pass over the
 * row.
 */
#include "ops/broadcast.h"
#include "ops/infer.h"
#include "ops/simd.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Columns per block when the dim is not the last: the block's running
 * max and sums live on the stack while the dim is walked. */
#define SM_COLS 256

/* A kernel over w columns of a [len, inner]-strided block: a and b are
 * the inputs (b may be NULL), out the result, all f32. */
typedef void (*block_fn)(const float *a, const float *b, float *out, int64_t len, int64_t inner, int64_t w);

static void softmax_block(const float *x, const float *unused, float *y, int64_t len, int64_t inner,
                          int64_t w)
{
    (void)unused;
    float mx[SM_COLS];
    double sm[SM_COLS];
    for (int64_t i = 0; i < w; i++) {
        mx[i] = -INFINITY;
        sm[i] = 0;
    }
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            float v = x[d * inner + i];
            if (v > mx[i] || v != v) /* a NaN makes the whole slice NaN */
                mx[i] = v;
        }
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            float e = expf(x[d * inner + i] - mx[i]);
            y[d * inner + i] = e;
            sm[i] += e;
        }
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            y[d * inner + i] = (float)(y[d * inner + i] / sm[i]);
}

/* (x - max) - log(sum(exp(x - max))), PyTorch's order of operations. */
static void log_softmax_block(const float *x, const float *unused, float *y, int64_t len, int64_t inner,
                              int64_t w)
{
    (void)unused;
    float mx[SM_COLS], ls[SM_COLS];
    double sm[SM_COLS];
    for (int64_t i = 0; i < w; i++) {
        mx[i] = -INFINITY;
        sm[i] = 0;
    }
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            float v = x[d * inner + i];
            if (v > mx[i] || v != v)
                mx[i] = v;
        }
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            sm[i] += expf(x[d * inner + i] - mx[i]);
    for (int64_t i = 0; i < w; i++)
        ls[i] = (float)log(sm[i]);
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            y[d * inner + i] = (x[d * inner + i] - mx[i]) - ls[i];
}

/* gx = y * (g - sum(g * y)) */
static void softmax_grad_block(const float *g, const float *y, float *gx, int64_t len, int64_t inner,
                               int64_t w)
{
    double dot[SM_COLS];
    for (int64_t i = 0; i < w; i++)
        dot[i] = 0;
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            dot[i] += (double)g[d * inner + i] * y[d * inner + i];
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            int64_t k = d * inner + i;
            gx[k] = y[k] * (g[k] - (float)dot[i]);
        }
}

/* gx = g - exp(y) * sum(g) */
static void log_softmax_grad_block(const float *g, const float *y, float *gx, int64_t len, int64_t inner,
                                   int64_t w)
{
    double sm[SM_COLS];
    for (int64_t i = 0; i < w; i++)
        sm[i] = 0;
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++)
            sm[i] += g[d * inner + i];
    for (int64_t d = 0; d < len; d++)
        for (int64_t i = 0; i < w; i++) {
            int64_t k = d * inner + i;
            gx[k] = g[k] - expf(y[k]) * (float)sm[i];
        }
}

/* A new tensor of a's shape and dtype dt: fn over every [len] slice of a
 * (and b), computed in f32. */
static amp_tensor *along_dim(const amp_tensor *a, const amp_tensor *b, amp_dtype dt, dim_view v, block_fn fn)
{
    amp_tensor *out = tensor_new(a->shape, dt);
    if (!out)
        return NULL;
    float *ta = NULL, *tb = NULL, *to = NULL;
    const float *fa = tensor_as_f32(a, &ta), *fb = b ? tensor_as_f32(b, &tb) : NULL;
    float *fo = dt == AMP_F32 ? tensor_f32(out) : (to = amp_alloc((size_t)out->numel * sizeof(float)));
    if (fa && (fb || !b) && fo) {
        int64_t per = (v.inner + SM_COLS - 1) / SM_COLS, tasks = v.outer * per;
        bool par = a->numel >= EW_PARALLEL_MIN;
        (void)par; /* used only by the OpenMP pragma */
        OMP_PRAGMA(omp parallel for num_threads(amp_threads()) if (par) schedule(static))
        for (int64_t t = 0; t < tasks; t++) {
            int64_t o = t / per, c0 = (t % per) * SM_COLS;
            int64_t w = v.inner - c0 < SM_COLS ? v.inner - c0 : SM_COLS;
            size_t off = (size_t)(o * v.len * v.inner + c0);
            fn(fa + off, fb ? fb + off : NULL, fo + off, v.len, v.inner, w);
        }
        if (to)
            tensor_store_f32(out, to);
    } else {
        amp_tensor_free(out);
        out = amp_fail_null(AMP_ERR_MEMORY, "out of memory for %lld elements", (long long)a->numel);
    }
    amp_free(ta);
    amp_free(tb);
    amp_free(to);
    return out;
}

static amp_tensor *softmax_like_forward(node *n, block_fn fn)
{
    dim_view v;
    if (!op_require_float(n, 0) || !dim_view_infer(n, &v))
        return NULL;
    amp_tensor *out = along_dim(n->in[0], NULL, n->in[0]->dtype, v, fn);
    if (out && n->needs_grad && op_save(n, 0, out) != AMP_OK) {
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", op_name(n));
    }
    return out;
}

static amp_status softmax_like_backward(node *n, const amp_tensor *gout, amp_tensor **gin, block_fn fn)
{
    dim_view v;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!dim_view_infer(n, &v))
        return fail_status();
    gin[0] = along_dim(gout, n->saved[0], n->in[0]->dtype, v, fn);
    return gin[0] ? AMP_OK : fail_status();
}

amp_tensor *softmax_forward(node *n) { return softmax_like_forward(n, softmax_block); }
amp_tensor *log_softmax_forward(node *n) { return softmax_like_forward(n, log_softmax_block); }

amp_status softmax_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return softmax_like_backward(n, gout, gin, softmax_grad_block);
}

amp_status log_softmax_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return softmax_like_backward(n, gout, gin, log_softmax_grad_block);
}

/* ---------------------------------------------------------- cross_entropy */

static int row_thread(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Row i of the logits [N, C] as f32: x's own row, or widened into buf. */
static const float *logits_row(const amp_tensor *x, int64_t i, int64_t C, float *buf)
{
    if (x->dtype == AMP_F32)
        return tensor_f32(x) + i * C;
    amp_convert((const char *)tensor_ptr(x) + (size_t)(i * C) * amp_dtype_size(x->dtype), x->dtype, buf, AMP_F32,
                (size_t)C);
    return buf;
}

/* Checks logits [N, C] float and labels [N] i32/i64, each label in [0, C)
 * or equal to p.i[0] (ignore_index); returns the number of labels counted
 * or -1 with the error set. */
static int64_t check_labels(const node *n)
{
    const amp_tensor *x = n->in[0], *t = n->in[1];
    if (!cross_entropy_infer(n))
        return -1;
    int64_t N = x->shape.d[0], C = x->shape.d[1], ignore = n->p.i[0], count = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t y = load_i64(tensor_ptr(t), t->dtype, (size_t)i);
        if (y == ignore)
            continue;
        if (y < 0 || y >= C) {
            amp_fail_null(AMP_ERR_ARG, "cross_entropy: label %lld at index %lld is out of range [0, %lld)",
                          (long long)y, (long long)i, (long long)C);
            return -1;
        }
        count++;
    }
    return count;
}

/* p.i[0] = ignore_index. The result is 0-d in the logits' dtype: the mean
 * over counted rows of logsumexp(row) - row[label]; NaN when every label
 * is ignored (0 / 0, as PyTorch). Saves [N, 2] f32: each row's max and
 * log of the sum of exp(x - max). */
amp_tensor *cross_entropy_forward(node *n)
{
    int64_t count = check_labels(n);
    if (count < 0)
        return NULL;
    const amp_tensor *x = n->in[0], *t = n->in[1];
    int64_t N = x->shape.d[0], C = x->shape.d[1], ignore = n->p.i[0];
    const int nt = N * C >= EW_PARALLEL_MIN ? amp_threads() : 1;
    double *loss = amp_alloc((size_t)N * sizeof(double));
    float *rows = amp_alloc((size_t)nt * (size_t)(2 * C) * sizeof(float));
    amp_tensor *stats = n->needs_grad ? tensor_new((amp_shape){2, {N, 2}}, AMP_F32) : NULL;
    amp_tensor *out = tensor_new((amp_shape){0, {0}}, x->dtype);
    if (!loss || !rows || !out || (n->needs_grad && !stats)) {
        amp_free(loss);
        amp_free(rows);
        amp_tensor_free(stats);
        amp_tensor_free(out);
        return amp_fail_null(AMP_ERR_MEMORY, "cross_entropy: out of memory");
    }
    float *st = stats ? tensor_f32(stats) : NULL;
    const simd_row_fns *vec = simd_pick_rows();
    OMP_PRAGMA(omp parallel for num_threads(nt) schedule(static))
    for (int64_t i = 0; i < N; i++) {
        float *buf = rows + (size_t)row_thread() * (size_t)(2 * C);
        const float *row = logits_row(x, i, C, buf);
        float m = -INFINITY;
        double s = 0;
        if (vec) {
            m = vec->max(row, C);
            memcpy(buf + C, row, (size_t)C * sizeof(float));
            s = vec->exp_sum(buf + C, C, m);
        } else {
            for (int64_t c = 0; c < C; c++)
                if (row[c] > m || row[c] != row[c])
                    m = row[c];
            for (int64_t c = 0; c < C; c++)
                s += expf(row[c] - m);
        }
        float ls = (float)log(s);
        if (st) {
            st[2 * i] = m;
            st[2 * i + 1] = ls;
        }
        int64_t y = load_i64(tensor_ptr(t), t->dtype, (size_t)i);
        loss[i] = y == ignore ? 0.0 : (double)ls - ((double)row[y] - (double)m);
    }
    double total = 0;
    for (int64_t i = 0; i < N; i++)
        total += loss[i];
    float v = (float)(total / (double)count);
    amp_convert(&v, AMP_F32, tensor_ptr(out), out->dtype, 1);
    n->saved[0] = stats;
    amp_free(loss);
    amp_free(rows);
    return out;
}

/* d/dx[i, c] = (softmax(x_i)[c] - [c == label_i]) * g / count; 0 for
 * ignored rows. */
amp_status cross_entropy_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    const amp_tensor *x = n->in[0], *t = n->in[1];
    int64_t N = x->shape.d[0], C = x->shape.d[1], ignore = n->p.i[0], count = 0;
    for (int64_t i = 0; i < N; i++)
        count += load_i64(tensor_ptr(t), t->dtype, (size_t)i) != ignore;
    float scale = load_f32(tensor_ptr(gout), gout->dtype, 0) / (float)count;
    const float *st = tensor_f32(n->saved[0]);
    const int nt = N * C >= EW_PARALLEL_MIN ? amp_threads() : 1;
    const size_t es = amp_dtype_size(x->dtype);
    float *rows = amp_alloc((size_t)nt * (size_t)(2 * C) * sizeof(float));
    amp_tensor *g = tensor_new(x->shape, x->dtype);
    if (!rows || !g) {
        amp_free(rows);
        amp_tensor_free(g);
        return amp_set_error(AMP_ERR_MEMORY, "cross_entropy: out of memory in backward");
    }
    const simd_row_fns *vec = simd_pick_rows();
    char *gp = tensor_ptr(g);
    OMP_PRAGMA(omp parallel for num_threads(nt) schedule(static))
    for (int64_t i = 0; i < N; i++) {
        float *buf = rows + (size_t)row_thread() * (size_t)(2 * C);
        int64_t y = load_i64(tensor_ptr(t), t->dtype, (size_t)i);
        const float *row = logits_row(x, i, C, buf);
        float *gr = x->dtype == AMP_F32 ? (float *)gp + i * C : buf + C;
        const float m = st[2 * i], ls = st[2 * i + 1];
        if (y == ignore) {
            for (int64_t c = 0; c < C; c++)
                gr[c] = 0.0f;
        } else {
            /* exp((x - m) - ls): the shift first, then the exponential */
            for (int64_t c = 0; c < C; c++)
                gr[c] = row[c] - m;
            if (vec)
                vec->exp_sum(gr, C, ls);
            else
                for (int64_t c = 0; c < C; c++)
                    gr[c] = expf(gr[c] - ls);
            for (int64_t c = 0; c < C; c++)
                gr[c] = (gr[c] - (c == y ? 1.0f : 0.0f)) * scale;
        }
        if (x->dtype != AMP_F32)
            amp_convert(gr, AMP_F32, gp + (size_t)(i * C) * es, x->dtype, (size_t)C);
    }
    amp_free(rows);
    gin[0] = g;
    return AMP_OK;
}

/* --------------------------------------------------------------- mse_loss */

static void k_sqdiff(float *out, const float *const *in, int64_t n, const void *ctx)
{
    (void)ctx;
    const float *restrict a = in[0], *restrict b = in[1];
    float *restrict o = out;
    for (int64_t j = 0; j < n; j++) {
        float d = a[j] - b[j];
        o[j] = d * d;
    }
}

/* ctx = {norm, g}: norm * (a - b) * g, PyTorch's mse_loss_backward. */
static void k_mse_grad(float *out, const float *const *in, int64_t n, const void *ctx)
{
    const float *restrict a = in[0], *restrict b = in[1];
    float *restrict o = out, norm = ((const float *)ctx)[0], g = ((const float *)ctx)[1];
    for (int64_t j = 0; j < n; j++)
        o[j] = norm * (a[j] - b[j]) * g;
}

/* mean((a - b)^2) as a 0-d tensor of the promoted dtype; the squares are
 * f32, their sum double. */
amp_tensor *mse_loss_forward(node *n)
{
    if (!mse_loss_infer(n))
        return NULL;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    ew_arg args[2] = {ew_arg_of(a), ew_arg_of(b)};
    amp_tensor *sq = ew_new(a->shape, AMP_F32, args, 2, k_sqdiff, NULL);
    if (!sq)
        return NULL;
    ew_arg s = ew_arg_of(sq);
    unsigned all = (1u << a->shape.ndim) - 1u;
    amp_tensor *out = reduce_sum(&s, all, 1.0 / (double)a->numel, (amp_shape){0, {0}},
                                 promote_float(a->dtype, b->dtype));
    amp_tensor_free(sq);
    return out;
}

/* d/da = 2/numel * (a - b) * g, d/db = 2/numel * (b - a) * g, each in its
 * input's dtype. */
amp_status mse_loss_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    const amp_tensor *a = n->in[0];
    float ctx[2] = {(float)(2.0 / (double)a->numel), load_f32(tensor_ptr(gout), gout->dtype, 0)};
    for (int i = 0; i < 2; i++) {
        if (!in_needs_grad(n, i))
            continue;
        ew_arg args[2] = {ew_arg_of(n->in[i]), ew_arg_of(n->in[1 - i])};
        if (!(gin[i] = ew_new(a->shape, n->in[i]->dtype, args, 2, k_mse_grad, ctx)))
            return fail_status();
    }
    return AMP_OK;
}
