"""PyTorch's training step on the benchmark models, timed the same way as
ampc's (bench/run.sh runs both in the same run, on the same threads).

The models (bench/ampc_step.c's):
  mlp  784-4096-4096-10, ReLU, batch 256, cross-entropy, SGD lr 0.01 momentum 0.9
  cnn  conv 1->32 3x3 p1, ReLU, maxpool 2; conv 32->64 3x3 p1, ReLU, maxpool 2;
       linear 3136->128, ReLU; linear 128->10; batch 128; SGD as above
  gpt  vocab 96, context 128, width 256, 4 layers, 4 heads, MLP 1024 GELU,
       pre-LayerNorm, tied head, batch 16, AdamW lr 3e-4 weight decay 0.1
Precisions: fp32, bf16 (autocast), fp16 (autocast + GradScaler).

Prints one JSON object per line: {"impl": "torch", "setting", "allocator",
"version", "model", "precision", "threads", "step_ms" (the median timed
step), "steps" (how many were timed), "warmup" (how many ran before them),
"timeboxed" (true when --max-seconds cut either short), "times_ms" (every
timed step, in order)}, the same fields as bench/ampc_step.c's.

--setting default|tuned (default: default) labels the record; the step is
the same code either way: torch.set_num_threads(--threads) and
optimizer.zero_grad(set_to_none=True) (PyTorch's default since 2.0) in
both. What makes "tuned" is the process's environment, which only the
caller can set before Python starts, as PyTorch's CPU performance tuning
guide asks: jemalloc or tcmalloc in LD_PRELOAD and jemalloc's MALLOC_CONF
(bench/run.sh sets both). "allocator" names what LD_PRELOAD loaded
(jemalloc, tcmalloc, or glibc when neither), with MALLOC_CONF when set.

usage: python3 bench/torch_step.py [--threads N] [--steps N] [--warmup N]
                                   [--setting default|tuned]
                                   [--max-seconds S] [--models mlp,cnn,gpt]
                                   [--precisions fp32,bf16,fp16]
                                   [--device cpu|cuda] [--gemm 4096,8192]
--warmup N (default 3): untimed steps first. --max-seconds S (default 0: no
limit): a time box per model and precision (PyTorch's fp16 autocast step
takes seconds on a CPU without AVX512-FP16): the warm-up stops early once
the cell has run S / 3 seconds (at least one warm-up step still runs) and
the timed steps once it has run S seconds (at least one timed step still
runs), as bench/ampc_step.c does.
--device cuda runs the same steps on the GPU (scripts/gpu-check.sh, beside
bench_cuda); each step still ends with loss.item(), which waits for the GPU.
--gemm N,.. first times torch.matmul on N x N matrices in fp16, bf16 and fp32
(with and without TF32) and prints {"impl": "torch", "kind": "gemm", ...}.
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads, mlp):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, mlp)
        self.fc2 = nn.Linear(mlp, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=96, context=128, width=256, layers=4, heads=4, mlp=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads, mlp) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def make(model, device="cpu"):
    torch.manual_seed(0)
    if model == "mlp":
        net = nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                            nn.Linear(4096, 10))
        x, y = torch.randn(256, 784), torch.randint(0, 10, (256,))
    elif model == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
        x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    else:
        net = GPT()
        x, y = torch.randint(0, 96, (16, 128)), torch.randint(0, 96, (16, 128))
    net, x, y = net.to(device), x.to(device), y.to(device)
    if model == "gpt":
        opt = torch.optim.AdamW(net.parameters(), lr=3e-4, weight_decay=0.1)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    return net, opt, x, y


def time_steps(model, precision, steps, warmup=3, device="cpu", max_s=0.0):
    """The timed steps' times in ms, the warm-up steps run, and whether the
    time box cut either short."""
    net, opt, x, y = make(model, device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = net(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        loss.item()

    start = time.perf_counter()
    times, done_warmup, boxed = [], 0, False
    for i in range(warmup):
        if i > 0 and max_s > 0 and time.perf_counter() - start > max_s / 3:
            boxed = True
            break
        step()
        done_warmup += 1
    for i in range(steps):
        if i > 0 and max_s > 0 and time.perf_counter() - start > max_s:
            boxed = True
            break
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, done_warmup, boxed


def allocator():
    """What LD_PRELOAD put in place of glibc's malloc, as the record names it."""
    pre = os.environ.get("LD_PRELOAD", "")
    name = "jemalloc" if "jemalloc" in pre else "tcmalloc" if "tcmalloc" in pre else "glibc"
    conf = os.environ.get("MALLOC_CONF", "")
    return f"{name} ({conf})" if name == "jemalloc" and conf else name


def time_gemm(n, dtype, tf32, device, reps=None):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.rand(n, n, device=device).to(dtype)
    b = torch.rand(n, n, device=device).to(dtype)
    reps = reps or (10 if n >= 8192 else 30)
    for _ in range(3):
        torch.matmul(a, b)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    if device == "cuda":
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / reps
    torch.backends.cuda.matmul.allow_tf32 = False
    return ms, 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=0.0)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--gemm", default="")
    ap.add_argument("--setting", default="default", choices=["default", "tuned"])
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.max_seconds < 0:
        ap.error("--steps must be >= 1, --warmup and --max-seconds >= 0")
    for opt, names, allowed in (("--models", a.models, ("mlp", "cnn", "gpt")),
                                ("--precisions", a.precisions, ("fp32", "bf16", "fp16"))):
        bad = [v for v in names.split(",") if v not in allowed]
        if bad:
            ap.error(f"{opt}: unknown {bad} (one of {', '.join(allowed)})")
    if a.threads:
        torch.set_num_threads(a.threads)
    for n in [int(v) for v in a.gemm.split(",") if v]:
        for name, dtype, tf32 in (("f16", torch.float16, False), ("bf16", torch.bfloat16, False),
                                  ("f32+tf32", torch.float32, True), ("f32", torch.float32, False)):
            ms, tflops = time_gemm(n, dtype, tf32, a.device)
            print(json.dumps({"impl": "torch", "kind": "gemm", "dtype": name, "n": n,
                              "ms": round(ms, 4), "tflops": round(tflops, 1)}), flush=True)
    for model in a.models.split(","):
        for precision in a.precisions.split(","):
            if a.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            times, warm, boxed = time_steps(model, precision, a.steps, a.warmup, a.device, a.max_seconds)
            rec = {"impl": "torch", "setting": a.setting, "allocator": allocator(),
                   "version": torch.__version__, "model": model,
                   "precision": precision, "threads": torch.get_num_threads(),
                   "step_ms": round(statistics.median(times), 3), "steps": len(times),
                   "warmup": warm, "timeboxed": boxed, "times_ms": [round(t, 3) for t in times]}
            if a.device == "cuda":
                rec["kind"] = "step"
                rec["device"] = "cuda"
                rec["peak_mb"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
