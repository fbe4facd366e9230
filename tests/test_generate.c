/*
 * test_generate.c - generation: the gpt's KV-cache forward against full
 * forwards (logits per position, greedy tokens), amp_sample_next's
 * sampling rules and draws, the cache's refusals, and `ampc generate`
 * (its option errors, seeds, top-k 1, --no-cache, a non-gpt checkpoint).
 * The CUDA cases run where a CUDA device is present (cudaemu in
 * test-cuda-emu), and are skipped elsewhere.
 */
#include "test_cli_util.h"

#include "ops/fused.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A small random gpt: context 80 spans two of the CPU attention's 64-key
 * tiles; width 32 in 4 heads of 8. */
static amp_gpt_config small_config(void)
{
    return (amp_gpt_config){.vocab = 23, .context = 80, .width = 32, .layers = 2, .heads = 4, .mlp = 64};
}

static amp_module *small_gpt(uint64_t seed)
{
    amp_manual_seed(seed);
    amp_module *m = amp_model_gpt(small_config());
    if (m)
        amp_module_train(m, false);
    return m;
}

static void random_tokens(int64_t *ids, int64_t n, int64_t vocab, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int64_t)((seed >> 33) % (uint64_t)vocab);
    }
}

/* logits[0, t, :] as floats into out (vocab values). */
static bool row_of(amp_tensor *logits, int64_t t, float *out)
{
    const int64_t T = amp_tensor_dim(logits, 1), V = amp_tensor_dim(logits, 2);
    float *all = malloc(sizeof *all * (size_t)(T * V));
    bool ok = all && amp_tensor_copy_out(logits, all, AMP_F32) == AMP_OK;
    if (ok)
        memcpy(out, all + t * V, sizeof *out * (size_t)V);
    free(all);
    return ok;
}

/* The largest |a - b| over the logits of positions [from, from + T) of
 * the full forward `full` and the cached forward's `part` [1, T, V]. */
static double max_diff(amp_tensor *full, int64_t from, amp_tensor *part, int64_t V)
{
    double worst = 0;
    float *a = malloc(sizeof *a * (size_t)V), *b = malloc(sizeof *b * (size_t)V);
    for (int64_t t = 0; t < amp_tensor_dim(part, 1); t++) {
        if (!row_of(full, from + t, a) || !row_of(part, t, b)) {
            worst = INFINITY;
            break;
        }
        for (int64_t i = 0; i < V; i++)
            worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    }
    free(a);
    free(b);
    return worst;
}

/* The cached forward over seq in pieces (a 40-token prefill, single
 * tokens, one 3-token piece, singles to the end) against one full forward
 * over the whole sequence: the largest logit difference over all
 * positions, under autocast to at when at is not f32; on dev. */
static double cached_vs_full(amp_device dev, amp_dtype at)
{
    amp_module *m = small_gpt(11);
    CHECK(m != NULL);
    if (!m)
        return INFINITY;
    if (dev != AMP_CPU && amp_module_to(m, dev) != AMP_OK) {
        amp_module_free(m);
        return INFINITY;
    }
    enum { N = 78 };
    int64_t ids[N];
    random_tokens(ids, N, 23, 5);
    amp_tensor *h = amp_from_data(AMP_SHAPE(1, N), AMP_I64, ids);
    amp_tensor *idx = dev == AMP_CPU ? h : amp_to_device(h, dev);
    amp_no_grad_begin();
    if (at != AMP_F32)
        amp_autocast_begin(dev, at);
    amp_tensor *full = amp_module_forward(m, idx);
    amp_gpt_cache *c = amp_gpt_cache_new(m, 1);
    double worst = 0;
    const int64_t cuts[] = {0, 40, 41, 42, 45, 46, 64, 65, N};
    for (int k = 0; k + 1 < (int)(sizeof cuts / sizeof *cuts); k++) {
        for (int64_t t0 = cuts[k]; t0 < cuts[k + 1];) {
            /* [cuts[k], cuts[k+1]) as one piece when it is the prefill or
             * 42..45, else one token at a time */
            int64_t t1 = (k == 0 || cuts[k] == 42) ? cuts[k + 1] : t0 + 1;
            amp_tensor *ph = amp_from_data(AMP_SHAPE(1, t1 - t0), AMP_I64, ids + t0);
            amp_tensor *piece = dev == AMP_CPU ? ph : amp_to_device(ph, dev);
            amp_tensor *y = amp_gpt_forward_cached(m, c, piece);
            CHECK(y != NULL);
            CHECK_EQ_INT(amp_gpt_cache_len(c), t1);
            worst = y ? fmax(worst, max_diff(full, t0, y, 23)) : INFINITY;
            if (piece != ph)
                amp_tensor_free(piece);
            amp_tensor_free(ph);
            t0 = t1;
        }
    }
    if (at != AMP_F32)
        amp_autocast_end();
    amp_no_grad_end();
    amp_temps_free();
    amp_gpt_cache_free(c);
    if (idx != h)
        amp_tensor_free(idx);
    amp_tensor_free(h);
    amp_module_free(m);
    return worst;
}

