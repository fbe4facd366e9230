/*
 * ampc_step.c - ampc's training step on the benchmark models, timed as
 * bench/torch_step.py times PyTorch's (same models, batches, optimizers,
 * precisions; median of the timed steps after a warm-up).
 *
 *   ampc_step [--threads N] [--steps N] [--warmup N] [--max-seconds S]
 *             [--models mlp,cnn,gpt,gpt2] [--precisions fp32,bf16,fp16]
 *             [--batch B] [--seq T] [--checkpoint-activations]
 *             [--profile-overhead] [--profile-table] [--anomaly-overhead]
 *             [--breakdown N]
 *
 * gpt2 is GPT-2 124M's shapes (vocab 50257, context 1024, width 768, 12
 * layers of 12 heads, MLP 3072) at batch --batch (default 4) and --seq T
 * tokens (default 1024), each block checkpointed with
 * --checkpoint-activations: bench/gpt2.sh runs it beside PyTorch's
 * GPT2LMHeadModel (bench/torch_gpt2.py). It is not in the default --models
 * (a step takes seconds).
 *
 * Prints one JSON object per line: {"impl": "ampc", "model", "precision",
 * "threads", "step_ms" (the median timed step), "steps" (how many were
 * timed), "warmup" (how many ran before them), "timeboxed" (true when
 * --max-seconds cut either short), "times_ms" (every timed step, in the
 * order they ran, for bench/run.sh to pool rounds), "peak_mb" (the
 * allocator's peak), "cpu_ms" (the median timed step's process CPU time),
 * "rss_mb" (the process's max RSS so far: one cell per process for a
 * per-cell figure)}; gpt2's also "batch", "seq" and "checkpoint".
 *
 * --warmup N (default 3): untimed steps first. --max-seconds S (default 0:
 * no limit): a time box per model and precision, for slow cells: the
 * warm-up stops early once the cell has run S / 3 seconds (at least one
 * warm-up step still runs) and the timed steps once it has run S seconds
 * (at least one timed step still runs), as bench/torch_step.py does.
 *
 * --profile-table: the profiler records the timed steps and prints its
 * table (the top 30 rows) and verdict to stderr after each cell: where a
 * step's time goes.
 *
 * --breakdown N: after the timed steps, N more steps with the profiler on
 * (step_breakdown.h): the record gains "gflop" (the step's FLOPs from the
 * op table's cost functions, / 1e9), "gemm_gflop", "profiled_steps",
 * "profiled_step_ms", "gemm_kernel_ms", "breakdown_ms" (ms per step by
 * kind of work: gemm, attention, elementwise, norm, loss, reduction, pool,
 * embedding, shape, cast, other_ops, optimizer, autograd, other; they add
 * up to profiled_step_ms) and "alloc" ("per_step" allocations, of them
 * "fresh_per_step" new to the allocator, "pair_ns" one cached alloc + free,
 * "est_ms" their product: inside the categories' time).
 *
 * --profile-overhead: the profiler's cost instead (its targets: off
 * under 1% of a step, on under 5%). Per model and precision, blocks of
 * steps with the profiler off and on, interleaved (off, on, off, on ...;
 * --steps blocks of 2 steps each), the median step of each and their
 * ratio, and the median over blocks of each on block's time against the
 * off block just before it ("paired_on_pct": slow drifts of the machine's
 * load cancel); the hooks a step runs (the events one on step records) times the
 * cost of one hook while off (a tight loop of prof_begin, and of a phase
 * begin + end, with the profiler off), as a % of the off step; and the
 * same events times the cost of one recorded event (a tight loop of an
 * op hook's work with the profiler on), an estimate of "on" that a loaded
 * machine's noise does not swamp. Prints {"bench": "profiler", "model",
 * "precision", "off_ms", "on_ms", "on_pct" (medians), "min_off_ms",
 * "min_on_ms", "min_on_pct" (fastest steps), "cpu_off_ms", "cpu_on_ms",
 * "cpu_on_pct" (medians of the process's CPU time per step), "events_per_step",
 * "phases_per_step", "hook_off_ns", "phase_off_ns", "off_pct",
 * "hook_on_ns", "on_est_pct"}.
 *
 * --anomaly-overhead: the anomaly check's cost (amp_anomaly_enable; its
 * target: on at most 1.5x the plain step). Per model and precision,
 * blocks of 2 steps with the check off (no node observer: the plain
 * step) and on, interleaved, each step a pass of its own
 * (amp_anomaly_set_context) in continue mode, so that an fp16 step the
 * scaler skips does not stop the benchmark. Prints {"bench": "anomaly",
 * "model", "precision", "threads", "off_ms", "on_ms" (medians), "ratio"
 * (on / off), "paired_ratio" (the median over blocks of each on block
 * against the off block before it), "steps" (per side)}.
 */
