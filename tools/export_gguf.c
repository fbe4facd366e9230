/*
 * export_gguf.c - `ampc export --format gguf DIR OUT`: a gpt checkpoint as
 * a GGUF file llama.cpp loads as its "gpt2" architecture (docs/interop.md,
 * "llama.cpp (GGUF)").
 *
 * The model is restored as `ampc generate` restores it (the checkpoint's
 * settings build it, amp_checkpoint_load fills and checks it, older
 * layouts converted), then each parameter is written under llama.cpp's
 * name for it (convert_hf_to_gguf.py's for GPT-2). ampc's [out, in]
 * row-major matrices are ggml's ne = {in, out}: the same bytes, the
 * dimensions listed fastest first. The head is tied: llama.cpp's gpt2
 * takes token_embd.weight as the output when output.weight is absent, so
 * none is written.
 *
 * The vocabulary: ampc's gpt reads bytes, token k being the corpus's k-th
 * distinct byte. llama.cpp's "gpt2" tokenizer is byte-level BPE: a text's
 * bytes are mapped to characters (GPT-2's bytes_to_unicode: printable
 * bytes stand for themselves, the others for U+0100 on), merged by the
 * merge list, and each piece looked up. So each token is written as its
 * byte's character and the merge list is empty: every byte is one piece,
 * and llama.cpp tokenizes and detokenizes to ampc's ids. A gpt trained
 * on token ids (--data-bin, or imported from Hugging Face) takes the
 * tokens, merges and types of the byte-level BPE tokenizer.json in its
 * directory (gguf_bpe.c).
 *
 * Without biases (--no-bias) each linear and LayerNorm is written with a
 * zero bias, which computes the same: llama.cpp's gpt2 requires them.
 */
#include "checkpoint_cli.h"
#include "data.h"
#include "export.h"
#include "gguf.h"
#include "gguf_bpe.h"
#include "trainer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHO "ampc export"
/* src/nn/gpt.c's LayerNorm epsilon (PyTorch's default). */
#define GPT_LN_EPS 1e-5f

/* llama.cpp's tensor names for ampc's modules: the model's own, then a
 * block's (after "h.<i>."; llama.cpp's after "blk.<i>."). */
static const struct {
    const char *ampc, *gguf;
} top_names[] = {{"wte", "token_embd"}, {"wpe", "position_embd"}, {"ln_f", "output_norm"}},
  block_names[] = {{"ln_1", "attn_norm"}, {"attn.qkv", "attn_qkv"}, {"attn.proj", "attn_output"},
                   {"ln_2", "ffn_norm"},  {"mlp.fc1", "ffn_up"},    {"mlp.fc2", "ffn_down"}};

/* llama.cpp's name for parameter name ("h.3.mlp.fc1.weight" ->
 * "blk.3.ffn_up.weight") into buf; false for a name it has none for. */
static bool gguf_name(const char *name, char *buf, size_t n)
{
    const char *dot = strrchr(name, '.');
    if (!dot || (strcmp(dot, ".weight") != 0 && strcmp(dot, ".bias") != 0))
        return false;
    int block = -1, at = 0;
    if (sscanf(name, "h.%d.%n", &block, &at) == 1 && at > 0) {
        for (size_t i = 0; i < sizeof block_names / sizeof block_names[0]; i++)
            if (strlen(block_names[i].ampc) == (size_t)(dot - name - at) &&
                strncmp(name + at, block_names[i].ampc, (size_t)(dot - name - at)) == 0)
                return snprintf(buf, n, "blk.%d.%s%s", block, block_names[i].gguf, dot) < (int)n;
        return false;
    }
    for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
        if (strlen(top_names[i].ampc) == (size_t)(dot - name) && strncmp(name, top_names[i].ampc, (size_t)(dot - name)) == 0)
            return snprintf(buf, n, "%s%s", top_names[i].gguf, dot) < (int)n;
    return false;
}

