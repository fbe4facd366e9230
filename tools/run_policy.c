/*
 * run_policy.c - the autocast policy of a run (run_policy.h): the file
 * and --fp32-modules read, the module paths checked on the model the run
 * built, the policy applied and logged.
 */
#include "run_policy.h"

#include "base/base.h"
#include "io/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void run_policy_free(run_policy *rp)
{
    policy_free(&rp->p);
    *rp = (run_policy){0};
}

int run_policy_load(run_policy *rp, const train_opts *o, const char *who)
{
    *rp = (run_policy){0};
    if (o->policy) {
        amp_status st = policy_read(o->policy, &rp->p, &rp->hash);
        if (st != AMP_OK) {
            fprintf(stderr, "%s: --policy %s\n", who, amp_last_error());
            return EXIT_USAGE;
        }
        rp->any = true;
        rp->n_from_file = rp->p.n_modules;
    }
    if (o->fp32_modules) {
        const char *s = o->fp32_modules;
        while (true) {
            size_t n = strcspn(s, ",");
            char path[256];
            if (n == 0 || n >= sizeof path) {
                fprintf(stderr, "%s: --fp32-modules '%s': %s (give module paths separated by commas: "
                                "h.0.attn,ln_f)\n",
                        who, o->fp32_modules, n ? "a path longer than 255 bytes" : "an empty path");
                run_policy_free(rp);
                return EXIT_USAGE;
            }
            memcpy(path, s, n);
            path[n] = '\0';
            if (policy_add_module(&rp->p, path) != AMP_OK) {
                fprintf(stderr, "%s: --fp32-modules: %s\n", who, amp_last_error());
                run_policy_free(rp);
                return EXIT_USAGE;
            }
            if (!s[n])
                break;
            s += n + 1;
        }
        rp->any = true;
    }
    return -1;
}

int run_policy_same(const run_policy *rp, const train_opts *o, uint64_t saved_hash, const char *who)
{
    if (!o->policy || !saved_hash || rp->hash == saved_hash)
        return -1;
    fprintf(stderr,
            "%s: --resume %s: the policy file %s changed since the run saved it (hash %016" PRIx64 ", the run's "
            "%016" PRIx64 "); put back the one it trained with, or give --policy FILE to go on with another\n",
            who, o->resume, o->policy, rp->hash, saved_hash);
    return EXIT_USAGE;
}

/* One no-grad forward of a batch of one zero example, in the run's
 * precision, in eval mode (dropout would draw from the generator a
 * resumed run must find as it was saved): every module the model has
 * enters its scope. The model is left in training mode, as built. */
static bool dry_forward(const trainer *t, const train_opts *o, const run_info *ri)
{
    amp_tensor *x;
    if (is_gpt(o))
        x = amp_zeros(AMP_SHAPE(1, o->context), AMP_I64);
    else if (strcmp(o->model, "cnn") == 0)
        x = amp_zeros(AMP_SHAPE(1, ri->channels > 0 ? ri->channels : 1, ri->height, ri->width), AMP_F32);
    else
        x = amp_zeros(AMP_SHAPE(1, ri->features), AMP_F32);
    amp_device dev = t->n_params > 0 ? amp_tensor_device(t->params[0]) : AMP_CPU;
    if (x && dev != AMP_CPU) {
        amp_tensor *d = amp_to_device(x, dev);
        amp_tensor_free(x);
        x = d;
    }
    if (!x)
        return false;
    amp_no_grad_begin();
    amp_module_train(t->model, false);
    bool ok = !t->autocast || amp_autocast_begin(dev, t->dtype) == AMP_OK;
    if (ok) {
        ok = amp_module_forward(t->model, x) != NULL;
        if (t->autocast)
            amp_autocast_end();
    }
    amp_module_train(t->model, true);
    amp_no_grad_end();
    amp_temps_free();
    amp_tensor_free(x);
    return ok;
}

