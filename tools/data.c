/*
 * data.c - the training data in memory: Fashion-MNIST loaded from its IDX
 * files and normalised once, or a text corpus; batches copied into buffers
 * that live for the whole run (no allocation per step).
 *
 * A training batch depends on (seed, micro-batch number) alone (and, in a
 * data-parallel run, the rank and world size): images come from the
 * seeded permutation of their epoch (each rank its DistributedSampler
 * shard of it, see batcher_train in data.h), text windows from a seed
 * derived from the step (and the rank), token files' rows (--data-bin,
 * tokens.c) likewise. So a run resumed at step N draws
 * exactly the batches the uninterrupted run would have.
 */
#include "data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Test images per forward pass: small enough that evaluation does not set
 * the peak memory (a no-grad forward still keeps its pass's activations). */
#define EVAL_BATCH 128

/* The file DIR/NAME.gz when it exists, else DIR/NAME when that exists,
 * else DIR/NAME.gz (so that the error names the usual file). */
static void pick_file(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s/%s.gz", dir, name);
    if (access(out, F_OK) == 0)
        return;
    snprintf(out, n, "%s/%s", dir, name);
    if (access(out, F_OK) == 0)
        return;
    snprintf(out, n, "%s/%s.gz", dir, name);
}

/* What an images file's header may announce, checked before its data is
 * read or allocated: far beyond Fashion-MNIST (60000 x 28 x 28), and small
 * enough that a corrupt or hostile header (a gzip file can promise much
 * more than its size) fails with a message instead of an allocation of
 * gigabytes, or a zero that later divides. The library's amp_idx_load
 * takes any dims (an empty tensor is a tensor); these limits are the
 * program's. */
#define MAX_SIDE 16384            /* image height or width */
#define MAX_FEATURES (1ll << 24)  /* pixels per image */
#define MAX_PIXELS (1ll << 31)    /* pixels in a file: 8 GiB as f32 */
#define MAX_LABEL 65535           /* the largest class number */

typedef struct {
    int ndim;
    int64_t d[8];
} idx_header;

/* Reads the dims of path's IDX header (plain or gzip). False when the
 * file cannot be read or its header is not well-formed: amp_idx_load then
 * reports it, in its words. */
static bool idx_peek(const char *path, idx_header *h)
{
    struct stat st; /* only regular files: opening a FIFO would wait for a writer */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return false;
    unsigned char b[4 + 4 * 8];
    bool ok = gzread(f, b, 4) == 4 && b[0] == 0 && b[1] == 0 && b[3] <= 8;
    if (ok) {
        h->ndim = b[3];
        ok = gzread(f, b + 4, 4u * (unsigned)h->ndim) == 4 * h->ndim;
        for (int i = 0; ok && i < h->ndim; i++)
            h->d[i] = (int64_t)((uint32_t)b[4 + 4 * i] << 24 | (uint32_t)b[5 + 4 * i] << 16 |
                                (uint32_t)b[6 + 4 * i] << 8 | b[7 + 4 * i]);
    }
    gzclose(f);
    return ok;
}

/* Checks the headers of an images file and its labels file against each
 * other and the limits above; false after a message naming the file and
 * the header field. A header that cannot be read passes (the loader says
 * what is wrong with it). */
static bool idx_headers_ok(const char *xpath, const char *ypath)
{
    idx_header x, y;
    if (!idx_peek(xpath, &x))
        return true;
    static const char *const field3[] = {"image count", "height", "width"};
    static const char *const field2[] = {"image count", "features per image"};
    const char *const *field = x.ndim == 3 ? field3 : field2;
    if (x.ndim != 2 && x.ndim != 3) {
        fprintf(stderr, "ampc: %s: the header gives %d dimension%s; images are [count, height, width] "
                        "(or [count, features])\n", xpath, x.ndim, x.ndim == 1 ? "" : "s");
        return false;
    }
    int64_t features = 1;
    for (int i = 0; i < x.ndim; i++) {
        if (x.d[i] == 0) {
            fprintf(stderr, "ampc: %s: the header's %s (dimension %d) is 0%s\n", xpath, field[i], i,
                    i == 0 ? ": the file holds no images" : ": the images are empty");
            return false;
        }
        if (i > 0 && x.ndim == 3 && x.d[i] > MAX_SIDE) {
            fprintf(stderr, "ampc: %s: the header's %s (dimension %d) is %lld, more than %d\n", xpath, field[i], i,
                    (long long)x.d[i], MAX_SIDE);
            return false;
        }
        if (i > 0)
            features *= x.d[i];
    }
    if (features > MAX_FEATURES || x.d[0] * features > MAX_PIXELS) {
        fprintf(stderr, "ampc: %s: the header announces %lld images of %lld pixels: more than %lld pixels %s\n",
                xpath, (long long)x.d[0], (long long)features,
                features > MAX_FEATURES ? (long long)MAX_FEATURES : (long long)MAX_PIXELS,
                features > MAX_FEATURES ? "per image" : "in all");
        return false;
    }
    if (!idx_peek(ypath, &y))
        return true;
    if (y.ndim != 1) {
        fprintf(stderr, "ampc: %s: the header gives %d dimension%s; labels are [count]\n", ypath, y.ndim,
                y.ndim == 1 ? "" : "s");
        return false;
    }
    if (y.d[0] != x.d[0]) {
        fprintf(stderr, "ampc: %s: the header's label count (dimension 0) is %lld, but %s holds %lld images\n",
                ypath, (long long)y.d[0], xpath, (long long)x.d[0]);
        return false;
    }
    return true;
}

bool dataset_load(dataset *d, const char *dir, const char *prefix)
{
    char xpath[4096], ypath[4096], name[64];
    memset(d, 0, sizeof *d);
    if (strlen(dir) + sizeof name >= sizeof xpath) { /* the file names would be cut short */
        fprintf(stderr, "ampc: --data %.80s...: the path is too long (%zu bytes)\n", dir, strlen(dir));
        return false;
    }
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    pick_file(xpath, sizeof xpath, dir, name);
    snprintf(d->images, sizeof d->images, "%s", xpath);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    pick_file(ypath, sizeof ypath, dir, name);

    if (!idx_headers_ok(xpath, ypath))
        return false;
    d->x = amp_idx_load(xpath, AMP_F32);
    d->y = d->x ? amp_idx_load(ypath, AMP_I64) : NULL;
    if (!d->x || !d->y) {
        fprintf(stderr, "ampc: %s\n", amp_last_error());
        fprintf(stderr, "ampc: --data %s should hold Fashion-MNIST's IDX files "
                        "(train-images-idx3-ubyte.gz and the like)\n", dir);
        dataset_free(d);
        return false;
    }
    d->n = amp_tensor_ndim(d->x) >= 2 ? amp_tensor_dim(d->x, 0) : 0;
    if (d->n < 1 || amp_tensor_ndim(d->y) != 1 || amp_tensor_dim(d->y, 0) != d->n) {
        char xs[96], ys[96];
        fprintf(stderr, "ampc: %s is %s and %s is %s: expected [n, ...] images and [n] labels\n", xpath,
                amp_shape_str(amp_tensor_shape(d->x), xs, sizeof xs), ypath,
                amp_shape_str(amp_tensor_shape(d->y), ys, sizeof ys));
        dataset_free(d);
        return false;
    }
    d->features = amp_tensor_numel(d->x) / d->n;
    /* [n, h, w] images keep their shape for the cnn; [n, f] rows are 1 x f. */
    d->height = amp_tensor_ndim(d->x) >= 3 ? amp_tensor_dim(d->x, 1) : 1;
    if (d->features < 1 || d->height < 1) { /* idx_headers_ok said so already; never divide by it */
        fprintf(stderr, "ampc: %s: the images are empty\n", xpath);
        dataset_free(d);
        return false;
    }
    d->width = d->features / d->height;

    const int64_t *y = amp_tensor_cdata(d->y);
    for (int64_t i = 0; i < d->n; i++) {
        if (y[i] < 0 || y[i] > MAX_LABEL) {
            fprintf(stderr, "ampc: %s: label %lld at index %lld is not a class number (0 to %d)\n", ypath,
                    (long long)y[i], (long long)i, MAX_LABEL);
            dataset_free(d);
            return false;
        }
        if (y[i] + 1 > d->classes)
            d->classes = y[i] + 1;
    }

    /* x/255 then (x - mean)/std, folded into one multiply-add. */
    float *x = amp_tensor_data(d->x);
    const float a = (float)(1.0 / (255.0 * FMNIST_STD)), b = (float)(-FMNIST_MEAN / FMNIST_STD);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0, n = amp_tensor_numel(d->x); i < n; i++) {
        x[i] = x[i] * a + b;
        if (!isfinite(x[i]) && bad++ == 0)
            first = i;
    }
    /* f32 IDX images (type 0x0D) may hold inf / NaN. Said at once, not at
     * the step whose batch first holds one: then the scaler skips that
     * step (fp16) or the run stops on a NaN loss (fp32, bf16), and eval
     * refuses such images. */
    if (bad)
        fprintf(stderr, "ampc: warning: %s holds %lld inf/NaN values (the first in image %lld, pixel %lld): a batch "
                        "holding one gives a NaN loss\n", xpath, (long long)bad, (long long)(first / d->features),
                (long long)(first % d->features));
    return true;
}

