/*
 * test_levers.c - the two memory levers of src/optim: f32 master weights
 * for 16-bit parameters (Apex O2, amp_optim_set_master_weights) and bf16
 * optimizer state (amp_optim_set_state_dtype), with amp_module_to_dtype.
 *
 * The references are the library's own f32 optimizer (test_optim.c holds
 * it to PyTorch): an O2 step is, bit for bit, the f32 step of the master,
 * the parameter its rounding to nearest-even; a bf16-state step is, bit
 * for bit, the f32 step from the widened state, the state stored rounded
 * (to nearest-even, or stochastically: one of the two neighbours, up as
 * often as the discarded fraction says).
 * A step the grad scaler skips changes no parameter, master or state; f16
 * gradients of parameters with masters are unscaled into f32; a checkpoint
 * resumes bit-exact with each lever; wrong uses get clear errors.
 */
#include "harness.h"
#include "optim/optim.h"
#include "sr_tally.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 20000 + 7 }; /* a block (16384) and a tail, and a vector tail */

/* The variants: SGD with momentum (and Nesterov), Adam, AdamW with amsgrad. */
enum { V_SGD, V_SGD_NESTEROV, V_ADAM, V_ADAMW_AMS, VARIANTS };

static amp_optim *make_optim(int v, amp_tensor *p)
{
    if (v == V_SGD || v == V_SGD_NESTEROV) {
        amp_sgd_opts s = amp_sgd_defaults();
        s.lr = 0.03;
        s.momentum = 0.9;
        s.weight_decay = 0.01;
        s.nesterov = v == V_SGD_NESTEROV;
        return amp_optim_sgd(&p, 1, s);
    }
    amp_adam_opts a = v == V_ADAM ? amp_adam_defaults() : amp_adamw_defaults();
    a.lr = 3e-3;
    a.amsgrad = v == V_ADAMW_AMS;
    if (v == V_ADAM)
        a.weight_decay = 0.02;
    return v == V_ADAM ? amp_optim_adam(&p, 1, a) : amp_optim_adamw(&p, 1, a);
}

static const char *const state_keys[VARIANTS][3] = {
    {"momentum_buffer"}, {"momentum_buffer"}, {"exp_avg", "exp_avg_sq"}, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}};

/* Whether tensors a and b hold the same bytes (same dtype and size). */
static bool same_bits(const amp_tensor *a, const amp_tensor *b)
{
    return a && b && a->dtype == b->dtype && a->numel == b->numel &&
           memcmp(tensor_ptr(a), tensor_ptr(b), (size_t)a->numel * amp_dtype_size(a->dtype)) == 0;
}

/* t converted (rounded to nearest-even by amp_convert) to dt. */
static amp_tensor *as(const amp_tensor *t, amp_dtype dt) { return tensor_convert(t, dt); }
/* As as(), freeing t (a tensor made only to be converted). */
static amp_tensor *into(amp_tensor *t, amp_dtype dt)
{
    amp_tensor *c = tensor_convert(t, dt);
    amp_tensor_free(t);
    return c;
}

/* Gradient of step s, in dt: random, one step large (Adam's maximum). */
static amp_tensor *grad_of(int s, amp_dtype dt)
{
    amp_tensor *f = test_uniform(AMP_SHAPE(N), AMP_F32, s == 1 ? -3 : -1, s == 1 ? 3 : 1, 500 + (uint64_t)s);
    amp_tensor *g = as(f, dt);
    amp_tensor_free(f);
    return g;
}

/* O2: a bf16 / f16 parameter with a master steps as the f32 optimizer
 * steps the master, and holds its rounding, bit for bit, over 4 steps. */
