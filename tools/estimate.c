/*
 * estimate.c - how much memory a training run will need at its peak,
 * computed from its settings and its data's shapes alone: no model is
 * built, nothing of the model's size is allocated.
 *
 * Where the peak is. An op's result lives in the thread's temporary pool
 * until amp_temps_free (after each micro-batch's backward), and the graph
 * keeps each node's inputs and saved tensors until the end of backward,
 * when it frees them all at once; a node's output gradient goes as soon as
 * its node's backward has run (autograd/graph.c). From the second step on,
 * the optimizer's state is there too. So the peak is in a micro-batch's
 * backward:
 *
 *   data + parameters + optimizer state                (persistent)
 * + every forward result and saved tensor              "activations"
 * + the node gradients made and not yet consumed       "activation gradients"
 * + the parameters' gradients made so far (f32)        "gradients"
 * + under autocast, each lowered weight's cached 16-bit
 *   copy, and the running op's casts' gradients        "16-bit weight copies"
 *
 * The memory levers (--param-dtype, --optim-state): a lowered op's weight
 * stored in 16 bits (linear and conv weights and biases; not norms, not
 * embedding tables, not the GPT's tied wte: amp_module_to_dtype) takes 2
 * bytes, its gradient 2, and no cached copy; the optimizer adds its f32
 * master (4 bytes, counted with the parameters). An f16 weight's gradient
 * is widened to f32 when the grad scaler unscales it, after backward, so
 * the gradients are counted at 4 bytes there (the peak of the unscale,
 * which with f16 weights can pass backward's; 2 bytes a weight too many
 * in backward). bf16 optimizer state takes 2 bytes an element per slot
 * instead of 4.
 * + the scratch of the op whose backward is running    "workspace"
 *
 * The forward is written down op by op as the models call them
 * (nn/models.c, nn/gpt.c) and walked backward from the last op, taking the
 * most all of this holds at once (the table shows all the parameters'
 * gradients, the node gradients there at the peak and, as workspace, what
 * the peak holds beyond that). An op's gradient is made by the next op's
 * backward unless made_by says which (a tensor read twice: the one
 * backward meets first).
 * What each op keeps follows ops/: a Linear or Conv2d followed by a ReLU
 * is one op keeping its output; under autocast
 * a lowered op's non-leaf input is cast by a `to` node (a copy, with a
 * gradient), a weight once per forward (the cast cache); layer_norm keeps
 * mean and rstd [rows] f32, attention its log-sum-exp [B, heads, T] f32,
 * max_pool2d its argmax (i32), cross_entropy [rows, 2] f32 and, under
 * autocast (an fp32 op), an f32 copy of the logits; reshape is a view whose
 * gradient is its result's, not a copy; permute copies (the GPT's heads are views:
 * attention reads q, k, v in place from the qkv linear's [B, T, 3, H, d]
 * result and writes its one gradient). Every allocation is rounded up
 * to the caching allocator's size class (base/memory.c: 64-byte steps to
 * 4 KiB, then four classes per power of two), as amp_memory_get_stats
 * counts them.
 *
 * With gpt --checkpoint-activations each block's ops are written down
 * and then folded (checkpointed): the forward keeps the block's result
 * only, and the block's backward holds its recompute and a walk of the
 * block's own backward on top of the rest; the evaluation holds one
 * block's results at a time.
 *
 * The evaluation after training keeps a whole no-grad forward of its batch
 * in the pool (128 test images for mlp / cnn): for a small --batch that is
 * the peak, and the estimate says so.
 *
 * Not exact: the scratch (each op's largest, for the thread count given;
 * oneDNN's scratchpad only where measured: its f32 weight-gradient GEMM and
 * blocked-layout copies), small tensors (scalars, positions; node records
 * are malloc'd outside the allocator) and --device cuda (not measured on a
 * GPU: docs/memory.md). tests/test_cli_memory.c holds the estimate to
 * within MEM_TOLERANCE of the measured peak for the three models in each
 * precision; docs/memory.md has the measurements.
 */
#include "estimate.h"

#include "base/env.h"

#include <stdlib.h>
#include <string.h>

/* cuBLASLt's one workspace, made at the first GEMM and kept
 * (backend/cuda/gemm.cu's WORKSPACE). */
#define CUBLASLT_WORKSPACE ((uint64_t)32 << 20)

/* One op of the forward, for the walk through backward: the gradient of
 * its output (g: made by the backward of op `by`, its consumer that
 * backward meets first, 0 for the next op; freed once its own backward
 * has run), the parameter gradients its backward makes (p: beside its
 * scratch; under autocast the gradient of the weight's 16-bit copy, q,
 * and the f32 .grad comes after, pa, from the cast's own backward, which
 * frees q) and its scratch. */
typedef struct {
    uint64_t g, p, q, pa, w;
    uint64_t ra, rc; /* a checkpointed block's record: the recompute's results and 16-bit copies, in w */
    size_t by;
    bool ck; /* a checkpointed block: w holds its input's gradient too */
} op_rec;

