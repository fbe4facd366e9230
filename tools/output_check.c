/*
 * output_check.c - an output path checked before the run (output_check.h).
 */
#include "output_check.h"

#include "checkpoint_cli.h"
#include "cli.h"
#include "io/file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether path and input name the same file (a hard link or a symlink
 * included). */
static bool same_file(const char *path, const char *input)
{
    struct stat a, b;
    return input && stat(path, &a) == 0 && stat(input, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int output_check(const char *who, const char *opt, const char *path, const train_opts *o)
{
    char why[2 * CLI_PATH_MAX], dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(why, sizeof why, "it is a folder; give a file name");
    else if (file_write_refused(path, why, sizeof why))
        ;
    else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        snprintf(why, sizeof why, "cannot write into %s: its folder does not exist", dir);
    else if (access(dir, W_OK) != 0)
        snprintf(why, sizeof why, "cannot write into %s: %s", dir, strerror(errno));
    else
        why[0] = '\0';
    char ck[CLI_PATH_MAX] = "";
    if (o->init_from)
        checkpoint_path(ck, sizeof ck, o->init_from);
    const struct {
        const char *opt, *path;
    } inputs[] = {{"--data", o->data}, {"--data-bin", o->data_bin}, {"--val-bin", o->val_bin},
                  {"--init-from's checkpoint", ck[0] ? ck : NULL}};
    for (size_t i = 0; !why[0] && i < sizeof inputs / sizeof inputs[0]; i++)
        if (same_file(path, inputs[i].path))
            snprintf(why, sizeof why, "it is the run's %s (%s); writing it would replace it", inputs[i].opt,
                     inputs[i].path);
    if (!why[0])
        return -1;
    fprintf(stderr, "%s: %s %s: %s\n", who, opt, path, why);
    return EXIT_USAGE;
}
