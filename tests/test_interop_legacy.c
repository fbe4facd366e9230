/*
 * test_interop_legacy.c - checkpoints from before the PyTorch names still
 * load (src/io/checkpoint_convert.c), and fail clearly where they cannot.
 *
 * The fixtures in tests/fixtures/gpt-separate-qkv/ were written by ampc at
 * commit 8353fe1 (index names, q, k, v as three linears, optimizer state by
 * index): a 2-layer gpt (width 8, heads 2, context 8, mlp 16, vocab 15 from
 * corpus.txt) trained 4 of 8 steps with
 *   ampc train --model gpt --data corpus.txt --layers 2 --heads 2 --width 8
 *     --context 8 --mlp-width 16 --batch 4 --steps 8 --val-batches 3
 *     --threads 1 --seed 3 --stop-at 4 --save DIR
 *     and --precision fp32 (fp32.safetensors), or --precision bf16
 *     --param-dtype bf16 (bf16.safetensors: bf16 weights, f32 masters);
 * and *-resumed.jsonl are that ampc's logs of `train --resume DIR --log`
 * (steps 5 to 8). Today's ampc resumes the same files and must log the
 * same losses: the converted weights, Adam moments, masters and step
 * counts all take part in those steps.
 */
#include "harness.h"
#include "test_cli_util.h"

#include "io/json.h"

#include <stdlib.h>

static char fixtures[1024];

/* The loss of each line of a training log (at most max). */
static int log_losses(const char *path, double *loss, int max)
{
    char *lines[64], *body = NULL;
    int n = cli_log_steps(path, lines, 64, &body), k = 0;
    for (int i = 0; i < n && k < max; i++) {
        char buf[64];
        if (cli_json_field(lines[i], "loss", buf, sizeof buf))
            loss[k++] = strtod(buf, NULL);
    }
    free(body);
    return k;
}

/* Resumes a copy of fixture `name` with today's ampc; its losses against
 * the old ampc's, each within tol. */
static void check_resume_matches(const char *name, double tol)
{
    if (!cli_have_binary())
        return;
    char dir[600], src[1200], want[1200], logp[700];
    cli_path(dir, sizeof dir, name);
    snprintf(src, sizeof src, "%s/%s.safetensors", fixtures, name);
    snprintf(want, sizeof want, "%s/%s-resumed.jsonl", fixtures, name);
    snprintf(logp, sizeof logp, "%s/%s.jsonl", tmpdir, name);
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/checkpoint.safetensors'", dir, src, dir);
    CHECK_EQ_INT(system(cmd), 0);
    int rc = cli_run("train --resume %s --data %s/corpus.txt --log %s --threads 1", dir, fixtures, logp);
    CHECK_MSG(rc == 0, "resume of the old %s checkpoint: exit %d:\n%s", name, rc, cli_out);
    CHECK_OUT("an older gpt checkpoint (index names, separate q, k, v linears), converted on load");
    double got[8], ref[8];
    int ng = log_losses(logp, got, 8), nr = log_losses(want, ref, 8);
    CHECK_EQ_INT(nr, 4);
    CHECK_EQ_INT(ng, nr);
    for (int i = 0; i < ng && i < nr; i++)
        CHECK_MSG(fabs(got[i] - ref[i]) <= tol, "%s: step %d loss %.9g, the old ampc's %.9g (|diff| %.3g > %.3g)",
                  name, 5 + i, got[i], ref[i], fabs(got[i] - ref[i]), tol);
    /* The save at the end wrote today's layout, which loads without a word. */
    size_t n = 0;
    char ck[700];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    char *body = cli_read_file(ck, &n);
    CHECK(body && n > 8 && strstr(body + 8, "\"h.1.attn.qkv.weight\"") &&
          strstr(body + 8, "\"optim.wte.weight.exp_avg\"") && !strstr(body + 8, "\"0.1.weight\"") &&
          !strstr(body + 8, "\"optim.0."));
    free(body);
    rc = cli_run("eval %s --data %s/corpus.txt --threads 1", dir, fixtures);
    CHECK_MSG(rc == 0, "eval after the resume: exit %d:\n%s", rc, cli_out);
    CHECK(strstr(cli_out, "converted on load") == NULL);
}

/* fp32: one GEMM for q, k, v instead of three sums the same products in
 * the same order per output element; measured equal to all 9 printed
 * digits. The bound leaves 1e-6 for a GEMM kernel choosing another
 * blocking for the wider N. */
static void test_old_fp32_checkpoint_resumes_as_the_old_ampc_did(void) { check_resume_matches("fp32", 1e-6); }

/* bf16 autocast: the fused GEMM's bf16 result may round differently from
 * the three narrow ones in a few elements (measured: 3e-6 at step 8); a
 * mis-converted moment or master moves the loss by 1e-3 and more. */
static void test_old_bf16_checkpoint_with_masters_resumes_as_the_old_ampc_did(void)
{
    check_resume_matches("bf16", 5e-5);
}

static const amp_gpt_config fixture_cfg = {.vocab = 15, .context = 8, .width = 8, .layers = 2, .heads = 2, .mlp = 16};

