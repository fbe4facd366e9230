/*
 * test_tensorboard.c - `ampc train --tensorboard DIR` (tools/tensorboard.c)
 * and the bytes under it (tools/tb_encode.c).
 *
 * The encoder against standards written down elsewhere: CRC-32C's check
 * value and RFC 3720's test vectors, TFRecord's mask, protobuf varints and
 * one Event worked out by hand from the .proto field numbers. The event
 * files of real runs are read by TensorBoard itself (tests/test_tensorboard.py:
 * EventAccumulator, its record reader and CRC32C), which is not a build
 * dependency: the Python side runs with the first of $AMPC_TORCH_PYTHON,
 * python3 and the repository's .bench-venv that imports tensorboard (CI
 * installs it there: scripts/torch-deps.sh), and where none does those
 * tests are skipped (exit 77 when nothing else failed).
 *
 * The runs: an mlp 784-16-10 in fp16 with the grad scaler, started at
 * scale 1e20 with --backoff-factor 0.01 (its first steps overflow and are
 * skipped, then it trains) and --growth-interval 3 (the scale grows too),
 * f16 health every 4 steps.
 */
#include "harness.h"
#include "python_side.h"
#include "tb_encode.h"
#include "test_cli_util.h"

#include <stdlib.h>

static char images[256];
static bool have_tb;

/* Whether the Python side can run; else the running test is skipped. */
static bool need_tensorboard(void)
{
    if (!have_tb)
        harness_skip("no Python that imports tensorboard ($AMPC_TORCH_PYTHON, python3, .bench-venv)");
    return have_tb && cli_have_binary();
}

#define RUN_ARGS                                                                                                    \
    "train --model mlp --data '%s' --hidden 16 --batch 16 --steps 16 --threads 1 --seed 3 --precision fp16 "        \
    "--init-scale 1e20 --backoff-factor 0.01 --growth-interval 3 --health-every 4"

/* ---------------------------------------------------------------- bytes */

