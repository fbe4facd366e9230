/*
 * onednn_gemm.c - GEMMs through oneDNN's matmul primitive, with bias,
 * scales and activation fused as post-ops (see onednn.h for the contract).
 *
 * ampc's row-major operands map onto oneDNN memory descriptors by strides
 * alone: a transposed A is the same [M, K] tensor with strides {1, lda},
 * so no operand is ever copied here. A batch of products with a shared
 * operand is one 3-D matmul whose shared side has batch dimension 1
 * (oneDNN broadcasts it).
 *
 * Which products oneDNN should run (AUTO's per-shape rule) is the GEMM
 * dispatcher's choice (gemm/dispatch.c); here a product is run when
 * oneDNN can do it, except in CPU_LIB_OWN mode.
 */
#include "backend/cpu/onednn/onednn.h"

#ifndef AMPC_HAVE_DNNL

bool onednn_gemm(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                 const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                 int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                 const void *bias, amp_dtype bias_dt, cpu_act act, amp_status *st)
{
    (void)trans_a, (void)trans_b, (void)batch, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)a_dt;
    (void)lda, (void)sa, (void)B, (void)b_dt, (void)ldb, (void)sb, (void)beta, (void)C, (void)c_dt, (void)ldc;
    (void)sc, (void)bias, (void)bias_dt, (void)act, (void)st;
    return false;
}

#else

#include "backend/cpu/onednn/onednn_impl.h"
#include "base/base.h"
#include "base/parallel.h"
#include "dtype/dtype.h"

#include <stdlib.h>
#include <string.h>

/* Everything the primitive depends on. Zeroed before filling: its bytes
 * are the cache key. */
typedef struct {
    int64_t batch, M, N, K, lda, ldb, ldc, sa, sb, sc;
    float alpha, beta;
    int trans_a, trans_b, a_dt, b_dt, c_dt, bias_dt, has_bias, threads;
} mm_key;

/* A [rows, cols] operand (transposed: stored [cols, rows] at leading
 * dimension ld), `batch` of them `stride` apart (0: one, shared). */
static bool operand_md(onednn_md *md, const mm_key *k, int64_t rows, int64_t cols, bool trans, int64_t ld,
                       int64_t stride, int dt)
{
    int64_t dims[3], strides[3];
    int nd = 0;
    if (k->batch > 1) {
        dims[nd] = stride ? k->batch : 1;
        strides[nd++] = stride ? stride : rows * cols;
    }
    dims[nd] = rows;
    strides[nd++] = trans ? 1 : ld;
    dims[nd] = cols;
    strides[nd++] = trans ? ld : 1;
    return onednn_md_make(md, nd, dims, onednn_dt((amp_dtype)dt), strides);
}

