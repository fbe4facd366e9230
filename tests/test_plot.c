/*
 * test_plot.c - the training log and `ampc plot`: log lines are exact JSON
 * with null for NaN / inf; the reader reads back what the writer wrote;
 * the SVG has one mark per skipped step, NaN loss and val loss and one
 * vertex per finite loss; the loss axis turns logarithmic past two
 * decades; a log without a scale gets one panel; big logs stay small; a
 * malformed line is an error naming the file and the line; the command
 * line's exits.
 *
 * The program's parts come from the ampc_tools library (CMakeLists.txt).
 *
 * With AMPC_PLOT_EXAMPLE=/abs/path.svg set, the synthetic fp16-like run drawn
 * here is also written to path (how docs/plot-example.svg is made).
 */
#include "harness.h"
#include "scratch.h"

#include "log.h"
#include "plot.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Vertices (M and L commands) in the d of the path with class cls. */
static int path_vertices(const char *svg, const char *cls)
{
    char key[64];
    snprintf(key, sizeof key, "class=\"%s\"", cls);
    const char *p = strstr(svg, key);
    if (!p || !(p = strstr(p, " d=\"")))
        return -1;
    int n = 0;
    for (p += 4; *p && *p != '"'; p++)
        n += *p == 'M' || *p == 'L';
    return n;
}

static void test_log_lines_are_exact_json_with_null_for_nan_and_inf(void)
{
    const char *path = scratch_at("exact.jsonl");
    log_file *l = log_open(path, false);
    CHECK(l != NULL);
    if (!l)
        return;
    CHECK_OK(log_step(l, &(log_record){.step = 1, .epoch = 1, .loss = 2.5, .lr = 1e-3, .scale = 65536,
                                       .grad_norm = 1.25, .step_ms = 3.5, .tokens_per_s = 1000}));
    CHECK_OK(log_step(l, &(log_record){.step = 2, .loss = NAN, .lr = 0.1, .scale = 32768, .skipped = true,
                                       .grad_norm = INFINITY, .step_ms = 0.25, .has_val = true,
                                       .val_loss = 1.0 / 3, .samples_per_s = 12.5}));
    CHECK_OK(log_step(l, &(log_record){.step = 3, .loss = -INFINITY, .lr = 0, .scale = NAN, .grad_norm = NAN,
                                       .step_ms = 1099511627776.0}));
    CHECK_OK(log_close(l));
    char *s = test_read_file(path, NULL);
    CHECK(s != NULL);
    if (!s)
        return;
    const char *want =
        "{\"step\":1,\"epoch\":1,\"loss\":2.5,\"lr\":0.001,\"scale\":65536,\"skipped\":false,"
        "\"grad_norm\":1.25,\"step_ms\":3.5,\"tokens_per_s\":1000}\n"
        "{\"step\":2,\"loss\":null,\"lr\":0.1,\"scale\":32768,\"skipped\":true,\"grad_norm\":null,"
        "\"step_ms\":0.25,\"val_loss\":0.333333333,\"samples_per_s\":12.5}\n"
        "{\"step\":3,\"loss\":null,\"lr\":0,\"scale\":null,\"skipped\":false,\"grad_norm\":null,"
        "\"step_ms\":1.09951e+12}\n";
    CHECK_MSG(strcmp(s, want) == 0, "log is\n%s\nexpected\n%s", s, want);
    free(s);
}

static void test_log_number_keeps_scale_exact_and_drops_negative_zero(void)
{
    char b[32];
    CHECK(strcmp(log_number(b, sizeof b, 1099511627776.0, 17), "1099511627776") == 0);
    CHECK(strcmp(log_number(b, sizeof b, -0.0, 9), "0") == 0);
    CHECK(strcmp(log_number(b, sizeof b, 1e-300, 9), "1e-300") == 0);
    CHECK(strcmp(log_number(b, sizeof b, NAN, 9), "null") == 0);
}

static void test_log_open_error_names_the_path(void)
{
    const char *p = "/nonexistent-ampc-dir/run.jsonl";
    CHECK(log_open(p, false) == NULL);
    CHECK_ERROR(AMP_ERR_IO, p);
    CHECK_OK(log_close(NULL));
}

