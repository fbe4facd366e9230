/*
 * test_cli.c - the ampc program, run as a user runs it: help and version,
 * exit code 2 with a message naming the option for every bad command line,
 * data errors naming the file, and short training runs (on a tiny
 * separable data set written here, and on Fashion-MNIST when installed)
 * that end with a "test_accuracy" line.
 *
 * The binary is $AMPC_BUILD_DIR/ampc (CTest sets AMPC_BUILD_DIR).
 */
#include "harness.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static char ampc[1024];
static char out[1 << 16];
static char tmpdir[64];

/* Runs "ampc ARGS" with stderr joined to stdout into out; returns the exit
 * code (-1 when it did not exit normally, e.g. a crash). */
static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", ampc, args);
    FILE *p = popen(cmd, "r");
    out[0] = '\0';
    if (!p)
        return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    while (fgetc(p) != EOF) /* drain so the child never blocks on a full pipe */
        ;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool have_binary(void)
{
    if (ampc[0] && access(ampc, X_OK) == 0)
        return true;
    harness_skip("the ampc binary is not built (AMPC_BUILD_DIR/ampc missing)");
    return false;
}

#define CHECK_OUT(needle) CHECK_MSG(strstr(out, (needle)) != NULL, "no \"%s\" in output:\n%s", (needle), out)

static void test_help_exits_0_and_lists_train(void)
{
    if (!have_binary())
        return;
    CHECK_EQ_INT(run("--help"), 0);
    CHECK_OUT("train");
    CHECK_EQ_INT(run("train --help"), 0);
    CHECK_OUT("--batch");
    CHECK_OUT("--optim");
    CHECK_EQ_INT(run("--version"), 0);
    CHECK_OUT("ampc " AMPC_VERSION);
}

static void test_no_command_or_unknown_command_exits_2(void)
{
    if (!have_binary())
        return;
    CHECK_EQ_INT(run(""), 2);
    CHECK_OUT("usage");
    CHECK_EQ_INT(run("frobnicate"), 2);
    CHECK_OUT("unknown command 'frobnicate'");
}

static void test_unknown_flag_exits_2_naming_it(void)
{
    if (!have_binary())
        return;
    CHECK_EQ_INT(run("train --bogus-flag 3"), 2);
    CHECK_OUT("--bogus-flag");
    CHECK_EQ_INT(run("--bogus-top"), 2);
    CHECK_OUT("--bogus-top");
    CHECK_EQ_INT(run("train stray"), 2);
    CHECK_OUT("'stray'");
}

static void test_bad_values_name_the_flag(void)
{
    if (!have_binary())
        return;
    struct {
        const char *args, *needle;
    } cases[] = {
        {"train --batch 0", "--batch: '0'"},
        {"train --batch 12abc", "--batch: '12abc'"},
        {"train --batch 99999999999999999999999", "--batch"},
        {"train --lr abc", "--lr: 'abc'"},
        {"train --lr=-1", "--lr: -1"},
        {"train --lr nan", "--lr"},
        {"train --hidden 12,x", "--hidden: '12,x'"},
        {"train --hidden 12,,3", "--hidden"},
        {"train --epochs -1", "--epochs: '-1'"},
        {"train --optim rmsprop", "--optim: unknown value 'rmsprop'"},
        {"train --model cnn", "--model: unknown value 'cnn'"},
        {"train --momentum 2", "--momentum: 2"},
        {"train --seed -1", "--seed: '-1'"},
        {"train --threads x", "--threads: 'x'"},
        {"train --batch", "--batch: needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].args);
        CHECK_MSG(rc == 2, "ampc %s: exit %d, expected 2; output:\n%s", cases[i].args, rc, out);
        CHECK_MSG(strstr(out, cases[i].needle) != NULL, "ampc %s: no \"%s\" in:\n%s", cases[i].args,
                  cases[i].needle, out);
    }
}

static void test_bad_precision_options_are_refused_clearly(void)
{
    if (!have_binary())
        return;
    CHECK_EQ_INT(run("train --precision fp8"), 2);
    CHECK_OUT("--precision: unknown value 'fp8'");
    CHECK_EQ_INT(run("train --precision bf16 --no-scaler"), 2);
    CHECK_OUT("--no-scaler applies to --precision fp16 only");
    CHECK_EQ_INT(run("train --no-scaler=1"), 2);
    CHECK_OUT("--no-scaler: takes no value");
    CHECK_EQ_INT(run("train --init-scale -4"), 2);
    CHECK_OUT("--init-scale");
}

static void test_missing_data_dir_names_the_file(void)
{
    if (!have_binary())
        return;
    char args[256], file[256];
    snprintf(args, sizeof args, "train --data %s/absent", tmpdir);
    snprintf(file, sizeof file, "%s/absent/train-images-idx3-ubyte.gz", tmpdir);
    CHECK_EQ_INT(run(args), 1);
    CHECK_OUT(file);
    CHECK_OUT("No such file");
}

/* Writes an IDX u8 file: dims as given, bytes from data. */
static void write_idx(const char *name, int ndim, const uint32_t *dims, const unsigned char *data, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    unsigned char h[4 + 4 * 3] = {0, 0, 0x08, (unsigned char)ndim};
    for (int i = 0; i < ndim; i++)
        for (int k = 0; k < 4; k++)
            h[4 + 4 * i + k] = (unsigned char)(dims[i] >> (24 - 8 * k));
    gzwrite(f, h, (unsigned)(4 + 4 * ndim));
    gzwrite(f, data, (unsigned)n);
    gzclose(f);
}

/* A tiny two-class set: class 1 images are bright, class 0 dark. Written
 * as train-* and t10k-* into tmpdir. */
static void write_tiny_dataset(void)
{
    enum { N = 256, P = 16 };
    static unsigned char img[N * P], lab[N];
    uint64_t s = 42;
    for (int i = 0; i < N; i++) {
        lab[i] = (unsigned char)(i % 2);
        for (int k = 0; k < P; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(s >> 58); /* 0..63 */
            img[i * P + k] = (unsigned char)(lab[i] ? 192 + r : r);
        }
    }
    uint32_t idims[3] = {N, 4, 4}, ldims[1] = {N};
    const char *pre[2] = {"train", "t10k"};
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", pre[i]);
        write_idx(name, 3, idims, img, sizeof img);
        snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", pre[i]);
        write_idx(name, 1, ldims, lab, sizeof lab);
    }
}

