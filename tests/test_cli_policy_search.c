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
#include "policy_search.h"

#include <math.h>

static char text[256], images[256];

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

/* A file under tmpdir holding text; its path into buf (512 bytes). */
static const char *write_file(char *buf, const char *name, const char *body)
{
    cli_path(buf, 512, name);
    FILE *f = fopen(buf, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(body, f);
        fclose(f);
    }
    return buf;
}

static void test_bad_policy_files_and_module_paths_are_usage_errors(void)
{
    char bad_json[512], bad_op[512], bad_cat[512], bad_mod[512], bad_fmt[512], extra[512];
    write_file(bad_json, "bad_json.json", "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"ops\": {\"linear\": \"fp32\",}}");
    write_file(bad_op, "bad_op.json", "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"ops\": {\"linar\": \"fp32\"}}");
    write_file(bad_cat, "bad_cat.json", "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"ops\": {\"linear\": \"fp33\"}}");
    write_file(bad_mod, "bad_mod.json", "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"modules\": {\"h.7.attn\": \"fp32\"}}");
    write_file(bad_fmt, "bad_fmt.json", "{\"format\": \"torch\", \"version\": 1}");
    write_file(extra, "extra.json", "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"module\": {}}");
    char args[6][1024];
    snprintf(args[0], sizeof args[0], GPT "--steps 2 --policy %s", text, bad_json);
    snprintf(args[1], sizeof args[1], GPT "--steps 2 --policy %s", text, bad_op);
    snprintf(args[2], sizeof args[2], GPT "--steps 2 --policy %s", text, bad_cat);
    snprintf(args[3], sizeof args[3], GPT "--steps 2 --policy %s", text, bad_mod);
    snprintf(args[4], sizeof args[4], GPT "--steps 2 --policy %s", text, bad_fmt);
    snprintf(args[5], sizeof args[5], GPT "--steps 2 --policy %s", text, extra);
    const cli_refusal cases[] = {
        {args[0], "at byte 74: expected a string key"},
        {args[1], "unknown op \"linar\""},
        {args[2], "unknown category \"fp33\""},
        {args[3], "the module path \"h.7.attn\" names no module of this gpt"},
        {args[4], "\"format\" must be \"ampc-autocast-policy\""},
        {args[5], "unknown key \"module\""},
    };
    cli_check_refusals(NULL, "train", CLI_REFUSALS(cases));
    CHECK_EQ_INT(cli_run("train %s", args[3]), 2);
    CHECK_OUT("h.1.mlp.fc2"); /* the refusal lists the model's modules */
    CHECK_EQ_INT(cli_run("train " GPT "--steps 2 --fp32-modules h.0.attn,ln_g", text), 2);
    CHECK_OUT("--fp32-modules: the module path \"ln_g\" names no module");
    CHECK_OUT("h.0.attn.qkv");
    CHECK_EQ_INT(cli_run("profile " GPT "--precision bf16 --fp32-modules h.9", text), 2); /* profile runs it too */
    CHECK_OUT("--fp32-modules: the module path \"h.9\" names no module");
    CHECK_EQ_INT(cli_run("train " GPT "--steps 2 --fp32-modules h.0,,ln_f", text), 2);
    CHECK_OUT("an empty path");
}

static void test_an_mlp_and_a_cnn_name_their_layers_by_index(void)
{
    CLI_OK("train --model mlp --data %s --hidden 8 --steps 2 --batch 8 --threads 1 --fp32-modules 2", images);
    CHECK_OUT("modules in f32: 2");
    CHECK_EQ_INT(cli_run("train --model mlp --data %s --hidden 8 --steps 2 --batch 8 --threads 1 --fp32-modules 1",
                         images),
                 2); /* no module of ampc's mlp runs under 1 */
    CHECK_OUT("the model's modules:\n    0 2\n");
    CLI_OK("train --model cnn --data %s --steps 2 --batch 8 --threads 1 --fp32-modules 0", images);
    CHECK_EQ_INT(cli_run("train --model cnn --data %s --steps 2 --batch 8 --threads 1 --fp32-modules fc", images), 2);
}