typedef struct {
    uint64_t acts;      /* forward results and saved tensors */
    uint64_t casts;     /* autocast's 16-bit weight copies (not their gradients) */
    uint64_t leaf;      /* the parameters (f32), one tensor each: also their gradients' size */
    uint64_t leaf_max;  /* the largest of them */
    uint64_t fwd_peak;  /* evaluation: the most results + one op's scratch at once */
    uint64_t grads_all; /* training: every gradient (all records' g, p and pa) */
    op_rec *ops;        /* training: the forward's ops in order */
    size_t n, cap;
    bool failed;        /* out of memory for ops: grads_all stands in for the walk */
    bool low;           /* autocast: lowered ops run in 16 bits */
    bool f16;           /* ... in float16 */
    bool cuda;
    bool onednn;        /* oneDNN runs the GEMMs and convolutions it takes */
    bool eval;          /* the evaluation pass: no grad, no saved tensors, forward scratch */
    bool ckpt;          /* gpt --checkpoint-activations: each block through amp_checkpoint */
    int threads;
    bool p16;           /* --param-dtype bf16 / fp16: lowered ops' weights stored in 16 bits */
    int state_es;       /* --optim-state: bytes of an optimizer state element */
    uint64_t masters;   /* the f32 masters of 16-bit parameters */
    uint64_t widened;   /* f16 parameters: their gradients widened to f32, beyond the f16 size */
    uint64_t state;     /* one optimizer state slot over every parameter */
    int64_t *numel;     /* each parameter's elements, in the order declared (DDP's buckets) */
    size_t n_params, cap_params;
} tape;

uint64_t mem_block(uint64_t n)
{
    /* base/memory.c's size classes */
    if (n <= 4096)
        return n ? (n + 63) / 64 * 64 : 64;
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^e < n <= 2^(e+1) */
    uint64_t base = (uint64_t)1 << e, step = base / 4;
    return base + (n - base + step - 1) / step * step;
}

/* The device allocator's classes (backend/cuda/runtime.cu): 512-byte steps
 * to 1 MiB, then four per power of two. */
static uint64_t dev_block(uint64_t n)
{
    if (n <= ((uint64_t)1 << 20))
        return n ? (n + 511) / 512 * 512 : 512;
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1));
    uint64_t base = (uint64_t)1 << e, step = base / 4;
    return base + (n - base + step - 1) / step * step;
}

/* numel elements of es bytes, as the allocator of the tape's device takes them. */
static uint64_t bytes_of(const tape *t, int64_t numel, int es)
{
    uint64_t n = (uint64_t)numel * (uint64_t)es;
    return t->cuda ? dev_block(n) : mem_block(n);
}

static uint64_t blk(const tape *t, uint64_t n) { return t->cuda ? dev_block(n) : mem_block(n); }

/* Starts the next op (training); its record. In evaluation (no records)
 * or when records could not be had, a scratch record that nothing reads. */
static op_rec *op(tape *t)
{
    static _Thread_local op_rec spare;
    if (t->eval || t->failed)
        return memset(&spare, 0, sizeof spare);
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        op_rec *v = realloc(t->ops, cap * sizeof *v);
        if (!v) {
            t->failed = true;
            return memset(&spare, 0, sizeof spare);
        }
        t->ops = v;
        t->cap = cap;
    }
    return memset(&t->ops[t->n++], 0, sizeof *t->ops);
}

/* The current op's record (or the scratch one, as op). */
static op_rec *cur(tape *t)
{
    static _Thread_local op_rec spare;
    return t->n && !t->eval && !t->failed ? &t->ops[t->n - 1] : memset(&spare, 0, sizeof spare);
}

/* The gradient of op i (an index of t->ops) is made first by the
 * backward of op j (the current op when j is t->n - 1). */
static void made_by(tape *t, size_t i, size_t j)
{
    if (!t->eval && !t->failed && i < t->n)
        t->ops[i].by = j;
}

/* The node gradients there while op j's backward runs, of ops lo..j:
 * those made by j or by an op after it, not yet freed (op j's own, its
 * inputs' being made, and those waiting for their op's backward) - less
 * its inputs' when j is a checkpointed block's (counted in its w). */
static uint64_t live(const tape *t, size_t lo, size_t j)
{
    uint64_t g = 0;
    for (size_t i = lo; i <= j; i++) {
        const size_t by = t->ops[i].by ? t->ops[i].by : i + 1;
        if (by > j || (by == j && !t->ops[j].ck))
            g += t->ops[i].g;
    }
    return g;
}

/* The current op's scratch. In evaluation the forward's results pile up,
 * and what counts is the results so far plus this op's scratch. */
static void work(tape *t, uint64_t bytes)
{
    if (t->eval && t->acts + bytes > t->fwd_peak)
        t->fwd_peak = t->acts + bytes;
    op_rec *r = cur(t);
    if (bytes > r->w)
        r->w = bytes;
}

/* The current op's result of numel elements of es bytes, and its gradient
 * when it is on the path from the parameters to the loss. */
static void result(tape *t, int64_t numel, int es, bool grad)
{
    t->acts += bytes_of(t, numel, es);
    if (grad && !t->eval) {
        cur(t)->g += bytes_of(t, numel, es);
        t->grads_all += bytes_of(t, numel, es);
    }
}

/* reshape / flatten: a view of the op before it, whose backward hands on
 * its result's gradient as a view too; autograd frees that result's
 * gradient before adding the view in, so it is kept, not copied: the
 * input's gradient is the memory the view's consumer (the next op) made. */
