/*
 * build.c - what a run trains with, from its settings: the model (the
 * library's ready-made mlp / cnn / gpt), the optimizer, the precision
 * (autocast dtype and grad scaler) and the learning-rate schedule.
 *
 * The generator is seeded first, so the same settings build the same
 * initial weights. With --device cuda the model moves to the GPU right
 * after it is built (the same initial weights as on the CPU), before the
 * optimizer is made, so the optimizer's state lives there too.
 *
 * The memory levers: --param-dtype stores the weights in 16 bits
 * (amp_module_to_dtype, after the move: the same initial weights,
 * rounded) and gives the optimizer f32 masters; --optim-state sets the
 * optimizer's state dtype (bf16-sr: bf16 with stochastic rounding).
 */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static amp_module *build_model(const train_opts *o, const run_info *ri)
{
    if (strcmp(o->model, "mlp") == 0)
        return amp_model_mlp(ri->features, o->hidden, o->n_hidden, ri->classes);
    if (strcmp(o->model, "cnn") == 0)
        return amp_model_cnn(ri->channels, ri->height, ri->width, ri->classes);
    amp_gpt_config c = {.vocab = ri->vocab,
                        .context = o->context,
                        .width = o->width,
                        .layers = o->layers,
                        .heads = o->heads,
                        .mlp = o->mlp_width,
                        .dropout = o->dropout,
                        .checkpoint_activations = o->checkpoint_activations,
                        .no_bias = o->no_bias,
                        .gelu_exact = strcmp(o->gelu, "exact") == 0};
    return amp_model_gpt(c);
}

static amp_optim *build_optim(const train_opts *o, trainer *t)
{
    if (strcmp(o->optim, "sgd") == 0) {
        amp_sgd_opts s = amp_sgd_defaults();
        s.lr = o->lr;
        s.momentum = o->momentum;
        s.weight_decay = o->weight_decay;
        return amp_optim_sgd(t->params, t->n_params, s);
    }
    bool w = strcmp(o->optim, "adamw") == 0;
    amp_adam_opts a = w ? amp_adamw_defaults() : amp_adam_defaults();
    a.lr = o->lr;
    a.beta1 = o->beta1;
    a.beta2 = o->beta2;
    a.eps = o->eps;
    a.weight_decay = o->weight_decay;
    return w ? amp_optim_adamw(t->params, t->n_params, a) : amp_optim_adam(t->params, t->n_params, a);
}

/* GPT-2's and nanoGPT's parameter groups (configure_optimizers): weight
 * decay on the parameters of 2 or more dimensions (matrices, embeddings,
 * convolution kernels), none on biases and norm weights; --decay-all
 * decays them all. */
static bool group_weight_decay(const train_opts *o, trainer *t)
{
    for (int i = 0; i < t->n_params && !o->decay_all; i++)
        if (amp_tensor_ndim(t->params[i]) < 2 && amp_optim_set_weight_decay(t->opt, i, 0) != AMP_OK)
            return false;
    return true;
}

static amp_sched build_sched(const train_opts *o, int64_t total_steps)
{
    amp_sched s = {.base_lr = o->lr, .warmup_steps = o->warmup, .warmup_start_factor = o->warmup_start_factor};
    if (strcmp(o->schedule, "step") == 0) {
        s.kind = AMP_SCHED_STEP;
        s.step_size = o->step_size;
        s.gamma = o->gamma;
    } else if (strcmp(o->schedule, "cosine") == 0) {
        s.kind = AMP_SCHED_COSINE;
        s.total_steps = total_steps - o->warmup > 1 ? total_steps - o->warmup : 1;
        s.min_lr = o->min_lr;
    } else {
        s.kind = AMP_SCHED_CONSTANT;
    }
    return s;
}

/* "fp32" / "bf16" ("bf16-sr") / "fp16" (train's table checked the name). */
static amp_dtype dtype_named(const char *s)
{
    return strncmp(s, "bf16", 4) == 0 ? AMP_BF16 : strcmp(s, "fp16") == 0 ? AMP_F16 : AMP_F32;
}

/* --param-dtype: the model's weights to 16 bits (before the optimizer is
 * made over them). */
static bool levers_model(const train_opts *o, trainer *t)
{
    amp_dtype pd = dtype_named(o->param_dtype);
    return pd == AMP_F32 || amp_module_to_dtype(t->model, pd) == AMP_OK;
}