/* GPT-2's bytes_to_unicode: the character byte b stands for, as UTF-8
 * into out (3 bytes: 1 or 2 and a NUL). Printable bytes ('!'..'~',
 * U+00A1..U+00AC, U+00AE..U+00FF) are themselves; the other 68, in
 * increasing order, are U+0100 on ("Ġ" is the space, "Ċ" the newline). */
static void byte_char(unsigned b, char out[3])
{
    unsigned cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        cp = b;
    else
        cp = 256 + (b <= 32 ? b : b <= 160 ? 33 + (b - 127) : 67);
    if (cp < 128) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 63));
        out[2] = 0;
    }
}

/* The model's vocabulary, its bytes in id order, into bytes[256]: the
 * checkpoint's record of it, else the training text's distinct bytes (a
 * checkpoint of an older ampc). -1, or 1 after a message. */
static int vocab_bytes(const export_opts *e, const train_opts *o, const run_info *saved, const char *where,
                       unsigned char *bytes)
{
    run_info have = *saved;
    if (!saved->vocab_hex[0]) {
        const char *data = e->data ? e->data : o->data;
        amp_text *text = data ? amp_text_load(data) : NULL;
        if (!text) {
            fprintf(stderr, WHO ": %s does not record its vocabulary, which comes from the training text then: %s "
                            "(give it with --data)\n", where, data ? amp_last_error() : "the checkpoint names none");
            return 1;
        }
        vocab_record(text, &have);
        amp_text_free(text);
        if (have.vocab != saved->vocab) {
            fprintf(stderr, WHO ": %s has a vocabulary of %lld characters; the model in %s was trained on one of "
                            "%lld (give the training text with --data)\n", data, (long long)have.vocab, where,
                    (long long)saved->vocab);
            return 1;
        }
    }
    for (int64_t i = 0; i < have.vocab; i++) {
        unsigned v = 0;
        sscanf(have.vocab_hex + 2 * i, "%2x", &v);
        bytes[i] = (unsigned char)v;
    }
    return -1;
}

/* The tokenizer's keys: byte-level "gpt2" with no merges, every token
 * normal; bos and eos (llama.cpp's BPE vocabularies take id 11 for both
 * when none is given, and a character vocabulary has no end-of-text
 * token) are the newline's id, else id 0: llama.cpp's generation stops at
 * that character unless told to ignore it. */
static bool tokenizer_keys(gguf_file *g, const unsigned char *bytes, int64_t n)
{
    char chars[256][3];
    const char *tokens[256];
    int32_t types[256];
    uint32_t eos = 0;
    for (int64_t i = 0; i < n; i++) {
        byte_char(bytes[i], chars[i]);
        tokens[i] = chars[i];
        types[i] = 1; /* LLAMA_TOKEN_TYPE_NORMAL */
        if (bytes[i] == '\n')
            eos = (uint32_t)i;
    }
    return gguf_kv_str(g, "tokenizer.ggml.model", "gpt2") && gguf_kv_str(g, "tokenizer.ggml.pre", "gpt-2") &&
           gguf_kv_strs(g, "tokenizer.ggml.tokens", tokens, (size_t)n) &&
           gguf_kv_i32s(g, "tokenizer.ggml.token_type", types, (size_t)n) &&
           gguf_kv_strs(g, "tokenizer.ggml.merges", NULL, 0) && gguf_kv_u32(g, "tokenizer.ggml.bos_token_id", eos) &&
           gguf_kv_u32(g, "tokenizer.ggml.eos_token_id", eos) && gguf_kv_bool(g, "tokenizer.ggml.add_bos_token", false);
}

/* The type a parameter is written in: 1-D ones (norms, biases) f32, as
 * llama.cpp's converter writes them; the others in dt. */
static amp_dtype written_dtype(const amp_tensor *p, amp_dtype dt) { return amp_tensor_ndim(p) == 1 ? AMP_F32 : dt; }

/* Parameter p (called name, llama.cpp's gname) into g in dt; false after
 * a message (values llama.cpp would read as inf or NaN are refused). */
