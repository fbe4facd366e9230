/*
 * test_cli_dist.c - `mpirun -np 2 ampc train`: the program as one rank of
 * a data-parallel job (tools/dist_cli.c, tools/train.c). A normal CTest
 * test that runs mpirun itself (skipped, saying so, where mpirun is not
 * on the PATH).
 *
 *   - The data: DistributedSampler's shards (tools/data.c), in process:
 *     the ranks' micro-batch k together are exactly the rows of a
 *     1-process run's micro-batch k of twice the batch (as sets: the same
 *     rows, so the same mean loss up to summation order); a world that
 *     does not divide the set pads it with the permutation's first rows;
 *     a micro-batch depends on (seed, m, rank, world) alone (resume).
 *   - 2 ranks x batch B: one log and one checkpoint, written by rank 0,
 *     world_size 2 in both, one set of result lines; step 1's loss equals
 *     a 1-process run's with batch 2B within 1e-6 relative (fp32: the same
 *     rows and weights; only the order of the sums differs).
 *   - --stop-at / --resume on 2 ranks logs the uninterrupted 2-rank run's
 *     steps bit for bit (fp16, grad scaler, accumulation; and --zero 1); a
 *     2-rank checkpoint resumes on 1 process, saying the shards change; an
 *     --epochs run resumed on another world keeps its number of steps.
 *   - --zero 1 on 2 ranks logs DDP's steps exactly (bitwise, unclipped).
 *   - A --batch larger than a rank's shard: the banner shows the real one.
 *   - --health-every on 2 ranks: rank 0 logs and reports the f16 health
 *     once per measured step; with --zero 1 (a shard of the gradients per
 *     rank) it is refused.
 *   - Failure: a rank killed with kill -9 ends the job (mpirun exits
 *     non-zero within 30 s, naming rank 1); a stopped rank (SIGSTOP) makes
 *     the other time out (--dist-timeout 2, or AMPC_DIST_TIMEOUT=2) with
 *     comm's message naming what it waited for and rank 1 as the one that
 *     did not answer, then ampc ends the job; a rank that fails alone
 *     mid-run (rank 0's --log on /dev/full) ends the job at once, saying
 *     which rank and why.
 *   - Options: the data-parallel ones refused without mpirun and checked
 *     under it (exit 2, naming the option); ranks started with different
 *     options (--zero, --bucket-mb, --compress, --stop-at too) are refused.
 *
 * The training runs need amp_ddp (and, for --zero 1, amp_zero): where this
 * build still has their placeholders ("not implemented yet") those tests
 * are skipped with that reason.
 */
#define _GNU_SOURCE /* memmem */
#include "test_cli_util.h"

#include "checkpoint_cli.h"
#include "data.h"
#include "estimate.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>

static char tiny[256];
static char mpirun[1024];

#define NP2 "--oversubscribe --allow-run-as-root -np 2"
/* Tiny runs: one kernel thread a rank (2 ranks on 2 cores). */
#define MLP "--model mlp --data %s --hidden 32 --batch 16 --threads 1"

static bool have_mpirun(void)
{
    if (!cli_have_binary())
        return false;
    if (mpirun[0])
        return true;
    harness_skip("mpirun is not on the PATH (apt-get install openmpi-bin)");
    return false;
}

/* Whether this build's amp_ddp / amp_zero are the real ones (a world of
 * one rank: no MPI needed); else skips, saying why. */
static bool have_ddp(bool zero)
{
    if (!have_mpirun())
        return false;
    if (!amp_dist_available()) {
        harness_skip("ampc was built without MPI");
        return false;
    }
    amp_tensor *w = amp_zeros(AMP_SHAPE(4), AMP_F32);
    amp_tensor_set_requires_grad(w, true);
    bool ok;
    char why[512];
    if (zero) {
        amp_optim *o = amp_optim_sgd(&w, 1, amp_sgd_defaults());
        amp_zero *z = o ? amp_zero_new(o) : NULL;
        snprintf(why, sizeof why, "amp_zero is not available in this build: %s", amp_last_error());
        ok = z != NULL;
        amp_zero_free(z);
        amp_optim_free(o);
    } else {
        amp_ddp *d = amp_ddp_new(&w, 1, amp_ddp_defaults());
        snprintf(why, sizeof why, "amp_ddp is not available in this build: %s", amp_last_error());
        ok = d != NULL;
        amp_ddp_free(d);
    }
    amp_tensor_free(w);
    amp_clear_error();
    if (!ok)
        harness_skip(why);
    return ok;
}

/* "mpirun OPTS" as cli_run_env's prefix (cli_mpi). */
static const char *mpi(const char *opts) { return cli_mpi(mpirun, opts); }

