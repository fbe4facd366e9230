/* embedding.c - placeholder until its ops land. */
#include "ops/ops.h"

amp_tensor *embedding_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status embedding_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *dropout_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status dropout_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