static void view(tape *t)
{
    op(t);
    made_by(t, t->n - 2, t->n);
}

/* A tensor kept for backward only. */
static void saved(tape *t, uint64_t bytes)
{
    if (!t->eval)
        t->acts += bytes;
}

/* A parameter of numel elements (f32), whose .grad the current op's
 * backward makes (a parameter read twice, the GPT's wte, is declared at the
 * use backward meets first); read by a lowered op (lowered), under
 * autocast through its cached 16-bit copy, whose cast has a gradient too -
 * unless it is stored in 16 bits (can16 and --param-dtype): then it and
 * its gradient take 2 bytes, no copy, and the optimizer's f32 master 4. */
static void param_as(tape *t, int64_t numel, bool lowered, bool can16)
{
    op_rec *r = cur(t);
    const bool p16 = can16 && t->p16;
    const bool cast = lowered && t->low && !p16;
    const uint64_t b = bytes_of(t, numel, p16 ? 2 : 4);
    if (p16)
        t->masters += bytes_of(t, numel, 4);
    if (p16 && t->f16)
        t->widened += bytes_of(t, numel, 4) - b;
    t->state += bytes_of(t, numel, t->state_es);
    if (t->n_params == t->cap_params) {
        size_t cap = t->cap_params ? 2 * t->cap_params : 64;
        int64_t *grown = realloc(t->numel, cap * sizeof *grown);
        if (grown)
            t->numel = grown, t->cap_params = cap;
    }
    if (t->n_params < t->cap_params)
        t->numel[t->n_params++] = numel;
    t->leaf += b;
    t->leaf_max = b > t->leaf_max ? b : t->leaf_max;
    *(cast ? &r->pa : &r->p) += b;
    t->grads_all += b;
    if (cast) {
        t->casts += bytes_of(t, numel, 2);
        r->q += bytes_of(t, numel, 2);
        t->grads_all += bytes_of(t, numel, 2);
    }
}

static void param(tape *t, int64_t numel, bool lowered) { param_as(t, numel, lowered, lowered); }

/* The input of a lowered op, *es bytes each: cast to 16 bits by a `to`
 * node unless it is already. */
static void lower_input(tape *t, int64_t numel, int *es, bool grad)
{
    if (t->low && *es != 2) {
        op(t);
        result(t, numel, 2, grad);
        *es = 2;
    }
}

/* The activation fused into a linear: none, relu (nn's Linear + ReLU)
 * or gelu (the GPT's fc1). */
enum { ACT_NONE, ACT_RELU, ACT_GELU };

/* linear(x [rows, in]) -> [rows, out], its activation fused: the relu
 * keeps its output, the gelu its pre-activation too (when training). */
static void linear(tape *t, int64_t rows, int64_t in, int64_t out, bool bias, int act, int *es, bool in_grad)
{
    lower_input(t, rows * in, es, in_grad);
    op(t);
    param(t, in * out, true);
    if (bias)
        param(t, out, true);
    result(t, rows * out, *es, true);
    if (act == ACT_GELU && !t->eval) /* the pre-activation, kept for backward only */
        result(t, rows * out, *es, false);
    if (t->eval)
        return;
    /* backward: dY through the fused activation first (a new tensor),
     * then on the CPU the weight gradient's GEMM: oneDNN's scratchpad for
     * an f32 one, a packed dY panel of rows x min(out, 512) floats
     * (measured with oneDNN 2.6, not documented), or f16's dY^T widened to
     * f32 (the split f16 kernel does without: a bound); then the bias
     * gradient's partial sums (and 16-bit rows widened per thread). On
     * cuda the GEMMs use cuBLASLt's one workspace (counted once). */
    const uint64_t masked = act != ACT_NONE ? bytes_of(t, rows * out, *es) : 0;
    if (t->cuda) {
        work(t, masked);
        return;
    }
    uint64_t dw = 0;
    if (t->onednn && *es == 4)
        dw = bytes_of(t, rows * (out < 512 ? out : 512), 4);
    if (t->f16)
        dw = bytes_of(t, rows * out, 4);
    uint64_t rb = rows / 64 > 32 ? (uint64_t)rows / 64 : 32, nrb = ((uint64_t)rows + rb - 1) / rb;
    uint64_t db = blk(t, (nrb * (uint64_t)out + (uint64_t)out) * 4) + (*es == 2 ? bytes_of(t, t->threads * out, 4) : 0);
    work(t, masked + (dw > db ? dw : db));
}

/* The cross-entropy on logits [rows, classes]. */
static void cross_entropy(tape *t, int64_t rows, int64_t classes, int es)
{
    if (es != 4) { /* an fp32 op under autocast: an f32 copy of the logits */
        op(t);
        result(t, rows * classes, 4, true);
    }
    op(t);
    saved(t, bytes_of(t, rows * 2, 4)); /* max and logsumexp per row */
    t->acts += 3 * bytes_of(t, 1, 4);   /* the loss scalars (on cuda, the count) */
    if (!t->cuda)
        work(t, bytes_of(t, rows, 8) + bytes_of(t, t->threads * 2 * classes, 4));
}

