/*
 * test_autocast_kept.c - autocast's kept 16-bit weight copies
 * (ops/autocast.c): a weight is cast once and its copy reused by later
 * regions (gradient accumulation's micro-batches) until it changes; the
 * values and gradients are bit for bit those of casting anew each time;
 * a weight changed by the optimizer, by the user (copy_in, fill,
 * amp_tensor_data) or by amp_module_to_dtype is never served stale; the
 * optimizer step writes the updated weight's cast into the copy in the
 * same pass, bit for bit the cast, unless a graph or a tensor still holds
 * the copy; the copies are counted as cast cache and freed with the
 * weight.
 */
#include "harness.h"
#include "ops/ops.h"
#include "tensor/tensor.h"

#include <string.h>

static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    if (!a || !b || amp_tensor_dtype(a) != amp_tensor_dtype(b) || amp_tensor_numel(a) != amp_tensor_numel(b))
        return false;
    size_t n = (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a));
    return memcmp(amp_tensor_data((amp_tensor *)a), amp_tensor_data((amp_tensor *)b), n) == 0;
}

/* Whether w's kept copy is fresh and holds exactly w cast to bf16. */
static bool kept_is_the_cast(amp_tensor *w)
{
    const amp_tensor *k = w->storage->kept_cast;
    amp_tensor *c = amp_to(w, AMP_BF16);
    return k && w->storage->kept_version == w->storage->version && same_bits(k, c); /* (c: a temporary) */
}

/* A two-layer model's accumulation: `micro` micro-batches (each its own
 * autocast region, forward and backward), then an SGD step, `steps`
 * times; the weights and their gradients' sum at the end, cloned. With
 * edit, the user rewrites w1 between the first two micro-batches of each
 * step. What each micro-batch found of w1's kept copy: *casts, a new one
 * (cast in the region); *written, the same copy at a new version (the
 * optimizer step wrote the update's cast into it); *reuses, the same copy
 * unchanged. */
static void train(bool keep, bool edit, int steps, int micro, amp_tensor **out, int *casts, int *written,
                  int *reuses)
{
    autocast_keep_casts_set(keep);
    amp_tensor *w1 = test_uniform(AMP_SHAPE(24, 16), AMP_F32, -0.3, 0.3, 1);
    amp_tensor *b1 = test_uniform(AMP_SHAPE(24), AMP_F32, -0.1, 0.1, 2);
    amp_tensor *w2 = test_uniform(AMP_SHAPE(8, 24), AMP_F32, -0.3, 0.3, 3);
    amp_tensor *ps[3] = {w1, b1, w2};
    for (int i = 0; i < 3; i++)
        amp_tensor_set_requires_grad(ps[i], true);
    amp_optim *opt = amp_optim_sgd(ps, 3, amp_sgd_defaults());
    CHECK(opt);
    *casts = *written = *reuses = 0;
    const amp_tensor *last = NULL;
    uint64_t last_version = 0;
    for (int s = 0; s < steps; s++) {
        amp_optim_zero_grad(opt);
        for (int m = 0; m < micro; m++) {
            if (edit && m == 1) {
                float v[24 * 16];
                for (int i = 0; i < 24 * 16; i++)
                    v[i] = 0.01f * (float)((i * 7 + s) % 13) - 0.06f;
                CHECK_OK(amp_tensor_copy_in(w1, v, AMP_F32));
            }
            amp_tensor *x = test_uniform(AMP_SHAPE(5, 16), AMP_F32, -1, 1, 100 + (uint64_t)(s * micro + m));
            CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
            amp_tensor *h = amp_relu(amp_linear(x, w1, b1));
            amp_tensor *y = amp_linear(h, w2, NULL);
            amp_tensor *loss = amp_mean_all(amp_mul(y, y));
            CHECK_OK(amp_autocast_end());
            CHECK_OK(amp_backward(loss));
            const amp_tensor *k = w1->storage->kept_cast;
            if (keep) {
                CHECK_MSG(k != NULL, "step %d micro %d: no kept copy of w1", s, m);
                if (k != last)
                    (*casts)++;
                else if (w1->storage->kept_version != last_version)
                    (*written)++;
                else
                    (*reuses)++;
                last = k;
                last_version = w1->storage->kept_version;
            } else {
                CHECK(k == NULL);
            }
            amp_tensor_free(x);
            amp_temps_free();
        }
        CHECK_OK(amp_optim_step(opt));
        if (keep && !edit) /* written by the step (each micro-batch freed its graph) */
            CHECK_MSG(kept_is_the_cast(w1) && kept_is_the_cast(w2), "step %d: the kept copies are not the casts", s);
    }
    for (int i = 0; i < 3; i++) {
        out[i] = amp_clone(ps[i]);
        out[3 + i] = amp_clone(amp_tensor_grad(ps[i]));
    }
    amp_optim_free(opt);
    for (int i = 0; i < 3; i++)
        amp_tensor_free(ps[i]);
    amp_temps_free();
    autocast_keep_casts_set(true);
}

