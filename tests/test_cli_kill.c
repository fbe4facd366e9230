/*
 * test_cli_kill.c - `ampc train --save DIR --save-every N` killed with
 * SIGKILL at random moments, mid-save included, then resumed:
 *
 *   - whatever the moment, DIR's checkpoint loads (the resume says
 *     "resumed from"), or there is none yet and a fresh run starts;
 *   - the finished run equals the uninterrupted one bit for bit: every
 *     step's line in the --log JSONL (the killed run's and the resumed
 *     run's; timings cut off) and the final checkpoint file, byte for
 *     byte (every tensor and the metadata, the scaler's counters too);
 *   - no "<checkpoint>.tmp.<pid>" is left after the next save.
 *
 * Mid-save kills: two killed runs in three get the slow-save shim
 * (tests/slow_save.c, preloaded: a pause of DELAY_MS before each save's
 * temporary file is synced), so that most of their kills land between a
 * save's first byte and its rename; one of
 * those two waits, after its random time, for the next save in progress
 * (a temporary in DIR) and kills it there. The third run, without the
 * delay, is killed mostly between saves. A kill is counted as mid-save
 * when it leaves a temporary behind (measured, and required to be at
 * least a fifth of the kills: about half land there).
 *
 * The kill times are uniform over a run's measured length, drawn from a
 * seed printed at the start: AMPC_KILL_SEED=S replays a sequence (the
 * moments are wall-clock, so a replay lands near, not exactly on, the
 * same instructions). AMPC_KILL_COUNT=N kills N times (default 24).
 */
#include "test_cli_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>

#define STEPS 40
#define EVERY 3     /* --save-every */
#define DELAY_MS 6  /* the slow-save shim's pause in the killed runs (AMPC_SLOW_SAVE_MS) */
#define MAX_LINES 4 * STEPS
#define CHECKPOINT_FILE "checkpoint.safetensors"

static char tiny[256], args[1024];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* In the child before exec: tests/slow_save.c preloaded, with its pause.
 * (An ASan build's ampc wants its runtime first among the preloads: the
 * shim, which holds no instrumented code, may come before it.) */
static void preload_slow_save(void)
{
    char ms[16], list[2048], asan[1024];
    snprintf(ms, sizeof ms, "%d", DELAY_MS);
    setenv("AMPC_SLOW_SAVE_MS", ms, 1);
    const char *pre = getenv("LD_PRELOAD");
    snprintf(list, sizeof list, "%s%s%s", AMPC_SLOW_SAVE_SO, pre && *pre ? ":" : "", pre ? pre : "");
    setenv("LD_PRELOAD", list, 1);
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", ao ? ao : "", ao && *ao ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
}

/* Starts "ampc train ARGS --save dir --save-every EVERY --log log", with
 * the slow-save shim preloaded when delay, its output into dir.out;
 * returns the child's pid. */
static pid_t start(const char *dir, const char *log, bool delay)
{
    char line[2048], out[600];
    snprintf(line, sizeof line, "train %s --save %s --save-every %d --log %s", args, dir, EVERY, log);
    snprintf(out, sizeof out, "%s.out", dir);
    char *argv[64];
    int argc = 0;
    argv[argc++] = cli_ampc;
    for (char *t = strtok(line, " "); t && argc < 63; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (delay)
            preload_slow_save();
        execv(cli_ampc, argv);
        _exit(127);
    }
    return pid;
}

/* How many "checkpoint.safetensors.tmp.*" files dir holds. */
static int temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, CHECKPOINT_FILE ".tmp.", strlen(CHECKPOINT_FILE ".tmp.")) == 0;
    if (d)
        closedir(d);
    return n;
}

/* The log's step lines, each cut before "step_ms" (timings differ), by
 * step: line[s] for step s (1-based); false (and a failure) when a line
 * is not a step record or a step appears twice with different values. */
static bool steps_of(const char *path, char *line[STEPS + 1], char **body)
{
    *body = cli_read_file(path, NULL);
    for (int s = 0; s <= STEPS; s++)
        line[s] = NULL;
    if (!*body)
        return false;
    char *l[MAX_LINES];
    int n = cli_lines(*body, l, MAX_LINES);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        char *t = strstr(l[i], ",\"step_ms\"");
        long s = strncmp(l[i], "{\"step\":", 8) == 0 ? strtol(l[i] + 8, NULL, 10) : 0;
        if (!t || s < 1 || s > STEPS) {
            CHECK_MSG(false, "%s: line %d is not a step record: %s", path, i + 1, l[i]);
            ok = false;
            continue;
        }
        *t = '\0';
        if (line[s] && strcmp(line[s], l[i]) != 0) {
            CHECK_MSG(false, "%s: step %ld logged twice, differently:\n  %s\n  %s", path, s, line[s], l[i]);
            ok = false;
        }
        line[s] = l[i];
    }
    return ok;
}

static bool same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *pa = cli_read_file(a, &na), *pb = cli_read_file(b, &nb);
    bool same = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

