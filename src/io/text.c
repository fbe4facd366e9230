/*
 * text.c - amp_text: a character-level corpus for language-model training.
 *
 * The corpus is the bytes of a file; its vocabulary is the distinct bytes
 * present, sorted by value, and a byte's token id is its index in that
 * vocabulary (so a plain-ASCII text has a vocabulary of ~60-100, not 256).
 * amp_text_batch cuts B random windows of T tokens out of one split, with
 * the next-token targets beside them: y[b][t] = x[b][t + 1] in the text.
 *
 * Decisions:
 *   - Bytes, not Unicode characters: a UTF-8 letter outside ASCII is two or
 *     more tokens. Every file is then a valid corpus, and ids fit a byte.
 *   - A directory is a corpus too: every regular file directly inside it,
 *     in byte-wise sorted name order, concatenated as they are (nothing is
 *     put between files). Names starting with '.' and ending in ".dat" or
 *     ".u8" are left out: that makes /usr/share/games/fortunes (Debian's
 *     `fortunes` package: text files, their strfile(1) ".dat" indexes and
 *     ".u8" symlinks to the same text) one corpus of all its fortunes,
 *     ~2.5 MB, rather than a single 240 KB file of them. Subdirectories are
 *     not entered.
 *   - Splits: the first floor(9n/10) tokens train, the rest validate. A
 *     window never crosses the boundary, so no validation byte is ever a
 *     training target.
 *   - Data-parallel ranks read disjoint shards (amp_text_batch_shard): shard
 *     p of P is the split's p-th contiguous 1/P of its tokens, and its
 *     windows stay inside it.
 *   - Window starts are uniform over the split's valid starts, from
 *     Philox4x32 keyed by the seed (counter: split, row), so a batch depends
 *     only on (seed, split, B, T) and the text: the same seed gives the same
 *     batch on any thread or machine. Callers pass a different seed per
 *     step (e.g. run seed + step).
 *
 *   - Regular files only (a FIFO or /dev/zero would block or never end),
 *     each read up to the size it has when opened.
 *
 * Errors name the file or the tensors: AMP_ERR_IO (missing, unreadable,
 * not a regular file), AMP_ERR_MEMORY (larger than this machine's memory),
 * AMP_ERR_FORMAT (empty), AMP_ERR_SHAPE (x / y shapes, a split shorter than
 * T + 1), AMP_ERR_DTYPE (x or y not i64), AMP_ERR_ARG (NULL arguments).
 */
#include "base/base.h"
#include "io/file.h"
#include "tensor/tensor.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct amp_text {
    uint8_t *ids;       /* the text as token ids */
    int64_t n;          /* its length */
    int vocab;          /* distinct bytes */
    uint8_t chars[256]; /* id -> byte */
};

/* A growing byte buffer: a directory's files, one after another. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static amp_status bytes_reserve(bytes *b, size_t more, const char *path)
{
    if (b->cap - b->n >= more && b->cap)
        return AMP_OK;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap - b->n < more) {
        if (cap > SIZE_MAX / 2)
            return amp_set_error(AMP_ERR_MEMORY, "text_load: %s: too large", path);
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return amp_set_error(AMP_ERR_MEMORY, "text_load: %s: out of memory for %zu bytes", path, cap);
    b->p = p;
    b->cap = cap;
    return AMP_OK;
}

/* Appends file path to b: a regular file (io/file.h: a FIFO would block,
 * /dev/zero never end), as many bytes as its size says, the corpus in all
 * no larger than this machine's memory. */
