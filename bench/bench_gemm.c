/*
 * bench_gemm.c - how fast the CPU GEMM runs against what the core can do,
 * ampc's own kernels beside oneDNN's.
 *
 * Measures, in one program:
 *   - the peaks: a register-only loop of independent f32 FMA chains, of
 *     VDPBF16PS chains (AVX512-BF16) and of TDPBF16PS tiles (AMX-BF16), on
 *     1 and 2 threads;
 *   - gemm_f32 and gemm_lowp(bf16 x bf16 -> bf16) on square n x n x n
 *     products, n = 256 .. --max-n (2048 by default; bench/run.sh asks
 *     4096), 1 and 2 threads: f32 on ampc's kernel and on oneDNN, bf16 on
 *     every path of ampc's this CPU has (widening to f32, VDPBF16PS, AMX)
 *     and on oneDNN, each as GFLOP/s and as a fraction of its own
 *     instruction's peak; "f32 auto" and "bf16 auto", what gemm_f32 and
 *     gemm_lowp run by default (the figure to put beside PyTorch's
 *     matmul); and gemm_lowp(f16 x f16 -> f16) widened to f32 and split
 *     into bf16 on AMX (gemm_f16_split.c);
 *   - the shapes that matter: every GEMM of one training step of the three
 *     benchmark models (bench/ampc_step.c), as ampc issues them (the gpt's
 *     mlp.fc1 forward as the fused linear + gelu, through the CPU
 *     backend's gemm with its pre-activation kept), on 1 and 2 threads,
 *     f32 and bf16, own kernels against oneDNN, with the side the AUTO
 *     policy (gemm_onednn_policy) picks and whether the pick lost; f16
 *     widened against split, with the side gemm_f16_split_policy picks;
 *   - the f16 paths' worst error against double (64 x 64 outputs, K 256 ..
 *     4096), beside the error a three-term split (dropping lo x lo) adds.
 * oneDNN is reached through ampc's own entry points (gemm_f32, gemm_lowp
 * with onednn_set_mode), so this measures exactly what training runs; its
 * columns read "-" when ampc is built without it or it declines a shape.
 * Prints tables and writes the numbers as JSON (bench_gemm.json, or the
 * path after --json), which bench/torch_gemm.py's products and
 * bench/report.py's table follow: "gemm_gflops" [{"n", "threads", and
 * a GFLOP/s per run name above}], "model_shapes" [{"model", "gemm",
 * "pass" ("fwd+b+relu", "fwd+b+gelu", "dX", "dW", ...), "trans_a",
 * "trans_b", "M", "N", "K", "bias", "act" ("none", "relu", "gelu_tanh"),
 * "per_step", "threads" (1 or 2), GFLOP/s "f32_own", "f32_onednn",
 * "bf16_own", "bf16_onednn", "f16_widen", "f16_split", the AUTO pick
 * "auto_f32" / "auto_bf16" ("own" or "onednn") with its GFLOP/s "f32_auto"
 * / "bf16_auto"}], "model_shapes_total_ms" {"threads_1", "threads_2"}, the
 * peaks, the load average before and after, the kernels' names. Each figure is the best of --reps samples (default
 * 5) after a warm-up; a sample repeats a small product until it takes a
 * few milliseconds. The machine may be shared, so the load average is
 * printed and the numbers are noisy; compare runs taken under similar load.
 *
 * Build (not a test; CMake target bench_gemm), or by hand from the
 * repository root after building the library in build/:
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/bench_gemm.c build/libampc.a -lz -lm [-ldnnl] -o bench_gemm
 * Run: ./bench_gemm [--reps N] [--max-n N] [--no-shapes] [--json PATH]
 * (--few-rows, after any --reps: only the few-row table, see few_rows)
 */
#include "backend/backend.h"
#include "backend/cpu/gemm/gemm.h"
#include "backend/cpu/gemm/gemm_kernels.h"
#include "backend/cpu/onednn/onednn.h"
#include "base/base.h"
#include "peaks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ----------------------------------------------------------------- GEMM */

/* One product as ampc issues it (gemm.h's convention): C[M x N] =
 * act(op(A) op(B) + bias), A stored [K x M] when trans_a, B stored
 * [N x K] when trans_b, everything packed (leading dimension = stored row
 * length). With a bias or an activation it runs on gemm_batched, as a
 * linear layer's forward does (the epilogue fused where oneDNN runs it). */
typedef struct {
    bool trans_a, trans_b;
    int64_t M, N, K;
    bool bias;
    cpu_act act;
    bool gelu; /* the gelu (tanh) epilogue with its pre-activation kept, as the gpt's fc1 runs */
} shape;

/* Operand buffers large enough for every shape run on them, in f32, bf16
 * and f16 (the same values rounded). */
typedef struct {
    float *af, *bf, *cf, *biasf;
    uint16_t *ah, *bh, *ch, *biash;
    uint16_t *a16, *b16, *c16, *bias16;
    float *auxf;          /* the gelu's pre-activation, C-sized */
    uint16_t *auxh, *aux16;
} operands;

/* Who runs the product: the CPU library mode, ampc's bf16 path, the dtype
 * (bf16, f16 or else f32), ampc's f16 path. */
typedef struct {
    cpu_lib_mode lib;
    gemm_bf16_mode path;
    bool bf16;
    bool f16;
    gemm_f16_mode f16_path;
} route;

static double flops(const shape *s) { return 2.0 * (double)s->M * (double)s->N * (double)s->K; }

/* --f16-only: time the f16 products alone (the other columns read "-"). */
static bool f16_only;

static void die(const char *what)
{
    fprintf(stderr, "bench_gemm: %s failed: %s\n", what, amp_last_error());
    exit(1);
}