/* A synthetic fp16-like run of n steps: a decaying noisy loss; the scale
 * starts at 2^16, halves on each skipped step (five at the start, as an
 * over-large initial scale does, then one every 150 steps) and doubles
 * every 100 clean steps; a NaN loss at step 250 (skipped too); a val loss
 * every 50 steps. Returns how many steps were skipped. */
static int write_run(const char *path, int n, bool with_scale, double loss0, double loss_end)
{
    log_file *l = log_open(path, false);
    CHECK(l != NULL);
    if (!l)
        return -1;
    uint64_t r = 12345;
    double scale = 65536;
    int clean = 0, skipped_n = 0;
    for (int s = 1; s <= n; s++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        double noise = ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 0.25;
        double base = loss_end + (loss0 - loss_end) * exp(-s / (n / 6.0));
        bool skip = with_scale && (s <= 5 || s % 150 == 0 || s == 250);
        log_record rec = {.step = s, .epoch = 1 + (s - 1) / 100, .loss = base * (1 + noise),
                          .lr = 3e-4 * fmin(1, s / 50.0), .scale = with_scale ? scale : NAN,
                          .skipped = skip, .grad_norm = 1 + noise, .step_ms = 4 + noise,
                          .has_val = s % 50 == 0, .val_loss = base * 1.08};
        if (s == 250)
            rec.loss = NAN;
        CHECK_OK(log_step(l, &rec));
        skipped_n += skip;
        if (skip) {
            scale /= 2;
            clean = 0;
        } else if (++clean == 100) {
            scale *= 2;
            clean = 0;
        }
    }
    CHECK_OK(log_close(l));
    return skipped_n;
}

static void test_reader_reads_back_what_the_writer_wrote(void)
{
    const char *path = scratch_at("roundtrip.jsonl");
    int skipped = write_run(path, 300, true, 2.3, 0.3);
    plot_data d;
    CHECK_OK(plot_read(path, &d));
    CHECK_EQ_INT(d.n, 300);
    int sk = 0, nan_loss = 0;
    for (int64_t i = 0; i < d.n; i++) {
        CHECK_EQ_INT((int64_t)d.p[i].step, i + 1);
        CHECK(d.p[i].has_loss);
        sk += d.p[i].skipped;
        nan_loss += isnan(d.p[i].loss);
        CHECK(isfinite(d.p[i].val_loss) == ((i + 1) % 50 == 0));
    }
    CHECK_EQ_INT(sk, skipped);
    CHECK_EQ_INT(nan_loss, 1);
    CHECK(isnan(d.p[249].loss));
    CHECK_NEAR(d.p[0].scale, 65536, 0);
    CHECK_NEAR(d.p[5].scale, 2048, 0); /* five halvings */
    plot_data_free(&d);
}

static void test_svg_has_one_mark_per_event_and_a_vertex_per_finite_loss(void)
{
    const char *log = scratch_at("synthetic-fp16.jsonl"), *svg = scratch_at("synthetic-fp16.svg");
    int skipped = write_run(log, 600, true, 2.3, 0.3);
    plot_summary sum;
    CHECK_OK(plot_file(log, svg, &sum));
    CHECK_EQ_INT(sum.steps, 600);
    CHECK_EQ_INT(sum.skipped, skipped);
    CHECK_EQ_INT(sum.nonfinite, 1);
    CHECK_EQ_INT(sum.val, 12);
    const char *example = getenv("AMPC_PLOT_EXAMPLE");
    if (example && *example)
        CHECK_OK(plot_file(log, example, NULL));
    char *s = test_read_file(svg, NULL);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK(strncmp(s, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39) == 0);
    CHECK(strcmp(s + strlen(s) - 7, "</svg>\n") == 0);
    CHECK_EQ_INT(test_count(s, "<svg"), 1);
    CHECK_EQ_INT(test_count(s, "<g"), test_count(s, "</g>"));
    CHECK_EQ_INT(test_count(s, "<text"), test_count(s, "</text>"));
    CHECK_EQ_INT(test_count(s, "class=\"skip-tick\""), skipped);
    CHECK_EQ_INT(test_count(s, "class=\"skip-dot\""), skipped);
    CHECK_EQ_INT(test_count(s, "class=\"nan-mark\""), 1);
    CHECK_EQ_INT(test_count(s, "class=\"val-dot\""), 12);
    CHECK_EQ_INT(path_vertices(s, "loss-raw"), 599);
    CHECK_EQ_INT(path_vertices(s, "loss-smooth"), 599);
    CHECK(strstr(s, "Loss scale (log2)") != NULL);
    CHECK(strstr(s, ">Training loss<") != NULL); /* 2.3 to 0.3: linear */
    CHECK(strstr(s, "ampc training log: synthetic-fp16.jsonl") != NULL);
    CHECK(strstr(s, "&") == NULL || strstr(s, "&amp;") != NULL);
    free(s);
}

