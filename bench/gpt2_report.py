"""bench/gpt2.sh's table, from the JSON lines it writes (bench/gpt2.jsonl);
the standard library only.

usage: python3 bench/gpt2_report.py GPT2_JSONL

Per cell (T, precision, checkpointing) and side (ampc, PyTorch tuned,
PyTorch default): the median of every timed step of all rounds, tokens/s,
the model FLOPs per step over that time as % of the precision's peak on
the run's threads (bf16: the faster of AMX and VDPBF16PS; fp32: f32 FMA),
the peak memory in MiB (ampc: its allocator's peak, then the process's
max RSS; PyTorch: max RSS), the dry run's estimate beside ampc's (and its
error against ampc's allocator peak), and each side's step over ampc's.
"""
import json
import statistics
import sys

# GPT-2 124M (bench/ampc_step.c's gpt2, bench/torch_gpt2.py's GPT2Config)
VOCAB, CONTEXT, WIDTH, LAYERS, MLP = 50257, 1024, 768, 12, 3072
PARAMS = VOCAB * WIDTH + CONTEXT * WIDTH + 2 * WIDTH + LAYERS * (4 * WIDTH ** 2 + 2 * WIDTH * MLP + 9 * WIDTH + MLP)
SIDES = (("ampc", "ampc"), ("tuned", "PyTorch tuned"), ("default", "PyTorch default"))


def model_flops(batch, seq):
    """Forward + backward FLOPs of one step: 6 per parameter and token, and
    the attention's scores and mix, 12 * layers * T^2 * width a sequence
    (PaLM's count; causal masking not discounted, recompute not counted)."""
    return 6.0 * PARAMS * batch * seq + 12.0 * LAYERS * seq * seq * WIDTH * batch


def main(path):
    recs = [json.loads(l) for l in open(path) if l.startswith("{")]
    machine = next((r for r in recs if r.get("bench") == "machine"), {})
    peaks = next((r for r in recs if r.get("bench") == "peaks"), {})
    end = next((r for r in recs if r.get("bench") == "end"), {})
    threads = machine.get("threads", 2)
    ti = peaks.get("threads", [1, 2]).index(threads) if threads in peaks.get("threads", []) else -1
    peak = {"fp32": peaks.get("fma_f32", [0, 0])[ti],
            "bf16": max(peaks.get("amx_bf16", [0, 0])[ti], peaks.get("vdpbf16ps", [0, 0])[ti])}
    print(f"GPT-2 124M ({PARAMS / 1e6:.1f}M parameters), batch 4; {machine.get('cpu', '?')}, "
          f"{machine.get('cores', '?')} cores, AMX-BF16 {machine.get('amx_bf16', '?')}; {threads} threads; "
          f"ampc {machine.get('commit', '?')}, PyTorch {machine.get('torch', '?') or 'none'} "
          f"(tuned: jemalloc {'yes' if machine.get('jemalloc', 'none') != 'none' else 'no'}).")
    print(f"Peaks measured in this run ({threads} threads): f32 FMA {peak['fp32']:.0f} GFLOP/s, "
          f"bf16 {peak['bf16']:.0f} GFLOP/s. Load average {machine.get('load_before', '?')} before, "
          f"{end.get('load_after', '?')} after.")
    print()
    print("| T | precision | checkpoint | side | step ms | tokens/s | % of peak | peak MiB | estimate MiB | step / ampc's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    steps = [r for r in recs if r.get("model") == "gpt2" and "step_ms" in r]
    ests = {(r["seq"], r["precision"], r["checkpoint"]): r for r in recs if r.get("impl") == "estimate"}
    cells = sorted({(r["seq"], r["precision"], r["checkpoint"]) for r in steps},
                   key=lambda c: (c[0], c[1] != "fp32", c[2]))
    for seq, prec, ck in cells:
        med = {}
        for side, _ in SIDES:
            times = [t for r in steps if (r["seq"], r["precision"], r["checkpoint"], r.get("side")) == (seq, prec, ck, side)
                     for t in r["times_ms"]]
            if times:
                med[side] = statistics.median(times)
        batch = next(r["batch"] for r in steps if r["seq"] == seq)
        flops = model_flops(batch, seq)
        for side, name in SIDES:
            if side not in med:
                continue
            ms = med[side]
            rs = [r for r in steps if (r["seq"], r["precision"], r["checkpoint"], r.get("side")) == (seq, prec, ck, side)]
            if side == "ampc":
                mem = f"{max(r['peak_mb'] for r in rs):.0f} (RSS {max(r['rss_mb'] for r in rs):.0f})"
                e = ests.get((seq, prec, ck))
                est = f"{e['estimate_mb']:.0f} ({(e['estimate_mb'] / max(r['peak_mb'] for r in rs) - 1) * 100:+.1f}%)" if e else "-"
            else:
                mem, est = f"{max(r['peak_mb'] for r in rs):.0f}", "-"
            pct = flops / (ms * 1e-3) / (peak[prec] * 1e9) * 100 if peak.get(prec) else 0
            rel = f"{ms / med['ampc']:.2f}x" if "ampc" in med else "-"
            print(f"| {seq} | {prec} | {'yes' if ck else 'no'} | {name} | {ms:.0f} | {batch * seq / (ms * 1e-3):.0f} | "
                  f"{pct:.1f}% | {mem} | {est} | {rel} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 bench/gpt2_report.py GPT2_JSONL")
    main(sys.argv[1])
