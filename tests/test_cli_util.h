/*
 * test_cli_util.h - what the ampc program's tests (test_cli*.c) share:
 * running the binary as a user does and capturing its output, checking
 * that a run exits 0 (CLI_OK) and a table of command lines it must refuse
 * against what each refusal says (cli_refusal, cli_check_refusals),
 * writing tiny data sets (IDX files, a text corpus), reading files back, a
 * strict JSON-lines reader for the training log, and mpirun's command line
 * for the data-parallel runs. Files go to scratch.h's tmpdir. Header-only
 * (static inline), so each test binary stays one .c file plus the harness.
 *
 * The binary is $AMPC_BUILD_DIR/ampc (CTest sets AMPC_BUILD_DIR).
 */
#ifndef AMPC_TEST_CLI_UTIL_H
#define AMPC_TEST_CLI_UTIL_H

#include "harness.h"
#include "scratch.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

static char cli_ampc[1024];
static char cli_out[1 << 17];

/* Sets up the binary's path and a fresh scratch directory (tmpdir; the
 * program ends when it cannot be made). */
static inline void cli_init(const char *name)
{
    const char *bd = getenv("AMPC_BUILD_DIR");
    if (bd)
        snprintf(cli_ampc, sizeof cli_ampc, "%s/ampc", bd);
    scratch_make(name);
}

/* Removes the scratch directory and everything in it. */
static inline void cli_cleanup(void) { scratch_remove(); }

static inline bool cli_have_binary(void)
{
    if (cli_ampc[0] && access(cli_ampc, X_OK) == 0)
        return true;
    harness_skip("the ampc binary is not built (AMPC_BUILD_DIR/ampc missing)");
    return false;
}

/* Runs the shell command cmd with its output (stdout, and stderr where cmd
 * joins it) into cli_out; returns the exit code (-1 when it did not exit
 * normally, e.g. a crash). */
static inline int cli_capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    cli_out[0] = '\0';
    if (!p)
        return -1;
    size_t n = fread(cli_out, 1, sizeof cli_out - 1, p);
    cli_out[n] = '\0';
    while (fgetc(p) != EOF) /* drain so the child never blocks on a full pipe */
        ;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs "ENV ampc ARGS" (ENV: variable settings for the shell, or NULL;
 * ARGS printf-style) with stderr joined to stdout into cli_out; returns
 * the exit code (-1 when it did not exit normally, e.g. a crash). */
static inline int cli_vrun_env(const char *env, const char *fmt, va_list ap)
{
    char args[12288], cmd[13600]; /* (paths of PATH_MAX bytes fit) */
    vsnprintf(args, sizeof args, fmt, ap);
    snprintf(cmd, sizeof cmd, "%s '%s' %s 2>&1", env ? env : "", cli_ampc, args);
    return cli_capture(cmd);
}

static inline int cli_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int cli_run(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = cli_vrun_env(NULL, fmt, ap);
    va_end(ap);
    return rc;
}