/* op_attention_cached against op_attention_bthd over the whole sequence:
 * queries [t0, t1) over a cache of t1 positions, in pieces (a prefill of
 * 70, single rows, a piece of 5, single rows and pieces of 2, 3 and 4
 * past the second 64-key tile), B 2, 3 heads of D. Bit for bit on the
 * CPU: the same key tiles and sums (the masked tail of a row's last tile
 * adds exact zeros), also where pieces of up to 4 rows read the cache in
 * place (attention_kv.c: each count of queries, each dtype, D a multiple
 * of 32 or of 16 or neither, whole and partial groups of keys). */
static void cached_attention_case(amp_dtype dt, int64_t D)
{
    enum { B = 2, T = 150, H = 3 };
    const int64_t n = B * T * H * D;
    amp_manual_seed(21);
    amp_tensor *q0 = amp_randn(AMP_SHAPE(B, T, H, D), AMP_F32, 0, 1.5),
               *k0 = amp_randn(AMP_SHAPE(B, T, H, D), AMP_F32, 0, 1.5),
               *v = amp_randn(AMP_SHAPE(B, T, H, D), AMP_F32, 0, 1);
    /* Queries and keys spread over 2^-6 .. 2^6 of that: the products of
     * 16-bit q and k are exact in f32, and the sums of such alike ones
     * mostly too, so without the spread a kernel that summed d in another
     * order would still give these bits. */
    float *spread = malloc(sizeof *spread * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        spread[i] = ldexpf(1.0f, (int)((i * 7) % 13) - 6);
    amp_tensor *sp = amp_from_data(AMP_SHAPE(B, T, H, D), AMP_F32, spread), *k = amp_mul(k0, sp);
    for (int64_t i = 0; i < n; i++)
        spread[i] = ldexpf(1.0f, (int)((i * 5) % 11) - 5);
    amp_tensor *sq = amp_from_data(AMP_SHAPE(B, T, H, D), AMP_F32, spread), *q = amp_mul(q0, sq);
    free(spread);
    amp_tensor *qd = amp_to(q, dt), *kd = amp_to(k, dt), *vd = amp_to(v, dt);
    amp_tensor *full = op_attention_bthd(qd, kd, vd, true);
    float *qh = malloc(sizeof *qh * (size_t)n), *kc = malloc(sizeof *kc * (size_t)n),
          *vc = malloc(sizeof *vc * (size_t)n), *fh = malloc(sizeof *fh * (size_t)n),
          *kh = malloc(sizeof *kh * (size_t)n), *vh = malloc(sizeof *vh * (size_t)n);
    CHECK_OK(amp_tensor_copy_out(qd, qh, AMP_F32));
    CHECK_OK(amp_tensor_copy_out(kd, kh, AMP_F32));
    CHECK_OK(amp_tensor_copy_out(vd, vh, AMP_F32));
    CHECK_OK(amp_tensor_copy_out(full, fh, AMP_F32));
    const int64_t row = H * D;
    for (int64_t b = 0; b < B; b++) /* the cache's [T, B, H, D] */
        for (int64_t t = 0; t < T; t++) {
            memcpy(kc + (t * B + b) * row, kh + (b * T + t) * row, sizeof *kc * (size_t)row);
            memcpy(vc + (t * B + b) * row, vh + (b * T + t) * row, sizeof *vc * (size_t)row);
        }
    int64_t mismatches = 0, pieces = 0;
    for (int64_t t0 = 0, t1; t0 < T; t0 = t1, pieces++) {
        t1 = t0 == 0 ? 70 : t0 == 90 ? 95 : t0 == 100 ? 102 : t0 == 110 ? 113 : t0 == 120 ? 124 : t0 + 1;
        float *qp = malloc(sizeof *qp * (size_t)(B * (t1 - t0) * row)),
              *op = malloc(sizeof *op * (size_t)(B * (t1 - t0) * row));
        for (int64_t b = 0; b < B; b++)
            memcpy(qp + b * (t1 - t0) * row, qh + (b * T + t0) * row, sizeof *qp * (size_t)((t1 - t0) * row));
        amp_tensor *qf = amp_from_data(AMP_SHAPE(B, t1 - t0, H, D), AMP_F32, qp);
        amp_tensor *kf = amp_from_data(AMP_SHAPE(t1, B, H, D), AMP_F32, kc);
        amp_tensor *vf = amp_from_data(AMP_SHAPE(t1, B, H, D), AMP_F32, vc);
        amp_tensor *out = op_attention_cached(amp_to(qf, dt), amp_to(kf, dt), amp_to(vf, dt));
        CHECK(out != NULL);
        if (out && amp_tensor_copy_out(out, op, AMP_F32) == AMP_OK)
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < (t1 - t0) * row; i++) {
                    uint32_t x, y;
                    memcpy(&x, &op[b * (t1 - t0) * row + i], 4);
                    memcpy(&y, &fh[(b * T + t0) * row + i], 4);
                    mismatches += x != y;
                }
        amp_tensor_free(qf);
        amp_tensor_free(kf);
        amp_tensor_free(vf);
        free(qp);
        free(op);
        amp_temps_free();
    }
    CHECK_MSG(mismatches == 0, "%s: %lld values differ from the full attention", amp_dtype_name(dt),
              (long long)mismatches);
    CHECK_EQ_INT(pieces, 1 + 66 + 4);
    free(qh), free(kc), free(vc), free(fh), free(kh), free(vh);
    amp_tensor_free(q0), amp_tensor_free(sq), amp_tensor_free(k0), amp_tensor_free(sp), amp_tensor_free(v);
    amp_temps_free();
}

