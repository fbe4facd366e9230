#!/usr/bin/env bash
# The benchmark suite (`make bench`): GEMM against this CPU's measured peaks
# (ampc's kernels beside oneDNN's, on square sizes and on the models' own
# GEMM shapes), the grad scaler's overhead against memcpy, the training
# step of the three benchmark models in fp32 / bf16 / fp16+scaler, ampc
# beside PyTorch in the same run on the same threads, and the profiler's
# overhead on those steps (off and on). Prints tables; writes
# JSON lines to bench/results.jsonl and the tables to bench/results.md.
#
#   bench/run.sh [BUILD_DIR] [--threads N] [--steps N] [--quick]
#
# PyTorch is optional: without it the step table has ampc's column only.
# OPENBLAS_CORETYPE, if set in the environment, halves OpenBLAS's fp32
# speed (and so may slow PyTorch's fp32 path); it is reported, not changed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build
threads=$(nproc)
steps=10
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --quick) quick=1; steps=3; shift ;;
    -*) echo "bench/run.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
out=bench/results.jsonl
md=bench/results.md
: > "$out"
{
  echo "# ampc benchmarks"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "$(nproc) cores, $threads threads, ampc $(git rev-parse --short HEAD 2>/dev/null || echo '?'),"
  echo "gcc $(gcc -dumpfullversion), load average $(cut -d' ' -f1-3 /proc/loadavg)."
  [ -n "${OPENBLAS_CORETYPE:-}" ] && echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE was set (it halves OpenBLAS fp32 speed)."
  echo
} > "$md"

if [ -x "$build/bench_gemm" ]; then
  echo "== GEMM"
  gemm_args=()
  # --quick: one sample per figure, squares up to 512; the model-shapes
  # table stays (about 2 s at one sample; --no-shapes drops it)
  [ $quick = 1 ] && gemm_args+=(--reps 1 --max-n 512)
  "$build/bench_gemm" "${gemm_args[@]}" --json bench/gemm.json | tee -a "$md"
  python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' bench/gemm.json >> "$out" 2>/dev/null
  echo >> "$md"
fi

echo "== grad scaler"
"$build/bench_scaler" 64 --json bench/scaler.json | tee -a "$md"
cat bench/scaler.json >> "$out"
echo >> "$md"

echo "== training step"
ampc_lines=$("$build/bench_ampc_step" --threads "$threads" --steps "$steps")
echo "$ampc_lines" >> "$out"
torch_lines=""
if python3 -c "import torch" 2>/dev/null; then
  torch_lines=$(python3 bench/torch_step.py --threads "$threads" --steps "$steps" 2>/dev/null)
  echo "$torch_lines" >> "$out"
fi
python3 - "$out" <<'PY' | tee -a "$md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
steps = {(r["impl"], r["model"], r["precision"]): r for r in rows if "step_ms" in r}
torch_v = next((r.get("version") for r in rows if r.get("impl") == "torch"), None)
print("training step, median ms (lower is better)" + (f"; PyTorch {torch_v}" if torch_v else ""))
print()
print("| model | precision | ampc ms | PyTorch ms | PyTorch/ampc | ampc fp32/this | ampc peak MB |")
print("|---|---|---|---|---|---|---|")
for model in ("mlp", "cnn", "gpt"):
    base = steps.get(("ampc", model, "fp32"))
    for p in ("fp32", "bf16", "fp16"):
        a, t = steps.get(("ampc", model, p)), steps.get(("torch", model, p))
        if not a:
            continue
        ratio = f"{t['step_ms'] / a['step_ms']:.2f}x" if t else "-"
        speed = f"{base['step_ms'] / a['step_ms']:.2f}x" if base else "-"
        tms = f"{t['step_ms']:.1f}" if t else "-"
        print(f"| {model} | {p} | {a['step_ms']:.1f} | {tms} | {ratio} | {speed} | {a['peak_mb']:.0f} |")
PY

echo "== profiler overhead"
echo >> "$md"
prof_lines=$("$build/bench_ampc_step" --profile-overhead --threads "$threads" --steps "$steps")
echo "$prof_lines" >> "$out"
python3 - "$out" <<'PY' | tee -a "$md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
rows = [r for r in rows if r.get("bench") == "profiler"]
if rows:
    r0 = rows[0]
    print("profiler overhead (targets: off < 1%, on < 5% of a step): step time with the profiler off and on,")
    print(f"interleaved blocks of 2 steps, {r0['steps']} steps each: the median over blocks of an on block's wall time")
    print("against the off block before it, and medians of the wall time, the fastest steps and the process's CPU")
    print("time per step; off = hooks per")
    print(f"step x one hook while off ({r0['hook_off_ns']:.2f} ns; a phase begin + end {r0['phase_off_ns']:.2f} ns);")
    print(f"on, estimated = events per step x one recorded event ({r0['hook_on_ns']:.0f} ns), which a loaded")
    print("machine's noise does not swamp")
    print()
    print("| model | precision | off ms | on ms | on overhead: paired / median / fastest / CPU time | on, estimated "
          "| events / step | off overhead |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['precision']} | {r['off_ms']:.1f} | {r['on_ms']:.1f} | {r['paired_on_pct']:+.1f}% / "
              f"{r['on_pct']:+.1f}% / "
              f"{r['min_on_pct']:+.1f}% / {r['cpu_on_pct']:+.1f}% | {r['on_est_pct']:.2f}% | "
              f"{r['events_per_step']:.0f} | {r['off_pct']:.4f}% |")
PY
echo
echo "wrote $out and $md"
