/*
 * run_policy.h - the autocast policy a run trains or evaluates with:
 * `--policy FILE` (policy_file.h) and `--fp32-modules a,b` together, its
 * module paths checked against the model the run built, applied on the
 * run's device, and described for the log's start record.
 *
 * Defines: run_policy, run_policy_load, run_policy_check, run_policy_log,
 * run_policy_same, run_policy_free, RUN_MAX_MODULES, run_module, run_policy_modules.
 */
#ifndef AMPC_RUN_POLICY_H
#define AMPC_RUN_POLICY_H

#include "log.h"
#include "policy_file.h"
#include "settings.h"
#include "trainer.h"

typedef struct {
    policy p;
    bool any;        /* --policy or --fp32-modules given (or saved) */
    uint64_t hash;   /* --policy's file bytes (FNV-1a 64); 0 without a file */
    int n_from_file; /* p.modules[0 .. n_from_file) came from the file, the rest from --fp32-modules */
} run_policy;

/* o's --policy file and --fp32-modules into rp (empty when neither is
 * set). -1, or EXIT_USAGE after a message that starts with who and names
 * the file (and the byte offset of malformed JSON) or the bad name. */
int run_policy_load(run_policy *rp, const train_opts *o, const char *who);
/* Checks that every module path of rp names a module t's model runs (one
 * no-grad forward of a dummy batch, amp_autocast_fp32_module_hits), then
 * makes rp the library's policy on the model's device. -1, EXIT_USAGE
 * after a message naming the path and listing the model's module paths,
 * or 1 when the forward fails. A run without a policy resets to the
 * built-in one. */
int run_policy_check(const run_policy *rp, const trainer *t, const train_opts *o, const run_info *ri,
                     const char *who);
/* Writes the log's start record when rp has a policy or the run flushes
 * subnormals (a no-op without either): {"event":"start",
 * "fp32_modules":"a,b","autocast_ops":"linear=fp32","policy_file":..,
 * "policy_hash":..} (the policy's keys with one), "flush_denormal":true
 * (with --flush-denormal). */
amp_status run_policy_log(const run_policy *rp, const train_opts *o, log_file *lf);
/* A resumed run's check: the saved --policy file (o->policy, read into
 * rp) still has the bytes the run trained with (saved_hash; 0: none
 * recorded). -1, or EXIT_USAGE after a message naming the file. */
int run_policy_same(const run_policy *rp, const train_opts *o, uint64_t saved_hash, const char *who);
void run_policy_free(run_policy *rp);

#define RUN_MAX_MODULES 4096

/* A module of a model, and the parameters under it. */
typedef struct {
    char path[192];
    int64_t params;
} run_module;

/* m's module paths into out[0 .. max): every module path of a parameter
 * and each path above it, in parameter order, each once, with the
 * parameter elements under it; then the gpt's lm_head (the head tied to
 * wte: wte's elements). Returns the count. */
int run_policy_modules(const amp_module *m, run_module *out, int max);

#endif
