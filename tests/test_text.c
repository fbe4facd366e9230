/*
 * test_text.c - amp_text, the character-level corpus: files written here
 * (into a fresh directory under /tmp) load with the sorted distinct-byte
 * vocabulary; batches hold windows of the text with next-byte targets,
 * from the right split only, the same for the same seed; a directory
 * loads as its text files concatenated in name order; each broken input
 * gives an error naming the file or the shapes (a FIFO or a device one
 * at once, without blocking); the fortunes corpus, when
 * installed, loads.
 */
#include "harness.h"
#include "scratch.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORTUNES_DIR "/usr/share/games/fortunes"

static char made[32][160];
static int n_made;

/* Writes n bytes to tmpdir/name; returns the path (static storage). */
static const char *write_file(const char *name, const void *bytes, size_t n)
{
    char *path = made[n_made++];
    snprintf(path, sizeof made[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "fopen %s failed", path);
    if (f) {
        CHECK(fwrite(bytes, 1, n, f) == n);
        fclose(f);
    }
    return path;
}

static const char *make_dir(const char *name)
{
    char *path = made[n_made++];
    snprintf(path, sizeof made[0], "%s/%s", tmpdir, name);
    CHECK_MSG(mkdir(path, 0700) == 0, "mkdir %s failed", path);
    return path;
}

/* [B, T] i64 buffers for batches. */
static void new_xy(int64_t B, int64_t T, amp_tensor **x, amp_tensor **y)
{
    *x = amp_zeros(AMP_SHAPE(B, T), AMP_I64);
    *y = amp_zeros(AMP_SHAPE(B, T), AMP_I64);
}

static int64_t at(const amp_tensor *t, int64_t i) { return (int64_t)amp_tensor_get(t, i); }

static void test_vocab_is_the_sorted_distinct_bytes(void)
{
    const char s[] = "hello world\n";
    amp_text *t = amp_text_load(write_file("hello.txt", s, strlen(s)));
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK_EQ_INT(amp_text_length(t), 12);
    const char want[] = "\n dehlorw"; /* sorted by byte value */
    CHECK_EQ_INT(amp_text_vocab(t), (int64_t)strlen(want));
    for (int i = 0; i < (int)strlen(want); i++)
        CHECK_EQ_INT(amp_text_char(t, i), (unsigned char)want[i]);
    CHECK_EQ_INT(amp_text_char(t, 9), -1);
    CHECK_ERROR(AMP_ERR_ARG, "outside the vocabulary");
    CHECK_EQ_INT(amp_text_char(t, -1), -1);
    CHECK_ERROR(AMP_ERR_ARG, "id -1");
    amp_text_free(t);
}

static void test_bytes_above_127_are_tokens_too(void)
{
    const unsigned char s[] = {0xff, 0x00, 0xc3, 0xa9, 0x00, 0xff};
    amp_text *t = amp_text_load(write_file("binary.bin", s, sizeof s));
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK_EQ_INT(amp_text_vocab(t), 4);
    CHECK_EQ_INT(amp_text_char(t, 0), 0x00);
    CHECK_EQ_INT(amp_text_char(t, 1), 0xa9);
    CHECK_EQ_INT(amp_text_char(t, 2), 0xc3);
    CHECK_EQ_INT(amp_text_char(t, 3), 0xff);
    amp_text_free(t);
}

/* A text of 101 distinct bytes in a shuffled order (byte 100 + 37i mod
 * 101): every byte occurs once, so a window's first token gives its
 * position, and token ids (ranks) differ from positions. */
static unsigned char perm_text[101];
static const char *perm_path;

static void make_perm_text(void)
{
    for (int i = 0; i < 101; i++)
        perm_text[i] = (unsigned char)(100 + i * 37 % 101);
    perm_path = write_file("perm.txt", perm_text, sizeof perm_text);
}

static int position_of(unsigned char c)
{
    for (int i = 0; i < 101; i++)
        if (perm_text[i] == c)
            return i;
    return -1;
}

/* Checks every row of a batch against the text: tokens are the ranks of
 * the bytes, y is x moved on by one, and the window lies in [lo, hi);
 * records which starts were seen. */
static void check_windows(const amp_text *t, const amp_tensor *x, const amp_tensor *y, int lo, int hi,
                          bool *seen)
{
    int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1);
    for (int64_t b = 0; b < B; b++) {
        int p = position_of((unsigned char)amp_text_char(t, at(x, b * T)));
        CHECK_MSG(p >= lo && p + T + 1 <= hi, "row %lld starts at %d, outside [%d, %d - T - 1]",
                  (long long)b, p, lo, hi);
        if (p < lo || p + T + 1 > hi)
            continue;
        seen[p] = true;
        for (int64_t j = 0; j < T; j++) {
            /* The rank of a byte among 100..200 is byte - 100: an
             * independent encoder. */
            CHECK_EQ_INT(at(x, b * T + j), perm_text[p + j] - 100);
            CHECK_EQ_INT(at(y, b * T + j), perm_text[p + j + 1] - 100);
        }
    }
}

