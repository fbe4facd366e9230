/*
 * test_malformed.c - what a careless or hostile user can hand `ampc`: one
 * row per class of bad input (a file, a directory, an argument). Each row
 * builds its bad input in a directory of its own, runs the command as a
 * user does, and asserts that
 *
 *   - it ends by itself: no signal (no crash), within the row's time limit
 *     (no hang; the child is killed at the limit);
 *   - the exit code is the documented one: 1 a run that failed, 2 a bad
 *     command line (0 where the input is odd but fine);
 *   - stderr names what was wrong (a substring), and holds no sanitizer
 *     report (under AMPC_SANITIZE);
 *   - nothing the user had is destroyed: the row's `keep` file is
 *     byte-identical afterwards.
 *
 * Then every numeric option of every command's table (train's, the rows
 * eval and profile pick from it, generate's and profile's own) is given
 * values below and above its range, not numbers, overflowing ones.
 *
 * Rows whose fix is on another branch carry `pending` (the reason) and
 * are reported as skipped; AMPC_TEST_PENDING=1 runs them too (to see
 * where they stand), and flipping one on is deleting its reason.
 *
 * The makers of the bad inputs are in malformed_inputs.h. Tokens in a
 * row's command line: @D its directory, @TINY a tiny image set, @TEXT a
 * tiny text corpus, @CK a checkpoint directory of a tiny mlp run, @LOG
 * that run's log, @RO a directory where nothing can be created, @FULL a
 * device whose writes fail with ENOSPC (/dev/full; for root a
 * copy of it made here, so that a regression that unlinks its output
 * cannot delete the machine's /dev/full, as `ampc plot -o` once did).
 */
#define _GNU_SOURCE /* memmem (malformed_inputs.h), strsignal */
#include "malformed_inputs.h"

#include "cli.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/sysmacros.h>
#include <time.h>

#define PENDING "fixed on another branch"

static char err_text[1 << 16];

typedef struct {
    const char *what;             /* the class of bad input */
    void (*make)(const char *d);  /* writes the bad input into the row's directory d */
    const char *args;             /* the command line (tokens above) */
    int exit;                     /* 1 run failure, 2 bad command line, 0 fine */
    const char *says;             /* on stderr (on stdout when exit is 0) */
    const char *keep;             /* a file that must be byte-identical afterwards, or NULL */
    int limit_s;                  /* 0: 20 s */
    const char *pending;          /* NULL, or why the row is not run yet */
    bool (*after)(const char *d); /* more checks, or NULL */
} row;

/* ---------------------------------------------------------- the table */

