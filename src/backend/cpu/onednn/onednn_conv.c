/*
 * onednn_conv.c - conv2d's forward, input-gradient and weight-gradient
 * passes through oneDNN's convolution primitives (see onednn.h for the
 * contract: false = not taken, the caller runs ampc's own kernel).
 *
 * Layouts: given ampc's plain NCHW / OIHW memory, oneDNN 2.6 runs its
 * im2col + GEMM convolution ("gemm:jit"), slower than ampc's own. Given
 * the layouts of its choosing (format "any"), it picks its direct JIT
 * kernels: blocked (nChw16c-style) activations, AVX-512 for f32 and AMX
 * for bf16, 2-6x faster than its gemm:jit on the benchmark CNN even
 * counting the reorders in and out. So every pass here is: reorder the
 * inputs whose chosen layout is not plain into scratch, run the
 * convolution, reorder the output back into the caller's plain tensor. Each reorder is a
 * primitive of its own, cached like the convolution.
 *
 * When (AUTO mode; numbers in docs/benchmarks.md, measured on this
 * project's machine: 2 cores, AVX-512 + AMX-BF16, the benchmark CNN at
 * batch 128, 1 and 2 threads): oneDNN ran every f32 pass 1.3-2.1x faster
 * than ampc and the bf16 passes of the 32-channel layer 1.3-3.2x faster,
 * but the bf16 passes of the 1-channel first layer 1.2-1.8x slower (its
 * blocked kernels waste most of a channel block there; ampc's im2col
 * GEMM has K = C*kh*kw instead). So bf16 convolutions with fewer than 8
 * input channels stay on ampc's kernels (onednn_wants_conv; with 3 and
 * 4 ampc still won the weight gradient, with 8 oneDNN won both), and so
 * does any shape for which oneDNN only has a kernel below AVX-512
 * (jit:avx2 or gemm-based: f32 weight gradients with 4 to 15 input
 * channels, for one), which ran slower than ampc's (onednn_wants_impl).
 *
 * Numerics: f32 accumulation in both, one rounding into a bf16 output, so
 * the results equal ampc's up to summation order (f16 passes run on the
 * f32 primitive over exact widened copies, see below). bf16 weight gradients
 * accumulate over the whole batch in f32 before their one rounding.
 */
#include "backend/cpu/onednn/onednn.h"

#ifndef AMPC_HAVE_DNNL

bool onednn_conv_forward(const onednn_conv_geom *g, const void *x, const void *w, amp_dtype dt,
                         const void *bias, amp_dtype bias_dt, void *y, amp_dtype y_dt, cpu_act act,
                         amp_status *st)
{
    (void)g, (void)x, (void)w, (void)dt, (void)bias, (void)bias_dt, (void)y, (void)y_dt, (void)act, (void)st;
    return false;
}

bool onednn_conv_backward_data(const onednn_conv_geom *g, const void *dy, const void *w, amp_dtype dt,
                               void *dx, amp_dtype dx_dt, amp_status *st)
{
    (void)g, (void)dy, (void)w, (void)dt, (void)dx, (void)dx_dt, (void)st;
    return false;
}

bool onednn_conv_backward_weights(const onednn_conv_geom *g, const void *x, const void *dy, amp_dtype dt,
                                  void *dw, amp_dtype dw_dt, void *db, amp_dtype db_dt, amp_status *st)
{
    (void)g, (void)x, (void)dy, (void)dt, (void)dw, (void)dw_dt, (void)db, (void)db_dt, (void)st;
    return false;
}

#else

#include "backend/cpu/onednn/onednn_impl.h"
#include "base/base.h"
#include "base/parallel.h"

#include <stdlib.h>
#include <string.h>

typedef enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_WEIGHTS } conv_pass;

/* The three tensors of a pass, in this order: the source side (x or dx),
 * the weights side (w or dw), the destination side (y or dy). */
enum { ROLE_SRC, ROLE_WEI, ROLE_DST, ROLES };

/* Everything a primitive depends on; zeroed before filling, its bytes are
 * the cache key. `role` picks the tensor of a ONEDNN_KIND_CONV_REORDER. */
typedef struct {
    onednn_conv_geom g;
    int pass, dt, out_dt, bias_dt, has_bias, threads, role;
} conv_key;

