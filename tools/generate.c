/*
 * generate.c - `ampc generate DIR`: text sampled from the gpt model a
 * `ampc train --model gpt --save DIR` run saved, streamed to stdout as it
 * comes, then how fast it came on stderr.
 *
 * The model is restored as `ampc eval` restores it (the checkpoint's
 * settings build it, its weights fill it); its vocabulary is the distinct
 * bytes of the training text, which is read again from the settings'
 * --data (or this command's --data) and must have the checkpoint's
 * vocabulary: its size, and its bytes where the checkpoint records them
 * (run value vocab_bytes; older checkpoints: a warning). A model trained
 * on token files (--data-bin) has ids, not characters: it takes
 * --prompt-ids and prints ids, or text through --tokenizer's
 * tokenizer.json (tokenizer.c; default: DIR/tokenizer.json when there is
 * one, as `ampc import` leaves it).
 *
 * Generation runs through the library's KV cache (amp_gpt_forward_cached):
 * the prompt in one forward (the prefill), then one position per token.
 * Past the model's context the sequence is cropped to its last context
 * tokens and the cache refilled with them (nanoGPT's crop: the same
 * tokens as full forwards over the cropped window; each token past the
 * context then costs a full forward). --no-cache runs a full forward per
 * token instead (to compare; the same tokens). Sampling is
 * amp_sample_next: temperature, top-k, one draw keyed by --seed and the
 * token's number. Under --precision bf16 / fp16 the forwards run in an
 * autocast region (no scaler: nothing is trained).
 */
#include "cli.h"
#include "checkpoint_cli.h"
#include "data.h"
#include "eval.h"
#include "progress.h"
#include "settings.h"
#include "tokenizer.h"
#include "trainer.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHO "ampc generate"
#define DEFAULT_TOKENS 200
#define DEFAULT_TEMPERATURE 0.8 /* nanoGPT's sample.py */
#define DEFAULT_SEED 1337       /* nanoGPT's sample.py */
#define MAX_TOKENS 1000000000

typedef struct {
    const char *dir, *prompt, *precision, *device, *data, *prompt_ids, *tokenizer;
    int64_t tokens, top_k, threads;
    double temperature;
    uint64_t seed;
    bool no_cache, quiet, ids, flush_denormal;
} gen_opts;

#define STR_(x) #x
#define STR(x) STR_(x)

/* generate's options: its own rows (the checkpoint's settings are read
 * later; NULL and -1 are "the checkpoint's"), in its own words when a
 * value is refused. */
