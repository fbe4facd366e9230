/*
 * test_zero.c (2 ranks, mpirun) - ZeRO stage 1 (src/dist/zero.c) against
 * the unsharded data-parallel reference: the same model on every rank,
 * each rank its own batch; the reference all-reduces (AVG) every gradient
 * with amp_dist_all_reduce and takes a normal step, ZeRO reduce-scatters,
 * steps its shard and all-gathers. Without clipping the parameters must
 * be bitwise the reference's after every step (2 ranks: both sums are
 * a + b, the division the same x / 2 in f32, the update elementwise); with
 * clipping within a stated tolerance (the norm's sum runs in another
 * order). Also: every rank holds the same bits, the state is about half
 * (exactly each rank's shard), a skipped step (inf) changes nothing on
 * either rank, gathered state equals the reference's bit for bit and
 * saves the same checkpoint file, a checkpoint resumes into a fresh
 * sharded optimizer, bad input is refused with a message (ranks whose
 * parameters differ in count, size or dtype; gradients reduced while the
 * state is not sharded, a shard_state that failed on one rank included),
 * and a world of one rank (before amp_dist_init) is a plain optimizer.
 */
#include "comm/comm.h"
#include "dist_main.h"
#include "harness.h"
#include "optim/optim.h"
#include "tensor/tensor.h"
#include "zero_net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The net (zero_net.h), an MLP 7 -> 13 -> 5, has 91 + 13 + 65 + 5 = 174
 * elements, shards of 87: rank 0's ends inside the first weight, rank 1's
 * holds its last 4 elements and every other parameter (rank 0 steps three
 * parameters with an empty part). */

/* The reference step: average every gradient over the ranks, then a normal
 * (optionally clipped) step. Returns the norm (0 without clipping). */
static double ref_step(net *a, int t, double max_norm)
{
    amp_optim_zero_grad(a->o);
    fwd_bwd(a, t, rank, NULL);
    for (int i = 0; i < a->n; i++)
        CHECK_OK(amp_dist_all_reduce(amp_tensor_grad(a->p[i]), AMP_REDUCE_AVG));
    double norm = max_norm > 0 ? amp_clip_grad_norm(a->p, a->n, max_norm) : 0;
    CHECK_OK(amp_optim_step(a->o));
    return norm;
}

/* ZeRO's step; with as_tensor the norm comes from
 * amp_zero_clip_grad_norm_tensor (widened from its f32). */
static double zero_step_as(net *a, amp_zero *z, int t, double max_norm, bool as_tensor)
{
    amp_optim_zero_grad(a->o);
    fwd_bwd(a, t, rank, NULL);
    CHECK_OK(amp_zero_reduce_gradients(z));
    double norm = 0;
    if (max_norm > 0 && as_tensor) {
        amp_tensor *n = amp_zero_clip_grad_norm_tensor(z, max_norm);
        CHECK(n && n->numel == 1 && n->dtype == AMP_F32);
        norm = n ? ((const float *)amp_tensor_data(n))[0] : NAN;
        amp_tensor_free(n);
    } else if (max_norm > 0) {
        norm = amp_zero_clip_grad_norm(z, max_norm);
    }
    CHECK_OK(amp_optim_step(a->o));
    CHECK_OK(amp_zero_gather_parameters(z));
    return norm;
}

static double zero_step(net *a, amp_zero *z, int t, double max_norm)
{
    return zero_step_as(a, z, t, max_norm, false);
}

/* Whether every rank holds rank 0's parameter bits. */
static bool same_on_every_rank(const net *a)
{
    int64_t bad = 0;
    for (int i = 0; i < a->n; i++) {
        amp_tensor *c = amp_zeros(a->p[i]->shape, AMP_F32);
        memcpy(amp_tensor_data(c), amp_tensor_data(a->p[i]), (size_t)a->p[i]->numel * sizeof(float));
        CHECK_OK(amp_dist_broadcast(c, 0));
        bad += memcmp(amp_tensor_data(c), amp_tensor_data(a->p[i]), (size_t)a->p[i]->numel * sizeof(float)) != 0;
        amp_tensor_free(c);
    }
    amp_tensor *f = amp_zeros(AMP_SHAPE(1), AMP_I64);
    ((int64_t *)amp_tensor_data(f))[0] = bad;
    CHECK_OK(amp_dist_all_reduce(f, AMP_REDUCE_MAX));
    bad = ((int64_t *)amp_tensor_data(f))[0];
    amp_tensor_free(f);
    return bad == 0;
}

