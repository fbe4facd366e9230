/*
 * module.c - what every module shares: forward dispatch, train/eval,
 * parameter enumeration with PyTorch state_dict names, the sequential
 * container, and freeing.
 *
 * Parameter order is a depth-first walk: a module's own parameters
 * ("weight" before "bias"), then each child's, prefixed with the child's
 * name, or its index when it has none ("0.weight", "2.1.bias"), which is
 * the order and naming of torch.nn.Module.named_parameters() (for the gpt:
 * "h.0.attn.qkv.weight").
 *
 * amp_module_to moves every parameter in place (amp_tensor_move).
 */
#include "nn/nn.h"

#include "backend/backend.h"
#include "ops/scope.h"
#include "base/base.h"
#include "tensor/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

amp_module *module_new(const char *kind, module_forward_fn forward)
{
    amp_module *m = calloc(1, sizeof *m);
    if (!m)
        return amp_fail_null(AMP_ERR_MEMORY, "%s: out of memory", kind);
    m->kind = kind;
    m->forward = forward;
    m->training = true;
    m->dirty = true;
    return m;
}

amp_status module_add_param(amp_module *m, amp_tensor *t, const char *name)
{
    if (!t)
        return amp_last_status() != AMP_OK ? amp_last_status() : AMP_ERR_MEMORY;
    if (m->n_own >= MODULE_MAX_OWN) {
        amp_tensor_free(t);
        return amp_set_error(AMP_ERR_STATE, "%s: too many parameters", m->kind);
    }
    amp_status st = amp_tensor_set_requires_grad(t, true);
    if (st != AMP_OK) {
        amp_tensor_free(t);
        return st;
    }
    tensor_set_category(t, AMP_MEM_PARAMETERS);
    m->own[m->n_own] = t;
    m->own_names[m->n_own] = name;
    m->n_own++;
    m->dirty = true;
    return AMP_OK;
}

/* Drops the paths of m's subtree (its name or an ancestor's changed). */
static void drop_paths(amp_module *m)
{
    free(m->path);
    m->path = NULL;
    for (int k = 0; k < MODULE_MAX_SUB; k++) {
        free(m->sub_paths[k]);
        m->sub_paths[k] = NULL;
    }
    for (int i = 0; i < m->n_children; i++)
        drop_paths(m->children[i]);
}

/* Child i of its parent's name: its own, or its index. */
static void child_name(const amp_module *m, char *buf, size_t size)
{
    if (m->name) {
        snprintf(buf, size, "%s", m->name);
        return;
    }
    int i = 0;
    while (i < m->parent->n_children && m->parent->children[i] != m)
        i++;
    snprintf(buf, size, "%d", i);
}

const char *module_path(amp_module *m)
{
    if (m->path)
        return m->path;
    if (!m->parent) {
        m->path = strdup("");
        return m->path;
    }
    const char *up = module_path(m->parent);
    if (!up)
        return NULL;
    char own[32];
    const char *name = own;
    if (m->name)
        name = m->name;
    else
        child_name(m, own, sizeof own);
    size_t len = strlen(up) + strlen(name) + 2;
    if ((m->path = malloc(len)))
        snprintf(m->path, len, "%s%s%s", up, *up ? "." : "", name);
    return m->path;
}

const char *module_sub_path(amp_module *m, int k, const char *suffix)
{
    if (m->sub_paths[k])
        return m->sub_paths[k];
    const char *up = module_path(m);
    if (!up)
        return NULL;
    size_t len = strlen(up) + strlen(suffix) + 2;
    if ((m->sub_paths[k] = malloc(len)))
        snprintf(m->sub_paths[k], len, "%s%s%s", up, *up ? "." : "", suffix);
    return m->sub_paths[k];
}

amp_status module_set_name(amp_module *m, const char *name)
{
    char *copy = strdup(name);
    if (!copy)
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", m->kind);
    free(m->name);
    m->name = copy;
    drop_paths(m);
    for (amp_module *p = m; p; p = p->parent)
        p->dirty = true;
    return AMP_OK;
}

/* ------------------------------------------------------------- forward */

/* Keeps the op's message and says which child of which container failed. */
static void prefix_error(const amp_module *seq, int i, const amp_module *child)
{
    char msg[400];
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    amp_set_error(amp_last_status(), "%s[%d] (%s): %s", seq->kind, i, child->kind, msg);
}

/* A Linear or Conv2d followed by a ReLU runs as one op, the relu fused
 * into the product's epilogue (same values and gradients, one pass over
 * the activations less each way), on every device. */
static amp_tensor *sequential_forward(amp_module *m, amp_tensor *x)
{
    for (int i = 0; i < m->n_children && x; i++) {
        amp_module *c = m->children[i];
        bool fuse = c->forward_relu && i + 1 < m->n_children && module_is_relu(m->children[i + 1]);
        amp_tensor *y;
        if (fuse) {
            op_scope sc;
            op_scope_enter(&sc, module_path(c));
            y = c->forward_relu(c, x);
            op_scope_leave(&sc);
        } else
            y = amp_module_forward(c, x);
        if (!y && amp_last_status() != AMP_OK)
            prefix_error(m, i, c);
        x = y;
        i += fuse;
    }
    return x;
}

