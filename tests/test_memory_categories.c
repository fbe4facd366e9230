/*
 * test_memory_categories.c - the memory categories of the caching
 * allocators (amp_memory_get_categories, amp_memory_report; the ledger in
 * src/record/mem_ledger.c).
 *
 *   - Training steps of the mlp, the cnn and the gpt (small sizes) in fp32,
 *     bf16 and fp16 (with the grad scaler), on the CPU and, when there is
 *     one (cudaemu in `ctest -L cuda`), on CUDA: at every stage the
 *     categories sum exactly to the allocator's total (and that total is
 *     amp_memory_get_stats' current), each phase peak's makeup sums to that
 *     peak, and the overall peak is the largest phase peak;
 *     parameters are the parameters' sizes rounded to the allocator's size
 *     classes, gradients the same for the .grads after backward, optimizer
 *     state Adam's two moments per parameter and its step counters after
 *     the first step; the cast cache holds something only under 16-bit
 *     autocast; activations are > 0 after a forward with grad and 0 once
 *     backward has freed the graph; data is what was made under
 *     amp_memory_set_category(AMP_MEM_DATA). Freeing everything brings every
 *     category back where it was.
 *   - A temporary held by the graph counts as activations while a node
 *     holds it and as a temporary again after; a no-grad forward holds
 *     nothing; a parameter the graph holds stays a parameter.
 *   - The report names each category and the phases seen; bad arguments
 *     are errors.
 */
#include "harness.h"

#include "backend/backend.h"
#include "base/base.h"
#include "tensor/tensor.h"

#include <stdlib.h>

static const char *const model_names[3] = {"mlp", "cnn", "gpt"};
static const char *const prec_names[3] = {"fp32", "bf16", "fp16"};
static const amp_gpt_config gpt_cfg = {.vocab = 16, .context = 8, .width = 16, .layers = 2, .heads = 2, .mlp = 32};

static amp_memory_categories cats(amp_device dev)
{
    amp_memory_categories m;
    memset(&m, 0xff, sizeof m);
    CHECK_OK(amp_memory_get_categories(dev, &m));
    return m;
}

static size_t block(amp_device dev, size_t nbytes) { return backend_of(dev)->mem_block_size(nbytes); }

/* The ledger's invariants on dev, at `when`. */
static void check_sums(amp_device dev, const char *when)
{
    amp_memory_categories m = cats(dev);
    size_t sum = 0;
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) {
        sum += m.current[c];
        CHECK_MSG(m.peak[c] >= m.current[c], "%s: %s peak %zu below current %zu", when,
                  amp_memory_category_name((amp_mem_category)c), m.peak[c], m.current[c]);
    }
    CHECK_MSG(sum == m.total, "%s on %s: the categories sum to %zu, the total is %zu", when, amp_device_name(dev),
              sum, m.total);
    amp_memory_stats st = dev == AMP_CPU ? amp_memory_get_stats() : amp_cuda_memory_get_stats();
    CHECK_MSG(m.total == st.current && m.total_peak == st.peak,
              "%s on %s: the ledger's total %zu / peak %zu, the allocator's %zu / %zu", when, amp_device_name(dev),
              m.total, m.total_peak, st.current, st.peak);
    size_t top = 0;
    for (int p = 0; p < AMP_PHASE_COUNT; p++) {
        size_t s = 0;
        for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
            s += m.phase_peak_by[p][c];
        CHECK_MSG(s == m.phase_peak[p], "%s on %s: phase %s's peak %zu is made up of %zu", when,
                  amp_device_name(dev), amp_phase_name((amp_phase)p), m.phase_peak[p], s);
        if (m.phase_peak[p] > top)
            top = m.phase_peak[p];
    }
    CHECK_MSG(top == m.total_peak, "%s on %s: the largest phase peak %zu, the peak %zu", when, amp_device_name(dev),
              top, m.total_peak);
}

static size_t tensor_block(const amp_tensor *t)
{
    return block(amp_tensor_device(t), (size_t)amp_tensor_numel(t) * amp_dtype_size(amp_tensor_dtype(t)));
}

/* The model's distinct parameters (the gpt's head shares wte's). */
static int distinct_params(const amp_module *m, amp_tensor **ps, int max)
{
    amp_tensor *all[128];
    int n = amp_module_params(m, all, 128), k = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < k; j++)
            seen |= ps[j]->storage == all[i]->storage;
        if (!seen && k < max)
            ps[k++] = all[i];
    }
    return k;
}

