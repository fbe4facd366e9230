/*
 * test_cli_audit.c - the precision audit: the library's comparison
 * (amp_audit_compare_tensors) on values whose errors are known, its
 * recorder on a model (an fp32 reference against the same model under
 * bf16 autocast: autocast's casts passed over, every call matched), and
 * `ampc audit` through the program on tiny data sets:
 *
 *   - in fp32 every error of every site, forward and backward, is exactly
 *     0, for mlp, cnn and gpt (with dropout, checkpointed blocks and
 *     accumulation too), and no update stalls;
 *   - in bf16 the lowered ops (linear, attention) show an error, and the
 *     f32 ops (layer_norm, cross_entropy) are there with what their inputs
 *     carried; the sites come worst first;
 *   - the table shows the JSON's numbers; the JSON and the SVG are read
 *     by Python's json and xml.etree where a python3 has them;
 *   - bf16 weights with a small lr stall (most updated elements do not
 *     change), f32 weights with the same lr do not;
 *   - bad arguments exit 2 naming what was wrong.
 */
#include "test_cli_util.h"

#include "io/json.h"

#include <math.h>

static char images[256], text[256];

/* ------------------------------------------------------------ the library */

static amp_tensor *tensor_of(amp_dtype dt, const float *v, int64_t n)
{
    amp_tensor *t = amp_empty(AMP_SHAPE(n), dt);
    CHECK(t != NULL);
    if (t)
        CHECK_OK(amp_tensor_copy_in(t, v, AMP_F32));
    return t;
}

static void test_compare_counts_flushes_subnormals_overflows_and_relative_error(void)
{
    /* f16: 1e-8 flushes to 0 (below half of 2^-24), 65536 overflows to
     * inf, 1e-5 is subnormal (below 2^-14) and stands for a reference of 5. */
    const float ref[5] = {1.0f, 3.0f, 1e-8f, 1.0f, 5.0f}, got[5] = {1.0f, 3.0f, 1e-8f, 65536.0f, 1e-5f};
    amp_tensor *s = tensor_of(AMP_F32, ref, 5), *a = tensor_of(AMP_F16, got, 5);
    amp_audit_site st = {0};
    CHECK_OK(amp_audit_compare_tensors(a, s, &st));
    CHECK_EQ_INT(st.values, 5);
    CHECK_EQ_INT(st.finite, 4); /* the inf is no relative error */
    CHECK_EQ_INT(st.flushed, 1);
    CHECK_EQ_INT(st.subnormal, 1);
    CHECK_EQ_INT(st.overflow, 1);
    CHECK_EQ_INT(st.dtype, AMP_F16);
    /* f16's 1e-5 is 168 * 2^-24; the 0 against 1e-8 is measured at the
     * tensor's scale, 1e-3 * 5. */
    const double sub = 168.0 * 0x1p-24, rel4 = (5.0 - sub) / 5.0, rel2 = (double)1e-8f / 5e-3;
    CHECK_NEAR(st.max_rel, rel4, 1e-9);
    CHECK_NEAR(st.sum_rel, rel4 + rel2, 1e-9);
    amp_tensor_free(a);
    amp_tensor_free(s);
}

static void test_identical_values_have_no_error(void)
{
    const float v[4] = {0.0f, -2.5f, 1e-30f, 7.0f};
    amp_tensor *s = tensor_of(AMP_F32, v, 4), *a = tensor_of(AMP_F32, v, 4);
    amp_audit_site st = {0};
    CHECK_OK(amp_audit_compare_tensors(a, s, &st));
    CHECK(st.max_rel == 0 && st.sum_rel == 0 && st.sum_sq_diff == 0);
    CHECK_EQ_INT(st.flushed + st.overflow, 0);
    CHECK_EQ_INT(st.subnormal, 0); /* 1e-30 is a normal f32 */
    amp_audit_site bad = {0};
    amp_tensor *short_ = tensor_of(AMP_F32, v, 3);
    CHECK_EQ_INT(amp_audit_compare_tensors(short_, s, &bad), AMP_ERR_SHAPE);
    CHECK_ERROR(AMP_ERR_SHAPE, "3 values against 4");
    amp_tensor_free(short_);
    amp_tensor_free(a);
    amp_tensor_free(s);
}

