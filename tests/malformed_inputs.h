/*
 * malformed_inputs.h - the bad inputs of test_malformed.c's rows: each
 * maker writes one class of bad file or directory into a row's directory
 * (IDX headers with zero, huge or mismatched dims, cut gzip streams, text
 * that is binary, checkpoints patched or replaced, FIFOs, logs at the
 * edges of a double), and the checks some rows make afterwards (the SVG
 * finite and small, a device still a device, nothing trained).
 * Header-only (static), for that one test.
 *
 * The good inputs the makers copy or point at are set up by the test's
 * main: tiny (an image set), text (a corpus), ck (a checkpoint directory),
 * goodlog (its run's log), ro (a directory nothing can be created in),
 * full (a device whose writes fail with ENOSPC). The includer defines
 * _GNU_SOURCE first (memmem).
 */
#ifndef AMPC_TEST_MALFORMED_INPUTS_H
#define AMPC_TEST_MALFORMED_INPUTS_H

#include "test_cli_util.h"

#include "checkpoint_cli.h"

#include <sys/stat.h>

static char tiny[256], text[256], ck[256], goodlog[256], ro[256], full[256];

/* ------------------------------------------------------------ helpers */

static void at(char *buf, size_t n, const char *d, const char *name)
{
    if (snprintf(buf, n, "%s/%s", d, name) >= (int)n)
        buf[0] = '\0';
}

/* An IDX file d/name (gzip when name ends .gz): type byte, dims, then
 * `data` bytes of data (NULL: zeros). */
static void idx_file(const char *d, const char *name, unsigned char type, int ndim, const uint32_t *dims,
                     const void *data, size_t n)
{
    char path[512];
    at(path, sizeof path, d, name);
    unsigned char h[4 + 4 * 8] = {0, 0, type, (unsigned char)ndim};
    for (int i = 0; i < ndim; i++)
        for (int k = 0; k < 4; k++)
            h[4 + 4 * i + k] = (unsigned char)(dims[i] >> (24 - 8 * k));
    unsigned char *body = calloc(n ? n : 1, 1);
    if (data)
        memcpy(body, data, n);
    size_t hn = 4 + 4 * (size_t)ndim;
    if (strstr(name, ".gz")) {
        gzFile f = gzopen(path, "wb");
        CHECK(f != NULL);
        if (f) {
            gzwrite(f, h, (unsigned)hn);
            if (n)
                gzwrite(f, body, (unsigned)n);
            gzclose(f);
        }
    } else {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (f) {
            fwrite(h, 1, hn, f);
            fwrite(body, 1, n, f);
            fclose(f);
        }
    }
    free(body);
}

/* A data directory d/data whose four files are the tiny set's, except
 * those a row then writes over. */
static void tiny_copy(const char *d, char *data, size_t n)
{
    at(data, n, d, "data");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", tiny, data);
    CHECK(system(cmd) == 0);
}

static void rm_file(const char *dir, const char *name)
{
    char p[512];
    at(p, sizeof p, dir, name);
    unlink(p);
}

/* ------------------------------------------------ the rows' bad inputs */

/* Item 1: a zero dimension, 2000 x 0 x 28 (it divided by it: SIGFPE). */
static void zero_height(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[3] = {2000, 0, 28}, ld[1] = {2000};
    static unsigned char labels[2000];
    for (int i = 0; i < 2; i++) {
        const char *pre = i ? "t10k" : "train";
        char name[64];
        snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", pre);
        idx_file(data, name, 0x08, 3, dims, NULL, 0);
        snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", pre);
        idx_file(data, name, 0x08, 1, ld, labels, sizeof labels);
    }
}

static void zero_count(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[3] = {0, 4, 4}, ld[1] = {0};
    idx_file(data, "train-images-idx3-ubyte.gz", 0x08, 3, dims, NULL, 0);
    idx_file(data, "train-labels-idx1-ubyte.gz", 0x08, 1, ld, NULL, 0);
}

static void label_count_mismatch(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t ld[1] = {255};
    static unsigned char labels[255];
    idx_file(data, "train-labels-idx1-ubyte.gz", 0x08, 1, ld, labels, sizeof labels);
}

/* A gzip header promising 60000 x 65535 x 65535 pixels (257 TB). */
static void huge_dims(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[3] = {60000, 65535, 65535};
    idx_file(data, "train-images-idx3-ubyte.gz", 0x08, 3, dims, NULL, 16);
}