static inline int cli_run_env(const char *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int cli_run_env(const char *env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = cli_vrun_env(env, fmt, ap);
    va_end(ap);
    return rc;
}

/* Runs "ENV ampc ARGS" as cli_run_env does and checks that it exits 0,
 * reporting the command line and its output at file:line when not;
 * returns the exit code. */
static inline int cli_ok_at(const char *file, int line, const char *env, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int cli_ok_at(const char *file, int line, const char *env, const char *fmt, ...)
{
    char args[12288];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = cli_run_env(env, "%s", args);
    if (rc != 0)
        harness_fail(file, line, "ampc %.200s: exit %d:\n%s", args, rc, cli_out);
    return rc;
}

/* cli_run / cli_run_env that must exit 0 (cli_ok_at). */
#define CLI_OK(...) cli_ok_at(__FILE__, __LINE__, NULL, __VA_ARGS__)
#define CLI_OK_ENV(env, ...) cli_ok_at(__FILE__, __LINE__, (env), __VA_ARGS__)

#define CHECK_OUT(needle) \
    CHECK_MSG(strstr(cli_out, (needle)) != NULL, "no \"%s\" in output:\n%s", (needle), cli_out)

/* A command line's tail the program must refuse as a usage error (exit
 * 2), and a piece of what the refusal says. */
typedef struct {
    const char *args, *needle;
} cli_refusal;

/* Runs "ENV ampc PREFIX ARGS" for each of the n cases (ENV as cli_run_env;
 * PREFIX may be "") and checks that it exits 2 with the needle in its
 * output, naming the command line where not. */
static inline void cli_check_refusals(const char *env, const char *prefix, const cli_refusal *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const cli_refusal *c = &cases[i];
        int rc = cli_run_env(env, "%s %s", prefix, c->args);
        CHECK_MSG(rc == 2, "%s%sampc %s %s: exit %d, expected 2; output:\n%s", env ? env : "", env ? " " : "", prefix,
                  c->args, rc, cli_out);
        CHECK_MSG(strstr(cli_out, c->needle) != NULL, "%s%sampc %s %s: no \"%s\" in:\n%s", env ? env : "",
                  env ? " " : "", prefix, c->args, c->needle, cli_out);
    }
}

#define CLI_REFUSALS(cases) (cases), sizeof(cases) / sizeof(cases)[0]

/* tmpdir/name into buf. */
static inline const char *cli_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

/* Writes an IDX u8 file (gzip): dims as given, then n bytes of data. */
static inline void cli_write_idx(const char *path, int ndim, const uint32_t *dims, const unsigned char *data,
                                 size_t n)
{
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    unsigned char h[4 + 4 * 3] = {0, 0, 0x08, (unsigned char)ndim};
    for (int i = 0; i < ndim; i++)
        for (int k = 0; k < 4; k++)
            h[4 + 4 * i + k] = (unsigned char)(dims[i] >> (24 - 8 * k));
    gzwrite(f, h, (unsigned)(4 + 4 * ndim));
    if (n)
        gzwrite(f, data, (unsigned)n);
    gzclose(f);
}

/* dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz: the same n images
 * of h x w u8 pixels (img) and n u8 labels (lab) in both splits. */
static inline void cli_write_idx_set(const char *dir, uint32_t n, uint32_t h, uint32_t w, const unsigned char *img,
                                     const unsigned char *lab)
{
    mkdir(dir, 0700);
    uint32_t idims[3] = {n, h, w}, ldims[1] = {n};
    const char *pre[2] = {"train", "t10k"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, pre[i]);
        cli_write_idx(path, 3, idims, img, (size_t)n * h * w);
        snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, pre[i]);
        cli_write_idx(path, 1, ldims, lab, n);
    }
}

/* n random 28x28 images (the cnn's real shape) in 10 classes, from seed,
 * the same in both splits: what memory tests measure, not what learns. */
static inline void cli_write_noise_images(const char *dir, uint32_t n, uint64_t seed)
{
    enum { P = 28 * 28 };
    unsigned char *img = malloc((size_t)n * P), *lab = malloc(n);
    if (!img || !lab) {
        free(img), free(lab);
        return;
    }
    uint64_t s = seed;
    for (uint32_t i = 0; i < n; i++) {
        lab[i] = (unsigned char)(i % 10);
        for (int k = 0; k < P; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            img[(size_t)i * P + k] = (unsigned char)(s >> 56);
        }
    }
    cli_write_idx_set(dir, n, 28, 28, img, lab);
    free(img), free(lab);
}

/* A tiny two-class image set in dir: class 1 images are bright, class 0
 * dark, 4x4 pixels (so the cnn's two 2x2 poolings fit), N of each split.
 * The test split is the training split (the runs here test the program,
 * not generalisation). */
static inline void cli_write_tiny_images(const char *dir)
{
    enum { N = 256, P = 16 };
    static unsigned char img[N * P], lab[N];
    uint64_t s = 42;
    for (int i = 0; i < N; i++) {
        lab[i] = (unsigned char)(i % 2);
        for (int k = 0; k < P; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(s >> 57); /* 0..127 */
            img[i * P + k] = (unsigned char)(lab[i] ? 100 + r : r);
        }
    }
    cli_write_idx_set(dir, N, 4, 4, img, lab);
}

/* A small text corpus: a few sentences repeated with variations. */
static inline void cli_write_tiny_text(const char *path)
{
    static const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran. "};
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    uint64_t s = 7;
    for (int i = 0; i < 1500; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        fputs(words[(s >> 60) % 9], f);
        if (i % 12 == 11)
            fputc('\n', f);
    }
    fclose(f);
}