static void test_search_refuses_what_it_cannot_search(void)
{
    char args[5][1024];
    snprintf(args[4], sizeof args[4], "search " GPT "--steps 2 --tolerance 0.1 --out %s/no/such/dir/p.json", text,
             tmpdir);
    snprintf(args[0], sizeof args[0], "search " GPT "--steps 2", text);
    snprintf(args[1], sizeof args[1], "search " GPT "--steps 2 --tolerance 0.1 --precision fp32", text);
    snprintf(args[2], sizeof args[2], "search " GPT "--steps 2 --tolerance 0.1 --fp32-modules ln_f", text);
    snprintf(args[3], sizeof args[3], "search " GPT "--steps 2 --tolerance -1", text);
    const cli_refusal cases[] = {
        {args[0], "give --tolerance T"},
        {args[1], "--precision fp32 has nothing to search"},
        {args[2], "--fp32-modules is not a policy search option"},
        {args[3], "--tolerance"},
        {args[4], "cannot write into"},
    };
    cli_check_refusals(NULL, "policy", CLI_REFUSALS(cases));
}

/* A log's start record (its first line), into buf. */
static void start_record(const char *log, char *buf, size_t n)
{
    size_t len;
    char *body = cli_read_file(log, &len);
    CHECK(body != NULL);
    buf[0] = '\0';
    if (body) {
        size_t k = strcspn(body, "\n");
        snprintf(buf, n, "%.*s", (int)k, body);
    }
    free(body);
}

static void test_the_log_checkpoint_resume_and_eval_keep_the_policy(void)
{
    char pol[512], ck[512], log[512], rec[1024];
    write_file(pol, "run.json",
               "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"modules\": {\"ln_f\": \"fp32\"}, "
               "\"ops\": {\"softmax\": \"lower\"}}");
    cli_path(ck, sizeof ck, "run");
    cli_path(log, sizeof log, "run.jsonl");
    CLI_OK("train " GPT "--steps 4 --stop-at 2 --val-batches 1 --fp32-modules h.0.attn --policy %s --save %s --log %s",
           text, pol, ck, log);
    CHECK_OUT("modules in f32: ln_f,h.0.attn; ops: softmax=lower");
    start_record(log, rec, sizeof rec);
    char want[1024];
    snprintf(want, sizeof want,
             "{\"event\":\"start\",\"fp32_modules\":\"ln_f,h.0.attn\",\"autocast_ops\":\"softmax=lower\","
             "\"policy_file\":\"%s\",\"policy_hash\":\"",
             pol);
    CHECK_MSG(strncmp(rec, want, strlen(want)) == 0, "start record %s", rec);
    CHECK_EQ_INT((int)strlen(rec), (int)strlen(want) + 16 + 2); /* 16 hex digits, "} */
    double steps[8];
    CHECK_EQ_INT(cli_log_field(log, "step", steps, NULL, 8), 2);
    /* The resumed run reads the saved policy and appends to the log. */
    CLI_OK("train --resume %s --log %s", ck, log);
    CHECK_OUT("modules in f32: ln_f,h.0.attn; ops: softmax=lower");
    CHECK_EQ_INT(cli_log_field(log, "step", steps, NULL, 8), 4);
    char *body = cli_read_file(log, NULL), *second = body ? strstr(body + 1, "{\"event\":\"start\"") : NULL;
    CHECK_MSG(second && strncmp(second, want, strlen(want)) == 0, "no second start record in:\n%s", body ? body : "");
    free(body);
    /* A policy file changed since the save is refused on resume, unless given anew. */
    CLI_OK("train --resume %s --steps 6 --stop-at 5", ck);
    write_file(pol, "run.json",
               "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"modules\": {\"ln_f\": \"fp32\"}}");
    CHECK_EQ_INT(cli_run("train --resume %s --steps 6", ck), 2);
    CHECK_OUT("the policy file");
    CHECK_OUT("changed since the run saved it");
    CLI_OK("train --resume %s --steps 6 --policy %s", ck, pol);
    CHECK_OUT("modules in f32: ln_f,h.0.attn; ops: the built-in categories");
    /* eval measures with it: a path it lacks, given anew, is refused */
    CLI_OK("eval %s", ck);
    double with = cli_value_after("val_loss ");
    CHECK_EQ_INT(cli_run("eval %s --fp32-modules h.9", ck), 2);
    CHECK_OUT("\"h.9\" names no module");
    CLI_OK("eval %s --fp32-modules h", ck);
    double all = cli_value_after("val_loss ");
    CHECK_MSG(isfinite(with) && isfinite(all) && with > 0, "val_loss %g, all blocks in f32 %g", with, all);
}