/* A row gives its first five fields; keep, limit_s, pending and after
 * only where they apply (by name), the rest left zero. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define T "--threads 1 "
#define MLP "train --model mlp --hidden 8 --batch 16 --steps 1 " T
static const row rows[] = {
    /* Item 1: IDX headers */
    {"idx: a zero dimension (2000 x 0 x 28), train", zero_height, MLP "--data @D/data", 1, "(dimension 1) is 0"},
    {"idx: a zero dimension (2000 x 0 x 28), eval", zero_height, "eval @CK --data @D/data " T, 1, "(dimension 1) is 0"},
    {"idx: no images (count 0)", zero_count, MLP "--data @D/data", 1, "image count (dimension 0) is 0"},
    {"idx: label count differs from image count", label_count_mismatch, MLP "--data @D/data", 1,
     "label count (dimension 0) is 255"},
    {"idx: gzip header promising 257 TB", huge_dims, MLP "--data @D/data", 1, "more than 16384"},
    {"idx: 2^30 features per image", huge_features, MLP "--data @D/data", 1, "pixels per image"},
    {"idx: images with one dimension", one_dim_images, MLP "--data @D/data", 1, "gives 1 dimension"},
    {"idx: images with four dimensions", four_dim_images, MLP "--data @D/data", 1, "gives 4 dimensions"},
    {"idx: labels with two dimensions", two_dim_labels, MLP "--data @D/data", 1, "labels are [count]"},
    {"idx: a label over 65535", label_too_big, MLP "--data @D/data", 1, "is not a class number"},
    {"idx: a negative label", label_negative, MLP "--data @D/data", 1, "label -1 at index 3"},
    {"idx: test labels beyond the training classes", test_classes_beyond_train, MLP "--data @D/data", 1,
     "does not match the training set"},
    {"idx: test labels beyond the checkpoint's classes (eval)", test_classes_beyond_train, "eval @CK --data @D/data " T,
     1, "in 6 classes; the model in"},
    {"idx: empty images file", empty_images, MLP "--data @D/data", 1, "truncated header"},
    {"idx: gzip file cut in half", truncated_gz, MLP "--data @D/data", 1, "truncated"},
    {"idx: wrong magic", wrong_magic, MLP "--data @D/data", 1, "bad magic"},
    {"idx: unknown type byte", bad_type_byte, MLP "--data @D/data", 1, "unsupported type byte 0x42"},
    {"idx: bytes after the data", trailing_bytes, MLP "--data @D/data", 1, "bytes after"},
    {"idx: a directory where the images file should be", dir_as_images, MLP "--data @D/data", 1, "not a regular file (a directory)"},
    {"idx: cnn on 5x5 images", odd_sides, "train --model cnn --batch 16 --steps 1 " T "--data @D/data", 1,
     "divide by 4"},
    {"idx: no labels file", no_labels, MLP "--data @D/data", 1, "train-labels-idx1-ubyte.gz: cannot open: No such file"},
    {"idx: images of another shape than the checkpoint's (resume)", odd_sides, "train --resume @CK --data @D/data " T,
     1, "has 5x5 images in 2 classes; the model in"},
    {"idx: a NaN pixel the run may never sample (warned)", nan_pixels, MLP "--data @D/data", 0,
     "holds 1 inf/NaN values (the first in image 0, pixel 10)"},
    {"idx: /dev/zero as the data files", dev_zero_data, MLP "--data @D/data", 1, "not a regular file", .limit_s = 10},
    /* --data pointing at the wrong thing */
    {"--data: a path that does not exist", NULL, MLP "--data @D/absent", 1, "No such file or directory"},
    {"--data: a file where a directory is expected", a_file, MLP "--data @D/file", 1, "Not a directory"},
    {"--data: the text corpus for the mlp", NULL, MLP "--data @TEXT", 1, "should hold Fashion-MNIST"},
    {"--data: the image set for gpt", NULL,
     "train --model gpt --layers 1 --heads 1 --width 8 --context 8 --batch 2 --steps 1 " T "--data @TINY", 1,
     "binary data, not text"},
    {"--data: a binary file for gpt", binary_text,
     "train --model gpt --layers 1 --heads 1 --width 8 --context 8 --batch 2 --steps 1 " T "--data @D/blob.bin", 1,
     "binary data, not text"},
    {"--data: an empty text file", empty_text, "train --model gpt --steps 1 " T "--data @D/empty.txt", 1, "empty"},
    {"--data: an empty directory for gpt", empty_dir, "train --model gpt --steps 1 " T "--data @D/empty", 1,
     "no text files"},
    {"--data: text shorter than the context", short_text, "train --model gpt --steps 1 " T "--data @D/short.txt", 1,
     "validation split"},
    {"--data: /dev/zero as the text", NULL, "train --model gpt --steps 1 " T "--data /dev/zero", 1,
     "not a regular file", .limit_s = 2},
    {"--data: a symlink loop", symlink_loop, MLP "--data @D/loop1", 1, "Too many levels of symbolic links"},
    {"--data: a path longer than PATH_MAX", NULL, MLP "--data @D/$(printf 'x%.0s' $(seq 5000))", 2,
     "--data: the path is 50"},
    {"--data: an empty value", NULL, "train --data ''", 2, "--data: needs a non-empty value"},
    /* Item 7: --save */
    {"--save: a directory where nothing can be created", NULL, MLP "--data @TINY --save @RO", 1,
     "cannot create a file there", .limit_s = 10, .after = nothing_trained},
    {"--save: a file, not a directory", a_file, MLP "--data @TINY --save @D/file", 1, "exists and is not a directory",
     .keep = "@D/file", .limit_s = 10, .after = nothing_trained},
    {"--save: under a missing parent", NULL, MLP "--data @TINY --save @D/no/such/dir", 1,
     "cannot create the directory: No such file or directory", .limit_s = 10, .after = nothing_trained},
    {"--save: a path longer than PATH_MAX", NULL, MLP "--data @TINY --save @D/$(printf 'x%.0s' $(seq 5000))", 2,
     "the system takes paths of fewer than 4096 (PATH_MAX)", .after = nothing_trained},
    {"--save: under a file", a_file, MLP "--data @TINY --save @D/file/ck", 1, "Not a directory", .keep = "@D/file",
     .limit_s = 10, .after = nothing_trained},
    /* Item 8: --log */
    {"--log: a checkpoint", ck_copy, MLP "--data @TINY --log @D/ck/checkpoint.safetensors", 1, "is not an ampc log",
     .keep = "@D/ck/checkpoint.safetensors"},
    {"--log: the text corpus being trained on", NULL,
     "train --model gpt --layers 1 --heads 1 --width 8 --context 8 --batch 2 --steps 1 " T "--data @TEXT --log @TEXT",
     1, "is not an ampc log", .keep = "@TEXT"},
    {"--log: an earlier run's log, no --log-mode", ck_copy, MLP "--data @TINY --log @D/run.jsonl", 2,
     "--log-mode append", .keep = "@D/run.jsonl"},
    {"--log: a directory", NULL, MLP "--data @TINY --log @D", 1, "is a directory"},
    {"--log: a full disk (/dev/full)", NULL, MLP "--data @TINY --log @FULL", 1, "No space left on device",
     .after = full_still_device},
    {"--log: in a missing directory", NULL, MLP "--data @TINY --log @D/no/run.jsonl", 1, "No such file or directory"},
    {"--log: where --save puts the checkpoint", NULL, MLP "--data @TINY --save @D/run --log @D/run/./" CHECKPOINT_FILE, 2,
     "is where --save"},
    {"--log-mode: without --log", NULL, MLP "--data @TINY --log-mode append", 2, "--log-mode needs --log"},
    {"--log-mode: an unknown mode", NULL, MLP "--data @TINY --log @D/x.jsonl --log-mode overwrite", 2,
     "unknown value 'overwrite'"},
    /* --resume / eval of something that is not a checkpoint */
    {"--resume: a directory without a checkpoint", empty_dir, "train --resume @D/empty " T, 1,
     "No such file or directory"},
    {"--resume: a path that does not exist", NULL, "train --resume @D/absent " T, 1, "No such file or directory"},
    {"--resume: a file, not a directory", a_file, "train --resume @D/file " T, 1, "Not a directory", .keep = "@D/file"},
    {"--resume: an empty checkpoint", ck_empty, "train --resume @D/ck " T, 1, "truncated"},
    {"--resume: a text file as the checkpoint", ck_text, "train --resume @D/ck " T, 1, "not a safetensors file",
     .keep = "@D/ck/checkpoint.safetensors"},
    {"--resume: a checkpoint cut in half", ck_truncated, "train --resume @D/ck --data @TINY " T, 1, "truncated",
     .keep = "@D/ck/checkpoint.safetensors"},
    {"eval: a checkpoint cut in half", ck_truncated, "eval @D/ck --data @TINY " T, 1, "truncated",
     .keep = "@D/ck/checkpoint.safetensors"},
    {"--resume: a header length of 2^60", ck_huge_header, "train --resume @D/ck " T, 1, "header length is implausible",
     .keep = "@D/ck/checkpoint.safetensors"},
    {"--resume: a FIFO as the checkpoint", ck_fifo, "train --resume @D/ck " T, 1, "not a regular file", .limit_s = 10},
    {"--resume: a checkpoint at step -5", ck_step_negative, "train --resume @D/ck --data @TINY " T, 1, "step",
     .limit_s = 10},
    {"--resume: a setting past int64 in the checkpoint", ck_batch_overflow, "train --resume @D/ck --data @TINY " T, 1,
     "batch", .limit_s = 10},
    {"--resume: another model than the checkpoint's", NULL, "train --resume @CK --model gpt " T, 2,
     "--model gpt conflicts with the checkpoint"},
    {"--resume: another model's options", NULL, "train --resume @CK --layers 2 " T, 2,
     "--layers applies to --model gpt"},
    {"eval: a directory without a checkpoint", empty_dir, "eval @D/empty " T, 1, "No such file or directory"},
    {"eval: a text file as the checkpoint", ck_text, "eval @D/ck " T, 1, "not a safetensors file"},
    {"eval: the text corpus as --data of an mlp", NULL, "eval @CK --data @TEXT " T, 1, "should hold Fashion-MNIST"},
    {"eval: no checkpoint given", NULL, "eval", 2, "which checkpoint"},
    {"eval: a train-only option", NULL, "eval @CK --accum 3", 2, "unknown option '--accum'"},
    /* Command lines */
    {"train: an unknown option", NULL, "train --bogus 3", 2, "unknown option '--bogus'"},
    {"train: a stray argument", NULL, "train stray", 2, "unexpected argument 'stray'"},
    {"train: an option without its value", NULL, "train --batch", 2, "--batch: needs a value"},
    {"train: a flag with a value", NULL, "train --no-scaler=yes", 2, "--no-scaler: takes no value"},
    {"train: an option for another model", NULL, "train --model mlp --layers 2", 2, "--layers applies to --model gpt"},
    {"train: an mlp option for gpt", NULL, "train --model gpt --hidden 8", 2, "--hidden applies to --model mlp"},
    {"train: --epochs and --steps", NULL, "train --epochs 1 --steps 1", 2, "not both"},
    {"train: heads not dividing width", NULL, "train --model gpt --width 10 --heads 3", 2, "not divisible"},
    {"ampc: an unknown command", NULL, "frobnicate", 2, "unknown command 'frobnicate'"},
    {"policy: an unknown option", NULL, "policy --bogus", 2, "unknown option '--bogus'"},
    {"policy: a stray argument", NULL, "policy extra", 2, "unknown option 'extra'"},
    /* Item 3: plot */
    {"plot: steps at 2^53 (the tick loop stalled)", log_at_2p53, "plot @D/big.jsonl", 0, "wrote", .limit_s = 10,
     .after = big_svg_sane},
    {"plot: losses of +-1e308 (-inf coordinates)", log_loss_1e308, "plot @D/huge.jsonl", 0, "wrote", .limit_s = 10,
     .after = huge_svg_sane},
    {"plot: denormal steps and losses", log_denormal, "plot @D/tiny.jsonl", 0, "wrote", .limit_s = 10,
     .after = tiny_svg_sane},
    {"plot: a log named with a control character and <&", log_odd_name,
     "plot \"@D/$(printf 'a\\001b<&.jsonl')\" -o @D/odd.svg", 0, "wrote", .after = odd_svg_is_xml},
    {"plot: a step of 1e999", log_step_inf, "plot @D/inf.jsonl", 1, "\"step\" is out of range"},
    {"plot: a NUL byte in the log", log_with_nul, "plot @D/nul.jsonl", 1, "NUL byte"},
    {"plot: an empty log name", NULL, "plot ''", 1, ": cannot open: No such file"},
    {"plot: -o a directory", ck_copy, "plot @D/run.jsonl -o @D/ck", 1, "Is a directory",
     .keep = "@D/ck/checkpoint.safetensors"},
    {"plot: an empty log", log_empty, "plot @D/empty.jsonl", 1, "no step lines"},
    {"plot: a checkpoint as the log", NULL, "plot @CK/checkpoint.safetensors -o @D/x.svg", 1,
     "@CK/checkpoint.safetensors"},
    {"plot: a directory as the log", NULL, "plot @CK -o @D/x.svg", 1, "not a regular file (a directory)"},
    {"plot: a log that does not exist", NULL, "plot @D/absent.jsonl", 1, "No such file or directory"},
    {"plot: -o onto a checkpoint", ck_copy, "plot @D/run.jsonl -o @D/ck/checkpoint.safetensors", 1, "is not an SVG",
     .keep = "@D/ck/checkpoint.safetensors"},
    {"plot: -o onto the log by another name", ck_copy, "plot @D/run.jsonl -o @D/../$(basename @D)/run.jsonl", 2,
     "would overwrite the log", .keep = "@D/run.jsonl"},
    {"plot: -o into a missing directory", ck_copy, "plot @D/run.jsonl -o @D/no/x.svg", 1, "cannot create"},
    {"plot: -o on a full disk", ck_copy, "plot @D/run.jsonl -o @FULL", 1, "No space left on device",
     .after = full_still_device},
    {"plot: no log", NULL, "plot", 2, "usage: ampc plot"},
    {"plot: an unknown option", NULL, "plot --bogus x.jsonl", 2, "unknown option '--bogus'"},
};
#pragma GCC diagnostic pop

