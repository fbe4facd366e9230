/*
 * memory.c - aligned allocation for tensor storage.
 *
 * 64-byte alignment lets AVX-512 kernels use aligned loads on whole rows.
 */
#include "base/base.h"

#include <stdlib.h>

void *amp_alloc(size_t nbytes)
{
    size_t n = (nbytes + 63) & ~(size_t)63;
    if (n == 0)
        n = 64;
    void *p = aligned_alloc(64, n);
    if (!p)
        amp_set_error(AMP_ERR_MEMORY, "out of memory allocating %zu bytes", nbytes);
    return p;
}

void amp_free(void *p) { free(p); }
