/*
 * test_ops_attention.c - scaled_dot_product_attention: values against a
 * double reference (full and causal, several leading dims), finite-
 * difference gradients in f32, bf16 / f16 against f32, f16 inputs whose
 * scores pass f16's range, PyTorch's values and gradients
 * (reference/attention_ref.h from gen_attention.py), autocast, threads,
 * causality and the errors. The fused (tiled, online-softmax) kernel:
 * values and gradients against double references for T across tile
 * edges, T = 1 and D = 16 / 64 / 80, f32 and bf16; the [B, T, H, d]
 * layout bit for bit against the permuted [B, H, T, d] one; finite
 * differences across several tiles.
 */
#include "backend/cpu/cpu_backend.h"
#include "harness.h"
#include "op_check.h"
#include "ops/fused.h"
#include "reference/attention_ref.h"

#include <stdlib.h>

/* softmax(q kᵀ / sqrt(d) [causal]) v in double, on the values of the
 * tensors as they are (after any rounding to their dtype). */
static double *ref_attention(const amp_tensor *q, const amp_tensor *k, const amp_tensor *v, bool causal)
{
    int nd = amp_tensor_ndim(q);
    int64_t T = amp_tensor_dim(q, nd - 2), d = amp_tensor_dim(q, nd - 1);
    int64_t heads = amp_tensor_numel(q) / (T * d);
    double *out = calloc((size_t)amp_tensor_numel(q), sizeof(double));
    double *s = malloc(sizeof(double) * (size_t)T);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < T; i++) {
            int64_t base = h * T * d, len = causal ? i + 1 : T;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; j++) {
                double acc = 0;
                for (int64_t c = 0; c < d; c++)
                    acc += amp_tensor_get(q, base + i * d + c) * amp_tensor_get(k, base + j * d + c);
                s[j] = acc / sqrt((double)d);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int64_t j = 0; j < len; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int64_t j = 0; j < len; j++)
                for (int64_t c = 0; c < d; c++)
                    out[base + i * d + c] += s[j] / sum * amp_tensor_get(v, base + j * d + c);
        }
    free(s);
    return out;
}

static void test_values_match_double_reference(void)
{
    const amp_shape shapes[3] = {AMP_SHAPE(7, 5), AMP_SHAPE(2, 3, 9, 8), AMP_SHAPE(2, 1, 2, 17, 3)};
    for (int si = 0; si < 3; si++)
        for (int causal = 0; causal < 2; causal++) {
            amp_tensor *q = test_uniform(shapes[si], AMP_F32, -2, 2, 1 + si);
            amp_tensor *k = test_uniform(shapes[si], AMP_F32, -2, 2, 11 + si);
            amp_tensor *v = test_uniform(shapes[si], AMP_F32, -1, 1, 21 + si);
            amp_tensor *o = amp_attention(q, k, v, causal);
            CHECK(o && amp_tensor_dtype(o) == AMP_F32);
            CHECK(o && amp_tensor_ndim(o) == shapes[si].ndim);
            double *ref = ref_attention(q, k, v, causal);
            char what[64];
            snprintf(what, sizeof what, "shape %d causal %d", si, causal);
            check_close(what, o, ref, amp_tensor_numel(q), 2e-6, 2e-6);
            free(ref);
            amp_tensor_free(q);
            amp_tensor_free(k);
            amp_tensor_free(v);
            amp_temps_free();
        }
}

/* The first row of a causal attention sees only itself: out[0] = v[0]. */
static void test_causal_first_row_is_v0(void)
{
    amp_tensor *q = test_uniform(AMP_SHAPE(6, 4), AMP_F32, -3, 3, 5);
    amp_tensor *k = test_uniform(AMP_SHAPE(6, 4), AMP_F32, -3, 3, 6);
    amp_tensor *v = test_uniform(AMP_SHAPE(6, 4), AMP_F32, -3, 3, 7);
    amp_tensor *o = amp_attention(q, k, v, true);
    CHECK(o != NULL);
    for (int c = 0; o && c < 4; c++)
        CHECK_NEAR(amp_tensor_get(o, c), amp_tensor_get(v, c), 1e-6);
    amp_tensor_free(q);
    amp_tensor_free(k);
    amp_tensor_free(v);
    amp_temps_free();
}

typedef struct {
    bool causal;
} attn_ctx;

static amp_tensor *attn_fn(amp_tensor **in, void *vc)
{
    return amp_attention(in[0], in[1], in[2], ((attn_ctx *)vc)->causal);
}

