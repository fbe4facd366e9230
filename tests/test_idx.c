/*
 * test_idx.c - amp_idx_load: IDX files written here (plain and gzip, into
 * a fresh directory under /tmp) are read back with the right shape, dtype
 * and values; each kind of broken file gives an error naming the file and
 * the problem, a FIFO or a device is refused without blocking; the real
 * Fashion-MNIST files, when installed, have their
 * published shapes.
 */
#include "harness.h"
#include "scratch.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static char made[64][128];
static int n_made;

/* Writes n bytes to tmpdir/name (gzip-compressed when gz); returns the
 * path (static storage, one per file). */
static const char *write_file(const char *name, const void *bytes, size_t n, bool gz)
{
    char *path = made[n_made++];
    snprintf(path, sizeof made[0], "%s/%s", tmpdir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        CHECK_MSG(f != NULL, "gzopen %s failed", path);
        if (f) {
            if (n)
                CHECK(gzwrite(f, bytes, (unsigned)n) == (int)n);
            gzclose(f);
        }
    } else {
        FILE *f = fopen(path, "wb");
        CHECK_MSG(f != NULL, "fopen %s failed", path);
        if (f) {
            CHECK(fwrite(bytes, 1, n, f) == n);
            fclose(f);
        }
    }
    return path;
}

/* A 2x3 u8 image file: values 0, 1, 2, 127, 128, 255. */
static const unsigned char u8_2x3[] = {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 0, 1, 2, 127, 128, 255};
static const double u8_2x3_values[] = {0, 1, 2, 127, 128, 255};

static void check_u8_2x3(amp_tensor *t, amp_dtype dt)
{
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK_EQ_INT(amp_tensor_dtype(t), dt);
    CHECK_EQ_INT(amp_tensor_ndim(t), 2);
    CHECK_EQ_INT(amp_tensor_dim(t, 0), 2);
    CHECK_EQ_INT(amp_tensor_dim(t, 1), 3);
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(amp_tensor_get(t, i), u8_2x3_values[i], 0);
    amp_tensor_free(t);
}

static void test_plain_u8_reads_into_every_dtype(void)
{
    const char *p = write_file("u8.idx", u8_2x3, sizeof u8_2x3, false);
    /* 0..255 are exact in f16 and bf16 too, so every dtype keeps them. */
    for (int dt = 0; dt < AMP_DTYPE_COUNT; dt++)
        check_u8_2x3(amp_idx_load(p, (amp_dtype)dt), (amp_dtype)dt);
}

static void test_gzip_u8_reads_like_plain(void)
{
    const char *p = write_file("u8.idx.gz", u8_2x3, sizeof u8_2x3, true);
    check_u8_2x3(amp_idx_load(p, AMP_F32), AMP_F32);
    check_u8_2x3(amp_idx_load(p, AMP_I64), AMP_I64);
}

