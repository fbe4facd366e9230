/*
 * profile_out.c - what the profiler's events become: the Chrome trace /
 * Perfetto JSON, the key_averages table, the verdict and the summary.
 * The numbers come from profile_stats.c (its header says how steps,
 * phases and self time are counted).
 *
 * The trace (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
 *   pid 0 is the host, one tid per recording thread, every event at its
 *   host times (host_t0/t1: when the host issued device work too);
 *   device-timed events (CUDA events) also go to pid <device> (1: cuda),
 *   tid 0, at their device times turned into host time. Complete events ("X", ts / dur in us) for the
 *   steps (cat "step"), phases, ops (cat "op" / "backward"), casts and
 *   kernels; cast-cache hits are instants ("i"); memory samples are
 *   counters ("C", MiB per category); "M" events name processes and
 *   threads. An op's args hold its tensors' dtypes and shapes, its FLOPs
 *   and bytes, and its parameters by name ("params": {"stride": 2, ...};
 *   the op layer names them, ops/op_params.h). Within a track the events are written in begin order (ts,
 *   then the longer first), so ts never decreases and a parent comes
 *   before the events inside it; the step spans are computed from the
 *   amp_profiler_step marks, which are not written themselves.
 *   Times are integers of ns printed as us with 3 decimals: no rounding
 *   can make a child stick out of its parent.
 */
#include "prof/profile_stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ----------------------------------------------------------------- trace */

static const char *cat_of(int kind)
{
    switch (kind) {
    case PROF_PHASE: return "phase";
    case PROF_STEP: return "step";
    case PROF_OP_FWD: return "op";
    case PROF_OP_BWD: return "backward";
    case PROF_CAST:
    case PROF_CAST_HIT: return "cast";
    case PROF_KERNEL: return "kernel";
    default: return "memory";
    }
}

/* s as a JSON string: quotes, backslashes and control characters escaped;
 * bytes outside ASCII become '?' (names are ASCII; a stray byte must not
 * make the file invalid UTF-8). */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : "?"); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p < 0x7f ? *p : '?', f);
    }
    fputc('"', f);
}

