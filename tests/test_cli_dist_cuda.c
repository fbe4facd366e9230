/*
 * test_cli_dist_cuda.c - `mpirun -np 2 ampc train --device cuda`: the
 * command-line program as two ranks whose gradients, found_inf and ZeRO
 * shards go through NCCL (cudaemu's over MPI in an -DAMPC_CUDA=EMU build,
 * or a machine's GPUs), against the same 2-rank runs on the CPU (MPI):
 *   - fp32 (an MLP, 10 steps): each step's loss within 1e-4 of the CPU
 *     run's (cuda_rig's close_to, relative to 1 + |loss|: the CPU's and
 *     the device's products sum in different orders, as in
 *     test_cuda_cli's one-process comparison);
 *   - fp16 + the grad scaler from 2^24 with 2 accumulated micro-batches
 *     (no_sync on the first): the same steps skipped and the same scale
 *     at every step as on the CPU (found_inf's MAX across the ranks),
 *     losses within 1e-2 (f16 rounding of the forward);
 *   - --zero 1 on cuda logs DDP-on-cuda's losses, learning rates and
 *     scales exactly (2 ranks, unclipped: bitwise, as on the CPU); the
 *     logged gradient norm within 1e-6 (summed in another order on the
 *     device; on the CPU it is bitwise too);
 *   - --zero 1 --clip 0.05 on cuda (every step clipped; the norm from the
 *     shards through NCCL, on the device) against the same on the CPU:
 *     losses and logged norms within 1e-4.
 * A normal CTest test that runs mpirun itself. Skipped (exit 77) without a
 * CUDA device, NCCL, MPI or mpirun.
 */
#include "comm/comm.h"
#include "cuda_rig.h"
#include "test_cli_util.h"

static char tiny[256];
static char mpirun[1024];
static bool ran;

#define NP2 "--oversubscribe --allow-run-as-root -np 2"
/* Tiny runs: one kernel thread a rank. */
#define MLP "--model mlp --data %s --hidden 32 --batch 16 --threads 1"

/* Whether the runs can happen here; else the test is skipped, saying why. */
static bool ready(void)
{
    if (!gpu() || !cli_have_binary())
        return false;
    const char *why = !amp_dist_available()       ? "ampc was built without MPI"
                      : !comm_built_with_nccl()   ? "no NCCL in this build"
                      : !mpirun[0]                ? "mpirun is not on the PATH (apt-get install openmpi-bin)"
                                                  : NULL;
    if (why) {
        harness_skip(why);
        return false;
    }
    ran = true;
    return true;
}

/* "mpirun -np 2 ..." as cli_run_env's prefix (cli_mpi). */
static const char *mpi2(void) { return cli_mpi(mpirun, NP2); }

/* The same 2-rank run on cuda and on the cpu (logs TAG-cpu.jsonl and
 * TAG-cuda.jsonl): losses within tol, and the fields in `exact` the same
 * text at every step. */
