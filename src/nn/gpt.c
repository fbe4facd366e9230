/*
 * gpt.c - amp_model_gpt: a decoder-only transformer in the GPT-2 / nanoGPT
 * layout, built from the public ops so that autocast applies to every
 * step (linear and attention lowered, layer_norm and the rest as the
 * policy table says) and autograd sees ordinary nodes.
 *
 *   x = wte[idx] + wpe[0..T)                          [B, T, width]
 *   per block:  x = x + drop(proj(attention(heads(q, k, v of ln_1(x)), causal)))
 *               x = x + drop(fc2(gelu(fc1(ln_2(x)))))
 *   (gelu: the tanh form, GPT-2's; the erf form with gelu_exact, nanoGPT's nn.GELU())
 *   logits = ln_f(x) · wteᵀ                           [B, T, vocab]
 *
 * Each residual add and the layer_norm after it (ln_2, the next block's
 * ln_1, ln_f) run as op_add_layer_norm: one pass on the CPU, the same
 * ops, values and gradients as the two.
 *
 * The head is tied to the token embedding: amp_linear(x, wte, NULL) uses
 * the very tensor the embedding reads, so its gradient sums both uses.
 * q, k and v come from one fused linear qkv [3 width, width] (one GEMM,
 * as nanoGPT's c_attn), whose three thirds (q is rows 0..width of
 * qkv.weight, then k, then v) op_attention_qkv reads in place (with a
 * generating model's cache: split by amp_narrow). Dropout (config
 * dropout > 0, training mode only) follows each residual branch, as
 * nanoGPT's resid_dropout; nanoGPT also drops the embeddings and the
 * attention probabilities, which this model does not. With
 * checkpoint_activations (amp_gpt_set_checkpointing) each block runs
 * through amp_checkpoint: its input is kept, the rest recomputed in
 * backward.
 *
 * Parameters and their names, those of the PyTorch module tree
 * GPT(wte, wpe, h = ModuleList(Block(ln_1, attn(qkv, proj), ln_2,
 * mlp(fc1, fc2))), ln_f) (python/ampc_torch.py builds it; docs/interop.md).
 * The root owns the two embeddings, its children 0..layers-1 are the
 * blocks, named "h.<i>", and child `layers` is "ln_f"; a block's children
 * are flat (indices B_*) but named as the nested tree names them:
 *   wte.weight [vocab, width], wpe.weight [context, width],
 *   h.<i>.ln_1.weight/bias         h.<i>.ln_2.weight/bias
 *   h.<i>.attn.qkv.weight/bias     h.<i>.mlp.fc1.weight/bias [mlp, width]
 *          [3 width, width]
 *   h.<i>.attn.proj.weight/bias    h.<i>.mlp.fc2.weight/bias [width, mlp]
 *   ln_f.weight/bias
 * The tied head has no tensor (and no name) of its own: it is wte.weight.
 * 2 + 12 * layers + 2 tensors; vocab*width + context*width + 2*width +
 * layers * (4*width^2 + 2*width*mlp + 9*width + mlp) numbers. With
 * no_bias (nanoGPT's bias=False) no linear or LayerNorm has a bias:
 * 2 + 6 * layers + 1 tensors.
 *
 * Initialisation (nanoGPT's _init_weights, GPT-2's paper; the same draws
 * with or without biases, which take none): every linear
 * weight and both embeddings N(0, 0.02); the residual projections (attn
 * proj, fc2) N(0, 0.02 / sqrt(2 * layers)); biases 0; LayerNorm weight 1,
 * bias 0, eps 1e-5. Drawn from the global generator in parameter order;
 * with an even width, qkv.weight holds the very values the three separate
 * q, k, v weights of earlier versions drew (the normals come four at a
 * time, and width^2 is then a multiple of four).
 */
#include "nn/gpt_cache.h"
#include "nn/nn.h"

