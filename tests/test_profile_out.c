/*
 * test_profile_out.c - the profiler's outputs (src/prof/profile_out.c,
 * profile_stats.c) on events recorded by hand: prof_begin / prof_end with
 * made-up names, dtypes, FLOPs and bytes, inside phases marked with
 * amp_phase_begin / amp_phase_end and steps marked with amp_profiler_step,
 * as the library's hooks and ampc train record them.
 *
 *   - the trace parses as JSON and follows the trace-event format
 *     (tests/trace_check.h): fields, nesting, ts monotone per track, ops
 *     inside phases, one "step" event per step, cache hits as instants,
 *     memory counters, names escaped, device-timed events on their own pid;
 *   - a trace that cannot be written fails naming the path, leaving
 *     nothing behind;
 *   - the table groups by (op, pass, dtypes), counts calls, and its self
 *     time is the total minus the children's, to the ns (an op keeps its
 *     kernels' time);
 *   - the summary's phase split adds up to the step, exclusive of nested
 *     phases; casts, cache hits and FLOPs per step are exact;
 *   - the outputs refuse to run while the profiler records, or with
 *     nothing recorded.
 */
#include "harness.h"
#include "scratch.h"
#include "trace_check.h"

#include "record/profile.h"

#include <pthread.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>


/* Some work, so events have a duration (never asserted). */
static volatile double sink;
static void spin(int n)
{
    for (int i = 0; i < n; i++)
        sink += i * 0.5;
}

static const int64_t shape_a[2] = {64, 784}, shape_b[2] = {784, 256}, shape_c[2] = {64, 256};

/* A made-up op: name, pass, a bf16 matmul's dtypes and shapes, flops. */
static prof_event *op_begin(prof_kind kind, const char *name)
{
    prof_event *e = prof_begin(kind, name);
    if (e) {
        e->n_in = 2;
        prof_set_tensor(&e->in[0], AMP_BF16, shape_a, 2);
        prof_set_tensor(&e->in[1], AMP_BF16, shape_b, 2);
        prof_set_tensor(&e->out, AMP_BF16, shape_c, 2);
        e->flops = 2.0 * 64 * 784 * 256;
        e->bytes = 2.0 * (64 * 784 + 784 * 256 + 64 * 256);
    }
    return e;
}

/* One made-up training step: data, forward (a matmul with a cast inside
 * and a cache hit, then a relu), backward (the matmul's), unscale and an
 * optimizer step holding a nested scaler-update phase. */
static void fake_step(void)
{
    amp_phase_begin(AMP_PHASE_DATA);
    spin(2000);
    amp_phase_end(AMP_PHASE_DATA);
    amp_phase_begin(AMP_PHASE_FORWARD);
    prof_event *mm = op_begin(PROF_OP_FWD, "matmul");
    prof_event *c = prof_begin(PROF_CAST, "to_bf16");
    if (c) {
        c->n_in = 1;
        prof_set_tensor(&c->in[0], AMP_F32, shape_b, 2);
        prof_set_tensor(&c->out, AMP_BF16, shape_b, 2);
    }
    prof_event *to = prof_begin(PROF_OP_FWD, "to"); /* the op the cast wraps (profile.h) */
    spin(3000);
    prof_end(to);
    prof_end(c);
    prof_event *hit = prof_instant(PROF_CAST_HIT, "to_bf16");
    if (hit)
        prof_set_tensor(&hit->out, AMP_BF16, shape_b, 2);
    spin(5000);
    prof_end(mm);
    prof_event *relu = prof_begin(PROF_OP_FWD, "relu");
    if (relu) {
        relu->n_in = 1;
        prof_set_tensor(&relu->in[0], AMP_BF16, shape_c, 2);
        prof_set_tensor(&relu->out, AMP_BF16, shape_c, 2);
        relu->bytes = 4.0 * 64 * 256;
    }
    spin(1000);
    prof_end(relu);
    amp_phase_end(AMP_PHASE_FORWARD);
    amp_phase_begin(AMP_PHASE_BACKWARD);
    prof_event *bw = op_begin(PROF_OP_BWD, "matmul");
    if (bw)
        bw->flops *= 2;
    spin(2000);
    prof_event *k = prof_begin(PROF_KERNEL, "gemm 12x32");
    spin(6000);
    prof_end(k);
    prof_end(bw);
    amp_phase_end(AMP_PHASE_BACKWARD);
    amp_phase_begin(AMP_PHASE_UNSCALE);
    spin(500);
    amp_phase_end(AMP_PHASE_UNSCALE);
    amp_phase_begin(AMP_PHASE_OPTIMIZER);
    spin(1000);
    amp_phase_begin(AMP_PHASE_SCALER_UPDATE);
    spin(300);
    amp_phase_end(AMP_PHASE_SCALER_UPDATE);
    amp_phase_end(AMP_PHASE_OPTIMIZER);
    spin(200); /* in no phase: "other" */
    amp_profiler_step();
}

