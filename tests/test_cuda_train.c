/*
 * test_cuda_train.c - training on the CUDA backend against the CPU: a
 * short MLP run (SGD and AdamW, fp32 / bf16 / fp16 + scaler) that must
 * follow the CPU's; the caching allocator's steady state and autocast on
 * CUDA; training steps that never wait for the GPU
 * (amp_cuda_get_sync_stats); a tiny GPT (forward and backward, with
 * dropout, under autocast) against the CPU; clip_grad_norm on the device
 * (non-finite cases included), and its 0-d tensor variant, which does not
 * wait; checkpoints of a CUDA model (loaded on
 * the CPU and on CUDA); a sequential Linear-ReLU-Linear (the fused
 * linear + relu) against the CPU; and the memory levers' optimizer steps
 * (f32 masters of 16-bit parameters, bf16 state) against the CPU.
 *
 * The ops themselves are test_cuda.c's; `ampc ... --device cuda` is
 * test_cuda_cli.c's; what they share is cuda_rig.h.
 *
 * Without a GPU every test is reported as skipped (never as passed) and
 * the program exits 77, which CTest shows as "Skipped".
 */
#include "cuda_rig.h"
#include "tensor/tensor.h"

#include <unistd.h>

/* ------------------------------------------------------------ training */

/* A small MLP on fixed data; returns the loss of each step. */
static void train(amp_device dev, int prec, bool adam, int steps, double *losses)
{
    amp_manual_seed(3);
    int64_t hidden[2] = {64, 32};
    amp_module *m = amp_model_mlp(20, hidden, 2, 5);
    amp_tensor *x = test_uniform(AMP_SHAPE(32, 20), AMP_F32, -1, 1, 51);
    int64_t y_host[32];
    for (int i = 0; i < 32; i++)
        y_host[i] = (i * 7) % 5;
    amp_tensor *y = amp_from_data(AMP_SHAPE(32), AMP_I64, y_host);
    if (dev == AMP_CUDA) {
        CHECK_OK(amp_module_to(m, AMP_CUDA));
        CHECK_OK(amp_tensor_move(x, AMP_CUDA));
        CHECK_OK(amp_tensor_move(y, AMP_CUDA));
    }
    amp_tensor *params[16];
    int np = amp_module_params(m, params, 16);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.1;
    so.momentum = 0.9;
    amp_optim *opt = adam ? amp_optim_adamw(params, np, amp_adamw_defaults()) : amp_optim_sgd(params, np, so);
    amp_scaler_opts sc = amp_scaler_defaults();
    sc.enabled = prec == 2;
    amp_scaler *s = amp_scaler_new(sc);
    for (int k = 0; k < steps; k++) {
        amp_optim_zero_grad(opt);
        if (prec)
            amp_autocast_begin(dev, prec == 1 ? AMP_BF16 : AMP_F16);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, x), y);
        if (prec)
            amp_autocast_end();
        losses[k] = amp_item(loss);
        CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
        CHECK_OK(amp_scaler_step(s, opt, NULL));
        CHECK_OK(amp_scaler_update(s));
        amp_temps_free();
    }
    amp_scaler_free(s);
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void test_mlp_training_follows_the_cpu(void)
{
    enum { STEPS = 25 };
    const char *names[3] = {"fp32", "bf16", "fp16+scaler"};
    for (int adam = 0; adam < 2; adam++)
        for (int prec = 0; prec < 3; prec++) {
            double cpu[STEPS], cuda[STEPS];
            train(AMP_CPU, prec, adam, STEPS, cpu);
            train(AMP_CUDA, prec, adam, STEPS, cuda);
            double tol = prec == 0 ? 1e-4 : prec == 1 ? 3e-2 : 1e-2;
            for (int k = 0; k < STEPS; k++)
                CHECK_MSG(close_to(cpu[k], cuda[k], tol), "%s %s: step %d loss %.7g on cuda, %.7g on the cpu",
                          adam ? "adamw" : "sgd", names[prec], k, cuda[k], cpu[k]);
            CHECK_MSG(cuda[STEPS - 1] < cuda[0], "%s %s: the loss did not go down (%g -> %g)", adam ? "adamw" : "sgd",
                      names[prec], cuda[0], cuda[STEPS - 1]);
        }
}

/* After the first step a step takes no fresh device memory, and autocast
 * on CUDA casts as the CUDA policy says. */
static void test_allocator_steady_state_and_autocast(void)
{
    double losses[3];
    train(AMP_CUDA, 2, true, 3, losses);
    amp_memory_stats a = amp_cuda_memory_get_stats();
    train(AMP_CUDA, 2, true, 3, losses);
    amp_memory_stats b = amp_cuda_memory_get_stats();
    CHECK_MSG(b.os_allocs == a.os_allocs, "cudaMalloc calls went from %zu to %zu", a.os_allocs, b.os_allocs);

    amp_tensor *w = test_uniform(AMP_SHAPE(8, 8), AMP_F32, -1, 1, 61);
    CHECK_OK(amp_tensor_move(w, AMP_CUDA));
    amp_tensor_set_requires_grad(w, true);
    amp_autocast_begin(AMP_CUDA, AMP_F16);
    amp_tensor *y = amp_matmul(w, w);
    amp_tensor *e = amp_exp(y);
    amp_autocast_end();
    CHECK(amp_tensor_dtype(y) == AMP_F16);
    CHECK(amp_tensor_dtype(e) == AMP_F32);
    CHECK_OK(amp_backward(amp_sum_all(e)));
    CHECK(amp_tensor_grad(w) && amp_tensor_dtype(amp_tensor_grad(w)) == AMP_F32);
    CHECK(amp_tensor_device(amp_tensor_grad(w)) == AMP_CUDA);
    amp_tensor_free(w);
}

