/*
 * conv.c (CUDA backend) - the conv2d primitives, forward and backward, as
 * compositions of conv.cu's kernels and cuBLASLt GEMMs (the op itself:
 * src/ops/conv.c; the pools are conv.cu's kernels alone).
 *
 * conv2d is implicit GEMM, laid out as the CPU's: a group of images is
 * lowered to cols [C*kh*kw, cnt*L] (L = Ho*Wo) in the input dtype, one
 * cuBLASLt GEMM W [O, CKK] cols -> acc [O, cnt*L] in f32 (16-bit inputs
 * accumulate in f32 on tensor cores), and one kernel writes acc + bias
 * into y [cnt, O, L], rounding once; a fused relu is one more pass over y
 * (it commutes with the rounding, so the bits equal conv2d then relu).
 * Backward permutes the group's dY into dY' [O, cnt*L] (not needed for a
 * single image: dY_i is already [O, L]); dW [O, CKK] += dY' cols^T runs
 * with beta 1 into one f32 buffer over all groups, rounded once at the
 * end; dcols = W^T dY' in f32, then col2im gathers each input element's
 * sum (no atomics) and rounds once; db sums dY over images and positions
 * in double.
 *
 * Workspaces (columns, products) come from the caching device allocator
 * and go back to it at the end of the call; groups are sized so one
 * call's workspace stays under WS_BUDGET. Nothing waits for the device.
 */
#ifdef AMPC_HAVE_CUDA

#include "backend/cuda/cuda_backend.h"
#include "base/base.h"

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

/* The geometry and the GEMM sizes of the lowering. */
typedef struct {
    int64_t N, O, ckk, l;
    be_conv_geom g;
} cu_conv;

static cu_conv conv_of(const be_conv_geom *b)
{
    return (cu_conv){.N = b->N, .O = b->O, .ckk = b->C * b->kh * b->kw, .l = b->Ho * b->Wo, .g = *b};
}

static const char *at(const void *p, int64_t i, size_t es) { return (const char *)p + (size_t)i * es; }

/* Relu in place over the n elements of y (dt). */
static amp_status relu_in_place(void *y, amp_dtype dt, int64_t n)
{
    const be_pw_plan plan = {.nd = 1, .d = {n}, .st = {{1}}};
    const void *in[1] = {y};
    return cuda_ew(AMP_PW_RELU, y, dt, n, 1, in, &dt, &plan, 0.0f);
}

amp_status cuda_conv2d(const be_conv_geom *bg, const void *x, const void *w, const void *bias, amp_dtype dt,
                       be_epilogue act, void *y)
{
    if (act != BE_EPI_NONE && act != BE_EPI_RELU)
        return amp_set_error(AMP_ERR_ARG, "conv2d: the cuda backend fuses only a relu");
    const cu_conv c = conv_of(bg);
    const size_t es = amp_dtype_size(dt);
    if (c.N * c.O * c.l == 0)
        return AMP_OK;
    const int64_t chw = c.g.C * c.g.H * c.g.W;
    const int64_t cnt = group_size(c.N, (size_t)(c.ckk * c.l) * es + (size_t)(c.O * c.l) * sizeof(float));
    const size_t cols_b = al((size_t)(c.ckk * cnt * c.l) * es), acc_b = al((size_t)(c.O * cnt * c.l) * sizeof(float));
    char *ws = cuda_malloc(cols_b + acc_b);
    if (!ws)
        return amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_MEMORY;
    amp_status st = AMP_OK;
    void *cols = ws;
    float *acc = (float *)(ws + cols_b);
    for (int64_t n0 = 0; n0 < c.N && st == AMP_OK; n0 += cnt) {
        const int64_t k = c.N - n0 < cnt ? c.N - n0 : cnt, ld = k * c.l;
        st = cuda_im2col(at(x, n0 * chw, es), dt, &c.g, k, cols);
        /* acc [O, ld] = W [O, CKK] cols [CKK, ld], f32 */
        if (st == AMP_OK)
            st = cuda_gemm(false, false, c.O, ld, c.ckk, 1.0f, w, c.ckk, 0, cols, ld, 0, 0.0f, acc, ld, 0, 1, dt,
                           AMP_F32);
        if (st == AMP_OK)
            st = cuda_conv_output(acc, c.O, k, c.l, bias, dt, (char *)y + (size_t)(n0 * c.O * c.l) * es, dt);
    }
    cuda_free(ws);
    if (st == AMP_OK && act == BE_EPI_RELU)
        st = relu_in_place(y, dt, c.N * c.O * c.l);
    return st;
}

