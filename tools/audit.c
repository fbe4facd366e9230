/*
 * audit.c - the precision audit's collection (audit.h): each step runs
 * twice on the same batches, first as the fp32 shadow (the reference the
 * library's recorder keeps, amp_audit_record), then as the audited run
 * (compared against it, amp_audit_compare), which alone takes its
 * optimizer step. The shadow never steps: it takes the audited weights
 * anew before each step, so the two never drift apart and each step's
 * errors are that step's alone.
 *
 * Per parameter, the update is measured as --health-every measures the
 * stalled updates (stall.h, on every parameter here): the stored weight
 * (the f32 master when the optimizer keeps one, else the parameter
 * itself) before and after the step; its size is ||new - old|| / ||old||,
 * its stalled fraction the share of the elements with a nonzero gradient
 * whose stored weight did not change: the update rounded to nothing in
 * the storage dtype (bf16 weights without masters and a small lr).
 * Steps the grad scaler skipped change nothing on purpose and are left
 * out of both.
 */
#include "audit.h"
#include "stall.h"
#include "init_from.h"
#include "train.h"
#include "trainer.h"

#include "base/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double audit_mean_rel(const amp_audit_site *s) { return s->finite > 0 ? s->sum_rel / (double)s->finite : 0; }

double audit_norm_rel(const amp_audit_site *s)
{
    if (s->sum_sq_diff == 0)
        return 0;
    return s->sum_sq_ref > 0 ? sqrt(s->sum_sq_diff / s->sum_sq_ref) : INFINITY;
}

double audit_update_ratio(const audit_param *p) { return p->ratio_steps ? p->ratio_sum / p->ratio_steps : NAN; }

double audit_stalled(const audit_param *p) { return p->moved ? (double)p->stalled / (double)p->moved : 0; }

static double frac_of(int64_t n, int64_t of) { return of > 0 ? (double)n / (double)of : 0; }

/* Worst first: the sites that made inf from finite values (an overflow
 * is an infinite error, and there it starts), then those that passed
 * infs on, each by its share of values; then by mean, then max relative
 * error. */
static int worst_first(const void *pa, const void *pb)
{
    const amp_audit_site *a = *(const amp_audit_site *const *)pa, *b = *(const amp_audit_site *const *)pb;
    const double ma = frac_of(a->overflow_made, a->values), mb = frac_of(b->overflow_made, b->values);
    if (ma != mb)
        return ma < mb ? 1 : -1;
    const double oa = frac_of(a->overflow, a->values), ob = frac_of(b->overflow, b->values);
    if (oa != ob)
        return oa < ob ? 1 : -1;
    double x = audit_mean_rel(a), y = audit_mean_rel(b);
    if (x != y)
        return x < y ? 1 : -1;
    if (a->max_rel != b->max_rel)
        return a->max_rel < b->max_rel ? 1 : -1;
    return (a->backward > b->backward) - (a->backward < b->backward); /* forward first */
}

/* The step's micro-batch m, as `ampc train` draws it (rank 0 of 1). */
static bool batch(run_data *rd, const train_opts *o, int64_t m, amp_tensor **x, amp_tensor **y)
{
    if (!rd->gpt)
        return batcher_train(&rd->tb, &rd->train, m, x, y);
    if (!text_batch(&rd->text, false, derive_seed(o->seed, TEXT_STREAM, (uint64_t)m), 0, 1))
        return false;
    *x = rd->text.x;
    *y = rd->text.y;
    return true;
}

/* The step's forward and backward on model t (the shadow or the audited
 * one), the loss scaled by scaler (the audited run's, at its current
 * scale, for both). */
static bool forward_backward(const trainer *t, amp_scaler *scaler, const train_opts *o, run_data *rd,
                             const run_info *ri, int64_t step)
{
    amp_optim_zero_grad(t->opt);
    for (int64_t j = 0; j < o->accum; j++) {
        amp_tensor *x, *y;
        if (!batch(rd, o, step * o->accum + j, &x, &y))
            return false;
        amp_tensor *loss = micro_batch_loss(t, o, ri, rd->gpt, AMP_CPU, x, y);
        amp_tensor *scaled = loss ? amp_scaler_scale(scaler, loss) : NULL;
        if (!scaled || amp_backward(scaled) != AMP_OK)
            return false;
        amp_temps_free();
    }
    return true;
}

/* The shadow's weights: the audited ones, widened to f32. */
static bool copy_weights(const trainer *from, trainer *to, float *buf)
{
    for (int i = 0; i < from->n_params; i++)
        if (amp_tensor_copy_out(from->params[i], buf, AMP_F32) != AMP_OK ||
            amp_tensor_copy_in(to->params[i], buf, AMP_F32) != AMP_OK)
            return false;
    return true;
}

/* A taken step's updates (stall.h's measure, every parameter) into r. */
static void add_updates(const trainer *t, const stall_param *per, audit_result *r)
{
    for (int i = 0; i < t->n_params; i++) {
        audit_param *p = &r->params[i];
        p->moved += per[i].moving;
        p->stalled += per[i].stalled;
        if (per[i].weight_sq > 0) {
            p->ratio_sum += sqrt(per[i].change_sq / per[i].weight_sq);
            p->ratio_steps++;
        }
        p->steps++;
    }
}

/* The audited step's unscale, clipping, learning rate and optimizer step,
 * as train's; *skipped: the scaler skipped it. */