/* ns as microseconds with 3 decimals, exactly. */
static void put_us(FILE *f, int64_t ns)
{
    if (ns < 0) {
        fputc('-', f);
        ns = -ns;
    }
    fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* A finite number (JSON has no NaN or inf: those become 0). */
static void put_num(FILE *f, double x)
{
    if (x != x || x > 1e300 || x < -1e300)
        x = 0;
    if (x < 9e15 && x > -9e15 && x == (double)(int64_t)x)
        fprintf(f, "%lld", (long long)x);
    else
        fprintf(f, "%.6g", x);
}

/* A parameter's number, exactly (the shortest of %.15g and %.17g that
 * reads back the same); JSON has no inf or NaN: those become strings. */
static void put_exact(FILE *f, double x)
{
    if (x != x || x > 1.7976931348623157e308 || x < -1.7976931348623157e308) {
        fputs(x != x ? "\"nan\"" : x > 0 ? "\"inf\"" : "\"-inf\"", f);
        return;
    }
    char b[40];
    snprintf(b, sizeof b, "%.15g", x);
    if (strtod(b, NULL) != x)
        snprintf(b, sizeof b, "%.17g", x);
    fputs(b, f);
}

/* The op's parameters by name, as "params":{"stride":2,...}, (nothing
 * when it has none). */
static void put_params(FILE *f, const prof_event *e)
{
    prof_arg a[PROF_MAX_ARGS];
    int n = e->args(&e->params, a, PROF_MAX_ARGS);
    if (n <= 0)
        return;
    fputs("\"params\":{", f);
    for (int i = 0; i < n && i < PROF_MAX_ARGS; i++) {
        if (i)
            fputc(',', f);
        put_str(f, a[i].name);
        fputc(':', f);
        switch (a[i].kind) {
        case PROF_ARG_INT: fprintf(f, "%lld", (long long)a[i].i); break;
        case PROF_ARG_U64: fprintf(f, "%llu", (unsigned long long)a[i].u); break;
        case PROF_ARG_FLOAT: put_exact(f, a[i].f); break;
        case PROF_ARG_BOOL: fputs(a[i].i ? "true" : "false", f); break;
        case PROF_ARG_STR: put_str(f, a[i].s); break;
        case PROF_ARG_INTS:
            fputc('[', f);
            for (int k = 0; k < a[i].n_ints; k++)
                fprintf(f, "%s%lld", k ? "," : "", (long long)a[i].ints[k]);
            fputc(']', f);
            break;
        }
    }
    fputs("},", f);
}

static void put_tensor(FILE *f, const prof_tensor *t)
{
    fputc('"', f);
    fputs(prof_dtype_name(t->dtype), f);
    if (t->ndim > 0) {
        fputc('[', f);
        int k = t->ndim < PROF_MAX_DIMS ? t->ndim : PROF_MAX_DIMS;
        for (int i = 0; i < k; i++)
            fprintf(f, "%s%lld", i ? "," : "", (long long)t->dims[i]);
        fputc(']', f);
    }
    fputc('"', f);
}

typedef struct {
    FILE *f;
    int64_t t0;  /* the run's start: ts 0 */
    bool first;  /* no event written yet */
} trace_out;

static void head(trace_out *o, const char *ph, const char *name, const char *cat, int pid, int tid, int64_t ts)
{
    fputs(o->first ? "\n" : ",\n", o->f);
    o->first = false;
    fprintf(o->f, "{\"ph\":\"%s\",\"name\":", ph);
    put_str(o->f, name);
    if (cat)
        fprintf(o->f, ",\"cat\":\"%s\"", cat);
    fprintf(o->f, ",\"pid\":%d,\"tid\":%d,\"ts\":", pid, tid);
    put_us(o->f, ts - o->t0);
}

/* Event e on track (pid, tid), from t0 to t1 (its host times on the
 * host's track, its device times on the device's). */
static void put_event(trace_out *o, const prof_event *e, int pid, int tid, int64_t t0, int64_t t1)
{
    FILE *f = o->f;
    const char *name = e->name;
    if (e->kind == PROF_COUNTER) {
        head(o, "C", pid ? "memory (device)" : "memory (host)", NULL, pid, tid, e->t0);
        fputs(",\"args\":{", f);
        for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) {
            fprintf(f, "%s\"%s MiB\":", c ? "," : "", amp_memory_category_name((amp_mem_category)c));
            put_num(f, (double)(e->mem[c] >> 10) / 1024.0);
        }
        fputs("}}", f);
        return;
    }
    if (e->kind == PROF_CAST_HIT) {
        head(o, "i", name ? name : "cast cache hit", cat_of(e->kind), pid, tid, t0);
        fputs(",\"s\":\"t\",\"args\":{", f);
    } else {
        head(o, "X", name, cat_of(e->kind), pid, tid, t0);
        fputs(",\"dur\":", f);
        put_us(f, t1 > t0 ? t1 - t0 : 0);
        fputs(",\"args\":{", f);
    }
    bool bwd = e->kind == PROF_OP_BWD; /* profile.h: out is the gradient arriving, in[] those made */
    if (e->n_in > 0) {
        fputs(bwd ? "\"grad_inputs\":[" : "\"inputs\":[", f);
        for (int i = 0; i < e->n_in && i < PROF_MAX_TENSORS; i++) {
            if (i)
                fputc(',', f);
            put_tensor(f, &e->in[i]);
        }
        fputs("],", f);
    }
    if (e->out.dtype >= 0) {
        fputs(bwd ? "\"grad_output\":" : "\"output\":", f);
        put_tensor(f, &e->out);
        fputc(',', f);
    }
    if (e->flops > 0) {
        fputs("\"flops\":", f);
        put_num(f, e->flops);
        fputc(',', f);
    }
    if (e->bytes > 0) {
        fputs("\"bytes\":", f);
        put_num(f, e->bytes);
        fputc(',', f);
    }
    if (e->args)
        put_params(f, e);
    fputs("\"phase\":", f);
    put_str(f, amp_phase_name((amp_phase)e->phase));
    fprintf(f, ",\"step\":%lld}}", (long long)e->step);
}