/* Images whose oneDNN blocked copies exist at once in a forward or
 * input-gradient pass: those passes run split over the batch on the pool
 * (onednn_conv.c: chunks of N / (4 threads), one a thread), unless
 * AMPC_ONEDNN_SPLIT=0 or one thread. */
static int64_t split_images(const tape *t, int64_t N)
{
    const char *e = getenv("AMPC_ONEDNN_SPLIT");
    if (t->threads < 2 || N < 2 || (e && e[0] == '0'))
        return N;
    const int64_t parts = 4 * (int64_t)t->threads, chunk = (N + parts - 1) / parts;
    const int64_t busy = chunk * t->threads;
    return busy < N ? busy : N;
}

/* conv2d 3x3 pad 1 (stride 1), [N, C, H, W] -> [N, O, H, W], its relu
 * fused. Backward first masks dY by the relu (a copy), then on the CPU
 * runs oneDNN's passes where it takes them (conv.c, onednn_conv.c: all
 * but bf16 with fewer than 8 input channels), whose inputs in a blocked
 * layout are copied into scratch (dY always here, x for the weight pass
 * when C is a multiple of 16; the forward and input-gradient passes a
 * chunk of the batch at a time, split_images), and an f16 pass on f32 copies of its
 * operands; or ampc's own kernels, with per-thread column scratch of
 * about 1 MiB a thread (conv.c's plan_make). */
static void conv3x3(tape *t, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int *es, bool in_grad)
{
    lower_input(t, N * C * H * W, es, in_grad);
    op(t);
    param(t, O * C * 9, true);
    param(t, O, true);
    result(t, N * O * H * W, *es, true);
    if (t->cuda) {
        /* backend/cuda/conv.c: im2col workspace for as many images as fit
         * in 256 MiB, beside the relu-masked dY */
        const double ces = *es, ckk = (double)C * 9, l = (double)H * (double)W, budget = 256.0 * 1024 * 1024;
        double per = t->eval ? ckk * l * ces + (double)O * l * 4
                             : (double)O * l * ces + ckk * l * ces + (in_grad ? ckk * l * 4 : 0);
        int64_t cnt = (int64_t)(budget / per);
        cnt = cnt < 1 ? 1 : cnt > N ? N : cnt;
        double ws = t->eval ? ckk * l * ces * cnt + (double)O * l * 4 * cnt
                            : (cnt > 1 ? (double)O * l * ces * cnt : 0) + ckk * l * ces * cnt +
                                  (in_grad ? ckk * l * 4 * cnt : 0) + (*es != 4 ? (double)O * ckk * 4 : 0);
        work(t, blk(t, (uint64_t)ws) + (t->eval ? 0 : bytes_of(t, N * O * H * W, *es)));
        return;
    }
    const int64_t nx = N * C * H * W, ny = N * O * H * W, nw = O * C * 9;
    const uint64_t masked = t->eval ? 0 : bytes_of(t, ny, *es);
    const int64_t sn = split_images(t, N); /* images of the split passes' blocked copies */
    if (t->eval && t->onednn && !(*es == 2 && !t->f16 && C < 8)) { /* the forward pass */
        const int ces = t->f16 || *es == 4 ? 4 : 2;
        work(t, bytes_of(t, ny / N * sn, ces) + (C % 16 == 0 ? bytes_of(t, nx / N * sn, ces) : 0) +
                    (t->f16 ? bytes_of(t, nx, 4) + bytes_of(t, nw, 4) + bytes_of(t, ny, 4) : 0));
        return;
    }
    if (t->onednn && !(*es == 2 && !t->f16 && C < 8)) {
        const int ces = t->f16 || *es == 4 ? 4 : 2;
        uint64_t wpass = bytes_of(t, ny, ces) + (C % 16 == 0 ? bytes_of(t, nx, ces) : 0);
        uint64_t dpass = in_grad ? bytes_of(t, ny / N * sn, ces) : 0;
        if (t->f16) {
            wpass += bytes_of(t, nx, 4) + bytes_of(t, ny, 4) + bytes_of(t, nw, 4);
            dpass += in_grad ? bytes_of(t, ny, 4) + bytes_of(t, nw, 4) + bytes_of(t, nx, 4) : 0;
        }
        work(t, masked + (wpass > dpass ? wpass : dpass));
        return;
    }
    const double ces = *es == 2 && !t->f16 ? 2 : 4, ckk = (double)C * 9, l = (double)H * (double)W;
    const int64_t share = (N + t->threads - 1) / t->threads;
    double per = t->eval ? ckk * l * ces + (double)O * l * 4 : ckk * l * (ces + (in_grad ? 4 : 0)) + (double)O * l * ces;
    int64_t cnt = (int64_t)((double)(1 << 20) / per);
    cnt = cnt > share ? share : cnt < 1 ? 1 : cnt;
    double slice = (double)cnt * per + (*es == 2 ? 4 * (double)C * l : 0) + 4 * (double)O * ckk + 8 * (double)O;
    work(t, masked + blk(t, (uint64_t)(slice * t->threads)));
}

/* max_pool2d(2): [N, C, H, W] -> [N, C, H/2, W/2], keeping the argmax. */
static void max_pool(tape *t, int64_t N, int64_t C, int64_t H, int64_t W, int es)
{
    int64_t n = N * C * (H / 2) * (W / 2);
    op(t);
    result(t, n, es, true);
    saved(t, bytes_of(t, n, 4)); /* the argmax */
}