static amp_status product(const route *r, const shape *s, const operands *o)
{
    const int64_t lda = s->trans_a ? s->M : s->K, ldb = s->trans_b ? s->K : s->N;
    if (s->gelu) { /* the CPU backend's fused linear + gelu, as op_linear_gelu issues it */
        const amp_dtype dt = r->f16 ? AMP_F16 : r->bf16 ? AMP_BF16 : AMP_F32;
        const void *A = r->f16 ? (const void *)o->a16 : r->bf16 ? (const void *)o->ah : o->af;
        const void *B = r->f16 ? (const void *)o->b16 : r->bf16 ? (const void *)o->bh : o->bf;
        void *C = r->f16 ? (void *)o->c16 : r->bf16 ? (void *)o->ch : o->cf;
        void *aux = r->f16 ? (void *)o->aux16 : r->bf16 ? (void *)o->auxh : o->auxf;
        const void *bias = !s->bias ? NULL : r->f16 ? (const void *)o->bias16 : r->bf16 ? (const void *)o->biash : o->biasf;
        be_gemm_desc g = {.ta = s->trans_a, .tb = s->trans_b, .M = s->M, .N = s->N, .K = s->K, .batch = 1,
                          .alpha = 1.0f, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = s->N, .adt = dt,
                          .bdt = dt, .cdt = dt, .bias = bias, .ep = BE_EPI_GELU, .aux = aux, .ldaux = s->N};
        return backend_of(AMP_CPU)->gemm(&g);
    }
    if (r->f16) {
        if (s->bias || s->act != CPU_ACT_NONE)
            return gemm_batched(s->trans_a, s->trans_b, 1, s->M, s->N, s->K, o->a16, AMP_F16, lda, 0, o->b16, AMP_F16,
                                ldb, 0, 0.0f, o->c16, AMP_F16, s->N, 0, s->bias ? o->bias16 : NULL, s->act);
        return gemm_lowp(s->trans_a, s->trans_b, s->M, s->N, s->K, 1.0f, o->a16, AMP_F16, lda, o->b16, AMP_F16, ldb,
                         0.0f, o->c16, AMP_F16, s->N);
    }
    if (s->bias || s->act != CPU_ACT_NONE) {
        const amp_dtype dt = r->bf16 ? AMP_BF16 : AMP_F32;
        const void *A = r->bf16 ? (const void *)o->ah : o->af, *B = r->bf16 ? (const void *)o->bh : o->bf;
        const void *bias = !s->bias ? NULL : r->bf16 ? (const void *)o->biash : o->biasf;
        return gemm_batched(s->trans_a, s->trans_b, 1, s->M, s->N, s->K, A, dt, lda, 0, B, dt, ldb, 0, 0.0f,
                            r->bf16 ? (void *)o->ch : o->cf, dt, s->N, 0, bias, s->act);
    }
    if (!r->bf16)
        return gemm_f32(s->trans_a, s->trans_b, s->M, s->N, s->K, 1.0f, o->af, lda, o->bf, ldb, 0.0f, o->cf, s->N);
    return gemm_lowp(s->trans_a, s->trans_b, s->M, s->N, s->K, 1.0f, o->ah, AMP_BF16, lda, o->bh, AMP_BF16, ldb,
                     0.0f, o->ch, AMP_BF16, s->N);
}

/* Sets the route up; false when this build or CPU does not have it for the
 * shape: ampc's forced bf16 path is missing, or oneDNN is not built in or
 * would decline the product (gemm_* would then quietly run ampc's kernel,
 * so the column would not be oneDNN's). Asking oneDNN itself also makes its
 * primitive, outside the timing. */
static bool route_set(const route *r, const shape *s, const operands *o)
{
    onednn_set_mode(r->lib);
    gemm_bf16_set_mode(r->path);
    gemm_f16_set_mode(r->f16_path);
    if (r->f16) /* the split only where the CPU has it (its name, not widening's) */
        return r->f16_path != GEMM_F16_SPLIT || !strstr(gemm_f16_kernel_name(), "widen");
    if (r->lib == CPU_LIB_ONEDNN) {
        if (!onednn_available())
            return false;
        const int64_t lda = s->trans_a ? s->M : s->K, ldb = s->trans_b ? s->K : s->N;
        const amp_dtype dt = r->bf16 ? AMP_BF16 : AMP_F32;
        const void *A = r->bf16 ? (const void *)o->ah : o->af, *B = r->bf16 ? (const void *)o->bh : o->bf;
        void *C = r->bf16 ? (void *)o->ch : o->cf;
        const void *bias = !s->bias ? NULL : r->bf16 ? (const void *)o->biash : o->biasf;
        amp_status st = AMP_OK;
        bool taken = onednn_gemm(s->trans_a, s->trans_b, 1, s->M, s->N, s->K, 1.0f, A, dt, lda, 0, B, dt, ldb, 0,
                                 0.0f, C, dt, s->N, 0, bias, dt, s->act, &st);
        if (taken && st != AMP_OK)
            die("onednn_gemm");
        return taken;
    }
    const char *name = gemm_bf16_kernel_name();
    return !r->bf16 || r->path == GEMM_BF16_AUTO || (r->path == GEMM_BF16_DOT && strstr(name, "avx512bf16")) ||
           (r->path == GEMM_BF16_AMX && strstr(name, "amx")) || (r->path == GEMM_BF16_WIDEN && strstr(name, "widen"));
}

/* Seconds per product over `inner` back-to-back products. */
static double sample(const route *r, const shape *s, const operands *o, int inner)
{
    double t0 = now();
    for (int i = 0; i < inner; i++)
        if (product(r, s, o) != AMP_OK)
            die("gemm");
    return (now() - t0) / inner;
}

/* Warms the route up (caches, allocator, primitives) and returns how many
 * products make one sample of at least 2 ms, so that a small product's
 * best-of is not a single-call timer reading. */
#define SAMPLE_MIN_S 2e-3
static int warm_up(const route *r, const shape *s, const operands *o)
{
    sample(r, s, o, 1);
    double t = sample(r, s, o, 1);
    int inner = t > 0 ? (int)(SAMPLE_MIN_S / t) + 1 : 1000;
    return inner > 1000 ? 1000 : inner < 1 ? 1 : inner;
}

