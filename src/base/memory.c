/*
 * memory.c - aligned allocation for tensor storage and kernel scratch: a
 * caching allocator, with the byte counts behind amp_memory_get_stats().
 *
 * A training step allocates and frees the same sizes every time. Taking
 * fresh memory from the OS each step costs a page fault per 4 KiB on first
 * touch (~12 us each on this machine's kind), so freed blocks go to a free
 * list per size class and the next request of that class reuses them: after
 * the first step, a step takes no fresh memory. Size classes are multiples
 * of 64 bytes up to 4 KiB, then four per power of two (at most 25% slack).
 *
 * Each block carries a 64-byte header (its class size, its memory category
 * and the free-list link), keeping the payload 64-byte aligned for AVX-512
 * rows. The bytes in use per category are in mem_host_ledger
 * (record/mem_ledger.h).
 *
 * Under the sanitizers the cache is off (AMPC_NO_CACHE), so AddressSanitizer
 * still sees every use after free.
 */
#include "base/base.h"
#include "record/mem_ledger.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define HEADER 64
#define SMALL_LIMIT 4096
#define N_SMALL (SMALL_LIMIT / 64)
#define N_CLASSES (N_SMALL + 4 * 64)

typedef struct block {
    size_t size;        /* the class size: what this block can hold */
    struct block *next; /* free-list link while cached */
    int category;       /* amp_mem_category while in use */
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *free_lists[N_CLASSES];
static size_t cached_bytes, n_allocs, n_os_allocs; /* bytes in use: mem_host_ledger */

/* The class of a request of n bytes, and the size that class holds. */
static int size_class(size_t n, size_t *class_size)
{
    if (n <= SMALL_LIMIT) {
        size_t c = (n + 63) / 64;
        if (c == 0)
            c = 1;
        *class_size = c * 64;
        return (int)c - 1;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^e < n <= 2^(e+1) */
    size_t base = (size_t)1 << e, step = base / 4;
    size_t q = (n - base + step - 1) / step; /* 1..4 quarters above 2^e */
    *class_size = base + q * step;
    return N_SMALL + (e - 12) * 4 + (int)(q - 1);
}

void *amp_alloc(size_t nbytes)
{
    size_t csize;
    if (nbytes > ((size_t)1 << 60)) {
        amp_set_error(AMP_ERR_MEMORY, "out of memory allocating %zu bytes", nbytes);
        return NULL;
    }
    int c = size_class(nbytes, &csize);
    (void)c; /* unused when the cache is off */
    block *b = NULL;
    pthread_mutex_lock(&lock);
#ifndef AMPC_NO_CACHE
    if (c >= 0 && c < N_CLASSES && free_lists[c]) {
        b = free_lists[c];
        free_lists[c] = b->next;
        cached_bytes -= csize;
    }
#endif
    pthread_mutex_unlock(&lock);
    if (!b) {
        b = aligned_alloc(64, csize + HEADER);
        if (!b) {
            amp_set_error(AMP_ERR_MEMORY, "out of memory allocating %zu bytes", nbytes);
            return NULL;
        }
        b->size = csize;
        pthread_mutex_lock(&lock);
        n_os_allocs++;
        pthread_mutex_unlock(&lock);
    }
    b->category = mem_alloc_category();
    pthread_mutex_lock(&lock);
    n_allocs++;
    mem_ledger_add(&mem_host_ledger, (amp_mem_category)b->category, csize);
    pthread_mutex_unlock(&lock);
    return (char *)b + HEADER;
}

void amp_free(void *ptr)
{
    if (!ptr)
        return;
    block *b = (block *)((char *)ptr - HEADER);
    size_t csize;
    int c = size_class(b->size, &csize);
    (void)c;
    pthread_mutex_lock(&lock);
    mem_ledger_sub(&mem_host_ledger, (amp_mem_category)b->category, b->size);
#ifndef AMPC_NO_CACHE
    if (c >= 0 && c < N_CLASSES) {
        b->next = free_lists[c];
        free_lists[c] = b;
        cached_bytes += b->size;
        b = NULL;
    }
#endif
    pthread_mutex_unlock(&lock);
    free(b);
}

void amp_memory_empty_cache(void)
{
    pthread_mutex_lock(&lock);
    for (int c = 0; c < N_CLASSES; c++) {
        while (free_lists[c]) {
            block *b = free_lists[c];
            free_lists[c] = b->next;
            cached_bytes -= b->size;
            free(b);
        }
    }
    pthread_mutex_unlock(&lock);
}

amp_memory_stats amp_memory_get_stats(void)
{
    pthread_mutex_lock(&lock);
    amp_memory_stats s = {0, 0, n_allocs, cached_bytes, n_os_allocs};
    mem_ledger_totals(&mem_host_ledger, &s.current, &s.peak);
    pthread_mutex_unlock(&lock);
    return s;
}

void amp_memory_reset_peak(void)
{
    mem_ledger_reset_peak(&mem_host_ledger);
}

/* ------------------------------------------------------------ categories */

static const char *const category_names[AMP_MEM_CATEGORY_COUNT] = {
    [AMP_MEM_PARAMETERS] = "parameters",   [AMP_MEM_GRADIENTS] = "gradients",
    [AMP_MEM_OPTIMIZER] = "optimizer state", [AMP_MEM_ACTIVATIONS] = "activations",
    [AMP_MEM_CAST_CACHE] = "cast cache",   [AMP_MEM_TEMPORARIES] = "temporaries",
    [AMP_MEM_WORKSPACE] = "workspace",     [AMP_MEM_DATA] = "data",
};

const char *amp_memory_category_name(amp_mem_category c)
{
    return c >= 0 && c < AMP_MEM_CATEGORY_COUNT ? category_names[c] : NULL;
}

size_t mem_host_block_size(size_t nbytes)
{
    size_t csize;
    size_class(nbytes, &csize);
    return csize;
}

void mem_host_retag(void *p, amp_mem_category c)
{
    if (!p || c < 0 || c >= AMP_MEM_CATEGORY_COUNT)
        return;
    block *b = (block *)((char *)p - HEADER);
    pthread_mutex_lock(&lock);
    mem_ledger_move(&mem_host_ledger, (amp_mem_category)b->category, c, b->size);
    b->category = c;
    pthread_mutex_unlock(&lock);
}

amp_status mem_host_categories(amp_memory_categories *out)
{
    if (!out)
        return amp_set_error(AMP_ERR_ARG, "memory_get_categories: NULL output");
    mem_ledger_read(&mem_host_ledger, out);
    return AMP_OK;
}