/* One track's entries in write order: events (index >= 0) and, on the
 * step thread, the steps (index -1 - k for step k). */
typedef struct {
    int64_t t0, dur;
    int64_t idx;
} entry;

static int by_begin(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    if (x->dur != y->dur) /* the enclosing one first */
        return x->dur > y->dur ? -1 : 1;
    /* Steps before events, then begin order. */
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static bool on_device(const prof_event *e)
{
    return e->device != AMP_CPU && e->dev_mark0 >= 0 && e->dev_mark1 >= 0;
}

/* Writes thread th's events as pid `pid`, tid `tid`: dev AMP_CPU, the
 * host's track: every event at its host times, and with steps (the step
 * thread) the step spans; another device, its track: the events timed on
 * it, at their device times. false when out of memory. */
static bool put_track(trace_out *o, const prof_thread_events *th, int dev, int pid, int tid,
                      const prof_stats *st, bool steps)
{
    entry *es = malloc((th->n + (size_t)st->steps + 1) * sizeof *es);
    if (!es)
        return false;
    size_t n = 0;
    int64_t prev = st->t_start;
    int k = 0;
    for (size_t i = 0; i < th->n; i++) {
        const prof_event *e = &th->ev[i];
        if (e->kind == PROF_STEP) {
            if (steps && st->marked)
                es[n++] = (entry){prev, e->t0 - prev, -1 - k++};
            prev = e->t0;
            continue;
        }
        int64_t t0 = e->t0, t1 = e->t1;
        if (dev == AMP_CPU) {
            if (e->kind == PROF_COUNTER && e->device != AMP_CPU)
                continue;
            t0 = e->host_t0;
            t1 = e->host_t1;
        } else if (e->kind == PROF_COUNTER ? e->device != dev : !on_device(e) || e->device != dev) {
            continue;
        }
        es[n++] = (entry){t0, t1 > t0 ? t1 - t0 : 0, (int64_t)i};
    }
    qsort(es, n, sizeof *es, by_begin);
    for (size_t j = 0; j < n; j++) {
        if (es[j].idx >= 0) {
            put_event(o, &th->ev[es[j].idx], pid, tid, es[j].t0, es[j].t0 + es[j].dur);
            continue;
        }
        char name[32];
        long long s = -1 - es[j].idx;
        snprintf(name, sizeof name, "step %lld", s);
        head(o, "X", name, "step", pid, tid, es[j].t0);
        fputs(",\"dur\":", o->f);
        put_us(o->f, es[j].dur);
        fprintf(o->f, ",\"args\":{\"step\":%lld}}", s);
    }
    free(es);
    return true;
}

static void put_meta(trace_out *o, const char *what, int pid, int tid, const char *value)
{
    head(o, "M", what, NULL, pid, tid, o->t0);
    fputs(",\"args\":{\"name\":", o->f);
    put_str(o->f, value);
    fputs("}}", o->f);
}

static const char *device_label(int d) { return d == AMP_CUDA ? "cuda (device time)" : "device (device time)"; }

static amp_status write_events(FILE *f, const prof_stats *st)
{
    const prof_thread_events *th;
    int nt = prof_threads(&th);
    trace_out o = {f, st->t_start, true};
    bool dev_used[AMP_DEVICE_COUNT] = {false};
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"ampc " AMPC_VERSION "\",", f);
    fprintf(f, "\"steps\":%d,\"events\":%zu,\"dropped\":%zu},\"traceEvents\":[", st->marked ? st->steps : 0,
            st->events, st->dropped);
    put_meta(&o, "process_name", 0, 0, "ampc (host)");
    for (int t = 0; t < nt; t++) {
        char name[32];
        if (th[t].tid == st->step_tid)
            snprintf(name, sizeof name, "main (thread %d)", th[t].tid);
        else
            snprintf(name, sizeof name, "thread %d", th[t].tid);
        put_meta(&o, "thread_name", 0, th[t].tid, name);
        for (size_t i = 0; i < th[t].n; i++)
            if (th[t].ev[i].device > AMP_CPU && th[t].ev[i].device < AMP_DEVICE_COUNT &&
                (on_device(&th[t].ev[i]) || th[t].ev[i].kind == PROF_COUNTER))
                dev_used[th[t].ev[i].device] = true;
    }
    for (int d = 1; d < AMP_DEVICE_COUNT; d++)
        if (dev_used[d]) {
            put_meta(&o, "process_name", d, 0, device_label(d));
            put_meta(&o, "thread_name", d, 0, "stream");
        }
    for (int t = 0; t < nt; t++)
        if (!put_track(&o, &th[t], AMP_CPU, 0, th[t].tid, st, th[t].tid == st->step_tid))
            return amp_set_error(AMP_ERR_MEMORY, "profiler_write_trace: out of memory");
    for (int d = 1; d < AMP_DEVICE_COUNT; d++)
        for (int t = 0; dev_used[d] && t < nt; t++)
            if (!put_track(&o, &th[t], d, d, 0, st, false))
                return amp_set_error(AMP_ERR_MEMORY, "profiler_write_trace: out of memory");
    fputs("\n]}\n", f);
    return AMP_OK;
}