static void test_o2_step_is_f32_step_of_master(void)
{
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int v = 0; v < VARIANTS; v++)
        for (int d = 0; d < 2; d++) {
            amp_tensor *f = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 7);
            amp_tensor *p = as(f, dts[d]), *ref = as(p, AMP_F32); /* the master starts as the widened parameter */
            amp_optim *o = make_optim(v, p), *r = make_optim(v, ref);
            CHECK_OK(amp_optim_set_master_weights(o, true));
            CHECK(amp_optim_master_weights(o));
            CHECK(same_bits(amp_optim_master(o, 0), ref));
            for (int s = 0; s < 4; s++) {
                amp_tensor *g = grad_of(s, dts[d]);
                p->grad = amp_clone(g);
                ref->grad = as(g, AMP_F32); /* the gradient the f32 update sees: widened, exactly */
                CHECK_OK(amp_optim_step(o));
                CHECK_OK(amp_optim_step(r));
                amp_optim_zero_grad(o);
                amp_optim_zero_grad(r);
                amp_tensor_free(g);
                amp_tensor *rounded = as(ref, dts[d]);
                CHECK_MSG(same_bits(amp_optim_master(o, 0), ref), "variant %d %s step %d: master != f32 reference",
                          v, amp_dtype_name(dts[d]), s);
                CHECK_MSG(same_bits(p, rounded), "variant %d %s step %d: parameter != rounded reference", v,
                          amp_dtype_name(dts[d]), s);
                amp_tensor_free(rounded);
            }
            /* And the master matters: without it the 16-bit run drifts off. */
            amp_tensor *q = as(f, dts[d]);
            amp_optim *plain = make_optim(v, q);
            for (int s = 0; s < 4; s++) {
                q->grad = grad_of(s, dts[d]);
                CHECK_OK(amp_optim_step(plain));
                amp_optim_zero_grad(plain);
            }
            if (v == V_ADAM) /* small lr: updates below bf16's spacing round away */
                CHECK_MSG(!same_bits(q, p), "variant %d: masters made no difference", v);
            amp_optim_free(plain);
            amp_tensor_free(q);
            amp_optim_free(o);
            amp_optim_free(r);
            amp_tensor_free(p);
            amp_tensor_free(ref);
            amp_tensor_free(f);
        }
}

/* bf16 state: each step is the f32 step from the widened state, the state
 * stored rounded to nearest-even, bit for bit; f32 and bf16 parameters. */
static void test_bf16_state_is_rounded_f32_step(void)
{
    const amp_dtype pdts[2] = {AMP_F32, AMP_BF16};
    for (int v = 0; v < VARIANTS; v++)
        for (int d = 0; d < 2; d++) {
            amp_tensor *f = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 9);
            amp_tensor *p = as(f, pdts[d]), *ref = as(f, pdts[d]);
            amp_optim *o = make_optim(v, p), *r = make_optim(v, ref);
            CHECK_OK(amp_optim_set_state_dtype(o, AMP_BF16));
            CHECK_EQ_INT(amp_optim_state_dtype(o), AMP_BF16);
            for (int s = 0; s < 4; s++) {
                /* The reference starts this step from the tested state,
                 * widened (exact), and the same parameter. */
                for (int k = 0; k < 3 && s > 0 && state_keys[v][k]; k++) {
                    amp_tensor *b = amp_optim_state_tensor(o, 0, state_keys[v][k]);
                    amp_tensor *w = amp_optim_state_tensor(r, 0, state_keys[v][k]);
                    CHECK(b && w && b->dtype == AMP_BF16 && w->dtype == AMP_F32);
                    if (b && w)
                        amp_convert(tensor_ptr(b), AMP_BF16, tensor_ptr(w), AMP_F32, (size_t)N);
                }
                amp_tensor *g = grad_of(s, AMP_F32);
                p->grad = amp_clone(g);
                ref->grad = g;
                CHECK_OK(amp_optim_step(o));
                CHECK_OK(amp_optim_step(r));
                amp_optim_zero_grad(o);
                amp_optim_zero_grad(r);
                CHECK_MSG(same_bits(p, ref), "variant %d param %s step %d: parameter != reference", v,
                          amp_dtype_name(pdts[d]), s);
                for (int k = 0; k < 3 && state_keys[v][k]; k++) {
                    amp_tensor *rounded = as(amp_optim_state_tensor(r, 0, state_keys[v][k]), AMP_BF16);
                    CHECK_MSG(same_bits(amp_optim_state_tensor(o, 0, state_keys[v][k]), rounded),
                              "variant %d step %d: %s != the reference rounded", v, s, state_keys[v][k]);
                    amp_tensor_free(rounded);
                }
            }
            amp_optim_free(o);
            amp_optim_free(r);
            amp_tensor_free(p);
            amp_tensor_free(ref);
            amp_tensor_free(f);
        }
}