static void mlp(tape *t, const train_opts *o, const run_info *ri, int64_t B)
{
    int es = 4;
    int64_t in = ri->features;
    for (int i = 0; i < o->n_hidden; i++) {
        linear(t, B, in, o->hidden[i], true, ACT_RELU, &es, i > 0);
        in = o->hidden[i];
    }
    linear(t, B, in, ri->classes, true, ACT_NONE, &es, o->n_hidden > 0);
    cross_entropy(t, B, ri->classes, es);
}

static void cnn(tape *t, const run_info *ri, int64_t B)
{
    int es = 4;
    const int64_t H = ri->height, W = ri->width;
    conv3x3(t, B, ri->channels, H, W, 32, &es, false);
    max_pool(t, B, 32, H, W, es);
    conv3x3(t, B, 32, H / 2, W / 2, 64, &es, true);
    max_pool(t, B, 64, H / 2, W / 2, es);
    const int64_t f = 64 * (H / 4) * (W / 4);
    view(t);
    linear(t, B, f, 128, true, ACT_RELU, &es, true);
    linear(t, B, 128, ri->classes, true, ACT_NONE, &es, true);
    cross_entropy(t, B, ri->classes, es);
}

/* [rows, W] f32 layer_norm (NONE on the CPU, fp32 on cuda: f32 in, f32 out), its weight and, with bias, its bias. */
static void layer_norm(tape *t, int64_t rows, int64_t W, bool bias)
{
    op(t);
    param(t, W, false);
    if (bias)
        param(t, W, false);
    result(t, rows * W, 4, true);
    if (t->cuda) { /* mean and rstd, for backward only */
        saved(t, 2 * bytes_of(t, rows, 4));
        return;
    }
    t->acts += 2 * bytes_of(t, rows, 4); /* mean and rstd (made in evaluation too) */
    work(t, bytes_of(t, t->threads * (2 * W + 1), 4) + bytes_of(t, 64 * 2 * W, 8));
}

/* A block run through amp_checkpoint, from the tape's figures before the
 * block (acts0, casts0, leaf0, fwd0: evaluation's most so far, the figure
 * reset to 0 for the block). Either way only the block's result (keep
 * bytes) and its 16-bit weight copies (autocast keeps them on the
 * weights, ops/autocast.c) outlive the block: fn's other results are
 * freed when it returns. In
 * evaluation that is all; in training its records [start, n) become one.
 * The block's
 * backward recomputes it (its results and saved tensors again, ra; the
 * kept 16-bit weight copies are reused, rc = 0) and walks the block's own backward inside, as
 * run_tape walks a model's, beside the block's output gradient (the
 * engine frees it after the block's backward); the walk's node gradients
 * and 16-bit copies' gradients go as it goes, the parameters' f32
 * gradients stay (pa), and its input's gradient (the previous record's)
 * is in the block's w: the outer walk does not count it again (ck). */
static void checkpointed(tape *t, size_t start, uint64_t acts0, uint64_t casts0, uint64_t leaf0, uint64_t fwd0,
                         uint64_t keep)
{
    if (t->eval) {
        const uint64_t block = t->fwd_peak + (t->casts - casts0);
        t->fwd_peak = block > fwd0 ? block : fwd0;
        t->acts = acts0 + keep;
        return;
    }
    if (t->failed || t->n <= start)
        return;
    /* the block input's gradient (the detached input's .grad, handed to
     * the engine as the block's input gradient) is the previous record's */
    const size_t lo = start > 0 ? start - 1 : start;
    const uint64_t prev = start > 0 ? t->ops[start - 1].g : 0;
    uint64_t p = 0, most = 0;
    for (size_t i = t->n; i-- > start;) {
        const op_rec *r = &t->ops[i];
        const uint64_t during = live(t, lo, i) + p + r->p + r->q;
        const uint64_t w = r->w > r->pa ? r->w : r->pa;
        if (during + w > most)
            most = during + w;
        p += r->p + r->pa;
    }
    if (prev + p > most) /* the inner backward's end */
        most = prev + p;
    op_rec c = {.g = t->ops[t->n - 1].g, .pa = t->leaf - leaf0, .ra = t->acts - acts0, .rc = 0, .ck = true};
    c.w = c.ra + c.rc + most;
    t->ops[start] = c;
    t->n = start + 1;
    if (start > 0)
        t->ops[start - 1].by = start;
    t->acts = acts0 + keep;
    (void)casts0;
}