static void huge_features(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[2] = {256, 1u << 30};
    idx_file(data, "train-images-idx3-ubyte.gz", 0x08, 2, dims, NULL, 16);
}

static void one_dim_images(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[1] = {256};
    idx_file(data, "train-images-idx3-ubyte.gz", 0x08, 1, dims, NULL, 256);
}

static void four_dim_images(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[4] = {256, 1, 4, 4};
    idx_file(data, "train-images-idx3-ubyte.gz", 0x08, 4, dims, NULL, 256 * 16);
}

static void two_dim_labels(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t ld[2] = {256, 1};
    idx_file(data, "train-labels-idx1-ubyte.gz", 0x08, 2, ld, NULL, 256);
}

static void label_too_big(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t ld[1] = {256};
    unsigned char be[256 * 4] = {0};
    be[4 * 7 + 1] = 0x01; /* label 7 = 65536 + 0x11 * 256 ...: over 65535 */
    be[4 * 7 + 2] = 0x11;
    idx_file(data, "train-labels-idx1-ubyte.gz", 0x0C, 1, ld, be, sizeof be);
}

static void label_negative(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t ld[1] = {256};
    unsigned char l[256] = {0};
    l[3] = 0xFF; /* -1 as i8 */
    idx_file(data, "train-labels-idx1-ubyte.gz", 0x09, 1, ld, l, sizeof l);
}

/* Test labels 0..5 where training has 0..1. */
static void test_classes_beyond_train(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t ld[1] = {256};
    unsigned char l[256];
    for (int i = 0; i < 256; i++)
        l[i] = (unsigned char)(i % 6);
    idx_file(data, "t10k-labels-idx1-ubyte.gz", 0x08, 1, ld, l, sizeof l);
}

static void empty_images(const char *d)
{
    char data[512], p[600];
    tiny_copy(d, data, sizeof data);
    rm_file(data, "train-images-idx3-ubyte.gz");
    at(p, sizeof p, data, "train-images-idx3-ubyte");
    test_write_file(p, "", 0);
}

static void truncated_gz(const char *d)
{
    char data[512], p[600];
    tiny_copy(d, data, sizeof data);
    at(p, sizeof p, data, "train-images-idx3-ubyte.gz");
    size_t n;
    char *b = cli_read_file(p, &n);
    if (b)
        test_write_file(p, b, n / 2);
    free(b);
}

static void wrong_magic(const char *d)
{
    char data[512], p[600];
    tiny_copy(d, data, sizeof data);
    at(p, sizeof p, data, "train-images-idx3-ubyte.gz");
    test_write_file(p, "PK\3\4 not an idx file", 21);
}

static void bad_type_byte(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[3] = {256, 4, 4};
    idx_file(data, "train-images-idx3-ubyte.gz", 0x42, 3, dims, NULL, 256 * 16);
}

static void trailing_bytes(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[3] = {256, 4, 4};
    idx_file(data, "train-images-idx3-ubyte.gz", 0x08, 3, dims, NULL, 256 * 16 + 7);
}

static void dir_as_images(const char *d)
{
    char data[512], p[600];
    tiny_copy(d, data, sizeof data);
    rm_file(data, "train-images-idx3-ubyte.gz");
    at(p, sizeof p, data, "train-images-idx3-ubyte.gz");
    mkdir(p, 0700);
}

/* Images 5x5 for the cnn, whose poolings need sides divisible by 4. */
static void odd_sides(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[3] = {256, 5, 5};
    for (int i = 0; i < 2; i++)
        idx_file(data, i ? "t10k-images-idx3-ubyte.gz" : "train-images-idx3-ubyte.gz", 0x08, 3, dims, NULL,
                 256 * 25);
}

/* f32 images with a NaN pixel. */
static void nan_pixels(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    uint32_t dims[3] = {256, 4, 4};
    static unsigned char px[256 * 16 * 4];
    memset(px, 0, sizeof px);
    px[40] = 0x7f, px[41] = 0xc0; /* big-endian f32 NaN */
    idx_file(data, "train-images-idx3-ubyte.gz", 0x0D, 3, dims, px, sizeof px);
}

static void no_labels(const char *d)
{
    char data[512];
    tiny_copy(d, data, sizeof data);
    rm_file(data, "train-labels-idx1-ubyte.gz");
}

static void symlink_loop(const char *d)
{
    char a[512], b[512];
    at(a, sizeof a, d, "loop1");
    at(b, sizeof b, d, "loop2");
    CHECK(symlink(b, a) == 0 && symlink(a, b) == 0);
}