amp_tensor *amp_module_forward(amp_module *m, amp_tensor *x)
{
    if (!m)
        return amp_fail_null(AMP_ERR_ARG, "module_forward: NULL module");
    if (!x)
        return NULL; /* keep the error that made the NULL, as the ops do */
    op_scope sc;
    op_scope_enter(&sc, module_path(m));
    amp_tensor *y = m->forward(m, x);
    op_scope_leave(&sc);
    return y;
}

void amp_module_train(amp_module *m, bool training)
{
    if (!m)
        return;
    m->training = training;
    for (int i = 0; i < m->n_children; i++)
        amp_module_train(m->children[i], training);
}

const char *amp_module_kind(const amp_module *m) { return m ? m->kind : NULL; }

/* ------------------------------------------------------------ sequential */

amp_module *amp_nn_sequential(void) { return module_new("sequential", sequential_forward); }

static bool is_ancestor_or_self(const amp_module *a, const amp_module *m)
{
    for (; m; m = m->parent)
        if (m == a)
            return true;
    return false;
}

amp_status amp_sequential_add(amp_module *seq, amp_module *child)
{
    if (!child) {
        /* A failed constructor's NULL: keep its message when there is one. */
        if (amp_last_status() != AMP_OK)
            return amp_last_status();
        return amp_set_error(AMP_ERR_ARG, "sequential_add: NULL child");
    }
    if (!seq || seq->forward != sequential_forward) {
        amp_status st = amp_set_error(AMP_ERR_ARG, "sequential_add: %s is not a sequential (child %s freed)",
                                      seq ? seq->kind : "NULL container", child->kind);
        amp_module_free(child);
        return st;
    }
    /* Freeing these would tear a tree the caller still holds: refuse and
     * leave everything as it was. */
    if (child->parent)
        return amp_set_error(AMP_ERR_STATE, "sequential_add: the %s child already belongs to a %s",
                             child->kind, child->parent->kind);
    if (is_ancestor_or_self(child, seq))
        return amp_set_error(AMP_ERR_STATE, "sequential_add: adding the %s to itself would make a cycle",
                             child->kind);
    return module_append(seq, child, "sequential_add");
}

amp_status module_append(amp_module *m, amp_module *child, const char *who)
{
    if (m->n_children == m->cap_children) {
        int cap = m->cap_children ? 2 * m->cap_children : 4;
        amp_module **c = realloc(m->children, (size_t)cap * sizeof *c);
        if (!c) {
            amp_module_free(child);
            return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory", who);
        }
        m->children = c;
        m->cap_children = cap;
    }
    m->children[m->n_children++] = child;
    child->parent = m;
    drop_paths(child);
    for (amp_module *p = m; p; p = p->parent)
        p->dirty = true;
    return AMP_OK;
}

/* ------------------------------------------------------------ parameters */

static int count_params(const amp_module *m)
{
    int n = m->n_own;
    for (int i = 0; i < m->n_children; i++)
        n += count_params(m->children[i]);
    return n;
}

/* Writes m's parameters (and, when names is set, their names under
 * prefix) from index k on; returns the next index or -1 when out of
 * memory. Stores only below max. */
static int walk_params(const amp_module *m, const char *prefix, amp_tensor **out, char **names, int k, int max)
{
    for (int j = 0; j < m->n_own; j++, k++) {
        if (k >= max)
            continue;
        if (out)
            out[k] = m->own[j];
        if (names) {
            size_t len = strlen(prefix) + strlen(m->own_names[j]) + 1;
            names[k] = malloc(len);
            if (!names[k])
                return -1;
            snprintf(names[k], len, "%s%s", prefix, m->own_names[j]);
        }
    }
    for (int i = 0; i < m->n_children; i++) {
        char *sub = NULL;
        if (names) {
            const char *own = m->children[i]->name;
            size_t len = strlen(prefix) + (own ? strlen(own) : 0) + 16;
            if (!(sub = malloc(len)))
                return -1;
            if (own)
                snprintf(sub, len, "%s%s.", prefix, own);
            else
                snprintf(sub, len, "%s%d.", prefix, i);
        }
        k = walk_params(m->children[i], sub ? sub : "", out, names, k, max);
        free(sub);
        if (k < 0)
            return -1;
    }
    return k;
}

static void drop_flat(amp_module *m)
{
    for (int i = 0; i < m->n_flat; i++)
        free(m->flat_names[i]);
    free(m->flat_names);
    free(m->flat);
    m->flat_names = NULL;
    m->flat = NULL;
    m->n_flat = 0;
}

/* Rebuilds m's cached (parameter, name) list if the subtree changed. */
static amp_status build_flat(amp_module *m)
{
    if (!m->dirty)
        return AMP_OK;
    drop_flat(m);
    int n = count_params(m);
    m->flat = calloc((size_t)(n ? n : 1), sizeof *m->flat);
    m->flat_names = calloc((size_t)(n ? n : 1), sizeof *m->flat_names);
    m->n_flat = n;
    if (!m->flat || !m->flat_names || walk_params(m, "", m->flat, m->flat_names, 0, n) < 0) {
        drop_flat(m);
        return amp_set_error(AMP_ERR_MEMORY, "%s: out of memory listing parameters", m->kind);
    }
    m->dirty = false;
    return AMP_OK;
}