/* bf16 state with stochastic rounding: the update still uses the f32
 * values (the parameter is the reference's, bit for bit), each stored
 * element is one of the two bf16 values around the reference's f32 value,
 * and it is rounded away from zero as often as the discarded fractions
 * say (over 3 buffers x 20007 elements x 4 steps: within 4 standard
 * deviations), where nearest-even would be biased. */
static void test_bf16_state_stochastic_rounding(void)
{
    amp_tensor *f = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 9);
    amp_tensor *p = amp_clone(f), *ref = amp_clone(f);
    amp_optim *o = make_optim(V_ADAMW_AMS, p), *r = make_optim(V_ADAMW_AMS, ref);
    CHECK_OK(amp_optim_set_state_dtype(o, AMP_BF16));
    CHECK_OK(amp_optim_set_state_stochastic_rounding(o, true));
    CHECK(amp_optim_state_stochastic_rounding(o));
    sr_tally t = {0};
    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 3 && s > 0; k++) {
            amp_tensor *b = amp_optim_state_tensor(o, 0, state_keys[V_ADAMW_AMS][k]);
            amp_convert(tensor_ptr(b), AMP_BF16, tensor_ptr(amp_optim_state_tensor(r, 0, state_keys[V_ADAMW_AMS][k])),
                        AMP_F32, (size_t)N);
        }
        amp_tensor *g = grad_of(s, AMP_F32);
        p->grad = amp_clone(g);
        ref->grad = g;
        CHECK_OK(amp_optim_step(o));
        CHECK_OK(amp_optim_step(r));
        amp_optim_zero_grad(o);
        amp_optim_zero_grad(r);
        CHECK_MSG(same_bits(p, ref), "step %d: parameter != reference", s);
        for (int k = 0; k < 3; k++) {
            const float *want = tensor_f32(amp_optim_state_tensor(r, 0, state_keys[V_ADAMW_AMS][k]));
            const uint16_t *got = tensor_ptr(amp_optim_state_tensor(o, 0, state_keys[V_ADAMW_AMS][k]));
            sr_tally_add(&t, want, got, N);
        }
    }
    CHECK_EQ_INT(t.outside, 0);
    CHECK_MSG(fabs(t.ups - t.expected) <= 4 * sqrt(t.var) + 1, "rounded up %.0f times, expected %.1f (sd %.1f)", t.ups,
              t.expected, sqrt(t.var));
    amp_optim_free(o);
    amp_optim_free(r);
    amp_tensor_free(p);
    amp_tensor_free(ref);
    amp_tensor_free(f);
}

/* A long run of Adam (beta2 0.999) on normally distributed gradients:
 * exp_avg_sq's mean, stored in bf16 with stochastic rounding, stays
 * within 2% of the f32 run's; printed beside it, nearest-even's, which
 * drifts (docs/memory.md quotes these lines). */
