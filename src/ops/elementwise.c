/* elementwise.c - placeholder until its ops land. */
#include "ops/ops.h"

amp_tensor *add_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status add_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *sub_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status sub_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *mul_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status mul_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *div_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status div_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *add_scalar_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status add_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *mul_scalar_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status mul_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *div_scalar_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status div_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *neg_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status neg_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *relu_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status relu_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *gelu_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status gelu_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *tanh_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status tanh_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *sigmoid_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status sigmoid_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *exp_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status exp_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *log_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status log_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *pow_scalar_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status pow_scalar_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
