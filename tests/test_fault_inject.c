/*
 * test_fault_inject.c - the grad scaler's promise under fire: a tiny MLP
 * trains for thousands of fp16 + scaler steps while +inf, -inf and NaN are
 * written into its gradients (after backward, before the scaler's step) at
 * random steps, in random parameters, at random elements. For every
 * optimizer the library has (SGD plain / momentum / dampening / nesterov
 * with weight decay, Adam, Adam amsgrad, AdamW, AdamW amsgrad):
 *
 *   - a step is skipped exactly when some gradient holds inf/NaN (the test
 *     reads the gradients itself: injected, or fp16 overflowing on its own
 *     when the scale has grown too far);
 *   - on a skipped step the parameters, every optimizer state tensor
 *     (momentum_buffer, exp_avg, exp_avg_sq, max_exp_avg_sq; none may
 *     appear at a skipped first step) and the step counters (the
 *     optimizer's and each parameter's) are bitwise unchanged;
 *   - on a step taken the parameters and every state tensor change and
 *     each counter goes up by one;
 *   - the scale and growth tracker follow AMP_SPEC's update rule, computed
 *     here independently (backoff 0.5 on a skip, growth 2 after
 *     growth_interval clean steps, products in double rounded to f32).
 *
 * On the CPU always; on CUDA when a device is present (cudaemu in CI: the
 * skip then happens inside the fused device kernels, read from the device
 * found_inf). The seed is drawn from the clock and printed;
 * AMPC_FAULT_SEED=<n> replays a run. AMPC_TEST_QUICK=1 (set under the
 * sanitizers) runs a quarter of the steps.
 */
#include "harness.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CPU_STEPS 2000
#define CUDA_STEPS 32 /* cudaemu runs each kernel on the CPU, with every pointer checked: ~0.1 s a step */
#define GROWTH_INTERVAL 4
#define MAX_P 8
#define N_STATE 3

static const char *const state_names[N_STATE] = {"momentum_buffer", "exp_avg", "exp_avg_sq"};

static uint64_t seed0;

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t *s, uint64_t n) { return next(s) % n; }

typedef struct {
    const char *name;
    bool adam, adamw;
    amp_sgd_opts sgd;
    amp_adam_opts ad;
} opt_case;

/* Everything a skipped step must leave alone, as raw bytes. */
typedef struct {
    int np;
    int64_t numel[MAX_P];
    float *param[MAX_P];
    float *state[MAX_P][N_STATE + 1]; /* + max_exp_avg_sq; NULL: no such buffer */
    int64_t psteps[MAX_P];
    int64_t steps;
} snapshot;

static const char *state_name(int k) { return k < N_STATE ? state_names[k] : "max_exp_avg_sq"; }

static float *grab(const amp_tensor *t, int64_t n)
{
    float *b = malloc((size_t)n * sizeof *b);
    CHECK_OK(amp_tensor_copy_out(t, b, AMP_F32));
    return b;
}

static void snap(snapshot *s, amp_optim *o)
{
    s->np = amp_optim_num_params(o);
    for (int i = 0; i < s->np; i++) {
        amp_tensor *p = amp_optim_param(o, i);
        s->numel[i] = amp_tensor_numel(p);
        s->param[i] = grab(p, s->numel[i]);
        for (int k = 0; k <= N_STATE; k++) {
            amp_tensor *t = amp_optim_state_tensor(o, i, state_name(k));
            s->state[i][k] = t ? grab(t, s->numel[i]) : NULL;
        }
        amp_clear_error(); /* a name these options do not use */
        s->psteps[i] = amp_optim_param_steps(o, i);
    }
    s->steps = amp_optim_steps(o);
}

static void unsnap(snapshot *s)
{
    for (int i = 0; i < s->np; i++) {
        free(s->param[i]);
        for (int k = 0; k <= N_STATE; k++)
            free(s->state[i][k]);
    }
}

