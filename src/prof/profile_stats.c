/*
 * profile_stats.c - digests the profiler's events for its outputs: the
 * steps, the phases' exclusive times, and the (op, pass, dtypes) rows with
 * total and self time (the definitions are in profile_stats.h).
 */
#include "prof/profile_stats.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256

static const char *const dtype_names[AMP_DTYPE_COUNT] = {
    [AMP_F32] = "fp32", [AMP_F16] = "fp16", [AMP_BF16] = "bf16", [AMP_I32] = "i32", [AMP_I64] = "i64",
};

const char *prof_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < AMP_DTYPE_COUNT && dtype_names[dtype] ? dtype_names[dtype] : "?";
}

const char *prof_pass_name(int kind)
{
    switch (kind) {
    case PROF_OP_FWD: return "fwd";
    case PROF_OP_BWD: return "bwd";
    case PROF_CAST: return "cast";
    case PROF_CAST_HIT: return "hit";
    case PROF_KERNEL: return "kernel";
    case PROF_PHASE: return "phase";
    case PROF_STEP: return "step";
    default: return "other";
    }
}

/* The clock an event's times are on: a device's when its marks were
 * resolved, else the host's (0). */
static int clock_of(const prof_event *e)
{
    return e->device != AMP_CPU && e->dev_mark0 >= 0 && e->dev_mark1 >= 0 ? e->device : 0;
}

static bool is_instant(const prof_event *e)
{
    return e->kind == PROF_CAST_HIT || e->kind == PROF_COUNTER || e->kind == PROF_STEP;
}

static int64_t dur_of(const prof_event *e) { return e->t1 > e->t0 ? e->t1 - e->t0 : 0; }

/* Whether child e is its parent p's own work, kept in p's self time: a
 * kernel inside an op, the `to` op inside an autocast cast (profile.h:
 * the cast wraps it; the cast's row stands for both). */
static bool inner_work(const prof_event *e, const prof_event *p)
{
    return (e->kind == PROF_KERNEL && p->kind != PROF_KERNEL) || (e->kind == PROF_OP_FWD && p->kind == PROF_CAST);
}

void prof_thread_tree(const prof_event *ev, size_t n, int64_t *parent, int64_t *self)
{
    int64_t stack[MAX_DEPTH];
    for (int d = 0; d < MAX_DEPTH; d++)
        stack[d] = -1;
    for (size_t i = 0; i < n; i++) {
        const prof_event *e = &ev[i];
        int d = e->depth;
        parent[i] = d > 0 && d <= MAX_DEPTH ? stack[d - 1] : -1;
        self[i] = is_instant(e) ? 0 : dur_of(e);
        if (is_instant(e))
            continue;
        if (d >= 0 && d < MAX_DEPTH)
            stack[d] = (int64_t)i;
        int64_t p = parent[i];
        bool own_work = p >= 0 && inner_work(e, &ev[p]);
        if (p >= 0 && clock_of(&ev[p]) == clock_of(e) && !own_work)
            self[p] -= dur_of(e);
    }
    for (size_t i = 0; i < n; i++)
        if (self[i] < 0) /* a child timed past its parent's end: never below 0 */
            self[i] = 0;
}

/* ------------------------------------------------------------------ rows */

typedef struct {
    prof_row *rows;
    int n, cap;
    int *slot; /* open addressing: row index + 1, 0 empty */
    int n_slots;
} row_table;

static uint32_t pack_key(const prof_event *e, int clock)
{
    uint32_t k = (uint32_t)e->kind | (uint32_t)clock << 4;
    int n_in = e->n_in < PROF_MAX_TENSORS ? e->n_in : PROF_MAX_TENSORS;
    k |= (uint32_t)n_in << 6;
    for (int i = 0; i < n_in; i++)
        k |= (uint32_t)((e->in[i].dtype + 1) & 15) << (9 + 4 * i);
    return k | (uint32_t)((e->out.dtype + 1) & 15) << 25;
}

static uint64_t hash_of(const char *name, uint32_t key)
{
    uint64_t h = 1469598103934665603ull ^ key;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h ^ (h >> 29);
}