/* cli_init, then the data sets most of the tests train on, written once:
 * the tiny image set (cli_write_tiny_images) at tmpdir/tiny, its path into
 * images, and the tiny text corpus at tmpdir/tiny.txt, its path into text
 * (each buffer of 256 bytes, or NULL for none). */
static inline void cli_init_tiny(const char *name, char *images, char *text)
{
    cli_init(name);
    if (images) {
        snprintf(images, 256, "%s/tiny", tmpdir);
        cli_write_tiny_images(images);
    }
    if (text) {
        snprintf(text, 256, "%s/tiny.txt", tmpdir);
        cli_write_tiny_text(text);
    }
}

/* The whole file, malloc'd and NUL-terminated (*len bytes); NULL if absent. */
static inline char *cli_read_file(const char *path, size_t *len) { return test_read_file(path, len); }

/* Whether the checkpoints in directories a and b are the same bytes; when
 * not, why (sizes, or the first differing byte and the text around it)
 * in why. */
static inline bool cli_same_checkpoint(const char *a, const char *b, char *why, size_t n)
{
    char fa[1100], fb[1100];
    snprintf(fa, sizeof fa, "%s/checkpoint.safetensors", a);
    snprintf(fb, sizeof fb, "%s/checkpoint.safetensors", b);
    size_t na = 0, nb = 0, i = 0;
    char *pa = cli_read_file(fa, &na), *pb = cli_read_file(fb, &nb);
    while (pa && pb && i < na && i < nb && pa[i] == pb[i])
        i++;
    bool same = pa && pb && na == nb && i == na;
    if (!same)
        snprintf(why, n, "the checkpoints differ at byte %zu of %zu / %zu:\n  %.80s\n  %.80s", i, na, nb,
                 pa && i < na ? pa + (i > 40 ? i - 40 : 0) : "", pb && i < nb ? pb + (i > 40 ? i - 40 : 0) : "");
    free(pa);
    free(pb);
    return same;
}

/* The number after "label " in cli_out's last such line, or -1. */
static inline double cli_value_after(const char *label)
{
    const char *p = NULL;
    for (const char *q = strstr(cli_out, label); q; q = strstr(q + 1, label))
        p = q;
    return p ? atof(p + strlen(label)) : -1.0;
}

/* ---------------------------------------------------------- JSON lines */

/* A strict recursive-descent check of one JSON value (RFC 8259 grammar,
 * no NaN / Infinity); advances *p past it. */
static inline bool cli_json_value(const char **p, int depth);

static inline void cli_json_ws(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\r' || **p == '\n')
        (*p)++;
}

static inline bool cli_json_string(const char **p)
{
    if (**p != '"')
        return false;
    for ((*p)++; **p != '"'; (*p)++) {
        if ((unsigned char)**p < 0x20)
            return false;
        if (**p == '\\') {
            (*p)++;
            if (**p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)(*p)[i]))
                        return false;
                *p += 4;
            } else if (!strchr("\"\\/bfnrt", **p) || !**p) {
                return false;
            }
        }
    }
    (*p)++;
    return true;
}

static inline bool cli_json_number(const char **p)
{
    const char *s = *p;
    if (*s == '-')
        s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (isdigit((unsigned char)*s))
            s++;
    else
        return false;
    if (*s == '.') {
        if (!isdigit((unsigned char)*++s))
            return false;
        while (isdigit((unsigned char)*s))
            s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!isdigit((unsigned char)*s))
            return false;
        while (isdigit((unsigned char)*s))
            s++;
    }
    *p = s;
    return true;
}

static inline bool cli_json_value(const char **p, int depth)
{
    cli_json_ws(p);
    if (depth > 16)
        return false;
    char c = **p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        (*p)++;
        cli_json_ws(p);
        if (**p == close) {
            (*p)++;
            return true;
        }
        for (;;) {
            cli_json_ws(p);
            if (c == '{') {
                if (!cli_json_string(p))
                    return false;
                cli_json_ws(p);
                if (*(*p)++ != ':')
                    return false;
            }
            if (!cli_json_value(p, depth + 1))
                return false;
            cli_json_ws(p);
            if (**p == ',') {
                (*p)++;
                continue;
            }
            return *(*p)++ == close;
        }
    }
    if (c == '"')
        return cli_json_string(p);
    static const char *words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (strncmp(*p, words[i], strlen(words[i])) == 0) {
            *p += strlen(words[i]);
            return true;
        }
    return cli_json_number(p);
}