/* 25 steps of ZeRO-1 against the reference, without clipping: bitwise. */
static void run_bitwise(int kind)
{
    net r = make_net(kind, AMP_CPU), a = make_net(kind, AMP_CPU);
    amp_zero *z = amp_zero_new(a.o);
    CHECK(z);
    CHECK_EQ_INT(diff_params(&a, &r, NULL), 0);
    for (int t = 0; t < 25 && z; t++) {
        ref_step(&r, t, 0);
        zero_step(&a, z, t, 0);
        int64_t bad = diff_params(&a, &r, NULL);
        CHECK_MSG(bad == 0, "%s step %d: %lld elements differ from the unsharded run", a.o->name, t, (long long)bad);
        CHECK_MSG(same_on_every_rank(&a), "%s step %d: the ranks' parameters differ", a.o->name, t);
        if (bad)
            break;
    }
    for (int i = 0; i < a.n; i++)
        CHECK_EQ_INT(amp_optim_param_steps(a.o, i), 25);
    CHECK_EQ_INT(amp_optim_steps(a.o), 25);
    amp_zero_free(z);
    free_net(&a);
    free_net(&r);
}

static void test_sgd_momentum_bitwise(void) { run_bitwise(SGD); }
static void test_adamw_bitwise(void) { run_bitwise(ADAMW); }

/* With clipping (max_norm below the norms, so every step clips): the
 * global norm is this rank's shard's norm combined with the other's, a
 * different summation order from the reference's, so the norms agree to
 * a few ulps of a double (checked to 1e-12 relative) and the f32 factor
 * may differ by an ulp; over 20 steps the parameters stay within 1e-5
 * relative (an ulp of the factor is 6e-8 of one step's update, which is
 * at most lr = 0.01 for AdamW and 0.05 * |g| for SGD). */
static void run_clipped(int kind)
{
    net r = make_net(kind, AMP_CPU), a = make_net(kind, AMP_CPU), b = make_net(kind, AMP_CPU);
    amp_zero *z = amp_zero_new(a.o), *zb = amp_zero_new(b.o);
    CHECK(z && zb);
    double worst = 0, worst_norm = 0;
    int clipped = 0;
    for (int t = 0; t < 20 && z && zb; t++) {
        double nr = ref_step(&r, t, 0.25), na = zero_step(&a, z, t, 0.25);
        /* the tensor form: the same clipping bit for bit, the norm the
         * double rounded once to f32 */
        double nb = zero_step_as(&b, zb, t, 0.25, true);
        CHECK_MSG(nb == (double)(float)na, "step %d: the tensor's norm %.9g, the double's %.17g", t, nb, na);
        CHECK_MSG(diff_params(&b, &a, NULL) == 0, "step %d: the tensor form clipped differently", t);
        clipped += nr > 0.25;
        double dn = fabs(na - nr) / nr;
        worst_norm = dn > worst_norm ? dn : worst_norm;
        double rel;
        diff_params(&a, &r, &rel);
        worst = rel > worst ? rel : worst;
        CHECK_MSG(same_on_every_rank(&a), "%s clipped step %d: the ranks' parameters differ", a.o->name, t);
    }
    CHECK_MSG(clipped >= 15, "only %d of 20 steps clipped: the test does not test clipping", clipped);
    CHECK_MSG(worst_norm <= 1e-12, "%s: global norm off by %.3g relative", a.o->name, worst_norm);
    CHECK_MSG(worst <= 1e-5, "%s clipped: parameters off by %.3g relative", a.o->name, worst);
    if (rank == 0)
        printf("  %s clipped: norms within %.2g, parameters within %.2g relative of the reference\n", a.o->name,
               worst_norm, worst);
    amp_zero_free(z);
    amp_zero_free(zb);
    free_net(&a);
    free_net(&b);
    free_net(&r);
}

