"""test_hf.py - the Hugging Face side of tests/test_hf.c: transformers
loads what `ampc export --format hf` writes, and writes what `ampc import
--format hf` reads. Each mode does its part and prints the numbers the C
side checks; a failed expectation here is exit 1 with the reason. Several modes run in
one process when joined by "+" (transformers takes seconds to import).

  export HF X.bin B,T LOGITS.bin PROMPT.ids GEN.ids SAMPLE.txt SAMPLE.ids
      GPT2LMHeadModel.from_pretrained(HF) in fp32: its logits on the i64
      ids X against ampc's (f32 LOGITS), printed as "logits_rel <max
      |ampc - hf| / (1 + |hf|)>"; generate(do_sample=False) from the
      prompt's ids against ampc's greedy tokens; tokenizer.json's ids of
      SAMPLE.txt against ampc's, and its decode against the text.
  random DIR32 DIR16 IDS.bin OUT32.bin OUT16.bin
      a randomly initialised GPT2LMHeadModel (n_layer 2, n_head 3, n_embd
      48, vocab 101, n_positions 40) saved in f32 and in bf16, and the
      fp32 logits of each (the bf16 one's weights widened) on random ids
      [2, 40], written to IDS / OUT*.
  bad BASE
      a small valid directory BASE/good and, beside it, one broken
      directory per case test_hf.c lists.
  big DIR IDS.bin OUT.bin GEN.ids TRAIN.bin VAL.bin
      a random GPT2LMHeadModel of GPT-2's vocabulary (50257) at a tiny
      width (n_embd 32, 2 layers, 2 heads, n_positions 64) saved in DIR;
      its logits on random ids [2, 64] (IDS, OUT), the 8 ids greedy
      generate() gives after the prompt 1,2,3 (GEN), and nanoGPT token
      files (uint16) of ids below 50257 to fine-tune it on.
  tok DIR GEN.ids GEN.txt
      a byte-level BPE trained with tokenizers on a small text, and a
      random GPT2LMHeadModel of its vocabulary, saved in DIR with the
      tokenizer.json; the prompt 1,2,3 and the 8 ids greedy generate()
      adds (GEN) and the tokenizer's decode of them all (GEN.txt).
  logits TAG HF X.bin B,T LOGITS.bin
      GPT2LMHeadModel.from_pretrained(HF)'s logits on the i64 ids X
      against ampc's, printed as "TAG_rel <max |ampc - hf| / (1 + |hf|)>".
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def export(hf, xp, shape, logits_path, prompt_path, gen_path, sample_path, sample_ids_path):
    import tokenizers

    m = logits("logits", hf, xp, shape, logits_path)

    prompt = np.fromfile(prompt_path, dtype=np.int64)
    want = np.fromfile(gen_path, dtype=np.int64)
    with torch.no_grad():
        out = m.generate(torch.from_numpy(prompt)[None], max_new_tokens=len(want), min_new_tokens=len(want),
                         do_sample=False, pad_token_id=0)
    new = out[0, len(prompt):].numpy()
    if not np.array_equal(new, want):
        fail(f"greedy tokens differ:\n  transformers {new.tolist()}\n  ampc         {want.tolist()}")
    print(f"greedy: {len(want)} tokens equal, {len(set(want.tolist()))} distinct")

    tok = tokenizers.Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
    text = open(sample_path, encoding="utf-8").read()
    ids = tok.encode(text).ids
    want = np.fromfile(sample_ids_path, dtype=np.int64).tolist()
    if ids != want:
        fail(f"tokenizer ids differ: {ids[:20]} ... against ampc's {want[:20]} ...")
    if tok.decode(ids) != text:
        fail(f"tokenizer decode gives {tok.decode(ids)[:60]!r}, not {text[:60]!r}")
    print(f"tokenizer: {len(ids)} ids equal, decode gives the text back")


def greedy(m, prompt, n):
    with torch.no_grad():
        out = m.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         pad_token_id=0)
    return out[0].numpy().astype(np.int64)


def random_gpt2(vocab, seed, **shape):
    """A random GPT2LMHeadModel, LayerNorms and biases moved off 1 and 0 (a swapped tensor shows)."""
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, initializer_range=0.2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=None, eos_token_id=None, **shape)
    m = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return m


def random_model(d32, d16, ids_path, out32, out16):
    m = random_gpt2(101, 5, n_layer=2, n_head=3, n_embd=48, n_positions=40)
    m.save_pretrained(d32, safe_serialization=True)
    m16 = GPT2LMHeadModel(m.config).eval()
    m16.load_state_dict(m.state_dict())
    m16 = m16.to(torch.bfloat16)
    m16.save_pretrained(d16, safe_serialization=True)
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 101, (2, 40), generator=g)
    ids.numpy().astype(np.int64).tofile(ids_path)
    with torch.no_grad():
        m(ids).logits.numpy().astype(np.float32).tofile(out32)
        m16.float()(ids).logits.numpy().astype(np.float32).tofile(out16)
    print("random: saved in f32 and bf16")


def write_st(path, tensors, header_len=None, overlap=False, cut=0, dtype_of=None):
    """A safetensors file written by hand, so that it can be broken."""
    header, data, at = {}, b"", 0
    for name, arr in tensors.items():
        raw = arr.tobytes()
        dt = (dtype_of or {}).get(name, "F32")
        begin = at - 4 if overlap and at else at
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [begin, begin + len(raw)]}
        data = data[:begin] + raw
        at = begin + len(raw)
    h = json.dumps(header).encode()
    n = len(h) if header_len is None else header_len
    blob = struct.pack("<Q", n) + h + data
    with open(path, "wb") as f:
        f.write(blob[: len(blob) - cut])


def bad(base):
    from safetensors.numpy import load_file

    cfg = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=11, n_positions=6, bos_token_id=None, eos_token_id=None)
    good = os.path.join(base, "good")
    GPT2LMHeadModel(cfg).save_pretrained(good, safe_serialization=True)
    sd = load_file(os.path.join(good, "model.safetensors"))
    conf = json.load(open(os.path.join(good, "config.json")))

    def case(name, tensors=None, config=None, config_text=None, **st):
        d = os.path.join(base, name)
        os.makedirs(d, exist_ok=True)
        if config_text is not None:
            open(os.path.join(d, "config.json"), "w").write(config_text)
        elif config is not False:
            json.dump(config or conf, open(os.path.join(d, "config.json"), "w"))
        if tensors is not False:
            write_st(os.path.join(d, "model.safetensors"), tensors if tensors is not None else sd, **st)

    case("missing-config", config=False)
    case("bad-json", config_text='{"model_type": "gpt2", "n_layer": 1,, }')
    case("missing-weights", tensors=False)
    wrong = dict(sd)
    wrong["transformer.h.0.attn.c_attn.weight"] = sd["transformer.h.0.attn.c_attn.weight"].T.copy()
    case("wrong-shape", tensors=wrong)
    case("missing-tensor", tensors={k: v for k, v in sd.items() if k != "transformer.ln_f.bias"})
    case("unknown-dtype", dtype_of={"transformer.wpe.weight": "F64"})
    ints = dict(sd)
    ints["transformer.ln_f.weight"] = np.zeros(8, dtype=np.int32)
    case("int-tensor", tensors=ints, dtype_of={"transformer.ln_f.weight": "I32"})
    case("truncated", cut=10)
    case("header-past-end", header_len=1 << 20)
    case("overlap", overlap=True)
    untied = dict(sd)
    untied["lm_head.weight"] = sd["transformer.wte.weight"] + 1
    case("untied-head", tensors=untied)
    case("relu", config=dict(conf, activation_function="relu"))
    case("inverse-layer-idx", config=dict(conf, scale_attn_by_inverse_layer_idx=True))
    case("upcast-attn", config=dict(conf, reorder_and_upcast_attn=True))
    case("big-vocab", config=dict(conf, vocab_size=65537))
    case("llama", config=dict(conf, model_type="llama"))
    case("eps", config=dict(conf, layer_norm_epsilon=1e-6))
    # A GPT2Model's names (no "transformer.") with the tied head stored: accepted.
    case("no-prefix", tensors=dict({k.replace("transformer.", ""): v for k, v in sd.items()},
                                   **{"lm_head.weight": sd["transformer.wte.weight"]}))
    # Two shards and their index: accepted.
    d = os.path.join(base, "sharded")
    os.makedirs(d, exist_ok=True)
    json.dump(conf, open(os.path.join(d, "config.json"), "w"))
    names = sorted(sd)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for fn, ks in halves.items():
        write_st(os.path.join(d, fn), {k: sd[k] for k in ks})
    json.dump({"metadata": {}, "weight_map": {k: fn for fn, ks in halves.items() for k in ks}},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    print("bad: written")


def big(d, ids_path, out_path, gen_path, train_path, val_path):
    m = random_gpt2(50257, 7, n_layer=2, n_head=2, n_embd=32, n_positions=64)
    m.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(0, 50257, (2, 64), generator=g)
    ids.numpy().astype(np.int64).tofile(ids_path)
    with torch.no_grad():
        m(ids).logits.numpy().astype(np.float32).tofile(out_path)
    greedy(m, [1, 2, 3], 8)[3:].tofile(gen_path)
    for path, n in ((train_path, 4096), (val_path, 1024)):
        toks = torch.randint(0, 50257, (n,), generator=g).numpy().astype(np.uint16)
        toks[:2] = (50256, 0)  # the vocabulary's ends
        toks.tofile(path)
    print("big: saved, the largest id", int(ids.max()))


def tok(d, gen_path, text_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = ("the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat and sat. " * 20).split(".")
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    # no initial alphabet: every token is text of the corpus (ASCII), so any ids decode to whole characters
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    v = t.get_vocab_size()
    m = random_gpt2(v, 9, n_layer=1, n_head=2, n_embd=16, n_positions=32)
    m.save_pretrained(d, safe_serialization=True)
    t.save(os.path.join(d, "tokenizer.json"))
    ids = greedy(m, [1, 2, 3], 8)
    ids.tofile(gen_path)
    s = t.decode(ids.tolist())
    if "\ufffd" in s:
        fail(f"the decode of {ids.tolist()} is not whole characters: {s!r}")
    open(text_path, "w", encoding="utf-8").write(s)
    print(f"tok: vocab {v}, greedy ids {ids.tolist()} decode to {s!r}")


def logits(tag, hf, xp, shape, logits_path):
    """The loaded model, after printing its logits' distance from ampc's."""
    b, t = (int(v) for v in shape.split(","))
    m = GPT2LMHeadModel.from_pretrained(hf, dtype=torch.float32).eval()
    x = torch.from_numpy(np.fromfile(xp, dtype=np.int64).reshape(b, t))
    ampc = np.fromfile(logits_path, dtype=np.float32)
    with torch.no_grad():
        got = m(x).logits.numpy().reshape(-1)
    if got.size != ampc.size:
        fail(f"{tag}: {got.size} logits from transformers, {ampc.size} from ampc")
    rel = np.max(np.abs(ampc.astype(np.float64) - got) / (1 + np.abs(got)))
    print(f"{tag}_rel {rel:.3g} over {got.size} logits, |logit| up to {np.max(np.abs(got)):.3g}, "
          f"activation {m.config.activation_function}, vocab {m.config.vocab_size}")
    return m


if __name__ == "__main__":
    # Several modes in one process (transformers takes a while to import): "MODE ARGS + MODE ARGS".
    words, start = sys.argv[1:] + ["+"], 0
    for i, w in enumerate(words):
        if w == "+":
            {"export": export, "random": random_model, "bad": bad, "big": big, "tok": tok,
             "logits": logits}[words[start]](*words[start + 1:i])
            start = i + 1
