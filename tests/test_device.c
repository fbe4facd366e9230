/*
 * test_device.c - the device API as every machine sees it: whether CUDA is
 * there, copies and in-place moves between devices, and, where no GPU is
 * present (or ampc was built without CUDA), that asking for a CUDA tensor
 * is a clear AMP_ERR_DEVICE error that changes nothing and never crashes;
 * the host-wait counter (amp_cuda_get_sync_stats) reads zeros there.
 * The GPU's own behaviour is tests/test_cuda*.c's.
 */
#include "harness.h"

#include <stdlib.h>

static amp_tensor *iota(int64_t n, amp_dtype dt)
{
    amp_tensor *t = amp_arange(0, (double)n, 1, dt);
    return t;
}

static void test_availability_is_consistent(void)
{
    CHECK(amp_cuda_available() == (amp_cuda_device_count() > 0));
    CHECK(amp_cuda_device_count() >= 0);
    CHECK(strcmp(amp_device_name(AMP_CUDA), "cuda") == 0);
}

/* The message says why, in one of the two forms the issue asks for. */
static void check_unavailable_error(void)
{
    const char *msg = amp_last_error();
    CHECK_MSG(amp_last_status() == AMP_ERR_DEVICE, "status %d, message \"%s\"", (int)amp_last_status(), msg);
    CHECK_MSG(strstr(msg, "cuda is not available (") != NULL, "message \"%s\"", msg);
    CHECK_MSG(strstr(msg, "no CUDA device found") || strstr(msg, "ampc was built without CUDA"), "message \"%s\"",
              msg);
    amp_clear_error();
}

static void test_cuda_tensor_without_gpu_is_a_clear_error(void)
{
    if (amp_cuda_available()) {
        harness_skip("a CUDA device is present (the no-GPU error cannot happen here)");
        return;
    }
    amp_tensor *t = iota(6, AMP_F32);
    CHECK(amp_to_device(t, AMP_CUDA) == NULL);
    check_unavailable_error();

    /* A failed move leaves the tensor where and what it was. */
    CHECK(amp_tensor_move(t, AMP_CUDA) == AMP_ERR_DEVICE);
    check_unavailable_error();
    CHECK(amp_tensor_device(t) == AMP_CPU);
    CHECK(amp_tensor_get(t, 5) == 5.0);

    int64_t hidden[1] = {8};
    amp_module *m = amp_model_mlp(4, hidden, 1, 3);
    CHECK(amp_module_to(m, AMP_CUDA) == AMP_ERR_DEVICE);
    check_unavailable_error();
    for (int i = 0; i < amp_module_num_params(m); i++)
        CHECK(amp_tensor_device(amp_module_param(m, i, NULL)) == AMP_CPU);
    /* The model still trains on the CPU after the failed move. */
    amp_tensor *x = amp_ones(AMP_SHAPE(2, 4), AMP_F32);
    CHECK(amp_module_forward(m, x) != NULL);

    CHECK(amp_cuda_synchronize() == AMP_ERR_DEVICE);
    check_unavailable_error();
    amp_memory_stats st = amp_cuda_memory_get_stats();
    CHECK(st.current == 0 && st.os_allocs == 0);
    amp_cuda_empty_cache(); /* harmless without a device */

    /* A scaler never made a device state: the CPU loop still works. */
    amp_scaler *s = amp_scaler_new(amp_scaler_defaults());
    CHECK(amp_scaler_get_scale(s) == 65536.0);
    amp_scaler_free(s);
    amp_module_free(m);
    amp_tensor_free(x);
    amp_tensor_free(t);
}

static void test_to_device_cpu_is_a_copy(void)
{
    amp_tensor *t = iota(5, AMP_BF16);
    CHECK_OK(amp_tensor_set_requires_grad(t, true));
    amp_tensor *c = amp_to_device(t, AMP_CPU);
    CHECK(c != NULL && c != t);
    CHECK(amp_tensor_device(c) == AMP_CPU);
    CHECK(amp_tensor_dtype(c) == AMP_BF16);
    CHECK(!amp_tensor_requires_grad(c));
    CHECK(amp_tensor_cdata(c) != amp_tensor_cdata(t));
    CHECK(max_abs_diff(c, t) == 0.0);
    /* Moving to where it is already is a no-op. */
    const void *before = amp_tensor_cdata(t);
    CHECK_OK(amp_tensor_move(t, AMP_CPU));
    CHECK(amp_tensor_cdata(t) == before);
    amp_tensor_free(c);
    amp_tensor_free(t);
}

