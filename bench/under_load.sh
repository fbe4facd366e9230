#!/usr/bin/env bash
# The training step under load: with a busy loop pinned to one
# core (another process wanting that core all the time), ampc's step on 1
# and on 2 threads, and PyTorch's the same way; 2t/1t near 1 means the
# second thread costs nothing when its core is taken (target: ampc <= 1.1).
# Runs alternate 1t / 2t (ampc, then PyTorch), --rounds times; the table
# has the medians over rounds of each run's median step.
#
#   bench/under_load.sh [BUILD_DIR] [--steps N] [--rounds N] [--models mlp,cnn,gpt]
#                       [--precision bf16] [--baseline BIN] [--no-load] [--json FILE]
#
# --baseline BIN: also, with no load, the 2-thread step of this build
#   against BIN (another build's bench_ampc_step), alternating
#   A B A B.
# --no-load: no busy loop (the same table on an idle machine, for contrast).
# PyTorch: $AMPC_TORCH_PYTHON, else python3 if it has torch, else skipped.
# Needs 2 cores or more (the loop takes core 1); with fewer it says so.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build
steps=5
rounds=3
models=mlp,cnn,gpt
prec=bf16
baseline=""
load=1
json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --precision) prec=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --no-load) load=0; shift ;;
    --json) json=$2; shift 2 ;;
    -*) echo "bench/under_load.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
bin=$build/bench_ampc_step
[ -x "$bin" ] || { echo "bench/under_load.sh: $bin not built" >&2; exit 2; }
if [ -n "$baseline" ] && [ ! -x "$baseline" ]; then
  echo "bench/under_load.sh: --baseline $baseline is not an executable" >&2; exit 2
fi
if [ "$(nproc)" -lt 2 ]; then
  echo "bench/under_load.sh: needs 2 cores (has $(nproc)); skipped"; exit 0
fi
py=""
if [ -n "${AMPC_TORCH_PYTHON:-}" ]; then
  py=$AMPC_TORCH_PYTHON
elif python3 -c "import torch" 2>/dev/null; then
  py=python3
fi

tmp=$(mktemp -d)
busy=""
cleanup() {
  [ -n "$busy" ] && kill "$busy" 2>/dev/null && wait "$busy" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Each line of $tmp/lines: {"tag": ..., "round": r, <the bench's JSON>}.
run() { # tag round command...
  local tag=$1 r=$2
  shift 2
  "$@" 2>/dev/null | while read -r l; do
    case "$l" in "{"*) echo "{\"tag\": \"$tag\", \"round\": $r, ${l#\{}" ;; esac
  done >> "$tmp/lines"
}

# The unloaded comparison against the baseline first, before the loop runs.
if [ -n "$baseline" ]; then
  for r in $(seq "$rounds"); do
    run this2 "$r" "$bin" --threads 2 --steps "$steps" --models "$models" --precisions "$prec"
    run base2 "$r" "$baseline" --threads 2 --steps "$steps" --models "$models" --precisions "$prec"
  done
fi

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$load" = 1 ]; then
  taskset -c 1 sh -c 'while :; do :; done' &
  busy=$!
  sleep 0.5
fi
for r in $(seq "$rounds"); do
  for t in 1 2; do
    run "ampc$t" "$r" "$bin" --threads "$t" --steps "$steps" --models "$models" --precisions "$prec"
  done
  if [ -n "$py" ]; then
    for t in 1 2; do
      run "torch$t" "$r" "$py" bench/torch_step.py --threads "$t" --steps "$steps" --models "$models" \
        --precisions "$prec"
    done
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -n "$busy" ]; then
  kill "$busy" 2>/dev/null
  wait "$busy" 2>/dev/null
  busy=""
fi
[ -n "$json" ] && cp "$tmp/lines" "$json"

python3 - "$tmp/lines" "$models" "$prec" "$load" "$load_before" "$load_after" "${py:+torch}" "$baseline" <<'PY'
import json, statistics, sys
path, models, prec, load, lb, la, torch, baseline = sys.argv[1:9]
rows = [json.loads(l) for l in open(path) if l.strip()]
def med(tag, model):
    v = [r["step_ms"] for r in rows if r["tag"] == tag and r.get("model") == model and "step_ms" in r]
    return statistics.median(v) if v else None
def f(x): return f"{x:.1f}" if x is not None else "-"
def ratio(a, b): return f"{a / b:.2f}" if a is not None and b else "-"
what = "with a busy loop pinned to core 1" if load == "1" else "with no added load"
n = max([r["round"] for r in rows] or [0])
print(f"training step under load ({prec}, median ms over {n} rounds, 1t/2t alternating), {what};")
print(f"load average before {lb}, after {la}")
print()
print("| model | ampc 1t | ampc 2t | ampc 2t/1t | torch 1t | torch 2t | torch 2t/1t |")
print("|---|---|---|---|---|---|---|")
for m in models.split(","):
    a1, a2, t1, t2 = med("ampc1", m), med("ampc2", m), med("torch1", m), med("torch2", m)
    print(f"| {m} | {f(a1)} | {f(a2)} | {ratio(a2, a1)} | {f(t1)} | {f(t2)} | {ratio(t2, t1)} |")
if baseline:
    print()
    print(f"unloaded 2-thread step, this build against {baseline} (alternating, median ms)")
    print()
    print("| model | this | baseline | this/baseline |")
    print("|---|---|---|---|")
    for m in models.split(","):
        a, b = med("this2", m), med("base2", m)
        print(f"| {m} | {f(a)} | {f(b)} | {ratio(a, b)} |")
PY