/* One forward and backward of an mlp on fixed inputs, under bf16 autocast
 * when lowered. */
static void mlp_step(amp_module *m, bool lowered)
{
    float x[4 * 6];
    int64_t y[4] = {0, 1, 2, 1};
    for (int i = 0; i < 4 * 6; i++)
        x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    amp_tensor *xt = amp_from_data(AMP_SHAPE(4, 6), AMP_F32, x), *yt = amp_from_data(AMP_SHAPE(4), AMP_I64, y);
    if (lowered)
        amp_autocast_begin(AMP_CPU, AMP_BF16);
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(m, xt), yt);
    if (lowered)
        amp_autocast_end();
    CHECK(loss != NULL);
    if (loss)
        CHECK_OK(amp_backward(loss));
    amp_tensor_free(xt);
    amp_tensor_free(yt);
    amp_temps_free();
}

static const amp_audit_site *site_named(const amp_audit *a, bool backward, const char *scope, const char *op)
{
    for (int i = 0; i < amp_audit_num_sites(a); i++) {
        const amp_audit_site *s = amp_audit_site_at(a, i);
        if (s->backward == backward && strcmp(s->scope, scope) == 0 && strcmp(s->op, op) == 0)
            return s;
    }
    return NULL;
}

/* A 6-8-3 mlp drawn from seed and an audit; false (a failure reported,
 * nothing left to free) when either is missing. */
static bool mlp_and_audit(uint64_t seed, amp_module **m, amp_audit **a)
{
    amp_manual_seed(seed);
    const int64_t hidden[1] = {8};
    *m = amp_model_mlp(6, hidden, 1, 3);
    *a = amp_audit_new();
    CHECK(*m && *a);
    if (*m && *a)
        return true;
    amp_module_free(*m);
    amp_audit_free(*a);
    return false;
}

static void test_recorder_matches_every_call_of_a_lowered_run(void)
{
    amp_module *m;
    amp_audit *a;
    if (!mlp_and_audit(3, &m, &a))
        return;
    CHECK_OK(amp_audit_record(a));
    mlp_step(m, false);
    amp_audit_stop(a);
    CHECK_OK(amp_audit_compare(a));
    mlp_step(m, false); /* the same run again: nothing moved */
    amp_audit_stop(a);
    for (int i = 0; i < amp_audit_num_sites(a); i++) {
        const amp_audit_site *s = amp_audit_site_at(a, i);
        CHECK_MSG(s->calls > 0 && s->unmatched == 0 && s->max_rel == 0, "%s %s %s: calls %lld unmatched %lld max %g",
                  s->scope, s->op, s->backward ? "bwd" : "fwd", (long long)s->calls, (long long)s->unmatched,
                  s->max_rel);
    }
    amp_audit_free(a);
    a = amp_audit_new();
    CHECK_OK(amp_audit_record(a));
    mlp_step(m, false);
    amp_audit_stop(a);
    CHECK_OK(amp_audit_compare(a));
    mlp_step(m, true);
    amp_audit_stop(a);
    CHECK(site_named(a, false, "", "to") == NULL); /* autocast's casts are no site */
    const amp_audit_site *fc = site_named(a, false, "0", "linear"), *ce = site_named(a, false, "", "cross_entropy");
    CHECK(fc && fc->dtype == AMP_BF16 && fc->max_rel > 0 && fc->unmatched == 0);
    CHECK(ce && ce->dtype == AMP_F32 && ce->calls == 1 && ce->unmatched == 0);
    const amp_audit_site *bw = site_named(a, true, "0", "linear");
    CHECK(bw && bw->calls == 1 && bw->unmatched == 0 && bw->values > 0);
    /* Another observer meanwhile is refused. */
    amp_audit *b = amp_audit_new();
    CHECK_OK(amp_audit_compare(a));
    CHECK_EQ_INT(amp_audit_record(b), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "another node observer");
    amp_audit_stop(a);
    amp_audit_free(b);
    amp_audit_free(a);
    amp_module_free(m);
}

