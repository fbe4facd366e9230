/*
 * conv.c (CUDA) - conv2d, max_pool2d and avg_pool2d on CUDA tensors,
 * forward and backward, with the checks, messages, result shapes and
 * saved tensors of src/ops/conv.c and pool.c.
 *
 * conv2d is implicit GEMM, laid out as the CPU's: a group of images is
 * lowered to cols [C*kh*kw, cnt*L] (L = Ho*Wo) in the input dtype, one
 * cuBLASLt GEMM W [O, CKK] cols -> acc [O, cnt*L] in f32 (16-bit inputs
 * accumulate in f32 on tensor cores), and one kernel writes acc + bias
 * into y [cnt, O, L], rounding once. Backward permutes the group's dY
 * into dY' [O, cnt*L] (not needed for a single image: dY_i is already
 * [O, L]); dW [O, CKK] += dY' cols^T runs with beta 1 into one f32 buffer
 * over all groups, rounded once at the end; dcols = W^T dY' in f32, then
 * col2im gathers each input element's sum (no atomics) and rounds once;
 * db sums dY over images and positions in double (cu_reduce).
 *
 * Workspaces (columns, products) come from the caching device allocator
 * and go back to it at the end of the call; groups are sized so one
 * call's workspace stays under WS_BUDGET. Nothing waits for the device.
 *
 * max_pool2d saves each window's argmax as an i32 CUDA tensor of offsets
 * within the H x W plane, as the CPU does; backward gathers per input
 * element, so no atomics there either.
 *
 * The shape checks repeat conv.c's conv_geom_make and pool.c's
 * pool_geom_make (static there) word for word; they would belong in
 * src/ops/infer.c beside the other ops' shared inference.
 */
#ifdef AMPC_HAVE_CUDA

#include "ops/cuda/cuda_ops.h"
#include "ops/infer.h"

#include <stdio.h>

/* Workspace per call: enough for the CNN benchmarks' whole batch in one
 * group, small next to a GPU's memory. */
#define WS_BUDGET ((size_t)256 << 20)

/* Sizes rounded to 256 bytes, so every workspace part starts as aligned as
 * cuBLASLt's fastest kernels want. */