static void test_stochastic_rounding_keeps_exp_avg_sq_unbiased(void)
{
    enum { M = 2000, STEPS = 6000 };
    amp_tensor *p[3];
    amp_optim *o[3];
    for (int k = 0; k < 3; k++) {
        p[k] = amp_zeros(AMP_SHAPE(M), AMP_F32);
        amp_adam_opts a = amp_adam_defaults();
        a.lr = 0; /* the moments only */
        o[k] = amp_optim_adam(&p[k], 1, a);
        if (k > 0)
            CHECK_OK(amp_optim_set_state_dtype(o[k], AMP_BF16));
        CHECK_OK(amp_optim_set_state_stochastic_rounding(o[k], k == 2));
    }
    uint64_t x = 88172645463325252ull;
    float g[M];
    for (int s = 1; s <= STEPS; s++) {
        for (int j = 0; j < M; j++) { /* Box-Muller over xorshift64 */
            double u[2];
            for (int q = 0; q < 2; q++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                u[q] = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
            }
            g[j] = (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]) * 1e-3);
        }
        for (int k = 0; k < 3; k++) {
            p[k]->grad = amp_zeros(AMP_SHAPE(M), AMP_F32);
            memcpy(tensor_ptr(p[k]->grad), g, sizeof g);
            CHECK_OK(amp_optim_step(o[k]));
            amp_optim_zero_grad(o[k]);
        }
        if (s == 300 || s == 1000 || s == 3000 || s == STEPS) {
            double mean[3] = {0, 0, 0};
            for (int k = 0; k < 3; k++) {
                float v[M];
                CHECK_OK(amp_tensor_copy_out(amp_optim_state_tensor(o[k], 0, "exp_avg_sq"), v, AMP_F32));
                for (int j = 0; j < M; j++)
                    mean[k] += v[j];
            }
            printf("  step %4d: exp_avg_sq in bf16 / f32: nearest-even %.3f, stochastic %.3f\n", s,
                   mean[1] / mean[0], mean[2] / mean[0]);
            CHECK_MSG(fabs(mean[2] / mean[0] - 1) < 0.02, "step %d: stochastic rounding's mean is %.3f of f32's", s,
                      mean[2] / mean[0]);
            /* ... where nearest-even has drifted up by then (1.75 at 6000
             * steps): the bias stochastic rounding is there to remove. */
            if (s == STEPS)
                CHECK_MSG(mean[1] / mean[0] > 1.2, "step %d: nearest-even's mean is only %.3f of f32's", s,
                          mean[1] / mean[0]);
        }
    }
    for (int k = 0; k < 3; k++) {
        amp_optim_free(o[k]);
        amp_tensor_free(p[k]);
    }
}

/* Existing f32 state is converted (rounded); f16 state is refused. */
static void test_state_dtype_switch_and_refusal(void)
{
    amp_tensor *p = test_uniform(AMP_SHAPE(100), AMP_F32, -1, 1, 3);
    amp_optim *o = make_optim(V_ADAM, p);
    p->grad = test_uniform(AMP_SHAPE(100), AMP_F32, -1, 1, 4);
    CHECK_OK(amp_optim_step(o));
    amp_tensor *before = as(amp_optim_state_tensor(o, 0, "exp_avg"), AMP_BF16);
    CHECK_OK(amp_optim_set_state_dtype(o, AMP_BF16));
    CHECK(same_bits(amp_optim_state_tensor(o, 0, "exp_avg"), before));
    CHECK_EQ_INT(amp_optim_set_state_dtype(o, AMP_F16), AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "f32 or bf16 only");
    CHECK_EQ_INT(amp_optim_state_dtype(o), AMP_BF16);
    amp_tensor_free(before);
    amp_optim_free(o);
    amp_tensor_free(p);
}

/* The scaler's amp_scaler_scale of a loss, which an iteration starts with
 * (the gradients here are made by hand). */
static void scale_a_loss(amp_scaler *sc)
{
    amp_tensor *l = amp_zeros(AMP_SHAPE(), AMP_F32);
    CHECK(amp_scaler_scale(sc, l) != NULL);
    amp_tensor_free(l);
    amp_temps_free();
}

/* A step the grad scaler skips (inf in a gradient) changes no parameter,
 * master or state; the f16 gradients are unscaled into f32 first. */