/* ------------------------------------------------------------ the data */

/* A dataset of n one-pixel rows whose value is the row's index. */
static void index_set(dataset *d, int64_t n)
{
    memset(d, 0, sizeof *d);
    float *x = malloc(sizeof *x * (size_t)n);
    int64_t *y = malloc(sizeof *y * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)i, y[i] = i % 3;
    d->x = amp_from_data(AMP_SHAPE(n, 1), AMP_F32, x);
    d->y = amp_from_data(AMP_SHAPE(n), AMP_I64, y);
    d->n = n, d->features = 1, d->classes = 3, d->height = 1, d->width = 1;
    free(x);
    free(y);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_two_shards_together_are_the_double_batch(void)
{
    enum { N = 100, B = 8 };
    dataset d;
    index_set(&d, N);
    batcher one, r0, r1;
    CHECK(batcher_init(&one, &d, 2 * B, false, false));
    CHECK(batcher_init_shard(&r0, &d, B, false, 0, 2));
    CHECK(batcher_init_shard(&r1, &d, B, false, 1, 2));
    one.seed = r0.seed = r1.seed = 5;
    /* 100 rows: 50 a rank, 6 micro-batches of 8 (2 rows dropped), as the
     * 1-process run's 6 of 16 (4 dropped): the same rows. */
    CHECK_EQ_INT(batcher_epoch_batches(&r0, &d), 6);
    CHECK_EQ_INT(batcher_epoch_batches(&one, &d), 6);
    for (int64_t m = 0; m < 14; m++) { /* across epochs */
        amp_tensor *x, *y;
        int64_t a[2 * B], b[2 * B];
        batcher_train(&one, &d, m, &x, &y);
        for (int i = 0; i < 2 * B; i++)
            a[i] = (int64_t)((const float *)amp_tensor_cdata(x))[i];
        batcher_train(&r0, &d, m, &x, &y);
        for (int i = 0; i < B; i++)
            b[i] = (int64_t)((const float *)amp_tensor_cdata(x))[i];
        batcher_train(&r1, &d, m, &x, &y);
        for (int i = 0; i < B; i++)
            b[B + i] = (int64_t)((const float *)amp_tensor_cdata(x))[i];
        qsort(a, 2 * B, sizeof a[0], cmp_i64);
        qsort(b, 2 * B, sizeof b[0], cmp_i64);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "micro-batch %lld: the ranks' rows are not the 1-process batch's",
                  (long long)m);
    }
    batcher_free(&one);
    batcher_free(&r0);
    batcher_free(&r1);
    dataset_free(&d);
}

static void test_a_world_that_does_not_divide_the_set_pads_it(void)
{
    enum { N = 10, W = 4 };
    dataset d;
    index_set(&d, N);
    int64_t perm[N];
    shuffle_indices(perm, N, 9, 1); /* epoch 1 */
    for (int r = 0; r < W; r++) {
        batcher b;
        CHECK(batcher_init_shard(&b, &d, 3, false, r, W)); /* ceil(10 / 4) = 3 rows a rank: one batch */
        b.seed = 9;
        CHECK_EQ_INT(batcher_epoch_batches(&b, &d), 1);
        amp_tensor *x, *y;
        batcher_train(&b, &d, 1, &x, &y); /* micro-batch 1: epoch 1 */
        for (int k = 0; k < 3; k++) {
            int64_t pos = r + (int64_t)k * W; /* 12 positions: 10, 11 are the first two again */
            int64_t want = perm[pos % N];
            CHECK_MSG((int64_t)((const float *)amp_tensor_cdata(x))[k] == want, "rank %d row %d: %g, want %lld", r,
                      k, ((const float *)amp_tensor_cdata(x))[k], (long long)want);
        }
        batcher_free(&b);
    }
    dataset_free(&d);
}

static void test_a_micro_batch_depends_on_its_number_alone(void)
{
    dataset d;
    index_set(&d, 37);
    batcher seq, fresh;
    CHECK(batcher_init_shard(&seq, &d, 4, false, 1, 3));
    seq.seed = 3;
    float want[4];
    amp_tensor *x, *y;
    for (int64_t m = 0; m <= 7; m++)
        batcher_train(&seq, &d, m, &x, &y);
    memcpy(want, amp_tensor_cdata(x), sizeof want);
    CHECK(batcher_init_shard(&fresh, &d, 4, false, 1, 3));
    fresh.seed = 3;
    batcher_train(&fresh, &d, 7, &x, &y);
    CHECK(memcmp(want, amp_tensor_cdata(x), sizeof want) == 0);
    batcher_free(&seq);
    batcher_free(&fresh);
    dataset_free(&d);
}