/* --------------------------------------------- host synchronisations */

/* Host waits since a: stream syncs and copies to the host (each waits). */
static void check_waits(const char *what, amp_cuda_sync_stats a, amp_cuda_sync_stats b, uint64_t syncs, uint64_t d2h)
{
    CHECK_MSG(b.syncs - a.syncs == syncs, "%s: %llu stream syncs, expected %llu", what,
              (unsigned long long)(b.syncs - a.syncs), (unsigned long long)syncs);
    CHECK_MSG(b.d2h_copies - a.d2h_copies == d2h, "%s: %llu copies to the host, expected %llu", what,
              (unsigned long long)(b.d2h_copies - a.d2h_copies), (unsigned long long)d2h);
}

/* docs/cuda.md's loop (f16 autocast, the grad scaler, data already on the
 * device, amp_scaler_step with NULL) with SGD momentum or AdamW: after two
 * warm-up steps, five more make no stream sync and no copy to or from the
 * host (nor a cudaMalloc, which may synchronise); then reading the loss, the
 * scale, and amp_cuda_synchronize are one host wait each, as documented. */
static void check_steps_do_not_wait(bool adam)
{
    const char *name = adam ? "adamw" : "sgd momentum";
    enum { WARMUP = 2, STEPS = 5 };
    amp_manual_seed(5);
    int64_t hidden[2] = {64, 32};
    amp_module *m = amp_model_mlp(20, hidden, 2, 5);
    amp_tensor *x = test_uniform(AMP_SHAPE(32, 20), AMP_F32, -1, 1, 53);
    int64_t y_host[32];
    for (int i = 0; i < 32; i++)
        y_host[i] = (i * 3) % 5;
    amp_tensor *y = amp_from_data(AMP_SHAPE(32), AMP_I64, y_host);
    CHECK_OK(amp_module_to(m, AMP_CUDA));
    CHECK_OK(amp_tensor_move(x, AMP_CUDA));
    CHECK_OK(amp_tensor_move(y, AMP_CUDA));
    amp_tensor *params[16];
    int np = amp_module_params(m, params, 16);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05;
    so.momentum = 0.9;
    amp_optim *opt = adam ? amp_optim_adamw(params, np, amp_adamw_defaults()) : amp_optim_sgd(params, np, so);
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    CHECK_OK(amp_cuda_synchronize()); /* the uploads above are not the loop's */

    amp_cuda_sync_stats a = amp_cuda_get_sync_stats();
    amp_memory_stats ma = amp_cuda_memory_get_stats();
    amp_tensor *loss = NULL;
    for (int k = 0; k < WARMUP + STEPS + 1; k++) {
        if (k == WARMUP) {
            a = amp_cuda_get_sync_stats();
            ma = amp_cuda_memory_get_stats();
        }
        amp_optim_zero_grad(opt);
        amp_autocast_begin(AMP_CUDA, AMP_F16);
        loss = amp_cross_entropy(amp_module_forward(m, x), y);
        amp_autocast_end();
        CHECK_MSG(loss != NULL, "%s, step %d: %s", name, k, amp_last_error());
        CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
        CHECK_OK(amp_scaler_step(s, opt, NULL));
        CHECK_OK(amp_scaler_update(s));
        if (k < WARMUP + STEPS) /* the last step's loss is read below */
            amp_temps_free();
    }
    amp_cuda_sync_stats b = amp_cuda_get_sync_stats();
    amp_memory_stats mb = amp_cuda_memory_get_stats();
    char what[96];
    snprintf(what, sizeof what, "%s: %d training steps", name, STEPS + 1);
    check_waits(what, a, b, 0, 0);
    CHECK_MSG(mb.os_allocs == ma.os_allocs, "%s: cudaMalloc calls went from %zu to %zu", what, ma.os_allocs,
              mb.os_allocs);
    /* Nor a copy from the host (the loss's seed is filled on the device,
     * the optimizers' tensor lists are kernel arguments): a copy from
     * pageable memory may wait for the stream. */
    CHECK_MSG(b.h2d_copies == a.h2d_copies, "%s: %llu copies from the host", what,
              (unsigned long long)(b.h2d_copies - a.h2d_copies));

    a = b;
    double v = loss ? amp_item(loss) : NAN;
    b = amp_cuda_get_sync_stats();
    snprintf(what, sizeof what, "%s: amp_item(loss)", name);
    check_waits(what, a, b, 0, 1);
    CHECK_MSG(isfinite(v) && v > 0 && v < 10, "%s: loss %g", name, v);

    a = b;
    double scale = amp_scaler_get_scale(s);
    b = amp_cuda_get_sync_stats();
    snprintf(what, sizeof what, "%s: amp_scaler_get_scale", name);
    check_waits(what, a, b, 0, 1);
    CHECK_MSG(scale >= 1.0 && scale <= 65536.0, "%s: scale %g", name, scale); /* backed off at most */

    a = b;
    CHECK_OK(amp_cuda_synchronize());
    b = amp_cuda_get_sync_stats();
    snprintf(what, sizeof what, "%s: amp_cuda_synchronize", name);
    check_waits(what, a, b, 1, 0);
    CHECK(b.h2d_copies == a.h2d_copies);

    amp_cuda_reset_sync_stats();
    b = amp_cuda_get_sync_stats();
    CHECK(b.syncs == 0 && b.d2h_copies == 0 && b.h2d_copies == 0);

    amp_temps_free();
    amp_scaler_free(s);
    amp_optim_free(opt);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void test_training_steps_do_not_wait_for_the_gpu(void)
{
    check_steps_do_not_wait(false);
    check_steps_do_not_wait(true);
}

/* ------------------------------------------------------------- gpt */

/* The loss of a tiny GPT on fixed tokens (T of them per row), its
 * backward, in precision prec (0 fp32, 1 bf16, 2 fp16 autocast). */
static double gpt_loss(amp_module *m, amp_device dev, int prec, int64_t T)
{
    enum { B = 2 };
    int64_t idx[B * 8], tgt[B * 8];
    for (int64_t i = 0; i < B * T; i++) {
        idx[i] = (i * 5 + 3) % 11;
        tgt[i] = (i * 7 + 1) % 11;
    }
    amp_tensor *x = amp_from_data(AMP_SHAPE(B, T), AMP_I64, idx), *y = amp_from_data(AMP_SHAPE(B * T), AMP_I64, tgt);
    if (dev == AMP_CUDA) {
        CHECK_OK(amp_tensor_move(x, AMP_CUDA));
        CHECK_OK(amp_tensor_move(y, AMP_CUDA));
    }
    if (prec)
        amp_autocast_begin(dev, prec == 1 ? AMP_BF16 : AMP_F16);
    amp_tensor *logits = amp_module_forward(m, x);
    CHECK_MSG(logits != NULL, "gpt forward on %s: %s", amp_device_name(dev), amp_last_error());
    CHECK(!logits || amp_tensor_device(logits) == dev);
    amp_tensor *loss = amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(-1, 11)), y);
    if (prec)
        amp_autocast_end();
    CHECK_OK(amp_backward(loss));
    double v = loss ? amp_item(loss) : NAN;
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_temps_free();
    return v;
}

