/*
 * dispatch.c - the CPU GEMM's one entry (gemm.h): for each product, who
 * runs it. The drivers and kernels below (gemm_kernels.h) and oneDNN's
 * matmul (onednn/onednn_gemm.c) run what they are handed; every choice is
 * made here, by a fixed rule, not timed at run time, so the same shapes
 * always take the same kernels and a resumed run is bit-identical to an
 * uninterrupted one.
 *
 * A product goes to the first of these that takes it:
 *   1. oneDNN's matmul, where the mode (AMPC_CPU_LIB, onednn_set_mode)
 *      and, in AUTO, the rule below pick it, and oneDNN can do the call
 *      (it declines mixed dtypes, f16 without f16 kernels, shapes it only
 *      has a reference implementation for);
 *   2. f32 x f32 -> f32 with B transposed and at most 4 rows of A (a
 *      decode step's linear): the f32 gemv (gemv_f32.c); in AUTO oneDNN
 *      is not asked;
 *   3. bf16 x bf16 on the CPU's native 16-bit dot products (AMX-BF16 or
 *      VDPBF16PS, gemm_bf16.c's drivers): the few-row gemv for at most 8
 *      rows with B transposed, else the blocked driver;
 *   4. f16 x f16 split exactly into bf16 on AMX (the same blocked driver
 *      on gemm_f16_kernel_amx), from 2^22 multiply-adds;
 *   5. everything else on the widening driver (gemm.c): panels widened to
 *      f32 while packing, f32 FMA micro-kernels.
 * Trivial products (M, N or K of 0, alpha 0) always take 5.
 */
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/gemm/gemm_kernels.h"
#include "base/base.h"
#include "base/env.h"
#include "base/parallel.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static const char onednn_path[] = "oneDNN matmul";

const char *gemm_kernel_name(void) { return gemm_widen_kernel_name(); }

/* ------------------------------------------------------------- oneDNN */

/*
 * When oneDNN runs a product (AUTO): measured on this project's machine
 * (an Intel Xeon with AMX-BF16, 2 cores; the numbers are in
 * docs/benchmarks.md), oneDNN's f32 kernels are faster than ampc's at
 * every shape measured, by 10-15% on square shapes and 3x with a narrow N
 * (the 10-class output layer); its bf16 AMX kernels are up to 1.9x faster
 * with A read row-wise (forward and input-gradient products) but 1.2-1.5x
 * slower than ampc's AMX kernel with a transposed A and many rows (the
 * weight-gradient products dW = dY^T X of layers 2048 or more wide), which
 * stay on ampc's; so do bf16 products under 2^20 multiply-adds (a 10-class
 * output layer), which ampc runs on one thread where oneDNN wakes them all
 * (10-20x slower at 128 x 10 x 128). The per-shape table is bench_gemm's
 * "shapes that matter". f16: oneDNN 2.x has no f16 kernels, and runs f16
 * products only when asked for everything (CPU_LIB_ONEDNN, over widened
 * copies: onednn_gemm.c).
 *
 * On CPUs whose bf16 products run on ampc's VDPBF16PS kernel (AMD Zen 4 /
 * Zen 5: AVX512-BF16 without AMX) the same rule holds: measured on a
 * 2-core Zen-class EPYC (docs/benchmarks.md, "GEMM: the VDPBF16PS
 * kernel's blocking") ampc's kernel is 3-9% behind oneDNN 2.6's on one
 * idle core on the benchmark models' shapes, and the gpt bf16 step with
 * every bf16 product on it was ~15% slower. ONEDNN_BF16_OWN_ON_DOT (0)
 * turns that choice over (gemm_bf16_prefers_own): for when ampc's pool
 * must not share the cores with oneDNN's libgomp workers, which spin
 * for a busy core. AMPC_CPU_LIB=own (every GEMM on ampc's kernels) does
 * it at run time.
 */
#define ONEDNN_BF16_OWN_ON_DOT 0

/* Whether an f32 product goes to the f32 gemv (gemv_f32.c): B
 * transposed, A not, 1 .. GEMM_F32_GEMV_MAX_M rows. Measured on this
 * project's Xeon (bench/generate.sh: the decode of a 6-layer, width-384
 * gpt), oneDNN's matmul reads the weight of such a product at under half
 * the bandwidth the gemv reaches (the decode: 2.3x faster on it). */
static _Atomic int f32_gemv_rows = GEMM_F32_GEMV_MAX_M;

