/*
 * test_cli_knobs.c - the options a nanoGPT recipe sets, through train:
 *
 *   - The lr of every step is nanoGPT's get_lr (train.py): lr * (it + 1) /
 *     (warmup_iters + 1) during the warm-up, then a cosine to min_lr at
 *     lr_decay_iters (= --steps), read from a gpt run's --log.
 *   - --beta1, --beta2, --eps reach Adam, are saved with the run, and are
 *     refused outside [0, 1) / > 0 or with SGD, naming the option.
 *   - By default a parameter of fewer than 2 dimensions (a bias, a norm's
 *     weight) gets no weight decay and the others get --weight-decay, for
 *     every model; --decay-all decays them all.
 *   - --no-bias builds a gpt without bias tensors (--gelu exact with it).
 *   - --warmup-start-factor is refused where the warm-up is 0 steps.
 *   - A checkpoint's settings without "decay-all" and
 *     "warmup-start-factor" (saved before they existed) read back as the
 *     behaviour it ran with: decay on every parameter, a warm-up from lr 0
 *     (and without "no-bias" and "gelu", the gpt with biases and tanh).
 */
#include "test_cli_util.h"

#include "cli.h"
#include "settings.h"
#include "trainer.h"

#include <math.h>

static char tiny[256], text[256];

/* nanoGPT's get_lr (train.py), as written there. */
static double nanogpt_lr(int it, double learning_rate, int warmup_iters, int lr_decay_iters, double min_lr)
{
    if (it < warmup_iters)
        return learning_rate * (it + 1) / (warmup_iters + 1);
    if (it > lr_decay_iters)
        return min_lr;
    double decay_ratio = (double)(it - warmup_iters) / (lr_decay_iters - warmup_iters);
    double coeff = 0.5 * (1.0 + cos(M_PI * decay_ratio));
    return min_lr + coeff * (learning_rate - min_lr);
}

static void test_lr_of_each_step_is_nanogpts_get_lr(void)
{
    enum { STEPS = 24, WARMUP = 5 };
    char log[512];
    cli_path(log, sizeof log, "lr.jsonl");
    CLI_OK("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 2 --val-batches 1 "
           "--threads 1 --precision fp32 --optim adamw --lr 1e-3 --min-lr 1e-4 --warmup %d --steps %d --beta2 0.99 "
           "--log %s",
           text, WARMUP, STEPS, log);
    char *body, *lines[64];
    int n = cli_log_steps(log, lines, 64, &body);
    CHECK_EQ_INT(n, STEPS);
    for (int i = 0; i < n; i++) {
        const char *s = strstr(lines[i], "\"step\":"), *l = strstr(lines[i], "\"lr\":");
        CHECK_MSG(s && l, "log line %d has no step or lr: %s", i, lines[i]);
        if (!s || !l)
            continue;
        int step = atoi(s + 7);
        double lr = strtod(l + 5, NULL), want = nanogpt_lr(step - 1, 1e-3, WARMUP, STEPS, 1e-4);
        /* the log writes 9 significant digits */
        CHECK_MSG(fabs(lr - want) <= 1e-8 * want, "step %d: lr %.9g, nanoGPT's get_lr(%d) %.9g", step, lr, step - 1,
                  want);
    }
    /* the first step's lr is lr / (warmup + 1), not 0 */
    CHECK(n > 0 && strstr(lines[0], "\"lr\":0.000166666667") != NULL);
    free(body);
}

static const cli_refusal refusals[] = {
    {"--beta2 1", "--beta2 1 is out of range (0 <= beta < 1)"},
    {"--beta1 1.5", "out of range (0 to 1)"},
    {"--beta1 -0.1", "out of range (0 to 1)"},
    {"--eps 0", "out of range (1e-30 to 1)"},
    {"--optim sgd --beta2 0.99", "--beta2 applies to --optim adam or adamw only"},
    {"--optim sgd --eps 1e-6", "--eps applies to --optim adam or adamw only"},
    {"--warmup-start-factor 1.5", "out of range (0 to 1)"},
    /* no warm-up for the factor to shape: mlp's default is 0 steps */
    {"--warmup-start-factor 0.5", "but the warm-up is 0 steps (the default for this model)"},
    {"--warmup 0 --warmup-start-factor 0.5", "but the warm-up is 0 steps (--warmup 0)"},
};