#include "backend/backend.h"
#include "base/base.h"
#include "ops/fused.h"
#include "ops/scope.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT_LN_EPS 1e-5
#define GPT_INIT_STD 0.02

/* Block children, in order, and their names. */
enum { B_LN1, B_QKV, B_PROJ, B_LN2, B_FC1, B_FC2, B_COUNT };
static const char *const block_names[B_COUNT] = {"ln_1", "attn.qkv", "attn.proj", "ln_2", "mlp.fc1", "mlp.fc2"};

/* cfg_i of the root: vocab, context, width, layers, heads, mlp; of a
 * block: width, heads, whether it checkpoints, whether its GELU is the
 * exact one. cfg_f[0] of both: dropout. */

static amp_module *fail(amp_module *m)
{
    amp_module_free(m);
    return NULL;
}

/* ------------------------------------------------------------- forwards */

static amp_tensor *w_of(const amp_module *m, int child) { return m->children[child]->own[0]; }
static amp_tensor *b_of(const amp_module *m, int child) { return m->children[child]->own[1]; }

static amp_tensor *drop(const amp_module *m, amp_tensor *x)
{
    double p = m->cfg_f[0];
    return p > 0 && m->training ? amp_dropout(x, p, true) : x;
}

/* The parts of the GPT that have no module of their own, named as the
 * PyTorch tree names them (module_sub_path): a block's attention and MLP
 * ("h.0.attn": the split into heads and the attention; "h.0.mlp": an
 * exact GELU), and the root's embeddings and head. */
enum { SUB_ATTN, SUB_MLP };
enum { SUB_WTE, SUB_WPE, SUB_HEAD };

/* The ops below, each run in scope path (ops/scope.h): linear(x, w, b)
 * (gelu_tanh fused in with GELU_TANH, or an exact GELU after it in scope
 * gelu_path with GELU_EXACT), an embedding lookup. */
enum { NO_ACT, GELU_TANH, GELU_EXACT };

static amp_tensor *linear_in(const char *path, amp_tensor *x, amp_tensor *w, amp_tensor *b, int act,
                             const char *gelu_path)
{
    op_scope sc;
    op_scope_enter(&sc, path);
    amp_tensor *y = act == GELU_TANH ? op_linear_gelu(x, w, b) : amp_linear(x, w, b);
    op_scope_leave(&sc);
    if (act == GELU_EXACT) {
        op_scope_enter(&sc, gelu_path);
        y = amp_gelu(y, AMP_GELU_EXACT);
        op_scope_leave(&sc);
    }
    return y;
}

static amp_tensor *embedding_in(const char *path, amp_tensor *w, amp_tensor *idx)
{
    op_scope sc;
    op_scope_enter(&sc, path);
    amp_tensor *y = amp_embedding(w, idx);
    op_scope_leave(&sc);
    return y;
}

/* A linear child's own forward (the children are real modules). */
static amp_tensor *linear_forward(amp_module *m, amp_tensor *x)
{
    return amp_linear(x, m->own[0], m->own[1]);
}

/* [B, T, width] -> [B, T, heads, width / heads]: a reshape, no copy;
 * op_attention_bthd takes the heads in this layout. */
static amp_tensor *split_heads(amp_tensor *x, int64_t B, int64_t T, int64_t H, int64_t D)
{
    return amp_reshape(x, AMP_SHAPE(B, T, H, D));
}

/* x + r, and *h = ln(x + r) (a LayerNorm child) from the same pass:
 * op_add_layer_norm, the same ops and values as amp_add then ln. */
static amp_tensor *add_ln(amp_tensor *x, amp_tensor *r, amp_module *ln, amp_tensor **h)
{
    return op_add_layer_norm_in(x, r, ln->own[0], ln->own[1], ln->cfg_f[0], h, module_path(ln));
}