/* ------------------------------------------------------------ training */

static double log_loss(const char *line)
{
    char v[64];
    return cli_json_field(line, "loss", v, sizeof v) ? atof(v) : NAN;
}

static void test_two_ranks_log_and_save_once_and_match_one_process(void)
{
    if (!have_ddp(false))
        return;
    char log2[512], log1[512], ck[512];
    cli_path(log2, sizeof log2, "two.jsonl");
    cli_path(log1, sizeof log1, "one.jsonl");
    cli_path(ck, sizeof ck, "two-ck");
    int rc = cli_run_env(mpi(NP2), "train " MLP " --steps 20 --precision fp32 --log %s --save %s", tiny, log2, ck);
    CHECK_MSG(rc == 0, "2 ranks: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("data-parallel: 2 ranks, batch 16 per rank (32 in all)");
    /* Rank 0 alone prints the results. */
    const char *p = strstr(cli_out, "test_accuracy");
    CHECK_MSG(p && !strstr(p + 1, "test_accuracy"), "one test_accuracy line expected:\n%s", cli_out);
    char *body = cli_read_file(log2, NULL), *lines[64];
    int n = body ? cli_lines(body, lines, 64) : 0;
    CHECK_EQ_INT(n, 20);
    for (int i = 0; i < n; i++)
        CHECK_MSG(cli_json_object_line(lines[i]) && strstr(lines[i], "\"world_size\":2}"), "log line %d: %s", i,
                  lines[i]);
    double loss2 = n ? log_loss(lines[0]) : NAN;
    free(body);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", ck, CHECKPOINT_FILE);
    size_t len = 0;
    char *file = cli_read_file(path, &len);
    CHECK_MSG(file && memmem(file, len, "world_size\\\":2", 14), "no world_size 2 in %s", path);
    free(file);
    /* No temporaries left beside it (rank 0 alone wrote it, atomically). */
    DIR *dir = opendir(ck);
    int entries = 0;
    for (struct dirent *e; dir && (e = readdir(dir));)
        entries += e->d_name[0] != '.';
    if (dir)
        closedir(dir);
    CHECK_EQ_INT(entries, 1);

    rc = cli_run("train " MLP " --steps 1 --precision fp32 --batch 32 --log %s", tiny, log1);
    CHECK_MSG(rc == 0, "1 process: exit %d:\n%s", rc, cli_out);
    n = cli_log_steps(log1, lines, 64, &body);
    CHECK_EQ_INT(n, 1);
    double loss1 = n ? log_loss(lines[0]) : NAN;
    free(body);
    /* The same 32 rows and weights: the sums' order differs (each rank's
     * mean of 16, averaged in f32), nothing else. */
    CHECK_MSG(fabs(loss2 - loss1) <= 1e-6 * fabs(loss1), "step 1: 2 ranks x 16 %.9g, 1 x 32 %.9g", loss2, loss1);

    /* The 2-rank checkpoint resumes on one process. */
    rc = cli_run("train --resume %s --steps 24 --threads 1", ck);
    CHECK_MSG(rc == 0, "resume on 1: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
    CHECK_OUT("saved on 2 ranks, resumed on 1");
}

/* --health-every on 2 ranks (DDP): rank 0 measures the averaged
 * gradients, the same on every rank: its log has the f16 keys at steps 2
 * and 4 (the scaled ones too, fp16 with the scaler), and one report per
 * measured step is printed (rank 0's). */
static void test_health_every_on_two_ranks(void)
{
    if (!have_ddp(false))
        return;
    char log[512];
    cli_path(log, sizeof log, "health2.jsonl");
    CLI_OK_ENV(mpi(NP2), "train " MLP " --steps 4 --precision fp16 --health-every 2 --log-every 2 --log %s",
               tiny, log);
    char *body = cli_read_file(log, NULL), *lines[16];
    int n = body ? cli_lines(body, lines, 16) : 0;
    CHECK_EQ_INT(n, 4);
    for (int i = 0; i < n; i++) {
        bool due = (i + 1) % 2 == 0;
        CHECK_MSG((strstr(lines[i], "\"f16_zero\":") != NULL) == due, "line %d: %s", i + 1, lines[i]);
        CHECK_MSG((strstr(lines[i], "\"f16_flush_scaled\":") != NULL) == due, "line %d: %s", i + 1, lines[i]);
    }
    free(body);
    const char *p = strstr(cli_out, "f16 health of the gradients at step 2:");
    CHECK_MSG(p && !strstr(p + 1, "f16 health of the gradients at step 2:"), "one report for step 2 expected:\n%s",
              cli_out);
}

static void test_stop_and_resume_on_two_ranks_is_bit_for_bit(void)
{
    if (!have_ddp(false))
        return;
    char la[512], lb[512], ck[512];
    cli_path(la, sizeof la, "straight.jsonl");
    cli_path(lb, sizeof lb, "stopped.jsonl");
    cli_path(ck, sizeof ck, "stop-ck");
    /* fp16 with the scaler from 2^24 (skips, then growth every 3 steps),
     * 2 micro-batches a step (no_sync on the first). */
    const char *args = MLP " --precision fp16 --init-scale 16777216 --growth-interval 3 --accum 2 --steps 12";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, args, tiny);
    int rc = cli_run_env(mpi(NP2), "train %s --log %s", cmd, la);
    CHECK_MSG(rc == 0, "straight: exit %d:\n%s", rc, cli_out);
    rc = cli_run_env(mpi(NP2), "train %s --stop-at 6 --save %s --log %s", cmd, ck, lb);
    CHECK_MSG(rc == 0, "stopped: exit %d:\n%s", rc, cli_out);
    rc = cli_run_env(mpi(NP2), "train --resume %s --threads 1 --log %s", ck, lb);
    CHECK_MSG(rc == 0, "resumed: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
    char *ba, *bb, *a[64], *b[64];
    int na = cli_log_steps(la, a, 64, &ba), nb = cli_log_steps(lb, b, 64, &bb);
    CHECK_EQ_INT(na, 12);
    CHECK_EQ_INT(nb, 12);
    for (int i = 0; i < na && i < nb; i++)
        CHECK_MSG(strcmp(a[i], b[i]) == 0, "step %d:\n  straight %s\n  resumed  %s", i + 1, a[i], b[i]);
    bool skipped = false, taken = false; /* the scaler's state was at stake */
    for (int i = 0; i < na; i++)
        skipped |= strstr(a[i], "\"skipped\":true") != NULL, taken |= strstr(a[i], "\"skipped\":false") != NULL;
    CHECK(skipped && taken);
    free(ba);
    free(bb);
}

/* Two checkpoints of one run, at steps 2 and 4, each resumed by one rank
 * (an MPMD command line): refused before any step, naming both steps,
 * and neither checkpoint is touched (rank 0 used to train "steps 3-4"
 * against rank 1's "5-6" and overwrite the step-2 checkpoint). */
static void test_ranks_resuming_from_different_steps_are_refused(void)
{
    if (!have_ddp(false))
        return;
    char a[512], b[512], fa[600], fb[600], cmd[1024];
    cli_path(a, sizeof a, "step2");
    cli_path(b, sizeof b, "step4");
    snprintf(cmd, sizeof cmd, MLP " --steps 8", tiny);
    CLI_OK_ENV(mpi(NP2), "train %s --stop-at 2 --save %s", cmd, a);
    CLI_OK_ENV(mpi(NP2), "train %s --stop-at 4 --save %s", cmd, b);
    snprintf(fa, sizeof fa, "%s/checkpoint.safetensors", a);
    snprintf(fb, sizeof fb, "%s/checkpoint.safetensors", b);
    size_t na0 = 0, nb0 = 0, na1 = 0, nb1 = 0;
    char *a0 = cli_read_file(fa, &na0), *b0 = cli_read_file(fb, &nb0);
    int rc = cli_run_env(mpi("--oversubscribe --allow-run-as-root -np 1"),
                         "train --resume %s --save-every 1 : -np 1%s '%s' train --resume %s --save-every 1", a,
                         cli_mpi_env(), cli_ampc, b);
    CHECK_MSG(rc == 2, "exit %d, expected 2:\n%s", rc, cli_out);
    CHECK_OUT("the ranks would start from different steps (rank 0 at step 2, rank 1 at step 4");
    CHECK_MSG(!strstr(cli_out, "step 3/") && !strstr(cli_out, "step 5/"), "a step was trained:\n%s", cli_out);
    char *a1 = cli_read_file(fa, &na1), *b1 = cli_read_file(fb, &nb1);
    CHECK_MSG(a0 && a1 && na0 == na1 && memcmp(a0, a1, na0) == 0, "the step-2 checkpoint changed");
    CHECK_MSG(b0 && b1 && nb0 == nb1 && memcmp(b0, b1, nb0) == 0, "the step-4 checkpoint changed");
    free(a0), free(a1), free(b0), free(b1);
    /* One rank resuming, the other starting afresh: refused the same way. */
    rc = cli_run_env(mpi("--oversubscribe --allow-run-as-root -np 1"),
                     "train --resume %s : -np 1%s '%s' train %s", a, cli_mpi_env(), cli_ampc, cmd);
    CHECK_MSG(rc == 2, "exit %d, expected 2:\n%s", rc, cli_out);
}

/* The memory estimate of a data-parallel run counts DDP's gradient
 * buckets (an f32 copy of every gradient; with --compress, 16-bit copies
 * and the world's gathered too): the model's part of the estimate is
 * within MEM_TOLERANCE of the measured one (without the buckets it was
 * 18% short here). */
static void test_memory_estimate_counts_the_gradient_buckets(void)
{
    if (!have_ddp(false))
        return;
    const char *compress[] = {"none", "bf16"};
    for (int i = 0; i < 2; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "--model mlp --data %s --hidden 512,512 --batch 16 --steps 2 --threads 1 "
                                  "--bucket-mb 1 --compress %s",
                 tiny, compress[i]);
        int rc = cli_run_env(mpi(NP2), "train %s --dry-run", cmd);
        CHECK_MSG(rc == 0, "dry run: exit %d:\n%s", rc, cli_out);
        double est = cli_value_after("(a run's 'peak memory' line): "), est_data = cli_value_after("the data set ");
        CLI_OK_ENV(mpi(NP2), "train %s", cmd);
        double model = cli_value_after("(model ");
        CHECK_MSG(est > 0 && est_data >= 0 && model > 0 &&
                      fabs((est - est_data) - model) <= MEM_TOLERANCE * model,
                  "--compress %s: the estimate's model part %.1f MiB, measured %.1f MiB", compress[i], est - est_data,
                  model);
    }
}

static void test_zero_1_trains_as_ddp(void)
{
    if (!have_ddp(false) || !have_ddp(true))
        return;
    char lz[512], ld[512], ck[512];
    cli_path(lz, sizeof lz, "zero.jsonl");
    cli_path(ld, sizeof ld, "ddp.jsonl");
    cli_path(ck, sizeof ck, "zero-ck");
    int rc = cli_run_env(mpi(NP2), "train " MLP " --steps 6 --precision fp32 --log %s", tiny, ld);
    CHECK_MSG(rc == 0, "ddp: exit %d:\n%s", rc, cli_out);
    rc = cli_run_env(mpi(NP2), "train " MLP " --steps 6 --precision fp32 --zero 1 --log %s --save %s", tiny, lz, ck);
    CHECK_MSG(rc == 0, "zero: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("ZeRO stage 1");
    char *bz, *bd, *z[16], *d[16];
    int nz = cli_log_steps(lz, z, 16, &bz), nd = cli_log_steps(ld, d, 16, &bd);
    CHECK_EQ_INT(nz, 6);
    CHECK_EQ_INT(nd, 6);
    /* The same averaged gradients and Adam updates, sharded: on 2 ranks,
     * unclipped, bitwise (docs/distributed.md, "Bitwise or not"): the
     * log lines (loss, lr, scale, grad norm) are the same text. */
    for (int i = 0; i < nz && i < nd; i++)
        CHECK_MSG(strcmp(z[i], d[i]) == 0, "step %d:\n  zero %s\n  ddp  %s", i + 1, z[i], d[i]);
    free(bz);
    free(bd);
    /* Its checkpoint (the state gathered) resumes on one process. */
    rc = cli_run("train --resume %s --steps 8 --threads 1", ck);
    CHECK_MSG(rc == 0, "resume on 1: exit %d:\n%s", rc, cli_out);
}

/* --zero 1 --stop-at 3, then --resume --zero 1 on 2 ranks, logs the
 * uninterrupted --zero 1 run's steps exactly (the state loaded whole, then
 * sharded by amp_zero_new). */
static void test_zero_1_stop_and_resume_is_bit_for_bit(void)
{
    if (!have_ddp(false) || !have_ddp(true))
        return;
    char la[512], lb[512], ck[512];
    cli_path(la, sizeof la, "zero-straight.jsonl");
    cli_path(lb, sizeof lb, "zero-stopped.jsonl");
    cli_path(ck, sizeof ck, "zero-stop-ck");
    int rc = cli_run_env(mpi(NP2), "train " MLP " --steps 6 --zero 1 --log %s", tiny, la);
    CHECK_MSG(rc == 0, "straight: exit %d:\n%s", rc, cli_out);
    rc = cli_run_env(mpi(NP2), "train " MLP " --steps 6 --zero 1 --stop-at 3 --save %s --log %s", tiny, ck, lb);
    CHECK_MSG(rc == 0, "stopped: exit %d:\n%s", rc, cli_out);
    rc = cli_run_env(mpi(NP2), "train --resume %s --zero 1 --threads 1 --log %s", ck, lb);
    CHECK_MSG(rc == 0, "resumed: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
    char *ba, *bb, *a[16], *b[16];
    int na = cli_log_steps(la, a, 16, &ba), nb = cli_log_steps(lb, b, 16, &bb);
    CHECK_EQ_INT(na, 6);
    CHECK_EQ_INT(nb, 6);
    for (int i = 0; i < na && i < nb; i++)
        CHECK_MSG(strcmp(a[i], b[i]) == 0, "step %d:\n  straight %s\n  resumed  %s", i + 1, a[i], b[i]);
    free(ba);
    free(bb);
}

/* An --epochs run keeps its length in steps when resumed on another
 * number of ranks: 256 rows, batch 16, 2 epochs is 16 steps on 2 ranks
 * (8 a rank an epoch), and stays 16 on 1 (where 2 epochs would be 32). */
static void test_an_epochs_run_resumed_on_another_world_keeps_its_steps(void)
{
    if (!have_ddp(false))
        return;
    char ck[512];
    cli_path(ck, sizeof ck, "epochs-ck");
    int rc = cli_run_env(mpi(NP2), "train " MLP " --epochs 2 --stop-at 12 --save %s", tiny, ck);
    CHECK_MSG(rc == 0, "2 ranks: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("stopped at step 12 of 16");
    rc = cli_run("train --resume %s --threads 1", ck);
    CHECK_MSG(rc == 0, "resume on 1: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("resumed from");
    CHECK_OUT("at step 12 of 16");
    /* (It saved at step 16.) A length given anew that the saved step is
     * past is refused, saying so. */
    rc = cli_run("train --resume %s --threads 1 --steps 10", ck);
    CHECK_MSG(rc == EXIT_USAGE, "--steps 10 after step 16: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("was saved at step 16, past this run's 10 steps");
}

/* A --batch larger than a rank's shard (256 rows over 2 ranks: 128) is
 * cut to it, and the configuration says so, with the real figures. */
static void test_a_batch_cut_to_the_shard_is_shown(void)
{
    if (!have_ddp(false))
        return;
    CLI_OK_ENV(mpi(NP2), "train --model mlp --data %s --hidden 8 --batch 200 --threads 1 --steps 1", tiny);
    CHECK_OUT("batch 128 (--batch 200 is more than the 128 rows a rank's shard holds)");
    CHECK_OUT("batch 128 per rank (256 in all)");
}

/* ------------------------------------------------------------- failure */

/* Starts "mpirun ARGS" with stdout and stderr into file err; its pid. */
static pid_t start_mpirun(const char *args, const char *err)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "exec %s '%s' %s", mpi(NP2), cli_ampc, args);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The pid of mpirun's child that is rank `rank` (its environment's
 * OMPI_COMM_WORLD_RANK), waiting up to 20 s for it; -1 when none. */
static pid_t find_rank(pid_t parent, int rank)
{
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    for (int tries = 0; tries < 200; tries++) {
        DIR *d = opendir("/proc");
        for (struct dirent *e; d && (e = readdir(d));) {
            pid_t pid = (pid_t)atoi(e->d_name);
            if (pid <= 0)
                continue;
            char path[64], buf[512];
            snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
            FILE *f = fopen(path, "r");
            int ppid = 0;
            if (f) {
                if (!fgets(buf, sizeof buf, f))
                    buf[0] = '\0';
                fclose(f);
                const char *rp = strrchr(buf, ')'); /* after the command name */
                if (!rp || sscanf(rp + 2, "%*c %d", &ppid) != 1)
                    ppid = 0;
            }
            if (ppid != parent)
                continue;
            snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
            static char env[1 << 16]; /* a /proc file has no size: read what comes */
            size_t len = 0;
            f = fopen(path, "rb");
            if (f) {
                len = fread(env, 1, sizeof env - 1, f);
                fclose(f);
            }
            env[len] = '\0';
            bool found = false;
            for (size_t i = 0; i < len; i += strlen(env + i) + 1)
                found |= strcmp(env + i, want) == 0;
            if (found) {
                closedir(d);
                return pid;
            }
        }
        if (d)
            closedir(d);
        usleep(100 * 1000);
    }
    return -1;
}

/* Waits up to limit_s for pid; its exit status (WEXITSTATUS, 128 + signal),
 * or -1 after killing its group when it did not end in time. */
static int wait_bounded(pid_t pid, double limit_s, double *took)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            *took = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) > limit_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            *took = limit_s;
            return -1;
        }
        usleep(50 * 1000);
    }
}

