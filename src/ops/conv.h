/*
 * conv.h - conv2d's tuning knob, for tests.
 *
 * conv2d lowers a whole group of images to one column matrix and runs one
 * GEMM per group; the group is as many images as fit in a byte budget for
 * the columns. Tests lower the budget to reach the many-group paths with
 * small inputs.
 *
 * Defines: conv_set_cols_budget.
 */
#ifndef AMPC_CONV_H
#define AMPC_CONV_H

#include <stddef.h>

/* Sets the column budget in bytes (0 restores the default) and returns
 * the previous one. Not thread-safe: call it between steps. */
size_t conv_set_cols_budget(size_t bytes);

#endif
