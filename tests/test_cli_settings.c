/*
 * test_cli_settings.c - the train command's parts, in process (the tests
 * link the CLI's library): options round-trip through a checkpoint's
 * settings JSON exactly; a saved value goes through the command line's
 * checks; the resume merge (checkpoint's settings, given options on top,
 * shape conflicts refused, the run length as one choice); and the data
 * order (a training batch is a function of (seed, micro-batch) alone; an
 * epoch visits every row once).
 */
#include "harness.h"

#include "cli.h"
#include "data.h"
#include "settings.h"

#include <stdlib.h>

/* Parses a space-separated command line (at most 64 words) into o. */
static int parse(train_opts *o, char *line)
{
    char *argv[64];
    int argc = 0;
    for (char *t = strtok(line, " "); t && argc < 64; t = strtok(NULL, " "))
        argv[argc++] = t;
    train_opts_default(o);
    return train_parse(argc, argv, o);
}

static void test_options_round_trip_through_the_settings_json(void)
{
    const char *lines[] = {
        "--model mlp --hidden 300,20,7 --optim sgd --lr 0.0123456789012345 --momentum 0.85 --weight-decay 0.001 "
        "--schedule step --step-size 7 --gamma 0.5 --batch 33 --accum 3 --epochs 4 --seed 18446744073709551615 "
        "--precision fp16 --init-scale 1024 --growth-interval 9 --clip 2.5 --data /some/where",
        "--model gpt --layers 3 --heads 2 --width 24 --context 16 --mlp-width 40 --dropout 0.25 --optim adamw "
        "--schedule cosine --warmup 5 --min-lr 1e-5 --steps 77 --precision fp16 --no-scaler --val-batches 3",
        "--model cnn --precision bf16",
        "--model mlp --hidden none --precision fp32",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", lines[i]);
        train_opts o, ck;
        CHECK_EQ_INT(parse(&o, buf), -1);
        CHECK_EQ_INT(opts_resolve(&o), -1);
        run_info ri = {.features = 784, .channels = 1, .height = 28, .width = 28, .classes = 10, .vocab = 0,
                       .sched_step = 41, .skipped = 3};
        char *json = settings_to_json(&o, &ri);
        CHECK(json != NULL);
        if (!json)
            continue;
        train_opts_default(&ck);
        run_info back = {0};
        CHECK_EQ_INT(settings_from_json(json, "test", &ck, &back), -1);
        CHECK(memcmp(&ri, &back, sizeof ri) == 0);
        /* Everything saved reads back the same: the same JSON again. */
        char *again = settings_to_json(&ck, &back);
        CHECK_MSG(again && strcmp(json, again) == 0, "line %zu:\n  %s\n  %s", i, json, again ? again : "(null)");
        if (i == 0) {
            CHECK(ck.seed == UINT64_MAX);
            CHECK(ck.lr == 0.0123456789012345); /* exact, not rounded */
            CHECK_EQ_INT(ck.n_hidden, 3);
            CHECK_EQ_INT(ck.hidden[2], 7);
        }
        if (i == 3)
            CHECK_EQ_INT(ck.n_hidden, 0);
        free(json);
        free(again);
    }
}

static void test_saved_values_pass_the_command_line_checks(void)
{
    const char *bad[] = {
        "{\"ampc\":\"0.1.0\",\"settings\":{\"batch\":0},\"run\":{}}",               /* out of range */
        "{\"ampc\":\"0.1.0\",\"settings\":{\"model\":\"resnet\"},\"run\":{}}",      /* unknown choice */
        "{\"ampc\":\"0.1.0\",\"settings\":{\"frobnicate\":1},\"run\":{}}",          /* unknown option */
        "{\"ampc\":\"0.1.0\",\"settings\":{\"save\":\"x\"},\"run\":{}}",            /* not a saved option */
        "{\"ampc\":\"0.1.0\",\"settings\":{\"hidden\":[8,\"x\"]},\"run\":{}}",      /* a list of non-numbers */
        "{\"ampc\":\"0.1.0\",\"settings\":{},\"run\":{\"features\":-1}}",           /* negative run value */
        "{\"ampc\":\"0.1.0\",\"settings\":{}}",                                     /* no run */
        "{\"settings\":{\"batch\":", /* cut short */
        "not json",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        train_opts ck;
        run_info ri = {0};
        train_opts_default(&ck);
        CHECK_MSG(settings_from_json(bad[i], "test", &ck, &ri) == 1, "accepted: %s", bad[i]);
    }
}

