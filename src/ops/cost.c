/*
 * cost.c - what the rows' cost functions share. Each row of op_list.h
 * names its own cost function, written beside its forward in its family's
 * file; a row cannot leave it out (ops.h declares it from the row), and
 * test_backend_ops checks that every row counts something.
 *
 * Conventions (torch.utils.flop_counter's for the products: a
 * multiply-add is 2 FLOPs): a count is the work the op asks for, not what
 * a kernel happens to do (a GEMM's zero padding, a causal mask's skipped
 * blocks), from the inputs' shapes and the result's (n->out_shape). A
 * backward counts only the gradients it makes: those of the inputs that
 * need one. Data movement (reshape, permute, cat, narrow, to, argmax, an
 * embedding's gather) is 0 FLOPs; its bytes still count.
 *
 * Bytes: a forward reads every input and writes the result; a backward
 * reads gout and every input and writes each gradient it makes.
 */
#include "ops/ops.h"

static double bytes_of(const amp_tensor *t)
{
    return t ? (double)t->numel * (double)amp_dtype_size(t->dtype) : 0.0;
}

bool cost_needs(const node *n, int i) { return i < n->n_in && in_needs_grad(n, i); }

double cost_bytes(const node *n, bool backward)
{
    double b = (double)shape_numel(n->out_shape) * (double)amp_dtype_size(n->out_dtype);
    for (int i = 0; i < n->n_in; i++)
        b += bytes_of(n->in[i]) * (backward && cost_needs(n, i) ? 2.0 : 1.0);
    return b;
}

op_cost cost_pointwise(const node *n, bool backward)
{
    double f = 0;
    if (!backward)
        f = (double)shape_numel(n->out_shape);
    else
        for (int i = 0; i < n->n_in; i++)
            f += cost_needs(n, i) ? (double)n->in[i]->numel : 0.0;
    return (op_cost){f, cost_bytes(n, backward)};
}

op_cost cost_moves_data(const node *n, bool backward) { return (op_cost){0.0, cost_bytes(n, backward)}; }

op_cost cost_product(const node *n, bool backward, double prod, double ew, bool bias, bool act)
{
    double f;
    if (!backward)
        f = prod + (bias ? ew : 0) + (act ? ew : 0);
    else
        f = prod * (cost_needs(n, 0) + cost_needs(n, 1)) + (bias && cost_needs(n, 2) ? ew : 0) + (act ? ew : 0);
    return (op_cost){f, cost_bytes(n, backward)};
}