#include <ampc.h>

#include "record/profile.h"
#include "step_breakdown.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* gpt2's batch, tokens per sequence and checkpointing (the options). */
static int64_t g2_batch = 4, g2_seq = 1024;
static bool g2_ckpt;
static bool profile_table; /* --profile-table */
static int breakdown_steps; /* --breakdown */
static double alloc_pair_ns; /* alloc_pair_cost_ns, once per process (--breakdown) */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The process's CPU time in s (all its threads): what a step costs in work,
 * which a loaded machine's waits for a core do not inflate as they do the
 * wall time (with OMP_WAIT_POLICY=PASSIVE idle workers sleep). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    amp_module *net;
    amp_optim *opt;
    amp_tensor *x, *y;
    bool sequence; /* gpt, gpt2: logits [B, T, V] against targets [B, T] */
    int64_t classes; /* labels' range: the vocabulary of a sequence model */
} rig;

static bool make(const char *model, rig *r)
{
    amp_manual_seed(0);
    memset(r, 0, sizeof *r);
    if (strcmp(model, "mlp") == 0) {
        int64_t hidden[2] = {4096, 4096};
        r->net = amp_model_mlp(784, hidden, 2, 10);
        r->x = amp_randn(AMP_SHAPE(256, 784), AMP_F32, 0, 1);
        r->y = amp_zeros(AMP_SHAPE(256), AMP_I64);
    } else if (strcmp(model, "cnn") == 0) {
        r->net = amp_model_cnn(1, 28, 28, 10);
        r->x = amp_randn(AMP_SHAPE(128, 1, 28, 28), AMP_F32, 0, 1);
        r->y = amp_zeros(AMP_SHAPE(128), AMP_I64);
    } else if (strcmp(model, "gpt2") == 0) {
        amp_gpt_config c = {.vocab = 50257, .context = 1024, .width = 768, .layers = 12, .heads = 12,
                            .mlp = 3072, .checkpoint_activations = g2_ckpt};
        r->net = amp_model_gpt(c);
        r->x = amp_zeros(AMP_SHAPE(g2_batch, g2_seq), AMP_I64);
        r->y = amp_zeros(AMP_SHAPE(g2_batch * g2_seq), AMP_I64);
        r->sequence = true;
        r->classes = c.vocab;
    } else {
        amp_gpt_config c = {.vocab = 96, .context = 128, .width = 256, .layers = 4, .heads = 4, .mlp = 1024};
        r->net = amp_model_gpt(c);
        r->x = amp_zeros(AMP_SHAPE(16, 128), AMP_I64);
        r->y = amp_zeros(AMP_SHAPE(16 * 128), AMP_I64);
        r->sequence = true;
        r->classes = c.vocab;
    }
    if (!r->net || !r->x || !r->y)
        return false;
    /* Labels / tokens: a fixed pattern, like the random ones PyTorch's side draws. */
    int64_t *yv = amp_tensor_data(r->y);
    for (int64_t i = 0; i < amp_tensor_numel(r->y); i++)
        yv[i] = (i * 7919) % (r->sequence ? r->classes : 10);
    if (r->sequence) {
        int64_t *xv = amp_tensor_data(r->x);
        for (int64_t i = 0; i < amp_tensor_numel(r->x); i++)
            xv[i] = (i * 104729) % r->classes;
    }
    int n = amp_module_num_params(r->net);
    amp_tensor **ps = malloc(sizeof *ps * (size_t)n);
    amp_module_params(r->net, ps, n);
    if (r->sequence) {
        amp_adam_opts o = amp_adamw_defaults();
        o.lr = 3e-4;
        o.weight_decay = 0.1;
        r->opt = amp_optim_adamw(ps, n, o);
    } else {
        amp_sgd_opts o = amp_sgd_defaults();
        o.lr = 0.01;
        o.momentum = 0.9;
        r->opt = amp_optim_sgd(ps, n, o);
    }
    free(ps);
    return r->opt != NULL;
}