/* One pre-LN block on x [B, T, width]. h1 is ln_1(x) when the previous
 * block computed it with its last add, else NULL; with next_ln, the
 * block's last add computes *h_next = next_ln(result) too (the next
 * block's ln_1, or ln_f). With kv (a generating model's cache), the
 * attention is over the cache's positions, the new keys and values added
 * to it as block `layer`'s (gpt_cache.c). */
static amp_tensor *block_parts(amp_module *m, amp_tensor *x, amp_tensor *h1, amp_module *next_ln,
                               amp_tensor **h_next, amp_gpt_cache *kv, int64_t layer)
{
    if (amp_tensor_ndim(x) != 3 || amp_tensor_dim(x, 2) != m->cfg_i[0]) {
        char b[96];
        return amp_fail_null(AMP_ERR_SHAPE, "gpt_block: input %s %s is not [B, T, %lld]",
                             amp_shape_str(amp_tensor_shape(x), b, sizeof b),
                             amp_dtype_name(amp_tensor_dtype(x)), (long long)m->cfg_i[0]);
    }
    const int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1), W = m->cfg_i[0], H = m->cfg_i[1];
    amp_tensor *h = h1 ? h1 : amp_module_forward(m->children[B_LN1], x);
    /* One GEMM for q, k and v: qkv [B, T, 3 width], then its three thirds. */
    amp_tensor *qkv = linear_in(module_path(m->children[B_QKV]), h, w_of(m, B_QKV), b_of(m, B_QKV), NO_ACT, NULL);
    op_scope sc;
    op_scope_enter(&sc, module_sub_path(m, SUB_ATTN, "attn"));
    amp_tensor *a;
    if (kv) { /* the cache keeps k and v apart */
        amp_tensor *q = split_heads(amp_narrow(qkv, 2, 0, W), B, T, H, W / H);
        amp_tensor *k = split_heads(amp_narrow(qkv, 2, W, W), B, T, H, W / H);
        amp_tensor *v = split_heads(amp_narrow(qkv, 2, 2 * W, W), B, T, H, W / H);
        a = gpt_cache_attend(kv, layer, q, k, v);
    } else { /* q, k, v read in place from qkv, their gradients written into one */
        a = op_attention_qkv(amp_reshape(qkv, AMP_SHAPE(B, T, 3, H, W / H)), true);
    }
    a = amp_reshape(a, AMP_SHAPE(B, T, W));
    op_scope_leave(&sc);
    /* x = x + drop(proj(a)); h = ln_2(x) */
    amp_tensor *pr = linear_in(module_path(m->children[B_PROJ]), a, w_of(m, B_PROJ), b_of(m, B_PROJ), NO_ACT, NULL);
    x = add_ln(x, drop(m, pr), m->children[B_LN2], &h);
    /* gelu_tanh(fc1(h)) as one op: on CUDA the GELU is the GEMM's
     * epilogue (no separate pass over the [B*T, 4 width] activations); on
     * the CPU the same values as the two ops, bit for bit. The exact GELU
     * is an op of its own after fc1. */
    h = linear_in(module_path(m->children[B_FC1]), h, w_of(m, B_FC1), b_of(m, B_FC1),
                  m->cfg_i[3] ? GELU_EXACT : GELU_TANH, module_sub_path(m, SUB_MLP, "mlp"));
    amp_tensor *r =
        drop(m, linear_in(module_path(m->children[B_FC2]), h, w_of(m, B_FC2), b_of(m, B_FC2), NO_ACT, NULL));
    return next_ln ? add_ln(x, r, next_ln, h_next) : amp_add(x, r);
}

/* The block in its own scope ("h.3": the residual adds and dropouts;
 * each part in its module's), also when the model's forward wires it. */
static amp_tensor *block_run(amp_module *m, amp_tensor *x, amp_tensor *h1, amp_module *next_ln,
                             amp_tensor **h_next, amp_gpt_cache *kv, int64_t layer)
{
    op_scope sc;
    op_scope_enter(&sc, module_path(m));
    amp_tensor *y = block_parts(m, x, h1, next_ln, h_next, kv, layer);
    op_scope_leave(&sc);
    return y;
}

