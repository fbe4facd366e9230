/*
 * test_cli_tokens.c - the gpt on token files (tools/tokens.c,
 * tools/tokenizer.c): the readers on bytes written here (nanoGPT's raw
 * uint16 files, llm.c's shards, meta.pkl, the JSON sidecar, tokenizer.json),
 * the windows a batch draws against a re-implementation of nanoGPT's
 * get_batch on ampc's generator, and `ampc train / eval / generate` with
 * --data-bin, --val-bin, --vocab, --ids, --prompt-ids and --tokenizer.
 *
 * meta.pkl comes from Python's pickle and the tokenizer from the
 * `tokenizers` package (their tests skip without them: $AMPC_TORCH_PYTHON,
 * python3, the source dir's .bench-venv); ampc's decoding is checked
 * against tokenizers' own decode of the same ids.
 */
#include "python_side.h"
#include "test_cli_util.h"

#include "tokenizer.h"
#include "tokens.h"

static char train_bin[300], val_bin[300];
static char python[1100];
static bool have_pickle, have_tokenizers;

#define MODEL "--model gpt --width 16 --layers 1 --heads 2 --context 8 --batch 4 --threads 1"

/* n uint16 tokens tok(i) as a raw file, or an llm.c shard when llmc. */
static void write_tokens(const char *path, int64_t n, int (*tok)(int64_t), bool llmc)
{
    size_t off = llmc ? TOK_LLMC_HEADER : 0, len = off + 2 * (size_t)n;
    unsigned char *p = calloc(len ? len : 1, 1);
    if (llmc) {
        int32_t h[3] = {TOK_LLMC_MAGIC, 1, (int32_t)n};
        memcpy(p, h, sizeof h); /* x86: little-endian, as llm.c's numpy writes it */
    }
    for (int64_t i = 0; i < n; i++) {
        p[off + 2 * i] = (unsigned char)(tok(i) & 255);
        p[off + 2 * i + 1] = (unsigned char)(tok(i) >> 8);
    }
    test_write_file(path, p, len);
    free(p);
}

static int tok_mod50(int64_t i) { return (int)((i * 7 + i / 13) % 50); }
static int tok_index(int64_t i) { return (int)i; }

/* The generator as written in tools/data.c, again, to check the draws:
 * splitmix64, and uniform in [0, bound) by rejecting the low 2^64 mod bound. */
static uint64_t ref_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t ref_below(uint64_t *s, uint64_t bound)
{
    for (;;) {
        uint64_t r = ref_splitmix(s);
        if (r >= (0 - bound) % bound)
            return r % bound;
    }
}

/* nanoGPT's get_batch: ix = randint(len(data) - block_size, (B,)),
 * x = data[i:i+T], y = data[i+1:i+1+T]; on a file whose token i is i the
 * rows show their starts. */
static void test_windows_are_get_batch_draws(void)
{
    const int64_t n = 300, T = 8, B = 16;
    char path[300];
    write_tokens(cli_path(path, sizeof path, "index.bin"), n, tok_index, false);
    tok_file f;
    CHECK(tok_open(&f, path, "--data-bin", 0, T + 1));
    amp_tensor *x = amp_empty(AMP_SHAPE(B, T), AMP_I64), *y = amp_empty(AMP_SHAPE(B, T), AMP_I64);
    for (uint64_t seed = 0; seed < 5; seed++) {
        CHECK(tok_fill(&f, seed * 977, x, y));
        uint64_t s = seed * 977;
        const int64_t *px = amp_tensor_cdata(x), *py = amp_tensor_cdata(y);
        for (int64_t b = 0; b < B; b++) {
            int64_t i = (int64_t)ref_below(&s, (uint64_t)(n - T));
            for (int64_t t = 0; t < T; t++) {
                CHECK_MSG(px[b * T + t] == i + t, "seed %llu row %lld: x[%lld] = %lld, not %lld",
                          (unsigned long long)seed, (long long)b, (long long)t, (long long)px[b * T + t],
                          (long long)(i + t));
                CHECK(py[b * T + t] == i + t + 1);
            }
        }
    }
    /* every start of [0, n - T) is drawn, none past it: n - T = 3 here */
    tok_file g;
    write_tokens(path, T + 3, tok_index, false);
    CHECK(tok_open(&g, path, "--data-bin", 0, T + 1));
    int64_t starts[400];
    bool seen[8] = {0};
    tok_starts(42, 400, g.n, T, starts);
    for (int i = 0; i < 400; i++) {
        CHECK(starts[i] >= 0 && starts[i] < 3);
        seen[starts[i] & 7] = true;
    }
    CHECK(seen[0] && seen[1] && seen[2]);
    tok_close(&g);
    tok_close(&f);
    amp_tensor_free(x);
    amp_tensor_free(y);
}

