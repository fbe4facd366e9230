/*
 * memcheck.c - the memory check before a run builds its model: the
 * estimate (estimate.c) against the memory this process may take, for
 * `ampc train --dry-run` (a table) and before a real run (a refusal with
 * what to try, instead of the OOM killer's silent kill).
 *
 * The memory available, the smallest of:
 *   AMPC_MEMORY_LIMIT=BYTES  a cap given by hand (K, M, G suffixes: KiB,
 *                            MiB, GiB): for tests, and users who want one
 *   cgroup v2                memory.max - memory.current, for the process's
 *                            cgroup and each parent that sets a limit
 *   cgroup v1                memory.limit_in_bytes - memory.usage_in_bytes
 *   /proc/meminfo            MemAvailable
 * A cgroup's usage counts page cache too: its inactive file pages (which
 * the kernel reclaims first) are added back. The figures from the kernel
 * are what is left now, so this process's own resident memory (the data,
 * already loaded) is added to make them a budget for the whole process,
 * which is what the estimate's total is. AMPC_MEMORY_LIMIT is that budget
 * itself.
 *
 * With --device cuda the device's part is checked too, against the
 * device's free memory (cudaMemGetInfo) plus what ampc's device cache
 * already holds.
 *
 * The estimate is within MEM_TOLERANCE of the measured peak (tests/
 * test_cli_memory.c; the device's part: tests/test_cuda_cli.c, on
 * cudaemu), and its total was within 8% of the resident memory measured
 * (docs/memory.md: untouched size-class slack makes it high, the process's
 * growth after the check low; low more often). So a run is refused when
 * the estimate exceeds the budget: a clear refusal beats the OOM killer's
 * silent kill, and --no-memory-check is one option away. Within
 * MEM_TOLERANCE below the budget it goes on after a warning.
 * --no-memory-check (or AMPC_NO_MEMORY_CHECK=1) skips the check.
 */
#include "memcheck.h"
#include "dist_cli.h"
#include "estimate.h"
#include "trainer.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MIB (1024.0 * 1024.0)

/* The first number in file path (read as text), or false. */
static bool read_u64(const char *path, uint64_t *v, bool *unlimited)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char buf[64] = "";
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok)
        return false;
    if (unlimited)
        *unlimited = strncmp(buf, "max", 3) == 0;
    if (unlimited && *unlimited)
        return true;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (end == buf || errno)
        return false;
    *v = x;
    return true;
}

/* The number after key in file path's line "key N" (key, then a space or a
 * tab: cgroups' "inactive_file N", /proc's "VmRSS:\t N kB"), or 0. */
static uint64_t read_keyed(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[256];
    size_t n = strlen(key);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && (line[n] == ' ' || line[n] == '\t')) {
            v = strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* /proc's "Key:  1234 kB" lines, in bytes; 0 when absent. */
static uint64_t proc_kb(const char *path, const char *key) { return read_keyed(path, key) * 1024; }

uint64_t mem_rss(void) { return proc_kb("/proc/self/status", "VmRSS:"); }

bool mem_parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !isdigit((unsigned char)*s))
        return false;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno)
        return false;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1ull << 10; end++; break;
    case 'M': mult = 1ull << 20; end++; break;
    case 'G': mult = 1ull << 30; end++; break;
    case 'T': mult = 1ull << 40; end++; break;
    default: break;
    }
    if (mult > 1 && (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0))
        end += strlen(end);
    if (*end || x > UINT64_MAX / mult)
        return false;
    *out = x * mult;
    return true;
}

/* Calls match(line, ctx) on each line of proc/name until one returns
 * true; whether one did (false where the file cannot be read). */
static bool find_line(const char *proc, const char *name, bool (*match)(char *line, void *ctx), void *ctx)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", proc, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = match(line, ctx);
    fclose(f);
    return found;
}

/* What a line of mountinfo or cgroup is looked for, and where the answer
 * goes. */
typedef struct {
    bool v2;
    char *out, *root;
    size_t n, rn;
} cgroup_find;

static bool mount_line(char *line, void *ctx)
{
    const cgroup_find *c = ctx;
    char r[256], m[256], fstype[64], super[256] = "";
    const char *dash = strstr(line, " - ");
    if (!dash || sscanf(line, "%*s %*s %*s %255s %255s", r, m) != 2 ||
        sscanf(dash + 3, "%63s %*s %255s", fstype, super) < 1)
        return false;
    if (!(c->v2 ? strcmp(fstype, "cgroup2") == 0
                : strcmp(fstype, "cgroup") == 0 && (strstr(super, ",memory") || strncmp(super, "memory", 6) == 0)))
        return false;
    snprintf(c->out, c->n, "%s", m);
    snprintf(c->root, c->rn, "%s", r);
    return true;
}

