/*
 * attention_kv.h - the CPU attention's products over a KV cache read in
 * place (attention_kv.c), for a few queries: no packed copy of the keys
 * and values per call. Each is bit for bit the packed path's product
 * (attention.c's mm over pack_bt / pack_bn tiles on f32 FMA): the same
 * widened values, the same FMA chains in the same order.
 */
#ifndef AMPC_ATTENTION_KV_H
#define AMPC_ATTENTION_KV_H

#include "ampc.h"

#include <stdbool.h>

/* The most queries per head the products below take. */
#define ATTN_KV_MAX_Q 4

/* Whether this CPU runs the two products below (AVX-512F and BW). */
bool attn_kv_direct_available(void);

/* S[r * lds + c] = sum over d < D, in order, of q[r * ldq + d] * k_c[d]
 * (one FMA chain from 0) for query rows r < nq (<= ATTN_KV_MAX_Q) and keys c < nk, key c's
 * row at k + c * kv_ld elements of dt (f32, bf16 or f16, widened
 * exactly); columns nk .. up to the next multiple of 16 get 0. */
void attn_kv_scores(int64_t nq, int64_t nk, int64_t D, const float *q, int64_t ldq, const void *k, int64_t kv_ld,
                    amp_dtype dt, float *S, int64_t lds);

/* O[r * ldo + d] += p[r * ldp + c] * v_c[d] for c = 0 .. nk-1 in order
 * (one FMA per key onto O), value rows as for keys; columns D .. up to
 * the next multiple of 16 keep their values. */
void attn_kv_values(int64_t nq, int64_t nk, int64_t D, const float *p, int64_t ldp, const void *v, int64_t kv_ld,
                    amp_dtype dt, float *O, int64_t ldo);

#endif