/* ------------------------------------------------------------ running */

/* src with the tokens replaced, into out. */
static void expand(char *out, size_t n, const char *src, const char *d)
{
    static const struct {
        const char *tok;
        const char *val;
    } toks[] = {{"@TINY", tiny}, {"@TEXT", text}, {"@CK", ck}, {"@LOG", goodlog}, {"@RO", ro}, {"@FULL", full}};
    size_t k = 0;
    while (*src && k + 1 < n) {
        const char *val = NULL;
        size_t len = 0;
        if (strncmp(src, "@D", 2) == 0) {
            val = d;
            len = 2;
        }
        for (size_t t = 0; t < sizeof toks / sizeof toks[0] && !val; t++)
            if (strncmp(src, toks[t].tok, strlen(toks[t].tok)) == 0) {
                val = toks[t].val;
                len = strlen(toks[t].tok);
            }
        if (val) {
            k += (size_t)snprintf(out + k, n - k, "%s", val);
            src += len;
        } else {
            out[k++] = *src++;
        }
    }
    out[k < n ? k : n - 1] = '\0';
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int code;   /* exit code; -1 when not exited */
    int signal; /* the signal that ended it, 0 if none */
    bool timed_out;
    double secs;
} outcome;

/* Runs "ampc ARGS" through sh (so quotes and $(...) work), stdout into
 * cli_out and stderr into err_text, killed at limit_s seconds. */