static void reset_routes(void)
{
    onednn_set_mode(CPU_LIB_AUTO);
    gemm_bf16_set_mode(GEMM_BF16_AUTO);
    gemm_f16_set_mode(GEMM_F16_AUTO);
}

/* ------------------------------------------------------ square products */

typedef enum {
    RUN_F32, RUN_F32_DNNL, RUN_WIDEN, RUN_DOT, RUN_AMX, RUN_DNNL, RUN_F16_WIDEN, RUN_F16_SPLIT, RUN_F32_AUTO,
    RUN_BF16_AUTO, N_RUNS
} run_kind;
/* The names are the JSON keys too ("f32" and the bf16 ones as before).
 * "f32 auto" and "bf16 auto": what gemm_f32 / gemm_lowp run by default
 * (AMPC_CPU_LIB's AUTO, the default bf16 path): the figure to put beside
 * PyTorch's matmul. */
static const char *run_names[N_RUNS] = {"f32",      "f32 onednn",  "bf16 widen", "bf16 dot", "bf16 amx",
                                        "bf16 onednn", "f16 widen", "f16 split",  "f32 auto", "bf16 auto"};
static const route run_route[N_RUNS] = {
    {CPU_LIB_OWN, GEMM_BF16_AUTO, false, false, 0},  {CPU_LIB_ONEDNN, GEMM_BF16_AUTO, false, false, 0},
    {CPU_LIB_OWN, GEMM_BF16_WIDEN, true, false, 0},  {CPU_LIB_OWN, GEMM_BF16_DOT, true, false, 0},
    {CPU_LIB_OWN, GEMM_BF16_AMX, true, false, 0},    {CPU_LIB_ONEDNN, GEMM_BF16_AUTO, true, false, 0},
    {CPU_LIB_OWN, GEMM_BF16_AUTO, false, true, GEMM_F16_WIDEN},
    {CPU_LIB_OWN, GEMM_BF16_AUTO, false, true, GEMM_F16_SPLIT},
    {CPU_LIB_AUTO, GEMM_BF16_AUTO, false, false, 0}, {CPU_LIB_AUTO, GEMM_BF16_AUTO, true, false, 0},
};
static bool skip_run(int k) { return f16_only && !run_route[k].f16; }

/* The peak each run is measured against, and the instruction's products
 * per multiply-add of the product (the f16 split does 4 bf16 ones). */
static const peak_kind run_peak[N_RUNS] = {PEAK_FMA, PEAK_FMA, PEAK_FMA, PEAK_DOT, PEAK_AMX,
                                           PEAK_AMX, PEAK_FMA, PEAK_AMX, PEAK_FMA, PEAK_DOT};
static const int run_work[N_RUNS] = {1, 1, 1, 1, 1, 1, 1, 4, 1, 1};

static uint64_t rng = 7;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) - 0.5);
}

/* Allocates and fills operands for A and B of up to na and nb elements,
 * C of up to nc and a bias of up to nbias; exits when out of memory. */
static operands operands_new(int64_t na, int64_t nb, int64_t nc, int64_t nbias)
{
    operands o = {amp_alloc(sizeof(float) * (size_t)na),    amp_alloc(sizeof(float) * (size_t)nb),
                  amp_alloc(sizeof(float) * (size_t)nc),    amp_alloc(sizeof(float) * (size_t)nbias),
                  amp_alloc(2 * (size_t)na),                amp_alloc(2 * (size_t)nb),
                  amp_alloc(2 * (size_t)nc),                amp_alloc(2 * (size_t)nbias),
                  amp_alloc(2 * (size_t)na),                amp_alloc(2 * (size_t)nb),
                  amp_alloc(2 * (size_t)nc),                amp_alloc(2 * (size_t)nbias),
                  amp_alloc(sizeof(float) * (size_t)nc),    amp_alloc(2 * (size_t)nc),
                  amp_alloc(2 * (size_t)nc)};
    if (!o.af || !o.bf || !o.cf || !o.biasf || !o.ah || !o.bh || !o.ch || !o.biash || !o.a16 || !o.b16 || !o.c16 ||
        !o.bias16 || !o.auxf || !o.auxh || !o.aux16)
        die("allocating operands");
    for (int64_t i = 0; i < na; i++)
        o.af[i] = frand();
    for (int64_t i = 0; i < nb; i++)
        o.bf[i] = frand();
    for (int64_t i = 0; i < nbias; i++)
        o.biasf[i] = frand();
    amp_convert(o.af, AMP_F32, o.ah, AMP_BF16, (size_t)na);
    amp_convert(o.bf, AMP_F32, o.bh, AMP_BF16, (size_t)nb);
    amp_convert(o.biasf, AMP_F32, o.biash, AMP_BF16, (size_t)nbias);
    amp_convert(o.af, AMP_F32, o.a16, AMP_F16, (size_t)na);
    amp_convert(o.bf, AMP_F32, o.b16, AMP_F16, (size_t)nb);
    amp_convert(o.biasf, AMP_F32, o.bias16, AMP_F16, (size_t)nbias);
    return o;
}

static void operands_free(operands *o)
{
    amp_free(o->af), amp_free(o->bf), amp_free(o->cf), amp_free(o->biasf);
    amp_free(o->ah), amp_free(o->bh), amp_free(o->ch), amp_free(o->biash);
    amp_free(o->a16), amp_free(o->b16), amp_free(o->c16), amp_free(o->bias16);
    amp_free(o->auxf), amp_free(o->auxh), amp_free(o->aux16);
}

