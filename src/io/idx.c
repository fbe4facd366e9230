/*
 * idx.c - amp_idx_load: reads an IDX file (the MNIST / Fashion-MNIST
 * format), plain or gzip-compressed, into a tensor of the requested dtype.
 *
 * The format (yann.lecun.com/exdb/mnist): two zero bytes, a type byte, a
 * dimension count, then one big-endian u32 per dimension, then the
 * elements, big-endian, row-major. Type bytes: 0x08 u8, 0x09 i8, 0x0B i16,
 * 0x0C i32, 0x0D f32, 0x0E f64; all six are read.
 *
 * Values keep their numeric meaning: pixel bytes become 0..255 in a float
 * dtype (exact in f16 and bf16 too), labels become integers. Float data
 * read into an integer dtype truncates toward zero; a value out of the
 * integer range is an error.
 *
 * Decisions:
 *   - zlib's gzread reads plain files unchanged, so one path serves both;
 *     the file is recognised by content, not by its name.
 *   - The header fixes the data size exactly, so bytes after the data are
 *     an AMP_ERR_FORMAT error: they mean the header's dims do not describe
 *     the file (a wrong or concatenated file), which is worth knowing.
 *   - The data is streamed through a small buffer and converted chunk by
 *     chunk, so loading 47M pixels as f16 does not need a 47M-float copy.
 *   - Sizes are checked for overflow, and a file shorter than its header
 *     claims is refused before the tensor is allocated: for gzip, one
 *     whose data could not fit even at deflate's best ratio (1032:1). A
 *     corrupt gzip header can still ask for up to 1032 times the file's
 *     size, which then fails cleanly with AMP_ERR_MEMORY or is cut short
 *     as "truncated". (Pipes, of unknown size, are not checked.)
 *   - The tensor belongs to the caller (amp_tensor_free), like any
 *     constructor's.
 *
 * Only a regular file is read (a FIFO or /dev/zero would block or never
 * end). Errors name the file: AMP_ERR_IO when it cannot be opened or read
 * or is not a regular file,
 * AMP_ERR_FORMAT when its content is not a well-formed IDX file,
 * AMP_ERR_MEMORY when the tensor cannot be allocated.
 */
#include "base/base.h"
#include "io/file.h"
#include "tensor/tensor.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Elements converted per round: bounds the staging buffers. */
#define CHUNK_ELEMS 65536

typedef struct {
    unsigned char code;
    const char *name;
    size_t size;
    bool is_float;
} idx_type;

static const idx_type idx_types[] = {
    {0x08, "u8", 1, false}, {0x09, "i8", 1, false},  {0x0B, "i16", 2, false},
    {0x0C, "i32", 4, false}, {0x0D, "f32", 4, true}, {0x0E, "f64", 8, true},
};

