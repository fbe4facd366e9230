/*
 * optim_rig.h - what test_optim.c and test_clip.c share: setting a
 * parameter's gradient the way backward leaves one, freeing a list.
 * Header-only (static inline), as tests/cuda_rig.h.
 */
#ifndef AMPC_TEST_OPTIM_RIG_H
#define AMPC_TEST_OPTIM_RIG_H

#include "ampc.h"
#include "tensor/tensor.h"

/* Replaces p's gradient by the values g (converted to p's dtype), the way
 * backward leaves one. */
static inline void set_grad(amp_tensor *p, const float *g)
{
    amp_tensor_clear_grad(p);
    amp_tensor *f = amp_from_data(p->shape, AMP_F32, g);
    p->grad = tensor_convert(f, p->dtype);
    amp_tensor_free(f);
}

static inline void free_params(amp_tensor **ps, int n)
{
    for (int i = 0; i < n; i++)
        amp_tensor_free(ps[i]);
}

#endif