static void test_loss_axis_is_logarithmic_past_two_decades(void)
{
    const char *log = scratch_at("steep.jsonl"), *svg = scratch_at("steep.svg");
    write_run(log, 400, true, 200, 0.5);
    CHECK_OK(plot_file(log, svg, NULL));
    char *s = test_read_file(svg, NULL);
    CHECK(s && strstr(s, "Training loss (log scale)") != NULL);
    CHECK(s && strstr(s, ">100<") != NULL); /* a decade label */
    free(s);
}

static void test_log_without_a_scale_has_one_panel(void)
{
    const char *log = scratch_at("fp32.jsonl"), *svg = scratch_at("fp32.svg");
    CHECK_EQ_INT(write_run(log, 50, false, 2.3, 0.3), 0);
    CHECK_OK(plot_file(log, svg, NULL));
    char *s = test_read_file(svg, NULL);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK(strstr(s, "Loss scale") == NULL);
    CHECK(strstr(s, "skip-") == NULL);
    CHECK(strstr(s, "loss-smooth") == NULL); /* under 90 steps: raw only */
    CHECK_EQ_INT(path_vertices(s, "loss-raw"), 50);
    char want[64];
    snprintf(want, sizeof want, "height=\"%.0f\"", LOSS_TOP + LOSS_H + FOOT);
    CHECK_MSG(strstr(s, want) != NULL, "no %s", want);
    free(s);
}

/* --health-every's keys: written at the steps that carry them (the
 * scaled ones only when given), read back as fractions, drawn in a third
 * panel, one vertex per measured step per line; a log without them has
 * no such panel (test_log_without_a_scale_has_one_panel's height). */
static void test_health_keys_round_trip_and_draw_a_panel(void)
{
    const char *log = scratch_at("health.jsonl"), *svg = scratch_at("health.svg");
    log_file *l = log_open(log, false);
    CHECK(l != NULL);
    if (!l)
        return;
    amp_f16_health un = {.numel = 1000, .zero = 500, .underflow = 125, .subnormal = 250, .overflow = 1, .nonfinite = 2},
                   at = {.numel = 1000, .zero = 500, .underflow = 0, .subnormal = 4, .overflow = 8};
    for (int st = 1; st <= 12; st++) {
        bool due = st % 4 == 0;
        log_record rec = {.step = st, .loss = 1.0 / st, .lr = 1e-3, .scale = 65536, .grad_norm = 1, .step_ms = 1,
                          .health = due ? &un : NULL, .health_scaled = due && st > 4 ? &at : NULL};
        CHECK_OK(log_step(l, &rec));
    }
    CHECK_OK(log_close(l));
    char *text = test_read_file(log, NULL);
    CHECK(text && strstr(text, "\"step_ms\":1,\"f16_zero\":0.5,\"f16_flush\":0.125,\"f16_subnormal\":0.25,"
                               "\"f16_overflow\":0.003}\n"));
    CHECK(text && strstr(text, "\"f16_flush_scaled\":0,\"f16_subnormal_scaled\":0.004,\"f16_overflow_scaled\":0.008}"));
    CHECK_EQ_INT(text ? test_count(text, "f16_zero") : 0, 3);
    CHECK_EQ_INT(text ? test_count(text, "f16_flush_scaled") : 0, 2);
    free(text);
    plot_data d;
    CHECK_OK(plot_read(log, &d));
    CHECK_EQ_INT(d.n, 12);
    for (int64_t i = 0; i < d.n; i++) {
        bool due = (i + 1) % 4 == 0;
        CHECK(due ? d.p[i].health[0] == 0.5 && d.p[i].health[3] == 0.003 : isnan(d.p[i].health[0]));
        CHECK(due && i > 3 ? d.p[i].health[5] == 0.004 : isnan(d.p[i].health[5]));
    }
    plot_data_free(&d);
    CHECK_OK(plot_file(log, svg, NULL));
    char *pic = test_read_file(svg, NULL);
    CHECK(pic != NULL);
    if (!pic)
        return;
    CHECK(strstr(pic, "f16 health (%)") != NULL);
    CHECK_EQ_INT(path_vertices(pic, "health-zero"), 3);
    CHECK_EQ_INT(path_vertices(pic, "health-subnormal"), 3);
    CHECK_EQ_INT(path_vertices(pic, "health-subnormal_scaled"), 2);
    char want[64];
    snprintf(want, sizeof want, "height=\"%.0f\"",
             LOSS_TOP + LOSS_H + SCALE_GAP + SCALE_H + HEALTH_GAP + HEALTH_H + FOOT);
    CHECK_MSG(strstr(pic, want) != NULL, "no %s", want);
    free(pic);
}

