/*
 * tb_encode.c - TensorBoard's event records in bytes (the format is in
 * tb_encode.h). Protobuf's wire format: each field is a key varint
 * (field number << 3 | wire type) then its value: a varint (type 0), 8
 * little-endian bytes (type 1: double), a varint length and the bytes
 * (type 2: strings, messages, packed repeated fields), or 4 little-endian
 * bytes (type 5: float). A message's length is computed before it is
 * written, so nothing is encoded twice.
 */
#include "tb_encode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

void tb_buf_free(tb_buf *b)
{
    free(b->p);
    *b = (tb_buf){0};
}

static void put(tb_buf *b, const void *p, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) /* (p may be NULL for an empty string) */
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

uint32_t tb_crc32c(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t tb_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

size_t tb_varint(uint8_t out[TB_VARINT_MAX], uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static size_t varint_len(uint64_t v)
{
    uint8_t tmp[TB_VARINT_MAX];
    return tb_varint(tmp, v);
}

static void put_varint(tb_buf *b, uint64_t v)
{
    uint8_t tmp[TB_VARINT_MAX];
    put(b, tmp, tb_varint(tmp, v));
}

static void put_key(tb_buf *b, unsigned field, unsigned wire) { put_varint(b, (uint64_t)field << 3 | wire); }

static void put_le(tb_buf *b, uint64_t v, int bytes)
{
    uint8_t le[8];
    for (int i = 0; i < bytes; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, (size_t)bytes);
}

static void put_double(tb_buf *b, unsigned field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_key(b, field, WIRE_I64);
    put_le(b, bits, 8);
}

/* The key and length of a length-delimited field of n bytes (its bytes
 * follow), and the size of the whole field. */
static void put_len(tb_buf *b, unsigned field, size_t n)
{
    put_key(b, field, WIRE_LEN);
    put_varint(b, n);
}
static size_t len_field(size_t n) { return 1 + varint_len(n) + n; } /* (field numbers < 16: a 1-byte key) */

static void put_doubles(tb_buf *b, unsigned field, const double *v, int n)
{
    put_len(b, field, 8 * (size_t)n);
    for (int i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        put_le(b, bits, 8);
    }
}

bool tb_histo_of(const float *v, int64_t n, tb_histo *h)
{
    *h = (tb_histo){.min = INFINITY, .max = -INFINITY};
    for (int64_t i = 0; i < n; i++) {
        double x = v[i];
        if (!isfinite(x))
            continue;
        h->min = x < h->min ? x : h->min;
        h->max = x > h->max ? x : h->max;
        h->num++;
        h->sum += x;
        h->sum_squares += x * x;
    }
    if (h->num == 0) {
        h->min = h->max = 0;
        return false;
    }
    const double w = (h->max - h->min) / TB_BUCKETS;
    h->nb = w > 0 ? TB_BUCKETS : 1;
    for (int i = 0; i < h->nb; i++)
        h->limit[i] = i == h->nb - 1 ? h->max : h->min + (i + 1) * w;
    for (int64_t i = 0; i < n; i++) {
        double x = v[i];
        if (!isfinite(x))
            continue;
        int k = w > 0 ? (int)ceil((x - h->min) / w) - 1 : 0;
        k = k < 0 ? 0 : k >= h->nb ? h->nb - 1 : k;
        /* (the division's rounding can land a value one bucket off) */
        while (k > 0 && x <= h->limit[k - 1])
            k--;
        while (k < h->nb - 1 && x > h->limit[k])
            k++;
        h->count[k]++;
    }
    return true;
}

void tb_summary_scalar(tb_buf *sum, const char *tag, float v)
{
    size_t tn = strlen(tag);
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_len(sum, 1, len_field(tn) + 5);
    put_len(sum, 1, tn);
    put(sum, tag, tn);
    put_key(sum, 2, WIRE_I32);
    put_le(sum, bits, 4);
}

void tb_summary_histo(tb_buf *sum, const char *tag, const tb_histo *h)
{
    size_t tn = strlen(tag), packed = 8 * (size_t)h->nb;
    size_t histo = 5 * 9 + 2 * len_field(packed);
    put_len(sum, 1, len_field(tn) + len_field(histo));
    put_len(sum, 1, tn);
    put(sum, tag, tn);
    put_len(sum, 5, histo);
    const double stats[5] = {h->min, h->max, h->num, h->sum, h->sum_squares};
    for (unsigned f = 0; f < 5; f++)
        put_double(sum, f + 1, stats[f]);
    put_doubles(sum, 6, h->limit, h->nb);
    put_doubles(sum, 7, h->count, h->nb);
}

static void event_head(tb_buf *ev, double wall_time, int64_t step)
{
    put_double(ev, 1, wall_time);
    put_key(ev, 2, WIRE_VARINT);
    put_varint(ev, (uint64_t)step); /* int64: a negative one takes 10 bytes */
}

void tb_event_file_version(tb_buf *ev, double wall_time)
{
    static const char version[] = "brain.Event:2";
    event_head(ev, wall_time, 0);
    put_len(ev, 3, sizeof version - 1);
    put(ev, version, sizeof version - 1);
}

void tb_event_summary(tb_buf *ev, double wall_time, int64_t step, const tb_buf *summary)
{
    event_head(ev, wall_time, step);
    put_len(ev, 5, summary->n);
    put(ev, summary->p, summary->n);
}

void tb_record(tb_buf *out, const uint8_t *data, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    put(out, len, 8);
    put_le(out, tb_masked_crc(tb_crc32c(len, 8)), 4);
    put(out, data, n);
    put_le(out, tb_masked_crc(tb_crc32c(data, n)), 4);
}