static void record(int steps)
{
    CHECK_OK(amp_profiler_start(NULL));
    for (int i = 0; i < steps; i++)
        fake_step();
    CHECK_OK(amp_profiler_stop());
}

/* The event durations of kind / name recorded, summed (ns). */
static int64_t sum_ns(int kind, const char *name, int64_t *count)
{
    const prof_thread_events *th;
    int nt = prof_threads(&th);
    int64_t s = 0, n = 0;
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++) {
            const prof_event *e = &th[t].ev[i];
            if (e->kind == kind && (!name || strcmp(e->name, name) == 0)) {
                s += e->t1 - e->t0;
                n++;
            }
        }
    if (count)
        *count = n;
    return s;
}

/* What fn prints, malloc'd (a temporary file: gcc's dangling-pointer
 * check misreads open_memstream's buffer). */
static char *capture(amp_status (*fn)(FILE *), size_t *len)
{
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f)
        return calloc(1, 1);
    CHECK_OK(fn(f));
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = '\0';
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

static amp_status table_all(FILE *f) { return amp_profiler_print_table(f, 0); }
static amp_status table_two(FILE *f) { return amp_profiler_print_table(f, 2); }

static void test_trace_parses_and_follows_the_format(void)
{
    record(3);
    char path[128];
    snprintf(path, sizeof path, "%s/trace.json", tmpdir);
    CHECK_OK(amp_profiler_write_trace(path));
    size_t len;
    char *text = trace_read(path, &len);
    CHECK(text != NULL);
    if (!text)
        return;
    trace_report r;
    CHECK_MSG(trace_check(text, len, true, &r), "trace: %s", r.error);
    CHECK_EQ_INT(r.n_step, 3);
    CHECK_EQ_INT(r.n_phase, 3 * 6); /* data, forward, backward, unscale, optimizer, scaler update */
    CHECK_EQ_INT(r.n_op, 3 * 6); /* matmul, the cast and its to, relu, matmul's backward and its kernel */
    CHECK_EQ_INT(r.n_instant, 3);   /* the cache hits */
    CHECK(r.n_counter > 0);         /* memory samples */
    CHECK(r.n_meta >= 2);           /* process and thread names */
    CHECK(strstr(text, "\"inputs\":[\"bf16[64,784]\",\"bf16[784,256]\"]") != NULL);
    CHECK(strstr(text, "\"output\":\"bf16[64,256]\"") != NULL);
    CHECK(strstr(text, "\"flops\":25690112") != NULL);
    CHECK(strstr(text, "\"cat\":\"backward\"") != NULL);
    CHECK(strstr(text, "\"name\":\"memory (host)\",\"pid\":0") != NULL);
    CHECK(strstr(text, "\"process_name\"") != NULL);
    free(text);
    /* Written whole, through a temporary that does not stay. */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 1", tmpdir);
    CHECK_EQ_INT(system(cmd), 0);
}