/* An mlp whose first linear's f16 result passes 65504 from finite
 * inputs: its site counts the overflow as made there; the next linear,
 * which reads the infs (through the relu), makes none of its own. */
static void test_an_overflow_is_counted_where_it_is_made(void)
{
    amp_module *m;
    amp_audit *a;
    if (!mlp_and_audit(4, &m, &a))
        return;
    amp_tensor *w = amp_module_param(m, 0, NULL);
    CHECK_OK(amp_tensor_fill(w, 3e4)); /* 6 inputs near 1 each: sums past 65504 */
    float x[4 * 6];
    int64_t y[4] = {0, 1, 2, 1};
    for (int i = 0; i < 4 * 6; i++)
        x[i] = 1.0f + (float)(i % 3) / 8.0f;
    amp_tensor *xt = amp_from_data(AMP_SHAPE(4, 6), AMP_F32, x), *yt = amp_from_data(AMP_SHAPE(4), AMP_I64, y);
    for (int pass = 0; pass < 2; pass++) {
        CHECK_OK(pass == 0 ? amp_audit_record(a) : amp_audit_compare(a));
        if (pass == 1)
            amp_autocast_begin(AMP_CPU, AMP_F16);
        amp_tensor *logits = amp_module_forward(m, xt);
        amp_tensor *loss = amp_cross_entropy(logits, yt);
        if (pass == 1)
            amp_autocast_end();
        CHECK(loss != NULL);
        amp_audit_stop(a);
        amp_temps_free();
    }
    const amp_audit_site *fc = site_named(a, false, "0", "linear"), *out = site_named(a, false, "2", "linear");
    CHECK(fc && fc->dtype == AMP_F16 && fc->overflow == 32 && fc->overflow_made == 32);
    /* The next linear reads the infs: what it makes is not finite, but not its doing. */
    CHECK(out && out->overflow_made == 0);
    amp_tensor_free(xt);
    amp_tensor_free(yt);
    amp_audit_free(a);
    amp_module_free(m);
}

/* ---------------------------------------------------------- the program */

/* `ampc audit ARGS --json` parsed; NULL (a failure reported) if it did
 * not run or print JSON. Free with json_free. */