/* The GPT runs on CUDA (its position indices made on the device): the
 * same initial weights give the CPU's loss and gradients, for a T below
 * the context and at it, with dropout (the same Philox mask) and under
 * autocast. */
static void test_gpt_on_cuda_matches_the_cpu(void)
{
    for (int drop = 0; drop < 2; drop++) {
        amp_gpt_config c = {.vocab = 11, .context = 8, .width = 16, .layers = 2, .heads = 2, .mlp = 32,
                            .dropout = drop ? 0.2 : 0.0};
        amp_manual_seed(21);
        amp_module *mc = amp_model_gpt(c);
        amp_manual_seed(21);
        amp_module *md = amp_model_gpt(c);
        CHECK_OK(amp_module_to(md, AMP_CUDA));
        const int64_t Ts[2] = {5, 8};
        for (int k = 0; k < 2; k++)
            for (int prec = 0; prec < 3; prec++) {
                int np = amp_module_num_params(mc);
                for (int i = 0; i < np; i++) {
                    amp_tensor_clear_grad(amp_module_param(mc, i, NULL));
                    amp_tensor_clear_grad(amp_module_param(md, i, NULL));
                }
                amp_rng_state rng = amp_rng_get_state();
                double lc = gpt_loss(mc, AMP_CPU, prec, Ts[k]);
                amp_rng_set_state(rng);
                double ld = gpt_loss(md, AMP_CUDA, prec, Ts[k]);
                double tol = prec == 0 ? tol_of(AMP_F32) : prec == 1 ? tol_of(AMP_BF16) : tol_of(AMP_F16);
                CHECK_MSG(isfinite(lc) && close_to(lc, ld, tol),
                          "gpt (dropout %d) T %lld prec %d: loss %.7g on cuda, %.7g on the cpu", drop,
                          (long long)Ts[k], prec, ld, lc);
                if (prec != 0)
                    continue;
                for (int i = 0; i < np; i++) { /* fp32: every gradient too */
                    const char *name = NULL;
                    amp_tensor *pc = amp_module_param(mc, i, &name), *pd = amp_module_param(md, i, NULL);
                    char what[96];
                    snprintf(what, sizeof what, "gpt (dropout %d) T %lld", drop, (long long)Ts[k]);
                    check_same(what, name, amp_tensor_grad(pc), amp_tensor_grad(pd), tol_of(AMP_F32));
                }
            }
        amp_module_free(mc);
        amp_module_free(md);
    }
}

/* -------------------------------------------------- clip_grad_norm */

