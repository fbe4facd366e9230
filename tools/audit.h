/*
 * audit.h - the precision audit's collection (audit.c): a run's first
 * steps in its precision beside an fp32 shadow of the same weights on the
 * same batches, with what 16 bits moved per op call site and per
 * parameter, ranked worst first. `ampc audit` (audit_cmd.c) prints it;
 * a policy search can order its candidates by the same ranking.
 *
 * Defines: audit_param, audit_result, audit_collect, audit_result_free,
 * audit_mean_rel, audit_norm_rel, audit_update_ratio, audit_stalled.
 */
#ifndef AMPC_AUDIT_H
#define AMPC_AUDIT_H

#include "data.h"
#include "settings.h"
#include "train_opts.h"

/* One parameter's updates over the steps the optimizer took. */
typedef struct {
    char name[128];
    amp_dtype dtype;       /* its storage dtype */
    int64_t numel;
    int steps;             /* steps taken (the scaler's skipped ones left out) */
    int ratio_steps;       /* of those, with ||old|| > 0 (a bias at 0 has no ratio) */
    double ratio_sum;      /* of ||new - old|| / ||old|| over those (f32 values) */
    int64_t moved;         /* elements with a nonzero gradient, summed over the steps */
    int64_t stalled;       /* of those, the ones whose stored value did not change */
} audit_param;

typedef struct {
    /* The call sites compared, worst first (audit_mean_rel, then the
     * largest relative error); views into `audit`, valid until
     * audit_result_free. Sites the audited run never reached are left
     * out. */
    const amp_audit_site **sites;
    int n_sites;
    audit_param *params;   /* the model's order */
    int n_params;
    int64_t steps, skipped; /* steps run; of them, the scaler skipped */
    amp_audit *audit;
} audit_result;

/* Runs o->steps steps of o's run (o resolved, on the CPU) on rd's
 * training batches (the first steps `ampc train` would take) with an fp32
 * shadow: before each step the shadow (the same model, built the same
 * way, f32 weights, no autocast) takes the audited model's weights widened
 * to f32, runs the step's micro-batches with the same dropout draws (the
 * generator's state is put back after it) and the loss scaled by the
 * audited step's scale, as the reference; the audited step then runs as
 * train's does (scaler, --clip, the schedule), compared against it, and
 * its optimizer step is measured per parameter. rd is data_open's with
 * data_buffers made. The audited run uses the process's autocast policy
 * as it stands (amp_autocast_set_category, amp_autocast_set_fp32_modules:
 * a policy under test); the shadow runs without autocast. -1 (r filled;
 * free it with audit_result_free) or an exit code after a message.
 * init: --init-from's run values when o has it (init_from_settings; the
 * audited model starts from DIR's weights, the shadow takes them as it
 * takes every step's), else NULL. */
int audit_collect(const train_opts *o, run_data *rd, run_info *ri, const run_info *init, audit_result *r);
void audit_result_free(audit_result *r);
/* A site's mean relative error (0 with no finite value) and norm-wise
 * one, sqrt(sum (a - s)^2 / sum s^2) (0 when both sums are 0). */
double audit_mean_rel(const amp_audit_site *s);
double audit_norm_rel(const amp_audit_site *s);
/* A parameter's mean update-to-weight ratio (NAN: no step with a nonzero
 * weight) and stalled fraction (0 when no element had a gradient). */
double audit_update_ratio(const audit_param *p);
double audit_stalled(const audit_param *p);

#endif