static void cuda_against_cpu(const char *tag, const char *what, const char *args, int steps, double tol, const char *const *exact,
                             int nexact)
{
    char lcpu[512], lcuda[512], name[96];
    snprintf(name, sizeof name, "%s-cpu.jsonl", tag);
    cli_path(lcpu, sizeof lcpu, name);
    snprintf(name, sizeof name, "%s-cuda.jsonl", tag);
    cli_path(lcuda, sizeof lcuda, name);
    int rc = cli_run_env(mpi2(), "train " MLP " %s --steps %d --device cpu --log %s", tiny, args, steps, lcpu);
    CHECK_MSG(rc == 0, "%s, cpu: exit %d:\n%s", what, rc, cli_out);
    rc = cli_run_env(mpi2(), "train " MLP " %s --steps %d --device cuda --log %s", tiny, args, steps, lcuda);
    CHECK_MSG(rc == 0, "%s, cuda: exit %d:\n%s", what, rc, cli_out);
    CHECK_OUT("data-parallel: 2 ranks");
    CHECK_OUT("on cuda");
    enum { MAX = 64 };
    double a[MAX], b[MAX];
    char ta[MAX][64], tb[MAX][64];
    int na = cli_log_field(lcpu, "loss", a, NULL, MAX), nb = cli_log_field(lcuda, "loss", b, NULL, MAX);
    CHECK_EQ_INT(na, steps);
    CHECK_EQ_INT(nb, steps);
    double worst = 0;
    for (int i = 0; i < na && i < nb; i++) {
        const double d = fabs(a[i] - b[i]) / (1 + fabs(a[i]));
        worst = d > worst ? d : worst;
        CHECK_MSG(close_to(a[i], b[i], tol), "%s, step %d: loss %.9g on cuda, %.9g on the cpu", what, i + 1, b[i],
                  a[i]);
    }
    printf("  %s: %d steps, worst loss difference cuda vs cpu %.3g (relative to 1 + |loss|)\n", what, na, worst);
    for (int k = 0; k < nexact; k++) {
        na = cli_log_field(lcpu, exact[k], a, ta, MAX);
        nb = cli_log_field(lcuda, exact[k], b, tb, MAX);
        CHECK_EQ_INT(na, nb);
        for (int i = 0; i < na && i < nb; i++)
            CHECK_MSG(strcmp(ta[i], tb[i]) == 0, "%s, step %d: %s %s on cuda, %s on the cpu", what, i + 1, exact[k],
                      tb[i], ta[i]);
    }
}

static void test_fp32_follows_the_cpu(void)
{
    cuda_against_cpu("fp32", "fp32", "--precision fp32", 10, 1e-4, NULL, 0);
}

static void test_fp16_scaler_skips_as_on_the_cpu(void)
{
    const char *const exact[] = {"skipped", "scale"};
    cuda_against_cpu("fp16", "fp16 + scaler", "--precision fp16 --init-scale 16777216 --growth-interval 3 --accum 2", 10,
                     1e-2, exact, 2);
    /* the scaler was at stake: some steps skipped, some taken */
    char lcuda[512];
    cli_path(lcuda, sizeof lcuda, "fp16-cuda.jsonl");
    double v[64];
    char t[64][64];
    int n = cli_log_field(lcuda, "skipped", v, t, 64), skipped = 0;
    for (int i = 0; i < n; i++)
        skipped += strcmp(t[i], "true") == 0;
    CHECK_MSG(skipped > 0 && skipped < n, "%d of %d steps skipped: the scaler was not exercised", skipped, n);
    n = cli_log_field(lcuda, "scale", v, t, 64);
    CHECK_EQ_INT(n, 10);
    for (int i = 0; i < n; i++)
        CHECK_MSG(v[i] >= 1 && v[i] <= 16777216, "step %d: scale %s", i + 1, t[i]);
    printf("  fp16 + scaler on cuda: %d of %d steps skipped, final scale %s\n", skipped, n, n ? t[n - 1] : "?");
}