/* A parameter of shape [n] and dtype dt whose gradient is g (rounded into
 * dt), on dev: set by a backward, as a training step would. */
static amp_tensor *param_with_grad(int64_t n, amp_dtype dt, const float *g, amp_device dev)
{
    amp_tensor *p = amp_zeros(AMP_SHAPE(n), dt), *c = amp_zeros(AMP_SHAPE(n), dt);
    CHECK_OK(amp_tensor_copy_in(c, g, AMP_F32));
    amp_tensor_set_requires_grad(p, true);
    CHECK_OK(amp_backward(amp_sum_all(amp_mul(p, c)))); /* d/dp sum(p * c) = c */
    amp_tensor_free(c);
    amp_temps_free();
    if (dev == AMP_CUDA)
        CHECK_OK(amp_tensor_move(p, AMP_CUDA)); /* the gradient moves with it */
    return p;
}

enum { CLIP_N = 4 };
static const int64_t clip_len[CLIP_N] = {5000, 21, 64, 9}; /* 5000: two chunks of the multi-tensor launch */
static const amp_dtype clip_dt[CLIP_N] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F32};

/* The same gradients on the CPU (p[0]) and on CUDA (p[1]); parameter 3
 * has none. bad: 0, or put +inf (1) or NaN (2) into the f16 / bf16 one. */
static void clip_params(amp_tensor *p[2][CLIP_N], int bad)
{
    float *g = malloc(5000 * sizeof *g);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < CLIP_N; i++) {
            for (int64_t j = 0; j < clip_len[i]; j++)
                g[j] = (float)(sin(0.37 * (double)j + i) * (i == 1 ? 3.0 : 0.5));
            if (bad == 1 && i == 1)
                g[4] = INFINITY;
            if (bad == 2 && i == 2)
                g[7] = NAN;
            if (i == 3) {
                p[d][i] = amp_zeros(AMP_SHAPE(clip_len[i]), clip_dt[i]);
                amp_tensor_set_requires_grad(p[d][i], true);
                if (d)
                    CHECK_OK(amp_tensor_move(p[d][i], AMP_CUDA));
            } else {
                p[d][i] = param_with_grad(clip_len[i], clip_dt[i], g, d ? AMP_CUDA : AMP_CPU);
            }
        }
    free(g);
}

static void clip_free(amp_tensor *p[2][CLIP_N])
{
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < CLIP_N; i++)
            amp_tensor_free(p[d][i]);
}

/* sqrt of the sum of squares of every gradient value, in double. */
static double norm_of(amp_tensor *const *p)
{
    double ss = 0;
    for (int i = 0; i < CLIP_N; i++) {
        amp_tensor *g = amp_tensor_grad(p[i]);
        if (!g)
            continue;
        float v[5000];
        CHECK_OK(amp_tensor_copy_out(g, v, AMP_F32));
        for (int64_t j = 0; j < clip_len[i]; j++)
            ss += (double)v[j] * v[j];
    }
    return sqrt(ss);
}

/* The clip cases: bad (see clip_params) and max_norm. */
static const struct {
    int bad;
    double max_norm;
} clip_cases[] = {{0, 1e6}, {0, 1.0}, {0, 0.0}, {1, 1.0}, {2, 1.0}, {0, INFINITY}, {1, INFINITY}};

/* clip_grad_norm on CUDA gradients (f32, f16, bf16; one parameter
 * without a gradient) returns the CPU's total and leaves the CPU's values:
 * not clipped, clipped, and with an inf (total inf: factor 0, the inf
 * becomes NaN) or a NaN (everything NaN), and max_norm inf with an inf
 * gradient (a NaN factor), as PyTorch. Mixed devices are an error that
 * changes nothing. */