static void test_big_logs_are_decimated_but_keep_spikes(void)
{
    const char *log = scratch_at("big.jsonl"), *svg = scratch_at("big.svg");
    FILE *f = fopen(log, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    for (int s = 1; s <= 50000; s++)
        fprintf(f, "{\"step\":%d,\"loss\":%g,\"scale\":65536,\"skipped\":false}\n", s,
                s == 31234 ? 50.0 : 1.0 + (s % 7) * 0.01);
    fclose(f);
    CHECK_OK(plot_file(log, svg, NULL));
    char *s = test_read_file(svg, NULL);
    CHECK(s != NULL);
    if (!s)
        return;
    int v = path_vertices(s, "loss-raw");
    CHECK_MSG(v > 0 && v <= 4 * (int)PW + 4, "%d vertices", v);
    CHECK_MSG(strlen(s) < 200000, "%zu bytes", strlen(s));
    /* The spike survives: 50 on a linear axis of about 0..60 is drawn in
     * the top fifth, the other losses (about 1) at the bottom. */
    const char *d = strstr(strstr(s, "class=\"loss-raw\""), " d=\"");
    double top_y = 1e9;
    for (const char *p = d + 4; *p && *p != '"'; p++)
        if (*p == 'M' || *p == 'L') {
            double x, y;
            if (sscanf(p + 1, "%lf %lf", &x, &y) == 2)
                top_y = fmin(top_y, y);
        }
    CHECK_MSG(top_y < LOSS_TOP + 0.2 * LOSS_H, "highest vertex at y %.1f", top_y);
    free(s);
}

/* Writes text as the log, plots it: an AMP_ERR_FORMAT naming the file and
 * the line, with why, and no SVG left behind. */
static void check_malformed(const char *name, const char *content, size_t len, int line, const char *why)
{
    const char *log = scratch_at(name), *svg = scratch_at("bad.svg");
    FILE *f = fopen(log, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fwrite(content, 1, len, f);
    fclose(f);
    unlink(svg);
    CHECK_MSG(plot_file(log, svg, NULL) == AMP_ERR_FORMAT, "%s: no format error", name);
    char where[200];
    if (line > 0)
        snprintf(where, sizeof where, "%s:%d: ", log, line);
    else
        snprintf(where, sizeof where, "%s: ", log);
    CHECK_MSG(strstr(amp_last_error(), where) != NULL, "%s: '%s' lacks '%s'", name, amp_last_error(), where);
    CHECK_ERROR(AMP_ERR_FORMAT, why);
    CHECK_MSG(access(svg, F_OK) != 0, "%s: an SVG was written", name);
}

static void test_malformed_lines_name_the_file_and_line(void)
{
    const char *ok = "{\"step\":1,\"loss\":2.0}\n\n{\"run\":\"fp16\", \"note\":\"header lines are fine\"}\n";
    char buf[256];
    struct { const char *line, *why; } cases[] = {
        {"{\"step\":3,\"loss\":nan}", "unexpected character"},
        {"{\"step\":3,\"loss\":NaN}", "bad number"},
        {"{\"step\":3,\"loss\":1.}", "no digits after '.'"},
        {"{\"step\":3,\"loss\":2.0", "the line ends inside the object"},
        {"{\"step\":3,\"loss\":2.0}}", "text after the object"},
        {"{\"step\":3,\"loss\":{\"a\":1}}", "nested objects"},
        {"{\"step\":3,\"loss\":\"low\"}", "\"loss\" must be a number or null"},
        {"{\"step\":true}", "\"step\" must be a number"},
        {"{\"step\":3 \"loss\":2}", "expected ',' or '}'"},
        {"{\"step:3}", "unterminated string"},
        {"{step:3}", "expected a key"},
        {"[1,2]", "expected '{'"},
        {"{\"step\":3,\"skipped\":1}", "\"skipped\" must be true or false"},
        {"{\"step\":3,\"f16_zero\":\"most\"}", "an f16 health value must be a number or null"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s\n{\"step\":4,\"loss\":1}\n", ok, cases[i].line);
        char name[32];
        snprintf(name, sizeof name, "bad%zu.jsonl", i);
        check_malformed(name, buf, strlen(buf), 4, cases[i].why);
    }
    static const char nul[] = "{\"step\":1,\"loss\":2}\n{\"step\":2}\0garbage\n";
    check_malformed("nul.jsonl", nul, sizeof nul - 1, 2, "NUL byte");
    static const char none[] = "\n{\"note\":1}\n";
    check_malformed("empty.jsonl", none, sizeof none - 1, 0, "no step lines");
}

/* Whether the SVG has a non-finite number where a coordinate goes: printf
 * writes "inf" / "nan" in lower case after a quote, a sign, a space or a
 * path command (the legends' "NaN/inf" follow other characters). */
static bool has_nonfinite_number(const char *svg)
{
    const char *words[] = {"inf", "nan"};
    for (int w = 0; w < 2; w++)
        for (const char *p = strstr(svg, words[w]); p; p = strstr(p + 1, words[w]))
            if (p > svg && strchr("\"- MLHV", p[-1]) && p[3] != '-') /* not class="nan-mark" */
                return true;
    return false;
}

/* A stalled drawing loop ends the test (SIGALRM, or SIGXFSZ past 32 MiB
 * of output) instead of hanging it and filling the disk. */
static struct rlimit saved_fsize;

static void guard_begin(void)
{
    getrlimit(RLIMIT_FSIZE, &saved_fsize);
    struct rlimit r = saved_fsize;
    r.rlim_cur = 32u << 20;
    if (saved_fsize.rlim_max != RLIM_INFINITY && saved_fsize.rlim_max < r.rlim_cur)
        r.rlim_cur = saved_fsize.rlim_max;
    setrlimit(RLIMIT_FSIZE, &r);
    alarm(30);
}

static void guard_end(void)
{
    alarm(0);
    setrlimit(RLIMIT_FSIZE, &saved_fsize);
}

/* Logs at the edges of what a double holds: each is drawn quickly (the
 * tick loops once stalled at 2^53, filling the disk), with finite
 * coordinates only (1e308 once gave -inf) and a bounded size. */
static void test_extreme_values_draw_finite_and_bounded(void)
{
    static const char *const logs[] = {
        /* steps at 2^53, where step + 1 == step */
        "{\"step\":9007199254740992,\"loss\":1}\n{\"step\":9007199254740993,\"loss\":2}\n"
        "{\"step\":9007199254740996,\"loss\":1.5}\n",
        /* a span that overflows: hi - lo > DBL_MAX */
        "{\"step\":1,\"loss\":1e308,\"scale\":1e308}\n{\"step\":2,\"loss\":-1e308,\"scale\":5e-324}\n",
        "{\"step\":-1.7976931348623157e308,\"loss\":1.7976931348623157e308}\n"
        "{\"step\":1.7976931348623157e308,\"loss\":-1.7976931348623157e308,\"val_loss\":0}\n",
        /* equal ends, at DBL_MAX and at 0 */
        "{\"step\":1.7976931348623157e308,\"loss\":1.7976931348623157e308}\n",
        "{\"step\":0,\"loss\":0,\"scale\":1}\n",
        /* denormals: a span too small to divide */
        "{\"step\":5e-324,\"loss\":5e-324}\n{\"step\":1e-323,\"loss\":1e-323}\n",
        "{\"step\":1,\"loss\":2.2250738585072014e-308}\n{\"step\":2,\"loss\":2.2250738585072019e-308}\n",
        /* a log axis over 600 decades, and below DBL_MIN */
        "{\"step\":1,\"loss\":1e-300}\n{\"step\":2,\"loss\":1e300}\n{\"step\":3,\"loss\":5e-324,\"val_loss\":1e308}\n",
        /* negative and fractional steps, negative losses */
        "{\"step\":-5,\"loss\":-3}\n{\"step\":-4.5,\"loss\":-2}\n{\"step\":0.001,\"loss\":-1e-9}\n",
        /* the last bits of a large value */
        "{\"step\":1,\"loss\":1e15}\n{\"step\":2,\"loss\":1.0000000000000002e15}\n",
    };
    guard_begin();
    for (size_t i = 0; i < sizeof logs / sizeof logs[0]; i++) {
        const char *log = scratch_at("edge.jsonl"), *svg = scratch_at("edge.svg");
        FILE *f = fopen(log, "w");
        CHECK(f != NULL);
        if (!f)
            return;
        fputs(logs[i], f);
        fclose(f);
        amp_status st = plot_file(log, svg, NULL);
        CHECK_MSG(st == AMP_OK, "log %zu: %s", i, amp_last_error());
        char *s = test_read_file(svg, NULL);
        CHECK_MSG(s != NULL, "log %zu: no SVG", i);
        if (!s)
            continue;
        CHECK_MSG(!has_nonfinite_number(s), "log %zu: a non-finite number in the SVG", i);
        CHECK_MSG(strlen(s) < 100000, "log %zu: %zu bytes", i, strlen(s));
        CHECK(strcmp(s + strlen(s) - 7, "</svg>\n") == 0);
        free(s);
    }
    guard_end();
}

/* Whatever the log's order and gaps, the drawing keeps a few elements per
 * pixel column: steps out of order, and a loss, val loss and scale that
 * change (or are NaN) at every step. */
static void test_output_size_is_bounded_for_any_log(void)
{
    const char *log = scratch_at("zigzag.jsonl"), *svg = scratch_at("zigzag.svg");
    FILE *f = fopen(log, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    enum { N = 100000 };
    for (int i = 0; i < N; i++) {
        int step = i % 2 ? N - i : i; /* 0, N-1, 2, N-3, ... */
        if (i % 2)
            fprintf(f, "{\"step\":%d,\"loss\":null,\"scale\":%d,\"skipped\":true,\"val_loss\":%d}\n", step,
                    1 << (i % 20), i % 7);
        else
            fprintf(f, "{\"step\":%d,\"loss\":%d,\"scale\":%d,\"skipped\":false}\n", step, i % 13, 1 << (i % 17));
    }
    fclose(f);
    guard_begin();
    plot_summary sum;
    CHECK_OK(plot_file(log, svg, &sum));
    guard_end();
    CHECK_EQ_INT(sum.steps, N);
    CHECK_EQ_INT(sum.skipped, N / 2);
    CHECK_EQ_INT(sum.nonfinite, N / 2);
    char *s = test_read_file(svg, NULL);
    CHECK(s != NULL);
    if (!s)
        return;
    /* About 877 pixel columns: a few hundred bytes each at most. */
    CHECK_MSG(strlen(s) < 1500000, "%zu bytes for %d steps", strlen(s), N);
    CHECK_MSG(test_count(s, "class=\"nan-mark\"") <= (int)PW + 2, "%d NaN marks", test_count(s, "class=\"nan-mark\""));
    CHECK_MSG(test_count(s, "class=\"skip-dot\"") <= (int)PW + 2, "%d skip dots", test_count(s, "class=\"skip-dot\""));
    int v = path_vertices(s, "loss-raw");
    CHECK_MSG(v > 0 && v <= 5 * (int)PW + 10, "%d vertices", v);
    CHECK(!has_nonfinite_number(s));
    free(s);
}

static void test_a_step_beyond_double_is_an_error(void)
{
    static const char text[] = "{\"step\":1,\"loss\":1}\n{\"step\":1e999,\"loss\":1}\n";
    check_malformed("step-inf.jsonl", text, sizeof text - 1, 2, "\"step\" is out of range");
}

static void test_missing_log_is_an_io_error(void)
{
    const char *log = scratch_at("absent.jsonl");
    CHECK(plot_file(log, scratch_at("absent.svg"), NULL) == AMP_ERR_IO);
    CHECK_ERROR(AMP_ERR_IO, log);
}

static void test_command_line_exits(void)
{
    const char *log = scratch_at("cli.jsonl");
    write_run(log, 120, true, 2.3, 0.3);
    char *a_none[] = {NULL};
    CHECK_EQ_INT(plot_run(0, a_none), 2);
    char *a_unknown[] = {"--frobnicate", (char *)log, NULL};
    CHECK_EQ_INT(plot_run(2, a_unknown), 2);
    char *a_two[] = {(char *)log, (char *)log, NULL};
    CHECK_EQ_INT(plot_run(2, a_two), 2);
    char *a_dangling[] = {(char *)log, "-o", NULL};
    CHECK_EQ_INT(plot_run(2, a_dangling), 2);
    const char *out = scratch_at("cli-out.svg");
    char *a_out[] = {(char *)log, "-o", (char *)out, NULL};
    CHECK_EQ_INT(plot_run(3, a_out), 0);
    CHECK(access(out, F_OK) == 0);
    char *a_default[] = {(char *)log, NULL};
    CHECK_EQ_INT(plot_run(1, a_default), 0);
    CHECK_MSG(access(scratch_at("cli.svg"), F_OK) == 0, "the default output is LOG's name with .svg");
    char *a_self[] = {(char *)log, "--output", (char *)log, NULL};
    CHECK_EQ_INT(plot_run(3, a_self), 2);
    char *a_missing[] = {(char *)scratch_at("nope.jsonl"), "-o", (char *)out, NULL};
    CHECK_EQ_INT(plot_run(3, a_missing), 1);
    amp_clear_error();
    char *d = default_output("dir.v1/run");
    CHECK(d && strcmp(d, "dir.v1/run.svg") == 0);
    free(d);
    d = default_output("/x/.log");
    CHECK(d && strcmp(d, "/x/.log.svg") == 0);
    free(d);
}

int main(void)
{
    scratch_make("test-plot");
    RUN(test_log_lines_are_exact_json_with_null_for_nan_and_inf);
    RUN(test_log_number_keeps_scale_exact_and_drops_negative_zero);
    RUN(test_log_open_error_names_the_path);
    RUN(test_reader_reads_back_what_the_writer_wrote);
    RUN(test_svg_has_one_mark_per_event_and_a_vertex_per_finite_loss);
    RUN(test_loss_axis_is_logarithmic_past_two_decades);
    RUN(test_log_without_a_scale_has_one_panel);
    RUN(test_health_keys_round_trip_and_draw_a_panel);
    RUN(test_big_logs_are_decimated_but_keep_spikes);
    RUN(test_malformed_lines_name_the_file_and_line);
    RUN(test_extreme_values_draw_finite_and_bounded);
    RUN(test_output_size_is_bounded_for_any_log);
    RUN(test_a_step_beyond_double_is_an_error);
    RUN(test_missing_log_is_an_io_error);
    RUN(test_command_line_exits);
    scratch_remove();
    return harness_done();
}