static void test_cached_attention_is_the_full_attentions_rows_bit_for_bit(void)
{
    amp_no_grad_begin();
    cached_attention_case(AMP_F32, 24);
    cached_attention_case(AMP_BF16, 24);
    cached_attention_case(AMP_F16, 24);
    cached_attention_case(AMP_BF16, 80); /* past the values' 64-wide blocks */
    cached_attention_case(AMP_BF16, 64); /* keys read as bf16 pairs */
    cached_attention_case(AMP_F16, 64);
    cached_attention_case(AMP_F32, 32);
    amp_no_grad_end();
}

/* The cached attention is forward only. */
static void test_cached_attention_has_no_backward(void)
{
    amp_tensor *q = amp_randn(AMP_SHAPE(1, 2, 1, 4), AMP_F32, 0, 1),
               *k = amp_randn(AMP_SHAPE(3, 1, 1, 4), AMP_F32, 0, 1);
    amp_tensor_set_requires_grad(q, true);
    amp_tensor *y = op_attention_cached(q, k, k);
    CHECK(y != NULL);
    amp_tensor *g = amp_ones(AMP_SHAPE(1, 2, 1, 4), AMP_F32);
    CHECK(amp_backward_with(y, g) != AMP_OK);
    CHECK_ERROR(AMP_ERR_STATE, "has no backward");
    amp_tensor_free(g);
    amp_tensor *short_k = amp_randn(AMP_SHAPE(1, 1, 1, 4), AMP_F32, 0, 1);
    CHECK(op_attention_cached(q, short_k, short_k) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "with Tk >= T");
    amp_temps_free();
    amp_tensor_free(q), amp_tensor_free(k), amp_tensor_free(short_k);
}

/* f32 on the CPU: the attention of a cached row runs the same kernel and
 * key tiles as the full causal attention, but a GEMM over 1 row is blocked
 * differently from one over 78, so sums may round differently; logits are
 * O(1) here, and 1e-5 is ~100 f32 ulps at 1 while any real mistake (a
 * wrong position, a key too many or too few) moves them by > 1e-2. */
static void test_cached_forward_matches_full_forward_f32(void)
{
    double d = cached_vs_full(AMP_CPU, AMP_F32);
    printf("  f32: largest logit difference %.3g\n", d);
    CHECK_MSG(d <= 1e-5, "cached vs full forward (f32): %g", d);
}

/* bf16 autocast: the same bf16 ops in both, but a different rounding of a
 * GEMM's sum moves a bf16 value by an ulp (2^-8 relative) and that
 * carries through two blocks; 0.05 on logits of magnitude ~1 is a few
 * bf16 ulps, still far below the > 0.3 a wrong position or mask gives. */
static void test_cached_forward_matches_full_forward_bf16(void)
{
    double d = cached_vs_full(AMP_CPU, AMP_BF16);
    printf("  bf16: largest logit difference %.3g\n", d);
    CHECK_MSG(d <= 0.05, "cached vs full forward (bf16): %g", d);
}

static void test_cached_forward_on_cuda_matches_full_forward(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    double d = cached_vs_full(AMP_CUDA, AMP_F32);
    printf("  cuda f32: largest logit difference %.3g\n", d);
    CHECK_MSG(d <= 1e-5, "cached vs full forward on cuda (f32): %g", d);
    d = cached_vs_full(AMP_CUDA, AMP_F16);
    printf("  cuda f16: largest logit difference %.3g\n", d);
    CHECK_MSG(d <= 0.01, "cached vs full forward on cuda (f16): %g", d);
}

/* Greedy tokens n after prompt, nanoGPT's loop: crop to the last context
 * tokens; with the cache (refilled after a crop) or full forwards. */
static void greedy(amp_module *m, bool cached, const int64_t *prompt, int64_t np, int64_t n, int64_t *seq)
{
    const int64_t context = small_config().context;
    memcpy(seq, prompt, sizeof *seq * (size_t)np);
    amp_gpt_cache *c = cached ? amp_gpt_cache_new(m, 1) : NULL;
    amp_no_grad_begin();
    for (int64_t len = np; len < np + n; len++) {
        const int64_t from = len > context ? len - context : 0;
        int64_t fed = c ? amp_gpt_cache_len(c) : 0;
        if (c && len > context) {
            amp_gpt_cache_reset(c);
            fed = 0;
        }
        const int64_t lo = c ? from + fed : from;
        amp_tensor *idx = amp_from_data(AMP_SHAPE(1, len - lo), AMP_I64, seq + lo);
        amp_tensor *y = c ? amp_gpt_forward_cached(m, c, idx) : amp_module_forward(m, idx);
        int64_t tok = -1;
        CHECK_OK(amp_sample_next(y, 0.0, 0, 0, 0, &tok));
        seq[len] = tok;
        amp_tensor_free(idx);
        amp_temps_free();
    }
    amp_no_grad_end();
    amp_gpt_cache_free(c);
}

