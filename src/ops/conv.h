/*
 * conv.h - conv2d's tuning knob, for tests.
 *
 * conv2d lowers a group of images to one column matrix and runs one GEMM
 * per group, each group on one thread; a group is as many images as fit a
 * per-thread scratch budget (default 1 MiB, about a core's L2 share).
 * Tests lower the budget to reach the many-group paths with small inputs.
 *
 * Defines: conv_set_cols_budget.
 */
#ifndef AMPC_CONV_H
#define AMPC_CONV_H

#include <stddef.h>

/* Sets the per-thread scratch budget in bytes (0 restores the default)
 * and returns the previous one. Not thread-safe: call it between steps. */
size_t conv_set_cols_budget(size_t bytes);

#endif