static void test_skipped_step_changes_nothing(void)
{
    amp_tensor *p = into(test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 11), AMP_F16);
    amp_optim *o = make_optim(V_ADAMW_AMS, p);
    CHECK_OK(amp_optim_set_master_weights(o, true));
    CHECK_OK(amp_optim_set_state_dtype(o, AMP_BF16));
    amp_scaler_opts so = amp_scaler_defaults();
    so.init_scale = 1024; /* 2^10 */
    amp_scaler *sc = amp_scaler_new(so);
    /* A normal step first (so there is state), with a gradient that is
     * 0 in f16 once unscaled in place: 2^-16 * 2^-10 = 2^-26 < 2^-24. */
    amp_tensor *g = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 12);
    tensor_f32(g)[0] = 0x1p-16f;
    p->grad = as(g, AMP_F16);
    amp_tensor_free(g);
    scale_a_loss(sc);
    CHECK_OK(amp_scaler_unscale(sc, o));
    CHECK(p->grad && p->grad->dtype == AMP_F32);
    CHECK(p->grad && tensor_f32(p->grad)[0] == 0x1p-26f);
    bool skipped = true;
    CHECK_OK(amp_scaler_step(sc, o, &skipped));
    CHECK(!skipped);
    CHECK_OK(amp_scaler_update(sc));
    amp_optim_zero_grad(o);

    amp_tensor *p0 = amp_clone(p), *m0 = amp_clone(amp_optim_master(o, 0)), *s0[3];
    for (int k = 0; k < 3; k++)
        s0[k] = amp_clone(amp_optim_state_tensor(o, 0, state_keys[V_ADAMW_AMS][k]));
    g = test_uniform(AMP_SHAPE(N), AMP_F32, -1, 1, 13);
    tensor_f32(g)[N - 1] = INFINITY;
    p->grad = as(g, AMP_F16);
    amp_tensor_free(g);
    scale_a_loss(sc);
    CHECK_OK(amp_scaler_step(sc, o, &skipped));
    CHECK(skipped);
    CHECK_OK(amp_scaler_update(sc));
    CHECK(same_bits(p, p0));
    CHECK(same_bits(amp_optim_master(o, 0), m0));
    for (int k = 0; k < 3; k++)
        CHECK_MSG(same_bits(amp_optim_state_tensor(o, 0, state_keys[V_ADAMW_AMS][k]), s0[k]), "state %d changed",
                  k);
    CHECK_EQ_INT(amp_optim_steps(o), 1);
    for (int k = 0; k < 3; k++)
        amp_tensor_free(s0[k]);
    amp_tensor_free(p0);
    amp_tensor_free(m0);
    amp_scaler_free(sc);
    amp_optim_free(o);
    amp_tensor_free(p);
}

/* An f16 gradient without a master is still refused (PyTorch's rule). */
static void test_f16_grads_without_master_refused(void)
{
    amp_tensor *p = into(test_uniform(AMP_SHAPE(10), AMP_F32, -1, 1, 11), AMP_F16);
    amp_optim *o = make_optim(V_ADAM, p);
    amp_scaler *sc = amp_scaler_new(amp_scaler_defaults());
    p->grad = amp_clone(p);
    scale_a_loss(sc);
    CHECK_EQ_INT(amp_scaler_unscale(sc, o), AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "amp_optim_set_master_weights");
    amp_scaler_free(sc);
    amp_optim_free(o);
    amp_tensor_free(p);
}

/* A write to the parameter from outside the optimizer re-seeds its
 * master; the optimizer's own writes do not; a parameter made f32 has
 * none. */
static void test_master_follows_outside_writes(void)
{
    amp_tensor *p = into(test_uniform(AMP_SHAPE(64), AMP_F32, -1, 1, 21), AMP_BF16);
    amp_optim *o = make_optim(V_ADAM, p);
    CHECK_OK(amp_optim_set_master_weights(o, true));
    p->grad = into(test_uniform(AMP_SHAPE(64), AMP_F32, -1, 1, 22), AMP_BF16);
    CHECK_OK(amp_optim_step(o));
    amp_tensor *w = as(p, AMP_F32);
    CHECK(!same_bits(amp_optim_master(o, 0), w)); /* Adam's first step (lr 3e-3) is below bf16's spacing */
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i;
    CHECK_OK(amp_tensor_copy_in(p, v, AMP_F32));
    amp_tensor_free(w);
    w = as(p, AMP_F32);
    CHECK(same_bits(amp_optim_master(o, 0), w));
    /* Made f32 again: no master (the step updates it in place). */
    CHECK_OK(tensor_retype(p, AMP_F32));
    CHECK(amp_optim_master(o, 0) == NULL);
    CHECK_OK(tensor_retype(p, AMP_BF16));
    CHECK(amp_optim_master(o, 0) != NULL);
    CHECK_OK(amp_optim_set_master_weights(o, false));
    CHECK(amp_optim_master(o, 0) == NULL);
    amp_tensor_free(w);
    amp_optim_free(o);
    amp_tensor_free(p);
}