static void test_gradcheck_f32(void)
{
    for (int causal = 0; causal < 2; causal++) {
        amp_tensor *in[3];
        for (int i = 0; i < 3; i++) {
            in[i] = test_uniform(AMP_SHAPE(2, 5, 3), AMP_F32, -1.5, 1.5, 40 + (uint64_t)i);
            amp_tensor_set_requires_grad(in[i], true);
        }
        attn_ctx c = {causal};
        CHECK(gradcheck(causal ? "attention causal" : "attention full", attn_fn, in, 3, &c, 1e-3, 2e-3, 2e-3));
        for (int i = 0; i < 3; i++)
            amp_tensor_free(in[i]);
    }
}

/* Only some inputs needing a gradient: the others get none, the rest the
 * same values as when all are asked for. */
static void test_partial_gradients(void)
{
    amp_tensor *in[3], *full[3] = {0};
    for (int i = 0; i < 3; i++)
        in[i] = test_uniform(AMP_SHAPE(3, 6, 4), AMP_F32, -1, 1, 60 + (uint64_t)i);
    for (int i = 0; i < 3; i++)
        amp_tensor_set_requires_grad(in[i], true);
    CHECK_OK(amp_backward(amp_sum_all(amp_attention(in[0], in[1], in[2], true))));
    for (int i = 0; i < 3; i++)
        full[i] = amp_clone(amp_tensor_grad(in[i]));
    for (int only = 0; only < 3; only++) {
        for (int i = 0; i < 3; i++) {
            amp_tensor_clear_grad(in[i]);
            amp_tensor_set_requires_grad(in[i], i == only);
        }
        CHECK_OK(amp_backward(amp_sum_all(amp_attention(in[0], in[1], in[2], true))));
        for (int i = 0; i < 3; i++)
            CHECK(i == only ? amp_tensor_grad(in[i]) != NULL : amp_tensor_grad(in[i]) == NULL);
        CHECK(max_abs_diff(amp_tensor_grad(in[only]), full[only]) == 0.0);
        amp_temps_free();
    }
    for (int i = 0; i < 3; i++) {
        amp_tensor_free(in[i]);
        amp_tensor_free(full[i]);
    }
}

static void run_pytorch_case(bool causal, const float *out, const float *dq, const float *dk, const float *dv)
{
    amp_shape s = AMP_SHAPE(ATTN_B, ATTN_H, ATTN_T, ATTN_D);
    const int64_t n = ATTN_B * ATTN_H * ATTN_T * ATTN_D;
    amp_tensor *q = make(s, AMP_F32, attn_q), *k = make(s, AMP_F32, attn_k), *v = make(s, AMP_F32, attn_v);
    amp_tensor *w = make(s, AMP_F32, attn_w);
    amp_tensor_set_requires_grad(q, true);
    amp_tensor_set_requires_grad(k, true);
    amp_tensor_set_requires_grad(v, true);
    amp_tensor *o = amp_attention(q, k, v, causal);
    check_close_f(causal ? "causal out" : "full out", o, out, n, 1e-5, 1e-5);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(o, w))));
    check_close_f(causal ? "causal dq" : "full dq", amp_tensor_grad(q), dq, n, 1e-5, 1e-5);
    check_close_f(causal ? "causal dk" : "full dk", amp_tensor_grad(k), dk, n, 1e-5, 1e-5);
    check_close_f(causal ? "causal dv" : "full dv", amp_tensor_grad(v), dv, n, 1e-5, 1e-5);
    amp_tensor_free(q);
    amp_tensor_free(k);
    amp_tensor_free(v);
    amp_tensor_free(w);
    amp_temps_free();
}

static void test_matches_pytorch(void)
{
    run_pytorch_case(false, attn_full_out, attn_full_dq, attn_full_dk, attn_full_dv);
    run_pytorch_case(true, attn_causal_out, attn_causal_dq, attn_causal_dk, attn_causal_dv);
}

/* bf16 / f16 inputs: the output and every gradient in the inputs' dtype,
 * close to f32 run on the same (rounded) values. */
