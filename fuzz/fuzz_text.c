/*
 * fuzz_text.c - libFuzzer target: the input is a text corpus file
 * (amp_text_load). A corpus that loads gives a batch from each split with
 * a window length taken from its first byte (most corpora here are too
 * short for one of them: that error is part of the test), and every
 * token id maps back to a byte. Seeds: fuzz/corpus/text.
 */
#include "util.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("corpus.txt", data, size);
    amp_text *t = amp_text_load(path);
    if (t) {
        int64_t T = size ? 1 + data[0] % 16 : 1;
        amp_tensor *x = amp_zeros(AMP_SHAPE(3, T), AMP_I64), *y = amp_zeros(AMP_SHAPE(3, T), AMP_I64);
        amp_text_batch(t, false, size, x, y);
        amp_text_batch(t, true, size, x, y);
        amp_tensor_free(x);
        amp_tensor_free(y);
        for (int64_t id = 0; id < amp_text_vocab(t); id++)
            if (amp_text_char(t, id) < 0) {
                fprintf(stderr, "fuzz_text: token id %lld of %lld has no byte\n", (long long)id,
                        (long long)amp_text_vocab(t));
                __builtin_trap();
            }
        amp_text_free(t);
    }
    amp_clear_error();
    return 0;
}
