/*
 * data.h - what a run reads (data.c): Fashion-MNIST and the text corpus
 * in memory (or token files, mapped: tokens.h), and batches derived from (seed, step) alone.
 *
 * Defines: FMNIST_DIR, TEXT_CORPUS, FMNIST_MEAN, FMNIST_STD, dataset,
 * dataset_load, dataset_free, shuffle_indices, derive_seed, TEXT_STREAM, batcher and
 * its batcher_* functions, draw_below, text_data, text_load, text_free,
 * text_epoch_batches, tokens_load, text_batch, text_vocab, run_data,
 * data_open, data_close, data_buffers, data_check, vocab_record, vocab_check, data_resume_check,
 * data_epoch_batches.
 */
#ifndef AMPC_DATA_H
#define AMPC_DATA_H

#include "settings.h"
#include "tokens.h"
#include "train_opts.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
/* Debian's `fortunes` package: amp_text_load reads the directory as one
 * corpus (its text files, not the .dat indexes). */
#define TEXT_CORPUS "/usr/share/games/fortunes"

/* Fashion-MNIST's pixel mean and std over the training set, after /255
 * (as in torchvision examples: Normalize((0.2860,), (0.3530,))). */
#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530

typedef struct {
    amp_tensor *x;       /* [n, features] f32, normalised */
    amp_tensor *y;       /* [n] i64 */
    int64_t n, features, classes;
    int64_t height, width; /* the images' shape (features = height * width) */
    char images[4096];     /* the images' file, for messages */
} dataset;

/* Loads DIR/PREFIX-images-idx3-ubyte(.gz) and the labels beside it,
 * normalising the pixels. On failure prints why (naming the file) on
 * stderr and returns false. */
bool dataset_load(dataset *d, const char *dir, const char *prefix);
void dataset_free(dataset *d);

/* A seeded permutation of 0..n-1, different for each epoch. */
void shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch);
/* A seed for item k of a stream derived from seed (splitmix64). */
uint64_t derive_seed(uint64_t seed, uint64_t stream, uint64_t k);
/* The stream of the training windows' seeds (train, audit): "txt". */
#define TEXT_STREAM 0x747874ull
/* The next draw of the generator *state, uniform in [0, bound), unbiased
 * (splitmix64; the draws below 2^64 mod bound are redrawn). */
uint64_t draw_below(uint64_t *state, uint64_t bound);

/* Batch buffers shaped [size, features] (mlp) or [size, 1, h, w] (cnn),
 * allocated once and refilled. */
typedef struct {
    amp_tensor *x, *y;
    amp_tensor *tail_x, *tail_y; /* the smaller last batch of a pass (evaluation) */
    int64_t size, tail;
    int64_t *idx;      /* the current epoch's order (training), padded to a multiple of world */
    int64_t epoch;     /* whose order idx holds; -1: none */
    uint64_t seed;
    int rank, world;   /* training: this rank's shard of world (DistributedSampler) */
    int64_t per_rank;  /* training: the shard's rows per epoch, ceil(n / world) */
} batcher;

bool batcher_init(batcher *b, const dataset *d, int64_t size, bool image, bool with_tail);
/* The same, for a training batcher (no tail) drawing rank's shard of world
 * ranks (batcher_init's is rank 0 of 1). */
bool batcher_init_shard(batcher *b, const dataset *d, int64_t size, bool image, int rank, int world);
void batcher_free(batcher *b);
/* Training: full batches per epoch of this rank's shard (the last partial
 * one is dropped, on every rank alike). */
int64_t batcher_epoch_batches(const batcher *b, const dataset *d);
/* Training micro-batch m of the run (m counts from 0 across epochs): its
 * rows depend on (seed, m, rank, world) only, so a resumed run continues
 * the order. With world ranks, DistributedSampler's: epoch e's permutation
 * of all n rows from (seed, e), the same on every rank, padded to a
 * multiple of world by repeating its first rows; rank r takes positions
 * r, r + world, r + 2 world ...; micro-batch k of the epoch is the k-th
 * run of size of those. One rank: the permutation in order. */
