/*
 * env.h - the environment variables the library reads (env.c's table) and
 * their values: the readers take them from here, amp_check_environment
 * (ampc.h) refuses a value outside the table.
 *
 * Defines: env_var, env_choice, env_number, env_value_ok, env_name.
 */
#ifndef AMPC_ENV_H
#define AMPC_ENV_H

#include "ampc.h"

typedef enum {
    ENV_CPU_LIB,       /* AMPC_CPU_LIB: auto | own | onednn */
    ENV_GEMM_F16,      /* AMPC_GEMM_F16: auto | widen | split */
    ENV_ONEDNN_SPLIT,  /* AMPC_ONEDNN_SPLIT: 0 | 1 */
    ENV_KEEP_CASTS,    /* AMPC_KEEP_CASTS: 0 | 1 */
    ENV_SPIN_US,       /* AMPC_SPIN_US: 0 .. 1e6 (integer) */
    ENV_DIST_TIMEOUT,  /* AMPC_DIST_TIMEOUT: 1e-3 .. 1e7 */
    ENV_COUNT
} env_var;

/* The index of v's value among its choices (in the table's order), or
 * dflt when it is unset, empty or not a choice. */
int env_choice(env_var v, int dflt);
/* v's value as a number, or dflt when it is unset, empty or not a number
 * in its range. */
double env_number(env_var v, double dflt);
/* Whether text is a value v takes (the empty text, "unset", is). */
bool env_value_ok(env_var v, const char *text);
const char *env_name(env_var v);

#endif