/* The same tokens raw and as an llm.c shard: the same run. */
static void test_raw_and_llmc_files_train_alike(void)
{
    char shard[300], vshard[300], a[300];
    write_tokens(cli_path(shard, sizeof shard, "shard_train.bin"), 2000, tok_mod50, true);
    write_tokens(cli_path(vshard, sizeof vshard, "shard_val.bin"), 400, tok_mod50, true);
    CLI_OK("train " MODEL " --steps 4 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s'", train_bin, val_bin,
           cli_path(a, sizeof a, "raw"));
    CHECK_OUT("token ids of size 50");
    double raw = cli_value_after("val_loss ");
    CLI_OK("train " MODEL " --steps 4 --data-bin '%s' --val-bin '%s' --vocab 50", shard, vshard);
    CHECK_OUT("(llm.c shard)");
    CHECK(raw > 0 && cli_value_after("val_loss ") == raw);
}

/* ampc eval: the same windows every time, train's closing measure. */
static void test_eval_is_deterministic(void)
{
    char run[300];
    CLI_OK("train " MODEL " --steps 3 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s'", train_bin, val_bin,
           cli_path(run, sizeof run, "evalrun"));
    double trained = cli_value_after("val_loss ");
    CLI_OK("eval '%s' --threads 1", run);
    double first = cli_value_after("val_loss ");
    CLI_OK("eval '%s' --threads 1 --val-bin '%s'", run, val_bin);
    CHECK(trained > 0 && first == trained && cli_value_after("val_loss ") == first);
    /* another val file: another measure */
    CLI_OK("eval '%s' --threads 1 --val-bin '%s'", run, train_bin);
    CHECK(cli_value_after("val_loss ") != first);
}

/* --stop-at 3 then --resume equals 6 steps straight, byte for byte; a
 * changed --data-bin is refused on resume. */
static void test_resume_is_bit_exact(void)
{
    char a[300], b[300], why[300], other[300];
    CLI_OK("train " MODEL " --steps 6 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s'", train_bin, val_bin,
           cli_path(a, sizeof a, "straight"));
    CLI_OK("train " MODEL " --steps 6 --stop-at 3 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s'", train_bin,
           val_bin, cli_path(b, sizeof b, "split"));
    CLI_OK("train --resume '%s' --threads 1", b);
    CHECK_MSG(cli_same_checkpoint(a, b, why, sizeof why), "%s", why);
    /* the same size, one token changed */
    cli_path(other, sizeof other, "changed.bin");
    size_t n = 0;
    char *p = cli_read_file(train_bin, &n);
    p[100] ^= 1;
    test_write_file(other, p, n);
    free(p);
    CHECK(cli_run("train " MODEL " --steps 6 --stop-at 3 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s/x'",
                  train_bin, val_bin, tmpdir) == 0);
    CHECK(cli_run("train --resume '%s/x' --data-bin '%s' --threads 1", tmpdir, other) == 1);
    CHECK_OUT("is not the file the run in");
}

