/*
 * import_hf.c - `ampc import [--format hf] HF_DIR OUT`: a Hugging Face
 * transformers GPT-2 (GPT2LMHeadModel.save_pretrained's directory, hf.c
 * reads and checks it) as an ampc checkpoint, OUT/checkpoint.safetensors:
 * the gpt of the config's shape with the directory's weights (f32: 16-bit
 * ones widened exactly) and the settings `ampc eval`, `ampc generate` and
 * `ampc train --init-from OUT` build it from: those of the run an
 * `ampc export` kept in config.json ("ampc_settings"), else precision
 * fp32, --dropout from resid_pdrop and no data (give --data). No optimizer state: it is a
 * model, to fine-tune from (--init-from), not a run to resume.
 * HF_DIR/tokenizer.json, when there is one, is copied into OUT, and its
 * vocabulary's bytes recorded when it is a character vocabulary (the one
 * ampc export writes), so that eval and generate check the text's.
 * Any other vocabulary (more than 256 tokens, as GPT-2's 50257, or a
 * tokenizer.json that is not one character a token) makes a model on
 * token ids (vocab_kind "token_ids", --vocab N), as a --data-bin run
 * saves it: `ampc generate OUT --prompt-ids` and `ampc train --init-from
 * OUT --data-bin` take it, and generate decodes with OUT/tokenizer.json.
 * All-zero biases (an export of a --no-bias model) stay biases: the
 * weights come back bit for bit, not re-detected as --no-bias.
 * An OUT that already holds a checkpoint is refused: an import never
 * replaces a run (its optimizer state and step) or an earlier import.
 */
#include "checkpoint_cli.h"
#include "cli.h"
#include "hf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHO "ampc import"

typedef convert_args import_args;

static int import_hf(const import_args *a);