static void test_policy_file_round_trip_and_apply(void)
{
    policy p = {0}, q;
    const amp_cast_category softmax = amp_autocast_category("softmax", AMP_CPU);
    CHECK(softmax != AMP_CAST_LOWER);
    CHECK(policy_add_module(&p, "h.0.attn") == AMP_OK);
    CHECK(policy_add_module(&p, "h.0.attn") == AMP_OK); /* a repeat is one */
    CHECK(policy_add_module(&p, "ln_f") == AMP_OK);
    CHECK(policy_add_module(&p, "") == AMP_ERR_ARG);
    CHECK(policy_set_op(&p, "linear", AMP_CAST_FP32) == AMP_OK);
    CHECK(policy_set_op(&p, "softmax", AMP_CAST_LOWER) == AMP_OK);
    CHECK(policy_set_op(&p, "linear", AMP_CAST_NONE) == AMP_OK); /* replaces */
    CHECK(policy_set_op(&p, "linar", AMP_CAST_FP32) == AMP_ERR_ARG);
    CHECK(policy_set_op(&p, "add", AMP_CAST_BANNED) == AMP_ERR_ARG);
    char *text = policy_to_json(&p);
    CHECK(text != NULL);
    CHECK_MSG(text && strcmp(text, "{\"format\": \"ampc-autocast-policy\", \"version\": 1,\n"
                                   " \"modules\": {\"h.0.attn\": \"fp32\", \"ln_f\": \"fp32\"},\n"
                                   " \"ops\": {\"linear\": \"none\", \"softmax\": \"lower\"}}\n") == 0,
              "written: %s", text ? text : "(null)");
    CHECK(text && policy_parse(text, strlen(text), "t", &q) == AMP_OK);
    CHECK_EQ_INT(q.n_modules, 2);
    CHECK_EQ_INT(q.n_ops, 2);
    free(text);
    policy_free(&q);

    CHECK(policy_apply(&p, AMP_CPU) == AMP_OK);
    CHECK_EQ_INT(amp_autocast_category("linear", AMP_CPU), AMP_CAST_NONE);
    CHECK_EQ_INT(amp_autocast_category("softmax", AMP_CPU), AMP_CAST_LOWER);
    CHECK_EQ_INT(amp_autocast_category("linear", AMP_CUDA), AMP_CAST_LOWER); /* only the run's device */
    CHECK_EQ_INT((int)amp_autocast_fp32_module_hits(1), 0);
    CHECK_EQ_INT((int)amp_autocast_fp32_module_hits(2), -1); /* two modules set */
    policy_reset(AMP_CPU);
    CHECK_EQ_INT(amp_autocast_category("linear", AMP_CPU), AMP_CAST_LOWER);
    CHECK_EQ_INT(amp_autocast_category("softmax", AMP_CPU), softmax);
    CHECK_EQ_INT((int)amp_autocast_fp32_module_hits(0), -1);
    policy_free(&p);

    const char *m = "{\"version\": 1, \"format\": \"ampc-autocast-policy\", \"modules\": {\"a\": \"bf16\"}}";
    CHECK(policy_parse(m, strlen(m), "m.json", &q) == AMP_ERR_FORMAT);
    CHECK_MSG(strstr(amp_last_error(), "m.json: \"modules\": \"a\": the value must be \"fp32\"") != NULL, "%s",
              amp_last_error());
    CHECK_EQ_INT(q.n_modules, 0);
    CHECK(policy_parse("{\"format\": \"ampc-autocast-policy\", \"version\": 2}", 48, "v.json", &q) == AMP_ERR_FORMAT);
    CHECK(strstr(amp_last_error(), "\"version\" must be 1") != NULL);
    const char *d = "{\"format\": \"ampc-autocast-policy\", \"version\": 1, \"ops\": {\"gelu\": \"none\", \"gelu\": "
                    "\"fp32\"}}";
    CHECK(policy_parse(d, strlen(d), "d.json", &q) == AMP_ERR_FORMAT);
    CHECK_MSG(strstr(amp_last_error(), "\"gelu\" is given twice") != NULL, "%s", amp_last_error());
}

