/*
 * checkpoint_cli.c - a run's checkpoint, DIR/checkpoint.safetensors: saved
 * with amp_checkpoint_save (the run's settings as its JSON), read back in
 * two stages for --resume and `ampc eval`:
 *
 *   1. the settings alone, from the file's safetensors header, to know
 *      which model to build (amp_checkpoint_load needs a built model);
 *   2. amp_checkpoint_load into that model (and optimizer and scaler),
 *      which checks the whole file before it changes anything.
 *
 * Errors name the file; the exit code is 1 and nothing is overwritten.
 */
#include "checkpoint_cli.h"

#include "io/checkpoint.h"
#include "io/file.h"
#include "io/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_HEADER ((uint64_t)100 << 20) /* as the safetensors library */

/* DIR/checkpoint.safetensors; or DIR itself when it is a file whose name
 * ends in .safetensors (eval, generate and --resume then read that file;
 * --save still wants a directory, preflight.c). */
void checkpoint_path(char *buf, size_t n, const char *dir)
{
    static const char ext[] = ".safetensors";
    size_t len = strlen(dir);
    struct stat sb;
    if (len >= sizeof ext && strcmp(dir + len - (sizeof ext - 1), ext) == 0 && stat(dir, &sb) == 0 &&
        S_ISREG(sb.st_mode))
        snprintf(buf, n, "%s", dir);
    else
        snprintf(buf, n, "%s/%s", dir, CHECKPOINT_FILE);
}

static int ck_fail(const char *path, const char *fmt, const char *detail)
{
    fprintf(stderr, "ampc: checkpoint %s: ", path);
    fprintf(stderr, fmt, detail);
    fprintf(stderr, "\n");
    return 1;
}

/* The header's __metadata__ "settings" string, malloc'd; NULL after a
 * message. */
static char *read_settings_text(const char *path)
{
    char why[160];
    int64_t size;
    FILE *f = file_fopen_read(path, 0, &size, why, sizeof why); /* a FIFO would block */
    if (!f) {
        ck_fail(path, "%s", why);
        return NULL;
    }
    unsigned char len8[8];
    char *header = NULL, *settings = NULL;
    uint64_t n = 0;
    if (fread(len8, 1, 8, f) != 8) {
        ck_fail(path, "%s", "truncated: shorter than the 8-byte header length");
        goto out;
    }
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n < 2 || n > MAX_HEADER) {
        ck_fail(path, "%s", "not a safetensors file (its header length is implausible)");
        goto out;
    }
    header = malloc((size_t)n);
    if (!header) {
        ck_fail(path, "%s", "out of memory for its header");
        goto out;
    }
    if (fread(header, 1, (size_t)n, f) != (size_t)n) {
        ck_fail(path, "%s", "truncated inside its header");
        goto out;
    }
    char err[256];
    const json_value *root;
    json_doc *doc = json_parse(header, (size_t)n, &root, err, sizeof err);
    if (!doc) {
        ck_fail(path, "its header is not valid JSON (%s)", err);
        goto out;
    }
    const json_value *meta = json_get(root, "__metadata__");
    const json_value *s = meta ? json_get(meta, "settings") : NULL;
    if (!s || s->type != JSON_STRING)
        ck_fail(path, "%s", "holds no run settings (not written by ampc train?)");
    else if (!(settings = strdup(s->str)))
        ck_fail(path, "%s", "out of memory");
    json_free(doc);
out:
    free(header);
    fclose(f);
    return settings;
}

int checkpoint_read_settings(const char *dir, train_opts *ck, run_info *ri)
{
    if (!*dir) { /* not the root's checkpoint.safetensors */
        fprintf(stderr, "ampc: the checkpoint directory is empty (''): give the directory a run saved in, or its "
                        ".safetensors file\n");
        return EXIT_USAGE;
    }
    char path[CLI_PATH_MAX];
    checkpoint_path(path, sizeof path, dir);
    char *text = read_settings_text(path);
    if (!text)
        return 1;
    train_opts_default(ck);
    memset(ri, 0, sizeof *ri);
    int rc = settings_from_json(text, path, ck, ri);
    free(text);
    return rc;
}

/* A lower bound on the parameters of o's model for ri: its weight
 * matrices alone (build.c and the library's models), in a double so that
 * no product overflows. */
static double min_params(const train_opts *o, const run_info *ri)
{
    double n = 0;
    if (strcmp(o->model, "mlp") == 0) {
        double in = (double)ri->features;
        for (int i = 0; i < o->n_hidden; i++) {
            n += in * (double)o->hidden[i];
            in = (double)o->hidden[i];
        }
        return n + in * (double)ri->classes;
    }
    if (strcmp(o->model, "cnn") == 0) /* conv 3x3 ->32, ->64, linear 64*(h/4)*(w/4) -> 128 -> classes */
        return (double)ri->channels * 32 * 9 + 32.0 * 64 * 9 +
               64.0 * (double)(ri->height / 4) * (double)(ri->width / 4) * 128 + 128.0 * (double)ri->classes;
    double w = (double)o->width; /* embeddings; per block q, k, v, proj and the MLP's two */
    return ((double)ri->vocab + (double)o->context) * w +
           (double)o->layers * (4 * w * w + 2 * w * (double)o->mlp_width);
}

int checkpoint_check_size(const char *dir, const train_opts *o, const run_info *ri)
{
    char path[CLI_PATH_MAX];
    checkpoint_path(path, sizeof path, dir);
    struct stat sb;
    /* The parameters in their storage dtype: 16-bit ones hold 2 bytes each
     * (their f32 masters exist only after the first optimizer step, so a
     * checkpoint saved before it has none). */
    double width = o->param_dtype && strcmp(o->param_dtype, "fp32") != 0 ? 2 : 4;
    double need = width * min_params(o, ri);
    if (stat(path, &sb) != 0 || need <= (double)sb.st_size)
        return -1; /* (a missing file is the load's to report) */
    fprintf(stderr,
            "ampc: checkpoint %s: its settings describe a model of at least %.0f parameters (%.0f bytes), more "
            "than the file's %lld bytes can hold (damaged settings?)\n",
            path, need / width, need, (long long)sb.st_size);
    return 1;
}

void checkpoint_clean(const char *dir)
{
    char path[CLI_PATH_MAX];
    checkpoint_path(path, sizeof path, dir);
    ckpt_remove_stale_temps(path);
}

int checkpoint_load_run(const char *dir, trainer *t, bool load_state, bool load_scaler, int64_t *step)
{
    char path[CLI_PATH_MAX];
    checkpoint_path(path, sizeof path, dir);
    if (amp_checkpoint_load(path, t->model, load_state ? t->opt : NULL, load_scaler ? t->scaler : NULL, step,
                            NULL) != AMP_OK) {
        fprintf(stderr, "ampc: %s\n", amp_last_error());
        return 1;
    }
    return -1;
}

int checkpoint_save_run(const char *dir, const trainer *t, const train_opts *o, const run_info *ri,
                        int64_t step)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ampc: --save %s: cannot create the directory: %s\n", dir, strerror(errno));
        return 1;
    }
    char path[CLI_PATH_MAX];
    checkpoint_path(path, sizeof path, dir);
    char *json = settings_to_json(o, ri);
    if (!json) {
        fprintf(stderr, "ampc: checkpoint %s: out of memory\n", path);
        return 1;
    }
    amp_status st = amp_checkpoint_save(path, t->model, t->opt, t->scaler, step, json);
    free(json);
    if (st != AMP_OK) {
        fprintf(stderr, "ampc: %s\n", amp_last_error());
        return 1;
    }
    return -1;
}