static void test_clip_grad_norm_matches_the_cpu(void)
{
    for (size_t c = 0; c < sizeof clip_cases / sizeof clip_cases[0]; c++) {
        amp_tensor *p[2][CLIP_N];
        clip_params(p, clip_cases[c].bad);
        const double ref = norm_of(p[0]);
        amp_clear_error();
        const double tc = amp_clip_grad_norm(p[0], CLIP_N, clip_cases[c].max_norm);
        const double td = amp_clip_grad_norm(p[1], CLIP_N, clip_cases[c].max_norm);
        CHECK_MSG(amp_last_status() == AMP_OK, "case %zu: %s", c, amp_last_error());
        CHECK_MSG(close_to(ref, tc, 1e-12) && close_to(ref, td, 1e-12),
                  "case %zu: total %.17g on cuda, %.17g on the cpu, %.17g in double", c, td, tc, ref);
        for (int i = 0; i < CLIP_N; i++) {
            char part[48];
            snprintf(part, sizeof part, "gradient %d (%s)", i, amp_dtype_name(clip_dt[i]));
            if (i == 3) {
                CHECK(!amp_tensor_grad(p[0][i]) && !amp_tensor_grad(p[1][i]));
                continue;
            }
            char what[48];
            snprintf(what, sizeof what, "clip case %zu", c);
            /* the same factor rounded into the same dtype: bit for bit */
            check_same(what, part, amp_tensor_grad(p[0][i]), amp_tensor_grad(p[1][i]), 0.0);
        }
        if (clip_cases[c].bad == 0 && clip_cases[c].max_norm == 1.0) /* clipped to 1, to the 16-bit roundings */
            CHECK_NEAR(norm_of(p[1]), 1.0, 2e-3);
        if (clip_cases[c].bad == 1 && isfinite(clip_cases[c].max_norm)) /* factor 0: the inf is NaN, the rest 0 */
            CHECK(isnan(amp_tensor_get(amp_tensor_grad(p[1][1]), 4)) &&
                  amp_tensor_get(amp_tensor_grad(p[1][0]), 1) == 0.0);
        if (clip_cases[c].bad == 2 || (clip_cases[c].bad == 1 && !isfinite(clip_cases[c].max_norm)))
            CHECK(isnan(amp_tensor_get(amp_tensor_grad(p[1][0]), 1)));
        clip_free(p);
    }

    /* no gradients at all: 0, nothing to do */
    amp_tensor *none = amp_zeros(AMP_SHAPE(3), AMP_F32);
    CHECK_OK(amp_tensor_move(none, AMP_CUDA));
    amp_tensor_set_requires_grad(none, true);
    amp_clear_error();
    CHECK(amp_clip_grad_norm(&none, 1, 1.0) == 0.0 && amp_last_status() == AMP_OK);
    amp_tensor_free(none);

    /* a CPU gradient beside a CUDA one */
    amp_tensor *p[2][CLIP_N];
    clip_params(p, 0);
    amp_tensor *mixed[2] = {p[0][0], p[1][1]};
    const double before = norm_of(p[1]);
    CHECK(isnan(amp_clip_grad_norm(mixed, 2, 1e-3)));
    CHECK_ERROR(AMP_ERR_DEVICE, "all gradients must be on one device");
    CHECK(norm_of(p[1]) == before && norm_of(p[0]) == before);
    clip_free(p);
}

/* Whether a and b (on any device) hold the same bits. */
static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    if (!a || !b || amp_tensor_dtype(a) != amp_tensor_dtype(b) || amp_tensor_numel(a) != amp_tensor_numel(b))
        return false;
    const size_t bytes = (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a));
    char *x = malloc(bytes ? bytes : 1), *y = malloc(bytes ? bytes : 1);
    bool same = x && y && amp_tensor_copy_out(a, x, amp_tensor_dtype(a)) == AMP_OK &&
                amp_tensor_copy_out(b, y, amp_tensor_dtype(b)) == AMP_OK && memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}

/* t is a caller-owned 0-d f32 tensor on dev without history; its value
 * (one copy to the host), or NaN. */
static double norm_tensor_value(const char *what, amp_tensor *t, amp_device dev)
{
    CHECK_MSG(t != NULL, "%s: NULL (%s)", what, amp_last_error());
    if (!t)
        return NAN;
    CHECK_MSG(amp_tensor_dtype(t) == AMP_F32 && amp_tensor_ndim(t) == 0 && amp_tensor_device(t) == dev &&
                  !amp_tensor_requires_grad(t),
              "%s: %s, %d dims, on %s", what, amp_dtype_name(amp_tensor_dtype(t)), amp_tensor_ndim(t),
              amp_device_name(amp_tensor_device(t)));
    return amp_item(t);
}

/* amp_clip_grad_norm_tensor on CUDA gradients: no stream sync, no copy to
 * or from the host (nor, warm, a cudaMalloc); the norm stays in a 0-d f32
 * tensor on the device, (float) of the double amp_clip_grad_norm returns
 * there, and the CPU's to f32's rounding; the gradients are those
 * amp_clip_grad_norm leaves, bit for bit (and the CPU's) - for every case
 * of clip_cases, non-finite ones included. */