#if ONEDNN_V3
typedef const_dnnl_memory_desc_t md_ref; /* what dnnl_primitive_desc_query_md gives */
#else
typedef const dnnl_memory_desc_t *md_ref;
#endif

static const dnnl_query_t role_query[3][ROLES] = {
    [PASS_FWD] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
    [PASS_BWD_DATA] = {dnnl_query_diff_src_md, dnnl_query_weights_md, dnnl_query_diff_dst_md},
    [PASS_BWD_WEIGHTS] = {dnnl_query_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md},
};
static const int role_arg[3][ROLES] = {
    [PASS_FWD] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
    [PASS_BWD_DATA] = {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST},
    [PASS_BWD_WEIGHTS] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST},
};
static const int role_out[3] = {[PASS_FWD] = ROLE_DST, [PASS_BWD_DATA] = ROLE_SRC, [PASS_BWD_WEIGHTS] = ROLE_WEI};
static const char *const pass_name[3] = {"conv2d", "conv2d backward (input)", "conv2d backward (weight)"};

/* AUTO, before the primitive is made: bf16 convolutions with few input
 * channels stay on ampc's im2col + AMX GEMM (see the header comment). */
static bool onednn_wants_conv(const conv_key *k)
{
    switch (onednn_mode()) {
    case CPU_LIB_OWN: return false;
    case CPU_LIB_ONEDNN: return true;
    default: break;
    }
    return !(k->dt == AMP_BF16 && k->g.C < 8);
}

/* AUTO, once the primitive is made: only oneDNN's AVX-512 and AMX
 * kernels beat ampc's. */
static bool onednn_wants_impl(const onednn_prim *p)
{
    if (onednn_mode() != CPU_LIB_AUTO)
        return true;
    const char *impl = NULL;
    dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &impl);
    return impl && (strstr(impl, "avx512") || strstr(impl, "amx"));
}

static void role_dims(const onednn_conv_geom *g, int role, int64_t d[4])
{
    const int64_t all[ROLES][4] = {{g->N, g->C, g->H, g->W}, {g->O, g->C, g->KH, g->KW}, {g->N, g->O, g->OH, g->OW}};
    memcpy(d, all[role], sizeof all[role]);
}

/* The output role holds the pass's output dtype, the others its input's. */
static amp_dtype role_dt(const conv_key *k, int role)
{
    return (amp_dtype)(role == role_out[k->pass] ? k->out_dt : k->dt);
}

/* A 4-D descriptor of dtype dt whose layout the primitive chooses. */
static bool md_any(onednn_md *md, const int64_t d[4], amp_dtype dt)
{
    dnnl_dims_t dims = {d[0], d[1], d[2], d[3]};
#if ONEDNN_V3
    *md = NULL;
    return dnnl_memory_desc_create_with_tag(md, 4, dims, onednn_dt(dt), dnnl_format_tag_any) == dnnl_success;
#else
    return dnnl_memory_desc_init_by_tag(md, 4, dims, onednn_dt(dt), dnnl_format_tag_any) == dnnl_success;
#endif
}

/* The forward primitive descriptor a backward one is made against (both
 * generations want it; it only guides the choice of layouts). The
 * backward descriptor keeps copies of what it needs, so the hint is
 * destroyed right after. */
static bool make_hint(const conv_key *k, const dnnl_dims_t str, const dnnl_dims_t dil, const dnnl_dims_t pad,
                      dnnl_primitive_desc_t *hint)
{
    onednn_md md[ROLES] = {0}, bias = {0};
    bool ok = true;
    for (int r = 0; r < ROLES; r++) {
        int64_t d[4];
        role_dims(&k->g, r, d);
        ok = ok && md_any(&md[r], d, (amp_dtype)k->dt);
    }
    ok = ok && (!k->has_bias || onednn_md_make(&bias, 1, &k->g.O, onednn_dt((amp_dtype)k->dt), NULL));
    if (ok) {
#if ONEDNN_V3
        ok = dnnl_convolution_forward_primitive_desc_create(hint, onednn_engine(), dnnl_forward_training,
                                                            dnnl_convolution_direct, md[0], md[1],
                                                            k->has_bias ? bias : NULL, md[2], str, dil, pad, pad,
                                                            NULL) == dnnl_success;
#else
        dnnl_convolution_desc_t op;
        ok = dnnl_dilated_convolution_forward_desc_init(&op, dnnl_forward_training, dnnl_convolution_direct, &md[0],
                                                        &md[1], k->has_bias ? &bias : NULL, &md[2], str, dil, pad,
                                                        pad) == dnnl_success &&
             dnnl_primitive_desc_create(hint, &op, NULL, onednn_engine(), NULL) == dnnl_success;
#endif
    }
    for (int r = 0; r < ROLES; r++)
        onednn_md_drop(&md[r]);
    onednn_md_drop(&bias);
    return ok;
}