/* Whether line (up to its end) is exactly one JSON object. */
static inline bool cli_json_object_line(const char *line)
{
    const char *p = line;
    cli_json_ws(&p);
    if (*p != '{' || !cli_json_value(&p, 0))
        return false;
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    return *p == '\0' || *p == '\n';
}

/* The raw text of key's value in a flat JSON object line (up to the next
 * ',' or '}'), into buf; false when the key is absent. */
static inline bool cli_json_field(const char *line, const char *key, char *buf, size_t n)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *eol = strchr(line, '\n');
    const char *p = strstr(line, pat);
    if (!p || (eol && p > eol))
        return false;
    p += strlen(pat);
    size_t k = strcspn(p, ",}\n");
    if (k >= n)
        k = n - 1;
    memcpy(buf, p, k);
    buf[k] = '\0';
    return true;
}

/* Splits text into lines in place; returns how many (up to max). */
static inline int cli_lines(char *text, char **lines, int max);

/* The step lines of a --log file, each cut before "step_ms" (timings
 * differ between runs); *body holds them (free it). */
static inline int cli_log_steps(const char *path, char **lines, int max, char **body)
{
    *body = cli_read_file(path, NULL);
    if (!*body)
        return 0;
    int n = cli_lines(*body, lines, max);
    for (int i = 0; i < n; i++) {
        char *t = strstr(lines[i], ",\"step_ms\"");
        if (t)
            *t = '\0';
    }
    return n;
}

/* Splits text into lines in place; returns how many (up to max). */
static inline int cli_lines(char *text, char **lines, int max)
{
    int n = 0;
    for (char *p = text; *p && n < max;) {
        lines[n++] = p;
        char *e = strchr(p, '\n');
        if (!e)
            break;
        *e = '\0';
        p = e + 1;
    }
    return n;
}

/* The first executable `name` on the PATH into out (cap bytes); false, out
 * "", when there is none (test_cli_dist*.c look for mpirun). */
static inline bool cli_find_on_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    out[0] = '\0';
    if (!path)
        return false;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        snprintf(out, cap, "%s/%s", dir, name);
        if (access(out, X_OK) == 0)
            return true;
    }
    out[0] = '\0';
    return false;
}

/* The -x options each app context of an mpirun command line takes. Open
 * MPI's own allocations that live to the end (as the dist tests'
 * suppressions say) are no leak of ampc's under LeakSanitizer; the slow
 * unwinder sees through Open MPI's frames (built without frame pointers),
 * so that the suppressions find its libraries. */
static inline const char *cli_mpi_env(void)
{
    static char buf[2048];
    const char *src = getenv("AMPC_SOURCE_DIR");
    char lsan[1200] = "";
    if (src)
        snprintf(lsan, sizeof lsan, " -x LSAN_OPTIONS=suppressions=%s/tests/dist/lsan.supp:fast_unwind_on_malloc=0",
                 src);
    snprintf(buf, sizeof buf, " -x OMP_WAIT_POLICY=PASSIVE%s%s", lsan,
             getenv("AMPC_DIST_TIMEOUT") ? " -x AMPC_DIST_TIMEOUT" : "");
    return buf;
}

/* "'MPIRUN' OPTS -x ..." as cli_run_env's prefix: the command line becomes
 * "mpirun OPTS 'ampc' ARGS" (test_cli_dist*.c). */
static inline const char *cli_mpi(const char *mpirun, const char *opts)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "'%s' %s%s", mpirun, opts, cli_mpi_env());
    return buf;
}

/* The "key" field of each of a --log file's lines, into vals (NAN for
 * null) and, when text is not NULL, as text; at most max; returns how many. */
static inline int cli_log_field(const char *path, const char *key, double *vals, char (*text)[64], int max)
{
    char *buf = cli_read_file(path, NULL), *lines[512];
    if (!buf)
        return 0;
    int n = cli_lines(buf, lines, 512), k = 0;
    for (int i = 0; i < n && k < max; i++) {
        char v[64];
        if (!lines[i][0] || !cli_json_field(lines[i], key, v, sizeof v))
            continue;
        if (text)
            snprintf(text[k], sizeof text[k], "%s", v);
        vals[k++] = strcmp(v, "null") == 0 ? NAN : atof(v);
    }
    free(buf);
    return k;
}

#endif
