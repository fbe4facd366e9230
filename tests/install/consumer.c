/* A user's program built against an installed ampc. */
#include <ampc.h>
#include <stdio.h>

int main(void)
{
    amp_tensor *a = amp_full(AMP_SHAPE(2, 2), AMP_F32, 1.5);
    amp_tensor *s = amp_sum_all(amp_matmul(a, a));
    double v = amp_item(s);
    /* Reaches the CUDA backend in a build that has one (in a static link,
     * the CUDA runtime must then resolve); false without a GPU. */
    bool cuda = amp_cuda_available();
    printf("ampc %s: sum = %g, cuda %s\n", AMPC_VERSION, v, cuda ? "available" : "not available");
    amp_temps_free();
    amp_tensor_free(a);
    return v == 18.0 ? 0 : 1;
}
