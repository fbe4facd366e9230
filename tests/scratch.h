/*
 * scratch.h - a test program's scratch directory and its watchdog:
 *
 *   tmpdir            the directory's path
 *   scratch_make      makes it fresh, /tmp/ampc-NAME-XXXXXX
 *   scratch_at        tmpdir/NAME, in one of 32 rotating static buffers
 *   scratch_remove    removes it and all it holds
 *   watchdog_arm      ends the program with a FAIL line if it is still
 *                     running 10 s later (a test that opens a FIFO must
 *                     fail, not hang, when the library blocks on it)
 *   watchdog_disarm   calls that off
 *
 * Header-only (static inline), as test_cli_util.h.
 */
#ifndef AMPC_TEST_SCRATCH_H
#define AMPC_TEST_SCRATCH_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

/* Makes tmpdir, /tmp/ampc-NAME-XXXXXX; when it cannot, says so and ends
 * the program (no test could run). */
static inline void scratch_make(const char *name)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ampc-%s-XXXXXX", name);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static inline const char *scratch_at(const char *name)
{
    static char buf[32][320];
    static int k;
    char *p = buf[k++ % 32];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static inline void scratch_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* The watchdog's FAIL line, made before it is armed: the handler only
 * writes it (write and _exit are async-signal-safe). */
static inline char *watchdog_line(void)
{
    static char line[160];
    return line;
}

static inline void watchdog_fire(int sig)
{
    (void)sig;
    const char *line = watchdog_line();
    if (write(2, line, strlen(line)) < 0) {
    }
    _exit(1);
}

/* what: what blocked, for the FAIL line ("idx_load"). */
static inline void watchdog_arm(const char *what)
{
    snprintf(watchdog_line(), 160, "FAIL: %s blocked (on a FIFO?) for 10 s\n", what);
    signal(SIGALRM, watchdog_fire);
    alarm(10);
}

static inline void watchdog_disarm(void) { alarm(0); }

#endif