amp_status amp_profiler_write_trace(const char *path)
{
    if (!path || !*path)
        return amp_set_error(AMP_ERR_ARG, "profiler_write_trace: no file name given");
    /* Renaming over a device or a FIFO (as root, /dev/null) would replace
     * it with a file: only a regular file is replaced. */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return amp_set_error(AMP_ERR_IO, "profiler_write_trace: '%s' exists and is not a regular file", path);
    prof_stats st;
    amp_status rc = prof_stats_build(&st);
    if (rc != AMP_OK)
        return rc;
    /* Written beside the target, then renamed over it: a reader never sees
     * half a trace, and a failed write leaves the old file. */
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        prof_stats_free(&st);
        return amp_set_error(AMP_ERR_MEMORY, "profiler_write_trace: out of memory");
    }
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rc = amp_set_error(AMP_ERR_IO, "profiler_write_trace: cannot write the trace '%s': %s", path,
                           strerror(errno));
    } else {
        rc = write_events(f, &st);
        int werr = ferror(f) ? errno : 0;
        if (fclose(f) != 0 && !werr)
            werr = errno ? errno : EIO;
        if (rc == AMP_OK && werr)
            rc = amp_set_error(AMP_ERR_IO, "profiler_write_trace: writing the trace '%s' failed: %s", path,
                               strerror(werr));
        if (rc == AMP_OK && rename(tmp, path) != 0)
            rc = amp_set_error(AMP_ERR_IO, "profiler_write_trace: cannot write the trace '%s': %s", path,
                               strerror(errno));
        if (rc != AMP_OK)
            unlink(tmp);
    }
    free(tmp);
    prof_stats_free(&st);
    return rc;
}

/* ----------------------------------------------------- table and verdict */

static double ms(int64_t ns) { return (double)ns / 1e6; }
static double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0; }

static void pass_text(char *buf, size_t n, const prof_row *r)
{
    if (r->device != AMP_CPU)
        snprintf(buf, n, "%s@%s", prof_pass_name(r->kind), r->device == AMP_CUDA ? "cuda" : "dev");
    else
        snprintf(buf, n, "%s", prof_pass_name(r->kind));
}

/* A rate in G per second, or "-" when there is nothing to show. */
static void rate(char *buf, size_t n, double amount, int64_t ns)
{
    if (amount > 0 && ns > 0)
        snprintf(buf, n, "%.1f", amount / (double)ns);
    else
        snprintf(buf, n, "-");
}

/* Builds the statistics of what was recorded, has write print them to f
 * (NULL: stdout) and frees them; who names the call when writing failed. */
static amp_status print_stats(FILE *f, void (*write)(FILE *f, const prof_stats *st, int arg), int arg,
                              const char *who)
{
    if (!f)
        f = stdout;
    prof_stats st;
    amp_status rc = prof_stats_build(&st);
    if (rc != AMP_OK)
        return rc;
    write(f, &st, arg);
    prof_stats_free(&st);
    return ferror(f) ? amp_set_error(AMP_ERR_IO, "%s: writing failed", who) : AMP_OK;
}

