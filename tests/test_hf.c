/*
 * test_hf.c - `ampc export --format hf` and `ampc import --format hf`
 * against Hugging Face transformers and tokenizers themselves
 * (tests/test_hf.py runs them), and `ampc train --init-from`.
 * transformers, tokenizers, torch and safetensors are not build
 * dependencies: the Python side runs with the first of
 * $AMPC_TORCH_PYTHON, python3 and the repository's .bench-venv that has
 * them (scripts/torch-deps.sh installs them there); where none has them
 * the program exits 77 (CTest: skipped), saying which is missing. The
 * refusals of broken directories are made by the Python side too, so
 * they are skipped with it.
 *
 * Tolerance, as tests/test_interop.c: fp32 on both sides, other
 * summation orders: |ampc - hf| <= 1e-5 (1 + |hf|). A Conv1D weight left
 * untransposed, or q and k swapped, moves the logits by far more.
 */
#include "checkpoint_cli.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "test_cli_util.h"
#include "trainer.h"

#include <stdlib.h>
#include <sys/stat.h>

#define TOL 1e-5
#define GEN_TOKENS 32
#define PROMPT "the cat "

static char python[1200], script[1024], text[256], missing[1400];
static bool have_py, py_ok;
static char py_out[sizeof cli_out];

static bool need_py(void)
{
    if (!have_py)
        harness_skip(missing);
    return have_py;
}

/* The run saved in dir, restored as eval restores it, into t (fp32, no
 * autocast: the model's forward is called directly). */
static bool load_run(const char *dir, trainer *t)
{
    train_opts o;
    run_info ri;
    if (checkpoint_read_settings(dir, &o, &ri) >= 0)
        return false;
    o.resume = dir;
    if (opts_resolve(&o) >= 0 || !trainer_build(t, &o, &ri, 1))
        return false;
    if (checkpoint_load_run(dir, t, false, false, NULL) >= 0) {
        trainer_free(t);
        return false;
    }
    amp_module_train(t->model, false);
    return true;
}

static bool write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f)
        ok = fclose(f) == 0 && ok;
    CHECK_MSG(ok, "cannot write %s", path);
    return ok;
}

/* The fp32 logits of the model in dir on ids x, into path (f32), or
 * compared with the f32 values in path (want). */
static void logits_of(const char *dir, amp_tensor *x, const char *path, bool want, const char *what)
{
    trainer t = {0};
    CHECK_MSG(load_run(dir, &t), "%s: cannot load %s", what, dir);
    if (!t.model)
        return;
    amp_no_grad_begin();
    amp_tensor *y = amp_module_forward(t.model, x);
    amp_no_grad_end();
    CHECK(y != NULL);
    int64_t n = y ? amp_tensor_numel(y) : 0;
    if (y && !want)
        write_bytes(path, amp_tensor_cdata(y), (size_t)n * 4);
    if (y && want) {
        size_t len = 0;
        float *hf = (float *)cli_read_file(path, &len);
        CHECK_MSG(hf && len == (size_t)n * 4, "%s: %s holds %zu bytes, not %lld logits", what, path, len,
                  (long long)n);
        double worst = 0, spread = 0;
        for (int64_t i = 0; hf && len == (size_t)n * 4 && i < n; i++) {
            double a = amp_tensor_get(y, i), b = hf[i];
            worst = fmax(worst, fabs(a - b) / (1 + fabs(b)));
            spread = fmax(spread, fabs(b));
        }
        printf("  %s: %lld logits, max |ampc - transformers| / (1 + |transformers|) = %.3g (|logit| up to %.3g)\n",
               what, (long long)n, worst, spread);
        CHECK_MSG(worst <= TOL, "%s: logits differ by %.3g (relative) > %g", what, worst, TOL);
        CHECK_MSG(spread > 0.1, "%s: the logits are all near 0 (%.3g): the comparison would be empty", what, spread);
        free(hf);
    }
    amp_temps_free();
    trainer_free(&t);
}

/* ampc's id of each byte of s (the corpus's vocabulary), into ids. */
static int64_t ids_of(const amp_text *t, const char *s, size_t n, int64_t *ids)
{
    int64_t id_of[256];
    for (int b = 0; b < 256; b++)
        id_of[b] = -1;
    for (int64_t id = 0; id < amp_text_vocab(t); id++)
        id_of[amp_text_char(t, id)] = id;
    for (size_t i = 0; i < n; i++) {
        ids[i] = id_of[(unsigned char)s[i]];
        CHECK_MSG(ids[i] >= 0, "byte 0x%02x is not in the vocabulary", (unsigned char)s[i]);
    }
    return (int64_t)n;
}

static char run_a[600], hf_a[600], bad_base[600], r32[600], r16[600], rids[600], rout32[600], rout16[600];
static char run_g[600], hf_g[600], run_c[600], hf_c[600], big[600], big_ids[600], big_out[600], big_gen[600];
static char tr_bin[600], va_bin[600], tok_dir[600], tok_gen[600], tok_txt[600];

/* n little-endian uint16 token ids (a nanoGPT token file), each below
 * vocab, from a fixed generator. */
static void write_token_file(const char *path, int64_t n, int vocab, uint64_t seed)
{
    uint16_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; t && i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (uint16_t)((seed >> 33) % (uint64_t)vocab);
    }
    CHECK(t != NULL);
    if (t)
        write_bytes(path, t, (size_t)n * sizeof *t);
    free(t);
}

/* A gpt trained on the text with `train` (its shape and steps; fp32, one
 * thread) into run, then exported with `args` to hf. */
static void run_exported(const char *run, const char *hf, const char *train, const char *args)
{
    int rc = cli_run("train --model gpt --data %s %s --precision fp32 --threads 1 --save %s", text, train, run);
    CHECK_MSG(rc == 0, "train %s: exit %d:\n%s", train, rc, cli_out);
    rc = cli_run("export %s %s %s", args, run, hf);
    CHECK_MSG(rc == 0, "export %s of a run of %s: exit %d:\n%s", args, train, rc, cli_out);
}

/* A char gpt trained 2 steps into run, exported with args to hf. */
#define TINY_RUN "--layers 1 --heads 2 --width 8 --context 8 --batch 2 --steps 2"

/* (h), (i): the ampc side of a --gelu exact --no-bias gpt and of a gpt on
 * token ids (with a tokenizer.json of its own), each exported, and their
 * logits on the ids in xp / [3, 48] ids below 300, for the Python side. */