static outcome run_ampc(const char *args, int limit_s)
{
    char cmd[8192], outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/.stdout", tmpdir);
    snprintf(errp, sizeof errp, "%s/.stderr", tmpdir);
    snprintf(cmd, sizeof cmd, "exec '%s' %s >'%s' 2>'%s' </dev/null", cli_ampc, args, outp, errp);
    outcome r = {.code = -1};
    double t0 = now();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (now() - t0 > limit_s) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            r.timed_out = true;
            break;
        }
        usleep(2000);
    }
    r.secs = now() - t0;
    if (WIFEXITED(st))
        r.code = WEXITSTATUS(st);
    else if (WIFSIGNALED(st))
        r.signal = WTERMSIG(st);
    char *o = cli_read_file(outp, NULL), *e = cli_read_file(errp, NULL);
    snprintf(cli_out, sizeof cli_out, "%s", o ? o : "");
    snprintf(err_text, sizeof err_text, "%s", e ? e : "");
    free(o);
    free(e);
    return r;
}

/* Whether stderr holds an AddressSanitizer / UBSan report (under
 * AMPC_SANITIZE an error exits 1, which a row expecting 1 would miss). */
static bool sanitizer_report(void)
{
    return strstr(err_text, "Sanitizer") != NULL || strstr(err_text, "runtime error:") != NULL;
}

