/*
 * optim_vec.h - the vector loops of SGD and Adam (optim.c), written once
 * for both vector widths: optim.c includes this file twice, with V_LANES
 * defined as 16 (AVX-512: sgd_range_v, adam_range_v, ...) and as 8 (AVX2
 * with FMA: sgd_range_v8, ...).
 *
 * Each loop does the scalar loop's arithmetic (sgd_range, adam_range) in
 * the same order, with separate multiplies and adds where it has them and
 * a fused multiply-add where it calls fmaf, so it gives the same bits; the
 * tail of fewer than V_LANES elements goes to the scalar loop.
 */

#if V_LANES == 16
#define V __m512
#define V_(op) _mm512_##op
#define V_TGT __attribute__((target("avx512f")))
#define V_SUFFIX _v
/* Rounding-mode forms of add / sub / mul: the compiler may fuse plain
 * vector multiplies and adds into FMAs (one rounding less than the scalar
 * loops), but not these. */
#define V_RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_ADD(a, b) _mm512_add_round_ps((a), (b), V_RN)
#define V_SUB(a, b) _mm512_sub_round_ps((a), (b), V_RN)
#define V_MUL(a, b) _mm512_mul_round_ps((a), (b), V_RN)
/* a * b + c rounded once (the scalar loops' fmaf) */
#define V_FMA(a, b, c) _mm512_fmadd_round_ps((a), (b), (c), V_RN)
/* m where m >= v, else v (ordered: a NaN in v wins, as torch.maximum) */
#define V_KEEP_GE(m, v) _mm512_mask_mov_ps((v), _mm512_cmp_ps_mask((m), (v), _CMP_GE_OQ), (m))
#elif V_LANES == 8
#define V __m256
#define V_(op) _mm256_##op
#define V_TGT __attribute__((target("avx2,fma")))
#define V_SUFFIX _v8
/* AVX2 has no rounding-mode forms: the loops use plain multiplies and adds
 * where no multiply's result meets an add (it only feeds an explicit fused
 * multiply-add or a division), so there is nothing to contract. */
#define V_ADD V_(add_ps)
#define V_SUB V_(sub_ps)
#define V_MUL V_(mul_ps)
#define V_FMA V_(fmadd_ps)
#define V_KEEP_GE(m, v) _mm256_blendv_ps((v), (m), _mm256_cmp_ps((m), (v), _CMP_GE_OQ))
#endif

#define V_CAT2(a, b) a##b
#define V_CAT(a, b) V_CAT2(a, b)
#define V_FN(name) V_CAT(name, V_SUFFIX)

V_TGT static void V_FN(sgd_range)(const sgd_k *k, float *p, const float *g, float *buf, int64_t n)
{
    const V wd = V_(set1_ps)(k->wd), mom = V_(set1_ps)(k->mom), damp1 = V_(set1_ps)(k->damp1),
            neg_lr = V_(set1_ps)(k->neg_lr);
    int64_t j = 0;
    for (; j + V_LANES <= n; j += V_LANES) {
        V gj = V_(loadu_ps)(g + j), pj = V_(loadu_ps)(p + j);
        if (k->wd != 0)
            gj = V_FMA(pj, wd, gj);
        if (buf) {
            V b = k->first ? gj : V_FMA(gj, damp1, V_MUL(V_(loadu_ps)(buf + j), mom));
            V_(storeu_ps)(buf + j, b);
            gj = k->nesterov ? V_FMA(b, mom, gj) : b;
        }
        V_(storeu_ps)(p + j, V_FMA(gj, neg_lr, pj));
    }
    sgd_range(k, p + j, g + j, buf ? buf + j : NULL, n - j);
}

static void V_FN(sgd_fn)(const void *k, float *p, const float *g, float *const *s, int64_t n)
{
    V_FN(sgd_range)(k, p, g, s[0], n);
}

V_TGT static void V_FN(adam_range)(const adam_k *k, float *p, const float *g, float *m, float *v, float *vmax,
                                    int64_t n)
{
    const V decay = V_(set1_ps)(k->decay), wd = V_(set1_ps)(k->wd),
            w1 = V_(set1_ps)(k->w1 < 0.5f ? k->w1 : k->w1_1), b2 = V_(set1_ps)(k->b2), w2 = V_(set1_ps)(k->w2),
            bc2 = V_(set1_ps)(k->bc2_sqrt), eps = V_(set1_ps)(k->eps), neg_step = V_(set1_ps)(k->neg_step);
    const bool low = k->w1 < 0.5f;
    int64_t j = 0;
    for (; j + V_LANES <= n; j += V_LANES) {
        V pj = V_(loadu_ps)(p + j), gj = V_(loadu_ps)(g + j), mj = V_(loadu_ps)(m + j);
        if (k->dec)
            pj = V_MUL(pj, decay);
        if (k->l2)
            gj = V_FMA(pj, wd, gj);
        const V d = V_SUB(gj, mj);
        mj = V_FMA(w1, d, low ? mj : gj);
        V_(storeu_ps)(m + j, mj);
        V vv = V_FMA(V_MUL(w2, gj), gj, V_MUL(V_(loadu_ps)(v + j), b2));
        V_(storeu_ps)(v + j, vv);
        if (vmax) {
            vv = V_KEEP_GE(V_(loadu_ps)(vmax + j), vv);
            V_(storeu_ps)(vmax + j, vv);
        }
        const V denom = V_ADD(V_(div_ps)(V_(sqrt_ps)(vv), bc2), eps);
        V_(storeu_ps)(p + j, V_ADD(pj, V_(div_ps)(V_MUL(neg_step, mj), denom)));
    }
    adam_range(k, p + j, g + j, m + j, v + j, vmax ? vmax + j : NULL, n - j);
}

static void V_FN(adam_fn)(const void *k, float *p, const float *g, float *const *s, int64_t n)
{
    V_FN(adam_range)(k, p, g, s[0], s[1], s[2], n);
}

#undef V_FN
#undef V_CAT
#undef V_CAT2
#undef V_KEEP_GE
#undef V_FMA
#undef V_MUL
#undef V_SUB
#undef V_ADD
#undef V_RN
#undef V_SUFFIX
#undef V_TGT
#undef V_
#undef V
#undef V_LANES