/* amp_module_to_dtype: linear weights and biases to 16 bits, norms and
 * embeddings (and the GPT's wte / wpe) kept f32; the tensors are the same
 * objects, values rounded. */
static void test_module_to_dtype(void)
{
    amp_module *seq = amp_nn_sequential();
    amp_sequential_add(seq, amp_nn_embedding(10, 8));
    amp_sequential_add(seq, amp_nn_linear(8, 4, true));
    amp_sequential_add(seq, amp_nn_layer_norm(4, 1e-5));
    amp_tensor *w = amp_module_param(seq, 1, NULL);
    amp_tensor *rounded = as(w, AMP_BF16);
    CHECK_OK(amp_module_to_dtype(seq, AMP_BF16));
    const amp_dtype want[5] = {AMP_F32, AMP_BF16, AMP_BF16, AMP_F32, AMP_F32};
    CHECK_EQ_INT(amp_module_num_params(seq), 5);
    for (int i = 0; i < 5; i++) {
        const char *name;
        amp_tensor *t = amp_module_param(seq, i, &name);
        CHECK_MSG(t && t->dtype == want[i], "%s is %s", name, t ? amp_dtype_name(t->dtype) : "?");
    }
    CHECK(amp_module_param(seq, 1, NULL) == w && same_bits(w, rounded));
    CHECK_EQ_INT(amp_module_to_dtype(seq, AMP_I32), AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "not f32, f16 or bf16");
    amp_tensor_free(rounded);
    amp_module_free(seq);

    amp_gpt_config c = {.vocab = 16, .context = 8, .width = 8, .layers = 1, .heads = 2, .mlp = 16};
    amp_module *g = amp_model_gpt(c);
    CHECK_OK(amp_module_to_dtype(g, AMP_F16));
    /* f32: the tables, block 0's norms (children 0 and 3) and the final
     * norm (child 1 of the model); everything else f16. */
    const char *const f32_names[] = {"wte.weight",     "wpe.weight",     "h.0.ln_1.weight", "h.0.ln_1.bias",
                                     "h.0.ln_2.weight", "h.0.ln_2.bias", "ln_f.weight",     "ln_f.bias"};
    for (int i = 0, n = amp_module_num_params(g); i < n; i++) {
        const char *name;
        amp_tensor *t = amp_module_param(g, i, &name);
        bool f32 = false;
        for (size_t k = 0; k < sizeof f32_names / sizeof *f32_names; k++)
            f32 = f32 || strcmp(name, f32_names[k]) == 0;
        CHECK_MSG(t->dtype == (f32 ? AMP_F32 : AMP_F16), "%s is %s", name, amp_dtype_name(t->dtype));
    }
    amp_module_free(g);
}

/* Runs `steps` steps of a bf16 / f16 linear layer's parameters with both
 * levers from the current state, gradients from seed base + step. */
static void run_steps(amp_optim *o, amp_tensor **ps, int n, int from, int to)
{
    for (int s = from; s < to; s++) {
        for (int i = 0; i < n; i++) {
            amp_tensor *f = test_uniform(ps[i]->shape, AMP_F32, -1, 1, 1000 + (uint64_t)(s * 10 + i));
            ps[i]->grad = as(f, ps[i]->dtype);
            amp_tensor_free(f);
        }
        CHECK_OK(amp_optim_step(o));
        amp_optim_zero_grad(o);
    }
}

static amp_optim *lever_optim(amp_module *m, amp_tensor **ps, bool masters, bool bf16_state)
{
    int n = amp_module_params(m, ps, 8);
    amp_adam_opts a = amp_adamw_defaults();
    a.lr = 1e-3;
    a.amsgrad = true;
    amp_optim *o = amp_optim_adamw(ps, n, a);
    if (masters)
        CHECK_OK(amp_optim_set_master_weights(o, true));
    if (bf16_state)
        CHECK_OK(amp_optim_set_state_dtype(o, AMP_BF16));
    return o;
}