static void compare(const char *what, amp_tensor **a, amp_tensor **b)
{
    static const char *const names[6] = {"w1", "b1", "w2", "w1.grad", "b1.grad", "w2.grad"};
    for (int i = 0; i < 6; i++) {
        CHECK_MSG(same_bits(a[i], b[i]), "%s: %s differs with and without kept casts", what, names[i]);
        amp_tensor_free(a[i]);
        amp_tensor_free(b[i]);
    }
}

/* 3 steps of 4 micro-batches: w1 is cast once, in the first region; each
 * optimizer step writes the next cast into the same copy, reused by every
 * micro-batch; the same bits as casting anew. */
static void test_accumulation_casts_once_a_step(void)
{
    amp_tensor *a[6], *b[6];
    int casts, written, reuses, c0, w0, r0;
    train(true, false, 3, 4, a, &casts, &written, &reuses);
    CHECK_EQ_INT(casts, 1);
    CHECK_EQ_INT(written, 2);
    CHECK_EQ_INT(reuses, 9);
    train(false, false, 3, 4, b, &c0, &w0, &r0);
    compare("accum 4", a, b);
}

/* The user rewrites w1 between micro-batches: it is cast anew there, and
 * the results are those of casting anew every time. */
static void test_a_weight_written_by_the_user_is_cast_again(void)
{
    amp_tensor *a[6], *b[6];
    int casts, written, reuses, c0, w0, r0;
    train(true, true, 2, 3, a, &casts, &written, &reuses);
    /* cast at micro 0 of step 0 and after each edit (micro 1); the step
     * writes the cast the next micro 0 reuses */
    CHECK_EQ_INT(casts, 3);
    CHECK_EQ_INT(written, 1);
    CHECK_EQ_INT(reuses, 2);
    train(false, true, 2, 3, b, &c0, &w0, &r0);
    compare("edited between micro-batches", a, b);
}

/* fill and amp_tensor_data bump the version too; a forward after them
 * sees the new values. */
static amp_tensor *forward_once(amp_tensor *x, amp_tensor *w)
{
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
    amp_tensor *y = amp_clone(amp_linear(x, w, NULL));
    CHECK_OK(amp_autocast_end());
    amp_temps_free();
    return y;
}

static void test_fill_and_data_writes_are_seen(void)
{
    amp_tensor *x = test_uniform(AMP_SHAPE(3, 4), AMP_F32, -1, 1, 7);
    amp_tensor *w = test_uniform(AMP_SHAPE(2, 4), AMP_F32, -1, 1, 8);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor *y0 = forward_once(x, w);
    amp_tensor *y1 = forward_once(x, w);
    CHECK(same_bits(y0, y1));
    CHECK_OK(amp_tensor_fill(w, 0.5));
    amp_tensor *y2 = forward_once(x, w);
    for (int64_t i = 0; i < amp_tensor_numel(y2); i++) {
        /* x rows dotted with 0.5s, in bf16 */
        double want = 0;
        for (int k = 0; k < 4; k++)
            want += 0.5 * (double)amp_bf16_to_f32(amp_f32_to_bf16((float)amp_tensor_get(x, (i / 2) * 4 + k)));
        CHECK_NEAR(amp_tensor_get(y2, i), want, 0.02);
    }
    float *p = amp_tensor_data(w);
    for (int i = 0; i < 8; i++)
        p[i] = (float)i;
    amp_tensor *y3 = forward_once(x, w);
    CHECK(!same_bits(y2, y3));
    autocast_keep_casts_set(false);
    amp_tensor *y4 = forward_once(x, w);
    autocast_keep_casts_set(true);
    CHECK(same_bits(y3, y4));
    amp_tensor_free(x), amp_tensor_free(w), amp_tensor_free(y0), amp_tensor_free(y1), amp_tensor_free(y2);
    amp_tensor_free(y3), amp_tensor_free(y4);
}

/* An optimizer step while a graph still holds the weights' casts (a
 * forward whose backward runs after the step, as a user might write it):
 * the step must not write the held copies, so that backward sees the casts
 * its forward used, as it does without kept copies (PyTorch's autocast
 * casts are new tensors the step never touches); the next region casts
 * anew. Bitwise against keep off: w1's gradient goes through w2's cast. */