static amp_tensor *block_compute(amp_module *m, amp_tensor *x) { return block_run(m, x, NULL, NULL, NULL, NULL, 0); }

static amp_tensor *block_checkpointed(void *ctx, amp_tensor *const *in, int n)
{
    (void)n;
    return block_compute(ctx, in[0]);
}

/* The block, through amp_checkpoint when the model checkpoints its
 * activations (cfg_i[2]): only the block's input is kept, the block is
 * recomputed in backward; with grad disabled only its result outlives it. */
static amp_tensor *block_forward(amp_module *m, amp_tensor *x)
{
    if (m->cfg_i[2])
        return amp_checkpoint(block_checkpointed, m, &x, 1);
    return block_compute(m, x);
}

/* Says which block failed, keeping the op's message. */
static amp_tensor *block_error(int64_t i)
{
    char msg[400];
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    return amp_fail_null(amp_last_status(), "gpt: block %lld: %s", (long long)i, msg);
}

/* The position indices 0..T-1 (i64) on wpe's device, written there by
 * its backend (on a GPU by a kernel: no copy from the host, so a step does
 * not wait on one; the caching allocator serves the T * 8 bytes). */
static amp_status fill_positions(amp_tensor *pos, int64_t T)
{
    BACKEND_CALL(backend_of(tensor_device(pos)), "gpt", iota_i64, tensor_ptr(pos), T);
    return AMP_OK;
}

/* Positions past .. past+T-1: the last T of an iota over past + T. */
static amp_tensor *positions(int64_t past, int64_t T, amp_device dev)
{
    amp_tensor *all = tensor_new_on(AMP_SHAPE(past + T), AMP_I64, dev);
    if (all && fill_positions(all, past + T) != AMP_OK) {
        amp_tensor_free(all);
        return NULL;
    }
    if (!all || past == 0)
        return all;
    amp_tensor *pos = tensor_view(all, AMP_SHAPE(T));
    if (pos)
        pos->offset += (size_t)past * sizeof(int64_t);
    amp_tensor_free(all);
    return pos;
}

static amp_tensor *gpt_forward(amp_module *m, amp_tensor *idx) { return gpt_forward_at(m, idx, NULL); }