amp_status cuda_conv2d_backward(const be_conv_geom *bg, const void *gy, const void *x, const void *w, amp_dtype dt,
                                void *dx, void *dwo, void *db)
{
    const cu_conv c = conv_of(bg);
    const bool need_x = dx != NULL, need_w = dwo != NULL;
    const size_t es = amp_dtype_size(dt);
    /* db[o] = the sum of dY [N, O, L] over images and positions */
    amp_status st = db ? cuda_reduce_sum_dims(gy, dt, AMP_SHAPE(c.N, c.O, c.l), 0x5u, 1.0, db, dt, c.O) : AMP_OK;
    if (st != AMP_OK || !(need_x || need_w) || c.O * c.ckk == 0 || c.N * c.l == 0) {
        /* No GEMM to run (no images, no output or input channels): what
         * is left to fill is a sum of nothing, 0. */
        const uint32_t zero = 0;
        if (st == AMP_OK && need_x)
            st = cuda_fill_pattern(dx, c.N * c.g.C * c.g.H * c.g.W, &zero, es);
        if (st == AMP_OK && need_w)
            st = cuda_fill_pattern(dwo, c.O * c.ckk, &zero, es);
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
    /* dW sums over every group in f32: dwo itself when f32. */
    const size_t dw_b = need_w && dt != AMP_F32 ? al((size_t)(c.O * c.ckk) * sizeof(float)) : 0;
    char *ws = cuda_malloc(dyp_b + cols_b + dcols_b + dw_b);
    if (!ws)
        return amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_MEMORY;
    void *dyp = ws, *cols = ws + dyp_b;
    float *dcols = (float *)(ws + dyp_b + cols_b);
    float *dw = !need_w ? NULL : dw_b ? (float *)(ws + dyp_b + cols_b + dcols_b) : (float *)dwo;
    for (int64_t n0 = 0; n0 < c.N && st == AMP_OK; n0 += cnt) {
        const int64_t k = c.N - n0 < cnt ? c.N - n0 : cnt, ld = k * c.l;
        /* dY' [O, k*L]: the group's dY [k, O, L] with its first two dims swapped */
        const void *g = at(gy, n0 * c.O * c.l, es);
        if (k > 1) {
            const int64_t od[3] = {c.O, k, c.l}, ist[3] = {c.l, c.O * c.l, 1};
            st = cuda_permute(g, dyp, es, 3, od, ist);
            g = dyp;
        }
        if (st == AMP_OK && need_w) {
            /* dW [O, CKK] (+)= dY' [O, ld] cols^T [ld, CKK] */
            st = cuda_im2col(at(x, n0 * chw, es), dt, &c.g, k, cols);
            if (st == AMP_OK)
                st = cuda_gemm(false, true, c.O, c.ckk, ld, 1.0f, g, ld, 0, cols, ld, 0, n0 ? 1.0f : 0.0f, dw, c.ckk, 0,
                               1, dt, AMP_F32);
        }
        if (st == AMP_OK && need_x) {
            /* dcols [CKK, ld] = W^T [CKK, O] dY' [O, ld], then back onto the images */
            st = cuda_gemm(true, false, c.ckk, ld, c.O, 1.0f, w, c.ckk, 0, g, ld, 0, 0.0f, dcols, ld, 0, 1, dt,
                           AMP_F32);
            if (st == AMP_OK)
                st = cuda_col2im(dcols, &c.g, k, (char *)dx + (size_t)(n0 * chw) * es, dt);
        }
    }
    if (st == AMP_OK && dw_b)
        st = cuda_convert(dw, AMP_F32, dwo, dt, c.O * c.ckk);
    cuda_free(ws);
    return st;
}

#else
typedef int ampc_backend_cuda_conv_unused; /* ISO C wants a declaration in every file */
#endif
