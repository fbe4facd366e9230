/*
 * step_breakdown.h - where a profiled training step's time goes, by kind
 * of work, for bench_ampc_step --breakdown: the GEMMs, each other family
 * of ops, autocast's casts, the optimizer, the autograd engine between
 * ops, and the rest of the step; with the step's FLOPs from the op
 * table's cost functions (the profiler's GFLOP/s column) and an estimate
 * of the caching allocator's share. Static functions: one program
 * includes it.
 *
 * Every profiled event's self time (profile_stats.h: its time minus the
 * events inside it, a GEMM kernel's time kept in its op's) on the thread
 * that marks the steps goes to exactly one category, so the categories
 * and "other" (time in no event: zero_grad, reading the loss, freeing the
 * step's temporaries) add up to the step:
 *
 *   optimizer    any event inside the optimizer, unscale or scaler-update
 *                phases (the update, the grad scaler's check, clipping)
 *   gemm         matmul, linear and conv2d, forward and backward, their
 *                fused bias / activation epilogues included
 *   attention    scaled_dot_product_attention, softmax, log_softmax
 *   elementwise  the pointwise ops (add .. pow, activations, dropout)
 *   norm         layer_norm
 *   loss         cross_entropy, mse_loss
 *   reduction    sum, mean, argmax
 *   pool         max_pool2d, avg_pool2d
 *   embedding    embedding
 *   shape        reshape, permute, cat, narrow (copies)
 *   cast         autocast's casts (and the `to` op: a user's own, the
 *                casts' backward)
 *   other_ops    an op not named above (a row added to the op table later)
 *   autograd     the backward phase's own time between ops: the engine,
 *                adding up gradients
 *   other        the step's time in no event
 *
 * Allocation is not an event: its figure is an estimate, the allocations
 * a step makes (amp_memory_get_stats' counter) times the cost of one
 * cached amp_alloc + amp_free pair (the caller measures it), and is part
 * of the categories' time, not beside it.
 */
#ifndef AMPC_BENCH_STEP_BREAKDOWN_H
#define AMPC_BENCH_STEP_BREAKDOWN_H

#include <ampc.h>

#include "base/base.h"
#include "prof/profile_stats.h"
#include "record/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    BD_GEMM,
    BD_ATTENTION,
    BD_ELEMENTWISE,
    BD_NORM,
    BD_LOSS,
    BD_REDUCTION,
    BD_POOL,
    BD_EMBEDDING,
    BD_SHAPE,
    BD_CAST,
    BD_OTHER_OPS,
    BD_OPTIMIZER,
    BD_AUTOGRAD,
    BD_OTHER,
    BD_COUNT
} bd_category;

static const char *const bd_names[BD_COUNT] = {
    "gemm", "attention", "elementwise", "norm", "loss", "reduction", "pool",
    "embedding", "shape", "cast", "other_ops", "optimizer", "autograd", "other",
};

/* The category of an op by its op-table name (op_list.h). */
static bd_category bd_op_category(const char *name)
{
    static const struct {
        const char *name;
        bd_category c;
    } ops[] = {
        {"matmul", BD_GEMM}, {"linear", BD_GEMM}, {"conv2d", BD_GEMM},
        {"scaled_dot_product_attention", BD_ATTENTION}, {"softmax", BD_ATTENTION},
        {"log_softmax", BD_ATTENTION}, {"add", BD_ELEMENTWISE}, {"sub", BD_ELEMENTWISE},
        {"mul", BD_ELEMENTWISE}, {"div", BD_ELEMENTWISE}, {"add_scalar", BD_ELEMENTWISE},
        {"mul_scalar", BD_ELEMENTWISE}, {"div_scalar", BD_ELEMENTWISE}, {"neg", BD_ELEMENTWISE},
        {"relu", BD_ELEMENTWISE}, {"gelu", BD_ELEMENTWISE}, {"tanh", BD_ELEMENTWISE},
        {"sigmoid", BD_ELEMENTWISE}, {"silu", BD_ELEMENTWISE}, {"exp", BD_ELEMENTWISE},
        {"log", BD_ELEMENTWISE}, {"pow", BD_ELEMENTWISE}, {"dropout", BD_ELEMENTWISE},
        {"layer_norm", BD_NORM}, {"cross_entropy", BD_LOSS}, {"mse_loss", BD_LOSS},
        {"sum", BD_REDUCTION}, {"mean", BD_REDUCTION}, {"argmax", BD_REDUCTION},
        {"max_pool2d", BD_POOL}, {"avg_pool2d", BD_POOL}, {"embedding", BD_EMBEDDING},
        {"reshape", BD_SHAPE}, {"permute", BD_SHAPE}, {"cat", BD_SHAPE}, {"narrow", BD_SHAPE},
        {"to", BD_CAST},
    };
    for (size_t i = 0; name && i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(name, ops[i].name) == 0)
            return ops[i].c;
    return BD_OTHER_OPS;
}

