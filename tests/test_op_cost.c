/*
 * test_op_cost.c - the rows' cost functions and params structs
 * (src/ops/op_list.h, op_params.h):
 *
 *   - every row has a forward, a backward and a cost function, a params
 *     struct that fits a node and a profiler event, and names for its
 *     params: non-empty C identifiers, each once;
 *   - the GEMM-like rows against the textbook counts, computed here from
 *     the shapes the test chose: matmul 2*M*N*K (per batch), linear
 *     2*rows*in*out, conv2d 2*N*Cout*Ho*Wo*(Cin/groups)*kh*kw (ampc has
 *     groups = 1) with Ho, Wo from the convolution's size formula, and a
 *     backward twice the forward when every input needs its gradient;
 *     attention's two products, q k^T and P v (2*heads*T*Tk*d each), and
 *     its backward's five (torch.utils.flop_counter: S again, then dV,
 *     dP, dq, dk), in each layout;
 *   - the bytes: every input read and the result written (forward); gout,
 *     every input, and each gradient made (backward).
 *
 * test_backend_ops checks that every row counts something on its cases;
 * test_profiler that the profiler's events carry these counts.
 */
#include "harness.h"

#include "record/profile.h"
#include "ops/fused.h"
#include "ops/ops.h"

#include <ctype.h>
#include <stdlib.h>

static amp_tensor *leaf(amp_shape s, uint64_t seed, bool grad)
{
    amp_manual_seed(seed);
    amp_tensor *t = amp_randn(s, AMP_F32, 0, 1);
    amp_tensor_set_requires_grad(t, grad);
    return t;
}

static double numel_of(amp_shape s)
{
    double n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= (double)s.d[i];
    return n;
}

/* The node that made y (NULL with a failed check when none). */
static const node *node_of(const amp_tensor *y, const char *what)
{
    CHECK_MSG(y != NULL, "%s: %s", what, amp_last_error());
    const node *n = y ? y->grad_fn : NULL;
    CHECK_MSG(!y || n != NULL, "%s: no node recorded", what);
    return n;
}

/* n's forward and backward FLOPs against the formulas. */
static void check_flops(const node *n, double fwd, double bwd, const char *what)
{
    if (!n)
        return;
    const op_cost f = op_cost_of(n, false), b = op_cost_of(n, true);
    CHECK_MSG(f.flops == fwd, "%s forward: %.0f FLOPs, the formula %.0f", what, f.flops, fwd);
    CHECK_MSG(b.flops == bwd, "%s backward: %.0f FLOPs, the formula %.0f", what, b.flops, bwd);
}

/* ------------------------------------------------------------- the rows */

