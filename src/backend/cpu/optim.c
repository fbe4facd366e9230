/*
 * optim.c - the CPU backend's optimizer steps (backend.h's sgd_step and
 * adam_step): SGD and Adam / AdamW over all of an optimizer's parameters
 * at once (PyTorch's foreach / multi-tensor idea). The work items are the
 * (parameter, block) pairs of every parameter, taken by the threads of one
 * parallel region, so many small parameters do not each pay a fork / join;
 * each block runs on AVX-512 where the CPU has it, 16-bit parameters,
 * gradients and (bf16) state through per-thread f32 scratch; a parameter
 * with an f32 master copy is updated on the master and stored rounded.
 * Per-parameter scalars (step counts, bias corrections) are worked out
 * once per parameter before the loop.
 *
 * The loops follow torch.optim's single-tensor implementations operation
 * for operation (torch/optim/sgd.py _single_tensor_sgd, adam.py
 * _single_tensor_adam) and round where PyTorch's CPU kernels do (their
 * fused multiply-adds included), so f32 results are PyTorch's bits: SGD's
 * always, Adam's but where PyTorch's sqrt is not correctly rounded
 * (tests/test_optim.c).
 * Every element's arithmetic is the same whichever block, thread or vector
 * width it lands in, so the bits do not depend on the number of threads or
 * on which parameters share a step.
 */
#include "backend/cpu/cpu_backend.h"

#include "backend/round_rule.h"
#include "base/base.h"
#include "base/parallel.h"

#include <stdlib.h>

#include <math.h>

/* Elements (over all parameters of a step) below which it runs on one
 * thread. */
#define PAR_MIN_WORK 32768

/* The element loops run in blocks (threads take whole blocks), each block
 * through a vector version where the CPU has AVX-512 (16 lanes) or AVX2
 * with FMA (8 lanes; the scalar loops' fmaf is a library call, several
 * times slower), both written once in optim_vec.h. The vector versions
 * do the scalar loops' arithmetic in the same order, with separate
 * multiplies and adds where the scalar loops have them and a fused
 * multiply-add where they call fmaf, so they give the same bits; the
 * scalar loops stay the reference. */
#define UPDATE_BLOCK 16384

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_VEC_UPDATE 1
#endif

/* The vector lanes the update loops use: 16 (AVX-512), 8 (AVX2 + FMA) or
 * 1 (the scalar loops). */
static int vector_lanes(void)
{
#ifdef HAVE_VEC_UPDATE
    const unsigned f = amp_cpu_features();
    return f & AMP_CPU_AVX512F ? 16 : f & AMP_CPU_AVX2 ? 8 : 1;
#else
    return 1;
#endif
}

/* ------------------------------------------------------- work items */

/* A step's parameters are backend.h's be_optim_param: p and g in their
 * own float dtypes (f32 values update in place, 16-bit ones are widened
 * block by block, updated in f32 and rounded once on store), the state
 * buffers s0..s2 in slot order in dtype sdt (NULL where the options need
 * none; bf16 ones are widened block by block like p and rounded to
 * nearest-even on store), the f32 master copy (when set, the update runs
 * on it in place and p only receives its rounding), and index, the
 * parameter's slot in the step counters. t, a parameter's step count
 * including this step, is counters[index] + 1 (so 1 on its first step:
 * SGD's momentum buffer starts as the gradient then). */

/* The element loop of one optimizer over n f32 elements: k is the
 * parameter's constants, s its state buffers, all offset to the block. */
typedef void (*range_fn)(const void *k, float *p, const float *g, float *const *s, int64_t n);

/* One block of one parameter: elements [lo, hi) of ps[param]. */
typedef struct {
    int param;
    int64_t lo, hi;
} work_item;

/* f32 scratch blocks a thread needs: the parameter, the gradient and the
 * three state buffers. */
#define SCRATCH_BLOCKS 5

/* Stores n f32 values as bf16 into dst with stochastic rounding: the bits
 * of element lo + i of state slot `slot` of parameter `index` at step t
 * (round_rule.h). */
static void store_bf16_sr(const float *v, uint16_t *dst, int64_t n, int index, int64_t t, int slot, int64_t lo)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = be_bf16_sr(v[i], be_sr_bits(index, t, slot, lo + i));
}

/* Runs fn over one work item; sc is this thread's f32 scratch of
 * SCRATCH_BLOCKS * UPDATE_BLOCK elements for 16-bit parameters,
 * gradients and state (widening is exact, and each is rounded once on
 * store, as a whole-tensor conversion would: to nearest-even, or
 * stochastically with the bits of sr_t, the parameter's step: bf16 state
 * when state_sr, a bf16 parameter without a master when weight_sr). */
