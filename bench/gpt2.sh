#!/usr/bin/env bash
# GPT-2 124M's training step on this machine: ampc (bench_ampc_step
# --models gpt2) beside PyTorch's transformers GPT2LMHeadModel
# (bench/torch_gpt2.py), tuned and default, in one run; batch 4 at T = 64
# and 1024 tokens, fp32 and bf16 autocast, with and without activation
# checkpointing. Each cell runs in a process of its own (so that its max
# RSS is its own), the three sides alternating cell by cell: ampc, PyTorch
# tuned, PyTorch default, next cell ... for --rounds rounds.
#
#   bench/gpt2.sh [BUILD_DIR] [--threads N] [--steps N] [--warmup N]
#                 [--rounds N] [--seqs 64,1024] [--precisions fp32,bf16]
#                 [--checkpoint no,yes] [--sides ampc,tuned,default]
#
# Defaults: 2 threads, 1 warm-up and 2 timed steps per cell (a bf16 step at
# T = 1024 takes about 10 s on 2 cores, fp32 several times that), 1 round.
# First it measures this CPU's peaks (bench_gemm: the f32 FMA and the bf16
# AMX / VDPBF16PS register loops, on --threads threads) and the dry run's
# memory estimate of each cell (bench_gpt2_estimate); the table gives each
# cell's median step, tokens/s, the model FLOPs per step over the step time
# as % of the precision's peak (bf16: the faster of AMX and VDPBF16PS; FLOPs
# 6 * params * tokens + 12 * layers * T^2 * width per sequence, recompute
# not counted), the peak memory (ampc: its allocator's peak and the
# process's max RSS; PyTorch: max RSS) and each side's step time over
# ampc's.
#
# PyTorch tuned: torch.set_num_threads(--threads), zero_grad(set_to_none=True),
# fused AdamW, jemalloc preloaded (libjemalloc2; scripts/bench-deps.sh
# installs it on Debian); PyTorch default: none of that.
#
# Writes JSON lines to bench/gpt2.jsonl and the table to bench/gpt2.md.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build=build
threads=2
steps=2
warmup=1
rounds=1
seqs=64,1024
precs=fp32,bf16
ckpts=no,yes
sides=ampc,tuned,default
usage() { sed -n '/^#   bench\/gpt2.sh/,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --threads|--steps|--warmup|--rounds|--seqs|--precisions|--checkpoint|--sides)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "bench/gpt2.sh: $1 needs a value" >&2; exit 2; fi
      case "$1" in
        --threads) threads=$2 ;; --steps) steps=$2 ;; --warmup) warmup=$2 ;; --rounds) rounds=$2 ;;
        --seqs) seqs=$2 ;; --precisions) precs=$2 ;; --checkpoint) ckpts=$2 ;; --sides) sides=$2 ;;
      esac
      shift 2 ;;
    -h|--help) usage ;;
    -*) echo "bench/gpt2.sh: unknown option $1" >&2; usage ;;
    *) build=$1; shift ;;
  esac
done
for v in "$threads" "$steps" "$rounds"; do
  case "$v" in ''|*[!0-9]*|0) echo "bench/gpt2.sh: --threads, --steps and --rounds take a positive integer (got '$v')" >&2; exit 2 ;; esac
done
case "$warmup" in ''|*[!0-9]*) echo "bench/gpt2.sh: --warmup takes an integer >= 0 (got '$warmup')" >&2; exit 2 ;; esac
for b in bench_ampc_step bench_gemm bench_gpt2_estimate; do
  if [ ! -x "$build/$b" ]; then
    echo "bench/gpt2.sh: $build/$b is missing: build it first (cmake --build $build --target $b)" >&2
    exit 1
  fi
done
torch_py=""
for cand in "${AMPC_TORCH_PYTHON:-}" python3 .bench-venv/bin/python; do
  [ -n "$cand" ] || continue
  if "$cand" -c 'import torch, transformers' >/dev/null 2>&1; then torch_py=$cand; break; fi