static bool is_identifier(const char *s)
{
    if (!s || !(islower((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
            return false;
    return true;
}

static void test_every_row_has_a_cost_and_named_params(void)
{
    for (int r = 0; r < OP_COUNT; r++) {
        const op_def *d = &op_table[r];
        CHECK_MSG(d->forward && d->backward, "row %s has no forward or backward", d->name);
        CHECK_MSG(d->cost != NULL, "row %s has no cost function", d->name);
        CHECK_MSG(d->args != NULL, "row %s has no names for its params", d->name);
        CHECK_MSG(d->params_size > 0 && d->params_size <= sizeof(op_params) && d->params_size <= PROF_PARAMS_BYTES,
                  "row %s: params of %zu bytes", d->name, d->params_size);
        if (!d->args)
            continue;
        prof_params zero;
        memset(&zero, 0, sizeof zero);
        prof_arg a[PROF_MAX_ARGS + 1];
        const int k = d->args(&zero, a, PROF_MAX_ARGS + 1);
        CHECK_MSG(k >= 0 && k <= PROF_MAX_ARGS, "row %s names %d params (at most %d are written)", d->name, k,
                  PROF_MAX_ARGS);
        for (int i = 0; i < k && i <= PROF_MAX_ARGS; i++) {
            CHECK_MSG(is_identifier(a[i].name), "row %s: param %d is named \"%s\"", d->name, i,
                      a[i].name ? a[i].name : "(null)");
            for (int j = 0; j < i; j++)
                CHECK_MSG(!a[j].name || !a[i].name || strcmp(a[i].name, a[j].name) != 0,
                          "row %s names \"%s\" twice", d->name, a[i].name);
        }
    }
}

/* The params a row's struct has are the ones the trace names: conv2d's. */
static void test_params_are_named_as_their_fields(void)
{
    prof_params v;
    memset(&v, 0, sizeof v);
    const conv2d_params c = {.stride = 2, .padding = 1, .has_bias = true, .act = OP_ACT_RELU};
    memcpy(v.bytes, &c, sizeof c);
    prof_arg a[PROF_MAX_ARGS];
    const int k = op_table[OP_CONV2D].args(&v, a, PROF_MAX_ARGS);
    CHECK_EQ_INT(k, 4);
    if (k != 4)
        return;
    CHECK(strcmp(a[0].name, "stride") == 0 && a[0].kind == PROF_ARG_INT && a[0].i == 2);
    CHECK(strcmp(a[1].name, "padding") == 0 && a[1].kind == PROF_ARG_INT && a[1].i == 1);
    CHECK(strcmp(a[2].name, "has_bias") == 0 && a[2].kind == PROF_ARG_BOOL && a[2].i == 1);
    CHECK(strcmp(a[3].name, "act") == 0 && a[3].kind == PROF_ARG_STR && strcmp(a[3].s, "relu") == 0);
}

/* ------------------------------------------------------------- matmul */

static void test_matmul_is_2mnk(void)
{
    /* [3, 5, 7] @ [7, 4]: the leading dims fold into M = 15. */
    const double M = 15, N = 4, K = 7;
    amp_tensor *a = leaf(AMP_SHAPE(3, 5, 7), 1, true), *b = leaf(AMP_SHAPE(7, 4), 2, true);
    amp_tensor *c = amp_matmul(a, b);
    const node *n = node_of(c, "matmul");
    check_flops(n, 2 * M * N * K, 2 * (2 * M * N * K), "matmul");
    if (n) {
        const double in = (3 * 5 * 7 + 7 * 4) * 4.0, out = M * N * 4.0;
        CHECK(op_cost_of(n, false).bytes == in + out);
        CHECK(op_cost_of(n, true).bytes == out + in + in); /* gout, a and b, their gradients */
    }

    /* Batched: B products of [M, K] @ [K, N]. */
    amp_tensor *x = leaf(AMP_SHAPE(2, 3, 6), 3, true), *y = leaf(AMP_SHAPE(2, 6, 5), 4, true);
    check_flops(node_of(amp_matmul(x, y), "batched matmul"), 2 * 2.0 * 3 * 5 * 6, 2 * (2 * 2.0 * 3 * 5 * 6),
                "batched matmul");

    /* Only a needs a gradient: one product backward. */
    amp_tensor *bc = leaf(AMP_SHAPE(7, 4), 2, false);
    check_flops(node_of(amp_matmul(a, bc), "matmul, b constant"), 2 * M * N * K, 2 * M * N * K,
                "matmul, b constant");
    amp_temps_free();
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_tensor_free(bc);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

/* ------------------------------------------------------------- linear */

static void test_linear_is_2_rows_in_out(void)
{
    /* x [2, 3, 8] (6 rows), w [5, 8]. */
    const double rows = 6, in = 8, out = 5, gemm = 2 * rows * in * out;
    amp_tensor *x = leaf(AMP_SHAPE(2, 3, 8), 5, true), *w = leaf(AMP_SHAPE(5, 8), 6, true);
    amp_tensor *bias = leaf(AMP_SHAPE(5), 7, true);
    check_flops(node_of(amp_linear(x, w, NULL), "linear"), gemm, 2 * gemm, "linear");
    /* The bias: one add per result element, its gradient one per element
     * of dY summed. */
    check_flops(node_of(amp_linear(x, w, bias), "linear + bias"), gemm + rows * out, 2 * gemm + rows * out,
                "linear + bias");
    /* A fused relu: one more per result element, each way. */
    check_flops(node_of(op_linear_relu(x, w, bias), "linear + bias + relu"), gemm + 2 * rows * out,
                2 * gemm + 2 * rows * out, "linear + bias + relu");
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(bias);
}

/* ------------------------------------------------------------- conv2d */

/* PyTorch's Conv2d output size (dilation 1): floor((H + 2p - k) / s) + 1. */
static int64_t conv_out(int64_t H, int64_t k, int64_t s, int64_t p) { return (H + 2 * p - k) / s + 1; }

static void test_conv2d_is_2_n_cout_ho_wo_cin_kh_kw(void)
{
    const int64_t N = 2, Cin = 3, H = 9, W = 7, Cout = 4, kh = 3, kw = 2, stride = 2, pad = 1, groups = 1;
    const int64_t Ho = conv_out(H, kh, stride, pad), Wo = conv_out(W, kw, stride, pad);
    const double prod = 2.0 * (double)(N * Cout * Ho * Wo) * (double)(Cin / groups) * (double)(kh * kw);
    amp_tensor *x = leaf(AMP_SHAPE(N, Cin, H, W), 8, true), *w = leaf(AMP_SHAPE(Cout, Cin, kh, kw), 9, true);
    amp_tensor *bias = leaf(AMP_SHAPE(Cout), 10, true);
    amp_tensor *y = amp_conv2d(x, w, NULL, (int)stride, (int)pad);
    const node *n = node_of(y, "conv2d");
    if (y)
        CHECK(shape_equal(y->shape, AMP_SHAPE(N, Cout, Ho, Wo)));
    check_flops(n, prod, 2 * prod, "conv2d");
    const double outs = (double)(N * Cout * Ho * Wo);
    check_flops(node_of(amp_conv2d(x, w, bias, (int)stride, (int)pad), "conv2d + bias"), prod + outs,
                2 * prod + outs, "conv2d + bias");
    check_flops(node_of(op_conv2d_relu(x, w, bias, (int)stride, (int)pad), "conv2d + bias + relu"),
                prod + 2 * outs, 2 * prod + 2 * outs, "conv2d + bias + relu");
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(bias);
}

/* ---------------------------------------------------------- attention */

/* Forward: S = q k^T [T, Tk] from [T, d] @ [d, Tk], O = P v [T, d] from
 * [T, Tk] @ [Tk, d]: two GEMMs per head. */
static double attn_forward(double heads, double T, double Tk, double d)
{
    const double qk = 2 * T * Tk * d, pv = 2 * T * Tk * d;
    return heads * (qk + pv);
}

/* Backward: S again, then dV = P^T dO, dP = dO v^T, dq = dS k, dk = dS^T q. */
static double attn_backward(double heads, double T, double Tk, double d)
{
    const double s = 2 * T * Tk * d, dv = 2 * Tk * T * d, dp = 2 * T * d * Tk, dq = 2 * T * Tk * d,
                 dk = 2 * Tk * T * d;
    return heads * (s + dv + dp + dq + dk);
}

static void test_attention_is_its_products(void)
{
    const double B = 2, H = 3, T = 5, d = 8;
    amp_tensor *q = leaf(AMP_SHAPE(2, 3, 5, 8), 11, true), *k = leaf(AMP_SHAPE(2, 3, 5, 8), 12, true);
    amp_tensor *v = leaf(AMP_SHAPE(2, 3, 5, 8), 13, true);
    /* Causal or not, the count is the full T x T (the work asked for). */
    for (int causal = 0; causal < 2; causal++)
        check_flops(node_of(amp_attention(q, k, v, causal), "attention"), attn_forward(B * H, T, T, d),
                    attn_backward(B * H, T, T, d), causal ? "attention, causal" : "attention");

    /* [B, T, H, d]: the heads are dims 0 and 2, T is dim 1. */
    amp_tensor *qb = leaf(AMP_SHAPE(2, 5, 3, 8), 14, true), *kb = leaf(AMP_SHAPE(2, 5, 3, 8), 15, true);
    amp_tensor *vb = leaf(AMP_SHAPE(2, 5, 3, 8), 16, true);
    check_flops(node_of(op_attention_bthd(qb, kb, vb, true), "attention [B, T, H, d]"), attn_forward(B * H, T, T, d),
                attn_backward(B * H, T, T, d), "attention [B, T, H, d]");

    /* Over a KV cache of Tk = 9 rows, T = 5 queries (forward only, so no
     * node: the profiler's event has the count). */
    amp_tensor *kc = leaf(AMP_SHAPE(9, 2, 3, 8), 17, false), *vc = leaf(AMP_SHAPE(9, 2, 3, 8), 18, false);
    amp_no_grad_begin();
    amp_profiler_opts o = amp_profiler_defaults();
    o.memory = false;
    CHECK_OK(amp_profiler_start(&o));
    CHECK(op_attention_cached(qb, kc, vc) != NULL);
    CHECK_OK(amp_profiler_stop());
    amp_no_grad_end();
    const prof_thread_events *th;
    const int nt = prof_threads(&th);
    const prof_event *e = NULL;
    for (int t = 0; t < nt && !e; t++)
        for (size_t i = 0; i < th[t].n && !e; i++)
            if (th[t].ev[i].kind == PROF_OP_FWD && strcmp(th[t].ev[i].name, "scaled_dot_product_attention") == 0)
                e = &th[t].ev[i];
    CHECK(e != NULL);
    if (e)
        CHECK_MSG(e->flops == attn_forward(B * H, T, 9, d), "cached attention: %.0f FLOPs, the formula %.0f",
                  e->flops, attn_forward(B * H, T, 9, d));
    amp_profiler_reset();
    amp_temps_free();
    amp_tensor *all[] = {q, k, v, qb, kb, vb, kc, vc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        amp_tensor_free(all[i]);
}

/* -------------------------------------------------------------- bytes */

static void test_bytes_are_inputs_and_result(void)
{
    /* A bf16 add broadcasting [4, 1] over [4, 6] (f32 result: promoted),
     * only the first input needing a gradient. */
    amp_tensor *a = leaf(AMP_SHAPE(4, 6), 19, true);
    amp_tensor *b0 = leaf(AMP_SHAPE(4, 1), 20, false), *b = amp_to(b0, AMP_BF16);
    const node *n = node_of(amp_add(a, b), "add");
    if (n) {
        const double in = numel_of(AMP_SHAPE(4, 6)) * 4 + numel_of(AMP_SHAPE(4, 1)) * 2, out = 24 * 4;
        CHECK(op_cost_of(n, false).bytes == in + out);
        CHECK(op_cost_of(n, true).bytes == out + in + 24 * 4); /* gout, a and b, a's gradient */
        CHECK(op_cost_of(n, false).flops == 24 && op_cost_of(n, true).flops == 24);
    }
    amp_temps_free();
    amp_tensor_free(a);
    amp_tensor_free(b0);
}

int main(void)
{
    RUN(test_every_row_has_a_cost_and_named_params);
    RUN(test_params_are_named_as_their_fields);
    RUN(test_matmul_is_2mnk);
    RUN(test_linear_is_2_rows_in_out);
    RUN(test_conv2d_is_2_n_cout_ho_wo_cin_kh_kw);
    RUN(test_attention_is_its_products);
    RUN(test_bytes_are_inputs_and_result);
    return harness_done();
}
