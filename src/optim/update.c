/*
 * update.c - the element loops of the CPU optimizer steps (update.h):
 * SGD and Adam / AdamW over one parameter's f32 values, in blocks spread
 * over threads, each block on AVX-512 where the CPU has it.
 *
 * The loops follow torch.optim's single-tensor implementations operation
 * for operation (see optim.c), so f32 results agree with PyTorch's to
 * rounding.
 */
#include "optim/update.h"

#include "base/base.h"

#include <math.h>

/* Elements below which an update runs on one thread. */
#define PAR_MIN_WORK 32768

/* The element loops run in blocks (threads take whole blocks), each block
 * through a vector version where the CPU has AVX-512. The vector versions
 * do the scalar loops' arithmetic in the same order, with separate
 * multiplies and adds (no fused multiply-add), so they give the same bits;
 * the scalar loops stay the reference. */
#define UPDATE_BLOCK 16384

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_VEC_UPDATE 1
#define TGT_AVX512 __attribute__((target("avx512f")))
/* Rounding-mode forms of add / sub / mul: the compiler may fuse plain
 * vector multiplies and adds into FMAs (one rounding less than the scalar
 * loops), but not these. */
#define RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VADD(a, b) _mm512_add_round_ps((a), (b), RN)
#define VSUB(a, b) _mm512_sub_round_ps((a), (b), RN)
#define VMUL(a, b) _mm512_mul_round_ps((a), (b), RN)
#endif

static bool use_vector(void)
{
#ifdef HAVE_VEC_UPDATE
    return (amp_cpu_features() & AMP_CPU_AVX512F) != 0;
#else
    return false;
#endif
}

typedef struct {
    float wd, mom, damp1, neg_lr;
    bool first, nesterov;
} sgd_k;

/* One SGD update of elements [lo, hi) (sgd.py: weight decay into the
 * gradient, momentum buffer = the first gradient, then buf*momentum +
 * (1-dampening)*g, nesterov g + momentum*buf, p -= lr*g). */
__attribute__((noinline)) static void sgd_range(const sgd_k *k, float *p, const float *g, float *buf, int64_t lo,
                                                int64_t hi)
{
    for (int64_t j = lo; j < hi; j++) {
        float gj = g[j];
        if (k->wd != 0)
            gj = gj + k->wd * p[j];
        if (buf) {
            buf[j] = k->first ? gj : buf[j] * k->mom + k->damp1 * gj;
            gj = k->nesterov ? gj + k->mom * buf[j] : buf[j];
        }
        p[j] = p[j] + k->neg_lr * gj;
    }
}

#ifdef HAVE_VEC_UPDATE
TGT_AVX512 static void sgd_range_v(const sgd_k *k, float *p, const float *g, float *buf, int64_t lo, int64_t hi)
{
    const __m512 wd = _mm512_set1_ps(k->wd), mom = _mm512_set1_ps(k->mom), damp1 = _mm512_set1_ps(k->damp1),
                 neg_lr = _mm512_set1_ps(k->neg_lr);
    int64_t j = lo;
    for (; j + 16 <= hi; j += 16) {
        __m512 gj = _mm512_loadu_ps(g + j), pj = _mm512_loadu_ps(p + j);
        if (k->wd != 0)
            gj = VADD(gj, VMUL(wd, pj));
        if (buf) {
            __m512 b = k->first ? gj
                                : VADD(VMUL(_mm512_loadu_ps(buf + j), mom), VMUL(damp1, gj));
            _mm512_storeu_ps(buf + j, b);
            gj = k->nesterov ? VADD(gj, VMUL(mom, b)) : b;
        }
        _mm512_storeu_ps(p + j, VADD(pj, VMUL(neg_lr, gj)));
    }
    sgd_range(k, p, g, buf, j, hi);
}
#endif

void optim_sgd_update(const amp_sgd_opts *s, float lr, bool first, float *p, const float *g, float *buf, int64_t n)
{
    const sgd_k k = {(float)s->weight_decay, (float)s->momentum, (float)(1.0 - s->dampening), -lr, first,
                     s->nesterov};
    void (*fn)(const sgd_k *, float *, const float *, float *, int64_t, int64_t) = sgd_range;
#ifdef HAVE_VEC_UPDATE
    if (use_vector())
        fn = sgd_range_v;
#endif
    const int64_t blocks = (n + UPDATE_BLOCK - 1) / UPDATE_BLOCK;
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (n > PAR_MIN_WORK) schedule(static)
#endif
    for (int64_t b = 0; b < blocks; b++)
        fn(&k, p, g, buf, b * UPDATE_BLOCK, n - b * UPDATE_BLOCK < UPDATE_BLOCK ? n : (b + 1) * UPDATE_BLOCK);
}

typedef struct {
    float neg_step, bc2_sqrt, eps, wd, decay, w1, b2, w2;
    bool l2, dec;
} adam_k;

/* One Adam / AdamW update of elements [lo, hi) (adam.py
 * _single_tensor_adam). */
