// op_params_cxx.cc - src/ops/op_params.h compiled as C++, as nvcc compiles
// the headers a .cu includes: the ops' params structs stay plain C that
// C++ compiles too. Compiled (not run) by the op_params_cxx test.
#include "ops/op_params.h"

static_assert(sizeof(op_params) >= sizeof(attention_params), "the union holds every family");

int op_params_cxx_probe(void)
{
    op_params p = {};
    p.conv2d.stride = 2;
    p.conv2d.act = OP_ACT_RELU;
    const reduce_params r = {{1, {0}}, true};
    return (int)(p.conv2d.stride + r.dims.n);
}