/* --param-dtype: f32 masters in the optimizer (unless --master-weights
 * off), --weight-update sr; --optim-state: its state's dtype. */
static bool levers_optim(const train_opts *o, trainer *t)
{
    const bool masters = dtype_named(o->param_dtype) != AMP_F32 && strcmp(o->master_weights, "on") == 0;
    if (amp_optim_set_master_weights(t->opt, masters) != AMP_OK ||
        amp_optim_set_weight_stochastic_rounding(t->opt, strcmp(o->weight_update, "sr") == 0) != AMP_OK)
        return false;
    return amp_optim_set_state_dtype(t->opt, dtype_named(o->optim_state)) == AMP_OK &&
           amp_optim_set_state_stochastic_rounding(t->opt, strcmp(o->optim_state, "bf16-sr") == 0) == AMP_OK;
}

bool trainer_build(trainer *t, const train_opts *o, const run_info *ri, int64_t total_steps)
{
    memset(t, 0, sizeof *t);
    amp_manual_seed(o->seed);
    const char *what = "model";
    bool cuda = strcmp(o->device, "cuda") == 0;
    t->model = build_model(o, ri);
    if (t->model && cuda && amp_module_to(t->model, AMP_CUDA) != AMP_OK) {
        what = "model to cuda";
        amp_module_free(t->model);
        t->model = NULL;
    }
    if (t->model) {
        t->n_params = amp_module_num_params(t->model);
        t->params = malloc(sizeof *t->params * (size_t)(t->n_params ? t->n_params : 1));
        if (!t->params) {
            fprintf(stderr, "ampc: out of memory\n");
            trainer_free(t);
            return false;
        }
        amp_module_params(t->model, t->params, t->n_params);
        for (int i = 0; i < t->n_params; i++)
            t->n_weights += amp_tensor_numel(t->params[i]);
        what = "optimizer";
        if (!levers_model(o, t))
            what = "--param-dtype";
        else
            t->opt = build_optim(o, t);
        if (t->opt && (!group_weight_decay(o, t) || !levers_optim(o, t))) {
            amp_optim_free(t->opt);
            t->opt = NULL;
        }
    }
    t->autocast = strcmp(o->precision, "fp32") != 0;
    t->dtype = strcmp(o->precision, "fp16") == 0 ? AMP_F16 : AMP_BF16;
    if (t->opt) {
        what = "grad scaler";
        t->scaler = amp_scaler_new(scaler_opts_of(o)); /* enabled for fp16 autocast without --no-scaler */
    }
    t->sched = build_sched(o, total_steps);
    if (t->scaler && isnan(amp_sched_lr(&t->sched, 0))) {
        what = "lr schedule";
        amp_scaler_free(t->scaler);
        t->scaler = NULL;
    }
    if (!t->scaler) {
        fprintf(stderr, "ampc: %s: %s\n", what, amp_last_error());
        trainer_free(t);
        return false;
    }
    return true;
}

void trainer_free(trainer *t)
{
    amp_scaler_free(t->scaler);
    amp_optim_free(t->opt);
    amp_module_free(t->model);
    free(t->params);
    memset(t, 0, sizeof *t);
}

const char *model_describe(const train_opts *o, const run_info *ri, char *buf, size_t n)
{
    if (strcmp(o->model, "mlp") == 0) {
        int k = snprintf(buf, n, "mlp %lld", (long long)ri->features);
        for (int i = 0; i < o->n_hidden && k > 0 && (size_t)k < n; i++)
            k += snprintf(buf + k, n - (size_t)k, "-%lld", (long long)o->hidden[i]);
        if (k > 0 && (size_t)k < n)
            snprintf(buf + k, n - (size_t)k, "-%lld", (long long)ri->classes);
    } else if (strcmp(o->model, "cnn") == 0) {
        snprintf(buf, n, "cnn %lldx%lldx%lld -> conv32 -> conv64 -> 128 -> %lld", (long long)ri->channels,
                 (long long)ri->height, (long long)ri->width, (long long)ri->classes);
    } else {
        snprintf(buf, n, "gpt %lld layers, %lld heads, width %lld, mlp %lld, context %lld, vocab %lld%s%s",
                 (long long)o->layers, (long long)o->heads, (long long)o->width, (long long)o->mlp_width,
                 (long long)o->context, (long long)ri->vocab, o->dropout > 0 ? ", dropout" : "",
                 o->checkpoint_activations ? ", checkpointed activations" : "");
    }
    return buf;
}