/* A made-up run for the greedy search: the loss is 1 (the fp32 run's)
 * plus what the picked moves leave unfixed, each policy tried recorded. */
typedef struct {
    double (*loss)(const bool *has); /* has[k]: move k is in the policy */
    int n_tried;
    char tried[16][64];
} fake_run;

static int fake_trial(void *ctx, const search_move *m, const int *pick, int n, search_outcome *out)
{
    fake_run *f = ctx;
    bool has[8] = {0};
    char *t = f->tried[f->n_tried < 16 ? f->n_tried : 15];
    t[0] = '\0';
    for (int i = 0; i < n; i++) {
        has[pick[i]] = true;
        snprintf(t + strlen(t), 64 - strlen(t), "%s%s", i ? "+" : "", m[pick[i]].path);
    }
    f->n_tried++;
    *out = (search_outcome){.loss = f->loss(has), .step_ms = 1};
    return -1;
}

static search_move move(const char *path, double score)
{
    search_move m = {.op = -1, .score = score};
    snprintf(m.path, sizeof m.path, "%s", path);
    return m;
}

/* Two faults: b fixes one, c the other; a fixes nothing. */
static double two_faults(const bool *has) { return 1 + (has[1] ? 0 : 0.5) + (has[2] ? 0 : 0.5); }
/* a fixes part of the fault, b all of it. */
static double b_fixes_all(const bool *has) { return 1 + (has[1] ? 0 : has[0] ? 0.8 : 1.0); }
/* h.0 fixes part, x the rest; anything inside h.0 would fix it too. */
static double h0_and_x(const bool *has) { return 1 + (has[0] ? 0 : 0.4) + (has[1] ? 0 : 0.3) + (has[2] ? 0 : 0.3); }

static void test_greedy_keeps_what_helps_and_drops_what_is_not_needed(void)
{
    int pick[8], n;
    search_outcome best;
    bool found;
    const search_outcome full = {.loss = 2.0, .step_ms = 1};

    search_move m1[] = {move("a", 0.1), move("b", 0.2), move("c", 0.3)};
    fake_run f = {.loss = two_faults};
    search_plan sp = {.ref_loss = 1, .tolerance = 0.01, .max_trials = 16, .trial = fake_trial, .ctx = &f};
    CHECK_EQ_INT(policy_search_greedy(&sp, m1, 3, full, pick, &n, &best, &found), -1);
    CHECK(found);
    CHECK_EQ_INT(n, 2);
    CHECK(n == 2 && pick[0] == 1 && pick[1] == 2);
    CHECK_NEAR(best.loss, 1.0, 0);
    CHECK_EQ_INT(sp.trials, 4); /* a (not kept), b, b+c, then c alone (b still needed) */
    CHECK_EQ_INT(f.n_tried, 4);
    CHECK(strcmp(f.tried[0], "a") == 0 && strcmp(f.tried[2], "b+c") == 0 && strcmp(f.tried[3], "c") == 0);

    search_move m2[] = {move("a", 0.1), move("b", 0.2)};
    f = (fake_run){.loss = b_fixes_all};
    sp = (search_plan){.ref_loss = 1, .tolerance = 0.01, .max_trials = 16, .trial = fake_trial, .ctx = &f};
    CHECK_EQ_INT(policy_search_greedy(&sp, m2, 2, full, pick, &n, &best, &found), -1);
    CHECK(found);
    CHECK_EQ_INT(n, 1); /* a helped on the way, and is dropped */
    CHECK(n == 1 && pick[0] == 1);
    CHECK_EQ_INT(sp.trials, 3);
}