/* The raw f32 values of tensor `name` in a safetensors file. */
static bool file_tensor(const char *path, const char *name, float *out, int64_t n)
{
    size_t len = 0;
    char *body = cli_read_file(path, &len);
    if (!body || len < 8)
        return free(body), false;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | (unsigned char)body[i];
    const json_value *root;
    char err[64];
    json_doc *doc = json_parse(body + 8, (size_t)hl, &root, err, sizeof err);
    const json_value *e = doc ? json_get(root, name) : NULL, *off = e ? json_get(e, "data_offsets") : NULL;
    uint64_t b = 0, end = 0;
    bool ok = off && json_u64(&off->items[0], &b) && json_u64(&off->items[1], &end) && end - b == (uint64_t)n * 4;
    if (ok)
        memcpy(out, body + 8 + hl + b, (size_t)n * 4);
    json_free(doc);
    free(body);
    return ok;
}

/* The model's parameter called name; NULL when it has none (the test then
 * fails: a conversion that names a tensor wrongly must not pass unseen). */
static const amp_tensor *param_named(const amp_module *m, const char *name)
{
    for (int i = 0, np = amp_module_num_params(m); i < np; i++) {
        const char *n;
        const amp_tensor *p = amp_module_param(m, i, &n);
        if (strcmp(n, name) == 0)
            return p;
    }
    return NULL;
}

/* The converted model holds exactly the old tensors: qkv = cat(q, k, v)
 * row blocks, the rest renamed. */
static void test_conversion_stacks_q_k_v_and_renames(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/fp32.safetensors", fixtures);
    amp_module *m = amp_model_gpt(fixture_cfg);
    CHECK_OK(amp_checkpoint_load(path, m, NULL, NULL, NULL, NULL));
    float want[3 * 64 + 24], bias[3 * 8];
    const struct {
        const char *old, *now;
        int64_t n;
    } same[] = {{"wte.weight", "wte.weight", 120}, {"0.0.weight", "h.0.ln_1.weight", 8},
                {"1.4.weight", "h.1.attn.proj.weight", 64}, {"0.5.bias", "h.0.ln_2.bias", 8},
                {"1.6.weight", "h.1.mlp.fc1.weight", 128},   {"0.7.bias", "h.0.mlp.fc2.bias", 8},
                {"2.weight", "ln_f.weight", 8}};
    for (int b = 0; b < 2; b++) {
        for (int j = 0; j < 3; j++) {
            char on[32];
            snprintf(on, sizeof on, "%d.%d.weight", b, 1 + j);
            CHECK(file_tensor(path, on, want + 64 * j, 64));
            snprintf(on, sizeof on, "%d.%d.bias", b, 1 + j);
            CHECK(file_tensor(path, on, bias + 8 * j, 8));
        }
        char wn[32], bn[32];
        snprintf(wn, sizeof wn, "h.%d.attn.qkv.weight", b);
        snprintf(bn, sizeof bn, "h.%d.attn.qkv.bias", b);
        const amp_tensor *w = param_named(m, wn), *bb = param_named(m, bn);
        CHECK_MSG(w && amp_tensor_numel(w) == 192 && memcmp(amp_tensor_cdata(w), want, 192 * 4) == 0,
                  "%s is not cat(q, k, v) of the old file", wn);
        CHECK_MSG(bb && amp_tensor_numel(bb) == 24 && memcmp(amp_tensor_cdata(bb), bias, 24 * 4) == 0,
                  "%s is not cat(q, k, v) of the old file", bn);
    }
    static float got[128];
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
        CHECK(file_tensor(path, same[k].old, got, same[k].n));
        const amp_tensor *p = param_named(m, same[k].now);
        CHECK_MSG(p && amp_tensor_numel(p) == same[k].n && memcmp(amp_tensor_cdata(p), got, (size_t)same[k].n * 4) == 0,
                  "%s is not the old %s", same[k].now, same[k].old);
    }
    amp_module_free(m);
}

/* An old gpt file that does not fit the model: the error names the
 * conversion. */
static void test_old_checkpoint_for_another_model_names_the_conversion(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/fp32.safetensors", fixtures);
    amp_gpt_config c = fixture_cfg;
    c.layers = 1;
    amp_module *m = amp_model_gpt(c);
    CHECK(amp_checkpoint_load(path, m, NULL, NULL, NULL, NULL) != AMP_OK);
    CHECK_MSG(strstr(amp_last_error(), "older gpt checkpoint") && strstr(amp_last_error(), "converted on load"), "%s",
              amp_last_error());
    amp_module_free(m);
    c = fixture_cfg;
    c.width = 16;
    m = amp_model_gpt(c);
    CHECK(amp_checkpoint_load(path, m, NULL, NULL, NULL, NULL) != AMP_OK);
    CHECK_MSG(strstr(amp_last_error(), "converted on load") && strstr(amp_last_error(), "shape"), "%s",
              amp_last_error());
    amp_module_free(m);
}

int main(void)
{
    const char *src = getenv("AMPC_SOURCE_DIR");
    snprintf(fixtures, sizeof fixtures, "%s/tests/fixtures/gpt-separate-qkv", src ? src : ".");
    cli_init("legacy");
    amp_set_num_threads(1);
    RUN(test_conversion_stacks_q_k_v_and_renames);
    RUN(test_old_checkpoint_for_another_model_names_the_conversion);
    RUN(test_old_fp32_checkpoint_resumes_as_the_old_ampc_did);
    RUN(test_old_bf16_checkpoint_with_masters_resumes_as_the_old_ampc_did);
    cli_cleanup();
    return harness_done();
}