static void gpt(tape *t, const train_opts *o, const run_info *ri, int64_t B)
{
    const int64_t T = o->context, W = o->width, M = o->mlp_width, V = ri->vocab, H = o->heads, R = B * T;
    const bool drop = o->dropout > 0;
    t->acts += bytes_of(t, T, 8); /* the positions */
    op(t); /* wte[idx]: its dense [V, W] gradient is added into wte.grad (made by the head's) */
    result(t, R * W, 4, true);
    work(t, bytes_of(t, V * W, 4));
    op(t); /* wpe[0..T) */
    param(t, T * W, false);
    result(t, T * W, 4, true);
    op(t);
    result(t, R * W, 4, true); /* their sum */
    made_by(t, t->n - 3, t->n - 1); /* wte[idx]'s gradient, beside wpe's backward */
    for (int64_t l = 0; l < o->layers; l++) {
        const size_t start = t->n;
        const uint64_t acts0 = t->acts, casts0 = t->casts, leaf0 = t->leaf, fwd0 = t->fwd_peak;
        if (t->ckpt)
            t->fwd_peak = 0;
        layer_norm(t, R, W, !o->no_bias);
        /* q, k, v: one linear qkv [R, 3 W] viewed as [B, T, 3, H, d] (no
         * copy), which the attention reads in place; its backward writes
         * the one [R, 3 W] gradient (op_attention_qkv). */
        int es = 4;
        linear(t, R, W, 3 * W, !o->no_bias, ACT_NONE, &es, true);
        view(t);
        es = t->low ? 2 : 4;
        op(t);
        result(t, R * W, es, true);       /* attention, [B, T, H, d] */
        saved(t, bytes_of(t, B * H * T, 4)); /* its log-sum-exp */
        const int64_t heads = B * H, tt = T * T, D = W / H;
        if (t->cuda) { /* backend/cuda/linalg.c: the scores [heads, T, T] in f32, P in 16 bits beside them;
                        * backward: S, P, dP, and dS in 16 bits; around them ops/attention.c's
                        * [B, H, T, d] copies (q, k, v, out; backward also dO, O, dq, dk, dv) */
            const uint64_t S = bytes_of(t, heads * tt, 4), P = es == 2 ? bytes_of(t, heads * tt, 2) : 0;
            const uint64_t cp = bytes_of(t, R * W, es);
            work(t, t->eval ? S + P + 4 * cp : 2 * S + 2 * P + 8 * cp);
        } else { /* backend/cpu/attention.c (its f32 sizes, the larger): 64 x 64 tiles; forward: K and V
                  * packed per call plus a tile's scratch per thread; backward: per thread a head's
                  * packed K, V and f32 dK, dV plus its tiles */
            const int64_t bq = 64, nt = (T + bq - 1) / bq, Dp = (D + 15) / 16 * 16;
            const int64_t kw = D * bq, vw = bq * Dp, tasks = heads * nt;
            const int64_t fw = tasks < t->threads ? tasks : t->threads, bw = heads < t->threads ? heads : t->threads;
            const uint64_t fslot = (uint64_t)(bq * (D + 2) + 2 * bq * bq + bq * Dp + 4 * bq + 2 * (Dp + bq) + 32) * 4;
            const uint64_t bslot = (uint64_t)(nt * (2 * kw + vw) + 2 * bq * (D + 2) + 2 * bq * Dp + 5 * bq * bq +
                                              bq * Dp + 2 * T * Dp + 3 * bq + 2 * (Dp + bq) + 32) * 4;
            const uint64_t fwd = blk(t, (uint64_t)(tasks * (kw + vw)) * 4 + (uint64_t)fw * ((fslot + 63) / 64 * 64));
            const uint64_t bwd = blk(t, (uint64_t)bw * ((bslot + 63) / 64 * 64));
            work(t, t->eval || fwd > bwd ? fwd : bwd);
        }
        view(t); /* merge heads: reshape */
        linear(t, R, W, W, !o->no_bias, ACT_NONE, &es, true);
        if (drop) {
            op(t);
            result(t, R * W, es, true);
        }
        op(t);
        result(t, R * W, 4, true); /* the residual add (f32) */
        /* the block input's gradient is made by this add, and waits for ln1's backward */
        made_by(t, start - 1, t->n - 1);
        const size_t add1 = t->n - 1;
        layer_norm(t, R, W, !o->no_bias);
        es = 4;
        linear(t, R, W, M, !o->no_bias, ACT_GELU, &es, true);
        linear(t, R, M, W, !o->no_bias, ACT_NONE, &es, true);
        if (drop) {
            op(t);
            result(t, R * W, es, true);
        }
        op(t);
        result(t, R * W, 4, true);
        made_by(t, add1, t->n - 1); /* the first add's gradient: made here, waits for ln2's backward */
        if (t->ckpt)
            checkpointed(t, start, acts0, casts0, leaf0, fwd0, bytes_of(t, R * W, 4));
    }
    layer_norm(t, R, W, !o->no_bias);
    int es = 4;
    /* the head, tied to wte: backward meets it first, so wte.grad is made here */
    lower_input(t, R * W, &es, true);
    op(t);
    param_as(t, V * W, true, false); /* wte: an embedding table, kept f32 */
    result(t, R * V, es, true);
    if (!t->eval && t->onednn && es == 4 && !t->cuda)
        work(t, bytes_of(t, R * (V < 512 ? V : 512), 4));
    if (!t->eval && t->f16 && !t->cuda)
        work(t, bytes_of(t, R * V, 4));
    view(t); /* [B, T, V] -> [B*T, V] */
    cross_entropy(t, R, V, es);
}