void dataset_free(dataset *d)
{
    amp_tensor_free(d->x);
    amp_tensor_free(d->y);
    d->x = d->y = NULL;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t draw_below(uint64_t *s, uint64_t bound)
{
    uint64_t threshold = -bound % bound;
    for (;;) {
        uint64_t r = splitmix64(s);
        if (r >= threshold)
            return r % bound;
    }
}

uint64_t derive_seed(uint64_t seed, uint64_t stream, uint64_t k)
{
    uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ull);
    s = splitmix64(&s) ^ k;
    return splitmix64(&s);
}

void shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch)
{
    /* One generator per (seed, epoch): epoch e's order does not depend on
     * how many numbers earlier epochs drew. */
    uint64_t s = seed ^ 0xA0761D6478BD642Full;
    s = splitmix64(&s) ^ (epoch * 0xE7037ED1A0B428DBull);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)draw_below(&s, (uint64_t)i + 1);
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

static bool init_batcher(batcher *b, const dataset *d, int64_t size, bool image, bool with_tail, int rank, int world)
{
    memset(b, 0, sizeof *b);
    b->epoch = -1;
    b->rank = with_tail ? 0 : rank;
    b->world = with_tail || world < 1 ? 1 : world;
    b->per_rank = (d->n + b->world - 1) / b->world;
    b->size = size < b->per_rank ? size : b->per_rank;
    b->tail = with_tail ? d->n % b->size : 0;
    amp_shape xs = image ? AMP_SHAPE(b->size, 1, d->height, d->width) : AMP_SHAPE(b->size, d->features);
    b->x = amp_empty(xs, AMP_F32);
    b->y = amp_empty(AMP_SHAPE(b->size), AMP_I64);
    bool ok = b->x && b->y;
    if (ok && b->tail) {
        xs.d[0] = b->tail;
        b->tail_x = amp_empty(xs, AMP_F32);
        b->tail_y = amp_empty(AMP_SHAPE(b->tail), AMP_I64);
        ok = b->tail_x && b->tail_y;
    }
    if (ok && !with_tail) {
        b->idx = malloc(sizeof *b->idx * (size_t)(b->per_rank * b->world));
        ok = b->idx != NULL;
    }
    if (!ok) {
        fprintf(stderr, "ampc: batch buffers for %lld rows: out of memory\n", (long long)b->size);
        batcher_free(b);
    }
    return ok;
}