/* The convolution's primitive descriptor for k (onednn_make_fn). */
static bool make_conv(const void *key, dnnl_primitive_desc_t *pd)
{
    const conv_key *k = key;
    const onednn_conv_geom *g = &k->g;
    const dnnl_dims_t str = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pad = {g->ph, g->pw};
    onednn_md md[ROLES] = {0}, bias = {0};
    dnnl_primitive_desc_t hint = NULL;
    dnnl_primitive_attr_t attr = onednn_attr(1.0f, 0.0f);
    bool ok = attr != NULL;
    for (int r = 0; r < ROLES; r++) {
        int64_t d[4];
        role_dims(g, r, d);
        ok = ok && md_any(&md[r], d, role_dt(k, r));
    }
    ok = ok && (!k->has_bias || onednn_md_make(&bias, 1, &g->O, onednn_dt((amp_dtype)k->bias_dt), NULL));
    ok = ok && (k->pass == PASS_FWD || make_hint(k, str, dil, pad, &hint));
    if (ok) {
        const dnnl_alg_kind_t alg = dnnl_convolution_direct;
#if ONEDNN_V3
        dnnl_engine_t e = onednn_engine();
        onednn_md b = k->has_bias ? bias : NULL;
        if (k->pass == PASS_FWD)
            ok = dnnl_convolution_forward_primitive_desc_create(pd, e, dnnl_forward_training, alg, md[0], md[1], b,
                                                                md[2], str, dil, pad, pad, attr) == dnnl_success;
        else if (k->pass == PASS_BWD_DATA)
            ok = dnnl_convolution_backward_data_primitive_desc_create(pd, e, alg, md[0], md[1], md[2], str, dil, pad,
                                                                      pad, hint, attr) == dnnl_success;
        else
            ok = dnnl_convolution_backward_weights_primitive_desc_create(pd, e, alg, md[0], md[1], b, md[2], str, dil,
                                                                         pad, pad, hint, attr) == dnnl_success;
#else
        dnnl_convolution_desc_t op;
        const dnnl_memory_desc_t *b = k->has_bias ? &bias : NULL;
        if (k->pass == PASS_FWD)
            ok = dnnl_dilated_convolution_forward_desc_init(&op, dnnl_forward_training, alg, &md[0], &md[1], b,
                                                            &md[2], str, dil, pad, pad) == dnnl_success;
        else if (k->pass == PASS_BWD_DATA)
            ok = dnnl_dilated_convolution_backward_data_desc_init(&op, alg, &md[0], &md[1], &md[2], str, dil, pad,
                                                                  pad) == dnnl_success;
        else
            ok = dnnl_dilated_convolution_backward_weights_desc_init(&op, alg, &md[0], &md[1], b, &md[2], str, dil,
                                                                     pad, pad) == dnnl_success;
        ok = ok && dnnl_primitive_desc_create(pd, &op, attr, onednn_engine(), hint) == dnnl_success;
#endif
    }
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    for (int r = 0; r < ROLES; r++)
        onednn_md_drop(&md[r]);
    onednn_md_drop(&bias);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* The caller's plain (row-major NCHW / OIHW) descriptor of a role. */
static bool plain_md(onednn_md *md, const conv_key *k, int role)
{
    int64_t d[4];
    role_dims(&k->g, role, d);
    return onednn_md_make(md, 4, d, onednn_dt(role_dt(k, role)), NULL);
}

/* The reorder between the caller's plain tensor of k->role and the
 * layout the convolution chose: into it for an input, out of it for the
 * output (onednn_make_fn). The convolution's descriptor is made again
 * here (it is cheap next to the primitive itself) as the cache hands out
 * no descriptor while it makes another. */
static bool make_reorder(const void *key, dnnl_primitive_desc_t *pd)
{
    const conv_key *k = key;
    dnnl_primitive_desc_t conv = NULL;
    onednn_md plain = {0};
    dnnl_primitive_attr_t attr = onednn_attr(1.0f, 0.0f);
    bool ok = attr && make_conv(k, &conv) && plain_md(&plain, k, k->role);
    if (ok) {
        md_ref inner = dnnl_primitive_desc_query_md(conv, role_query[k->pass][k->role], 0);
        if (k->role == role_out[k->pass])
            ok = dnnl_reorder_primitive_desc_create(pd, inner, onednn_engine(), ONEDNN_MD(plain), onednn_engine(),
                                                    attr) == dnnl_success;
        else
            ok = dnnl_reorder_primitive_desc_create(pd, ONEDNN_MD(plain), onednn_engine(), inner, onednn_engine(),
                                                    attr) == dnnl_success;
    }
    if (conv)
        dnnl_primitive_desc_destroy(conv);
    onednn_md_drop(&plain);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* Whether the convolution reads or writes the role's tensor in the
 * caller's plain layout (as it does for a single-channel input, say). */
static bool is_plain(const onednn_prim *conv, const conv_key *k, int role)
{
    onednn_md plain = {0};
    bool same = plain_md(&plain, k, role) &&
                dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(conv->pd, role_query[k->pass][role], 0),
                                       ONEDNN_MD(plain));
    onednn_md_drop(&plain);
    return same;
}

/* Runs the pass k on the caller's plain tensors t[role] (and bias: the
 * bias or its gradient, or NULL): the inputs that the convolution wants
 * blocked go through scratch, and so does the output. False when oneDNN
 * does not take it (nothing touched). */
static bool conv_run(const conv_key *k, void *const t[ROLES], void *bias, amp_status *st)
{
    if (!onednn_wants_conv(k))
        return false;
    onednn_prim conv, reo[ROLES];
    memset(reo, 0, sizeof reo);
    if (!onednn_prim_get(ONEDNN_KIND_CONV, k, sizeof *k, make_conv, &conv))
        return false;
    bool ok = onednn_wants_impl(&conv), blocked[ROLES];
    for (int r = 0; r < ROLES; r++) {
        blocked[r] = !is_plain(&conv, k, r);
        conv_key rk = *k;
        rk.role = r;
        ok = ok && (!blocked[r] || onednn_prim_get(ONEDNN_KIND_CONV_REORDER, &rk, sizeof rk, make_reorder, &reo[r]));
    }
    if (!ok) {
        for (int r = 0; r < ROLES; r++)
            onednn_prim_put(&reo[r]);
        onednn_prim_put(&conv);
        return false;
    }
    const int out = role_out[k->pass];
    const char *what = pass_name[k->pass];
    void *mem[ROLES] = {t[0], t[1], t[2]}, *scratch[ROLES] = {NULL, NULL, NULL};
    *st = AMP_OK;
    for (int r = 0; r < ROLES && *st == AMP_OK; r++) {
        if (!blocked[r])
            continue;
        md_ref md = dnnl_primitive_desc_query_md(conv.pd, role_query[k->pass][r], 0);
        mem[r] = scratch[r] = amp_alloc(dnnl_memory_desc_get_size(md));
        if (!scratch[r])
            *st = amp_set_error(AMP_ERR_MEMORY, "%s: out of memory for oneDNN's layouts", what);
        else if (r != out) {
            dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, onednn_mem(&reo[r], dnnl_query_src_md, 0, t[r])},
                                    {DNNL_ARG_TO, onednn_mem(&reo[r], dnnl_query_dst_md, 0, scratch[r])}};
            *st = onednn_run(&reo[r], 2, a, what);
        }
    }
    if (*st == AMP_OK) {
        dnnl_exec_arg_t a[ROLES + 1];
        int n = 0;
        for (int r = 0; r < ROLES; r++) {
            a[n].arg = role_arg[k->pass][r];
            a[n++].memory = onednn_mem(&conv, role_query[k->pass][r], 0, mem[r]);
        }
        if (bias) {
            a[n].arg = k->pass == PASS_FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS;
            a[n++].memory = onednn_mem(&conv, k->pass == PASS_FWD ? dnnl_query_weights_md : dnnl_query_diff_weights_md,
                                       1, bias);
        }
        *st = onednn_run(&conv, n, a, what);
    }
    if (*st == AMP_OK && blocked[out]) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, onednn_mem(&reo[out], dnnl_query_src_md, 0, scratch[out])},
                                {DNNL_ARG_TO, onednn_mem(&reo[out], dnnl_query_dst_md, 0, t[out])}};
        *st = onednn_run(&reo[out], 2, a, what);
    }
    for (int r = 0; r < ROLES; r++) {
        amp_free(scratch[r]);
        onednn_prim_put(&reo[r]);
    }
    onednn_prim_put(&conv);
    return true;
}