/* Parameter elements of the run's model, as amp_model_* builds it. */
int64_t mem_param_count(const train_opts *o, const run_info *ri)
{
    if (strcmp(o->model, "mlp") == 0) {
        int64_t n = 0, in = ri->features;
        for (int i = 0; i < o->n_hidden; i++) {
            n += (in + 1) * o->hidden[i];
            in = o->hidden[i];
        }
        return n + (in + 1) * ri->classes;
    }
    if (strcmp(o->model, "cnn") == 0) {
        int64_t f = 64 * (ri->height / 4) * (ri->width / 4);
        return (ri->channels * 9 + 1) * 32 + (32 * 9 + 1) * 64 + (f + 1) * 128 + (128 + 1) * ri->classes;
    }
    const int64_t W = o->width, M = o->mlp_width;
    return ri->vocab * W + o->context * W + 2 * W + o->layers * (4 * W * W + 2 * W * M + 9 * W + M);
}

static uint64_t tensor_bytes(const amp_tensor *t)
{
    return t ? mem_block((uint64_t)amp_tensor_numel(t) * amp_dtype_size(amp_tensor_dtype(t))) : 0;
}

const char *mem_cat_name(mem_cat c)
{
    static const char *const names[MEM_CATS] = {
        "data",        "parameters",           "gradients", "optimizer state", "16-bit weight copies",
        "activations", "activation gradients", "workspace", "program"};
    return (unsigned)c < MEM_CATS ? names[c] : "?";
}

/* The model's part of a training step's peak (eval = false) or of the
 * evaluation pass's. */
typedef struct {
    uint64_t params, param_max, acts, casts, act_grads, grads, work, total;
    uint64_t masters, state, widened; /* f32 masters; one optimizer state slot; f16 gradients widened */
    uint64_t buckets; /* data-parallel (DDP): the gradient buckets' buffers */
} model_peak;

/* amp_ddp's buffers (dist/ddp.c): the parameters in reverse order, cut
 * into buckets of --bucket-mb MiB of f32 (a parameter never split); each
 * bucket an f32 buffer of its gradients and one flag per parameter, and
 * with --compress a 16-bit copy and the world's 16-bit copies gathered. */
static uint64_t ddp_buckets(const tape *t, const train_opts *o, int world)
{
    const double mb = o->bucket_mb > 0 ? o->bucket_mb : 25;
    const double cap = mb * 1048576.0 / 4.0;
    const bool half = o->compress && strcmp(o->compress, "none") != 0;
    uint64_t total = 0, numel = 0, count = 0;
    for (size_t j = 0; j <= t->n_params; j++) {
        const bool end = j == t->n_params;
        if (count && (end || (double)numel >= cap)) {
            const uint64_t len = numel + count;
            total += bytes_of(t, (int64_t)len, 4);
            if (half)
                total += bytes_of(t, (int64_t)len, 2) + bytes_of(t, (int64_t)len * world, 2);
            numel = count = 0;
        }
        if (!end) {
            numel += (uint64_t)t->numel[t->n_params - 1 - j];
            count++;
        }
    }
    return total;
}

static model_peak run_tape(const train_opts *o, const run_info *ri, int64_t batch, int threads, bool eval)
{
    tape t = {.low = strcmp(o->precision, "fp32") != 0,
              .f16 = strcmp(o->precision, "fp16") == 0,
              .cuda = strcmp(o->device, "cuda") == 0,
              .eval = eval,
              .ckpt = strcmp(o->model, "gpt") == 0 && o->checkpoint_activations,
              .threads = threads > 0 ? threads : 1,
              .p16 = strcmp(o->param_dtype, "fp32") != 0,
              .state_es = strncmp(o->optim_state, "bf16", 4) == 0 ? 2 : 4};
    t.onednn = strstr(amp_cpu_kernels(), "oneDNN") && env_choice(ENV_CPU_LIB, 0) != 1; /* 1: "own" */
    if (strcmp(o->model, "mlp") == 0)
        mlp(&t, o, ri, batch);
    else if (strcmp(o->model, "cnn") == 0)
        cnn(&t, ri, batch);
    else
        gpt(&t, o, ri, batch);
    model_peak m = {.params = t.leaf,
                    .param_max = t.leaf_max,
                    .acts = t.acts,
                    .casts = t.casts,
                    .masters = t.masters,
                    .state = t.state,
                    .widened = t.widened};
    const int world = amp_dist_world_size();
    if (world > 1 && o->zero == 0 && !t.failed)
        m.buckets = ddp_buckets(&t, o, world);
    free(t.numel);
    if (eval) {
        m.work = t.fwd_peak > t.acts ? t.fwd_peak - t.acts : 0;
        m.total = t.acts + t.casts + m.work;
        return m;
    }
    /* Backward, from the last op to the first: during op i's backward the
     * node gradients still there (live: its own, its inputs' being made,
     * those waiting for a later op's backward), the parameter gradients
     * made so far, its own (and its weights' 16-bit copies' gradients) and
     * its scratch. At the end only the parameters' gradients. */
    uint64_t p = 0, most = 0, ra = 0, rc = 0, g = 0, q = 0;
    for (size_t i = t.n; i-- > 0;) {
        const op_rec *r = &t.ops[i];
        const uint64_t gi = live(&t, 0, i), w = r->w > r->pa ? r->w : r->pa;
        if (gi + p + r->p + r->q + w > most) {
            most = gi + p + r->p + r->q + w;
            g = gi;
            q = r->q;
            ra = r->ra; /* a checkpointed block's recompute */
            rc = r->rc;
        }
        p += r->p + r->pa;
    }
    if (p > most) {
        most = p;
        g = q = ra = rc = 0;
    }
    free(t.ops);
    if (t.failed) { /* no walk: the end of backward as it was before node gradients were freed, without scratch */
        p = t.leaf + (t.low ? t.casts : 0);
        g = t.grads_all - p;
        q = p - t.leaf;
        most = t.grads_all;
    }
    /* At the peak: the parameters' gradients (all of them: from the peak
     * on they only grow), the 16-bit copies' gradients of the op running,
     * the node gradients there, and as workspace the rest (as far as the
     * figures before leave room) */
    m.grads = t.leaf;
    uint64_t rest = most > t.leaf ? most - t.leaf : 0;
    q = q < rest ? q : rest;
    m.casts += q;
    rest -= q;
    m.act_grads = g < rest ? g : rest;
    m.work = rest - m.act_grads;
    /* a checkpointed block's recompute at the peak: activations and
     * 16-bit copies, not workspace (as far as there is room) */
    ra = ra < m.work ? ra : m.work;
    rc = rc < m.work - ra ? rc : m.work - ra;
    m.acts += ra;
    m.casts += rc;
    m.work -= ra + rc;
    m.total = t.acts + t.casts + most;
    return m;
}

