/*
 * file.c - opening the files a user names, regular files only (file.h
 * says why and how).
 */
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What st_mode is, for a message: "a FIFO", "a directory", ... */
static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

static void not_regular(mode_t m, char *why, size_t n)
{
    snprintf(why, n, "not a regular file (%s); ampc takes regular files only", kind_of(m));
}

/* Clears O_NONBLOCK (set only so that opening a FIFO cannot wait). */
static int blocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

int file_open_read(const char *path, int64_t max_bytes, int64_t *size, char *why, size_t n)
{
    *size = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, n, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || blocking(fd) != 0) {
        snprintf(why, n, "cannot stat: %s", strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        not_regular(sb.st_mode, why, n);
    } else if (max_bytes > 0 && (int64_t)sb.st_size > max_bytes) {
        snprintf(why, n, "%" PRId64 " bytes, more than the %" PRId64 " this machine's memory holds",
                 (int64_t)sb.st_size, max_bytes);
    } else {
        *size = (int64_t)sb.st_size;
        return fd;
    }
    close(fd);
    return -1;
}

FILE *file_fopen_read(const char *path, int64_t max_bytes, int64_t *size, char *why, size_t n)
{
    int fd = file_open_read(path, max_bytes, size, why, n);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(why, n, "cannot open: %s", strerror(errno));
        close(fd);
    }
    return f;
}

/* What a written file may be: a regular file, or a character device
 * (/dev/null, a terminal), which takes writes without blocking or keeping
 * them; never a FIFO (its open waits for a reader) or a directory. */
static bool writable_kind(mode_t m)
{
    return S_ISREG(m) || S_ISCHR(m);
}

FILE *file_fopen_write(const char *path, bool append, char *why, size_t n)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && !writable_kind(sb.st_mode)) { /* before open: O_WRONLY on a FIFO fails with ENXIO */
        not_regular(sb.st_mode, why, n);
        return NULL;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0), 0666);
    if (fd < 0) {
        snprintf(why, n, "cannot create: %s", strerror(errno));
        return NULL;
    }
    FILE *f = NULL;
    if (fstat(fd, &sb) != 0 || blocking(fd) != 0)
        snprintf(why, n, "cannot stat: %s", strerror(errno));
    else if (!writable_kind(sb.st_mode)) /* it changed since the stat above */
        not_regular(sb.st_mode, why, n);
    else if (!append && S_ISREG(sb.st_mode) && ftruncate(fd, 0) != 0)
        snprintf(why, n, "cannot empty it: %s", strerror(errno));
    else if (!(f = fdopen(fd, append ? "a" : "w")))
        snprintf(why, n, "cannot open: %s", strerror(errno));
    if (!f)
        close(fd);
    return f;
}

bool file_write_refused(const char *path, char *why, size_t n)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || writable_kind(sb.st_mode))
        return false;
    not_regular(sb.st_mode, why, n);
    return true;
}

int64_t file_mem_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0 || pages > INT64_MAX / page)
        return INT64_MAX;
    return (int64_t)pages * page;
}