static const opt_def gen_rows[] = {
    {.name = "prompt", .meta = "TEXT", .kind = OPT_TEXT, .off = offsetof(gen_opts, prompt),
     .help = "the text to continue (default: a newline, as nanoGPT's sample.py);\n"
             "each of its bytes must be in the model's vocabulary"},
    {.name = "tokens", .meta = "N", .kind = OPT_INT, .off = offsetof(gen_opts, tokens), .lo = 1, .hi = MAX_TOKENS,
     .says = "must be a whole number from 1 to " STR(MAX_TOKENS),
     .help = "tokens to generate, >= 1 (default " STR(DEFAULT_TOKENS) "); past the model's context the\n"
             "sequence is cropped to its last context tokens (nanoGPT's crop), and\n"
             "each token then costs a full forward over them (the cache refilled)"},
    {.name = "temperature", .meta = "T", .kind = OPT_REAL, .off = offsetof(gen_opts, temperature), .lo = 0,
     .hi = DBL_MAX, .says = "must be a finite number >= 0 (0: greedy)",
     .help = "logits / T before the softmax, finite and >= 0; 0 is greedy\n"
             "(the most likely token each time) (default " STR(DEFAULT_TEMPERATURE) ")"},
    /* the upper bound (the vocabulary) is checked once it is known */
    {.name = "top-k", .meta = "K", .kind = OPT_INT, .off = offsetof(gen_opts, top_k), .lo = 1, .hi = (double)INT64_MAX,
     .says = "must be a whole number >= 1 (at most the vocabulary size)",
     .help = "sample among the K most likely tokens only, 1 .. vocabulary size\n(default: all of them)"},
    {.name = "seed", .meta = "S", .kind = OPT_U64, .off = offsetof(gen_opts, seed),
     .says = "must be a whole number from 0 to 2^64-1",
     .help = "the draws' seed: the same seed gives the same text (default " STR(DEFAULT_SEED) ")"},
    {.name = "precision", .meta = "P", .kind = OPT_STR, .off = offsetof(gen_opts, precision),
     .choices = "fp32|bf16|fp16", .says = "must be fp32, bf16 or fp16",
     .help = "fp32, bf16 or fp16: the forward's autocast dtype, no scaler\n(default: the checkpoint's)"},
    {.name = "device", .meta = "D", .kind = OPT_STR, .off = offsetof(gen_opts, device), .choices = "cpu|cuda",
     .says = "must be cpu or cuda", .help = "cpu or cuda (default: the checkpoint's)"},
    {.name = "threads", .meta = "N", .kind = OPT_INT, .off = offsetof(gen_opts, threads), .lo = 0, .hi = 4096,
     .says = "must be a whole number from 0 (every core) to 4096",
     .help = "CPU threads, 0 for every core (default: the checkpoint's)"},
    {.name = "flush-denormal", .meta = "", .kind = OPT_FLAG, .off = offsetof(gen_opts, flush_denormal),
     .help = "flush subnormal floats to zero, as torch.set_flush_denormal(True)\n(default: the checkpoint's)"},
    {.name = "data", .meta = "PATH", .kind = OPT_STR, .off = offsetof(gen_opts, data),
     .help = "the training text, for the vocabulary (default: the checkpoint's --data)"},
    {.name = "no-cache", .meta = "", .kind = OPT_FLAG, .off = offsetof(gen_opts, no_cache),
     .help = "a full forward over the sequence for every token (to compare speed)"},
    {.name = "quiet", .meta = "", .kind = OPT_FLAG, .off = offsetof(gen_opts, quiet),
     .help = "no speed lines on stderr"},
    {.name = "prompt-ids", .meta = "I,J,..", .kind = OPT_TEXT, .off = offsetof(gen_opts, prompt_ids),
     .help = "the prompt as token ids, comma-separated, each below the vocabulary size\n"
             "(default for a model trained on token files: the single id 0)"},
    {.name = "ids", .meta = "", .kind = OPT_FLAG, .off = offsetof(gen_opts, ids),
     .help = "print token ids, space-separated, not text (the default for a model\n"
             "trained on token files without --tokenizer)"},
    {.name = "tokenizer", .meta = "FILE", .kind = OPT_STR, .off = offsetof(gen_opts, tokenizer),
     .help = "a Hugging Face tokenizer.json: print the ids of a model trained on\n"
             "token files as the text it decodes them to (ByteLevel BPE, GPT-2's;\n"
             "default: DIR/tokenizer.json when there is one)"},
};

/* ampc generate DIR: one checkpoint, named by the argument that is not an
 * option ("-" alone is a name too). */
static int gen_dir(const opt_cmd *c, const char *a, void *ctx)
{
    gen_opts *o = ctx;
    if (a[0] == '-' && a[1] != 0) {
        fprintf(stderr, "%s: unknown option '%s' (see ampc generate --help)\n", c->who, a);
        return EXIT_USAGE;
    }
    if (o->dir) {
        fprintf(stderr, "%s: one checkpoint directory, not '%s' and '%s' (see ampc generate --help)\n", c->who,
                o->dir, a);
        return EXIT_USAGE;
    }
    if (!*a) {
        fprintf(stderr, "%s: the checkpoint directory is empty (''): give the directory train --save wrote, or its "
                        ".safetensors file\n", c->who);
        return EXIT_USAGE;
    }
    o->dir = a;
    return -1;
}

const opt_cmd generate_options = {
    .who = WHO,
    .usage = "usage: ampc generate DIR [options]\n\n"
             "Samples text from the gpt model saved in DIR (ampc train --model gpt --save DIR; DIR may also\n"
             "be the path of a .safetensors checkpoint file), with a\n"
             "key/value cache: the prompt in one forward, then one position per new token. The prompt and\n"
             "the text are streamed to stdout as they come; the speed goes to stderr.\n\n",
    OPT_ONE_TABLE(gen_rows),
    .positional = gen_dir,
};

/* -1 to go on, else an exit code (0 after --help). */
static int gen_parse(int argc, char **argv, gen_opts *o)
{
    *o = (gen_opts){.tokens = DEFAULT_TOKENS, .temperature = DEFAULT_TEMPERATURE, .seed = DEFAULT_SEED,
                    .threads = -1};
    int rc = opt_parse(&generate_options, &(opt_dst){o, NULL}, o, argc, argv);
    if (rc < 0 && !o->dir) {
        fprintf(stderr, WHO ": which checkpoint? ampc generate DIR (a directory train --save wrote)\n");
        return EXIT_USAGE;
    }
    return rc;
}