static bool optimizer_step(trainer *t, const train_opts *o, int64_t taken, bool *skipped)
{
    if (amp_scaler_unscale(t->scaler, t->opt) != AMP_OK)
        return false;
    if (o->clip > 0) {
        amp_clear_error();
        if (isnan(amp_clip_grad_norm(t->params, t->n_params, o->clip)) && amp_last_status() != AMP_OK)
            return false;
    }
    double lr = amp_sched_lr(&t->sched, taken);
    if (isnan(lr))
        return false;
    amp_optim_set_lr(t->opt, lr);
    *skipped = false;
    return amp_scaler_step(t->scaler, t->opt, skipped) == AMP_OK && amp_scaler_update(t->scaler) == AMP_OK;
}

/* The run's steps; false (error set) on a library failure. */
static bool run_steps(trainer *t, trainer *sh, const train_opts *o, const train_opts *osh, run_data *rd,
                      const run_info *ri, audit_result *r)
{
    int64_t most = 1;
    for (int i = 0; i < t->n_params; i++) {
        int64_t n = amp_tensor_numel(t->params[i]);
        most = n > most ? n : most;
    }
    float *buf = malloc(sizeof *buf * (size_t)most);
    stall_param *per = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), sizeof *per);
    bool ok = buf && per;
    if (!ok)
        amp_set_error(AMP_ERR_MEMORY, "audit: out of memory for a copy of the weights");
    for (int64_t step = 0; ok && step < o->steps; step++) {
        ok = copy_weights(t, sh, buf);
        /* The shadow draws the dropout masks the audited step draws next. */
        amp_rng_state rng = amp_rng_get_state();
        ok = ok && amp_audit_record(r->audit) == AMP_OK;
        ok = ok && forward_backward(sh, t->scaler, osh, rd, ri, step);
        amp_audit_stop(r->audit);
        amp_rng_set_state(rng);
        ok = ok && amp_audit_compare(r->audit) == AMP_OK;
        ok = ok && forward_backward(t, t->scaler, o, rd, ri, step);
        amp_audit_stop(r->audit);
        amp_audit_drop_reference(r->audit);
        amp_optim_zero_grad(sh->opt);
        bool skipped = false;
        stall_probe probe = {0};
        stall_result sr;
        ok = ok && stall_begin(&probe, t, true) == AMP_OK;
        ok = ok && optimizer_step(t, o, step - r->skipped, &skipped);
        ok = ok && stall_end(&probe, t, skipped, &sr, per) == AMP_OK;
        if (!ok)
            stall_free(&probe);
        if (ok && !skipped)
            add_updates(t, per, r);
        r->steps += ok;
        r->skipped += ok && skipped;
        amp_temps_free();
    }
    free(buf);
    free(per);
    return ok;
}

int audit_collect(const train_opts *o, run_data *rd, run_info *ri, const run_info *init, audit_result *r)
{
    memset(r, 0, sizeof *r);
    /* The shadow: the same model in f32, no autocast, no 16-bit storage. */
    train_opts osh = *o;
    osh.precision = "fp32";
    osh.param_dtype = "fp32";
    osh.optim_state = "fp32";
    osh.no_scaler = false;
    trainer sh, t;
    if (!trainer_build(&sh, &osh, ri, o->steps))
        return 1;
    /* Built second: the generator is where a train run's is after its
     * build (each build seeds it anew). */
    if (!trainer_build(&t, o, ri, o->steps)) {
        trainer_free(&sh);
        return 1;
    }
    int rc = o->init_from && init ? init_from_load(o, &t, ri, init) : -1;
    if (rc >= 0) {
        trainer_free(&t);
        trainer_free(&sh);
        return rc;
    }
    r->audit = amp_audit_new();
    r->params = calloc((size_t)(t.n_params > 0 ? t.n_params : 1), sizeof *r->params);
    r->n_params = t.n_params;
    bool ok = r->audit && r->params;
    for (int i = 0; ok && i < t.n_params; i++) {
        const char *name = NULL;
        amp_module_param(t.model, i, &name);
        snprintf(r->params[i].name, sizeof r->params[i].name, "%s", name ? name : "?");
        r->params[i].dtype = amp_tensor_dtype(t.params[i]);
        r->params[i].numel = amp_tensor_numel(t.params[i]);
    }
    ok = ok && run_steps(&t, &sh, o, &osh, rd, ri, r);
    int n = amp_audit_num_sites(r->audit);
    r->sites = ok ? malloc(sizeof *r->sites * (size_t)(n > 0 ? n : 1)) : NULL;
    for (int i = 0; r->sites && i < n; i++) {
        const amp_audit_site *s = amp_audit_site_at(r->audit, i);
        if (s->calls > 0)
            r->sites[r->n_sites++] = s;
    }
    if (r->sites)
        qsort(r->sites, (size_t)r->n_sites, sizeof *r->sites, worst_first);
    if (!r->sites)
        fprintf(stderr, "ampc audit: step %lld: %s\n", (long long)r->steps + 1,
                ok ? "out of memory" : amp_last_error());
    trainer_free(&t);
    trainer_free(&sh);
    if (!r->sites) {
        audit_result_free(r);
        return 1;
    }
    return -1;
}

void audit_result_free(audit_result *r)
{
    amp_audit_free(r->audit);
    free(r->sites);
    free(r->params);
    memset(r, 0, sizeof *r);
}
