/*
 * dist_cli.c - `mpirun -np N ampc train`: what the train command does to
 * be one rank of a data-parallel run (docs/distributed.md, "Command line").
 *
 *   - Under an MPI launcher (comm_launched_size): amp_dist_init; a build
 *     without MPI started on several ranks is a clear error.
 *   - The data-parallel options (--bucket-mb, --compress, --zero,
 *     --dist-timeout) are refused without a launcher: there is nothing to
 *     spread over.
 *   - Threads per rank: by default the cores divided by the ranks on this
 *     node (OMPI_COMM_WORLD_LOCAL_SIZE), at least 1; memcheck.c divides
 *     the host's memory among them the same way.
 *   - Output: rank 0 alone prints progress (the others' stdout goes to
 *     /dev/null); every rank's stderr lines read "ampc: rank R: ...", so
 *     an error names the rank that met it.
 *   - dist_agree: the ranks agree on the outcome of a setup stage (the
 *     worst exit code wins), so an error every rank meets (a bad file) or
 *     one rank meets (rank 0's --log) ends every rank cleanly;
 *     dist_abort: an error one rank meets while the others train ends the
 *     whole job at once, instead of leaving them waiting. The library
 *     never ends a process: it returns its errors (a failed, stopped or
 *     dead rank included), and this is the program's one place that asks
 *     the launcher to end every rank (end_job: MPI_Abort).
 */
#define _GNU_SOURCE /* fopencookie */
#include "dist_cli.h"

#include "comm/comm.h"

#ifdef AMPC_HAVE_MPI
#include <mpi.h>
#endif

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool g_launched; /* dist_begin ran amp_dist_init */

int dist_launched(void) { return comm_launched_size(); }

bool dist_on(void) { return g_launched && amp_dist_is_initialized(); }

/* The number in environment variable name, or 0. */
static long env_long(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long n = v && *v ? strtol(v, &end, 10) : 0;
    return v && *v && *end == '\0' && n > 0 ? n : 0;
}

int dist_check_opts(const train_opts *o)
{
    static const char *const names[] = {"bucket-mb", "compress", "zero", "dist-timeout"};
    int launched = comm_launched_size();
    for (int i = 0; i < 4; i++) {
        const opt_def *d = opts_find(names[i]);
        if (launched < 1 && o->given[d - opts_table()]) {
            fprintf(stderr, "ampc train: --%s applies to a data-parallel run, started by an MPI launcher "
                            "(mpirun -np N ampc train ...); this process was not\n", names[i]);
            return EXIT_USAGE;
        }
    }
    if (o->zero == 1 && (o->given[opts_find("bucket-mb") - opts_table()] ||
                         o->given[opts_find("compress") - opts_table()])) {
        fprintf(stderr, "ampc train: --%s applies to DDP's gradient buckets; --zero 1 reduce-scatters the "
                        "gradients instead (leave --%s out)\n",
                o->given[opts_find("bucket-mb") - opts_table()] ? "bucket-mb" : "compress",
                o->given[opts_find("bucket-mb") - opts_table()] ? "bucket-mb" : "compress");
        return EXIT_USAGE;
    }
    if (launched > 1 && o->profile) {
        fprintf(stderr, "ampc train: --profile profiles one process: run it without mpirun (or with -np 1)\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* ------------------------------------------------ stderr, prefixed */

static char g_prefix[48];
static bool g_bol = true; /* the next byte starts a line */

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(STDERR_FILENO, p, n);
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

/* Each line gets "ampc: rank R: " in front, in place of its own "ampc: "
 * (lines that name their rank already are left as they are), and goes out in one write with it, so that the ranks' lines do not
 * interleave. The stream is line-buffered, so a line comes in one piece
 * unless it is longer than the buffer. */
static ssize_t prefix_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    char line[4096];
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        if (g_bol) {
            size_t rest = n - i;
            if (!(rest >= 11 && memcmp(buf + i, "ampc: rank ", 11) == 0)) {
                k = strlen(g_prefix);
                memcpy(line, g_prefix, k);
                if (rest >= 6 && memcmp(buf + i, "ampc: ", 6) == 0)
                    i += 6;
            }
        }
        const char *nl = memchr(buf + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (buf + i)) + 1 : n - i;
        if (k + len <= sizeof line) {
            memcpy(line + k, buf + i, len);
            write_all(line, k + len);
        } else {
            write_all(line, k);
            write_all(buf + i, len);
        }
        i += len;
        g_bol = nl != NULL;
    }
    return (ssize_t)n;
}

/* SIGTERM is how mpirun ends the ranks that are left when one has died
 * or aborted: each says so before it goes (async-signal-safe: write). */
static char g_term_msg[160];
static void on_term(int sig)
{
    write_all(g_term_msg, strlen(g_term_msg));
    signal(sig, SIG_DFL);
    raise(sig);
}

void dist_output(void)
{
    static bool done;
    int launched = comm_launched_size();
    if (done || launched < 2)
        return;
    done = true;
    /* The launcher's rank: amp_dist_rank() before amp_dist_init is 0. */
    long rank = env_long("OMPI_COMM_WORLD_RANK");
    if (!rank)
        rank = env_long("PMIX_RANK");
    if (!rank)
        rank = env_long("PMI_RANK");
    snprintf(g_prefix, sizeof g_prefix, "ampc: rank %ld: ", rank);
    fflush(stderr);
    FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){.write = prefix_write});
    if (f) {
        setvbuf(f, NULL, _IOLBF, 0);
        stderr = f;
    }
    snprintf(g_term_msg, sizeof g_term_msg,
             "ampc: rank %ld: ended by the launcher (SIGTERM): another rank failed, or the job was stopped\n", rank);
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    if (rank != 0) { /* rank 0 alone shows progress and results */
        fflush(stdout);
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
    }
}