static void test_sgd_clipped(void) { run_clipped(SGD); }
static void test_adamw_clipped(void) { run_clipped(ADAMW); }

static int64_t state_bytes_of(const amp_optim *o)
{
    int64_t b = 0;
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < OPTIM_MAX_STATE; k++)
            b += o->state[i * OPTIM_MAX_STATE + k] ? o->state[i * OPTIM_MAX_STATE + k]->numel * 4 : 0;
    return b;
}

/* Each rank's AdamW state is its 87 elements x 2 buffers x 4 bytes; the
 * two together are the unsharded optimizer's. */
static void test_state_bytes(void)
{
    net r = make_net(ADAMW, AMP_CPU), a = make_net(ADAMW, AMP_CPU);
    amp_zero *z = amp_zero_new(a.o);
    CHECK(z);
    CHECK_EQ_INT(amp_zero_state_bytes(z), 0); /* none before the first step */
    for (int t = 0; t < 3; t++) {
        ref_step(&r, t, 0);
        zero_step(&a, z, t, 0);
    }
    const int64_t full = state_bytes_of(r.o), mine = amp_zero_state_bytes(z);
    CHECK_EQ_INT(full, 174 * 2 * 4);
    CHECK_EQ_INT(mine, 87 * 2 * 4);
    amp_tensor *s = amp_zeros(AMP_SHAPE(1), AMP_I64);
    ((int64_t *)amp_tensor_data(s))[0] = mine;
    CHECK_OK(amp_dist_all_reduce(s, AMP_REDUCE_SUM));
    CHECK_EQ_INT(((int64_t *)amp_tensor_data(s))[0], full);
    amp_tensor_free(s);
    CHECK_EQ_INT(amp_zero_state_bytes(NULL), 0);
    amp_zero_free(z);
    free_net(&a);
    free_net(&r);
}

/* A copy of every state buffer's bits (sharded or not), to compare. */
static char *snapshot_state(const amp_optim *o, size_t *nb)
{
    size_t total = 0;
    for (int k = 0; k < o->n * OPTIM_MAX_STATE; k++)
        total += o->state[k] ? (size_t)o->state[k]->numel * 4 : 0;
    char *buf = malloc(total ? total : 1), *q = buf;
    for (int k = 0; k < o->n * OPTIM_MAX_STATE; k++)
        if (o->state[k]) {
            memcpy(q, tensor_ptr(o->state[k]), (size_t)o->state[k]->numel * 4);
            q += (size_t)o->state[k]->numel * 4;
        }
    *nb = total;
    return buf;
}

/* An inf in rank 0's gradient, at an element of each rank's shard (both:
 * after the reduce-scatter both ranks see it) or of rank 1's shard only
 * (only rank 1 sees it; the scaler's found_inf, reduced with MAX over the
 * ranks, makes rank 0 skip too): the scaler skips the step on both,
 * parameters and state keep their bits, the scale backs off on both. */