static amp_module *make_model(int model)
{
    static const int64_t hidden[2] = {32, 16};
    amp_manual_seed(31 + (uint64_t)model);
    if (model == 0)
        return amp_model_mlp(64, hidden, 2, 10);
    if (model == 1)
        return amp_model_cnn(1, 8, 8, 10);
    return amp_model_gpt(gpt_cfg);
}

/* A batch of 4 for the model, made on the host as data and copied to dev. */
static void make_batch(int model, amp_device dev, amp_tensor **x, amp_tensor **y)
{
    amp_mem_category prev = amp_memory_set_category(AMP_MEM_DATA);
    amp_tensor *hx, *hy;
    if (model == 2) {
        int64_t tok[4 * 8], next[4 * 8];
        for (int i = 0; i < 4 * 8; i++) {
            tok[i] = (i * 5 + 3) % gpt_cfg.vocab;
            next[i] = (i * 7 + 1) % gpt_cfg.vocab;
        }
        hx = amp_from_data(AMP_SHAPE(4, 8), AMP_I64, tok);
        hy = amp_from_data(AMP_SHAPE(4 * 8), AMP_I64, next);
    } else {
        hx = test_uniform(model == 0 ? AMP_SHAPE(4, 64) : AMP_SHAPE(4, 1, 8, 8), AMP_F32, 0, 1, 77);
        const int64_t labels[4] = {1, 7, 3, 9};
        hy = amp_from_data(AMP_SHAPE(4), AMP_I64, labels);
    }
    amp_memory_set_category(prev);
    if (dev == AMP_CPU) {
        *x = hx;
        *y = hy;
        return;
    }
    *x = amp_to_device(hx, dev);
    *y = amp_to_device(hy, dev);
    amp_tensor_free(hx);
    amp_tensor_free(hy);
}