static json_doc *audit_json(const json_value **root, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_doc *audit_json(const json_value **root, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (CLI_OK("audit %s --json", args) != 0)
        return NULL;
    char err[128];
    json_doc *d = json_parse(cli_out, strlen(cli_out), root, err, sizeof err);
    CHECK_MSG(d != NULL, "ampc audit %s --json: %s in:\n%.2000s", args, err, cli_out);
    return d;
}

static double num(const json_value *o, const char *key)
{
    const json_value *v = json_get(o, key);
    CHECK_MSG(v != NULL, "no \"%s\"", key);
    return v && v->type == JSON_NUMBER ? strtod(v->str, NULL) : NAN;
}

static const char *str(const json_value *o, const char *key)
{
    const json_value *v = json_get(o, key);
    return v && v->type == JSON_STRING ? v->str : "";
}

static const json_value *find_site(const json_value *sites, const char *module, const char *op, const char *pass)
{
    for (int i = 0; sites && i < sites->n; i++) {
        const json_value *s = &sites->items[i];
        if (strcmp(str(s, "module"), module) == 0 && strcmp(str(s, "op"), op) == 0 &&
            strcmp(str(s, "pass"), pass) == 0)
            return s;
    }
    return NULL;
}

static const char *model_args(int m)
{
    static char buf[3][512];
    snprintf(buf[0], sizeof buf[0], "--model mlp --hidden 16 --batch 16 --data %s", images);
    snprintf(buf[1], sizeof buf[1], "--model cnn --batch 8 --data %s", images);
    snprintf(buf[2], sizeof buf[2], "--model gpt --layers 2 --heads 2 --width 16 --context 8 --batch 4 --data %s",
             text);
    return buf[m];
}

static void test_fp32_audit_has_no_error_anywhere(void)
{
    json_doc *plain = NULL; /* the gpt's run without checkpointing */
    const json_value *plain_sites = NULL;
    for (int m = 0; m < 4; m++) {
        const json_value *root;
        /* The fourth: the gpt with dropout (the shadow draws the same
         * masks) and checkpointed blocks (their recomputes are no calls). */
        const char *args = model_args(m < 3 ? m : 2);
        json_doc *d = audit_json(&root, "%s --precision fp32 --steps 2%s", args,
                                 m < 3 ? "" : " --dropout 0.2 --checkpoint-activations --accum 2");
        if (!d)
            continue;
        CHECK(num(root, "steps") == 2);
        const json_value *sites = json_get(root, "sites"), *params = json_get(root, "params");
        CHECK(sites && sites->n >= 4 && params && params->n >= 2);
        int fwd = 0, bwd = 0;
        for (int i = 0; sites && i < sites->n; i++) {
            const json_value *s = &sites->items[i];
            fwd += strcmp(str(s, "pass"), "forward") == 0;
            bwd += strcmp(str(s, "pass"), "backward") == 0;
            const char *keys[] = {"max_rel", "mean_rel", "norm_rel", "flushed", "subnormal", "overflow", "unmatched"};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
                CHECK_MSG(num(s, keys[k]) == 0, "%s: %s %s %s: %s %g", args, str(s, "module"), str(s, "op"),
                          str(s, "pass"), keys[k], num(s, keys[k]));
            CHECK(num(s, "calls") >= 2 && num(s, "values") > 0);
            /* Twice the micro-batches, the same calls each: a recompute
             * is not one. */
            const json_value *p = m == 3 ? find_site(plain_sites, str(s, "module"), str(s, "op"), str(s, "pass"))
                                         : NULL;
            if (p)
                CHECK_MSG(num(s, "calls") == 2 * num(p, "calls"), "%s %s %s: %g calls, %g without checkpointing",
                          str(s, "module"), str(s, "op"), str(s, "pass"), num(s, "calls"), num(p, "calls"));
        }
        CHECK(fwd > 0 && bwd > 0);
        for (int i = 0; params && i < params->n; i++) {
            const json_value *p = &params->items[i];
            CHECK_MSG(num(p, "stalled") == 0, "%s: %s stalled %g", args, str(p, "name"), num(p, "stalled"));
            CHECK(num(p, "moved") > 0);
        }
        if (m == 2) {
            plain = d;
            plain_sites = sites;
        } else {
            json_free(d);
        }
    }
    json_free(plain);
}

static void test_bf16_audit_shows_the_lowered_ops_and_the_f32_ones(void)
{
    const json_value *root;
    json_doc *d = audit_json(&root, "%s --precision bf16", model_args(2));
    if (!d)
        return;
    const json_value *sites = json_get(root, "sites");
    const struct {
        const char *module, *op, *pass, *dtype;
    } lowered[] = {
        {"h.0.attn.qkv", "linear", "forward", "bf16"},
        {"h.1.attn", "scaled_dot_product_attention", "forward", "bf16"},
        {"h.1.mlp.fc2", "linear", "backward", "bf16"},
        {"lm_head", "linear", "forward", "bf16"},
    }, kept[] = {
        {"h.1.ln_2", "layer_norm", "forward", "f32"},
        {"ln_f", "layer_norm", "backward", "f32"},
        {"loss", "cross_entropy", "forward", "f32"},
        {"loss", "cross_entropy", "backward", "f32"},
    };
    for (int k = 0; k < 4; k++) {
        const json_value *s = find_site(sites, lowered[k].module, lowered[k].op, lowered[k].pass);
        CHECK_MSG(s && strcmp(str(s, "dtype"), lowered[k].dtype) == 0 && num(s, "max_rel") > 0 &&
                      num(s, "mean_rel") > 0,
                  "%s %s %s: missing, not %s, or no error", lowered[k].module, lowered[k].op, lowered[k].pass,
                  lowered[k].dtype);
        s = find_site(sites, kept[k].module, kept[k].op, kept[k].pass);
        CHECK_MSG(s && strcmp(str(s, "dtype"), kept[k].dtype) == 0 && num(s, "max_rel") > 0,
                  "%s %s %s: missing, not %s, or carried no error", kept[k].module, kept[k].op, kept[k].pass,
                  kept[k].dtype);
    }
    /* The embeddings read f32 weights and token ids: nothing to carry. */
    const json_value *wte = find_site(sites, "wte", "embedding", "forward");
    CHECK(wte && num(wte, "max_rel") == 0);
    for (int i = 1; sites && i < sites->n; i++)
        CHECK(num(&sites->items[i - 1], "mean_rel") >= num(&sites->items[i], "mean_rel"));
    for (int i = 0; sites && i < sites->n; i++)
        CHECK(num(&sites->items[i], "unmatched") == 0);
    json_free(d);
}

static void test_table_shows_the_json_numbers(void)
{
    const json_value *root;
    json_doc *d = audit_json(&root, "%s --precision bf16", model_args(0));
    if (!d)
        return;
    CLI_OK("audit %s --precision bf16 --top 0", model_args(0));
    const json_value *sites = json_get(root, "sites");
    CHECK(sites && sites->n > 0);
    for (int i = 0; sites && i < sites->n; i++) {
        const json_value *s = &sites->items[i];
        const char *module = str(s, "module");
        char line[256];
        snprintf(line, sizeof line, "%-26s %-30s %-3s %-5s %10.3g %10.3g %10.3g", module[0] ? module : "(root)",
                 str(s, "op"), strcmp(str(s, "pass"), "forward") == 0 ? "fwd" : "bwd", str(s, "dtype"),
                 num(s, "max_rel"), num(s, "mean_rel"), num(s, "norm_rel"));
        CHECK_MSG(strstr(cli_out, line) != NULL, "no \"%s\" in the table:\n%s", line, cli_out);
    }
    const json_value *params = json_get(root, "params");
    for (int i = 0; params && i < params->n; i++) {
        char line[256];
        snprintf(line, sizeof line, "%-40s %-5s %14.3g %8.3f%%", str(&params->items[i], "name"),
                 str(&params->items[i], "dtype"), num(&params->items[i], "update_ratio"),
                 100 * num(&params->items[i], "stalled"));
        CHECK_MSG(strstr(cli_out, line) != NULL, "no \"%s\" in the table:\n%s", line, cli_out);
    }
    json_free(d);
}

/* Whether a python3 that imports module runs; says so when not. */
static bool have_python(const char *module)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "python3 -c 'import %s' > /dev/null 2>&1", module);
    if (system(cmd) == 0)
        return true;
    printf("  no python3 with %s: its check of the output is skipped\n", module);
    return false;
}

