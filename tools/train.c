/*
 * train.c - the train command: builds the run from its options (or from a
 * checkpoint's settings, --resume), trains with the library's API exactly
 * as a user would, checkpoints, logs, and measures the result.
 *
 * One optimizer step, as PyTorch's AMP loop with gradient accumulation:
 *   zero_grad
 *   for each of --accum micro-batches:
 *       forward + cross-entropy inside autocast (bf16 / fp16), loss / accum,
 *       backward of the scaled loss
 *   unscale; measure the global grad norm (clip it with --clip)
 *   lr = schedule(steps taken so far); scaler step (skips on inf/NaN); update
 * The schedule counts only steps taken: a skipped step leaves the lr where
 * it was (PyTorch's schedulers would advance). Micro-batch m of the run
 * (m = step * accum + j) is a function of (seed, m), and the checkpoint
 * holds the weights, optimizer and scaler state, the generator state and
 * the schedule's place, so a resumed run's losses equal the uninterrupted
 * run's bit for bit.
 *
 * Under mpirun (dist_cli.c, docs/distributed.md) each process is one rank:
 * it trains on its shard of the data (data.c), its parameters wrapped in
 * an amp_ddp (no_sync for every micro-batch but the last; amp_ddp_finish
 * before unscale) or, --zero 1, an amp_zero (reduce_gradients, the global
 * clip, gather_parameters after the step, the state gathered around each
 * save); the loss shown is the mean over the ranks. Rank 0 alone writes
 * the log and the checkpoints. The setup stages end with dist_agree, so an
 * error there ends every rank with the same exit code; an error later, on
 * one rank, ends the job (dist_abort).
 *
 * --device cuda: the model is on the GPU (build.c), each micro-batch is
 * copied there into buffers made once, autocast runs on AMP_CUDA, and the
 * host waits for the GPU only where it reads a value: the losses, summed
 * on the device, are read at the progress lines (and every step with
 * --log or --tensorboard, whose records need each step's loss and
 * scale), which is also where a non-finite loss is noticed. With the
 * grad scaler (fp16, cuda's default) each step also reads whether the
 * scaler skipped it: the lr schedule counts only steps taken, so the
 * next step's lr depends on it.
 * The grad norm is measured (and clipped, --clip) on the device by
 * amp_clip_grad_norm_tensor (amp_zero_clip_grad_norm_tensor with --zero
 * 1, its all-gather through NCCL), which leaves it there in a 0-d tensor: with
 * --clip and no --log nothing reads it, so clipping adds no wait; only
 * --log's records show it, and they read it beside the step's loss, after
 * the step is queued. Without --clip or --log it is not measured on cuda.
 */
