"""The tables of bench/run.sh (`make bench`), from the JSON its programs
write; the standard library only, so any python3 runs it (PyTorch is not
needed to print ampc's side).

usage:
  python3 bench/report.py gemm AMPC_JSON TORCH_JSON
      bench_gemm's --json beside bench/torch_gemm.py's --json: square n and
      the models' GEMMs, 1 and 2 threads, bf16 and f32, ampc/PyTorch
  python3 bench/report.py progress ROUND < JSON lines
      one line per bench_ampc_step / torch_step.py record (progress)
  python3 bench/report.py steps STEPS_JSONL THREADS [PEAKS_JSON ...]
      the interleaved training-step table (bench/step_report.py): per model
      and precision the median of every timed step of all rounds
      ("times_ms"), the range of the rounds' medians, PyTorch default and
      tuned over ampc, the step's GFLOP and % of the peak measured by
      bench_gemm (PEAKS_JSON, its --json; of several, the highest), the
      targets met or not, and
      where ampc's step goes (--breakdown records)
  python3 bench/report.py remaining STEPS_JSONL SIDE MODEL PRECISIONS SECONDS
      the PRECISIONS (a comma list) whose cells of SIDE (ampc, torch,
      torch_tuned) and MODEL have so
      far cost less than SECONDS over all rounds (warm-up and timed steps,
      estimated as steps x their median): the rounds after a slow cell's
      budget is spent skip it
  python3 bench/report.py profile < JSON lines
      bench_ampc_step --profile-overhead's table
  python3 bench/report.py anomaly < JSON lines
      bench_ampc_step --anomaly-overhead's table
"""
import json
import statistics
import sys

import step_report


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(v):
    return "-" if not v else f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def shape_key(s):
    return (s["model"], s["gemm"], s["pass"], bool(s["trans_a"]), bool(s["trans_b"]), s["M"], s["N"], s["K"])