/* Steps of one model at one precision on dev, checked as it goes. */
static void train_checked(int model, int prec, amp_device dev)
{
    char what[96];
    snprintf(what, sizeof what, "%s %s on %s", model_names[model], prec_names[prec], amp_device_name(dev));
    if (dev == AMP_CPU)
        amp_memory_reset_peak();
    else
        amp_cuda_memory_reset_peak();
    const amp_memory_categories base = cats(dev);
    CHECK_MSG(base.current[AMP_MEM_ACTIVATIONS] == 0, "%s: activations %zu before anything ran", what,
              base.current[AMP_MEM_ACTIVATIONS]);

    amp_module *m = make_model(model);
    CHECK(m);
    if (!m)
        return;
    if (dev != AMP_CPU)
        CHECK_OK(amp_module_to(m, dev));
    amp_tensor *ps[64];
    const int n = distinct_params(m, ps, 64);
    size_t want_params = 0, want_grads = 0, want_state = 0;
    for (int i = 0; i < n; i++) {
        want_params += tensor_block(ps[i]);
        want_grads += tensor_block(ps[i]); /* .grad: the parameter's dtype and shape */
        want_state += 2 * block(dev, (size_t)amp_tensor_numel(ps[i]) * sizeof(float)); /* exp_avg, exp_avg_sq */
    }
    amp_memory_categories now = cats(dev);
    CHECK_MSG(now.current[AMP_MEM_PARAMETERS] - base.current[AMP_MEM_PARAMETERS] == want_params,
              "%s: parameters %zu, want %zu", what, now.current[AMP_MEM_PARAMETERS] - base.current[AMP_MEM_PARAMETERS],
              want_params);

    amp_tensor *x, *y;
    make_batch(model, dev, &x, &y);
    now = cats(dev);
    CHECK_MSG(now.current[AMP_MEM_DATA] - base.current[AMP_MEM_DATA] == tensor_block(x) + tensor_block(y),
              "%s: data %zu, want %zu", what, now.current[AMP_MEM_DATA] - base.current[AMP_MEM_DATA],
              tensor_block(x) + tensor_block(y));

    amp_tensor *all[128];
    const int n_all = amp_module_params(m, all, 128);
    amp_optim *opt = amp_optim_adam(all, n_all, amp_adam_defaults());
    CHECK(opt);
    const bool half = prec > 0;
    const amp_dtype dt = prec == 1 ? AMP_BF16 : AMP_F16;
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = prec == 2;
    amp_scaler *sc = amp_scaler_new(so);
    CHECK(sc);

    for (int step = 0; step < 2 && opt && sc; step++) {
        amp_optim_zero_grad(opt);
        amp_phase_begin(AMP_PHASE_FORWARD);
        if (half)
            CHECK_OK(amp_autocast_begin(dev, dt));
        amp_tensor *out = amp_module_forward(m, x);
        if (model == 2)
            out = amp_reshape(out, AMP_SHAPE(4 * 8, gpt_cfg.vocab));
        amp_tensor *loss = amp_cross_entropy(out, y);
        CHECK(loss);
        now = cats(dev);
        CHECK_MSG(now.current[AMP_MEM_ACTIVATIONS] > 0, "%s step %d: no activations after the forward", what, step);
        CHECK_MSG(half ? now.current[AMP_MEM_CAST_CACHE] > base.current[AMP_MEM_CAST_CACHE]
                       : now.current[AMP_MEM_CAST_CACHE] == base.current[AMP_MEM_CAST_CACHE],
                  "%s step %d: cast cache %zu after the forward", what, step, now.current[AMP_MEM_CAST_CACHE]);
        const size_t casts_after_forward = now.current[AMP_MEM_CAST_CACHE];
        if (half)
            CHECK_OK(amp_autocast_end());
        CHECK_OK(amp_phase_end(AMP_PHASE_FORWARD));
        check_sums(dev, what);

        amp_phase_begin(AMP_PHASE_BACKWARD);
        CHECK_OK(amp_backward(amp_scaler_scale(sc, loss)));
        CHECK_OK(amp_phase_end(AMP_PHASE_BACKWARD));
        now = cats(dev);
        CHECK_MSG(now.current[AMP_MEM_ACTIVATIONS] == 0, "%s step %d: activations %zu after backward", what, step,
                  now.current[AMP_MEM_ACTIVATIONS]);
        CHECK_MSG(now.current[AMP_MEM_GRADIENTS] - base.current[AMP_MEM_GRADIENTS] == want_grads,
                  "%s step %d: gradients %zu, want %zu", what, step,
                  now.current[AMP_MEM_GRADIENTS] - base.current[AMP_MEM_GRADIENTS], want_grads);
        check_sums(dev, what);

        amp_phase_begin(AMP_PHASE_OPTIMIZER);
        CHECK_OK(amp_scaler_step(sc, opt, NULL));
        CHECK_OK(amp_scaler_update(sc));
        CHECK_OK(amp_phase_end(AMP_PHASE_OPTIMIZER));
        now = cats(dev);
        const size_t counters = block(dev, (size_t)(n_all + 1) * sizeof(int64_t));
        CHECK_MSG(now.current[AMP_MEM_OPTIMIZER] - base.current[AMP_MEM_OPTIMIZER] == want_state + counters,
                  "%s step %d: optimizer state %zu, want %zu", what, step,
                  now.current[AMP_MEM_OPTIMIZER] - base.current[AMP_MEM_OPTIMIZER], want_state + counters);
        CHECK_MSG(now.current[AMP_MEM_PARAMETERS] - base.current[AMP_MEM_PARAMETERS] == want_params,
                  "%s step %d: parameters %zu after the step, want %zu", what, step,
                  now.current[AMP_MEM_PARAMETERS] - base.current[AMP_MEM_PARAMETERS], want_params);
        amp_temps_free();
        /* The pool and the graph let go of the casts; the weights keep
         * their 16-bit copies (ops/autocast.c) for the next forward: the
         * forward's cast cache, no more, and freed with the model below. */
        now = cats(dev);
        CHECK_MSG(now.current[AMP_MEM_CAST_CACHE] == casts_after_forward,
                  "%s step %d: cast cache %zu after the step, %zu after the forward", what, step,
                  now.current[AMP_MEM_CAST_CACHE], casts_after_forward);
        check_sums(dev, what);
        if (dev != AMP_CPU)
            check_sums(AMP_CPU, what);
    }
    now = cats(dev);
    CHECK_MSG(now.phase_peak[AMP_PHASE_FORWARD] > 0 && now.phase_peak[AMP_PHASE_BACKWARD] > 0 &&
                  now.phase_peak[AMP_PHASE_OPTIMIZER] > 0,
              "%s: phase peaks forward %zu, backward %zu, optimizer %zu", what, now.phase_peak[AMP_PHASE_FORWARD],
              now.phase_peak[AMP_PHASE_BACKWARD], now.phase_peak[AMP_PHASE_OPTIMIZER]);

    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_temps_free();
    now = cats(dev);
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        CHECK_MSG(now.current[c] == base.current[c], "%s: %s %zu after freeing everything, %zu before", what,
                  amp_memory_category_name((amp_mem_category)c), now.current[c], base.current[c]);
    check_sums(dev, what);
}

