/*
 * zero.c - amp_zero (ZeRO stage 1). Placeholder until the sharded
 * optimizer lands: every call fails with a message.
 */
#include "ampc.h"

#include "base/base.h"

#include <math.h>

amp_zero *amp_zero_new(amp_optim *o)
{
    (void)o;
    return amp_fail_null(AMP_ERR_STATE, "zero: not implemented yet");
}
void amp_zero_free(amp_zero *z) { (void)z; }
static amp_status todo(void) { return amp_set_error(AMP_ERR_STATE, "zero: not implemented yet"); }
amp_status amp_zero_reduce_gradients(amp_zero *z) { (void)z; return todo(); }
double amp_zero_clip_grad_norm(amp_zero *z, double max_norm) { (void)z, (void)max_norm; todo(); return NAN; }
amp_status amp_zero_gather_parameters(amp_zero *z) { (void)z; return todo(); }
amp_status amp_zero_gather_state(amp_zero *z) { (void)z; return todo(); }
amp_status amp_zero_shard_state(amp_zero *z) { (void)z; return todo(); }
int64_t amp_zero_state_bytes(const amp_zero *z) { (void)z; return 0; }