/* The key of a pass; false for what is never handed to oneDNN. */
static bool key_make(conv_key *k, const onednn_conv_geom *g, conv_pass pass, amp_dtype dt, amp_dtype out_dt)
{
    memset(k, 0, sizeof *k);
    if (g->N <= 0 || g->C <= 0 || g->O <= 0 || g->KH <= 0 || g->KW <= 0 || g->OH <= 0 || g->OW <= 0 ||
        g->sh < 1 || g->sw < 1 || g->ph < 0 || g->pw < 0 || g->dh < 1 || g->dw < 1)
        return false;
    /* f32 convolutions in and out; bf16 ones into bf16 or f32. */
    if (!(dt == AMP_F32 && out_dt == AMP_F32) && !(dt == AMP_BF16 && (out_dt == AMP_BF16 || out_dt == AMP_F32)))
        return false;
    k->g = *g;
    k->pass = pass;
    k->dt = dt;
    k->out_dt = out_dt;
    k->threads = onednn_threads();
    return true;
}

/*
 * Batch split (forward and input gradient): oneDNN 2.6 runs its passes on
 * libgomp threads that spin and meet at barriers, so with another process
 * on one of the cores a 2-thread pass waits for the thread that lost its
 * core. Split instead, the images of a pass go to amp_parallel_for in
 * chunks, each chunk one oneDNN call on its own thread (onednn_threads()
 * is 1 inside a range, so those primitives are made for one thread): a
 * late worker takes fewer chunks. Each image's output depends on that
 * image alone, so the values are the same as one call over the batch up
 * to the kernel oneDNN picks for the chunk's size. The weight gradient,
 * a sum over the batch, stays one call. AMPC_ONEDNN_SPLIT=0 turns the
 * split off (one call, oneDNN's own threads).
 */