static void run_item(range_fn fn, const void *k, const be_optim_param *q, int64_t lo, int64_t hi, float *sc,
                     int64_t sr_t, bool state_sr, bool weight_sr)
{
    const int64_t len = hi - lo;
    float *pb = sc, *gb = sc ? sc + UPDATE_BLOCK : NULL;
    float *p = q->master ? q->master + lo : q->pdt == AMP_F32 ? (float *)q->p + lo : pb;
    const float *g = q->gdt == AMP_F32 ? (const float *)q->g + lo : gb;
    void *p16 = (char *)q->p + (size_t)lo * amp_dtype_size(q->pdt);
    if (p == pb)
        amp_convert(p16, q->pdt, pb, AMP_F32, (size_t)len);
    if (g == gb)
        amp_convert((const char *)q->g + (size_t)lo * amp_dtype_size(q->gdt), q->gdt, gb, AMP_F32, (size_t)len);
    void *const sq[3] = {q->s0, q->s1, q->s2};
    const size_t ss = amp_dtype_size(q->sdt);
    float *s[3];
    for (int j = 0; j < 3; j++) {
        void *at = sq[j] ? (char *)sq[j] + (size_t)lo * ss : NULL;
        s[j] = !at || q->sdt == AMP_F32 ? at : sc + (size_t)(2 + j) * UPDATE_BLOCK;
        if (at && q->sdt != AMP_F32)
            amp_convert(at, q->sdt, s[j], AMP_F32, (size_t)len);
    }
    fn(k, p, g, s, len);
    if (weight_sr && p == pb && q->pdt == AMP_BF16) /* (a master keeps the bits itself) */
        store_bf16_sr(p, p16, len, q->index, sr_t, WEIGHT_SR_SLOT, lo);
    else if (p == pb || q->master)
        amp_convert(p, AMP_F32, p16, q->pdt, (size_t)len);
    if (q->cast) /* the weight's next autocast cast, while p is in cache */
        amp_convert(p, AMP_F32, (char *)q->cast + (size_t)lo * amp_dtype_size(q->cast_dt), q->cast_dt, (size_t)len);
    for (int j = 0; j < 3 && q->sdt != AMP_F32; j++) {
        void *dst = sq[j] ? (char *)sq[j] + (size_t)lo * ss : NULL;
        if (dst && state_sr && q->sdt == AMP_BF16)
            store_bf16_sr(s[j], dst, len, q->index, sr_t, j, lo);
        else if (dst)
            amp_convert(s[j], AMP_F32, dst, q->sdt, (size_t)len);
    }
}

typedef struct {
    range_fn fn;
    const void *ks;
    size_t k_size;
    const be_optim_param *ps;
    const int64_t *sr_t;
    bool state_sr, weight_sr;
    const work_item *w;
    float *scratch;
} run_job;

static void run_items(void *vj, int64_t lo, int64_t hi, int tid)
{
    const run_job *j = vj;
    float *sc = j->scratch ? j->scratch + (size_t)tid * SCRATCH_BLOCKS * UPDATE_BLOCK : NULL;
    for (int64_t b = lo; b < hi; b++) {
        const work_item *it = &j->w[b];
        run_item(j->fn, (const char *)j->ks + (size_t)it->param * j->k_size, &j->ps[it->param], it->lo, it->hi, sc,
                 j->sr_t ? j->sr_t[it->param] : 0, j->state_sr, j->weight_sr);
    }
}

/* Runs fn over every block of the n parameters ps in one parallel loop;
 * ks holds each parameter's constants (k_size bytes apiece); sr_t, when
 * not NULL, each parameter's step for stochastic rounding of bf16 state.
 * Allocates everything before touching a value: on failure nothing has
 * changed. */
static amp_status run_all(range_fn fn, const void *ks, size_t k_size, const be_optim_param *ps, int n,
                          const int64_t *sr_t, bool state_sr, bool weight_sr)
{
    int64_t items = 0, total = 0;
    bool convert = false;
    for (int i = 0; i < n; i++) {
        items += (ps[i].n + UPDATE_BLOCK - 1) / UPDATE_BLOCK;
        total += ps[i].n;
        convert = convert || ps[i].pdt != AMP_F32 || ps[i].gdt != AMP_F32 || ps[i].sdt != AMP_F32;
        /* (a cast converts from p's f32 in place: no scratch) */
    }
    if (items == 0)
        return AMP_OK;
    /* Grains of one block: blocks of tiny parameters are short, and the
     * cores may be shared, so threads take the next block when free. */
    const int64_t grain = total > PAR_MIN_WORK ? 1 : items;
    const int threads = amp_parallel_width(items, grain);
    work_item *w = amp_alloc((size_t)items * sizeof *w);
    float *scratch = convert ? amp_alloc((size_t)threads * SCRATCH_BLOCKS * UPDATE_BLOCK * sizeof *scratch) : NULL;
    if (!w || (convert && !scratch)) {
        amp_free(w);
        amp_free(scratch);
        return AMP_ERR_MEMORY;
    }
    int64_t m = 0;
    for (int i = 0; i < n; i++)
        for (int64_t lo = 0; lo < ps[i].n; lo += UPDATE_BLOCK)
            w[m++] = (work_item){i, lo, ps[i].n - lo < UPDATE_BLOCK ? ps[i].n : lo + UPDATE_BLOCK};
    run_job j = {fn, ks, k_size, ps, sr_t, state_sr, weight_sr, w, scratch};
    amp_parallel_for(items, grain, run_items, &j);
    amp_free(w);
    amp_free(scratch);
    return AMP_OK;
}