/* The formats, one row each. */
static const struct {
    const char *name;
    int (*read)(const import_args *a);
} formats[] = {
    {"hf", import_hf},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

static const opt_def import_rows[] = {
    {.name = "format", .meta = "F", .kind = OPT_STR, .off = offsetof(import_args, format),
     .help = "the format of HF_DIR (default hf: Hugging Face transformers)"},
};

const opt_cmd import_options = {
    .who = WHO,
    .usage = "usage: ampc import [--format hf] HF_DIR OUT\n\n"
             "Reads a Hugging Face transformers GPT-2 (the directory save_pretrained wrote:\n"
             "config.json and model.safetensors, or a sharded model.safetensors.index.json)\n"
             "into the ampc checkpoint OUT/" CHECKPOINT_FILE ", which ampc eval, ampc generate\n"
             "and ampc train --init-from OUT take (give --data, or --data-bin for a model on\n"
             "token ids: vocab_size above 256, or a tokenizer.json other than one character a\n"
             "token). tokenizer.json is copied (docs/interop.md). OUT must not hold a checkpoint\n"
             "already: an import does not replace one.\n\n",
    OPT_ONE_TABLE(import_rows),
    .positional = convert_positional,
};

int import_main(int argc, char **argv)
{
    import_args a;
    int rc = convert_parse(&import_options, argc, argv, &a,
                           "the directory to read HF_DIR and the output directory OUT");
    if (rc >= 0)
        return rc;
    if (!*a.dir || !*a.out) { /* "" would read /config.json, or write /checkpoint.safetensors */
        fprintf(stderr, WHO ": the %s is empty (''): name a directory\n", !*a.dir ? "HF_DIR" : "output directory OUT");
        return EXIT_USAGE;
    }
    char ck[CLI_PATH_MAX];
    struct stat sb;
    snprintf(ck, sizeof ck, "%s/%s", a.out, CHECKPOINT_FILE);
    if (lstat(ck, &sb) == 0) { /* a run's checkpoint (its optimizer state and step) or an earlier import */
        fprintf(stderr, WHO ": %s already exists: import into another OUT (or remove it first; an import does not "
                        "replace a checkpoint)\n", ck);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(a.format, formats[i].name) == 0)
            return formats[i].read(&a);
    fprintf(stderr, WHO ": --format '%s' is not one ampc reads: hf\n", a.format);
    return EXIT_USAGE;
}

/* m's weights into a gpt of its shape; NULL after a message. */
static amp_module *build(const hf_model *m)
{
    amp_gpt_config c = {.vocab = m->s.vocab, .context = m->s.context, .width = m->s.width, .layers = m->s.layers,
                        .heads = m->s.heads, .mlp = m->s.mlp, .dropout = m->s.dropout,
                        .gelu_exact = m->s.gelu_exact};
    amp_module *g = amp_model_gpt(c);
    for (int k = 0; g && k < m->n; k++) {
        hf_tensor t;
        hf_tensor_at(&m->s, k, &t);
        amp_tensor *p = NULL;
        for (int i = 0, n = amp_module_num_params(g); i < n && !p; i++) {
            const char *pn;
            amp_tensor *q = amp_module_param(g, i, &pn);
            if (q && strcmp(pn, t.ampc) == 0)
                p = q;
        }
        if (!p || amp_tensor_copy_in(p, m->w[k], AMP_F32) != AMP_OK) {
            fprintf(stderr, WHO ": tensor %s: %s\n", t.ampc, p ? amp_last_error() : "not in ampc's gpt");
            amp_module_free(g);
            return NULL;
        }
    }
    if (!g)
        fprintf(stderr, WHO ": %s\n", amp_last_error());
    return g;
}

/* The run settings an export kept in config.json ("ampc_settings") into
 * o, when they describe this very model; else false (a note says why
 * when there were some). */
static bool exported_settings(const hf_model *m, const char *dir, train_opts *o, run_info *ri)
{
    if (!m->ampc_settings)
        return false;
    char where[CLI_PATH_MAX];
    snprintf(where, sizeof where, "%s/config.json \"ampc_settings\"", dir);
    train_opts_default(o);
    bool ok = settings_from_json(m->ampc_settings, where, o, ri) < 0 && is_gpt(o) && o->layers == m->s.layers &&
              o->heads == m->s.heads && o->width == m->s.width && o->context == m->s.context &&
              o->mlp_width == m->s.mlp && ri->vocab == m->s.vocab && !strcmp(o->param_dtype, "fp32") &&
              !strcmp(o->gelu, m->s.gelu_exact ? "exact" : "tanh");
    if (!ok)
        printf("note: %s does not describe this model's fp32 weights: not used\n", where);
    o->no_bias = false; /* the export's zero biases are read as biases */
    return ok;
}

/* The settings of the imported model (eval and --init-from build it
 * from them): those of the run it was exported from, else the shape and
 * fp32; malloc'd JSON, NULL after a message. */
static char *settings_of(const hf_model *m, const char *dir, bool *token_ids)
{
    train_opts o;
    run_info was = {0};
    *token_ids = m->s.vocab > HF_MAX_VOCAB || (m->tokenizer && !m->vocab_hex[0]);
    if (!exported_settings(m, dir, &o, &was)) {
        train_opts_default(&o);
        o.model = "gpt";
        o.layers = m->s.layers, o.heads = m->s.heads, o.width = m->s.width, o.context = m->s.context;
        o.mlp_width = m->s.mlp, o.dropout = m->s.dropout;
        o.gelu = m->s.gelu_exact ? "exact" : "tanh";
        o.precision = "fp32";
        o.given[RO_precision] = true;
    } else {
        *token_ids |= was.token_ids;
    }
    o.vocab = 0; /* the count of ids is the run value "vocab" (no --data-bin for a --vocab setting) */
    opts_set_command(WHO);
    if (opts_resolve(&o) >= 0)
        return NULL;
    run_info ri = {.vocab = m->s.vocab, .token_ids = *token_ids};
    if (!*token_ids)
        snprintf(ri.vocab_hex, sizeof ri.vocab_hex, "%s", m->vocab_hex);
    char *json = settings_to_json(&o, &ri);
    if (!json)
        fprintf(stderr, WHO ": out of memory\n");
    return json;
}

static int import_hf(const import_args *a)
{
    hf_model m;
    int rc = hf_read_dir(a->dir, &m);
    amp_module *g = rc < 0 ? build(&m) : NULL;
    bool ids = false, tok = false;
    char *json = g ? settings_of(&m, a->dir, &ids) : NULL;
    if (json && ids && m.tokenizer && m.s.vocab <= HF_MAX_VOCAB)
        printf("note: %s/tokenizer.json is not a character vocabulary of vocab_size's %lld tokens (one character "
               "a token, ids 0 .. %lld): the model is one on token ids (--data-bin, --prompt-ids)\n",
               a->dir, (long long)m.s.vocab, (long long)m.s.vocab - 1);
    if (rc < 0 && !json)
        rc = 1;
    if (rc < 0 && mkdir(a->out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, WHO ": %s: cannot create the directory: %s\n", a->out, strerror(errno));
        rc = 1;
    }
    char path[CLI_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", a->out, CHECKPOINT_FILE);
    if (rc < 0 && amp_checkpoint_save(path, g, NULL, NULL, 0, json) != AMP_OK) {
        fprintf(stderr, WHO ": %s\n", amp_last_error());
        rc = 1;
    }
    if (rc < 0)
        rc = hf_copy_tokenizer(a->dir, a->out, WHO, &tok);
    if (rc < 0)
        printf("imported %s (gpt: %lld layers, %lld heads, width %lld, mlp %lld, context %lld, vocab %lld%s%s) "
               "into %s%s\n",
               a->dir, (long long)m.s.layers, (long long)m.s.heads, (long long)m.s.width, (long long)m.s.mlp,
               (long long)m.s.context, (long long)m.s.vocab, ids ? " token ids" : "",
               m.s.gelu_exact ? ", --gelu exact" : "", path,
               !tok ? "" : m.vocab_hex[0] ? ", with tokenizer.json's character vocabulary" : ", with tokenizer.json");
    free(json);
    amp_module_free(g);
    hf_model_free(&m);
    return rc < 0 ? 0 : rc;
}