static void unmake(rig *r)
{
    amp_optim_free(r->opt);
    amp_module_free(r->net);
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
}

/* One training step as time_steps runs it; false on error (reported). */
static bool one_step(rig *r, const char *model, const char *precision, amp_scaler *scaler)
{
    bool autocast = strcmp(precision, "fp32") != 0;
    amp_dtype dt = strcmp(precision, "fp16") == 0 ? AMP_F16 : AMP_BF16;
    amp_optim_zero_grad(r->opt);
    if (autocast)
        amp_autocast_begin(AMP_CPU, dt);
    amp_tensor *out = amp_module_forward(r->net, r->x);
    if (r->sequence)
        out = amp_reshape(out, AMP_SHAPE(-1, r->classes));
    amp_tensor *loss = amp_cross_entropy(out, r->y);
    if (autocast)
        amp_autocast_end();
    if (amp_backward(amp_scaler_scale(scaler, loss)) != AMP_OK) {
        fprintf(stderr, "%s %s: %s\n", model, precision, amp_last_error());
        return false;
    }
    amp_item(loss);
    /* The step's temporaries go before the optimizer runs, as `ampc
     * train` does: the weights' autocast casts are then held by nothing
     * else, so the optimizer writes the next step's casts in its own pass
     * (autocast_kept_for_update) instead of the next forward casting anew. */
    amp_temps_free();
    if (amp_scaler_step(scaler, r->opt, NULL) != AMP_OK || amp_scaler_update(scaler) != AMP_OK) {
        fprintf(stderr, "%s %s: %s\n", model, precision, amp_last_error());
        return false;
    }
    amp_profiler_step();
    return true;
}

/* The cost of one cached amp_alloc + amp_free pair in ns (the fastest of
 * three runs), for --breakdown's allocation estimate: after the first
 * pair every request is served from the free list, as a step's are after
 * its first step. */
static double alloc_pair_cost_ns(void)
{
    const long n = 1000000;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            void *p = amp_alloc((size_t)64 << (i & 7));
            __asm__ volatile("" : : "r"(p) : "memory");
            amp_free(p);
        }
        double t = (now() - t0) / (double)n * 1e9;
        best = t < best ? t : best;
    }
    return best;
}

/* The cost of one hook with the profiler off: a tight loop of prof_begin
 * (what every op, cast and kernel hook does first), in ns; the fastest of
 * three runs (the machine's other work only adds). */
static double hook_off_ns(void)
{
    const long n = 20000000;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            prof_event *e = prof_begin(PROF_OP_FWD, "bench");
            __asm__ volatile("" : : "r"(e) : "memory"); /* one load per call, not hoisted */
        }
        double t = (now() - t0) / (double)n * 1e9;
        best = t < best ? t : best;
    }
    return best;
}

/* A phase begin + end with the profiler off (the library's phases are
 * marked whether or not it runs), in ns; the fastest of three runs. */
static double phase_off_ns(void)
{
    const long n = 5000000;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            amp_phase_begin(AMP_PHASE_OPTIMIZER);
            amp_phase_end(AMP_PHASE_OPTIMIZER);
        }
        double t = (now() - t0) / (double)n * 1e9;
        best = t < best ? t : best;
    }
    return best;
}

/* The cost of one recorded op event with the profiler on, as op_run's
 * hook makes it (begin, two inputs and the result, FLOPs, bytes, end; the
 * chunk mallocs included), in ns; the fastest of three runs. */
static double hook_on_ns(void)
{
    const long n = 200000;
    const int64_t a[2] = {256, 784}, b[2] = {4096, 784}, c[2] = {256, 4096};
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        amp_profiler_opts o = amp_profiler_defaults();
        o.memory = false;
        o.max_events = (size_t)n;
        if (amp_profiler_start(&o) != AMP_OK)
            return -1;
        double t0 = now();
        for (long i = 0; i < n; i++) {
            prof_event *e = prof_begin(PROF_OP_FWD, "bench");
            if (e) {
                e->dev_mark0 = prof_device_mark(AMP_CPU);
                e->dev_mark1 = prof_device_mark(AMP_CPU);
                prof_set_tensor(&e->in[0], AMP_BF16, a, 2);
                prof_set_tensor(&e->in[1], AMP_BF16, b, 2);
                prof_set_tensor(&e->out, AMP_BF16, c, 2);
                e->n_in = 2;
                e->flops = 2.0 * 256 * 784 * 4096;
                e->bytes = 1.0;
                prof_end(e);
            }
        }
        double t = (now() - t0) / (double)n * 1e9;
        amp_profiler_stop();
        amp_profiler_reset();
        best = t < best ? t : best;
    }
    return best;
}