done
[ -z "$torch_py" ] && echo "bench/gpt2.sh: no python with torch and transformers (scripts/torch-deps.sh): ampc's side only" >&2
jemalloc=""
for f in $(ldconfig -p 2>/dev/null | awk '/libjemalloc\.so\.2/ {print $NF}') /usr/lib/x86_64-linux-gnu/libjemalloc.so.2; do
  [ -f "$f" ] && { jemalloc=$f; break; }
done
[ -z "$jemalloc" ] && echo "bench/gpt2.sh: libjemalloc.so.2 not found (apt-get install libjemalloc2): PyTorch tuned runs on glibc's malloc" >&2

out=bench/gpt2.jsonl
: > "$out"
flag() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1" && echo yes || echo no; }
printf '{"bench": "machine", "cpu": "%s", "cores": %d, "amx_bf16": "%s", "avx512_bf16": "%s", "threads": %d, "commit": "%s", "load_before": "%s", "torch": "%s", "jemalloc": "%s"}\n' \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" "$(nproc)" "$(flag amx_bf16)" "$(flag avx512_bf16)" \
  "$threads" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$([ -n "$torch_py" ] && "$torch_py" -c 'import torch; print(torch.__version__)')" "${jemalloc:-none}" >> "$out"

echo "== peaks (bench_gemm)"
"$build/bench_gemm" --reps 1 --max-n 256 --no-shapes --json bench/gpt2_gemm.json > /dev/null || echo "bench/gpt2.sh: bench_gemm failed" >&2
python3 -c 'import json, sys; print(json.dumps({"bench": "peaks", **json.load(open(sys.argv[1]))["peak_gflops"]}))' bench/gpt2_gemm.json >> "$out"

echo "== estimates (bench_gpt2_estimate)"
for s in ${seqs//,/ }; do
  for c in ${ckpts//,/ }; do
    "$build/bench_gpt2_estimate" --threads "$threads" --seq "$s" --precisions "$precs" \
      $([ "$c" = yes ] && echo --checkpoint-activations) >> "$out"
  done
done

echo "== steps: $rounds round(s), $steps timed step(s) after $warmup warm-up per cell"
for r in $(seq 1 "$rounds"); do
  for s in ${seqs//,/ }; do
    for c in ${ckpts//,/ }; do
      ck=()
      [ "$c" = yes ] && ck=(--checkpoint-activations)
      for p in ${precs//,/ }; do
        for side in ${sides//,/ }; do
          t0=$(date +%s)
          case "$side" in
            ampc) line=$("$build/bench_ampc_step" --models gpt2 --threads "$threads" --steps "$steps" --warmup "$warmup" \
                           --seq "$s" --precisions "$p" "${ck[@]}") ;;
            tuned|default)
              [ -n "$torch_py" ] || continue
              pre=()
              [ "$side" = tuned ] && [ -n "$jemalloc" ] && pre=(env "LD_PRELOAD=$jemalloc")
              line=$("${pre[@]}" "$torch_py" bench/torch_gpt2.py --setting "$side" --threads "$threads" --steps "$steps" \
                       --warmup "$warmup" --seq "$s" --precisions "$p" "${ck[@]}" 2>/dev/null) ;;
            *) echo "bench/gpt2.sh: unknown side '$side' (ampc, tuned, default)" >&2; exit 2 ;;
          esac
          [ $? = 0 ] || echo "bench/gpt2.sh: $side T=$s $p checkpoint=$c failed" >&2
          printf '%s\n' "$line" | grep '^{' | sed "s/^{/{\"round\": $r, \"side\": \"$side\", /" >> "$out"
          echo "  round $r: T=$s $p checkpoint=$c $side: $(printf '%s' "$line" | grep -o '"step_ms": [0-9.]*') ($(($(date +%s) - t0)) s)"
        done
      done
    done
  done
done
printf '{"bench": "end", "load_after": "%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out"
python3 bench/gpt2_report.py "$out" | tee bench/gpt2.md