static void test_clip_grad_norm_tensor_does_not_wait(void)
{
    for (size_t c = 0; c < sizeof clip_cases / sizeof clip_cases[0]; c++) {
        amp_tensor *p[2][CLIP_N], *q[2][CLIP_N]; /* p: amp_clip_grad_norm, q: the tensor variant */
        clip_params(p, clip_cases[c].bad);
        clip_params(q, clip_cases[c].bad);
        char what[64];
        snprintf(what, sizeof what, "clip tensor case %zu", c);
        amp_clear_error();
        const double tc = amp_clip_grad_norm(p[0], CLIP_N, clip_cases[c].max_norm);
        const double td = amp_clip_grad_norm(p[1], CLIP_N, clip_cases[c].max_norm);
        amp_tensor *t_cpu = amp_clip_grad_norm_tensor(q[0], CLIP_N, clip_cases[c].max_norm);
        CHECK_OK(amp_cuda_synchronize()); /* the uploads above are not the call's */

        const amp_cuda_sync_stats a = amp_cuda_get_sync_stats();
        amp_tensor *t = amp_clip_grad_norm_tensor(q[1], CLIP_N, clip_cases[c].max_norm);
        const amp_cuda_sync_stats b = amp_cuda_get_sync_stats();
        check_waits(what, a, b, 0, 0);
        CHECK_MSG(b.h2d_copies == a.h2d_copies, "%s: %llu copies from the host", what,
                  (unsigned long long)(b.h2d_copies - a.h2d_copies));

        const double v = norm_tensor_value(what, t, AMP_CUDA), vc = norm_tensor_value(what, t_cpu, AMP_CPU);
        const float want = (float)td;
        CHECK_MSG(isnan(want) ? isnan(v) : v == (double)want, "%s: tensor %.9g, (float) of the double %.9g", what, v,
                  (double)want);
        CHECK_MSG(close_to(vc, v, 1e-7) && close_to(tc, v, 1e-7),
                  "%s: %.9g on cuda, %.9g (tensor) and %.17g on the cpu", what, v, vc, tc);
        for (int i = 0; i < CLIP_N - 1; i++) { /* parameter CLIP_N - 1 has no gradient */
            CHECK_MSG(same_bits(amp_tensor_grad(p[1][i]), amp_tensor_grad(q[1][i])),
                      "%s: gradient %d differs from amp_clip_grad_norm's", what, i);
            char part[48];
            snprintf(part, sizeof part, "gradient %d (%s)", i, amp_dtype_name(clip_dt[i]));
            check_same(what, part, amp_tensor_grad(q[0][i]), amp_tensor_grad(q[1][i]), 0.0);
        }
        CHECK(!amp_tensor_grad(q[1][CLIP_N - 1]));
        amp_tensor_free(t);
        amp_tensor_free(t_cpu);
        clip_free(p);
        clip_free(q);
    }

    /* Warm, as in a training loop: three more calls, no wait, no cudaMalloc;
     * amp_clip_grad_norm's double is one copy to the host each. */
    amp_tensor *p[2][CLIP_N];
    clip_params(p, 0);
    amp_tensor_free(amp_clip_grad_norm_tensor(p[1], CLIP_N, 1.0));
    CHECK_OK(amp_cuda_synchronize());
    amp_cuda_sync_stats a = amp_cuda_get_sync_stats();
    const amp_memory_stats ma = amp_cuda_memory_get_stats();
    for (int k = 0; k < 3; k++) {
        amp_tensor *t = amp_clip_grad_norm_tensor(p[1], CLIP_N, 1.0);
        CHECK(t != NULL);
        amp_tensor_free(t);
    }
    amp_cuda_sync_stats b = amp_cuda_get_sync_stats();
    check_waits("three warm amp_clip_grad_norm_tensor calls", a, b, 0, 0);
    CHECK(b.h2d_copies == a.h2d_copies);
    CHECK_MSG(amp_cuda_memory_get_stats().os_allocs == ma.os_allocs, "cudaMalloc calls went from %zu to %zu",
              ma.os_allocs, amp_cuda_memory_get_stats().os_allocs);
    a = b;
    for (int k = 0; k < 3; k++)
        CHECK(isfinite(amp_clip_grad_norm(p[1], CLIP_N, 1.0)));
    b = amp_cuda_get_sync_stats();
    check_waits("three amp_clip_grad_norm calls", a, b, 0, 3);

    /* A CPU gradient beside a CUDA one: NULL, nothing changed. */
    amp_tensor *mixed[2] = {p[0][0], p[1][1]};
    amp_tensor *before[2] = {amp_clone(amp_tensor_grad(p[0][0])), amp_clone(amp_tensor_grad(p[1][1]))};
    CHECK(amp_clip_grad_norm_tensor(mixed, 2, 1e-3) == NULL);
    CHECK_ERROR(AMP_ERR_DEVICE, "clip_grad_norm_tensor: parameter 0's gradient is on cpu, parameter 1's on cuda");
    CHECK(same_bits(before[0], amp_tensor_grad(p[0][0])) && same_bits(before[1], amp_tensor_grad(p[1][1])));
    amp_tensor_free(before[0]);
    amp_tensor_free(before[1]);
    clip_free(p);

    /* No gradient: a zero on the parameters' device, no wait. */
    amp_tensor *none = amp_zeros(AMP_SHAPE(3), AMP_F32);
    CHECK_OK(amp_tensor_move(none, AMP_CUDA));
    amp_tensor_set_requires_grad(none, true);
    CHECK_OK(amp_cuda_synchronize());
    a = amp_cuda_get_sync_stats();
    amp_clear_error();
    amp_tensor *t = amp_clip_grad_norm_tensor(&none, 1, 1.0);
    b = amp_cuda_get_sync_stats();
    check_waits("no gradient", a, b, 0, 0);
    CHECK_OK(amp_last_status());
    CHECK(norm_tensor_value("no gradient", t, AMP_CUDA) == 0.0);
    amp_tensor_free(t);
    amp_tensor_free(none);
}

/* ------------------------------------------------------- checkpoints */

/* One fp32 Adam step of m on (x, y). */
static void adam_step(amp_module *m, amp_optim *o, amp_tensor *x, amp_tensor *y)
{
    amp_optim_zero_grad(o);
    CHECK_OK(amp_backward(amp_cross_entropy(amp_module_forward(m, x), y)));
    CHECK_OK(amp_optim_step(o));
    amp_temps_free();
}

/* Every parameter (and, with oa / ob, every Adam state buffer and step
 * count) of a and b equal, bit for bit. */