void mem_estimate_run(const train_opts *o, const run_info *ri, const run_data *rd, int threads, mem_estimate *e)
{
    memset(e, 0, sizeof *e);
    const bool cuda = strcmp(o->device, "cuda") == 0;
    /* a training batch is at most the training set (data.c's batcher) */
    const int64_t batch = rd->gpt ? o->batch : rd->tb.size;
    model_peak t = run_tape(o, ri, batch, threads, false);
    /* Evaluation keeps a whole forward of its batch (EVAL_BATCH test
     * images, or --batch windows) in the pool: without gradients, but with
     * a batch that can be larger than the training one. The parameters'
     * gradients and the optimizer's state are still there. */
    const int64_t eb = rd->gpt ? o->batch : rd->eb.size;
    model_peak ev = run_tape(o, ri, eb, threads, true);
    if (cuda) { /* evaluation's batch on the device, beside the training buffers */
        const uint64_t x = rd->gpt ? 2 * dev_block((uint64_t)(eb * o->context) * 8) : dev_block((uint64_t)(eb * ri->features) * 4);
        ev.acts += x;
        ev.total += x;
    }
    const uint64_t pb = t.params;
    e->params = mem_param_count(o, ri);
    uint64_t *m = cuda ? e->dev : e->host;
    m[MEM_PARAMS] = pb + t.masters;
    /* (each in its parameter's dtype; f16 ones once unscaled in f32; and
     * under mpirun DDP's gradient buckets, made with the ddp and kept) */
    m[MEM_GRADS] = pb + t.widened + t.buckets;
    int slots = strcmp(o->optim, "sgd") == 0 ? o->momentum != 0 : 2;
    m[MEM_OPTIM] = (uint64_t)slots * t.state;
    const model_peak *use = ev.total > t.total ? &ev : &t;
    e->eval_peak = use == &ev;
    e->eval_batch = eb;
    m[MEM_CASTS] = use->casts;
    m[MEM_ACTS] = use->acts;
    m[MEM_ACT_GRADS] = use->act_grads;
    m[MEM_WORK] = use->work;
    if (cuda) {
        /* built on the host, then moved one by one; building one takes
         * as much again for a moment (measured on cudaemu: the largest
         * parameter's size) */
        e->host[MEM_PARAMS] = pb;
        e->host[MEM_WORK] = mem_block(t.param_max);
        e->dev[MEM_WORK] += CUBLASLT_WORKSPACE;
    }

    /* The data as loaded: the library's tensors... */
    uint64_t data = 0, untracked = 0;
    if (rd->gpt) {
        data = 2 * mem_block((uint64_t)(o->batch * o->context) * 8); /* x, y (data_buffers: made after) */
        /* the corpus, malloc'd by text.c (token files are mapped: the page cache's) */
        untracked = rd->text.text ? (uint64_t)amp_text_length(rd->text.text) : 0;
        if (cuda)
            e->dev[MEM_DATA] = 2 * dev_block((uint64_t)(o->batch * o->context) * 8);
    } else {
        const dataset *sets[2] = {&rd->train, &rd->test};
        const batcher *bs[2] = {&rd->tb, &rd->eb};
        for (int i = 0; i < 2; i++) {
            data += tensor_bytes(sets[i]->x) + tensor_bytes(sets[i]->y);
            data += tensor_bytes(bs[i]->x) + tensor_bytes(bs[i]->y) + tensor_bytes(bs[i]->tail_x) +
                    tensor_bytes(bs[i]->tail_y);
        }
        untracked = (uint64_t)rd->train.n * sizeof(int64_t); /* the epoch's order (malloc) */
        if (cuda)
            e->dev[MEM_DATA] = dev_block((uint64_t)(batch * ri->features) * 4) + dev_block((uint64_t)batch * 8);
    }
    e->host[MEM_DATA] = data + untracked;
    e->tracked_data = data;
    for (int c = 0; c < MEM_CATS; c++) {
        e->host_total += e->host[c];
        e->dev_total += e->dev[c];
    }
    e->tracked = e->host_total - untracked;
}