/* Where hierarchy v2 or v1's memory controller is mounted, and the root
 * of that mount inside the hierarchy (proc/mountinfo). */
static bool cgroup_mount(const char *proc, bool v2, char *mnt, size_t n, char *root, size_t rn)
{
    cgroup_find c = {.v2 = v2, .out = mnt, .n = n, .root = root, .rn = rn};
    return find_line(proc, "mountinfo", mount_line, &c);
}

static bool path_line(char *line, void *ctx)
{
    const cgroup_find *c = ctx;
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
        return false;
    *c1 = *c2 = '\0';
    const char *ctl = c1 + 1; /* the controllers: none for v2 */
    if (!(c->v2 ? strcmp(line, "0") == 0 && *ctl == '\0' : strstr(ctl, "memory") != NULL))
        return false;
    snprintf(c->out, c->n, "%s", c2 + 1);
    return true;
}

/* The cgroup path of this process in hierarchy v2 ("0::/path") or v1's
 * memory controller ("4:memory:/path"), from proc/cgroup. */
static bool cgroup_path(const char *proc, bool v2, char *out, size_t n)
{
    cgroup_find c = {.v2 = v2, .out = out, .n = n};
    return find_line(proc, "cgroup", path_line, &c);
}

/* Considers a budget for the whole process: taken when smaller. */
static void consider(mem_budget *b, uint64_t bytes, const char *source)
{
    if (b->known && bytes >= b->bytes)
        return;
    b->known = true;
    b->bytes = bytes;
    snprintf(b->source, sizeof b->source, "%s", source);
}