static void fill_labels(prof_row *r, const prof_event *e)
{
    const char *name = r->name;
    if (e->kind == PROF_CAST || e->kind == PROF_CAST_HIT) {
        if (e->out.dtype >= 0)
            snprintf(r->label, sizeof r->label, "to %s (autocast%s)", prof_dtype_name(e->out.dtype),
                     e->kind == PROF_CAST_HIT ? ", cache hit" : "");
        else
            snprintf(r->label, sizeof r->label, "%s%s", name, e->kind == PROF_CAST_HIT ? " (cache hit)" : "");
    } else {
        snprintf(r->label, sizeof r->label, "%s", name);
    }
    /* "inputs -> output"; a backward's reads the way it runs: "the gradient
     * arriving -> the gradients made" (profile.h: its out is gout, in[i]
     * input i's gradient, dtype -1 where none is made: "-"). */
    char ins[48] = "";
    size_t k = 0;
    int n_in = e->n_in < PROF_MAX_TENSORS ? e->n_in : PROF_MAX_TENSORS;
    for (int i = 0; i < n_in && k < sizeof ins; i++)
        k += (size_t)snprintf(ins + k, sizeof ins - k, "%s%s", i ? "," : "",
                              e->in[i].dtype < 0 ? "-" : prof_dtype_name(e->in[i].dtype));
    const char *out = e->out.dtype >= 0 ? prof_dtype_name(e->out.dtype) : NULL;
    if (e->kind == PROF_OP_BWD)
        snprintf(r->sig, sizeof r->sig, "%s%s%s", out ? out : "", out && n_in ? " -> " : "", ins);
    else
        snprintf(r->sig, sizeof r->sig, "%s%s%s", ins, out && n_in ? " -> " : out ? "-> " : "", out ? out : "");
}

static bool grow_slots(row_table *t)
{
    int n = t->n_slots ? t->n_slots * 2 : 256;
    int *s = calloc((size_t)n, sizeof *s);
    if (!s)
        return false;
    for (int i = 0; i < t->n; i++) {
        uint64_t h = hash_of(t->rows[i].name, t->rows[i].key);
        int j = (int)(h & (uint64_t)(n - 1));
        while (s[j])
            j = (j + 1) & (n - 1);
        s[j] = i + 1;
    }
    free(t->slot);
    t->slot = s;
    t->n_slots = n;
    return true;
}

/* The row of event e (made at its first event); NULL when out of memory. */
static prof_row *row_for(row_table *t, const prof_event *e, int clock)
{
    const char *name = e->name ? e->name : "?";
    uint32_t key = pack_key(e, clock);
    if (2 * (t->n + 1) > t->n_slots && !grow_slots(t))
        return NULL;
    uint64_t h = hash_of(name, key);
    int j = (int)(h & (uint64_t)(t->n_slots - 1));
    for (; t->slot[j]; j = (j + 1) & (t->n_slots - 1)) {
        prof_row *r = &t->rows[t->slot[j] - 1];
        if (r->key == key && (r->name == name || strcmp(r->name, name) == 0))
            return r;
    }
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        prof_row *rows = realloc(t->rows, (size_t)cap * sizeof *rows);
        if (!rows)
            return NULL;
        t->rows = rows;
        t->cap = cap;
    }
    prof_row *r = &t->rows[t->n];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->key = key;
    r->kind = e->kind;
    r->device = (uint8_t)clock;
    fill_labels(r, e);
    t->slot[j] = ++t->n;
    return r;
}

static int by_total(const void *a, const void *b)
{
    const prof_row *x = a, *y = b;
    if (x->total_ns != y->total_ns)
        return x->total_ns > y->total_ns ? -1 : 1;
    if (x->calls != y->calls)
        return x->calls > y->calls ? -1 : 1;
    int c = strcmp(x->label, y->label);
    return c ? c : strcmp(x->sig, y->sig);
}

/* ----------------------------------------------------------------- build */