static void test_all_256_byte_values_are_exact_in_bf16(void)
{
    unsigned char b[4 + 4 + 256] = {0, 0, 0x08, 1, 0, 0, 1, 0};
    for (int i = 0; i < 256; i++)
        b[8 + i] = (unsigned char)i;
    amp_tensor *t = amp_idx_load(write_file("all.idx.gz", b, sizeof b, true), AMP_BF16);
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK_EQ_INT(amp_tensor_numel(t), 256);
    for (int i = 0; i < 256; i++)
        CHECK_NEAR(amp_tensor_get(t, i), i, 0);
    amp_tensor_free(t);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void test_f32_type_is_big_endian_and_rounds_into_bf16(void)
{
    const float v[4] = {1.5f, -2.25f, 3.0e-3f, 1.00390625f /* 1 + 2^-8: a bf16 tie */};
    unsigned char b[8 + 16] = {0, 0, 0x0D, 1, 0, 0, 0, 4};
    for (int i = 0; i < 4; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        put_be32(b + 8 + 4 * i, u);
    }
    const char *p = write_file("f32.idx", b, sizeof b, false);
    amp_tensor *t = amp_idx_load(p, AMP_F32);
    CHECK(t != NULL);
    for (int i = 0; t && i < 4; i++)
        CHECK_NEAR(amp_tensor_get(t, i), v[i], 0);
    amp_tensor_free(t);
    t = amp_idx_load(p, AMP_BF16);
    CHECK(t != NULL);
    for (int i = 0; t && i < 4; i++)
        CHECK_NEAR(amp_tensor_get(t, i), amp_bf16_to_f32(amp_f32_to_bf16(v[i])), 0);
    /* Round to nearest even: the tie 1 + 2^-8 goes down to 1. */
    if (t)
        CHECK_NEAR(amp_tensor_get(t, 3), 1.0, 0);
    amp_tensor_free(t);
    /* Float data into an integer dtype truncates toward zero. */
    t = amp_idx_load(p, AMP_I32);
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT((int64_t)amp_tensor_get(t, 0), 1);
        CHECK_EQ_INT((int64_t)amp_tensor_get(t, 1), -2);
        CHECK_EQ_INT((int64_t)amp_tensor_get(t, 2), 0);
    }
    amp_tensor_free(t);
}

static void test_float_outside_integer_range_is_format_error(void)
{
    /* f32 3e9 fits i64 but not i32; NaN fits neither. */
    float v[2] = {3e9f, NAN};
    unsigned char b[8 + 8] = {0, 0, 0x0D, 1, 0, 0, 0, 2};
    for (int i = 0; i < 2; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        put_be32(b + 8 + 4 * i, u);
    }
    const char *p = write_file("range.idx", b, sizeof b, false);
    CHECK(amp_idx_load(p, AMP_I32) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "element 0 is 3e+09, which does not fit i32");
    CHECK(amp_idx_load(p, AMP_I64) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "element 1 is nan, which does not fit i64");
}

static void test_signed_integer_and_f64_types(void)
{
    /* i8 -5, i16 -300, i32 -70000, f64 0.1: the sign bits must survive. */
    unsigned char i8[] = {0, 0, 0x09, 1, 0, 0, 0, 1, 0xFB};
    unsigned char i16[] = {0, 0, 0x0B, 1, 0, 0, 0, 1, 0xFE, 0xD4};
    unsigned char i32[12] = {0, 0, 0x0C, 1, 0, 0, 0, 1};
    put_be32(i32 + 8, (uint32_t)-70000);
    unsigned char f64[16] = {0, 0, 0x0E, 1, 0, 0, 0, 1};
    double d = 0.1;
    uint64_t u;
    memcpy(&u, &d, 8);
    put_be32(f64 + 8, (uint32_t)(u >> 32));
    put_be32(f64 + 12, (uint32_t)u);
    struct {
        const char *name;
        const unsigned char *b;
        size_t n;
        double want;
    } cases[] = {{"i8.idx", i8, sizeof i8, -5},
                 {"i16.idx", i16, sizeof i16, -300},
                 {"i32.idx", i32, sizeof i32, -70000},
                 {"f64.idx", f64, sizeof f64, (double)(float)0.1}};
    for (int i = 0; i < 4; i++) {
        amp_tensor *t = amp_idx_load(write_file(cases[i].name, cases[i].b, cases[i].n, false), AMP_F32);
        CHECK_MSG(t != NULL, "%s: %s", cases[i].name, amp_last_error());
        if (t)
            CHECK_NEAR(amp_tensor_get(t, 0), cases[i].want, 0);
        amp_tensor_free(t);
    }
}

static void test_empty_dim_gives_empty_tensor(void)
{
    unsigned char b[] = {0, 0, 0x08, 2, 0, 0, 0, 0, 0, 0, 0, 28};
    amp_tensor *t = amp_idx_load(write_file("empty.idx", b, sizeof b, false), AMP_F32);
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(amp_tensor_numel(t), 0);
        CHECK_EQ_INT(amp_tensor_dim(t, 1), 28);
    }
    amp_tensor_free(t);
}