static void test_trace_names_are_escaped(void)
{
    CHECK_OK(amp_profiler_start(NULL));
    amp_phase_begin(AMP_PHASE_FORWARD);
    prof_event *e = prof_begin(PROF_OP_FWD, "we\"ird\\na\tme");
    prof_end(e);
    amp_phase_end(AMP_PHASE_FORWARD);
    amp_profiler_step();
    CHECK_OK(amp_profiler_stop());
    char path[128];
    snprintf(path, sizeof path, "%s/escaped.json", tmpdir);
    CHECK_OK(amp_profiler_write_trace(path));
    size_t len;
    char *text = trace_read(path, &len);
    trace_report r;
    CHECK_MSG(text && trace_check(text, len, true, &r), "trace: %s", r.error);
    const json_value *root;
    char err[128];
    json_doc *doc = text ? json_parse(text, len, &root, err, sizeof err) : NULL;
    bool found = false;
    const json_value *evs = doc ? json_get(root, "traceEvents") : NULL;
    for (int i = 0; evs && i < evs->n; i++) {
        const json_value *n = json_get(&evs->items[i], "name");
        found |= n && strcmp(n->str, "we\"ird\\na\tme") == 0;
    }
    CHECK_MSG(found, "the escaped name does not read back");
    json_free(doc);
    free(text);
}

static void test_unwritable_trace_fails_naming_the_path(void)
{
    record(1);
    char path[160];
    snprintf(path, sizeof path, "%s/no-such-dir/trace.json", tmpdir);
    CHECK_EQ_INT(amp_profiler_write_trace(path), AMP_ERR_IO);
    CHECK_ERROR(AMP_ERR_IO, path);
    CHECK_EQ_INT(amp_profiler_write_trace(""), AMP_ERR_ARG);
    amp_clear_error();
    /* A failed write leaves an existing file as it was. */
    snprintf(path, sizeof path, "%s/ro", tmpdir);
    mkdir(path, 0500);
    char file[200];
    snprintf(file, sizeof file, "%s/trace.json", path);
    if (getuid() != 0) { /* root writes anywhere */
        CHECK_EQ_INT(amp_profiler_write_trace(file), AMP_ERR_IO);
        CHECK_ERROR(AMP_ERR_IO, file);
        CHECK(access(file, F_OK) != 0);
    }
    rmdir(path);
    /* A FIFO (or a device) is never replaced by a file. */
    snprintf(path, sizeof path, "%s/fifo", tmpdir);
    CHECK_EQ_INT(mkfifo(path, 0600), 0);
    CHECK_EQ_INT(amp_profiler_write_trace(path), AMP_ERR_IO);
    CHECK_ERROR(AMP_ERR_IO, "is not a regular file");
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode));
    unlink(path);
}

static void test_table_groups_by_op_pass_and_dtypes(void)
{
    record(4);
    size_t len;
    char *t = capture(table_all, &len);
    CHECK(strstr(t, "op ") == t);
    /* One row each; calls per row = steps. */
    const char *want[] = {"matmul", "relu", "to bf16 (autocast)", "to bf16 (autocast, cache hit)", "gemm 12x32"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(t, want[i]) != NULL, "no row %s in\n%s", want[i], t);
    const char *line = strstr(t, "\nmatmul");
    CHECK(line != NULL);
    int rows_matmul = 0;
    for (const char *p = t; (p = strstr(p, "\nmatmul ")) != NULL; p++)
        rows_matmul++;
    CHECK_EQ_INT(rows_matmul, 2); /* fwd and bwd */
    CHECK(strstr(t, "bf16,bf16 -> bf16") != NULL);
    CHECK(strstr(t, "fp32 -> bf16") != NULL);
    /* A backward reads gradient arriving -> gradients made. */
    CHECK(strstr(t, "\nmatmul                         bwd      bf16 -> bf16,bf16 ") != NULL);
    /* The cast's own `to` has no row: the cast's stands for it, self = total. */
    CHECK_MSG(strstr(t, "\nto  ") == NULL, "%s", t);
    char row[256] = "";
    const char *cast = strstr(t, "\nto bf16 (autocast) ");
    if (cast)
        snprintf(row, sizeof row, "%.*s", (int)strcspn(cast + 1, "\n"), cast + 1);
    const char *nums = strstr(row, "fp32 -> bf16");
    double total = 0, self = 0;
    long long calls = 0;
    CHECK_MSG(nums && sscanf(nums + 12, "%lld %lf %lf", &calls, &total, &self) == 3, "cast row: %s", row);
    CHECK_EQ_INT(calls, 4);
    CHECK(total > 0 && total == self);
    CHECK(strstr(t, "4 steps profiled") != NULL);
    free(t);
    t = capture(table_two, &len);
    CHECK(strstr(t, "... 4 more rows") != NULL);
    free(t);
}