static void test_windows_are_text_with_next_byte_targets_in_their_split(void)
{
    amp_text *t = amp_text_load(perm_path);
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK_EQ_INT(amp_text_vocab(t), 101);
    /* 101 bytes: train [0, 90), val [90, 101). T = 4: train starts 0..85,
     * val starts 90..96. 200 batches of 16 see every start. */
    const int T = 4;
    amp_tensor *x, *y;
    new_xy(16, T, &x, &y);
    bool seen_train[101] = {false}, seen_val[101] = {false};
    for (uint64_t seed = 0; seed < 200; seed++) {
        CHECK_OK(amp_text_batch(t, false, seed, x, y));
        check_windows(t, x, y, 0, 90, seen_train);
        CHECK_OK(amp_text_batch(t, true, seed, x, y));
        check_windows(t, x, y, 90, 101, seen_val);
    }
    for (int p = 0; p < 101; p++) {
        CHECK_MSG(seen_train[p] == (p <= 90 - T - 1), "train start %d seen %d", p, seen_train[p]);
        CHECK_MSG(seen_val[p] == (p >= 90 && p <= 101 - T - 1), "val start %d seen %d", p, seen_val[p]);
    }
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_text_free(t);
}

static bool same_values(const amp_tensor *a, const amp_tensor *b)
{
    for (int64_t i = 0; i < amp_tensor_numel(a); i++)
        if (at(a, i) != at(b, i))
            return false;
    return true;
}

static void test_same_seed_same_batch_other_seed_other_batch(void)
{
    amp_text *t = amp_text_load(perm_path);
    CHECK(t != NULL);
    if (!t)
        return;
    amp_tensor *x1, *y1, *x2, *y2;
    new_xy(8, 5, &x1, &y1);
    new_xy(8, 5, &x2, &y2);
    CHECK_OK(amp_text_batch(t, false, 1234, x1, y1));
    CHECK_OK(amp_text_batch(t, false, 1234, x2, y2));
    CHECK(same_values(x1, x2) && same_values(y1, y2));
    int differ = 0;
    for (uint64_t s = 1235; s < 1245; s++) {
        CHECK_OK(amp_text_batch(t, false, s, x2, y2));
        differ += !same_values(x1, x2);
    }
    CHECK_EQ_INT(differ, 10);
    /* The global generator is not involved: reseeding it changes nothing. */
    amp_manual_seed(99);
    CHECK_OK(amp_text_batch(t, false, 1234, x2, y2));
    CHECK(same_values(x1, x2));
    amp_tensor_free(x1);
    amp_tensor_free(y1);
    amp_tensor_free(x2);
    amp_tensor_free(y2);
    amp_text_free(t);
}