static void log_with_nul(const char *d)
{
    char p[512];
    at(p, sizeof p, d, "nul.jsonl");
    static const char b[] = "{\"step\":1,\"loss\":2}\n{\"step\":2,\0\"loss\":1}\n";
    test_write_file(p, b, sizeof b - 1);
}

static void a_file(const char *d)
{
    char p[512];
    at(p, sizeof p, d, "file");
    test_write_file(p, "precious\n", 9);
}

static void empty_text(const char *d)
{
    char p[512];
    at(p, sizeof p, d, "empty.txt");
    test_write_file(p, "", 0);
}

static void short_text(const char *d)
{
    char p[512];
    at(p, sizeof p, d, "short.txt");
    test_write_file(p, "just a few words here\n", 22);
}

static void binary_text(const char *d)
{
    char p[512];
    at(p, sizeof p, d, "blob.bin");
    static unsigned char b[8192];
    for (size_t i = 0; i < sizeof b; i++)
        b[i] = (unsigned char)(i * 7919 % 251);
    test_write_file(p, b, sizeof b);
}

static void empty_dir(const char *d)
{
    char p[512];
    at(p, sizeof p, d, "empty");
    mkdir(p, 0700);
}

/* A copy of the good checkpoint in d/ck, its header's `from` replaced by
 * `to` (the header length kept right). */
/* d/ck, made, and the path of the checkpoint file in it, into p. */
static void ck_file(const char *d, char *p, size_t n)
{
    char dir[512];
    at(dir, sizeof dir, d, "ck");
    mkdir(dir, 0700);
    checkpoint_path(p, n, dir);
}

static void patched_checkpoint(const char *d, const char *from, const char *to)
{
    char path[600], src[600];
    ck_file(d, path, sizeof path);
    checkpoint_path(src, sizeof src, ck);
    size_t n;
    unsigned char *b = (unsigned char *)cli_read_file(src, &n);
    CHECK(b != NULL && n > 8);
    if (!b)
        return;
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--)
        hn = hn << 8 | b[i];
    char *hdr = (char *)b + 8, *hit = memmem(hdr, hn, from, strlen(from));
    CHECK_MSG(hit != NULL, "no %s in the checkpoint's header", from);
    if (!hit) {
        free(b);
        return;
    }
    size_t fl = strlen(from), tl = strlen(to), out_n = n - fl + tl;
    unsigned char *o = malloc(out_n);
    uint64_t on = hn - fl + tl;
    for (int i = 0; i < 8; i++)
        o[i] = (unsigned char)(on >> (8 * i));
    size_t pre = (size_t)(hit - hdr);
    memcpy(o + 8, hdr, pre);
    memcpy(o + 8 + pre, to, tl);
    memcpy(o + 8 + pre + tl, hit + fl, n - 8 - pre - fl);
    test_write_file(path, o, out_n);
    free(o);
    free(b);
}

static void ck_step_negative(const char *d) { patched_checkpoint(d, "\"step\":\"2\"", "\"step\":\"-5\""); }
static void ck_batch_overflow(const char *d)
{
    patched_checkpoint(d, "\\\"batch\\\":16", "\\\"batch\\\":99999999999999999999999");
}

/* The good checkpoint cut to half its size (d/ck). */
static void ck_truncated(const char *d)
{
    char path[600], src[600];
    ck_file(d, path, sizeof path);
    checkpoint_path(src, sizeof src, ck);
    size_t n;
    char *b = cli_read_file(src, &n);
    if (b)
        test_write_file(path, b, n / 2);
    free(b);
}

/* The good checkpoint with a header length of 2^60 (d/ck). */
static void ck_huge_header(const char *d)
{
    char path[600], src[600];
    ck_file(d, path, sizeof path);
    checkpoint_path(src, sizeof src, ck);
    size_t n;
    char *b = cli_read_file(src, &n);
    if (b && n > 8) {
        memset(b, 0, 8);
        b[7] = 0x10; /* little-endian 2^60 */
        test_write_file(path, b, n);
    }
    free(b);
}

static void ck_empty(const char *d)
{
    char p[600];
    ck_file(d, p, sizeof p);
    test_write_file(p, "", 0);
}

static void ck_text(const char *d)
{
    char p[600];
    ck_file(d, p, sizeof p);
    test_write_file(p, "hello, I am not a checkpoint\n", 29);
}