static bool split_wanted(const onednn_conv_geom *g) { return g->N >= 2 && onednn_split_ok(); }

typedef struct {
    onednn_chunks chunks;
    const conv_key *k;
    char *t[ROLES];
    size_t img[ROLES]; /* bytes per image of each role (0: the weights) */
    void *bias;
} split_job;

static void split_fn(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    split_job *j = vj;
    if (!onednn_chunks_going(&j->chunks))
        return;
    conv_key k = *j->k;
    k.g.N = hi - lo;
    k.threads = onednn_threads();
    void *t[ROLES];
    for (int r = 0; r < ROLES; r++)
        t[r] = j->t[r] + (size_t)lo * j->img[r];
    amp_status st = AMP_OK;
    const bool ran = conv_run(&k, t, j->bias, &st);
    onednn_chunk_done(&j->chunks, ran, st);
}

/* Runs pass k (forward or input gradient) over its batch in chunks on the
 * pool; false when oneDNN declined a chunk (the caller's own kernels then
 * redo the whole pass: every output is written, none accumulated). */
static bool split_run(const conv_key *k, void *const t[ROLES], void *bias, amp_status *st)
{
    if (!onednn_wants_conv(k))
        return false;
    const onednn_conv_geom *g = &k->g;
    const int64_t in_img = g->C * g->H * g->W, out_img = g->O * g->OH * g->OW;
    split_job j = {.k = k, .bias = bias};
    for (int r = 0; r < ROLES; r++)
        j.t[r] = t[r];
    const size_t es = amp_dtype_size(k->dt), oes = amp_dtype_size(k->out_dt);
    if (k->pass == PASS_FWD) { /* x, w, y */
        j.img[ROLE_SRC] = (size_t)in_img * es;
        j.img[ROLE_DST] = (size_t)out_img * oes;
    } else { /* dx, w, dy */
        j.img[ROLE_SRC] = (size_t)in_img * oes;
        j.img[ROLE_DST] = (size_t)out_img * es;
    }
    /* about 4 chunks a thread: a late thread's share moves to the others */
    const int64_t parts = 4 * (int64_t)amp_threads();
    const int64_t chunk = (g->N + parts - 1) / parts;
    amp_parallel_for(g->N, chunk, split_fn, &j);
    if (!onednn_chunks_ran(&j.chunks, st))
        return false;
    if (*st != AMP_OK)
        *st = amp_set_error(*st, "%s: oneDNN failed on a chunk of the batch", pass_name[k->pass]);
    return true;
}

