/*
 * util.c - see util.h.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FILES 4

static char dir[512];
static char paths[MAX_FILES][600];
static int n_paths;

static void cleanup(void)
{
    for (int i = 0; i < n_paths; i++)
        unlink(paths[i]);
    if (dir[0])
        rmdir(dir);
}

static void die(const char *what, const char *path)
{
    fprintf(stderr, "fuzz harness: %s %s: %s\n", what, path, strerror(errno));
    exit(2);
}

const char *fuzz_dir(void)
{
    if (dir[0])
        return dir;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ampc-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        die("cannot make a directory like", dir);
    atexit(cleanup);
    return dir;
}

const char *fuzz_file(const char *name, const uint8_t *data, size_t size)
{
    int slot = 0;
    char path[sizeof paths[0]];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    while (slot < n_paths && strcmp(paths[slot], path) != 0)
        slot++;
    if (slot == n_paths) {
        if (n_paths == MAX_FILES) {
            fprintf(stderr, "fuzz harness: more than %d file names\n", MAX_FILES);
            exit(2);
        }
        snprintf(paths[n_paths++], sizeof paths[0], "%s", path);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die("cannot create", path);
    for (size_t at = 0; at < size;) {
        ssize_t w = write(fd, data + at, size - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("cannot write", path);
        at += (size_t)w;
    }
    if (close(fd) != 0)
        die("cannot close", path);
    return paths[slot];
}

void fuzz_run_make(fuzz_run *r, fuzz_kind kind)
{
    amp_manual_seed(7);
    const int64_t hidden[] = {8};
    const amp_gpt_config gpt = {.vocab = 3, .context = 4, .width = 4, .layers = 2, .heads = 1, .mlp = 4};
    r->kind = kind;
    r->m = kind == FUZZ_GPT ? amp_model_gpt(gpt) : amp_model_mlp(4, hidden, 1, 3);
    bool ok = r->m && (kind != FUZZ_LEVERS || amp_module_to_dtype(r->m, AMP_BF16) == AMP_OK);
    amp_tensor *ps[32];
    int n = ok ? amp_module_params(r->m, ps, 32) : 0;
    amp_sgd_opts so = amp_sgd_defaults();
    so.momentum = 0.9;
    r->o = kind == FUZZ_SGD ? amp_optim_sgd(ps, n, so) : amp_optim_adam(ps, n, amp_adam_defaults());
    if (r->o && kind == FUZZ_LEVERS)
        ok = ok && amp_optim_set_master_weights(r->o, true) == AMP_OK &&
             amp_optim_set_state_dtype(r->o, AMP_BF16) == AMP_OK;
    r->s = amp_scaler_new(amp_scaler_defaults());
    if (!ok || !r->o || !r->s) {
        fprintf(stderr, "fuzz harness: cannot build the run: %s\n", amp_last_error());
        exit(2);
    }
}

void fuzz_run_free(fuzz_run *r)
{
    amp_optim_free(r->o);
    amp_module_free(r->m);
    amp_scaler_free(r->s);
    *r = (fuzz_run){0};
}
