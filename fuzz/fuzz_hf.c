/*
 * fuzz_hf.c - libFuzzer target: a Hugging Face transformers directory as
 * `ampc import --format hf` reads it (tools/hf.c: hf_read_dir). The input
 * is config.json, then model.safetensors and tokenizer.json, the three
 * split at each "\n@@ampc-hf@@\n" (a part left out is an empty file):
 * the config's checks, the safetensors reader (src/io/checkpoint_load.c:
 * header, entries, layout) with the GPT-2 names, shapes, dtypes and the
 * tied head, the tokenizer's vocabulary. Seeds: fuzz/corpus/hf (a
 * transformers GPT-2 in f32 and in bf16, an `ampc export`, a config
 * alone; fuzz/README.md).
 */
#include "hf.h"
#include "util.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP "\n@@ampc-hf@@\n"

/* The part of data[*at, size) up to the next SEP (or the end), into a file. */
static void part(const char *name, const uint8_t *data, size_t size, size_t *at)
{
    const uint8_t *p = data + *at;
    size_t left = size - *at, n = left, k = strlen(SEP);
    for (size_t i = 0; i + k <= left; i++)
        if (memcmp(p + i, SEP, k) == 0) {
            n = i;
            break;
        }
    fuzz_file(name, p, n);
    *at += n < left ? n + k : n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t at = 0;
    part("config.json", data, size, &at);
    part("model.safetensors", data, size, &at);
    part("tokenizer.json", data, size, &at);
    hf_model m;
    hf_read_dir(fuzz_dir(), &m);
    hf_model_free(&m);
    amp_clear_error();
    return 0;
}
