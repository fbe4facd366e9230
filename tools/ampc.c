/*
 * ampc.c - the ampc program: picks the command (one table of them, which
 * dispatch and --help read), answers --help and --version, refuses a bad
 * environment before any command, and checks that what was printed
 * reached standard output. The commands live in their own files (see
 * cli.h).
 */
#include "backend/cpu/onednn/onednn.h"
#include "cli.h"
#include "memcheck.h"
#include "plot.h"

#include <errno.h>
#include <string.h>

/* The commands: the name, what --help shows of it, and what runs it (on
 * the arguments after the name). */
static const struct {
    const char *name, *synopsis, *what;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"train", "train", "train a model (cnn / mlp on Fashion-MNIST, gpt on text) and measure it", train_main},
    {"eval", "eval DIR", "measure the model saved in DIR by train --save", eval_run},
    {"generate", "generate DIR", "sample text from the gpt model saved in DIR (a KV cache, streamed)", generate_main},
    {"plot", "plot LOG", "draw a train --log file (loss, loss scale, skipped steps) as SVG", plot_run},
    {"policy", "policy", "print the autocast policy: each op's category per device", policy_run},
    {"profile", "profile", "the same run in fp32 / bf16 / fp16 under the profiler, side by side", profile_main},
    {"export", "export DIR OUT", "write the model saved in DIR in another format (--format hf: transformers, gguf: llama.cpp)",
     export_main},
    {"import", "import HF_DIR OUT", "read a Hugging Face transformers GPT-2 into an ampc checkpoint", import_main},
    {"audit", "audit", "per op and module, what 16 bits moved against an fp32 shadow; stalled updates", audit_main},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: ampc <command> [options]\n\n"
               "ampc trains neural networks in C, with mixed precision on the way.\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].synopsis, commands[i].what);
    fprintf(f, "\n"
               "  make train runs the default: ampc train (a CNN in bf16, about 25 s on 2 cores)\n"
               "  ampc --help, ampc --version, ampc <command> --help\n");
}

/* What a command printed must reach standard output: a full disk or a
 * closed pipe there (stdout's buffer is written at the latest here) is an
 * error naming it and exit 1, never a silent 0. (A command that failed
 * has said why already, generate's stop at a closed pipe among them.) */
static int finish_stdout(int rc)
{
    int err = fflush(stdout) != 0 ? errno : 0;
    if (!ferror(stdout) || rc != 0)
        return rc;
    fprintf(stderr, "ampc: writing to standard output failed: %s\n",
            err ? strerror(err) : "an earlier write failed");
    return 1;
}

/* The environment is input too: a variable the library or this program
 * reads, set to a value it does not take, is refused (exit 2) before any
 * command runs, rather than read as the default. */
static int check_environment(void)
{
    if (amp_check_environment() != AMP_OK) {
        fprintf(stderr, "ampc: %s\n", amp_last_error());
        return EXIT_USAGE;
    }
    int rc = mem_env_check();
    return rc < 0 ? opts_env_check() : rc;
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv)
{
    int rc = argc >= 2 ? check_environment() : -1;
    return finish_stdout(rc >= 0 ? rc : run_command(argc, argv));
}

static int run_command(int argc, char **argv)
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
        printf("ampc %s\n%s\nkernels %s\n", AMPC_VERSION, onednn_version_line(), amp_cpu_kernels());
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "ampc: unknown %s '%s' (see ampc --help)\n", cmd[0] == '-' ? "option" : "command",
            cmd);
    return EXIT_USAGE;
}