/* Best GFLOP/s of the route on the shape, or 0 when the route is missing. */
static double time_route(const route *r, const shape *s, const operands *o, int nt, int reps)
{
    amp_set_num_threads(nt);
    double best = 0;
    if (route_set(r, s, o)) {
        int inner = warm_up(r, s, o);
        best = 1e30;
        for (int k = 0; k < reps; k++) {
            double t = sample(r, s, o, inner);
            best = t < best ? t : best;
        }
    }
    reset_routes();
    return best > 0 ? flops(s) / best / 1e9 : 0;
}

/* ---------------------------------------------------- the model shapes */

/* One GEMM of a training step: a linear layer's forward Y = act(X W^T +
 * b) (false, true, rows, out, in; gemm_batched with the bias and nn's
 * fused ReLU), input gradient dX = dY W (false, false, rows, in, out) or
 * weight gradient dW = dY^T X (true, false, out, in, rows), as
 * src/ops/matmul.c issues them; `count` times per step. */
typedef struct {
    const char *model, *layer, *pass;
    shape s;
    int count;
} step_gemm;

#define MAX_STEP_GEMMS 32

/* Appends the layer's products (dX unless it is the first layer, whose
 * input needs no gradient). */
static int add_linear(step_gemm *g, int n, const char *model, const char *layer, int64_t rows, int64_t in,
                      int64_t out, bool first, bool bias, int act_kind, int count)
{
    /* act_kind: 0 none, 1 relu, 2 gelu (tanh, fused with its pre-activation kept) */
    const cpu_act act = act_kind == 1 ? CPU_ACT_RELU : CPU_ACT_NONE;
    const char *fwd = act_kind == 1 ? "fwd+b+relu" : act_kind == 2 ? (bias ? "fwd+b+gelu" : "fwd+gelu")
                    : bias ? "fwd+b" : "fwd";
    g[n++] = (step_gemm){model, layer, fwd, {false, true, rows, out, in, bias, act, act_kind == 2}, count};
    if (!first)
        g[n++] = (step_gemm){model, layer, "dX", {false, false, rows, in, out, false, CPU_ACT_NONE, false}, count};
    g[n++] = (step_gemm){model, layer, "dW", {true, false, out, in, rows, false, CPU_ACT_NONE, false}, count};
    return n;
}

/* bench/ampc_step.c's models: mlp 784-4096-4096-10 at batch 256; gpt
 * width 256, 4 layers, MLP 1024, vocab 96, 16 x 128 tokens, the head tied
 * to the embedding (a linear with the [96, 256] embedding as weight); cnn's
 * two fully connected layers at batch 128 (its convolutions are not
 * GEMMs here). */
static int model_gemms(step_gemm *g)
{
    int n = 0;
    /* model, layer, rows, in, out, first layer, bias, fused act (1 relu, 2 gelu), times per step */
    n = add_linear(g, n, "mlp", "fc1", 256, 784, 4096, true, true, 1, 1);
    n = add_linear(g, n, "mlp", "fc2", 256, 4096, 4096, false, true, 1, 1);
    n = add_linear(g, n, "mlp", "fc3", 256, 4096, 10, false, true, 0, 1);
    n = add_linear(g, n, "gpt", "q/k/v/o", 2048, 256, 256, false, true, 0, 16);
    n = add_linear(g, n, "gpt", "mlp.fc1", 2048, 256, 1024, false, true, 2, 4);
    n = add_linear(g, n, "gpt", "mlp.fc2", 2048, 1024, 256, false, true, 0, 4);
    n = add_linear(g, n, "gpt", "head", 2048, 256, 96, false, false, 0, 1);
    n = add_linear(g, n, "cnn", "fc1", 128, 3136, 128, false, true, 1, 1);
    n = add_linear(g, n, "cnn", "fc2", 128, 128, 10, false, true, 0, 1);
    return n;
}

enum { S_F32_OWN, S_F32_DNNL, S_BF16_OWN, S_BF16_DNNL, S_F16_WIDEN, S_F16_SPLIT, N_SIDES };
static const route side_route[N_SIDES] = {
    {CPU_LIB_OWN, GEMM_BF16_AUTO, false, false, 0},
    {CPU_LIB_ONEDNN, GEMM_BF16_AUTO, false, false, 0},
    {CPU_LIB_OWN, GEMM_BF16_AUTO, true, false, 0},
    {CPU_LIB_ONEDNN, GEMM_BF16_AUTO, true, false, 0},
    {CPU_LIB_OWN, GEMM_BF16_AUTO, false, true, GEMM_F16_WIDEN},
    {CPU_LIB_OWN, GEMM_BF16_AUTO, false, true, GEMM_F16_SPLIT},
};

typedef struct {
    double t[N_SIDES]; /* best seconds per product; 0: the side is missing */
    bool auto_dnnl[2]; /* AUTO's pick per dtype (f32, bf16): oneDNN */
    double lost[2];    /* AUTO's pick's time over the other side's (0: no other side) */
    bool auto_split;   /* f16: gemm_f16_split_policy picks the split */
} shape_result;

/* Times every side of one shape on nt threads, the sides interleaved
 * rep by rep so that a change in the machine's load hits all of them. */
static void time_shape(const step_gemm *g, const operands *o, int nt, int reps, shape_result *res)
{
    amp_set_num_threads(nt);
    int inner[N_SIDES];
    for (int k = 0; k < N_SIDES; k++) {
        res->t[k] = 0;
        inner[k] = 0;
        if (!(f16_only && !side_route[k].f16) && route_set(&side_route[k], &g->s, o)) {
            inner[k] = warm_up(&side_route[k], &g->s, o);
            res->t[k] = 1e30;
        }
    }
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < N_SIDES; k++)
            if (inner[k]) {
                onednn_set_mode(side_route[k].lib); /* route_set without asking oneDNN again */
                gemm_bf16_set_mode(side_route[k].path);
                gemm_f16_set_mode(side_route[k].f16_path);
                double t = sample(&side_route[k], &g->s, o, inner[k]);
                res->t[k] = t < res->t[k] ? t : res->t[k];
            }
    reset_routes();
    for (int d = 0; d < 2; d++) {
        double own = res->t[2 * d], dnnl = res->t[2 * d + 1];
        /* AUTO runs oneDNN where the policy says so and oneDNN takes it */
        res->auto_dnnl[d] = dnnl > 0 && own > 0 &&
                            gemm_onednn_policy(g->s.trans_a, g->s.trans_b, g->s.M, g->s.N, g->s.K,
                                               d ? AMP_BF16 : AMP_F32);
        res->lost[d] = dnnl > 0 ? (res->auto_dnnl[d] ? dnnl / own : own / dnnl) : 0;
    }
    res->auto_split = res->t[S_F16_SPLIT] > 0 && gemm_f16_split_policy(g->s.M, g->s.N, g->s.K);
}

