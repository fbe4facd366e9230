/*
 * slow_save.c - a fault-injection shim for the tests, loaded with
 * LD_PRELOAD into a program they start (test_cli_kill: the ampc it kills):
 * fsync on a checkpoint's temporary file ("<path>.tmp.<pid>", written and
 * not yet renamed) first sleeps AMPC_SLOW_SAVE_MS milliseconds, so that a
 * kill -9 can land in the middle of a save. The library has no such hook:
 * the pause lives here, in the test's child process only.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Whether fd is a checkpoint's temporary file (its name has ".tmp."). */
static int is_temporary(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return 0;
    path[n] = '\0';
    const char *base = strrchr(path, '/');
    return strstr(base ? base : path, ".tmp.") != NULL;
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    const char *v = getenv("AMPC_SLOW_SAVE_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms > 0 && ms <= 60000 && is_temporary(fd)) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd);
}