static double accuracy_in_output(void)
{
    const char *p = strstr(out, "test_accuracy ");
    return p ? atof(p + strlen("test_accuracy ")) : -1.0;
}

/* The values after each " loss " in out (the progress lines). */
static int losses_in_output(double *v, int max)
{
    int n = 0;
    for (const char *p = strstr(out, " loss "); p && n < max; p = strstr(p + 1, " loss "))
        v[n++] = atof(p + 6);
    return n;
}

static void test_bad_data_file_names_the_file(void)
{
    if (!have_binary())
        return;
    char dir[128], path[256], args[256];
    snprintf(dir, sizeof dir, "%s/broken", tmpdir);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("not an idx file", f);
        fclose(f);
    }
    snprintf(args, sizeof args, "train --data %s", dir);
    CHECK_EQ_INT(run(args), 1);
    CHECK_OUT(path);
    CHECK_OUT("bad magic");
    unlink(path);
    rmdir(dir);
}

static void test_tiny_separable_run_learns_and_repeats_with_its_seed(void)
{
    if (!have_binary())
        return;
    write_tiny_dataset();
    char args[512];
    snprintf(args, sizeof args,
             "train --data %s --hidden 8 --steps 40 --batch 16 --lr 0.05 --seed 7 --threads 1 --log-every 10",
             tmpdir);
    int rc = run(args);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK_OUT("loss");
    double acc = accuracy_in_output();
    CHECK_MSG(acc >= 0.95, "test_accuracy %g on a separable set:\n%s", acc, out);
    /* The same seed gives the same run: the same losses, the same result. */
    double l1[8], l2[8];
    int n1 = losses_in_output(l1, 8);
    CHECK_EQ_INT(n1, 4);
    CHECK_EQ_INT(run(args), 0);
    int n2 = losses_in_output(l2, 8);
    CHECK_EQ_INT(n2, n1);
    for (int i = 0; i < n1 && i < n2; i++)
        CHECK_NEAR(l2[i], l1[i], 0);
    CHECK_NEAR(accuracy_in_output(), acc, 0);
}

/* bf16 autocast and fp16 autocast + scaler learn the separable set too;
 * fp16 shows the scale as it goes and the scaler's summary at the end. */
static void test_mixed_precision_runs_learn(void)
{
    if (!have_binary())
        return;
    write_tiny_dataset();
    const char *precisions[] = {"bf16", "fp16", "fp16 --no-scaler"};
    for (int i = 0; i < 3; i++) {
        char args[512];
        snprintf(args, sizeof args,
                 "train --data %s --hidden 8 --steps 40 --batch 16 --lr 0.05 --seed 7 --threads 1 "
                 "--log-every 10 --precision %s",
                 tmpdir, precisions[i]);
        int rc = run(args);
        CHECK_MSG(rc == 0, "%s: exit %d:\n%s", precisions[i], rc, out);
        double acc = accuracy_in_output();
        CHECK_MSG(acc >= 0.95, "%s: test_accuracy %g:\n%s", precisions[i], acc, out);
        bool scaled = i == 1;
        CHECK_MSG((strstr(out, " scale 65536 skipped 0") != NULL) == scaled, "%s: scale shown?\n%s",
                  precisions[i], out);
        CHECK_MSG((strstr(out, "scaler: final scale") != NULL) == scaled, "%s: summary?\n%s",
                  precisions[i], out);
    }
}

static void test_short_fashion_mnist_run_prints_test_accuracy(void)
{
    if (!have_binary())
        return;
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        harness_skip(FMNIST_DIR " is not installed");
        return;
    }
    int rc = run("train --steps 20 --log-every 10");
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK_OUT("60000");
    double acc = accuracy_in_output();
    /* 20 steps of 128 images: far from trained, but well above chance (0.1). */
    CHECK_MSG(acc > 0.3 && acc <= 1.0, "test_accuracy %g:\n%s", acc, out);
}

int main(void)
{
    const char *bd = getenv("AMPC_BUILD_DIR");
    if (bd)
        snprintf(ampc, sizeof ampc, "%s/ampc", bd);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ampc-test-cli-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_help_exits_0_and_lists_train);
    RUN(test_no_command_or_unknown_command_exits_2);
    RUN(test_unknown_flag_exits_2_naming_it);
    RUN(test_bad_values_name_the_flag);
    RUN(test_bad_precision_options_are_refused_clearly);
    RUN(test_mixed_precision_runs_learn);
    RUN(test_missing_data_dir_names_the_file);
    RUN(test_bad_data_file_names_the_file);
    RUN(test_tiny_separable_run_learns_and_repeats_with_its_seed);
    RUN(test_short_fashion_mnist_run_prints_test_accuracy);
    const char *files[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", tmpdir, files[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    return harness_done();
}
