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
    /* Reaches the communication layer: in a build with MPI a static link
     * must resolve MPI (Libs.private, find_dependency). One process, no
     * launcher: a world of one rank. */
    int world = amp_dist_world_size();
    printf("ampc %s: sum = %g, cuda %s, world %d\n", AMPC_VERSION, v, cuda ? "available" : "not available", world);
    amp_temps_free();
    amp_tensor_free(a);
    return v == 18.0 && world == 1 ? 0 : 1;
}