static bool make_matmul(const void *key, dnnl_primitive_desc_t *pd)
{
    const mm_key *k = key;
    onednn_md a = {0}, b = {0}, c = {0}, bias = {0};
    int64_t bdims[3] = {1, 1, k->N};
    int nd = k->batch > 1 ? 3 : 2;
    dnnl_primitive_attr_t attr = onednn_attr(k->alpha, k->beta);
    bool ok = attr && operand_md(&a, k, k->M, k->K, k->trans_a, k->lda, k->sa, k->a_dt) &&
              operand_md(&b, k, k->K, k->N, k->trans_b, k->ldb, k->sb, k->b_dt) &&
              operand_md(&c, k, k->M, k->N, false, k->ldc, k->sc, k->c_dt) &&
              (!k->has_bias || onednn_md_make(&bias, nd, bdims + (3 - nd), onednn_dt((amp_dtype)k->bias_dt), NULL));
    if (ok) {
#if ONEDNN_V3
        ok = dnnl_matmul_primitive_desc_create(pd, onednn_engine(), a, b, k->has_bias ? bias : NULL, c, attr) ==
             dnnl_success;
#else
        dnnl_matmul_desc_t op;
        ok = dnnl_matmul_desc_init(&op, &a, &b, k->has_bias ? &bias : NULL, &c) == dnnl_success &&
             dnnl_primitive_desc_create(pd, &op, attr, onednn_engine(), NULL) == dnnl_success;
#endif
    }
    onednn_md_drop(&a);
    onednn_md_drop(&b);
    onednn_md_drop(&c);
    onednn_md_drop(&bias);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* What a primitive can take directly: f32, bf16 or f16 on both sides
 * (f16 only where this oneDNN has f16 kernels: the primitive cache finds
 * out), C in f32 or the inputs' dtype. */
static bool direct_dtypes(amp_dtype a, amp_dtype b, amp_dtype c)
{
    if (a != b || !amp_dtype_is_float(a))
        return false;
    return c == AMP_F32 || c == a;
}

/* A stored [rows, cols] matrix at row stride ld as dense f32 (widened in
 * parallel rows); NULL with the error set. */
static float *widen(const void *src, amp_dtype dt, int64_t rows, int64_t cols, int64_t ld)
{
    float *dst = amp_alloc((size_t)(rows * cols) * sizeof(float));
    if (!dst)
        return NULL;
    cvt_rows(src, dt, ld, dst, AMP_F32, cols, rows, cols, rows * cols >= 65536 ? 1 : rows);
    return dst;
}

/* Runs the product of key k on one oneDNN call (its threads: k->threads). */
static bool run_one(const mm_key *k, const void *A, const void *B, void *C, const void *bias, amp_status *st)
{
    onednn_prim p;
    if (!onednn_prim_get(ONEDNN_KIND_MATMUL, k, sizeof *k, make_matmul, &p))
        return false;
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, onednn_mem(&p, dnnl_query_src_md, 0, A)},
        {DNNL_ARG_WEIGHTS, onednn_mem(&p, dnnl_query_weights_md, 0, B)},
        {DNNL_ARG_DST, onednn_mem(&p, dnnl_query_dst_md, 0, C)},
        {DNNL_ARG_BIAS, bias ? onednn_mem(&p, dnnl_query_weights_md, 1, bias) : NULL},
    };
    *st = onednn_run(&p, bias ? 4 : 3, args, "gemm");
    onednn_prim_put(&p);
    return true;
}

/*
 * Split over the pool: oneDNN 2.6 runs a call on libgomp threads, which
 * spin after it for a core, and meet at barriers; beside ampc's own pool
 * they would take the cores from each other (ampc's kernels ran up to 2x
 * slower after a oneDNN call), and with another process on a core a
 * 2-thread call waits for the thread that lost it. So a product that has
 * the threads to itself is cut along the batch, C's rows or C's columns
 * into about 4 chunks a thread, each one oneDNN call on one thread
 * (onednn_threads() is 1 inside a range), handed out by amp_parallel_for:
 * libgomp never starts a team, and a late thread takes fewer chunks. K is
 * never cut, so every output is one call's sum over all of K. Only with
 * beta = 0: a chunk oneDNN declines leaves the caller's kernels to write
 * all of C again, which must not read a half-updated C.
 * AMPC_ONEDNN_SPLIT=0 turns it off (as for the convolutions).
 */
typedef struct {
    onednn_chunks chunks;
    mm_key k;                  /* the whole product's key; per chunk M, N or batch replaced */
    int axis;                  /* 0: batch, 1: rows of C, 2: columns of C */
    const char *A, *B, *bias;
    char *C;
    size_t a_step, b_step, c_step, bias_step; /* bytes per unit along the axis */
    bool relu;                                /* each chunk applies it to its C while in cache */
} mm_split;