static bool direct_forward(const onednn_conv_geom *g, const void *x, const void *w, amp_dtype dt,
                         const void *bias, amp_dtype bias_dt, void *y, amp_dtype y_dt, cpu_act act,
                         amp_status *st)
{
    conv_key k;
    if (!key_make(&k, g, PASS_FWD, dt, y_dt) || (bias && bias_dt != AMP_F32 && bias_dt != dt))
        return false;
    k.has_bias = bias != NULL;
    k.bias_dt = bias ? bias_dt : 0;
    void *const t[ROLES] = {(void *)x, (void *)w, y};
    if (!(split_wanted(g) ? split_run(&k, t, (void *)bias, st) : conv_run(&k, t, (void *)bias, st)))
        return false;
    if (*st == AMP_OK && act == CPU_ACT_RELU) /* y is [N, O, Ho, Wo]: rows of Ho * Wo */
        cpu_relu_rows(y, y_dt, 1, g->N * g->O, g->OH * g->OW, g->OH * g->OW, 0);
    return true;
}

static bool direct_backward_data(const onednn_conv_geom *g, const void *dy, const void *w, amp_dtype dt,
                               void *dx, amp_dtype dx_dt, amp_status *st)
{
    conv_key k;
    if (!key_make(&k, g, PASS_BWD_DATA, dt, dx_dt))
        return false;
    void *const t[ROLES] = {dx, (void *)w, (void *)dy};
    return split_wanted(g) ? split_run(&k, t, NULL, st) : conv_run(&k, t, NULL, st);
}

/*
 * The weight gradient split the same way: a sum over the batch, so each
 * of a fixed number of chunks of images (2 a thread) writes its own f32
 * partial dW (and db) into scratch, on one oneDNN thread, and the
 * partials are then added in chunk order and rounded once into dw / db.
 * The sum's order depends on the thread count (as oneDNN's own threading
 * does), not on which thread ran which chunk.
 */
typedef struct {
    onednn_chunks chunks;
    const conv_key *k; /* f32 out */
    const char *x, *dy;
    size_t x_img, dy_img;
    int64_t per, N, nw, stride; /* images a chunk, batch, weights, floats a partial */
    float *parts;
} wgrad_job;

static void wgrad_fn(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    wgrad_job *j = vj;
    for (int64_t c = lo; c < hi && onednn_chunks_going(&j->chunks); c++) {
        int64_t i0 = c * j->per, n = j->N - i0 < j->per ? j->N - i0 : j->per;
        conv_key k = *j->k;
        k.g.N = n;
        k.threads = onednn_threads();
        float *part = j->parts + c * j->stride;
        void *const t[ROLES] = {(void *)(j->x + (size_t)i0 * j->x_img), part, (void *)(j->dy + (size_t)i0 * j->dy_img)};
        amp_status st = AMP_OK;
        const bool ran = conv_run(&k, t, k.has_bias ? part + j->nw : NULL, &st);
        onednn_chunk_done(&j->chunks, ran, st);
    }
}

typedef struct {
    const float *parts;
    int64_t chunks, stride;
    void *dw, *db;
    amp_dtype dw_dt, db_dt;
    int64_t nw;
} wsum_job;

static void wsum_fn(void *vj, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const wsum_job *j = vj;
    float buf[256];
    for (int64_t b = lo; b < hi; b += 256) {
        int64_t len = hi - b < 256 ? hi - b : 256;
        for (int64_t i = 0; i < len; i++) {
            float acc = j->parts[b + i];
            for (int64_t c = 1; c < j->chunks; c++)
                acc += j->parts[c * j->stride + b + i];
            buf[i] = acc;
        }
        if (b + len <= j->nw)
            amp_convert(buf, AMP_F32, (char *)j->dw + (size_t)b * amp_dtype_size(j->dw_dt), j->dw_dt, (size_t)len);
        else /* the bias part: [nw, nw + O) */
            amp_convert(buf, AMP_F32, (char *)j->db + (size_t)(b - j->nw) * amp_dtype_size(j->db_dt), j->db_dt,
                        (size_t)len);
    }
}

