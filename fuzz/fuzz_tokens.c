/*
 * fuzz_tokens.c - libFuzzer target: the gpt's token-file readers
 * (tools/tokens.c, tools/tokenizer.c). The input's first byte picks the
 * reader, the rest is the file:
 *   0  a token file (nanoGPT raw uint16, llm.c shard) through tok_open,
 *      for a vocabulary taken from the second byte; one that opens gives
 *      a batch of windows, every id below the vocabulary
 *   1  nanoGPT's meta.pkl (tok_pkl_vocab): a vocabulary it gives is 1 .. 65536
 *   2  a JSON sidecar (tok_json_vocab)
 *   3  a Hugging Face tokenizer.json (tokenizer_parse), every piece looked up
 *   4  a tokenizer.json as GGUF export reads it (gguf_bpe_keys: tools/gguf_bpe.c),
 *      for a vocabulary taken from the second byte; what it refuses it says
 * Seeds: fuzz/corpus/tokens.
 */
#include "gguf_bpe.h"
#include "tokenizer.h"
#include "tokens.h"
#include "util.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tokens: %s\n", what);
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t kind = data[0] % 5, *p = data + 1;
    const size_t n = size - 1;
    char why[512];
    if (kind == 0) {
        int64_t vocab = n ? 1 + p[0] * 8 : 0, T = 1 + (int64_t)(size % 8);
        tok_file f;
        if (tok_open(&f, fuzz_file("train.bin", p, n), "--data-bin", vocab, T + 1)) {
            amp_tensor *x = amp_zeros(AMP_SHAPE(3, T), AMP_I64), *y = amp_zeros(AMP_SHAPE(3, T), AMP_I64);
            check(tok_fill(&f, size, x, y), "a file that opens gives no batch");
            const int64_t *px = amp_tensor_cdata(x), *py = amp_tensor_cdata(y);
            for (int64_t i = 0; i < 3 * T; i++)
                check(px[i] >= 0 && px[i] < vocab && py[i] >= 0 && py[i] < vocab, "an id past the vocabulary");
            amp_tensor_free(x);
            amp_tensor_free(y);
            tok_close(&f);
        }
    } else if (kind == 1) {
        int64_t v = tok_pkl_vocab(p, n, why, sizeof why);
        check(v == -1 || (v >= 1 && v <= TOK_MAX_VOCAB), "meta.pkl: a vocabulary out of range");
    } else if (kind == 2) {
        int64_t v = tok_json_vocab((const char *)p, n, why, sizeof why);
        check(v == -1 || (v >= 1 && v <= TOK_MAX_VOCAB), "sidecar: a vocabulary out of range");
    } else if (kind == 4) {
        gguf_file *g = n ? gguf_new() : NULL;
        if (g) {
            int rc = gguf_bpe_keys(g, fuzz_file("tokenizer.json", p + 1, n - 1), 1 + p[0] * 2, "fuzz_tokens");
            check(rc == -1 || rc == 1 || rc == 2, "gguf_bpe_keys: an exit code but -1, 1 or 2");
            gguf_free(g);
        }
    } else {
        tok_decoder d;
        if (tokenizer_parse(&d, (const char *)p, n, why, sizeof why)) {
            size_t len;
            for (int64_t id = 0; id <= d.n; id++)
                tokenizer_piece(&d, id, &len);
            tokenizer_free(&d);
        }
    }
    amp_clear_error();
    return 0;
}
