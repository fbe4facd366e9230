/*
 * test_gguf.c - `ampc export --format gguf`: the GGUF file llama.cpp
 * loads, read back with the gguf package (llama.cpp's gguf-py,
 * gguf.GGUFReader) by tests/test_gguf.py, which checks every key, every
 * tensor's name, ne, type and value against the checkpoint (safetensors
 * and torch), the alignment and the vocabulary, for f32, f16 and bf16.
 * The exports run always; the Python side, once over all of their files,
 * with the first of $AMPC_TORCH_PYTHON, python3 and the repository's
 * .bench-venv that has gguf, numpy, safetensors and torch; without one
 * the read-back is skipped and, when nothing failed, the program exits 77
 * (CTest: skipped). The refusals (a checkpoint that
 * is not a gpt, a damaged one, an output that cannot be written, bad
 * options) need no Python and always run: each exits non-zero with a
 * message and leaves no file, partial or temporary, behind.
 */
#include "harness.h"
#include "python_side.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

static char text[256], images[256], run_dir[300], ckpt[400];
static bool have_gguf;

static bool need_gguf(void)
{
    if (!have_gguf)
        harness_skip("no gguf, numpy, safetensors, tokenizers or torch in $AMPC_TORCH_PYTHON / python3 / .bench-venv");
    return have_gguf;
}

/* The trained gpt every test exports: tmpdir/gpt-run (made once). */
static bool trained(void)
{
    static int done = 0;
    if (!cli_have_binary())
        return false;
    if (!done) {
        snprintf(run_dir, sizeof run_dir, "%s/gpt-run", tmpdir);
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", run_dir);
        int rc = cli_run("train --model gpt --data %s --layers 2 --heads 2 --width 16 --context 8 --mlp-width 32 "
                         "--batch 4 --steps 4 --lr 0.03 --val-batches 1 --threads 1 --save %s",
                         text, run_dir);
        CHECK_MSG(rc == 0, "train: exit %d:\n%s", rc, cli_out);
        done = rc == 0 ? 1 : -1;
    }
    return done == 1;
}

/* Exports dir to out with extra options; the exit code (output in cli_out). */
static int export_to(const char *dir, const char *out, const char *extra)
{
    return cli_run("export --format gguf %s '%s' '%s'", extra, dir, out);
}

/* The files the export tests wrote, for test_gguf.py to read back in one
 * run (it imports torch, which takes seconds): "'OUT' 'CKPT' DTYPE 'NAME'"
 * each. */
static char to_check[4000];
static int n_to_check;

/* Adds out (exported from the checkpoint ck, weights in dtype, named
 * name) to what test_gguf.py reads back, if the export wrote it (else
 * the count in the read-back test falls short). */
static void check_file(const char *out, const char *ck, const char *dtype, const char *name)
{
    if (access(out, F_OK) != 0)
        return;
    size_t len = strlen(to_check);
    snprintf(to_check + len, sizeof to_check - len, " '%s' '%s' %s '%s'", out, ck, dtype, name);
    n_to_check++;
}

/* Every entry of tmpdir/dir whose name contains part: their count. */
static int count_like(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL)
        n += strstr(e->d_name, part) != NULL;
    if (d)
        closedir(d);
    return n;
}

static void check_exported(const char *dtype)
{
    if (!trained())
        return;
    char out[500], extra[64];
    snprintf(out, sizeof out, "%s/model-%s.gguf", tmpdir, dtype);
    snprintf(extra, sizeof extra, "--dtype %s --name tiny-%s", dtype, dtype);
    int rc = export_to(run_dir, out, extra);
    CHECK_MSG(rc == 0, "export --dtype %s: exit %d:\n%s", dtype, rc, cli_out);
    snprintf(extra, sizeof extra, "tiny-%s", dtype);
    check_file(out, ckpt, dtype, extra);
}

static void test_export_f32(void) { check_exported("f32"); }
static void test_export_f16(void) { check_exported("f16"); }
static void test_export_bf16(void) { check_exported("bf16"); }

/* A one-block gpt trained on data (train_extra added) into
 * tmpdir/<name>-run, exported (export_extra) to tmpdir/<name>.gguf and
 * queued for the read-back with weights in dtype. */
