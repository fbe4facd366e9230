/*
 * test_debugger_api_misuse.c - the precision debugger's library calls
 * used out of order: the anomaly check and the audit share the one node
 * observer, so each refuses to start beside the other and neither's stop
 * removes the other's; an audit freed while it observes stops first;
 * amp_scope_end without its begin and too many open scopes fail with
 * AMP_ERR_STATE; amp_anomaly_format measures as snprintf does, with no
 * buffer or a short one.
 */
#include "harness.h"
#include "small_gpt.h"

/* One forward + backward of m under bf16 autocast; its status. */
static amp_status step(amp_module *m)
{
    amp_tensor *idx = tokens(), *y = tokens();
    amp_status st = amp_autocast_begin(AMP_CPU, AMP_BF16);
    amp_tensor *logits = st == AMP_OK ? amp_module_forward(m, idx) : NULL;
    amp_tensor *loss =
        logits ? amp_cross_entropy(amp_reshape(logits, AMP_SHAPE(-1, 11)), amp_reshape(y, AMP_SHAPE(-1))) : NULL;
    if (st == AMP_OK)
        amp_autocast_end();
    st = loss ? amp_backward(loss) : amp_last_status();
    amp_temps_free();
    amp_tensor_free(idx);
    amp_tensor_free(y);
    return st;
}

static void test_anomaly_and_audit_refuse_each_other(void)
{
    amp_manual_seed(1);
    amp_module *m = amp_model_gpt(small_gpt());
    CHECK_OK(amp_anomaly_enable(true));
    CHECK_OK(amp_anomaly_enable(true)); /* twice: still on, one observer */
    CHECK(amp_anomaly_enabled());
    amp_audit *a = amp_audit_new();
    CHECK_EQ_INT(amp_audit_record(a), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "another node observer");
    amp_audit_stop(a); /* not started: leaves the anomaly check on */
    amp_audit_free(a);
    CHECK_OK(step(m));
    CHECK_EQ_INT(amp_anomaly_count(), 0);
    CHECK_OK(amp_anomaly_enable(false));

    a = amp_audit_new();
    CHECK_OK(amp_audit_record(a));
    CHECK_EQ_INT(amp_anomaly_enable(true), AMP_ERR_STATE);
    CHECK_OK(amp_anomaly_enable(false)); /* not the anomaly check's observer: the audit's stays */
    CHECK_OK(step(m));
    const int recorded = amp_audit_num_sites(a);
    CHECK(recorded > 10);
    CHECK_OK(amp_audit_compare(a));
    CHECK_OK(step(m));
    int calls = 0;
    for (int i = 0; i < amp_audit_num_sites(a); i++)
        calls += (int)amp_audit_site_at(a, i)->calls;
    CHECK(calls > 0);
    amp_audit_free(a); /* while comparing: stops first */
    CHECK_OK(step(m)); /* nothing observes the freed audit (ASan would see it) */
    CHECK_OK(amp_anomaly_enable(true)); /* the observer is free again */
    CHECK_OK(amp_anomaly_enable(false));
    amp_module_free(m);
}

static void test_scope_end_without_begin_and_too_deep(void)
{
    CHECK_EQ_INT(amp_scope_end(), AMP_ERR_STATE);
    CHECK_ERROR(AMP_ERR_STATE, "no scope is open");
    int opened = 0;
    while (opened < 1000 && amp_scope_begin("deep") == AMP_OK)
        opened++;
    CHECK_EQ_INT(opened, 64);
    CHECK_ERROR(AMP_ERR_STATE, "scopes open");
    for (int i = 0; i < opened; i++)
        CHECK_OK(amp_scope_end());
    CHECK(strcmp(amp_scope_current(), "") == 0);
    CHECK_EQ_INT(amp_scope_begin(NULL), AMP_ERR_ARG);
}

static void test_anomaly_format_measures_like_snprintf(void)
{
    amp_anomaly_report r = {.step = 12, .micro_batch = 3, .backward = true, .dtype = AMP_F16, .nonfinite = 5,
                            .numel = 64, .n_inputs = 2, .grad = {.dtype = AMP_F16, .shape = AMP_SHAPE(8, 8)}};
    snprintf(r.op, sizeof r.op, "linear");
    snprintf(r.module, sizeof r.module, "h.0.attn.qkv");
    for (int i = 0; i < 2; i++)
        r.in[i] = (amp_anomaly_tensor){.dtype = AMP_F16, .shape = AMP_SHAPE(8, 8), .min = -1, .max = 2, .absmax = 2};
    char full[2048], small[24];
    const int len = amp_anomaly_format(&r, full, sizeof full);
    CHECK(len > 100 && (size_t)len == strlen(full));
    CHECK_EQ_INT(amp_anomaly_format(&r, NULL, 0), len);
    memset(small, 'x', sizeof small);
    CHECK_EQ_INT(amp_anomaly_format(&r, small, sizeof small), len);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, full, sizeof small - 1) == 0);
}

int main(void)
{
    RUN(test_anomaly_format_measures_like_snprintf);
    RUN(test_anomaly_and_audit_refuse_each_other);
    RUN(test_scope_end_without_begin_and_too_deep);
    return harness_done();
}