static void test_16bit_close_to_f32(void)
{
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    const double tol[2] = {2e-2, 3e-3}; /* a few ulps of each dtype at |x| ~ 1 */
    for (int di = 0; di < 2; di++)
        for (int causal = 0; causal < 2; causal++) {
            amp_tensor *lo[3], *hi[3];
            for (int i = 0; i < 3; i++) {
                amp_tensor *t = test_uniform(AMP_SHAPE(2, 2, 11, 8), AMP_F32, -1.5, 1.5, 80 + (uint64_t)i);
                lo[i] = as_dtype(t, dts[di]);
                hi[i] = as_dtype(lo[i], AMP_F32); /* the same values, exactly */
                amp_tensor_free(t);
                amp_tensor_set_requires_grad(lo[i], true);
                amp_tensor_set_requires_grad(hi[i], true);
            }
            amp_tensor *ol = amp_attention(lo[0], lo[1], lo[2], causal);
            amp_tensor *oh = amp_attention(hi[0], hi[1], hi[2], causal);
            CHECK(ol && amp_tensor_dtype(ol) == dts[di]);
            CHECK_MSG(max_abs_diff(ol, oh) <= tol[di], "%s causal %d: out differs by %g",
                      amp_dtype_name(dts[di]), causal, max_abs_diff(ol, oh));
            CHECK_OK(amp_backward(amp_sum_all(amp_mul(ol, ol))));
            CHECK_OK(amp_backward(amp_sum_all(amp_mul(oh, oh))));
            for (int i = 0; i < 3; i++) {
                amp_tensor *g = amp_tensor_grad(lo[i]);
                CHECK(g && amp_tensor_dtype(g) == dts[di]);
                double diff = max_abs_diff(g, amp_tensor_grad(hi[i]));
                CHECK_MSG(diff <= 4 * tol[di], "%s causal %d: grad of input %d differs by %g",
                          amp_dtype_name(dts[di]), causal, i, diff);
                amp_tensor_free(lo[i]);
                amp_tensor_free(hi[i]);
            }
            amp_temps_free();
        }
}

/* q, k ~ 300 with d = 16: scores ~ 300 * 300 * 16 / 4 = 360000, far past
 * f16's 65504. A q kᵀ rounded to f16 is inf (shown with amp_matmul), but
 * the op keeps scores in f32, so its f16 output and gradients are finite
 * and match f32 on the same values. */
static void test_f16_large_scores_stay_finite(void)
{
    amp_tensor *q32 = test_uniform(AMP_SHAPE(2, 6, 16), AMP_F32, 250, 350, 91);
    amp_tensor *k32 = test_uniform(AMP_SHAPE(2, 6, 16), AMP_F32, 250, 350, 92);
    amp_tensor *v32 = test_uniform(AMP_SHAPE(2, 6, 16), AMP_F32, -1, 1, 93);
    amp_tensor *q = as_dtype(q32, AMP_F16), *k = as_dtype(k32, AMP_F16), *v = as_dtype(v32, AMP_F16);
    const int perm[3] = {0, 2, 1};
    amp_tensor *naive = amp_matmul(q, amp_permute(k, perm));
    CHECK(naive && isinf(amp_tensor_get(naive, 0))); /* what a f16 score matrix would hold */
    amp_tensor_set_requires_grad(q, true);
    amp_tensor_set_requires_grad(k, true);
    amp_tensor_set_requires_grad(v, true);
    for (int causal = 0; causal < 2; causal++) {
        amp_tensor *o = amp_attention(q, k, v, causal);
        CHECK(o && amp_tensor_dtype(o) == AMP_F16);
        double *ref = ref_attention(q, k, v, causal);
        check_close(causal ? "f16 large causal" : "f16 large full", o, ref, amp_tensor_numel(q), 2e-3,
                    2e-3);
        free(ref);
        CHECK_OK(amp_backward(amp_sum_all(amp_mul(o, o))));
        for (int i = 0; i < 3; i++) {
            amp_tensor *g = i == 0 ? q : i == 1 ? k : v;
            bool finite = amp_tensor_grad(g) != NULL;
            for (int64_t j = 0; finite && j < amp_tensor_numel(g); j++)
                finite = isfinite(amp_tensor_get(amp_tensor_grad(g), j));
            CHECK_MSG(finite, "causal %d: gradient of input %d not finite", causal, i);
            amp_tensor_clear_grad(g);
        }
        amp_temps_free();
    }
    amp_tensor_free(q32);
    amp_tensor_free(k32);
    amp_tensor_free(v32);
    amp_tensor_free(q);
    amp_tensor_free(k);
    amp_tensor_free(v);
    amp_temps_free();
}

/* Category "lower": f32 inputs run in the autocast dtype, and the
 * gradients flow back through the casts to f32. */
