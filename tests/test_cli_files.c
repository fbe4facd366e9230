/*
 * test_cli_files.c - what the ampc program does with files that are not
 * regular files (issue 11): `--data /dev/zero` for the gpt read until
 * memory ran out and a FIFO given as a checkpoint, a data file, a log or
 * plot's input blocked forever. Each is now exit 1 at once, naming the
 * path and what it is. An alarm turns a block into a failure of this
 * test instead of a hang.
 */
#include "test_cli_util.h"

#include <signal.h>

static char tiny[256], fifo[256];

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: ampc blocked for 30 s (on a FIFO?)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    _exit(1);
}

#define REFUSED(what, needle)                                                                              \
    do {                                                                                                   \
        CHECK_MSG(rc == 1, "%s: exit %d, expected 1:\n%s", what, rc, cli_out);                             \
        CHECK_OUT(needle);                                                                                 \
    } while (0)

static void test_data_that_is_no_regular_file_is_refused(void)
{
    if (!cli_have_binary())
        return;
    int rc = cli_run("train --model gpt --data /dev/zero --steps 2 --threads 1");
    REFUSED("gpt --data /dev/zero", "/dev/zero: not a regular file (a character device)");
    rc = cli_run("train --model gpt --data %s --steps 2 --threads 1", fifo);
    REFUSED("gpt --data FIFO", "not a regular file (a FIFO)");
    /* An IDX directory whose training images are a FIFO. */
    char dir[512], path[600];
    cli_path(dir, sizeof dir, "fifo-idx");
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    CHECK(mkfifo(path, 0600) == 0);
    rc = cli_run("train --model mlp --data %s --steps 2 --threads 1", dir);
    REFUSED("mlp --data with a FIFO", "train-images-idx3-ubyte: not a regular file (a FIFO)");
}

static void test_a_log_that_is_no_regular_file_is_refused(void)
{
    if (!cli_have_binary())
        return;
    int rc = cli_run("train --model mlp --data %s --hidden 8 --batch 16 --steps 2 --threads 1 --log %s", tiny, fifo);
    REFUSED("--log FIFO", "not a regular file (a FIFO)");
    rc = cli_run("plot %s", fifo);
    REFUSED("plot FIFO", "not a regular file (a FIFO)");
    rc = cli_run("plot /dev/zero");
    REFUSED("plot /dev/zero", "not a regular file (a character device)");
}

static void test_a_checkpoint_that_is_no_regular_file_is_refused(void)
{
    if (!cli_have_binary())
        return;
    char dir[512], path[600];
    cli_path(dir, sizeof dir, "fifo-ck");
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    CHECK(mkfifo(path, 0600) == 0);
    int rc = cli_run("train --resume %s", dir);
    REFUSED("train --resume FIFO", "checkpoint.safetensors: not a regular file (a FIFO)");
    rc = cli_run("eval %s", dir);
    REFUSED("eval FIFO", "checkpoint.safetensors: not a regular file (a FIFO)");
}

int main(void)
{
    if (!cli_init("test-cli-files"))
        return 1;
    cli_path(tiny, sizeof tiny, "tiny");
    cli_write_tiny_images(tiny);
    cli_path(fifo, sizeof fifo, "fifo");
    if (mkfifo(fifo, 0600) != 0) {
        perror("mkfifo");
        return 1;
    }
    signal(SIGALRM, on_alarm);
    alarm(30);
    RUN(test_data_that_is_no_regular_file_is_refused);
    RUN(test_a_log_that_is_no_regular_file_is_refused);
    RUN(test_a_checkpoint_that_is_no_regular_file_is_refused);
    alarm(0);
    cli_cleanup();
    return harness_done();
}
