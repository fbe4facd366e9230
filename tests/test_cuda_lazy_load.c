/*
 * test_cuda_lazy_load.c - a program that never uses a CUDA device never
 * loads CUDA's libraries: the runtime is linked statically (it opens the
 * driver at its first call) and cuBLASLt is opened at the first product
 * (src/backend/cuda/gemm.cu). Checked on this process's own mappings
 * (/proc/self/maps) after a CPU training step under fp16 autocast + the
 * grad scaler, and on the ampc program's `train --steps 1` (LD_DEBUG=libs
 * lists every library the loader opens). Without a GPU, asking for one is
 * a clear error, not a crash. Meaningful in a build with nvcc (the
 * default where it is installed); with cudaemu or without CUDA it holds
 * trivially.
 */
#include "test_cli_util.h"

/* The first line of /proc/self/maps naming one of CUDA's libraries, or NULL. */
static const char *cuda_mapping(char *line, size_t n)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    if (!f)
        return NULL;
    const char *found = NULL;
    while (!found && fgets(line, (int)n, f))
        if (strstr(line, "libcublas") || strstr(line, "libcudart") || strstr(line, "libcuda.so"))
            found = line;
    fclose(f);
    return found;
}

static void test_a_cpu_training_step_maps_no_cuda_library(void)
{
    char line[1024];
    const char *m = cuda_mapping(line, sizeof line);
    CHECK_MSG(!m, "mapped at start-up: %s", m);
    int64_t hidden[1] = {8};
    amp_module *model = amp_model_mlp(4, hidden, 1, 3);
    amp_tensor *params[8];
    int np = amp_module_params(model, params, 8);
    amp_optim *o = amp_optim_adam(params, np, amp_adam_defaults());
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    float xv[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    int64_t yv[2] = {0, 2};
    amp_tensor *x = amp_from_data(AMP_SHAPE(2, 4), AMP_F32, xv), *y = amp_from_data(AMP_SHAPE(2), AMP_I64, yv);
    CHECK_OK(amp_autocast_begin(AMP_CPU, AMP_F16));
    amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, x), y);
    amp_autocast_end();
    CHECK_OK(amp_backward(amp_scaler_scale(s, loss)));
    CHECK_OK(amp_scaler_step(s, o, NULL));
    CHECK_OK(amp_scaler_update(s));
    amp_temps_free();
    m = cuda_mapping(line, sizeof line);
    CHECK_MSG(!m, "mapped after a CPU step: %s", m);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_scaler_free(s);
    amp_optim_free(o);
    amp_module_free(model);
}

static void test_the_program_loads_no_cuda_library_on_the_cpu(void)
{
    char data[256];
    cli_write_tiny_images(cli_path(data, sizeof data, "tiny"));
    setenv("LD_DEBUG", "libs", 1);
    int rc = cli_run("train --model mlp --hidden 8 --batch 8 --steps 1 --threads 1 --precision fp16 --data %s",
                     data);
    unsetenv("LD_DEBUG");
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, cli_out);
    CHECK_MSG(strstr(cli_out, "libc.so") != NULL, "LD_DEBUG=libs printed nothing:\n%s", cli_out);
    CHECK_MSG(!strstr(cli_out, "libcublas") && !strstr(cli_out, "libcudart") && !strstr(cli_out, "libcuda.so"),
              "a CUDA library was loaded:\n%s", cli_out);
}

static void test_without_a_gpu_cuda_is_a_clear_error(void)
{
    if (amp_cuda_available()) {
        harness_skip("a CUDA device is present");
        return;
    }
    amp_tensor *x = amp_zeros(AMP_SHAPE(2), AMP_F32);
    CHECK(amp_to_device(x, AMP_CUDA) == NULL);
    CHECK_ERROR(AMP_ERR_DEVICE, "cuda is not available (");
    amp_tensor_free(x);
    if (!cli_have_binary())
        return;
    int rc = cli_run("train --model mlp --steps 1 --device cuda");
    CHECK_MSG(rc == 1 && strstr(cli_out, "--device cuda: the CUDA backend is not built/available ("), "exit %d:\n%s",
              rc, cli_out);
}

int main(void)
{
    cli_init("test-cuda-lazy");
    RUN(test_a_cpu_training_step_maps_no_cuda_library);
    RUN_IF(cli_have_binary, test_the_program_loads_no_cuda_library_on_the_cpu);
    RUN(test_without_a_gpu_cuda_is_a_clear_error);
    cli_cleanup();
    return harness_done();
}