/* One profiled block of steps, digested. */
typedef struct {
    int steps;
    double step_ms;          /* the profiled steps' mean wall time */
    double ms[BD_COUNT];     /* per step */
    double gflop;            /* per step: every forward and backward op's cost */
    double gemm_gflop;       /* per step: the gemm category's */
    double gemm_kernel_ms;   /* per step: the GEMM kernels alone (matmul / linear products; conv2d's are
                                not broken out), inside gemm's time */
    double allocs, os_allocs; /* per step: allocations served, and those that took fresh memory */
    double alloc_pair_ns;     /* one cached amp_alloc + amp_free */
    double alloc_ms;          /* per step, estimated: allocs x alloc_pair_ns */
} bd_result;

static bool bd_optimizer_phase(int phase)
{
    return phase == AMP_PHASE_OPTIMIZER || phase == AMP_PHASE_UNSCALE || phase == AMP_PHASE_SCALER_UPDATE;
}

/* Digests the last profiler run (stopped, with amp_profiler_step marks)
 * into out; allocs and os_allocs are the allocator's counts over the run.
 * false (with amp_last_error) when there is nothing to digest. */
static bool bd_digest(bd_result *out, size_t allocs, size_t os_allocs, double alloc_pair_ns)
{
    memset(out, 0, sizeof *out);
    prof_stats st;
    if (prof_stats_build(&st) != AMP_OK)
        return false;
    const prof_thread_events *th;
    int nt = prof_threads(&th);
    double ns[BD_COUNT] = {0}, gemm_flops = 0, kernel_ns = 0, in_events = 0;
    for (int t = 0; t < nt; t++) {
        if (th[t].tid != st.step_tid)
            continue; /* the ops run on the thread that marks the steps; workers record none */
        const prof_event *ev = th[t].ev;
        size_t n = th[t].n;
        int64_t *parent = malloc(n * sizeof *parent), *self = malloc(n * sizeof *self);
        if (!parent || !self) {
            free(parent);
            free(self);
            prof_stats_free(&st);
            amp_set_error(AMP_ERR_MEMORY, "breakdown: out of memory");
            return false;
        }
        prof_thread_tree(ev, n, parent, self);
        for (size_t i = 0; i < n; i++) {
            const prof_event *e = &ev[i];
            if (e->step >= st.steps || e->kind == PROF_STEP || e->kind == PROF_COUNTER || e->kind == PROF_CAST_HIT)
                continue;
            if (e->kind == PROF_KERNEL) { /* its time is its op's self time */
                kernel_ns += (double)(e->t1 - e->t0);
                continue;
            }
            if (e->kind == PROF_OP_FWD && parent[i] >= 0 && ev[parent[i]].kind == PROF_CAST)
                continue; /* the cast's own `to`: its self time is the cast's */
            bd_category c;
            if (bd_optimizer_phase(e->phase))
                c = BD_OPTIMIZER;
            else if (e->kind == PROF_PHASE)
                c = BD_AUTOGRAD;
            else if (e->kind == PROF_CAST)
                c = BD_CAST;
            else
                c = bd_op_category(e->name);
            ns[c] += (double)self[i];
            in_events += (double)self[i];
            if (c == BD_GEMM && (e->kind == PROF_OP_FWD || e->kind == PROF_OP_BWD))
                gemm_flops += e->flops;
        }
        free(parent);
        free(self);
    }
    const double steps = st.steps, wall = (double)st.wall_ns;
    ns[BD_OTHER] = wall > in_events ? wall - in_events : 0;
    out->steps = st.steps;
    out->step_ms = wall / 1e6 / steps;
    for (int c = 0; c < BD_COUNT; c++)
        out->ms[c] = ns[c] / 1e6 / steps;
    out->gflop = st.flops / 1e9 / steps;
    out->gemm_gflop = gemm_flops / 1e9 / steps;
    out->gemm_kernel_ms = kernel_ns / 1e6 / steps;
    out->allocs = (double)allocs / steps;
    out->os_allocs = (double)os_allocs / steps;
    out->alloc_pair_ns = alloc_pair_ns;
    out->alloc_ms = out->allocs * alloc_pair_ns / 1e6;
    prof_stats_free(&st);
    return true;
}

/* The JSON fields of r (no braces; the caller's record goes on after). */
static void bd_print_json(FILE *f, const bd_result *r)
{
    fprintf(f, "\"gflop\": %.4f, \"gemm_gflop\": %.4f, \"profiled_steps\": %d, \"profiled_step_ms\": %.3f, "
               "\"gemm_kernel_ms\": %.3f, \"breakdown_ms\": {",
            r->gflop, r->gemm_gflop, r->steps, r->step_ms, r->gemm_kernel_ms);
    for (int c = 0; c < BD_COUNT; c++)
        fprintf(f, "%s\"%s\": %.3f", c ? ", " : "", bd_names[c], r->ms[c]);
    fprintf(f, "}, \"alloc\": {\"per_step\": %.1f, \"fresh_per_step\": %.2f, \"pair_ns\": %.1f, \"est_ms\": %.4f}, ",
            r->allocs, r->os_allocs, r->alloc_pair_ns, r->alloc_ms);
}

#endif
