"""The Python side of tests/test_gguf.c: a GGUF file `ampc export --format
gguf` wrote, read back with the gguf package's GGUFReader (llama.cpp's
own gguf-py) and checked against the checkpoint it came from (read with
safetensors and torch).

    python3 tests/test_gguf.py GGUF CHECKPOINT DTYPE NAME [GGUF CHECKPOINT DTYPE NAME ...]

DTYPE is the type the weight matrices should have (f32, f16, bf16), NAME
the general.name; one run checks several files (importing torch is the
slow part). Prints what each check saw and exits 1 at the first mismatch.
A checkpoint of token ids is checked against the tokenizer.json beside it
(read with the `tokenizers` package); one without biases (--no-bias)
must come with zero biases.

    python3 tests/test_gguf.py bpe TEXT OUTDIR

trains a byte-level BPE of about 300 tokens (<|endoftext|> special) on
TEXT with `tokenizers` and writes OUTDIR/tokenizer.json and TEXT's ids as
OUTDIR/train.bin and OUTDIR/val.bin (nanoGPT's raw uint16).
"""
import os
import json
import sys

import gguf
import numpy as np
import torch
from safetensors import safe_open

ALIGNMENT = 32
# llama.cpp's names for ampc's (convert_hf_to_gguf.py's for GPT-2).
TOP = {"wte": "token_embd", "wpe": "position_embd", "ln_f": "output_norm"}
BLOCK = {"ln_1": "attn_norm", "attn.qkv": "attn_qkv", "attn.proj": "attn_output",
         "ln_2": "ffn_norm", "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down"}
GGML = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
        "bf16": gguf.GGMLQuantizationType.BF16}