/* Shards (data-parallel ranks): a corpus whose training split is 450 'a'
 * then 450 'b' (and 100 'c' to validate): shard 0 of 2 reads only 'a',
 * shard 1 only 'b' (no window crosses into the other); shard 0 of 1 is
 * amp_text_batch's batch bit for bit; bad shards and a shard too short for
 * the window are errors naming them. */
static void test_shards_are_disjoint(void)
{
    char text[1000];
    memset(text, 'a', 450);
    memset(text + 450, 'b', 450);
    memset(text + 900, 'c', 100);
    amp_text *t = amp_text_load(write_file("shards.txt", text, sizeof text));
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK_EQ_INT(amp_text_vocab(t), 3);
    amp_tensor *x, *y, *x1, *y1;
    new_xy(64, 20, &x, &y);
    new_xy(64, 20, &x1, &y1);
    for (int p = 0; p < 2; p++) {
        for (uint64_t seed = 1; seed < 6; seed++) {
            CHECK_OK(amp_text_batch_shard(t, false, seed, p, 2, x, y));
            const int64_t *xd = amp_tensor_data(x), *yd = amp_tensor_data(y);
            const int64_t want = p; /* ids: the sorted distinct bytes, 'a' 0, 'b' 1, 'c' 2 */
            for (int64_t i = 0; i < 64 * 20; i++)
                CHECK_MSG(xd[i] == want && yd[i] == want, "shard %d seed %llu: token %lld / %lld at %lld", p,
                          (unsigned long long)seed, (long long)xd[i], (long long)yd[i], (long long)i);
        }
    }
    CHECK_OK(amp_text_batch_shard(t, false, 7, 0, 1, x, y));
    CHECK_OK(amp_text_batch(t, false, 7, x1, y1));
    CHECK(same_values(x, x1) && same_values(y, y1));
    CHECK(amp_text_batch_shard(t, false, 7, 2, 2, x, y) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "shard 2 of 2");
    CHECK(amp_text_batch_shard(t, false, 7, 0, 0, x, y) != AMP_OK);
    CHECK_ERROR(AMP_ERR_ARG, "shard 0 of 0");
    CHECK(amp_text_batch_shard(t, false, 7, 0, 50, x, y) != AMP_OK); /* 18 tokens a shard < 21 */
    CHECK_ERROR(AMP_ERR_SHAPE, "shard has 18 tokens");
    amp_tensor_free(x), amp_tensor_free(y), amp_tensor_free(x1), amp_tensor_free(y1);
    amp_text_free(t);
}

/* floor(9n/10) tokens train: a window of T = split - 1 fits, T = split
 * does not, and likewise for val. */
static void test_split_sizes_are_nine_tenths_rounded_down(void)
{
    const int sizes[] = {20, 29, 101, 1009};
    static unsigned char buf[1009];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int n = sizes[k], train = 9 * n / 10, val = n - train;
        for (int i = 0; i < n; i++)
            buf[i] = (unsigned char)('a' + i % 26);
        char name[32];
        snprintf(name, sizeof name, "len%d.txt", n);
        amp_text *t = amp_text_load(write_file(name, buf, (size_t)n));
        CHECK(t != NULL);
        if (!t)
            continue;
        struct { bool val; int len; } sp[2] = {{false, train}, {true, val}};
        for (int s = 0; s < 2; s++) {
            amp_tensor *x, *y;
            new_xy(3, sp[s].len - 1, &x, &y);
            CHECK_OK(amp_text_batch(t, sp[s].val, 7, x, y));
            amp_tensor_free(x);
            amp_tensor_free(y);
            new_xy(3, sp[s].len, &x, &y);
            CHECK(amp_text_batch(t, sp[s].val, 7, x, y) == AMP_ERR_SHAPE);
            char want[64];
            snprintf(want, sizeof want, "%s split has %d tokens", sp[s].val ? "val" : "train", sp[s].len);
            CHECK_ERROR(AMP_ERR_SHAPE, want);
            amp_tensor_free(x);
            amp_tensor_free(y);
        }
        amp_text_free(t);
    }
}

