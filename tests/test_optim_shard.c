/*
 * test_optim_shard.c - the optimizer's shards (optim_set_shard, for ZeRO-1
 * in src/dist/zero.c), in one process: a parameter stepped over elements
 * [lo, hi) only gets, on those elements, the bits the whole step gives
 * them (SGD with momentum, Adam with amsgrad, AdamW; f32, and bf16 with an
 * f32 master), leaves the others alone, keeps state of hi - lo elements
 * equal to the whole state's slice; an empty shard still counts its step;
 * whole state is cut to the shard, sharded state refuses another shard
 * and the public accessors; out-of-range shards are refused.
 */
#include "harness.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 40000, LO = 5001, HI = 33333 }; /* across the update's 16384-element blocks, off the vector lanes */
enum { V_SGD, V_ADAM_AMSGRAD, V_ADAMW, VARIANTS };

static amp_tensor *filled(amp_dtype dt, double phase)
{
    amp_tensor *f = amp_zeros(AMP_SHAPE(N), AMP_F32);
    float *v = amp_tensor_data(f);
    for (int i = 0; i < N; i++)
        v[i] = (float)sin(phase + 0.001 * i);
    amp_tensor *t = tensor_convert(f, dt);
    amp_tensor_free(f);
    return t;
}

static amp_optim *make(int v, amp_tensor *p)
{
    if (v == V_SGD) {
        amp_sgd_opts o = amp_sgd_defaults();
        o.momentum = 0.9, o.weight_decay = 1e-2;
        return amp_optim_sgd(&p, 1, o);
    }
    amp_adam_opts o = v == V_ADAMW ? amp_adamw_defaults() : amp_adam_defaults();
    o.amsgrad = v == V_ADAM_AMSGRAD;
    o.lr = 1e-3;
    return v == V_ADAMW ? amp_optim_adamw(&p, 1, o) : amp_optim_adam(&p, 1, o);
}

static bool same(const void *a, const void *b, size_t nb) { return memcmp(a, b, nb) == 0; }

/* Element k of t's data. */
static const void *at_off(const amp_tensor *t, int64_t k)
{
    return (const char *)tensor_ptr(t) + (size_t)k * amp_dtype_size(t->dtype);
}

/* Sharded from the start, or cut from whole state after 2 steps. */
static void check_variant(int v, amp_dtype dt, bool cut_later)
{
    const size_t es = amp_dtype_size(dt);
    amp_tensor *p = filled(dt, 0), *q = filled(dt, 0), *q0 = filled(dt, 0);
    amp_optim *a = make(v, p), *b = make(v, q);
    if (dt != AMP_F32) {
        CHECK_OK(amp_optim_set_master_weights(a, true));
        CHECK_OK(amp_optim_set_master_weights(b, true));
    }
    if (!cut_later)
        CHECK_OK(optim_set_shard(b, 0, LO, HI));
    for (int s = 0; s < 5; s++) {
        if (cut_later && s == 2)
            CHECK_OK(optim_set_shard(b, 0, LO, HI)); /* whole state (and master) cut to the shard */
        p->grad = filled(dt, 1.0 + s);
        q->grad = filled(dt, 1.0 + s);
        CHECK_OK(amp_optim_step(a));
        CHECK_OK(amp_optim_step(b));
        amp_optim_zero_grad(a);
        amp_optim_zero_grad(b);
        CHECK_MSG(same(at_off(q, LO), at_off(p, LO), (size_t)(HI - LO) * es), "variant %d %s step %d: shard differs",
                  v, amp_dtype_name(dt), s);
        if (!cut_later) { /* (cut later, q stepped whole before) */
            CHECK(same(tensor_ptr(q), tensor_ptr(q0), (size_t)LO * es));
            CHECK(same(at_off(q, HI), at_off(q0, HI), (size_t)(N - HI) * es));
        }
    }
    CHECK(optim_is_sharded(b, 0));
    CHECK_EQ_INT(optim_first_sharded(b), 0);
    CHECK_EQ_INT(optim_first_sharded(a), -1);
    for (int k = 0; k < OPTIM_MAX_STATE; k++) {
        amp_tensor *sa = a->state[k], *sb = b->state[k];
        CHECK((sa == NULL) == (sb == NULL));
        if (sa && sb) {
            CHECK_EQ_INT(sb->numel, HI - LO);
            CHECK(same(tensor_ptr(sb), (char *)tensor_ptr(sa) + (size_t)LO * 4, (size_t)(HI - LO) * 4));
        }
    }
    if (dt != AMP_F32) {
        CHECK(b->master[0] && b->master[0]->numel == HI - LO);
        if (b->master[0] && a->master[0])
            CHECK(same(tensor_ptr(b->master[0]), (char *)tensor_ptr(a->master[0]) + (size_t)LO * 4,
                       (size_t)(HI - LO) * 4));
        CHECK(amp_optim_master(b, 0) == NULL);
        CHECK_ERROR(AMP_ERR_STATE, "sharded");
    }
    CHECK_EQ_INT(amp_optim_param_steps(b, 0), 5);
    CHECK(amp_optim_state_tensor(b, 0, v == V_SGD ? "momentum_buffer" : "exp_avg") == NULL);
    CHECK_ERROR(AMP_ERR_STATE, "amp_zero_gather_state");
    CHECK(optim_set_shard(b, 0, 0, LO) != AMP_OK); /* another shard: gather first */
    CHECK_ERROR(AMP_ERR_STATE, "gathered");
    CHECK_OK(optim_set_shard(b, 0, LO, HI)); /* the same: nothing to do */
    amp_optim_free(a);
    amp_optim_free(b);
    amp_tensor_free(p);
    amp_tensor_free(q);
    amp_tensor_free(q0);
}