static bool same(const float *a, const float *b, int64_t n)
{
    if (!a || !b)
        return a == b;
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Skipped: everything bitwise as before. Taken: each counter + 1, and the
 * parameters and each kind of state buffer (but the amsgrad maximum)
 * changed somewhere. */
static void compare(const char *what, long step, const snapshot *a, const snapshot *b, bool skipped)
{
    if (skipped) {
        CHECK_MSG(a->steps == b->steps, "%s step %ld (skipped): optimizer steps %lld -> %lld", what, step,
                  (long long)a->steps, (long long)b->steps);
        for (int i = 0; i < a->np; i++) {
            CHECK_MSG(same(a->param[i], b->param[i], a->numel[i]), "%s step %ld (skipped): parameter %d changed",
                      what, step, i);
            for (int k = 0; k <= N_STATE; k++)
                CHECK_MSG(same(a->state[i][k], b->state[i][k], a->numel[i]),
                          "%s step %ld (skipped): parameter %d's %s changed", what, step, i, state_name(k));
            CHECK_MSG(a->psteps[i] == b->psteps[i], "%s step %ld (skipped): parameter %d's steps %lld -> %lld",
                      what, step, i, (long long)a->psteps[i], (long long)b->psteps[i]);
        }
        return;
    }
    CHECK_MSG(b->steps == a->steps + 1, "%s step %ld (taken): optimizer steps %lld -> %lld", what, step,
              (long long)a->steps, (long long)b->steps);
    bool moved = false;
    bool state_moved[N_STATE + 1] = {false}, has_state[N_STATE + 1] = {false};
    for (int i = 0; i < a->np; i++) {
        moved |= !same(a->param[i], b->param[i], a->numel[i]);
        for (int k = 0; k <= N_STATE; k++) {
            has_state[k] |= b->state[i][k] != NULL;
            state_moved[k] |= !same(a->state[i][k], b->state[i][k], a->numel[i]);
        }
        CHECK_MSG(b->psteps[i] == a->psteps[i] + 1, "%s step %ld (taken): parameter %d's steps %lld -> %lld",
                  what, step, i, (long long)a->psteps[i], (long long)b->psteps[i]);
    }
    CHECK_MSG(moved, "%s step %ld (taken): no parameter changed", what, step);
    /* max_exp_avg_sq is a running maximum: a step may leave it as it was. */
    for (int k = 0; k < N_STATE; k++)
        CHECK_MSG(!has_state[k] || state_moved[k], "%s step %ld (taken): no %s changed", what, step,
                  state_name(k));
}

/* Writes +inf, -inf or NaN over one random element of a random
 * parameter's gradient, 1 to 3 times; returns how many. */
static int inject(amp_optim *o, uint64_t *rs)
{
    int n = 1 + (int)below(rs, 3);
    for (int j = 0; j < n; j++) {
        amp_tensor *g = amp_tensor_grad(amp_optim_param(o, (int)below(rs, (uint64_t)amp_optim_num_params(o))));
        int64_t numel = amp_tensor_numel(g);
        float *h = grab(g, numel);
        const float bad[3] = {INFINITY, -INFINITY, NAN};
        h[below(rs, (uint64_t)numel)] = bad[below(rs, 3)];
        CHECK_OK(amp_tensor_copy_in(g, h, AMP_F32));
        free(h);
    }
    return n;
}

/* Whether some gradient of o holds inf/NaN, read on the host; *nonzero:
 * whether some element is not 0 (else an SGD step may change nothing). */
static bool any_nonfinite_grad(amp_optim *o, bool *nonzero)
{
    bool bad = false;
    *nonzero = false;
    for (int i = 0; i < amp_optim_num_params(o); i++) {
        amp_tensor *g = amp_tensor_grad(amp_optim_param(o, i));
        int64_t n = amp_tensor_numel(g);
        float *h = grab(g, n);
        for (int64_t e = 0; e < n; e++) {
            bad |= !isfinite(h[e]);
            *nonzero |= h[e] != 0;
        }
        free(h);
    }
    return bad;
}

typedef struct {
    long steps, injected, natural, skipped, growths;
} tally;

static void run_case(const opt_case *c, amp_device dev, long steps)
{
    uint64_t rs = seed0 ^ (uint64_t)dev << 40; /* one stream per (seed, case, device) */
    for (const char *n = c->name; *n; n++)
        rs = (rs ^ (uint8_t)*n) * 0x100000001B3ull;
    amp_manual_seed(7);
    int64_t hidden[1] = {16};
    amp_module *m = amp_model_mlp(12, hidden, 1, 4);
    CHECK(m != NULL);
    if (dev == AMP_CUDA)
        CHECK_OK(amp_module_to(m, AMP_CUDA));
    amp_tensor *params[MAX_P];
    int np = amp_module_params(m, params, MAX_P);
    amp_optim *o = c->adam ? (c->adamw ? amp_optim_adamw(params, np, c->ad) : amp_optim_adam(params, np, c->ad))
                           : amp_optim_sgd(params, np, c->sgd);
    amp_scaler_opts so = amp_scaler_defaults();
    /* CUDA's short runs start at PyTorch's 65536, near where this model's
     * fp16 gradients overflow on their own (~2^17); the CPU's climb there. */
    const double init_scale = dev == AMP_CUDA ? 65536.0 : 1024.0;
    so.init_scale = init_scale;
    so.growth_interval = GROWTH_INTERVAL;
    amp_scaler *s = amp_scaler_new(so);
    CHECK(o && s);
    if (!o || !s)
        return;
    /* The reference scaler: AMP_SPEC's update rule, nothing shared with scaler.c. */
    float want_scale = (float)init_scale;
    int64_t want_tracker = 0;
    tally t = {0};
    snapshot before = {0};
    int64_t labels[8];
    double t0 = wall();
    for (long k = 0; k < steps && harness_failures_in_test == 0; k++) {
        amp_tensor *x = test_uniform(AMP_SHAPE(8, 12), AMP_F32, -2, 2, seed0 + (uint64_t)k);
        for (int i = 0; i < 8; i++)
            labels[i] = (int64_t)below(&rs, 4);
        amp_tensor *y = amp_from_data(AMP_SHAPE(8), AMP_I64, labels);
        if (dev == AMP_CUDA) {
            CHECK_OK(amp_tensor_move(x, AMP_CUDA));
            CHECK_OK(amp_tensor_move(y, AMP_CUDA));
        }
        amp_optim_zero_grad(o);
        CHECK_OK(amp_autocast_begin(dev, AMP_F16));
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, x), y);
        amp_autocast_end();
        CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
        bool nonzero;
        bool natural = any_nonfinite_grad(o, &nonzero);
        CHECK_MSG(nonzero || natural, "%s on %s step %ld: every gradient is 0 (scale %g): nothing to test",
                  c->name, amp_device_name(dev), k, amp_scaler_get_scale(s));
        /* Always at the first step (no state may appear: CUDA makes its
         * buffers before the launch found_inf skips), then rarer than
         * growth (4 clean steps): the scale climbs until fp16 overflows on
         * its own, then hovers there. Twice as often in the shorter CUDA
         * runs. */
        int injected = k == 0 || below(&rs, dev == AMP_CUDA ? 8 : 16) == 0 ? inject(o, &rs) : 0;
        bool want_skip = injected > 0 || natural;
        /* Nothing but the step writes the parameters or the state, so the
         * last step's "after" is this one's "before" (half the copies). */
        snapshot after;
        if (k == 0)
            snap(&before, o);
        bool skipped = false;
        CHECK_OK(amp_scaler_step(s, o, &skipped));
        snap(&after, o);
        CHECK_MSG(skipped == want_skip, "%s on %s step %ld: skipped %d, expected %d (%d injected, natural %d)",
                  c->name, amp_device_name(dev), k, skipped, want_skip, injected, natural);
        compare(c->name, k, &before, &after, want_skip);
        unsnap(&before);
        before = after;
        CHECK_OK(amp_scaler_update(s));
        if (want_skip) {
            want_scale = (float)((double)want_scale * 0.5);
            want_tracker = 0;
        } else if (++want_tracker == GROWTH_INTERVAL) {
            float g = (float)((double)want_scale * 2.0);
            if (isfinite(g)) {
                want_scale = g;
                t.growths++;
            }
            want_tracker = 0;
        }
        CHECK_MSG(amp_scaler_get_scale(s) == (double)want_scale && amp_scaler_get_growth_tracker(s) == want_tracker,
                  "%s on %s step %ld: scale %g tracker %lld, expected %g and %lld", c->name, amp_device_name(dev), k,
                  amp_scaler_get_scale(s), (long long)amp_scaler_get_growth_tracker(s), (double)want_scale,
                  (long long)want_tracker);
        t.steps++;
        t.injected += injected > 0;
        t.natural += natural && !injected;
        t.skipped += want_skip;
        amp_tensor_free(x);
        amp_tensor_free(y);
        amp_temps_free();
    }
    if (t.steps > 0)
        unsnap(&before);
    amp_scaler_counts sc = amp_scaler_get_counts(s);
    CHECK_EQ_INT(sc.skipped, t.skipped);
    CHECK_EQ_INT(sc.steps, t.steps - t.skipped);
    CHECK_EQ_INT(amp_optim_steps(o), t.steps - t.skipped);
    printf("    %-16s %-4s %5ld steps: %4ld skipped (%ld injected, %ld fp16 overflow), %3ld growths, final scale "
           "%g, %.2f s\n",
           c->name, amp_device_name(dev), t.steps, t.skipped, t.injected, t.natural, t.growths,
           amp_scaler_get_scale(s), wall() - t0);
    amp_scaler_free(s);
    amp_optim_free(o);
    amp_module_free(m);
}