int amp_module_num_params(const amp_module *m)
{
    if (!m) {
        amp_set_error(AMP_ERR_ARG, "module_num_params: NULL module");
        return 0;
    }
    return count_params(m);
}

amp_tensor *amp_module_param(const amp_module *m, int i, const char **name)
{
    if (name)
        *name = NULL;
    if (!m)
        return amp_fail_null(AMP_ERR_ARG, "module_param: NULL module");
    /* The cache is not part of the module's observable state: building it
     * through a const pointer is fine (m was never defined const). */
    amp_module *mm = (amp_module *)m;
    if (build_flat(mm) != AMP_OK)
        return NULL;
    if (i < 0 || i >= mm->n_flat)
        return amp_fail_null(AMP_ERR_ARG, "module_param: index %d out of range (%s has %d parameters)", i,
                             m->kind, mm->n_flat);
    if (name)
        *name = mm->flat_names[i];
    return mm->flat[i];
}

int amp_module_params(const amp_module *m, amp_tensor **out, int max)
{
    if (!m) {
        amp_set_error(AMP_ERR_ARG, "module_params: NULL module");
        return 0;
    }
    if (!out || max < 0)
        max = 0;
    walk_params(m, "", out, NULL, 0, max);
    return count_params(m);
}

/* --------------------------------------------------------------- freeing */

static void module_destroy(amp_module *m)
{
    for (int i = 0; i < m->n_children; i++)
        module_destroy(m->children[i]);
    free(m->children);
    for (int j = 0; j < m->n_own; j++)
        amp_tensor_free(m->own[j]);
    drop_flat(m);
    free(m->path);
    for (int k = 0; k < MODULE_MAX_SUB; k++)
        free(m->sub_paths[k]);
    free(m->name);
    free(m);
}

void amp_module_free(amp_module *m)
{
    if (!m)
        return;
    if (m->parent) {
        /* Its container owns it and will free it; freeing it here would
         * leave the container pointing at freed memory. */
        amp_set_error(AMP_ERR_STATE, "module_free: this %s belongs to a %s; free the container instead",
                      m->kind, m->parent->kind);
        return;
    }
    module_destroy(m);
}

/* ------------------------------------------------------------ devices */

amp_status amp_module_to(amp_module *m, amp_device dev)
{
    if (!m)
        return amp_set_error(AMP_ERR_ARG, "module_to: NULL module");
    if (backend_check(dev, "module_to") != AMP_OK)
        return amp_last_status();
    int n = amp_module_num_params(m);
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        amp_tensor *p = amp_module_param(m, i, &name);
        amp_status st = p ? amp_tensor_move(p, dev) : amp_last_status();
        if (st != AMP_OK) {
            char why[400];
            snprintf(why, sizeof why, "%s", amp_last_error());
            return amp_set_error(st, "module_to: parameter %d (%s) could not move to %s: %s", i, name ? name : "?",
                                 amp_device_name(dev), why);
        }
    }
    return AMP_OK;
}

/* Whether amp_module_to_dtype keeps module m's own parameters in f32:
 * norms, embedding tables, and the GPT's own parameters, which are its
 * token and position tables (nn/gpt.c: wte, wpe). */
static bool keeps_f32(const amp_module *m)
{
    return strcmp(m->kind, "layer_norm") == 0 || strcmp(m->kind, "embedding") == 0 || strcmp(m->kind, "gpt") == 0;
}

/* Converts the parameters of m and its children one tensor at a time
 * (converting all before swapping any would hold the whole model twice),
 * so a failure leaves the model partly converted, which the error says. */
static amp_status to_dtype_walk(amp_module *m, amp_dtype dt)
{
    for (int i = 0; i < m->n_own; i++) {
        amp_tensor *p = m->own[i];
        amp_status st = tensor_retype(p, keeps_f32(m) ? AMP_F32 : dt);
        if (st != AMP_OK)
            return st;
    }
    for (int i = 0; i < m->n_children; i++) {
        amp_status st = to_dtype_walk(m->children[i], dt);
        if (st != AMP_OK)
            return st;
    }
    return AMP_OK;
}

amp_status amp_module_to_dtype(amp_module *m, amp_dtype dt)
{
    if (!m)
        return amp_set_error(AMP_ERR_ARG, "module_to_dtype: NULL module");
    if (dt != AMP_F32 && dt != AMP_F16 && dt != AMP_BF16)
        return amp_set_error(AMP_ERR_DTYPE, "module_to_dtype: dtype %s is not f32, f16 or bf16",
                             (unsigned)dt < AMP_DTYPE_COUNT ? amp_dtype_name(dt) : "(invalid)");
    amp_status st = to_dtype_walk(m, dt);
    if (st != AMP_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", amp_last_error());
        return amp_set_error(st, "module_to_dtype: %s (some parameters may already be %s)", why,
                             amp_dtype_name(dt));
    }
    return AMP_OK;
}
