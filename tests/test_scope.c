/*
 * test_scope.c - the module an op is recorded in (ops/scope.h) and the
 * modules kept in f32 under autocast: every op of a gpt's forward and
 * backward carries the PyTorch path of the module it ran in, as the node
 * observer sees them (autograd/graph.h); a checkpointed block's recompute
 * keeps them; amp_scope_begin names code outside modules; a module in
 * the fp32 set runs its lowered ops in f32 while the rest stays bf16,
 * and its values are the fp32 model's.
 */
#include "harness.h"
#include "small_gpt.h"

#include "autograd/graph.h"
#include "ops/ops.h"

#include <stdlib.h>

/* What the observer saw: (phase, scope, op, result dtype) per event. */
typedef struct {
    int n;
    struct {
        bool backward, recompute;
        char scope[64];
        char op[32];
        amp_dtype dtype;
    } e[4096];
} seen_list;

static amp_status record(void *ctx, const node *n, bool backward, amp_tensor *const *t, int n_t)
{
    seen_list *s = ctx;
    if (s->n == 4096)
        return AMP_OK;
    s->e[s->n].backward = backward;
    s->e[s->n].recompute = !backward && autograd_in_backward();
    snprintf(s->e[s->n].scope, sizeof s->e[s->n].scope, "%s", n->scope ? n->scope : "(null)");
    snprintf(s->e[s->n].op, sizeof s->e[s->n].op, "%s", n->name);
    s->e[s->n].dtype = AMP_DTYPE_COUNT;
    for (int i = 0; i < n_t; i++)
        if (t[i]) {
            s->e[s->n].dtype = amp_tensor_dtype(t[i]);
            break;
        }
    s->n++;
    return AMP_OK;
}

/* The first event of op in scope (phase backward or not, no recompute); -1 if none. */
static int find(const seen_list *s, bool backward, const char *scope, const char *op)
{
    for (int i = 0; i < s->n; i++)
        if (s->e[i].backward == backward && !s->e[i].recompute && strcmp(s->e[i].scope, scope) == 0 &&
            strcmp(s->e[i].op, op) == 0)
            return i;
    return -1;
}

/* One forward + backward of m on fixed tokens, the loss in scope "loss";
 * under bf16 autocast when lower. */
static void step(amp_module *m, bool lower)
{
    amp_tensor *idx = tokens(), *y = tokens();
    if (lower)
        CHECK(amp_autocast_begin(AMP_CPU, AMP_BF16) == AMP_OK);
    amp_tensor *logits = amp_module_forward(m, idx);
    CHECK(amp_scope_begin("loss") == AMP_OK);
    CHECK(strcmp(amp_scope_current(), "loss") == 0);
    amp_tensor *loss = amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(-1, 11)), amp_reshape(y, AMP_SHAPE(-1)));
    CHECK(amp_scope_end() == AMP_OK);
    CHECK(strcmp(amp_scope_current(), "") == 0);
    if (lower)
        amp_autocast_end();
    CHECK(loss != NULL);
    CHECK(amp_backward(loss) == AMP_OK);
    amp_temps_free();
    amp_tensor_free(idx);
    amp_tensor_free(y);
}

static seen_list *observe(amp_module *m, bool lower)
{
    seen_list *s = calloc(1, sizeof *s);
    autograd_set_observer(record, s);
    step(m, lower);
    autograd_set_observer(NULL, NULL);
    return s;
}

static void test_gpt_ops_carry_their_module_paths(void)
{
    amp_manual_seed(1);
    amp_module *m = amp_model_gpt(small_gpt());
    seen_list *s = observe(m, true);
    const struct {
        const char *scope, *op;
    } want[] = {
        {"wte", "embedding"},          {"wpe", "embedding"},      {"", "add"},
        {"h.0.ln_1", "layer_norm"},    {"h.0.attn.qkv", "linear"}, {"h.0.attn", "reshape"},
        {"h.0.attn", "scaled_dot_product_attention"},     {"h.0.attn.proj", "linear"}, {"h.0", "add"},
        {"h.0.ln_2", "layer_norm"},    {"h.0.mlp.fc1", "linear"},  {"h.0.mlp.fc2", "linear"},
        {"h.1.ln_1", "layer_norm"},    {"h.1.attn.qkv", "linear"}, {"ln_f", "layer_norm"},
        {"lm_head", "linear"},         {"loss", "cross_entropy"},  {"h.0.attn.qkv", "to"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_MSG(find(s, false, want[i].scope, want[i].op) >= 0, "no forward %s in %s", want[i].op,
                  want[i].scope);
        if (strcmp(want[i].scope, "wpe") != 0 && strcmp(want[i].op, "to") != 0)
            CHECK_MSG(find(s, true, want[i].scope, want[i].op) >= 0, "no backward %s in %s", want[i].op,
                      want[i].scope);
    }
    for (int i = 0; i < s->n; i++)
        CHECK_MSG(strcmp(s->e[i].scope, "(null)") != 0, "event %d (%s) has no scope", i, s->e[i].op);
    /* the attention reads q, k and v in place from qkv: no split copies */
    CHECK_MSG(find(s, false, "h.0.attn", "narrow") < 0 && find(s, true, "h.0.attn", "narrow") < 0,
              "the gpt's attention split qkv with narrow");
    free(s);
    amp_module_free(m);
}

static void test_a_checkpointed_block_recomputes_in_its_scopes(void)
{
    amp_manual_seed(1);
    amp_gpt_config c = small_gpt();
    c.checkpoint_activations = true;
    amp_module *m = amp_model_gpt(c);
    seen_list *s = observe(m, true);
    int recomputed_qkv = 0;
    for (int i = 0; i < s->n; i++)
        if (s->e[i].recompute && strcmp(s->e[i].op, "linear") == 0 && strcmp(s->e[i].scope, "h.1.attn.qkv") == 0)
            recomputed_qkv++;
    CHECK_EQ_INT(recomputed_qkv, 1);
    CHECK(find(s, true, "h.1.attn.qkv", "linear") >= 0);
    CHECK(find(s, true, "h.0.mlp.fc1", "linear") >= 0);
    free(s);
    amp_module_free(m);
}

static void test_sequential_children_are_named_by_index(void)
{
    const int64_t hidden[1] = {8};
    amp_manual_seed(2);
    amp_module *m = amp_model_mlp(6, hidden, 1, 3);
    seen_list *s = calloc(1, sizeof *s);
    autograd_set_observer(record, s);
    amp_tensor *x = amp_randn(AMP_SHAPE(4, 6), AMP_F32, 0, 1);
    amp_tensor *y = amp_module_forward(m, x);
    autograd_set_observer(NULL, NULL);
    CHECK(y != NULL);
    /* The mlp's layers by index (linear, relu, linear): the first linear runs
     * fused with its relu, in its own scope all the same. */
    bool lin0 = false, lin_last = false;
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->e[i].op, "linear") == 0 && strcmp(s->e[i].scope, "0") == 0)
            lin0 = true;
        if (strcmp(s->e[i].op, "linear") == 0 && strcmp(s->e[i].scope, "2") == 0)
            lin_last = true;
    }
    CHECK(lin0 && lin_last);
    amp_temps_free();
    amp_tensor_free(x);
    free(s);
    amp_module_free(m);
}

