/* softmax.c - placeholder until its ops land. */
#include "ops/ops.h"

amp_tensor *softmax_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status softmax_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *log_softmax_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status log_softmax_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *cross_entropy_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status cross_entropy_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *mse_loss_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status mse_loss_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