static void test_missing_file_is_io_error_naming_it(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/no-such-file.idx", tmpdir);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_MSG(strstr(amp_last_error(), "No such file") != NULL, "no strerror in: %s", amp_last_error());
    CHECK_ERROR(AMP_ERR_IO, p);
}

static void test_directory_is_io_error(void)
{
    CHECK(amp_idx_load(tmpdir, AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_IO, "directory");
}

/* A FIFO would block the open forever, /dev/zero read until memory ran
 * out: only regular files are read. */
static void test_fifo_and_devices_are_io_errors_at_once(void)
{
    char *fifo = made[n_made++];
    snprintf(fifo, sizeof made[0], "%s/fifo-images-idx3-ubyte", tmpdir);
    CHECK(mkfifo(fifo, 0600) == 0);
    watchdog_arm("idx_load");
    CHECK(amp_idx_load(fifo, AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_IO, "not a regular file (a FIFO)");
    CHECK(amp_idx_load("/dev/zero", AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_IO, "/dev/zero: not a regular file (a character device)");
    watchdog_disarm();
}

/* A gzip file holds at most 1032 times its size (deflate's limit): a
 * header announcing more is refused before the tensor is allocated. */
static void test_gzip_announcing_more_than_it_can_hold_is_refused(void)
{
    unsigned char c[4 + 2 * 4] = {0, 0, 0x08, 2};
    put_be32(c + 4, 1u << 20);
    put_be32(c + 8, 1u << 20);
    CHECK(amp_idx_load(write_file("bomb.idx.gz", c, sizeof c, true), AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "the header announces 1099511627776 bytes of data, more than");
}

static void test_truncated_header_is_format_error(void)
{
    const char *p = write_file("short.idx", u8_2x3, 3, false);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_MSG(strstr(amp_last_error(), p) != NULL, "message does not name the file: %s", amp_last_error());
    CHECK_ERROR(AMP_ERR_FORMAT, "truncated header");
    /* Magic complete, but only one of the two dims present. */
    p = write_file("short-dims.idx.gz", u8_2x3, 8, true);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "2 dims need 8 bytes of sizes, got 4");
}

static void test_truncated_data_says_expected_and_got(void)
{
    /* Two bytes short, plain (caught from the file size) and gzip (caught
     * while reading). */
    const char *p = write_file("trunc.idx", u8_2x3, sizeof u8_2x3 - 2, false);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_MSG(strstr(amp_last_error(), p) != NULL, "message does not name the file: %s", amp_last_error());
    CHECK_ERROR(AMP_ERR_FORMAT, "truncated: expected 6 bytes of data, got 4");
    p = write_file("trunc.idx.gz", u8_2x3, sizeof u8_2x3 - 2, true);
    CHECK(amp_idx_load(p, AMP_I64) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "truncated: expected 6 bytes of data, got 4");
}

static void test_cut_gzip_stream_is_format_error(void)
{
    /* A valid gzip file cut short: zlib reports the stream's end missing. */
    unsigned char big[12 + 4096] = {0, 0, 0x08, 2, 0, 0, 0, 64, 0, 0, 0, 64};
    uint64_t s = 1;
    for (size_t i = 12; i < sizeof big; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        big[i] = (unsigned char)(s >> 56); /* incompressible-ish */
    }
    const char *full = write_file("cut-src.idx.gz", big, sizeof big, true);
    FILE *f = fopen(full, "rb");
    unsigned char gz[8192];
    size_t n = f ? fread(gz, 1, sizeof gz, f) : 0;
    if (f)
        fclose(f);
    CHECK(n > 100);
    const char *p = write_file("cut.idx.gz", gz, n / 2, false);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_MSG(strstr(amp_last_error(), p) != NULL, "message does not name the file: %s", amp_last_error());
    CHECK_MSG(amp_last_status() == AMP_ERR_FORMAT, "status %d: %s", (int)amp_last_status(), amp_last_error());
    amp_clear_error();
}

static void test_bad_magic_shows_the_bytes(void)
{
    const unsigned char zip[] = {0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0};
    const char *p = write_file("zip.idx", zip, sizeof zip, false);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_MSG(strstr(amp_last_error(), p) != NULL, "message does not name the file: %s", amp_last_error());
    CHECK_ERROR(AMP_ERR_FORMAT, "bad magic 50 4b 03 04");
}

static void test_bad_type_byte_is_named(void)
{
    unsigned char b[sizeof u8_2x3];
    memcpy(b, u8_2x3, sizeof b);
    b[2] = 0x07;
    const char *p = write_file("type.idx.gz", b, sizeof b, true);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_MSG(strstr(amp_last_error(), p) != NULL, "message does not name the file: %s", amp_last_error());
    CHECK_ERROR(AMP_ERR_FORMAT, "unsupported type byte 0x07");
}

static void test_too_many_dims_is_format_error(void)
{
    unsigned char b[4 + 9 * 4] = {0, 0, 0x08, 9};
    for (int i = 0; i < 9; i++)
        put_be32(b + 4 + 4 * i, 1);
    CHECK(amp_idx_load(write_file("dims9.idx", b, sizeof b, false), AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "9 dims, ampc tensors have at most 8");
}

static void test_dims_that_overflow_are_rejected_before_allocating(void)
{
    unsigned char b[4 + 3 * 4] = {0, 0, 0x0E, 3};
    for (int i = 0; i < 3; i++)
        put_be32(b + 4 + 4 * i, 0xFFFFFFFFu);
    CHECK(amp_idx_load(write_file("huge.idx.gz", b, sizeof b, true), AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "overflow");
    /* 2^40 bytes announced by a plain 12-byte file: refused from its size. */
    unsigned char c[4 + 2 * 4] = {0, 0, 0x08, 2};
    put_be32(c + 4, 1u << 20);
    put_be32(c + 8, 1u << 20);
    CHECK(amp_idx_load(write_file("big.idx", c, sizeof c, false), AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "expected 1099511627776 bytes of data, got 0");
}

/* Found by fuzz/fuzz_idx: a 40-byte gzip file announcing gigabytes made
 * the loader allocate them (an out-of-memory under the fuzzer) before
 * finding it truncated. Deflate holds at most 1032 bytes per byte. */
static void test_gzip_announcing_more_than_it_can_hold_is_refused_before_allocating(void)
{
    unsigned char b[4 + 2 * 4] = {0, 0, 0x08, 2};
    put_be32(b + 4, 1u << 16);
    put_be32(b + 8, 1u << 12);
    const char *p = write_file("vast.idx.gz", b, sizeof b, true);
    CHECK(amp_idx_load(p, AMP_F32) == NULL);
    CHECK_MSG(strstr(amp_last_error(), p) != NULL, "message does not name the file: %s", amp_last_error());
    CHECK_ERROR(AMP_ERR_FORMAT, "announces 268435456 bytes of data, more than a");
    /* At the bound: 4 KiB of zeros compress far below 1032:1's limit. */
    static unsigned char z[4 + 2 * 4 + 4096] = {0, 0, 0x08, 2};
    put_be32(z + 4, 64);
    put_be32(z + 8, 64);
    amp_tensor *t = amp_idx_load(write_file("zeros.idx.gz", z, sizeof z, true), AMP_F32);
    CHECK(t != NULL);
    amp_tensor_free(t);
}

static void test_trailing_bytes_are_format_error(void)
{
    unsigned char b[sizeof u8_2x3 + 1];
    memcpy(b, u8_2x3, sizeof u8_2x3);
    b[sizeof u8_2x3] = 9;
    CHECK(amp_idx_load(write_file("trail.idx.gz", b, sizeof b, true), AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_FORMAT, "bytes after the 6 data bytes");
}

static void test_bad_arguments(void)
{
    CHECK(amp_idx_load(NULL, AMP_F32) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "NULL path");
    CHECK(amp_idx_load(made[0], (amp_dtype)99) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "invalid dtype");
}

static void test_fashion_mnist_has_published_shapes(void)
{
    if (access(FMNIST_DIR "/train-labels-idx1-ubyte.gz", R_OK) != 0) {
        harness_skip(FMNIST_DIR " is not installed");
        return;
    }
    struct {
        const char *file;
        int ndim;
        int64_t n;
    } files[] = {{"train-images-idx3-ubyte.gz", 3, 60000},
                 {"train-labels-idx1-ubyte.gz", 1, 60000},
                 {"t10k-images-idx3-ubyte.gz", 3, 10000},
                 {"t10k-labels-idx1-ubyte.gz", 1, 10000}};
    for (int i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", FMNIST_DIR, files[i].file);
        /* Labels as i64 (what cross_entropy takes); images as u8-valued bf16
         * to keep the test light. */
        amp_tensor *t = amp_idx_load(p, files[i].ndim == 1 ? AMP_I64 : AMP_BF16);
        CHECK_MSG(t != NULL, "%s", amp_last_error());
        if (!t)
            continue;
        CHECK_EQ_INT(amp_tensor_ndim(t), files[i].ndim);
        CHECK_EQ_INT(amp_tensor_dim(t, 0), files[i].n);
        if (files[i].ndim == 3) {
            CHECK_EQ_INT(amp_tensor_dim(t, 1), 28);
            CHECK_EQ_INT(amp_tensor_dim(t, 2), 28);
        } else {
            /* Ten classes, balanced: each label 0..9 appears n/10 times. */
            int64_t count[10] = {0};
            const int64_t *y = amp_tensor_cdata(t);
            bool in_range = true;
            for (int64_t k = 0; k < files[i].n; k++) {
                if (y[k] < 0 || y[k] > 9)
                    in_range = false;
                else
                    count[y[k]]++;
            }
            CHECK(in_range);
            for (int c = 0; c < 10; c++)
                CHECK_EQ_INT(count[c], files[i].n / 10);
        }
        amp_tensor_free(t);
    }
}

int main(void)
{
    scratch_make("test-idx");
    RUN(test_plain_u8_reads_into_every_dtype);
    RUN(test_gzip_u8_reads_like_plain);
    RUN(test_all_256_byte_values_are_exact_in_bf16);
    RUN(test_f32_type_is_big_endian_and_rounds_into_bf16);
    RUN(test_float_outside_integer_range_is_format_error);
    RUN(test_signed_integer_and_f64_types);
    RUN(test_empty_dim_gives_empty_tensor);
    RUN(test_missing_file_is_io_error_naming_it);
    RUN(test_directory_is_io_error);
    RUN(test_fifo_and_devices_are_io_errors_at_once);
    RUN(test_gzip_announcing_more_than_it_can_hold_is_refused);
    RUN(test_truncated_header_is_format_error);
    RUN(test_truncated_data_says_expected_and_got);
    RUN(test_cut_gzip_stream_is_format_error);
    RUN(test_bad_magic_shows_the_bytes);
    RUN(test_bad_type_byte_is_named);
    RUN(test_too_many_dims_is_format_error);
    RUN(test_dims_that_overflow_are_rejected_before_allocating);
    RUN(test_gzip_announcing_more_than_it_can_hold_is_refused_before_allocating);
    RUN(test_trailing_bytes_are_format_error);
    RUN(test_bad_arguments);
    RUN(test_fashion_mnist_has_published_shapes);
    scratch_remove();
    return harness_done();
}