bool batcher_init(batcher *b, const dataset *d, int64_t size, bool image, bool with_tail)
{
    return init_batcher(b, d, size, image, with_tail, 0, 1);
}

bool batcher_init_shard(batcher *b, const dataset *d, int64_t size, bool image, int rank, int world)
{
    return init_batcher(b, d, size, image, false, rank, world);
}

void batcher_free(batcher *b)
{
    amp_tensor_free(b->x);
    amp_tensor_free(b->y);
    amp_tensor_free(b->tail_x);
    amp_tensor_free(b->tail_y);
    free(b->idx);
    memset(b, 0, sizeof *b);
}

int64_t batcher_epoch_batches(const batcher *b, const dataset *d)
{
    (void)d;
    return b->per_rank / b->size;
}
int64_t batcher_count(const batcher *b, const dataset *d) { return (d->n + b->size - 1) / b->size; }

/* Copies rows (src[r], or first + r when src is NULL) into x and y. */
static void copy_rows(const dataset *d, const int64_t *src, int64_t first, int64_t rows, amp_tensor *x,
                      amp_tensor *y)
{
    int64_t f = d->features;
    float *bx = amp_tensor_data(x);
    int64_t *by = amp_tensor_data(y);
    const float *sx = amp_tensor_cdata(d->x);
    const int64_t *sy = amp_tensor_cdata(d->y);
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = src ? src[r] : first + r;
        memcpy(bx + r * f, sx + i * f, sizeof(float) * (size_t)f);
        by[r] = sy[i];
    }
}