static void ck_fifo(const char *d)
{
    char p[600];
    ck_file(d, p, sizeof p);
    CHECK(mkfifo(p, 0600) == 0);
}

static void dev_zero_data(const char *d)
{
    char data[512];
    at(data, sizeof data, d, "data");
    mkdir(data, 0700);
    const char *names[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        char p[600];
        at(p, sizeof p, data, names[i]);
        CHECK(symlink("/dev/zero", p) == 0);
    }
}

/* A copy of the good checkpoint (d/ck) and of the good log (d/run.jsonl). */
static void ck_copy(const char *d)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/ck' && cp '%s' '%s/run.jsonl'", ck, d, goodlog, d);
    CHECK(system(cmd) == 0);
}

static void log_file_text(const char *d, const char *name, const char *content)
{
    char p[512];
    at(p, sizeof p, d, name);
    test_write_file(p, content, strlen(content));
}

static void log_at_2p53(const char *d)
{
    log_file_text(d, "big.jsonl",
                  "{\"step\":9007199254740992,\"loss\":1}\n{\"step\":9007199254740993,\"loss\":1}\n"
                  "{\"step\":9007199254740994,\"loss\":1}\n");
}
static void log_loss_1e308(const char *d)
{
    log_file_text(d, "huge.jsonl", "{\"step\":1,\"loss\":1e308}\n{\"step\":2,\"loss\":-1e308}\n");
}
static void log_step_inf(const char *d) { log_file_text(d, "inf.jsonl", "{\"step\":1e999,\"loss\":1}\n"); }
static void log_empty(const char *d) { log_file_text(d, "empty.jsonl", ""); }
static void log_denormal(const char *d)
{
    log_file_text(d, "tiny.jsonl", "{\"step\":5e-324,\"loss\":5e-324}\n{\"step\":1e-323,\"loss\":1e-323}\n");
}

/* After a plot: the SVG is small and every number in it finite. */
static bool svg_sane(const char *d, const char *name)
{
    char p[512];
    at(p, sizeof p, d, name);
    size_t n = 0;
    char *s = cli_read_file(p, &n);
    bool ok = s && n < 200000 && strstr(s, "</svg>");
    for (const char *q = s ? strstr(s, "inf") : NULL; ok && q; q = strstr(q + 1, "inf"))
        ok = !strchr("\"- MLHV", q[-1]);
    for (const char *q = s ? strstr(s, "nan") : NULL; ok && q; q = strstr(q + 1, "nan"))
        ok = !strchr("\"- MLHV", q[-1]) || q[3] == '-';
    CHECK_MSG(ok, "%s: %zu bytes, or a non-finite number in it", p, n);
    free(s);
    return ok;
}
static void log_odd_name(const char *d)
{
    log_file_text(d, "a\001b<&.jsonl", "{\"step\":1,\"loss\":1}\n");
}

/* The SVG of a log named with a control character and XML's specials:
 * no control character but newlines in it, the specials escaped. */
static bool odd_svg_is_xml(const char *d)
{
    char p[512];
    at(p, sizeof p, d, "odd.svg");
    char *s = cli_read_file(p, NULL);
    bool ok = s != NULL && strstr(s, "a?b&lt;&amp;.jsonl") != NULL;
    for (const char *q = s; ok && *q; q++)
        ok = (unsigned char)*q >= 0x20 || *q == '\n';
    CHECK_MSG(ok, "%s: a control character, or the name not escaped", p);
    free(s);
    return ok;
}

static bool big_svg_sane(const char *d) { return svg_sane(d, "big.svg"); }
static bool huge_svg_sane(const char *d) { return svg_sane(d, "huge.svg"); }
static bool tiny_svg_sane(const char *d) { return svg_sane(d, "tiny.svg"); }

/* After a write to @FULL failed: it is still a device, not removed. */
static bool full_still_device(const char *d)
{
    (void)d;
    struct stat st;
    bool ok = stat(full, &st) == 0 && S_ISCHR(st.st_mode);
    CHECK_MSG(ok, "%s is no longer a character device", full);
    return ok;
}

/* After a refused --save: nothing was trained (no progress lines on the
 * run's stdout, cli_out). */
static bool nothing_trained(const char *d)
{
    (void)d;
    bool ok = strstr(cli_out, "model ") == NULL && strstr(cli_out, "step ") == NULL;
    CHECK_MSG(ok, "the run trained before refusing:\n%s", cli_out);
    return ok;
}

#endif
