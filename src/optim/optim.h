/*
 * optim.h - the optimizer object behind amp_optim (internal), and the
 * registry of optimizer kinds.
 *
 * An optimizer kind is a step function plus named state, not a case in a
 * switch: one optim_def per kind (its name, its state names in slot order,
 * which slots its options use, its step over the backend, its options as
 * checkpoint metadata) and one registration line in optim.c. Adding one:
 * a file with its def, its step function and its public constructor, and
 * that line.
 *
 * An optimizer holds a reference to each parameter and, per parameter,
 * up to three state buffers shaped like it (f32, or bf16 after
 * amp_optim_set_state_dtype; PyTorch's state keys):
 *   SGD:   "momentum_buffer" (only when momentum != 0)
 *   Adam:  "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (only with amsgrad)
 * and the number of steps that parameter has taken (PyTorch's
 * state["step"]: a parameter without a gradient does not count a step,
 * which matters for Adam's bias correction). Buffers are created on a
 * parameter's first step, on the parameters' device.
 *
 * With master weights on (amp_optim_set_master_weights, Apex O2), each
 * 16-bit parameter also has an f32 master copy: the update runs on the
 * master and the parameter receives it rounded. The master follows its
 * parameter's storage version: a write to the parameter from outside the
 * optimizer (a load, amp_tensor_copy_in, amp_tensor_data, a move to
 * another device) re-seeds the master from the 16-bit value before the
 * next use (optim_sync_master).
 *
 * Shards (ZeRO stage 1, src/dist/zero.c): optim_set_shard restricts
 * parameter i's update to its elements [lo, hi). Its state buffers (and
 * its f32 master) then hold those hi - lo elements only (1-D; none at all
 * when the range is empty), and the step hands the backend p, g (and a
 * master) offset to lo with n = hi - lo. The update is elementwise, so
 * each element gets the bits the unsharded step would give it; a parameter
 * with an empty range still counts its step (an entry of n = 0), so the
 * step counts and Adam's bias corrections stay per parameter and equal on
 * every rank. (bf16 state and bf16 weights with stochastic rounding draw
 * their bits from the element's index in the buffer, so those cases are
 * not bitwise.) A
 * sharded parameter's state is not the parameter-shaped state the public
 * accessors and checkpoints mean: amp_optim_state_tensor refuses it, and
 * the dist layer gathers it back (optim_unshard) first.
 *
 * Defines: optim_def, struct amp_optim (the state accessors are public, in
 * ampc.h), optim_new, optim_find, optim_step_guarded, the shard calls.
 */
#ifndef AMPC_OPTIM_H
#define AMPC_OPTIM_H

#include "ampc.h"
#include "backend/backend.h"

#define OPTIM_MAX_STATE 3

/* Receives one option as checkpoint metadata: key ("momentum") and its
 * text ("0.90000000000000002", "true"). */
typedef void (*optim_put_fn)(void *ctx, const char *key, const char *value);

/* put(ctx, key, v) with v written exactly (%.17g), for describe. */
void optim_put_number(optim_put_fn put, void *ctx, const char *key, double v);

typedef struct optim_def {
    const char *name; /* "sgd", "adam", "adamw": in messages and checkpoints */
    /* Slot k's state key (PyTorch's), NULL for unused slots. */
    const char *state_names[OPTIM_MAX_STATE];
    /* Whether o's options use slot k (SGD's buffer only with momentum,
     * Adam's maximum only with amsgrad). */
    bool (*has_state)(const amp_optim *o, int k);
    /* One multi-tensor step of the n parameters ps (in be's memory) with
     * the counters steps (n_counters + 1 of them, backend.h's sgd_step
     * contract), skipped when *found_inf is non-zero. */
    amp_status (*step)(const amp_optim *o, const amp_backend *be, const be_optim_param *ps, int n, int64_t *steps,
                       int n_counters, const float *found_inf);
    /* The options, each as put(ctx, key, text), in a fixed order. */
    void (*describe)(const amp_optim *o, optim_put_fn put, void *ctx);
} optim_def;