bool batcher_train(batcher *b, const dataset *d, int64_t m, amp_tensor **x, amp_tensor **y)
{
    int64_t nb = batcher_epoch_batches(b, d), epoch = m / nb, k = m % nb;
    if (epoch != b->epoch) {
        shuffle_indices(b->idx, d->n, b->seed, (uint64_t)epoch);
        /* DistributedSampler's padding (drop_last false): the first rows
         * again, so that every rank has per_rank of them. */
        for (int64_t i = d->n; i < b->per_rank * b->world; i++)
            b->idx[i] = b->idx[i - d->n];
        /* Rank r's positions r, r + world, ... gathered to the front (one
         * rank: the permutation as it is). */
        if (b->world > 1)
            for (int64_t i = 0; i < b->per_rank; i++)
                b->idx[i] = b->idx[b->rank + i * b->world];
        b->epoch = epoch;
    }
    copy_rows(d, b->idx + k * b->size, 0, b->size, b->x, b->y);
    *x = b->x;
    *y = b->y;
    return true;
}

void batcher_fill(batcher *b, const dataset *d, int64_t k, amp_tensor **x, amp_tensor **y)
{
    bool full = k < d->n / b->size;
    *x = full ? b->x : b->tail_x;
    *y = full ? b->y : b->tail_y;
    copy_rows(d, NULL, k * b->size, full ? b->size : b->tail, *x, *y);
}

bool text_load(text_data *t, const char *path, int64_t batch, int64_t context)
{
    memset(t, 0, sizeof *t);
    t->text = amp_text_load(path);
    if (!t->text) {
        fprintf(stderr, "ampc: %s\n", amp_last_error());
        fprintf(stderr, "ampc: --data %s should be a text file or a directory of them (the default, %s, "
                        "is Debian's fortunes package)\n", path, TEXT_CORPUS);
        return false;
    }
    /* Any bytes are a corpus to the library; a NUL byte (the smallest
     * byte, so token 0) never occurs in text: --data points at something
     * else (an image set, a checkpoint). */
    if (amp_text_char(t->text, 0) == 0) {
        fprintf(stderr, "ampc: --data %s holds NUL bytes: binary data, not text (gpt trains on a text file or a "
                        "directory of them)\n", path);
        text_free(t);
        return false;
    }
    (void)batch; /* the token buffers come later (data_buffers), after the memory check */
    /* Both splits must hold a window (the error names the split). */
    int64_t n = amp_text_length(t->text), val = n - (n / 10 * 9 + n % 10 * 9 / 10);
    if (val < context + 1) {
        fprintf(stderr, "ampc: %s has %lld bytes: its validation split (the last 10%%, %lld) is shorter than "
                        "--context %lld + 1; give a longer text or a smaller --context\n", path, (long long)n,
                (long long)val, (long long)context);
        text_free(t);
        return false;
    }
    return true;
}