void gemm_f32_set_gemv_rows(int max_m)
{
    atomic_store(&f32_gemv_rows, max_m < 0 ? 0 : max_m > GEMM_F32_GEMV_MAX_M ? GEMM_F32_GEMV_MAX_M : max_m);
}

static bool f32_gemv_takes(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K)
{
    return !trans_a && trans_b && M >= 1 && M <= atomic_load(&f32_gemv_rows) && N >= 1 && K >= 1;
}

bool gemm_onednn_policy(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, amp_dtype dt)
{
    if (dt == AMP_F32 && f32_gemv_takes(trans_a, trans_b, M, N, K))
        return false;
    if (dt == AMP_BF16) {
        if (ONEDNN_BF16_OWN_ON_DOT && gemm_bf16_prefers_own())
            return false;
        return !(trans_a && M >= 2048) && M * N * K >= ((int64_t)1 << 20);
    }
    return true;
}

/* Whether oneDNN is asked to run this product (A's dtype dt). */
static bool onednn_wanted(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, amp_dtype dt)
{
    switch (onednn_mode()) {
    case CPU_LIB_OWN: return false;
    case CPU_LIB_ONEDNN: return true;
    default: return gemm_onednn_policy(trans_a, trans_b, M, N, K, dt);
    }
}

bool gemm_lowp_runs_own(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, amp_dtype dt)
{
    return !onednn_available() || !onednn_wanted(trans_a, trans_b, M, N, K, dt);
}

/* ---------------------------------------------------------------- bf16 */

static _Atomic int bf16_mode = GEMM_BF16_AUTO;

void gemm_bf16_set_mode(gemm_bf16_mode mode) { atomic_store(&bf16_mode, (int)mode); }

#if defined(__x86_64__)
static bool has_dot(unsigned f)
{
    unsigned need = AMP_CPU_AVX512F | AMP_CPU_AVX512BW | AMP_CPU_AVX512BF16;
    return (f & need) == need;
}

static bool dot_beats_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
}
#endif

/*
 * The native kernel for bf16 x bf16 now, or NULL for the widening path.
 * In AUTO:
 *   - AMX-BF16 where the CPU has it and Linux grants the tile state
 *     (Intel Sapphire Rapids and later): 1024 bf16 flops per cycle and core;
 *   - VDPBF16PS on AMD (Zen 4, Zen 5), where it runs at twice the f32 FMA
 *     rate;
 *   - otherwise the f32 widening path. Intel cores run VDPBF16PS at half
 *     the FMA rate (measured on this project's Xeon: 0.5 per cycle, 109
 *     GFLOP/s a core against 200 for f32 FMA), so there it would be slower
 *     than widening.
 */
static const gemm_bf16_kernel *pick_bf16(void)
{
#if defined(__x86_64__)
    unsigned f = amp_cpu_features();
    int mode = atomic_load(&bf16_mode);
    if (mode == GEMM_BF16_WIDEN)
        return NULL;
    /* AMX-BF16 ships with AVX512-BF16 on every CPU that has it (and the
     * packers need AVX-512), so masking AVX512BF16 turns AMX off too. */
    const bool dot = has_dot(f) && gemm_bf16_kernel_dot.micro;
    const bool amx = dot && gemm_bf16_kernel_amx.micro && gemm_amx_usable();
    if (mode == GEMM_BF16_DOT && dot)
        return &gemm_bf16_kernel_dot;
    if (amx)
        return &gemm_bf16_kernel_amx;
    if (dot && dot_beats_fma())
        return &gemm_bf16_kernel_dot;
#endif
    return NULL;
}

bool gemm_bf16_prefers_own(void)
{
#if defined(__x86_64__)
    return pick_bf16() == &gemm_bf16_kernel_dot;
#else
    return false;
#endif
}

const char *gemm_bf16_kernel_name(void)
{
    static _Thread_local char buf[64];
    const gemm_bf16_kernel *k = pick_bf16();
    if (k)
        return k->name;
    snprintf(buf, sizeof buf, "widen: %s", gemm_kernel_name());
    return buf;
}

/* The few-row gemv (gemm_bf16.c) takes bf16 products with B transposed
 * of at most this many rows. 8 (the kernel takes 4 rows at a time, so 5
 * to 8 read W twice) is measured (bench_gemm --few-rows, an AMD EPYC
 * core, 1 thread): the blocked path costs the same from 1 to 12 rows (it
 * packs all of W either way); the gemv was 4.6-5.4x faster at 1 row,
 * 1.4-2.2x at 8 on widths of 384 and more and at most 7% slower on
 * width-128 products (under 6 us); from 9 rows it lost 20-40% on those
 * (docs/benchmarks.md, generation). */
