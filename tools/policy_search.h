/*
 * policy_search.h - `ampc policy search` (policy_search.c): the fastest
 * autocast policy whose training stays within a tolerance of fp32's.
 *
 * Defines: policy_search_options, policy_search_parse, policy_search_main,
 * POLICY_SEARCH_MAX_MOVES, search_move, search_outcome, search_plan,
 * policy_search_greedy.
 */
#ifndef AMPC_POLICY_SEARCH_H
#define AMPC_POLICY_SEARCH_H

#include "opts.h"

#include <stdbool.h>
#include <stdint.h>

extern const opt_cmd policy_search_options;
/* The command line alone (for tests and fuzzers): -1 or an exit code. */
int policy_search_parse(int argc, char **argv);
/* argv: the arguments after "policy search". The exit code. */
int policy_search_main(int argc, char **argv);

#define POLICY_SEARCH_MAX_MOVES 512

/* One move of the search: a module kept in f32 (op < 0: path) or an op
 * put in f32 (op, amp_op_name's index). */
typedef struct {
    char path[192];
    int op;
    int64_t weight; /* the parameters it keeps in f32 (an op: the whole model's): its cost */
    double score;   /* the ordering's measurement: lower is tried first; infinity: changes nothing seen */
} search_move;

/* A trial's result: its final loss and step time. */
typedef struct {
    double loss, step_ms;
} search_outcome;

/* What the greedy search works with: the fp32 run's final loss, the
 * tolerance (relative), the most trials, and the trial itself: trains
 * under the policy of moves m[pick[0 .. n)], -1 with *out filled, or an
 * exit code. trials counts those run. */
typedef struct {
    double ref_loss, tolerance;
    int max_trials;
    int (*trial)(void *ctx, const search_move *m, const int *pick, int n, search_outcome *out);
    void *ctx;
    int trials;
} search_plan;

/* The greedy search over moves m[0 .. nm), in their order (best first):
 * each move not inside a module already kept is tried added to the
 * policy so far, kept when it brings the loss closer to ref_loss, until
 * the policy is within the tolerance (or a move scored infinity is
 * reached while the loss is finite, or max_trials); then each kept move
 * but the last is dropped where the policy stays within without it.
 * full is the empty policy's outcome. pick[0 .. *n) gets the policy,
 * *best its outcome, *found whether it is within. -1 or the trial's exit
 * code. */
int policy_search_greedy(search_plan *sp, const search_move *m, int nm, search_outcome full, int *pick, int *n,
                         search_outcome *best, bool *found);

#endif