static void check_same_state(const char *what, amp_module *a, amp_module *b, amp_optim *oa, amp_optim *ob)
{
    int n = amp_module_num_params(a);
    CHECK_EQ_INT(amp_module_num_params(b), n);
    for (int i = 0; i < n && i < amp_module_num_params(b); i++) {
        const char *name;
        amp_tensor *pa = amp_module_param(a, i, &name), *pb = amp_module_param(b, i, NULL);
        CHECK_MSG(max_abs_diff(pa, pb) == 0.0, "%s: parameter %s differs by %g", what, name, max_abs_diff(pa, pb));
        if (!oa)
            continue;
        CHECK_EQ_INT(amp_optim_param_steps(ob, i), amp_optim_param_steps(oa, i));
        const char *keys[2] = {"exp_avg", "exp_avg_sq"};
        for (int k = 0; k < 2; k++) {
            amp_tensor *sa = amp_optim_state_tensor(oa, i, keys[k]), *sb = amp_optim_state_tensor(ob, i, keys[k]);
            CHECK_MSG(sa && sb && max_abs_diff(sa, sb) == 0.0, "%s: %s of %s differs", what, keys[k], name);
        }
    }
}

/* A CUDA model and its Adam state saved, then loaded into a CPU model
 * (the same values) and into a CUDA one, which then trains on exactly as
 * the original. */
static void test_checkpoint_of_a_cuda_model(void)
{
    char path[] = "/tmp/ampc-cuda-ckpt-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    int64_t hidden[1] = {16}, labels[8] = {0, 1, 2, 3, 4, 0, 1, 2};
    amp_tensor *x = test_uniform(AMP_SHAPE(8, 12), AMP_F32, -1, 1, 111);
    amp_tensor *y = amp_from_data(AMP_SHAPE(8), AMP_I64, labels);
    amp_tensor *dx = amp_to_device(x, AMP_CUDA), *dy = amp_to_device(y, AMP_CUDA);
    amp_module *m[3];
    amp_optim *o[3];
    amp_tensor *params[3][8];
    for (int k = 0; k < 3; k++) {
        amp_manual_seed(10 + (uint64_t)k); /* different initial weights: the load must replace them */
        m[k] = amp_model_mlp(12, hidden, 1, 5);
        if (k != 1)
            CHECK_OK(amp_module_to(m[k], AMP_CUDA));
        int np = amp_module_params(m[k], params[k], 8);
        o[k] = amp_optim_adam(params[k], np, amp_adam_defaults());
    }
    adam_step(m[0], o[0], dx, dy);
    adam_step(m[0], o[0], dx, dy);
    CHECK_OK(amp_checkpoint_save(path, m[0], o[0], NULL, 2, NULL));
    int64_t step = 0;
    CHECK_OK(amp_checkpoint_load(path, m[1], o[1], NULL, &step, NULL)); /* on the CPU */
    CHECK_EQ_INT(step, 2);
    check_same_state("saved on cuda, loaded on the cpu", m[0], m[1], o[0], o[1]);
    CHECK_OK(amp_checkpoint_load(path, m[2], o[2], NULL, NULL, NULL)); /* on cuda */
    CHECK(amp_tensor_device(amp_module_param(m[2], 0, NULL)) == AMP_CUDA);
    check_same_state("saved on cuda, loaded on cuda", m[0], m[2], o[0], o[2]);
    CHECK_EQ_INT(amp_optim_steps(o[2]), 2);
    adam_step(m[0], o[0], dx, dy);
    adam_step(m[2], o[2], dx, dy);
    check_same_state("one step after the load", m[0], m[2], o[0], o[2]);
    for (int k = 0; k < 3; k++) {
        amp_optim_free(o[k]);
        amp_module_free(m[k]);
    }
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_tensor_free(dx);
    amp_tensor_free(dy);
    unlink(path);
}

/* A sequential Linear, ReLU, Linear on CUDA (the first pair runs as the
 * fused linear + relu: a cuBLASLt epilogue or its fallback) gives the
 * CPU's output and gradients, with and without the first layer's bias. */