static void train_and_export(const char *name, const char *data, const char *train_extra, const char *export_extra,
                             const char *dtype)
{
    char dir[500], ck[600], out[600], run[300];
    snprintf(run, sizeof run, "%s-run", name);
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, run);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    int rc = cli_run("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --mlp-width 32 "
                     "--batch 4 --val-batches 1 --threads 1 %s --save %s", data, train_extra, dir);
    CHECK_MSG(rc == 0, "train %s: exit %d:\n%s", train_extra, rc, cli_out);
    snprintf(out, sizeof out, "%s/%s.gguf", tmpdir, name);
    rc = export_to(dir, out, export_extra);
    CHECK_MSG(rc == 0, "export %s: exit %d:\n%s", export_extra, rc, cli_out);
    check_file(out, ck, dtype, run);
}

/* Without --dtype the weights keep the checkpoint's type: a run with bf16
 * parameters exports bf16 (its very bits), an fp32 one f32; the name is
 * DIR's last component. */
static void test_default_dtype_is_the_checkpoints(void)
{
    if (!trained())
        return;
    train_and_export("bf16", text, "--steps 2 --precision bf16 --param-dtype bf16", "", "bf16");
    char out[600];
    snprintf(out, sizeof out, "%s/f32-default.gguf", tmpdir);
    int rc = export_to(ckpt, out, "");
    CHECK_MSG(rc == 0, "export of the .safetensors file: exit %d:\n%s", rc, cli_out);
    check_file(out, ckpt, "f32", "checkpoint.safetensors");
}

static void check_nothing_left(const char *out);

/* A gpt without biases (--no-bias) exports with zero biases, which
 * test_gguf.py checks are there and zero. */
static void test_no_bias_exports_zero_biases(void)
{
    if (cli_have_binary())
        train_and_export("no-bias", text, "--steps 2 --no-bias", "", "f32");
}

/* A gpt trained on token ids of a byte-level BPE (trained by
 * test_gguf.py with `tokenizers`, about 300 tokens with <|endoftext|>
 * special; the model's vocabulary 320, so 20 ids are padding): refused
 * while its directory has no tokenizer.json, naming where to put it, or
 * one that is not a byte-level BPE of its ids (exit 2, naming what is
 * wrong); with the real one, exported with its tokens, merges and types. */
static void test_a_token_id_model_exports_its_tokenizer(void)
{
    if (!cli_have_binary() || !need_gguf())
        return;
    char data[300], dir[400], ck[500], out[500];
    snprintf(data, sizeof data, "%s/bpe-data", tmpdir);
    snprintf(dir, sizeof dir, "%s/bpe-run", tmpdir);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    snprintf(out, sizeof out, "%s/bpe.gguf", tmpdir);
    CHECK(mkdir(data, 0700) == 0);
    int rc = python_run("bpe '%s' '%s'", text, data);
    CHECK_MSG(rc == 0, "test_gguf.py bpe: exit %d:\n%s", rc, cli_out);
    rc = cli_run("train --model gpt --data-bin %s/train.bin --val-bin %s/val.bin --vocab 320 --layers 1 --heads 2 "
                 "--width 16 --context 8 --mlp-width 32 --batch 4 --steps 2 --val-batches 1 --threads 1 --save %s",
                 data, data, dir);
    CHECK_MSG(rc == 0, "train --data-bin: exit %d:\n%s", rc, cli_out);
    rc = export_to(dir, out, "");
    CHECK_MSG(rc == 1, "export without a tokenizer.json: exit %d, expected 1:\n%s", rc, cli_out);
    CHECK_OUT("/tokenizer.json does not exist (put the model's Hugging Face tokenizer.json there)");
    check_nothing_left(out);
    /* tokenizer.json files that are not a byte-level BPE of the model's ids: exit 2, naming what */
    static const struct {
        const char *json, *says;
    } bad[] = {
        {"{\"model\": ", "tokenizer.json: not JSON: "},
        {"{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", "its model is not a BPE with a vocab and merges"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": null, "
         "\"decoder\": {\"type\": \"ByteLevel\"}}", "its pre_tokenizer (\"\") and decoder (\"ByteLevel\") are not both"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 320}, \"merges\": [\"a b\", [\"a\", 1]]}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}}",
         "model.merges[1] is neither a string \"a b\" nor a pair"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 320}, \"merges\": []}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}}",
         "model.vocab's token \"a\" has id 320; the model's vocabulary is 320 ids"},
    };
    char cmd[1000];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/tokenizer.json", dir);
        FILE *f = fopen(cmd, "w");
        CHECK(f && fputs(bad[i].json, f) >= 0 && fclose(f) == 0);
        rc = export_to(dir, out, "");
        CHECK_MSG(rc == 2, "export with tokenizer.json %s: exit %d, expected 2:\n%s", bad[i].json, rc, cli_out);
        CHECK_OUT(bad[i].says);
        check_nothing_left(out);
    }
    snprintf(cmd, sizeof cmd, "cp '%s/tokenizer.json' '%s/'", data, dir);
    CHECK(system(cmd) == 0);
    rc = export_to(dir, out, "");
    CHECK_MSG(rc == 0, "export with a tokenizer.json: exit %d:\n%s", rc, cli_out);
    check_file(out, ck, "f32", "bpe-run");
}