FTYPE = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
         "bf16": gguf.LlamaFileType.MOSTLY_BF16}
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def bytes_to_unicode():
    """GPT-2's byte -> character table (openai/gpt-2 src/encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def gguf_name(name):
    stem, kind = name.rsplit(".", 1)
    if stem.startswith("h."):
        _, i, rest = stem.split(".", 2)
        return f"blk.{i}.{BLOCK[rest]}.{kind}"
    return f"{TOP[stem]}.{kind}"


def check(path, ckpt, dtype, name):
    print(f"{path} ({dtype}):")
    r = gguf.GGUFReader(path)
    with safe_open(ckpt, framework="pt") as f:
        settings = json.loads(f.metadata()["settings"])
        weights = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("optim.")}
    o, run = settings["settings"], settings["run"]

    def opt(k):
        return o[k]

    if run.get("vocab_kind") == "token_ids":
        tokens, types, merges, eos = bpe_expected(os.path.join(os.path.dirname(ckpt), "tokenizer.json"), run["vocab"])
    else:
        vocab = bytes.fromhex(run["vocab_bytes"])
        b2u = bytes_to_unicode()
        eos = vocab.index(b"\n"[0]) if b"\n"[0] in vocab else 0
        tokens, types, merges = [b2u[b] for b in vocab], [int(gguf.TokenType.NORMAL)] * len(vocab), []
    expect = {
        "general.architecture": (gguf.GGUFValueType.STRING, "gpt2"),
        "general.file_type": (gguf.GGUFValueType.UINT32, int(FTYPE[dtype])),
        "general.alignment": (gguf.GGUFValueType.UINT32, ALIGNMENT),
        "gpt2.context_length": (gguf.GGUFValueType.UINT32, opt("context")),
        "gpt2.embedding_length": (gguf.GGUFValueType.UINT32, opt("width")),
        "gpt2.feed_forward_length": (gguf.GGUFValueType.UINT32, opt("mlp-width")),
        "gpt2.block_count": (gguf.GGUFValueType.UINT32, opt("layers")),
        "gpt2.attention.head_count": (gguf.GGUFValueType.UINT32, opt("heads")),
        "gpt2.attention.layer_norm_epsilon": (gguf.GGUFValueType.FLOAT32, float(np.float32(1e-5))),
        "tokenizer.ggml.model": (gguf.GGUFValueType.STRING, "gpt2"),
        "tokenizer.ggml.pre": (gguf.GGUFValueType.STRING, "gpt-2"),
        "tokenizer.ggml.tokens": (gguf.GGUFValueType.ARRAY, tokens),
        "tokenizer.ggml.token_type": (gguf.GGUFValueType.ARRAY, types),
        "tokenizer.ggml.merges": (gguf.GGUFValueType.ARRAY, merges),
        "tokenizer.ggml.bos_token_id": (gguf.GGUFValueType.UINT32, eos),
        "tokenizer.ggml.eos_token_id": (gguf.GGUFValueType.UINT32, eos),
        "tokenizer.ggml.add_bos_token": (gguf.GGUFValueType.BOOL, False),
        "general.name": (gguf.GGUFValueType.STRING, name),
    }
    if r.fields["GGUF.version"].contents() != 3:
        fail(f"version {r.fields['GGUF.version'].contents()}, not 3")
    keys = {k for k in r.fields if not k.startswith("GGUF.")}
    want = set(expect)
    if keys != want:
        fail(f"keys: extra {sorted(keys - want)}, missing {sorted(want - keys)}")
    for k, (t, v) in expect.items():
        fld = r.fields[k]
        got = fld.contents()
        if fld.types[0] != t or got != v or (isinstance(v, float) and type(got) is not float):
            fail(f"{k}: {fld.types} {got!r}, expected {t.name} {v!r}")
    print(f"  {len(keys)} keys as expected; vocabulary of {len(tokens)} tokens, {len(merges)} merges, eos/bos {eos}")

    if r.data_offset % ALIGNMENT:
        fail(f"the data section starts at {r.data_offset}, not a multiple of {ALIGNMENT}")
    tensors = {t.name: t for t in r.tensors}
    if o.get("no-bias"):
        # zero biases for every linear and LayerNorm (not the embeddings)
        for k in list(weights):
            if k.endswith(".weight") and not k.startswith(("wte.", "wpe.")):
                weights[k[:-len("weight")] + "bias"] = torch.zeros(weights[k].shape[0])
    wanted = {gguf_name(k): k for k in weights}
    if set(tensors) != set(wanted):
        fail(f"tensors: extra {sorted(set(tensors) - set(wanted))}, missing {sorted(set(wanted) - set(tensors))}")
    for gname, k in wanted.items():
        t, w = tensors[gname], weights[k]
        if (t.data_offset - r.data_offset) % ALIGNMENT:
            fail(f"{gname}: data at {t.data_offset}, not aligned to {ALIGNMENT}")
        want_dt = "f32" if w.dim() == 1 else dtype
        if t.tensor_type != GGML[want_dt]:
            fail(f"{gname}: type {t.tensor_type.name}, expected {GGML[want_dt].name}")
        # ggml's ne lists the dimensions fastest first: [out, in] is {in, out}
        if list(t.shape) != list(reversed(w.shape)):
            fail(f"{gname}: ne {list(t.shape)}, expected {list(reversed(w.shape))} (of {k} {list(w.shape)})")
        ref = w.to(TORCH[want_dt])
        bits = {"f32": torch.int32, "f16": torch.int16, "bf16": torch.int16}[want_dt]
        ref_bits = ref.view(bits).numpy()
        got = np.asarray(t.data)
        got_bits = got.view(np.uint16 if want_dt == "bf16" else got.dtype).view(ref_bits.dtype).reshape(ref_bits.shape)
        if not np.array_equal(got_bits, ref_bits):
            bad = np.argwhere(got_bits != ref_bits)[0]
            fail(f"{gname}: element {tuple(bad)} differs from {k}'s ({want_dt})")
    print(f"  {len(tensors)} tensors: names, ne, types and every value as the checkpoint's ({dtype})")


def bpe_expected(path, vocab):
    """The tokens, types, merges and eos/bos id llama.cpp's converter
    (convert_hf_to_gguf.py, _set_vocab_gpt2) writes for the tokenizer.json
    at path with the model's vocabulary of vocab ids."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    ids = {i: t for t, i in tok.get_vocab(with_added_tokens=True).items()}
    added = tok.get_added_tokens_decoder()
    tokens, types = [], []
    for i in range(vocab):
        if i not in ids:
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
        elif i in added:
            tokens.append(ids[i])
            types.append(int(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED))
        else:
            tokens.append(ids[i])
            types.append(int(gguf.TokenType.NORMAL))
    with open(path, encoding="utf-8") as f:
        merges = [m if isinstance(m, str) else " ".join(m) for m in json.load(f)["model"]["merges"]]
    eos = tok.token_to_id("<|endoftext|>")
    if not merges or eos is None or int(gguf.TokenType.CONTROL) not in types:
        fail(f"{path}: expected merges, <|endoftext|> and a special token to check")
    return tokens, types, merges, eos


def make_bpe(text, outdir):
    import numpy as np
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer()
    tok.train([text], vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"], show_progress=False)
    tok.save(os.path.join(outdir, "tokenizer.json"))
    with open(text, encoding="utf-8") as f:
        ids = tok.encode(f.read()).ids
    half = len(ids) * 9 // 10
    np.array(ids[:half], dtype=np.uint16).tofile(os.path.join(outdir, "train.bin"))
    np.array(ids[half:], dtype=np.uint16).tofile(os.path.join(outdir, "val.bin"))
    print(f"{len(tok.get_vocab())} tokens, {len(ids)} ids")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["bpe"]:
        make_bpe(*args[1:3])
        sys.exit(0)
    if not args or len(args) % 4:
        fail("usage: test_gguf.py GGUF CHECKPOINT DTYPE NAME [...]")
    for i in range(0, len(args), 4):
        check(*args[i:i + 4])
