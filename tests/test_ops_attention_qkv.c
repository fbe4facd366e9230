/*
 * test_ops_attention_qkv.c - op_attention_qkv, attention on the three
 * thirds of one fused projection qkv [B, T, 3, H, d] read in place:
 * output and d(qkv) bit for bit against the path it replaces (narrow each
 * third, reshape, op_attention_bthd, and narrow's backward), in f32, bf16
 * and f16, causal or not, T across tiles and off the 16-lane grid, head
 * widths 32 and 64, on each kernel the CPU may take; finite differences
 * in f32; bf16 inputs widened inline giving the f32 kernel's values; the
 * errors for a wrong shape or dtype.
 */
#include "backend/cpu/cpu_backend.h"
#include "harness.h"
#include "op_check.h"
#include "ops/fused.h"

#include <stdlib.h>
#include <string.h>

/* The replaced path: each third of qkv narrowed and reshaped to [B, T,
 * H, d], then op_attention_bthd. */
static amp_tensor *split_then_attend(amp_tensor *qkv, bool causal)
{
    const int64_t B = amp_tensor_dim(qkv, 0), T = amp_tensor_dim(qkv, 1), H = amp_tensor_dim(qkv, 3),
                  D = amp_tensor_dim(qkv, 4);
    amp_tensor *p[3];
    for (int i = 0; i < 3; i++)
        p[i] = amp_reshape(amp_narrow(qkv, 2, i, 1), AMP_SHAPE(B, T, H, D));
    return op_attention_bthd(p[0], p[1], p[2], causal);
}

/* One shape, dtype and mask: the fused op against the split path, bit for
 * bit, forward and backward. */
static void compare_case(int64_t B, int64_t T, int64_t H, int64_t D, amp_dtype dt, bool causal, uint64_t seed,
                         const char *kernel)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(B, T, 3, H, D), dt, -2, 2, seed);
    amp_tensor *xs = amp_clone(x);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(xs, true);
    amp_tensor *g = test_uniform(AMP_SHAPE(B, T, H, D), dt, -1, 1, seed + 1);
    amp_tensor *o = op_attention_qkv(x, causal);
    amp_tensor *os = split_then_attend(xs, causal);
    CHECK(o && os);
    if (!o || !os)
        goto done;
    CHECK(amp_tensor_ndim(o) == 4 && amp_tensor_dim(o, 0) == B && amp_tensor_dim(o, 1) == T &&
          amp_tensor_dim(o, 2) == H && amp_tensor_dim(o, 3) == D && amp_tensor_dtype(o) == dt);
    CHECK_OK(amp_backward_with(o, g));
    CHECK_OK(amp_backward_with(os, g));
    CHECK_MSG(max_abs_diff(o, os) == 0.0, "%s %s T %lld D %lld causal %d: outputs differ by %g", kernel,
              amp_dtype_name(dt), (long long)T, (long long)D, causal, max_abs_diff(o, os));
    const amp_tensor *gx = amp_tensor_grad(x), *gxs = amp_tensor_grad(xs);
    CHECK(gx && gxs);
    if (gx && gxs) {
        CHECK(amp_tensor_dtype(gx) == dt && amp_tensor_numel(gx) == amp_tensor_numel(x));
        CHECK_MSG(max_abs_diff(gx, gxs) == 0.0, "%s %s T %lld D %lld causal %d: d(qkv) differs by %g", kernel,
                  amp_dtype_name(dt), (long long)T, (long long)D, causal, max_abs_diff(gx, gxs));
        /* a gradient that is all zero would match trivially */
        double mag = 0;
        for (int64_t i = 0; i < amp_tensor_numel(gx); i++)
            mag += fabs(amp_tensor_get(gx, i));
        CHECK_MSG(mag > 0, "%s %s: d(qkv) is all zero", kernel, amp_dtype_name(dt));
    }
done:
    amp_tensor_free(x);
    amp_tensor_free(xs);
    amp_tensor_free(g);
    amp_temps_free();
}

/* Every dtype and mask on shapes around the 64-row tiles and the 16-lane
 * columns: T = 70 (a full tile and a 6-row one), 37 (odd, under one tile),
 * 1; D = 32, 64, and 20 (not a multiple of 16). */
static void shapes_case(const char *kernel, bool all_dtypes)
{
    static const struct {
        int64_t B, T, H, D;
    } S[] = {{2, 70, 3, 32}, {1, 37, 2, 64}, {2, 1, 2, 32}, {1, 45, 3, 20}};
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    uint64_t seed = 700;
    for (size_t s = 0; s < sizeof S / sizeof S[0]; s++)
        for (int di = 0; di < (all_dtypes ? 3 : 2); di++)
            for (int causal = 0; causal < 2; causal++)
                compare_case(S[s].B, S[s].T, S[s].H, S[s].D, dts[di], causal, seed += 10, kernel);
}

static void test_matches_split_path_bit_for_bit(void) { shapes_case("default", true); }

/* The same on the CPU's other kernels: bf16 dot products (forced; not the
 * default on Intel), AVX-512 f32 without them, plain C. */