/* A corpus of every byte but NUL (which makes a file binary, not text,
 * to ampc): every branch of GPT-2's byte-to-character
 * table (printable bytes, control bytes, 0x7f..0xa0, 0xad, bytes above
 * 0x80) in the vocabulary test_gguf.py checks. */
static void test_every_byte_becomes_a_token(void)
{
    if (!cli_have_binary())
        return;
    char corpus[500];
    snprintf(corpus, sizeof corpus, "%s/bytes.bin", tmpdir);
    FILE *f = fopen(corpus, "wb");
    CHECK(f != NULL);
    for (int i = 0; f && i < 40 * 256; i++)
        if ((i * 97 + i / 256) & 255)
            fputc((i * 97 + i / 256) & 255, f);
    if (f)
        fclose(f);
    train_and_export("bytes", corpus, "--steps 1", "--dtype f16", "f16");
}

/* test_gguf.py reads every file the tests above wrote with the gguf
 * package and checks it against its checkpoint. */
static void test_exported_files_read_back_as_their_checkpoints(void)
{
    if (!need_gguf())
        return;
    CHECK_MSG(n_to_check == 9, "%d files to check, expected 9 (an export above failed)", n_to_check);
    int rc = python_run("%s", to_check);
    printf("%s", cli_out);
    CHECK_MSG(rc == 0, "test_gguf.py: exit %d:\n%s", rc, cli_out);
}

/* A failed export leaves nothing at OUT and no temporary beside it. */
static void check_nothing_left(const char *out)
{
    CHECK_MSG(access(out, F_OK) != 0, "%s exists after a failed export", out);
    CHECK_MSG(count_like(tmpdir, ".tmp.") == 0, "a temporary file is left in %s", tmpdir);
}

static void test_a_checkpoint_that_is_not_a_gpt_is_refused(void)
{
    if (!cli_have_binary())
        return;
    char dir[500], out[500];
    snprintf(dir, sizeof dir, "%s/mlp-run", tmpdir);
    int rc = cli_run("train --model mlp --hidden 8 --data %s --batch 8 --steps 1 --threads 1 --save %s", images, dir);
    CHECK_MSG(rc == 0, "train mlp: exit %d:\n%s", rc, cli_out);
    snprintf(out, sizeof out, "%s/mlp.gguf", tmpdir);
    rc = export_to(dir, out, "");
    CHECK_MSG(rc == 1, "export of an mlp: exit %d, expected 1:\n%s", rc, cli_out);
    CHECK_OUT("holds a mlp model; GGUF export writes gpt models");
    check_nothing_left(out);
}

/* A gpt llama.cpp's gpt2 would run otherwise than ampc (the erf GELU) is
 * refused, naming the option. */