/* Waits (up to limit_s) until the file at path holds text: the job has
 * got that far (a fixed sleep is not enough under the sanitizers, where
 * starting MPI and loading the data can take longer than the sleep, and a
 * rank stopped inside MPI_Init leaves its peer in MPI_Init, where no
 * timeout of ours runs). */
static bool wait_for_text(const char *path, const char *text, double limit_s)
{
    for (int i = 0; i < (int)(limit_s * 20); i++) {
        char *s = cli_read_file(path, NULL);
        bool found = s && strstr(s, text);
        free(s);
        if (found)
            return true;
        usleep(50 * 1000);
    }
    return false;
}

/* A run long enough to be interrupted (minutes), rank 0 saying when it
 * trains. */
#define LONG_RUN "train " MLP " --steps 10000000 --log-every 100 --precision fp32"

static void test_a_rank_killed_ends_the_job_naming_it(void)
{
    if (!have_ddp(false))
        return;
    char err[512], args[1024];
    cli_path(err, sizeof err, "kill9.txt");
    snprintf(args, sizeof args, LONG_RUN, tiny);
    pid_t mp = start_mpirun(args, err);
    pid_t r1 = find_rank(mp, 1);
    CHECK_MSG(r1 > 0, "rank 1 not found among mpirun's children");
    CHECK_MSG(wait_for_text(err, "step 100/", 120), "rank 0 never reported step 100");
    if (r1 > 0)
        kill(r1, SIGKILL);
    double took;
    int rc = wait_bounded(mp, 30, &took);
    char *out = cli_read_file(err, NULL);
    CHECK_MSG(rc > 0, "mpirun exit %d after %.1f s:\n%s", rc, took, out ? out : "");
    /* Open MPI's report names the rank and the signal. */
    CHECK_MSG(out && strstr(out, "rank 1") && strstr(out, "signal 9"), "rank 1 / signal 9 not named:\n%s",
              out ? out : "");
    free(out);
}