int generate_parse(int argc, char **argv)
{
    gen_opts g;
    return gen_parse(argc, argv, &g);
}

/* The prompt as token ids (byte -> id through the vocabulary); -1, or 1
 * after a message naming the first byte the vocabulary lacks. */
static int prompt_ids(const char *prompt, const amp_text *text, const char *data, int64_t **ids, int64_t *n)
{
    int id_of[256];
    for (int b = 0; b < 256; b++)
        id_of[b] = -1;
    for (int64_t id = 0; id < amp_text_vocab(text); id++)
        id_of[amp_text_char(text, id) & 255] = (int)id;
    bool implicit = !prompt || !*prompt;
    const char *p = implicit ? "\n" : prompt;
    size_t len = strlen(p);
    *ids = malloc(sizeof **ids * (len ? len : 1));
    if (!*ids) {
        fprintf(stderr, WHO ": out of memory for the prompt\n");
        return 1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (id_of[c] < 0) {
            char shown[16];
            if (c >= 32 && c < 127)
                snprintf(shown, sizeof shown, "'%c'", c);
            else
                snprintf(shown, sizeof shown, "byte 0x%02x", c);
            if (implicit)
                fprintf(stderr, WHO ": an empty prompt starts from a newline, which the vocabulary of %s lacks; "
                                "give --prompt\n", data);
            else
                fprintf(stderr, WHO ": --prompt: character %s (at byte %zu) is not in the model's vocabulary "
                                "(the %lld distinct bytes of %s)\n", shown, i, (long long)amp_text_vocab(text),
                        data);
            free(*ids);
            *ids = NULL;
            return 1;
        }
        (*ids)[i] = id_of[c];
    }
    *n = (int64_t)len;
    return -1;
}

/* --prompt-ids "I,J,..": ids below vocab into *ids; -1, or EXIT_USAGE
 * after a message naming the position of the first bad one. */
static int parse_prompt_ids(const char *text, int64_t vocab, int64_t **ids, int64_t *n)
{
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    *ids = malloc(sizeof **ids * cap);
    if (!*ids) {
        fprintf(stderr, WHO ": out of memory for the prompt\n");
        return 1;
    }
    *n = 0;
    for (const char *p = text;; p++) {
        char *end;
        errno = 0;
        long long v = *p >= '0' && *p <= '9' ? strtoll(p, &end, 10) : -1;
        if (v < 0 || errno == ERANGE || (*end != ',' && *end != '\0') || v >= vocab) {
            if (v >= vocab && errno != ERANGE)
                fprintf(stderr, WHO ": --prompt-ids: id %lld (position %lld) is not below the vocabulary size %lld\n",
                        v, (long long)*n, (long long)vocab);
            else
                fprintf(stderr, WHO ": --prompt-ids: position %lld is not a token id (whole numbers separated by "
                                "commas: 1,2,3)\n", (long long)*n);
            free(*ids);
            *ids = NULL;
            return EXIT_USAGE;
        }
        (*ids)[(*n)++] = v;
        p = end;
        if (!*p)
            return -1;
    }
}

/* How tokens are printed: the char vocabulary's bytes, ids, or a
 * tokenizer's decoding. */
typedef struct {
    const amp_text *text; /* chars (NULL: ids or dec) */
    const tok_decoder *dec;
    bool ids, spaced;     /* spaced: something was printed (ids, a decoder without one joins by spaces) */
} gen_out;

/* What one generation needs. */
typedef struct {
    const gen_opts *g;
    amp_module *model;
    amp_gpt_cache *cache;
    amp_device dev;
    bool autocast;
    amp_dtype dtype;
    int64_t context;
} gen_ctx;

/* Tokens seq[from .. to) as [1, to - from] on the model's device. */
static amp_tensor *window(const gen_ctx *c, const int64_t *seq, int64_t from, int64_t to)
{
    amp_tensor *h = amp_from_data(AMP_SHAPE(1, to - from), AMP_I64, seq + from);
    if (!h || c->dev == AMP_CPU)
        return h;
    amp_tensor *d = amp_to_device(h, c->dev);
    amp_tensor_free(h);
    return d;
}

