/*
 * policy_file.h - an autocast policy: the modules kept in f32 and the
 * per-op category overrides a run trains with, and the JSON file that
 * holds it (`train --policy FILE`, written by `ampc policy search`):
 *
 *   {"format": "ampc-autocast-policy", "version": 1,
 *    "modules": {"h.0.attn": "fp32", "ln_f": "fp32"},
 *    "ops": {"linear": "fp32", "softmax": "lower"}}
 *
 * "modules" maps module paths (PyTorch's named_modules() names) to
 * "fp32", the only value; "ops" maps op-table names (`ampc policy` lists
 * them) to the autocast category the op gets: lower, fp32, fp32_out,
 * promote or none (run in its inputs' dtype). Both are optional; "format"
 * and "version" are required. Unknown keys are refused (a misspelt
 * "module" would otherwise be ignored silently).
 *
 * Applying a policy sets the library's fp32 module set
 * (amp_autocast_set_fp32_modules) and each op's category on the run's
 * device (amp_autocast_set_category); policy_reset restores both.
 *
 * Defines: POLICY_MAX_MODULES, POLICY_MAX_OPS, policy, policy_parse,
 * policy_read, policy_to_json, policy_write, policy_add_module,
 * policy_set_op, policy_module_list, policy_op_list, policy_apply,
 * policy_reset, policy_free, policy_category_parse, policy_category_name.
 */
#ifndef AMPC_POLICY_FILE_H
#define AMPC_POLICY_FILE_H

#include "ampc.h"

#include <stddef.h>
#include <stdint.h>

#define POLICY_MAX_MODULES 256
#define POLICY_MAX_OPS 256 /* at least the op table's rows */

typedef struct {
    int n_modules;
    char *modules[POLICY_MAX_MODULES]; /* owned */
    int n_ops;
    struct {
        int op;                /* amp_op_name's index */
        amp_cast_category cat;
    } ops[POLICY_MAX_OPS];
} policy;

/* Parses text[0..len) into *p (zeroed first). AMP_OK, or AMP_ERR_FORMAT
 * with a message that starts with where and names the byte offset
 * (malformed JSON) or the key that is wrong (an unknown op or category, a
 * module path that is empty or repeated). *p is empty on failure. */
amp_status policy_parse(const char *text, size_t len, const char *where, policy *p);
/* Reads and parses the file at path; *hash (may be NULL) gets the FNV-1a
 * 64 hash of its bytes, which the run's log records. AMP_ERR_IO when it
 * cannot be read, AMP_ERR_FORMAT as policy_parse. */
amp_status policy_read(const char *path, policy *p, uint64_t *hash);
/* The policy as the file's JSON (malloc'd, newline-terminated), modules
 * and ops in the order they were added; NULL when out of memory. */
char *policy_to_json(const policy *p);
/* Writes policy_to_json(p) to path. AMP_ERR_IO naming the file. */
amp_status policy_write(const char *path, const policy *p);
/* Adds a module path (copied; a repeat is a no-op) / sets op's category
 * (replacing an earlier one). AMP_ERR_ARG for an empty path, an unknown
 * op, or a full table; AMP_ERR_MEMORY. */
amp_status policy_add_module(policy *p, const char *path);
amp_status policy_set_op(policy *p, const char *op, amp_cast_category cat);
/* The modules as "a,b,c" / the ops as "linear=fp32,softmax=lower" into buf
 * ("" when none); truncated to n bytes. Returns buf. */
const char *policy_module_list(const policy *p, char *buf, size_t n);
const char *policy_op_list(const policy *p, char *buf, size_t n);
/* Makes p the library's policy on device type dev: its modules the fp32
 * set, every op's category the built-in one unless p overrides it. */
amp_status policy_apply(const policy *p, amp_device dev);
/* The built-in policy again: no module kept in f32, no op overridden. */
void policy_reset(amp_device dev);
void policy_free(policy *p);
/* A category by its file name ("lower", "fp32", "fp32_out", "promote",
 * "none"); AMP_CAST_COUNT when s names none. */
amp_cast_category policy_category_parse(const char *s);
/* The file name of a category ("none" for AMP_CAST_NONE). */
const char *policy_category_name(amp_cast_category c);

#endif