static void run_skipped(bool both)
{
    net a = make_net(SGD, AMP_CPU);
    amp_zero *z = amp_zero_new(a.o);
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    CHECK(z && s);
    for (int t = 0; t < 4 && z; t++) {
        amp_optim_zero_grad(a.o);
        fwd_bwd(&a, t, rank, s);
        if (t == 3 && rank == 0) {
            if (both)
                ((float *)amp_tensor_data(amp_tensor_grad(a.p[0])))[0] = INFINITY;       /* rank 0's shard */
            ((float *)amp_tensor_data(amp_tensor_grad(a.p[a.n - 1])))[ZCLS - 1] = INFINITY; /* rank 1's */
        }
        CHECK_OK(amp_zero_reduce_gradients(z));
        CHECK_OK(amp_scaler_unscale(s, a.o));
        size_t nb0 = 0, nb1 = 0;
        float *params = malloc(174 * sizeof *params), *q = params;
        for (int i = 0; i < a.n; i++, q += a.p[i - 1]->numel)
            memcpy(q, amp_tensor_data(a.p[i]), (size_t)a.p[i]->numel * sizeof *q);
        char *st0 = snapshot_state(a.o, &nb0);
        bool skipped = false;
        CHECK_OK(amp_scaler_step(s, a.o, &skipped));
        CHECK_OK(amp_scaler_update(s));
        CHECK_OK(amp_zero_gather_parameters(z));
        CHECK_EQ_INT(skipped, t == 3);
        if (t == 3) {
            q = params;
            for (int i = 0; i < a.n; i++, q += a.p[i - 1]->numel)
                CHECK(memcmp(q, amp_tensor_data(a.p[i]), (size_t)a.p[i]->numel * sizeof *q) == 0);
            char *st1 = snapshot_state(a.o, &nb1);
            CHECK(nb0 == nb1 && memcmp(st0, st1, nb0) == 0);
            free(st1);
            for (int i = 0; i < a.n; i++)
                CHECK_EQ_INT(amp_optim_param_steps(a.o, i), 3);
            CHECK(amp_scaler_get_scale(s) == 32768.0);
        }
        free(params);
        free(st0);
    }
    CHECK(same_on_every_rank(&a));
    amp_scaler_free(s);
    amp_zero_free(z);
    free_net(&a);
}

static void test_skipped_step(void) { run_skipped(true); }
static void test_an_inf_in_one_shard_skips_on_every_rank(void) { run_skipped(false); }

