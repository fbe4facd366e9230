/*
 * nn.h - the module object behind amp_module (internal).
 *
 * A module is a kind name, a forward function, a training flag, the
 * parameters it owns (leaf modules: at most "weight" and "bias") and its
 * children (sequential). The tree is owned top-down: a container owns its
 * children, a leaf owns one reference to each parameter. Each child knows
 * its parent so that a structural change can mark every ancestor's cached
 * list of (parameter, "0.weight"-style name) pairs stale. A child may carry
 * a name of its own ("h.3", "attn.qkv", "ln_f"); one without is named by
 * its index, as torch.nn.Sequential names its children.
 *
 * Defines: struct amp_module, module_new (layers.c builds on it),
 * module_add_param, module_set_name, module_append, module_is_relu.
 */
#ifndef AMPC_NN_H
#define AMPC_NN_H

#include "ampc.h"

#define MODULE_MAX_OWN 2
#define MODULE_MAX_SUB 4

typedef amp_tensor *(*module_forward_fn)(amp_module *m, amp_tensor *x);

struct amp_module {
    const char *kind;          /* "linear", "sequential", ... (static string) */
    module_forward_fn forward;
    /* forward followed by relu in one op, for a sequential that has this
     * module then a ReLU (linear, conv2d; NULL elsewhere). */
    module_forward_fn forward_relu;
    bool training;             /* PyTorch's default: modules start in training mode */
    amp_module *parent;        /* the container that owns this module, or NULL */
    char *name;                /* its name in the parent's parameter names; NULL: its index */

    int n_own;                 /* parameters this module holds itself */
    amp_tensor *own[MODULE_MAX_OWN];
    const char *own_names[MODULE_MAX_OWN];

    int n_children, cap_children;
    amp_module **children;

    /* The subtree's parameters with their full names, built on demand
     * (amp_module_param) and dropped when the subtree changes. */
    bool dirty;
    int n_flat;
    amp_tensor **flat;
    char **flat_names;

    /* Its path in PyTorch's named_modules() naming ("h.0.attn.qkv"; ""
     * for the root), the scope its forward's ops run in (ops/scope.h),
     * and paths below it for parts a forward wires without a module of
     * their own (the GPT block's "h.0.attn", "h.0.mlp"); built on first
     * use and dropped when the tree above changes. */
    char *path;
    char *sub_paths[MODULE_MAX_SUB];

    /* Configuration, per kind (see layers.c). */
    int64_t cfg_i[6];
    double cfg_f[2];
};

/* A module with no parameters, in training mode; NULL (error set) when out
 * of memory. */
amp_module *module_new(const char *kind, module_forward_fn forward);
/* Makes t a trainable parameter (requires_grad) of m called name. m takes
 * the caller's reference to t, also on error (t may be NULL: the error of
 * the constructor that failed is kept). */
amp_status module_add_param(amp_module *m, amp_tensor *t, const char *name);

/* Names child m within its parent's parameter names (a copy of name;
 * dots allowed: "attn.qkv"). */
amp_status module_set_name(amp_module *m, const char *name);
/* Appends child (its ownership taken) to m's children, m its parent, and
 * marks m and its ancestors for a new parameter list; out of memory frees
 * child and sets the error "<who>: out of memory". */
amp_status module_append(amp_module *m, amp_module *child, const char *who);

/* m's path (the struct's `path`), NULL when out of memory; and sub-path
 * k (< MODULE_MAX_SUB) of m: its path + "." + suffix, suffix for the
 * root. */
const char *module_path(amp_module *m);
const char *module_sub_path(amp_module *m, int k, const char *suffix);

/* Whether m is an nn ReLU (the sequential fuses it into the layer before). */
bool module_is_relu(const amp_module *m);

#endif
