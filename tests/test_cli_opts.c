/*
 * test_cli_opts.c - the option tables (tools/opts.h), in process: a table
 * has no fixed size (hundreds of rows parse, are flagged as given and are
 * printed in --help); train's table is in its ids' order; every command's
 * table is whole (each pick names a row, no two listed rows share a name);
 * a value is refused in the row's own words where it has them; the given
 * flags are the command line's.
 */
#include "harness.h"

#include "cli.h"
#include "plot.h"

#include <stdint.h>
#include <stdlib.h>

/* All of f's text (rewound), malloc'd. */
static char *read_all(FILE *f)
{
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    return s;
}

/* Lines of text that start with "  --" (the options in --help). */
static int option_lines(const char *text)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, "\n  --")); p++)
        n++;
    return n;
}

/* One --help line as opts.c lays it out, into buf. */
static const char *help_line(char *buf, size_t n, const char *left, const char *help)
{
    snprintf(buf, n, "\n  %-22s %s\n", left, help);
    return buf;
}

enum { N = 300 };

/* Where the big table's values go. */
typedef struct {
    int64_t v[N];
    bool flag;
} big_opts;

/* Far more rows than any fixed table of 64: each row its own whole number,
 * given as "--opt-I V" or "--opt-I=V"; a flag and a block of every row
 * again (unlisted, so shadowed) besides. */
static void test_a_table_of_any_size_parses_flags_and_prints_every_row(void)
{
    static opt_def rows[N + 1];
    static char names[N][16], help[N][32];
    static big_opts dst;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "opt-%d", i);
        snprintf(help[i], sizeof help[i], "row %d of %d", i, N);
        rows[i] = (opt_def){.name = names[i], .meta = "V", .kind = OPT_INT, .off = (size_t)i * sizeof(int64_t),
                            .lo = 0, .hi = 1e6, .help = help[i]};
    }
    rows[N] = (opt_def){.name = "flag", .meta = "", .kind = OPT_FLAG, .off = offsetof(big_opts, flag),
                        .help = "a flag after them"};
    const opt_block blocks[] = {{.rows = rows, .n = N + 1}, {.rows = rows, .n = N + 1, .unlisted = true}};
    const opt_cmd c = {.who = "ampc big", .usage = "usage: ampc big [options]\n\n", .blocks = blocks, .n_blocks = 2};

    bool *given = calloc(N + 1, sizeof *given);
    char **argv = calloc(2 * N + 1, sizeof *argv);
    static char args[2 * N][32];
    int argc = 0;
    for (int i = 0; i < N; i += 2) { /* every other row, half of them as --name=value */
        if (i % 4 == 0) {
            snprintf(args[argc], sizeof args[argc], "--opt-%d=%d", i, 3 * i + 1);
            argv[argc] = args[argc];
            argc++;
        } else {
            snprintf(args[argc], sizeof args[argc], "--opt-%d", i);
            argv[argc] = args[argc];
            argc++;
            snprintf(args[argc], sizeof args[argc], "%d", 3 * i + 1);
            argv[argc] = args[argc];
            argc++;
        }
    }
    argv[argc++] = "--flag";
    CHECK(given && argv);
    if (!given || !argv)
        return;
    const opt_dst to[] = {{&dst, given}, {&dst, given}};
    CHECK_EQ_INT(opt_parse(&c, to, NULL, argc, argv), -1);
    int wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += dst.v[i] != (i % 2 == 0 ? 3 * i + 1 : 0) || given[i] != (i % 2 == 0);
    CHECK_EQ_INT(wrong, 0);
    CHECK(dst.flag && given[N]);

    /* The last row, past any small table, refuses a value out of its range. */
    char *bad[] = {"--opt-299", "1000001"};
    CHECK_EQ_INT(opt_parse(&c, to, NULL, 2, bad), EXIT_USAGE);

    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (f) {
        opt_usage(f, &c);
        char *text = read_all(f);
        fclose(f);
        CHECK(text != NULL);
        if (text) {
            CHECK_EQ_INT(option_lines(text), N + 1); /* each row once (the unlisted block not again) */
            char want[128];
            CHECK(strstr(text, help_line(want, sizeof want, "--opt-0 V", "row 0 of 300")) != NULL);
            CHECK(strstr(text, help_line(want, sizeof want, "--opt-299 V", "row 299 of 300")) != NULL);
            CHECK(strstr(text, help_line(want, sizeof want, "--flag ", "a flag after them")) != NULL);
            CHECK(strstr(text, help_line(want, sizeof want, "-h, --help", "this text")) != NULL);
            CHECK(strncmp(text, "usage: ampc big [options]\n\noptions:\n", 36) == 0);
        }
        free(text);
    }
    free(argv);
    free(given);
}

/* train_opts.given has a flag per row of train's table, indexed by the
 * row's id: row RO_x is the option whose value is member x. */
