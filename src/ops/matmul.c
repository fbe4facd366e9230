/*
 * matmul.c - matmul and linear, forward and backward, on the CPU GEMM.
 *
 * matmul follows torch.matmul for the shapes ampc supports:
 *   a [.., M, K] @ b [K, N]       leading dims of a fold into M (one GEMM)
 *   a [B.., M, K] @ b [B.., K, N] identical batch dims (one GEMM per batch)
 *   a [M, K] @ b [B.., K, N]      a shared by every batch
 *   a 1-D [K] acts as [1, K] and b 1-D [K] as [K, 1]; the added dim is
 *   dropped from the result, as PyTorch does.
 * Anything else (batch dims that would need broadcasting) is an error that
 * names both shapes. Both inputs must have the same dtype, as in PyTorch
 * outside autocast (autocast casts them first).
 *
 * linear(x [.., in], w [out, in], bias [out]) = x w^T + bias, optionally
 * followed by a fused relu (nn's Linear + ReLU pairs): one gemm_batched
 * call, where oneDNN adds the bias and applies the relu as post-ops, or
 * ampc's own GEMM adds onto bias rows (beta = 1) and a relu pass follows;
 * either way a 16-bit result is rounded once. Or by a fused gelu (tanh;
 * the GPT's fc1): the same GEMM as plain linear into the pre-activation,
 * kept for backward, then the gelu op's own forward and backward kernels,
 * so that the values and gradients are those of the two ops bit for bit
 * (the fusion pays on CUDA, where the GELU is a cuBLASLt epilogue).
 *
 * 16-bit tensors go through gemm_batched / gemm_lowp: f32 accumulation,
 * one rounding per output. Every gradient comes out in its input's dtype.
 */
#include "backend/cpu/gemm.h"
#include "ops/infer.h"

#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------ matmul */

static const char *at(const amp_tensor *t, int64_t elem)
{
    return (const char *)tensor_ptr(t) + (size_t)elem * amp_dtype_size(t->dtype);
}

/* Runs batch GEMMs, spread over threads when there are several (each
 * GEMM then runs on one thread). out_i = op(x_i) op(y_i), all in dt. */
typedef struct {
    bool tx, ty;
    int64_t M, N, K;
    const void *x, *y;
    int64_t ldx, ldy, sx, sy;
    void *c;
    int64_t ldc, sc;
    amp_dtype dt, c_dt;
    float beta;
} batched;

static amp_status run_batched(const batched *g, int64_t batch, const char *op)
{
    if (gemm_batched(g->tx, g->ty, batch, g->M, g->N, g->K, g->x, g->dt, g->ldx, g->sx, g->y, g->dt, g->ldy, g->sy,
                     g->beta, g->c, g->c_dt, g->ldc, g->sc, NULL, CPU_ACT_NONE) != AMP_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", amp_last_error());
        return amp_set_error(amp_last_status(), "%s: %s", op, why);
    }
    return AMP_OK;
}