amp_tensor *gpt_forward_at(amp_module *m, amp_tensor *idx, amp_gpt_cache *kv)
{
    const int64_t context = m->cfg_i[1], layers = m->cfg_i[3], past = kv ? gpt_cache_pos(kv) : 0;
    amp_dtype dt = amp_tensor_dtype(idx);
    char b[96];
    if ((dt != AMP_I32 && dt != AMP_I64) || amp_tensor_ndim(idx) != 2)
        return amp_fail_null(dt != AMP_I32 && dt != AMP_I64 ? AMP_ERR_DTYPE : AMP_ERR_SHAPE,
                             "gpt: input %s %s must be token indices [B, T] of dtype i32 or i64",
                             amp_shape_str(amp_tensor_shape(idx), b, sizeof b), amp_dtype_name(dt));
    const int64_t T = amp_tensor_dim(idx, 1);
    if (T >= 1 && T <= context && T > context - past)
        return amp_fail_null(AMP_ERR_SHAPE,
                             "gpt: input %s %s has T = %lld tokens, past the context of %lld positions: the cache "
                             "holds %lld (crop the sequence to the context and refill a reset cache)",
                             amp_shape_str(amp_tensor_shape(idx), b, sizeof b), amp_dtype_name(dt), (long long)T,
                             (long long)context, (long long)past);
    if (T < 1 || T > context)
        return amp_fail_null(AMP_ERR_SHAPE, "gpt: input %s %s has T = %lld tokens; 1 to context %lld allowed",
                             amp_shape_str(amp_tensor_shape(idx), b, sizeof b), amp_dtype_name(dt),
                             (long long)T, (long long)context);
    amp_tensor *wte = m->own[0], *wpe = m->own[1];
    /* Positions past..past+T-1 index wpe; the embedding node keeps its own
     * reference, so the index tensor can go at once. */
    amp_tensor *pos = positions(past, T, amp_tensor_device(wpe));
    if (!pos)
        return NULL;
    amp_tensor *x = amp_add(embedding_in(module_sub_path(m, SUB_WTE, "wte"), wte, idx),
                            embedding_in(module_sub_path(m, SUB_WPE, "wpe"), wpe, pos));
    amp_tensor_free(pos);
    /* Each block's last add computes the next block's ln_1 (or ln_f) in
     * the same pass, except around a checkpointed block (which keeps
     * only its input). h: that layer_norm of x, or NULL. */
    amp_tensor *h = NULL;
    for (int64_t i = 0; i < layers && x; i++) {
        amp_module *blk = m->children[i], *next = i + 1 < layers ? m->children[i + 1] : NULL;
        amp_tensor *hn = NULL;
        /* With a cache (inference, no backward) nothing is checkpointed. */
        if (blk->cfg_i[2] && !kv)
            x = amp_module_forward(blk, x);
        else
            x = block_run(blk, x, h,
                          !next ? m->children[layers] : next->cfg_i[2] && !kv ? NULL : next->children[B_LN1], &hn,
                          kv, i);
        h = hn;
        if (!x)
            return block_error(i);
    }
    x = h ? h : amp_module_forward(m->children[layers], x);
    /* The head, tied to wte: transformers' GPT2LMHeadModel calls it lm_head. */
    return linear_in(module_sub_path(m, SUB_HEAD, "lm_head"), x, wte, NULL, NO_ACT, NULL);
}

/* ---------------------------------------------------------- construction */

/* A linear child [out, in]: weight N(0, std), bias 0 (with bias). */
static amp_module *gpt_linear(int64_t in, int64_t out, double std, bool bias)
{
    amp_module *m = module_new("linear", linear_forward);
    if (!m)
        return NULL;
    m->cfg_i[0] = in;
    m->cfg_i[1] = out;
    if (module_add_param(m, amp_randn(AMP_SHAPE(out, in), AMP_F32, 0.0, std), "weight") != AMP_OK ||
        (bias && module_add_param(m, amp_zeros(AMP_SHAPE(out), AMP_F32), "bias") != AMP_OK))
        return fail(m);
    return m;
}

/* A LayerNorm child over width; without bias, its weight alone (own[1]
 * NULL: the layer_norm op takes no bias). */
static amp_module *gpt_layer_norm(int64_t width, bool bias)
{
    amp_module *m = amp_nn_layer_norm(width, GPT_LN_EPS);
    if (m && !bias) {
        amp_tensor_free(m->own[1]);
        m->own[1] = NULL;
        m->own_names[1] = NULL;
        m->n_own = 1;
    }
    return m;
}

/* Takes ownership of child as m's next child, called name (freeing it on
 * failure). */
static amp_status adopt(amp_module *m, amp_module *child, const char *name)
{
    if (!child)
        return amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_MEMORY;
    if (module_set_name(child, name) != AMP_OK) {
        amp_module_free(child);
        return AMP_ERR_MEMORY;
    }
    return module_append(m, child, "model_gpt");
}

/* A block's children in B_* order. They hang off the block as a
 * container's would (parent set, named: "h.3.mlp.fc1.weight"); the
 * block's own forward wires them instead of running them in a row. */
