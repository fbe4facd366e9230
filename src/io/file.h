/*
 * file.h - opening a file a user named (a checkpoint, an IDX file, a text
 * corpus, a training log): regular files only, so that nothing ampc is
 * handed can block it or feed it forever.
 *
 *   - A FIFO is opened with O_NONBLOCK, so the open itself never waits
 *     for a writer (or a reader); then fstat refuses it. The same goes for
 *     /dev/zero, /dev/stdin, sockets and directories.
 *   - A regular file has a size: readers read at most that many bytes
 *     (a file that grows meanwhile is read as it was), and a caller can
 *     refuse a size above a bound (file_mem_limit: what this machine can
 *     hold) before allocating anything.
 *
 * Internal: callers put the reason (`why`, a phrase without the path)
 * into their own message, which names the file.
 *
 * Defines: file_open_read, file_fopen_read, file_fopen_write,
 * file_write_refused, file_mem_limit.
 */
#ifndef AMPC_FILE_H
#define AMPC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Opens path read-only if it is a regular file of at most max_bytes bytes
 * (max_bytes <= 0: any size). Returns the descriptor (close-on-exec,
 * blocking) and its size in *size; or -1 with why (n bytes) saying what
 * is wrong: "cannot open: <reason>", "not a regular file (a FIFO) ..." or
 * "<size> bytes, more than ...". */
int file_open_read(const char *path, int64_t max_bytes, int64_t *size, char *why, size_t n);
/* The same as a stdio stream ("rb"); NULL and why on failure. */
FILE *file_fopen_read(const char *path, int64_t max_bytes, int64_t *size, char *why, size_t n);
/* Opens path for writing, creating it (0666 less the umask), emptying a
 * regular file unless append; a character device (/dev/null, a terminal)
 * is written to as it is; anything else that exists is refused (opening a
 * FIFO blocks until someone reads it). NULL and why on failure. */
FILE *file_fopen_write(const char *path, bool append, char *why, size_t n);
/* Whether file_fopen_write would refuse path for what it is (a FIFO, a
 * directory, a socket that exists there), checked without opening it:
 * for a command that writes its result only after a long run. true and
 * why when refused. */
bool file_write_refused(const char *path, char *why, size_t n);
/* The physical memory of this machine in bytes (INT64_MAX when unknown):
 * a file read whole into memory cannot be larger. */
int64_t file_mem_limit(void);

#endif