static void test_autocast_lowers(void)
{
    amp_tensor *in[3];
    for (int i = 0; i < 3; i++) {
        in[i] = test_uniform(AMP_SHAPE(2, 4, 8), AMP_F32, -1, 1, 100 + (uint64_t)i);
        amp_tensor_set_requires_grad(in[i], true);
    }
    CHECK_EQ_INT(amp_autocast_category("scaled_dot_product_attention", AMP_CPU), AMP_CAST_LOWER);
    CHECK_EQ_INT(amp_autocast_category("scaled_dot_product_attention", AMP_CUDA), AMP_CAST_LOWER);
    amp_tensor *o16 = NULL, *obf = NULL;
    AMP_AUTOCAST(AMP_CPU, AMP_F16) { o16 = amp_attention(in[0], in[1], in[2], true); }
    AMP_AUTOCAST(AMP_CPU, AMP_BF16) { obf = amp_attention(in[0], in[1], in[2], true); }
    CHECK(o16 && amp_tensor_dtype(o16) == AMP_F16);
    CHECK(obf && amp_tensor_dtype(obf) == AMP_BF16);
    CHECK_OK(amp_backward(amp_sum_all(amp_to(obf, AMP_F32))));
    for (int i = 0; i < 3; i++) {
        CHECK(amp_tensor_grad(in[i]) && amp_tensor_dtype(amp_tensor_grad(in[i])) == AMP_F32);
        amp_tensor_free(in[i]);
    }
    amp_temps_free();
}

/* Heads run on several threads (12 heads of 32 x 16: above the op's
 * threshold for a thread team); every head's numbers are computed the
 * same way, so one thread and several give identical bits. */
static void test_threads_give_identical_results(void)
{
    amp_tensor *in[3];
    for (int i = 0; i < 3; i++) {
        in[i] = test_uniform(AMP_SHAPE(3, 4, 32, 16), AMP_F32, -2, 2, 110 + (uint64_t)i);
        amp_tensor_set_requires_grad(in[i], true);
    }
    int saved = amp_get_num_threads();
    amp_tensor *o[2], *g[2][3];
    for (int r = 0; r < 2; r++) {
        amp_set_num_threads(r == 0 ? 1 : 3);
        for (int i = 0; i < 3; i++)
            amp_tensor_clear_grad(in[i]);
        amp_tensor *y = amp_attention(in[0], in[1], in[2], true);
        o[r] = amp_clone(y);
        CHECK_OK(amp_backward(amp_sum_all(amp_mul(y, y))));
        for (int i = 0; i < 3; i++)
            g[r][i] = amp_clone(amp_tensor_grad(in[i]));
        amp_temps_free();
    }
    amp_set_num_threads(saved);
    CHECK(max_abs_diff(o[0], o[1]) == 0.0);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(max_abs_diff(g[0][i], g[1][i]) == 0.0, "input %d: gradients differ by thread count", i);
    for (int r = 0; r < 2; r++) {
        amp_tensor_free(o[r]);
        for (int i = 0; i < 3; i++)
            amp_tensor_free(g[r][i]);
    }
    for (int i = 0; i < 3; i++)
        amp_tensor_free(in[i]);
}


/* The softmax rows run on vector kernels where the CPU has them (exp,
 * max and the double sums): close to the scalar loops (amp_cpu_limit(0),
 * which also takes the portable GEMM, summing in another order; dS = P
 * (dP - rowsum) amplifies that to ~1e-6 of the gradient), causal or not,
 * with rows longer and shorter than a vector; a NaN score still makes its
 * row NaN. */