/* Prints the table of the model shapes and their totals; fills res,
 * totals[dtype][own, onednn, auto][once, per step] and f16[widen, split,
 * auto][once, per step] in ms. */
static void model_shapes(const step_gemm *g, int n, int nt, int reps, shape_result *res, double totals[2][3][2],
                         double f16[3][2])
{
    int64_t na = 0, nb = 0, nc = 0, nbias = 0;
    for (int i = 0; i < n; i++) {
        const shape *s = &g[i].s;
        na = s->M * s->K > na ? s->M * s->K : na;
        nb = s->K * s->N > nb ? s->K * s->N : nb;
        nc = s->M * s->N > nc ? s->M * s->N : nc;
        nbias = s->N > nbias ? s->N : nbias;
    }
    operands o = operands_new(na, nb, nc, nbias);
    printf("\nthe shapes that matter: the GEMMs of one training step, %d thread%s, GFLOP/s (best of %d);\n"
           "AUTO: the side gemm_onednn_policy picks, * when it is more than 10%% slower here (x: by how much)\n",
           nt, nt > 1 ? "s" : "", reps);
    printf("%-24s %2s %2s %5s %5s %5s %4s | %7s %7s %-14s | %8s %7s %-14s | %9s %6s %5s %-6s\n", "GEMM", "ta", "tb",
           "M", "N", "K", "step", "f32 own", "oneDNN", "AUTO", "bf16 own", "oneDNN", "AUTO", "f16 widen", "split",
           "x", "AUTO");
    memset(totals, 0, sizeof(double) * 12);
    memset(f16, 0, sizeof(double) * 6);
    for (int i = 0; i < n; i++) {
        const shape *s = &g[i].s;
        time_shape(&g[i], &o, nt, reps, &res[i]);
        char name[48];
        snprintf(name, sizeof name, "%s %s %s", g[i].model, g[i].layer, g[i].pass);
        printf("%-24s %2s %2s %5lld %5lld %5lld %3dx |", name, s->trans_a ? "T" : "N", s->trans_b ? "T" : "N",
               (long long)s->M, (long long)s->N, (long long)s->K, g[i].count);
        for (int d = 0; d < 2; d++) {
            const double own = res[i].t[2 * d], dnnl = res[i].t[2 * d + 1];
            if (own > 0)
                printf(d ? " %8.0f" : " %7.0f", flops(s) / own / 1e9);
            else
                printf(d ? " %8s" : " %7s", "-");
            if (dnnl > 0)
                printf(" %7.0f", flops(s) / dnnl / 1e9);
            else
                printf(" %7s", "-");
            char pick[16];
            snprintf(pick, sizeof pick, "%s", res[i].auto_dnnl[d] ? "oneDNN" : "own");
            if (res[i].lost[d] > 1.10)
                snprintf(pick, sizeof pick, "%s *%.2fx", res[i].auto_dnnl[d] ? "oneDNN" : "own", res[i].lost[d]);
            printf(" %-14s |", pick);
            /* oneDNN-only: ampc's kernel where oneDNN declines, as gemm_* do */
            const double side[3] = {own, dnnl > 0 ? dnnl : own, res[i].auto_dnnl[d] ? dnnl : own};
            for (int k = 0; k < 3; k++) {
                totals[d][k][0] += 1e3 * side[k];
                totals[d][k][1] += 1e3 * side[k] * g[i].count;
            }
        }
        const double wid = res[i].t[S_F16_WIDEN], spl = res[i].t[S_F16_SPLIT];
        printf(" %9.0f", flops(s) / wid / 1e9);
        if (spl > 0)
            printf(" %6.0f %4.2fx %-6s\n", flops(s) / spl / 1e9, wid / spl, res[i].auto_split ? "split" : "widen");
        else
            printf(" %6s %5s %-6s\n", "-", "-", "widen");
        const double f16_side[3] = {wid, spl > 0 ? spl : wid, res[i].auto_split ? spl : wid};
        for (int k = 0; k < 3; k++) {
            f16[k][0] += 1e3 * f16_side[k];
            f16[k][1] += 1e3 * f16_side[k] * g[i].count;
        }
        fflush(stdout);
    }
    operands_free(&o);
    const bool have_dnnl = onednn_available();
    printf("%-40s %8s %7s %7s | %8s %7s %7s | %9s %6s %7s\n", "total ms (AUTO: the picked side's time)", "f32 own",
           "oneDNN", "AUTO", "bf16 own", "oneDNN", "AUTO", "f16 widen", "split", "AUTO");
    for (int w = 0; w < 2; w++) {
        printf("  %-38s", w ? "one training step (each GEMM x step)" : "each shape once");
        for (int d = 0; d < 2; d++) {
            printf(d ? " | %8.2f" : " %8.2f", totals[d][0][w]);
            if (have_dnnl)
                printf(" %7.2f", totals[d][1][w]);
            else
                printf(" %7s", "-");
            printf(" %7.2f", totals[d][2][w]);
        }
        printf(" | %9.2f %6.2f %7.2f\n", f16[0][w], f16[1][w], f16[2][w]);
    }
}

/* ------------------------------------------------------ f16 accuracy */

