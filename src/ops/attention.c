/* attention.c - placeholder until the op lands. */
#include "ops/ops.h"

/* i[0] = causal */
amp_tensor *amp_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal)
{
    amp_tensor *in[3] = {q, k, v};
    op_params p = {.i = {causal}};
    return op_apply(OP_ATTENTION, in, 3, &p);
}

amp_tensor *attention_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status attention_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