static amp_status read_file(bytes *b, const char *path)
{
    char why[160];
    int64_t size, mem = file_mem_limit();
    FILE *f = file_fopen_read(path, mem, &size, why, sizeof why);
    if (!f)
        return amp_set_error(AMP_ERR_IO, "text_load: %s: %s", path, why);
    amp_status rc = AMP_OK;
    if ((int64_t)b->n > mem - size)
        rc = amp_set_error(AMP_ERR_MEMORY, "text_load: %s: the corpus would reach %lld bytes, more than the %lld "
                                           "this machine's memory holds",
                           path, (long long)b->n + (long long)size, (long long)mem);
    else if ((rc = bytes_reserve(b, (size_t)size, path)) == AMP_OK) {
        size_t got = fread(b->p + b->n, 1, (size_t)size, f);
        b->n += got;
        if (ferror(f))
            rc = amp_set_error(AMP_ERR_IO, "text_load: cannot read %s: %s", path, strerror(errno));
    }
    fclose(f);
    return rc;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends every corpus file of directory dir (see the top comment) to b;
 * *files gets how many. */
static amp_status read_dir(bytes *b, const char *dir, int *files)
{
    DIR *d = opendir(dir);
    if (!d)
        return amp_set_error(AMP_ERR_IO, "text_load: cannot open directory %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    amp_status rc = AMP_OK;
    struct dirent *e;
    while (rc == AMP_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || ends_with(e->d_name, ".dat") || ends_with(e->d_name, ".u8"))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *names);
            if (!p) {
                rc = amp_set_error(AMP_ERR_MEMORY, "text_load: %s: out of memory listing it", dir);
                break;
            }
            names = p;
        }
        names[n] = strdup(e->d_name);
        if (!names[n])
            rc = amp_set_error(AMP_ERR_MEMORY, "text_load: %s: out of memory listing it", dir);
        else
            n++;
    }
    closedir(d);
    /* Byte order, not the locale's collation: the corpus must not depend on
     * LC_COLLATE. */
    if (n)
        qsort(names, n, sizeof *names, by_name);
    *files = 0;
    for (size_t i = 0; i < n && rc == AMP_OK; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = amp_set_error(AMP_ERR_MEMORY, "text_load: %s: out of memory", dir);
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            rc = read_file(b, path);
            ++*files;
        }
        free(path);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

amp_text *amp_text_load(const char *path)
{
    if (!path)
        return amp_fail_null(AMP_ERR_ARG, "text_load: NULL path");
    struct stat st;
    if (stat(path, &st) != 0)
        return amp_fail_null(AMP_ERR_IO, "text_load: cannot open %s: %s", path, strerror(errno));
    bytes b = {0};
    int files = 1;
    amp_status rc = S_ISDIR(st.st_mode) ? read_dir(&b, path, &files) : read_file(&b, path);
    if (rc == AMP_OK && b.n == 0)
        rc = files == 0 ? amp_set_error(AMP_ERR_FORMAT,
                                        "text_load: %s: no text files in the directory (names "
                                        "ending .dat / .u8 or starting with '.' are skipped)",
                                        path)
                        : amp_set_error(AMP_ERR_FORMAT, "text_load: %s: empty, no text to train on", path);
    amp_text *t = rc == AMP_OK ? calloc(1, sizeof *t) : NULL;
    if (rc == AMP_OK && !t)
        amp_set_error(AMP_ERR_MEMORY, "text_load: %s: out of memory", path);
    if (!t) {
        free(b.p);
        return NULL;
    }
    /* Sorted distinct bytes, then map the text in place. */
    bool seen[256] = {false};
    for (size_t i = 0; i < b.n; i++)
        seen[b.p[i]] = true;
    uint8_t id_of[256] = {0};
    for (int c = 0; c < 256; c++)
        if (seen[c]) {
            id_of[c] = (uint8_t)t->vocab;
            t->chars[t->vocab++] = (uint8_t)c;
        }
    for (size_t i = 0; i < b.n; i++)
        b.p[i] = id_of[b.p[i]];
    t->ids = b.p;
    t->n = (int64_t)b.n;
    return t;
}

int64_t amp_text_vocab(const amp_text *t)
{
    if (!t) {
        amp_set_error(AMP_ERR_ARG, "text_vocab: NULL text");
        return 0;
    }
    return t->vocab;
}

int64_t amp_text_length(const amp_text *t)
{
    if (!t) {
        amp_set_error(AMP_ERR_ARG, "text_length: NULL text");
        return 0;
    }
    return t->n;
}