static void test_self_time_is_total_minus_children(void)
{
    record(2);
    int64_t n_mm, n_cast;
    /* Forward matmuls hold the casts: their self is total minus the casts'. */
    const prof_thread_events *th;
    int nt = prof_threads(&th);
    int64_t mm_fwd = 0, casts = sum_ns(PROF_CAST, NULL, &n_cast);
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++)
            if (th[t].ev[i].kind == PROF_OP_FWD && strcmp(th[t].ev[i].name, "matmul") == 0)
                mm_fwd += th[t].ev[i].t1 - th[t].ev[i].t0;
    sum_ns(PROF_OP_FWD, "matmul", &n_mm);
    CHECK_EQ_INT(n_mm, 2);
    CHECK_EQ_INT(n_cast, 2);
    amp_profile_summary s;
    CHECK_OK(amp_profiler_summary(&s));
    bool found = false;
    for (int i = 0; i < 5; i++)
        if (strncmp(s.top[i].name, "matmul fwd", 10) == 0) {
            found = true;
            CHECK_NEAR(s.top[i].ms, (double)(mm_fwd - casts) / 1e6 / 2, 1e-9);
        }
    CHECK_MSG(found, "matmul fwd not among the top 5");
    /* The backward matmul keeps its kernel's time; the kernel is no top op. */
    int64_t mm_bwd = 0;
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < th[t].n; i++)
            if (th[t].ev[i].kind == PROF_OP_BWD)
                mm_bwd += th[t].ev[i].t1 - th[t].ev[i].t0;
    found = false;
    for (int i = 0; i < 5; i++) {
        CHECK(strstr(s.top[i].name, "gemm") == NULL);
        if (strncmp(s.top[i].name, "matmul bwd", 10) == 0) {
            found = true;
            CHECK_NEAR(s.top[i].ms, (double)mm_bwd / 1e6 / 2, 1e-9);
        }
    }
    CHECK_MSG(found, "matmul bwd not among the top 5");
    /* The top list is sorted. */
    for (int i = 1; i < 5 && s.top[i].name[0]; i++)
        CHECK(s.top[i].ms <= s.top[i - 1].ms);
}

static void test_summary_phase_split_adds_up(void)
{
    record(3);
    amp_profile_summary s;
    CHECK_OK(amp_profiler_summary(&s));
    CHECK_EQ_INT(s.steps, 3);
    double sum = 0;
    for (int p = 0; p < AMP_PHASE_COUNT; p++) {
        CHECK(s.phase_ms[p] >= 0);
        sum += s.phase_ms[p];
    }
    CHECK_NEAR(sum, s.step_ms, 1e-6);
    /* The optimizer's time excludes the scaler update nested in it. */
    int64_t n;
    double opt = (double)sum_ns(PROF_PHASE, "optimizer", &n) / 1e6 / 3;
    double upd = (double)sum_ns(PROF_PHASE, "scaler update", NULL) / 1e6 / 3;
    CHECK_EQ_INT(n, 3);
    CHECK_NEAR(s.phase_ms[AMP_PHASE_OPTIMIZER], opt - upd, 1e-6);
    CHECK_NEAR(s.phase_ms[AMP_PHASE_SCALER_UPDATE], upd, 1e-6);
    CHECK_NEAR(s.phase_ms[AMP_PHASE_BACKWARD], (double)sum_ns(PROF_PHASE, "backward", NULL) / 1e6 / 3, 1e-6);
    CHECK(s.phase_ms[AMP_PHASE_OTHER] > 0); /* the spin outside phases, at least */
    CHECK_EQ_INT(s.casts, 1);
    CHECK_EQ_INT(s.cast_cache_hits, 1);
    CHECK_NEAR(s.cast_ms, (double)sum_ns(PROF_CAST, NULL, NULL) / 1e6 / 3, 1e-6);
    /* Forward matmul + backward (twice the FLOPs); relu has none. */
    CHECK_NEAR(s.gflop, 3.0 * 2 * 64 * 784 * 256 / 1e9, 1e-12);
    CHECK(s.events > 0);
    CHECK_EQ_INT(s.dropped, 0);
}