static void test_bad_files_are_refused_with_their_offset(void)
{
    char path[300], msg[600];
    struct {
        const char *name, *needle;
        unsigned char bytes[32];
        size_t n;
    } cases[] = {
        {"odd.bin", "byte 20: an odd length (21 bytes)", {0}, 21},
        {"big.bin", "byte 6: token 60 (number 3) is not below the vocabulary size 50", {1, 0, 2, 0, 3, 0, 60, 0}, 24},
        {"empty.bin", "byte 0: the file is empty", {0}, 0},
        {"short.bin", "byte 8: 4 tokens, fewer than one window takes (--context + 1 = 9)", {0}, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_write_file(cli_path(path, sizeof path, cases[i].name), cases[i].bytes, cases[i].n);
        int rc = cli_run("train " MODEL " --steps 1 --data-bin '%s' --val-bin '%s' --vocab 50", path, val_bin);
        CHECK_MSG(rc == 2, "%s: exit %d\n%s", cases[i].name, rc, cli_out);
        snprintf(msg, sizeof msg, "--data-bin %s: %s", path, cases[i].needle);
        CHECK_OUT(msg);
    }
    /* llm.c headers: magic, version, count */
    struct {
        int32_t magic, version, count;
        const char *needle;
    } heads[] = {
        {20240801, 7, 100, "byte 0: magic 20240801 is llm.c's LLaMA-3 shard"},
        {20240520, 2, 100, "byte 4: llm.c header version 2"},
        {20240520, 1, 99, "byte 8: the header's token count 99 does not match the file"},
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        unsigned char buf[1024 + 200] = {0};
        int32_t h[3] = {heads[i].magic, heads[i].version, heads[i].count};
        memcpy(buf, h, sizeof h);
        test_write_file(cli_path(path, sizeof path, "head.bin"), buf, sizeof buf);
        CHECK(cli_run("train " MODEL " --steps 1 --data-bin '%s' --val-bin '%s' --vocab 50", val_bin, path) == 2);
        snprintf(msg, sizeof msg, "--val-bin %s: %s", path, heads[i].needle);
        CHECK_OUT(msg);
    }
    unsigned char cut[100] = {0};
    int32_t magic = TOK_LLMC_MAGIC;
    memcpy(cut, &magic, 4);
    test_write_file(path, cut, sizeof cut);
    CHECK(cli_run("train " MODEL " --steps 1 --data-bin '%s' --val-bin '%s' --vocab 50", path, val_bin) == 2);
    CHECK_OUT("byte 100: the file ends inside llm.c's 1024-byte header");
    CHECK(cli_run("train " MODEL " --steps 1 --data-bin '%s/none.bin' --val-bin '%s' --vocab 50", tmpdir, val_bin) ==
          2);
    CHECK_OUT("none.bin: cannot open");
    /* no vocabulary anywhere */
    CHECK(cli_run("train " MODEL " --steps 1 --data-bin '%s' --val-bin '%s'", train_bin, val_bin) == 2);
    CHECK_OUT("give --vocab N");
}

/* A run that read its vocabulary beside its --data-bin (saved with no
 * --vocab) resumes with --vocab of that size, and refuses another, naming
 * the run's. */
static void test_resume_compares_vocab_with_the_runs(void)
{
    char dir[300], train[400], val[400], meta[400], run[300];
    cli_path(dir, sizeof dir, "sidecar");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(train, sizeof train, "%s/train.bin", dir);
    snprintf(val, sizeof val, "%s/val.bin", dir);
    snprintf(meta, sizeof meta, "%s/meta.json", dir);
    write_tokens(train, 2000, tok_mod50, false);
    write_tokens(val, 400, tok_mod50, false);
    test_write_file(meta, "{\"vocab_size\": 50}", 18);
    CLI_OK("train " MODEL " --steps 4 --stop-at 2 --data-bin '%s' --val-bin '%s' --save '%s'", train, val,
           cli_path(run, sizeof run, "sidecar_run"));
    CHECK(cli_run("train --resume '%s' --vocab 60 --threads 1", run) == 2);
    CHECK_OUT("--vocab 60 conflicts with the checkpoint");
    CHECK_OUT("whose run has 50 token ids");
    CLI_OK("train --resume '%s' --vocab 50 --threads 1", run);
    CHECK_OUT("val_loss ");
}

/* Data options of the other kind than the run trained on are refused
 * naming the run's kind, in the commands' own options. */
static void test_data_options_name_the_runs_kind(void)
{
    char text[300], tok_run[300], text_run[300];
    cli_write_tiny_text(cli_path(text, sizeof text, "kind.txt"));
    CLI_OK("train " MODEL " --steps 2 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s'", train_bin, val_bin,
           cli_path(tok_run, sizeof tok_run, "kind_tok"));
    CLI_OK("train " MODEL " --steps 4 --stop-at 2 --data '%s' --save '%s'", text,
           cli_path(text_run, sizeof text_run, "kind_text"));
    char tok_prefix[400], text_prefix[400];
    snprintf(tok_prefix, sizeof tok_prefix, "--threads 1 --resume '%s'", tok_run);
    snprintf(text_prefix, sizeof text_prefix, "--threads 1 --resume '%s'", text_run);
    struct {
        const char *cmd, *prefix, *option, *file, *needle;
    } cases[] = {
        {"eval", tok_prefix, "data", text, "was trained on token ids (--data-bin"},
        {"train", tok_prefix, "data", text, "was trained on token ids (--data-bin"},
        {"eval", text_prefix, "val-bin", val_bin, "was trained on a text (--data"},
        {"train", text_prefix, "val-bin", val_bin, "leave --val-bin out"},
        {"train", text_prefix, "data-bin", train_bin, "leave --data-bin out"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli_run("%s %s --%s '%s'", cases[i].cmd, cases[i].prefix, cases[i].option, cases[i].file);
        CHECK_MSG(rc == 2, "%s --%s: exit %d\n%s", cases[i].cmd, cases[i].option, rc, cli_out);
        CHECK_OUT(cases[i].needle);
        CHECK_MSG(!strstr(cli_out, "not both") && !strstr(cli_out, "needs --data-bin"), "%s", cli_out);
    }
    CHECK(cli_run("train --resume '%s' --vocab 50 --threads 1", text_run) == 2);
    CHECK_OUT("characters not token ids: leave --vocab out");
    CHECK(cli_run("generate '%s' --data '%s' --prompt-ids 1 --threads 1", tok_run, text) == 2);
    CHECK_OUT("--data gives a char model's training text");
}

/* A --val-bin whose sidecar says another vocabulary than the run's comes
 * from another tokenizer: refused by train and eval, naming both sizes. */
static void test_val_bin_sidecar_must_agree(void)
{
    char dir[300], val[400], side[400], run[300], want[1200];
    cli_path(dir, sizeof dir, "val40");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(val, sizeof val, "%s/val.bin", dir);
    snprintf(side, sizeof side, "%s/val.bin.json", dir);
    write_tokens(val, 400, tok_mod50, false);
    test_write_file(side, "{\"vocab_size\": 40}", 18);
    snprintf(want, sizeof want, "--val-bin %s: %s says vocab_size 40, but the run's token ids number 50", val, side);
    CHECK(cli_run("train " MODEL " --steps 2 --data-bin '%s' --val-bin '%s' --vocab 50", train_bin, val) == 2);
    CHECK_OUT(want);
    CLI_OK("train " MODEL " --steps 2 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s'", train_bin, val_bin,
           cli_path(run, sizeof run, "val40_run"));
    CHECK(cli_run("eval '%s' --val-bin '%s' --threads 1", run, val) == 2);
    CHECK_OUT(want);
    /* a sidecar that agrees is taken */
    test_write_file(side, "{\"vocab_size\": 50}", 18);
    CLI_OK("eval '%s' --val-bin '%s' --threads 1", run, val);
    CHECK_OUT("val_loss ");
}

/* A hostile pickle: GLOBAL os.system, REDUCE. Refused at its first opcode
 * past PROTO; the command it carries never runs. */
static void test_meta_pkl_never_runs_code(void)
{
    char why[300], marker[300];
    cli_path(marker, sizeof marker, "pwned");
    char evil[400];
    int n = snprintf(evil, sizeof evil, "\x80\x04" "cos\nsystem\n(Vtouch %s\ntR.", marker);
    CHECK(tok_pkl_vocab((const unsigned char *)evil, (size_t)n, why, sizeof why) == -1);
    CHECK_MSG(strstr(why, "byte 2: opcode 0x63 (GLOBAL)") != NULL, "%s", why);
    char sub[300], data[320], pkl[320];
    snprintf(sub, sizeof sub, "%s/evil", tmpdir);
    mkdir(sub, 0777);
    snprintf(data, sizeof data, "%s/train.bin", sub);
    snprintf(pkl, sizeof pkl, "%s/meta.pkl", sub);
    write_tokens(data, 500, tok_mod50, false);
    test_write_file(pkl, evil, (size_t)n);
    CHECK(cli_run("train " MODEL " --steps 1 --data-bin '%s' --val-bin '%s'", data, val_bin) == 2);
    CHECK_OUT("meta.pkl: byte 2: opcode 0x63 (GLOBAL)");
    CHECK(access(marker, F_OK) != 0);
    /* STACK_GLOBAL + REDUCE as protocol 4 writes them */
    const char p4[] = "\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R.";
    CHECK(tok_pkl_vocab((const unsigned char *)p4, sizeof p4 - 1, why, sizeof why) == -1);
    CHECK_MSG(strstr(why, "STACK_GLOBAL") != NULL, "%s", why);
}

static bool need_pickle(void)
{
    if (!have_pickle)
        harness_skip("no Python ($AMPC_TORCH_PYTHON, python3, .bench-venv)");
    return have_pickle;
}

/* nanoGPT's prepare.py: pickle.dump({'vocab_size', 'itos', 'stoi'}, f). */
static void test_meta_pkl_from_python_gives_the_vocabulary(void)
{
    char sub[300], cmd[2000];
    snprintf(sub, sizeof sub, "%s/shakespeare_char", tmpdir);
    mkdir(sub, 0777);
    snprintf(cmd, sizeof cmd,
             "'%s' -c \"import pickle\nchars = sorted(set('First Citizen: Before we proceed any further, hear me "
             "speak.ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!?;-'))\nchars = chars[:65]\n"
             "meta = {'vocab_size': 65, 'itos': {i: chars[i %% len(chars)] for i in range(65)}, "
             "'stoi': {c: i for i, c in enumerate(chars)}}\n"
             "with open('%s/meta.pkl', 'wb') as f: pickle.dump(meta, f)\" 2>&1",
             python, sub);
    CHECK(system(cmd) == 0);
    char data[320], pkl[320];
    snprintf(data, sizeof data, "%s/train.bin", sub);
    snprintf(pkl, sizeof pkl, "%s/meta.pkl", sub);
    write_tokens(data, 1000, tok_mod50, false);
    size_t n = 0;
    char why[300], *p = cli_read_file(pkl, &n);
    CHECK(p && tok_pkl_vocab((unsigned char *)p, n, why, sizeof why) == 65);
    free(p);
    CLI_OK("train " MODEL " --steps 2 --data-bin '%s' --val-bin '%s'", data, val_bin);
    CHECK_OUT("token ids of size 65");
    CHECK(cli_run("train " MODEL " --steps 2 --data-bin '%s' --val-bin '%s' --vocab 64", data, val_bin) == 2);
    CHECK_OUT("--vocab 64, but");
    CHECK_OUT("meta.pkl says vocab_size 65");
}

/* python/ampc_tokens.py's files and sidecar. */
static void test_ampc_tokens_py_files_train(void)
{
    char txt[300], out[300], cmd[2000];
    const char *src = getenv("AMPC_SOURCE_DIR") ? getenv("AMPC_SOURCE_DIR") : ".";
    FILE *f = fopen(cli_path(txt, sizeof txt, "corpus.txt"), "w");
    for (int i = 0; i < 200; i++)
        fprintf(f, "line %d of the corpus, with a few words.\n", i);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s/python/ampc_tokens.py' '%s' '%s' --format llmc > /dev/null 2>&1", python,
             src, txt, cli_path(out, sizeof out, "py"));
    CHECK(system(cmd) == 0);
    CLI_OK("train " MODEL " --steps 2 --data-bin '%s/train.bin' --val-bin '%s/val.bin'", out, out);
    CHECK_OUT("(llm.c shard)");
    CHECK_OUT("token ids of size 30"); /* the distinct characters above: 16 letters, 10 digits, " ,.\n" */
}

static void test_generate_prints_ids(void)
{
    char run[300];
    CLI_OK("train " MODEL " --steps 2 --data-bin '%s' --val-bin '%s' --vocab 50 --save '%s'", train_bin, val_bin,
           cli_path(run, sizeof run, "genrun"));
    CLI_OK("generate '%s' --tokens 12 --quiet --prompt-ids 7,8,9 --threads 1", run);
    CHECK(strncmp(cli_out, "7 8 9 ", 6) == 0);
    int count = 0;
    for (char *p = cli_out, *end; *p && *p != '\n'; p = end, count++) {
        long v = strtol(p, &end, 10);
        CHECK(end != p && v >= 0 && v < 50);
        while (*end == ' ')
            end++;
    }
    CHECK_MSG(count == 15, "%d ids in %s", count, cli_out);
    CHECK(cli_run("generate '%s' --prompt-ids 1,2,50 --threads 1", run) == 2);
    CHECK_OUT("id 50 (position 2) is not below the vocabulary size 50");
    CHECK(cli_run("generate '%s' --prompt-ids 1,,2 --threads 1", run) == 2);
    CHECK_OUT("position 1 is not a token id");
    CHECK(cli_run("generate '%s' --prompt hello --threads 1", run) == 2);
    CHECK_OUT("--prompt-ids");
}

static bool need_tokenizers(void)
{
    if (!have_tokenizers)
        harness_skip("no `tokenizers` package in $AMPC_TORCH_PYTHON / python3 / .bench-venv");
    return have_tokenizers;
}

/* A byte-level BPE trained by `tokenizers`, ids from ampc: the text ampc
 * prints is tokenizers' decode of those ids. */
static void test_generate_decodes_through_tokenizer_json(void)
{
    char tj[300], txt[300], out[300], run[300];
    static char cmd[sizeof cli_out + 4096];
    cli_path(tj, sizeof tj, "tokenizer.json");
    FILE *f = fopen(cli_path(txt, sizeof txt, "bpe.txt"), "w");
    for (int i = 0; i < 300; i++)
        fprintf(f, "Über %d naïve cafés, the quick brown fox jumps over the lazy dog.\n", i);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "'%s' -c \"from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers\n"
             "t = Tokenizer(models.BPE())\nt.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)\n"
             "t.decoder = decoders.ByteLevel()\n"
             "t.train(['%s'], trainers.BpeTrainer(vocab_size=300, "
             "initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))\nt.save('%s')\" 2>&1",
             python, txt, tj);
    CHECK(system(cmd) == 0);
    const char *src = getenv("AMPC_SOURCE_DIR") ? getenv("AMPC_SOURCE_DIR") : ".";
    snprintf(cmd, sizeof cmd, "'%s' '%s/python/ampc_tokens.py' '%s' '%s' --tokenizer '%s' > /dev/null 2>&1", python,
             src, txt, cli_path(out, sizeof out, "bpe"), tj);
    CHECK(system(cmd) == 0);
    CLI_OK("train " MODEL " --steps 3 --data-bin '%s/train.bin' --val-bin '%s/val.bin' --save '%s'", out, out,
           cli_path(run, sizeof run, "bperun"));
    CLI_OK("generate '%s' --tokens 40 --quiet --temperature 1.5 --prompt-ids 5,6 --threads 1 --ids", run);
    static char ids[sizeof cli_out];
    memcpy(ids, cli_out, sizeof ids);
    ids[strcspn(ids, "\n")] = 0;
    CLI_OK("generate '%s' --tokens 40 --quiet --temperature 1.5 --prompt-ids 5,6 --threads 1 --tokenizer '%s'", run,
           tj);
    static char ours[sizeof cli_out];
    memcpy(ours, cli_out, sizeof ours);
    /* tokenizers' decode of the same ids. ampc streams each token's bytes
     * as they are; decode makes one string, a sampled byte sequence that is
     * not UTF-8 becoming U+FFFD: ampc's bytes are read the same way. */
    char ours_path[300], check[300];
    test_write_file(cli_path(ours_path, sizeof ours_path, "ours.txt"), ours, strlen(ours));
    snprintf(cmd, sizeof cmd,
             "'%s' -c \"from tokenizers import Tokenizer\n"
             "ref = Tokenizer.from_file('%s').decode([int(v) for v in '%s'.split()]) + '\\n'\n"
             "ours = open('%s', 'rb').read().decode('utf-8', 'replace')\n"
             "open('%s', 'w').write('same' if ours == ref else 'ampc: %%r\\ntokenizers: %%r' %% (ours, ref))\"",
             python, tj, ids, ours_path, cli_path(check, sizeof check, "check.txt"));
    CHECK(system(cmd) == 0);
    size_t n = 0;
    char *verdict = cli_read_file(check, &n);
    CHECK_MSG(verdict && strcmp(verdict, "same") == 0, "ids %s:\n%s", ids, verdict ? verdict : "?");
    free(verdict);
    /* the reader alone: GPT-2's byte map on a token of 'Ġ' (space) and 'Ã' 'ľ' */
    tok_decoder d;
    char why[200];
    const char *js = "{\"model\":{\"vocab\":{\"\\u0120a\":0,\"b\":1}},\"decoder\":{\"type\":\"ByteLevel\"},"
                     "\"added_tokens\":[{\"id\":2,\"content\":\"<|end|>\",\"special\":true}]}";
    CHECK(tokenizer_parse(&d, js, strlen(js), why, sizeof why));
    size_t len = 0;
    const char *piece = tokenizer_piece(&d, 0, &len);
    CHECK(piece && len == 2 && memcmp(piece, " a", 2) == 0);
    CHECK(tokenizer_piece(&d, 2, &len) && len == 0);
    CHECK(tokenizer_piece(&d, 3, &len) == NULL);
    tokenizer_free(&d);
    const char *wp = "{\"model\":{\"vocab\":{\"a\":0}},\"decoder\":{\"type\":\"WordPiece\"}}";
    CHECK(!tokenizer_parse(&d, wp, strlen(wp), why, sizeof why) && strstr(why, "WordPiece"));
}