static const idx_type *find_type(unsigned char code)
{
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if (idx_types[i].code == code)
            return &idx_types[i];
    return NULL;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t be64(const unsigned char *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

/* Element i of a big-endian buffer of type ty, as a double (exact for
 * every IDX type: the integers are at most 32 bits). */
static double load_be(const idx_type *ty, const unsigned char *p, size_t i)
{
    switch (ty->code) {
    case 0x08: return p[i];
    case 0x09: return (int8_t)p[i];
    case 0x0B: return (int16_t)(uint16_t)((unsigned)p[2 * i] << 8 | p[2 * i + 1]);
    case 0x0C: return (int32_t)be32(p + 4 * i);
    case 0x0D: {
        uint32_t u = be32(p + 4 * i);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: {
        uint64_t u = be64(p + 8 * i);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    }
}

/* Reads up to n bytes; returns how many, or -1 with the error set. */
static long read_some(gzFile f, const char *path, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        int r = gzread(f, (char *)buf + got, (unsigned)(n - got));
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            if (zerr == Z_ERRNO)
                amp_set_error(AMP_ERR_IO, "idx_load: %s: read failed: %s", path, strerror(errno));
            else
                amp_set_error(AMP_ERR_FORMAT, "idx_load: %s: corrupt gzip data: %s", path, msg);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long)got;
}

/* Opens path for gzread if it is a regular file (io/file.h: a FIFO or a
 * device would block or never end), with an error naming the file and
 * the reason when it cannot. */
static gzFile open_file(const char *path, int64_t *file_size)
{
    char why[160];
    int fd = file_open_read(path, 0, file_size, why, sizeof why);
    if (fd < 0)
        return amp_fail_null(AMP_ERR_IO, "idx_load: %s: %s", path, why);
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return amp_fail_null(AMP_ERR_MEMORY, "idx_load: %s: cannot set up the gzip reader", path);
    }
    gzbuffer(f, 1u << 17);
    return f;
}

/* Parses the header: sets *ty, the shape and the data size in bytes. */
static amp_status read_header(gzFile f, const char *path, const idx_type **ty, amp_shape *shape,
                              size_t *nbytes)
{
    unsigned char h[4];
    long got = read_some(f, path, h, 4);
    if (got < 0)
        return amp_last_status();
    if (got < 4)
        return amp_set_error(AMP_ERR_FORMAT,
                             "idx_load: %s: truncated header: %ld bytes, an IDX file starts with 4",
                             path, got);
    if (h[0] != 0 || h[1] != 0)
        return amp_set_error(AMP_ERR_FORMAT,
                             "idx_load: %s: bad magic %02x %02x %02x %02x (an IDX file starts with "
                             "00 00 <type> <ndim>)",
                             path, h[0], h[1], h[2], h[3]);
    *ty = find_type(h[2]);
    if (!*ty)
        return amp_set_error(AMP_ERR_FORMAT,
                             "idx_load: %s: unsupported type byte 0x%02x (IDX types: 0x08 u8, 0x09 "
                             "i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)",
                             path, h[2]);
    int ndim = h[3];
    if (ndim > AMP_MAX_DIMS)
        return amp_set_error(AMP_ERR_FORMAT, "idx_load: %s: %d dims, ampc tensors have at most %d",
                             path, ndim, AMP_MAX_DIMS);
    unsigned char dims[4 * AMP_MAX_DIMS];
    got = read_some(f, path, dims, (size_t)ndim * 4);
    if (got < 0)
        return amp_last_status();
    if (got < ndim * 4)
        return amp_set_error(AMP_ERR_FORMAT,
                             "idx_load: %s: truncated header: %d dims need %d bytes of sizes, got %ld",
                             path, ndim, ndim * 4, got);
    /* Each dim is below 2^32, but their product may not fit: check it. */
    shape->ndim = ndim;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        shape->d[i] = be32(dims + 4 * i);
        if (__builtin_mul_overflow(numel, (uint64_t)shape->d[i], &numel) || numel > (uint64_t)INT64_MAX)
            return amp_set_error(AMP_ERR_FORMAT, "idx_load: %s: dims overflow the element count",
                                 path);
    }
    if (__builtin_mul_overflow((size_t)numel, (*ty)->size, nbytes))
        return amp_set_error(AMP_ERR_FORMAT, "idx_load: %s: data size overflows", path);
    return AMP_OK;
}

/* Converts n elements of raw into dst (element offset at) of dtype dt,
 * via the staging buffers when dt is not f32 / i64. */
static amp_status convert_chunk(const idx_type *ty, const unsigned char *raw, size_t n, amp_tensor *t,
                                size_t at, float *fbuf, int64_t *ibuf, const char *path)
{
    amp_dtype dt = t->dtype;
    char *base = (char *)tensor_ptr(t) + at * amp_dtype_size(dt);
    if (amp_dtype_is_float(dt)) {
        float *out = dt == AMP_F32 ? (float *)base : fbuf;
        for (size_t i = 0; i < n; i++)
            out[i] = (float)load_be(ty, raw, i);
        if (dt != AMP_F32)
            amp_convert(fbuf, AMP_F32, base, dt, n);
        return AMP_OK;
    }
    int64_t *out = dt == AMP_I64 ? (int64_t *)base : ibuf;
    double lo = dt == AMP_I64 ? -9223372036854775808.0 : -2147483648.0;
    double hi = -lo;
    for (size_t i = 0; i < n; i++) {
        double v = load_be(ty, raw, i);
        if (!(v >= lo && v < hi))
            return amp_set_error(AMP_ERR_FORMAT, "idx_load: %s: element %zu is %g, which does not fit %s",
                                 path, at + i, v, amp_dtype_name(dt));
        out[i] = (int64_t)v;
    }
    if (dt != AMP_I64)
        amp_convert(ibuf, AMP_I64, base, dt, n);
    return AMP_OK;
}

/* Reads the data after the header into t, chunk by chunk. */
static amp_status read_data(gzFile f, const char *path, const idx_type *ty, amp_tensor *t, size_t nbytes)
{
    size_t numel = (size_t)t->numel;
    unsigned char *raw = amp_alloc(CHUNK_ELEMS * 8);
    float *fbuf = amp_alloc(CHUNK_ELEMS * sizeof(float));
    int64_t *ibuf = amp_alloc(CHUNK_ELEMS * sizeof(int64_t));
    amp_status st = AMP_OK;
    if (!raw || !fbuf || !ibuf) {
        st = AMP_ERR_MEMORY;
        goto done;
    }
    for (size_t at = 0; at < numel;) {
        size_t n = numel - at < CHUNK_ELEMS ? numel - at : CHUNK_ELEMS;
        long got = read_some(f, path, raw, n * ty->size);
        if (got < 0) {
            st = amp_last_status();
            goto done;
        }
        if ((size_t)got < n * ty->size) {
            /* zlib flags a stream cut before its trailer with Z_BUF_ERROR. */
            int zerr = Z_OK;
            gzerror(f, &zerr);
            st = amp_set_error(AMP_ERR_FORMAT,
                               "idx_load: %s: truncated: expected %zu bytes of data, got %zu%s", path,
                               nbytes, at * ty->size + (size_t)got,
                               zerr == Z_BUF_ERROR ? " (the gzip stream ends early)" : "");
            goto done;
        }
        st = convert_chunk(ty, raw, n, t, at, fbuf, ibuf, path);
        if (st != AMP_OK)
            goto done;
        at += n;
    }
    long extra = read_some(f, path, raw, 1);
    if (extra < 0)
        st = amp_last_status();
    else if (extra > 0)
        st = amp_set_error(AMP_ERR_FORMAT,
                           "idx_load: %s: bytes after the %zu data bytes the header announces "
                           "(the dims do not describe this file)",
                           path, nbytes);
done:
    amp_free(raw);
    amp_free(fbuf);
    amp_free(ibuf);
    return st;
}

/* Deflate expands at most 1032:1 (zlib's FAQ): a gzip file of n bytes
 * holds at most 1032 n bytes. */
#define GZIP_MAX_RATIO 1032

/* A regular file's size is known up front: a header that announces more
 * data than the file holds (uncompressed) or can hold (gzip) is reported
 * before allocating, since a corrupt header could otherwise ask for
 * terabytes. */
static amp_status check_size(gzFile f, const char *path, int64_t file_size, size_t header, size_t nbytes)
{
    if (file_size < 0)
        return AMP_OK;
    if (gzdirect(f)) {
        size_t have = (size_t)file_size - header;
        if (have < nbytes)
            return amp_set_error(AMP_ERR_FORMAT,
                                 "idx_load: %s: truncated: expected %zu bytes of data, got %zu", path,
                                 nbytes, have);
        return AMP_OK;
    }
    uint64_t most;
    if (!__builtin_mul_overflow((uint64_t)file_size, (uint64_t)GZIP_MAX_RATIO, &most) &&
        (uint64_t)nbytes > most - header)
        return amp_set_error(AMP_ERR_FORMAT,
                             "idx_load: %s: truncated: the header announces %zu bytes of data, more than "
                             "a %lld-byte gzip file can hold (at most %d:1)",
                             path, nbytes, (long long)file_size, GZIP_MAX_RATIO);
    return AMP_OK;
}

amp_tensor *amp_idx_load(const char *path, amp_dtype dt)
{
    if (!path)
        return amp_fail_null(AMP_ERR_ARG, "idx_load: NULL path");
    if ((unsigned)dt >= AMP_DTYPE_COUNT)
        return amp_fail_null(AMP_ERR_ARG, "idx_load: %s: invalid dtype %d", path, (int)dt);
    int64_t file_size = -1;
    gzFile f = open_file(path, &file_size);
    if (!f)
        return NULL;
    const idx_type *ty = NULL;
    amp_shape shape = {0};
    size_t nbytes = 0;
    amp_tensor *t = NULL;
    if (read_header(f, path, &ty, &shape, &nbytes) == AMP_OK &&
        check_size(f, path, file_size, 4 + 4 * (size_t)shape.ndim, nbytes) == AMP_OK) {
        t = tensor_new(shape, dt);
        if (!t) {
            char buf[96];
            amp_set_error(AMP_ERR_MEMORY, "idx_load: %s: cannot allocate a %s %s tensor", path,
                          amp_shape_str(shape, buf, sizeof buf), amp_dtype_name(dt));
        } else if (read_data(f, path, ty, t, nbytes) != AMP_OK) {
            amp_tensor_free(t);
            t = NULL;
        }
    }
    gzclose(f);
    return t;
}
