/*
 * opts.h - command-line options read from tables. A command declares its
 * options as rows (opt_def: name, value kind, range, help line) in its
 * own file; one parser reads a command line against them, one setter
 * checks and stores each value, one printer writes --help from the same
 * rows. A table holds any number of rows, and the flags that record which
 * rows a command line gave are as many as the table's rows (the struct
 * the values go to holds them: train_opts.given, sized by train's table).
 *
 * Options take "--name value" or "--name=value" (a row with an alias
 * also "-c value"). Every value is checked in full: a whole number is
 * digits (an optional '-' first), no blank, '+' or trailing character,
 * no overflow, in range; a bad one is refused naming the option and the
 * value as typed, exit code EXIT_USAGE.
 *
 * Defines: EXIT_USAGE, opt_kind, opt_class, OPT_FP16*, opt_def, opt_pick,
 * opt_block, opt_cmd, opt_dst, opt_parse, opt_set, opt_find, opt_usage,
 * opt_help_line, opt_unexpected.
 */
#ifndef AMPC_OPTS_H
#define AMPC_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Exit codes: 0 done, 1 a run that failed (a missing file, a library
 * error), 2 a bad command line. */
#define EXIT_USAGE 2

typedef enum {
    OPT_STR,  /* choices: one of them; no choices: a path (not empty, shorter than PATH_MAX) */
    OPT_TEXT, /* any text, the empty one too */
    OPT_INT,  /* int64_t in [lo, hi] */
    OPT_U64,  /* uint64_t, 0 to 2^64-1 */
    OPT_REAL, /* double in [lo, hi] (never NaN) */
    OPT_LIST, /* comma-separated int64_t items in [lo, hi], or "none": at most cap of them */
    OPT_FLAG, /* bool, set by the option alone */
} opt_kind;

/* Train's table (train_opts.h): what a checkpoint keeps of each option
 * (the other commands' rows save nothing and leave it unread). */
typedef enum {
    OC_SETTING, /* saved; on resume, the checkpoint's unless given */
    OC_SHAPE,   /* saved; on resume, a different value is an error */
    OC_RUN,     /* not saved: this invocation's only */
} opt_class;

/* opt_def.fp16, train's table: an fp16 option (ampc profile refuses it
 * without fp16 in its list), one that needs the grad scaler (refused with
 * bf16, fp32 or --no-scaler; saved only with the scaler), one of the
 * dynamic scaler's (refused with --static-scale). */
enum { OPT_FP16 = 1, OPT_FP16_SCALER = 2, OPT_FP16_DYNAMIC = 4 };

/* One option. Members a row leaves out are 0 / NULL. */
typedef struct {
    const char *name;    /* without "--" */
    char alias;          /* a one-letter form ('o': -o), or 0 */
    const char *meta;    /* the value in --help: "N", "FILE"; "[FILE]" when it is optional; "" for a flag */
    opt_kind kind;
    size_t off;          /* the value's member in the struct the rows write into */
    double lo, hi;       /* OPT_INT / OPT_REAL / OPT_LIST items: inclusive range */
    bool zero_off;       /* OPT_REAL: 0 is "off", taken beside [lo, hi] */
    const char *choices; /* OPT_STR: "a|b|c", or NULL for a path */
    /* The value when no argument follows (an optional value's "[FILE]":
     * also when the next argument is an option); NULL: "needs a value". */
    const char *absent;
    size_t count_off;    /* OPT_LIST: the int count's member */
    int cap;             /* OPT_LIST: the most items */
    /* NULL, or the row's own words for a refused or missing value:
     * "who: --name 'value': says", "who: --name needs a value". */
    const char *says;
    const char *help;    /* one line, or lines split by '\n' */
    /* Train's table only (train_opts.h): */
    opt_class cls;
    const char *models;  /* NULL, or the one model it applies to: "mlp", "gpt" */
    unsigned fp16;       /* OPT_FP16_* bits, 0 for the others */
} opt_def;

/* A row of another command's table that a command takes, in its own
 * words. */
typedef struct {
    const char *name;
    const char *help; /* NULL: the row's own help line */
} opt_pick;

/* Rows that write into one struct: a table, or the rows a command picks
 * from one. */
typedef struct {
    const opt_def *rows;
    int n;
    const opt_pick *pick; /* NULL: every row, in the table's order; else these rows only, in this order */
    int n_pick;
    bool unlisted;        /* parsed, but not in --help (the command's text names them) */
} opt_block;

struct opt_cmd;
/* An argument that is not an option of the command ("DIR", "-", "-x",
 * "--"): -1 when taken, else an exit code after a message. */
typedef int (*opt_arg_fn)(const struct opt_cmd *c, const char *arg, void *ctx);

/* A command's options: its blocks (searched in order: of two rows with
 * one name, the first block's wins) and its help text around them. */
typedef struct opt_cmd {
    const char *who;         /* "ampc train": every message starts with it */
    const char *usage;       /* --help above the options (ends with a blank line) */
    const char *footer;      /* --help below them, or NULL */
    const opt_block *blocks;
    int n_blocks;
    opt_arg_fn positional;   /* NULL: every such argument is refused (opt_unexpected) */
} opt_cmd;

/* The blocks of a command whose options are all the rows of one table (an
 * array of opt_def): .blocks and .n_blocks of its opt_cmd. */
#define OPT_ONE_TABLE(table)                                                                                  \
    .blocks = (const opt_block[]){{.rows = (table), .n = (int)(sizeof(table) / sizeof(table)[0])}}, .n_blocks = 1

/* Where one block's values go: the struct its rows' offsets point into
 * and, unless NULL, one flag per row of its table (the table's order),
 * set for each row the command line gives. */
typedef struct {
    void *dst;
    bool *given;
} opt_dst;

/* Parses argv[0 .. argc) (the arguments after the command) into dst[k]
 * for block k of c; positional arguments go to c->positional with ctx.
 * -1 to go on, or an exit code: 0 after printing --help, EXIT_USAGE after
 * a message on stderr naming the bad option or value. */
int opt_parse(const opt_cmd *c, const opt_dst *dst, void *ctx, int argc, char **argv);
/* Checks value text v of row d and stores it into dst; -1 when fine, else
 * EXIT_USAGE after a message that starts with who. */
int opt_set(const opt_def *d, const char *v, void *dst, const char *who);
/* The row called name among rows[0 .. n), or NULL. */
const opt_def *opt_find(const opt_def *rows, int n, const char *name);
/* c's --help: the usage text, the options of every listed block, -h and
 * the footer. */
void opt_usage(FILE *f, const opt_cmd *c);
/* One line of --help: "  LEFT  help", a help of several lines indented
 * under the first. */
void opt_help_line(FILE *f, const char *left, const char *help);
/* "who: unexpected argument 'arg' (see who --help)"; EXIT_USAGE. */
int opt_unexpected(const opt_cmd *c, const char *arg);

#endif