#include "cli.h"
#include "anomaly_cli.h"
#include "checkpoint_cli.h"
#include "data.h"
#include "diagnose.h"
#include "dist_cli.h"
#include "eval.h"
#include "init_from.h"
#include "log.h"
#include "memcheck.h"
#include "preflight.h"
#include "profile_train.h"
#include "progress.h"
#include "run_policy.h"
#include "scale_calib.h"
#include "stall.h"
#include "settings.h"
#include "tensorboard.h"
#include "train.h"
#include "trainer.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rank r > 0 of a data-parallel run draws its windows from stream
 * TEXT_STREAM + r * RANK_STREAM: a stream of its own (rank 0's is the
 * plain run's). */
#define RANK_STREAM 0x100000000ull

typedef struct {
    const train_opts *o;
    run_data *rd;
    trainer *t;
    run_info *ri;
    int64_t nb; /* micro-batches per epoch */
    bool cuda;  /* --device cuda */
    bool read_each;             /* cuda: read every step's loss (and scale, grad norm), for --log */
    amp_tensor *dev_x, *dev_y;  /* cuda: the micro-batch on the device, refilled in place */
    amp_tensor *loss_acc;       /* cuda: the losses of the steps not read yet, summed on the device */
    amp_tensor *norm_dev;       /* cuda, --log: this step's grad norm (0-d f32, on the device), not read yet */
    int64_t loss_steps;         /* steps loss_acc holds */
    int64_t loss_skipped;       /* of those, steps the scaler skipped */
    int world;                  /* ranks (1: a plain run) */
    amp_ddp *ddp;               /* data-parallel (mpirun), unless --zero 1 */
    amp_zero *zero;             /* --zero 1 */
    amp_tensor *loss_red;       /* data-parallel on the CPU: [1] f32, the step's loss averaged over the ranks */
    tb_writer *tb;              /* --tensorboard, rank 0 */
    int64_t last_step;          /* the step the run ended at: the closing evaluation's, for --tensorboard */
    stall_probe stall;          /* --health-every's step: the weights before the update (stall.h) */
    bool stall_16bit;           /* 16-bit parameters: --health-every measures the stalled updates */
} run;

typedef struct {
    double loss, lr, scale, grad_norm;
    bool skipped;
    bool health;          /* --health-every's step: the two below are set */
    double health_scale;  /* the scale the step used (1 without the scaler) */
    amp_f16_health h_unscaled, h_scaled;
    stall_result stall;   /* the health step's stalled updates (16-bit parameters) */
} step_out;

static int fail(const char *what, int64_t step)
{
    fprintf(stderr, "ampc: %s at step %lld: %s\n", what, (long long)step, amp_last_error());
    return 1;
}

/* --health-every's stalled-update read failed (an allocation or a copy). */
static int stall_fail(int64_t step)
{
    fprintf(stderr, "ampc: --health-every at step %lld: reading the 16-bit weights for the stalled updates: %s\n",
            (long long)step, amp_last_error()[0] ? amp_last_error() : "out of memory");
    return 1;
}

/* The device copy of host tensor h in *slot: made at the first call, then
 * refilled in place (a host-to-device copy, which does not wait for the
 * GPU). */
static amp_tensor *upload(const amp_tensor *h, amp_tensor **slot)
{
    if (*slot)
        return amp_tensor_copy_in(*slot, amp_tensor_cdata(h), amp_tensor_dtype(h)) == AMP_OK ? *slot : NULL;
    return *slot = amp_to_device(h, AMP_CUDA);
}

/* A micro-batch's rows: --batch, or fewer when the training set (a rank's
 * shard of it) holds fewer (data.c's batcher cuts it to them). */
static int64_t run_batch(const run *r) { return r->rd->gpt ? r->o->batch : r->rd->tb.size; }

/* Micro-batch m's inputs and labels (views of the reused buffers, or
 * their device copies on cuda). */
static bool micro_batch(run *r, int64_t m, amp_tensor **x, amp_tensor **y)
{
    if (r->rd->gpt) {
        text_data *td = &r->rd->text;
        uint64_t stream = TEXT_STREAM + (uint64_t)amp_dist_rank() * RANK_STREAM;
        if (!text_batch(td, false, derive_seed(r->o->seed, stream, (uint64_t)m), amp_dist_rank(),
                        amp_dist_world_size()))
            return false;
        *x = td->x;
        *y = td->y;
    } else if (!batcher_train(&r->rd->tb, &r->rd->train, m, x, y)) {
        return false;
    }
    if (r->cuda && (!(*x = upload(*x, &r->dev_x)) || !(*y = upload(*y, &r->dev_y))))
        return false;
    return true;
}

static bool batch_cb(void *r, int64_t m, amp_tensor **x, amp_tensor **y) { return micro_batch(r, m, x, y); }

/* --max-skips: a run whose every step the scaler skips trains nothing
 * while its scale decays to 0, so it stops, saying what is not finite
 * (diagnose.c). -1 to go on, or 1. */
static int watch_skips(run *r, int64_t step, bool skipped)
{
    if (!skipped || r->o->max_skips <= 0)
        return -1;
    /* The scaler's own count (a checkpoint keeps it: a resumed run
     * continues the streak it stopped in). */
    const int64_t streak = amp_scaler_get_counts(r->t->scaler).skipped_in_a_row;
    if (streak < r->o->max_skips)
        return -1;
    fprintf(stderr,
            "ampc: the grad scaler skipped %lld steps in a row (steps %lld to %lld, --max-skips %lld): each had "
            "inf/NaN gradients, the scale is down to %g; re-running step %lld:\n",
            (long long)streak, (long long)(step + 2 - streak), (long long)step + 1,
            (long long)r->o->max_skips, amp_scaler_get_scale(r->t->scaler), (long long)step + 1);
    if (r->ddp) /* the re-run's backward stays local */
        amp_ddp_set_sync(r->ddp, false);
    diagnose_step(r->t, r->o, r->ri, r->rd->gpt, step, batch_cb, r);
    return 1;
}

/* A backoff that took the scale to 0 or a subnormal (an f32 below
 * FLT_MIN: a --backoff-factor far below 1, or many overflows in a row
 * with --max-skips 0): the next step's scaled gradients would be 0, and
 * at scale 0 the unscale's 1/scale is infinite, so that step is taken
 * (0 is finite) with a NaN update, untold (the library does as PyTorch). The CLI stops instead, naming the
 * scale. Read after a skipped step only: a backoff follows a skip. -1 to
 * go on, or 1. */
static int watch_scale(run *r, int64_t step, bool skipped)
{
    if (!skipped || !amp_scaler_is_enabled(r->t->scaler))
        return -1;
    const double s = amp_scaler_get_scale(r->t->scaler);
    if (s >= FLT_MIN)
        return -1;
    fprintf(stderr,
            "ampc: the grad scaler backed off to scale %g after step %lld (%s f32's smallest normal, %g): a "
            "scale that small zeroes the gradients, and at 0 the unscale's 1/scale is infinite and the update "
            "NaN; give a larger --backoff-factor (%g now) or a --min-scale floor\n",
            s, (long long)step + 1, s == 0 ? "0, below" : "subnormal, below", (double)FLT_MIN,
            r->o->backoff_factor);
    return 1;
}

/* A loss that is not finite, without a skip (no scaler): steps
 * step-n+1..step summed to loss. The inputs are checked before blaming
 * the lr. Returns 1. */
static int bad_loss(run *r, int64_t step, int64_t n, double loss)
{
    const train_opts *o = r->o;
    int64_t total = 0, bad = count_bad_inputs(o, step + 1 - n, step, batch_cb, r, &total);
    if (bad > 0) {
        fprintf(stderr, "ampc: the loss is %g at step %lld: the inputs hold %lld inf/NaN values (of %lld in %s %lld); "
                "fix --data %s (inputs must be finite)\n", loss / (double)n, (long long)step + 1, (long long)bad,
                (long long)total, n > 1 ? "the steps up to" : "step", (long long)step + 1, o->data);
        return 1;
    }
    fprintf(stderr, "ampc: the loss is %g at step %lld (the inputs are finite; try a smaller --lr%s)\n",
            loss / (double)n, (long long)step + 1,
            strcmp(o->precision, "fp16") == 0 && o->no_scaler ? ", or the grad scaler" : "");
    return 1;
}

/* cuda: adds a micro-batch's loss to the unread sum on the device (no
 * history, no synchronisation). */
static amp_status pend_loss(run *r, amp_tensor *loss)
{
    amp_no_grad_begin();
    amp_tensor *sum = r->loss_acc ? amp_add(r->loss_acc, loss) : amp_to(loss, AMP_F32);
    amp_tensor *keep = sum ? amp_clone(sum) : NULL;
    amp_no_grad_end();
    if (!keep)
        return amp_last_status();
    amp_tensor_free(r->loss_acc);
    r->loss_acc = keep;
    return AMP_OK;
}

/* cuda: the sum of the unread steps' losses (this waits for the GPU); *n
 * gets how many steps it covers, *skipped how many of them the scaler
 * skipped. NaN with the error set when the read failed. */
static double read_losses(run *r, int64_t *n, int64_t *skipped)
{
    amp_clear_error();
    /* Data-parallel: the mean over the ranks (every rank reads at the same
     * steps, so the all-reduces pair up: train_loop's read_each). */
    if (r->world > 1 && r->loss_acc && amp_dist_all_reduce(r->loss_acc, AMP_REDUCE_AVG) != AMP_OK)
        return NAN;
    double v = r->loss_acc ? amp_item(r->loss_acc) : 0.0;
    *n = r->loss_steps;
    *skipped = r->loss_skipped;
    amp_tensor_free(r->loss_acc);
    r->loss_acc = NULL;
    r->loss_steps = r->loss_skipped = 0;
    return v;
}

/* cuda: this step's grad norm, measured on the device (this waits for the
 * GPU); NaN when there is none, NaN with the error set when the read
 * failed. */
static double read_norm(run *r)
{
    amp_clear_error();
    double v = r->norm_dev ? amp_item(r->norm_dev) : NAN;
    amp_tensor_free(r->norm_dev);
    r->norm_dev = NULL;
    return v;
}

amp_tensor *micro_batch_loss(const trainer *t, const train_opts *o, const run_info *ri, bool gpt, amp_device dev,
                             amp_tensor *x, amp_tensor *y)
{
    if (t->autocast && amp_autocast_begin(dev, t->dtype) != AMP_OK)
        return NULL;
    amp_tensor *logits = amp_module_forward(t->model, x);
    /* The loss's ops are named "loss" (the anomaly check and the audit
     * report them there), outside every module as in PyTorch. */
    amp_scope_begin("loss");
    if (gpt) { /* [B, T, V] against [B, T]: one row per position */
        logits = amp_reshape(logits, AMP_SHAPE(-1, ri->vocab));
        y = amp_reshape(y, AMP_SHAPE(-1));
    }
    amp_tensor *loss = amp_cross_entropy(logits, y);
    if (t->autocast)
        amp_autocast_end();
    if (loss && o->accum > 1)
        loss = amp_div_scalar(loss, (double)o->accum);
    amp_scope_end();
    return loss;
}

/* Optimizer step `step` (0-based); fills out. -1 or an exit code. */
static int train_step(run *r, int64_t step, step_out *out)
{
    trainer *t = r->t;
    const train_opts *o = r->o;
    const bool scaled = amp_scaler_is_enabled(t->scaler);
    amp_optim_zero_grad(t->opt);
    out->loss = 0;
    for (int64_t j = 0; j < o->accum; j++) {
        amp_tensor *x, *y;
        /* DDP's no_sync: the buckets go out in the last micro-batch's
         * backward only. */
        if (r->ddp)
            amp_ddp_set_sync(r->ddp, j == o->accum - 1);
        /* The phases the profiler shows (the library marks backward and
         * what follows it); a few ns each when it is off. */
        amp_phase_begin(AMP_PHASE_DATA);
        bool have = micro_batch(r, step * o->accum + j, &x, &y);
        amp_phase_end(AMP_PHASE_DATA);
        if (!have)
            return fail("batch", step + 1);
        anomaly_cli_pass(step, j); /* --detect-anomaly: this micro-batch's reports */
        amp_phase_begin(AMP_PHASE_FORWARD);
        amp_tensor *loss = micro_batch_loss(t, o, r->ri, r->rd->gpt, r->cuda ? AMP_CUDA : AMP_CPU, x, y);
        amp_tensor *scaled_loss = loss ? amp_scaler_scale(t->scaler, loss) : NULL;
        /* cuda: the loss joins the unread sum here, in the forward phase
         * (ops, not a wait), so no op runs outside a phase. */
        amp_status pended = scaled_loss && r->cuda ? pend_loss(r, loss) : AMP_OK;
        amp_phase_end(AMP_PHASE_FORWARD);
        if (!scaled_loss || amp_backward(scaled_loss) != AMP_OK)
            return anomaly_cli_stopped() ? 1 : fail("forward / backward", step + 1);
        int shown = anomaly_cli_after_pass();
        if (shown >= 0)
            return shown;
        if (pended != AMP_OK)
            return fail("loss", step + 1);
        if (!r->cuda)
            out->loss += amp_item(loss);
        amp_temps_free(); /* the gradients live on in the parameters */
    }
    /* Data-parallel: every gradient the average over the ranks (DDP), or
     * this rank's shard of it (ZeRO-1), before unscale; the loss shown is
     * the mean over the ranks. */
    if (r->ddp && amp_ddp_finish(r->ddp) != AMP_OK)
        return fail("the gradient all-reduce", step + 1);
    if (r->zero && amp_zero_reduce_gradients(r->zero) != AMP_OK)
        return fail("the gradient reduce-scatter", step + 1);
    if (r->loss_red) {
        float l = (float)out->loss;
        if (amp_tensor_copy_in(r->loss_red, &l, AMP_F32) != AMP_OK ||
            amp_dist_all_reduce(r->loss_red, AMP_REDUCE_AVG) != AMP_OK)
            return fail("the loss all-reduce", step + 1);
        out->loss = ((const float *)amp_tensor_cdata(r->loss_red))[0];
    }
    out->scale = scaled && !r->cuda ? amp_scaler_get_scale(t->scaler) : NAN;
    if (amp_scaler_unscale(t->scaler, t->opt) != AMP_OK)
        return fail("unscale", step + 1);
    /* --health-every: the Quick Check on the unscaled gradients, after
     * unscale, before clipping and the step (on cuda the scale and the gradients are read: a wait, at
     * these steps only). Rank 0 shows it; DDP's gradients are the same
     * on every rank. */
    out->health = o->health_every > 0 && (step + 1) % o->health_every == 0 && amp_dist_rank() == 0;
    if (out->health) {
        out->health_scale = scaled ? (isnan(out->scale) ? amp_scaler_get_scale(t->scaler) : out->scale) : 1.0;
        if (amp_grad_f16_health(t->params, t->n_params, out->health_scale, &out->h_scaled, &out->h_unscaled) !=
            AMP_OK)
            return fail("--health-every", step + 1);
        tb_grads(r->tb, step + 1, t->model, t->params, t->n_params, out->health_scale);
        amp_clear_error();
        if (stall_begin(&r->stall, t, false) != AMP_OK)
            return stall_fail(step + 1);
    }
    out->grad_norm = NAN;
    const double max_norm = o->clip > 0 ? o->clip : INFINITY;
    /* ZeRO-1: each rank holds its shard of the gradients; the norm is the
     * global one (amp_zero_clip_grad_norm*). */
    if (!r->cuda) {
        amp_clear_error(); /* a NaN norm is a value (inf / NaN gradients), unless an error says otherwise */
        amp_phase_begin(AMP_PHASE_UNSCALE); /* the check's and clipping's phase */
        out->grad_norm = r->zero ? amp_zero_clip_grad_norm(r->zero, max_norm)
                                 : amp_clip_grad_norm(t->params, t->n_params, max_norm);
        amp_phase_end(AMP_PHASE_UNSCALE);
        if (isnan(out->grad_norm) && amp_last_status() != AMP_OK)
            return fail("clip_grad_norm", step + 1);
    } else if (o->clip > 0 || r->read_each) { /* left on the device: the log's record reads it */
        amp_phase_begin(AMP_PHASE_UNSCALE);
        amp_tensor *norm = r->zero ? amp_zero_clip_grad_norm_tensor(r->zero, max_norm)
                                   : amp_clip_grad_norm_tensor(t->params, t->n_params, max_norm);
        amp_phase_end(AMP_PHASE_UNSCALE);
        if (!norm)
            return fail("clip_grad_norm", step + 1);
        if (r->read_each) {
            amp_tensor_free(r->norm_dev);
            r->norm_dev = norm;
        } else { /* --clip without --log: nothing shows it */
            amp_tensor_free(norm);
        }
    }
    out->lr = amp_sched_lr(&t->sched, r->ri->sched_step);
    if (isnan(out->lr))
        return fail("lr schedule", step + 1);
    amp_optim_set_lr(t->opt, out->lr);
    /* On cuda asking whether the step was skipped waits for the GPU: only
     * with the scaler, the one source of skips. */
    out->skipped = false;
    if (amp_scaler_step(t->scaler, t->opt, !r->cuda || scaled ? &out->skipped : NULL) != AMP_OK)
        return fail("optimizer step", step + 1);
    if (r->cuda && scaled && r->read_each) /* the scale this step used, for the log */
        out->scale = amp_scaler_get_scale(t->scaler);
    if (out->health && stall_end(&r->stall, t, out->skipped, &out->stall, NULL) != AMP_OK)
        return stall_fail(step + 1);
    if (amp_scaler_update(t->scaler) != AMP_OK)
        return fail("optimizer step", step + 1);
    /* ZeRO-1: every rank takes every shard's new values (after a skipped
     * step too, so that the ranks stay in step; nothing changed then). */
    if (r->zero && amp_zero_gather_parameters(r->zero) != AMP_OK)
        return fail("the parameter all-gather", step + 1);
    if (out->skipped)
        r->ri->skipped++;
    else
        r->ri->sched_step++;
    amp_temps_free();
    return -1;
}

static int open_log(const train_opts *o, log_file **lf)
{
    *lf = NULL;
    if (!o->log)
        return -1;
    if (!(*lf = log_open(o->log, log_appends(o)))) {
        fprintf(stderr, "ampc: --log: %s\n", amp_last_error());
        return 1;
    }
    return -1;
}

/* Whether progress_step prints a line at step (its own rule), or, on a
 * terminal, updates the live line: where cuda reads the losses. */
static bool progress_due(const progress *p, int64_t step)
{
    return (step - p->first) % p->every == 0 || step == p->total || (p->live && now_s() - p->t_live > 0.2);
}

/* Saves the run at step into --save: rank 0 writes the file; with ZeRO-1
 * every rank takes part in gathering the optimizer state first and
 * sharding it again after. -1 or an exit code. */
static int save_run(run *r, int64_t step)
{
    if (r->zero && amp_zero_gather_state(r->zero) != AMP_OK)
        return fail("gathering the optimizer state", step);
    int rc = amp_dist_rank() == 0 ? checkpoint_save_run(r->o->save, r->t, r->o, r->ri, step) : -1;
    if (r->zero && amp_zero_shard_state(r->zero) != AMP_OK && rc < 0)
        rc = fail("sharding the optimizer state", step);
    return rc;
}

/* Steps first..stop-1 of total, with logs and checkpoints. -1 or an exit
 * code. */
static int train_loop(run *r, int64_t first, int64_t stop, int64_t total, log_file *lf)
{
    const train_opts *o = r->o;
    /* Samples or tokens per step over all ranks: < 2^20 * 2^16 * 2^16 per
     * rank; the throughput shown saturates past INT64_MAX. */
    int64_t per_step = run_batch(r) * o->accum * (r->rd->gpt ? o->context : 1);
    if (__builtin_mul_overflow(per_step, (int64_t)r->world, &per_step))
        per_step = INT64_MAX;
    profile_window pw; /* --profile */
    int rc = profile_window_init(&pw, o, first, stop);
    if (rc >= 0)
        return rc;
    progress pg;
    progress_begin(&pg, o, first, total, per_step, r->rd->gpt);
    /* The same on every rank (the reads all-reduce the loss under mpirun):
     * --log and --tensorboard are every rank's options though rank 0 alone
     * writes them, and progress_due is the step's alone there (no live
     * line under mpirun). */
    r->read_each = !r->cuda || r->o->log != NULL || r->o->tensorboard != NULL;
    for (int64_t step = first; step < stop; step++) {
        double t0 = now_s();
        step_out s;
        profile_step_begin(&pw, step);
        rc = train_step(r, step, &s);
        if (rc < 0)
            profile_step_end(&pw, step, &pg);
        if (rc >= 0) {
            profile_abort(&pw);
            progress_clear(&pg);
            /* --detect-anomaly stopped the step before its update: the
             * weights are step `step`'s, the last good one (one rank:
             * saving gathers over the ranks, which this one left). */
            if (anomaly_cli_halted() && o->save && step > first && r->world == 1 && save_run(r, step) < 0)
                fprintf(stderr, "ampc: saved the last good step, %lld, to %s\n", (long long)step, o->save);
            return rc;
        }
        /* s.loss sums the losses of n steps, skipped of which were skipped:
         * this one on the CPU; on cuda those since the last read, read
         * only where they are shown (or logged, or the run stops). */
        int64_t n = 1, skipped = s.skipped;
        bool report = !r->cuda;
        if (r->cuda) {
            r->loss_steps++;
            r->loss_skipped += s.skipped;
            if ((report = r->read_each || step + 1 == stop || progress_due(&pg, step + 1))) {
                s.loss = read_losses(r, &n, &skipped);
                if (isnan(s.loss) && amp_last_status() != AMP_OK) {
                    progress_clear(&pg);
                    return fail("reading the loss", step + 1);
                }
            }
            if (r->norm_dev) { /* --log: read beside the loss */
                s.grad_norm = read_norm(r);
                if (isnan(s.grad_norm) && amp_last_status() != AMP_OK) {
                    progress_clear(&pg);
                    return fail("reading the grad norm", step + 1);
                }
            }
        }
        if (report && !isfinite(s.loss) && skipped == 0) { /* a skipped step is the scaler doing its job */
            progress_clear(&pg);
            return bad_loss(r, step, n, s.loss);
        }
        if (s.skipped)
            anomaly_cli_skipped(step);
        if ((rc = watch_skips(r, step, s.skipped)) >= 0 || (rc = watch_scale(r, step, s.skipped)) >= 0) {
            progress_clear(&pg);
            return rc;
        }
        double ms = 1e3 * (now_s() - t0);
        r->last_step = step + 1;
        if (lf || r->tb) {
            log_record rec = {.step = step + 1,
                              .epoch = step * o->accum / r->nb + 1,
                              .loss = s.loss,
                              .lr = s.lr,
                              .scale = s.scale,
                              .skipped = s.skipped,
                              .grad_norm = s.grad_norm,
                              .step_ms = ms,
                              .world_size = r->world,
                              .health = s.health ? &s.h_unscaled : NULL,
                              .health_scaled = s.health && amp_scaler_is_enabled(r->t->scaler) ? &s.h_scaled : NULL,
                              .has_stall = s.health && r->stall_16bit,
                              .stalled = s.stall.fraction,
                              .stalled_worst = s.stall.worst,
                              .stalled_worst_fraction = s.stall.worst_fraction};
            double rate = (double)per_step / (ms / 1e3);
            *(r->rd->gpt ? &rec.tokens_per_s : &rec.samples_per_s) = rate;
            tb_step(r->tb, &rec, amp_scaler_is_enabled(r->t->scaler), r->ri->skipped);
            if (lf && log_step(lf, &rec) != AMP_OK) {
                progress_clear(&pg);
                fprintf(stderr, "ampc: --log: %s\n", amp_last_error());
                return 1;
            }
        }
        if (report && n > 1) {
            /* n steps in one call: progress_step counts one, the rest here */
            pg.loss_sum += s.loss - s.loss / (double)n;
            pg.loss_n += n - 1;
            pg.steps_window += n - 1;
        }
        if (s.health)
            progress_health(&pg, step + 1, s.health_scale, amp_scaler_is_enabled(r->t->scaler) ? &s.h_scaled : NULL,
                            &s.h_unscaled);
        if (s.health && r->stall_16bit)
            progress_stall(&pg, s.stall.fraction, s.stall.worst, s.stall.worst_fraction);
        if (report)
            progress_step(&pg, step + 1, s.loss / (double)n, r->t, r->ri->skipped);
        if (o->save && o->save_every > 0 && (step + 1) % o->save_every == 0 && step + 1 < stop) {
            progress_clear(&pg);
            if ((rc = save_run(r, step + 1)) >= 0)
                return rc;
        }
    }
    return -1;
}

static void print_config(const run *r, int64_t total)
{
    const train_opts *o = r->o;
    const run_data *rd = r->rd;
    char desc[256];
    if (rd->gpt && rd->text.tokens)
        printf("data %s: %lld tokens%s, val %s: %lld tokens, token ids of size %lld\n", o->data_bin,
               (long long)rd->text.train.n, rd->text.train.llmc ? " (llm.c shard)" : "", o->val_bin,
               (long long)rd->text.val.n, (long long)r->ri->vocab);
    else if (rd->gpt)
        printf("data %s: %lld characters, vocabulary %lld\n", o->data, (long long)amp_text_length(rd->text.text),
               (long long)r->ri->vocab);
    else
        printf("data %s: train %lld, test %lld, %lldx%lld images, %lld classes\n", o->data, (long long)rd->train.n,
               (long long)rd->test.n, (long long)rd->train.height, (long long)rd->train.width,
               (long long)rd->train.classes);
    printf("model %s (%lld parameters), precision %s%s%s%s\n", model_describe(o, r->ri, desc, sizeof desc),
           (long long)r->t->n_weights, o->precision,
           amp_scaler_is_enabled(r->t->scaler) ? " with the grad scaler" : "", r->cuda ? ", on cuda" : "",
           o->flush_denormal ? ", subnormals flushed to zero" : "");
    /* The grad scaler's knobs, when any is not PyTorch's default. */
    const amp_scaler_opts so = scaler_opts_of(o), def = amp_scaler_defaults();
    const bool scaled = amp_scaler_is_enabled(r->t->scaler);
    if (scaled && o->static_scale > 0)
        printf("grad scaler: a fixed scale %g (never grows or backs off; steps with inf/NaN gradients are skipped)\n",
               so.init_scale);
    else if (scaled && (so.init_scale != def.init_scale || o->init_scale_auto ||
             so.growth_factor != def.growth_factor || so.backoff_factor != def.backoff_factor ||
             so.growth_interval != def.growth_interval || so.hysteresis > 1 || so.min_scale > 0 ||
             so.max_scale > 0)) {
        char init[32];
        snprintf(init, sizeof init, "%g", so.init_scale);
        printf("grad scaler: init scale %s, x%g after %lld clean steps, x%g at an overflow",
               o->init_scale_auto ? "auto" : init, so.growth_factor, (long long)so.growth_interval, so.backoff_factor);
        if (so.hysteresis > 1)
            printf(", hysteresis %d", so.hysteresis);
        if (so.min_scale > 0)
            printf(", at least %g", so.min_scale);
        if (so.max_scale > 0)
            printf(", at most %g", so.max_scale);
        printf("\n");
    }
    if (strcmp(o->param_dtype, "fp32") != 0 || strcmp(o->optim_state, "fp32") != 0)
        printf("memory levers: parameters %s%s, optimizer state %s\n", o->param_dtype,
               strcmp(o->param_dtype, "fp32") == 0    ? ""
               : strcmp(o->weight_update, "sr") == 0   ? " (no masters: stored with stochastic rounding)"
               : strcmp(o->master_weights, "on") == 0  ? " (fp32 masters in the optimizer)"
                                                       : " (no masters: updated in 16 bits)",
               o->optim_state);
    printf("optim %s lr %g", o->optim, o->lr);
    if (strcmp(o->optim, "sgd") == 0)
        printf(" momentum %g", o->momentum);
    if (o->weight_decay > 0)
        printf(" weight_decay %g", o->weight_decay);
    printf(", schedule %s", o->schedule);
    if (o->warmup)
        printf(" (warm-up %lld)", (long long)o->warmup);
    int64_t batch = run_batch(r);
    printf(", batch %lld", (long long)batch);
    if (batch < o->batch) /* the batcher's cut */
        printf(" (--batch %lld is more than the %lld rows %s)", (long long)o->batch, (long long)batch,
               r->world > 1 ? "a rank's shard holds" : "the training set holds");
    if (o->accum > 1)
        printf(" x %lld accumulated", (long long)o->accum);
    printf(", %lld steps", (long long)total);
    if (o->epochs > 0)
        printf(" (%lld epochs)", (long long)o->epochs);
    printf(", seed %llu, threads %d\n", (unsigned long long)o->seed, amp_get_num_threads());
    if (r->world > 1) {
        printf("data-parallel: %d ranks, batch %lld per rank (%lld in all), ", r->world, (long long)batch,
               (long long)(batch * r->world));
        if (r->zero) /* (its state may not exist yet: Adam's comes with the first step) */
            printf("ZeRO stage 1 (the optimizer state in %d shards, one a rank)", r->world);
        else
            printf("DDP buckets of %g MiB, compression %s", o->bucket_mb, o->compress);
        printf(", timeout %g s\n", dist_timeout_s());
    }
    printf("kernels %s\n", amp_cpu_kernels());
    fflush(stdout);
}

/* "LABEL X MiB (model Y + data Z)": dev's peak, and the data set's and
 * batches' part of it (the memory categories at that peak) apart. */
static void print_peak(const char *label, amp_device dev)
{
    amp_memory_categories m;
    if (amp_memory_get_categories(dev, &m) != AMP_OK)
        return;
    int at = 0; /* the phase that reached the overall peak */
    for (int p = 1; p < AMP_PHASE_COUNT; p++)
        if (m.phase_peak[p] > m.phase_peak[at])
            at = p;
    const double mib = 1024.0 * 1024.0, data = (double)m.phase_peak_by[at][AMP_MEM_DATA] / mib;
    printf("%s %.1f MiB (model %.1f + data %.1f)\n", label, (double)m.total_peak / mib,
           (double)m.total_peak / mib - data, data);
}

/* The result lines; the last is "test_accuracy X" or "val_loss X perplexity Y". */
static int finish(run *r, double t0, double t_loaded, double t_trained)
{
    double m = 0;
    bool gpt = r->rd->gpt;
    m = gpt ? eval_text_loss(r->t, r->o, &r->rd->text, 0) : eval_accuracy(r->t, &r->rd->test, &r->rd->eb);
    if (gpt ? isnan(m) : m < 0) {
        fprintf(stderr, "ampc: evaluation: %s\n", amp_last_error());
        return 1;
    }
    double t_end = now_s();
    printf("time: load %.1f s, train %.1f s, %s %.1f s, total %.1f s\n", t_loaded - t0, t_trained - t_loaded,
           gpt ? "validation" : "test", t_end - t_trained, t_end - t0);
    print_peak("peak memory", AMP_CPU);
    if (r->cuda)
        print_peak("peak device memory", AMP_CUDA);
    if (r->o->memory && amp_memory_report(stdout) != AMP_OK)
        fprintf(stderr, "ampc: memory report: %s\n", amp_last_error());
    if (amp_scaler_is_enabled(r->t->scaler))
        printf("scaler: final scale %g, %lld steps skipped in all\n", amp_scaler_get_scale(r->t->scaler),
               (long long)r->ri->skipped);
    if (gpt)
        printf("val_loss %.4f perplexity %.3f\n", m, exp(m));
    else
        printf("test_accuracy %.4f\n", m);
    tb_eval(r->tb, r->last_step, gpt ? "eval/val_loss" : "eval/test_accuracy", m);
    if (gpt)
        tb_eval(r->tb, r->last_step, "eval/perplexity", exp(m));
    return 0;
}

/* --init-scale auto at step 0 (scale_calib.h): the scale measured, said
 * on stdout and in the log's first line. -1 or an exit code. */
static int calibrate_scale(run *r, log_file *lf)
{
    if (r->world > 1) {
        fprintf(stderr, "ampc: --init-scale auto runs on one process: under mpirun each rank's first batch differs; "
                        "measure the scale with one process, then give it as --init-scale X\n");
        return EXIT_USAGE;
    }
    scale_calib c;
    int rc = scale_calibrate(r->t, r->o, r->ri, r->rd->gpt, batch_cb, r, &c);
    if (rc >= 0)
        return rc;
    if (c.capped)
        printf("init scale auto: %g (the first step's gradients are finite at %g, probed no higher: the scale "
               "starts at most at %g; %d probes)\n",
               c.scale, c.largest_finite, c.scale, c.n_probes);
    else
        printf("init scale auto: %g (the first step's gradients are finite up to %g, inf/NaN above; %g times "
               "below it, the headroom for the first steps' growth; %d probes)\n",
               c.scale, c.largest_finite, c.largest_finite / c.scale, c.n_probes);
    char line[4096];
    if (lf && log_event(lf, scale_calib_json(&c, line, sizeof line)) != AMP_OK) {
        fprintf(stderr, "ampc: --log: %s\n", amp_last_error());
        return 1;
    }
    return -1;
}

/* A setup stage's rc, agreed over the ranks (dist_agree): an exit code
 * every rank returns, so none ends the job for the others. */
static bool g_agreed;
static int agree(int rc)
{
    rc = dist_agree(rc);
    if (rc >= 0)
        g_agreed = true;
    return rc;
}

/* Data-parallel: the amp_ddp (or, --zero 1, the amp_zero) over the
 * trainer's parameters. -1 or 1 (message printed). */
static int dist_wrap(run *r)
{
    const train_opts *o = r->o;
    if (o->zero == 1) {
        if (!(r->zero = amp_zero_new(r->t->opt))) {
            fprintf(stderr, "ampc: --zero 1: %s\n", amp_last_error());
            return 1;
        }
        return -1;
    }
    amp_ddp_opts d = amp_ddp_defaults();
    d.bucket_mb = o->bucket_mb;
    d.compress = strcmp(o->compress, "bf16") == 0 ? AMP_BF16 : strcmp(o->compress, "fp16") == 0 ? AMP_F16 : AMP_F32;
    if (!(r->ddp = amp_ddp_new(r->t->params, r->t->n_params, d))) {
        fprintf(stderr, "ampc: data-parallel gradients (amp_ddp): %s\n", amp_last_error());
        return 1;
    }
    return -1;
}

/* A resumed run's scaler: the checkpoint holds its state (scale, growth
 * and backoff factors, growth interval and tracker), which the load put
 * in place; options given on this command line win, as for the other
 * settings: a factor or interval replaces the saved one (the tracker is
 * kept when below the new interval, else the scale grows at the next
 * clean step), --init-scale or --static-scale restarts the scale there,
 * and a saved scale outside --min-scale / --max-scale is clamped to them.
 * --hysteresis's count continues from the saved one (the load put it in
 * place, at most this run's N; an older checkpoint kept it in run_info),
 * unless the scale restarts or the saved run had no hysteresis: then it
 * starts full. -1 or 1. */
static int scaler_resume(trainer *t, const train_opts *o, const train_opts *ck, const run_info *saved,
                         const char *where)
{
    const opt_def *tab = opts_table();
#define GIVEN(n) (o->given[opts_find(n) - tab])
    amp_scaler_state st = amp_scaler_state_get(t->scaler);
    const amp_scaler_opts so = scaler_opts_of(o);
    const double was = st.scale;
    if (GIVEN("growth-factor"))
        st.growth_factor = so.growth_factor;
    if (GIVEN("backoff-factor"))
        st.backoff_factor = so.backoff_factor;
    if (GIVEN("growth-interval"))
        st.growth_interval = so.growth_interval;
    if (st.growth_tracker >= st.growth_interval)
        st.growth_tracker = st.growth_interval - 1;
    if (GIVEN("init-scale") || o->static_scale > 0)
        st.scale = so.init_scale;
    if (so.min_scale > 0 && st.scale < so.min_scale)
        st.scale = so.min_scale;
    if (so.max_scale > 0 && st.scale > so.max_scale)
        st.scale = so.max_scale;
#undef GIVEN
    if (amp_scaler_state_load(t->scaler, st) != AMP_OK) {
        fprintf(stderr, "ampc: %s: the grad scaler's state with this command line's options: %s\n", where,
                amp_last_error());
        return 1;
    }
    int64_t left = st.scale != was || ck->hysteresis <= 1 ? o->hysteresis
                   : saved->hysteresis_left > 0 ? saved->hysteresis_left
                                                : amp_scaler_get_hysteresis_left(t->scaler);
    if (o->hysteresis > 1 &&
        amp_scaler_set_hysteresis_left(t->scaler, (int)(left < o->hysteresis ? left : o->hysteresis)) != AMP_OK) {
        fprintf(stderr, "ampc: %s: the grad scaler's hysteresis: %s\n", where, amp_last_error());
        return 1;
    }
    if (st.scale != was)
        printf("grad scaler: the saved scale %g is now %g (this command line's options)\n", was, st.scale);
    return -1;
}

static int train_run(const train_opts *o, const train_opts *ck, const run_info *saved, const run_info *init,
                     const run_policy *rp)
{
    double t0 = now_s();
    run_data rd;
    run_info ri = {0};
    const int world = amp_dist_world_size();
    int rc = agree(data_open(&rd, o, &ri, true));
    if (rc >= 0) {
        data_close(&rd); /* (what another rank failed to load; closing twice is harmless) */
        return rc;
    }
    ri.world_size = world;
    ri.policy_hash = rp->hash; /* saved with the checkpoint: a resume checks the file against it */
    char where[CLI_PATH_MAX] = "";
    if (o->resume)
        checkpoint_path(where, sizeof where, o->resume);
    if (saved && (rc = data_check(&ri, saved, o, where)) < 0)
        rc = checkpoint_check_size(o->resume, o, &ri);
    double t_loaded = now_s();
    if (rc < 0)
        rc = mem_check(o, &ri, &rd, o->dry_run); /* before the model is allocated */
    if (rc < 0)
        rc = data_buffers(&rd, o);
    if ((rc = agree(rc)) < 0) /* a collective: every rank is here */
        rc = agree(dist_same_settings(o, &ri));
    if (rc >= 0) {
        data_close(&rd);
        return rc;
    }

    run r = {.o = o, .rd = &rd, .ri = &ri, .nb = data_epoch_batches(&rd, o), .cuda = strcmp(o->device, "cuda") == 0,
             .world = world};
    /* A resumed run keeps its length in steps (and so its schedule), on
     * any number of ranks, unless --steps or --epochs is given anew. */
    int64_t total = o->steps;
    bool keep = saved && saved->total_steps > 0 && !o->given[opts_find("steps") - opts_table()] &&
                !o->given[opts_find("epochs") - opts_table()];
    if (keep)
        total = saved->total_steps;
    else if (total <= 0) { /* epochs * nb / accum: at most 1e6 * 2^32 (a u32 IDX dimension), checked anyway */
        if (__builtin_mul_overflow(o->epochs, r.nb, &total) || total / o->accum > CLI_MAX_STEPS) {
            fprintf(stderr, "ampc: --epochs %lld of %lld micro-batches, %lld per step, is more than %lld steps\n",
                    (long long)o->epochs, (long long)r.nb, (long long)o->accum, (long long)CLI_MAX_STEPS);
            data_close(&rd);
            return agree(EXIT_USAGE);
        }
        total /= o->accum;
    }
    if (total < 1)
        total = 1;
    ri.total_steps = total;
    trainer t;
    bool built = trainer_build(&t, o, &ri, total);
    if ((rc = agree(built ? -1 : 1)) >= 0) {
        if (built) /* another rank's build failed */
            trainer_free(&t);
        data_close(&rd);
        return rc;
    }
    r.t = &t;
    r.stall_16bit = strcmp(o->param_dtype, "fp32") != 0;
    int64_t first = 0;
    if (o->init_from)
        rc = init_from_load(o, &t, &ri, init);
    if (saved) {
        /* The checkpoint's scaler state, when it had a scaler and this
         * run has one (a precision changed on resume starts afresh). */
        bool had = strcmp(ck->precision, "fp16") == 0 && !ck->no_scaler;
        rc = checkpoint_load_run(o->resume, &t, true, had && amp_scaler_is_enabled(t.scaler), &first);
        if (rc < 0 && had && amp_scaler_is_enabled(t.scaler))
            rc = scaler_resume(&t, o, ck, saved, where);
        ri.sched_step = saved->sched_step;
        ri.skipped = saved->skipped;
        /* Each step is taken or skipped: the counts add up to the step (and
         * so it is at most 2 * CLI_MAX_STEPS, the settings' bounds). */
        if (rc < 0 && ri.sched_step + ri.skipped != first) {
            fprintf(stderr, "ampc: %s: the saved run values sched_step %lld + skipped %lld are not the step %lld "
                            "it was saved at (a damaged checkpoint?)\n",
                    where, (long long)ri.sched_step, (long long)ri.skipped, (long long)first);
            rc = 1;
        }
        if (rc < 0 && first > total) {
            fprintf(stderr, "ampc: %s was saved at step %lld, past this run's %lld steps (--steps or --epochs "
                            "on %d rank%s): give more with --steps\n",
                    where, (long long)first, (long long)total, world, world == 1 ? "" : "s");
            rc = EXIT_USAGE;
        }
        if (rc < 0 && o->stop_at > 0 && o->stop_at <= first) {
            fprintf(stderr, "ampc: --stop-at %lld is not after step %lld, where %s was saved: nothing would be "
                            "trained; give a later --stop-at, or none to train on to step %lld\n",
                    (long long)o->stop_at, (long long)first, where, (long long)total);
            rc = EXIT_USAGE;
        }
    }
    if (rc < 0) /* the policy's modules checked on the model just built, and applied */
        rc = run_policy_check(rp, &t, o, &ri, "ampc train");
    /* Ranks resumed from checkpoints of different steps (of one run: the
     * settings agree) would train different steps against each other and
     * overwrite a good checkpoint: refused before anything is written. */
    if ((rc = agree(rc)) < 0)
        rc = agree(dist_same_step(first, where));
    /* The wrap comes after a resumed run's load: amp_ddp takes rank 0's
     * parameters, amp_zero keeps this rank's shard of the whole optimizer
     * state just loaded (the checkpoint holds it whole). */
    if (rc < 0 && world > 1)
        rc = dist_wrap(&r);
    if (rc < 0 && world > 1 && !r.cuda && !(r.loss_red = amp_zeros(AMP_SHAPE(1), AMP_F32)))
        rc = fail("the loss buffer", first);
    log_file *lf = NULL;
    if (rc < 0 && amp_dist_rank() == 0) /* rank 0 alone writes the log */
        rc = open_log(o, &lf);
    if (rc < 0 && lf && run_policy_log(rp, o, lf) != AMP_OK) {
        fprintf(stderr, "ampc: --log: %s\n", amp_last_error());
        rc = 1;
    }
    if (rc < 0 && amp_dist_rank() == 0 && o->tensorboard && !(r.tb = tb_open(o->tensorboard))) {
        fprintf(stderr, "ampc: --tensorboard: %s\n", amp_last_error());
        rc = 1;
    }
    r.last_step = first;
    if (!g_agreed) /* agreed already: every rank stops there */
        rc = agree(rc);
    if (rc < 0) {
        print_config(&r, total);
        if (rp->any) {
            char mods[1024], ops[1024];
            printf("policy%s%s: modules in f32: %s; ops: %s\n", o->policy ? " " : "", o->policy ? o->policy : "",
                   rp->p.n_modules ? policy_module_list(&rp->p, mods, sizeof mods) : "none",
                   rp->p.n_ops ? policy_op_list(&rp->p, ops, sizeof ops) : "the built-in categories");
        }
        if (saved) {
            printf("resumed from %s at step %lld of %lld\n", where, (long long)first, (long long)total);
            int64_t was = saved->world_size > 0 ? saved->world_size : 1;
            if (was != world)
                printf("saved on %lld rank%s, resumed on %d: the data shards differ from here on (the data order "
                       "from step %lld is this world's)\n",
                       (long long)was, was == 1 ? "" : "s", world, (long long)first);
        }
        int64_t stop = o->stop_at > 0 && o->stop_at < total ? o->stop_at : total;
        /* (before the anomaly check: a probe above the boundary overflows on purpose) */
        if (o->init_scale_auto && first == 0 && amp_scaler_is_enabled(t.scaler))
            rc = calibrate_scale(&r, lf);
        else if (o->init_scale_auto && saved)
            printf("--init-scale auto applies at step 0 only: the run goes on at its checkpoint's scale %g\n",
                   amp_scaler_get_scale(t.scaler));
        if (rc < 0 && first < stop) {
            rc = anomaly_cli_begin(o, lf);
            if (rc < 0)
                rc = train_loop(&r, first, stop, total, lf);
            anomaly_cli_end(); /* the evaluation is not checked */
            if (rc < 0 && o->save)
                rc = save_run(&r, stop);
            if (rc < 0 && stop < total)
                printf("stopped at step %lld of %lld (--stop-at): continue with %sampc train --resume %s\n",
                       (long long)stop, (long long)total, world > 1 ? "mpirun -np N " : "", o->save);
        }
    }
    if (lf && log_close(lf) != AMP_OK && rc < 0) {
        fprintf(stderr, "ampc: --log: %s\n", amp_last_error());
        rc = 1;
    }
    /* Every rank evaluates its (identical) model, rank 0 prints. */
    if (rc < 0)
        rc = finish(&r, t0, t_loaded, now_s());
    tb_close(r.tb); /* (a failed write was said, and the run goes on) */
    stall_free(&r.stall);
    amp_ddp_free(r.ddp);
    amp_zero_free(r.zero);
    amp_tensor_free(r.loss_red);
    amp_tensor_free(r.dev_x);
    amp_tensor_free(r.dev_y);
    amp_tensor_free(r.loss_acc);
    amp_tensor_free(r.norm_dev);
    trainer_free(&t);
    data_close(&rd);
    return rc;
}

int train_main(int argc, char **argv)
{
    train_opts o, ck;
    run_info saved = {0};
    train_opts_default(&o);
    dist_output();
    int rc = train_parse(argc, argv, &o);
    /* Everything before dist_begin is the same on every rank: each
     * returns the same exit code, and MPI never started. */
    if (rc < 0)
        rc = dist_check_opts(&o);
    if (rc < 0)
        rc = dist_begin(&o);
    if (rc >= 0)
        return rc;
    if (!o.dry_run) /* a dry run estimates a cuda run without a GPU too */
        rc = device_check(&o, "ampc train");
    if (rc < 0 && o.resume) {
        char where[CLI_PATH_MAX];
        checkpoint_path(where, sizeof where, o.resume);
        rc = checkpoint_read_settings(o.resume, &ck, &saved);
        if (rc < 0 && amp_dist_rank() == 0)
            checkpoint_clean(o.resume);
        if (rc < 0)
            rc = data_resume_check(&o, &ck, &saved, where);
        if (rc < 0)
            rc = settings_merge(&o, &ck, where);
        if (!o.save)
            o.save = o.resume;
    }
    run_info init = {0};
    if (rc < 0 && o.init_from)
        rc = init_from_settings(&o, &init);
    if (rc < 0)
        rc = opts_resolve(&o);
    if (rc < 0 && amp_dist_rank() == 0) /* rank 0 alone writes --log and --save */
        rc = preflight(&o);
    if (rc < 0)
        rc = profile_preflight(&o);
    run_policy rp = {0};
    if (rc < 0)
        rc = run_policy_load(&rp, &o, "ampc train");
    if (rc < 0 && o.resume && !o.given[RO_policy])
        rc = run_policy_same(&rp, &o, saved.policy_hash, "ampc train");
    if (rc < 0)
        rc = opts_apply_cpu(&o, "ampc train");
    if ((rc = agree(rc)) < 0) {
        rc = train_run(&o, o.resume ? &ck : NULL, o.resume ? &saved : NULL, &init, &rp);
    }
    run_policy_free(&rp);
    /* A rank that failed alone (the others train on, or wait for it):
     * the whole job ends, now. */
    if (rc > 0 && !g_agreed)
        dist_abort(rc, "this rank cannot go on");
    return dist_end(rc);
}

/* The device copies and sums a run of train_step leaves behind. */
static void step_buffers_free(run *r)
{
    amp_tensor_free(r->dev_x);
    amp_tensor_free(r->dev_y);
    amp_tensor_free(r->loss_acc);
    amp_tensor_free(r->norm_dev);
}

int train_profile_run(const train_opts *o, run_data *rd, run_info *ri)
{
    int rc = mem_check(o, ri, rd, false);
    if (rc < 0)
        rc = data_buffers(rd, o);
    if (rc >= 0)
        return rc;
    int64_t total = o->profile_warmup + o->profile_steps;
    trainer t;
    if (!trainer_build(&t, o, ri, total))
        return 1;
    run_policy rp; /* each precision profiled under the run's --policy / --fp32-modules */
    rc = run_policy_load(&rp, o, "ampc profile");
    if (rc < 0)
        rc = run_policy_check(&rp, &t, o, ri, "ampc profile");
    run_policy_free(&rp);
    run r = {.o = o, .rd = rd, .t = &t, .ri = ri, .nb = data_epoch_batches(rd, o), .cuda = strcmp(o->device, "cuda") == 0,
             .world = 1};
    r.read_each = !r.cuda;
    ri->sched_step = ri->skipped = 0;
    for (int64_t step = 0; step < total && rc < 0; step++) {
        if (step == o->profile_warmup && amp_profiler_start(NULL) != AMP_OK)
            rc = fail("profiler", step + 1);
        step_out s;
        if (rc < 0)
            rc = train_step(&r, step, &s);
        amp_profiler_step();
    }
    if (amp_profiler_enabled() && amp_profiler_stop() != AMP_OK && rc < 0)
        rc = fail("profiler", total);
    step_buffers_free(&r);
    trainer_free(&t);
    return rc;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int train_trial(const train_opts *o, run_data *rd, run_info *ri, const run_info *init, double *loss,
                double *step_ms, int64_t *finite_steps)
{
    *loss = *step_ms = NAN;
    *finite_steps = o->steps;
    trainer t;
    if (!trainer_build(&t, o, ri, o->steps))
        return 1;
    int rc = o->init_from ? init_from_load(o, &t, ri, init) : -1;
    run r = {.o = o, .rd = rd, .t = &t, .ri = ri, .nb = data_epoch_batches(rd, o), .cuda = strcmp(o->device, "cuda") == 0,
             .world = 1};
    r.read_each = !r.cuda;
    ri->sched_step = ri->skipped = 0;
    const int64_t last = o->steps - (o->steps + 3) / 4; /* the last quarter's losses, at least one */
    double sum = 0, *ms = malloc((size_t)o->steps * sizeof *ms);
    if (!ms && rc < 0)
        rc = fail("the step times", 0);
    for (int64_t step = 0; step < o->steps && rc < 0; step++) {
        step_out s;
        double t0 = now_s();
        rc = train_step(&r, step, &s);
        if (rc < 0 && r.cuda)
            s.loss = read_losses(&r, &(int64_t){0}, &(int64_t){0});
        ms[step] = 1e3 * (now_s() - t0);
        if (rc < 0 && !isfinite(s.loss) && *finite_steps == o->steps)
            *finite_steps = step;
        if (rc < 0 && step >= last)
            sum += isfinite(s.loss) ? s.loss : NAN;
    }
    if (rc < 0) { /* the median step after the first (a busy machine's spikes drop out) */
        *loss = sum / (double)(o->steps - last);
        int64_t n = o->steps > 1 ? o->steps - 1 : 1;
        qsort(ms + o->steps - n, (size_t)n, sizeof *ms, by_double);
        *step_ms = ms[o->steps - n + n / 2];
    }
    free(ms);
    step_buffers_free(&r);
    trainer_free(&t);
    return rc;
}