static void test_sequential_linear_relu_on_cuda(void)
{
    for (int bias = 0; bias < 2; bias++) {
        amp_manual_seed(11);
        amp_module *seq = amp_nn_sequential();
        CHECK_OK(amp_sequential_add(seq, amp_nn_linear(12, 16, bias)));
        CHECK_OK(amp_sequential_add(seq, amp_nn_relu()));
        CHECK_OK(amp_sequential_add(seq, amp_nn_linear(16, 3, true)));
        const int np = amp_module_num_params(seq);
        amp_tensor *x = amp_randn(AMP_SHAPE(5, 12), AMP_F32, 0.0, 1.0);
        CHECK_OK(amp_tensor_set_requires_grad(x, true));
        amp_tensor *want[8] = {0}, *out = amp_module_forward(seq, x);
        CHECK_OK(amp_backward(amp_sum_all(amp_mul(out, out))));
        want[0] = amp_clone(out);
        want[1] = amp_clone(amp_tensor_grad(x));
        for (int i = 0; i < np && i < 6; i++) {
            amp_tensor *p = amp_module_param(seq, i, NULL);
            want[2 + i] = amp_clone(amp_tensor_grad(p));
            amp_tensor_clear_grad(p);
        }
        amp_temps_free();
        CHECK_OK(amp_module_to(seq, AMP_CUDA));
        amp_tensor *xd = amp_to_device(x, AMP_CUDA);
        CHECK_OK(amp_tensor_set_requires_grad(xd, true));
        out = amp_module_forward(seq, xd);
        CHECK_MSG(out != NULL, "bias %d: %s", bias, amp_last_error());
        CHECK_OK(amp_backward(amp_sum_all(amp_mul(out, out))));
        const double tol = tol_of(AMP_F32) * 2;
        check_same("sequential linear-relu-linear", "output", want[0], out, tol);
        check_same("sequential linear-relu-linear", "x's gradient", want[1], amp_tensor_grad(xd), tol);
        for (int i = 0; i < np && i < 6; i++) {
            char part[48];
            snprintf(part, sizeof part, "parameter %d's gradient", i);
            check_same("sequential linear-relu-linear", part, want[2 + i],
                       amp_tensor_grad(amp_module_param(seq, i, NULL)), tol);
        }
        for (int i = 0; i < 8; i++)
            amp_tensor_free(want[i]);
        amp_temps_free();
        amp_tensor_free(x);
        amp_tensor_free(xd);
        amp_module_free(seq);
    }
}

/* The memory levers on the device: SGD with Nesterov momentum and AdamW
 * with amsgrad, on bf16 and f16 parameters with f32 masters and bf16
 * state (AdamW's rounded stochastically, with the CPU's bits), follow the
 * CPU for 3 steps (parameter, master and every state buffer). */
static void test_levers_step_follows_the_cpu(void)
{
    const amp_dtype pdts[2] = {AMP_BF16, AMP_F16};
    const char *const keys[2][3] = {{"momentum_buffer"}, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}};
    for (int v = 0; v < 2; v++)
        for (int d = 0; d < 2; d++) {
            amp_tensor *f = test_uniform(AMP_SHAPE(5000), AMP_F32, -1, 1, 31);
            amp_tensor *p[2], *h = tensor_convert(f, pdts[d]);
            p[0] = h;
            p[1] = amp_to_device(h, AMP_CUDA);
            amp_optim *o[2];
            for (int k = 0; k < 2; k++) {
                amp_sgd_opts so = amp_sgd_defaults();
                so.momentum = 0.9;
                so.nesterov = true;
                amp_adam_opts ao = amp_adamw_defaults();
                ao.amsgrad = true;
                o[k] = v == 0 ? amp_optim_sgd(&p[k], 1, so) : amp_optim_adamw(&p[k], 1, ao);
                CHECK_OK(amp_optim_set_master_weights(o[k], true));
                CHECK_OK(amp_optim_set_state_dtype(o[k], AMP_BF16));
                CHECK_OK(amp_optim_set_state_stochastic_rounding(o[k], v == 1)); /* AdamW: stochastically */
            }
            for (int s = 0; s < 3; s++) {
                amp_tensor *gf = test_uniform(AMP_SHAPE(5000), AMP_F32, -2, 2, 40 + (uint64_t)s);
                amp_tensor *g = tensor_convert(gf, pdts[d]);
                p[0]->grad = g;
                p[1]->grad = amp_to_device(g, AMP_CUDA);
                for (int k = 0; k < 2; k++) {
                    CHECK_OK(amp_optim_step(o[k]));
                    amp_optim_zero_grad(o[k]);
                }
                amp_tensor_free(gf);
            }
            char what[64];
            snprintf(what, sizeof what, "%s %s", v == 0 ? "sgd" : "adamw", amp_dtype_name(pdts[d]));
            check_same(what, "parameter", p[0], p[1], tol_of(pdts[d]));
            check_same(what, "master", amp_optim_master(o[0], 0), amp_optim_master(o[1], 0), tol_of(AMP_F32));
            for (int k = 0; k < 3 && keys[v][k]; k++)
                check_same(what, keys[v][k], amp_optim_state_tensor(o[0], 0, keys[v][k]),
                           amp_optim_state_tensor(o[1], 0, keys[v][k]), tol_of(AMP_BF16));
            for (int k = 0; k < 2; k++) {
                amp_optim_free(o[k]);
                amp_tensor_free(p[k]);
            }
            amp_tensor_free(f);
        }
}

int main(void)
{
    RUN_IF(gpu, test_mlp_training_follows_the_cpu);
    RUN_IF(gpu, test_allocator_steady_state_and_autocast);
    RUN_IF(gpu, test_training_steps_do_not_wait_for_the_gpu);
    RUN_IF(gpu, test_gpt_on_cuda_matches_the_cpu);
    RUN_IF(gpu, test_clip_grad_norm_matches_the_cpu);
    RUN_IF(gpu, test_clip_grad_norm_tensor_does_not_wait);
    RUN_IF(gpu, test_checkpoint_of_a_cuda_model);
    RUN_IF(gpu, test_sequential_linear_relu_on_cuda);
    RUN_IF(gpu, test_levers_step_follows_the_cpu);
    return cuda_rig_done();
}