__attribute__((noinline)) static void adam_range(const adam_k *k, float *p, const float *g, float *m, float *v,
                                                 float *vmax, int64_t lo, int64_t hi)
{
    for (int64_t j = lo; j < hi; j++) {
        float pj = p[j], gj = g[j];
        if (k->dec)
            pj = pj * k->decay;
        if (k->l2)
            gj = gj + k->wd * pj;
        /* exp_avg.lerp_(grad, 1 - beta1), with ATen's two-sided lerp */
        float d = gj - m[j];
        m[j] = k->w1 < 0.5f ? m[j] + k->w1 * d : gj - d * (1.0f - k->w1);
        v[j] = v[j] * k->b2 + k->w2 * gj * gj;
        float vv = v[j];
        if (vmax) {
            if (!(vmax[j] >= vv)) /* torch.maximum: NaN wins */
                vmax[j] = vv;
            vv = vmax[j];
        }
        float denom = sqrtf(vv) / k->bc2_sqrt + k->eps;
        p[j] = pj + k->neg_step * (m[j] / denom);
    }
}

#ifdef HAVE_VEC_UPDATE
TGT_AVX512 static void adam_range_v(const adam_k *k, float *p, const float *g, float *m, float *v, float *vmax,
                                    int64_t lo, int64_t hi)
{
    const __m512 decay = _mm512_set1_ps(k->decay), wd = _mm512_set1_ps(k->wd), w1 = _mm512_set1_ps(k->w1),
                 one_w1 = _mm512_set1_ps(1.0f - k->w1), b2 = _mm512_set1_ps(k->b2), w2 = _mm512_set1_ps(k->w2),
                 bc2 = _mm512_set1_ps(k->bc2_sqrt), eps = _mm512_set1_ps(k->eps),
                 neg_step = _mm512_set1_ps(k->neg_step);
    const bool low = k->w1 < 0.5f;
    int64_t j = lo;
    for (; j + 16 <= hi; j += 16) {
        __m512 pj = _mm512_loadu_ps(p + j), gj = _mm512_loadu_ps(g + j), mj = _mm512_loadu_ps(m + j);
        if (k->dec)
            pj = VMUL(pj, decay);
        if (k->l2)
            gj = VADD(gj, VMUL(wd, pj));
        __m512 d = VSUB(gj, mj);
        mj = low ? VADD(mj, VMUL(w1, d)) : VSUB(gj, VMUL(d, one_w1));
        _mm512_storeu_ps(m + j, mj);
        __m512 vv = VADD(VMUL(_mm512_loadu_ps(v + j), b2), VMUL(VMUL(w2, gj), gj));
        _mm512_storeu_ps(v + j, vv);
        if (vmax) {
            __m512 vm = _mm512_loadu_ps(vmax + j);
            __mmask16 keep = _mm512_cmp_ps_mask(vm, vv, _CMP_GE_OQ); /* NaN: not kept */
            vv = _mm512_mask_mov_ps(vv, keep, vm);
            _mm512_storeu_ps(vmax + j, vv);
        }
        __m512 denom = VADD(_mm512_div_ps(_mm512_sqrt_ps(vv), bc2), eps);
        _mm512_storeu_ps(p + j, VADD(pj, VMUL(neg_step, _mm512_div_ps(mj, denom))));
    }
    adam_range(k, p, g, m, v, vmax, j, hi);
}
#endif

/* One Adam / AdamW update at (1-based) step t of parameter i's n elements. */
void optim_adam_update(const amp_adam_opts *a, bool decoupled, double lr, int64_t t, float *p, const float *g,
                        float *m, float *v, float *vmax, int64_t n)
{
    const double bc1 = 1.0 - pow(a->beta1, (double)t), bc2 = 1.0 - pow(a->beta2, (double)t);
    const adam_k k = {.neg_step = (float)(-(lr / bc1)),
                      .bc2_sqrt = (float)sqrt(bc2),
                      .eps = (float)a->eps,
                      .wd = (float)a->weight_decay,
                      .decay = (float)(1.0 - lr * a->weight_decay),
                      .w1 = (float)(1.0 - a->beta1),
                      .b2 = (float)a->beta2,
                      .w2 = (float)(1.0 - a->beta2),
                      .l2 = !decoupled && a->weight_decay != 0,
                      .dec = decoupled && a->weight_decay != 0};
    void (*fn)(const adam_k *, float *, const float *, float *, float *, float *, int64_t, int64_t) = adam_range;
#ifdef HAVE_VEC_UPDATE
    if (use_vector())
        fn = adam_range_v;
#endif
    const int64_t blocks = (n + UPDATE_BLOCK - 1) / UPDATE_BLOCK;
#ifdef _OPENMP
#pragma omp parallel for num_threads(amp_threads()) if (n > PAR_MIN_WORK) schedule(static)
#endif
    for (int64_t b = 0; b < blocks; b++)
        fn(&k, p, g, m, v, vmax, b * UPDATE_BLOCK, n - b * UPDATE_BLOCK < UPDATE_BLOCK ? n : (b + 1) * UPDATE_BLOCK);
}