static void run_all(amp_device dev)
{
    for (int model = 0; model < 3; model++)
        for (int prec = 0; prec < 3; prec++) {
            if (dev == AMP_CUDA && prec == 1 && !amp_cuda_bf16_supported())
                continue;
            train_checked(model, prec, dev);
        }
}

static void test_training_steps_on_the_cpu(void) { run_all(AMP_CPU); }

static void test_training_steps_on_cuda(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    /* cuBLASLt's workspace is made at the first product and kept for the
     * process (workspace): made before the cases compare with their start. */
    amp_tensor *h = amp_ones(AMP_SHAPE(8, 8), AMP_F32), *a = amp_to_device(h, AMP_CUDA);
    CHECK(a && amp_matmul(a, a));
    amp_tensor_free(a);
    amp_tensor_free(h);
    amp_temps_free();
    run_all(AMP_CUDA);
}

/* One tensor through the graph: a temporary while free, activations while
 * a node holds it, a temporary again once backward lets go. */
static void test_activations_follow_the_graph(void)
{
    amp_tensor *w = amp_ones(AMP_SHAPE(256), AMP_F32);
    CHECK_OK(amp_tensor_set_requires_grad(w, true));
    tensor_set_category(w, AMP_MEM_PARAMETERS);
    const size_t b = block(AMP_CPU, 256 * sizeof(float));
    amp_memory_categories m0 = cats(AMP_CPU);
    CHECK_EQ_INT((long long)m0.current[AMP_MEM_ACTIVATIONS], 0);

    amp_tensor *h = amp_mul(w, w); /* a temporary, held by exp's node */
    amp_tensor *e = amp_exp(h);    /* exp saves its output */
    amp_memory_categories m1 = cats(AMP_CPU);
    CHECK_EQ_INT((long long)m1.current[AMP_MEM_ACTIVATIONS], (long long)(2 * b));
    CHECK_EQ_INT((long long)m1.current[AMP_MEM_PARAMETERS], (long long)m0.current[AMP_MEM_PARAMETERS]);
    CHECK_OK(amp_backward(amp_sum_all(e)));
    amp_memory_categories m2 = cats(AMP_CPU);
    CHECK_EQ_INT((long long)m2.current[AMP_MEM_ACTIVATIONS], 0);
    CHECK_EQ_INT((long long)(m2.current[AMP_MEM_GRADIENTS] - m0.current[AMP_MEM_GRADIENTS]), (long long)b);

    /* No grad: no node, nothing held. */
    amp_no_grad_begin();
    amp_tensor *f = amp_exp(amp_mul(w, w));
    amp_no_grad_end();
    CHECK(f);
    CHECK_EQ_INT((long long)cats(AMP_CPU).current[AMP_MEM_ACTIVATIONS], 0);
    amp_temps_free();
    amp_tensor_free(w);
    check_sums(AMP_CPU, "graph");
}

/* Blocks a backend takes for itself are workspace; a tensor takes the
 * thread's category; set_category moves a block and keeps the sum. */
