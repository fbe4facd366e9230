#!/usr/bin/env python3
"""test_interop.py - the PyTorch side of tests/test_interop.c (run by it, with
$AMPC_TORCH_PYTHON or python3). Exits 77 when torch or safetensors is
missing, which the C test reports as skipped.

    test_interop.py logits CKPT X.bin SHAPE DTYPE OUT.bin
        builds the twin of ampc checkpoint CKPT with python/ampc_torch.py and
        writes its float32 logits on input X (raw little-endian, SHAPE like
        "2,8", DTYPE f32 or i64) to OUT.bin.

    test_interop.py write CONFIG_JSON SEED CKPT DATA X.bin SHAPE DTYPE OUT.bin [EVAL.bin B T N]
        builds a twin from CONFIG_JSON with weights drawn from torch seed SEED
        (biases and LayerNorms drawn too, so no parameter is trivial),
        writes it with ampc_torch.save as CKPT (settings: data DATA, fp32),
        writes its logits on X to OUT.bin, and prints what `ampc eval` must
        report for it: "twin_accuracy A" on the IDX test set in DATA (mlp,
        cnn; normalised as ampc's CLI does), or "twin_loss L" over the N
        windows [B, T] of x and y in EVAL.bin (gpt: the validation windows
        the C test cut with ampc's own sampler).

    test_interop.py resave CKPT DATA PRECISION OUT
        loads ampc checkpoint CKPT as a twin and saves it again with
        ampc_torch.save as OUT, with settings data DATA and PRECISION.

    test_interop.py roundtrip CKPT OUT
        loads ampc checkpoint CKPT as a twin, saves it as OUT with no
        arguments (the twin keeps the run's settings), and prints "weights
        identical" when every weight of OUT has CKPT's dtype and bits.
"""
import gzip
import json
import os
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
    import safetensors  # noqa: F401
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ampc_torch  # noqa: E402

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530  # tools/data.h


def read_tensor(path, shape, dtype):
    dt = {"f32": torch.float32, "i64": torch.int64}[dtype]
    with open(path, "rb") as f:
        data = bytearray(f.read())
    return torch.frombuffer(data, dtype=dt).reshape(shape).clone()


def write_f32(path, t):
    with open(path, "wb") as f:
        f.write(t.detach().to(torch.float32).contiguous().numpy().tobytes())


def shape_of(text):
    return [int(s) for s in text.split(",")]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def accuracy(model, config, data_dir):
    """The share of the IDX test set the twin classifies right, the images
    normalised as ampc's CLI does (x / 255 - mean) / std, in f32 as there."""
    x = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")).to(torch.float32)
    y = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz")).to(torch.int64)
    a = torch.tensor(1.0 / (255.0 * FMNIST_STD), dtype=torch.float32)
    b = torch.tensor(-FMNIST_MEAN / FMNIST_STD, dtype=torch.float32)
    x = x * a + b
    x = x.reshape(x.shape[0], -1) if config["model"] == "mlp" else x.reshape(x.shape[0], 1, *x.shape[1:])
    with torch.no_grad():
        pred = model(x).argmax(-1)
    return (pred == y).to(torch.float64).mean().item()


def randomise(model, seed):
    """Every parameter drawn from N(0, s) with s set so that activations
    stay O(1) (LayerNorm weights around 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[1] if p.dim() == 2 else (p[0].numel() if p.dim() == 4 else 1)
            std = 0.5 / fan_in ** 0.5 if p.dim() > 1 else 0.1
            p.copy_(torch.randn(p.shape, generator=g) * std)
            if ".ln_" in name and name.endswith("weight") or name.startswith("ln_f.weight"):
                p.add_(1.0)
            if name in ("wte.weight", "wpe.weight"):
                p.mul_(2.0 * fan_in ** 0.5)  # embeddings: N(0, 1)


def main(argv):
    cmd = argv[1]
    if cmd == "logits":
        _, _, ckpt, xpath, shape, dtype, out = argv
        model = ampc_torch.load(ckpt)
        with torch.no_grad():
            write_f32(out, model(read_tensor(xpath, shape_of(shape), dtype)))
        return 0
    if cmd == "write":
        _, _, config_json, seed, ckpt, data, xpath, shape, dtype, out = argv[:10]
        config = json.loads(config_json)
        model = ampc_torch.build(config)
        randomise(model, int(seed))
        ampc_torch.save(model, ckpt, data=data, precision="fp32")
        model.eval()
        with torch.no_grad():
            write_f32(out, model(read_tensor(xpath, shape_of(shape), dtype)))
        if config["model"] == "gpt":
            evalpath, B, T, N = argv[10], int(argv[11]), int(argv[12]), int(argv[13])
            xy = read_tensor(evalpath, [N, 2, B, T], "i64")
            total = 0.0
            with torch.no_grad():
                for k in range(N):
                    logits = model(xy[k, 0])
                    total += F.cross_entropy(logits.reshape(-1, config["vocab"]), xy[k, 1].reshape(-1)).item()
            print(f"twin_loss {total / N:.8f}")
        else:
            print(f"twin_accuracy {accuracy(model, config, data):.8f}")
        return 0
    if cmd == "resave":
        _, _, ckpt, data, precision, out = argv
        ampc_torch.save(ampc_torch.load(ckpt), out, data=data, precision=precision)
        return 0
    if cmd == "roundtrip":
        _, _, ckpt, out = argv
        ampc_torch.save(ampc_torch.load(ckpt), out)
        a, _, _ = ampc_torch.read(ckpt)
        b, _, _ = ampc_torch.read(out)
        differ = [k for k in a if not k.startswith("optim.")
                  and not (k in b and a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]))]
        print("weights " + ("identical" if not differ else "differ: " + ", ".join(differ)))
        return 0
    print(f"unknown command {cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