static size_t al(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* Images per group when each takes per bytes of workspace. */
static int64_t group_size(int64_t N, size_t per)
{
    int64_t cnt = per ? (int64_t)(WS_BUDGET / per) : N;
    return cnt < 1 ? 1 : cnt > N ? N : cnt;
}

/* --------------------------------------------------------------- conv2d */

typedef struct {
    int64_t N, O, ckk, l;
    bool bias;
    cuda_conv_geom g;
} cu_conv;

/* The shared geometry (src/ops/infer.c) in the kernels' form. */
static bool conv_geom(const node *n, cu_conv *c)
{
    conv2d_shape sh;
    if (!conv2d_infer(n, &sh))
        return false;
    c->N = sh.N, c->O = sh.O, c->ckk = sh.ckk, c->l = sh.l, c->bias = sh.bias;
    c->g = (cuda_conv_geom){0};
    c->g.C = sh.C, c->g.H = sh.H, c->g.W = sh.W, c->g.kh = sh.kh, c->g.kw = sh.kw;
    c->g.stride = sh.s, c->g.pad = sh.p, c->g.Ho = sh.Ho, c->g.Wo = sh.Wo;
    return true;
}

static const char *elem(const amp_tensor *t, int64_t i)
{
    return (const char *)tensor_ptr(t) + (size_t)i * amp_dtype_size(t->dtype);
}

amp_tensor *cu_conv2d_forward(node *n)
{
    cu_conv c;
    if (!same_float_dtypes(n) || !conv_geom(n, &c))
        return NULL;
    if (n->p.i[3] != 0) /* p.i[3]: a relu fused in, a CPU (oneDNN post-op) form only, as linear's */
        return op_fail_shapes(n, "a fused activation is not supported on cuda");
    const amp_tensor *x = n->in[0], *w = n->in[1], *b = c.bias ? n->in[2] : NULL;
    const amp_dtype dt = x->dtype;
    const size_t es = amp_dtype_size(dt);
    amp_tensor *y = cu_new(AMP_SHAPE(c.N, c.O, c.g.Ho, c.g.Wo), dt);
    if (!y || y->numel == 0)
        return y;
    const int64_t chw = c.g.C * c.g.H * c.g.W;
    const int64_t cnt = group_size(c.N, (size_t)(c.ckk * c.l) * es + (size_t)(c.O * c.l) * sizeof(float));
    const size_t cols_b = al((size_t)(c.ckk * cnt * c.l) * es), acc_b = al((size_t)(c.O * cnt * c.l) * sizeof(float));
    char *ws = cuda_malloc(cols_b + acc_b);
    amp_status st = ws ? AMP_OK : fail_status();
    void *cols = ws;
    float *acc = ws ? (float *)(ws + cols_b) : NULL;
    for (int64_t n0 = 0; n0 < c.N && st == AMP_OK; n0 += cnt) {
        const int64_t k = c.N - n0 < cnt ? c.N - n0 : cnt, ld = k * c.l;
        st = cuda_im2col(elem(x, n0 * chw), dt, &c.g, k, cols);
        /* acc [O, ld] = W [O, CKK] cols [CKK, ld], f32 */
        if (st == AMP_OK)
            st = cuda_gemm(false, false, c.O, ld, c.ckk, 1.0f, tensor_ptr(w), c.ckk, 0, cols, ld, 0, 0.0f, acc, ld, 0,
                           1, dt, AMP_F32);
        if (st == AMP_OK)
            st = cuda_conv_output(acc, c.O, k, c.l, b ? tensor_ptr(b) : NULL, dt,
                                  (char *)tensor_ptr(y) + (size_t)(n0 * c.O * c.l) * es, dt);
    }
    cuda_free(ws);
    if (st != AMP_OK) {
        amp_tensor_free(y);
        return NULL;
    }
    return y;
}

amp_status cu_conv2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    cu_conv c;
    if (!conv_geom(n, &c))
        return amp_last_status();
    const bool need_x = in_needs_grad(n, 0), need_w = in_needs_grad(n, 1), need_b = c.bias && in_needs_grad(n, 2);
    const amp_tensor *x = n->in[0], *w = n->in[1];
    const amp_dtype dt = x->dtype;
    const size_t es = amp_dtype_size(dt);
    if ((need_x && !(gin[0] = cu_new(x->shape, dt))) || (need_w && !(gin[1] = cu_new(w->shape, dt))))
        return fail_status();
    /* The GEMMs take dY in the inputs' dtype (the engine hands it so; else a converted copy). */
    amp_tensor *gconv = gout->dtype == dt ? NULL : tensor_convert(gout, dt);
    if (gout->dtype != dt && !gconv)
        return fail_status();
    const amp_tensor *gy = gconv ? gconv : gout;
    amp_status st = AMP_OK;
    if (need_b) {
        /* db[o] = the sum of dY [N, O, L] over images and positions */
        cu_arg a = {tensor_ptr(gy), dt, {3, {c.N, c.O, c.l}}};
        if (!(gin[2] = cu_reduce(&a, 0x5u, 1.0, n->in[2]->shape, n->in[2]->dtype)))
            st = fail_status();
    }
    if (st != AMP_OK || !(need_x || need_w) || c.O * c.ckk == 0 || c.N * c.l == 0) {
        /* No GEMM to run (no images, no output or input channels): what
         * is left to fill is a sum of nothing, 0. */
        const uint32_t zero = 0;
        for (int i = 0; i < 2 && st == AMP_OK; i++)
            if (gin[i] && gin[i]->numel)
                st = cuda_fill_pattern(tensor_ptr(gin[i]), gin[i]->numel, &zero, es);
        amp_tensor_free(gconv);
        return st;
    }
    const int64_t chw = c.g.C * c.g.H * c.g.W;
    /* Per image: dY', its columns (for dW), their gradient (for dX). */
    const size_t per = (size_t)(c.O * c.l) * es + (need_w ? (size_t)(c.ckk * c.l) * es : 0) +
                       (need_x ? (size_t)(c.ckk * c.l) * sizeof(float) : 0);
    const int64_t cnt = group_size(c.N, per);
    const size_t dyp_b = cnt > 1 ? al((size_t)(c.O * cnt * c.l) * es) : 0;
    const size_t cols_b = need_w ? al((size_t)(c.ckk * cnt * c.l) * es) : 0;
    const size_t dcols_b = need_x ? al((size_t)(c.ckk * cnt * c.l) * sizeof(float)) : 0;
    /* dW sums over every group in f32: gin[1] itself when f32. */
    const size_t dw_b = need_w && dt != AMP_F32 ? al((size_t)(c.O * c.ckk) * sizeof(float)) : 0;
    char *ws = cuda_malloc(dyp_b + cols_b + dcols_b + dw_b);
    if (!ws) {
        amp_tensor_free(gconv);
        return fail_status();
    }
    void *dyp = ws, *cols = ws + dyp_b;
    float *dcols = (float *)(ws + dyp_b + cols_b);
    float *dw = !need_w ? NULL : dw_b ? (float *)(ws + dyp_b + cols_b + dcols_b) : tensor_f32(gin[1]);
    for (int64_t n0 = 0; n0 < c.N && st == AMP_OK; n0 += cnt) {
        const int64_t k = c.N - n0 < cnt ? c.N - n0 : cnt, ld = k * c.l;
        /* dY' [O, k*L]: the group's dY [k, O, L] with its first two dims swapped */
        const void *g = elem(gy, n0 * c.O * c.l);
        if (k > 1) {
            const int64_t od[3] = {c.O, k, c.l}, ist[3] = {c.l, c.O * c.l, 1};
            st = cuda_permute(g, dyp, es, 3, od, ist);
            g = dyp;
        }
        if (st == AMP_OK && need_w) {
            /* dW [O, CKK] (+)= dY' [O, ld] cols^T [ld, CKK] */
            st = cuda_im2col(elem(x, n0 * chw), dt, &c.g, k, cols);
            if (st == AMP_OK)
                st = cuda_gemm(false, true, c.O, c.ckk, ld, 1.0f, g, ld, 0, cols, ld, 0, n0 ? 1.0f : 0.0f, dw, c.ckk, 0,
                               1, dt, AMP_F32);
        }
        if (st == AMP_OK && need_x) {
            /* dcols [CKK, ld] = W^T [CKK, O] dY' [O, ld], then back onto the images */
            st = cuda_gemm(true, false, c.ckk, ld, c.O, 1.0f, tensor_ptr(w), c.ckk, 0, g, ld, 0, 0.0f, dcols, ld, 0, 1,
                           dt, AMP_F32);
            if (st == AMP_OK)
                st = cuda_col2im(dcols, &c.g, k, (char *)tensor_ptr(gin[0]) + (size_t)(n0 * chw) * es, dt);
        }
    }
    if (st == AMP_OK && dw_b)
        st = cuda_convert(dw, AMP_F32, tensor_ptr(gin[1]), dt, gin[1]->numel);
    cuda_free(ws);
    amp_tensor_free(gconv);
    return st;
}