/* The table of op rows: at most max_rows (0: all), then the steps. */
static void write_table(FILE *f, const prof_stats *st, int max_rows)
{
    int shown = max_rows > 0 && max_rows < st->n_rows ? max_rows : st->n_rows;
    fprintf(f, "%-30s %-8s %-24s %8s %10s %10s %7s %8s %8s\n", "op", "pass", "dtypes", "calls", "total ms",
            "self ms", "% steps", "GFLOP/s", "GB/s");
    for (int i = 0; i < 30 + 8 + 24 + 8 + 10 + 10 + 7 + 8 + 8 + 8; i++)
        fputc('-', f);
    fputc('\n', f);
    for (int i = 0; i < shown; i++) {
        const prof_row *r = &st->rows[i];
        char pass[16], gf[24], gb[24];
        pass_text(pass, sizeof pass, r);
        rate(gf, sizeof gf, r->flops, r->total_ns);
        rate(gb, sizeof gb, r->bytes, r->total_ns);
        fprintf(f, "%-30.30s %-8s %-24.24s %8lld %10.3f %10.3f %6.1f%% %8s %8s\n", r->label, pass, r->sig,
                (long long)r->calls, ms(r->total_ns), ms(r->self_ns), pct(r->total_ns, st->wall_ns), gf, gb);
    }
    if (shown < st->n_rows)
        fprintf(f, "... %d more rows\n", st->n_rows - shown);
    fprintf(f, "%d step%s profiled, %.3f ms a step (%.3f ms in all); %zu events", st->steps,
            st->steps == 1 ? "" : "s", ms(st->wall_ns) / st->steps, ms(st->wall_ns), st->events);
    if (st->dropped)
        fprintf(f, ", %zu dropped (past max_events)", st->dropped);
    fputc('\n', f);
    if (!st->marked)
        fprintf(f, "(no amp_profiler_step marks: the whole run counted as one step)\n");
}

amp_status amp_profiler_print_table(FILE *f, int max_rows)
{
    if (max_rows < 0)
        return amp_set_error(AMP_ERR_ARG, "profiler_print_table: max_rows %d is negative (0: all rows)", max_rows);
    return print_stats(f, write_table, max_rows, "profiler_print_table");
}

/* The op and cast rows that take time (not cache hits; not kernels, whose
 * time is their op's), by self time, longest first: at most n indexes
 * into st->rows. */