static void test_vector_softmax_rows_match_scalar(void)
{
    for (int causal = 0; causal < 2; causal++) {
        amp_tensor *in[3];
        for (int i = 0; i < 3; i++) {
            in[i] = test_uniform(AMP_SHAPE(2, 3, 37, 8), AMP_F32, -3, 3, 130 + (uint64_t)i);
            amp_tensor_set_requires_grad(in[i], true);
        }
        amp_tensor *o[2], *g[2][3];
        for (int r = 0; r < 2; r++) {
            amp_cpu_limit(r ? 0u : ~0u);
            for (int i = 0; i < 3; i++)
                amp_tensor_clear_grad(in[i]);
            amp_tensor *y = amp_attention(in[0], in[1], in[2], causal);
            o[r] = amp_clone(y);
            CHECK_OK(amp_backward(amp_sum_all(amp_mul(y, y))));
            for (int i = 0; i < 3; i++)
                g[r][i] = amp_clone(amp_tensor_grad(in[i]));
            amp_temps_free();
        }
        amp_cpu_limit(~0u);
        CHECK_MSG(max_abs_diff(o[0], o[1]) <= 2e-6, "causal %d: outputs differ by %g", causal,
                  max_abs_diff(o[0], o[1]));
        for (int i = 0; i < 3; i++) {
            double scale = 0;
            for (int64_t e = 0; e < amp_tensor_numel(g[1][i]); e++)
                scale = fmax(scale, fabs(amp_tensor_get(g[1][i], e)));
            CHECK_MSG(max_abs_diff(g[0][i], g[1][i]) <= 1e-5 * (1 + scale), "causal %d: grad %d differs by %g (of %g)",
                      causal, i, max_abs_diff(g[0][i], g[1][i]), scale);
        }
        for (int r = 0; r < 2; r++) {
            amp_tensor_free(o[r]);
            for (int i = 0; i < 3; i++)
                amp_tensor_free(g[r][i]);
        }
        for (int i = 0; i < 3; i++)
            amp_tensor_free(in[i]);
    }
    /* a NaN in q poisons its row of scores, and only that row */
    amp_tensor *q = test_uniform(AMP_SHAPE(1, 20, 4), AMP_F32, -1, 1, 140);
    amp_tensor *k = test_uniform(AMP_SHAPE(1, 20, 4), AMP_F32, -1, 1, 141);
    ((float *)amp_tensor_data(q))[5 * 4] = NAN;
    amp_tensor *y = amp_attention(q, k, k, false);
    CHECK(y != NULL);
    for (int64_t i = 0; y && i < 20 * 4; i++)
        CHECK_MSG(isnan(amp_tensor_get(y, i)) == (i / 4 == 5), "row %lld: %g", (long long)(i / 4), amp_tensor_get(y, i));
    amp_tensor_free(q);
    amp_tensor_free(k);
    amp_temps_free();
}

/* Causal: changing k and v at position t changes no output before t. */
static void test_causal_ignores_the_future(void)
{
    const int64_t T = 9, d = 4, t = 5;
    amp_tensor *q = test_uniform(AMP_SHAPE(2, T, d), AMP_F32, -2, 2, 120);
    amp_tensor *k = test_uniform(AMP_SHAPE(2, T, d), AMP_F32, -2, 2, 121);
    amp_tensor *v = test_uniform(AMP_SHAPE(2, T, d), AMP_F32, -2, 2, 122);
    amp_tensor *o1 = amp_clone(amp_attention(q, k, v, true));
    for (int h = 0; h < 2; h++)
        for (int64_t c = 0; c < d; c++) {
            ((float *)amp_tensor_data(k))[(h * T + t) * d + c] += 3.0f;
            ((float *)amp_tensor_data(v))[(h * T + t) * d + c] -= 2.0f;
        }
    amp_tensor *o2 = amp_attention(q, k, v, true);
    int before_same = 1, after_changed = 1;
    for (int h = 0; h < 2; h++)
        for (int64_t i = 0; i < T; i++) {
            bool same = true;
            for (int64_t c = 0; c < d; c++)
                same &= amp_tensor_get(o1, (h * T + i) * d + c) == amp_tensor_get(o2, (h * T + i) * d + c);
            if (i < t)
                before_same &= same;
            else
                after_changed &= !same;
        }
    CHECK(before_same);
    CHECK(after_changed);
    amp_tensor_free(o1);
    amp_tensor_free(q);
    amp_tensor_free(k);
    amp_tensor_free(v);
    amp_temps_free();
}

static void test_errors_name_shapes_and_dtypes(void)
{
    amp_tensor *a = amp_zeros(AMP_SHAPE(2, 5, 4), AMP_F32);
    amp_tensor *b = amp_zeros(AMP_SHAPE(2, 6, 4), AMP_F32);
    amp_tensor *c = amp_zeros(AMP_SHAPE(2, 5, 4), AMP_BF16);
    amp_tensor *i = amp_zeros(AMP_SHAPE(2, 5, 4), AMP_I32);
    amp_tensor *one = amp_zeros(AMP_SHAPE(4), AMP_F32);
    CHECK(!amp_attention(a, b, a, false));
    CHECK_ERROR(AMP_ERR_SHAPE, "[2, 6, 4] f32");
    CHECK(!amp_attention(a, a, b, true));
    CHECK_ERROR(AMP_ERR_SHAPE, "scaled_dot_product_attention: q, k and v must have the same shape");
    CHECK(!amp_attention(one, one, one, false));
    CHECK_ERROR(AMP_ERR_SHAPE, "at least 2 dims");
    CHECK(!amp_attention(a, c, a, false));
    CHECK_ERROR(AMP_ERR_DTYPE, "bf16");
    CHECK(!amp_attention(a, a, i, false));
    CHECK_ERROR(AMP_ERR_DTYPE, "i32");
    CHECK(!amp_attention(a, NULL, a, false)); /* a NULL input: NULL, no new error needed */
    amp_clear_error();
    /* Empty inputs give an empty result. */
    amp_tensor *e = amp_zeros(AMP_SHAPE(2, 0, 4), AMP_F32);
    amp_tensor *r = amp_attention(e, e, e, true);
    CHECK(r && amp_tensor_numel(r) == 0);
    amp_tensor_free(e);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_tensor_free(c);
    amp_tensor_free(i);
    amp_tensor_free(one);
    amp_temps_free();
}