static void test_directory_concatenates_text_files_in_name_order(void)
{
    const char *dir = make_dir("corpus");
    char name[96];
    const struct { const char *name, *text; } files[] = {
        {"b", "world\n"}, {"a", "hello "}, {"a.dat", "\x01\x02\x03"}, {".hidden", "XXXX"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(name, sizeof name, "corpus/%s", files[i].name);
        write_file(name, files[i].text, strlen(files[i].text));
    }
    char link[160];
    snprintf(link, sizeof link, "%s/a.u8", dir);
    CHECK(symlink("a", link) == 0);
    make_dir("corpus/sub"); /* not entered */
    write_file("corpus/sub/c", "ZZZZ", 4);
    amp_text *t = amp_text_load(dir);
    CHECK(t != NULL);
    if (t) {
        /* "hello world\n": 12 bytes; train has 10 (floor 10.8). */
        CHECK_EQ_INT(amp_text_length(t), 12);
        CHECK_EQ_INT(amp_text_vocab(t), 9);
        amp_tensor *x, *y;
        new_xy(2, 9, &x, &y);
        CHECK_OK(amp_text_batch(t, false, 3, x, y));
        char got_x[10] = {0}, got_y[10] = {0};
        for (int j = 0; j < 9; j++) {
            got_x[j] = (char)amp_text_char(t, at(x, j));
            got_y[j] = (char)amp_text_char(t, at(y, j));
        }
        CHECK_MSG(strcmp(got_x, "hello wor") == 0, "x decodes to '%s'", got_x);
        CHECK_MSG(strcmp(got_y, "ello worl") == 0, "y decodes to '%s'", got_y);
        amp_tensor_free(x);
        amp_tensor_free(y);
        amp_text_free(t);
    }
    unlink(link);
}

static void test_missing_and_empty_inputs_name_the_file(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/no-such-file.txt", tmpdir);
    CHECK(amp_text_load(p) == NULL);
    CHECK_ERROR(AMP_ERR_IO, p);
    const char *e = write_file("empty.txt", "", 0);
    CHECK(amp_text_load(e) == NULL);
    CHECK_MSG(strstr(amp_last_error(), "empty") != NULL, "%s", amp_last_error());
    CHECK_ERROR(AMP_ERR_FORMAT, e);
    const char *d = make_dir("only-dat");
    write_file("only-dat/x.dat", "abc", 3);
    CHECK(amp_text_load(d) == NULL);
    CHECK_MSG(strstr(amp_last_error(), "no text files") != NULL, "%s", amp_last_error());
    CHECK_ERROR(AMP_ERR_FORMAT, d);
    CHECK(amp_text_load(NULL) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "NULL path");
}

/* --data /dev/zero would read until memory ran out, a FIFO block
 * forever: regular files only, in a directory too. */
static void test_fifo_and_devices_are_io_errors_at_once(void)
{
    char *fifo = made[n_made++];
    snprintf(fifo, sizeof made[0], "%s/fifo.txt", tmpdir);
    CHECK(mkfifo(fifo, 0600) == 0);
    watchdog_arm("text_load");
    CHECK(amp_text_load(fifo) == NULL);
    CHECK_ERROR(AMP_ERR_IO, "not a regular file (a FIFO)");
    CHECK(amp_text_load("/dev/zero") == NULL);
    CHECK_ERROR(AMP_ERR_IO, "/dev/zero: not a regular file (a character device)");
    /* In a directory a FIFO is not a text file: left out. */
    const char *d = make_dir("with-fifo");
    char *f2 = made[n_made++];
    snprintf(f2, sizeof made[0], "%s/with-fifo/a-fifo", tmpdir);
    CHECK(mkfifo(f2, 0600) == 0);
    write_file("with-fifo/b.txt", "hello", 5);
    amp_text *t = amp_text_load(d);
    CHECK(t != NULL && amp_text_length(t) == 5);
    amp_text_free(t);
    watchdog_disarm();
}

static void test_bad_x_y_name_the_shapes_and_dtypes(void)
{
    amp_text *t = amp_text_load(perm_path);
    CHECK(t != NULL);
    if (!t)
        return;
    amp_tensor *xi = amp_zeros(AMP_SHAPE(2, 4), AMP_I64);
    amp_tensor *xf = amp_zeros(AMP_SHAPE(2, 4), AMP_F32);
    amp_tensor *x32 = amp_zeros(AMP_SHAPE(2, 4), AMP_I32);
    amp_tensor *y5 = amp_zeros(AMP_SHAPE(2, 5), AMP_I64);
    amp_tensor *x1d = amp_zeros(AMP_SHAPE(8), AMP_I64);
    CHECK(amp_text_batch(t, false, 0, xf, xi) == AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "x [2, 4] f32");
    CHECK(amp_text_batch(t, false, 0, xi, x32) == AMP_ERR_DTYPE);
    CHECK_ERROR(AMP_ERR_DTYPE, "y [2, 4] i32");
    CHECK(amp_text_batch(t, false, 0, xi, y5) == AMP_ERR_SHAPE);
    CHECK_ERROR(AMP_ERR_SHAPE, "x [2, 4] and y [2, 5]");
    CHECK(amp_text_batch(t, false, 0, x1d, x1d) == AMP_ERR_SHAPE);
    CHECK_ERROR(AMP_ERR_SHAPE, "x [8]");
    CHECK(amp_text_batch(t, false, 0, NULL, xi) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "NULL x");
    CHECK(amp_text_batch(NULL, false, 0, xi, xi) == AMP_ERR_ARG);
    CHECK_ERROR(AMP_ERR_ARG, "NULL text");
    amp_tensor_free(xi);
    amp_tensor_free(xf);
    amp_tensor_free(x32);
    amp_tensor_free(y5);
    amp_tensor_free(x1d);
    amp_text_free(t);
}

static void test_fortunes_corpus_loads(void)
{
    struct stat st;
    if (stat(FORTUNES_DIR, &st) != 0) {
        harness_skip(FORTUNES_DIR " is not installed (Debian package `fortunes`)");
        return;
    }
    amp_text *t = amp_text_load(FORTUNES_DIR);
    CHECK(t != NULL);
    if (!t)
        return;
    int64_t n = amp_text_length(t), v = amp_text_vocab(t);
    printf("  %s: %lld bytes, vocab %lld\n", FORTUNES_DIR, (long long)n, (long long)v);
    CHECK(n > 1000000);
    CHECK(v >= 80 && v <= 256);
    /* Mostly English text: the vocabulary holds the letters and '%'. */
    bool has_a = false, has_pct = false;
    for (int64_t i = 0; i < v; i++) {
        has_a |= amp_text_char(t, i) == 'a';
        has_pct |= amp_text_char(t, i) == '%';
    }
    CHECK(has_a && has_pct);
    amp_tensor *x, *y;
    new_xy(4, 256, &x, &y);
    CHECK_OK(amp_text_batch(t, false, 1, x, y));
    CHECK_OK(amp_text_batch(t, true, 1, x, y));
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_text_free(t);
}

int main(void)
{
    scratch_make("test-text");
    make_perm_text();
    RUN(test_vocab_is_the_sorted_distinct_bytes);
    RUN(test_bytes_above_127_are_tokens_too);
    RUN(test_windows_are_text_with_next_byte_targets_in_their_split);
    RUN(test_same_seed_same_batch_other_seed_other_batch);
    RUN(test_shards_are_disjoint);
    RUN(test_split_sizes_are_nine_tenths_rounded_down);
    RUN(test_directory_concatenates_text_files_in_name_order);
    RUN(test_missing_and_empty_inputs_name_the_file);
    RUN(test_fifo_and_devices_are_io_errors_at_once);
    RUN(test_bad_x_y_name_the_shapes_and_dtypes);
    RUN(test_fortunes_corpus_loads);
    scratch_remove();
    return harness_done();
}