static void test_zero_1_on_cuda_logs_ddp_steps(void)
{
    char lz[512], ld[512];
    cli_path(lz, sizeof lz, "zero.jsonl");
    cli_path(ld, sizeof ld, "ddp.jsonl");
    int rc = cli_run_env(mpi2(), "train " MLP " --steps 6 --precision fp32 --device cuda --log %s", tiny, ld);
    CHECK_MSG(rc == 0, "ddp on cuda: exit %d:\n%s", rc, cli_out);
    rc = cli_run_env(mpi2(), "train " MLP " --steps 6 --precision fp32 --device cuda --zero 1 --log %s", tiny, lz);
    CHECK_MSG(rc == 0, "zero on cuda: exit %d:\n%s", rc, cli_out);
    CHECK_OUT("ZeRO stage 1");
    /* The same parameters at every step: loss, lr, scale and skipped the
     * same text. The gradient norm (logged, not clipped by) is summed in
     * another order: ZeRO's from each rank's shard (the device's norm of
     * its part, then the ranks' in double), DDP's over whole gradients on
     * the device: within 1e-6 relative (measured on cudaemu: 4e-8 with
     * the host-side norm ZeRO had before main's 53fa097, equal since). */
    const char *const keys[] = {"loss", "lr", "scale", "skipped"};
    for (int k = 0; k < 4; k++) {
        double a[16], b[16];
        char ta[16][64], tb[16][64];
        int nz = cli_log_field(lz, keys[k], a, ta, 16), nd = cli_log_field(ld, keys[k], b, tb, 16);
        CHECK_EQ_INT(nz, 6);
        CHECK_EQ_INT(nd, 6);
        for (int i = 0; i < nz && i < nd; i++)
            CHECK_MSG(strcmp(ta[i], tb[i]) == 0, "step %d: %s %s with --zero 1, %s without", i + 1, keys[k], ta[i],
                      tb[i]);
    }
    double a[16], b[16];
    int nz = cli_log_field(lz, "grad_norm", a, NULL, 16), nd = cli_log_field(ld, "grad_norm", b, NULL, 16);
    CHECK_EQ_INT(nz, 6);
    CHECK_EQ_INT(nd, 6);
    double worst = 0;
    for (int i = 0; i < nz && i < nd; i++) {
        worst = fmax(worst, fabs(a[i] - b[i]) / b[i]);
        CHECK_MSG(fabs(a[i] - b[i]) <= 1e-6 * b[i], "step %d: grad_norm %.9g with --zero 1, %.9g without", i + 1,
                  a[i], b[i]);
    }
    printf("  --zero 1 on cuda: grad_norm within %.3g relative of DDP's\n", worst);
}

/* --zero 1 --clip on cuda (the norm from the shards' sums of squares,
 * all-gathered through NCCL, on the device) against the same on the CPU:
 * losses within 1e-4, and the logged norms too (the same tolerance: they
 * follow the parameters). */
static void test_zero_1_clipped_follows_the_cpu(void)
{
    cuda_against_cpu("zclip", "fp32 --zero 1 --clip 0.05", "--precision fp32 --zero 1 --clip 0.05", 8, 1e-4, NULL,
                     0);
    char lcpu[512], lcuda[512];
    cli_path(lcpu, sizeof lcpu, "zclip-cpu.jsonl");
    cli_path(lcuda, sizeof lcuda, "zclip-cuda.jsonl");
    double a[16], b[16];
    int na = cli_log_field(lcpu, "grad_norm", a, NULL, 16), nb = cli_log_field(lcuda, "grad_norm", b, NULL, 16);
    CHECK_EQ_INT(na, 8);
    CHECK_EQ_INT(nb, 8);
    for (int i = 0; i < na && i < nb; i++) {
        CHECK_MSG(a[i] > 0.05, "step %d: grad_norm %g: --clip 0.05 did not clip", i + 1, a[i]);
        CHECK_MSG(close_to(a[i], b[i], 1e-4), "step %d: grad_norm %.9g on cuda, %.9g on the cpu", i + 1, b[i], a[i]);
    }
}

int main(void)
{
    cli_init("test-cli-dist-cuda");
    cli_find_on_path("mpirun", mpirun, sizeof mpirun);
    amp_set_num_threads(1);
    cli_write_tiny_images(cli_path(tiny, sizeof tiny, "tiny"));
    RUN_IF(ready, test_fp32_follows_the_cpu);
    RUN_IF(ready, test_fp16_scaler_skips_as_on_the_cpu);
    RUN_IF(ready, test_zero_1_on_cuda_logs_ddp_steps);
    RUN_IF(ready, test_zero_1_clipped_follows_the_cpu);
    cli_cleanup();
    int rc = harness_done();
    return rc == 0 && !ran ? 77 : rc;
}
