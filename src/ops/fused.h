/*
 * fused.h - ops that run two table ops as one, for nn's layers.
 *
 * Kept apart from ops.h so that the nn layer can call them without the op
 * table's declarations (whose forward names it reuses for its modules).
 */
#ifndef AMPC_FUSED_H
#define AMPC_FUSED_H

#include "ampc.h"

/* linear / conv2d followed by relu as one op (the relu is an epilogue the
 * backend applies after the GEMM or convolution, on every backend). The
 * values and gradients equal those of the two ops in sequence. nn's
 * sequential uses them for Linear / Conv2d followed by ReLU. */
amp_tensor *op_linear_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias);
amp_tensor *op_conv2d_relu(amp_tensor *x, amp_tensor *w, amp_tensor *bias, int stride, int padding);

/* gelu(linear(x, w, bias), AMP_GELU_TANH) as one op (linear with act
 * OP_ACT_GELU_TANH), for the GPT's fc1 + gelu. The pre-activation linear(x, w, bias) is
 * kept for backward (in the output's dtype), as the two ops keep it.
 * CPU: bit for bit the two ops - the same GEMM, then the gelu op's own
 * kernels forward and backward. CUDA: one cuBLASLt GEMM with the
 * GELU_AUX(_BIAS) epilogue, which applies GELU to the f32 sum before its
 * one rounding and writes the pre-activation into the aux buffer (so a
 * 16-bit result may differ from the CPU's, which rounds the pre-activation
 * first, in the last place); when cuBLASLt refuses, the linear as usual
 * and ampc's gelu kernel after it. Backward: gout * gelu'(pre) with the
 * gelu op's backward formula, then linear's backward. */
amp_tensor *op_linear_gelu(amp_tensor *x, amp_tensor *w, amp_tensor *bias);

/* s = x + res and *y = layer_norm(s) over the last dim (weight, bias
 * [N] or NULL, eps), for a pre-LN transformer's residual stream; returns s
 * (NULL on an error, *y NULL then too). The same two ops, nodes, values
 * and gradients as amp_add then amp_layer_norm, but where the backend can
 * (the CPU) the add computes the layer_norm in the same pass, and the
 * layer_norm's backward adds its dx into s's gradient in its own pass
 * (ops/norm.c). */
amp_tensor *op_add_layer_norm(amp_tensor *x, amp_tensor *res, amp_tensor *weight, amp_tensor *bias, double eps,
                              amp_tensor **y);
/* The same, the layer_norm run in scope ln_scope (its module's path,
 * ops/scope.h; NULL: the current scope), the add in the current one. */
amp_tensor *op_add_layer_norm_in(amp_tensor *x, amp_tensor *res, amp_tensor *weight, amp_tensor *bias,
                                 double eps, amp_tensor **y, const char *ln_scope);

/* scaled_dot_product_attention (amp_attention) on q, k, v [B, T, H, d]
 * (heads B * H), out [B, T, H, d]: the heads of a [B, T, H * d] linear
 * result reshaped, with no permute copies on the CPU (other backends:
 * permuted inside the op). Values as amp_attention's on the permuted
 * tensors, bit for bit. */
amp_tensor *op_attention_bthd(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool causal);

/* Causal attention of T new queries q [B, T, H, d] over a KV cache: k, v
 * [Tk, B, H, d] (Tk >= T; a contiguous prefix of a [context, B, H, d]
 * cache) whose last T rows are the queries' own positions, so query t
 * sees keys 0 .. Tk - T + t; out [B, T, H, d]. Forward only (inference:
 * its backward is an AMP_ERR_STATE error). On the CPU the same kernel and
 * tiles as op_attention_bthd over the whole sequence, so a row's value is
 * the one the full causal attention computes for that position. */
amp_tensor *op_attention_cached(amp_tensor *q, amp_tensor *k, amp_tensor *v);

/* op_attention_bthd on the three thirds of one fused projection: qkv [B,
 * T, 3, H, d] (a [B, T, 3 H d] linear result reshaped; q = qkv[:, :, 0],
 * k = [:, :, 1], v = [:, :, 2]), out [B, T, H, d]. The CPU reads the
 * thirds in place and writes dq, dk, dv into one d(qkv), so no narrow
 * copies are made either way. Values as op_attention_bthd's on the
 * thirds, bit for bit. */
amp_tensor *op_attention_qkv(amp_tensor *qkv, bool causal);

#endif