/* Rank 1 stopped (SIGSTOP) while the job trains with a 2 s timeout (the
 * option, or the environment's AMPC_DIST_TIMEOUT when env). */
static void stop_rank_1(bool env)
{
    char err[512], args[1024];
    cli_path(err, sizeof err, "stop.txt");
    snprintf(args, sizeof args, LONG_RUN "%s", tiny, env ? "" : " --dist-timeout 2");
    if (env) /* mpirun passes it on (mpi_env's -x) */
        setenv("AMPC_DIST_TIMEOUT", "2", 1);
    pid_t mp = start_mpirun(args, err);
    if (env)
        unsetenv("AMPC_DIST_TIMEOUT");
    pid_t r1 = find_rank(mp, 1);
    CHECK_MSG(r1 > 0, "rank 1 not found among mpirun's children");
    CHECK_MSG(wait_for_text(err, "step 100/", 120), "rank 0 never reported step 100"); /* training */
    if (r1 > 0)
        kill(r1, SIGSTOP);
    double took;
    int rc = wait_bounded(mp, 30, &took);
    if (r1 > 0) /* in case mpirun left it */
        kill(r1, SIGKILL);
    char *out = cli_read_file(err, NULL);
    CHECK_MSG(rc > 0, "mpirun exit %d after %.1f s:\n%s", rc, took, out ? out : "");
    /* rank 0's call returns the timeout, naming rank 1, and ampc ends the job */
    CHECK_MSG(out && strstr(out, "ampc: rank 0: ") && strstr(out, "rank 0 timed out after 2 s waiting for") &&
                  strstr(out, "rank 1 did not answer") &&
                  strstr(out, "ampc: rank 0: this rank cannot go on: ending every rank of the job"),
              "rank 0's timeout not reported:\n%s", out ? out : "");
    free(out);
}