static void mm_split_fn(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    mm_split *j = vj;
    if (!onednn_chunks_going(&j->chunks))
        return;
    mm_key k = j->k;
    k.threads = onednn_threads();
    if (j->axis == 0) {
        k.batch = hi - lo;
        if (k.batch == 1)
            k.sa = k.sb = k.sc = 0;
    } else if (j->axis == 1) {
        k.M = hi - lo;
    } else {
        k.N = hi - lo;
    }
    amp_status st = AMP_OK;
    char *c = j->C + (size_t)lo * j->c_step;
    const bool ran = run_one(&k, j->A + (size_t)lo * j->a_step, j->B + (size_t)lo * j->b_step, c,
                             j->bias ? j->bias + (size_t)lo * j->bias_step : NULL, &st);
    if (onednn_chunk_done(&j->chunks, ran, st) && j->relu)
        cpu_relu_rows(c, (amp_dtype)k.c_dt, k.batch, k.M, k.N, k.ldc, k.sc);
}

/* Runs k's product in chunks on the pool when it should (see above),
 * each chunk applying the relu when `relu`: true when it did (*st set),
 * false to run it as one call. */
static bool run_split(const mm_key *k, const void *A, const void *B, void *C, const void *bias, bool relu,
                      amp_status *st)
{
    if (!onednn_split_ok() || k->beta != 0.0f)
        return false;
    const int threads = amp_threads();
    const size_t ea = amp_dtype_size((amp_dtype)k->a_dt), eb = amp_dtype_size((amp_dtype)k->b_dt),
                 ec = amp_dtype_size((amp_dtype)k->c_dt), eh = k->has_bias ? amp_dtype_size((amp_dtype)k->bias_dt) : 0;
    mm_split j = {.k = *k, .A = A, .B = B, .C = C, .bias = bias, .relu = relu};
    const int64_t parts = 4 * (int64_t)threads;
    int64_t units, grain;
    if (k->batch >= 2 * threads) {
        j.axis = 0;
        units = k->batch;
        j.a_step = (size_t)k->sa * ea, j.b_step = (size_t)k->sb * eb, j.c_step = (size_t)k->sc * ec;
        grain = (units + parts - 1) / parts;
    } else if (k->batch == 1 && (k->M >= k->N ? k->M : k->N) >= 64 * threads) {
        /* rows or columns in multiples of 32 (whole register blocks) */
        j.axis = k->M >= k->N ? 1 : 2;
        units = j.axis == 1 ? k->M : k->N;
        grain = ((units + parts - 1) / parts + 31) / 32 * 32;
        if (j.axis == 1) {
            j.a_step = (k->trans_a ? 1 : (size_t)k->lda) * ea;
            j.c_step = (size_t)k->ldc * ec;
        } else {
            j.b_step = (k->trans_b ? (size_t)k->ldb : 1) * eb;
            j.c_step = ec;
            j.bias_step = eh;
        }
    } else {
        return false;
    }
    amp_parallel_for(units, grain, mm_split_fn, &j);
    if (!onednn_chunks_ran(&j.chunks, st))
        return false;
    if (*st != AMP_OK)
        *st = amp_set_error(*st, "gemm: oneDNN failed on a chunk of a %lld x %lld x %lld product", (long long)k->M,
                            (long long)k->N, (long long)k->K);
    return true;
}

static bool run_direct(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                       const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                       int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                       const void *bias, amp_dtype bias_dt, cpu_act act, amp_status *st)
{
    mm_key k;
    memset(&k, 0, sizeof k);
    k.batch = batch;
    k.M = M, k.N = N, k.K = K;
    k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    if (batch > 1)
        k.sa = sa, k.sb = sb, k.sc = sc;
    k.alpha = alpha, k.beta = beta;
    k.trans_a = trans_a, k.trans_b = trans_b;
    k.a_dt = a_dt, k.b_dt = b_dt, k.c_dt = c_dt;
    k.has_bias = bias != NULL;
    k.bias_dt = bias ? bias_dt : 0;
    k.threads = onednn_threads();
    if (run_split(&k, A, B, C, bias, act == CPU_ACT_RELU, st))
        return true;
    if (!run_one(&k, A, B, C, bias, st))
        return false;
    if (*st == AMP_OK && act == CPU_ACT_RELU)
        cpu_relu_rows(C, c_dt, batch, M, N, ldc, sc);
    return true;
}

