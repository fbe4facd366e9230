/*
 * mem_ledger.h - the bytes of a caching allocator by memory category
 * (amp_mem_category): current and peak per category, and per phase the
 * allocator's peak within that phase and how it was made up. One ledger
 * per allocator (the host's, mem_host_ledger, kept by base/memory.c; the
 * CUDA device's in runtime.cu); the allocator records each block's
 * category beside its size and tells the ledger what it hands out, takes
 * back and retags, so the categories always sum to its total.
 *
 * The ledger keeps the process's current phase too (set by the phase
 * calls through mem_phase_note): it is what every addition counts toward.
 *
 * Which category a new block takes: the calling thread's allocation
 * category, AMP_MEM_WORKSPACE (what a backend allocates for itself)
 * unless the tensor layer is making a tensor's storage, when it is the
 * thread's tensor category (amp_memory_set_category).
 */
#ifndef AMPC_MEM_LEDGER_H
#define AMPC_MEM_LEDGER_H

#include "ampc.h"

#include <stdbool.h>

typedef struct mem_ledger {
    size_t cur[AMP_MEM_CATEGORY_COUNT], peak[AMP_MEM_CATEGORY_COUNT];
    size_t total, total_peak;
    size_t phase_peak[AMP_PHASE_COUNT];
    size_t phase_by[AMP_PHASE_COUNT][AMP_MEM_CATEGORY_COUNT];
    bool registered; /* in the list mem_phase_note walks */
} mem_ledger;
/* A ledger is a zero-initialised static; every function takes one lock
 * shared by all ledgers (an allocator may hold its own lock around them). */

/* The host allocator's ledger (base/memory.c records into it; the
 * profiler's memory counters read it). */
extern mem_ledger mem_host_ledger;

/* n more bytes of category c, in the process's current phase. */
void mem_ledger_add(mem_ledger *l, amp_mem_category c, size_t n);
void mem_ledger_sub(mem_ledger *l, amp_mem_category c, size_t n);
/* n bytes of category from now counted as category to. */
void mem_ledger_move(mem_ledger *l, amp_mem_category from, amp_mem_category to, size_t n);
/* Peaks restart from what is in use now (amp_memory_reset_peak). */
void mem_ledger_reset_peak(mem_ledger *l);
void mem_ledger_read(mem_ledger *l, amp_memory_categories *out);
void mem_ledger_current(mem_ledger *l, size_t cur[AMP_MEM_CATEGORY_COUNT]);
/* The bytes in use and their peak: the allocator's own figures
 * (amp_memory_get_stats' current and peak). */
void mem_ledger_totals(mem_ledger *l, size_t *total, size_t *total_peak);
/* The process entered phase p (profile.c, at each phase change): p is
 * the process's phase from now, and what is in use now counts toward p's
 * peak in every ledger. */
void mem_phase_note(amp_phase p);
/* The process's current phase (the last mem_phase_note). */
amp_phase mem_process_phase(void);

/* The calling thread's allocation category (see above): set returns the
 * previous one. */
amp_mem_category mem_alloc_category(void);
amp_mem_category mem_alloc_category_set(amp_mem_category c);
/* The calling thread's tensor category (amp_memory_set_category). */
amp_mem_category mem_tensor_category(void);

#endif