/* ---------------------------------------------------------------- pools */

/* The shared geometry (src/ops/infer.c) in the kernels' form. */
static bool pool_geom(const node *n, cuda_pool_geom *g)
{
    pool_shape sh;
    if (!pool_infer(n, &sh))
        return false;
    *g = (cuda_pool_geom){sh.planes, sh.H, sh.W, sh.k, sh.s, sh.p, sh.Ho, sh.Wo};
    return true;
}

static amp_tensor *pool_forward(node *n, bool is_max)
{
    cuda_pool_geom g;
    if (!pool_geom(n, &g))
        return NULL;
    const amp_tensor *x = n->in[0];
    amp_shape os = x->shape;
    os.d[os.ndim - 2] = g.Ho;
    os.d[os.ndim - 1] = g.Wo;
    amp_tensor *y = cu_new(os, x->dtype);
    amp_tensor *idx = is_max && n->needs_grad ? cu_new(os, AMP_I32) : NULL;
    if (!y || (is_max && n->needs_grad && !idx) ||
        cuda_pool2d(tensor_ptr(x), x->dtype, &g, is_max, tensor_ptr(y), idx ? (int32_t *)tensor_ptr(idx) : NULL) !=
            AMP_OK) {
        amp_tensor_free(y);
        amp_tensor_free(idx);
        return NULL;
    }
    if (idx)
        n->saved[0] = idx;
    return y;
}

static amp_status pool_backward(node *n, const amp_tensor *gout, amp_tensor **gin, bool is_max)
{
    cuda_pool_geom g;
    if (!in_needs_grad(n, 0))
        return AMP_OK;
    if (!pool_geom(n, &g))
        return amp_last_status();
    if (is_max && !n->saved[0])
        return amp_set_error(AMP_ERR_STATE, "%s: backward without saved indices", op_name(n));
    const amp_tensor *x = n->in[0];
    if (!(gin[0] = cu_new(x->shape, x->dtype)))
        return fail_status();
    return cuda_pool2d_backward(tensor_ptr(gout), gout->dtype,
                                is_max ? (const int32_t *)tensor_ptr(n->saved[0]) : NULL, &g, tensor_ptr(gin[0]),
                                x->dtype);
}

amp_tensor *cu_max_pool2d_forward(node *n) { return pool_forward(n, true); }
amp_tensor *cu_avg_pool2d_forward(node *n) { return pool_forward(n, false); }

amp_status cu_max_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return pool_backward(n, gout, gin, true);
}

amp_status cu_avg_pool2d_backward(node *n, const amp_tensor *gout, amp_tensor **gin)
{
    return pool_backward(n, gout, gin, false);
}

#else
typedef int ampc_ops_cuda_conv_unused; /* ISO C wants a declaration in every file */
#endif
