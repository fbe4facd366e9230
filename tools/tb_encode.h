/*
 * tb_encode.h - TensorBoard's event file format, encoded by hand (no
 * protobuf library): the CRC32C, protobuf's varints and the few field
 * kinds an Event needs, the Event and Summary messages ampc writes, a
 * gradient's histogram, and TFRecord's framing. Pure functions over
 * memory; tensorboard.c does the files.
 *
 * A TFRecord (tensorflow/core/lib/io/record_writer.cc) is
 *   uint64 length, uint32 masked_crc32c(length bytes), data,
 *   uint32 masked_crc32c(data)
 * all little-endian, with masked(crc) = ((crc >> 15) | (crc << 17)) +
 * 0xa282ead8. Each record's data is one Event (tensorboard's
 * compat/proto/event.proto, summary.proto, histogram.proto):
 *   Event:          wall_time double 1, step int64 2, file_version string 3
 *                   ("brain.Event:2" in a file's first event), summary 5
 *   Summary:        value 1 (repeated Summary.Value)
 *   Summary.Value:  tag string 1, simple_value float 2, histo 5
 *   HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5 (doubles),
 *                   bucket_limit 6, bucket 7 (packed doubles)
 *
 * Defines: tb_buf, tb_buf_free, tb_crc32c, tb_masked_crc, TB_VARINT_MAX,
 * tb_varint, TB_BUCKETS, tb_histo, tb_histo_of, tb_summary_scalar,
 * tb_summary_histo, tb_event_file_version, tb_event_summary, tb_record.
 */
#ifndef AMPC_TB_ENCODE_H
#define AMPC_TB_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growing byte buffer; oom is set (and the bytes stop growing) when an
 * allocation fails, so a chain of appends is checked once at its end. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} tb_buf;

void tb_buf_free(tb_buf *b);

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of n bytes;
 * crc32c("123456789") = 0xe3069283. */
uint32_t tb_crc32c(const void *data, size_t n);
/* TFRecord's masking of a CRC stored next to the data it covers. */
uint32_t tb_masked_crc(uint32_t crc);

#define TB_VARINT_MAX 10
/* Writes v as a protobuf base-128 varint into out; returns its length
 * (1 to TB_VARINT_MAX; a negative int64 cast to uint64 takes 10). */
size_t tb_varint(uint8_t out[TB_VARINT_MAX], uint64_t v);

/* TensorBoard's default bucket count (summary.histogram's 30). */
#define TB_BUCKETS 30
/* A HistogramProto: nb buckets of equal width over [min, max], bucket i
 * counting the values in (limit[i-1], limit[i]] (the first from min), the
 * last limit max itself; one bucket when every value is the same. */
typedef struct {
    double min, max, num, sum, sum_squares;
    int nb;
    double limit[TB_BUCKETS], count[TB_BUCKETS];
} tb_histo;
/* The histogram of the finite values of v[0..n) (sums in double); false
 * when none is finite (nothing to draw). */
bool tb_histo_of(const float *v, int64_t n, tb_histo *h);

/* Appends one Summary.Value to a Summary being built in sum. */
void tb_summary_scalar(tb_buf *sum, const char *tag, float v);
void tb_summary_histo(tb_buf *sum, const char *tag, const tb_histo *h);

/* Appends an Event: the file's first, carrying file_version; or one
 * carrying the Summary built in summary. */
void tb_event_file_version(tb_buf *ev, double wall_time);
void tb_event_summary(tb_buf *ev, double wall_time, int64_t step, const tb_buf *summary);

/* Appends data[0..n) framed as one TFRecord. */
void tb_record(tb_buf *out, const uint8_t *data, size_t n);

#endif