/* Found by fuzz/fuzz_settings: past the 128th value read in a process,
 * settings_from_json's copies were lost (a leak under make asan); now
 * every string is kept until settings_forget, numbers are not copied. */
static void test_settings_read_many_times_keep_their_strings_until_forget(void)
{
    enum { N = 200 };
    static train_opts ck[N];
    for (int i = 0; i < N; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"settings\":{\"model\":\"mlp\",\"data\":\"/data/%d\",\"batch\":%d,\"optim\":\"sgd\"},"
                 "\"run\":{\"features\":4,\"channels\":1,\"height\":2,\"width\":2,\"classes\":3,\"vocab\":0,"
                 "\"sched_step\":0,\"skipped\":0}}",
                 i, i + 1);
        run_info ri = {0};
        train_opts_default(&ck[i]);
        CHECK_EQ_INT(settings_from_json(json, "test", &ck[i], &ri), -1);
    }
    for (int i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof want, "/data/%d", i);
        CHECK_MSG(strcmp(ck[i].data, want) == 0 && strcmp(ck[i].model, "mlp") == 0 && ck[i].batch == i + 1,
                  "settings %d: data %s model %s batch %lld", i, ck[i].data, ck[i].model, (long long)ck[i].batch);
    }
    settings_forget();
}

/* Found by fuzz/fuzz_settings: settings that name no --data for an mlp
 * (a checkpoint written by hand, or cut) were read, but writing them back
 * read the missing path through a NULL pointer. A text option without a
 * value is now left out, and the round trip holds. */
static void test_settings_without_a_data_path_write_back(void)
{
    const char *json = "{\"ampc\":\"0.1.0\",\"settings\":{\"model\":\"mlp\",\"hidden\":[16,8,4],\"epochs\":2,\"opt"
                       "im\":\"sgd\",\"momentum\":0.5,\"data-bin\":\"step\",\"step-size\":10,\"gamma\":0.5,\"clip\""
                       ":1.5,\"seed\":18446744073709551615,\"precision\":\"fp16\",\"no-scaler\":true},\"run\":{\"f"
                       "eatures\":4,\"channels\":1,\"height\":2,\"width\":2,\"classes\":3,\"vocab\":0,\"sched_step"
                       "\":0,\"skipped\":0}}";
    train_opts ck, o, back;
    run_info ri = {0}, ri2 = {0};
    train_opts_default(&ck);
    CHECK_EQ_INT(settings_from_json(json, "test", &ck, &ri), -1);
    /* as a resume resolves them */
    train_opts_default(&o);
    o.resume = "test";
    CHECK_EQ_INT(settings_merge(&o, &ck, "test"), -1);
    CHECK_EQ_INT(opts_resolve(&o), -1);
    char *out = settings_to_json(&o, &ri);
    CHECK(out != NULL);
    if (out) {
        CHECK_MSG(strstr(out, "\"data\"") == NULL, "a missing data path written: %s", out);
        train_opts_default(&back);
        CHECK_EQ_INT(settings_from_json(out, "test (written back)", &back, &ri2), -1);
        char *again = settings_to_json(&back, &ri2);
        CHECK(again && strcmp(out, again) == 0);
        free(again);
    }
    free(out);
    settings_forget();
}

