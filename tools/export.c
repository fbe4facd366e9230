/*
 * export.c - `ampc export [--format F] DIR OUT`: the model a run saved in
 * DIR written in another program's format. The formats are one table
 * (`formats`): a name, a line of --help and the function that writes it;
 * a format is a row.
 *
 *   hf   Hugging Face transformers (a gpt only): OUT/config.json,
 *        OUT/model.safetensors and, for a character vocabulary,
 *        OUT/tokenizer.json (hf_write.c; a model on token ids: DIR's
 *        tokenizer.json copied, when it has one; a --no-bias model:
 *        zero biases, as GPT-2 always has them), which
 *        GPT2LMHeadModel.from_pretrained(OUT) and
 *        tokenizers.Tokenizer.from_file load. Without a tokenizer of its
 *        own, an earlier export's OUT/tokenizer.json is removed (it is
 *        another model's vocabulary).
 *   gguf a GGUF file for llama.cpp's gpt2 architecture (export_gguf.c,
 *        written by gguf.c), written whole to a temporary and renamed.
 *
 * The checkpoint is restored as `ampc eval` restores it (its settings
 * build the model, amp_checkpoint_load checks and fills it). The weights
 * written are the f32 masters where the checkpoint holds them (a
 * --param-dtype run past its first step), else the parameters
 * themselves; in f32 unless every weight is stored in one 16-bit dtype,
 * or as --dtype says (rounded to nearest even; a weight the dtype cannot
 * hold, or one not finite, is refused before anything is written).
 * --data and --name are gguf's: other formats refuse them.
 */
#include "checkpoint_cli.h"
#include "cli.h"
#include "export.h"
#include "hf.h"
#include "trainer.h"

#include "io/checkpoint.h"
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHO "ampc export"

typedef export_opts export_args;

static int export_hf(const export_args *a);