static void test_a_stopped_rank_times_the_other_out(void)
{
    if (have_ddp(false))
        stop_rank_1(false);
}

static void test_the_timeout_comes_from_the_environment_too(void)
{
    if (have_ddp(false))
        stop_rank_1(true);
}

static void test_a_rank_failing_alone_ends_the_job(void)
{
    if (!have_ddp(false))
        return;
    /* Rank 0 alone writes the log: /dev/full fails its first record while
     * rank 1 trains on. */
    int rc = cli_run_env(mpi(NP2), "train " MLP " --steps 50 --log /dev/full", tiny);
    CHECK_MSG(rc != 0, "exit 0:\n%s", cli_out);
    CHECK_OUT("ampc: rank 0: --log: log: cannot write /dev/full");
    CHECK_OUT("ampc: rank 0: this rank cannot go on: ending every rank of the job");
}

/* -------------------------------------------------------------- options */

/* Options a data-parallel run refuses, and what the refusal says. */
typedef struct {
    const char *args, *says;
} dist_refusal;

static void test_data_parallel_options_are_checked(void)
{
    /* Without a launcher: nothing to spread over. */
    static const char *const alone[] = {"--zero 1", "--bucket-mb 4", "--compress bf16", "--dist-timeout 5"};
    for (int i = 0; i < 4; i++) {
        int rc = cli_run_env("env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_SIZE", "train --model mlp %s",
                             alone[i]);
        CHECK_MSG(rc == EXIT_USAGE, "%s: exit %d:\n%s", alone[i], rc, cli_out);
        CHECK_OUT("applies to a data-parallel run, started by an MPI launcher");
    }
    if (!have_mpirun())
        return;
    if (!amp_dist_available()) { /* mpirun without MPI in ampc: the clear error */
        int rc = cli_run_env(mpi(NP2), "train " MLP " --steps 2", tiny);
        CHECK_MSG(rc != 0, "exit 0:\n%s", cli_out);
        CHECK_OUT("built without MPI");
        return;
    }
    static const dist_refusal bad[] = {
        {"--bucket-mb 0", "--bucket-mb: 0 is out of range"},
        {"--compress fp8", "--compress: unknown value 'fp8'"},
        {"--zero 2", "--zero: '2' is not a whole number from 0 to 1"},
        {"--dist-timeout -1", "--dist-timeout: -1 is out of range"},
        {"--zero 1 --compress bf16", "--compress applies to DDP's gradient buckets"},
        {"--zero 1 --bucket-mb 4", "--bucket-mb applies to DDP's gradient buckets"},
        {"--profile", "--profile profiles one process"},
        {"--zero 1 --health-every 1", "--health-every does not apply with --zero 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cli_run_env(mpi(NP2), "train " MLP " --steps 2 %s", tiny, bad[i].args);
        CHECK_MSG(rc != 0, "%s: exit 0", bad[i].args);
        CHECK_MSG(strstr(cli_out, bad[i].says) && strstr(cli_out, "ampc: rank 1: "), "%s:\n%s", bad[i].args,
                  cli_out);
    }
    /* Ranks started with different options (MPMD): refused by all. */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "train " MLP " --steps 3 : -np 1%s '%s' train " MLP " --steps 4", tiny, cli_mpi_env(),
             cli_ampc, tiny);
    int rc = cli_run_env(mpi("--oversubscribe --allow-run-as-root -np 1"), "%s", cmd);
    CHECK_MSG(rc == EXIT_USAGE, "different options: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("the ranks were started with different settings");
    /* The run options that change the collectives too. */
    char dir[512], stop[600];
    cli_path(dir, sizeof dir, "differ-ck");
    snprintf(stop, sizeof stop, "--stop-at 2 --save %s", dir);
    const char *const differ[] = {"--zero 1", "--bucket-mb 4", "--compress bf16", stop};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "train " MLP " --steps 3 : -np 1%s '%s' train " MLP " --steps 3 %s", tiny,
                 cli_mpi_env(), cli_ampc, tiny, differ[i]);
        rc = cli_run_env(mpi("--oversubscribe --allow-run-as-root -np 1"), "%s", cmd);
        CHECK_MSG(rc == EXIT_USAGE, "rank 1 with %s: exit %d:\n%s", differ[i], rc, cli_out);
        CHECK_OUT("the ranks were started with different settings");
    }
}