static _Atomic int gemv_rows = GEMM_GEMV_MAX_M;

void gemm_bf16_set_gemv_rows(int max_m)
{
    atomic_store(&gemv_rows, max_m < 0 ? 0 : max_m > GEMM_GEMV_MAX_M ? GEMM_GEMV_MAX_M : max_m);
}

/* A bf16 x bf16 product on a native kernel: false, touching nothing, when
 * this CPU has none or the product is trivial (the widening path then
 * runs it); otherwise true with *st the status. */
static bool run_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                     int64_t lda, const uint16_t *B, int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc,
                     const gemm_epilogue *ep, amp_status *st)
{
    const gemm_bf16_kernel *kern = pick_bf16();
    if (!kern || M <= 0 || N <= 0 || K <= 0 || alpha == 0.0f)
        return false;
    if (trans_b && M <= atomic_load(&gemv_rows) && kern->rowdot) {
        gemm_path = "avx512bf16 gemv";
        *st = gemm_bf16_gemv(kern, trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dt, ldc, ep);
        return true;
    }
    gemm_path = kern->name;
    *st = gemm_bf16_drive(kern, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dt, ldc, ep);
    return true;
}

/* ----------------------------------------------------------------- f16 */

/*
 * When the f16 split runs (GEMM_F16_AUTO). Measured (bench_gemm
 * --f16-only, 2 threads) the split runs 1.2-1.8x the widening path on the
 * benchmark models' GEMMs and 1.6-1.8x at 1024^3 and 2048^3; below about
 * 2^22 multiply-adds, or with a side near 10 (tiles padded to 32 rows and
 * 16 k), it ties or loses (0.75x at 10 x 4096 x 256). So AUTO takes it
 * from 2^F16_SPLIT_LOG2 multiply-adds with M, N and K at least
 * F16_SPLIT_DIM. (Its accuracy, the same or better than widening's
 * against double: gemm_f16_split.c.)
 */
#define F16_SPLIT_LOG2 22
#define F16_SPLIT_DIM 32

/* -1: not yet read from AMPC_GEMM_F16 */
static _Atomic int f16_forced = -1;

void gemm_f16_set_mode(gemm_f16_mode mode) { atomic_store(&f16_forced, (int)mode); }

static int f16_mode(void)
{
    int m = atomic_load(&f16_forced);
    if (m < 0) {
        static const int modes[] = {GEMM_F16_AUTO, GEMM_F16_WIDEN, GEMM_F16_SPLIT}; /* env.c's order */
        int want = modes[env_choice(ENV_GEMM_F16, 0)];
        int expected = -1;
        atomic_compare_exchange_strong(&f16_forced, &expected, want);
        m = atomic_load(&f16_forced);
    }
    return m;
}

/* The split kernel when the mode and this CPU allow it, else NULL. As for
 * bf16, masking AVX512-BF16 with amp_cpu_limit turns AMX off; the packers
 * need AVX-512BW. */
static const gemm_bf16_kernel *split_kernel(void)
{
#if defined(__x86_64__)
    const unsigned need = AMP_CPU_AVX512F | AMP_CPU_AVX512BW | AMP_CPU_AVX512BF16;
    if (f16_mode() != GEMM_F16_WIDEN && (amp_cpu_features() & need) == need && gemm_f16_kernel_amx.micro &&
        gemm_amx_usable())
        return &gemm_f16_kernel_amx;
#endif
    return NULL;
}

const char *gemm_f16_kernel_name(void)
{
    static _Thread_local char buf[128];
    const gemm_bf16_kernel *k = split_kernel();
    if (!k)
        snprintf(buf, sizeof buf, "widen: %s", gemm_kernel_name());
    else if (f16_mode() == GEMM_F16_SPLIT)
        snprintf(buf, sizeof buf, "%s", k->name);
    else
        snprintf(buf, sizeof buf, "%s from 2^%d multiply-adds, else widen: %s", k->name, F16_SPLIT_LOG2,
                 gemm_kernel_name());
    return buf;
}

bool gemm_f16_split_policy(int64_t M, int64_t N, int64_t K)
{
    return (double)M * (double)N * (double)K >= (double)(1 << F16_SPLIT_LOG2) && M >= F16_SPLIT_DIM &&
           N >= F16_SPLIT_DIM && K >= F16_SPLIT_DIM;
}

bool gemm_f16_split_active(int64_t M, int64_t N, int64_t K)
{
    return split_kernel() && M > 0 && N > 0 && K > 0 &&
           (f16_mode() == GEMM_F16_SPLIT || gemm_f16_split_policy(M, N, K));
}