static const row *cur;
static int row_no;

static void run_row(void)
{
    const row *r = cur;
    if (r->pending && !getenv("AMPC_TEST_PENDING")) {
        harness_skip(r->pending);
        return;
    }
    if (strstr(r->args, "@FULL") && access(full, W_OK) != 0) {
        harness_skip("no /dev/full on this machine");
        return;
    }
    char d[256], args[4096], keep[1024], says[1024];
    snprintf(d, sizeof d, "%s/row%02d", tmpdir, row_no);
    mkdir(d, 0700);
    if (r->make)
        r->make(d);
    expand(args, sizeof args, r->args, d);
    expand(says, sizeof says, r->says, d);
    size_t keep_n = 0;
    char *before = NULL;
    if (r->keep) {
        expand(keep, sizeof keep, r->keep, d);
        before = cli_read_file(keep, &keep_n);
        CHECK_MSG(before != NULL, "the row's file %s is not there to keep", keep);
    }
    int limit = r->limit_s ? r->limit_s : 20;
    outcome o = run_ampc(args, limit);
    CHECK_MSG(!o.timed_out, "ampc %s: still running after %d s (a hang)", args, limit);
    CHECK_MSG(o.signal == 0, "ampc %s: killed by signal %d (%s)\nstderr: %s", args, o.signal, strsignal(o.signal),
              err_text);
    CHECK_MSG(o.code == r->exit, "ampc %s: exit %d, expected %d\nstdout: %s\nstderr: %s", args, o.code, r->exit,
              cli_out, err_text);
    CHECK_MSG(!sanitizer_report(), "ampc %s: a sanitizer report:\n%s", args, err_text);
    /* A failure says why on stderr; a run that goes on (exit 0) may say
     * it on either: a result on stdout, a warning on stderr. */
    bool said = strstr(err_text, says) || (r->exit == 0 && strstr(cli_out, says));
    CHECK_MSG(said, "ampc %s: no \"%s\" in its output:\nstdout: %s\nstderr: %s", args, says, cli_out, err_text);
    if (before) {
        size_t n = 0;
        char *after = cli_read_file(keep, &n);
        CHECK_MSG(after && n == keep_n && memcmp(after, before, n) == 0, "ampc %s changed %s (%zu bytes, was %zu)",
                  args, keep, n, keep_n);
        free(after);
        free(before);
    }
    if (r->after)
        r->after(d);
}