amp_tensor *matmul_forward(node *n)
{
    mm_plan pl;
    if (!same_float_dtypes(n) || !matmul_infer(n, &pl))
        return NULL;
    const amp_tensor *a = n->in[0], *b = n->in[1];
    amp_tensor *out = tensor_new(pl.out, a->dtype);
    if (!out)
        return NULL;
    batched g = {false, false, pl.M, pl.N, pl.K, tensor_ptr(a), tensor_ptr(b), pl.K, pl.N, pl.sa,
                 pl.sb, tensor_ptr(out), pl.N, pl.M * pl.N, a->dtype, a->dtype, 0.0f};
    if (run_batched(&g, pl.batch, op_name(n)) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* dA = dC B^T and dB = A^T dC per batch; a shared a (sa == 0, batch > 1)
 * sums its gradient over the batches in f32 before rounding. */
amp_status matmul_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    mm_plan pl;
    if (!matmul_infer(n, &pl))
        return amp_last_status();
    const amp_tensor *a = n->in[0], *b = n->in[1];
    amp_dtype dt = a->dtype;
    if (in_needs_grad(n, 0)) {
        gin[0] = tensor_new(a->shape, dt);
        if (!gin[0])
            return amp_last_status();
        batched g = {false, true, pl.M, pl.K, pl.N, tensor_ptr(gout), tensor_ptr(b), pl.N, pl.N,
                     pl.M * pl.N, pl.sb, tensor_ptr(gin[0]), pl.K, pl.sa, dt, dt, 0.0f};
        amp_status st;
        if (pl.sa == 0 && pl.batch > 1) {
            float *acc = amp_alloc((size_t)(pl.M * pl.K) * sizeof(float));
            if (!acc)
                return amp_last_status();
            st = AMP_OK;
            for (int64_t k = 0; k < pl.batch && st == AMP_OK; k++)
                st = gemm_lowp(false, true, pl.M, pl.K, pl.N, 1.0f, at(gout, k * pl.M * pl.N), dt,
                               pl.N, at(b, k * pl.sb), dt, pl.N, k ? 1.0f : 0.0f, acc, AMP_F32, pl.K);
            if (st == AMP_OK)
                tensor_store_f32(gin[0], acc);
            amp_free(acc);
        } else {
            st = run_batched(&g, pl.batch, op_name(n));
        }
        if (st != AMP_OK)
            return st;
    }
    if (in_needs_grad(n, 1)) {
        gin[1] = tensor_new(b->shape, dt);
        if (!gin[1])
            return amp_last_status();
        batched g = {true, false, pl.K, pl.N, pl.M, tensor_ptr(a), tensor_ptr(gout), pl.K, pl.N,
                     pl.sa, pl.M * pl.N, tensor_ptr(gin[1]), pl.N, pl.sb, dt, dt, 0.0f};
        amp_status st = run_batched(&g, pl.batch, op_name(n));
        if (st != AMP_OK)
            return st;
    }
    return AMP_OK;
}

/* ------------------------------------------------------------ linear */

/* p.i[1]: the activation fused after the product: 1 = relu, an epilogue
 * of the GEMM (op_linear_relu, nn's Linear + ReLU pairs); 2 = gelu with
 * the tanh approximation (op_linear_gelu, the GPT's fc1 + gelu). */
static cpu_act lin_act(const node *n) { return n->p.i[1] == 1 ? CPU_ACT_RELU : CPU_ACT_NONE; }
static bool lin_gelu(const node *n) { return n->p.i[1] == 2; }

/* A gelu (tanh) node over the one input in[0] (the array must outlive the
 * node), so that the fused gelu runs the gelu op's own kernels
 * (gelu_forward / gelu_backward in elementwise.c), not a copy of its
 * formulas. */
static node gelu_node(const amp_tensor **in)
{
    node g;
    memset(&g, 0, sizeof g);
    g.op = OP_GELU;
    g.n_in = 1;
    g.in = (amp_tensor **)in;
    g.p.i[0] = AMP_GELU_TANH;
    g.out_shape = in[0]->shape;
    g.out_dtype = in[0]->dtype;
    return g;
}

amp_tensor *linear_forward(node *n)
{
    lin_plan pl;
    if (!same_float_dtypes(n) || !linear_infer(n, &pl))
        return NULL;
    if (n->p.i[1] < 0 || n->p.i[1] > 2)
        return op_fail_shapes(n, "unknown fused activation");
    const amp_tensor *x = n->in[0], *w = n->in[1];
    amp_shape os = x->shape;
    os.d[os.ndim - 1] = pl.out;
    amp_tensor *y = tensor_new(os, x->dtype);
    if (!y)
        return NULL;
    if (gemm_batched(false, true, 1, pl.rows, pl.out, pl.in, tensor_ptr(x), x->dtype, pl.in, 0, tensor_ptr(w),
                     w->dtype, pl.in, 0, 0.0f, tensor_ptr(y), y->dtype, pl.out, 0,
                     lin_has_bias(n) ? tensor_ptr(n->in[2]) : NULL, lin_act(n)) != AMP_OK ||
        (lin_act(n) != CPU_ACT_NONE && n->needs_grad && op_save(n, 0, y) != AMP_OK)) {
        amp_tensor_free(y);
        return NULL;
    }
    if (!lin_gelu(n))
        return y;
    /* y is the pre-activation: gelu of it is the result, and backward
     * reads it (the gelu op keeps its input likewise). */
    const amp_tensor *pre[1] = {y};
    node g = gelu_node(pre);
    amp_tensor *out = gelu_forward(&g);
    if (out && n->needs_grad)
        n->saved[0] = y;
    else
        amp_tensor_free(y);
    return out;
}

/* db[j] = sum over rows of dY[r, j]: f32 sums over fixed blocks of rows
 * (vectorisable, and the same whatever the thread count), added in block
 * order in double. 16-bit rows are widened one at a time. */
static amp_tensor *bias_grad(const amp_tensor *gout, const amp_tensor *bias, int64_t rows, int64_t out)
{
    const int64_t rb = rows / 64 > 32 ? rows / 64 : 32, nrb = rows > 0 ? (rows + rb - 1) / rb : 0;
    const int nt = nrb > 1 && rows * out >= 65536 ? amp_threads() : 1;
    const amp_dtype dt = gout->dtype;
    const size_t es = amp_dtype_size(dt);
    float *part = amp_alloc((size_t)(nrb * out + out) * sizeof(float));
    float *rowbuf = dt == AMP_F32 ? NULL : amp_alloc((size_t)nt * (size_t)out * sizeof(float));
    amp_tensor *db = tensor_new(bias->shape, bias->dtype);
    if (!part || (dt != AMP_F32 && !rowbuf) || !db) {
        amp_free(part);
        amp_free(rowbuf);
        amp_tensor_free(db);
        return NULL;
    }
    const char *g = tensor_ptr(gout);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nrb; b++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *restrict acc = part + b * out;
        memset(acc, 0, (size_t)out * sizeof(float));
        const int64_t r1 = (b + 1) * rb < rows ? (b + 1) * rb : rows;
        for (int64_t r = b * rb; r < r1; r++) {
            const float *restrict row = (const float *)(g + (size_t)(r * out) * es);
            if (rowbuf) {
                float *mine = rowbuf + (size_t)tid * (size_t)out;
                amp_convert(g + (size_t)(r * out) * es, dt, mine, AMP_F32, (size_t)out);
                row = mine;
            }
            for (int64_t j = 0; j < out; j++)
                acc[j] += row[j];
        }
    }
    float *sum = part + nrb * out;
    for (int64_t j = 0; j < out; j++) {
        double s = 0;
        for (int64_t b = 0; b < nrb; b++)
            s += part[b * out + j];
        sum[j] = (float)s;
    }
    tensor_store_f32(db, sum);
    amp_free(part);
    amp_free(rowbuf);
    return db;
}

