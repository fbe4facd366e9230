#!/usr/bin/env bash
# dist.sh - data parallelism on the CPU: for each
# model (mlp, cnn, gpt) at the same global batch, 1 rank x 2 threads (a
# plain step, no mpirun) against 2 ranks x 1 thread (mpirun -np 2,
# gradients averaged by amp_ddp in buckets during backward): the step
# time, the bytes each rank hands to MPI per step, the time amp_ddp_finish
# waited after backward ended, the same all-reduce alone, and the share of
# it that backward hid. bench_dist_step does the work (bench/dist_step.c);
# this runs it, alternating the two layouts for --rounds rounds, and
# prints a Markdown table (the median over the rounds of each run's median
# step) and the JSON lines.
#
#   bench/dist.sh [BUILD_DIR] [--models mlp,cnn,gpt] [--precision bf16]
#                 [--steps N] [--warmup N] [--rounds N] [--bucket-mb X]
#                 [--compress none|bf16|f16] [--json FILE]
#
# Needs MPI in the build (AMPC_MPI): when bench_dist_step cannot make its
# amp_ddp (exit 3) the script stops after the 1-rank rows and exits 3. bench/run.sh --only dist runs it
# (make bench).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build=build
models=mlp,cnn,gpt
precision=bf16
steps=10
warmup=3
rounds=2
bucket=25
compress=none
json=
usage() { sed -n '/^#   bench\/dist.sh/,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
need() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then
    echo "bench/dist.sh: $1 needs a value" >&2
    exit 2
  fi
}
while [ $# -gt 0 ]; do
  case "$1" in
    --models) need "$@"; models=$2; shift 2 ;;
    --precision) need "$@"; precision=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --warmup) need "$@"; warmup=$2; shift 2 ;;
    --rounds) need "$@"; rounds=$2; shift 2 ;;
    --bucket-mb) need "$@"; bucket=$2; shift 2 ;;
    --compress) need "$@"; compress=$2; shift 2 ;;
    --json) need "$@"; json=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "bench/dist.sh: unknown option $1" >&2; usage ;;
    *) build=$1; shift ;;
  esac
done
for v in "$steps" "$warmup" "$rounds"; do
  case "$v" in ''|*[!0-9]*|0) echo "bench/dist.sh: --steps, --warmup and --rounds take a positive integer (got '$v')" >&2; exit 2 ;; esac
done
for m in ${models//,/ }; do
  case "$m" in mlp|cnn|gpt) ;; *) echo "bench/dist.sh: unknown model '$m' (mlp, cnn, gpt)" >&2; exit 2 ;; esac
done

bin=$build/bench_dist_step
if [ ! -x "$bin" ]; then
  echo "bench/dist.sh: $bin not found: build first (cmake --build $build --target bench_dist_step)" >&2
  exit 1
fi
if ! command -v mpirun >/dev/null; then
  echo "bench/dist.sh: no mpirun: install Open MPI (apt-get install libopenmpi-dev openmpi-bin) and rebuild" >&2
  exit 1
fi

export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
common=(--precision "$precision" --steps "$steps" --warmup "$warmup" --bucket-mb "$bucket" --compress "$compress")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= rounds; round++)); do
  for m in ${models//,/ }; do
    if ! "$bin" --model "$m" --threads 2 "${common[@]}" >> "$out"; then
      echo "bench/dist.sh: $m on 1 rank x 2 threads failed" >&2; rc=1
    fi
    mpirun --oversubscribe --allow-run-as-root -np 2 -x OMP_WAIT_POLICY "$bin" --model "$m" --threads 1 \
      "${common[@]}" >> "$out"
    r=$?
    if [ $r -eq 3 ]; then
      echo "bench/dist.sh: 2 ranks: bench_dist_step could not make its amp_ddp (its message above)" >&2
      rc=3; break 2
    elif [ $r -ne 0 ]; then
      echo "bench/dist.sh: $m on 2 ranks x 1 thread failed (mpirun exit $r)" >&2; rc=1
    fi
  done
done
[ -n "$json" ] && cat "$out" >> "$json"
python3 - "$out" "$precision" "$compress" "$rounds" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
print(f"\n| model | layout | global batch | step (ms) | bytes / step | wait after backward (ms) | "
      f"all-reduce alone (ms) | hidden | 2x1 vs 1x2 |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for m in ("mlp", "cnn", "gpt"):
    one = [r for r in rows if r["model"] == m and r["ranks"] == 1]
    two = [r for r in rows if r["model"] == m and r["ranks"] == 2]
    base = statistics.median(r["step_ms"] for r in one) if one else None
    for name, rs in (("1 rank x 2 threads", one), ("2 ranks x 1 thread", two)):
        if not rs:
            continue
        med = lambda k: statistics.median(r[k] for r in rs)
        step = med("step_ms")
        ratio = f"{step / base:.2f}x" if base and rs is two else ""
        if rs is one:
            print(f"| {m} | {name} | {rs[0]['global_batch']} | {step:.1f} | - | - | - | - | |")
        else:
            print(f"| {m} | {name} | {rs[0]['global_batch']} | {step:.1f} | {med('bytes_per_step') / 2**20:.2f} MiB | "
                  f"{med('wait_ms'):.2f} | {med('comm_alone_ms'):.2f} | {med('hidden_pct'):.0f}% | {ratio} |")
print(f"\n{sys.argv[2]}, compression {sys.argv[3]}; each cell the median over {sys.argv[4]} round(s) of a run's "
      "median (2x1 vs 1x2: the 2-rank step over the 1-rank one, below 1 is faster; the wait after backward "
      "includes waiting for the slower rank, so it can exceed the all-reduce alone).")
for r in rows:
    print(json.dumps(r))
EOF
exit $rc