def gemm(ampc_path, torch_path):
    ampc, torch = load(ampc_path), load(torch_path)
    if not ampc:
        print("GEMM: bench_gemm wrote no JSON; no table")
        return
    rows = ampc.get("gemm_gflops", [])
    # ampc's figure on squares: the "auto" column when bench_gemm has one
    # (what gemm_lowp / gemm_f32 run by default), else its default kernel's
    kern = ampc.get("bf16_default", "")
    bf16_col = ("bf16 auto" if any("bf16 auto" in r for r in rows) else
                "bf16 amx" if "amx" in kern else "bf16 dot" if "avx512bf16" in kern else "bf16 widen")
    f32_col = "f32 auto" if any("f32 auto" in r for r in rows) else "f32"
    tsq = {(r["n"], r["threads"], r["dtype"]): r["gflops"] for r in (torch or {}).get("square", [])}
    print(f"### GEMM against PyTorch's matmul, GFLOP/s (best of {ampc.get('reps', '?')} samples of >= 2 ms, "
          "after a warm-up)")
    print()
    print(f"ampc: bench_gemm, bf16 column `{bf16_col}` (default kernel here: {kern}), f32 column `{f32_col}`; "
          f"oneDNN {ampc.get('onednn', '?')} beside it.")
    if torch:
        print(f"PyTorch {torch.get('torch', '?')}: bench/torch_gemm.py (matmul / addmm into a preallocated output, "
              f"the same sizes and timing). Load average at the start: ampc's part "
              f"{(ampc.get('load_average_before') or ['?'])[0]}, PyTorch's {(torch.get('load_average_before') or ['?'])[0]}.")
    else:
        print("PyTorch: not run.")
    print("ampc/PyTorch > 1: ampc faster.")
    print()
    print("| n | threads | bf16 ampc | bf16 oneDNN | bf16 PyTorch | bf16 ampc/PyTorch | f32 ampc | f32 oneDNN "
          "| f32 PyTorch | f32 ampc/PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        n, nt = r["n"], r["threads"]
        if n < 512 and torch:  # bench_gemm starts at 256; the comparison at 512 and up
            continue
        tb, tf = tsq.get((n, nt, "bf16")), tsq.get((n, nt, "f32"))
        print(f"| {n} | {nt} | {fmt(r.get(bf16_col))} | {fmt(r.get('bf16 onednn'))} | {fmt(tb)} | "
              f"{ratio(r.get(bf16_col), tb)} | {fmt(r.get(f32_col))} | {fmt(r.get('f32 onednn'))} | {fmt(tf)} | "
              f"{ratio(r.get(f32_col), tf)} |")
    shapes = ampc.get("model_shapes", [])
    if not shapes:
        return
    tsh = {shape_key(s) + (s["threads"], s["dtype"]): s["gflops"] for s in (torch or {}).get("model_shapes", [])}
    amp = {shape_key(s) + (s.get("threads", 2),): s for s in shapes}
    threads = sorted({k[-1] for k in amp} | {k[-2] for k in tsh})
    keys = []
    for s in shapes:
        if shape_key(s) not in keys:
            keys.append(shape_key(s))
    print()
    print("The models' GEMMs as a training step issues them (ta/tb: A / B transposed; ampc: the side its AUTO")
    print("policy picks, own kernel or oneDNN; '-': not measured on that side)")
    print()
    print("| GEMM | ta tb | M x N x K | threads | bf16 ampc | bf16 PyTorch | bf16 ampc/PyTorch | f32 ampc "
          "| f32 PyTorch | f32 ampc/PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    logs = {"bf16": [], "f32": []}
    for k in keys:
        for nt in threads:
            a = amp.get(k + (nt,), {})

            def pick(d):  # bench_gemm's "<d>_auto", or the AUTO side's column in older JSON
                if f"{d}_auto" in a:
                    return a[f"{d}_auto"]
                own, dn = a.get(f"{d}_own"), a.get(f"{d}_onednn")
                return dn if a.get(f"auto_{d}") == "onednn" and dn else own
            ab, af = pick("bf16"), pick("f32")
            tb, tf = tsh.get(k + (nt, "bf16")), tsh.get(k + (nt, "f32"))
            if not (ab or af or tb or tf):
                continue
            for d, x, y in (("bf16", ab, tb), ("f32", af, tf)):
                if x and y:
                    logs[d].append(x / y)
            tt = ("T" if k[3] else "N") + " " + ("T" if k[4] else "N")
            print(f"| {k[0]} {k[1]} {k[2]} | {tt} | {k[5]} x {k[6]} x {k[7]} | {nt} | {fmt(ab)} | {fmt(tb)} | "
                  f"{ratio(ab, tb)} | {fmt(af)} | {fmt(tf)} | {ratio(af, tf)} |")
    geo = "; ".join(f"{d} {statistics.geometric_mean(v):.2f}x over {len(v)}" for d, v in logs.items() if v)
    if geo:
        print()
        print(f"Geometric mean of ampc/PyTorch over the shapes measured on both sides: {geo}.")


def progress(rnd):
    for line in sys.stdin:
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        box = " (time-boxed)" if r.get("timeboxed") else ""
        print(f"  round {rnd}: {step_report.side_of(r):11} {r['model']} {r['precision']}: {r['step_ms']:.1f} ms, "
              f"{r['steps']} timed steps after {r.get('warmup', '?')} warm-up{box}", flush=True)


def steps(path, threads, *peaks_paths):
    for line in step_report.table(step_report.load_rows(path), int(threads), [load(p) for p in peaks_paths]):
        print(line)


def remaining(path, side, model, precisions, seconds):
    spent = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if step_report.side_of(r) == side and r["model"] == model:
                    n = r.get("steps", 1) + r.get("warmup", 0)
                    spent[r["precision"]] = spent.get(r["precision"], 0.0) + n * r["step_ms"] / 1e3
    except OSError:
        pass
    print(",".join(p for p in precisions.split(",") if p and spent.get(p, 0.0) < float(seconds)))


def profile():
    rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
    rows = [r for r in rows if r.get("bench") == "profiler"]
    if not rows:
        return
    r0 = rows[0]
    print("### Profiler overhead (targets: off < 1%, on < 5% of a step)")
    print()
    print(f"Interleaved blocks of 2 steps, {r0['steps']} steps each way; paired: the median over blocks of an on")
    print("block's time against the off block before it, beside the medians of the wall time, the fastest steps and")
    print(f"the CPU time per step; off = hooks per step x one hook while off ({r0['hook_off_ns']:.2f} ns; a phase")
    print(f"begin + end {r0['phase_off_ns']:.2f} ns); on, estimated = events per step x one recorded event "
          f"({r0['hook_on_ns']:.0f} ns)")
    print()
    print("| model | precision | off ms | on ms | on overhead: paired / median / fastest / CPU time | on, estimated "
          "| events / step | off overhead |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['precision']} | {r['off_ms']:.1f} | {r['on_ms']:.1f} | "
              f"{r['paired_on_pct']:+.1f}% / {r['on_pct']:+.1f}% / {r['min_on_pct']:+.1f}% / {r['cpu_on_pct']:+.1f}% "
              f"| {r['on_est_pct']:.2f}% | {r['events_per_step']:.0f} | {r['off_pct']:.4f}% |")


def anomaly():
    rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
    rows = [r for r in rows if r.get("bench") == "anomaly"]
    if not rows:
        return
    print("### Anomaly check overhead (--detect-anomaly; target: on <= 1.5x the plain step)")
    print()
    print(f"Interleaved blocks of 2 steps, {rows[0]['steps']} steps each way; off = the plain step (no node "
          "observer); paired: the median over blocks of an on block's time against the off block before it")
    print()
    print("| model | precision | off ms | on ms | on / off: median / paired |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['precision']} | {r['off_ms']:.1f} | {r['on_ms']:.1f} | "
              f"{r['ratio']:.2f}x / {r['paired_ratio']:.2f}x |")


def main(argv):
    cmds = {"gemm": (gemm, (2,)), "progress": (progress, (1,)), "steps": (steps, (2, 3, 4)), "profile": (profile, (0,)),
            "anomaly": (anomaly, (0,)),
            "remaining": (remaining, (5,))}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 not in cmds[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    cmds[argv[1]][0](*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