#define N_ERR_K 3
static const int64_t err_k[N_ERR_K] = {256, 1024, 4096};

/* The worst |error| / sum |a b| over 64 x 64 outputs of f16 products
 * (values uniform in [-1, 1]) against double: err[k][widen, split,
 * three-term], the last the sum of al bl alone that a three-term split
 * (hi x hi + hi x lo + lo x hi) would drop, in double. */
static void f16_accuracy(double err[N_ERR_K][3])
{
    const int64_t M = 64, N = 64;
    printf("\nf16 x f16 -> f32 against double, 64 x 64 outputs, values in [-1, 1]: worst |error| / sum |a b|,\n"
           "in f32 ulps (2^-24); three-term: what dropping lo x lo alone adds\n%6s %9s %9s %11s\n", "K", "widen",
           "split", "three-term");
    for (int e = 0; e < N_ERR_K; e++) {
        const int64_t K = err_k[e];
        uint16_t *a = amp_alloc(2 * (size_t)(M * K)), *b = amp_alloc(2 * (size_t)(K * N));
        float *c[2] = {amp_alloc(4 * (size_t)(M * N)), amp_alloc(4 * (size_t)(M * N))};
        if (!a || !b || !c[0] || !c[1])
            die("allocating the accuracy operands");
        for (int64_t i = 0; i < M * K; i++)
            a[i] = amp_f32_to_f16(2 * frand());
        for (int64_t i = 0; i < K * N; i++)
            b[i] = amp_f32_to_f16(2 * frand());
        err[e][0] = err[e][1] = err[e][2] = 0;
        bool split = false;
        for (int p = 0; p < 2; p++) {
            gemm_f16_set_mode(p ? GEMM_F16_SPLIT : GEMM_F16_WIDEN);
            split = p && !strstr(gemm_f16_kernel_name(), "widen");
            if (gemm_lowp(false, false, M, N, K, 1.0f, a, AMP_F16, K, b, AMP_F16, N, 0.0f, c[p], AMP_F32, N) != AMP_OK)
                die("gemm_lowp f16");
        }
        gemm_f16_set_mode(GEMM_F16_AUTO);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double sum = 0, mag = 0, lolo = 0;
                for (int64_t k = 0; k < K; k++) {
                    double x = amp_f16_to_f32(a[i * K + k]), y = amp_f16_to_f32(b[k * N + j]);
                    double xl = x - amp_bf16_to_f32(amp_f32_to_bf16((float)x));
                    double yl = y - amp_bf16_to_f32(amp_f32_to_bf16((float)y));
                    sum += x * y, mag += fabs(x * y), lolo += xl * yl;
                }
                for (int p = 0; p < 2; p++) {
                    double r = fabs(c[p][i * N + j] - sum) / mag;
                    err[e][p] = r > err[e][p] ? r : err[e][p];
                }
                err[e][2] = fabs(lolo) / mag > err[e][2] ? fabs(lolo) / mag : err[e][2];
            }
        if (!split)
            err[e][1] = 0;
        printf("%6lld %9.2f", (long long)K, err[e][0] * 0x1p24);
        if (split)
            printf(" %9.2f", err[e][1] * 0x1p24);
        else
            printf(" %9s", "-");
        printf(" %11.2f\n", err[e][2] * 0x1p24);
        amp_free(a), amp_free(b), amp_free(c[0]), amp_free(c[1]);
    }
}

/* ------------------------------------------------------------- program */

static void read_load(double load[3])
{
    load[0] = load[1] = load[2] = -1;
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(la);
    }
}

/* v, or null for the "not measured" 0. */
static void json_num(FILE *js, double v)
{
    if (v > 0)
        fprintf(js, "%.3f", v);
    else
        fprintf(js, "null");
}

