/*
 * policy_search.h - `ampc policy search` (policy_search.c): the fastest
 * autocast policy whose training stays within a tolerance of fp32's.
 *
 * Defines: policy_search_options, policy_search_parse, policy_search_main.
 */
#ifndef AMPC_POLICY_SEARCH_H
#define AMPC_POLICY_SEARCH_H

#include "opts.h"

extern const opt_cmd policy_search_options;
/* The command line alone (for tests and fuzzers): -1 or an exit code. */
int policy_search_parse(int argc, char **argv);
/* argv: the arguments after "policy search". The exit code. */
int policy_search_main(int argc, char **argv);

#endif
