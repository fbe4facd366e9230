/*
 * seeds.c - fuzz_seeds OUTDIR: writes the generated part of the seed
 * corpora, OUTDIR/checkpoint/ and OUTDIR/idx/ (committed under
 * fuzz/corpus/; see README.md for how they were made):
 *
 *   checkpoint/  checkpoints of fuzz_run's mlp saved by the library after
 *                one training step (Adam with the scaler; SGD with
 *                momentum, no scaler; bf16 weights with f32 masters and
 *                bf16 Adam state; the model alone), with the run's
 *                settings JSON, and a few broken ones cut from them
 *   idx/         small IDX files of every element type, plain and gzip,
 *                and a few broken ones
 */
#include "settings.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static const char *out;

static const char *at(const char *sub, const char *name)
{
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s/%s", out, sub, name);
    return p;
}

static void put(const char *path, const void *data, size_t n, bool gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb9");
        if (!f || gzwrite(f, data, (unsigned)n) != (int)n || gzclose(f) != Z_OK) {
            fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
            exit(1);
        }
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
        exit(1);
    }
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *p = malloc(1 << 20);
    *n = f && p ? fread(p, 1, 1 << 20, f) : 0;
    if (f)
        fclose(f);
    return p;
}

/* One step of training, so that the optimizer has state to save. */
static void step(fuzz_run *r)
{
    amp_tensor *x = amp_randn(AMP_SHAPE(2, 4), AMP_F32, 0, 1);
    int64_t labels[] = {0, 2};
    amp_tensor *y = amp_from_data(AMP_SHAPE(2), AMP_I64, labels);
    bool lowered = r->kind == FUZZ_LEVERS;
    if (lowered && amp_autocast_begin(AMP_CPU, AMP_BF16) != AMP_OK) {
        fprintf(stderr, "fuzz_seeds: %s\n", amp_last_error());
        exit(1);
    }
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(r->m, x), y);
    if (lowered)
        amp_autocast_end();
    if (amp_backward(amp_scaler_scale(r->s, loss)) != AMP_OK || amp_scaler_step(r->s, r->o, NULL) != AMP_OK ||
        amp_scaler_update(r->s) != AMP_OK) {
        fprintf(stderr, "fuzz_seeds: a training step failed: %s\n", amp_last_error());
        exit(1);
    }
    amp_temps_free();
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void checkpoints(void)
{
    train_opts o;
    train_opts_default(&o);
    o.model = "mlp";
    o.hidden[0] = 8;
    o.n_hidden = 1;
    o.steps = 2;
    opts_resolve(&o); /* the strings settings_to_json writes (schedule, data) */
    run_info ri = {.features = 4, .channels = 1, .height = 2, .width = 2, .classes = 3, .sched_step = 1};
    char *json = settings_to_json(&o, &ri);
    static const struct {
        fuzz_kind kind;
        const char *name;
    } runs[] = {{FUZZ_ADAM, "adam.safetensors"}, {FUZZ_SGD, "sgd.safetensors"}, {FUZZ_LEVERS, "levers.safetensors"}};
    fuzz_run r;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        fuzz_run_make(&r, runs[k].kind);
        step(&r);
        bool adam = runs[k].kind == FUZZ_ADAM;
        if (amp_checkpoint_save(at("checkpoint", runs[k].name), r.m, r.o, runs[k].kind == FUZZ_SGD ? NULL : r.s, 1,
                                json) != AMP_OK) {
            fprintf(stderr, "fuzz_seeds: %s\n", amp_last_error());
            exit(1);
        }
        if (adam && amp_checkpoint_save(at("checkpoint", "model.safetensors"), r.m, NULL, NULL, 0, NULL) != AMP_OK) {
            fprintf(stderr, "fuzz_seeds: %s\n", amp_last_error());
            exit(1);
        }
        fuzz_run_free(&r);
    }
    free(json);
    size_t n;
    unsigned char *p = slurp(at("checkpoint", "adam.safetensors"), &n);
    put(at("checkpoint", "broken-truncated"), p, n - 9, false);
    put(at("checkpoint", "broken-header-only"), p, 8 + (p[0] | p[1] << 8), false);
    p[0] ^= 0x40; /* a header length past the end */
    put(at("checkpoint", "broken-length"), p, n, false);
    free(p);
    put(at("checkpoint", "broken-short"), "\x02\0\0\0\0\0\0\0{}", 10, false);
}

/* An IDX file: magic, type, dims, then the elements (big-endian). */
static size_t idx(unsigned char *b, unsigned char type, int ndim, const unsigned *dims, size_t esize)
{
    size_t n = 0, numel = 1;
    b[n++] = 0, b[n++] = 0, b[n++] = type, b[n++] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        b[n++] = (unsigned char)(dims[i] >> 24), b[n++] = (unsigned char)(dims[i] >> 16);
        b[n++] = (unsigned char)(dims[i] >> 8), b[n++] = (unsigned char)dims[i];
        numel *= dims[i];
    }
    for (size_t i = 0; i < numel * esize; i++)
        b[n++] = (unsigned char)(i * 37 + 11);
    return n;
}

static void idx_files(void)
{
    unsigned char b[4096];
    const unsigned img[] = {3, 4, 4}, lab[] = {5}, mat[] = {2, 3};
    size_t n = idx(b, 0x08, 3, img, 1);
    put(at("idx", "images-u8"), b, n, false);
    put(at("idx", "images-u8.gz"), b, n, true);
    put(at("idx", "broken-trailing"), b, n + 1, false);
    put(at("idx", "broken-truncated.gz"), b, n - 3, true);
    b[2] = 0x0A;
    put(at("idx", "broken-type"), b, n, false);
    n = idx(b, 0x08, 1, lab, 1);
    put(at("idx", "labels-u8"), b, n, false);
    put(at("idx", "labels-u8.gz"), b, n, true);
    n = idx(b, 0x09, 2, mat, 1);
    put(at("idx", "i8"), b, n, false);
    n = idx(b, 0x0B, 2, mat, 2);
    put(at("idx", "i16"), b, n, false);
    n = idx(b, 0x0C, 2, mat, 4);
    put(at("idx", "i32.gz"), b, n, true);
    const float f[] = {0.5f, -1.0f, 3e38f, 1e-40f, 255.0f, 7.0f};
    n = idx(b, 0x0D, 2, mat, 0);
    for (int i = 0; i < 6; i++) {
        uint32_t u;
        memcpy(&u, &f[i], 4);
        b[n++] = (unsigned char)(u >> 24), b[n++] = (unsigned char)(u >> 16);
        b[n++] = (unsigned char)(u >> 8), b[n++] = (unsigned char)u;
    }
    put(at("idx", "f32"), b, n, false);
    n = idx(b, 0x0E, 1, lab, 8);
    put(at("idx", "f64.gz"), b, n, true);
    const unsigned zero[] = {0, 7};
    n = idx(b, 0x08, 2, zero, 1);
    put(at("idx", "empty-u8"), b, n, false);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds OUTDIR\n");
        return 2;
    }
    out = argv[1];
    char d[1024];
    mkdir(out, 0777);
    snprintf(d, sizeof d, "%s/checkpoint", out);
    mkdir(d, 0777);
    snprintf(d, sizeof d, "%s/idx", out);
    mkdir(d, 0777);
    checkpoints();
    idx_files();
    return 0;
}