/* True when it ran the pass in chunks (*st set); false: one call. */
static bool wgrad_split(const conv_key *k, const void *x, const void *dy, void *dw, void *db, amp_dtype dw_dt,
                        amp_dtype db_dt, amp_status *st)
{
    const onednn_conv_geom *g = &k->g;
    const int threads = amp_threads();
    if (!split_wanted(g) || !onednn_wants_conv(k) || g->N < 2 * threads)
        return false;
    conv_key k32 = *k;
    k32.out_dt = AMP_F32;
    if (k32.has_bias)
        k32.bias_dt = AMP_F32;
    const int64_t chunks = 2 * (int64_t)threads, per = (g->N + chunks - 1) / chunks;
    const int64_t used = (g->N + per - 1) / per;
    const int64_t nw = g->O * g->C * g->KH * g->KW, stride = nw + (db ? g->O : 0);
    float *parts = amp_alloc((size_t)(used * stride) * sizeof(float));
    if (!parts)
        return false;
    const size_t es = amp_dtype_size(k->dt);
    wgrad_job j = {.k = &k32, .x = x, .dy = dy, .x_img = (size_t)(g->C * g->H * g->W) * es,
                   .dy_img = (size_t)(g->O * g->OH * g->OW) * es, .per = per, .N = g->N, .nw = nw, .stride = stride,
                   .parts = parts};
    amp_parallel_for(used, 1, wgrad_fn, &j);
    const bool done = onednn_chunks_ran(&j.chunks, st);
    if (done) {
        if (*st == AMP_OK) {
            /* split at nw so a range never straddles dw and db */
            wsum_job w = {parts, used, stride, dw, db, dw_dt, db_dt, nw};
            amp_parallel_for(nw, 4096, wsum_fn, &w);
            if (db) {
                wsum_job wb = w;
                wb.parts = parts + nw;
                wb.nw = 0;
                wb.db = db;
                amp_parallel_for(g->O, g->O, wsum_fn, &wb);
            }
        } else {
            *st = amp_set_error(*st, "%s: oneDNN failed on a chunk of the batch", pass_name[k->pass]);
        }
    }
    amp_free(parts);
    return done;
}

static bool direct_backward_weights(const onednn_conv_geom *g, const void *x, const void *dy, amp_dtype dt,
                                  void *dw, amp_dtype dw_dt, void *db, amp_dtype db_dt, amp_status *st)
{
    conv_key k;
    if (!key_make(&k, g, PASS_BWD_WEIGHTS, dt, dw_dt) || (db && db_dt != AMP_F32 && db_dt != dt))
        return false;
    k.has_bias = db != NULL;
    k.bias_dt = db ? db_dt : 0;
    if (wgrad_split(&k, x, dy, dw, db, dw_dt, db_dt, st))
        return true;
    void *const t[ROLES] = {(void *)x, dw, (void *)dy};
    return conv_run(&k, t, db, st);
}

/*
 * f16: oneDNN 2.x has no f16 convolution, and its f16 <-> f32 reorders
 * are reference loops (50-90 ms for one cnn activation), so f16 tensors
 * are widened here (exactly, ampc's vector conversion) into f32 scratch,
 * the f32 pass runs on them, and the output is rounded once into the
 * caller's f16. The f32 passes beat ampc's own f16 lowering by 1.3-2x
 * each, but the conversions eat most of it: the cnn fp16 step went from
 * 32.6 to 31.0 ms (2 threads), for 27 MB more scratch at the peak.
 */
static float *widen(const void *src, int64_t n)
{
    float *f = amp_alloc((size_t)n * sizeof(float));
    if (f)
        amp_convert(src, AMP_F16, f, AMP_F32, (size_t)n);
    return f;
}

static void narrow(const float *src, void *dst, int64_t n) { amp_convert(src, AMP_F32, dst, AMP_F16, (size_t)n); }