static bool same_file(const char *x, const char *y)
{
    FILE *f = fopen(x, "rb"), *g = fopen(y, "rb");
    bool same = f && g;
    while (same) {
        int c = fgetc(f), d = fgetc(g);
        same = c == d;
        if (c == EOF || d == EOF)
            break;
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
    return same;
}

/* gather_state: every rank holds the whole state, bitwise the reference's;
 * the checkpoint written from it is the reference's file byte for byte;
 * sharded again, the run goes on bitwise; a fresh optimizer loads the
 * file, is sharded by a new amp_zero and goes on bitwise too. */
static void test_gather_state_and_checkpoint(void)
{
    const char *keys[] = {"exp_avg", "exp_avg_sq"};
    net r = make_net(ADAMW, AMP_CPU), a = make_net(ADAMW, AMP_CPU);
    amp_zero *z = amp_zero_new(a.o);
    CHECK(z);
    int t = 0;
    for (; t < 6; t++) {
        ref_step(&r, t, 0);
        zero_step(&a, z, t, 0);
    }
    /* sharded: no parameter-shaped state to give out or save */
    CHECK(amp_optim_state_tensor(a.o, 0, "exp_avg") == NULL); /* (cut on both ranks) */
    CHECK_ERROR(AMP_ERR_STATE, "sharded");
    CHECK(amp_checkpoint_save("/nonexistent/x", a.m, a.o, NULL, t, NULL) != AMP_OK);
    CHECK_ERROR(AMP_ERR_STATE, "amp_zero_gather_state");

    CHECK_OK(amp_zero_gather_state(z));
    CHECK_OK(amp_zero_gather_state(z)); /* twice: nothing to do */
    CHECK_EQ_INT(amp_zero_state_bytes(z), state_bytes_of(r.o));
    for (int i = 0; i < a.n; i++) {
        CHECK_EQ_INT(amp_optim_param_steps(a.o, i), amp_optim_param_steps(r.o, i));
        for (int k = 0; k < 2; k++) {
            amp_tensor *x = amp_optim_state_tensor(a.o, i, keys[k]), *y = amp_optim_state_tensor(r.o, i, keys[k]);
            CHECK(x && y && shape_equal(x->shape, y->shape));
            if (x && y)
                CHECK_MSG(memcmp(tensor_ptr(x), tensor_ptr(y), (size_t)y->numel * 4) == 0,
                          "parameter %d's %s differs from the unsharded state", i, keys[k]);
        }
    }
    /* the same file as the unsharded run's (rank 0 writes, every rank reads) */
    amp_tensor *pid = amp_zeros(AMP_SHAPE(1), AMP_I64);
    ((int64_t *)amp_tensor_data(pid))[0] = getpid();
    CHECK_OK(amp_dist_broadcast(pid, 0));
    char pa[96], pr[96];
    snprintf(pa, sizeof pa, "/tmp/ampc_test_zero_%lld_a.safetensors", (long long)((int64_t *)amp_tensor_data(pid))[0]);
    snprintf(pr, sizeof pr, "/tmp/ampc_test_zero_%lld_r.safetensors", (long long)((int64_t *)amp_tensor_data(pid))[0]);
    amp_tensor_free(pid);
    if (rank == 0) {
        CHECK_OK(amp_checkpoint_save(pa, a.m, a.o, NULL, t, "{}"));
        CHECK_OK(amp_checkpoint_save(pr, r.m, r.o, NULL, t, "{}"));
        CHECK_MSG(same_file(pa, pr), "the checkpoint of gathered state differs from the unsharded run's");
    }
    CHECK_OK(amp_dist_barrier());

    /* sharded again: the run goes on bitwise */
    CHECK_OK(amp_zero_shard_state(z));
    CHECK_EQ_INT(amp_zero_state_bytes(z), 87 * 2 * 4);
    for (; t < 10; t++) {
        ref_step(&r, t, 0);
        zero_step(&a, z, t, 0);
        CHECK_EQ_INT(diff_params(&a, &r, NULL), 0);
    }
    /* a fresh model and optimizer load the file written at step 6, are
     * sharded, and retrace steps 6..9 bitwise */
    net b = make_net(ADAMW, AMP_CPU);
    int64_t step = -1;
    CHECK_OK(amp_checkpoint_load(pr, b.m, b.o, NULL, &step, NULL));
    CHECK_EQ_INT(step, 6);
    amp_zero *zb = amp_zero_new(b.o);
    CHECK(zb);
    CHECK_EQ_INT(amp_zero_state_bytes(zb), 87 * 2 * 4);
    for (int u = 6; u < 10 && zb; u++)
        zero_step(&b, zb, u, 0);
    CHECK_EQ_INT(diff_params(&b, &r, NULL), 0);
    /* nor does a sharded optimizer take a checkpoint */
    CHECK(amp_checkpoint_load(pr, b.m, b.o, NULL, &step, NULL) != AMP_OK);
    CHECK_ERROR(AMP_ERR_STATE, "sharded");
    CHECK_OK(amp_dist_barrier());
    if (rank == 0)
        remove(pa), remove(pr);
    amp_zero_free(zb);
    free_net(&b);
    amp_zero_free(z);
    free_net(&a);
    free_net(&r);
}

/* 16-bit parameters: bf16 with f32 masters (the masters sharded too) and
 * f16 without; synthetic gradients per rank in the parameters' dtype. The
 * reference widens each gradient, all-reduces the average in f32 and
 * rounds it back, as amp_zero_reduce_gradients does: bitwise again, the
 * gathered masters included. */
static void test_16bit_params(void)
{
    enum { NP = 3 };
    const int64_t sizes[NP] = {5, 37, 11}; /* 53 elements: shards of 27 cut the second */
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_tensor *pa[NP], *pr[NP];
        for (int i = 0; i < NP; i++) {
            float v[64];
            for (int j = 0; j < sizes[i]; j++)
                v[j] = (float)sin(1.0 + i * 64 + j);
            amp_tensor *f = amp_from_data(AMP_SHAPE(sizes[i]), AMP_F32, v);
            pa[i] = tensor_convert(f, dts[d]);
            pr[i] = tensor_convert(f, dts[d]);
            amp_tensor_free(f);
        }
        amp_adam_opts ao = amp_adamw_defaults();
        ao.lr = 1e-3; /* small: without the master most updates would round away in bf16 */
        amp_optim *oa = amp_optim_adamw(pa, NP, ao), *orf = amp_optim_adamw(pr, NP, ao);
        CHECK_OK(amp_optim_set_master_weights(oa, d == 0));
        CHECK_OK(amp_optim_set_master_weights(orf, d == 0));
        amp_zero *z = amp_zero_new(oa);
        CHECK(z);
        for (int t = 0; t < 20 && z; t++) {
            for (int i = 0; i < NP; i++) {
                float v[64];
                for (int j = 0; j < sizes[i]; j++)
                    v[j] = (float)cos(0.37 * t + 1.3 * rank + 0.11 * (i * 64 + j)) * (rank ? 0.5f : 2.0f);
                amp_tensor *f = amp_from_data(AMP_SHAPE(sizes[i]), AMP_F32, v);
                amp_tensor_free(pa[i]->grad);
                amp_tensor_free(pr[i]->grad);
                pa[i]->grad = tensor_convert(f, dts[d]);
                amp_tensor *w = tensor_convert(pa[i]->grad, AMP_F32); /* the reference: widened, averaged, rounded */
                CHECK_OK(amp_dist_all_reduce(w, AMP_REDUCE_AVG));
                pr[i]->grad = tensor_convert(w, dts[d]);
                amp_tensor_free(w);
                amp_tensor_free(f);
            }
            CHECK_OK(amp_optim_step(orf));
            CHECK_OK(amp_zero_reduce_gradients(z));
            CHECK_OK(amp_optim_step(oa));
            CHECK_OK(amp_zero_gather_parameters(z));
            int64_t bad = 0;
            for (int i = 0; i < NP; i++)
                bad += memcmp(tensor_ptr(pa[i]), tensor_ptr(pr[i]), (size_t)sizes[i] * 2) != 0;
            CHECK_MSG(bad == 0, "%s step %d: %lld parameters differ", amp_dtype_name(dts[d]), t, (long long)bad);
        }
        CHECK_OK(amp_zero_gather_state(z));
        for (int i = 0; i < NP && d == 0; i++) {
            amp_tensor *ma = amp_optim_master(oa, i), *mr = amp_optim_master(orf, i);
            CHECK(ma && mr && memcmp(tensor_ptr(ma), tensor_ptr(mr), (size_t)sizes[i] * 4) == 0);
        }
        for (int i = 0; i < NP; i++) {
            amp_tensor *x = amp_optim_state_tensor(oa, i, "exp_avg_sq"), *y = amp_optim_state_tensor(orf, i, "exp_avg_sq");
            CHECK(x && y && memcmp(tensor_ptr(x), tensor_ptr(y), (size_t)sizes[i] * 4) == 0);
        }
        amp_zero_free(z);
        amp_optim_free(oa);
        amp_optim_free(orf);
        for (int i = 0; i < NP; i++) {
            amp_tensor_free(pa[i]);
            amp_tensor_free(pr[i]);
        }
    }
}