/*
 * f16 where this oneDNN has no f16 matmul (2.x): the f16 operands (and
 * bias, and C when beta reads it) widened to f32 copies, the f32 primitive,
 * then one rounding into an f16 C. f16 -> f32 is exact, so this is the
 * same f32-accumulated product ampc's own kernels compute. Only when
 * oneDNN is asked for everything (CPU_LIB_ONEDNN): measured on the
 * benchmark models' shapes, the copies eat what oneDNN's faster f32
 * kernels gain (within +-10% of ampc's f16 kernels, which widen while
 * packing), so AUTO leaves f16 to ampc unless oneDNN has f16 kernels of
 * its own (3.x on AVX512-FP16: 304 against 214 GFLOP/s at 256x4096x4096).
 * Single products only.
 */
static bool run_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                        amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt, int64_t ldb, float beta, void *C,
                        amp_dtype c_dt, int64_t ldc, const void *bias, cpu_act act, amp_status *st)
{
    const int64_t ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
    float *a = NULL, *b = NULL, *c = NULL, *bf = NULL;
    bool ok = (a_dt == AMP_F32 || (a = widen(A, a_dt, ar, ac, lda))) &&
              (b_dt == AMP_F32 || (b = widen(B, b_dt, br, bc, ldb))) &&
              (!bias || c_dt == AMP_F32 || (bf = widen(bias, c_dt, 1, N, N))) &&
              (c_dt == AMP_F32 || (c = beta != 0.0f ? widen(C, c_dt, M, N, ldc)
                                                   : amp_alloc((size_t)(M * N) * sizeof(float))));
    bool taken = true;
    if (!ok)
        *st = amp_last_status();
    else
        taken = run_direct(trans_a, trans_b, 1, M, N, K, alpha, a ? a : A, AMP_F32, a ? ac : lda, 0, b ? b : B,
                           AMP_F32, b ? bc : ldb, 0, beta, c ? (void *)c : (void *)C, AMP_F32, c ? N : ldc, 0,
                           bf ? (const void *)bf : bias, AMP_F32, act, st);
    if (ok && taken && *st == AMP_OK && c)
        cvt_rows(c, AMP_F32, N, C, c_dt, ldc, M, N, M * N >= 65536 ? 1 : M);
    amp_free(a), amp_free(b), amp_free(c), amp_free(bf);
    return taken;
}

bool onednn_gemm(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                 const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                 int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                 const void *bias, amp_dtype bias_dt, cpu_act act, amp_status *st)
{
    if (batch < 1 || M <= 0 || N <= 0 || K <= 0 || (bias && alpha != 1.0f) || (batch > 1 && sc == 0) ||
        onednn_mode() == CPU_LIB_OWN)
        return false;
    if (direct_dtypes(a_dt, b_dt, c_dt) &&
        run_direct(trans_a, trans_b, batch, M, N, K, alpha, A, a_dt, lda, sa, B, b_dt, ldb, sb, beta, C, c_dt, ldc,
                   sc, bias, bias_dt, act, st))
        return true;
    /* f16 with f16 or f32, into f16 or f32: widened (bias in C's dtype). */
    bool f16 = (a_dt == AMP_F16 || b_dt == AMP_F16) && (a_dt == AMP_F16 || a_dt == AMP_F32) &&
               (b_dt == AMP_F16 || b_dt == AMP_F32) && (c_dt == AMP_F16 || c_dt == AMP_F32);
    if (!f16 || batch > 1 || (bias && bias_dt != c_dt) || onednn_mode() != CPU_LIB_ONEDNN)
        return false;
    return run_widened(trans_a, trans_b, M, N, K, alpha, A, a_dt, lda, B, b_dt, ldb, beta, C, c_dt, ldc, bias, act,
                       st);
}

#endif /* AMPC_HAVE_DNNL */