/* The bad values of numeric row d into vals (their count): below and
 * above its range, non-numbers, overflows. */
static int bad_values(const opt_def *d, const char *vals[12], char below[64], char above[64])
{
    int nv = 0;
    switch (d->kind) {
    case OPT_INT:
    case OPT_LIST:
        snprintf(below, 64, "%.0f", d->lo - 1);
        snprintf(above, 64, "%.0f", d->hi * 2 + 1);
        vals[nv++] = below;
        vals[nv++] = above;
        vals[nv++] = "99999999999999999999999";
        vals[nv++] = "1.5";
        vals[nv++] = "1e3";
        vals[nv++] = "0x10";
        vals[nv++] = "";
        vals[nv++] = "abc";
        if (d->kind == OPT_INT) { /* a whole number is digits: no sign or blank before them */
            vals[nv++] = "+5";
            vals[nv++] = " 5";
        }
        if (d->kind == OPT_LIST) {
            vals[nv++] = "8,,8";
            vals[nv++] = "8,";
        }
        break;
    case OPT_REAL:
        snprintf(below, 64, "%.17g", d->lo > 0 && d->lo < 1 ? 0 : d->lo - 1);
        snprintf(above, 64, "%.17g", d->hi * 10);
        vals[nv++] = below;
        vals[nv++] = above;
        vals[nv++] = "nan";
        vals[nv++] = "inf";
        vals[nv++] = "-inf";
        vals[nv++] = "1e999";
        vals[nv++] = "";
        vals[nv++] = "1.0x";
        break;
    case OPT_U64:
        vals[nv++] = "-1";
        vals[nv++] = "18446744073709551616";
        vals[nv++] = "1.5";
        vals[nv++] = "";
        vals[nv++] = "x";
        vals[nv++] = "+5";
        vals[nv++] = " 5";
        break;
    default:
        break;
    }
    return nv;
}

/* Every numeric option of every command that has them refuses, with exit
 * 2 and its name, values below and above its range, non-numbers and
 * overflows: the rows of each command's table its --help lists (train's
 * whole table, the rows eval and profile pick from it, generate's and
 * profile's own). */