int run_policy_modules(const amp_module *m, run_module *out, int max)
{
    int n = 0, np = amp_module_num_params(m);
    const char *head_of = NULL; /* the gpt's head, tied to wte: a module without parameters of its own */
    int64_t head = 0;
    for (int i = 0; i < np; i++) {
        const char *name;
        int64_t numel = amp_tensor_numel(amp_module_param(m, i, &name));
        if (strcmp(amp_module_kind(m), "gpt") == 0 && strcmp(name, "wte.weight") == 0)
            head_of = name, head = numel;
        for (const char *dot = strchr(name, '.'); dot; dot = strchr(dot + 1, '.')) {
            size_t len = (size_t)(dot - name);
            if (len >= sizeof out[0].path)
                continue;
            int k = 0;
            while (k < n && !(strncmp(out[k].path, name, len) == 0 && out[k].path[len] == '\0'))
                k++;
            if (k == n) {
                if (n == max)
                    continue;
                out[n] = (run_module){.params = 0};
                memcpy(out[n].path, name, len);
                n++;
            }
            out[k].params += numel;
        }
    }
    if (head_of && n < max)
        out[n++] = (run_module){.path = "lm_head", .params = head};
    return n;
}

/* The model's module paths to stderr, for a path that named none. */
static void list_modules(const amp_module *m)
{
    run_module *all = calloc(RUN_MAX_MODULES, sizeof *all);
    int n = all ? run_policy_modules(m, all, RUN_MAX_MODULES) : 0;
    fprintf(stderr, "the model's modules:");
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s%s", i % 8 == 0 ? "\n    " : " ", all[i].path);
    fprintf(stderr, "\n");
    free(all);
}

int run_policy_check(const run_policy *rp, const trainer *t, const train_opts *o, const run_info *ri,
                     const char *who)
{
    amp_device dev = t->n_params > 0 ? amp_tensor_device(t->params[0]) : AMP_CPU;
    if (!rp->any) {
        policy_reset(dev);
        return -1;
    }
    if (policy_apply(&rp->p, dev) != AMP_OK) {
        fprintf(stderr, "%s: the policy: %s\n", who, amp_last_error());
        return EXIT_USAGE;
    }
    if (rp->p.n_modules == 0)
        return -1;
    if (!dry_forward(t, o, ri)) {
        fprintf(stderr, "%s: checking the policy's modules (one forward): %s\n", who, amp_last_error());
        policy_reset(dev);
        return 1;
    }
    for (int i = 0; i < rp->p.n_modules; i++)
        if (amp_autocast_fp32_module_hits(i) <= 0) {
            fprintf(stderr, "%s: %s: the module path \"%s\" names no module of this %s\n", who,
                    i < rp->n_from_file ? o->policy : "--fp32-modules",
                    rp->p.modules[i], o->model);
            list_modules(t->model);
            policy_reset(dev);
            return EXIT_USAGE;
        }
    return policy_apply(&rp->p, dev) == AMP_OK ? -1 : 1; /* the hit counts from zero again */
}

amp_status run_policy_log(const run_policy *rp, const train_opts *o, log_file *lf)
{
    if ((!rp->any && !o->flush_denormal) || !lf)
        return AMP_OK;
    char hash[24], modules[4096], ops[4096];
    snprintf(hash, sizeof hash, "%016" PRIx64, rp->hash);
    json_buf b = {0};
    jb_puts(&b, "{\"event\":\"start\"");
    if (rp->any) {
        jb_puts(&b, ",\"fp32_modules\":");
        jb_string(&b, policy_module_list(&rp->p, modules, sizeof modules));
        jb_puts(&b, ",\"autocast_ops\":");
        jb_string(&b, policy_op_list(&rp->p, ops, sizeof ops));
    }
    if (rp->any && o->policy) {
        jb_puts(&b, ",\"policy_file\":");
        jb_string(&b, o->policy);
        jb_printf(&b, ",\"policy_hash\":\"%s\"", hash);
    }
    if (o->flush_denormal) /* (absent: off) */
        jb_puts(&b, ",\"flush_denormal\":true");
    jb_puts(&b, "}");
    amp_status st = b.oom ? amp_set_error(AMP_ERR_MEMORY, "log: out of memory") : log_event(lf, b.p);
    jb_free(&b);
    return st;
}
