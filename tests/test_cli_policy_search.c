/*
 * test_cli_policy_search.c - `ampc policy search`, `train --policy` and
 * `train --fp32-modules` as a user runs them: on a gpt built to break in
 * f16 (one layer, h.0.mlp.fc2, whose weights are scaled past f16's
 * 65504), the search keeps exactly that layer in f32, its training stays
 * within the tolerance of fp32's and full autocast's does not; policy
 * files that are malformed or name what the model lacks are refused with
 * exit 2 naming the file, the byte or the name; the run's log and
 * checkpoint record the policy, and a resumed run and eval keep it. Also
 * the policy file's reader, writer and apply (tools/policy_file.c).
 */
#include "test_cli_util.h"

#include "policy_file.h"

#include <math.h>

static char text[256];

#define GPT "--model gpt --data %s --layers 2 --heads 2 --width 16 --context 8 --batch 4 --threads 1 --lr 1e-3 "

/* The gpt whose h.0.mlp.fc2 overflows f16: a trained-for-one-step
 * checkpoint (ampc train --save) with that layer's weights scaled by 1e7
 * (to about 2e5: past 65504, finite in f32 and bf16), saved back through
 * the library as the directory dir. */
static void make_broken_gpt(const char *dir)
{
    CLI_OK("train " GPT "--precision fp32 --steps 1 --val-batches 1 --save %s", text, dir);
    char path[600];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    char *settings = NULL;
    int64_t step = 0;
    /* The run's vocabulary: settings' "run":{..."vocab":N} (cli_write_tiny_text's characters). */
    amp_gpt_config c = {.vocab = 0, .context = 8, .width = 16, .layers = 2, .heads = 2, .mlp = 64};
    size_t len;
    char *raw = cli_read_file(path, &len);
    CHECK(raw != NULL);
    const char *v = raw && len > 8 ? strstr(raw + 8, "vocab\\\":") : NULL; /* (after the header size) */
    CHECK(v != NULL);
    c.vocab = v ? atoll(v + 8) : 0;
    free(raw);
    amp_module *m = amp_model_gpt(c);
    CHECK(m != NULL);
    CHECK(amp_checkpoint_load(path, m, NULL, NULL, &step, &settings) == AMP_OK);
    int scaled = 0;
    for (int i = 0; i < amp_module_num_params(m); i++) {
        const char *name;
        amp_tensor *w = amp_module_param(m, i, &name);
        if (strcmp(name, "h.0.mlp.fc2.weight") != 0)
            continue;
        float *p = amp_tensor_data(w);
        for (int64_t k = 0; k < amp_tensor_numel(w); k++)
            p[k] *= 1e7f;
        scaled++;
    }
    CHECK_EQ_INT(scaled, 1);
    CHECK(amp_checkpoint_save(path, m, NULL, NULL, step, settings) == AMP_OK);
    free(settings);
    amp_module_free(m);
}

/* The mean "loss" of the last quarter of a log's step lines (as the
 * search measures a trial); NAN when one is null. */
static double final_loss(const char *log)
{
    double vals[256];
    int n = cli_log_field(log, "loss", vals, NULL, 256);
    CHECK(n > 0);
    int last = n - (n + 3) / 4;
    double sum = 0;
    for (int i = last; i < n; i++)
        sum += vals[i];
    return n > 0 ? sum / (n - last) : NAN;
}

static void test_search_keeps_only_the_overflowing_layer_in_f32(void)
{
    char init[512], out[512], log[512];
    cli_path(init, sizeof init, "broken");
    cli_path(out, sizeof out, "found.json");
    make_broken_gpt(init);
    const double tol = 0.05;
    CLI_OK("policy search " GPT "--init-from %s --precision fp16 --steps 12 --tolerance %g --out %s", text, init,
           tol, out);
    CHECK_OUT("full autocast");
    CHECK_OUT("vs autocast");
    CHECK_OUT("f32 h.0.mlp.fc2");
    policy p;
    CHECK(policy_read(out, &p, NULL) == AMP_OK);
    CHECK_EQ_INT(p.n_modules, 1);
    CHECK_MSG(p.n_modules == 1 && strcmp(p.modules[0], "h.0.mlp.fc2") == 0, "the policy keeps %s",
              p.n_modules ? p.modules[0] : "nothing");
    CHECK_EQ_INT(p.n_ops, 0);
    policy_free(&p);

    /* The policy's training against fp32's and full autocast's, by train. */
    cli_path(log, sizeof log, "fp32.jsonl");
    CLI_OK("train " GPT "--init-from %s --precision fp32 --steps 12 --val-batches 1 --log %s", text, init, log);
    double l32 = final_loss(log);
    cli_path(log, sizeof log, "policy.jsonl");
    CLI_OK("train " GPT "--init-from %s --precision fp16 --steps 12 --val-batches 1 --policy %s --log %s", text,
           init, out, log);
    double lp = final_loss(log);
    CHECK_MSG(fabs(lp - l32) <= tol * fabs(l32), "the policy's loss %g, fp32's %g", lp, l32);
    cli_path(log, sizeof log, "full.jsonl");
    cli_run("train " GPT "--init-from %s --precision fp16 --steps 12 --val-batches 1 --log %s", text, init, log);
    double lf = final_loss(log);
    CHECK_MSG(!(fabs(lf - l32) <= tol * fabs(l32)), "full autocast's loss %g is within %g of fp32's %g", lf, tol,
              l32);
}

int main(void)
{
    cli_init_tiny("test-cli-policy-search", NULL, text);
    RUN_IF(cli_have_binary, test_search_keeps_only_the_overflowing_layer_in_f32);
    cli_cleanup();
    return harness_done();
}
