/*
 * init_from.c - `ampc train --init-from DIR` (init_from.h): fine-tuning.
 * The model is DIR's (its settings' shape options, which the command line
 * may repeat but not change), its weights loaded by amp_checkpoint_load
 * (all checks made, nothing of the optimizer or scaler read); the rest of
 * the run is the command line's, as for a new run: the optimizer, lr,
 * schedule, precision, data and seed, from step 0.
 */
#include "init_from.h"

#include "checkpoint_cli.h"
#include "data.h"
#include "optim/optim.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int init_from_settings(train_opts *o, run_info *init)
{
    if (o->resume) {
        fprintf(stderr, "ampc train: --init-from %s and --resume %s: a run either continues (--resume) or starts "
                        "from saved weights (--init-from), not both\n", o->init_from, o->resume);
        return EXIT_USAGE;
    }
    char where[CLI_PATH_MAX], hf[CLI_PATH_MAX];
    checkpoint_path(where, sizeof where, o->init_from);
    struct stat sb;
    if (*o->init_from && stat(where, &sb) != 0) { /* a wrong path: the command line's fault, as a missing --data */
        snprintf(hf, sizeof hf, "%s/config.json", o->init_from);
        if (stat(hf, &sb) == 0)
            fprintf(stderr, "ampc train: --init-from %s: no %s there, but a config.json: a Hugging Face model? "
                            "`ampc import %s OUT` makes it a checkpoint to give --init-from OUT\n",
                    o->init_from, CHECKPOINT_FILE, o->init_from);
        else
            fprintf(stderr, "ampc train: --init-from %s: %s: %s\n", o->init_from, where, strerror(errno));
        return EXIT_USAGE;
    }
    train_opts ck;
    int rc = checkpoint_read_settings(o->init_from, &ck, init);
    if (rc >= 0)
        return rc;
    for (int i = 0; i < RO_COUNT; i++) {
        const opt_def *d = &train_rows[i];
        /* the model and its shape; --optim and --optim-state are the new run's */
        if (d->cls != OC_SHAPE || !(i == RO_model || i == RO_param_dtype || d->models))
            continue;
        if ((d->models && strcmp(d->models, ck.model) != 0) || (i == RO_vocab && !ck.vocab))
            continue;
        if (o->given[i] && !settings_same_value(d, o, &ck)) {
            char mine[256], theirs[256];
            settings_describe(d, o, mine, sizeof mine);
            settings_describe(d, &ck, theirs, sizeof theirs);
            fprintf(stderr, "ampc train: --%s %s conflicts with --init-from %s, saved with --%s %s (the model "
                            "starts from its weights: leave --%s out)\n",
                    d->name, mine, where, d->name, theirs, d->name);
            return EXIT_USAGE;
        }
        settings_copy_value(d, o, &ck);
    }
    /* A model on token ids without a --vocab setting (an import): its
     * count of ids, which the token files must have (data_check). */
    if (init->token_ids && !o->vocab)
        o->vocab = init->vocab;
    return -1;
}

int init_from_load(const train_opts *o, trainer *t, const run_info *have, const run_info *init)
{
    char where[CLI_PATH_MAX];
    checkpoint_path(where, sizeof where, o->init_from);
    int rc = data_check(have, init, o, where);
    if (rc >= 0)
        return rc;
    amp_rng_state r = amp_rng_get_state(); /* the file's generator state is its run's, not this one's */
    rc = checkpoint_load_run(o->init_from, t, false, false, NULL);
    amp_rng_set_state(r);
    for (int i = 0; rc < 0 && t->opt && i < t->opt->n; i++)
        if (optim_sync_master(t->opt, i) != AMP_OK) {
            fprintf(stderr, "ampc train: --init-from %s: %s\n", where, amp_last_error());
            rc = 1;
        }
    if (rc < 0)
        printf("initialised from %s (its weights; a fresh optimizer from step 0)\n", where);
    return rc;
}