static void test_train_table_rows_are_in_their_ids_order(void)
{
    CHECK_EQ_INT(opts_count(), RO_COUNT);
    CHECK_EQ_INT(sizeof ((train_opts *)0)->given / sizeof(bool), RO_COUNT);
    for (int i = 0; i < RO_COUNT; i++) {
        const opt_def *d = &train_rows[i];
        CHECK_MSG(d->name && d->help && d->meta, "row %d has no name, meta or help", i);
        if (d->name)
            CHECK_MSG(opts_find(d->name) == d, "--%s: two rows of that name", d->name);
    }
    CHECK(opts_find("precision") == &train_rows[RO_precision]);
    CHECK(train_rows[RO_precision].off == offsetof(train_opts, precision));
    CHECK(train_rows[RO_mlp_width].off == offsetof(train_opts, mlp_width));
    CHECK(train_rows[RO_dist_timeout].off == offsetof(train_opts, dist_timeout));
    CHECK(strcmp(train_rows[RO_mlp_width].name, "mlp-width") == 0);
}

/* Each command's table: every pick names a row of its table, and no two
 * rows its --help lists share a name (a row of a later block with the
 * name of an earlier one is shadowed: profile's --precision LIST over
 * train's, in an unlisted block). */
static void test_every_commands_table_is_whole(void)
{
    const opt_cmd *cmds[] = {&train_options,   &eval_options, &generate_options,
                             &profile_options, &plot_options, &policy_options, &export_options};
    for (size_t ci = 0; ci < sizeof cmds / sizeof cmds[0]; ci++) {
        const opt_cmd *c = cmds[ci];
        const char *seen[512];
        int n_seen = 0;
        CHECK(c->who && c->usage && c->n_blocks > 0);
        for (int k = 0; k < c->n_blocks; k++) {
            const opt_block *b = &c->blocks[k];
            for (int i = 0; i < (b->pick ? b->n_pick : b->n); i++) {
                const opt_def *d = b->pick ? opt_find(b->rows, b->n, b->pick[i].name) : &b->rows[i];
                CHECK_MSG(d != NULL, "%s: the pick %s names no row", c->who, b->pick[i].name);
                if (!d || b->unlisted)
                    continue;
                for (int s = 0; s < n_seen; s++)
                    CHECK_MSG(strcmp(seen[s], d->name) != 0, "%s: --%s twice", c->who, d->name);
                if (n_seen < 512)
                    seen[n_seen++] = d->name;
                CHECK_MSG(d->help && d->meta, "%s: --%s has no help or meta", c->who, d->name);
            }
        }
    }
}

/* The given flags are the command line's: nothing else is set. */
static void test_given_flags_are_the_command_lines(void)
{
    train_opts o;
    train_opts_default(&o);
    char *argv[] = {"--lr", "0.25", "--seed=7", "--no-scaler", "--precision", "fp16"};
    CHECK_EQ_INT(train_parse(6, argv, &o), -1);
    int set = 0;
    for (int i = 0; i < RO_COUNT; i++)
        set += o.given[i];
    CHECK_EQ_INT(set, 4);
    CHECK(o.given[RO_lr] && o.given[RO_seed] && o.given[RO_no_scaler] && o.given[RO_precision]);
    CHECK(o.lr == 0.25 && o.seed == 7 && o.no_scaler && strcmp(o.precision, "fp16") == 0);

    /* eval takes the rows it picks (a lone DIR is --resume), not the others. */
    train_opts e;
    train_opts_default(&e);
    char *ev[] = {"some/dir", "--seed", "3"};
    CHECK_EQ_INT(eval_parse(3, ev, &e), -1);
    CHECK(e.resume && strcmp(e.resume, "some/dir") == 0 && e.seed == 3 && e.given[RO_seed]);
    CHECK(!e.given[RO_resume]);
    train_opts_default(&e);
    char *ev2[] = {"some/dir", "--accum", "3"};
    CHECK_EQ_INT(eval_parse(3, ev2, &e), EXIT_USAGE);
}

/* A whole number is digits, an optional '-' first: no blank or '+'. */
static void test_whole_numbers_are_digits_only(void)
{
    const opt_def *batch = &train_rows[RO_batch], *seed = &train_rows[RO_seed];
    train_opts o;
    train_opts_default(&o);
    CHECK_EQ_INT(opts_set(batch, "64", &o, "test"), -1);
    CHECK_EQ_INT(o.batch, 64);
    const char *bad[] = {" 64", "+64", "64 ", "0x40", "6e1", "", "-"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(opts_set(batch, bad[i], &o, "test") == EXIT_USAGE, "--batch '%s' was taken", bad[i]);
        CHECK_MSG(opts_set(seed, bad[i], &o, "test") == EXIT_USAGE, "--seed '%s' was taken", bad[i]);
    }
    CHECK_EQ_INT(opts_set(seed, "18446744073709551615", &o, "test"), -1);
    CHECK(o.seed == UINT64_MAX);
}

int main(void)
{
    RUN(test_a_table_of_any_size_parses_flags_and_prints_every_row);
    RUN(test_train_table_rows_are_in_their_ids_order);
    RUN(test_every_commands_table_is_whole);
    RUN(test_given_flags_are_the_command_lines);
    RUN(test_whole_numbers_are_digits_only);
    return harness_done();
}