/* The logits of m on the fixed tokens, under bf16 autocast or not. */
static amp_tensor *logits_of(amp_module *m, bool lower)
{
    amp_tensor *idx = tokens();
    amp_no_grad_begin();
    if (lower)
        amp_autocast_begin(AMP_CPU, AMP_BF16);
    amp_tensor *y = amp_module_forward(m, idx);
    if (lower)
        amp_autocast_end();
    amp_no_grad_end();
    amp_tensor *out = amp_clone(y);
    amp_temps_free();
    amp_tensor_free(idx);
    return out;
}

static void test_fp32_modules_run_their_lowered_ops_in_f32(void)
{
    amp_manual_seed(3);
    amp_module *m = amp_model_gpt(small_gpt());
    const char *paths[2] = {"h.0.attn", "lm_head"};
    CHECK(amp_autocast_set_fp32_modules(paths, 2) == AMP_OK);
    seen_list *s = observe(m, true);
    CHECK_EQ_INT(amp_autocast_fp32_module_hits(0) > 0, 1);
    CHECK_EQ_INT(amp_autocast_fp32_module_hits(1) > 0, 1);
    CHECK_EQ_INT(amp_autocast_fp32_module_hits(2), -1);
    int i;
    CHECK((i = find(s, false, "h.0.attn.qkv", "linear")) >= 0 && s->e[i].dtype == AMP_F32);
    CHECK((i = find(s, false, "h.0.attn", "scaled_dot_product_attention")) >= 0 && s->e[i].dtype == AMP_F32);
    CHECK((i = find(s, false, "h.0.attn.proj", "linear")) >= 0 && s->e[i].dtype == AMP_F32);
    CHECK((i = find(s, false, "lm_head", "linear")) >= 0 && s->e[i].dtype == AMP_F32);
    CHECK((i = find(s, false, "h.0.mlp.fc1", "linear")) >= 0 && s->e[i].dtype == AMP_BF16);
    CHECK((i = find(s, false, "h.1.attn.qkv", "linear")) >= 0 && s->e[i].dtype == AMP_BF16);
    free(s);

    /* Everything in f32: the fp32 model's logits, bit for bit. */
    amp_tensor *ref = logits_of(m, false);
    const char *root_parts[4] = {"wte", "wpe", "h", "lm_head"};
    CHECK(amp_autocast_set_fp32_modules(root_parts, 4) == AMP_OK);
    amp_tensor *kept = logits_of(m, true);
    CHECK(kept && amp_tensor_dtype(kept) == AMP_F32);
    CHECK_EQ_INT(max_abs_diff(ref, kept) == 0.0, 1);
    CHECK(amp_autocast_set_fp32_modules(NULL, 0) == AMP_OK);
    amp_tensor *lowered = logits_of(m, true);
    CHECK(lowered && max_abs_diff(ref, lowered) > 0.0);
    amp_tensor_free(ref);
    amp_tensor_free(kept);
    amp_tensor_free(lowered);
    amp_module_free(m);
}

static void test_fp32_module_paths_are_checked(void)
{
    const char *bad[4] = {"", ".h", "h.", "h..0"};
    for (int i = 0; i < 4; i++)
        CHECK(amp_autocast_set_fp32_modules(&bad[i], 1) == AMP_ERR_ARG);
    CHECK(amp_autocast_set_fp32_modules(NULL, 1) == AMP_ERR_ARG);
    CHECK(amp_autocast_set_fp32_modules(NULL, -1) == AMP_ERR_ARG);
    CHECK(amp_scope_end() == AMP_ERR_STATE);
    CHECK(amp_scope_begin(NULL) == AMP_ERR_ARG);
}

int main(void)
{
    RUN(test_gpt_ops_carry_their_module_paths);
    RUN(test_a_checkpointed_block_recomputes_in_its_scopes);
    RUN(test_sequential_children_are_named_by_index);
    RUN(test_fp32_modules_run_their_lowered_ops_in_f32);
    RUN(test_fp32_module_paths_are_checked);
    return harness_done();
}