static void test_killed_runs_resume_to_the_straight_result(void)
{
    const char *env = getenv("AMPC_KILL_SEED"), *cnt = getenv("AMPC_KILL_COUNT");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    int want = cnt ? atoi(cnt) : 24;
    printf("  kill seed %llu (replay: AMPC_KILL_SEED=%llu), %d kills\n", (unsigned long long)seed,
           (unsigned long long)seed, want);
    double t0 = now();

    /* The straight run, with the same saves and delay: its length is the
     * window the kills are drawn from. */
    char sdir[512], slog[512], sfile[600];
    cli_path(sdir, sizeof sdir, "straight");
    cli_path(slog, sizeof slog, "straight.jsonl");
    snprintf(sfile, sizeof sfile, "%s/" CHECKPOINT_FILE, sdir);
    double ts = now();
    pid_t p = start(sdir, slog, true);
    int st = 0;
    waitpid(p, &st, 0);
    double len[2] = {now() - ts, now() - ts}; /* without, with the delay: shortened by the runs that end first */
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the straight run failed (see %s.out)", sdir);
    char *want_line[STEPS + 1], *want_body;
    CHECK(steps_of(slog, want_line, &want_body));
    int skips = 0;
    for (int s = 1; s <= STEPS; s++) {
        CHECK_MSG(want_line[s] != NULL, "the straight run's log lacks step %d", s);
        skips += want_line[s] && strstr(want_line[s], "\"skipped\":true") != NULL;
    }
    CHECK_MSG(skips > 0 && skips < STEPS, "the run should take and skip steps (the scaler's state at stake)");

    int kills = 0, mid_save = 0, missed = 0, fresh = 0;
    for (int attempt = 0; kills < want && attempt < 4 * want && harness_failures_in_test == 0; attempt++) {
        char dir[512], log[512], file[600], cmd[1800];
        snprintf(dir, sizeof dir, "%s/k%d", tmpdir, attempt);
        snprintf(log, sizeof log, "%s/k%d.jsonl", tmpdir, attempt);
        snprintf(file, sizeof file, "%s/" CHECKPOINT_FILE, dir);
        /* Kinds of kill, in turn: at a random time without the save delay
         * (mostly between saves), with it (mostly mid-save), and with it
         * at the first save in progress after a random time (mid-save
         * whatever the machine's speed). */
        int kind = attempt % 3, delay = kind > 0;
        double at = 0.9 * len[delay] * (double)(next(&seed) >> 11) * 0x1p-53; /* later runs start warmer */
        p = start(dir, log, delay);
        double t_start = now();
        bool ended = false;
        while (!ended && (now() - t_start < at || (kind == 2 && temporaries(dir) == 0))) {
            struct timespec nap = {0, 200000}; /* 0.2 ms */
            nanosleep(&nap, NULL);
            ended = now() - t_start >= at && waitpid(p, &st, WNOHANG) == p;
        }
        if (ended || waitpid(p, &st, WNOHANG) == p) { /* it finished first: no kill, and runs are shorter now */
            missed++;
            len[delay] *= 0.8;
            continue;
        }
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        kills++;
        int tmps = temporaries(dir);
        mid_save += tmps > 0;

        int rc;
        if (access(file, F_OK) == 0) {
            rc = cli_run("train --resume %s --log %s", dir, log);
            CHECK_MSG(rc == 0 && strstr(cli_out, "resumed from"),
                      "kill %d at %.3f s (%d temporaries): the resume failed, exit %d:\n%s", kills, at, tmps, rc,
                      cli_out);
        } else { /* killed before the first save: start again */
            fresh++;
            unlink(log);
            rc = cli_run("train %s --save %s --save-every %d --log %s", args, dir, EVERY, log);
            CHECK_MSG(rc == 0, "kill %d at %.3f s: the fresh run failed, exit %d:\n%s", kills, at, rc, cli_out);
        }
        CHECK_MSG(temporaries(dir) == 0, "kill %d at %.3f s: a temporary is left in %s after the next save", kills,
                  at, dir);
        char *got_line[STEPS + 1], *got_body;
        CHECK(steps_of(log, got_line, &got_body));
        for (int s = 1; s <= STEPS; s++)
            CHECK_MSG(got_line[s] && want_line[s] && strcmp(got_line[s], want_line[s]) == 0,
                      "kill %d at %.3f s: step %d differs from the straight run's:\n  straight %s\n  killed   %s",
                      kills, at, s, want_line[s] ? want_line[s] : "(none)", got_line[s] ? got_line[s] : "(none)");
        free(got_body);
        CHECK_MSG(same_file(file, sfile), "kill %d at %.3f s: the final checkpoint differs from the straight run's",
                  kills, at);
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s.out'", dir, log, dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    free(want_body);
    printf("  %d kills (%d mid-save: a temporary left behind; %d before the first save), %d runs finished "
           "before their kill time; runs of %.2f / %.2f s without / with the delay, %.1f s in all\n",
           kills, mid_save, fresh, missed, len[0], len[1], now() - t0);
    if (harness_failures_in_test > 0) /* stopped at the first failing kill */
        return;
    CHECK_MSG(kills >= want, "only %d kills landed of %d wanted", kills, want);
    CHECK_MSG(mid_save * 5 >= kills, "only %d of %d kills landed mid-save", mid_save, kills);
}

int main(void)
{
    cli_init_tiny("test-cli-kill", tiny, NULL);
    /* fp16 with a scale that overflows at first and grows back every 3
     * clean steps: skipped steps on both sides of the saves. */
    snprintf(args, sizeof args,
             "--model mlp --data %s --hidden 16 --batch 32 --threads 1 --seed 7 --precision fp16 "
             "--init-scale 16777216 --growth-interval 3 --lr 0.01 --steps %d",
             tiny, STEPS);
    RUN_IF(cli_have_binary, test_killed_runs_resume_to_the_straight_result);
    cli_cleanup();
    return harness_done();
}
