/*
 * test_cli_files.c - what the ampc program does with files that are not
 * regular files: `--data /dev/zero` for the gpt would read until memory
 * ran out, and a FIFO given as a checkpoint, a data file, a log or plot's
 * input would block forever. Each is exit 1 at once, naming the path and
 * what it is. An alarm turns a block into a failure of this
 * test instead of a hang. Output is a file too: standard output on a
 * full disk, or a pipe whose reader left, is an error naming it.
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
    int rc = cli_run("train --model mlp --data %s --hidden 8 --batch 16 --steps 2 --threads 1 --log %s", tiny, fifo);
    REFUSED("--log FIFO", "not a regular file (a FIFO)");
    rc = cli_run("plot %s", fifo);
    REFUSED("plot FIFO", "not a regular file (a FIFO)");
    rc = cli_run("plot /dev/zero");
    REFUSED("plot /dev/zero", "not a regular file (a character device)");
}

static void test_a_checkpoint_that_is_no_regular_file_is_refused(void)
{
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

/* Runs "ampc ARGS" with stdout to /dev/full (every write fails with
 * ENOSPC) and stderr into cli_out; the exit code. */
static int run_to_full_disk(const char *args)
{
    char err[512], cmd[2048];
    cli_path(err, sizeof err, "stderr.txt");
    snprintf(cmd, sizeof cmd, "'%s' %s >/dev/full 2>'%s'", cli_ampc, args, err);
    int st = system(cmd);
    char *text = cli_read_file(err, NULL);
    snprintf(cli_out, sizeof cli_out, "%s", text ? text : "");
    free(text);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Output that cannot be written is an error naming standard output, exit
 * 1, never lost with exit 0: every command's printing is checked. */
static void test_output_to_a_full_disk_is_an_error(void)
{
    char text[512], dir[512], args[1400];
    cli_write_tiny_text(cli_path(text, sizeof text, "tiny.txt"));
    cli_path(dir, sizeof dir, "gpt");
    CLI_OK("train --model gpt --data %s --layers 1 --heads 2 --width 16 --context 8 --batch 4 --steps 2 "
           "--threads 1 --val-batches 1 --save %s",
           text, dir);
    snprintf(args, sizeof args, "generate %s --tokens 20", dir);
    int rc = run_to_full_disk(args);
    CHECK_MSG(rc == 1 && strstr(cli_out, "writing token 1 to standard output failed: No space left on device"),
              "generate: exit %d:\n%s", rc, cli_out);
    const char *cmds[] = {"eval %s", "policy --markdown", "--help", "train --model mlp --data %s --hidden 4 "
                                                                      "--batch 16 --steps 2 --threads 1"};
    const char *what[] = {dir, NULL, NULL, tiny};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, cmds[i], what[i]);
        rc = run_to_full_disk(args);
        CHECK_MSG(rc == 1 && strstr(cli_out, "ampc: writing to standard output failed: No space left on device"),
                  "%s: exit %d:\n%s", args, rc, cli_out);
    }
}

/* A reader that goes away: with SIGPIPE ignored (as some shells and
 * services run programs) generate stops at the first failed write
 * (EPIPE) and exits 1, instead of sampling every token for nobody. */
static void test_generate_stops_at_a_closed_pipe(void)
{
    char dir[512], err[512], rcf[512], cmd[3000];
    cli_path(dir, sizeof dir, "gpt");
    cli_path(err, sizeof err, "pipe-stderr.txt");
    cli_path(rcf, sizeof rcf, "pipe-rc.txt");
    /* timeout: without the stop, 10^6 tokens would run for minutes */
    snprintf(cmd, sizeof cmd,
             "trap '' PIPE; (timeout 60 '%s' generate %s --tokens 1000000 2>'%s'; echo $? >'%s') | head -c 10 "
             ">/dev/null",
             cli_ampc, dir, err, rcf);
    CHECK(system(cmd) == 0);
    char *e = cli_read_file(err, NULL), *r = cli_read_file(rcf, NULL);
    CHECK_MSG(r && atoi(r) == 1, "exit %s (124: still generating after 60 s)", r ? r : "?");
    CHECK_MSG(e && strstr(e, "to standard output failed: Broken pipe"), "stderr:\n%s", e ? e : "");
    free(e);
    free(r);
}

/* tmpdir/long/aaa.../aaa.../bbb of exactly len bytes, the directories
 * up to the last created (the last one is not). */