/* ------------------------------------------------- the fused, tiled kernel */

/* dq, dk, dv (each numel(q) doubles, heads leading) of
 * sum(g ∘ attention(q, k, v)) in double, from the values as they are. */
static void ref_attention_backward(const amp_tensor *q, const amp_tensor *k, const amp_tensor *v,
                                   const amp_tensor *g, bool causal, double *dq, double *dk, double *dv)
{
    int nd = amp_tensor_ndim(q);
    int64_t T = amp_tensor_dim(q, nd - 2), d = amp_tensor_dim(q, nd - 1);
    int64_t heads = amp_tensor_numel(q) / (T * d), n = amp_tensor_numel(q);
    double scale = 1.0 / sqrt((double)d);
    for (int64_t i = 0; i < n; i++)
        dq[i] = dk[i] = dv[i] = 0;
    double *p = malloc(sizeof(double) * (size_t)T), *dp = malloc(sizeof(double) * (size_t)T);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < T; i++) {
            int64_t b = h * T * d, len = causal ? i + 1 : T;
            double mx = -INFINITY, sum = 0, di = 0;
            for (int64_t j = 0; j < len; j++) {
                double acc = 0, acc2 = 0;
                for (int64_t c = 0; c < d; c++) {
                    acc += amp_tensor_get(q, b + i * d + c) * amp_tensor_get(k, b + j * d + c);
                    acc2 += amp_tensor_get(g, b + i * d + c) * amp_tensor_get(v, b + j * d + c);
                }
                p[j] = acc * scale;
                dp[j] = acc2;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int64_t j = 0; j < len; j++)
                sum += (p[j] = exp(p[j] - mx));
            for (int64_t j = 0; j < len; j++) {
                p[j] /= sum;
                di += p[j] * dp[j];
            }
            for (int64_t j = 0; j < len; j++) {
                double ds = p[j] * (dp[j] - di) * scale;
                for (int64_t c = 0; c < d; c++) {
                    dq[b + i * d + c] += ds * amp_tensor_get(k, b + j * d + c);
                    dk[b + j * d + c] += ds * amp_tensor_get(q, b + i * d + c);
                    dv[b + j * d + c] += p[j] * amp_tensor_get(g, b + i * d + c);
                }
            }
        }
    free(p);
    free(dp);
}

/* Within tol * (max |ref| + |ref[i]|) + 1e-6: the error bound scaled to
 * the reference's magnitude (a gradient's size depends on T and d; at
 * T = 1 dq and dk are 0 up to the f32 rounding of dP - D_i). */
