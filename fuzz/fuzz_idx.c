/*
 * fuzz_idx.c - libFuzzer target: the input is an IDX file, plain or
 * gzip-compressed (amp_idx_load recognises it by content). Read as f32;
 * a file that reads is read again as i32 (the integer range checks) and
 * bf16 (the narrowing conversion). Seeds: fuzz/corpus/idx (fuzz_seeds).
 */
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("data-idx3-ubyte", data, size);
    amp_tensor *t = amp_idx_load(path, AMP_F32);
    if (t) {
        amp_tensor_free(t);
        amp_tensor_free(amp_idx_load(path, AMP_I32));
        amp_tensor_free(amp_idx_load(path, AMP_BF16));
    }
    amp_clear_error();
    return 0;
}
