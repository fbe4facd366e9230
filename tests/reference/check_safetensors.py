#!/usr/bin/env python3
"""check_safetensors.py - opens an ampc checkpoint with Python's safetensors
package, as a user would, and prints what it finds.

    python3 tests/reference/check_safetensors.py CHECKPOINT
    python3 tests/reference/check_safetensors.py --write PATH

Prints one line per metadata entry and per tensor, then "ok N tensors":

    metadata step="3"                         (the value as json.dumps writes it)
    tensor 0.weight F32 [8, 6] crc32=1a2b3c4d  (zlib.crc32 of the tensor's bytes)

test_checkpoint.c runs it and compares the lines with what it saved, so
the tensors' bytes as safetensors reads them are checked against ampc's.
Besides what safetensors itself checks on open (header JSON, offsets that
tile the data), it checks ampc's own promises: the data starts 8-byte
aligned and __metadata__ says format "ampc-1". Exit status 1 on any problem.

With --write it goes the other way: it saves a plain safetensors file the
way a numpy user would (safetensors.numpy.save_file: "weight" [4, 3] =
0, 0.5, ..., 5.5 and "bias" [4] = -1, -2, -3, -4, F32, no ampc metadata),
which the test loads into an ampc linear(3, 4).
"""
import json
import struct
import sys
import zlib

import numpy as np
from safetensors import safe_open

# numpy has no bfloat16: such tensors are read through PyTorch when present.
DTYPES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16",
          np.dtype("int32"): "I32", np.dtype("int64"): "I64"}


def tensor_bytes(path, name):
    """The tensor's raw little-endian bytes and its dtype name."""
    with safe_open(path, framework="numpy") as f:
        try:
            a = f.get_tensor(name)
            return np.ascontiguousarray(a).tobytes(), DTYPES[a.dtype], a.shape  # little-endian host
        except (TypeError, ValueError, KeyError):
            pass
    import torch  # BF16 only
    with safe_open(path, framework="pt") as f:
        t = f.get_tensor(name)
        assert t.dtype == torch.bfloat16, t.dtype
        return t.contiguous().view(torch.int16).numpy().tobytes(), "BF16", tuple(t.shape)


def write(path):
    from safetensors.numpy import save_file
    save_file({"weight": np.arange(12, dtype=np.float32).reshape(4, 3) * np.float32(0.5),
               "bias": np.array([-1, -2, -3, -4], dtype=np.float32)}, path, metadata={"source": "numpy"})
    return 0


def main():
    if sys.argv[1] == "--write":
        return write(sys.argv[2])
    path = sys.argv[1]
    with open(path, "rb") as f:
        head = f.read(8)
    (n,) = struct.unpack("<Q", head)
    if (8 + n) % 8:
        print(f"error: the data starts at byte {8 + n}, not 8-byte aligned")
        return 1
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
        names = list(f.keys())
    if meta.get("format") != "ampc-1":
        print(f"error: metadata format is {meta.get('format')!r}, not 'ampc-1'")
        return 1
    for k in sorted(meta):
        print(f"metadata {k}={json.dumps(meta[k])}")
    for name in sorted(names):
        data, dt, shape = tensor_bytes(path, name)
        print(f"tensor {name} {dt} {list(shape)} crc32={zlib.crc32(data):08x}")
    print(f"ok {len(names)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