static void check_scaled(const char *what, const amp_tensor *t, const double *ref, double tol)
{
    double mx = 0;
    for (int64_t i = 0; t && i < amp_tensor_numel(t); i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    check_close(what, t, ref, t ? amp_tensor_numel(t) : 0, tol * mx + 1e-6, tol);
}

/* f32 and bf16, causal or not, T on and across the 64-row tiles' edges
 * (and T = 1), d = 16, 64, 80: the output and all three gradients against
 * double references on the inputs' (rounded) values. bf16 rounds P and dS
 * to bf16 before their products (and every result once), hence its wider
 * bound. all: every size, else a few. */
static void tiles_case(bool all)
{
    const int64_t Ts[6] = {1, 5, 63, 64, 65, 150}, Ds[3] = {16, 64, 80};
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int di = 0; di < 2; di++)
        for (int causal = 0; causal < 2; causal++)
            for (int ti = 0; ti < 6; ti++)
                for (int ei = 0; ei < 3; ei++) {
                    const int64_t T = Ts[ti], D = Ds[ei];
                    if ((T == 150 && D != 64 && di == 0 && !causal) || (!all && (ti % 2 || ei == 1)))
                        continue; /* keep the double references quick */
                    const amp_shape s = AMP_SHAPE(2, T, D);
                    const uint64_t seed = (uint64_t)(1000 + 100 * ti + 10 * ei + 2 * di + causal);
                    amp_tensor *q = test_uniform(s, dts[di], -2, 2, seed);
                    amp_tensor *k = test_uniform(s, dts[di], -2, 2, seed + 1);
                    amp_tensor *v = test_uniform(s, dts[di], -1, 1, seed + 2);
                    amp_tensor *g = test_uniform(s, dts[di], -1, 1, seed + 3);
                    amp_tensor_set_requires_grad(q, true);
                    amp_tensor_set_requires_grad(k, true);
                    amp_tensor_set_requires_grad(v, true);
                    amp_tensor *o = amp_attention(q, k, v, causal);
                    const double tol = dts[di] == AMP_F32 ? 2e-5 : 2e-2;
                    char what[96];
                    snprintf(what, sizeof what, "%s causal %d T %lld d %lld out", amp_dtype_name(dts[di]), causal,
                             (long long)T, (long long)D);
                    double *ref = ref_attention(q, k, v, causal);
                    check_scaled(what, o, ref, tol);
                    CHECK_OK(amp_backward_with(o, g));
                    const int64_t n = amp_tensor_numel(q);
                    double *r3 = malloc(sizeof(double) * (size_t)(3 * n));
                    ref_attention_backward(q, k, v, g, causal, r3, r3 + n, r3 + 2 * n);
                    amp_tensor *in[3] = {q, k, v};
                    for (int i = 0; i < 3; i++) {
                        snprintf(what, sizeof what, "%s causal %d T %lld d %lld d%c", amp_dtype_name(dts[di]),
                                 causal, (long long)T, (long long)D, "qkv"[i]);
                        check_scaled(what, amp_tensor_grad(in[i]), r3 + i * n, 2 * tol);
                    }
                    free(ref);
                    free(r3);
                    amp_tensor_free(q);
                    amp_tensor_free(k);
                    amp_tensor_free(v);
                    amp_tensor_free(g);
                    amp_temps_free();
                }
}

/* tiles_case on each kernel the CPU may take: bf16 dot products (forced
 * where the CPU has them: on Intel's they are not the default), AVX-512
 * f32, plain C (amp_cpu_limit; the last two on fewer sizes). */
static void test_tiles_match_double_reference(void)
{
    const unsigned limits[3] = {~0u, ~(unsigned)AMP_CPU_AVX512BF16, 0u};
    cpu_attention_set_bf16_dot(CPU_ATTN_DOT_ON);
    for (int li = 0; li < 3; li++) {
        amp_cpu_limit(limits[li]);
        tiles_case(li == 0);
    }
    amp_cpu_limit(~0u);
    cpu_attention_set_bf16_dot(CPU_ATTN_DOT_AUTO);
}

/* op_attention_bthd on [B, T, H, d] equals amp_attention on the same
 * values permuted to [B, H, T, d], bit for bit: output and gradients
 * (permuted back), f32, bf16 and f16, causal or not, T across tiles. */
static void test_bthd_layout_matches_permuted(void)
{
    static const int perm[4] = {0, 2, 1, 3};
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int di = 0; di < 3; di++)
        for (int causal = 0; causal < 2; causal++) {
            const int64_t B = 2, T = 70, H = 3, D = 16;
            amp_tensor *x[3], *xp[3];
            for (int i = 0; i < 3; i++) {
                x[i] = test_uniform(AMP_SHAPE(B, T, H, D), dts[di], -2, 2, 300 + (uint64_t)(10 * di + i));
                xp[i] = amp_clone(amp_permute(x[i], perm));
                amp_tensor_set_requires_grad(x[i], true);
                amp_tensor_set_requires_grad(xp[i], true);
            }
            amp_tensor *g = test_uniform(AMP_SHAPE(B, T, H, D), dts[di], -1, 1, 399);
            amp_tensor *gp = amp_clone(amp_permute(g, perm));
            amp_tensor *o = op_attention_bthd(x[0], x[1], x[2], causal);
            amp_tensor *op = amp_attention(xp[0], xp[1], xp[2], causal);
            CHECK(o && amp_tensor_ndim(o) == 4 && amp_tensor_dim(o, 1) == T && amp_tensor_dim(o, 2) == H);
            CHECK_OK(amp_backward_with(o, g));
            CHECK_OK(amp_backward_with(op, gp));
            amp_tensor *ob = amp_clone(amp_permute(op, perm));
            CHECK_MSG(max_abs_diff(o, ob) == 0.0, "%s causal %d: outputs differ", amp_dtype_name(dts[di]), causal);
            for (int i = 0; i < 3; i++) {
                amp_tensor *gb = amp_clone(amp_permute(amp_tensor_grad(xp[i]), perm));
                CHECK_MSG(max_abs_diff(amp_tensor_grad(x[i]), gb) == 0.0, "%s causal %d: d%c differs",
                          amp_dtype_name(dts[di]), causal, "qkv"[i]);
                amp_tensor_free(gb);
            }
            amp_tensor_free(ob);
            for (int i = 0; i < 3; i++) {
                amp_tensor_free(x[i]);
                amp_tensor_free(xp[i]);
            }
            amp_tensor_free(g);
            amp_tensor_free(gp);
            amp_temps_free();
        }
}

