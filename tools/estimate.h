/*
 * estimate.h - the memory a run will need, from its settings and shapes
 * (estimate.c).
 *
 * Defines: mem_cat (MEM_*), MEM_TOLERANCE, mem_estimate, mem_estimate_run,
 * mem_cat_name, mem_param_count, mem_block.
 */
#ifndef AMPC_ESTIMATE_H
#define AMPC_ESTIMATE_H

#include "data.h"
#include "settings.h"
#include "train_opts.h"

/* The estimate's categories (estimate.c's head comment says what each
 * holds). */
typedef enum {
    MEM_DATA, MEM_PARAMS, MEM_GRADS, MEM_OPTIM, MEM_CASTS, MEM_ACTS, MEM_ACT_GRADS, MEM_WORK, MEM_PROGRAM,
    MEM_CATS
} mem_cat;

/* How far the estimate may be from the measured peak, either way (tests/
 * test_cli_memory.c holds it to this; memcheck.c refuses a run whose
 * total does not fit, and warns when total * (1 - MEM_TOLERANCE) does not). */
#define MEM_TOLERANCE 0.10

typedef struct {
    uint64_t host[MEM_CATS]; /* bytes per category, host memory */
    uint64_t dev[MEM_CATS];  /* --device cuda: on the GPU */
    uint64_t host_total, dev_total;
    uint64_t tracked;      /* of host_total, what amp_memory_get_stats counts (the 'peak memory' line) */
    uint64_t tracked_data; /* of that, the data set's tensors */
    int64_t params;        /* parameter elements */
    bool eval_peak;        /* the peak is in the evaluation pass (a batch of eval_batch), not a training step */
    int64_t eval_batch;
} mem_estimate;

/* The peak of a run of o on rd's data (shapes in ri), with `threads`
 * kernel threads; no model is built. host[MEM_PROGRAM] is left 0: it is
 * measured (memcheck.c). */
void mem_estimate_run(const train_opts *o, const run_info *ri, const run_data *rd, int threads, mem_estimate *e);
const char *mem_cat_name(mem_cat c);
/* Parameter elements of o's model. */
int64_t mem_param_count(const train_opts *o, const run_info *ri);
/* The bytes the caching allocator takes for a request of n (base/memory.c's
 * size classes). */
uint64_t mem_block(uint64_t n);

#endif