/* The formats, one row each. */
static const struct {
    const char *name, *what;
    int (*write)(const export_args *a);
} formats[] = {
    {"hf", "Hugging Face transformers: config.json, model.safetensors, tokenizer.json (gpt)", export_hf},
    {"gguf", "GGUF for llama.cpp (gpt models: its gpt2 architecture)", export_gguf},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

static const opt_def export_rows[] = {
    {.name = "format", .meta = "F", .kind = OPT_STR, .off = offsetof(export_args, format),
     .help = "the format to write (default hf; the formats are listed below)"},
    {.name = "dtype", .meta = "DT", .kind = OPT_STR, .off = offsetof(export_args, dtype), .choices = "f32|f16|bf16",
     .help = "the weights' dtype (default: f32, or the 16-bit dtype every\nweight of the checkpoint is stored in; gguf: "
             "the checkpoint's own, norms and\nbiases f32)"},
    {.name = "data", .meta = "PATH", .kind = OPT_STR, .off = offsetof(export_args, data),
     .help = "gguf: the training text, read for the vocabulary only when the checkpoint\ndoes not record it "
             "(checkpoints of older ampc; default: the checkpoint's --data)"},
    {.name = "name", .meta = "TEXT", .kind = OPT_TEXT, .off = offsetof(export_args, name),
     .help = "gguf: the model's name in the file (default: DIR's last component)"},
};

int convert_positional(const opt_cmd *c, const char *arg, void *ctx)
{
    convert_args *a = ctx;
    if (arg[0] == '-' && arg[1] != '\0') {
        fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", c->who, arg, c->who);
        return EXIT_USAGE;
    }
    if (a->dir && a->out)
        return opt_unexpected(c, arg);
    *(a->dir ? &a->out : &a->dir) = arg;
    return -1;
}

int convert_parse(const opt_cmd *c, int argc, char **argv, convert_args *a, const char *what)
{
    *a = (convert_args){.format = "hf"};
    int rc = opt_parse(c, &(opt_dst){a, NULL}, a, argc, argv);
    if (rc >= 0)
        return rc;
    if (!a->out) {
        fprintf(stderr, "%s: give %s (see %s --help)\n", c->who, what, c->who);
        return EXIT_USAGE;
    }
    return -1;
}

const opt_cmd export_options = {
    .who = WHO,
    .usage = "usage: ampc export [--format F] [--dtype DT] DIR OUT\n\n"
             "Writes the model saved in DIR (by ampc train --save, or ampc import) into\n"
             "the directory OUT in another program's format.\n\n",
    .footer = "\nformats:\n"
              "  hf    Hugging Face transformers (a gpt): OUT/config.json (a GPT2Config),\n"
              "        OUT/model.safetensors (transformers' GPT-2 names and layouts) and, for a\n"
              "        character vocabulary, OUT/tokenizer.json; GPT2LMHeadModel.from_pretrained(OUT)\n"
              "        loads it (docs/interop.md)\n"
              "  gguf  llama.cpp (a gpt): the file OUT, its gpt2 architecture, written whole to a\n"
              "        temporary beside it and renamed into place (docs/interop.md, \"llama.cpp (GGUF)\");\n"
              "        a gpt on token ids takes its vocabulary from DIR/tokenizer.json (a byte-level BPE)\n",
    OPT_ONE_TABLE(export_rows),
    .positional = convert_positional,
};

/* Whether OUT is the checkpoint itself (the same file under any name):
 * writing it would replace the run's checkpoint. */
static bool out_is_checkpoint(const export_args *e)
{
    char ck[CLI_PATH_MAX];
    checkpoint_path(ck, sizeof ck, e->dir);
    struct stat a, b;
    return stat(ck, &a) == 0 && stat(e->out, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* What a command line asks that cannot be done, checked before any file
 * is read: a format not in the table, --data or --name with a format that
 * has no use for them (they would be ignored), a --name GGUF cannot
 * hold. -1 (*row: the format's row) or EXIT_USAGE. */
static int export_check(const export_args *a, size_t *row)
{
    for (*row = 0; *row < N_FORMATS && strcmp(a->format, formats[*row].name) != 0; ++*row)
        ;
    if (*row == N_FORMATS) {
        fprintf(stderr, WHO ": --format '%s' is not one ampc writes:", a->format);
        for (size_t i = 0; i < N_FORMATS; i++)
            fprintf(stderr, " %s", formats[i].name);
        fprintf(stderr, "\n");
        return EXIT_USAGE;
    }
    const char *gguf_only = a->data ? "--data" : a->name ? "--name" : NULL;
    if (gguf_only && strcmp(a->format, "gguf") != 0) {
        fprintf(stderr, WHO ": %s is an option of --format gguf; --format %s has no use for it\n", gguf_only,
                a->format);
        return EXIT_USAGE;
    }
    if (a->name && !export_name_ok(a->name, "--name"))
        return EXIT_USAGE;
    return -1;
}

bool export_name_ok(const char *name, const char *what)
{
    size_t n = strlen(name);
    if (n > EXPORT_NAME_MAX) {
        fprintf(stderr, WHO ": %s is %zu bytes long; a model's name is at most %d bytes\n", what, n,
                EXPORT_NAME_MAX);
        return false;
    }
    if (!json_utf8_valid(name, n)) {
        fprintf(stderr, WHO ": %s is not valid UTF-8, which a GGUF string must be\n", what);
        return false;
    }
    return true;
}

bool export_values_fit(const float *f, int64_t n, amp_dtype dt, const char *where, const char *name)
{
    for (int64_t i = 0; i < n; i++) {
        float back = f[i];
        if (dt != AMP_F32) {
            uint16_t h;
            amp_convert(&f[i], AMP_F32, &h, dt, 1);
            amp_convert(&h, dt, &back, AMP_F32, 1);
        }
        if (!isfinite(back)) {
            fprintf(stderr, WHO ": %s: tensor %s, element %lld: %g %s\n", where, name, (long long)i, (double)f[i],
                    !isfinite(f[i])    ? "is not finite: nothing to export"
                    : dt == AMP_F16    ? "is beyond f16's range (65504): choose --dtype f32 or bf16"
                                       : "is beyond bf16's range: choose --dtype f32");
            return false;
        }
    }
    return true;
}

int export_parse(int argc, char **argv)
{
    export_args a;
    size_t row;
    int rc = convert_parse(&export_options, argc, argv, &a, "the checkpoint directory DIR and the output OUT");
    return rc >= 0 ? rc : export_check(&a, &row);
}

int export_main(int argc, char **argv)
{
    export_args a;
    size_t row;
    int rc = convert_parse(&export_options, argc, argv, &a, "the checkpoint directory DIR and the output OUT");
    if (rc >= 0 || (rc = export_check(&a, &row)) >= 0)
        return rc;
    if (out_is_checkpoint(&a)) {
        fprintf(stderr, WHO ": %s is the checkpoint itself: give another output\n", a.out);
        return EXIT_USAGE;
    }
    return formats[row].write(&a);
}

/* The run in dir restored into t (as eval restores it); -1 or the exit code. */
static int restore(const char *dir, train_opts *o, run_info *ri, trainer *t)
{
    int rc = checkpoint_read_settings(dir, o, ri);
    if (rc >= 0)
        return rc;
    if (!is_gpt(o)) {
        fprintf(stderr, WHO ": %s holds a %s model; --format hf writes gpt models (GPT-2's architecture)\n", dir,
                o->model);
        return EXIT_USAGE;
    }
    o->resume = dir;
    o->device = "cpu";
    opts_set_command(WHO);
    if ((rc = opts_resolve(o)) >= 0 || (rc = checkpoint_check_size(dir, o, ri)) >= 0)
        return rc;
    if (!trainer_build(t, o, ri, 1))
        return 1;
    return checkpoint_load_run(dir, t, false, false, NULL);
}

/* Parameter `name` of m as f32 (the checkpoint's f32 master when it has
 * one: *master set) into a new buffer; NULL after a message. */
static float *weight_f32(const ckpt *c, const amp_module *m, const char *name, int64_t numel, bool *master,
                         bool *wide)
{
    amp_tensor *p = NULL;
    for (int i = 0, n = amp_module_num_params(m); i < n && !p; i++) {
        const char *pn;
        amp_tensor *q = amp_module_param(m, i, &pn);
        if (q && strcmp(pn, name) == 0)
            p = q;
    }
    float *w = p && amp_tensor_numel(p) == numel ? malloc((size_t)numel * sizeof *w) : NULL;
    if (!w) {
        fprintf(stderr, WHO ": %s: %s\n", c->path, p ? "out of memory" : "the model lacks a parameter it should have");
        return NULL;
    }
    char key[160];
    snprintf(key, sizeof key, "optim.%s.master", name);
    const in_entry *e = ckpt_find(c, key);
    *master = e && e->dt == AMP_F32 && e->end - e->begin == (uint64_t)numel * 4;
    *wide = amp_tensor_dtype(p) == AMP_F32;
    if (*master)
        memcpy(w, e->bytes, (size_t)numel * 4);
    else
        amp_convert(amp_tensor_cdata(p), amp_tensor_dtype(p), w, AMP_F32, (size_t)numel);
    return w;
}

static int export_hf(const export_args *a)
{
    train_opts o;
    run_info ri;
    trainer t = {0};
    int rc = restore(a->dir, &o, &ri, &t);
    if (rc >= 0) { /* o and ri are not filled in */
        trainer_free(&t);
        return rc;
    }
    char path[CLI_PATH_MAX];
    checkpoint_path(path, sizeof path, a->dir);
    ckpt c = {.path = path, .n_params = -1};
    if (ckpt_open(&c) != AMP_OK) {
        fprintf(stderr, WHO ": %s\n", amp_last_error());
        rc = 1;
    }
    hf_shape s = {.layers = o.layers, .heads = o.heads, .width = o.width, .mlp = o.mlp_width,
                  .context = o.context, .vocab = ri.vocab, .dropout = o.dropout,
                  .gelu_exact = !strcmp(o.gelu, "exact")};
    int n = rc < 0 ? hf_tensor_count(&s) : 0;
    float **w = calloc((size_t)n + 1, sizeof *w);
    bool any_master = false, any_f32 = false;
    amp_dtype narrow = AMP_F32;
    for (int k = 0; rc < 0 && k < n; k++) {
        hf_tensor h;
        hf_tensor_at(&s, k, &h);
        bool master = false, wide = false, zero = o.no_bias && strstr(h.ampc, ".bias"); /* GPT-2 has them */
        int64_t numel = h.rows * (h.cols ? h.cols : 1);
        if (!w || !(w[k] = zero ? calloc((size_t)numel, sizeof **w)
                                : weight_f32(&c, t.model, h.ampc, numel, &master, &wide))) {
            rc = 1;
            break;
        }
        any_master |= master, any_f32 |= wide;
        if (!wide) {
            for (int i = 0, np = amp_module_num_params(t.model); i < np; i++) {
                const char *pn;
                amp_tensor *q = amp_module_param(t.model, i, &pn);
                if (q && strcmp(pn, h.ampc) == 0)
                    narrow = amp_tensor_dtype(q);
            }
        }
    }
    amp_dtype dt = any_master || any_f32 ? AMP_F32 : narrow;
    if (a->dtype)
        dt = !strcmp(a->dtype, "bf16") ? AMP_BF16 : !strcmp(a->dtype, "f16") ? AMP_F16 : AMP_F32;
    for (int k = 0; rc < 0 && k < n; k++) {
        hf_tensor h;
        hf_tensor_at(&s, k, &h);
        if (!export_values_fit(w[k], h.rows * (h.cols ? h.cols : 1), dt, path, h.ampc))
            rc = 1;
    }
    if (rc < 0)
        rc = hf_write_dir(a->out, &s, (const float *const *)w, dt, ri.vocab_hex,
                          json_get(c.meta, "settings") ? json_get(c.meta, "settings")->str : NULL);
    bool tok = ri.vocab_hex[0];
    char *slash = strrchr(path, '/'); /* the checkpoint's directory */
    if (rc < 0 && ri.token_ids && slash) {
        *slash = '\0';
        rc = hf_copy_tokenizer(path, a->out, WHO, &tok);
        *slash = '/';
    }
    bool stale = false; /* an earlier export's tokenizer.json, not this model's */
    if (rc < 0 && !tok) {
        char old[CLI_PATH_MAX + 32];
        snprintf(old, sizeof old, "%s/tokenizer.json", a->out);
        errno = 0;
        stale = remove(old) == 0;
        if (!stale && errno != ENOENT) {
            fprintf(stderr, WHO ": %s: cannot remove an earlier export's tokenizer.json, which is not this model's: "
                            "%s\n", old, strerror(errno));
            rc = 1;
        }
    }
    if (rc < 0)
        printf("exported %s (gpt: %lld layers, %lld heads, width %lld, mlp %lld, context %lld, vocab %lld) to %s: "
               "config.json, model.safetensors (%s%s)%s\n",
               path, (long long)s.layers, (long long)s.heads, (long long)s.width, (long long)s.mlp,
               (long long)s.context, (long long)s.vocab, a->out, ckpt_dtype_name(dt),
               any_master ? ", from the f32 master weights" : "",
               tok     ? ", tokenizer.json"
               : stale ? " (no tokenizer.json: the checkpoint records no vocabulary; the earlier one in OUT removed)"
                       : " (no tokenizer.json: the checkpoint records no vocabulary)");
    for (int k = 0; w && k < n; k++)
        free(w[k]);
    free(w);
    ckpt_close(&c);
    trainer_free(&t);
    return rc < 0 ? 0 : rc;
}