static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* The model's rig and the scaler of precision (enabled for fp16) for
 * one cell; false (reported) when the model cannot be made. */
static bool make_cell(const char *model, const char *precision, rig *r, amp_scaler **scaler)
{
    if (!make(model, r)) {
        fprintf(stderr, "%s: %s\n", model, amp_last_error());
        return false;
    }
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = strcmp(precision, "fp16") == 0;
    *scaler = amp_scaler_new(so);
    return true;
}

/* The profiler's overhead on one model and precision; false on error. */
static bool profile_overhead(const char *model, const char *precision, int blocks, double hook_ns, double phase_ns,
                             double on_ns)
{
    enum { PER_BLOCK = 2, WARMUP = 3 };
    rig r;
    amp_scaler *scaler;
    if (!make_cell(model, precision, &r, &scaler))
        return false;
    double *off = malloc(sizeof(double) * (size_t)(blocks * PER_BLOCK));
    double *on = malloc(sizeof(double) * (size_t)(blocks * PER_BLOCK));
    double *coff = malloc(sizeof(double) * (size_t)(blocks * PER_BLOCK));
    double *con = malloc(sizeof(double) * (size_t)(blocks * PER_BLOCK));
    double *pair = malloc(sizeof(double) * (size_t)blocks);
    bool ok = off && on && coff && con && pair && scaler;
    for (int i = 0; ok && i < WARMUP; i++)
        ok = one_step(&r, model, precision, scaler);
    size_t events = 0, phases = 0;
    int n_off = 0, n_on = 0;
    for (int b = 0; ok && b < blocks; b++) {
        for (int i = 0; ok && i < PER_BLOCK; i++) {
            double t0 = now(), c0 = cpu_now();
            ok = one_step(&r, model, precision, scaler);
            coff[n_off] = cpu_now() - c0;
            off[n_off++] = now() - t0;
        }
        amp_profiler_opts po = amp_profiler_defaults();
        ok = ok && amp_profiler_start(&po) == AMP_OK;
        for (int i = 0; ok && i < PER_BLOCK; i++) {
            double t0 = now(), c0 = cpu_now();
            ok = one_step(&r, model, precision, scaler);
            con[n_on] = cpu_now() - c0;
            on[n_on++] = now() - t0;
        }
        if (amp_profiler_enabled())
            amp_profiler_stop();
        if (ok) { /* this block's on steps against the off steps just before them */
            double so = 0, sn = 0;
            for (int i = 0; i < PER_BLOCK; i++) {
                so += off[n_off - 1 - i];
                sn += on[n_on - 1 - i];
            }
            pair[b] = sn / so;
        }
        if (b == 0) { /* what one block of on steps recorded */
            const prof_thread_events *th;
            int nt = prof_threads(&th);
            for (int t = 0; t < nt; t++)
                for (size_t i = 0; i < th[t].n; i++) {
                    const prof_event *e = &th[t].ev[i];
                    if (e->kind == PROF_PHASE)
                        phases++;
                    else if (e->kind != PROF_COUNTER && e->kind != PROF_STEP)
                        events++;
                }
        }
    }
    if (ok) {
        const double m_off = median_of(off, n_off), m_on = median_of(on, n_on);
        const double min_off = off[0], min_on = on[0]; /* sorted by median_of */
        const double c_off = median_of(coff, n_off), c_on = median_of(con, n_on);
        const double paired = median_of(pair, blocks);
        const double ev = (double)events / PER_BLOCK, ph = (double)phases / PER_BLOCK;
        const double off_pct = (ev * hook_ns + ph * phase_ns) * 1e-9 / m_off * 100;
        const double on_est_pct = (ev + ph) * on_ns * 1e-9 / m_off * 100;
        printf("{\"bench\": \"profiler\", \"model\": \"%s\", \"precision\": \"%s\", \"threads\": %d, "
               "\"off_ms\": %.3f, \"on_ms\": %.3f, \"on_pct\": %.2f, \"min_off_ms\": %.3f, \"min_on_ms\": %.3f, "
               "\"min_on_pct\": %.2f, \"cpu_off_ms\": %.3f, \"cpu_on_ms\": %.3f, \"cpu_on_pct\": %.2f, \"paired_on_pct\": %.2f, \"steps\": %d, \"events_per_step\": %.0f, \"phases_per_step\": %.0f, "
               "\"hook_off_ns\": %.2f, \"phase_off_ns\": %.2f, \"off_pct\": %.4f, \"hook_on_ns\": %.1f, "
               "\"on_est_pct\": %.4f}\n",
               model, precision, amp_get_num_threads(), m_off * 1e3, m_on * 1e3, (m_on / m_off - 1) * 100,
               min_off * 1e3, min_on * 1e3, (min_on / min_off - 1) * 100, c_off * 1e3, c_on * 1e3,
               (c_on / c_off - 1) * 100, (paired - 1) * 100, n_off, ev, ph, hook_ns, phase_ns, off_pct,
               on_ns, on_est_pct);
        fflush(stdout);
    }
    amp_profiler_reset();
    free(off);
    free(on);
    free(coff);
    free(con);
    free(pair);
    amp_scaler_free(scaler);
    unmake(&r);
    return ok;
}