int main(void)
{
    cli_init("tokens");
    if (!cli_have_binary())
        return harness_done();
    amp_set_num_threads(1);
    write_tokens(cli_path(train_bin, sizeof train_bin, "train.bin"), 2000, tok_mod50, false);
    write_tokens(cli_path(val_bin, sizeof val_bin, "val.bin"), 400, tok_mod50, false);
    /* a Python with tokenizers (for every case), else one with pickle */
    if (python_find("", "tokenizers"))
        have_tokenizers = have_pickle = true;
    else
        have_pickle = python_find("", "pickle");
    snprintf(python, sizeof python, "%s", python_exe);
    RUN(test_windows_are_get_batch_draws);
    RUN(test_raw_and_llmc_files_train_alike);
    RUN(test_eval_is_deterministic);
    RUN(test_resume_is_bit_exact);
    RUN(test_bad_files_are_refused_with_their_offset);
    RUN(test_meta_pkl_never_runs_code);
    RUN(test_resume_compares_vocab_with_the_runs);
    RUN(test_data_options_name_the_runs_kind);
    RUN(test_val_bin_sidecar_must_agree);
    RUN_IF(need_pickle, test_meta_pkl_from_python_gives_the_vocabulary);
    RUN_IF(need_pickle, test_ampc_tokens_py_files_train);
    RUN(test_generate_prints_ids);
    RUN_IF(need_tokenizers, test_generate_decodes_through_tokenizer_json);
    cli_cleanup();
    int rc = harness_done();
    return rc == 0 && !have_tokenizers ? 77 : rc;
}
