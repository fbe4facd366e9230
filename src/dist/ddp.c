/*
 * ddp.c - amp_ddp (DistributedDataParallel). Placeholder until the
 * bucketed implementation lands: every call fails with a message.
 */
#include "ampc.h"

#include "base/base.h"

amp_ddp_opts amp_ddp_defaults(void) { return (amp_ddp_opts){.bucket_mb = 25, .compress = AMP_F32, .broadcast_params = true}; }

amp_ddp *amp_ddp_new(amp_tensor *const *params, int n, amp_ddp_opts o)
{
    (void)params, (void)n, (void)o;
    return amp_fail_null(AMP_ERR_STATE, "ddp: not implemented yet");
}

void amp_ddp_free(amp_ddp *d) { (void)d; }
void amp_ddp_set_sync(amp_ddp *d, bool sync) { (void)d, (void)sync; }
amp_status amp_ddp_finish(amp_ddp *d)
{
    (void)d;
    return amp_set_error(AMP_ERR_STATE, "ddp: not implemented yet");
}
amp_ddp_stats amp_ddp_get_stats(const amp_ddp *d)
{
    (void)d;
    return (amp_ddp_stats){0};
}