static void test_resume_merge_keeps_shape_and_takes_given_options(void)
{
    char a[512], b[512];
    train_opts ck, o;
    snprintf(a, sizeof a, "--model mlp --hidden 64,32 --lr 0.5 --optim sgd --batch 10 --epochs 5 --seed 9");
    CHECK_EQ_INT(parse(&ck, a), -1);
    CHECK_EQ_INT(opts_resolve(&ck), -1);

    /* Given: a new lr and length; the rest comes from the checkpoint. */
    snprintf(b, sizeof b, "--lr 0.25 --steps 7");
    CHECK_EQ_INT(parse(&o, b), -1);
    CHECK_EQ_INT(settings_merge(&o, &ck, "ck"), -1);
    CHECK_EQ_INT(opts_resolve(&o), -1);
    CHECK(strcmp(o.model, "mlp") == 0 && strcmp(o.optim, "sgd") == 0);
    CHECK_EQ_INT(o.n_hidden, 2);
    CHECK_EQ_INT(o.hidden[0], 64);
    CHECK_NEAR(o.lr, 0.25, 0);
    CHECK_EQ_INT(o.batch, 10);
    CHECK(o.seed == 9);
    CHECK_EQ_INT(o.steps, 7);
    CHECK_EQ_INT(o.epochs, 0); /* the length is one choice: --steps replaced --epochs */

    /* Nothing given: the checkpoint's length. */
    snprintf(b, sizeof b, "--threads 1");
    CHECK_EQ_INT(parse(&o, b), -1);
    CHECK_EQ_INT(settings_merge(&o, &ck, "ck"), -1);
    CHECK_EQ_INT(o.epochs, 5);
    CHECK_EQ_INT(o.steps, 0);

    /* The same shape again is fine; another is refused. */
    const char *same[] = {"--hidden 64,32", "--model mlp", "--optim sgd"};
    const char *other[] = {"--hidden 64,33", "--hidden 64", "--model cnn", "--optim adam"};
    for (int i = 0; i < 3; i++) {
        snprintf(b, sizeof b, "%s", same[i]);
        CHECK_EQ_INT(parse(&o, b), -1);
        CHECK_MSG(settings_merge(&o, &ck, "ck") == -1, "refused %s", same[i]);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(b, sizeof b, "%s", other[i]);
        CHECK_EQ_INT(parse(&o, b), -1);
        CHECK_MSG(settings_merge(&o, &ck, "ck") == EXIT_USAGE, "accepted %s", other[i]);
    }
}

/* A dataset of n rows whose single feature is the row number. */
static dataset numbered(int64_t n)
{
    dataset d = {.n = n, .features = 1, .classes = 1, .height = 1, .width = 1};
    d.x = amp_arange(0, (double)n, 1, AMP_F32);
    d.y = amp_zeros(AMP_SHAPE(n), AMP_I64);
    return d;
}

static void test_a_training_batch_depends_on_seed_and_step_only(void)
{
    dataset d = numbered(20);
    batcher seq, fresh;
    CHECK(batcher_init(&seq, &d, 4, false, false));
    seq.seed = 5;
    /* Epoch 0 and 1 (5 batches each): every row once per epoch. */
    float first[10][4];
    for (int64_t m = 0; m < 10; m++) {
        amp_tensor *x, *y;
        CHECK(batcher_train(&seq, &d, m, &x, &y));
        amp_tensor_copy_out(x, first[m], AMP_F32);
    }
    for (int e = 0; e < 2; e++) {
        int seen[20] = {0};
        for (int k = 0; k < 5; k++)
            for (int r = 0; r < 4; r++)
                seen[(int)first[e * 5 + k][r]]++;
        for (int i = 0; i < 20; i++)
            CHECK_EQ_INT(seen[i], 1);
    }
    CHECK(memcmp(first[0], first[5], sizeof first[0]) != 0 || memcmp(first[1], first[6], sizeof first[1]) != 0);
    /* A fresh batcher asked for micro-batch 7 directly (a resumed run)
     * gives the same rows; another seed gives another order. */
    CHECK(batcher_init(&fresh, &d, 4, false, false));
    fresh.seed = 5;
    amp_tensor *x, *y;
    float got[4];
    CHECK(batcher_train(&fresh, &d, 7, &x, &y));
    amp_tensor_copy_out(x, got, AMP_F32);
    CHECK(memcmp(got, first[7], sizeof got) == 0);
    fresh.seed = 6;
    fresh.epoch = -1;
    bool differs = false;
    for (int64_t m = 0; m < 5; m++) {
        CHECK(batcher_train(&fresh, &d, m, &x, &y));
        amp_tensor_copy_out(x, got, AMP_F32);
        differs |= memcmp(got, first[m], sizeof got) != 0;
    }
    CHECK(differs);
    batcher_free(&seq);
    batcher_free(&fresh);
    dataset_free(&d);
}

int main(void)
{
    RUN(test_options_round_trip_through_the_settings_json);
    RUN(test_saved_values_pass_the_command_line_checks);
    RUN(test_settings_read_many_times_keep_their_strings_until_forget);
    RUN(test_settings_without_a_data_path_write_back);
    RUN(test_resume_merge_keeps_shape_and_takes_given_options);
    RUN(test_a_training_batch_depends_on_seed_and_step_only);
    return harness_done();
}
