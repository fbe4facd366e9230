"""PyTorch's training step of GPT-2 124M (transformers' GPT2LMHeadModel),
the counterpart of `bench_ampc_step --models gpt2` (bench/gpt2.sh runs
both, alternating, in one run).

The model: GPT2LMHeadModel(GPT2Config(vocab 50257, 1024 positions, width
768, 12 layers, 12 heads)), dropout 0 (ampc's gpt has none), its head tied
to the token embedding; random token ids [B, T] and targets [B, T], the
cross-entropy over all B * T positions, AdamW lr 3e-4 weight decay 0.1.
Precisions: fp32, bf16 (torch.autocast on the CPU). --checkpoint-activations:
transformers' gradient checkpointing (each block recomputed in backward).

--setting tuned: torch.set_num_threads(--threads), zero_grad(set_to_none=True),
AdamW(fused=True); bench/gpt2.sh also preloads jemalloc for it (LD_PRELOAD:
it must be there before the process starts). --setting default: what a user
gets without any of that (PyTorch's own thread count, zero_grad(), AdamW()).

Prints one JSON object per line, one per precision: {"impl": "torch",
"setting", "version", "model": "gpt2", "precision", "batch", "seq",
"checkpoint", "threads", "step_ms" (the median timed step), "cpu_ms" (the median
step's process CPU time), "steps",
"warmup", "times_ms", "peak_mb" (the process's max RSS so far, MiB: run one
precision per process for a per-cell figure), "allocator" (LD_PRELOAD's
allocator, or "glibc")}.

usage: python3 bench/torch_gpt2.py [--threads N] [--steps N] [--warmup N]
                                   [--batch B] [--seq T] [--precisions fp32,bf16]
                                   [--checkpoint-activations] [--setting tuned|default]
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB, CONTEXT, WIDTH, LAYERS, HEADS = 50257, 1024, 768, 12, 12


def make(batch, seq, ckpt, tuned):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    net = GPT2LMHeadModel(cfg)
    net.train()
    if ckpt:
        net.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4, weight_decay=0.1, **({"fused": True} if tuned else {}))
    x = torch.randint(0, VOCAB, (batch, seq))
    y = torch.randint(0, VOCAB, (batch, seq))
    return net, opt, x, y


def time_steps(precision, a):
    tuned = a.setting == "tuned"
    net, opt, x, y = make(a.batch, a.seq, a.checkpoint_activations, tuned)
    bf16 = precision == "bf16"

    def step():
        if tuned:
            opt.zero_grad(set_to_none=True)
        else:
            opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = net(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    times, cpu = [], []
    for _ in range(a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        cpu.append((time.process_time() - c0) * 1e3)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, statistics.median(cpu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--checkpoint-activations", action="store_true")
    ap.add_argument("--setting", default="tuned", choices=["tuned", "default"])
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or not 1 <= a.seq <= CONTEXT:
        ap.error(f"--steps and --batch must be >= 1, --warmup >= 0, --seq 1 to {CONTEXT}")
    bad = [p for p in a.precisions.split(",") if p not in ("fp32", "bf16")]
    if bad:
        ap.error(f"--precisions: unknown {bad} (fp32, bf16)")
    if a.setting == "tuned" and a.threads:
        torch.set_num_threads(a.threads)
    pre = os.environ.get("LD_PRELOAD", "")
    allocator = "jemalloc" if "jemalloc" in pre else "tcmalloc" if "tcmalloc" in pre else "glibc"
    for precision in a.precisions.split(","):
        times, cpu_ms = time_steps(precision, a)
        print(json.dumps({"impl": "torch", "setting": a.setting, "version": torch.__version__, "model": "gpt2",
                          "precision": precision, "batch": a.batch, "seq": a.seq,
                          "checkpoint": a.checkpoint_activations, "threads": torch.get_num_threads(),
                          "step_ms": round(statistics.median(times), 3), "cpu_ms": round(cpu_ms, 3), "steps": len(times),
                          "warmup": a.warmup, "times_ms": [round(t, 3) for t in times],
                          "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                          "allocator": allocator}), flush=True)


if __name__ == "__main__":
    main()