static void export_gelu_and_token_ids(const char *xp, char *lg, char *xi, char *lc)
{
    cli_path(run_g, sizeof run_g, "G");
    cli_path(hf_g, sizeof hf_g, "G-hf");
    run_exported(run_g, hf_g,
                 "--gelu exact --no-bias --layers 2 --heads 2 --width 16 --context 48 --batch 8 --steps 30 --lr 0.01",
                 "");
    size_t len = 0;
    char path[800], *raw = cli_read_file(xp, &len);
    amp_tensor *x = amp_zeros(AMP_SHAPE(3, 48), AMP_I64);
    if (raw && len == 3 * 48 * 8)
        memcpy(amp_tensor_data(x), raw, len);
    free(raw);
    logits_of(run_g, x, lg, false, "G");

    cli_path(run_c, sizeof run_c, "C");
    cli_path(hf_c, sizeof hf_c, "C-hf");
    cli_path(tr_bin, sizeof tr_bin, "train.bin");
    cli_path(va_bin, sizeof va_bin, "val.bin");
    write_token_file(tr_bin, 4096, 300, 1);
    write_token_file(va_bin, 1024, 300, 2);
    int rc = cli_run("train --model gpt --data-bin %s --val-bin %s --vocab 300 --layers 1 --heads 2 --width 16 --context "
                 "48 --batch 4 --steps 20 --lr 0.01 --precision fp32 --threads 1 --save %s",
                 tr_bin, va_bin, run_c);
    CHECK_MSG(rc == 0, "train --data-bin: exit %d:\n%s", rc, cli_out);
    snprintf(path, sizeof path, "%s/tokenizer.json", run_c);
    write_bytes(path, "{\"model\": {}}\n", 15); /* copied as it is: not read */
    rc = cli_run("export %s %s", run_c, hf_c);
    CHECK_MSG(rc == 0, "export of a token-id model: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("vocab 300) to");
    CHECK_OUT(", tokenizer.json");
    snprintf(path, sizeof path, "%s/tokenizer.json", hf_c);
    raw = cli_read_file(path, &len);
    CHECK_MSG(raw && len == 15 && !memcmp(raw, "{\"model\": {}}\n", 15), "%s is not the checkpoint's copy", path);
    free(raw);
    int64_t *ids = amp_tensor_data(x);
    for (int i = 0; i < 3 * 48; i++)
        ids[i] = (i * 37 + 11) % 300;
    cli_path(xi, 600, "xi.bin");
    write_bytes(xi, ids, 3 * 48 * 8);
    logits_of(run_c, x, lc, false, "C");
    amp_tensor_free(x);
}

/* (a), (b), (e): a gpt trained a few steps in fp32, exported, in
 * transformers: its logits equal ampc's, greedy generation gives ampc's
 * tokens, and tokenizer.json encodes the text to ampc's ids. The same
 * Python process then writes what the import tests read. */
static void test_export_loads_in_transformers(void)
{
    if (!need_py() || !cli_have_binary())
        return;
    cli_path(run_a, sizeof run_a, "A");
    cli_path(hf_a, sizeof hf_a, "A-hf");
    run_exported(run_a, hf_a,
                 "--layers 2 --heads 2 --width 16 --context 48 --mlp-width 40 --batch 8 --steps 100 --lr 0.01", "");
    CHECK_OUT("model.safetensors (F32)");
    CHECK_OUT("tokenizer.json");

    char xp[700], lp[700], pp[700], gp[700], sp[700], sip[700];
    snprintf(xp, sizeof xp, "%s/x.bin", tmpdir);
    snprintf(lp, sizeof lp, "%s/logits.bin", tmpdir);
    snprintf(pp, sizeof pp, "%s/prompt.ids", tmpdir);
    snprintf(gp, sizeof gp, "%s/gen.ids", tmpdir);
    snprintf(sp, sizeof sp, "%s/sample.txt", tmpdir);
    snprintf(sip, sizeof sip, "%s/sample.ids", tmpdir);
    amp_text *t = amp_text_load(text);
    CHECK(t != NULL);
    if (!t)
        return;
    amp_tensor *x = amp_zeros(AMP_SHAPE(3, 48), AMP_I64), *y = amp_zeros(AMP_SHAPE(3, 48), AMP_I64);
    CHECK_OK(amp_text_batch(t, false, 11, x, y));
    write_bytes(xp, amp_tensor_cdata(x), 3 * 48 * 8);
    logits_of(run_a, x, lp, false, "A");

    /* ampc's greedy tokens: the prompt, GEN_TOKENS bytes, a newline */
    int rc = cli_run("generate %s --prompt '" PROMPT "' --tokens %d --temperature 0 --threads 1 --quiet", run_a,
                 GEN_TOKENS);
    size_t np = strlen(PROMPT);
    CHECK_MSG(rc == 0 && strlen(cli_out) == np + GEN_TOKENS + 1, "generate: exit %d:\n%s", rc, cli_out);
    int64_t ids[400];
    ids_of(t, PROMPT, np, ids);
    write_bytes(pp, ids, np * 8);
    ids_of(t, cli_out + np, GEN_TOKENS, ids);
    write_bytes(gp, ids, GEN_TOKENS * 8);
    size_t len = 0;
    char *all = cli_read_file(text, &len);
    CHECK(all && len > 300);
    if (all && len > 300) {
        write_bytes(sp, all, 300);
        ids_of(t, all, 300, ids);
        write_bytes(sip, ids, 300 * 8);
    }
    free(all);

    cli_path(r32, sizeof r32, "R32");
    cli_path(r16, sizeof r16, "R16");
    cli_path(rids, sizeof rids, "r-ids.bin");
    cli_path(rout32, sizeof rout32, "r-logits32.bin");
    cli_path(rout16, sizeof rout16, "r-logits16.bin");
    cli_path(bad_base, sizeof bad_base, "bad");
    char lg[600], xi[600], lc[600];
    cli_path(lg, sizeof lg, "g-logits.bin");
    cli_path(lc, sizeof lc, "c-logits.bin");
    export_gelu_and_token_ids(xp, lg, xi, lc);
    cli_path(big, sizeof big, "BIG");
    cli_path(big_ids, sizeof big_ids, "big-ids.bin");
    cli_path(big_out, sizeof big_out, "big-logits.bin");
    cli_path(big_gen, sizeof big_gen, "big-gen.ids");
    cli_path(tok_dir, sizeof tok_dir, "TOK");
    cli_path(tok_gen, sizeof tok_gen, "tok-gen.ids");
    cli_path(tok_txt, sizeof tok_txt, "tok-gen.txt");
    static char cmd[32768];
    snprintf(cmd, sizeof cmd,
             "'%s' '%s' export '%s' '%s' 3,48 '%s' '%s' '%s' '%s' '%s' + random '%s' '%s' '%s' '%s' '%s' + bad '%s' "
             "+ logits gelu '%s' '%s' 3,48 '%s' + logits tokid '%s' '%s' 3,48 '%s' + big '%s' '%s' '%s' '%s' '%s' "
             "'%s' + tok '%s' '%s' '%s' 2>&1",
             python, script, hf_a, xp, lp, pp, gp, sp, sip, r32, r16, rids, rout32, rout16, bad_base, hf_g, xp, lg,
             hf_c, xi, lc, big, big_ids, big_out, big_gen, tr_bin, va_bin, tok_dir, tok_gen, tok_txt);
    rc = cli_capture(cmd);
    memcpy(py_out, cli_out, sizeof py_out);
    py_ok = rc == 0;
    CHECK_MSG(rc == 0, "test_hf.py: exit %d:\n%s", rc, cli_out);
    double rel = cli_value_after("logits_rel ");
    printf("  exported gpt in transformers: max |ampc - transformers| / (1 + |transformers|) = %.3g\n", rel);
    CHECK_MSG(rel <= TOL, "logits differ by %.3g (relative) > %g", rel, TOL);
    CHECK_OUT("greedy: 32 tokens equal");
    CHECK_OUT("decode gives the text back");
    /* the greedy continuation is text, not one token repeated */
    const char *d = strstr(cli_out, "tokens equal, ");
    CHECK_MSG(d && atoi(d + strlen("tokens equal, ")) >= 3, "greedy generation is degenerate:\n%s", cli_out);
    /* (h) the --gelu exact --no-bias export, (i) the token-id one */
    const char *tags[] = {"gelu_rel ", "tokid_rel "}, *cfg[] = {"activation gelu, vocab", "vocab 300"};
    for (int i = 0; i < 2; i++) {
        rel = cli_value_after(tags[i]);
        printf("  %.*s export in transformers: max |ampc - transformers| / (1 + |transformers|) = %.3g\n",
               (int)strlen(tags[i]) - 5, tags[i], rel);
        CHECK_MSG(rel >= 0 && rel <= TOL, "%s: logits differ by %.3g (relative) > %g", tags[i], rel, TOL);
        CHECK_OUT(cfg[i]);
    }
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_text_free(t);
}