static void test_betas_and_eps_out_of_range_are_usage_errors(void)
{
    char prefix[512];
    snprintf(prefix, sizeof prefix, "train --model mlp --data %s --steps 1", tiny);
    cli_check_refusals(NULL, prefix, CLI_REFUSALS(refusals));
}

/* Parses a space-separated command line (at most 64 words) into o and
 * resolves it; -1 when both accept it. o's strings point into a copy of
 * line that lives until the next call. */
static int parse(train_opts *o, const char *line)
{
    static char buf[1024];
    char *argv[64];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    for (char *t = strtok(buf, " "); t && argc < 64; t = strtok(NULL, " "))
        argv[argc++] = t;
    train_opts_default(o);
    int rc = train_parse(argc, argv, o);
    return rc < 0 ? opts_resolve(o) : rc;
}

static void test_betas_eps_and_grouping_are_saved_with_the_run(void)
{
    train_opts o, ck;
    CHECK_EQ_INT(parse(&o, "--model gpt --optim adamw --beta1 0.85 --beta2 0.99 --eps 1e-6 --warmup 100"), -1);
    CHECK(o.beta1 == 0.85 && o.beta2 == 0.99 && o.eps == 1e-6 && !o.decay_all);
    CHECK(o.warmup_start_factor == 1.0 / 101);
    run_info ri = {.vocab = 40};
    char *json = settings_to_json(&o, &ri);
    CHECK(json && strstr(json, "\"beta2\":0.98999999999999999") && strstr(json, "\"decay-all\":false") &&
          strstr(json, "\"warmup-start-factor\":0.0099009900990099011"));
    train_opts_default(&ck);
    run_info back = {0};
    CHECK_EQ_INT(settings_from_json(json, "test", &ck, &back), -1);
    CHECK(ck.beta1 == 0.85 && ck.beta2 == 0.99 && ck.eps == 1e-6 && !ck.decay_all);
    CHECK(ck.warmup_start_factor == 1.0 / 101);
    free(json);
    /* SGD saves no betas */
    CHECK_EQ_INT(parse(&o, "--model mlp --optim sgd --decay-all"), -1);
    json = settings_to_json(&o, &ri);
    CHECK(json && !strstr(json, "beta") && !strstr(json, "\"eps\"") && strstr(json, "\"decay-all\":true"));
    free(json);
    settings_forget();
}

static void test_checkpoint_without_the_records_keeps_decay_all_and_warmup_from_zero(void)
{
    /* the settings an older ampc saved (no decay-all, no warmup-start-factor) */
    const char *old = "{\"ampc\":\"0.1.0\",\"settings\":{\"model\":\"gpt\",\"optim\":\"adamw\",\"lr\":0.002,"
                      "\"weight-decay\":0.10000000000000001,\"schedule\":\"cosine\",\"warmup\":10,\"steps\":50},"
                      "\"run\":{\"features\":0,\"channels\":0,\"height\":0,\"width\":0,\"classes\":0,\"vocab\":40,"
                      "\"sched_step\":20,\"skipped\":0}}";
    train_opts o, ck;
    run_info ri = {0};
    train_opts_default(&ck);
    CHECK_EQ_INT(settings_from_json(old, "old", &ck, &ri), -1);
    CHECK(ck.decay_all);
    CHECK(ck.warmup_start_factor == 0);
    CHECK(!ck.no_bias && strcmp(ck.gelu, "tanh") == 0); /* the gpt it was: biases, tanh GELU */
    /* resumed: the merge keeps them, resolve leaves them */
    train_opts_default(&o);
    o.resume = "somewhere";
    CHECK_EQ_INT(settings_merge(&o, &ck, "old"), -1);
    CHECK_EQ_INT(opts_resolve(&o), -1);
    CHECK(o.decay_all && o.warmup_start_factor == 0);
    amp_sched s = {.kind = AMP_SCHED_CONSTANT, .base_lr = 0.002, .warmup_steps = o.warmup,
                   .warmup_start_factor = o.warmup_start_factor};
    CHECK(amp_sched_lr(&s, 0) == 0);
    settings_forget();
}