static void write_json(const char *path, const double load0[3], const double load1[3], int reps,
                       double peaks[3][2], int n_sizes, const int64_t *sizes, double gflops[][2][N_RUNS],
                       const step_gemm *g, int n_g, shape_result res[2][MAX_STEP_GEMMS], double totals[2][2][3][2],
                       double f16[2][3][2], double err[N_ERR_K][3])
{
    FILE *js = fopen(path, "w");
    if (!js) {
        fprintf(stderr, "bench_gemm: cannot write %s\n", path);
        return;
    }
    fprintf(js, "{\n  \"load_average_before\": [%.2f, %.2f, %.2f],\n", load0[0], load0[1], load0[2]);
    fprintf(js, "  \"load_average_after\": [%.2f, %.2f, %.2f],\n  \"reps\": %d,\n", load1[0], load1[1], load1[2], reps);
    fprintf(js, "  \"f32_kernel\": \"%s\",\n  \"bf16_default\": \"%s\",\n  \"f16_default\": \"%s\",\n",
            gemm_kernel_name(), gemm_bf16_kernel_name(), gemm_f16_kernel_name());
    fprintf(js, "  \"onednn\": \"%s\",\n", onednn_available() ? onednn_version() : "none");
    fprintf(js, "  \"peak_gflops\": {\"threads\": [1, 2], \"fma_f32\": [%.1f, %.1f], \"vdpbf16ps\": [%.1f, %.1f], "
                "\"amx_bf16\": [%.1f, %.1f]},\n",
            peaks[0][0], peaks[0][1], peaks[1][0], peaks[1][1], peaks[2][0], peaks[2][1]);
    fprintf(js, "  \"gemm_gflops\": [");
    for (int s = 0; s < n_sizes; s++)
        for (int nt = 1; nt <= 2; nt++) {
            fprintf(js, "%s\n    {\"n\": %lld, \"threads\": %d", s || nt > 1 ? "," : "", (long long)sizes[s], nt);
            for (int k = 0; k < N_RUNS; k++) {
                fprintf(js, ", \"%s\": ", run_names[k]);
                json_num(js, gflops[s][nt - 1][k]);
            }
            fprintf(js, "}");
        }
    fprintf(js, "\n  ],\n  \"model_shapes\": [");
    for (int x = 0; x < 2 * n_g; x++) {
        const int i = x % n_g, nt = x / n_g + 1;
        const shape *s = &g[i].s;
        const shape_result *r = &res[nt - 1][i];
        fprintf(js,
                "%s\n    {\"model\": \"%s\", \"gemm\": \"%s\", \"pass\": \"%s\", \"trans_a\": %s, \"trans_b\": %s, "
                "\"M\": %lld, \"N\": %lld, \"K\": %lld, \"bias\": %s, \"act\": \"%s\", \"per_step\": %d, "
                "\"threads\": %d",
                x ? "," : "", g[i].model, g[i].layer, g[i].pass, s->trans_a ? "true" : "false",
                s->trans_b ? "true" : "false", (long long)s->M, (long long)s->N, (long long)s->K,
                s->bias ? "true" : "false", s->gelu ? "gelu_tanh" : s->act == CPU_ACT_RELU ? "relu" : "none",
                g[i].count, nt);
        static const char *keys[N_SIDES] = {"f32_own", "f32_onednn", "bf16_own", "bf16_onednn", "f16_widen",
                                            "f16_split"};
        for (int k = 0; k < N_SIDES; k++) {
            fprintf(js, ", \"%s\": ", keys[k]);
            json_num(js, r->t[k] > 0 ? flops(s) / r->t[k] / 1e9 : 0);
        }
        /* auto_*_vs_other: the picked side's time over the other's (> 1.1: AUTO lost by > 10%);
         * f32_auto / bf16_auto: the picked side's GFLOP/s (what a training step runs) */
        for (int d = 0; d < 2; d++) {
            const char *dt = d ? "bf16" : "f32";
            fprintf(js, ", \"auto_%s\": \"%s\", \"auto_%s_vs_other\": ", dt, r->auto_dnnl[d] ? "onednn" : "own",
                    dt);
            json_num(js, r->lost[d]);
            const double t = r->t[2 * d + (r->auto_dnnl[d] ? 1 : 0)];
            fprintf(js, ", \"%s_auto\": ", dt);
            json_num(js, t > 0 ? flops(s) / t / 1e9 : 0);
        }
        fprintf(js, ", \"auto_f16\": \"%s\"}", r->auto_split ? "split" : "widen");
    }
    fprintf(js, "\n  ]");
    if (n_g) {
        /* per thread count: "threads_1", "threads_2" */
        fprintf(js, ",\n  \"model_shapes_total_ms\": {");
        for (int t = 0; t < 2; t++) {
            fprintf(js, "%s\"threads_%d\": {", t ? ", " : "", t + 1);
            for (int w = 0; w < 2; w++)
                for (int d = 0; d < 2; d++) {
                    fprintf(js, "%s\"%s_%s\": {\"own\": %.3f, \"onednn\": ", w || d ? ", " : "",
                            w ? "step" : "once", d ? "bf16" : "f32", totals[t][d][0][w]);
                    json_num(js, onednn_available() ? totals[t][d][1][w] : 0);
                    fprintf(js, ", \"auto\": %.3f}", totals[t][d][2][w]);
                }
            for (int w = 0; w < 2; w++)
                fprintf(js, ", \"%s_f16\": {\"widen\": %.3f, \"split\": %.3f, \"auto\": %.3f}",
                        w ? "step" : "once", f16[t][0][w], f16[t][1][w], f16[t][2][w]);
            fprintf(js, "}");
        }
        fprintf(js, "}");
    }
    /* worst |error| / sum |a b| against double, in f32 ulps */
    fprintf(js, ",\n  \"f16_error_ulps\": [");
    for (int e = 0; e < N_ERR_K; e++) {
        fprintf(js, "%s{\"K\": %lld, \"widen\": %.3f, \"split\": ", e ? ", " : "", (long long)err_k[e],
                err[e][0] * 0x1p24);
        json_num(js, err[e][1] * 0x1p24);
        fprintf(js, ", \"three_term_dropped\": %.3f}", err[e][2] * 0x1p24);
    }
    fprintf(js, "]\n}\n");
    fclose(js);
    printf("\nwrote %s\n", path);
}

#define MAX_SIZES 8

/* --few-rows: bf16 x bf16^T -> bf16 products of 1 to 12 rows (a decode
 * step's linears, `ampc generate`) on 1 thread, the gemv path
 * (gemm_bf16_set_gemv_rows) against the blocked kernel that packs B, for
 * the widths of the default gpt (128) and of the 6-layer width-384 one:
 * microseconds per product, best of reps; beside them gemm_f32's one-row
 * product as AUTO runs it. */