static void test_a_shard_steps_as_the_whole_parameter_does(void)
{
    for (int v = 0; v < VARIANTS; v++) {
        check_variant(v, AMP_F32, false);
        check_variant(v, AMP_F32, true);
        check_variant(v, AMP_BF16, false);
        check_variant(v, AMP_BF16, true);
    }
}

/* An empty shard updates nothing, keeps no state, and counts the step. */
static void test_an_empty_shard_counts_its_step(void)
{
    amp_tensor *p = filled(AMP_F32, 0), *p0 = filled(AMP_F32, 0);
    amp_optim *o = make(V_ADAMW, p);
    CHECK_OK(optim_set_shard(o, 0, 7, 7));
    for (int s = 0; s < 3; s++) {
        p->grad = filled(AMP_F32, 2.0 + s);
        CHECK_OK(amp_optim_step(o));
        amp_optim_zero_grad(o);
    }
    CHECK(same(tensor_ptr(p), tensor_ptr(p0), (size_t)N * 4));
    CHECK_EQ_INT(amp_optim_param_steps(o, 0), 3);
    CHECK_EQ_INT(amp_optim_steps(o), 3);
    for (int k = 0; k < OPTIM_MAX_STATE; k++)
        CHECK(o->state[k] == NULL);
    amp_optim_free(o);
    amp_tensor_free(p);
    amp_tensor_free(p0);
}

static void test_bad_shards_are_refused(void)
{
    amp_tensor *p = filled(AMP_F32, 0);
    amp_optim *o = make(V_SGD, p);
    CHECK(optim_set_shard(o, 0, 5, 4) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "out of range");
    CHECK(optim_set_shard(o, 0, -1, 4) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "out of range");
    CHECK(optim_set_shard(o, 0, 0, N + 1) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "out of range");
    CHECK(optim_set_shard(o, 1, 0, 1) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "index 1");
    CHECK(optim_set_shard(NULL, 0, 0, 1) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "bad optimizer");
    CHECK_OK(optim_set_shard(o, 0, 0, N)); /* the whole parameter: not sharded */
    CHECK(!optim_is_sharded(o, 0));
    amp_optim_free(o);
    amp_tensor_free(p);
}

int main(void)
{
    amp_set_num_threads(2);
    RUN(test_a_shard_steps_as_the_whole_parameter_does);
    RUN(test_an_empty_shard_counts_its_step);
    RUN(test_bad_shards_are_refused);
    return harness_done();
}
