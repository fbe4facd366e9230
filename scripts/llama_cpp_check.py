"""llama.cpp against ampc on one exported gpt (scripts/llama-cpp-check.sh
runs it): the GGUF file loaded with llama-cpp-python (llama_cpp.Llama),
the prompt tokenized by llama.cpp, greedy tokens from llama.cpp's logits
beside the ones `ampc generate --temperature 0` printed, and llama.cpp's
logits against ampc's fp32 forward (its PyTorch twin, python/ampc_torch.py:
ampc's logits to ~1e-6, docs/interop.md) at every position.

    python3 scripts/llama_cpp_check.py MODEL.gguf CHECKPOINT PROMPT AMPC_TEXT_FILE
    python3 scripts/llama_cpp_check.py --ids MODEL.gguf CHECKPOINT PROMPT AMPC_IDS_FILE

With --ids the model is a token-id one (its GGUF vocabulary a byte-level
BPE tokenizer.json's) and AMPC_IDS_FILE holds `ampc generate --ids`'s
output, the prompt's ids (the tokenizer's) then the generated ones.
"""
import json
import os
import sys

import numpy as np
import torch
from llama_cpp import Llama
from safetensors import safe_open

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import ampc_torch  # noqa: E402


def main():
    by_ids = sys.argv[1] == "--ids"
    gguf_path, ckpt, prompt, ampc_file = sys.argv[1 + by_ids:5 + by_ids]
    with safe_open(ckpt, framework="pt") as f:
        settings = json.loads(f.metadata()["settings"])
    context = settings["settings"]["context"]
    if by_ids:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(os.path.dirname(ckpt), "tokenizer.json"))
        ampc_ids = [int(t) for t in open(ampc_file).read().split()]
        n_prompt = len(tok.encode(prompt).ids)
        ampc_text = tok.decode(ampc_ids).encode()
        n_prompt_text = len(prompt.encode())
    else:
        vocab = bytes.fromhex(settings["run"]["vocab_bytes"])
        id_of = {b: i for i, b in enumerate(vocab)}
        ampc_text = open(ampc_file, "rb").read()
        ampc_ids = [id_of[b] for b in ampc_text]
        n_prompt = n_prompt_text = len(prompt.encode())

    llm = Llama(model_path=gguf_path, n_ctx=context, logits_all=True, verbose=False, n_threads=2)
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=False)
    print(f"prompt {prompt!r}: llama.cpp's tokens {ids}")
    print(f"                 ampc's tokens       {ampc_ids[:n_prompt]}  ({'same' if ids == ampc_ids[:n_prompt] else 'DIFFERENT'})")
    seq = list(ids)
    llm.eval(seq)
    while len(seq) < len(ampc_ids):
        nxt = int(np.argmax(llm.scores[len(seq) - 1]))
        seq.append(nxt)
        llm.eval([nxt])
    gen_l, gen_a = seq[n_prompt:], ampc_ids[n_prompt:]
    same = sum(1 for a, b in zip(gen_l, gen_a) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(gen_l, gen_a)) if a != b), None)
    print(f"greedy, {len(gen_a)} tokens:")
    print(f"  llama.cpp {gen_l}")
    print(f"  ampc      {gen_a}")
    print(f"  llama.cpp text {llm.detokenize(gen_l)!r}")
    print(f"  ampc text      {ampc_text[n_prompt_text:]!r}")
    print(f"  {same} of {len(gen_a)} tokens equal" + ("" if first is None else f"; the first difference at token {first}"))

    twin = ampc_torch.load(ckpt)
    with torch.no_grad():
        ref = twin(torch.tensor([seq], dtype=torch.long))[0].numpy()
    got = np.array(llm.scores[: len(seq)])
    diff = np.abs(got - ref)
    print(f"logits over the {len(seq)} positions ({ref.shape[1]} each): max |llama.cpp - ampc| = {diff.max():.3g} "
          f"(|logit| up to {np.abs(ref).max():.3g})")


if __name__ == "__main__":
    main()