static void test_crc32c_matches_the_check_value_and_rfc3720(void)
{
    CHECK_EQ_INT(tb_crc32c("123456789", 9), 0xe3069283u); /* the CRC catalogue's check value */
    CHECK_EQ_INT(tb_crc32c("", 0), 0);
    uint8_t b[32];
    memset(b, 0, sizeof b); /* RFC 3720, B.4 */
    CHECK_EQ_INT(tb_crc32c(b, 32), 0x8a9136aau);
    memset(b, 0xff, sizeof b);
    CHECK_EQ_INT(tb_crc32c(b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    CHECK_EQ_INT(tb_crc32c(b, 32), 0x46dd794eu);
    /* ((c >> 15) | (c << 17)) + 0xa282ead8, by hand for the check value */
    CHECK_EQ_INT(tb_masked_crc(0xe3069283u), 0xc78ab0e5u);
    CHECK_EQ_INT(tb_masked_crc(0), 0xa282ead8u);
}

/* v's varint equals the n bytes of want. */
static void check_varint(uint64_t v, const uint8_t *want, size_t n)
{
    uint8_t out[TB_VARINT_MAX];
    size_t got = tb_varint(out, v);
    CHECK_MSG(got == n && memcmp(out, want, n) == 0, "varint of %llu: %zu bytes, %zu wanted (first %02x, %02x wanted)",
              (unsigned long long)v, got, n, out[0], want[0]);
}
#define VARINT(v, ...) check_varint((v), (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}))

static void test_varints_are_protobufs(void)
{
    VARINT(0, 0x00);
    VARINT(1, 0x01);
    VARINT(127, 0x7f);
    VARINT(128, 0x80, 0x01);
    VARINT(150, 0x96, 0x01); /* the protobuf encoding guide's example */
    VARINT(300, 0xac, 0x02);
    VARINT(16384, 0x80, 0x80, 0x01);
    VARINT(UINT32_MAX, 0xff, 0xff, 0xff, 0xff, 0x0f);
    VARINT((uint64_t)INT64_MAX, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f);
    VARINT((uint64_t)INT64_C(-1), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01); /* an int64 -1 */
}

/* Event{wall_time 0.5, step 2, summary {value {tag "a", simple_value 1}}}
 * and the file's first event, byte for byte as the wire format makes them
 * from event.proto's and summary.proto's field numbers. */
static void test_events_encode_as_the_protos_say(void)
{
    tb_buf sum = {0}, ev = {0};
    tb_summary_scalar(&sum, "a", 1.0f);
    tb_event_summary(&ev, 0.5, 2, &sum);
    static const uint8_t want[] = {
        0x09, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f,    /* 1: wall_time, fixed64 double 0.5 */
        0x10, 0x02,                            /* 2: step, varint 2 */
        0x2a, 0x0a,                            /* 5: summary, 10 bytes */
        0x0a, 0x08,                            /*   1: value, 8 bytes */
        0x0a, 0x01, 'a',                       /*     1: tag "a" */
        0x15, 0x00, 0x00, 0x80, 0x3f,          /*     2: simple_value, fixed32 float 1 */
    };
    CHECK_EQ_INT(ev.n, sizeof want);
    CHECK(!ev.oom && ev.n == sizeof want && memcmp(ev.p, want, sizeof want) == 0);
    tb_buf first = {0};
    tb_event_file_version(&first, 0.5);
    static const uint8_t version[] = {0x09, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f, 0x10, 0x00, 0x1a, 13,
                                      'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    CHECK(first.n == sizeof version && memcmp(first.p, version, sizeof version) == 0);
    tb_buf_free(&sum);
    tb_buf_free(&ev);
    tb_buf_free(&first);
}

static void test_a_record_frames_its_data_with_masked_crcs(void)
{
    tb_buf r = {0};
    tb_record(&r, (const uint8_t *)"abc", 3);
    static const uint8_t want[] = {3, 0, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(r.n, 8 + 4 + 3 + 4);
    CHECK(memcmp(r.p, want, 8) == 0);
    uint32_t crc_len = 0, crc_data = 0;
    for (int i = 0; i < 4; i++) {
        crc_len |= (uint32_t)r.p[8 + i] << (8 * i);
        crc_data |= (uint32_t)r.p[15 + i] << (8 * i);
    }
    CHECK_EQ_INT(crc_len, tb_masked_crc(tb_crc32c(want, 8)));
    CHECK(memcmp(r.p + 12, "abc", 3) == 0);
    CHECK_EQ_INT(crc_data, 0x21f1576eu); /* masked crc32c("abc") = masked 0x364b3fb7 */
    tb_buf_free(&r);
}

static void test_a_histogram_counts_each_finite_value_once(void)
{
    /* 0..30 in 30 buckets of width 1: bucket i holds (i, i + 1], the first
     * also 0; NaN and inf are left out. */
    float v[34];
    for (int i = 0; i <= 30; i++)
        v[i] = (float)i;
    v[31] = NAN, v[32] = INFINITY, v[33] = 30;
    tb_histo h;
    CHECK(tb_histo_of(v, 34, &h));
    CHECK_EQ_INT(h.nb, TB_BUCKETS);
    CHECK(h.min == 0 && h.max == 30 && h.num == 32 && h.sum == 465 + 30);
    CHECK(h.sum_squares == 9455 + 900);
    CHECK(h.count[0] == 2 && h.count[29] == 2 && h.limit[29] == 30);
    double total = 0;
    for (int i = 0; i < h.nb; i++) {
        total += h.count[i];
        CHECK_MSG(h.limit[i] == i + 1, "limit %d is %g", i, h.limit[i]);
        CHECK_MSG(i == 0 || i == 29 || h.count[i] == 1, "bucket %d holds %g", i, h.count[i]);
    }
    CHECK(total == h.num);
    float same[3] = {-2, -2, -2};
    CHECK(tb_histo_of(same, 3, &h) && h.nb == 1 && h.limit[0] == -2 && h.count[0] == 3);
    float none[2] = {NAN, -INFINITY};
    CHECK(!tb_histo_of(none, 2, &h));
}

/* ---------------------------------------------------------------- runs */

/* The accuracy the last run printed, "eval/test_accuracy@STEP=X" into buf. */
static const char *printed_accuracy(char *buf, size_t n, int step)
{
    snprintf(buf, n, "eval/test_accuracy@%d=%.4f", step, cli_value_after("test_accuracy "));
    return buf;
}

static void test_events_hold_the_logs_values_and_the_gradients(void)
{
    char dir[300], log[300], acc[80];
    cli_path(dir, sizeof dir, "runs/plain");
    cli_path(log, sizeof log, "plain.jsonl");
    CLI_OK(RUN_ARGS " --log '%s' --tensorboard '%s'", images, log, dir);
    printed_accuracy(acc, sizeof acc, 16);
    CHECK_MSG(python_run("check '%s' '%s' %s mlp", dir, log, acc) == 0, "%s", cli_out);
    printf("%s", cli_out);
}

/* A gpt in bf16 (no scaler): tokens per second, the validation loss and
 * perplexity; its weights in bf16 without masters, so --health-every's
 * step has the stalled updates. */
static void test_a_gpt_run_shows_its_tokens_and_validation_loss(void)
{
    char dir[300], log[300], text[300], evals[200];
    cli_path(dir, sizeof dir, "runs/gpt");
    cli_path(log, sizeof log, "gpt.jsonl");
    cli_write_tiny_text(cli_path(text, sizeof text, "text.txt"));
    CLI_OK("train --model gpt --data '%s' --layers 1 --width 16 --heads 2 --context 8 --batch 4 --steps 5 "
           "--val-batches 2 --threads 1 --precision bf16 --param-dtype bf16 --master-weights off --health-every 5 "
           "--log '%s' --tensorboard '%s'", text, log, dir);
    const char *at = strstr(cli_out, "val_loss ");
    char loss[32] = "", ppl[32] = "";
    CHECK(at && sscanf(at, "val_loss %31s perplexity %31s", loss, ppl) == 2);
    snprintf(evals, sizeof evals, "eval/val_loss@5=%s,eval/perplexity@5=%s", loss, ppl);
    CHECK_MSG(python_run("check '%s' '%s' %s", dir, log, evals) == 0, "%s", cli_out);
    CHECK_OUT("train/step_ms train/tokens_per_s");
    CHECK_OUT("amp/stalled amp/stalled_worst");
    printf("%s", cli_out);
}

static void test_a_flipped_byte_is_caught_by_tensorboards_reader(void)
{
    char dir[300];
    cli_path(dir, sizeof dir, "runs/flip");
    CLI_OK(RUN_ARGS " --tensorboard '%s'", images, dir);
    CHECK_MSG(python_run("corrupt '%s' '%s'", dir, tmpdir) == 0, "%s", cli_out);
    printf("%s", cli_out);
}

static void test_a_resumed_run_adds_a_file_and_its_steps_go_on(void)
{
    char dir[300], log[300], ck[300], acc1[80], acc2[80];
    cli_path(dir, sizeof dir, "runs/resumed");
    cli_path(log, sizeof log, "resumed.jsonl");
    cli_path(ck, sizeof ck, "ck");
    CLI_OK(RUN_ARGS " --stop-at 8 --save '%s' --log '%s' --tensorboard '%s'", images, ck, log, dir);
    printed_accuracy(acc1, sizeof acc1, 8);
    CLI_OK("train --resume '%s' --threads 1 --health-every 4 --log '%s' --tensorboard '%s'", ck, log, dir);
    printed_accuracy(acc2, sizeof acc2, 16);
    CHECK_MSG(python_run("check '%s' '%s' %s,%s mlp", dir, log, acc1, acc2) == 0, "%s", cli_out);
    CHECK_OUT("2 event files");
    printf("%s", cli_out);
}

static void test_a_directory_that_cannot_take_files_is_refused(void)
{
    char file[300], args[3][700];
    cli_path(file, sizeof file, "a-file");
    test_write_file(file, "x", 1);
    snprintf(args[0], sizeof args[0], "--tensorboard '%s'", file);
    snprintf(args[1], sizeof args[1], "--tensorboard '%s/sub'", file);
    snprintf(args[2], sizeof args[2], "--tensorboard ''");
    const cli_refusal cases[] = {
        {args[0], "exists and is not a directory (nothing was trained)"},
        {args[1], "cannot create the directory: Not a directory"},
        {args[2], "--tensorboard"},
    };
    char prefix[600];
    snprintf(prefix, sizeof prefix, "train --model mlp --data '%s' --hidden 16 --steps 2", images);
    cli_check_refusals(NULL, prefix, CLI_REFUSALS(cases));
    CHECK_MSG(strstr(cli_out, "step 1") == NULL, "a refused run trained:\n%s", cli_out);
    const cli_refusal profile[] = {{"--tensorboard x", "--tensorboard"}};
    cli_check_refusals(NULL, "profile --model mlp --hidden 16", CLI_REFUSALS(profile));
}

/* A file-size limit (SIGXFSZ ignored, so the write fails with EFBIG) stops
 * the events after a few steps: said once, and the run trains on. */
static void test_a_failed_write_is_said_once_and_the_run_goes_on(void)
{
    char dir[300];
    cli_path(dir, sizeof dir, "runs/full");
    int rc = cli_run_env("trap '' XFSZ; ulimit -f 2;", RUN_ARGS " --tensorboard '%s'", images, dir);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, cli_out);
    int said = 0;
    for (const char *p = cli_out; (p = strstr(p, "--tensorboard: cannot write")); p++)
        said++;
    CHECK_MSG(said == 1, "the failure said %d times:\n%s", said, cli_out);
    CHECK_OUT("File too large; no more TensorBoard events are written (the training goes on)");
    CHECK_OUT("test_accuracy");
}

int main(void)
{
    cli_init("tensorboard");
    have_tb = python_find("test_tensorboard.py", "tensorboard, numpy");
    if (!have_tb)
        printf("  no Python that imports tensorboard and numpy ($AMPC_TORCH_PYTHON, python3, .bench-venv; "
               "scripts/torch-deps.sh installs them): the tests that read event files are skipped\n");
    cli_write_noise_images(cli_path(images, sizeof images, "images"), 64, 5);
    RUN(test_crc32c_matches_the_check_value_and_rfc3720);
    RUN(test_varints_are_protobufs);
    RUN(test_events_encode_as_the_protos_say);
    RUN(test_a_record_frames_its_data_with_masked_crcs);
    RUN(test_a_histogram_counts_each_finite_value_once);
    RUN_IF(need_tensorboard, test_events_hold_the_logs_values_and_the_gradients);
    RUN_IF(need_tensorboard, test_a_gpt_run_shows_its_tokens_and_validation_loss);
    RUN_IF(need_tensorboard, test_a_flipped_byte_is_caught_by_tensorboards_reader);
    RUN_IF(need_tensorboard, test_a_resumed_run_adds_a_file_and_its_steps_go_on);
    RUN_IF(cli_have_binary, test_a_directory_that_cannot_take_files_is_refused);
    RUN_IF(cli_have_binary, test_a_failed_write_is_said_once_and_the_run_goes_on);
    cli_cleanup();
    int rc = harness_done();
    return rc == 0 && !have_tb ? 77 : rc;
}