/* The cgroup limits, from the process's cgroup up to the hierarchy's root. */
static void cgroup_budget(mem_budget *b, const char *proc, bool v2, uint64_t rss)
{
    char mnt[256], root[256], path[512];
    if (!cgroup_mount(proc, v2, mnt, sizeof mnt, root, sizeof root) || !cgroup_path(proc, v2, path, sizeof path))
        return;
    /* The path is relative to the hierarchy's root; the mount shows `root`
     * of it (a container's own cgroup, say). */
    const char *rel = path;
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0)
        rel = path + rl;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel);
    for (;;) {
        char f[1100], src[4096];
        uint64_t limit = 0, usage = 0;
        bool unlimited = false;
        snprintf(f, sizeof f, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        bool have = read_u64(f, &limit, &unlimited);
        /* v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages) */
        if (have && !unlimited && limit < ((uint64_t)1 << 62)) {
            snprintf(f, sizeof f, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
            if (read_u64(f, &usage, NULL)) {
                snprintf(f, sizeof f, "%s/memory.stat", dir);
                uint64_t cache = read_keyed(f, v2 ? "inactive_file" : "total_inactive_file");
                uint64_t left = limit > usage ? limit - usage : 0;
                left += cache < usage ? cache : 0;
                snprintf(src, sizeof src,
                         "cgroup %s %s: %s %.1f MiB - %s %.1f MiB + inactive file cache %.1f MiB, + this "
                         "process's %.1f MiB",
                         v2 ? "v2" : "v1", dir, v2 ? "memory.max" : "memory.limit_in_bytes", (double)limit / MIB,
                         v2 ? "memory.current" : "memory.usage_in_bytes", (double)usage / MIB, (double)cache / MIB,
                         (double)rss / MIB);
                consider(b, left + rss, src);
            }
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < strlen(mnt))
            break;
        *slash = '\0';
    }
}

void mem_budget_cgroups(mem_budget *b, const char *proc, uint64_t rss)
{
    cgroup_budget(b, proc, true, rss);
    cgroup_budget(b, proc, false, rss);
}

void mem_budget_get(mem_budget *b)
{
    memset(b, 0, sizeof *b);
    const uint64_t rss = mem_rss();
    char src[4096];
    uint64_t avail = proc_kb("/proc/meminfo", "MemAvailable:");
    if (avail) {
        snprintf(src, sizeof src, "/proc/meminfo: MemAvailable %.1f MiB, + this process's %.1f MiB",
                 (double)avail / MIB, (double)rss / MIB);
        consider(b, avail + rss, src);
    }
    mem_budget_cgroups(b, "/proc/self", rss);
    const char *env = getenv("AMPC_MEMORY_LIMIT");
    uint64_t cap;
    if (env && *env && mem_parse_bytes(env, &cap)) { /* (mem_env_check refused any other value) */
        snprintf(src, sizeof src, "AMPC_MEMORY_LIMIT=%s", env);
        consider(b, cap, src);
    }
}

/* The estimate's rows in decreasing size, for the message. */
static int biggest(const uint64_t *v, int *order)
{
    int n = 0;
    for (int c = 0; c < MEM_CATS; c++)
        if (v[c])
            order[n++] = c;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[order[j]] > v[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return n;
}

static void print_table(FILE *f, const char *title, const uint64_t *v, uint64_t total)
{
    fprintf(f, "%s\n  %-22s %14s %10s\n", title, "category", "bytes", "MiB");
    for (int c = 0; c < MEM_CATS; c++)
        if (v[c] || (c != MEM_CASTS && c != MEM_PROGRAM))
            fprintf(f, "  %-22s %14llu %10.1f\n", mem_cat_name((mem_cat)c), (unsigned long long)v[c],
                    (double)v[c] / MIB);
    fprintf(f, "  %-22s %14llu %10.1f\n", "total", (unsigned long long)total, (double)total / MIB);
}

void mem_budget_device(mem_budget *b)
{
    memset(b, 0, sizeof *b);
    size_t free_b = 0, total_b = 0;
    if (amp_cuda_mem_get_info(&free_b, &total_b) != AMP_OK) {
        snprintf(b->source, sizeof b->source, "%s", amp_last_error());
        amp_clear_error();
        return;
    }
    /* ampc's cache keeps freed blocks for its own reuse: they count */
    amp_memory_stats s = amp_cuda_memory_get_stats();
    b->known = true;
    b->bytes = (uint64_t)free_b + s.current + s.cached;
    snprintf(b->source, sizeof b->source,
             "cudaMemGetInfo: %.1f MiB free of %.1f MiB, + %.1f MiB this process holds or caches",
             (double)free_b / MIB, (double)total_b / MIB, (double)(s.current + s.cached) / MIB);
}

/* The fit line of the dry run for one memory. */
static void print_fit(const char *what, uint64_t total, const mem_budget *b)
{
    if (!b->known) {
        printf("%s available: unknown%s%s%s\n", what, b->source[0] ? " (" : "", b->source, b->source[0] ? ")" : "");
        return;
    }
    const double high = (double)total / (1.0 - MEM_TOLERANCE);
    printf("%s available: %.1f MiB (%s)\n", what, (double)b->bytes / MIB, b->source);
    printf("  %s: the estimate is %.0f%% of it (it is within +-%.0f%%: a run is refused when it does not fit, "
           "warned when it may not)\n",
           (double)total > (double)b->bytes ? "does not fit" : high > (double)b->bytes ? "may not fit" : "fits",
           100.0 * (double)total / (double)b->bytes, 100 * MEM_TOLERANCE);
}

/* Whether v (the estimate's rows, total) fits in b; the refusal or the
 * warning printed. */
static bool fits(const train_opts *o, const char *where, const uint64_t *v, uint64_t total, const mem_budget *b)
{
    if (!b->known || (double)total <= (double)b->bytes) {
        if (b->known && (double)total / (1.0 - MEM_TOLERANCE) > (double)b->bytes)
            fprintf(stderr, "ampc: warning: this run may not fit in %s: it needs about %.1f MiB (+-%.0f%%), %.1f MiB "
                            "are available (%s)\n",
                    where, (double)total / MIB, 100 * MEM_TOLERANCE, (double)b->bytes / MIB, b->source);
        return true;
    }
    int order[MEM_CATS];
    int n = biggest(v, order);
    fprintf(stderr, "ampc: not enough %s for this run: it needs about %.1f MiB at its peak, %.1f MiB are "
                    "available\n  (%s)\n  the biggest parts:",
            where, (double)total / MIB, (double)b->bytes / MIB, b->source);
    for (int i = 0; i < n && i < 3; i++)
        fprintf(stderr, "%s %s %.1f MiB", i ? "," : "", mem_cat_name((mem_cat)order[i]), (double)v[order[i]] / MIB);
    fprintf(stderr, "\n  try: a smaller --batch (with --accum to keep the step's size: the peak follows the "
                    "micro-batch)%s%s%s; `ampc train --dry-run` prints the estimate; --no-memory-check runs anyway\n",
            strcmp(o->precision, "fp32") == 0 ? ", --precision bf16 (16-bit activations)" : "",
            is_gpt(o) && !o->checkpoint_activations ? ", --checkpoint-activations (each block recomputed in backward)"
                                                    : "",
            is_gpt(o) ? ", a smaller model (--layers, --width, --mlp-width, --context)"
                      : strcmp(o->model, "mlp") == 0 ? ", a smaller model (--hidden)" : ", --model mlp");
    return false;
}

int mem_check(const train_opts *o, const run_info *ri, const run_data *rd, bool dry_run)
{
    const bool cuda = strcmp(o->device, "cuda") == 0;
    mem_estimate e;
    mem_estimate_run(o, ri, rd, amp_get_num_threads(), &e);
    /* What the process holds beside the library's tensors: the program,
     * its libraries, the text corpus and index arrays (malloc). Measured. */
    uint64_t rss = mem_rss(), lib = amp_memory_get_stats().current;
    uint64_t program = rss > lib ? rss - lib : 0;
    uint64_t counted = e.host[MEM_DATA] - e.tracked_data; /* malloc'd data, inside the rss already */
    e.host[MEM_PROGRAM] = program > counted ? program - counted : 0;
    e.host_total += e.host[MEM_PROGRAM];
    mem_budget b, db;
    mem_budget_get(&b);
    /* Data-parallel: this node's ranks run side by side, each with its
     * share of the host's memory (a GPU is each rank's own). */
    int local = dist_local_ranks();
    if (local > 1 && b.known) {
        b.bytes /= (uint64_t)local;
        size_t n = strlen(b.source);
        snprintf(b.source + n, sizeof b.source - n, ", divided by the %d ranks on this node", local);
    }
    memset(&db, 0, sizeof db);
    if (cuda)
        mem_budget_device(&db);
    if (dry_run) {
        char desc[256];
        printf("model %s (%lld parameters), precision %s, optim %s, batch %lld%s, %d threads\n",
               model_describe(o, ri, desc, sizeof desc), (long long)e.params, o->precision, o->optim,
               (long long)o->batch, o->accum > 1 ? " (accumulated: the same peak)" : "", amp_get_num_threads());
        char title[160];
        snprintf(title, sizeof title, "memory estimate%s, at the peak (%s):", cuda ? " on the host" : "",
                 e.eval_peak ? "the evaluation pass" : "a training step's backward");
        print_table(stdout, title, e.host, e.host_total);
        printf("of it in the library's allocator (a run's 'peak memory' line): %.1f MiB, the data set %.1f MiB\n",
               (double)e.tracked / MIB, (double)e.tracked_data / MIB);
        print_fit("host memory", e.host_total, &b);
        if (cuda) {
            print_table(stdout, "memory estimate on the cuda device (a run's 'peak device memory' line):", e.dev,
                        e.dev_total);
            print_fit("device memory", e.dev_total, &db);
        }
        fflush(stdout);
        return 0;
    }
    const char *skip = getenv("AMPC_NO_MEMORY_CHECK");
    if (o->no_memory_check || (skip && strcmp(skip, "1") == 0)) /* (mem_env_check: "", 0 or 1) */
        return -1;
    if (!fits(o, "memory", e.host, e.host_total, &b))
        return 1;
    if (cuda && !fits(o, "device memory", e.dev, e.dev_total, &db))
        return 1;
    return -1;
}

int mem_env_check(void)
{
    const char *limit = getenv("AMPC_MEMORY_LIMIT"), *skip = getenv("AMPC_NO_MEMORY_CHECK");
    uint64_t cap;
    if (limit && *limit && !mem_parse_bytes(limit, &cap)) {
        fprintf(stderr, "ampc: environment variable AMPC_MEMORY_LIMIT=%.200s is not a number of bytes (like "
                        "600000000, 600M or 4G: the memory a run may use); unset it for no limit of its own\n",
                limit);
        return EXIT_USAGE;
    }
    if (skip && *skip && strcmp(skip, "0") != 0 && strcmp(skip, "1") != 0) {
        fprintf(stderr, "ampc: environment variable AMPC_NO_MEMORY_CHECK=%.200s is not 0 or 1 (1 runs even when "
                        "the memory estimate does not fit, as --no-memory-check); unset it for the check\n",
                skip);
        return EXIT_USAGE;
    }
    return -1;
}
