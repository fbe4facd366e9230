/*
 * memcheck.h - the estimate against the memory available (memcheck.c):
 * --dry-run's table, the refusal before a run that cannot fit.
 *
 * Defines: mem_budget, mem_budget_get, mem_budget_cgroups,
 * mem_budget_device, mem_env_check, mem_parse_bytes, mem_rss, mem_check.
 */
#ifndef AMPC_MEMCHECK_H
#define AMPC_MEMCHECK_H

#include "data.h"
#include "settings.h"
#include "train_opts.h"

/* What the whole process may hold, and where that number came from. */
typedef struct {
    bool known;
    uint64_t bytes;
    char source[4096];
} mem_budget;

/* The smallest of AMPC_MEMORY_LIMIT, the cgroup (v2, v1) limits and
 * MemAvailable, each made a budget for the whole process. */
void mem_budget_get(mem_budget *b);
/* Takes the cgroup limits (v2, then v1's memory controller) into b, for
 * a process with rss resident bytes whose mountinfo and cgroup files are
 * in proc ("/proc/self"; another directory in tests). */
void mem_budget_cgroups(mem_budget *b, const char *proc, uint64_t rss);
/* The cuda device's: its free memory (cudaMemGetInfo) and what ampc's
 * cache holds; not known without a GPU. */
void mem_budget_device(mem_budget *b);
/* The environment variables of the memory check: AMPC_MEMORY_LIMIT a
 * number of bytes, AMPC_NO_MEMORY_CHECK 0 or 1 (unset or empty: the
 * defaults). -1, or EXIT_USAGE after a message naming the variable. */
int mem_env_check(void);
/* Bytes in "600000000", "600M", "4G", "512KiB"; false when not. */
bool mem_parse_bytes(const char *s, uint64_t *out);
/* This process's resident memory (VmRSS). */
uint64_t mem_rss(void);
/* After the data is loaded, before the model: --dry-run prints the
 * estimate and returns 0; otherwise -1 to go on, or 1 after a message
 * when the run cannot fit. */
int mem_check(const train_opts *o, const run_info *ri, const run_data *rd, bool dry_run);

#endif