static void test_json_and_svg_are_well_formed(void)
{
    char svg[320], json[320];
    cli_path(svg, sizeof svg, "audit.svg");
    cli_path(json, sizeof json, "audit.json");
    if (CLI_OK("audit %s --precision bf16 --top 12 --svg %s --json > '%s'", model_args(2), svg, json) != 0)
        return;
    size_t len;
    char *s = cli_read_file(svg, &len);
    CHECK(s && strncmp(s, "<?xml", 5) == 0 && strstr(s, "</svg>\n") != NULL);
    int bars = 0;
    for (const char *p = s; p && (p = strstr(p, "<rect x=")); p++)
        bars++;
    CHECK_EQ_INT(bars, 12); /* the 12 worst all have an error in bf16 */
    CHECK(s && strstr(s, "h.0.attn") != NULL);
    free(s);
    if (have_python("xml.etree.ElementTree")) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import xml.etree.ElementTree as E; r = E.parse('%s').getroot(); "
                 "print(r.tag, len([e for e in r.iter() if e.tag.endswith('rect')]))\"",
                 svg);
        CHECK_EQ_INT(cli_capture(cmd), 0);
        CHECK_MSG(strstr(cli_out, "{http://www.w3.org/2000/svg}svg 13") != NULL, "%s", cli_out);
    }
    if (have_python("json")) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import json; d = json.load(open('%s')); "
                 "print(d['format'], len(d['sites']) > 12, all(s['max_rel'] >= 0 for s in d['sites']))\"",
                 json);
        CHECK_EQ_INT(cli_capture(cmd), 0);
        CHECK_MSG(strstr(cli_out, "ampc-audit True True") != NULL, "%s", cli_out);
    }
}