int dist_local_ranks(void)
{
    if (!dist_on())
        return 1;
    long local = env_long("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local)
        local = env_long("MPI_LOCALNRANKS");
    if (!local)
        local = amp_dist_world_size();
    return local > 0 && local < 1 << 20 ? (int)local : 1;
}

int dist_begin(train_opts *o)
{
    int launched = comm_launched_size();
    if (launched < 1)
        return -1;
    if (!amp_dist_available()) {
        if (launched == 1) /* one rank: a plain run */
            return -1;
        fprintf(stderr, "ampc train: started by an MPI launcher on %d ranks, but this ampc was built without MPI: "
                        "it cannot train data-parallel (install Open MPI, e.g. apt-get install libopenmpi-dev "
                        "openmpi-bin, and rebuild; or run ampc train without mpirun)\n", launched);
        return 1;
    }
    if (amp_dist_init(NULL, NULL) != AMP_OK) {
        fprintf(stderr, "ampc train: %s\n", amp_last_error());
        return 1;
    }
    g_launched = true;
    if (o->dist_timeout > 0)
        amp_dist_set_timeout(o->dist_timeout);
    /* Threads: this node's cores shared by its ranks. */
    if (!o->given[opts_find("threads") - opts_table()]) {
        long local = dist_local_ranks(), cores = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = cores / local >= 1 ? cores / local : 1;
    }
    return -1;
}

double dist_timeout_s(void) { return comm_timeout(); }

int dist_agree(int rc)
{
    if (!dist_on() || amp_dist_world_size() < 2)
        return rc;
    /* -1 (go on) as 0, exit code c as c + 1: the largest wins. */
    amp_tensor *t = amp_full(AMP_SHAPE(1), AMP_I64, rc < 0 ? 0.0 : rc + 1.0);
    if (!t || amp_dist_all_reduce(t, AMP_REDUCE_MAX) != AMP_OK)
        dist_abort(1, amp_last_error());
    int64_t v = ((const int64_t *)amp_tensor_cdata(t))[0];
    amp_tensor_free(t);
    return v == 0 ? -1 : (int)(v - 1);
}

/* FNV-1a, 62 bits (so that its negation is an i64 too). */
static int64_t hash62(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (int64_t)(h >> 2);
}

int dist_same_settings(const train_opts *o, const run_info *ri)
{
    if (!dist_on() || amp_dist_world_size() < 2)
        return -1;
    /* The saved settings and the run options that decide which
     * collectives a rank issues, and when (a rank with another --zero,
     * --device, DDP bucketing or compression, --stop-at or checkpoint
     * schedule would issue others, and wait for its peers until the
     * timeout; on cuda --log and --log-every decide at which steps the
     * loss is read, and so all-reduced). */
    char *json = settings_to_json(o, ri), run[512];
    snprintf(run, sizeof run,
             "|zero %lld device %s compress %s bucket-mb %.17g stop-at %lld save %d save-every %lld log %d "
             "log-every %lld",
             (long long)o->zero, o->device, o->compress, o->bucket_mb, (long long)o->stop_at, o->save != NULL,
             (long long)o->save_every, o->log != NULL, (long long)o->log_every);
    int64_t h = json ? hash62(json) ^ hash62(run) : -1, v[2] = {h, -h};
    free(json);
    amp_tensor *t = amp_from_data(AMP_SHAPE(2), AMP_I64, v);
    if (!t || amp_dist_all_reduce(t, AMP_REDUCE_MAX) != AMP_OK)
        dist_abort(1, amp_last_error());
    const int64_t *m = amp_tensor_cdata(t);
    bool same = m[0] == h && -m[1] == h; /* the largest and the smallest are this rank's */
    amp_tensor_free(t);
    if (same)
        return -1;
    fprintf(stderr, "ampc: the ranks were started with different settings or data (the run's options, --zero, --device, "
                    "--compress, --bucket-mb, --stop-at, --save, --save-every, or the data's shapes): start every rank with the same options and data (mpirun -np N ampc train ...)\n");
    return EXIT_USAGE;
}

int dist_same_step(int64_t step, const char *where)
{
    if (!dist_on() || amp_dist_world_size() < 2)
        return -1;
    /* Each rank's step in its own slot, summed: every rank learns all. */
    const int world = amp_dist_world_size(), me = amp_dist_rank();
    amp_tensor *t = amp_zeros(AMP_SHAPE(world), AMP_I64);
    if (!t)
        dist_abort(1, amp_last_error());
    ((int64_t *)amp_tensor_data(t))[me] = step;
    if (amp_dist_all_reduce(t, AMP_REDUCE_SUM) != AMP_OK)
        dist_abort(1, amp_last_error());
    const int64_t *s = amp_tensor_cdata(t);
    bool same = true;
    for (int r = 1; r < world; r++)
        same &= s[r] == s[0];
    if (same) {
        amp_tensor_free(t);
        return -1;
    }
    char list[512] = "";
    size_t len = 0;
    for (int r = 0; r < world && len < sizeof list - 64; r++) {
        if (r == 8 && world > 9) {
            snprintf(list + len, sizeof list - len, ", ... (%d ranks)", world);
            break;
        }
        len += (size_t)snprintf(list + len, sizeof list - len, "%srank %d at step %lld", r ? ", " : "", r,
                                (long long)s[r]);
    }
    amp_tensor_free(t);
    fprintf(stderr,
            "ampc: the ranks would start from different steps (%s; this rank's: %s): nothing was trained or saved; "
            "resume every rank from the same checkpoint (or none)\n",
            list, where && *where ? where : "no --resume, step 0");
    return EXIT_USAGE;
}

/* Ends every rank of the job with exit code rc: MPI_Abort asks the
 * launcher to end them all (this process included), whatever they are
 * doing: waiting in a collective, stopped, or training on. */
static _Noreturn void end_job(int rc)
{
    fflush(stdout);
    fflush(stderr);
#ifdef AMPC_HAVE_MPI
    int started = 0, finalized = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&finalized);
    if (started && !finalized)
        MPI_Abort(MPI_COMM_WORLD, rc);
#endif
    exit(rc);
}

void dist_abort(int rc, const char *why)
{
    if (!dist_on() || amp_dist_world_size() < 2)
        return;
    fflush(stdout);
    fprintf(stderr, "ampc: %s: ending every rank of the job\n", why);
    end_job(rc > 0 ? rc : 1);
}

int dist_end(int rc)
{
    if (!dist_on())
        return rc;
    fflush(stdout);
    fflush(stderr);
    if (amp_dist_finalize() != AMP_OK) {
        fprintf(stderr, "ampc: %s\n", amp_last_error());
        rc = rc > 0 ? rc : 1;
        /* the ranks could not end together (one failed, or stopped): the
         * launcher ends them */
        if (comm_failed(NULL))
            dist_abort(rc, "the ranks cannot end together");
    }
    return rc;
}