void text_free(text_data *t)
{
    amp_text_free(t->text);
    tok_close(&t->train);
    tok_close(&t->val);
    amp_tensor_free(t->x);
    amp_tensor_free(t->y);
    memset(t, 0, sizeof *t);
}

int64_t text_epoch_batches(const text_data *t, int64_t batch, int64_t context, int world)
{
    int64_t train = t->tokens ? t->train.n : amp_text_length(t->text) / 10 * 9;
    int64_t per = batch * context * (world > 1 ? world : 1);
    return train / per > 0 ? train / per : 1;
}

int tokens_load(text_data *t, const train_opts *o, bool train)
{
    memset(t, 0, sizeof *t);
    t->tokens = true;
    if (!o->val_bin) {
        fprintf(stderr, "ampc: --data-bin needs --val-bin FILE: the token file the validation loss is measured on\n");
        return EXIT_USAGE;
    }
    int rc = tok_data_vocab(o->data_bin, o->vocab, &t->vocab, "ampc");
    if (rc < 0)
        rc = tok_val_vocab(o->val_bin, t->vocab, "ampc");
    if (rc >= 0)
        return rc;
    if ((train && !tok_open(&t->train, o->data_bin, "--data-bin", t->vocab, o->context + 1)) ||
        !tok_open(&t->val, o->val_bin, "--val-bin", t->vocab, o->context + 1)) {
        text_free(t);
        return EXIT_USAGE;
    }
    return -1;
}

bool text_batch(text_data *t, bool val, uint64_t seed, int rank, int world)
{
    if (t->tokens)
        return tok_fill(val ? &t->val : &t->train, seed, t->x, t->y);
    return amp_text_batch_shard(t->text, val, seed, rank, world, t->x, t->y) == AMP_OK;
}

int64_t text_vocab(const text_data *t) { return t->tokens ? t->vocab : amp_text_vocab(t->text); }

int data_buffers(run_data *rd, const train_opts *o)
{
    text_data *t = &rd->text;
    if (!rd->gpt || t->x)
        return -1;
    t->x = amp_empty(AMP_SHAPE(o->batch, o->context), AMP_I64);
    t->y = amp_empty(AMP_SHAPE(o->batch, o->context), AMP_I64);
    if (t->x && t->y)
        return -1;
    fprintf(stderr, "ampc: token buffers [%lld, %lld] (--batch x --context): out of memory\n", (long long)o->batch,
            (long long)o->context);
    amp_tensor_free(t->x);
    amp_tensor_free(t->y);
    t->x = t->y = NULL;
    return 1;
}

