/*
 * export.c - `ampc export --format F DIR OUT`: the checkpoint a run saved,
 * written for another program. One row per format (its name, what it is
 * for, its writer); the writers check what they can export and refuse the
 * rest with a message naming the checkpoint.
 */
#include "checkpoint_cli.h"
#include "cli.h"
#include "export.h"

#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#define WHO "ampc export"

static const struct {
    const char *name, *what;
    int (*write)(const export_opts *e);
} formats[] = {
    {"gguf", "GGUF for llama.cpp (gpt models: its gpt2 architecture)", export_gguf},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

static const opt_def export_rows[] = {
    {.name = "format", .meta = "F", .kind = OPT_TEXT, .off = offsetof(export_opts, format),
     .help = "the file's format (required): gguf (GGUF for llama.cpp's gpt2 architecture)"},
    {.name = "dtype", .meta = "T", .kind = OPT_STR, .off = offsetof(export_opts, dtype), .choices = "f32|f16|bf16",
     .says = "must be f32, f16 or bf16",
     .help = "f32, f16 or bf16: the weight matrices' and embeddings' type (norms and\n"
             "biases stay f32) (default: the checkpoint's weights' own)"},
    {.name = "data", .meta = "PATH", .kind = OPT_STR, .off = offsetof(export_opts, data),
     .help = "the training text, read for the vocabulary only when the checkpoint does\n"
             "not record it (checkpoints of older ampc; default: the checkpoint's --data)"},
    {.name = "name", .meta = "TEXT", .kind = OPT_TEXT, .off = offsetof(export_opts, name),
     .help = "the model's name in the file (default: DIR's last component)"},
};

/* DIR, then OUT. */
static int export_arg(const opt_cmd *c, const char *a, void *ctx)
{
    export_opts *e = ctx;
    if (a[0] == '-' && a[1] != 0) {
        fprintf(stderr, "%s: unknown option '%s' (see ampc export --help)\n", c->who, a);
        return EXIT_USAGE;
    }
    if (e->out)
        return opt_unexpected(c, a);
    if (!*a) {
        fprintf(stderr, "%s: the %s is empty ('')\n", c->who, e->dir ? "output file" : "checkpoint directory");
        return EXIT_USAGE;
    }
    *(e->dir ? &e->out : &e->dir) = a;
    return -1;
}

const opt_cmd export_options = {
    .who = WHO,
    .usage = "usage: ampc export --format F DIR OUT [options]\n\n"
             "Writes the model saved in DIR (ampc train --save DIR; DIR may also be the path of a\n"
             ".safetensors checkpoint file) to OUT in format F, for another program. OUT is written\n"
             "whole to a temporary file beside it and renamed into place: a failure leaves no partial\n"
             "file (and an earlier OUT as it was).\n\n",
    .footer = "\nformats: gguf (llama.cpp: docs/interop.md, \"llama.cpp (GGUF)\")\n",
    OPT_ONE_TABLE(export_rows),
    .positional = export_arg,
};

static int export_parse_into(int argc, char **argv, export_opts *e)
{
    *e = (export_opts){0};
    int rc = opt_parse(&export_options, &(opt_dst){e, NULL}, e, argc, argv);
    if (rc >= 0)
        return rc;
    if (!e->out) {
        fprintf(stderr, WHO ": %s: ampc export --format F DIR OUT\n",
                e->dir ? "which output file?" : "which checkpoint, and which output file?");
        return EXIT_USAGE;
    }
    if (!e->format) {
        fprintf(stderr, WHO ": which format? --format F, one of:");
        for (size_t i = 0; i < N_FORMATS; i++)
            fprintf(stderr, " %s", formats[i].name);
        fprintf(stderr, "\n");
        return EXIT_USAGE;
    }
    return -1;
}

int export_parse(int argc, char **argv)
{
    export_opts e;
    return export_parse_into(argc, argv, &e);
}

/* Whether OUT is the checkpoint itself (the same file under any name):
 * writing it would replace the run's checkpoint. */
static bool out_is_checkpoint(const export_opts *e)
{
    char ck[CLI_PATH_MAX];
    checkpoint_path(ck, sizeof ck, e->dir);
    struct stat a, b;
    return stat(ck, &a) == 0 && stat(e->out, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int export_main(int argc, char **argv)
{
    export_opts e;
    int rc = export_parse_into(argc, argv, &e);
    if (rc >= 0)
        return rc;
    if (out_is_checkpoint(&e)) {
        fprintf(stderr, WHO ": %s is the checkpoint itself: give another output file\n", e.out);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(e.format, formats[i].name) == 0)
            return formats[i].write(&e);
    fprintf(stderr, WHO ": --format '%s': not a format ampc writes; one of:", e.format);
    for (size_t i = 0; i < N_FORMATS; i++)
        fprintf(stderr, " %s (%s)", formats[i].name, formats[i].what);
    fprintf(stderr, "\n");
    return EXIT_USAGE;
}