/* An f16 x f16 product on the split: false, touching nothing, when the
 * mode, the CPU or the size says widening; otherwise true with *st the
 * status. */
static bool run_f16_split(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, void *C,
                          amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep, amp_status *st)
{
    const gemm_bf16_kernel *kern = split_kernel();
    if (!kern || alpha == 0.0f || !gemm_f16_split_active(M, N, K))
        return false;
    gemm_path = kern->name;
    *st = gemm_bf16_drive(kern, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dt, ldc, ep);
    return true;
}

/* ------------------------------------------------------------- entries */

amp_status gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc)
{
    amp_status st;
    if (onednn_wanted(trans_a, trans_b, M, N, K, AMP_F32) &&
        onednn_gemm(trans_a, trans_b, 1, M, N, K, alpha, A, AMP_F32, lda, 0, B, AMP_F32, ldb, 0, beta, C, AMP_F32,
                    ldc, 0, NULL, AMP_F32, CPU_ACT_NONE, &st)) {
        gemm_path = onednn_path;
        return st;
    }
    if (alpha != 0.0f && f32_gemv_takes(trans_a, trans_b, M, N, K)) {
        gemm_path = gemm_f32_gemv_name();
        return gemm_f32_gemv(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
    }
    return gemm_widen(trans_a, trans_b, M, N, K, alpha, A, AMP_F32, lda, B, AMP_F32, ldb, beta, C, AMP_F32, ldc, NULL);
}

amp_status gemm_lowp(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const void *A, amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt,
                     int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc)
{
    return gemm_lowp_ep(trans_a, trans_b, M, N, K, alpha, A, a_dt, lda, B, b_dt, ldb, beta, C, c_dt, ldc, NULL);
}

amp_status gemm_lowp_ep(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const void *A, amp_dtype a_dt, int64_t lda, const void *B, amp_dtype b_dt,
                        int64_t ldb, float beta, void *C, amp_dtype c_dt, int64_t ldc, const gemm_epilogue *ep)
{
    if (!amp_dtype_is_float(a_dt) || !amp_dtype_is_float(b_dt) || !amp_dtype_is_float(c_dt))
        return amp_set_error(AMP_ERR_DTYPE, "gemm: dtypes %s x %s -> %s (need f32, f16 or bf16)",
                             amp_dtype_name(a_dt), amp_dtype_name(b_dt), amp_dtype_name(c_dt));
    amp_status st;
    if (onednn_wanted(trans_a, trans_b, M, N, K, a_dt) &&
        onednn_gemm(trans_a, trans_b, 1, M, N, K, alpha, A, a_dt, lda, 0, B, b_dt, ldb, 0, beta, C, c_dt, ldc, 0,
                    NULL, AMP_F32, CPU_ACT_NONE, &st)) {
        gemm_path = onednn_path;
        if (st == AMP_OK)
            gemm_epilogue_all(ep, M, N);
        return st;
    }
    if (a_dt == AMP_F32 && b_dt == AMP_F32 && c_dt == AMP_F32 && alpha != 0.0f &&
        f32_gemv_takes(trans_a, trans_b, M, N, K)) {
        gemm_path = gemm_f32_gemv_name();
        return gemm_f32_gemv(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
    }
    if (a_dt == AMP_BF16 && b_dt == AMP_BF16 &&
        run_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dt, ldc, ep, &st))
        return st;
    if (a_dt == AMP_F16 && b_dt == AMP_F16 &&
        run_f16_split(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dt, ldc, ep, &st))
        return st;
    return gemm_widen(trans_a, trans_b, M, N, K, alpha, A, a_dt, lda, B, b_dt, ldb, beta, C, c_dt, ldc, ep);
}

/* ------------------------------------------------------------- batches */

/* Rows of a batch of M x N matrices (batch stride sc, row stride ldc, in
 * elements of es bytes), for the parallel loop that writes the bias. */
typedef struct {
    char *c;
    size_t es;
    int64_t M, N, ldc, sc;
    const void *bias;
} rows_job;

static void bias_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    const rows_job *j = ctx;
    for (int64_t r = lo; r < hi; r++)
        memcpy(j->c + (size_t)((r / j->M) * j->sc + (r % j->M) * j->ldc) * j->es, j->bias, (size_t)j->N * j->es);
}

/* Products of a batch spread over the threads (each on one thread). */
typedef struct {
    bool ta, tb;
    int64_t M, N, K;
    const char *A, *B;
    char *C;
    amp_dtype adt, bdt, cdt;
    int64_t lda, ldb, ldc, sa, sb, sc;
    float beta;
    _Atomic int failed;
} batch_job;