static void make_long_dir(char *buf, size_t n, size_t len)
{
    cli_path(buf, n, "long");
    mkdir(buf, 0700);
    while (strlen(buf) + 2 * 51 < len) {
        strcat(buf, "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
        mkdir(buf, 0700);
    }
    strcat(buf, "/");
    while (strlen(buf) < len)
        strcat(buf, "b");
}

/* A --save directory whose path fits, but whose checkpoint's temporary
 * name (DIR/checkpoint.safetensors.tmp.PID) does not: refused before any
 * step, naming that name and the reason. (The probe used to try a
 * shorter name, so the run trained and then failed to save.) A path over
 * PATH_MAX is refused as an option. */
static void test_a_save_path_too_long_for_its_temporary_is_refused_first(void)
{
    static char dir[PATH_MAX + 200];
    make_long_dir(dir, sizeof dir, PATH_MAX - 20); /* fits PATH_MAX; its temporary's name does not */
    CHECK(strlen(dir) < PATH_MAX && strlen(dir) + strlen("/checkpoint.safetensors.tmp.1") >= PATH_MAX);
    static char args[2 * PATH_MAX + 1024];
    snprintf(args, sizeof args, "train --model mlp --data %s --hidden 4 --batch 16 --steps 2 --threads 1 --save %s",
             tiny, dir);
    int rc = cli_run("%s", args);
    CHECK_MSG(rc == 1 && strstr(cli_out, "has a name longer than the system takes: File name too long") &&
                  strstr(cli_out, "(nothing was trained)") && !strstr(cli_out, "step 1/"),
              "exit %d:\n%.300s ... %s", rc, cli_out, strlen(cli_out) > 300 ? cli_out + strlen(cli_out) - 300 : "");
    strcat(dir, "/cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc");
    snprintf(args, sizeof args, "train --model mlp --data %s --steps 1 --save %s", tiny, dir);
    rc = cli_run("%s", args);
    CHECK_MSG(rc == 2 && strstr(cli_out, "--save: the path is ") && strstr(cli_out, "(PATH_MAX)"), "exit %d", rc);
}

/* The library's messages keep their reason, which comes after the path,
 * for a path of thousands of bytes (not cut short). */
static void test_a_long_path_keeps_the_reason_in_library_errors(void)
{
    static char dir[PATH_MAX + 200], path[PATH_MAX + 300];
    make_long_dir(dir, sizeof dir, 3900);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    amp_module *m = amp_nn_linear(2, 2, true);
    CHECK(amp_checkpoint_load(path, m, NULL, NULL, NULL, NULL) == AMP_ERR_IO);
    const char *e = amp_last_error();
    CHECK_MSG(strstr(e, path) && strstr(e, "No such file or directory"), "%zu bytes: ...%s", strlen(e),
              strlen(e) > 200 ? e + strlen(e) - 200 : e);
    amp_module_free(m);
}

/* `ampc plot LOG -o old.svg` when the new SVG cannot be written whole
 * (here a file-size limit, as a full disk): old.svg stays byte for byte
 * and no temporary is left (not truncated, then deleted). */
static void test_plot_that_cannot_be_written_keeps_the_old_svg(void)
{
    char log[512], svg[512], cmd[3000];
    cli_path(log, sizeof log, "plot.jsonl");
    cli_path(svg, sizeof svg, "old.svg");
    CLI_OK("train --model mlp --data %s --hidden 4 --batch 16 --steps 30 --threads 1 --log %s", tiny, log);
    CLI_OK("plot %s -o %s", log, svg);
    size_t n0 = 0, n1 = 0;
    char *before = cli_read_file(svg, &n0);
    CHECK_MSG(before && n0 > 4096, "the SVG should be larger than the limit (%zu bytes)", n0);
    /* 2 KiB at most per file; SIGXFSZ ignored, so a write past it fails with EFBIG */
    snprintf(cmd, sizeof cmd, "sh -c \"trap '' XFSZ; ulimit -f 2; exec '%s' plot '%s' -o '%s'\" > '%s.err' 2>&1",
             cli_ampc, log, svg, svg);
    int st = system(cmd);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "plot under the limit: status %d", st);
    char errf[600];
    snprintf(errf, sizeof errf, "%s.err", svg);
    char *err = cli_read_file(errf, NULL);
    CHECK_MSG(err && strstr(err, "File too large") && strstr(err, "left as it was"), "%s", err ? err : "");
    free(err);
    char *after = cli_read_file(svg, &n1);
    CHECK_MSG(after && n1 == n0 && memcmp(before, after, n0) == 0, "old.svg changed (%zu -> %zu bytes)", n0, n1);
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c 'old.svg.tmp' > '%s.n'", tmpdir, svg);
    CHECK(system(cmd) != -1);
    snprintf(errf, sizeof errf, "%s.n", svg);
    char *count = cli_read_file(errf, NULL);
    CHECK_MSG(count && atoi(count) == 0, "temporaries left: %s", count ? count : "?");
    free(count);
    free(before);
    free(after);
}

int main(void)
{
    cli_init_tiny("test-cli-files", tiny, NULL);
    cli_path(fifo, sizeof fifo, "fifo");
    if (mkfifo(fifo, 0600) != 0) {
        perror("mkfifo");
        return 1;
    }
    signal(SIGALRM, on_alarm);
    alarm(30);
    RUN_IF(cli_have_binary, test_data_that_is_no_regular_file_is_refused);
    RUN_IF(cli_have_binary, test_a_log_that_is_no_regular_file_is_refused);
    RUN_IF(cli_have_binary, test_a_checkpoint_that_is_no_regular_file_is_refused);
    alarm(0);
    RUN_IF(cli_have_binary, test_output_to_a_full_disk_is_an_error);
    RUN_IF(cli_have_binary, test_generate_stops_at_a_closed_pipe);
    RUN_IF(cli_have_binary, test_a_save_path_too_long_for_its_temporary_is_refused_first);
    RUN(test_a_long_path_keeps_the_reason_in_library_errors);
    RUN_IF(cli_have_binary, test_plot_that_cannot_be_written_keeps_the_old_svg);
    cli_cleanup();
    return harness_done();
}