/* Bad input: NULLs, a gradient on one rank only, ranks with different
 * optimizers (both ranks refuse). */
static void test_bad_input(void)
{
    CHECK(amp_zero_new(NULL) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    CHECK(amp_zero_reduce_gradients(NULL) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    CHECK(isnan(amp_zero_clip_grad_norm(NULL, 1)));
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    CHECK(amp_zero_clip_grad_norm_tensor(NULL, 1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "zero_clip_grad_norm_tensor: NULL");
    CHECK(amp_zero_gather_parameters(NULL) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    CHECK(amp_zero_gather_state(NULL) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    CHECK(amp_zero_shard_state(NULL) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "NULL");
    amp_zero_free(NULL);

    net a = make_net(SGD, AMP_CPU);
    amp_zero *z = amp_zero_new(a.o);
    CHECK(z);
    CHECK(isnan(amp_zero_clip_grad_norm(z, -1)));
    CHECK_ERROR(AMP_ERR_ARG, "max_norm");
    CHECK(amp_zero_clip_grad_norm_tensor(z, NAN) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "max_norm");
    fwd_bwd(&a, 0, rank, NULL);
    if (rank == 1)
        amp_tensor_clear_grad(a.p[2]);
    CHECK(amp_zero_reduce_gradients(z) != AMP_OK);
    CHECK_ERROR(AMP_ERR_STATE, "parameter 2 has a gradient on 1 of the 2 ranks");
    /* a gradient rank 1 alone cannot pack (the wrong shape, set by hand):
     * the same error on every rank, naming rank 1 and why, nobody left in
     * the reduce-scatter; the next reduction goes on */
    amp_optim_zero_grad(a.o);
    fwd_bwd(&a, 0, rank, NULL);
    amp_tensor *kept = a.p[1]->grad, *wrong = amp_zeros(AMP_SHAPE(3), AMP_F32);
    if (rank == 1)
        a.p[1]->grad = wrong;
    CHECK(amp_zero_reduce_gradients(z) == AMP_ERR_SHAPE);
    CHECK_ERROR(AMP_ERR_SHAPE, "zero_reduce_gradients: rank 1 failed: zero: parameter 1's gradient is not a float "
                               "tensor of its shape");
    a.p[1]->grad = kept;
    amp_tensor_free(wrong);
    CHECK_OK(amp_zero_reduce_gradients(z));
    amp_zero_free(z);
    /* ranks whose optimizers differ (rank 1's over 2 of the 4 parameters) */
    amp_optim *o2 = amp_optim_sgd(a.p, rank ? 2 : a.n, amp_sgd_defaults());
    CHECK(amp_zero_new(o2) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "the ranks' optimizers differ (parameters: 2 to 4");
    amp_optim_free(o2);
    /* the same count and total, split differently (rank 1's in another
     * order: 91 65 13 5 against 91 13 65 5); without the check the
     * all-gather would write one rank's elements into another parameter */
    amp_tensor *perm[ZMAXP] = {a.p[0], a.p[2], a.p[1], a.p[3]};
    o2 = amp_optim_sgd(rank ? perm : a.p, a.n, amp_sgd_defaults());
    CHECK(amp_zero_new(o2) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "differ in their parameters' sizes or dtypes (the same 4 parameters and 174 elements");
    amp_optim_free(o2);
    /* the same sizes, one dtype differing (rank 1's second parameter f16) */
    amp_tensor *q[2];
    for (int i = 0; i < 2; i++) {
        q[i] = amp_zeros(AMP_SHAPE(4 + i), AMP_F32);
        if (rank == 1 && i == 1) {
            amp_tensor *f = q[i];
            q[i] = tensor_convert(f, AMP_F16);
            amp_tensor_free(f);
        }
    }
    o2 = amp_optim_sgd(q, 2, amp_sgd_defaults());
    CHECK(o2 && amp_zero_new(o2) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "sizes or dtypes (the same 2 parameters and 9 elements");
    amp_optim_free(o2);
    amp_tensor_free(q[0]);
    amp_tensor_free(q[1]);
    free_net(&a);
}

/* Gradients are reduced only while the state is sharded: after
 * amp_zero_gather_state every rank refuses (with a message) until
 * amp_zero_shard_state. An amp_zero_shard_state that fails on one rank
 * (here: rank 1's first parameter already sharded another way, standing
 * for a slice it had no memory for) fails on every rank, the state
 * counts as not sharded on both (a rank left whole would otherwise step
 * elements it does not own, or skip the next gather's all-gather while
 * the other enters it); amp_zero_gather_state then gathers on both (a
 * mix of whole and sharded parameters) to the same bits as before. */
static void test_reduce_needs_sharded_state(void)
{
    net a = make_net(SGD, AMP_CPU);
    amp_zero *z = amp_zero_new(a.o);
    CHECK(z);
    if (!z) {
        free_net(&a);
        return;
    }
    zero_step(&a, z, 0, 0); /* momentum buffers exist */
    CHECK_OK(amp_zero_gather_state(z));
    size_t nb0 = 0, nb1 = 0;
    char *before = snapshot_state(a.o, &nb0);
    CHECK_EQ_INT((int64_t)nb0, 174 * 4);
    amp_optim_zero_grad(a.o);
    fwd_bwd(&a, 1, rank, NULL);
    CHECK(amp_zero_reduce_gradients(z) != AMP_OK);
    CHECK_ERROR(AMP_ERR_STATE, "not sharded (after amp_zero_gather_state");
    CHECK(isnan(amp_zero_clip_grad_norm(z, 1)));
    CHECK_ERROR(AMP_ERR_STATE, "call amp_zero_shard_state first");
    /* a shard_state that fails on rank 1 only */
    amp_tensor *keep[OPTIM_MAX_STATE] = {NULL};
    if (rank == 1) {
        for (int k = 0; k < OPTIM_MAX_STATE; k++)
            keep[k] = a.o->state[k] ? amp_clone(a.o->state[k]) : NULL;
        CHECK_OK(optim_set_shard(a.o, 0, 0, 1));
    }
    CHECK(amp_zero_shard_state(z) != AMP_OK);
    if (rank == 1)
        CHECK_ERROR(AMP_ERR_STATE, "it must be gathered before it is sharded");
    else
        CHECK_ERROR(AMP_ERR_STATE, "another rank failed to shard its optimizer state");
    CHECK(amp_zero_reduce_gradients(z) != AMP_OK);
    CHECK_ERROR(AMP_ERR_STATE, "an amp_zero_shard_state that failed");
    /* rank 1 as an allocation failure would have left it: parameter 0
     * whole, the others not reached (whole); rank 0: all sharded */
    if (rank == 1)
        optim_unshard(a.o, 0, keep, NULL);
    CHECK_EQ_INT(optim_first_sharded(a.o), rank == 0 ? 0 : -1);
    CHECK_OK(amp_zero_gather_state(z));
    char *after = snapshot_state(a.o, &nb1);
    CHECK(nb1 == nb0 && memcmp(before, after, nb0) == 0);
    free(before);
    free(after);
    CHECK_OK(amp_zero_shard_state(z));
    CHECK_OK(amp_zero_reduce_gradients(z));
    CHECK_OK(amp_optim_step(a.o));
    CHECK_OK(amp_zero_gather_parameters(z));
    CHECK(same_on_every_rank(&a));
    amp_zero_free(z);
    free_net(&a);
}

/* A world of one rank (before amp_dist_init): one shard, a plain
 * optimizer, bit for bit, clipping included. */
static void test_one_rank(void)
{
    for (int kind = SGD; kind <= ADAMW; kind++) {
        net r = make_net(kind, AMP_CPU), a = make_net(kind, AMP_CPU);
        amp_zero *z = amp_zero_new(a.o);
        CHECK(z);
        for (int t = 0; t < 5 && z; t++) {
            amp_optim_zero_grad(r.o);
            fwd_bwd(&r, t, 0, NULL);
            double nr = amp_clip_grad_norm(r.p, r.n, 0.5);
            CHECK_OK(amp_optim_step(r.o));
            amp_optim_zero_grad(a.o);
            fwd_bwd(&a, t, 0, NULL);
            CHECK_OK(amp_zero_reduce_gradients(z));
            double na = amp_zero_clip_grad_norm(z, 0.5);
            CHECK_OK(amp_optim_step(a.o));
            CHECK_OK(amp_zero_gather_parameters(z));
            CHECK(na == nr);
            CHECK_EQ_INT(diff_params(&a, &r, NULL), 0);
        }
        CHECK_EQ_INT(amp_zero_state_bytes(z), state_bytes_of(r.o));
        CHECK_EQ_INT(optim_first_sharded(a.o), -1);
        CHECK_OK(amp_zero_gather_state(z));
        CHECK_OK(amp_zero_shard_state(z));
        amp_zero_free(z);
        free_net(&a);
        free_net(&r);
    }
}

int main(int argc, char **argv)
{
    amp_set_num_threads(1);
    RUN(test_one_rank); /* before init: a world of one */
    dist_start(&argc, &argv);
    if (world != 2) {
        fprintf(stderr, "test_zero runs on 2 ranks (mpirun -np 2), not %d\n", world);
        amp_dist_finalize();
        return 1;
    }
    RUN(test_sgd_momentum_bitwise);
    RUN(test_adamw_bitwise);
    RUN(test_sgd_clipped);
    RUN(test_adamw_clipped);
    RUN(test_state_bytes);
    RUN(test_skipped_step);
    RUN(test_an_inf_in_one_shard_skips_on_every_rank);
    RUN(test_gather_state_and_checkpoint);
    RUN(test_16bit_params);
    RUN(test_bad_input);
    RUN(test_reduce_needs_sharded_state);
    return dist_finish();
}