static void test_matches_split_path_on_every_kernel(void)
{
    const unsigned limits[3] = {~0u, ~(unsigned)AMP_CPU_AVX512BF16, 0u};
    const char *names[3] = {"bf16 dot", "avx512 f32", "plain C"};
    cpu_attention_set_bf16_dot(CPU_ATTN_DOT_ON);
    for (int li = 0; li < 3; li++) {
        amp_cpu_limit(limits[li]);
        shapes_case(names[li], false);
    }
    amp_cpu_limit(~0u);
    cpu_attention_set_bf16_dot(CPU_ATTN_DOT_AUTO);
}

typedef struct {
    bool causal;
} qkv_ctx;

static amp_tensor *qkv_fn(amp_tensor **in, void *vc) { return op_attention_qkv(in[0], ((qkv_ctx *)vc)->causal); }

/* Finite differences of d(qkv) across two query tiles (T = 67). */
static void test_gradcheck_f32(void)
{
    for (int causal = 0; causal < 2; causal++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(1, 67, 3, 2, 4), AMP_F32, -1.5, 1.5, 900 + (uint64_t)causal);
        amp_tensor_set_requires_grad(x, true);
        qkv_ctx c = {causal};
        CHECK(gradcheck(causal ? "qkv causal" : "qkv full", qkv_fn, &x, 1, &c, 1e-3, 2e-3, 2e-3));
        amp_tensor_free(x);
    }
}

/* Causal: a change in the last position's q, k or v leaves every earlier
 * output row as it was. */
static void test_causal_ignores_the_future(void)
{
    const int64_t T = 70, H = 2, D = 32;
    amp_tensor *x = test_uniform(AMP_SHAPE(1, T, 3, H, D), AMP_F32, -1, 1, 950);
    amp_tensor *a = amp_clone(op_attention_qkv(x, true));
    float *px = amp_tensor_data(x);
    for (int64_t i = 0; i < 3 * H * D; i++)
        px[(T - 1) * 3 * H * D + i] += 3.0f;
    amp_tensor *b = op_attention_qkv(x, true);
    CHECK(a && b);
    for (int64_t i = 0; a && b && i < (T - 1) * H * D; i++)
        CHECK_MSG(amp_tensor_get(a, i) == amp_tensor_get(b, i), "element %lld (row %lld) changed", (long long)i,
                  (long long)(i / (H * D)));
    /* the last row itself does see its own change */
    double diff = 0;
    for (int64_t i = (T - 1) * H * D; a && b && i < T * H * D; i++)
        diff += fabs(amp_tensor_get(a, i) - amp_tensor_get(b, i));
    CHECK(diff > 0);
    amp_tensor_free(x);
    amp_tensor_free(a);
    amp_temps_free();
}

/* The CPU's f32 kernels widen bf16 inputs to f32 inline: the bf16
 * forward is, bit for bit, the f32 forward on the widened values rounded
 * to bf16 once (subnormal and large inputs included; everything after
 * the widening runs in f32 either way). VDPBF16PS (AMD's default for
 * bf16) is switched off for this. */
static void test_bf16_widening_matches_f32(void)
{
    cpu_attention_set_bf16_dot(CPU_ATTN_DOT_OFF);
    const int64_t B = 2, T = 70, H = 2, D = 32;
    amp_tensor *x = test_uniform(AMP_SHAPE(B, T, 3, H, D), AMP_BF16, -2, 2, 980);
    uint16_t *px = amp_tensor_data(x);
    px[5] = 0x0001;  /* the smallest subnormal */
    px[77] = 0x807f; /* a negative subnormal */
    px[300] = 0x4300; /* 128 */
    amp_tensor *xf = amp_to(x, AMP_F32);
    amp_tensor *o = op_attention_qkv(x, true), *of = op_attention_qkv(xf, true);
    amp_tensor *ofb = amp_to(of, AMP_BF16);
    CHECK(o && ofb);
    CHECK_MSG(o && ofb && max_abs_diff(o, ofb) == 0.0, "bf16 and widened f32 outputs differ by %g",
              o && ofb ? max_abs_diff(o, ofb) : -1.0);
    amp_tensor_free(x);
    amp_temps_free();
    cpu_attention_set_bf16_dot(CPU_ATTN_DOT_AUTO);
}

static void test_errors_name_shapes_and_dtypes(void)
{
    amp_tensor *x4 = amp_zeros(AMP_SHAPE(2, 5, 3, 8), AMP_F32);
    CHECK(op_attention_qkv(x4, true) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "[B, T, 3, H, d]");
    amp_tensor *x2 = amp_zeros(AMP_SHAPE(2, 5, 2, 2, 8), AMP_F32);
    CHECK(op_attention_qkv(x2, true) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "[2, 5, 2, 2, 8]");
    amp_tensor *xi = amp_zeros(AMP_SHAPE(2, 5, 3, 2, 8), AMP_I32);
    CHECK(op_attention_qkv(xi, true) == NULL);
    CHECK(amp_last_status() == AMP_ERR_DTYPE);
    amp_clear_error();
    CHECK(op_attention_qkv(NULL, true) == NULL);
    amp_clear_error();
    amp_tensor_free(x4);
    amp_tensor_free(x2);
    amp_tensor_free(xi);
    amp_temps_free();
}

int main(void)
{
    RUN(test_matches_split_path_bit_for_bit);
    RUN(test_matches_split_path_on_every_kernel);
    RUN(test_gradcheck_f32);
    RUN(test_causal_ignores_the_future);
    RUN(test_bf16_widening_matches_f32);
    RUN(test_errors_name_shapes_and_dtypes);
    return harness_done();
}