bool onednn_conv_forward(const onednn_conv_geom *g, const void *x, const void *w, amp_dtype dt,
                         const void *bias, amp_dtype bias_dt, void *y, amp_dtype y_dt, cpu_act act,
                         amp_status *st)
{
    if (dt != AMP_F16 || (y_dt != AMP_F16 && y_dt != AMP_F32) || (bias && bias_dt != AMP_F16 && bias_dt != AMP_F32) ||
        onednn_mode() == CPU_LIB_OWN || g->N <= 0)
        return direct_forward(g, x, w, dt, bias, bias_dt, y, y_dt, act, st);
    const int64_t nx = g->N * g->C * g->H * g->W, nw = g->O * g->C * g->KH * g->KW, ny = g->N * g->O * g->OH * g->OW;
    float *x32 = widen(x, nx), *w32 = widen(w, nw);
    float *b32 = bias && bias_dt == AMP_F16 ? widen(bias, g->O) : NULL;
    float *y32 = y_dt == AMP_F16 ? amp_alloc((size_t)ny * sizeof(float)) : NULL;
    bool taken = false;
    if (x32 && w32 && (!bias || bias_dt == AMP_F32 || b32) && (y_dt == AMP_F32 || y32)) {
        taken = direct_forward(g, x32, w32, AMP_F32, b32 ? b32 : bias, AMP_F32, y32 ? (void *)y32 : y, AMP_F32, act,
                               st);
        if (taken && *st == AMP_OK && y32)
            narrow(y32, y, ny);
    }
    amp_free(x32), amp_free(w32), amp_free(b32), amp_free(y32);
    return taken;
}

bool onednn_conv_backward_data(const onednn_conv_geom *g, const void *dy, const void *w, amp_dtype dt,
                               void *dx, amp_dtype dx_dt, amp_status *st)
{
    if (dt != AMP_F16 || (dx_dt != AMP_F16 && dx_dt != AMP_F32) || onednn_mode() == CPU_LIB_OWN || g->N <= 0)
        return direct_backward_data(g, dy, w, dt, dx, dx_dt, st);
    const int64_t nx = g->N * g->C * g->H * g->W, nw = g->O * g->C * g->KH * g->KW, ny = g->N * g->O * g->OH * g->OW;
    float *dy32 = widen(dy, ny), *w32 = widen(w, nw);
    float *dx32 = dx_dt == AMP_F16 ? amp_alloc((size_t)nx * sizeof(float)) : NULL;
    bool taken = false;
    if (dy32 && w32 && (dx_dt == AMP_F32 || dx32)) {
        taken = direct_backward_data(g, dy32, w32, AMP_F32, dx32 ? (void *)dx32 : dx, AMP_F32, st);
        if (taken && *st == AMP_OK && dx32)
            narrow(dx32, dx, nx);
    }
    amp_free(dy32), amp_free(w32), amp_free(dx32);
    return taken;
}

bool onednn_conv_backward_weights(const onednn_conv_geom *g, const void *x, const void *dy, amp_dtype dt,
                                  void *dw, amp_dtype dw_dt, void *db, amp_dtype db_dt, amp_status *st)
{
    if (dt != AMP_F16 || (dw_dt != AMP_F16 && dw_dt != AMP_F32) || (db && db_dt != AMP_F16 && db_dt != AMP_F32) ||
        onednn_mode() == CPU_LIB_OWN || g->N <= 0)
        return direct_backward_weights(g, x, dy, dt, dw, dw_dt, db, db_dt, st);
    const int64_t nx = g->N * g->C * g->H * g->W, nw = g->O * g->C * g->KH * g->KW, ny = g->N * g->O * g->OH * g->OW;
    float *x32 = widen(x, nx), *dy32 = widen(dy, ny);
    float *dw32 = dw_dt == AMP_F16 ? amp_alloc((size_t)nw * sizeof(float)) : NULL;
    float *db32 = db && db_dt == AMP_F16 ? amp_alloc((size_t)g->O * sizeof(float)) : NULL;
    bool taken = false;
    if (x32 && dy32 && (dw_dt == AMP_F32 || dw32) && (!db || db_dt == AMP_F32 || db32)) {
        taken = direct_backward_weights(g, x32, dy32, AMP_F32, dw32 ? (void *)dw32 : dw, AMP_F32,
                                        db32 ? (void *)db32 : db, AMP_F32, st);
        if (taken && *st == AMP_OK) {
            if (dw32)
                narrow(dw32, dw, nw);
            if (db32)
                narrow(db32, db, g->O);
        }
    }
    amp_free(x32), amp_free(dy32), amp_free(dw32), amp_free(db32);
    return taken;
}

#endif /* AMPC_HAVE_DNNL */
