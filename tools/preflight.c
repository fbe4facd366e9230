/*
 * preflight.c - what `ampc train` checks before it loads data or trains, so
 * that a run is not lost at its end and nothing the user had is written
 * over:
 *
 *   --save DIR  must take files: DIR is created when missing (as the first
 *               save would), then a file is created, written, renamed and
 *               removed there - what a checkpoint save does (checkpoint.c
 *               writes a temporary file and renames it). A read-only or
 *               full disk, a missing parent, a file named DIR: all said
 *               now, not after the last step.
 *   --log FILE  is never a file that is not an ampc log (its first line is
 *               not {"step":...): such a file is refused and left as it
 *               is. An existing ampc log is appended to (--log-mode append,
 *               the default with --resume) or replaced (--log-mode
 *               replace); without either, a fresh run refuses it.
 *   --tensorboard DIR  takes files: created when missing, a file written
 *               and removed there (tensorboard.c's tb_dir_check; exit 2).
 */
#include "preflight.h"
#include "checkpoint_cli.h"
#include "tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Prints "ampc train: --save DIR: what: errno text" and returns 1. */
static int save_fail(const char *dir, const char *what, int err)
{
    fprintf(stderr, "ampc train: --save %s: %s: %s (nothing was trained)\n", dir, what, strerror(err));
    return 1;
}

int save_dir_check(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return save_fail(dir, "cannot reach the directory", errno);
        if (mkdir(dir, 0777) != 0)
            return save_fail(dir, "cannot create the directory", errno);
    } else if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ampc train: --save %s: exists and is not a directory (nothing was trained)\n", dir);
        return 1;
    }
    char ck[CLI_PATH_MAX];
    checkpoint_path(ck, sizeof ck, dir);
    if (lstat(ck, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ampc train: --save %s: %s exists and is not a regular file: a checkpoint cannot be "
                        "saved over it (nothing was trained)\n", dir, ck);
        return 1;
    }
    /* The probe: the longest name a save makes, its temporary (the
     * library's "<checkpoint>.tmp.<pid>"), created, written, renamed and
     * removed, as a save would. (A killed probe's file is a dead pid's
     * temporary, which the next save removes.) */
    char probe[CLI_PATH_MAX + 32], moved[CLI_PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s.tmp.%ld", ck, (long)getpid());
    snprintf(moved, sizeof moved, "%s/.ampc-save-check.%ld", dir, (long)getpid());
    unlink(probe); /* one left by a killed run that had this pid */
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == ENAMETOOLONG) {
        fprintf(stderr, "ampc train: --save %s: a checkpoint's temporary file there, %s (%zu bytes), has a name "
                        "longer than the system takes: %s; give a shorter --save (nothing was trained)\n",
                dir, probe, strlen(probe), strerror(errno));
        return 1;
    }
    if (fd < 0)
        return save_fail(dir, "cannot create a file there", errno);
    int err = 0;
    if (write(fd, "ampc", 4) != 4)
        err = errno ? errno : EIO;
    if (close(fd) != 0 && !err)
        err = errno;
    if (err) {
        unlink(probe);
        return save_fail(dir, "cannot write a file there", err);
    }
    if (rename(probe, moved) != 0) {
        err = errno;
        unlink(probe);
        return save_fail(dir, "cannot rename a file there", err);
    }
    if (unlink(moved) != 0)
        return save_fail(dir, "cannot remove a file there", errno);
    return -1;
}

/* Whether path's first bytes are an ampc log's: {"step": and a digit
 * (log_step writes the step first), or an event a run writes before its
 * first step (log_event: {"event":"start" with an autocast policy or
 * flushing, "init_scale_auto", an "anomaly" of step 1). */
static bool is_ampc_log(const char *path)
{
    static const char sig[] = "{\"step\":", start[] = "{\"event\":\"";
    char first[sizeof start];
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t got = fread(first, 1, sizeof first, f);
    fclose(f);
    if (got >= sizeof start - 1 && memcmp(first, start, sizeof start - 1) == 0)
        return true;
    return got >= sizeof sig && memcmp(first, sig, sizeof sig - 1) == 0 && first[sizeof sig - 1] >= '0' &&
           first[sizeof sig - 1] <= '9';
}

bool log_appends(const train_opts *o)
{
    return o->log_mode ? strcmp(o->log_mode, "append") == 0 : o->resume != NULL;
}

int log_target_check(const train_opts *o)
{
    if (!o->log) {
        if (!o->log_mode)
            return -1;
        fprintf(stderr, "ampc train: --log-mode needs --log FILE (see ampc train --help)\n");
        return EXIT_USAGE;
    }
    struct stat st;
    if (stat(o->log, &st) != 0)
        return -1; /* a new file (or a path log_open will explain) */
    if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ampc train: --log %s: is a directory; give a file name\n", o->log);
        return 1;
    }
    if (S_ISCHR(st.st_mode)) /* /dev/null, /dev/stdout: written to, never read */
        return -1;
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "ampc train: --log %s: not a regular file (%s); give a file name\n", o->log,
                S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a block device");
        return 1;
    }
    if (st.st_size == 0)
        return -1; /* nothing to lose */
    if (!is_ampc_log(o->log)) {
        fprintf(stderr, "ampc train: --log %s: the file exists and is not an ampc log (it does not start with "
                        "{\"step\": or {\"event\":); it was left untouched: give another file\n", o->log);
        return 1;
    }
    if (!o->log_mode && !o->resume) {
        fprintf(stderr, "ampc train: --log %s: holds the log of an earlier run; give --log-mode append to add to "
                        "it, --log-mode replace to start it afresh, or another file\n", o->log);
        return EXIT_USAGE;
    }
    return -1;
}

/* Whether the log would be where the checkpoint is saved (DIR exists by
 * now): the first save would rename the checkpoint over it. */
static bool log_is_checkpoint(const char *log, const char *dir)
{
    char ck[CLI_PATH_MAX], real_dir[PATH_MAX], log_dir[PATH_MAX];
    checkpoint_path(ck, sizeof ck, dir);
    struct stat a, b;
    if (stat(log, &a) == 0 && stat(ck, &b) == 0)
        return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    const char *slash = strrchr(log, '/');
    const char *base = slash ? slash + 1 : log;
    if (strcmp(base, CHECKPOINT_FILE) != 0)
        return false;
    char parent[4096] = ".";
    if (slash == log) {
        snprintf(parent, sizeof parent, "/");
    } else if (slash) {
        size_t n = (size_t)(slash - log);
        if (n >= sizeof parent)
            return false;
        memcpy(parent, log, n);
        parent[n] = '\0';
    }
    return realpath(parent, log_dir) && realpath(dir, real_dir) && strcmp(log_dir, real_dir) == 0;
}

int preflight(const train_opts *o)
{
    int rc = log_target_check(o);
    if (rc < 0 && o->save && (rc = save_dir_check(o->save)) >= 0 && o->save == o->resume)
        fprintf(stderr, "ampc train: (a resumed run saves where it was resumed from unless --save DIR says "
                        "elsewhere)\n");
    if (rc < 0 && o->save && o->log && log_is_checkpoint(o->log, o->save)) {
        fprintf(stderr, "ampc train: --log %s is where --save %s puts its checkpoint; give the log another name\n",
                o->log, o->save);
        rc = EXIT_USAGE;
    }
    if (rc < 0 && o->tensorboard)
        rc = tb_dir_check(o->tensorboard);
    return rc;
}
