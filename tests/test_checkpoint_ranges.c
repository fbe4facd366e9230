/*
 * test_checkpoint_ranges.c - amp_checkpoint_load range-checks every number
 * it reads and opens only what it can read to the end;
 * amp_checkpoint_save cleans up after interrupted saves:
 *
 *   - a metadata number outside its range (the step, the optimizer's and
 *     the scaler's counters, the growth tracker) is an error naming the
 *     file, the field, the value and the range, and changes nothing;
 *   - a non-finite weight or optimizer buffer, or a negative Adam
 *     exp_avg_sq / max_exp_avg_sq, is an error naming the tensor; a save
 *     of non-finite state is refused and the old file kept;
 *   - the scaler's steps / skipped / skipped-in-a-row counters and its
 *     hysteresis count come back with the rest;
 *   - a FIFO or a device is refused at once (a FIFO would block the load
 *     forever: an alarm turns that into a failure here);
 *   - a save removes the temporaries that killed saves left, only those
 *     of dead processes.
 *
 * Files live in a fresh directory under /tmp, removed at the end.
 */
#include "ckpt_rig.h"
#include "harness.h"
#include "scratch.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------- the run */

typedef struct {
    amp_module *m;
    amp_optim *o;
    amp_scaler *s;
} run;

/* linear 6->8, ReLU, linear 8->3; Adam with amsgrad (all three buffers);
 * a scaler whose 2^19 initial scale overflows f16-autocast gradients
 * first (skipped steps) and grows every 2 clean steps. */
static run make_run(uint64_t seed)
{
    amp_manual_seed(seed);
    run r = {amp_nn_sequential(), NULL, NULL};
    amp_sequential_add(r.m, amp_nn_linear(6, 8, true));
    amp_sequential_add(r.m, amp_nn_relu());
    amp_sequential_add(r.m, amp_nn_linear(8, 3, true));
    amp_tensor *ps[4];
    int n = amp_module_params(r.m, ps, 4);
    amp_adam_opts ao = amp_adam_defaults();
    ao.amsgrad = true;
    r.o = amp_optim_adam(ps, n, ao);
    amp_scaler_opts so = amp_scaler_defaults();
    so.init_scale = 524288;
    so.growth_interval = 2;
    r.s = amp_scaler_new(so);
    return r;
}

static void free_run(run *r)
{
    amp_module_free(r->m);
    amp_optim_free(r->o);
    amp_scaler_free(r->s);
}

/* Steps first..first+n-1 of an f16-autocast run (ckpt_train). */
static void train(run *r, int first, int n) { ckpt_train(r->m, r->o, r->s, AMP_F16, first, n); }

/* ---------------------------------------------------------------- files */

/* A copy of file f at path with __metadata__ key's value replaced by val
 * (the header re-padded to a multiple of 8). */
static void write_meta_edit(bytes f, const char *path, const char *key, const char *val)
{
    uint64_t n = header_len(f);
    char *h = strndup((const char *)f.p + 8, (size_t)n), pat[96];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    char *v = strstr(h, pat);
    CHECK_MSG(v != NULL, "no %s in the header", pat);
    if (!v) {
        free(h);
        return;
    }
    v += strlen(pat);
    char *end = strchr(v, '"');
    size_t cap = n + strlen(val) + 16, k;
    char *out = malloc(cap);
    k = (size_t)snprintf(out, cap, "%.*s%s%s", (int)(v - h), h, val, end);
    while (k > 0 && out[k - 1] == ' ') /* the old padding */
        k--;
    while ((8 + k) % 8)
        out[k++] = ' ';
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)k >> (8 * i));
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (fp) {
        fwrite(len, 1, 8, fp);
        fwrite(out, 1, k, fp);
        fwrite(f.p + 8 + n, 1, f.n - 8 - (size_t)n, fp);
        fclose(fp);
    }
    free(out);
    free(h);
}

/* A copy of file f at path with element i of tensor name (elem bytes
 * each) set to *value. */