/* run_all, with each parameter's step (its counter + 1) for stochastic
 * rounding of bf16 state when sr, of bf16 parameters without a master when
 * wsr. */
static amp_status run_all_sr(range_fn fn, const void *ks, size_t k_size, const be_optim_param *ps, int n,
                             const int64_t *steps, bool sr, bool wsr)
{
    if (!sr && !wsr)
        return run_all(fn, ks, k_size, ps, n, NULL, false, false);
    int64_t *t = amp_alloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    if (!t)
        return AMP_ERR_MEMORY;
    for (int i = 0; i < n; i++)
        t[i] = steps[ps[i].index] + 1;
    amp_status st = run_all(fn, ks, k_size, ps, n, t, sr, wsr);
    amp_free(t);
    return st;
}

/* ------------------------------------------------------------------ SGD */

typedef struct {
    float wd, mom, damp1, neg_lr;
    bool first, nesterov;
} sgd_k;

/* One SGD update of n elements (sgd.py _single_tensor_sgd on PyTorch's CPU
 * kernels, whose add(alpha) is a fused multiply-add): weight decay
 * g = fma(p, wd, g); the momentum buffer starts as the gradient, then
 * buf = fma(g, 1 - dampening, buf * momentum); nesterov g = fma(buf,
 * momentum, g), else g = buf; p = fma(g, -lr, p). */
__attribute__((noinline)) static void sgd_range(const sgd_k *k, float *p, const float *g, float *buf, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j];
        if (k->wd != 0)
            gj = fmaf(p[j], k->wd, gj);
        if (buf) {
            buf[j] = k->first ? gj : fmaf(gj, k->damp1, buf[j] * k->mom);
            gj = k->nesterov ? fmaf(buf[j], k->mom, gj) : buf[j];
        }
        p[j] = fmaf(gj, k->neg_lr, p[j]);
    }
}

static void sgd_fn(const void *k, float *p, const float *g, float *const *s, int64_t n)
{
    sgd_range(k, p, g, s[0], n);
}

/* ----------------------------------------------------------------- Adam */

typedef struct {
    float neg_step, bc2_sqrt, eps, wd, decay, w1, w1_1, b2, w2;
    bool l2, dec;
} adam_k;

/* One Adam / AdamW update of n elements, in the order and with the
 * roundings of _single_tensor_adam on PyTorch's CPU kernels:
 *   AdamW      p = p * (1 - lr wd)                     (mul_)
 *   Adam + wd  g = fma(p, wd, g)                       (add(alpha): fused)
 *   exp_avg    lerp_(g, w1): w1 < 0.5: fma(w1, g - m, m),
 *                            else:     fma(w1 - 1, g - m, g)  (fused)
 *   exp_avg_sq v = fma(w2 g, g, v * b2)                (mul_, addcmul_: fused)
 *   amsgrad    vmax = maximum(vmax, v)
 *   denom      sqrt(v) / sqrt(bc2) + eps               (sqrt, div, add_)
 *   p          p + ((-lr / bc1) m) / denom             (addcdiv_, left to right)
 * fmaf rounds once, as the fused vector instructions do; no other
 * multiply meets an add here, so a compiler cannot fuse anything else. */
__attribute__((noinline)) static void adam_range(const adam_k *k, float *p, const float *g, float *m, float *v,
                                                 float *vmax, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        float pj = p[j], gj = g[j];
        if (k->dec)
            pj = pj * k->decay;
        if (k->l2)
            gj = fmaf(pj, k->wd, gj);
        const float d = gj - m[j];
        m[j] = k->w1 < 0.5f ? fmaf(k->w1, d, m[j]) : fmaf(k->w1_1, d, gj);
        const float vb = v[j] * k->b2;
        v[j] = fmaf(k->w2 * gj, gj, vb);
        float vv = v[j];
        if (vmax) {
            if (!(vmax[j] >= vv)) /* torch.maximum: NaN wins */
                vmax[j] = vv;
            vv = vmax[j];
        }
        const float denom = sqrtf(vv) / k->bc2_sqrt + k->eps;
        p[j] = pj + k->neg_step * m[j] / denom;
    }
}

