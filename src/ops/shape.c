/* shape.c - placeholder until its ops land. */
#include "ops/ops.h"

amp_tensor *reshape_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status reshape_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *permute_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status permute_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *cat_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status cat_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
amp_tensor *to_forward(node *n) { return amp_fail_null(AMP_ERR_STATE, "%s: not implemented yet", op_name(n)); }
amp_status to_backward(node *n, const amp_tensor *gout, amp_tensor **gin) { (void)gout; (void)gin; return amp_set_error(AMP_ERR_STATE, "%s: backward not implemented yet", op_name(n)); }