static amp_tensor *attn_bthd_fn(amp_tensor **in, void *vc)
{
    return op_attention_bthd(in[0], in[1], in[2], ((attn_ctx *)vc)->causal);
}

/* Finite differences through several tiles (T = 67: a full tile and a
 * 3-row one), in the [B, T, H, d] layout. */
static void test_gradcheck_across_tiles(void)
{
    for (int causal = 0; causal < 2; causal++) {
        amp_tensor *in[3];
        for (int i = 0; i < 3; i++) {
            in[i] = test_uniform(AMP_SHAPE(1, 67, 2, 4), AMP_F32, -1.5, 1.5, 500 + (uint64_t)i);
            amp_tensor_set_requires_grad(in[i], true);
        }
        attn_ctx c = {causal};
        CHECK(gradcheck(causal ? "bthd causal" : "bthd full", attn_bthd_fn, in, 3, &c, 1e-3, 2e-3, 2e-3));
        for (int i = 0; i < 3; i++)
            amp_tensor_free(in[i]);
    }
}

/* A NaN in one key poisons every row that sees it and no other, across
 * tiles; an infinite value in v makes the rows that see it non-finite and
 * leaves those of earlier 64-row tiles finite (within its own tile a
 * masked probability 0 still meets it in the P v product: 0 * inf). */
static void test_nan_inf_across_tiles(void)
{
    const int64_t T = 100, D = 16, bad = 70;
    amp_tensor *q = test_uniform(AMP_SHAPE(T, D), AMP_F32, -1, 1, 601);
    amp_tensor *k = test_uniform(AMP_SHAPE(T, D), AMP_F32, -1, 1, 602);
    amp_tensor *v = test_uniform(AMP_SHAPE(T, D), AMP_F32, -1, 1, 603);
    ((float *)amp_tensor_data(k))[bad * D + 3] = NAN;
    amp_tensor *y = amp_attention(q, k, v, true);
    CHECK(y != NULL);
    for (int64_t i = 0; y && i < T * D; i++)
        CHECK_MSG(isnan(amp_tensor_get(y, i)) == (i / D >= bad), "row %lld: %g", (long long)(i / D),
                  amp_tensor_get(y, i));
    ((float *)amp_tensor_data(k))[bad * D + 3] = 0.5f;
    ((float *)amp_tensor_data(v))[bad * D + 1] = INFINITY;
    y = amp_attention(q, k, v, true);
    for (int64_t i = 0; y && i < T * D; i++)
        if (i / D < 64)
            CHECK_MSG(isfinite(amp_tensor_get(y, i)), "row %lld: %g", (long long)(i / D), amp_tensor_get(y, i));
        else if (i % D == 1)
            CHECK_MSG(!isfinite(amp_tensor_get(y, i)), "row %lld: %g", (long long)(i / D), amp_tensor_get(y, i));
    amp_tensor_free(q);
    amp_tensor_free(k);
    amp_tensor_free(v);
    amp_temps_free();
}

int main(void)
{
    RUN(test_values_match_double_reference);
    RUN(test_causal_first_row_is_v0);
    RUN(test_gradcheck_f32);
    RUN(test_partial_gradients);
    RUN(test_matches_pytorch);
    RUN(test_16bit_close_to_f32);
    RUN(test_f16_large_scores_stay_finite);
    RUN(test_autocast_lowers);
    RUN(test_threads_give_identical_results);
    RUN(test_vector_softmax_rows_match_scalar);
    RUN(test_causal_ignores_the_future);
    RUN(test_errors_name_shapes_and_dtypes);
    RUN(test_tiles_match_double_reference);
    RUN(test_bthd_layout_matches_permuted);
    RUN(test_gradcheck_across_tiles);
    RUN(test_nan_inf_across_tiles);
    return harness_done();
}