static void adam_fn(const void *k, float *p, const float *g, float *const *s, int64_t n)
{
    adam_range(k, p, g, s[0], s[1], s[2], n);
}

/* ---------------------------------------------------- the vector loops */

#ifdef HAVE_VEC_UPDATE
#define V_LANES 16
#include "backend/cpu/optim_vec.h"
#define V_LANES 8
#include "backend/cpu/optim_vec.h"
#endif

/* ------------------------------------------- the constants, the steps */

/* Each parameter's SGD constants (ks: n sgd_k). */
static void sgd_consts(const void *opts, const be_optim_param *ps, int n, const int64_t *steps, void *out)
{
    const be_sgd_opts *s = opts;
    sgd_k *ks = out;
    for (int i = 0; i < n; i++)
        ks[i] = (sgd_k){(float)ps[i].weight_decay, s->momentum, s->one_minus_dampening, -s->lr, steps[ps[i].index] == 0, s->nesterov};
}

/* Each parameter's Adam constants (ks: n adam_k): its bias corrections at
 * its own step count (PyTorch's per-parameter state["step"]), worked out
 * once here, not per block. */
static void adam_consts(const void *opts, const be_optim_param *ps, int n, const int64_t *steps, void *out)
{
    const be_adam_opts *a = opts;
    adam_k *ks = out;
    for (int i = 0; i < n; i++) {
        const double t = (double)(steps[ps[i].index] + 1), bc1 = 1.0 - pow(a->beta1, t), bc2 = 1.0 - pow(a->beta2, t);
        const double lr = a->lr, wd = ps[i].weight_decay;
        const bool decoupled = a->decoupled;
        ks[i] = (adam_k){.neg_step = (float)(-(lr / bc1)),
                         .bc2_sqrt = (float)sqrt(bc2),
                         .eps = (float)a->eps,
                         .wd = (float)wd,
                         .decay = (float)(1.0 - lr * wd),
                         .w1 = (float)(1.0 - a->beta1),
                         .w1_1 = (float)(1.0 - a->beta1) - 1.0f, /* exact */
                         .b2 = (float)a->beta2,
                         .w2 = (float)(1.0 - a->beta2),
                         .l2 = !decoupled && wd != 0,
                         .dec = decoupled && wd != 0};
    }
}

/* An optimizer as step_all runs it: the size of its per-parameter
 * constants and what fills them from the options and the step counts, and
 * its element loop at each vector width (vector_lanes: 1, 8, 16). */
typedef struct {
    size_t k_size;
    void (*consts)(const void *opts, const be_optim_param *ps, int n, const int64_t *steps, void *ks);
    range_fn loop1, loop8, loop16;
} optim_loops;

#ifdef HAVE_VEC_UPDATE
#define LOOPS(name) name##_fn, name##_fn_v8, name##_fn_v
#else
#define LOOPS(name) name##_fn, name##_fn, name##_fn
#endif
static const optim_loops sgd_loops = {sizeof(sgd_k), sgd_consts, LOOPS(sgd)};
static const optim_loops adam_loops = {sizeof(adam_k), adam_consts, LOOPS(adam)};
#undef LOOPS

/* The shared part of both primitives: skips on a non-zero *found_inf,
 * runs the loops over every parameter at its own step count (bf16 state
 * rounded stochastically when sr), and counts the step only when the
 * whole update succeeded (on failure nothing has changed). */
static amp_status step_all(const char *who, const optim_loops *L, const void *opts, bool sr, bool wsr,
                           const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf)
{
    if (found_inf && *found_inf != 0)
        return AMP_OK;
    void *ks = amp_alloc((size_t)(n > 0 ? n : 1) * L->k_size);
    if (!ks)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", who);
    L->consts(opts, p, n, steps, ks);
    const int lanes = vector_lanes();
    const range_fn fn = lanes == 16 ? L->loop16 : lanes == 8 ? L->loop8 : L->loop1;
    amp_status st = run_all_sr(fn, ks, L->k_size, p, n, steps, sr, wsr);
    amp_free(ks);
    if (st != AMP_OK)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", who);
    for (int i = 0; i < n; i++)
        steps[p[i].index]++;
    steps[n_counters]++;
    return AMP_OK;
}

amp_status cpu_sgd_step(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                        be_sgd_opts o)
{
    return step_all("sgd_step", &sgd_loops, &o, o.sr, o.wsr, p, n, steps, n_counters, found_inf);
}

amp_status cpu_adam_step(const be_optim_param *p, int n, int64_t *steps, int n_counters, const float *found_inf,
                         be_adam_opts o)
{
    return step_all("adam_step", &adam_loops, &o, o.sr, o.wsr, p, n, steps, n_counters, found_inf);
}