static int open_data(run_data *rd, const train_opts *o, run_info *ri, bool train)
{
    memset(rd, 0, sizeof *rd);
    rd->gpt = is_gpt(o);
    if (rd->gpt && o->data_bin) {
        int rc = tokens_load(&rd->text, o, train);
        ri->vocab = rd->text.vocab;
        ri->token_ids = true;
        ri->data_bytes = rd->text.train.bytes;
        ri->data_hash = rd->text.train.hash;
        return rc;
    }
    if (rd->gpt) {
        if (!text_load(&rd->text, o->data, o->batch, o->context))
            return 1;
        vocab_record(rd->text.text, ri);
        return -1;
    }
    if (train && !dataset_load(&rd->train, o->data, "train"))
        return 1;
    if (!dataset_load(&rd->test, o->data, "t10k")) {
        data_close(rd);
        return 1;
    }
    const dataset *ref = train ? &rd->train : &rd->test;
    if (train && (rd->test.features != rd->train.features || rd->test.height != rd->train.height ||
                  rd->test.classes > rd->train.classes)) {
        fprintf(stderr, "ampc: %s: the test set (%lldx%lld images, %lld classes) does not match the "
                        "training set (%lldx%lld images, %lld classes)\n", o->data,
                (long long)rd->test.height, (long long)rd->test.width, (long long)rd->test.classes,
                (long long)rd->train.height, (long long)rd->train.width, (long long)rd->train.classes);
        data_close(rd);
        return 1;
    }
    bool image = strcmp(o->model, "cnn") == 0;
    if (image && (ref->height % 4 || ref->width % 4)) {
        fprintf(stderr, "ampc: %s: the cnn needs images whose height and width divide by 4; these are %lldx%lld\n",
                o->data, (long long)ref->height, (long long)ref->width);
        data_close(rd);
        return 1;
    }
    ri->features = ref->features;
    ri->channels = 1;
    ri->height = ref->height;
    ri->width = ref->width;
    ri->classes = ref->classes;
    if ((train && !batcher_init_shard(&rd->tb, &rd->train, o->batch, image, amp_dist_rank(),
                                      amp_dist_world_size())) ||
        !batcher_init(&rd->eb, &rd->test, EVAL_BATCH, image, true)) {
        data_close(rd);
        return 1;
    }
    rd->tb.seed = o->seed;
    return -1;
}

/* The data set and the batch buffers are counted as data in the memory
 * categories (amp_memory_report), apart from the model's memory. */
int data_open(run_data *rd, const train_opts *o, run_info *ri, bool train)
{
    amp_mem_category prev = amp_memory_set_category(AMP_MEM_DATA);
    int rc = open_data(rd, o, ri, train);
    amp_memory_set_category(prev);
    return rc;
}

void data_close(run_data *rd)
{
    batcher_free(&rd->tb);
    batcher_free(&rd->eb);
    dataset_free(&rd->train);
    dataset_free(&rd->test);
    text_free(&rd->text);
}

void vocab_record(const amp_text *text, run_info *ri)
{
    static const char hex[] = "0123456789abcdef";
    ri->vocab = amp_text_vocab(text);
    for (int64_t id = 0; id < ri->vocab && id < 256; id++) {
        unsigned char c = (unsigned char)amp_text_char(text, id);
        ri->vocab_hex[2 * id] = hex[c >> 4];
        ri->vocab_hex[2 * id + 1] = hex[c & 15];
    }
    ri->vocab_hex[2 * (ri->vocab < 256 ? ri->vocab : 256)] = '\0';
}

int vocab_check(const run_info *have, const run_info *saved, const char *data, const char *where,
                const char *who)
{
    if (!saved->vocab_hex[0]) {
        fprintf(stderr, "%s: warning: the checkpoint %s does not record its vocabulary (saved before ampc kept it, "
                        "or not by ampc train): only its size is checked against %s's\n", who, where, data);
        return -1;
    }
    if (strcmp(have->vocab_hex, saved->vocab_hex) == 0)
        return -1;
    size_t i = 0;
    while (have->vocab_hex[i] == saved->vocab_hex[i])
        i++;
    unsigned a = 0, b = 0;
    sscanf(have->vocab_hex + i / 2 * 2, "%2x", &a);
    sscanf(saved->vocab_hex + i / 2 * 2, "%2x", &b);
    fprintf(stderr, "%s: %s has the checkpoint's vocabulary size (%lld) but other characters: token %zu is byte 0x%02x "
                    "there and 0x%02x in the model in %s (give the training text with --data)\n", who, data,
            (long long)have->vocab, i / 2, a, b, where);
    return 1;
}

/* data_check for token files: the same kind of vocabulary, of the same
 * size, and (training) the same --data-bin as the run's. */