/* dst [cols, rows] (f32) = the transpose of src [rows, cols] (dtype dt),
 * in tiles that keep both sides in cache. */
static void transpose_widen(const void *src, amp_dtype dt, int64_t rows, int64_t cols, float *dst)
{
    enum { TILE = 32 };
    const size_t es = amp_dtype_size(dt);
    const int64_t rt = (rows + TILE - 1) / TILE;
#pragma omp parallel for num_threads(amp_threads()) if (rows * cols >= 65536) schedule(static)
    for (int64_t bi = 0; bi < rt; bi++) {
        float tile[TILE][TILE];
        const int64_t r0 = bi * TILE, nr = rows - r0 < TILE ? rows - r0 : TILE;
        for (int64_t c0 = 0; c0 < cols; c0 += TILE) {
            const int64_t nc = cols - c0 < TILE ? cols - c0 : TILE;
            for (int64_t r = 0; r < nr; r++)
                amp_convert((const char *)src + (size_t)((r0 + r) * cols + c0) * es, dt, tile[r], AMP_F32,
                            (size_t)nc);
            for (int64_t c = 0; c < nc; c++)
                for (int64_t r = 0; r < nr; r++)
                    dst[(c0 + c) * rows + r0 + r] = tile[r][c];
        }
    }
}

