/*
 * cpu_backend.h - the CPU backend's primitives, as backend_cpu.c's table
 * names them: one block per family, each implemented in its own file
 * under src/backend/cpu/.
 */
#ifndef AMPC_CPU_BACKEND_H
#define AMPC_CPU_BACKEND_H

#include "backend/backend.h"

/* ==== section pointwise ==== */
/* ==== end section pointwise ==== */



/* ==== section linalg ==== */
/* linalg.c: gemm over gemm.h's GEMMs, the bias gradient's column sums. */
amp_status cpu_gemm(const be_gemm_desc *g);
amp_status cpu_bias_grad(const void *dy, amp_dtype dt, int64_t rows, int64_t cols, void *db, amp_dtype dbdt);
/* attention.c: scaled dot-product attention, one head at a time. */
amp_status cpu_attention(const be_attn_desc *a);
amp_status cpu_attention_backward(const be_attn_desc *a);
/* ==== end section linalg ==== */



/* ==== section nn ==== */
/* ==== end section nn ==== */



/* ==== section conv ==== */
/* ==== end section conv ==== */



/* ==== section amp ==== */
/* ==== end section amp ==== */



/* ==== section optim ==== */
/* ==== end section optim ==== */

#endif