/* The anomaly check's cost on one model and precision (see the header);
 * false on error. */
static bool anomaly_overhead(const char *model, const char *precision, int blocks)
{
    enum { PER_BLOCK = 2, WARMUP = 3 };
    rig r;
    amp_scaler *scaler;
    if (!make_cell(model, precision, &r, &scaler))
        return false;
    double *t[2] = {malloc(sizeof(double) * (size_t)(blocks * PER_BLOCK)),
                    malloc(sizeof(double) * (size_t)(blocks * PER_BLOCK))};
    double *pair = malloc(sizeof(double) * (size_t)blocks);
    bool ok = t[0] && t[1] && pair && scaler;
    for (int i = 0; ok && i < WARMUP; i++)
        ok = one_step(&r, model, precision, scaler);
    amp_anomaly_set_continue(true);
    int n = 0;
    for (int b = 0; ok && b < blocks; b++) {
        double sum[2] = {0, 0};
        for (int on = 0; ok && on < 2; on++) {
            ok = amp_anomaly_enable(on) == AMP_OK;
            for (int i = 0; ok && i < PER_BLOCK; i++) {
                amp_anomaly_set_context(b * PER_BLOCK + i + 1, 1);
                double t0 = now();
                ok = one_step(&r, model, precision, scaler);
                sum[on] += t[on][n + i] = now() - t0;
            }
        }
        amp_anomaly_enable(false);
        n += PER_BLOCK;
        pair[b] = sum[1] / sum[0];
    }
    amp_anomaly_set_continue(false);
    if (ok) {
        const double off = median_of(t[0], n), on = median_of(t[1], n), paired = median_of(pair, blocks);
        printf("{\"bench\": \"anomaly\", \"model\": \"%s\", \"precision\": \"%s\", \"threads\": %d, "
               "\"off_ms\": %.3f, \"on_ms\": %.3f, \"ratio\": %.3f, \"paired_ratio\": %.3f, \"steps\": %d}\n",
               model, precision, amp_get_num_threads(), off * 1e3, on * 1e3, on / off, paired, n);
        fflush(stdout);
    }
    free(t[0]);
    free(t[1]);
    free(pair);
    amp_scaler_free(scaler);
    unmake(&r);
    return ok;
}

/* n profiled steps of the cell (--breakdown) digested into out; false on
 * error (reported). */
static bool breakdown(rig *r, const char *model, const char *precision, amp_scaler *scaler, bd_result *out)
{
    amp_profiler_opts po = amp_profiler_defaults();
    po.memory = false; /* no counter samples: the breakdown needs only times */
    if (amp_profiler_start(&po) != AMP_OK) {
        fprintf(stderr, "%s %s: %s\n", model, precision, amp_last_error());
        return false;
    }
    const amp_memory_stats m0 = amp_memory_get_stats();
    bool ok = true;
    for (int i = 0; ok && i < breakdown_steps; i++)
        ok = one_step(r, model, precision, scaler);
    const amp_memory_stats m1 = amp_memory_get_stats();
    amp_profiler_stop();
    if (ok && !bd_digest(out, m1.allocs - m0.allocs, m1.os_allocs - m0.os_allocs, alloc_pair_ns)) {
        fprintf(stderr, "%s %s: breakdown: %s\n", model, precision, amp_last_error());
        ok = false;
    }
    amp_profiler_reset();
    return ok;
}