static bool add_param(gguf_file *g, const amp_tensor *p, const char *name, const char *gname, amp_dtype dt,
                      const char *where)
{
    int64_t n = amp_tensor_numel(p), ne[4];
    int nd = amp_tensor_ndim(p);
    float *f = malloc(sizeof *f * (size_t)n);
    void *data = malloc(amp_dtype_size(dt) * (size_t)n);
    bool ok = f && data && amp_tensor_copy_out(p, f, AMP_F32) == AMP_OK && amp_tensor_copy_out(p, data, dt) == AMP_OK;
    if (!ok) {
        fprintf(stderr, WHO ": %s: tensor %s: %s\n", where, name, f && data ? amp_last_error() : "out of memory");
        free(f);
        free(data);
        return false;
    }
    ok = export_values_fit(f, n, dt, where, name);
    free(f);
    if (!ok) {
        free(data);
        return false;
    }
    for (int d = 0; d < nd; d++)
        ne[d] = amp_tensor_dim(p, nd - 1 - d);
    gguf_ggml_type t = dt == AMP_F32 ? GGML_F32 : dt == AMP_F16 ? GGML_F16 : GGML_BF16;
    if (!gguf_tensor(g, gname, nd, ne, t, data, amp_dtype_size(dt) * (size_t)n)) {
        fprintf(stderr, WHO ": %s: out of memory\n", where);
        return false;
    }
    return true;
}

/* A zero f32 bias of n values for the weight called gname
 * ("blk.0.ffn_up.weight" -> "blk.0.ffn_up.bias"); false after a message. */
static bool add_zero_bias(gguf_file *g, const char *gname, int64_t n, const char *where)
{
    char name[128];
    snprintf(name, sizeof name, "%.*s.bias", (int)(strlen(gname) - strlen(".weight")), gname);
    float *zero = calloc((size_t)n, sizeof *zero);
    if (!zero || !gguf_tensor(g, name, 1, (int64_t[4]){n}, GGML_F32, zero, sizeof *zero * (size_t)n)) {
        fprintf(stderr, WHO ": %s: out of memory\n", where);
        return false;
    }
    return true;
}

/* The metadata and every parameter of the loaded gpt t into g; -1, or 1
 * after a message (EXIT_USAGE: a name GGUF cannot hold). */
static int fill(gguf_file *g, const export_opts *e, const train_opts *o, const run_info *saved, const trainer *t,
                const unsigned char *bytes, const char *tokenizer, const char *where)
{
    amp_dtype dt;
    const char *want = e->dtype ? e->dtype : o->param_dtype;
    dt = strstr(want, "16") ? (want[0] == 'b' ? AMP_BF16 : AMP_F16) : AMP_F32;
    const char *base = strrchr(e->dir, '/');
    const char *name = e->name ? e->name : base && base[1] ? base + 1 : e->dir;
    if (!export_name_ok(name, "the model's name (DIR's last component; give another with --name)"))
        return EXIT_USAGE;
    bool ok = gguf_kv_str(g, "general.architecture", "gpt2") && gguf_kv_str(g, "general.name", name) &&
              gguf_kv_u32(g, "general.file_type", dt == AMP_F32 ? 0 : dt == AMP_F16 ? 1 : 32) && /* llama_ftype */
              gguf_kv_u32(g, "general.alignment", GGUF_ALIGNMENT) &&
              gguf_kv_u32(g, "gpt2.context_length", (uint32_t)o->context) &&
              gguf_kv_u32(g, "gpt2.embedding_length", (uint32_t)o->width) &&
              gguf_kv_u32(g, "gpt2.feed_forward_length", (uint32_t)o->mlp_width) &&
              gguf_kv_u32(g, "gpt2.block_count", (uint32_t)o->layers) &&
              gguf_kv_u32(g, "gpt2.attention.head_count", (uint32_t)o->heads) &&
              gguf_kv_f32(g, "gpt2.attention.layer_norm_epsilon", GPT_LN_EPS) &&
              (tokenizer || tokenizer_keys(g, bytes, saved->vocab));
    if (!ok) {
        fprintf(stderr, WHO ": %s: out of memory\n", where);
        return 1;
    }
    int rc = tokenizer ? gguf_bpe_keys(g, tokenizer, saved->vocab, WHO) : -1;
    if (rc >= 0)
        return rc;
    for (int i = 0; i < amp_module_num_params(t->model); i++) {
        const char *pname;
        const amp_tensor *p = amp_module_param(t->model, i, &pname);
        char gname[128];
        if (!gguf_name(pname, gname, sizeof gname)) {
            fprintf(stderr, WHO ": %s: tensor %s has no name in llama.cpp's gpt2 architecture\n", where, pname);
            return 1;
        }
        if (!add_param(g, p, pname, gname, written_dtype(p, dt), where))
            return 1;
        if (o->no_bias && strncmp(gname, "token_embd.", 11) != 0 && strncmp(gname, "position_embd.", 14) != 0 &&
            !add_zero_bias(g, gname, amp_tensor_dim(p, 0), where))
            return 1;
    }
    return -1;
}