static void test_every_numeric_option_refuses_bad_values(void)
{
    /* --data nowhere (a checkpoint nowhere for generate): a value wrongly
     * accepted fails fast (exit 1) instead of training on the default data
     * set. */
    const struct {
        const opt_cmd *c;
        const char *args;
        bool model; /* takes --model (for a row of one model) */
    } cmds[] = {
        {&train_options, "train --data /nonexistent-ampc", true},
        {&eval_options, "eval @CK --data /nonexistent-ampc", false},
        {&generate_options, "generate /nonexistent-ampc", false},
        {&profile_options, "profile --data /nonexistent-ampc", true},
    };
    int runs = 0;
    for (size_t ci = 0; ci < sizeof cmds / sizeof cmds[0]; ci++) {
        const opt_cmd *c = cmds[ci].c;
        char prefix[512];
        expand(prefix, sizeof prefix, cmds[ci].args, tmpdir);
        for (int k = 0; k < c->n_blocks; k++) {
            const opt_block *b = &c->blocks[k];
            for (int i = 0; i < (b->pick ? b->n_pick : b->n) && !b->unlisted; i++) {
                const opt_def *d = b->pick ? opt_find(b->rows, b->n, b->pick[i].name) : &b->rows[i];
                CHECK(d != NULL);
                const char *vals[12];
                char below[64], above[64];
                int nv = d ? bad_values(d, vals, below, above) : 0;
                for (int v = 0; v < nv; v++) {
                    char args[1024];
                    snprintf(args, sizeof args, "%s %s%s --%s '%s'", prefix,
                             cmds[ci].model && d->models ? "--model " : "",
                             cmds[ci].model && d->models ? d->models : "", d->name, vals[v]);
                    outcome o = run_ampc(args, 10);
                    runs++;
                    char needle[64];
                    snprintf(needle, sizeof needle, "--%s", d->name);
                    CHECK_MSG(!o.timed_out && o.signal == 0 && o.code == 2 && strstr(err_text, needle) &&
                                  !sanitizer_report(),
                              "ampc %s: exit %d signal %d%s, stderr: %s", args, o.code, o.signal,
                              o.timed_out ? " (timed out)" : "", err_text);
                }
            }
        }
    }
    CHECK(runs > 100);
}

static void skip_without_binary(void) { cli_have_binary(); }

int main(void)
{
    cli_init("test-malformed");
    if (!cli_ampc[0] || access(cli_ampc, X_OK) != 0) {
        RUN(skip_without_binary);
        cli_cleanup();
        return harness_done();
    }
    cli_write_tiny_images(cli_path(tiny, sizeof tiny, "tiny"));
    cli_write_tiny_text(cli_path(text, sizeof text, "tiny.txt"));
    cli_path(ck, sizeof ck, "good");
    cli_path(goodlog, sizeof goodlog, "good.jsonl");
    /* A directory no file can be created in: permissions for a user, /proc
     * for root (whom permissions do not stop). */
    if (geteuid() == 0) {
        snprintf(ro, sizeof ro, "/proc");
    } else {
        cli_path(ro, sizeof ro, "readonly");
        mkdir(ro, 0500);
    }
    snprintf(full, sizeof full, "/dev/full");
    if (geteuid() == 0) {
        char own[256];
        cli_path(own, sizeof own, "full");
        if (mknod(own, S_IFCHR | 0666, makedev(1, 7)) == 0) /* Linux's full device */
            snprintf(full, sizeof full, "%s", own);
    }
    int rc = cli_run("train --model mlp --hidden 8 --batch 16 --steps 2 --threads 1 --data %s --save %s --log %s",
                     tiny, ck, goodlog);
    CHECK_MSG(rc == 0, "the good run: exit %d\n%s", rc, cli_out);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cur = &rows[i];
        row_no = (int)i;
        harness_run(rows[i].what, run_row);
    }
    RUN(test_every_numeric_option_refuses_bad_values);
    if (geteuid() != 0)
        chmod(ro, 0700);
    cli_cleanup();
    return harness_done();
}