/* The logits for the token after seq[0 .. n): through the cache (feeding
 * seq[fed .. n), or a refill of the last context tokens when they would
 * pass it; *refills counts those), or a full forward over the last
 * context tokens. */
static amp_tensor *next_logits(gen_ctx *c, const int64_t *seq, int64_t n, int64_t *refills)
{
    amp_tensor *idx = NULL, *logits = NULL;
    if (c->autocast && amp_autocast_begin(c->dev, c->dtype) != AMP_OK)
        return NULL;
    const int64_t from = n > c->context ? n - c->context : 0;
    if (c->g->no_cache) {
        idx = window(c, seq, from, n);
        logits = idx ? amp_module_forward(c->model, idx) : NULL;
    } else {
        int64_t fed = amp_gpt_cache_len(c->cache);
        if (n > c->context) { /* crop and refill (a prompt past the context: its prefill, not a refill) */
            if (fed > 0)
                (*refills)++;
            amp_gpt_cache_reset(c->cache);
            fed = 0;
        }
        idx = window(c, seq + from, fed, n - from);
        logits = idx ? amp_gpt_forward_cached(c->model, c->cache, idx) : NULL;
    }
    if (c->autocast)
        amp_autocast_end();
    amp_tensor_free(idx);
    return logits;
}

/* Streams one token; false once standard output takes no more (a closed
 * pipe with SIGPIPE ignored, a full disk): generating on would only
 * throw the tokens away. An id the tokenizer lacks is printed as <id>. */
static bool emit(gen_out *out, int64_t id)
{
    size_t len = 0;
    const char *piece = out->dec && !out->ids ? tokenizer_piece(out->dec, id, &len) : NULL;
    if (out->text && !out->ids)
        putchar(amp_text_char(out->text, id));
    else if (piece && !(out->dec->spaces && len == 0)) {
        if (out->dec->spaces && out->spaced)
            putchar(' ');
        fwrite(piece, 1, len, stdout);
        out->spaced = true;
    } else if (!piece || !out->dec->spaces) {
        printf(out->ids && out->spaced ? " %lld" : out->ids ? "%lld" : "<%lld>", (long long)id);
        out->spaced = true;
    }
    return fflush(stdout) == 0 && !ferror(stdout);
}

/* The message when standard output failed at token (0: the prompt); 1. */
static int write_failed(int64_t token)
{
    int err = errno;
    char what[64] = "the prompt";
    if (token > 0)
        snprintf(what, sizeof what, "token %lld", (long long)token);
    fprintf(stderr, "\n" WHO ": writing %s to standard output failed: %s\n", what,
            err ? strerror(err) : "an earlier write failed");
    return 1;
}

/* Generates g->tokens tokens after the prompt seq[0 .. n) (seq has room
 * for them), streaming them; -1, or 1 after a message. */
static int run(gen_ctx *c, gen_out *out, int64_t *seq, int64_t n)
{
    const gen_opts *g = c->g;
    int64_t refills = 0;
    if (g->prompt && out->text && !out->ids)
        fwrite(g->prompt, 1, strlen(g->prompt), stdout);
    else
        for (int64_t i = 0; i < n && (out->ids || !out->text || g->prompt_ids); i++)
            emit(out, seq[i]);
    if (fflush(stdout) != 0 || ferror(stdout))
        return write_failed(0);
    amp_no_grad_begin();
    double t0 = now_s(), t_prefill = 0;
    int rc = -1;
    for (int64_t i = 0; i < g->tokens; i++) {
        amp_tensor *logits = next_logits(c, seq, n, &refills);
        int64_t tok;
        if (!logits || amp_sample_next(logits, g->temperature, g->top_k, g->seed, (uint64_t)i, &tok) != AMP_OK) {
            fflush(stdout);
            fprintf(stderr, "\n" WHO ": token %lld: %s\n", (long long)i + 1, amp_last_error());
            rc = 1;
            amp_temps_free();
            break;
        }
        amp_temps_free();
        seq[n++] = tok;
        if (!emit(out, tok)) {
            rc = write_failed(i + 1);
            break;
        }
        if (i == 0)
            t_prefill = now_s() - t0;
    }
    amp_no_grad_end();
    double total = now_s() - t0;
    putchar('\n');
    fflush(stdout);
    if (rc < 0 && !g->quiet) {
        const int64_t prompt = n - g->tokens, first = prompt < c->context ? prompt : c->context;
        fprintf(stderr, "prefill: %lld prompt tokens in %.1f ms (%.1f tokens/s)\n", (long long)first,
                t_prefill * 1e3, (double)first / t_prefill);
        if (g->tokens > 1)
            fprintf(stderr, "decode: %lld tokens in %.3f s (%.1f tokens/s)%s\n", (long long)g->tokens - 1,
                    total - t_prefill, (double)(g->tokens - 1) / (total - t_prefill),
                    g->no_cache ? ", a full forward per token (--no-cache)" : "");
        if (refills)
            fprintf(stderr, "context: past the model's context of %lld tokens, the cache was refilled with the "
                            "sequence's last %lld tokens %lld times (a forward over them each)\n",
                    (long long)c->context, (long long)c->context, (long long)refills);
    }
    return rc;
}