/* What time_steps measured for one cell. */
typedef struct {
    double median_ms, peak_mb, cpu_ms, rss_mb;
    double *times_ms; /* the timed steps, in the order they ran (malloc'd) */
    int steps, warmup;
    bool timeboxed;
    bool has_breakdown;
    bd_result bd; /* --breakdown */
} cell_result;

/* Runs up to `warmup` untimed and then up to `steps` timed steps of one
 * model and precision, within max_s seconds when max_s > 0 (see the
 * header); false on error (reported). */
static bool time_steps(const char *model, const char *precision, int steps, int warmup, double max_s,
                       cell_result *res)
{
    memset(res, 0, sizeof *res);
    rig r;
    if (!make(model, &r)) {
        fprintf(stderr, "%s: %s\n", model, amp_last_error());
        return false;
    }
    amp_scaler_opts so = amp_scaler_defaults();
    so.enabled = strcmp(precision, "fp16") == 0;
    amp_scaler *scaler = amp_scaler_new(so);
    double *t = malloc(sizeof(double) * (size_t)steps), *cpu = malloc(sizeof(double) * (size_t)steps);
    bool ok = scaler && t && cpu;
    if (!ok)
        fprintf(stderr, "%s %s: out of memory\n", model, precision);
    amp_memory_reset_peak();
    const double start = now();
    for (int i = 0; ok && i < warmup; i++) {
        if (i > 0 && max_s > 0 && now() - start > max_s / 3) {
            res->timeboxed = true;
            break;
        }
        ok = one_step(&r, model, precision, scaler);
        res->warmup++;
    }
    if (ok && profile_table) {
        amp_profiler_opts po = amp_profiler_defaults();
        ok = amp_profiler_start(&po) == AMP_OK;
    }
    for (int i = 0; ok && i < steps; i++) {
        if (i > 0 && max_s > 0 && now() - start > max_s) {
            res->timeboxed = true;
            break;
        }
        double t0 = now(), c0 = cpu_now();
        ok = one_step(&r, model, precision, scaler);
        cpu[res->steps] = (cpu_now() - c0) * 1e3;
        t[res->steps++] = (now() - t0) * 1e3;
    }
    if (amp_profiler_enabled()) {
        amp_profiler_stop();
        fprintf(stderr, "== %s %s\n", model, precision);
        amp_profiler_print_table(stderr, 30);
        amp_profiler_print_verdict(stderr);
        amp_profiler_reset();
    }
    if (ok && breakdown_steps > 0)
        ok = res->has_breakdown = breakdown(&r, model, precision, scaler, &res->bd);
    if (ok) {
        res->peak_mb = (double)amp_memory_get_stats().peak / (1 << 20);
        struct rusage ru;
        res->rss_mb = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024 : -1; /* ru_maxrss: KiB */
        res->times_ms = malloc(sizeof(double) * (size_t)res->steps);
        ok = res->times_ms != NULL;
    }
    if (ok) {
        memcpy(res->times_ms, t, sizeof(double) * (size_t)res->steps);
        res->median_ms = median_of(t, res->steps);
        res->cpu_ms = median_of(cpu, res->steps);
    }
    free(t);
    free(cpu);
    amp_scaler_free(scaler);
    unmake(&r);
    return ok;
}

/* True when every comma-separated name in list is one of allowed's; else
 * says which is not (option: the flag, for the message). */
static bool valid_list(const char *list, const char *allowed, const char *option)
{
    char copy[64];
    snprintf(copy, sizeof copy, "%s", list);
    char *save = NULL;
    bool any = false;
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const size_t n = strlen(p);
        const char *hit = strstr(allowed, p);
        if (!hit || (hit != allowed && hit[-1] != ',') || (hit[n] != ',' && hit[n] != '\0')) {
            fprintf(stderr, "ampc_step: %s: unknown name '%s' (one of %s)\n", option, p, allowed);
            return false;
        }
        any = true;
    }
    if (!any)
        fprintf(stderr, "ampc_step: %s is empty (one of %s)\n", option, allowed);
    return any;
}