static int tokens_check(const run_info *have, const run_info *saved, const train_opts *o, const char *where)
{
    if (have->token_ids != saved->token_ids) {
        fprintf(stderr, "ampc: the model in %s was trained on %s: give %s\n", where,
                saved->token_ids ? "token files (--data-bin)" : "a text (--data), characters not token ids",
                saved->token_ids ? "its --data-bin / --val-bin" : "the text with --data, not --data-bin");
        return 1;
    }
    if (have->vocab != saved->vocab) {
        fprintf(stderr, "ampc: --data-bin %s: a vocabulary of %lld token ids; the model in %s was trained on token "
                        "ids of size %lld\n", o->data_bin, (long long)have->vocab, where, (long long)saved->vocab);
        return 1;
    }
    if (have->data_bytes && saved->data_bytes &&
        (have->data_bytes != saved->data_bytes || have->data_hash != saved->data_hash)) {
        fprintf(stderr, "ampc: --data-bin %s is not the file the run in %s trained on (%llu bytes, hash %016llx; "
                        "the run's: %llu bytes, hash %016llx)\n", o->data_bin, where,
                (unsigned long long)have->data_bytes, (unsigned long long)have->data_hash,
                (unsigned long long)saved->data_bytes, (unsigned long long)saved->data_hash);
        return 1;
    }
    return -1;
}

int data_check(const run_info *have, const run_info *saved, const train_opts *o, const char *where)
{
    if (is_gpt(o) && (have->token_ids || saved->token_ids))
        return tokens_check(have, saved, o, where);
    if (is_gpt(o)) {
        if (have->vocab == saved->vocab)
            return vocab_check(have, saved, o->data, where, "ampc");
        fprintf(stderr, "ampc: --data %s has a vocabulary of %lld characters; the model in %s was trained on "
                        "one of %lld (give the same text as --data)\n", o->data, (long long)have->vocab, where,
                (long long)saved->vocab);
        return 1;
    }
    if (have->features == saved->features && have->height == saved->height && have->classes <= saved->classes)
        return -1;
    fprintf(stderr, "ampc: --data %s has %lldx%lld images in %lld classes; the model in %s takes %lldx%lld images "
                    "in %lld classes\n", o->data, (long long)have->height, (long long)have->width,
            (long long)have->classes, where, (long long)saved->height, (long long)saved->width,
            (long long)saved->classes);
    return 1;
}

int data_resume_check(const train_opts *o, train_opts *ck, const run_info *saved, const char *where)
{
    if (!is_gpt(ck))
        return -1;
    if (saved->token_ids && o->given[RO_data]) {
        fprintf(stderr, "ampc: the model in %s was trained on token ids (--data-bin %s), not a text: leave --data "
                        "out (another token file to measure on: --val-bin FILE)\n",
                where, ck->data_bin ? ck->data_bin : "?");
        return EXIT_USAGE;
    }
    if (saved->token_ids && o->given[RO_vocab] && ck->vocab == 0) {
        /* The run read its vocabulary beside its --data-bin: compare with that. */
        if (o->vocab != saved->vocab) {
            fprintf(stderr, "ampc: --vocab %lld conflicts with the checkpoint %s, whose run has %lld token ids (the "
                            "vocab_size written beside its --data-bin): leave --vocab out\n",
                    (long long)o->vocab, where, (long long)saved->vocab);
            return EXIT_USAGE;
        }
        ck->vocab = saved->vocab;
    }
    const char *tok = o->given[RO_data_bin] ? "data-bin" : o->given[RO_val_bin] ? "val-bin"
                    : o->given[RO_vocab]  ? "vocab" : NULL;
    if (!saved->token_ids && tok) {
        fprintf(stderr, "ampc: the model in %s was trained on a text (--data %s), characters not token ids: leave "
                        "--%s out (the text to measure on: --data FILE)\n",
                where, ck->data ? ck->data : TEXT_CORPUS, tok);
        return EXIT_USAGE;
    }
    return -1;
}

int64_t data_epoch_batches(const run_data *rd, const train_opts *o)
{
    return rd->gpt ? text_epoch_batches(&rd->text, o->batch, o->context, amp_dist_world_size())
                   : batcher_epoch_batches(&rd->tb, &rd->train);
}