static amp_module *gpt_block(const amp_gpt_config *c)
{
    amp_module *m = module_new("gpt_block", block_forward);
    if (!m)
        return NULL;
    m->cfg_i[0] = c->width;
    m->cfg_i[1] = c->heads;
    m->cfg_i[2] = c->checkpoint_activations;
    m->cfg_i[3] = c->gelu_exact;
    m->cfg_f[0] = c->dropout;
    const double std = GPT_INIT_STD, res_std = GPT_INIT_STD / sqrt(2.0 * (double)c->layers);
    const int64_t W = c->width;
    const bool b = !c->no_bias;
    if (adopt(m, gpt_layer_norm(W, b), block_names[B_LN1]) != AMP_OK ||
        adopt(m, gpt_linear(W, 3 * W, std, b), block_names[B_QKV]) != AMP_OK ||
        adopt(m, gpt_linear(W, W, res_std, b), block_names[B_PROJ]) != AMP_OK ||
        adopt(m, gpt_layer_norm(W, b), block_names[B_LN2]) != AMP_OK ||
        adopt(m, gpt_linear(W, c->mlp, std, b), block_names[B_FC1]) != AMP_OK ||
        adopt(m, gpt_linear(c->mlp, W, res_std, b), block_names[B_FC2]) != AMP_OK)
        return fail(m);
    return m;
}

amp_module *amp_model_gpt(amp_gpt_config c)
{
    const struct {
        const char *name;
        int64_t v;
    } dims[6] = {{"vocab", c.vocab}, {"context", c.context}, {"width", c.width},
                 {"layers", c.layers}, {"heads", c.heads}, {"mlp", c.mlp}};
    for (int i = 0; i < 6; i++)
        if (dims[i].v < 1)
            return amp_fail_null(AMP_ERR_ARG, "model_gpt: %s %lld must be >= 1", dims[i].name,
                                 (long long)dims[i].v);
    if (c.width % c.heads)
        return amp_fail_null(AMP_ERR_ARG, "model_gpt: width %lld is not divisible by heads %lld",
                             (long long)c.width, (long long)c.heads);
    if (!(c.dropout >= 0 && c.dropout < 1))
        return amp_fail_null(AMP_ERR_ARG, "model_gpt: dropout %g is not in [0, 1)", c.dropout);
    if (c.layers > 100000) /* children are counted in an int; far past any real model anyway */
        return amp_fail_null(AMP_ERR_ARG, "model_gpt: layers %lld is too many", (long long)c.layers);

    amp_module *m = module_new("gpt", gpt_forward);
    if (!m)
        return NULL;
    for (int i = 0; i < 6; i++)
        m->cfg_i[i] = dims[i].v;
    m->cfg_f[0] = c.dropout;
    amp_tensor *wte = amp_randn(AMP_SHAPE(c.vocab, c.width), AMP_F32, 0.0, GPT_INIT_STD);
    if (module_add_param(m, wte, "wte.weight") != AMP_OK)
        return fail(m);
    amp_tensor *wpe = amp_randn(AMP_SHAPE(c.context, c.width), AMP_F32, 0.0, GPT_INIT_STD);
    if (module_add_param(m, wpe, "wpe.weight") != AMP_OK)
        return fail(m);
    for (int64_t i = 0; i < c.layers; i++) {
        char name[32];
        snprintf(name, sizeof name, "h.%lld", (long long)i);
        if (adopt(m, gpt_block(&c), name) != AMP_OK)
            return fail(m);
    }
    if (adopt(m, gpt_layer_norm(c.width, !c.no_bias), "ln_f") != AMP_OK)
        return fail(m);
    return m;
}

amp_status amp_gpt_set_checkpointing(amp_module *m, bool on)
{
    if (!m || strcmp(m->kind, "gpt") != 0)
        return amp_set_error(AMP_ERR_ARG, "gpt_set_checkpointing: %s is not a gpt model (amp_model_gpt)",
                             m ? m->kind : "NULL");
    for (int64_t i = 0; i < m->cfg_i[3]; i++)
        m->children[i]->cfg_i[2] = on;
    return AMP_OK;
}