static void held_graph(bool keep, amp_tensor **out)
{
    autocast_keep_casts_set(keep);
    amp_tensor *w1 = test_uniform(AMP_SHAPE(24, 16), AMP_F32, -0.3, 0.3, 11);
    amp_tensor *w2 = test_uniform(AMP_SHAPE(8, 24), AMP_F32, -0.3, 0.3, 12);
    amp_tensor *ps[2] = {w1, w2};
    for (int i = 0; i < 2; i++)
        amp_tensor_set_requires_grad(ps[i], true);
    amp_optim *opt = amp_optim_sgd(ps, 2, amp_sgd_defaults());
    amp_tensor *loss[2];
    for (int r = 0; r < 2; r++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(5, 16), AMP_F32, -1, 1, 200 + (uint64_t)r);
        CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
        amp_tensor *y = amp_linear(amp_relu(amp_linear(x, w1, NULL)), w2, NULL);
        loss[r] = amp_mean_all(amp_mul(y, y));
        CHECK_OK(amp_autocast_end());
        amp_tensor_free(x);
        if (r == 0)
            CHECK_OK(amp_backward(loss[0]));
    }
    CHECK_OK(amp_optim_step(opt)); /* region 1's graph holds the casts */
    if (keep)
        CHECK_MSG(w2->storage->kept_version != w2->storage->version, "a held copy was written by the step");
    amp_optim_zero_grad(opt);
    CHECK_OK(amp_backward(loss[1]));
    out[0] = amp_clone(amp_tensor_grad(w1));
    out[1] = amp_clone(amp_tensor_grad(w2));
    amp_temps_free();
    amp_tensor *x = test_uniform(AMP_SHAPE(5, 16), AMP_F32, -1, 1, 300);
    out[2] = forward_once(x, w1);
    amp_tensor_free(x);
    amp_optim_free(opt);
    amp_tensor_free(w1), amp_tensor_free(w2);
    autocast_keep_casts_set(true);
}

static void test_a_held_cast_is_not_written_by_the_step(void)
{
    amp_tensor *a[3], *b[3];
    held_graph(true, a);
    held_graph(false, b);
    static const char *const names[3] = {"w1.grad", "w2.grad", "a forward after the step"};
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(same_bits(a[i], b[i]), "%s differs with and without kept casts", names[i]);
        amp_tensor_free(a[i]), amp_tensor_free(b[i]);
    }
}

/* A module converted to bf16 in place gets new storage: no copy of the
 * f32 weights is served, and the lowered ops need no cast any more. */
static void test_to_dtype_drops_the_copy(void)
{
    amp_module *m = amp_nn_linear(4, 3, true);
    CHECK(m);
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 4), AMP_F32, -1, 1, 9);
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
    CHECK(amp_module_forward(m, x));
    CHECK_OK(amp_autocast_end());
    amp_temps_free();
    amp_tensor *ps[4];
    CHECK_EQ_INT(amp_module_params(m, ps, 4), 2);
    CHECK(ps[0]->storage->kept_cast != NULL);
    CHECK_OK(amp_module_to_dtype(m, AMP_BF16));
    CHECK(ps[0]->storage->kept_cast == NULL);
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_BF16));
    amp_tensor *y = amp_module_forward(m, x);
    CHECK(y && amp_tensor_dtype(y) == AMP_BF16);
    CHECK_OK(amp_autocast_end());
    CHECK(ps[0]->storage->kept_cast == NULL);
    amp_temps_free();
    amp_module_free(m);
    amp_tensor_free(x);
}

/* The copies are cast cache, and go with their weight. */
static void test_copies_are_counted_and_freed(void)
{
    amp_memory_categories c0, c1, c2;
    amp_memory_get_categories(AMP_CPU, &c0);
    amp_tensor *w = test_uniform(AMP_SHAPE(64, 64), AMP_F32, -1, 1, 5);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor *x = test_uniform(AMP_SHAPE(2, 64), AMP_F32, -1, 1, 6);
    amp_tensor *y = forward_once(x, w);
    amp_memory_get_categories(AMP_CPU, &c1);
    CHECK_MSG(c1.current[AMP_MEM_CAST_CACHE] - c0.current[AMP_MEM_CAST_CACHE] >= 64 * 64 * 2,
              "cast cache grew by %zu", c1.current[AMP_MEM_CAST_CACHE] - c0.current[AMP_MEM_CAST_CACHE]);
    amp_tensor_free(w);
    amp_memory_get_categories(AMP_CPU, &c2);
    CHECK_EQ_INT((int64_t)c2.current[AMP_MEM_CAST_CACHE], (int64_t)c0.current[AMP_MEM_CAST_CACHE]);
    amp_tensor_free(x), amp_tensor_free(y);
}

int main(void)
{
    RUN(test_accumulation_casts_once_a_step);
    RUN(test_a_weight_written_by_the_user_is_cast_again);
    RUN(test_fill_and_data_writes_are_seen);
    RUN(test_a_held_cast_is_not_written_by_the_step);
    RUN(test_to_dtype_drops_the_copy);
    RUN(test_copies_are_counted_and_freed);
    return harness_done();
}