static int top_by_self(const prof_stats *st, int *idx, int n)
{
    int k = 0;
    for (int i = 0; i < st->n_rows; i++) {
        const prof_row *r = &st->rows[i];
        if (r->kind == PROF_CAST_HIT || r->kind == PROF_KERNEL || r->self_ns <= 0)
            continue;
        if (k == n && r->self_ns <= st->rows[idx[n - 1]].self_ns)
            continue;
        int j = k < n ? k++ : n - 1; /* a new place, or the last one's */
        while (j > 0 && st->rows[idx[j - 1]].self_ns < r->self_ns) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    return k;
}

static void row_name(char *buf, size_t n, const prof_row *r)
{
    char pass[16];
    pass_text(pass, sizeof pass, r);
    if (r->kind == PROF_CAST)
        snprintf(buf, n, "%s", r->label);
    else if (r->sig[0])
        snprintf(buf, n, "%s %s (%s)", r->label, pass, r->sig);
    else
        snprintf(buf, n, "%s %s", r->label, pass);
}

/* The verdict: where the step's time went, the top ops, autocast's casts. */
static void write_verdict(FILE *f, const prof_stats *st, int unused)
{
    (void)unused;
    const int64_t *p = st->phase_ns, w = st->wall_ns;
    int64_t optim = p[AMP_PHASE_OPTIMIZER] + p[AMP_PHASE_UNSCALE] + p[AMP_PHASE_SCALER_UPDATE];
    fprintf(f, "verdict: %d step%s of %.3f ms\n", st->steps, st->steps == 1 ? "" : "s", ms(w) / st->steps);
    fprintf(f, "  step time: data %.1f%%, forward %.1f%%, backward %.1f%%, optimizer %.1f%% (unscale %.1f%%, "
               "step %.1f%%, scaler update %.1f%%), ",
            pct(p[AMP_PHASE_DATA], w), pct(p[AMP_PHASE_FORWARD], w), pct(p[AMP_PHASE_BACKWARD], w), pct(optim, w),
            pct(p[AMP_PHASE_UNSCALE], w), pct(p[AMP_PHASE_OPTIMIZER], w), pct(p[AMP_PHASE_SCALER_UPDATE], w));
    if (p[AMP_PHASE_CHECKPOINT] > 0)
        fprintf(f, "checkpoint save %.1f%%, ", pct(p[AMP_PHASE_CHECKPOINT], w));
    fprintf(f, "other %.1f%%\n", pct(p[AMP_PHASE_OTHER], w));
    /* The largest part of the step. */
    const char *big = "other";
    int64_t big_ns = p[AMP_PHASE_OTHER];
    const struct {
        const char *name;
        int64_t ns;
    } parts[] = {{"data", p[AMP_PHASE_DATA]},
                 {"forward", p[AMP_PHASE_FORWARD]},
                 {"backward", p[AMP_PHASE_BACKWARD]},
                 {"optimizer", optim},
                 {"checkpoint save", p[AMP_PHASE_CHECKPOINT]}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i].ns > big_ns) {
            big = parts[i].name;
            big_ns = parts[i].ns;
        }
    int top[3], nt = top_by_self(st, top, 3);
    fprintf(f, "  the largest part is %s (%.1f%% of the step)", big, pct(big_ns, w));
    if (nt == 0)
        fprintf(f, "; no op was recorded\n");
    else
        fprintf(f, "; top ops by self time:\n");
    for (int i = 0; i < nt; i++) {
        char name[160];
        const prof_row *r = &st->rows[top[i]];
        row_name(name, sizeof name, r);
        fprintf(f, "    %d. %s: %.3f ms a step, %.1f%% (%lld calls)\n", i + 1, name, ms(r->self_ns) / st->steps,
                pct(r->self_ns, w), (long long)r->calls);
    }
    if (st->casts || st->cast_hits)
        fprintf(f, "  autocast casts: %.1f a step, %.3f ms a step (%.1f%% of the step), %.1f cache hits a step\n",
                (double)st->casts / st->steps, ms(st->cast_ns) / st->steps, pct(st->cast_ns, w),
                (double)st->cast_hits / st->steps);
    else
        fprintf(f, "  autocast casts: none recorded\n");
}

amp_status amp_profiler_print_verdict(FILE *f) { return print_stats(f, write_verdict, 0, "profiler_print_verdict"); }

amp_status amp_profiler_summary(amp_profile_summary *out)
{
    if (!out)
        return amp_set_error(AMP_ERR_ARG, "profiler_summary: out is NULL");
    memset(out, 0, sizeof *out);
    prof_stats st;
    amp_status rc = prof_stats_build(&st);
    if (rc != AMP_OK)
        return rc;
    double n = st.steps;
    out->steps = st.steps;
    out->step_ms = ms(st.wall_ns) / n;
    for (int p = 0; p < AMP_PHASE_COUNT; p++)
        out->phase_ms[p] = ms(st.phase_ns[p]) / n;
    out->cast_ms = ms(st.cast_ns) / n;
    out->casts = (st.casts + st.steps / 2) / st.steps;
    out->cast_cache_hits = (st.cast_hits + st.steps / 2) / st.steps;
    out->gflop = st.flops / 1e9 / n;
    out->events = st.events;
    out->dropped = st.dropped;
    int top[5], k = top_by_self(&st, top, 5);
    for (int i = 0; i < k; i++) {
        row_name(out->top[i].name, sizeof out->top[i].name, &st.rows[top[i]]);
        out->top[i].ms = ms(st.rows[top[i]].self_ns) / n;
    }
    prof_stats_free(&st);
    return AMP_OK;
}