static void few_rows(int reps)
{
    const int64_t nk[][2] = {{384, 128}, {512, 128}, {128, 512}, {1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};
    const route r = {CPU_LIB_OWN, GEMM_BF16_AUTO, true, false, GEMM_F16_AUTO};
    printf("few-row bf16 products (B transposed, bf16 C, 1 thread), us per product: blocked / gemv;\n"
           "f32 M=1: gemm_f32 (AUTO: oneDNN or ampc's kernel) on the same shape\n");
    printf("%6s %6s %9s", "N", "K", "f32 M=1");
    for (int m = 1; m <= 12; m++)
        printf("       M=%-2d       ", m);
    printf("\n");
    for (size_t s = 0; s < sizeof nk / sizeof nk[0]; s++) {
        operands o = operands_new(12 * nk[s][1], nk[s][0] * nk[s][1], 12 * nk[s][0], nk[s][0]);
        const route r32 = {CPU_LIB_AUTO, GEMM_BF16_AUTO, false, false, GEMM_F16_AUTO};
        const shape one = {false, true, 1, nk[s][0], nk[s][1], false, CPU_ACT_NONE, false};
        printf("%6lld %6lld %9.2f", (long long)nk[s][0], (long long)nk[s][1],
               1e6 * flops(&one) / 1e9 / time_route(&r32, &one, &o, 1, reps));
        for (int64_t m = 1; m <= 12; m++) {
            const shape sh = {false, true, m, nk[s][0], nk[s][1], false, CPU_ACT_NONE, false};
            double us[2];
            for (int g = 0; g < 2; g++) {
                gemm_bf16_set_gemv_rows(g ? 12 : 0);
                us[g] = 1e6 * flops(&sh) / 1e9 / time_route(&r, &sh, &o, 1, reps);
            }
            if (m <= 8)
                printf("  %6.2f / %6.2f", us[0], us[1]);
            else
                printf("  %6.2f /    -  ", us[0]);
        }
        printf("\n");
        operands_free(&o);
    }
    gemm_bf16_set_gemv_rows(8);
    printf("(gemv path: %s)\n", gemm_bf16_kernel_name());
}

int main(int argc, char **argv)
{
    int reps = 5;
    int64_t max_n = 2048;
    bool shapes = true;
    const char *json = "bench_gemm.json";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-n") && i + 1 < argc)
            max_n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--no-shapes"))
            shapes = false;
        else if (!strcmp(argv[i], "--f16-only"))
            f16_only = true;
        else if (!strcmp(argv[i], "--few-rows")) {
            few_rows(reps);
            return 0;
        }
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--reps N] [--max-n N] [--no-shapes] [--f16-only] [--json PATH] [--few-rows]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    double load0[3], load1[3];
    read_load(load0);
    unsigned f = amp_cpu_features();
    bool dot_ok = (f & AMP_CPU_AVX512BF16) != 0, amx_ok = false;
#if defined(__x86_64__)
    amx_ok = dot_ok && gemm_amx_usable();
#endif
    printf("load average %.2f %.2f %.2f (a shared machine: figures are noisy; best of %d)\n", load0[0], load0[1],
           load0[2], reps);
    const bool no_engine = !onednn_available() && strncmp(onednn_version(), "none", 4) != 0;
    printf("f32 kernel: %s; bf16 x bf16 by default: %s; %s%s\nf16 x f16 by default: %s\n\n", gemm_kernel_name(),
           gemm_bf16_kernel_name(), onednn_version(), no_engine ? " (its CPU engine could not be made)" : "",
           gemm_f16_kernel_name());

    /* peaks[kind][threads - 1], measured now and again after the GEMMs
     * (the best of both: other work on the machine only lowers them) */
    double peaks[3][2] = {{0}};
    measure_peaks(peaks, f, dot_ok, amx_ok);

    /* gflops[size][threads - 1][run] */
    static double gflops[MAX_SIZES][2][N_RUNS];
    int64_t sizes[MAX_SIZES];
    int n_sizes = 0;
    printf("\nGFLOP/s as measured:\n");
    for (int64_t n = 256; n <= max_n && n_sizes < MAX_SIZES; n *= 2) {
        sizes[n_sizes] = n;
        operands o = operands_new(n * n, n * n, n * n, 1);
        const shape s = {false, false, n, n, n, false, CPU_ACT_NONE, false};
        int r = n >= 2048 ? (reps + 1) / 2 : reps; /* the big ones are steadier */
        for (int nt = 1; nt <= 2; nt++) {
            printf("  n %5lld, %d thread%s:", (long long)n, nt, nt > 1 ? "s" : " ");
            for (int k = 0; k < N_RUNS; k++) {
                gflops[n_sizes][nt - 1][k] = skip_run(k) ? 0 : time_route(&run_route[k], &s, &o, nt, r);
                if (gflops[n_sizes][nt - 1][k] > 0)
                    printf(" %s %.0f", run_names[k], gflops[n_sizes][nt - 1][k]);
                else
                    printf(" %s -", run_names[k]);
            }
            printf("\n");
            fflush(stdout);
        }
        operands_free(&o);
        n_sizes++;
    }

    printf("\npeaks again:\n");
    measure_peaks(peaks, f, dot_ok, amx_ok);
    read_load(load1);

    printf("\nGFLOP/s (%% of the peak of the path's instruction on as many threads: FMA for f32 and widen,\n"
           "VDPBF16PS for dot, TDPBF16PS for amx, bf16 oneDNN and f16 split, which does 4 bf16 products per\n"
           "f16 multiply-add); load average now %.2f\n", load1[0]);
    printf("%5s %3s", "n", "thr");
    for (int k = 0; k < N_RUNS; k++)
        printf(" %17s", run_names[k]);
    printf("\n");
    for (int s = 0; s < n_sizes; s++)
        for (int nt = 1; nt <= 2; nt++) {
            printf("%5lld %3d", (long long)sizes[s], nt);
            for (int k = 0; k < N_RUNS; k++) {
                double gf = gflops[s][nt - 1][k], pk = peaks[run_peak[k]][nt - 1];
                if (k == RUN_BF16_AUTO && amx_ok) /* the default bf16 path is AMX's there */
                    pk = peaks[PEAK_AMX][nt - 1];
                if (gf > 0)
                    printf("  %6.0f (%5.1f%%)", gf, pk > 0 ? 100.0 * run_work[k] * gf / pk : 0.0);
                else
                    printf(" %17s", "-");
            }
            printf("\n");
        }

    /* after the square table: it prints as it goes */
    static step_gemm g[MAX_STEP_GEMMS];
    static shape_result res[2][MAX_STEP_GEMMS];
    double totals[2][2][3][2], f16[2][3][2], err[N_ERR_K][3];
    int n_g = shapes ? model_gemms(g) : 0;
    for (int nt = 1; nt <= 2 && n_g; nt++)
        model_shapes(g, n_g, nt, reps, res[nt - 1], totals[nt - 1], f16[nt - 1]);
    f16_accuracy(err);

    write_json(json, load0, load1, reps, peaks, n_sizes, sizes, gflops, g, n_g, res, totals, f16, err);
    amp_set_num_threads(0);
    return 0;
}