static bool python_side_ran(void)
{
    if (!py_ok)
        harness_skip("the Python side did not run (see the first test)");
    return py_ok;
}

/* (c): a random GPT2LMHeadModel of odd shape, saved in f32 and in bf16,
 * imported: ampc's logits are transformers'. */
static void test_import_of_random_gpt2_gives_its_logits(void)
{
    if (!python_side_ran())
        return;
    size_t len = 0;
    char *raw = cli_read_file(rids, &len);
    CHECK(raw && len == 2 * 40 * 8);
    if (!raw || len != 2 * 40 * 8) {
        free(raw);
        return;
    }
    amp_tensor *x = amp_zeros(AMP_SHAPE(2, 40), AMP_I64);
    memcpy(amp_tensor_data(x), raw, len);
    free(raw);
    const char *dirs[] = {r32, r16}, *outs[] = {rout32, rout16}, *what[] = {"random gpt2 f32", "random gpt2 bf16"};
    for (int i = 0; i < 2; i++) {
        char out[700];
        snprintf(out, sizeof out, "%s-ampc", dirs[i]);
        int rc = cli_run("import %s %s", dirs[i], out);
        CHECK_MSG(rc == 0, "import %s: exit %d:\n%s", dirs[i], rc, cli_out);
        CHECK_OUT("2 layers, 3 heads, width 48, mlp 192, context 40, vocab 101");
        logits_of(out, x, outs[i], true, what[i]);
    }
    amp_tensor_free(x);
}

/* hf, the export of run, imported into run-back (its output holding
 * needle): *same of run's *weights the same bytes and dtype there,
 * *tensors in the imported file, *zero_biases of them biases run lacks
 * and all zero; and `ampc eval` prints the same line for both. */
static void round_trip(const char *run, const char *hf, const char *needle, int *weights, int *same, int *tensors,
                       int *zero_biases)
{
    char back[700], pa[800], pb[800];
    snprintf(back, sizeof back, "%s-back", run);
    *weights = *same = *tensors = *zero_biases = 0;
    int rc = cli_run("import %s %s", hf, back);
    CHECK_MSG(rc == 0, "import of %s: exit %d:\n%s", hf, rc, cli_out);
    CHECK_OUT(needle);
    checkpoint_path(pa, sizeof pa, run);
    checkpoint_path(pb, sizeof pb, back);
    ckpt a = {.path = pa, .n_params = -1}, b = {.path = pb, .n_params = -1};
    CHECK_OK(ckpt_open(&a));
    CHECK_OK(ckpt_open(&b));
    for (int i = 0; i < a.n; i++) {
        if (!strncmp(a.e[i].name, "optim.", 6))
            continue;
        (*weights)++;
        const in_entry *e = ckpt_find(&b, a.e[i].name);
        bool eq = e && e->dt == a.e[i].dt && e->end - e->begin == a.e[i].end - a.e[i].begin &&
                  memcmp(e->bytes, a.e[i].bytes, e->end - e->begin) == 0;
        CHECK_MSG(eq, "tensor %s differs after the round trip", a.e[i].name);
        *same += eq;
    }
    for (int i = 0; i < b.n; i++) {
        bool zero = strstr(b.e[i].name, ".bias") && !ckpt_find(&a, b.e[i].name);
        for (uint64_t k = 0; zero && k < b.e[i].end - b.e[i].begin; k++)
            zero = b.e[i].bytes[k] == 0;
        *zero_biases += zero;
    }
    *tensors = b.n;
    ckpt_close(&a);
    ckpt_close(&b);
    rc = cli_run("eval %s --threads 1", run);
    CHECK_MSG(rc == 0, "eval %s: exit %d:\n%s", run, rc, cli_out);
    char line[256] = "";
    const char *m = strstr(cli_out, "val_loss ");
    snprintf(line, sizeof line, "%s", m ? m : "(none)");
    rc = cli_run("eval %s --threads 1", back);
    CHECK_MSG(rc == 0, "eval of the round trip: exit %d:\n%s", rc, cli_out);
    m = strstr(cli_out, "val_loss ");
    CHECK_MSG(m && strcmp(m, line) == 0, "eval moved:\n  ampc        %s  round trip  %s", line, m ? m : "(none)");
}