bool batcher_train(batcher *b, const dataset *d, int64_t m, amp_tensor **x, amp_tensor **y);
/* Evaluation: batch k of one in-order pass, the last one smaller. */
int64_t batcher_count(const batcher *b, const dataset *d);
void batcher_fill(batcher *b, const dataset *d, int64_t k, amp_tensor **x, amp_tensor **y);

/* The text corpus, or token files (--data-bin), and [batch, context]
 * token buffers. */
typedef struct {
    amp_text *text;         /* NULL with token files */
    tok_file train, val;    /* --data-bin (opened for training only), --val-bin */
    bool tokens;            /* token files, not text */
    int64_t vocab;          /* tokens: the ids' count */
    amp_tensor *x, *y;
} text_data;

/* Loads path (file or directory); false (message naming it) on failure.
 * The token buffers x, y are left NULL: data_buffers makes them. */
bool text_load(text_data *t, const char *path, int64_t batch, int64_t context);
void text_free(text_data *t);
/* Micro-batches per "epoch" of each of world ranks: together as many
 * tokens as the training split holds. */
int64_t text_epoch_batches(const text_data *t, int64_t batch, int64_t context, int world);
/* The token files of o (--data-bin when train, --val-bin) with o's
 * vocabulary or the one the data says; -1, or 1 / EXIT_USAGE after a
 * message naming the file. */
int tokens_load(text_data *t, const train_opts *o, bool train);
/* Fills t->x, t->y with a batch from seed: the validation split (val) or
 * rank's shard of the training one (text), or rows drawn from the token
 * file (tokens; every rank draws its own rows: seed differs per rank). */
bool text_batch(text_data *t, bool val, uint64_t seed, int rank, int world);
/* The vocabulary's size: characters, or token ids. */
int64_t text_vocab(const text_data *t);

/* Everything a run reads: the training and test sets (mlp, cnn) or the
 * corpus (gpt), with their batch buffers. */
typedef struct {
    bool gpt;
    dataset train, test;
    batcher tb, eb;
    text_data text;
} run_data;

/* Loads o's data (the training set too when train) and fills ri's input
 * shape, classes and vocabulary from it; -1, or 1 after a message naming
 * the file. */
int data_open(run_data *rd, const train_opts *o, run_info *ri, bool train);
void data_close(run_data *rd);
/* The gpt's [batch, context] token buffers (nothing for mlp and cnn, whose
 * batch buffers data_open makes, cut to the data set): made after the
 * memory check, which counts them, so that a huge --batch x --context is
 * an estimate that does not fit, not a failed allocation. -1, or 1 after
 * a message. */
int data_buffers(run_data *rd, const train_opts *o);
/* Checks that the data fits the checkpoint's model; -1 or 1. */
int data_check(const run_info *have, const run_info *saved, const train_opts *o, const char *where);
/* ri->vocab and ri->vocab_hex from text's vocabulary. */
void vocab_record(const amp_text *text, run_info *ri);
/* The vocabulary of --data (have) against the one the checkpoint recorded
 * (saved; sizes already equal): -1 when they are the same bytes, or when
 * the checkpoint predates the record (a warning on stderr then); 1 after
 * a message naming the first id whose byte differs. */
int vocab_check(const run_info *have, const run_info *saved, const char *data, const char *where,
                const char *who);
/* Before settings_merge: the data options given (o) against the kind of
 * data the run in where (ck, saved) trained on. A token-id model refuses
 * --data; a text model --data-bin, --val-bin and --vocab; a --vocab given
 * is compared with the run's vocabulary even when the run read it beside
 * its --data-bin (ck->vocab 0, then set from saved). -1, or EXIT_USAGE
 * after a message naming the run's kind of data. */
int data_resume_check(const train_opts *o, train_opts *ck, const run_info *saved, const char *where);
/* Micro-batches in one epoch. */
int64_t data_epoch_batches(const run_data *rd, const train_opts *o);

#endif