static void test_move_rejects_non_leaves_and_bad_devices(void)
{
    amp_tensor *a = iota(4, AMP_F32);
    CHECK_OK(amp_tensor_set_requires_grad(a, true));
    amp_tensor *y = amp_mul_scalar(a, 2.0);
    CHECK(amp_tensor_move(y, AMP_CPU) == AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "only a leaf tensor");
    CHECK(amp_tensor_move(a, (amp_device)7) == AMP_ERR_DEVICE);
    CHECK_ERROR(AMP_ERR_DEVICE, "invalid device");
    CHECK(amp_to_device(NULL, AMP_CPU) == NULL);
    CHECK_ERROR(AMP_ERR_ARG, "NULL tensor");
    amp_tensor_free(a);
}

static void test_tf32_switch(void)
{
    CHECK(!amp_cuda_tf32_allowed()); /* off by default, as PyTorch */
    amp_cuda_allow_tf32(true);
    CHECK(amp_cuda_tf32_allowed());
    amp_cuda_allow_tf32(false);
    CHECK(!amp_cuda_tf32_allowed());
}

/* cuda bf16 autocast where the GPU has bf16 (compute capability 8.0 or
 * more), a device error naming it, nothing opened, where it has not (f16
 * still fine); without a GPU the answer is false. AMPC_TEST_EXPECT_BF16
 * (0 or 1), when set, says which to expect: CTest's test_device_sm75 runs
 * this on cudaemu posing as an sm_75 device (CUDAEMU_SM=75). */
static void test_bf16_support(void)
{
    const bool has = amp_cuda_bf16_supported();
    const char *want = getenv("AMPC_TEST_EXPECT_BF16");
    if (want)
        CHECK_MSG(has == (atoi(want) != 0), "amp_cuda_bf16_supported() is %d, expected %s", has, want);
    if (!amp_cuda_available()) {
        CHECK(!has);
        return;
    }
    amp_status st = amp_autocast_begin(AMP_CUDA, AMP_BF16);
    if (has) {
        CHECK_OK(st);
        CHECK(amp_autocast_is_enabled(AMP_CUDA));
        if (st == AMP_OK)
            amp_autocast_end();
        return;
    }
    CHECK(st == AMP_ERR_DEVICE);
    CHECK_MSG(strstr(amp_last_error(), "does not support bf16") != NULL, "error: %s", amp_last_error());
    CHECK(!amp_autocast_is_enabled(AMP_CUDA));
    CHECK_OK(amp_autocast_begin(AMP_CUDA, AMP_F16));
    CHECK(amp_autocast_is_enabled(AMP_CUDA));
    amp_autocast_end();
}

/* The host-wait counter is there on every machine: zero after a reset;
 * without a GPU (or without CUDA) it stays zero whatever is asked of the
 * device, with one amp_cuda_synchronize is one sync and nothing else. */
static void test_sync_stats(void)
{
    amp_cuda_reset_sync_stats();
    amp_cuda_sync_stats s = amp_cuda_get_sync_stats();
    CHECK(s.syncs == 0 && s.d2h_copies == 0 && s.h2d_copies == 0);
    if (amp_cuda_available()) {
        CHECK_OK(amp_cuda_synchronize());
        s = amp_cuda_get_sync_stats();
        CHECK_MSG(s.syncs == 1 && s.d2h_copies == 0 && s.h2d_copies == 0, "syncs %llu, d2h %llu, h2d %llu",
                  (unsigned long long)s.syncs, (unsigned long long)s.d2h_copies, (unsigned long long)s.h2d_copies);
        amp_cuda_reset_sync_stats();
        s = amp_cuda_get_sync_stats();
        CHECK(s.syncs == 0);
        return;
    }
    amp_tensor *t = iota(4, AMP_F32);
    CHECK(amp_to_device(t, AMP_CUDA) == NULL);
    check_unavailable_error();
    CHECK(amp_cuda_synchronize() == AMP_ERR_DEVICE);
    check_unavailable_error();
    amp_cuda_empty_cache();
    CHECK(amp_item(amp_sum_all(t)) == 6.0); /* CPU reads are not counted */
    s = amp_cuda_get_sync_stats();
    CHECK_MSG(s.syncs == 0 && s.d2h_copies == 0 && s.h2d_copies == 0, "syncs %llu, d2h %llu, h2d %llu",
              (unsigned long long)s.syncs, (unsigned long long)s.d2h_copies, (unsigned long long)s.h2d_copies);
    amp_temps_free();
    amp_tensor_free(t);
}

int main(void)
{
    RUN(test_availability_is_consistent);
    RUN(test_cuda_tensor_without_gpu_is_a_clear_error);
    RUN(test_to_device_cpu_is_a_copy);
    RUN(test_move_rejects_non_leaves_and_bad_devices);
    RUN(test_tf32_switch);
    RUN(test_bf16_support);
    RUN(test_sync_stats);
    return harness_done();
}