static void write_elem_edit(bytes f, const char *path, const char *name, size_t i, const void *value, size_t elem)
{
    uint64_t n = header_len(f);
    char *h = strndup((const char *)f.p + 8, (size_t)n), pat[96];
    snprintf(pat, sizeof pat, "\"%s\":{", name);
    char *e = strstr(h, pat), *off = e ? strstr(e, "\"data_offsets\":[") : NULL;
    CHECK_MSG(off != NULL, "no tensor %s in the header", name);
    if (off) {
        size_t begin = (size_t)strtoull(off + strlen("\"data_offsets\":["), NULL, 10);
        bytes c = {malloc(f.n), f.n};
        memcpy(c.p, f.p, f.n);
        memcpy(c.p + 8 + n + begin + i * elem, value, elem);
        test_write_file(path, c.p, c.n);
        free(c.p);
    }
    free(h);
}

/* The model's parameters, as bytes. */
static bytes model_bytes(const amp_module *m)
{
    bytes b = {0};
    for (int i = 0; i < amp_module_num_params(m); i++) {
        amp_tensor *p = amp_module_param(m, i, NULL);
        size_t k = (size_t)amp_tensor_numel(p) * amp_dtype_size(amp_tensor_dtype(p));
        b.p = realloc(b.p, b.n + k);
        memcpy(b.p + b.n, amp_tensor_cdata(p), k);
        b.n += k;
    }
    return b;
}

/* Loads path into r expecting status st and a message naming path and
 * holding needle; the model and the step are left as they were. */
static void expect_fail(const char *what, const char *path, run *r, amp_status st, const char *needle)
{
    bytes before = model_bytes(r->m);
    int64_t step = -7;
    amp_status got = amp_checkpoint_load(path, r->m, r->o, r->s, &step, NULL);
    const char *msg = amp_last_error();
    CHECK_MSG(got == st && strstr(msg, path) && strstr(msg, needle),
              "%s: expected status %d naming %s with \"%s\", got %d \"%s\"", what, (int)st, path, needle, (int)got,
              msg);
    bytes after = model_bytes(r->m);
    CHECK_MSG(step == -7 && before.n == after.n && memcmp(before.p, after.p, before.n) == 0,
              "%s: a failed load changed the model or the step", what);
    free(before.p);
    free(after.p);
    amp_clear_error();
}

/* A saved run of 6 steps (some skipped), and a same-shaped one to load
 * into. */
typedef struct {
    run src, dst;
    const char *good;
    bytes f;
} rig;

static rig make_rig(void)
{
    rig g = {make_run(1), make_run(2), scratch_at("good.safetensors"), {0}};
    train(&g.src, 0, 6);
    CHECK_OK(amp_checkpoint_save(g.good, g.src.m, g.src.o, g.src.s, 6, "{}"));
    g.f = file_bytes(g.good);
    return g;
}

static void free_rig(rig *g)
{
    free_run(&g->src);
    free_run(&g->dst);
    free(g->f.p);
}

/* ---------------------------------------------------------------- tests */