amp_status prof_stats_build(prof_stats *s)
{
    memset(s, 0, sizeof *s);
    if (prof_on())
        return amp_set_error(AMP_ERR_STATE, "profiler: stop it (amp_profiler_stop) before reading its results");
    const prof_thread_events *th;
    int nt = prof_threads(&th);
    s->events = amp_profiler_num_events(&s->dropped);
    if (nt == 0)
        return amp_set_error(AMP_ERR_STATE, "profiler: no events recorded (was amp_profiler_start called, and "
                                            "did the profiled code run?)");
    prof_run_window(&s->t_start, &s->t_stop);
    /* The steps: the marks, in time order, on the thread that made them. */
    s->step_tid = th[0].tid;
    int64_t last = s->t_start;
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++)
            if (th[t].ev[i].kind == PROF_STEP) {
                s->steps++;
                s->step_tid = th[t].tid;
                if (th[t].ev[i].t0 > last)
                    last = th[t].ev[i].t0;
            }
    s->marked = s->steps > 0;
    if (!s->marked) {
        s->steps = 1;
        last = s->t_stop;
    }
    s->t_end = last;
    s->wall_ns = s->t_end - s->t_start;

    row_table rt = {0};
    size_t max_n = 0;
    for (int t = 0; t < nt; t++)
        max_n = th[t].n > max_n ? th[t].n : max_n;
    int64_t *parent = malloc(max_n * sizeof *parent), *self = malloc(max_n * sizeof *self);
    int64_t *excl = malloc(max_n * sizeof *excl);
    if (!parent || !self || !excl)
        goto oom;
    for (int t = 0; t < nt; t++) {
        const prof_event *ev = th[t].ev;
        size_t n = th[t].n;
        prof_thread_tree(ev, n, parent, self);
        bool phases_here = th[t].tid == s->step_tid;
        for (size_t i = 0; i < n; i++) {
            const prof_event *e = &ev[i];
            bool in_steps = !s->marked || e->step < s->steps;
            if (e->kind == PROF_PHASE) {
                excl[i] = dur_of(e);
                int64_t a = parent[i];
                while (a >= 0 && ev[a].kind != PROF_PHASE)
                    a = parent[a];
                if (a >= 0)
                    excl[a] -= dur_of(e);
                continue;
            }
            if (e->kind == PROF_STEP || e->kind == PROF_COUNTER || !in_steps)
                continue;
            if (e->kind == PROF_OP_FWD && parent[i] >= 0 && ev[parent[i]].kind == PROF_CAST)
                continue; /* the cast's own `to`: its row is the cast's */
            int clock = clock_of(e);
            prof_row *r = row_for(&rt, e, clock);
            if (!r)
                goto oom;
            r->calls++;
            r->total_ns += is_instant(e) ? 0 : dur_of(e);
            r->self_ns += self[i];
            r->flops += e->flops;
            r->bytes += e->bytes;
            if (e->kind == PROF_CAST) {
                s->casts++;
                s->cast_ns += dur_of(e);
            } else if (e->kind == PROF_CAST_HIT) {
                s->cast_hits++;
            } else if (e->kind == PROF_OP_FWD || e->kind == PROF_OP_BWD) {
                s->flops += e->flops;
            }
        }
        if (!phases_here)
            continue;
        for (size_t i = 0; i < n; i++) {
            const prof_event *e = &ev[i];
            if (e->kind != PROF_PHASE || (s->marked && e->step >= s->steps) || e->phase >= AMP_PHASE_COUNT)
                continue;
            s->phase_ns[e->phase] += excl[i] > 0 ? excl[i] : 0;
        }
    }
    int64_t in_phases = 0;
    for (int p = 0; p < AMP_PHASE_COUNT; p++)
        if (p != AMP_PHASE_OTHER)
            in_phases += s->phase_ns[p];
    /* A phase marked explicitly as "other" is time in no named phase too. */
    s->phase_ns[AMP_PHASE_OTHER] = s->wall_ns > in_phases ? s->wall_ns - in_phases : 0;
    free(parent);
    free(self);
    free(excl);
    free(rt.slot);
    if (rt.n)
        qsort(rt.rows, (size_t)rt.n, sizeof *rt.rows, by_total);
    s->rows = rt.rows;
    s->n_rows = rt.n;
    return AMP_OK;
oom:
    free(parent);
    free(self);
    free(excl);
    free(rt.slot);
    free(rt.rows);
    return amp_set_error(AMP_ERR_MEMORY, "profiler: out of memory digesting %zu events", s->events);
}

void prof_stats_free(prof_stats *s)
{
    free(s->rows);
    s->rows = NULL;
    s->n_rows = 0;
}