static void test_verdict_names_the_split_top_ops_and_casts(void)
{
    record(2);
    size_t len;
    char *v = capture(amp_profiler_print_verdict, &len);
    const char *want[] = {"verdict: 2 steps", "data ", "forward ", "backward ", "optimizer ", "unscale ",
                          "scaler update ", "other ", "top ops by self time", "1. ", "2. ", "3. ",
                          "autocast casts: 1.0 a step", "1.0 cache hits a step"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(v, want[i]) != NULL, "no \"%s\" in\n%s", want[i], v);
    free(v);
}

static void test_a_run_without_step_marks_is_one_step(void)
{
    CHECK_OK(amp_profiler_start(NULL));
    amp_phase_begin(AMP_PHASE_FORWARD);
    prof_end(prof_begin(PROF_OP_FWD, "relu"));
    amp_phase_end(AMP_PHASE_FORWARD);
    CHECK_OK(amp_profiler_stop());
    amp_profile_summary s;
    CHECK_OK(amp_profiler_summary(&s));
    CHECK_EQ_INT(s.steps, 1);
    size_t len;
    char *t = capture(table_all, &len);
    CHECK(strstr(t, "no amp_profiler_step marks") != NULL);
    free(t);
}

static void test_outputs_refuse_while_recording_or_empty(void)
{
    amp_profiler_reset();
    amp_profile_summary s;
    CHECK_EQ_INT(amp_profiler_summary(&s), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "no events");
    CHECK_OK(amp_profiler_start(NULL));
    CHECK_EQ_INT(amp_profiler_print_verdict(stderr), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "amp_profiler_stop");
    CHECK_OK(amp_profiler_stop());
    CHECK_EQ_INT(amp_profiler_print_table(stdout, -1), AMP_ERR_ARG);
    amp_clear_error();
}

static void test_dropped_events_are_reported_and_the_trace_stays_valid(void)
{
    amp_profiler_opts po = amp_profiler_defaults();
    po.max_events = 40;
    CHECK_OK(amp_profiler_start(&po));
    for (int i = 0; i < 4; i++)
        fake_step();
    CHECK_OK(amp_profiler_stop());
    amp_profile_summary s;
    CHECK_OK(amp_profiler_summary(&s));
    /* Past the cap only the step marks are kept, so the steps still count. */
    CHECK_EQ_INT(s.steps, 4);
    CHECK(s.events > 40 && s.events <= 44);
    CHECK(s.dropped > 0);
    size_t len;
    char *t = capture(table_all, &len);
    CHECK_MSG(strstr(t, "dropped (past max_events)") != NULL, "%s", t);
    free(t);
    char path[128];
    snprintf(path, sizeof path, "%s/dropped.json", tmpdir);
    CHECK_OK(amp_profiler_write_trace(path));
    char *text = trace_read(path, &len);
    trace_report r;
    CHECK_MSG(text && trace_check(text, len, true, &r), "trace: %s", r.error);
    free(text);
}

/* Another thread's ops: their own tid; phases counted on the main one. */
static void *worker(void *arg)
{
    (void)arg;
    prof_event *e = prof_begin(PROF_KERNEL, "worker_kernel");
    spin(1000);
    prof_end(e);
    return NULL;
}