int main(int argc, char **argv)
{
    int threads = 0, steps = 10, warmup = 3;
    double max_s = 0;
    bool overhead = false, anomaly = false;
    char models[64] = "mlp,cnn,gpt", precisions[64] = "fp32,bf16,fp16";
    for (int i = 1; i < argc; i += 2) {
        bool *flag = strcmp(argv[i], "--profile-overhead") == 0        ? &overhead
                     : strcmp(argv[i], "--profile-table") == 0         ? &profile_table
                     : strcmp(argv[i], "--anomaly-overhead") == 0      ? &anomaly
                     : strcmp(argv[i], "--checkpoint-activations") == 0 ? &g2_ckpt
                                                                        : NULL;
        if (flag) {
            *flag = true;
            i--;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ampc_step: %s needs a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--warmup") == 0)
            warmup = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max-seconds") == 0)
            max_s = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--breakdown") == 0)
            breakdown_steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batch") == 0)
            g2_batch = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--seq") == 0)
            g2_seq = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--models") == 0)
            snprintf(models, sizeof models, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--precisions") == 0)
            snprintf(precisions, sizeof precisions, "%s", argv[i + 1]);
        else {
            fprintf(stderr, "ampc_step: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (steps < 1) {
        fprintf(stderr, "ampc_step: --steps must be >= 1\n");
        return 2;
    }
    if (g2_batch < 1 || g2_seq < 1 || g2_seq > 1024) {
        fprintf(stderr, "ampc_step: --batch must be >= 1 and --seq 1 to 1024 (gpt2's context)\n");
        return 2;
    }
    if (warmup < 0 || breakdown_steps < 0 || !(max_s >= 0)) {
        fprintf(stderr, "ampc_step: --warmup, --breakdown and --max-seconds must be >= 0\n");
        return 2;
    }
    if (!valid_list(models, "mlp,cnn,gpt,gpt2", "--models") || !valid_list(precisions, "fp32,bf16,fp16", "--precisions"))
        return 2;
    amp_set_num_threads(threads);
    if (breakdown_steps > 0)
        alloc_pair_ns = alloc_pair_cost_ns();
    double hook_ns = 0, phase_ns = 0, on_ns = 0;
    if (overhead) {
        hook_ns = hook_off_ns();
        phase_ns = phase_off_ns();
        on_ns = hook_on_ns();
    }
    for (char *m = strtok(models, ","); m; m = strtok(NULL, ",")) {
        char pcopy[64];
        snprintf(pcopy, sizeof pcopy, "%s", precisions);
        char *save = NULL;
        for (char *p = strtok_r(pcopy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
            if (overhead) {
                if (!profile_overhead(m, p, steps, hook_ns, phase_ns, on_ns))
                    return 1;
                continue;
            }
            if (anomaly) {
                if (!anomaly_overhead(m, p, steps))
                    return 1;
                continue;
            }
            cell_result c;
            if (!time_steps(m, p, steps, warmup, max_s, &c))
                return 1;
            printf("{\"impl\": \"ampc\", \"model\": \"%s\", \"precision\": \"%s\", \"threads\": %d, "
                   "\"step_ms\": %.3f, \"steps\": %d, \"warmup\": %d, \"timeboxed\": %s, \"peak_mb\": %.1f, "
                   "\"cpu_ms\": %.3f, \"rss_mb\": %.1f, ",
                   m, p, amp_get_num_threads(), c.median_ms, c.steps, c.warmup, c.timeboxed ? "true" : "false",
                   c.peak_mb, c.cpu_ms, c.rss_mb);
            if (strcmp(m, "gpt2") == 0)
                printf("\"batch\": %lld, \"seq\": %lld, \"checkpoint\": %s, ", (long long)g2_batch,
                       (long long)g2_seq, g2_ckpt ? "true" : "false");
            if (c.has_breakdown)
                bd_print_json(stdout, &c.bd);
            printf("\"times_ms\": [");
            for (int i = 0; i < c.steps; i++)
                printf("%s%.3f", i ? ", " : "", c.times_ms[i]);
            printf("]}\n");
            fflush(stdout);
            free(c.times_ms);
        }
    }
    return 0;
}
