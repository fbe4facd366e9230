#!/usr/bin/env python3
"""ampc_tokens.py - token files for `ampc train --model gpt --data-bin`.

Cuts a text into train.bin and val.bin (the first 90% and the rest, as
nanoGPT's prepare.py does) and writes the vocabulary size beside them in
train.bin.json and val.bin.json ({"vocab_size": N}), which ampc reads when
--vocab is left out.

    python3 python/ampc_tokens.py INPUT.txt OUTDIR                 # characters
    python3 python/ampc_tokens.py INPUT.txt OUTDIR --tokenizer tokenizer.json
    python3 python/ampc_tokens.py INPUT.txt OUTDIR --format llmc   # llm.c shards

Without --tokenizer the ids are the text's distinct characters in sorted
order (nanoGPT's shakespeare_char); with it, the ids a Hugging Face
tokenizer.json encodes the text to (needs the `tokenizers` package).
--format raw (default) writes nanoGPT's bare little-endian uint16 ids;
llmc writes llm.c's shards (a 256 x int32 header: magic 20240520, version 1,
the token count). Only the standard library is needed otherwise.
"""
import argparse
import array
import json
import os
import struct
import sys

LLMC_MAGIC, LLMC_VERSION = 20240520, 1


def encode(text, tokenizer):
    """The text's ids and the vocabulary size."""
    if tokenizer:
        from tokenizers import Tokenizer  # only for --tokenizer

        tok = Tokenizer.from_file(tokenizer)
        return tok.encode(text).ids, tok.get_vocab_size()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    return [stoi[c] for c in text], len(chars)


def write_tokens(path, ids, fmt, vocab):
    if vocab > 65536:
        sys.exit(f"ampc_tokens: a vocabulary of {vocab} does not fit uint16 ids")
    a = array.array("H", ids)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        if fmt == "llmc":
            header = [0] * 256
            header[0], header[1], header[2] = LLMC_MAGIC, LLMC_VERSION, len(ids)
            f.write(struct.pack("<256i", *header))
        f.write(a.tobytes())
    with open(path + ".json", "w") as f:
        json.dump({"vocab_size": vocab}, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="a UTF-8 text file")
    ap.add_argument("outdir", help="where train.bin, val.bin and their .json go")
    ap.add_argument("--tokenizer", help="a Hugging Face tokenizer.json (default: characters)")
    ap.add_argument("--format", choices=["raw", "llmc"], default="raw")
    ap.add_argument("--val", type=float, default=0.1, help="the share that validates (default 0.1)")
    args = ap.parse_args()
    with open(args.input, encoding="utf-8") as f:
        text = f.read()
    ids, vocab = encode(text, args.tokenizer)
    cut = int(len(ids) * (1 - args.val))
    os.makedirs(args.outdir, exist_ok=True)
    write_tokens(os.path.join(args.outdir, "train.bin"), ids[:cut], args.format, vocab)
    write_tokens(os.path.join(args.outdir, "val.bin"), ids[cut:], args.format, vocab)
    print(f"{len(ids)} tokens ({cut} train, {len(ids) - cut} val), vocabulary {vocab}, in {args.outdir}")


if __name__ == "__main__":
    main()