static amp_status linear_grads(const node *n, const lin_plan *pl_, const amp_tensor *gout, amp_tensor **gin)
{
    const lin_plan pl = *pl_;
    const amp_tensor *x = n->in[0], *w = n->in[1];
    amp_dtype dt = x->dtype;
    if (in_needs_grad(n, 0)) {
        /* dX [rows, in] = dY [rows, out] W [out, in] */
        gin[0] = tensor_new(x->shape, dt);
        if (!gin[0] || gemm_lowp(false, false, pl.rows, pl.in, pl.out, 1.0f, tensor_ptr(gout), dt,
                                 pl.out, tensor_ptr(w), dt, pl.in, 0.0f, tensor_ptr(gin[0]), dt,
                                 pl.in) != AMP_OK)
            return amp_last_status();
    }
    if (in_needs_grad(n, 1)) {
        /* dW [out, in] = dY^T [out, rows] X [rows, in]. An f16 dY^T is
         * widened and transposed up front (the widening GEMM would widen
         * its transposed panels a dozen elements at a time), unless the
         * product runs on the f16 split kernel, which packs it as it is. */
        gin[1] = tensor_new(w->shape, dt);
        if (!gin[1])
            return amp_last_status();
        float *gt = NULL;
        if (dt == AMP_F16 && !gemm_f16_split_active(pl.out, pl.in, pl.rows) &&
            !(gt = amp_alloc((size_t)(pl.rows * pl.out) * sizeof(float))))
            return amp_last_status();
        if (gt)
            transpose_widen(tensor_ptr(gout), dt, pl.rows, pl.out, gt);
        amp_status st = gt ? gemm_lowp(false, false, pl.out, pl.in, pl.rows, 1.0f, gt, AMP_F32, pl.rows,
                                       tensor_ptr(x), dt, pl.in, 0.0f, tensor_ptr(gin[1]), dt, pl.in)
                           : gemm_lowp(true, false, pl.out, pl.in, pl.rows, 1.0f, tensor_ptr(gout), dt, pl.out,
                                       tensor_ptr(x), dt, pl.in, 0.0f, tensor_ptr(gin[1]), dt, pl.in);
        amp_free(gt);
        if (st != AMP_OK)
            return st;
    }
    if (lin_has_bias(n) && in_needs_grad(n, 2)) {
        gin[2] = bias_grad(gout, n->in[2], pl.rows, pl.out);
        if (!gin[2])
            return amp_last_status();
    }
    return AMP_OK;
}

/* dpre = gout * gelu'(pre) in gout's dtype, by the gelu op's backward
 * (which reads its input, here the saved pre-activation). */
static amp_tensor *gelu_grad_of_pre(const node *n, const amp_tensor *gout)
{
    const amp_tensor *pre = n->saved[0];
    if (!pre)
        return amp_fail_null(AMP_ERR_STATE, "%s: the fused gelu's pre-activation was not saved", op_name(n));
    if (pre->numel != gout->numel || pre->dtype != gout->dtype)
        return amp_fail_null(AMP_ERR_STATE, "%s: gradient %s [%lld] for a pre-activation %s [%lld]", op_name(n),
                             amp_dtype_name(gout->dtype), (long long)gout->numel, amp_dtype_name(pre->dtype),
                             (long long)pre->numel);
    /* gelu_backward computes the gradient only for an input that requires
     * one: a stack copy of the saved tensor's header says so, without
     * touching the saved tensor (nothing keeps the copy). */
    amp_tensor v = *pre;
    v.requires_grad = true;
    v.grad = NULL;
    v.grad_fn = NULL;
    const amp_tensor *in[1] = {&v};
    node g = gelu_node(in);
    amp_tensor *gin[1] = {NULL};
    if (gelu_backward(&g, gout, gin) != AMP_OK) {
        amp_tensor_free(gin[0]);
        return NULL;
    }
    return gin[0];
}

amp_status linear_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    lin_plan pl;
    if (!linear_infer(n, &pl))
        return amp_last_status();
    amp_tensor *masked = NULL;
    if (lin_act(n) == CPU_ACT_RELU) {
        /* Through the fused relu first: dY where the output is > 0. */
        if (!n->saved[0] || !(masked = relu_grad_from_output(gout, n->saved[0])))
            return n->saved[0] ? amp_last_status()
                               : amp_set_error(AMP_ERR_STATE, "%s: the fused relu's output was not saved", op_name(n));
        gout = masked;
    } else if (lin_gelu(n)) {
        /* Through the fused gelu first. */
        if (!(masked = gelu_grad_of_pre(n, gout)))
            return amp_last_status();
        gout = masked;
    }
    amp_status st = linear_grads(n, &pl, gout, gin);
    amp_tensor_free(masked);
    return st;
}