/* The vocabulary: a char model's training text (*text, checked against
 * the checkpoint's), or nothing for a token-id model (its --tokenizer into
 * *dec when given). -1, or an exit code after a message. */
static int gen_vocab(const gen_opts *g, const train_opts *o, const run_info *saved, const char *where,
                     amp_text **text, tok_decoder *dec)
{
    if (saved->token_ids) {
        if (g->data) {
            fprintf(stderr, WHO ": --data gives a char model's training text; the model in %s was trained on token "
                            "ids (--data-bin), whose vocabulary is a tokenizer's (--tokenizer FILE)\n", where);
            return EXIT_USAGE;
        }
        if (g->prompt) {
            fprintf(stderr, WHO ": the model in %s was trained on token ids (--data-bin): give the prompt as ids, "
                            "--prompt-ids I,J,..\n", where);
            return EXIT_USAGE;
        }
        char own[CLI_PATH_MAX]; /* the checkpoint's own (an import's copy) */
        const char *slash = strrchr(where, '/');
        snprintf(own, sizeof own, "%.*s/tokenizer.json", slash ? (int)(slash - where) : 1, slash ? where : ".");
        struct stat sb; /* stat, not open: opening a FIFO waits (tokenizer_load refuses all but regular files) */
        bool have_own = !g->tokenizer && !g->ids && stat(own, &sb) == 0;
        const char *file = have_own ? own : g->tokenizer;
        if (!file)
            return -1;
        if (!tokenizer_load(dec, file, WHO))
            return EXIT_USAGE;
        if (dec->n != saved->vocab)
            fprintf(stderr, WHO ": warning: %s has token ids 0 .. %lld, the model in %s 0 .. %lld: %s\n", file,
                    (long long)dec->n - 1, where, (long long)saved->vocab - 1,
                    dec->n < saved->vocab ? "the ids it lacks print as <id>"
                                          : "the model never gives its ids above that (is it this model's?)");
        return -1;
    }
    if (g->tokenizer) {
        fprintf(stderr, WHO ": --tokenizer decodes token ids; the model in %s was trained on characters (its "
                        "text is printed as it is)\n", where);
        return EXIT_USAGE;
    }
    if (g->prompt && g->prompt_ids) {
        fprintf(stderr, WHO ": give --prompt (text) or --prompt-ids, not both\n");
        return EXIT_USAGE;
    }
    *text = amp_text_load(o->data);
    if (!*text) {
        fprintf(stderr, WHO ": the vocabulary comes from the training text: %s%s\n", amp_last_error(),
                g->data ? "" : " (give it with --data)");
        return 1;
    }
    if (amp_text_vocab(*text) != saved->vocab) {
        fprintf(stderr, WHO ": %s has a vocabulary of %lld characters; the model in %s was trained on one of %lld "
                        "(give the training text with --data)\n", o->data, (long long)amp_text_vocab(*text), where,
                (long long)saved->vocab);
        return 1;
    }
    run_info have = {0};
    vocab_record(*text, &have);
    return vocab_check(&have, saved, o->data, where, WHO) >= 0 ? 1 : -1;
}