static void test_a_gpt_llama_cpp_runs_otherwise_is_refused(void)
{
    if (!cli_have_binary())
        return;
    static const struct {
        const char *train, *says;
    } cases[] = {{"--gelu exact", "uses the exact (erf) GELU (--gelu exact)"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[500], out[500];
        snprintf(dir, sizeof dir, "%s/unfit-%zu", tmpdir, i);
        int rc = cli_run("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 4 --steps 1 "
                         "--val-batches 1 --threads 1 %s --save %s", text, cases[i].train, dir);
        CHECK_MSG(rc == 0, "train %s: exit %d:\n%s", cases[i].train, rc, cli_out);
        snprintf(out, sizeof out, "%s/unfit.gguf", tmpdir);
        rc = export_to(dir, out, "");
        CHECK_MSG(rc == 1, "export of a gpt trained with %s: exit %d, expected 1:\n%s", cases[i].train, rc, cli_out);
        CHECK_OUT(cases[i].says);
        check_nothing_left(out);
    }
}

/* A damaged checkpoint (cut short in its tensors) is refused by the
 * checkpoint's loader, naming the file; an earlier OUT stays as it was. */
static void test_a_damaged_checkpoint_is_refused_and_out_kept(void)
{
    if (!trained())
        return;
    char dir[500], bad[600], out[600];
    snprintf(dir, sizeof dir, "%s/damaged", tmpdir);
    snprintf(bad, sizeof bad, "%s/checkpoint.safetensors", dir);
    CHECK(mkdir(dir, 0777) == 0);
    size_t len = 0;
    char *body = cli_read_file(ckpt, &len);
    CHECK(body != NULL && len > 1000);
    FILE *f = body ? fopen(bad, "wb") : NULL;
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(body, 1, len - 500, f) == len - 500);
        fclose(f);
    }
    free(body);
    snprintf(out, sizeof out, "%s/kept.gguf", tmpdir);
    f = fopen(out, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("earlier", f);
        fclose(f);
    }
    int rc = export_to(dir, out, "");
    CHECK_MSG(rc == 1, "export of a damaged checkpoint: exit %d, expected 1:\n%s", rc, cli_out);
    CHECK_OUT(bad);
    char *kept = cli_read_file(out, &len);
    CHECK_MSG(kept && len == 7 && memcmp(kept, "earlier", 7) == 0, "%s was changed by a failed export", out);
    free(kept);
    unlink(out);
    CHECK_MSG(count_like(tmpdir, ".tmp.") == 0, "a temporary file is left in %s", tmpdir);
}

/* OUT in a directory that does not exist, OUT a directory, OUT in a
 * directory without write permission (unless root): refused, naming
 * OUT, nothing left. */
