/*
 * small_gpt.h - a two-layer gpt small enough for a test's forward and
 * backward in milliseconds, and a fixed [2, 8] batch of its tokens:
 * shared by the tests that watch every op of a gpt (test_scope.c,
 * test_debugger_api_misuse.c).
 */
#ifndef AMPC_TEST_SMALL_GPT_H
#define AMPC_TEST_SMALL_GPT_H

#include "ampc.h"

static inline amp_gpt_config small_gpt(void)
{
    return (amp_gpt_config){.vocab = 11, .context = 8, .width = 16, .layers = 2, .heads = 2, .mlp = 32};
}

/* Token ids (7 i mod 11) as a [2, 8] i64 tensor. */
static inline amp_tensor *tokens(void)
{
    int64_t v[16];
    for (int64_t i = 0; i < 16; i++)
        v[i] = (i * 7) % 11;
    return amp_from_data(AMP_SHAPE(2, 8), AMP_I64, v);
}

#endif