/* Save after 3 steps, load into a fresh model and optimizer, 3 more: the
 * same bits as 6 steps in one go, with each lever and both. */
static void test_resume_bit_exact(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/ampc_test_levers_%d.safetensors", (int)getpid());
    for (int lever = 1; lever <= 3; lever++) {
        const bool masters = lever & 1, bf16_state = lever & 2;
        const amp_dtype pdt = masters ? AMP_BF16 : AMP_F32;
        amp_tensor *ps[8], *qs[8];
        amp_manual_seed(5);
        amp_module *m = amp_nn_linear(300, 70, true);
        CHECK_OK(amp_module_to_dtype(m, pdt));
        amp_optim *o = lever_optim(m, ps, masters, bf16_state);
        run_steps(o, ps, 2, 0, 3);
        CHECK_OK(amp_checkpoint_save(path, m, o, NULL, 3, NULL));
        run_steps(o, ps, 2, 3, 6);

        amp_manual_seed(99); /* other initial values: all must come from the file */
        amp_module *m2 = amp_nn_linear(300, 70, true);
        CHECK_OK(amp_module_to_dtype(m2, pdt));
        amp_optim *o2 = lever_optim(m2, qs, masters, bf16_state);
        int64_t step = 0;
        CHECK_OK(amp_checkpoint_load(path, m2, o2, NULL, &step, NULL));
        CHECK_EQ_INT(step, 3);
        run_steps(o2, qs, 2, 3, 6);
        for (int i = 0; i < 2; i++) {
            CHECK_MSG(same_bits(ps[i], qs[i]), "lever %d: parameter %d differs after resume", lever, i);
            if (masters)
                CHECK_MSG(same_bits(amp_optim_master(o, i), amp_optim_master(o2, i)),
                          "lever %d: master %d differs after resume", lever, i);
            for (int k = 0; k < 3; k++)
                CHECK_MSG(same_bits(amp_optim_state_tensor(o, i, state_keys[V_ADAMW_AMS][k]),
                                    amp_optim_state_tensor(o2, i, state_keys[V_ADAMW_AMS][k])),
                          "lever %d: state %s of %d differs after resume", lever, state_keys[V_ADAMW_AMS][k], i);
        }
        /* The file loaded by an optimizer with other levers: refused,
         * naming the lever, nothing changed. */
        amp_optim *o3;
        if (masters) {
            o3 = lever_optim(m2, qs, false, bf16_state);
            CHECK(amp_checkpoint_load(path, m2, o3, NULL, &step, NULL) != AMP_OK);
            CHECK_MSG(strstr(amp_last_error(), "master"), "lever %d: %s", lever, amp_last_error());
            amp_clear_error();
            amp_optim_free(o3);
        }
        o3 = lever_optim(m2, qs, masters, !bf16_state);
        CHECK(amp_checkpoint_load(path, m2, o3, NULL, &step, NULL) != AMP_OK);
        CHECK_MSG(strstr(amp_last_error(), "optimizer state dtype"), "lever %d: %s", lever, amp_last_error());
        amp_clear_error();
        amp_optim_free(o3);
        amp_optim_free(o);
        amp_optim_free(o2);
        amp_module_free(m);
        amp_module_free(m2);
    }
    unlink(path);
}

int main(void)
{
    RUN(test_o2_step_is_f32_step_of_master);
    RUN(test_bf16_state_is_rounded_f32_step);
    RUN(test_bf16_state_stochastic_rounding);
    RUN(test_stochastic_rounding_keeps_exp_avg_sq_unbiased);
    RUN(test_state_dtype_switch_and_refusal);
    RUN(test_skipped_step_changes_nothing);
    RUN(test_f16_grads_without_master_refused);
    RUN(test_master_follows_outside_writes);
    RUN(test_module_to_dtype);
    RUN(test_resume_bit_exact);
    return harness_done();
}