int generate_main(int argc, char **argv)
{
    gen_opts g;
    int rc = gen_parse(argc, argv, &g);
    if (rc >= 0)
        return rc;
    train_opts o;
    run_info saved = {0};
    train_opts_default(&o);
    char where[CLI_PATH_MAX];
    checkpoint_path(where, sizeof where, g.dir);
    if ((rc = checkpoint_read_settings(g.dir, &o, &saved)) >= 0)
        return rc;
    if (!is_gpt(&o)) {
        fprintf(stderr, WHO ": %s holds a %s model; generate samples from gpt models (ampc train --model gpt)\n",
                where, o.model);
        return 1;
    }
    if (g.precision) {
        o.precision = g.precision;
        o.no_scaler = false;
    }
    if (g.device)
        o.device = g.device;
    if (g.threads >= 0)
        o.threads = g.threads;
    if (g.flush_denormal) {
        o.flush_denormal = true;
        o.given[RO_flush_denormal] = true;
    }
    if (g.data)
        o.data = g.data;
    /* Weights stored in 16 bits (--param-dtype) run only under autocast to
     * their own dtype: refused here rather than at the first token. */
    if (strcmp(o.param_dtype, "fp32") != 0 && strcmp(o.param_dtype, o.precision) != 0) {
        fprintf(stderr, WHO ": the model in %s stores its weights in %s (--param-dtype %s): --precision %s is "
                        "the only one it runs in (not %s)\n", where, o.param_dtype, o.param_dtype, o.param_dtype,
                o.precision);
        return EXIT_USAGE;
    }
    /* The defaults a checkpoint may leave out (one python/ampc_torch.py
     * saved: no schedule, lr or data), as eval fills them; o.resume keeps
     * the checkpoint's precision on cuda. */
    o.resume = g.dir;
    if ((rc = opts_resolve(&o)) >= 0)
        return rc;
    if ((rc = device_check(&o, WHO)) >= 0)
        return rc;
    if ((rc = opts_apply_cpu(&o, WHO)) >= 0)
        return rc;

    amp_text *text = NULL;
    tok_decoder dec = {0};
    int64_t *ids = NULL, n = 0;
    if ((rc = gen_vocab(&g, &o, &saved, where, &text, &dec)) < 0 && g.top_k > saved.vocab) {
        fprintf(stderr, WHO ": --top-k %lld is more than the vocabulary's %lld tokens\n", (long long)g.top_k,
                (long long)saved.vocab);
        rc = EXIT_USAGE;
    }
    if (rc < 0 && g.prompt_ids)
        rc = parse_prompt_ids(g.prompt_ids, saved.vocab, &ids, &n);
    else if (rc < 0 && text)
        rc = prompt_ids(g.prompt, text, o.data, &ids, &n);
    else if (rc < 0 && (ids = calloc(1, sizeof *ids)) != NULL)
        n = 1; /* a token-id model's default prompt: id 0 */
    if (rc < 0 && !ids) {
        fprintf(stderr, WHO ": out of memory for the prompt\n");
        rc = 1;
    }
    if (rc >= 0) {
        amp_text_free(text);
        tokenizer_free(&dec);
        return rc;
    }
    int64_t *seq = realloc(ids, sizeof *seq * (size_t)(n + g.tokens));
    trainer t = {0};
    int64_t step = 0;
    if (!seq) {
        fprintf(stderr, WHO ": out of memory for %lld tokens\n", (long long)(n + g.tokens));
        free(ids);
        rc = 1;
    } else if ((rc = checkpoint_check_size(g.dir, &o, &saved)) < 0 && !trainer_build(&t, &o, &saved, 1)) {
        rc = 1;
    }
    if (rc < 0)
        rc = checkpoint_load_run(g.dir, &t, false, false, &step);
    gen_ctx c = {.g = &g, .model = t.model, .autocast = t.autocast, .dtype = t.dtype, .context = o.context,
                 .dev = strcmp(o.device, "cuda") == 0 ? AMP_CUDA : AMP_CPU};
    if (rc < 0 && !g.no_cache && !(c.cache = amp_gpt_cache_new(t.model, 1))) {
        fprintf(stderr, WHO ": %s\n", amp_last_error());
        rc = 1;
    }
    if (rc < 0) {
        amp_module_train(t.model, false);
        if (!g.quiet) {
            char desc[256];
            fprintf(stderr, "checkpoint %s: step %lld, %s, precision %s, device %s\n", where, (long long)step,
                    model_describe(&o, &saved, desc, sizeof desc), o.precision, o.device);
        }
        gen_out out = {.text = text, .dec = dec.piece ? &dec : NULL, .ids = g.ids || (!text && !dec.piece)};
        rc = run(&c, &out, seq, n);
    }
    amp_gpt_cache_free(c.cache);
    trainer_free(&t);
    free(seq);
    amp_text_free(text);
    tokenizer_free(&dec);
    return rc < 0 ? 0 : rc;
}
