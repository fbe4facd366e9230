/*
 * mem_ledger.c - the bytes per memory category of each caching allocator,
 * and per phase its peak and that peak's makeup (mem_ledger.h).
 *
 * A phase's peak is updated when a block is handed out in that phase and
 * when the process enters it (what is held at entry counts too), so a
 * phase that allocates nothing still shows what it held. The overall peak
 * is the largest phase peak: every increase of the total happens in some
 * phase.
 */
#include "record/mem_ledger.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define MAX_LEDGERS 4

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static mem_ledger *ledgers[MAX_LEDGERS];
static int n_ledgers;
static _Atomic int process_phase;

mem_ledger mem_host_ledger;

amp_phase mem_process_phase(void) { return (amp_phase)atomic_load_explicit(&process_phase, memory_order_relaxed); }

/* mu held. */
static void note_phase_locked(mem_ledger *l, amp_phase p)
{
    if (l->total > l->phase_peak[p]) {
        l->phase_peak[p] = l->total;
        memcpy(l->phase_by[p], l->cur, sizeof l->cur);
    }
}

static void register_locked(mem_ledger *l)
{
    if (l->registered)
        return;
    l->registered = true;
    if (n_ledgers < MAX_LEDGERS)
        ledgers[n_ledgers++] = l;
}

void mem_ledger_add(mem_ledger *l, amp_mem_category c, size_t n)
{
    amp_phase p = mem_process_phase();
    pthread_mutex_lock(&mu);
    register_locked(l);
    l->cur[c] += n;
    if (l->cur[c] > l->peak[c])
        l->peak[c] = l->cur[c];
    l->total += n;
    if (l->total > l->total_peak)
        l->total_peak = l->total;
    if (l->total > l->phase_peak[p]) {
        l->phase_peak[p] = l->total;
        memcpy(l->phase_by[p], l->cur, sizeof l->cur);
    }
    pthread_mutex_unlock(&mu);
}

void mem_ledger_sub(mem_ledger *l, amp_mem_category c, size_t n)
{
    pthread_mutex_lock(&mu);
    l->cur[c] -= n;
    l->total -= n;
    pthread_mutex_unlock(&mu);
}

void mem_ledger_move(mem_ledger *l, amp_mem_category from, amp_mem_category to, size_t n)
{
    if (from == to)
        return;
    pthread_mutex_lock(&mu);
    l->cur[from] -= n;
    l->cur[to] += n;
    if (l->cur[to] > l->peak[to])
        l->peak[to] = l->cur[to];
    pthread_mutex_unlock(&mu);
}

void mem_ledger_reset_peak(mem_ledger *l)
{
    amp_phase p = mem_process_phase();
    pthread_mutex_lock(&mu);
    memcpy(l->peak, l->cur, sizeof l->cur);
    l->total_peak = l->total;
    memset(l->phase_peak, 0, sizeof l->phase_peak);
    memset(l->phase_by, 0, sizeof l->phase_by);
    l->phase_peak[p] = l->total;
    memcpy(l->phase_by[p], l->cur, sizeof l->cur);
    pthread_mutex_unlock(&mu);
}

void mem_ledger_read(mem_ledger *l, amp_memory_categories *out)
{
    pthread_mutex_lock(&mu);
    memcpy(out->current, l->cur, sizeof l->cur);
    memcpy(out->peak, l->peak, sizeof l->peak);
    out->total = l->total;
    out->total_peak = l->total_peak;
    memcpy(out->phase_peak, l->phase_peak, sizeof l->phase_peak);
    memcpy(out->phase_peak_by, l->phase_by, sizeof l->phase_by);
    pthread_mutex_unlock(&mu);
}

void mem_ledger_current(mem_ledger *l, size_t cur[AMP_MEM_CATEGORY_COUNT])
{
    pthread_mutex_lock(&mu);
    memcpy(cur, l->cur, sizeof l->cur);
    pthread_mutex_unlock(&mu);
}

void mem_ledger_totals(mem_ledger *l, size_t *total, size_t *total_peak)
{
    pthread_mutex_lock(&mu);
    *total = l->total;
    *total_peak = l->total_peak;
    pthread_mutex_unlock(&mu);
}

void mem_phase_note(amp_phase p)
{
    if (p < 0 || p >= AMP_PHASE_COUNT)
        return;
    atomic_store_explicit(&process_phase, (int)p, memory_order_relaxed);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_ledgers; i++)
        if (ledgers[i]->total > 0)
            note_phase_locked(ledgers[i], p);
    pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------ the thread's categories */

static _Thread_local int alloc_category = AMP_MEM_WORKSPACE;
static _Thread_local int tensor_category = AMP_MEM_TEMPORARIES;

/* Sets *cur to c when c is a category (else leaves it); returns the old. */
static amp_mem_category swap_category(int *cur, amp_mem_category c)
{
    int old = *cur;
    if (c >= 0 && c < AMP_MEM_CATEGORY_COUNT)
        *cur = c;
    return (amp_mem_category)old;
}

amp_mem_category mem_alloc_category(void) { return (amp_mem_category)alloc_category; }
amp_mem_category mem_alloc_category_set(amp_mem_category c) { return swap_category(&alloc_category, c); }

amp_mem_category mem_tensor_category(void) { return (amp_mem_category)tensor_category; }
amp_mem_category amp_memory_set_category(amp_mem_category c) { return swap_category(&tensor_category, c); }