static void test_an_unwritable_out_is_refused(void)
{
    if (!trained())
        return;
    char out[600], ro[500];
    snprintf(out, sizeof out, "%s/no-such-dir/m.gguf", tmpdir);
    int rc = export_to(run_dir, out, "");
    CHECK_MSG(rc == 1, "export into a missing directory: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("no-such-dir/m.gguf: cannot create");
    CHECK_OUT("No such file or directory");
    rc = export_to(run_dir, run_dir, "");
    CHECK_MSG(rc == 1, "export over a directory: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("Is a directory");
    snprintf(ro, sizeof ro, "%s/read-only", tmpdir);
    CHECK(mkdir(ro, 0555) == 0);
    snprintf(out, sizeof out, "%s/m.gguf", ro);
    if (geteuid() != 0) {
        rc = export_to(run_dir, out, "");
        CHECK_MSG(rc == 1, "export into a read-only directory: exit %d:\n%s", rc, cli_out);
        CHECK_OUT("Permission denied");
    }
    CHECK(count_like(ro, ".") == 2); /* "." and ".." only */
    check_nothing_left(out);
    chmod(ro, 0755);
}

/* OUT naming the checkpoint itself (by any path) would replace the run's
 * checkpoint: refused (exit 2), the checkpoint unchanged. */
static void test_out_that_is_the_checkpoint_is_refused(void)
{
    if (!trained())
        return;
    size_t before = 0, after = 0;
    char *a = cli_read_file(ckpt, &before), alias[700];
    snprintf(alias, sizeof alias, "%s/../gpt-run/checkpoint.safetensors", run_dir);
    int rc = export_to(run_dir, alias, "");
    CHECK_MSG(rc == 2, "export over the checkpoint: exit %d, expected 2:\n%s", rc, cli_out);
    CHECK_OUT("is the checkpoint itself");
    char *b = cli_read_file(ckpt, &after);
    CHECK(a && b && before == after && memcmp(a, b, before) == 0);
    free(a);
    free(b);
}

/* general.name at its longest (255 bytes, two-byte characters), read
 * back whole by test_gguf.py; one a byte longer, one that is not UTF-8
 * (given with --name, or as DIR's last component): exit 2, nothing
 * written. */
static void test_the_name_is_utf8_within_its_limit(void)
{
    if (!trained())
        return;
    char name[300] = "", out[500], link[500], extra[400];
    for (int i = 0; i < 127; i++)
        strcat(name, "\xc3\xa9"); /* é */
    strcat(name, "a");
    snprintf(out, sizeof out, "%s/longest-name.gguf", tmpdir);
    snprintf(extra, sizeof extra, "--name '%s'", name);
    int rc = export_to(run_dir, out, extra);
    CHECK_MSG(rc == 0, "export with a name of 255 bytes: exit %d:\n%s", rc, cli_out);
    check_file(out, ckpt, "f32", name);
    name[254] = '\0';
    snprintf(extra, sizeof extra, "--name '%s\xc3\xa9'", name);
    snprintf(out, sizeof out, "%s/long-name.gguf", tmpdir);
    rc = export_to(run_dir, out, extra);
    CHECK_MSG(rc == 2, "export with a name of 256 bytes: exit %d, expected 2:\n%s", rc, cli_out);
    CHECK_OUT("--name is 256 bytes long; a model's name is at most 255 bytes");
    check_nothing_left(out);
    rc = export_to(run_dir, out, "--name 'a\xff\xfe'");
    CHECK_MSG(rc == 2, "export with a name that is not UTF-8: exit %d, expected 2:\n%s", rc, cli_out);
    CHECK_OUT("--name is not valid UTF-8, which a GGUF string must be");
    check_nothing_left(out);
    snprintf(link, sizeof link, "%s/run-\xff", tmpdir);
    CHECK(symlink(run_dir, link) == 0);
    rc = export_to(link, out, "");
    CHECK_MSG(rc == 2, "export of a DIR named in bytes that are not UTF-8: exit %d, expected 2:\n%s", rc, cli_out);
    CHECK_OUT("(DIR's last component; give another with --name) is not valid UTF-8");
    check_nothing_left(out);
}

/* The command line: a missing OUT or DIR, an unknown format or dtype:
 * exit 2, naming what was wrong. */
static void test_bad_command_lines_are_refused(void)
{
    if (!cli_have_binary())
        return;
    static const cli_refusal cases[] = {
        {"export --format gguf run", "give the checkpoint directory DIR and the output OUT"},
        {"export --format gguf", "give the checkpoint directory DIR and the output OUT"},
        {"export --format onnx run out", "--format 'onnx' is not one ampc writes: hf gguf"},
        {"export --format gguf --dtype f64 run out", "--dtype: unknown value 'f64' (choose from f32|f16|bf16)"},
        {"export --format gguf run out extra", "unexpected argument 'extra'"},
    };
    cli_check_refusals(NULL, "", CLI_REFUSALS(cases));
}

int main(void)
{
    cli_init_tiny("gguf", images, text);
    have_gguf = python_find("test_gguf.py", "gguf, numpy, safetensors, tokenizers, torch");
    if (!have_gguf)
        printf("  no Python with gguf, numpy, safetensors, tokenizers and torch ($AMPC_TORCH_PYTHON, python3, .bench-venv; "
               "scripts/torch-deps.sh installs them): the read-back tests are skipped\n");
    RUN(test_export_f32);
    RUN(test_export_f16);
    RUN(test_export_bf16);
    RUN(test_the_name_is_utf8_within_its_limit);
    RUN(test_default_dtype_is_the_checkpoints);
    RUN(test_every_byte_becomes_a_token);
    RUN(test_no_bias_exports_zero_biases);
    RUN(test_a_token_id_model_exports_its_tokenizer);
    RUN(test_exported_files_read_back_as_their_checkpoints);
    RUN(test_a_checkpoint_that_is_not_a_gpt_is_refused);
    RUN(test_a_gpt_llama_cpp_runs_otherwise_is_refused);
    RUN(test_a_damaged_checkpoint_is_refused_and_out_kept);
    RUN(test_an_unwritable_out_is_refused);
    RUN(test_out_that_is_the_checkpoint_is_refused);
    RUN(test_bad_command_lines_are_refused);
    cli_cleanup();
    int rc = harness_done();
    return rc == 0 && !have_gguf ? 77 : rc;
}