/* Token for token, including 40 tokens past the context (crop + refill). */
static void test_greedy_with_cache_equals_greedy_by_full_forwards(void)
{
    amp_module *m = small_gpt(3);
    CHECK(m != NULL);
    enum { NP = 7, N = 113 };
    int64_t prompt[NP], a[NP + N], b[NP + N];
    random_tokens(prompt, NP, 23, 9);
    greedy(m, true, prompt, NP, N, a);
    greedy(m, false, prompt, NP, N, b);
    int64_t first_diff = -1;
    for (int64_t i = 0; i < NP + N && first_diff < 0; i++)
        if (a[i] != b[i])
            first_diff = i;
    CHECK_MSG(first_diff < 0, "greedy tokens differ from position %lld", (long long)first_diff);
    amp_module_free(m);
}

/* A model that checkpoints its blocks (training's memory lever) runs its
 * cached forward unchecked, to the same tokens. */
static void test_checkpointed_model_generates_the_same_tokens(void)
{
    amp_module *m = small_gpt(3);
    CHECK_OK(amp_gpt_set_checkpointing(m, true));
    enum { NP = 5, N = 30 };
    int64_t prompt[NP], a[NP + N], b[NP + N];
    random_tokens(prompt, NP, 23, 4);
    greedy(m, true, prompt, NP, N, a);
    greedy(m, false, prompt, NP, N, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    amp_module_free(m);
}

/* One row of logits as a [1, V] tensor. */
static amp_tensor *logits_of(const float *v, int64_t n) { return amp_from_data(AMP_SHAPE(1, n), AMP_F32, v); }

/* Draw frequencies follow softmax(logits / T): 20000 draws, each
 * probability within 4.5 standard deviations of its binomial count. */
static void test_draws_follow_the_softmax_of_logits_over_temperature(void)
{
    const float v[5] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
    amp_tensor *l = logits_of(v, 5);
    const double temps[2] = {1.0, 0.5};
    for (int k = 0; k < 2; k++) {
        double p[5], sum = 0;
        for (int i = 0; i < 5; i++)
            sum += p[i] = exp(v[i] / temps[k]);
        int count[5] = {0};
        enum { N = 20000 };
        for (int d = 0; d < N; d++) {
            int64_t tok = -1;
            CHECK_OK(amp_sample_next(l, temps[k], 0, 42, (uint64_t)d, &tok));
            if (tok >= 0 && tok < 5)
                count[tok]++;
        }
        for (int i = 0; i < 5; i++) {
            const double e = N * p[i] / sum, sd = sqrt(N * (p[i] / sum) * (1 - p[i] / sum));
            CHECK_MSG(fabs(count[i] - e) <= 4.5 * sd, "T %g token %d: %d draws, expected %.0f +- %.0f", temps[k], i,
                      count[i], e, sd);
        }
    }
    amp_tensor_free(l);
}

static void test_top_k_keeps_only_the_k_largest(void)
{
    const float v[6] = {0.1f, 3.0f, 2.9f, -5.0f, 2.8f, 0.0f};
    amp_tensor *l = logits_of(v, 6);
    int seen[6] = {0};
    for (int d = 0; d < 3000; d++) {
        int64_t tok = -1;
        CHECK_OK(amp_sample_next(l, 5.0, 3, 7, (uint64_t)d, &tok)); /* hot: every kept token is drawn */
        if (tok >= 0 && tok < 6)
            seen[tok]++;
    }
    CHECK(seen[1] > 0 && seen[2] > 0 && seen[4] > 0);
    CHECK_EQ_INT(seen[0] + seen[3] + seen[5], 0);
    /* a temperature so small that logits / T overflow: the largest wins */
    int64_t t = -1;
    CHECK_OK(amp_sample_next(l, 1e-310, 0, 7, 0, &t));
    CHECK_EQ_INT(t, 1);
    /* top-k 1 = greedy = temperature 0, whatever the temperature and seed */
    for (int d = 0; d < 50; d++) {
        int64_t a = -1, b = -1;
        CHECK_OK(amp_sample_next(l, 2.0, 1, 99, (uint64_t)d, &a));
        CHECK_OK(amp_sample_next(l, 0.0, 0, 5, (uint64_t)d, &b));
        CHECK_EQ_INT(a, 1);
        CHECK_EQ_INT(b, 1);
    }
    amp_tensor_free(l);
}

/* The same (seed, draw) gives the same token; other seeds give others. */
static void test_same_seed_same_draws_other_seed_other_draws(void)
{
    float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = 0.0f; /* uniform: 16^-64 for two seeds to agree by chance */
    amp_tensor *l = logits_of(v, 16);
    int64_t a[64], b[64], c[64];
    for (int d = 0; d < 64; d++) {
        CHECK_OK(amp_sample_next(l, 1.0, 0, 1, (uint64_t)d, &a[d]));
        CHECK_OK(amp_sample_next(l, 1.0, 0, 1, (uint64_t)d, &b[d]));
        CHECK_OK(amp_sample_next(l, 1.0, 0, 2, (uint64_t)d, &c[d]));
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    amp_tensor_free(l);
}

/* [B, T, V]: each row's last position, each row its own draw. */
static void test_sample_reads_each_rows_last_position(void)
{
    const float v[2 * 2 * 3] = {9, 0, 0, 0, 0, 9, /* row 0: last position -> 2 */
                                0, 9, 0, 9, 0, 0}; /* row 1: last position -> 0 */
    amp_tensor *l = amp_from_data(AMP_SHAPE(2, 2, 3), AMP_F32, v);
    int64_t tok[2] = {-1, -1};
    CHECK_OK(amp_sample_next(l, 0.0, 0, 0, 0, tok));
    CHECK_EQ_INT(tok[0], 2);
    CHECK_EQ_INT(tok[1], 0);
    amp_tensor_free(l);
}

static void test_sample_refuses_bad_arguments(void)
{
    const float v[3] = {0.0f, NAN, 1.0f};
    amp_tensor *good = logits_of((const float[]){1, 2, 3}, 3), *nan = logits_of(v, 3);
    int64_t tok;
    CHECK(amp_sample_next(good, -0.5, 0, 0, 0, &tok) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "temperature -0.5");
    CHECK(amp_sample_next(good, INFINITY, 0, 0, 0, &tok) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "temperature inf");
    CHECK(amp_sample_next(good, 1.0, 4, 0, 0, &tok) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "top_k 4 is not in 1 .. vocab 3");
    CHECK(amp_sample_next(good, 1.0, -1, 0, 0, &tok) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "top_k -1");
    CHECK(amp_sample_next(nan, 1.0, 0, 0, 0, &tok) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "logit 1 of row 0 is nan");
    amp_tensor *i64 = amp_zeros(AMP_SHAPE(1, 3), AMP_I64), *flat = amp_zeros(AMP_SHAPE(3), AMP_F32);
    CHECK(amp_sample_next(i64, 1.0, 0, 0, 0, &tok) != AMP_OK);
    CHECK_ERROR(AMP_ERR_DTYPE, "a float dtype is needed");
    CHECK(amp_sample_next(flat, 1.0, 0, 0, 0, &tok) != AMP_OK);
    CHECK_ERROR(AMP_ERR_SHAPE, "not [B, vocab] or [B, T, vocab]");
    amp_tensor_free(i64);
    amp_tensor_free(flat);
    amp_tensor_free(good);
    amp_tensor_free(nan);
}

static void test_cache_refuses_misuse(void)
{
    const int64_t hidden[1] = {4};
    amp_module *mlp = amp_model_mlp(3, hidden, 1, 2);
    CHECK(amp_gpt_cache_new(mlp, 1) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "sequential is not a gpt model");
    amp_module_free(mlp);

    amp_module *m = small_gpt(1), *other = small_gpt(2);
    CHECK(amp_gpt_cache_new(m, 0) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "batch 0");
    amp_gpt_cache *c = amp_gpt_cache_new(m, 1);
    int64_t ids[80] = {0};
    amp_tensor *two = amp_from_data(AMP_SHAPE(2, 3), AMP_I64, ids);
    CHECK(amp_gpt_forward_cached(m, c, two) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "is not [1, T] (the cache's batch)");
    amp_tensor *one = amp_from_data(AMP_SHAPE(1, 1), AMP_I64, ids);
    CHECK(amp_gpt_forward_cached(other, c, one) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "made for another model");
    /* Past the context: refused, the cache unchanged. */
    amp_tensor *fill = amp_from_data(AMP_SHAPE(1, 79), AMP_I64, ids);
    CHECK(amp_gpt_forward_cached(m, c, fill) != NULL);
    amp_tensor *two_more = amp_from_data(AMP_SHAPE(1, 2), AMP_I64, ids);
    CHECK(amp_gpt_forward_cached(m, c, two_more) == NULL);
    CHECK_ERROR(AMP_ERR_SHAPE, "past the context of 80 positions: the cache holds 79");
    CHECK_EQ_INT(amp_gpt_cache_len(c), 79);
    CHECK(amp_gpt_forward_cached(m, c, one) != NULL);
    CHECK_EQ_INT(amp_gpt_cache_len(c), 80);
    /* A change of precision between calls needs a reset. */
    amp_gpt_cache_reset(c);
    CHECK(amp_gpt_forward_cached(m, c, one) != NULL);
    amp_autocast_begin(AMP_CPU, AMP_BF16);
    CHECK(amp_gpt_forward_cached(m, c, one) == NULL);
    CHECK_ERROR(AMP_ERR_DTYPE, "the cache holds f32 keys");
    /* ... and the reset cures it: the same logits as a fresh cache's. */
    amp_gpt_cache_reset(c);
    amp_gpt_cache *fresh = amp_gpt_cache_new(m, 1);
    amp_tensor *after = amp_gpt_forward_cached(m, c, one), *want = amp_gpt_forward_cached(m, fresh, one);
    CHECK(after != NULL && want != NULL);
    if (after && want) {
        const size_t nb = (size_t)amp_tensor_numel(want) * amp_dtype_size(amp_tensor_dtype(want));
        CHECK(amp_tensor_numel(after) == amp_tensor_numel(want) && amp_tensor_dtype(after) == amp_tensor_dtype(want));
        CHECK(memcmp(amp_tensor_data(after), amp_tensor_data(want), nb) == 0);
    }
    CHECK_EQ_INT(amp_gpt_cache_len(c), 1);
    amp_gpt_cache_free(fresh);
    amp_autocast_end();
    amp_temps_free();
    amp_tensor_free(two);
    amp_tensor_free(one);
    amp_tensor_free(fill);
    amp_tensor_free(two_more);
    amp_gpt_cache_free(c);
    amp_module_free(m);
    amp_module_free(other);
}

/* The cached forward records no graph: its logits have no history, and
 * the parameters get no gradient from them. */
static void test_cached_forward_records_no_graph(void)
{
    amp_module *m = small_gpt(4);
    amp_gpt_cache *c = amp_gpt_cache_new(m, 1);
    int64_t ids[4] = {1, 2, 3, 4};
    amp_tensor *idx = amp_from_data(AMP_SHAPE(1, 4), AMP_I64, ids);
    amp_tensor *y = amp_gpt_forward_cached(m, c, idx);
    CHECK(y != NULL && !amp_tensor_requires_grad(y));
    amp_temps_free();
    amp_tensor_free(idx);
    amp_gpt_cache_free(c);
    amp_module_free(m);
}

/* ------------------------------------------------------------------ CLI */

static char text_path[256], gpt_dir[256], mlp_dir[256];

/* A tiny gpt trained on the tiny corpus, saved once for the CLI cases. */
static bool have_gpt_checkpoint(void)
{
    if (!cli_have_binary())
        return false;
    static int made = 0;
    if (!made) {
        int rc = cli_run("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 16 --batch 8 "
                         "--steps 40 --lr 0.01 --val-batches 2 --threads 1 --save %s",
                         text_path, gpt_dir);
        CHECK_MSG(rc == 0, "train: exit %d:\n%s", rc, cli_out);
        made = rc == 0 ? 1 : -1;
    }
    return made == 1;
}

#define GEN(...) cli_run("generate %s --threads 1 " __VA_ARGS__)

static void test_cli_option_errors_name_the_option(void)
{
    static const struct {
        const char *args, *says;
        int rc;
    } cases[] = {
        {"--tokens 0", "--tokens '0': must be a whole number from 1", 2},
        {"--tokens x", "--tokens 'x'", 2},
        {"--temperature -1", "--temperature '-1': must be a finite number >= 0", 2},
        {"--temperature nan", "--temperature 'nan'", 2},
        {"--temperature inf", "--temperature 'inf'", 2},
        {"--top-k 0", "--top-k '0': must be a whole number >= 1", 2},
        {"--top-k 999", "--top-k 999 is more than the vocabulary's 15 tokens", 2},
        {"--seed -3", "--seed '-3'", 2},
        {"--seed ' 5'", "--seed ' 5'", 2},
        {"--seed +5", "--seed '+5'", 2},
        {"--tokens ' 5'", "--tokens ' 5'", 2},
        {"--precision fp8", "--precision 'fp8': must be fp32, bf16 or fp16", 2},
        {"--device tpu", "--device 'tpu': must be cpu or cuda", 2},
        {"--bogus 1", "unknown option '--bogus'", 2},
        {"--tokens", "--tokens needs a value", 2},
        {"--prompt 'the Zebra'", "character 'Z' (at byte 4) is not in the model's vocabulary", 1},
        {"--data /nonexistent/text", "/nonexistent/text", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = GEN("%s", gpt_dir, cases[i].args);
        CHECK_MSG(rc == cases[i].rc && strstr(cli_out, cases[i].says),
                  "generate %s: exit %d (expected %d), wanted \"%s\" in:\n%s", cases[i].args, rc, cases[i].rc,
                  cases[i].says, cli_out);
    }
    CHECK_EQ_INT(cli_run("generate"), 2);
    CHECK(strstr(cli_out, "which checkpoint?") != NULL);
    CHECK_EQ_INT(cli_run("generate --help"), 0);
    CHECK(strstr(cli_out, "--top-k K") != NULL);
    CHECK_EQ_INT(cli_run("generate %s/absent", tmpdir), 1);
    CHECK_EQ_INT(cli_run("generate ''"), 2);
    CHECK_OUT("the checkpoint directory is empty");
    CHECK_EQ_INT(cli_run("eval ''"), 2);
    CHECK_OUT("the checkpoint directory is empty");
}

static bool gen_text(char *buf, size_t n, const char *args);

/* A subnormal temperature is a finite number (strtod's ERANGE aside); a
 * checkpoint's file path works as its directory, for eval too. */
static void test_cli_accepts_subnormal_temperature_and_a_file_path(void)
{
    char a[4096], b[4096];
    gen_text(a, sizeof a, "--prompt 'the' --tokens 20 --temperature 1e-320");
    gen_text(b, sizeof b, "--prompt 'the' --tokens 20 --temperature 0");
    CHECK_MSG(strcmp(a, b) == 0, "temperature 1e-320:\n%s\ngreedy:\n%s", a, b);
    int rc = cli_run("generate %s/checkpoint.safetensors --threads 1 --tokens 20 --prompt 'the' --temperature 0 "
                     "--quiet 2>/dev/null", gpt_dir);
    CHECK_MSG(rc == 0 && strcmp(cli_out, b) == 0, "generate FILE: exit %d:\n%s", rc, cli_out);
    rc = cli_run("eval %s/checkpoint.safetensors --threads 1", gpt_dir);
    CHECK_MSG(rc == 0 && strstr(cli_out, "val_loss "), "eval FILE: exit %d:\n%s", rc, cli_out);
}

/* Past the context the cache is refilled for each token; a prompt longer
 * than the context is its prefill, not a refill: 21 bytes, context 16, 3
 * tokens: the prefill, then 2 refills. */
static void test_cli_refills_count_after_the_prefill(void)
{
    int rc = GEN("--prompt 'the cat sat on a mat ' --tokens 3", gpt_dir);
    CHECK_MSG(rc == 0 && strstr(cli_out, "prefill: 16 prompt tokens") &&
                  strstr(cli_out, "the cache was refilled with the sequence's last 16 tokens 2 times"),
              "exit %d:\n%s", rc, cli_out);
}

/* The vocabulary is its bytes, not only their number: a text with as many
 * distinct bytes but another one ('m' -> 'z') is refused, by generate and
 * eval; a checkpoint without the record (older) gets a warning only. */
static void test_cli_vocabulary_bytes_are_checked(void)
{
    char other[300], old_dir[300], cmd[1400];
    cli_path(other, sizeof other, "tiny-z.txt");
    cli_path(old_dir, sizeof old_dir, "gpt-old");
    snprintf(cmd, sizeof cmd, "tr m z < '%s' > '%s'", text_path, other);
    CHECK_EQ_INT(system(cmd), 0);
    int rc = GEN("--data %s --tokens 3", gpt_dir, other);
    CHECK_MSG(rc == 1 && strstr(cli_out, "has the checkpoint's vocabulary size (15) but other characters: token 9 "
                                         "is byte 0x6e there and 0x6d"),
              "generate --data (m -> z): exit %d:\n%s", rc, cli_out);
    rc = cli_run("eval %s --data %s --threads 1 --val-batches 1", gpt_dir, other);
    CHECK_MSG(rc == 1 && strstr(cli_out, "but other characters"), "eval --data (m -> z): exit %d:\n%s", rc, cli_out);
    /* the record's key renamed (same length, so the header stays valid) */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && LC_ALL=C sed 's/vocab_bytes/vocab_bytez/' '%s/checkpoint.safetensors' > "
             "'%s/checkpoint.safetensors'", old_dir, gpt_dir, old_dir);
    CHECK_EQ_INT(system(cmd), 0);
    rc = GEN("--tokens 3", old_dir);
    CHECK_MSG(rc == 0 && strstr(cli_out, "warning: the checkpoint") &&
                  strstr(cli_out, "does not record its vocabulary"),
              "generate on a checkpoint without vocab_bytes: exit %d:\n%s", rc, cli_out);
    rc = GEN("--tokens 3", gpt_dir);
    CHECK_MSG(rc == 0 && !strstr(cli_out, "warning"), "exit %d:\n%s", rc, cli_out);
}

/* Weights stored in bf16 (--param-dtype bf16) run under bf16 autocast
 * only: another --precision is refused before the model is built. */
static void test_cli_refuses_a_precision_the_weights_cannot_run_in(void)
{
    char dir[300];
    cli_path(dir, sizeof dir, "gpt-bf16");
    int rc = cli_run("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 16 --batch 8 --steps 2 "
                     "--precision bf16 --param-dtype bf16 --threads 1 --save %s", text_path, dir);
    CHECK_MSG(rc == 0, "train --param-dtype bf16: exit %d:\n%s", rc, cli_out);
    rc = GEN("--tokens 3 --precision fp32", dir);
    CHECK_MSG(rc == 2 && strstr(cli_out, "stores its weights in bf16 (--param-dtype bf16): --precision bf16 is the "
                                         "only one it runs in (not fp32)"), "exit %d:\n%s", rc, cli_out);
    rc = GEN("--tokens 3", dir);
    CHECK_MSG(rc == 0, "generate on its own precision: exit %d:\n%s", rc, cli_out);
}

/* stdout only (the speed lines go to stderr): "generate DIR ARGS --quiet". */
static bool gen_text(char *buf, size_t n, const char *args)
{
    int rc = cli_run("generate %s --threads 1 --quiet %s 2>/dev/null", gpt_dir, args);
    CHECK_MSG(rc == 0, "generate %s: exit %d:\n%s", args, rc, cli_out);
    size_t len = strnlen(cli_out, n - 1);
    memcpy(buf, cli_out, len);
    buf[len] = 0;
    return rc == 0;
}

static void test_cli_same_seed_same_text_other_seed_other_text(void)
{
    char a[4096], b[4096], c[4096];
    gen_text(a, sizeof a, "--prompt 'the cat' --tokens 60 --seed 5 --temperature 1.5");
    gen_text(b, sizeof b, "--prompt 'the cat' --tokens 60 --seed 5 --temperature 1.5");
    gen_text(c, sizeof c, "--prompt 'the cat' --tokens 60 --seed 6 --temperature 1.5");
    CHECK(strncmp(a, "the cat", 7) == 0);
    CHECK_EQ_INT(strlen(a), 7 + 60 + 1); /* the prompt, the tokens (one byte each here), a newline */
    CHECK(strcmp(a, b) == 0);
    CHECK_MSG(strcmp(a, c) != 0, "seeds 5 and 6 gave the same text:\n%s", a);
}

/* --no-cache (a full forward per token) gives the same text as the cache,
 * 40 tokens past the context of 16 (crop and refill); top-k 1 = greedy. */
static void test_cli_cache_and_no_cache_agree_and_top_k_1_is_greedy(void)
{
    char a[4096], b[4096], c[4096], d[4096];
    gen_text(a, sizeof a, "--prompt 'the' --tokens 50 --seed 3");
    gen_text(b, sizeof b, "--prompt 'the' --tokens 50 --seed 3 --no-cache");
    CHECK_MSG(strcmp(a, b) == 0, "cache:\n%s\nno cache:\n%s", a, b);
    gen_text(c, sizeof c, "--prompt 'the' --tokens 50 --top-k 1 --seed 8 --temperature 3");
    gen_text(d, sizeof d, "--prompt 'the' --tokens 50 --temperature 0");
    CHECK_MSG(strcmp(c, d) == 0, "top-k 1:\n%s\ngreedy:\n%s", c, d);
    /* an empty prompt starts from a newline (not printed) */
    gen_text(a, sizeof a, "--prompt '' --tokens 5 --temperature 0");
    CHECK_EQ_INT(strlen(a), 6);
    /* the speed lines */
    CHECK_EQ_INT(GEN("--tokens 20 --prompt 'a'", gpt_dir), 0);
    CHECK(strstr(cli_out, "prefill: 1 prompt tokens in") && strstr(cli_out, "decode: 19 tokens in") &&
          strstr(cli_out, "tokens/s"));
    CHECK_EQ_INT(GEN("--tokens 20 --prompt 'a' --precision bf16", gpt_dir), 0);
    CHECK(strstr(cli_out, "precision bf16") != NULL);
}

/* On CUDA (cudaemu in test-cuda-emu): the cache's text, as many bytes as
 * asked for, equal to --no-cache's (greedy). */
static void test_cli_generates_on_cuda(void)
{
    if (!amp_cuda_available()) {
        harness_skip("no CUDA device");
        return;
    }
    if (!have_gpt_checkpoint())
        return;
    char a[4096], b[4096];
    gen_text(a, sizeof a, "--device cuda --prompt 'the' --tokens 24 --temperature 0");
    gen_text(b, sizeof b, "--device cuda --prompt 'the' --tokens 24 --temperature 0 --no-cache");
    CHECK_EQ_INT(strlen(a), 3 + 24 + 1);
    CHECK_MSG(strcmp(a, b) == 0, "cuda cache:\n%s\nno cache:\n%s", a, b);
}

static void test_cli_refuses_a_non_gpt_checkpoint(void)
{
    char images[256];
    cli_write_tiny_images(cli_path(images, sizeof images, "images"));
    int rc = cli_run("train --model mlp --data %s --hidden 4 --steps 2 --batch 16 --threads 1 --save %s", images,
                     mlp_dir);
    CHECK_MSG(rc == 0, "train mlp: exit %d:\n%s", rc, cli_out);
    rc = cli_run("generate %s", mlp_dir);
    CHECK_MSG(rc == 1 && strstr(cli_out, "holds a mlp model; generate samples from gpt models"), "exit %d:\n%s", rc,
              cli_out);
}

int main(void)
{
    const char *th = getenv("TEST_GENERATE_THREADS"); /* to look at other thread counts by hand */
    amp_set_num_threads(th ? atoi(th) : 1);
    RUN(test_cached_attention_is_the_full_attentions_rows_bit_for_bit);
    RUN(test_cached_attention_has_no_backward);
    RUN(test_cached_forward_matches_full_forward_f32);
    RUN(test_cached_forward_matches_full_forward_bf16);
    RUN(test_cached_forward_on_cuda_matches_full_forward);
    RUN(test_greedy_with_cache_equals_greedy_by_full_forwards);
    RUN(test_checkpointed_model_generates_the_same_tokens);
    RUN(test_draws_follow_the_softmax_of_logits_over_temperature);
    RUN(test_top_k_keeps_only_the_k_largest);
    RUN(test_same_seed_same_draws_other_seed_other_draws);
    RUN(test_sample_reads_each_rows_last_position);
    RUN(test_sample_refuses_bad_arguments);
    RUN(test_cache_refuses_misuse);
    RUN(test_cached_forward_records_no_graph);
    cli_init("generate");
    cli_write_tiny_text(cli_path(text_path, sizeof text_path, "tiny.txt"));
    cli_path(gpt_dir, sizeof gpt_dir, "gpt");
    cli_path(mlp_dir, sizeof mlp_dir, "mlp");
    RUN_IF(have_gpt_checkpoint, test_cli_option_errors_name_the_option);
    RUN_IF(have_gpt_checkpoint, test_cli_same_seed_same_text_other_seed_other_text);
    RUN_IF(have_gpt_checkpoint, test_cli_cache_and_no_cache_agree_and_top_k_1_is_greedy);
    RUN(test_cli_generates_on_cuda);
    RUN_IF(have_gpt_checkpoint, test_cli_accepts_subnormal_temperature_and_a_file_path);
    RUN_IF(have_gpt_checkpoint, test_cli_refills_count_after_the_prefill);
    RUN_IF(have_gpt_checkpoint, test_cli_vocabulary_bytes_are_checked);
    RUN_IF(have_gpt_checkpoint, test_cli_refuses_a_precision_the_weights_cannot_run_in);
    RUN_IF(cli_have_binary, test_cli_refuses_a_non_gpt_checkpoint);
    cli_cleanup();
    return harness_done();
}