static void test_out_of_range_metadata_names_field_value_and_range(void)
{
    rig g = make_rig();
    const char *path = scratch_at("edited.safetensors");
    static const struct {
        const char *key, *val, *needle;
    } cases[] = {
        {"step", "-5", "__metadata__ \"step\" is -5, outside [0, 9007199254740992]"},
        {"step", "9223372036854775807", "\"step\" is 9223372036854775807, outside [0, 9007199254740992]"},
        {"optim.total_steps", "-1", "\"optim.total_steps\" is -1, outside [0, 9007199254740992]"},
        {"optim.lr", "-0.5", "\"optim.lr\" is -0.5, it must be >= 0"},
        {"scaler.growth_interval", "0", "\"scaler.growth_interval\" is 0, outside [1, 9007199254740992]"},
        /* the scale is an f32: 1e300 would be inf, every step skipped */
        {"scaler.scale", "1e300", "bad scaler state (scaler: init_scale must be positive and finite as an f32"},
        {"scaler.scale", "1e-50", "bad scaler state (scaler: init_scale must be positive and finite as an f32"},
        /* the tracker reaching the interval would never grow the scale */
        {"scaler.growth_tracker", "2", "\"scaler.growth_tracker\" is 2, outside [0, 1]"},
        {"scaler.growth_tracker", "9223372036854775807", "\"scaler.growth_tracker\" is 9223372036854775807"},
        {"scaler.steps", "-1", "\"scaler.steps\" is -1, outside [0, 9007199254740992]"},
        {"scaler.skipped", "1152921504606846976", "\"scaler.skipped\" is 1152921504606846976, outside"},
        /* a streak longer than the skips there were, or below 0 */
        {"scaler.skipped_in_a_row", "-1", "\"scaler.skipped_in_a_row\" is -1, outside [0, "},
        {"scaler.skipped_in_a_row", "1000", "\"scaler.skipped_in_a_row\" is 1000, outside [0, "},
        {"scaler.hysteresis_left", "0", "\"scaler.hysteresis_left\" is 0, outside [1, 2147483647]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_meta_edit(g.f, path, cases[i].key, cases[i].val);
        expect_fail(cases[i].key, path, &g.dst, AMP_ERR_FORMAT, cases[i].needle);
    }
    /* The step counts per parameter (a tensor). */
    int64_t neg = -3;
    write_elem_edit(g.f, path, "optim.steps", 1, &neg, sizeof neg);
    expect_fail("optim.steps", path, &g.dst, AMP_ERR_FORMAT,
                "tensor 'optim.steps' element 1 is -3, outside [0, 9007199254740992]");
    /* The edits themselves are sound: the values in range load. */
    write_meta_edit(g.f, path, "step", "9007199254740992");
    int64_t step = 0;
    CHECK_OK(amp_checkpoint_load(path, g.dst.m, g.dst.o, g.dst.s, &step, NULL));
    CHECK(step == (int64_t)1 << 53);
    free_rig(&g);
}

static void test_scaler_tracker_at_the_interval_is_refused(void)
{
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    amp_scaler_state st = amp_scaler_state_get(s);
    st.growth_interval = 5;
    st.growth_tracker = 5;
    CHECK_EQ_INT(amp_scaler_state_load(s, st), AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "growth tracker 5 is not below the growth interval 5");
    st.growth_tracker = 4;
    CHECK_OK(amp_scaler_state_load(s, st));
    amp_scaler_free(s);
}

static void test_non_finite_weights_are_errors_naming_the_tensor(void)
{
    rig g = make_rig();
    const char *path = scratch_at("nan.safetensors");
    float nan = NAN, inf = -INFINITY;
    write_elem_edit(g.f, path, "0.weight", 3, &nan, 4);
    expect_fail("nan weight", path, &g.dst, AMP_ERR_FORMAT,
                "tensor '0.weight' holds a non-finite value (inf or NaN) at element 3");
    write_elem_edit(g.f, path, "2.bias", 2, &inf, 4);
    expect_fail("inf bias", path, &g.dst, AMP_ERR_FORMAT,
                "tensor '2.bias' holds a non-finite value (inf or NaN) at element 2");
    /* A model-only load (eval) checks them too. */
    bytes before = model_bytes(g.dst.m);
    CHECK_EQ_INT(amp_checkpoint_load(path, g.dst.m, NULL, NULL, NULL, NULL), AMP_ERR_FORMAT);
    CHECK_ERROR(AMP_ERR_FORMAT, "'2.bias' holds a non-finite value");
    bytes after = model_bytes(g.dst.m);
    CHECK(before.n == after.n && memcmp(before.p, after.p, before.n) == 0);
    free(before.p);
    free(after.p);
    free_rig(&g);
}

/* A run that diverged between two saves has inf / NaN weights or
 * optimizer state: saving them would replace the last good checkpoint with
 * one no load accepts. The save is refused, naming the tensor, and the
 * file on disk keeps its bytes. */
static void test_save_of_non_finite_state_is_refused_and_keeps_the_old_file(void)
{
    run r = make_run(7);
    train(&r, 0, 3);
    const char *path = scratch_at("diverged.safetensors");
    CHECK_OK(amp_checkpoint_save(path, r.m, r.o, r.s, 3, NULL));
    bytes before = file_bytes(path);
    const char *name;
    amp_tensor *w = amp_module_param(r.m, 2, &name);
    float *wd = amp_tensor_data(w);
    float keep = wd[5];
    wd[5] = NAN;
    CHECK_EQ_INT(amp_checkpoint_save(path, r.m, r.o, r.s, 4, NULL), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "not saved: tensor '2.weight' holds a non-finite value (inf or NaN) at element 5");
    wd[5] = keep;
    amp_tensor *m = amp_optim_state_tensor(r.o, 1, "exp_avg_sq");
    CHECK(m != NULL);
    if (m) {
        ((float *)amp_tensor_data(m))[0] = INFINITY;
        CHECK_EQ_INT(amp_checkpoint_save(path, r.m, r.o, r.s, 4, NULL), AMP_ERR_STATE);
        CHECK_ERROR(AMP_ERR_STATE, "tensor 'optim.0.bias.exp_avg_sq' holds a non-finite value");
    }
    bytes after = file_bytes(path);
    CHECK(before.n > 0 && before.n == after.n && memcmp(before.p, after.p, before.n) == 0);
    free(before.p);
    free(after.p);
    free_run(&r);
}

static void test_bad_adam_state_is_an_error_naming_the_tensor(void)
{
    rig g = make_rig();
    const char *path = scratch_at("adam.safetensors");
    float neg = -0.5f, nan = NAN;
    write_elem_edit(g.f, path, "optim.0.weight.exp_avg_sq", 1, &neg, 4);
    expect_fail("negative exp_avg_sq", path, &g.dst, AMP_ERR_FORMAT,
                "tensor 'optim.0.weight.exp_avg_sq' holds -0.5 at element 1; it must be >= 0");
    write_elem_edit(g.f, path, "optim.2.bias.max_exp_avg_sq", 0, &neg, 4);
    expect_fail("negative max_exp_avg_sq", path, &g.dst, AMP_ERR_FORMAT,
                "tensor 'optim.2.bias.max_exp_avg_sq' holds -0.5 at element 0");
    write_elem_edit(g.f, path, "optim.0.bias.exp_avg_sq", 0, &nan, 4);
    expect_fail("nan exp_avg_sq", path, &g.dst, AMP_ERR_FORMAT,
                "tensor 'optim.0.bias.exp_avg_sq' holds a non-finite value");
    write_elem_edit(g.f, path, "optim.2.weight.exp_avg", 4, &nan, 4);
    expect_fail("nan exp_avg", path, &g.dst, AMP_ERR_FORMAT, "tensor 'optim.2.weight.exp_avg' holds a non-finite value");
    /* exp_avg may be negative: a first moment. */
    write_elem_edit(g.f, path, "optim.2.weight.exp_avg", 4, &neg, 4);
    CHECK_OK(amp_checkpoint_load(path, g.dst.m, g.dst.o, g.dst.s, NULL, NULL));
    free_rig(&g);
}

static void test_scaler_counts_survive_the_round_trip(void)
{
    rig g = make_rig();
    amp_scaler_counts want = amp_scaler_get_counts(g.src.s);
    CHECK_MSG(want.steps > 0 && want.skipped > 0, "the run should take and skip steps (%lld, %lld)",
              (long long)want.steps, (long long)want.skipped);
    CHECK_OK(amp_checkpoint_load(g.good, g.dst.m, g.dst.o, g.dst.s, NULL, NULL));
    amp_scaler_counts got = amp_scaler_get_counts(g.dst.s);
    CHECK_EQ_INT(got.steps, want.steps);
    CHECK_EQ_INT(got.skipped, want.skipped);
    /* ... and count on from there, as the uninterrupted run does. */
    train(&g.src, 6, 2);
    train(&g.dst, 6, 2);
    CHECK_EQ_INT(amp_scaler_get_counts(g.dst.s).steps, amp_scaler_get_counts(g.src.s).steps);
    CHECK_EQ_INT(amp_scaler_get_counts(g.dst.s).skipped, amp_scaler_get_counts(g.src.s).skipped);
    free_rig(&g);
}

/* With hysteresis, saved in the middle of a run of overflows: the skips in
 * a row and the overflows the hysteresis still lets pass come back, and
 * the loaded run backs off, skips and grows at the steps the straight run
 * does (a fresh scaler would let two more overflows pass, and count its
 * streak from 0). */
static void test_skip_streak_and_hysteresis_count_survive_the_round_trip(void)
{
    run r[2] = {make_run(3), make_run(4)};
    for (int i = 0; i < 2; i++) {
        amp_scaler_free(r[i].s);
        amp_scaler_opts so = amp_scaler_defaults();
        so.init_scale = 1e30; /* every f16 gradient overflows at first */
        so.backoff_factor = 1e-8;
        so.growth_interval = 2;
        so.hysteresis = 3;
        r[i].s = amp_scaler_new(so);
    }
    train(&r[0], 0, 2);
    amp_scaler_counts want = amp_scaler_get_counts(r[0].s);
    CHECK_MSG(want.skipped == 2 && want.skipped_in_a_row == 2 && amp_scaler_get_hysteresis_left(r[0].s) == 1,
              "two overflows in a row should leave one to pass (skipped %lld, in a row %lld, left %d)",
              (long long)want.skipped, (long long)want.skipped_in_a_row, amp_scaler_get_hysteresis_left(r[0].s));
    const char *path = scratch_at("streak.safetensors");
    CHECK_OK(amp_checkpoint_save(path, r[0].m, r[0].o, r[0].s, 2, NULL));
    CHECK_OK(amp_checkpoint_load(path, r[1].m, r[1].o, r[1].s, NULL, NULL));
    amp_scaler_counts got = amp_scaler_get_counts(r[1].s);
    CHECK_EQ_INT(got.skipped_in_a_row, 2);
    CHECK_EQ_INT(amp_scaler_get_hysteresis_left(r[1].s), 1);
    for (int t = 2; t < 8; t++) {
        train(&r[0], t, 1);
        train(&r[1], t, 1);
        amp_scaler_counts a = amp_scaler_get_counts(r[0].s), b = amp_scaler_get_counts(r[1].s);
        CHECK_MSG(a.steps == b.steps && a.skipped == b.skipped && a.skipped_in_a_row == b.skipped_in_a_row &&
                      amp_scaler_get_scale(r[0].s) == amp_scaler_get_scale(r[1].s) &&
                      amp_scaler_get_hysteresis_left(r[0].s) == amp_scaler_get_hysteresis_left(r[1].s),
                  "step %d: straight (steps %lld, skipped %lld, in a row %lld, scale %g) but loaded (%lld, %lld, "
                  "%lld, %g)",
                  t + 1, (long long)a.steps, (long long)a.skipped, (long long)a.skipped_in_a_row,
                  amp_scaler_get_scale(r[0].s), (long long)b.steps, (long long)b.skipped,
                  (long long)b.skipped_in_a_row, amp_scaler_get_scale(r[1].s));
    }
    /* The third overflow backed off; the streak ended when a step was taken. */
    CHECK_MSG(amp_scaler_get_scale(r[0].s) < 1e30 && amp_scaler_get_counts(r[0].s).steps > 0 &&
                  amp_scaler_get_counts(r[0].s).skipped_in_a_row < amp_scaler_get_counts(r[0].s).skipped,
              "the run should back off, then take steps (scale %g)", amp_scaler_get_scale(r[0].s));
    /* A scaler with a smaller hysteresis takes the count at its own most. */
    run small = make_run(5);
    amp_scaler_free(small.s);
    amp_scaler_opts so = amp_scaler_defaults();
    so.hysteresis = 2;
    small.s = amp_scaler_new(so);
    amp_scaler_opts big = amp_scaler_defaults();
    big.hysteresis = 5;
    amp_scaler *fresh = amp_scaler_new(big);
    run five = {r[0].m, r[0].o, fresh};
    CHECK_OK(amp_checkpoint_save(path, five.m, five.o, five.s, 8, NULL));
    CHECK_EQ_INT(amp_scaler_get_hysteresis_left(fresh), 5);
    CHECK_OK(amp_checkpoint_load(path, small.m, small.o, small.s, NULL, NULL));
    CHECK_EQ_INT(amp_scaler_get_hysteresis_left(small.s), 2);
    amp_scaler_free(fresh);
    free_run(&small);
    free_run(&r[0]);
    free_run(&r[1]);
}

static void test_fifo_and_devices_are_refused_without_blocking(void)
{
    run r = make_run(3);
    const char *fifo = scratch_at("fifo.safetensors");
    CHECK(mkfifo(fifo, 0600) == 0);
    watchdog_arm("the load");
    expect_fail("fifo", fifo, &r, AMP_ERR_IO, "not a regular file (a FIFO)");
    expect_fail("/dev/zero", "/dev/zero", &r, AMP_ERR_IO, "not a regular file (a character device)");
    expect_fail("a directory", tmpdir, &r, AMP_ERR_IO, "not a regular file (a directory)");
    watchdog_disarm();
    free_run(&r);
}

/* A pid that is no live process: a child that has exited and been reaped. */
static long dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

static void test_save_removes_the_temporaries_of_dead_processes_only(void)
{
    run r = make_run(4);
    const char *path = scratch_at("tidy.safetensors");
    char dead[300], dead2[300], live[300], mine[300], other[300], odd[300], dir[300];
    long d = dead_pid(), d2 = dead_pid();
    snprintf(dead, sizeof dead, "%s.tmp.%ld", path, d);
    snprintf(dead2, sizeof dead2, "%s.tmp.%ld", path, d2);
    snprintf(live, sizeof live, "%s.tmp.%ld", path, (long)getppid());   /* a live process's save */
    snprintf(other, sizeof other, "%s.tmp.%ld", scratch_at("other.safetensors"), d); /* another file's */
    snprintf(odd, sizeof odd, "%s.tmp.%ldx", path, d);                   /* not our pattern */
    snprintf(dir, sizeof dir, "%s.tmp.%ld", path, dead_pid());           /* a directory, not ours */
    const char *files[] = {dead, dead2, live, other, odd};
    for (int i = 0; i < 5; i++)
        test_write_file(files[i], "half a checkpoint", 17);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK_OK(amp_checkpoint_save(path, r.m, r.o, r.s, 0, NULL));
    CHECK_MSG(access(dead, F_OK) != 0 && access(dead2, F_OK) != 0, "a dead process's temporary was left");
    CHECK_MSG(access(live, F_OK) == 0, "a live process's temporary was removed");
    CHECK_MSG(access(other, F_OK) == 0 && access(odd, F_OK) == 0, "a file not ours was removed");
    CHECK_MSG(access(dir, F_OK) == 0, "a directory was removed");
    snprintf(mine, sizeof mine, "%s.tmp.%ld", path, (long)getpid());
    CHECK_MSG(access(mine, F_OK) != 0, "the save left its own temporary");
    CHECK_OK(amp_checkpoint_load(path, r.m, r.o, r.s, NULL, NULL));
    rmdir(dir);
    free_run(&r);
}

int main(void)
{
    scratch_make("ckrange");
    RUN(test_out_of_range_metadata_names_field_value_and_range);
    RUN(test_scaler_tracker_at_the_interval_is_refused);
    RUN(test_non_finite_weights_are_errors_naming_the_tensor);
    RUN(test_save_of_non_finite_state_is_refused_and_keeps_the_old_file);
    RUN(test_bad_adam_state_is_an_error_naming_the_tensor);
    RUN(test_scaler_counts_survive_the_round_trip);
    RUN(test_skip_streak_and_hysteresis_count_survive_the_round_trip);
    RUN(test_fifo_and_devices_are_refused_without_blocking);
    RUN(test_save_removes_the_temporaries_of_dead_processes_only);
    scratch_remove();
    return harness_done();
}