static void test_categories_of_new_blocks(void)
{
    amp_memory_categories m0 = cats(AMP_CPU);
    void *p = amp_alloc(1000);
    CHECK_EQ_INT((long long)(cats(AMP_CPU).current[AMP_MEM_WORKSPACE] - m0.current[AMP_MEM_WORKSPACE]),
                 (long long)block(AMP_CPU, 1000));
    amp_free(p);

    CHECK_EQ_INT(amp_memory_set_category(AMP_MEM_OPTIMIZER), AMP_MEM_TEMPORARIES);
    amp_tensor *t = amp_zeros(AMP_SHAPE(100), AMP_F32);
    CHECK_EQ_INT(amp_memory_set_category(AMP_MEM_TEMPORARIES), AMP_MEM_OPTIMIZER);
    /* Out of range: ignored. */
    CHECK_EQ_INT(amp_memory_set_category((amp_mem_category)99), AMP_MEM_TEMPORARIES);
    CHECK_EQ_INT(amp_memory_set_category(AMP_MEM_TEMPORARIES), AMP_MEM_TEMPORARIES);
    CHECK_EQ_INT((long long)(cats(AMP_CPU).current[AMP_MEM_OPTIMIZER] - m0.current[AMP_MEM_OPTIMIZER]),
                 (long long)block(AMP_CPU, 400));
    tensor_set_category(t, AMP_MEM_CAST_CACHE);
    amp_memory_categories m1 = cats(AMP_CPU);
    CHECK_EQ_INT((long long)(m1.current[AMP_MEM_OPTIMIZER] - m0.current[AMP_MEM_OPTIMIZER]), 0);
    CHECK_EQ_INT((long long)(m1.current[AMP_MEM_CAST_CACHE] - m0.current[AMP_MEM_CAST_CACHE]),
                 (long long)block(AMP_CPU, 400));
    check_sums(AMP_CPU, "retag");
    amp_tensor_free(t);
    CHECK_EQ_INT((long long)cats(AMP_CPU).current[AMP_MEM_CAST_CACHE], (long long)m0.current[AMP_MEM_CAST_CACHE]);
}

/* A phase that allocates nothing still shows what was held when it began;
 * reset_peak restarts every peak from what is in use. */
static void test_phase_peaks(void)
{
    amp_tensor *t = amp_zeros(AMP_SHAPE(5000), AMP_F32);
    amp_memory_reset_peak();
    amp_memory_categories m = cats(AMP_CPU);
    CHECK_EQ_INT((long long)m.total_peak, (long long)m.total);
    amp_phase_begin(AMP_PHASE_CHECKPOINT);
    CHECK_OK(amp_phase_end(AMP_PHASE_CHECKPOINT));
    m = cats(AMP_CPU);
    CHECK_EQ_INT((long long)m.phase_peak[AMP_PHASE_CHECKPOINT], (long long)m.total);
    amp_phase_begin(AMP_PHASE_DATA);
    amp_tensor *u = amp_zeros(AMP_SHAPE(3000), AMP_F32);
    CHECK_OK(amp_phase_end(AMP_PHASE_DATA));
    m = cats(AMP_CPU);
    CHECK_EQ_INT((long long)m.phase_peak[AMP_PHASE_DATA], (long long)m.total);
    CHECK_EQ_INT((long long)m.phase_peak_by[AMP_PHASE_DATA][AMP_MEM_TEMPORARIES],
                 (long long)m.current[AMP_MEM_TEMPORARIES]);
    amp_tensor_free(u);
    amp_tensor_free(t);
    check_sums(AMP_CPU, "phases");
}

static void test_report_and_errors(void)
{
    amp_memory_categories m;
    CHECK_EQ_INT(amp_memory_get_categories(AMP_CPU, NULL), AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "NULL output");
    CHECK_EQ_INT(amp_memory_get_categories((amp_device)42, &m), AMP_ERR_DEVICE);
    CHECK_ERROR(AMP_ERR_DEVICE, "invalid device 42");
    amp_phase_begin(AMP_PHASE_FORWARD);
    amp_tensor *t = amp_zeros(AMP_SHAPE(1000), AMP_F32);
    CHECK_OK(amp_phase_end(AMP_PHASE_FORWARD));
    FILE *f = tmpfile();
    CHECK(f);
    if (!f)
        return;
    CHECK_OK(amp_memory_report(f));
    char buf[8192] = "";
    rewind(f);
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = 0;
    fclose(f);
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        CHECK_MSG(strstr(buf, amp_memory_category_name((amp_mem_category)c)), "no %s in the report:\n%s",
                  amp_memory_category_name((amp_mem_category)c), buf);
    CHECK_MSG(strstr(buf, "memory on cpu") && strstr(buf, "forward") && strstr(buf, "at the peak"),
              "the report:\n%s", buf);
    amp_tensor_free(t);
}

int main(void)
{
    RUN(test_categories_of_new_blocks);
    RUN(test_activations_follow_the_graph);
    RUN(test_phase_peaks);
    RUN(test_report_and_errors);
    RUN(test_training_steps_on_the_cpu);
    RUN(test_training_steps_on_cuda);
    return harness_done();
}