struct amp_optim {
    const optim_def *def;
    const char *name;      /* def->name */
    int n;
    amp_tensor **params;   /* references */
    amp_tensor **state;    /* n * OPTIM_MAX_STATE, NULL until a parameter's first step */
    int64_t *param_steps;  /* per parameter (host), until the first step */
    int64_t steps;         /* amp_optim_step calls that succeeded (host), until the first step */
    double lr;
    union {
        amp_sgd_opts sgd;
        amp_adam_opts adam;
    } opts;
    /* n + 1 int64 step counters (each parameter's, then the optimizer's)
     * in the memory of counters_dev's backend, authoritative once made at
     * the first step, so a step skipped on the device (found_inf) needs no
     * host synchronisation; the getters copy them to the host. */
    int64_t *counters;
    amp_device counters_dev;
    be_optim_param *ps; /* n: the step's list for the backend, made once */
    /* amp_optim_set_master_weights / amp_optim_set_state_dtype. */
    bool masters;
    amp_tensor **master;      /* n: each 16-bit parameter's f32 master (masters on), else NULL */
    uint64_t *master_version; /* n: the parameter's storage version its master was last in step with */
    amp_dtype state_dt;       /* the state buffers' dtype: AMP_F32 (default) or AMP_BF16 */
    bool state_sr;            /* bf16 state stored with stochastic rounding */
    bool weight_sr;           /* bf16 parameters without a master stored so too */
    /* n: the elements [shard_lo[i], shard_hi[i]) of parameter i its step
     * updates (optim_set_shard); [0, numel) unless sharded. */
    int64_t *shard_lo, *shard_hi;
    /* n: each parameter's weight decay (its parameter group's,
     * amp_optim_set_weight_decay); the options' weight_decay until set. */
    double *weight_decay;
};

/* Brings parameter i's master in step with it when master weights are on
 * and it is 16-bit: made (f32, on the parameter's device) when missing or
 * on another device, re-seeded from the parameter when the parameter was
 * written from outside the optimizer since. Otherwise drops a master it
 * has (a parameter made f32 since). (o is const as the checkpoint writer
 * holds it; only what it points to changes.) */
/* Whether parameter i has (or gets at its next step) an f32 master: master
 * weights on and the parameter in 16 bits. */
bool optim_wants_master(const amp_optim *o, int i);
amp_status optim_sync_master(const amp_optim *o, int i);

/* Parameter i's master after optim_sync_master, or NULL when it has none. */
amp_tensor *optim_master(const amp_optim *o, int i);

/* A new optimizer of kind def over params[0..n) with lr and every
 * parameter's weight decay wd (the other options are set by the caller):
 * checks the parameters; NULL + error. */
amp_optim *optim_new(const optim_def *def, amp_tensor *const *params, int n, double lr, double wd);

/* The registered kind called name, or NULL. */
const optim_def *optim_find(const char *name);

/* One step of o. found_inf (may be NULL) points into the parameters'
 * backend memory (a host float on the CPU, a device float on CUDA); when
 * it is non-zero the step changes nothing, counters included, decided on
 * the device without a host synchronisation (the grad scaler's step). */
amp_status optim_step_guarded(amp_optim *o, const float *found_inf);

/* Restricts parameter i's update to its elements [lo, hi) (0 <= lo <= hi
 * <= numel; [0, numel) is the whole parameter again). State buffers and a
 * master the parameter has are cut down to the range when it was whole;
 * from one range to another only while it has neither (AMP_ERR_STATE:
 * the state must be gathered, optim_unshard, first). On error nothing
 * changed. */
amp_status optim_set_shard(amp_optim *o, int i, int64_t lo, int64_t hi);
/* Whether parameter i's update covers less than the whole parameter. */
bool optim_is_sharded(const amp_optim *o, int i);
/* The first sharded parameter, -1 when none is. */
int optim_first_sharded(const amp_optim *o);
/* Makes parameter i whole again with state[k] (parameter-shaped, in the
 * state dtype on its device, or NULL for none) and master (f32,
 * parameter-shaped, or NULL), taking ownership of them; the master is taken
 * as in step with the parameter as it is now. */
void optim_unshard(amp_optim *o, int i, amp_tensor *const state[OPTIM_MAX_STATE], amp_tensor *master);
/* Takes parameter i's master as in step with the parameter as it is now
 * (after a write that gave the parameter its master's rounding anyway:
 * ZeRO's all-gather of the updated shards). */
void optim_master_current(amp_optim *o, int i);

/* The torch.optim constructors' check that v is finite and >= 0. */
amp_status optim_check_nonneg(const char *opt, const char *what, double v);

/* The optimizers, registered in optim.c. */
extern const optim_def optim_def_sgd, optim_def_adam, optim_def_adamw;

/* clip_grad_norm_ over the buffers bufs[0..k) on dev (clip.c): the
 * backend's grad_sumsq, then, over ranks > 1 (ZeRO-1: each rank holds a
 * shard), the ranks' sums all-gathered in dev's memory (NCCL on CUDA: no
 * host wait; a local failure before it is agreed on first, so it is every
 * rank's error and nobody waits), then clip_by_sumsq with the ranks' parts, added in the same order on
 * every rank. The total goes to *host (a wait on a GPU) or into *out, a new
 * 0-d f32 tensor on dev. fn names the caller in messages. */
amp_status optim_clip_bufs(amp_device dev, const be_buf *bufs, int k, int ranks, double max_norm, const char *fn,
                           double *host, amp_tensor **out);

#endif