static void test_threads_get_their_own_tracks(void)
{
    CHECK_OK(amp_profiler_start(NULL));
    fake_step();
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, worker, NULL), 0);
    pthread_join(th, NULL);
    fake_step();
    CHECK_OK(amp_profiler_stop());
    char path[128];
    snprintf(path, sizeof path, "%s/threads.json", tmpdir);
    CHECK_OK(amp_profiler_write_trace(path));
    size_t len;
    char *text = trace_read(path, &len);
    trace_report r;
    /* The worker's kernel is in no phase of its own thread. */
    CHECK_MSG(text && trace_check(text, len, false, &r), "trace: %s", r.error);
    CHECK_EQ_INT(r.ops_outside_phases, 1);
    CHECK(strstr(text, "\"name\":\"worker_kernel\",\"cat\":\"kernel\",\"pid\":0,\"tid\":1") != NULL);
    free(text);
}

/* A made-up device clock: mark i is at host time base + 1000 * i ns. */
static int32_t n_marks;
static int64_t dev_base;
static int32_t fake_mark(void) { return n_marks++; }
static void fake_resolve(const int32_t *m, int n, int64_t *ns)
{
    for (int i = 0; i < n; i++)
        ns[i] = dev_base + 1000 * (int64_t)m[i];
}
static void fake_reset(void) { n_marks = 0; }

static void test_device_timed_events_go_to_the_device_pid(void)
{
    static const prof_device_timer timer = {fake_mark, fake_resolve, fake_reset, NULL};
    prof_register_device_timer(AMP_CUDA, &timer);
    CHECK_OK(amp_profiler_start(NULL));
    dev_base = prof_now_ns();
    amp_phase_begin(AMP_PHASE_FORWARD);
    for (int i = 0; i < 3; i++) {
        prof_event *e = prof_begin(PROF_KERNEL, "gemm_kernel");
        e->device = AMP_CUDA;
        e->dev_mark0 = prof_device_mark(AMP_CUDA);
        e->dev_mark1 = prof_device_mark(AMP_CUDA);
        prof_end(e);
    }
    amp_phase_end(AMP_PHASE_FORWARD);
    amp_profiler_step();
    CHECK_OK(amp_profiler_stop());
    prof_register_device_timer(AMP_CUDA, NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/device.json", tmpdir);
    CHECK_OK(amp_profiler_write_trace(path));
    size_t len;
    char *text = trace_read(path, &len);
    trace_report r;
    CHECK_MSG(text && trace_check(text, len, true, &r), "trace: %s", r.error);
    CHECK(text && strstr(text, "\"name\":\"gemm_kernel\",\"cat\":\"kernel\",\"pid\":1,\"tid\":0") != NULL);
    CHECK(text && strstr(text, "cuda (device time)") != NULL);
    free(text);
    /* Each kernel is 1000 ns on the device clock: 3 calls, 0.003 ms. */
    size_t n;
    char *t = capture(table_all, &n);
    CHECK_MSG(strstr(t, "kernel@cuda") != NULL && strstr(t, "       3      0.003      0.003") != NULL, "%s", t);
    free(t);
}

int main(void)
{
    scratch_make("profile-out");
    RUN(test_trace_parses_and_follows_the_format);
    RUN(test_trace_names_are_escaped);
    RUN(test_unwritable_trace_fails_naming_the_path);
    RUN(test_table_groups_by_op_pass_and_dtypes);
    RUN(test_self_time_is_total_minus_children);
    RUN(test_summary_phase_split_adds_up);
    RUN(test_verdict_names_the_split_top_ops_and_casts);
    RUN(test_a_run_without_step_marks_is_one_step);
    RUN(test_outputs_refuse_while_recording_or_empty);
    RUN(test_dropped_events_are_reported_and_the_trace_stays_valid);
    RUN(test_threads_get_their_own_tracks);
    RUN(test_device_timed_events_go_to_the_device_pid);
    scratch_remove();
    return harness_done();
}