int export_gguf(const export_opts *e)
{
    train_opts o;
    run_info saved = {0};
    char where[CLI_PATH_MAX];
    checkpoint_path(where, sizeof where, e->dir);
    opts_set_command(WHO);
    int rc = checkpoint_read_settings(e->dir, &o, &saved);
    if (rc >= 0)
        return rc;
    if (!is_gpt(&o)) {
        fprintf(stderr, WHO ": %s holds a %s model; GGUF export writes gpt models (llama.cpp's gpt2 architecture)\n",
                where, o.model);
        return 1;
    }
    /* What llama.cpp's gpt2 cannot run as ampc does: ids of a tokenizer
     * the checkpoint's directory does not hold, the erf GELU (gpt2's is
     * the tanh form). */
    char tokenizer[CLI_PATH_MAX + 32];
    if (saved.token_ids) {
        const char *slash = strrchr(where, '/');
        snprintf(tokenizer, sizeof tokenizer, "%.*s/tokenizer.json", slash ? (int)(slash - where) : 1,
                 slash ? where : ".");
        struct stat sb; /* stat, not open: opening a FIFO waits (tokenizer_read refuses all but regular files) */
        if (stat(tokenizer, &sb) != 0) {
            fprintf(stderr, WHO ": %s was trained on token ids (--data-bin): its vocabulary is a tokenizer's, and "
                            "%s does not exist (put the model's Hugging Face tokenizer.json there)\n",
                    where, tokenizer);
            return 1;
        }
    }
    if (o.gelu && strcmp(o.gelu, "exact") == 0) {
        fprintf(stderr, WHO ": %s uses the exact (erf) GELU (--gelu exact); llama.cpp's gpt2 computes the tanh form: "
                        "GGUF export writes gpt models with the tanh GELU\n", where);
        return 1;
    }
    /* Restored on the CPU, in its own precision (nothing runs). */
    o.device = "cpu";
    o.resume = e->dir;
    if ((rc = opts_resolve(&o)) >= 0)
        return rc;
    unsigned char bytes[256];
    if (!saved.token_ids && (rc = vocab_bytes(e, &o, &saved, where, bytes)) >= 0)
        return rc;
    trainer t = {0};
    int64_t step = 0;
    if ((rc = checkpoint_check_size(e->dir, &o, &saved)) < 0 && !trainer_build(&t, &o, &saved, 1))
        rc = 1;
    if (rc < 0)
        rc = checkpoint_load_run(e->dir, &t, false, false, &step);
    gguf_file *g = rc < 0 ? gguf_new() : NULL;
    if (rc < 0 && !g) {
        fprintf(stderr, WHO ": out of memory\n");
        rc = 1;
    }
    if (rc < 0)
        rc = fill(g, e, &o, &saved, &t, bytes, saved.token_ids ? tokenizer : NULL, where);
    if (rc < 0) {
        char what[CLI_PATH_MAX + 64];
        int err = gguf_write(g, e->out, what, sizeof what);
        if (err) {
            fprintf(stderr, WHO ": %s: cannot %s: %s (nothing written there)\n", e->out, what, strerror(err));
            rc = 1;
        }
    }
    gguf_free(g);
    trainer_free(&t);
    return rc < 0 ? 0 : rc;
}