/* Each parameter's weight decay in the optimizer train builds for line. */
static void check_grouping(const char *line, const run_info *ri, bool all)
{
    train_opts o;
    CHECK_EQ_INT(parse(&o, line), -1);
    trainer t;
    CHECK(trainer_build(&t, &o, ri, 10));
    int decayed = 0, kept = 0;
    for (int i = 0; i < t.n_params && t.opt; i++) {
        bool matrix = amp_tensor_ndim(t.params[i]) >= 2;
        double wd = amp_optim_weight_decay(t.opt, i), want = matrix || all ? 0.1 : 0;
        CHECK_MSG(wd == want, "%s: parameter %d (%d-D): weight decay %g, want %g", line, i,
                  amp_tensor_ndim(t.params[i]), wd, want);
        decayed += matrix;
        kept += !matrix;
    }
    CHECK_MSG(decayed > 0 && kept > 0, "%s: %d matrices, %d vectors", line, decayed, kept);
    trainer_free(&t);
}

static void test_biases_and_norm_weights_do_not_decay_unless_decay_all(void)
{
    const run_info img = {.features = 784, .channels = 1, .height = 28, .width = 28, .classes = 10};
    const run_info txt = {.vocab = 40};
    check_grouping("--model mlp --optim adamw --weight-decay 0.1", &img, false);
    check_grouping("--model cnn --optim sgd --weight-decay 0.1", &img, false);
    check_grouping("--model gpt --optim adam --weight-decay 0.1", &txt, false);
    check_grouping("--model gpt --optim adamw --weight-decay 0.1 --decay-all", &txt, true);
    check_grouping("--model mlp --optim sgd --weight-decay 0.1 --decay-all", &img, true);
}

static void test_gpt_without_bias_has_no_bias_tensors(void)
{
    const run_info txt = {.vocab = 40};
    const char *lines[] = {"--model gpt --layers 2", "--model gpt --layers 2 --no-bias --gelu exact"};
    const int want[] = {2 + 12 * 2 + 2, 2 + 6 * 2 + 1}; /* gpt.c's count */
    for (int k = 0; k < 2; k++) {
        train_opts o;
        CHECK_EQ_INT(parse(&o, lines[k]), -1);
        trainer t;
        CHECK(trainer_build(&t, &o, &txt, 10));
        CHECK_EQ_INT(t.n_params, want[k]);
        char name[128] = "";
        for (int i = 0; i < t.n_params; i++) {
            const char *n = NULL;
            if (amp_module_param(t.model, i, &n) && n && strstr(n, "bias"))
                snprintf(name, sizeof name, "%s", n);
        }
        CHECK_MSG(k == 0 ? name[0] != 0 : name[0] == 0, "%s: bias tensor '%s'", lines[k], name);
        trainer_free(&t);
    }
    train_opts o;
    CHECK_EQ_INT(parse(&o, "--model mlp --no-bias"), EXIT_USAGE);
}

/* --warmup-start-factor is taken where there is a warm-up for it to start:
 * a gpt's default warm-up is a tenth of --steps (0 below 10 steps). */
static void test_warmup_start_factor_needs_a_warmup(void)
{
    train_opts o;
    CHECK_EQ_INT(parse(&o, "--model mlp --warmup 5 --warmup-start-factor 0.5"), -1);
    CHECK(o.warmup == 5 && o.warmup_start_factor == 0.5);
    CHECK_EQ_INT(parse(&o, "--model gpt --steps 100 --warmup-start-factor 0.5"), -1);
    CHECK(o.warmup == 10 && o.warmup_start_factor == 0.5);
    CHECK_EQ_INT(parse(&o, "--model gpt --steps 9 --warmup-start-factor 0.5"), EXIT_USAGE);
    CHECK_EQ_INT(parse(&o, "--model gpt --steps 9 --warmup 2 --warmup-start-factor 0.5"), -1);
    CHECK_EQ_INT(parse(&o, "--model gpt --steps 9"), -1); /* the default factor alone: no warm-up, no refusal */
    CHECK(o.warmup == 0);
}

int main(void)
{
    cli_init_tiny("test-cli-knobs", tiny, text);
    RUN_IF(cli_have_binary, test_lr_of_each_step_is_nanogpts_get_lr);
    RUN_IF(cli_have_binary, test_betas_and_eps_out_of_range_are_usage_errors);
    RUN(test_betas_eps_and_grouping_are_saved_with_the_run);
    RUN(test_checkpoint_without_the_records_keeps_decay_all_and_warmup_from_zero);
    RUN(test_biases_and_norm_weights_do_not_decay_unless_decay_all);
    RUN(test_gpt_without_bias_has_no_bias_tensors);
    RUN(test_warmup_start_factor_needs_a_warmup);
    cli_cleanup();
    return harness_done();
}