int amp_text_char(const amp_text *t, int64_t id)
{
    if (!t) {
        amp_set_error(AMP_ERR_ARG, "text_char: NULL text");
        return -1;
    }
    if (id < 0 || id >= t->vocab) {
        amp_set_error(AMP_ERR_ARG, "text_char: id %lld outside the vocabulary [0, %d)", (long long)id,
                      t->vocab);
        return -1;
    }
    return t->chars[id];
}

/* Checks that x and y are both [B, T] i64 (the same B and T). */
static amp_status check_xy(const amp_tensor *x, const amp_tensor *y)
{
    char bx[96], by[96];
    amp_shape_str(x->shape, bx, sizeof bx);
    amp_shape_str(y->shape, by, sizeof by);
    if (x->dtype != AMP_I64 || y->dtype != AMP_I64)
        return amp_set_error(AMP_ERR_DTYPE, "text_batch: x %s %s and y %s %s must both be i64 token ids",
                             bx, amp_dtype_name(x->dtype), by, amp_dtype_name(y->dtype));
    if (x->shape.ndim != 2 || !shape_equal(x->shape, y->shape) || x->shape.d[0] < 1 || x->shape.d[1] < 1)
        return amp_set_error(AMP_ERR_SHAPE, "text_batch: x %s and y %s must both be [B, T], B and T >= 1",
                             bx, by);
    return AMP_OK;
}

amp_status amp_text_batch(const amp_text *t, bool val, uint64_t seed, amp_tensor *x, amp_tensor *y)
{
    return amp_text_batch_shard(t, val, seed, 0, 1, x, y);
}

amp_status amp_text_batch_shard(const amp_text *t, bool val, uint64_t seed, int part, int parts, amp_tensor *x,
                                amp_tensor *y)
{
    if (!t || !x || !y)
        return amp_set_error(AMP_ERR_ARG, "text_batch: NULL %s", !t ? "text" : !x ? "x" : "y");
    if (parts < 1 || part < 0 || part >= parts)
        return amp_set_error(AMP_ERR_ARG, "text_batch: shard %d of %d (0 <= shard < shards)", part, parts);
    amp_status rc = check_xy(x, y);
    if (rc != AMP_OK)
        return rc;
    int64_t B = x->shape.d[0], T = x->shape.d[1];
    int64_t split = t->n / 10 * 9 + t->n % 10 * 9 / 10; /* floor(9n/10) without overflow */
    int64_t lo = val ? split : 0, len = val ? t->n - split : split;
    /* the shard: tokens [len * part / parts, len * (part + 1) / parts) of the split */
    int64_t first = (int64_t)((unsigned __int128)len * (unsigned)part / (unsigned)parts);
    int64_t end = (int64_t)((unsigned __int128)len * (unsigned)(part + 1) / (unsigned)parts);
    lo += first;
    len = end - first;
    if (len < T + 1)
        return amp_set_error(AMP_ERR_SHAPE,
                             "text_batch: the %s split%s has %lld tokens, a window of T = %lld needs %lld "
                             "(x and y [%lld, %lld])",
                             val ? "val" : "train", parts > 1 ? "'s shard" : "", (long long)len, (long long)T,
                             (long long)T + 1, (long long)B, (long long)T);
    uint64_t starts = (uint64_t)(len - T); /* valid window starts */
    int64_t *xd = tensor_ptr(x), *yd = tensor_ptr(y);
    for (int64_t b = 0; b < B; b++) {
        uint32_t r[4];
        amp_philox(seed, val ? 1 : 0, (uint64_t)b, r);
        /* 64 random bits scaled to [0, starts): bias below 2^-30 for any
         * corpus under 2^34 bytes. */
        uint64_t u = (uint64_t)r[0] | (uint64_t)r[1] << 32;
        int64_t s = lo + (int64_t)(((unsigned __int128)u * starts) >> 64);
        const uint8_t *src = t->ids + s;
        for (int64_t j = 0; j < T; j++) {
            xd[b * T + j] = src[j];
            yd[b * T + j] = src[j + 1];
        }
    }
    tensor_bump(x);
    tensor_bump(y);
    return AMP_OK;
}

void amp_text_free(amp_text *t)
{
    if (!t)
        return;
    free(t->ids);
    free(t);
}