/* (d): ampc -> hf -> ampc: every weight the same bytes and dtype, no
 * other tensor, and `ampc eval` prints the same line. */
static void test_round_trip_is_bit_exact(void)
{
    if (!python_side_ran())
        return;
    int weights, same, tensors, zero;
    round_trip(run_a, hf_a, "with tokenizer.json's character vocabulary", &weights, &same, &tensors, &zero);
    printf("  round trip: %d of %d weights the same bytes, %d tensors in the imported file\n", same, weights,
           tensors);
    CHECK_EQ_INT(weights, 4 + 12 * 2);
    CHECK_EQ_INT(same, weights);
    CHECK_EQ_INT(tensors, weights);
}

/* The mean of the first and of the last three step losses a train run
 * printed ("step 3/40 loss 2.7833 ..."). */
static void first_last_loss(const char *out, double *first, double *last)
{
    double l[400];
    int n = 0;
    for (const char *p = out; p && *p && n < 400; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (sscanf(p, "step %*d/%*d loss %lf", &l[n]) == 1)
            n++;
    *first = *last = NAN;
    if (n >= 6) {
        *first = (l[0] + l[1] + l[2]) / 3;
        *last = (l[n - 1] + l[n - 2] + l[n - 3]) / 3;
    }
}

/* (f): --init-from an imported model, then bf16 autocast, and fp16 with
 * the grad scaler: it trains (the loss drops); a shape option that
 * differs, and --resume beside it, are refused. */
static void test_init_from_fine_tunes(void)
{
    if (!python_side_ran())
        return;
    char back[700];
    snprintf(back, sizeof back, "%s-back", run_a);
    const char *precisions[] = {"bf16", "fp16"};
    for (int i = 0; i < 2; i++) {
        int rc = cli_run("train --init-from %s --data %s --precision %s --steps 40 --lr 0.01 --batch 8 --threads 1 "
                         "--log-every 1",
                         back, text, precisions[i]);
        CHECK_MSG(rc == 0, "train --init-from --precision %s: exit %d:\n%s", precisions[i], rc, cli_out);
        CHECK_OUT("initialised from");
        double first, last;
        first_last_loss(cli_out, &first, &last);
        printf("  --init-from, %s: loss %.4f over the first 3 steps, %.4f over the last 3\n", precisions[i], first,
               last);
        CHECK_MSG(last < first - 0.05, "%s: the loss did not drop (%.4f -> %.4f):\n%s", precisions[i], first, last,
                  cli_out);
    }
    char args[2400], args2[2400];
    snprintf(args, sizeof args, "--init-from %s --data %s --width 32", back, text);
    snprintf(args2, sizeof args2, "--init-from %s --data %s --resume %s", back, text, back);
    const cli_refusal cases[] = {
        {args, "--width 32 conflicts with --init-from"},
        {args2, "not both"},
    };
    cli_check_refusals("", "train", cases, sizeof cases / sizeof cases[0]);
}

/* The ids `ampc generate DIR --prompt-ids 1,2,3 --temperature 0 --tokens
 * n --ids` prints, against the i64 ids in path (with the prompt when
 * from is 0, else without). */
static void greedy_ids_equal(const char *dir, int n, const char *path, int from)
{
    int rc = cli_run("generate %s --prompt-ids 1,2,3 --temperature 0 --tokens %d --ids --threads 1 --quiet", dir, n);
    CHECK_MSG(rc == 0, "generate %s --ids: exit %d:\n%s", dir, rc, cli_out);
    size_t len = 0;
    int64_t *want = (int64_t *)cli_read_file(path, &len);
    CHECK_MSG(want && len == (size_t)(n + 3 - from) * 8, "%s holds %zu bytes", path, len);
    const char *p = cli_out;
    int same = 0;
    for (int i = 0; want && len == (size_t)(n + 3 - from) * 8 && i < n + 3; i++) {
        char *end;
        long long v = strtoll(p, &end, 10);
        CHECK_MSG(end != p, "generate printed %d ids, not %d:\n%s", i, n + 3, cli_out);
        if (end == p)
            break;
        p = end;
        same += i < from || v == want[i - from];
    }
    printf("  %s: %d of %d greedy ids equal transformers' generate()\n", dir, same, n + 3);
    CHECK_EQ_INT(same, n + 3);
    free(want);
}

/* (j): a GPT2LMHeadModel of GPT-2's 50257-token vocabulary imported as a
 * model on token ids: its logits, --init-from with token files (bf16),
 * and greedy generation as transformers'; token files of another
 * vocabulary, or a text, refused. */
static void test_gpt2_vocabulary_imports_as_token_ids(void)
{
    if (!python_side_ran())
        return;
    char out[700], va[800];
    snprintf(out, sizeof out, "%s-ampc", big);
    int rc = cli_run("import %s %s", big, out);
    CHECK_MSG(rc == 0, "import of vocab 50257: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("2 layers, 2 heads, width 32, mlp 128, context 64, vocab 50257 token ids)");
    size_t len = 0;
    char *raw = cli_read_file(big_ids, &len);
    CHECK(raw && len == 2 * 64 * 8);
    if (raw && len == 2 * 64 * 8) {
        amp_tensor *x = amp_zeros(AMP_SHAPE(2, 64), AMP_I64);
        memcpy(amp_tensor_data(x), raw, len);
        logits_of(out, x, big_out, true, "random gpt2 vocab 50257");
        amp_tensor_free(x);
    }
    free(raw);
    rc = cli_run("train --init-from %s --data-bin %s --val-bin %s --precision bf16 --steps 3 --batch 2 --threads 1",
                 out, tr_bin, va_bin);
    CHECK_MSG(rc == 0, "train --init-from (vocab 50257) --data-bin: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("initialised from");
    double val = cli_value_after("val_loss ");
    printf("  --init-from vocab 50257, bf16, 3 steps: val_loss %.4f (ln 50257 = %.4f)\n", val, log(50257.0));
    CHECK_MSG(val > 1 && val < 30, "val_loss %.4f", val);
    greedy_ids_equal(out, 8, big_gen, 3);
    /* other token ids, or a text: data_check's refusals (exit 1, as for a text of other characters) */
    rc = cli_run("train --init-from %s --data-bin %s --val-bin %s --vocab 60000", out, tr_bin, va_bin);
    CHECK_MSG(rc == 1 && strstr(cli_out, "a vocabulary of 60000 token ids; the model in"), "exit %d:\n%s", rc,
              cli_out);
    rc = cli_run("train --init-from %s --data %s", out, text);
    CHECK_MSG(rc == 1 && strstr(cli_out, "was trained on token files (--data-bin)"), "exit %d:\n%s", rc, cli_out);
    snprintf(va, sizeof va, "%s.json", tr_bin); /* the token files' own vocab_size, another */
    write_bytes(va, "{\"vocab_size\": 50304}", 21);
    rc = cli_run("train --init-from %s --data-bin %s --val-bin %s", out, tr_bin, va_bin);
    CHECK_MSG(rc == 2 && strstr(cli_out, "says vocab_size 50304"), "exit %d:\n%s", rc, cli_out);
    remove(va);
}

/* (k): a tokenizer.json beside the model (a byte-level BPE of tokenizers)
 * is copied by import, and generate prints tokenizers' decode of the ids
 * with it (--ids: the ids). */
static void test_tokenizer_json_decodes_generation(void)
{
    if (!python_side_ran())
        return;
    char out[700], a[800], b[800];
    snprintf(out, sizeof out, "%s-ampc", tok_dir);
    int rc = cli_run("import %s %s", tok_dir, out);
    CHECK_MSG(rc == 0, "import with a BPE tokenizer.json: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("token ids) into");
    CHECK_OUT(", with tokenizer.json");
    snprintf(a, sizeof a, "%s/tokenizer.json", tok_dir);
    snprintf(b, sizeof b, "%s/tokenizer.json", out);
    size_t la = 0, lb = 0;
    char *ta = cli_read_file(a, &la), *tb = cli_read_file(b, &lb);
    CHECK_MSG(ta && tb && la == lb && !memcmp(ta, tb, la), "%s is not a copy of %s", b, a);
    free(ta), free(tb);
    greedy_ids_equal(out, 8, tok_gen, 0);
    rc = cli_run("generate %s --prompt-ids 1,2,3 --temperature 0 --tokens 8 --threads 1 --quiet", out);
    CHECK_MSG(rc == 0, "generate with the checkpoint's tokenizer.json: exit %d:\n%s", rc, cli_out);
    char *want = cli_read_file(tok_txt, &la);
    printf("  generate with tokenizer.json: %s", cli_out);
    CHECK_MSG(want && strlen(cli_out) == la + 1 && !strncmp(cli_out, want, la) && cli_out[la] == '\n',
              "generate printed \"%s\", tokenizers decodes \"%s\"", cli_out, want ? want : "");
    CHECK(la >= 8);
    free(want);
}

/* (l): the --gelu exact --no-bias model back from transformers: its
 * weights the same bytes, its biases there and all zero (not re-detected
 * as --no-bias), the exact GELU kept, the same eval line. */
static void test_no_bias_round_trip_keeps_zero_biases(void)
{
    if (!python_side_ran())
        return;
    int weights, same, tensors, zero;
    round_trip(run_g, hf_g, "--gelu exact)", &weights, &same, &tensors, &zero);
    printf("  --no-bias round trip: %d of %d weights the same bytes, %d zero biases added\n", same, weights, zero);
    CHECK_EQ_INT(weights, 4 + 12 * 2 - 1 - 6 * 2); /* no ln_f.bias, 6 biases a block */
    CHECK_EQ_INT(same, weights);
    CHECK_EQ_INT(zero, 1 + 6 * 2);
    CHECK_EQ_INT(tensors, 4 + 12 * 2);
}

/* (g): broken directories refused (exit 2), naming the file and what is
 * wrong; a GPT2Model's names and a sharded save accepted. */
static void test_bad_hf_directories_are_refused(void)
{
    if (!python_side_ran())
        return;
    static const struct {
        const char *dir, *needle;
    } bad[] = {
        {"missing-config", "missing-config/config.json: cannot open"},
        {"bad-json", "bad-json/config.json: not valid JSON (at byte"},
        {"missing-weights", "missing-weights/model.safetensors is missing"},
        {"wrong-shape", "tensor 'transformer.h.0.attn.c_attn.weight' has shape [24, 8]; config.json's model needs "
                        "[8, 24] (Conv1D: [in, out])"},
        {"missing-tensor", "tensor 'transformer.ln_f.bias' is missing"},
        {"unknown-dtype", "tensor 'transformer.wpe.weight' has dtype F64"},
        {"int-tensor", "tensor 'transformer.ln_f.weight' is I32"},
        {"truncated", "truncated: the tensors need"},
        {"header-past-end", "truncated: header says 1048576 bytes"},
        {"overlap", "overlap in the data"},
        {"untied-head", "'lm_head.weight' differs from the token embedding"},
        {"relu", "\"activation_function\" is relu"},
        {"inverse-layer-idx", "\"scale_attn_by_inverse_layer_idx\" is true"},
        {"upcast-attn", "\"reorder_and_upcast_attn\" is true"},
        {"big-vocab", "\"vocab_size\" is 65537"},
        {"llama", "\"model_type\" is \"llama\""},
        {"eps", "\"layer_norm_epsilon\" is 1e-06"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cli_run("import %s/%s %s/out-%s", bad_base, bad[i].dir, tmpdir, bad[i].dir);
        CHECK_MSG(rc == 2 && strstr(cli_out, bad[i].needle),
                  "import of %s: exit %d (want 2), output without \"%s\":\n%s", bad[i].dir, rc, bad[i].needle,
                  cli_out);
        char ck[900];
        snprintf(ck, sizeof ck, "%s/out-%s/" CHECKPOINT_FILE, tmpdir, bad[i].dir);
        CHECK_MSG(access(ck, F_OK) != 0, "import of %s wrote %s", bad[i].dir, ck);
    }
    const char *good[] = {"good", "no-prefix", "sharded"};
    for (int i = 0; i < 3; i++) {
        int rc = cli_run("import %s/%s %s/out-%s", bad_base, good[i], tmpdir, good[i]);
        CHECK_MSG(rc == 0, "import of %s: exit %d:\n%s", good[i], rc, cli_out);
    }
    char a[900], b[900], why[300];
    snprintf(a, sizeof a, "%s/out-good", tmpdir);
    snprintf(b, sizeof b, "%s/out-sharded", tmpdir);
    CHECK_MSG(cli_same_checkpoint(a, b, why, sizeof why), "the sharded save imports otherwise: %s", why);
    snprintf(b, sizeof b, "%s/out-no-prefix", tmpdir);
    CHECK_MSG(cli_same_checkpoint(a, b, why, sizeof why), "the GPT2Model names import otherwise: %s", why);
}

/* --dtype bf16: each weight rounded to nearest even (what amp_convert
 * gives), and imported back widened exactly; no Python needed. */
static void test_export_in_bf16_rounds_each_weight(void)
{
    if (!cli_have_binary())
        return;
    char run[600], hf[600], back[600], pa[800], pb[800];
    cli_path(back, sizeof back, "B-back");
    run_exported(cli_path(run, sizeof run, "B"), cli_path(hf, sizeof hf, "B-hf16"), TINY_RUN, "--dtype bf16");
    CHECK_OUT("model.safetensors (BF16)");
    int rc = cli_run("import %s %s", hf, back);
    CHECK_MSG(rc == 0, "import: exit %d:\n%s", rc, cli_out);
    checkpoint_path(pa, sizeof pa, run);
    checkpoint_path(pb, sizeof pb, back);
    ckpt a = {.path = pa, .n_params = -1}, b = {.path = pb, .n_params = -1};
    CHECK_OK(ckpt_open(&a));
    CHECK_OK(ckpt_open(&b));
    int64_t elems = 0, moved = 0, wrong = 0;
    for (int i = 0; i < a.n; i++) {
        const in_entry *e = &a.e[i], *f = ckpt_find(&b, e->name);
        if (!strncmp(e->name, "optim.", 6))
            continue;
        CHECK_MSG(f && f->dt == AMP_F32 && f->end - f->begin == e->end - e->begin, "tensor %s: not imported as F32",
                  e->name);
        for (uint64_t k = 0; f && k < (e->end - e->begin) / 4; k++, elems++) {
            float x, y, want;
            uint16_t h;
            memcpy(&x, e->bytes + 4 * k, 4);
            memcpy(&y, f->bytes + 4 * k, 4);
            amp_convert(&x, AMP_F32, &h, AMP_BF16, 1);
            amp_convert(&h, AMP_BF16, &want, AMP_F32, 1);
            wrong += memcmp(&y, &want, 4) != 0;
            moved += x != y;
        }
    }
    printf("  --dtype bf16: %lld weights, %lld rounded, %lld not bf16's rounding\n", (long long)elems,
           (long long)moved, (long long)wrong);
    CHECK(elems > 1000);
    CHECK(moved > elems / 2);
    CHECK_EQ_INT((int)wrong, 0);
    ckpt_close(&a);
    ckpt_close(&b);
}

/* dir/name written with text (NULL: a FIFO made there instead). */
static void put_file(const char *dir, const char *name, const char *text)
{
    char path[900];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    remove(path);
    if (text)
        CHECK(write_bytes(path, text, strlen(text)));
    else
        CHECK(mkfifo(path, 0600) == 0);
}

/* An export of a char model copied to tmpdir/name, its file put_file'd. */
static const char *hf_copy(const char *hf, const char *name, const char *file, const char *text, char *dir, size_t n)
{
    cli_path(dir, n, name);
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, hf, dir);
    CHECK(system(cmd) == 0);
    put_file(dir, file, text);
    return dir;
}

/* What import must refuse without Python (exit 2, naming the file, no
 * checkpoint written), none of it waited on: an OUT that holds a
 * checkpoint (left as it was), an empty HF_DIR or OUT, a tokenizer.json
 * that is not JSON or gives ids beyond vocab_size, a FIFO in place of
 * model.safetensors or tokenizer.json; a tokenizer.json that is not the
 * model's character vocabulary makes a token-id model, said so; generate
 * refuses a FIFO for its default tokenizer and warns of a --tokenizer of
 * another size; --init-from refuses a missing path and an HF directory. */
static void test_import_refusals_and_tokenizer_checks(void)
{
    if (!cli_have_binary())
        return;
    char run[600], hf[600], dir[700], out[720], ck[900];
    run_exported(cli_path(run, sizeof run, "IR"), cli_path(hf, sizeof hf, "IR-hf"), TINY_RUN, "");

    checkpoint_path(ck, sizeof ck, run);
    size_t n0 = 0, n1 = 0;
    char *before = cli_read_file(ck, &n0);
    int rc = cli_run("import %s %s", hf, run);
    CHECK_MSG(rc == 2 && strstr(cli_out, "checkpoint.safetensors already exists: import into another OUT"),
              "import over a run: exit %d:\n%s", rc, cli_out);
    char *after = cli_read_file(ck, &n1);
    CHECK_MSG(before && after && n0 == n1 && !memcmp(before, after, n0), "import replaced %s", ck);
    free(before);
    free(after);
    const cli_refusal empty[] = {
        {"import '' x", "the HF_DIR is empty ('')"},
        {"import x ''", "the output directory OUT is empty ('')"},
    };
    cli_check_refusals("", "", CLI_REFUSALS(empty));

    static const struct {
        const char *file, *text, *needle;
    } bad[] = {
        {"tokenizer.json", "{bad", "tokenizer.json: not valid JSON"},
        {"tokenizer.json", "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0, \"b\": 400}}}",
         "tokenizer.json: token id 400 is beyond config.json's vocab_size"},
        {"tokenizer.json", "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}}, \"added_tokens\": "
                           "[{\"id\": 999, \"content\": \"<x>\"}]}",
         "tokenizer.json: token id 999 is beyond"},
        {"tokenizer.json", NULL, "tokenizer.json: not a regular file (a FIFO)"},
        {"model.safetensors", NULL, "model.safetensors': not a regular file (a FIFO)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "IR-bad%zu", i);
        hf_copy(hf, name, bad[i].file, bad[i].text, dir, sizeof dir);
        snprintf(out, sizeof out, "%s-out", dir);
        rc = cli_run_env("timeout 60", "import %s %s", dir, out);
        CHECK_MSG(rc == 2 && strstr(cli_out, bad[i].needle), "import with %s %s: exit %d (want 2), no \"%s\":\n%s",
                  bad[i].file, bad[i].text ? bad[i].text : "a FIFO", rc, bad[i].needle, cli_out);
        snprintf(ck, sizeof ck, "%s/" CHECKPOINT_FILE, out);
        CHECK_MSG(access(ck, F_OK) != 0, "import with a bad %s wrote %s", bad[i].file, ck);
    }

    /* one character short of the model's vocabulary: token ids, said so */
    hf_copy(hf, "IR-short", "tokenizer.json", "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}}}", dir,
            sizeof dir);
    snprintf(out, sizeof out, "%s-out", dir);
    rc = cli_run("import %s %s", dir, out);
    CHECK_MSG(rc == 0, "import with a one-token tokenizer.json: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("tokenizer.json is not a character vocabulary of vocab_size's");
    CHECK_OUT("token ids");
    rc = cli_run("generate %s --prompt-ids 0 --tokens 2 --threads 1", out);
    CHECK_MSG(rc == 0 && strstr(cli_out, "warning: ") && strstr(cli_out, "has token ids 0 .. 0, the model in") &&
                  strstr(cli_out, "the ids it lacks print as <id>"),
              "generate with a smaller tokenizer: exit %d:\n%s", rc, cli_out);
    put_file(out, "tokenizer.json", NULL);
    rc = cli_run_env("timeout 60", "generate %s --prompt-ids 0 --tokens 2 --threads 1", out);
    CHECK_MSG(rc == 2 && strstr(cli_out, "tokenizer.json: not a regular file (a FIFO)"),
              "generate with a FIFO tokenizer.json: exit %d:\n%s", rc, cli_out);

    rc = cli_run("train --model gpt --data %s --steps 1 --threads 1 --init-from /nonexistent/run", text);
    CHECK_MSG(rc == 2 && strstr(cli_out, "--init-from /nonexistent/run: /nonexistent/run/checkpoint.safetensors: "
                                         "No such file"),
              "--init-from a missing path: exit %d:\n%s", rc, cli_out);
    char needle[800];
    snprintf(needle, sizeof needle, "`ampc import %s OUT` makes it a checkpoint", hf);
    rc = cli_run("train --model gpt --data %s --steps 1 --threads 1 --init-from %s", text, hf);
    CHECK_MSG(rc == 2 && strstr(cli_out, needle), "--init-from an HF directory: exit %d:\n%s", rc, cli_out);
}

/* A DIR whose checkpoint cannot be loaded (missing, an empty directory,
 * a text file, a file that is no safetensors, a FIFO, a FIFO as the
 * checkpoint, /dev/zero): each format exits 1 after a message naming it,
 * never a crash, and writes nothing. */
static void test_unloadable_checkpoints_fail_cleanly(void)
{
    if (!cli_have_binary())
        return;
    char empty[600], garbage[600], fifo[600], missing_dir[600], fifo_ck[600], fifo_in[700];
    cli_path(missing_dir, sizeof missing_dir, "no-such-run");
    cli_path(empty, sizeof empty, "empty-run");
    cli_path(garbage, sizeof garbage, "garbage.safetensors");
    cli_path(fifo, sizeof fifo, "fifo-run");
    CHECK(mkdir(empty, 0777) == 0);
    CHECK(write_bytes(garbage, "\x10\0\0\0\0\0\0\0{not a header}  ", 24));
    CHECK(mkfifo(fifo, 0666) == 0);
    cli_path(fifo_ck, sizeof fifo_ck, "fifo-checkpoint");
    snprintf(fifo_in, sizeof fifo_in, "%s/" CHECKPOINT_FILE, fifo_ck);
    CHECK(mkdir(fifo_ck, 0777) == 0 && mkfifo(fifo_in, 0666) == 0);
    const char *dirs[] = {missing_dir, empty, text, garbage, fifo, fifo_ck, "/dev/zero"};
    const char *formats[] = {"hf", "gguf"};
    for (size_t f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
            char out[700];
            snprintf(out, sizeof out, "%s/unloadable-%zu-%s", tmpdir, i, formats[f]);
            int rc = cli_run("export --format %s '%s' '%s'", formats[f], dirs[i], out);
            CHECK_MSG(rc == 1, "export --format %s of %s: exit %d, expected 1:\n%s", formats[f], dirs[i], rc,
                      cli_out);
            CHECK_MSG(strstr(cli_out, dirs[i]) != NULL, "export --format %s of %s does not name it:\n%s",
                      formats[f], dirs[i], cli_out);
            CHECK_MSG(access(out, F_OK) != 0, "export --format %s of %s wrote %s", formats[f], dirs[i], out);
        }
}

/* A weight beyond f16's range (65504) is refused with --dtype f16 by
 * both formats, naming the tensor and the dtypes that hold it; bf16
 * holds it. */
static void test_export_refuses_values_its_dtype_cannot_hold(void)
{
    if (!cli_have_binary())
        return;
    char run[600], out[700], ck[800];
    cli_path(run, sizeof run, "big-weight");
    int rc = cli_run("train --model gpt --data %s --layers 1 --heads 2 --width 8 --context 8 --batch 2 --steps 1 "
                     "--precision fp32 --threads 1 --save %s",
                     text, run);
    CHECK_MSG(rc == 0, "train: exit %d:\n%s", rc, cli_out);
    checkpoint_path(ck, sizeof ck, run);
    ckpt c = {.path = ck, .n_params = -1};
    CHECK_OK(ckpt_open(&c));
    const in_entry *e = ckpt_find(&c, "h.0.mlp.fc1.weight");
    CHECK(e && e->dt == AMP_F32);
    long at = e ? (long)(e->bytes - c.file) : -1;
    ckpt_close(&c);
    FILE *f = at > 0 ? fopen(ck, "r+b") : NULL;
    float big = 1e5f;
    CHECK(f && fseek(f, at, SEEK_SET) == 0 && fwrite(&big, 4, 1, f) == 1);
    if (f)
        fclose(f);
    const char *formats[] = {"hf", "gguf"};
    for (int i = 0; i < 2; i++) {
        snprintf(out, sizeof out, "%s/big-%s-f16", tmpdir, formats[i]);
        rc = cli_run("export --format %s --dtype f16 %s %s", formats[i], run, out);
        CHECK_MSG(rc == 1, "export --format %s --dtype f16 of a weight of 1e5: exit %d, expected 1:\n%s", formats[i],
                  rc, cli_out);
        CHECK_OUT("tensor h.0.mlp.fc1.weight, element 0: 100000 is beyond f16's range (65504): choose --dtype f32 "
                  "or bf16");
        char st[800];
        snprintf(st, sizeof st, "%s/model.safetensors", out);
        CHECK_MSG(access(out, F_OK) != 0 || access(st, F_OK) != 0, "a failed export wrote %s", st);
        snprintf(out, sizeof out, "%s/big-%s-bf16", tmpdir, formats[i]);
        rc = cli_run("export --format %s --dtype bf16 %s %s", formats[i], run, out);
        CHECK_MSG(rc == 0, "export --format %s --dtype bf16 of a weight of 1e5: exit %d:\n%s", formats[i], rc,
                  cli_out);
    }
}

/* Exporting into a directory an earlier export wrote: a model without a
 * tokenizer (token ids, none beside the checkpoint) removes the earlier
 * model's tokenizer.json, which is not its vocabulary. */
static void test_export_over_an_earlier_one_drops_its_tokenizer(void)
{
    if (!cli_have_binary())
        return;
    char chars[600], ids[600], tr[600], out[600], tok[700];
    cli_path(chars, sizeof chars, "stale-chars");
    cli_path(ids, sizeof ids, "stale-ids");
    cli_path(tr, sizeof tr, "stale.bin");
    cli_path(out, sizeof out, "stale-hf");
    snprintf(tok, sizeof tok, "%s/tokenizer.json", out);
    write_token_file(tr, 2048, 50, 3);
    int rc = cli_run("train --model gpt --data %s --layers 1 --heads 2 --width 8 --context 8 --batch 2 --steps 1 "
                     "--threads 1 --save %s",
                     text, chars);
    CHECK_MSG(rc == 0, "train --data: exit %d:\n%s", rc, cli_out);
    rc = cli_run("train --model gpt --data-bin %s --val-bin %s --vocab 50 --layers 1 --heads 2 --width 8 --context 8 --batch 2 "
                 "--steps 1 --threads 1 --save %s",
                 tr, tr, ids);
    CHECK_MSG(rc == 0, "train --data-bin: exit %d:\n%s", rc, cli_out);
    rc = cli_run("export %s %s", chars, out);
    CHECK_MSG(rc == 0, "export of the character model: exit %d:\n%s", rc, cli_out);
    CHECK_MSG(access(tok, F_OK) == 0, "the character model's export wrote no %s", tok);
    rc = cli_run("export %s %s", ids, out);
    CHECK_MSG(rc == 0, "export of the token-id model over it: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("the earlier one in OUT removed");
    CHECK_MSG(access(tok, F_OK) != 0, "%s of the character model is left beside the token-id model", tok);
}

/* Command lines refused without Python. */
static void test_bad_command_lines_are_refused(void)
{
    if (!cli_have_binary())
        return;
    const cli_refusal cases[] = {
        {"export", "give the checkpoint directory DIR and the output OUT"},
        {"export a b c", "unexpected argument 'c'"},
        {"export --format onnx a b", "--format 'onnx' is not one ampc writes: hf gguf"},
        {"export --dtype f64 a b", "--dtype"},
        {"import", "give the directory to read HF_DIR and the output directory OUT"},
        {"import --format gguf a b", "--format 'gguf' is not one ampc reads: hf"},
        {"export --name tiny a b", "--name is an option of --format gguf; --format hf has no use for it"},
        {"export --format hf --data t.txt a b", "--data is an option of --format gguf; --format hf has no use"},
        {"export --format onnx --name tiny a b", "--format 'onnx' is not one ampc writes: hf gguf"},
    };
    cli_check_refusals("", "", cases, sizeof cases / sizeof cases[0]);
}

int main(void)
{
    const char *src = getenv("AMPC_SOURCE_DIR"), *tp = getenv("AMPC_TORCH_PYTHON");
    snprintf(script, sizeof script, "%s/tests/test_hf.py", src ? src : ".");
    cli_init("hf");
    amp_set_num_threads(1);
    char venv[1100];
    snprintf(venv, sizeof venv, "%s/.bench-venv/bin/python", src ? src : ".");
    const char *cands[] = {tp && *tp ? tp : NULL, "python3", venv};
    static const char *const pkgs[] = {"torch", "safetensors", "transformers", "tokenizers"};
    snprintf(missing, sizeof missing, "no Python found");
    for (int i = 0; i < 3 && !have_py; i++) {
        if (!cands[i])
            continue;
        snprintf(python, sizeof python, "%s", cands[i]);
        have_py = true;
        for (int k = 0; k < 4 && have_py; k++) {
            char probe[1400];
            snprintf(probe, sizeof probe, "'%s' -c 'import %s' > /dev/null 2>&1", python, pkgs[k]);
            have_py = system(probe) == 0;
            if (!have_py)
                snprintf(missing, sizeof missing, "no %s in %s", pkgs[k], python);
        }
    }
    if (!have_py)
        printf("  %s (nor in $AMPC_TORCH_PYTHON / python3 / .bench-venv; scripts/torch-deps.sh installs torch, "
               "safetensors, transformers, tokenizers): the transformers tests are skipped\n",
               missing);
    cli_write_tiny_text(cli_path(text, sizeof text, "text.txt"));
    RUN(test_bad_command_lines_are_refused);
    RUN(test_export_in_bf16_rounds_each_weight);
    RUN(test_import_refusals_and_tokenizer_checks);
    RUN(test_unloadable_checkpoints_fail_cleanly);
    RUN(test_export_refuses_values_its_dtype_cannot_hold);
    RUN(test_export_over_an_earlier_one_drops_its_tokenizer);
    RUN(test_export_loads_in_transformers);
    RUN(test_import_of_random_gpt2_gives_its_logits);
    RUN(test_round_trip_is_bit_exact);
    RUN(test_init_from_fine_tunes);
    RUN(test_bad_hf_directories_are_refused);
    RUN(test_gpt2_vocabulary_imports_as_token_ids);
    RUN(test_tokenizer_json_decodes_generation);
    RUN(test_no_bias_round_trip_keeps_zero_biases);
    cli_cleanup();
    int rc = harness_done();
    return rc == 0 && !have_py ? 77 : rc;
}