static opt_case cases[8];
static int n_cases;

static void make_cases(void)
{
    amp_sgd_opts sgd = amp_sgd_defaults();
    amp_adam_opts adam = amp_adam_defaults(), adamw = amp_adamw_defaults();
    opt_case c = {.name = "sgd", .sgd = sgd};
    cases[n_cases++] = c;
    c.sgd.momentum = 0.9;
    c.name = "sgd-momentum";
    cases[n_cases++] = c;
    c.sgd.dampening = 0.1;
    c.sgd.weight_decay = 1e-3;
    c.name = "sgd-dampening";
    cases[n_cases++] = c;
    c.sgd.dampening = 0;
    c.sgd.nesterov = true;
    c.name = "sgd-nesterov";
    cases[n_cases++] = c;
    c = (opt_case){.name = "adam", .adam = true, .ad = adam};
    cases[n_cases++] = c;
    c.ad.amsgrad = true;
    c.name = "adam-amsgrad";
    cases[n_cases++] = c;
    c = (opt_case){.name = "adamw", .adam = true, .adamw = true, .ad = adamw};
    cases[n_cases++] = c;
    c.ad.amsgrad = true;
    c.name = "adamw-amsgrad";
    cases[n_cases++] = c;
}

static long quick(long n)
{
    const char *q = getenv("AMPC_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0 ? n / 4 : n;
}

static void test_skipped_steps_change_nothing_on_the_cpu(void)
{
    for (int i = 0; i < n_cases; i++)
        run_case(&cases[i], AMP_CPU, quick(CPU_STEPS));
}

static void test_skipped_steps_change_nothing_on_cuda(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    for (int i = 0; i < n_cases; i++)
        run_case(&cases[i], AMP_CUDA, quick(CUDA_STEPS));
}

int main(void)
{
    const char *e = getenv("AMPC_FAULT_SEED");
    seed0 = e && *e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
    printf("fault injection seed %llu (replay: AMPC_FAULT_SEED=%llu)\n", (unsigned long long)seed0,
           (unsigned long long)seed0);
    make_cases();
    RUN(test_skipped_steps_change_nothing_on_the_cpu);
    RUN(test_skipped_steps_change_nothing_on_cuda);
    return harness_done();
}
