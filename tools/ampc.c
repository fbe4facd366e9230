/*
 * ampc.c - the ampc program: picks the command, answers --help and
 * --version. The commands live in their own files (see cli.h).
 */
#include "cli.h"

#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: ampc <command> [options]\n\n"
               "ampc trains neural networks in C, with mixed precision on the way.\n\n"
               "commands:\n"
               "  train        train an MLP on Fashion-MNIST and report its test accuracy\n"
               "  policy       print the autocast policy: each op's category per device\n\n"
               "  ampc --help, ampc --version, ampc <command> --help\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("ampc %s\n", AMPC_VERSION);
        return 0;
    }
    if (strcmp(cmd, "train") == 0) {
        train_opts o;
        train_opts_default(&o);
        int rc = train_parse(argc - 2, argv + 2, &o);
        return rc >= 0 ? rc : train_run(&o);
    }
    if (strcmp(cmd, "policy") == 0)
        return policy_run(argc - 2, argv + 2);
    fprintf(stderr, "ampc: unknown %s '%s' (see ampc --help)\n", cmd[0] == '-' ? "option" : "command",
            cmd);
    return EXIT_USAGE;
}