static void test_greedy_skips_moves_inside_a_kept_module_and_stops(void)
{
    int pick[8], n;
    search_outcome best;
    bool found;
    search_move m[] = {move("h.0", 0.1), move("x", 0.2), move("h.0.mlp", 0.3), move("y", 0.4)};
    fake_run f = {.loss = h0_and_x};
    /* h0_and_x reads has[2] as a third fault that only "h.0.mlp" fixes: with
     * h.0 kept, h.0.mlp is never tried (h.0 already covers it). */
    search_plan sp = {.ref_loss = 1, .tolerance = 0.01, .max_trials = 16, .trial = fake_trial, .ctx = &f};
    CHECK_EQ_INT(policy_search_greedy(&sp, m, 4, (search_outcome){.loss = 2.0}, pick, &n, &best, &found), -1);
    for (int i = 0; i < f.n_tried && i < 16; i++)
        CHECK_MSG(strstr(f.tried[i], "h.0.mlp") == NULL, "tried %s", f.tried[i]);
    CHECK(!found); /* the fault only h.0.mlp fixes stays */
    CHECK_EQ_INT(n, 2);

    /* The trials run out. */
    f = (fake_run){.loss = two_faults};
    search_move m1[] = {move("a", 0.1), move("b", 0.2), move("c", 0.3)};
    sp = (search_plan){.ref_loss = 1, .tolerance = 0.01, .max_trials = 2, .trial = fake_trial, .ctx = &f};
    CHECK_EQ_INT(policy_search_greedy(&sp, m1, 3, (search_outcome){.loss = 2.0}, pick, &n, &best, &found), -1);
    CHECK(!found);
    CHECK_EQ_INT(sp.trials, 2);

    /* Full autocast within the tolerance: nothing to try. */
    f = (fake_run){.loss = two_faults};
    sp = (search_plan){.ref_loss = 1, .tolerance = 0.01, .max_trials = 16, .trial = fake_trial, .ctx = &f};
    CHECK_EQ_INT(policy_search_greedy(&sp, m1, 3, (search_outcome){.loss = 1.005}, pick, &n, &best, &found), -1);
    CHECK(found);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(f.n_tried, 0);
}

int main(void)
{
    cli_init_tiny("test-cli-policy-search", images, text);
    RUN(test_policy_file_round_trip_and_apply);
    RUN(test_greedy_keeps_what_helps_and_drops_what_is_not_needed);
    RUN(test_greedy_skips_moves_inside_a_kept_module_and_stops);
    RUN_IF(cli_have_binary, test_bad_policy_files_and_module_paths_are_usage_errors);
    RUN_IF(cli_have_binary, test_an_mlp_and_a_cnn_name_their_layers_by_index);
    RUN_IF(cli_have_binary, test_search_refuses_what_it_cannot_search);
    RUN_IF(cli_have_binary, test_the_log_checkpoint_resume_and_eval_keep_the_policy);
    RUN_IF(cli_have_binary, test_search_keeps_only_the_overflowing_layer_in_f32);
    cli_cleanup();
    return harness_done();
}