int main(void)
{
    cli_init("test-cli-dist");
    cli_find_on_path("mpirun", mpirun, sizeof mpirun);
    amp_set_num_threads(1);
    cli_write_tiny_images(cli_path(tiny, sizeof tiny, "tiny"));
    RUN(test_two_shards_together_are_the_double_batch);
    RUN(test_a_world_that_does_not_divide_the_set_pads_it);
    RUN(test_a_micro_batch_depends_on_its_number_alone);
    RUN(test_two_ranks_log_and_save_once_and_match_one_process);
    RUN(test_health_every_on_two_ranks);
    RUN(test_stop_and_resume_on_two_ranks_is_bit_for_bit);
    RUN(test_ranks_resuming_from_different_steps_are_refused);
    RUN(test_memory_estimate_counts_the_gradient_buckets);
    RUN(test_zero_1_trains_as_ddp);
    RUN(test_zero_1_stop_and_resume_is_bit_for_bit);
    RUN(test_an_epochs_run_resumed_on_another_world_keeps_its_steps);
    RUN(test_a_batch_cut_to_the_shard_is_shown);
    RUN(test_a_rank_killed_ends_the_job_naming_it);
    RUN(test_a_stopped_rank_times_the_other_out);
    RUN(test_the_timeout_comes_from_the_environment_too);
    RUN(test_a_rank_failing_alone_ends_the_job);
    RUN_IF(cli_have_binary, test_data_parallel_options_are_checked);
    cli_cleanup();
    return harness_done();
}