static void test_bf16_weights_with_a_small_lr_stall(void)
{
    for (int m = 0; m < 2; m++) {
        const json_value *root;
        json_doc *d = audit_json(&root,
                                 "%s --precision bf16 --param-dtype bf16 --master-weights off --optim adam --lr 1e-5 "
                                 "--steps 2",
                                 model_args(m));
        if (!d)
            continue;
        const json_value *params = json_get(root, "params");
        double most = 0;
        for (int i = 0; params && i < params->n; i++) {
            const json_value *p = &params->items[i];
            CHECK(strcmp(str(p, "dtype"), "bf16") == 0);
            most = fmax(most, num(p, "stalled"));
        }
        CHECK_MSG(most > 0.5, "%s: the most stalled parameter: %g", model_args(m), most);
        json_free(d);
        /* f32 weights, and bf16 ones with f32 masters (the stored weight is
         * the master), take the same updates; only the elements whose
         * gradient is tiny (an update below f32's resolution) stall. */
        for (int masters = 0; masters < 2; masters++) {
            d = audit_json(&root, "%s --precision bf16 %s--optim adam --lr 1e-5 --steps 2", model_args(m),
                           masters ? "--param-dtype bf16 " : "");
            params = d ? json_get(root, "params") : NULL;
            for (int i = 0; params && i < params->n; i++)
                CHECK_MSG(num(&params->items[i], "stalled") < 1e-3, "%s%s: %s stalls in f32 (%g)", model_args(m),
                          masters ? " with masters" : "", str(&params->items[i], "name"),
                          num(&params->items[i], "stalled"));
            json_free(d);
        }
    }
}

static void test_bad_arguments_are_refused(void)
{
    char base[600], dir_svg[400];
    snprintf(base, sizeof base, "audit %s", model_args(0));
    snprintf(dir_svg, sizeof dir_svg, "--svg %s", tmpdir);
    const cli_refusal cases[] = {
        {"--steps 0", "--steps"},
        {"--top -1", "--top"},
        {"--top", "--top"},
        {"--save out", "--save is not an ampc audit option"},
        {"--epochs 2", "--epochs is not an ampc audit option"},
        {"--detect-anomaly", "--detect-anomaly is not an ampc audit option"},
        {"--device cuda", "the CPU only"},
        {"--precision fp8", "--precision"},
        {"--svg /nonexistent-dir/a.svg", "its folder does not exist"},
        {dir_svg, "it is a folder"},
        {"--bogus", "--bogus"},
    };
    cli_check_refusals(NULL, base, cases, sizeof cases / sizeof cases[0]);
    CHECK_EQ_INT(cli_run("audit --model gpt --data %s/none.txt", tmpdir), 1);
    CHECK_OUT("none.txt");
    CHECK_EQ_INT(cli_run("audit --help"), 0);
    CHECK_OUT("usage: ampc audit");
    CHECK_OUT("--svg FILE");
}

int main(void)
{
    RUN(test_compare_counts_flushes_subnormals_overflows_and_relative_error);
    RUN(test_identical_values_have_no_error);
    RUN(test_recorder_matches_every_call_of_a_lowered_run);
    RUN(test_an_overflow_is_counted_where_it_is_made);
    cli_init("audit");
    if (cli_have_binary()) {
        cli_write_noise_images(cli_path(images, sizeof images, "images"), 128, 3);
        cli_write_tiny_text(cli_path(text, sizeof text, "text.txt"));
        RUN(test_fp32_audit_has_no_error_anywhere);
        RUN(test_bf16_audit_shows_the_lowered_ops_and_the_f32_ones);
        RUN(test_table_shows_the_json_numbers);
        RUN(test_json_and_svg_are_well_formed);
        RUN(test_bf16_weights_with_a_small_lr_stall);
        RUN(test_bad_arguments_are_refused);
    }
    cli_cleanup();
    return harness_done();
}
