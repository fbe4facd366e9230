/*
 * scope.h - the module an op runs in, and modules kept out of autocast.
 *
 * A scope is the dotted path of the module whose forward is running, in
 * PyTorch's naming ("h.1.attn.qkv", "fc1", "" for the root or for code
 * outside any module). nn enters a module's scope around its forward
 * (amp_module_forward, and the GPT's block for the parts it wires itself);
 * op_run records the current scope in each node it makes (node->scope),
 * so a forward and its backward both know where they came from: the
 * anomaly check and the audit name it.
 *
 * A scope whose path is one of the modules set by
 * amp_autocast_set_fp32_modules, or lies under one ("h.0.attn" covers
 * "h.0.attn.qkv"), runs its ops outside autocast's lowering: the ops that
 * autocast would lower run in f32 (their 16-bit inputs widened), as a
 * nested autocast(enabled=False) with the inputs cast to float does in
 * PyTorch. The scope's state is part of autocast's (autocast_state), so
 * a checkpointed block recomputes in the precision it first ran in.
 *
 * Entering and leaving cost one thread-local store each, and one branch
 * on whether any module is kept in f32.
 */
#ifndef AMPC_OPS_SCOPE_H
#define AMPC_OPS_SCOPE_H

#include <stdbool.h>

/* What op_scope_enter saved, for op_scope_leave: on the caller's stack. */
typedef struct op_scope {
    const char *prev;
    bool prev_fp32;
    bool changed_fp32;
} op_scope;

/* Makes path (a string that outlives every node made inside: nn keeps
 * it on the module) the current scope until op_scope_leave(s). */
void op_scope_enter(op_scope *s, const char *path);
void op_scope_leave(op_scope *s);
/* The current scope's path; "" outside every module. */
const char *op_scope_current(void);

#endif
