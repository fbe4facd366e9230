/*
 * gpt_cache.h - what gpt.c and gpt_cache.c share for generation with a
 * key/value cache (internal).
 *
 * Defines: gpt_forward_at (gpt.c: the model's forward at the cache's next
 * positions), gpt_cache_pos and gpt_cache_attend (gpt_cache.c: where the
 * cache stands, and one block's attention through it).
 */
#ifndef AMPC_NN_GPT_CACHE_H
#define AMPC_NN_GPT_CACHE_H

#include "ampc.h"

/* The gpt m's forward over idx [B, T] at positions gpt_cache_pos(kv) ..
 * + T - 1, each block's attention through kv (NULL: the ordinary forward,
 * positions 0 .. T - 1). Does not advance kv. */
amp_tensor *gpt_forward_at(amp_module *m, amp_tensor *idx, amp_gpt_cache *kv);

/* Positions the cache holds. */
int64_t gpt_cache_pos(const amp_gpt_cache *kv);

/* Block `layer`'s attention for T new positions: k and v [B, T, H, d]
 * written into the cache after its gpt_cache_pos positions, then q [B, T,
 * H, d] attending causally over all of them; out [B, T, H, d], or NULL
 * (error set). */
amp_tensor *gpt_cache_attend(amp_gpt_cache *kv, int64_t layer, amp_tensor *q, amp_tensor *k, amp_tensor *v);

#endif
