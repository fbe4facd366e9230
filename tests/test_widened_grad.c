/*
 * test_widened_grad.c - a linear layer's weight gradient under autocast,
 * made in f32 with the 16-bit rounding (autograd_grad_dtype in
 * autograd/graph.h, be_gemm_desc.c_rounded): the f32 weight's .grad has
 * the bits of the 16-bit gradient widened by the cast's backward, which
 * runs no widening pass of its own. The reference is the same backward
 * with a node observer set, which keeps every gradient in its input's
 * dtype (the path before the fusion). Shapes: a tall weight and a small
 * one whose gradients run on ampc's own kernels with the rounding as the
 * tile epilogue, and one that oneDNN runs where it is built in (into a
 * 16-bit buffer, then widened); bf16 and f16 (whose weight gradient
 * widens dY up front, then the buffer); a weight read twice (no widened
 * gradient: the two 16-bit gradients are added in 16 bits first, as
 * PyTorch does).
 */
#include "harness.h"

#include "autograd/graph.h"
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/onednn/onednn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static amp_status pass(void *ctx, const node *n, bool backward, amp_tensor *const *t, int n_t)
{
    (void)ctx, (void)n, (void)backward, (void)t, (void)n_t;
    return AMP_OK;
}

typedef struct {
    amp_tensor *w, *b, *x;
} grads;

/* One autocast forward of linear (twice through w when twice), the
 * backward from a fixed 16-bit gradient, and copies of the gradients. */
static grads run(amp_dtype dt, int64_t out, int64_t in, int64_t rows, bool twice, bool observed, uint64_t seed)
{
    amp_manual_seed(seed);
    amp_tensor *w = amp_randn(AMP_SHAPE(out, in), AMP_F32, 0, 0.5);
    amp_tensor *b = amp_randn(AMP_SHAPE(out), AMP_F32, 0, 0.5);
    amp_tensor *x = amp_randn(AMP_SHAPE(rows, in), AMP_F32, 0, 1);
    amp_tensor *g = amp_randn(AMP_SHAPE(rows, out), dt, 0, 1);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor_set_requires_grad(x, true);
    if (observed)
        autograd_set_observer(pass, NULL);
    amp_autocast_begin(AMP_CPU, dt);
    amp_tensor *y = amp_linear(x, w, b);
    if (twice)
        y = amp_add(y, amp_linear(x, w, b));
    amp_autocast_end();
    CHECK(y && amp_tensor_dtype(y) == dt);
    CHECK_OK(amp_backward_with(y, g));
    if (observed)
        autograd_set_observer(NULL, NULL);
    grads r = {amp_clone(amp_tensor_grad(w)), amp_clone(amp_tensor_grad(b)),
               amp_clone(amp_tensor_grad(x))};
    amp_tensor_free(w);
    amp_tensor_free(b);
    amp_tensor_free(x);
    amp_tensor_free(g);
    amp_temps_free();
    return r;
}

/* Whether a and b (f32) hold the same bits. */
static bool same_bits(amp_tensor *a, amp_tensor *b)
{
    if (!a || !b || amp_tensor_numel(a) != amp_tensor_numel(b) || amp_tensor_dtype(a) != AMP_F32 ||
        amp_tensor_dtype(b) != AMP_F32)
        return false;
    return memcmp(amp_tensor_data(a), amp_tensor_data(b), (size_t)amp_tensor_numel(a) * sizeof(float)) == 0;
}

/* Every value of t (f32) is one of dt's (its widening is exact). */
static bool holds_16bit(amp_tensor *t, amp_dtype dt)
{
    const float *v = amp_tensor_data(t);
    for (int64_t i = 0; i < amp_tensor_numel(t); i++) {
        uint16_t h;
        float back;
        amp_convert(&v[i], AMP_F32, &h, dt, 1);
        amp_convert(&h, dt, &back, AMP_F32, 1);
        if (memcmp(&back, &v[i], sizeof back) != 0)
            return false;
    }
    return true;
}

static void free_grads(grads g)
{
    amp_tensor_free(g.w);
    amp_tensor_free(g.b);
    amp_tensor_free(g.x);
}

/* The profiler's table of one more run: whether the weight's cast handed
 * an f32 gradient on ("to bwd fp32 -> fp32") instead of widening one. */
static bool cast_handed_on(amp_dtype dt, int64_t out, int64_t in, int64_t rows)
{
    amp_profiler_opts o = amp_profiler_defaults();
    CHECK_OK(amp_profiler_start(&o));
    free_grads(run(dt, out, in, rows, false, false, 7));
    CHECK_OK(amp_profiler_stop());
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (!f)
        return false;
    CHECK_OK(amp_profiler_print_table(f, 100));
    fclose(f);
    bool found = false;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "to ", 3) == 0 && strstr(line, " bwd ") && strstr(line, "fp32 -> fp32"))
            found = true;
    free(buf);
    amp_profiler_reset();
    return found;
}

static void check_shape(amp_dtype dt, int64_t out, int64_t in, int64_t rows, bool twice)
{
    grads fused = run(dt, out, in, rows, twice, false, 42);
    grads plain = run(dt, out, in, rows, twice, true, 42);
    CHECK_MSG(same_bits(fused.w, plain.w), "%s %lldx%lld rows %lld%s: dW differs from the widened 16-bit dW",
              amp_dtype_name(dt), (long long)out, (long long)in, (long long)rows, twice ? " (twice)" : "");
    CHECK(same_bits(fused.b, plain.b));
    CHECK(same_bits(fused.x, plain.x));
    CHECK(holds_16bit(fused.w, dt));
    free_grads(fused);
    free_grads(plain);
}

/* dW [out, in] = dYᵀ X: the product the dispatcher sees. */
static bool dw_runs_own(int64_t out, int64_t in, int64_t rows)
{
    return gemm_lowp_runs_own(true, false, out, in, rows, AMP_BF16);
}

static void test_bf16_own_kernel_shapes(void)
{
    CHECK(dw_runs_own(2100, 64, 50) && dw_runs_own(96, 80, 33));
    check_shape(AMP_BF16, 2100, 64, 50, false);
    check_shape(AMP_BF16, 96, 80, 33, false);
}

static void test_bf16_onednn_shape(void)
{
    CHECK(dw_runs_own(256, 128, 64) == !onednn_available());
    check_shape(AMP_BF16, 256, 128, 64, false);
}
static void test_f16(void)
{
    check_shape(AMP_F16, 2100, 64, 50, false);
    check_shape(AMP_F16, 96, 80, 33, false);
}
static void test_weight_read_twice(void) { check_shape(AMP_BF16, 96, 80, 33, true); }

static void test_cast_hands_gradient_on(void)
{
    CHECK_MSG(cast_handed_on(AMP_BF16, 96, 80, 33), "no f32 gradient handed on by the weight's cast");
}

int main(void)
{
    RUN(test_bf16_own_kernel_shapes);
    RUN(test_bf16_onednn_shape);
    RUN(test_f16);
    RUN(test_weight_read_twice);
    RUN(test_cast_hands_gradient_on);
    return harness_done();
}