static void batch_range(void *ctx, int64_t lo, int64_t hi, int tid)
{
    (void)tid;
    batch_job *j = ctx;
    const size_t ea = amp_dtype_size(j->adt), eb = amp_dtype_size(j->bdt), ec = amp_dtype_size(j->cdt);
    for (int64_t k = lo; k < hi; k++)
        if (gemm_lowp(j->ta, j->tb, j->M, j->N, j->K, 1.0f, j->A + (size_t)(k * j->sa) * ea, j->adt, j->lda,
                      j->B + (size_t)(k * j->sb) * eb, j->bdt, j->ldb, j->beta, j->C + (size_t)(k * j->sc) * ec,
                      j->cdt, j->ldc) != AMP_OK)
            atomic_store(&j->failed, 1);
}

amp_status gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                        const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                        int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                        const void *bias, cpu_act act)
{
    return gemm_batched_ep(trans_a, trans_b, batch, M, N, K, A, a_dt, lda, sa, B, b_dt, ldb, sb, beta, C, c_dt, ldc,
                           sc, bias, act, NULL);
}

amp_status gemm_batched_ep(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                           const void *A, amp_dtype a_dt, int64_t lda, int64_t sa, const void *B, amp_dtype b_dt,
                           int64_t ldb, int64_t sb, float beta, void *C, amp_dtype c_dt, int64_t ldc, int64_t sc,
                           const void *bias, cpu_act act, const gemm_epilogue *ep)
{
    amp_status st;
    if (ep && (batch != 1 || act != CPU_ACT_NONE))
        return amp_set_error(AMP_ERR_ARG, "gemm: a tile epilogue takes one product and no activation "
                                          "(got a batch of %lld)", (long long)batch);
    if (onednn_wanted(trans_a, trans_b, M, N, K, a_dt) &&
        onednn_gemm(trans_a, trans_b, batch, M, N, K, 1.0f, A, a_dt, lda, sa, B, b_dt, ldb, sb, beta, C, c_dt, ldc,
                    sc, bias, c_dt, act, &st)) {
        gemm_path = onednn_path;
        if (st == AMP_OK)
            gemm_epilogue_all(ep, M, N);
        return st;
    }
    if (bias && beta != 0.0f)
        return amp_set_error(AMP_ERR_ARG, "gemm: a bias with beta = %g (only beta = 0 takes a bias)", beta);
    if (bias) {
        /* Every row starts as the bias; the GEMM adds onto it (beta = 1),
         * so a 16-bit C is still rounded once. */
        rows_job j = {C, amp_dtype_size(c_dt), M, N, ldc, sc, bias};
        amp_parallel_for(batch * M, gemm_row_grain(N), bias_range, &j);
        beta = 1.0f;
    }
    if (batch == 1) { /* the GEMM threads itself */
        st = gemm_lowp_ep(trans_a, trans_b, M, N, K, 1.0f, A, a_dt, lda, B, b_dt, ldb, beta, C, c_dt, ldc, ep);
        if (st != AMP_OK)
            return st;
    } else {
        batch_job j = {trans_a, trans_b, M, N, K, A, B, C, a_dt, b_dt, c_dt, lda, ldb, ldc, sa, sb, sc, beta, 0};
        amp_parallel_for(batch, 1, batch_range, &j);
        /* The error may have been set on a worker thread: say it here too. */
        if (atomic_load(&j.failed))
            return amp_set_error(AMP_ERR_MEMORY, "gemm: out of memory in a batch of %lld products",
                                 (long long)batch);
    }
    if (act == CPU_ACT_RELU)
        cpu_relu_rows(C, c_dt, batch, M, N, ldc, sc);
    return AMP_OK;
}

/* ---------------------------------------------------------------- names */

const char *amp_cpu_kernels(void)
{
    static _Thread_local char buf[384];
    static const char *const modes[] = {"where faster (AMPC_CPU_LIB=auto)", "off (AMPC_CPU_LIB=own)",
                                        "for all it can do (AMPC_CPU_LIB=onednn)"};
    char own[288];
    snprintf(own, sizeof own, "ampc f32 %s, bf16 %s, f16 %s", gemm_kernel_name(), gemm_bf16_kernel_name(),
             gemm_f16_kernel_name());
    if (onednn_available())
        snprintf(buf, sizeof buf, "%s %s, %s", onednn_version(), modes[onednn_mode()], own);
    else
        snprintf(buf, sizeof buf, "%s", own);
    return buf;
}
