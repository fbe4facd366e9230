#!/usr/bin/env bash
# memory-table.sh - where each model's memory goes, per category: runs
# `ampc train --memory` for mlp, cnn and gpt in fp32, bf16 and fp16 (each
# model's defaults otherwise, the same seed, a short run) and prints two
# Markdown tables:
#
#   1. the makeup of the run's peak (host memory): the peak without the
#      data set ("model"), and what each category held at that moment
#      (they sum to the peak; data apart);
#   2. each category's own peak (they need not coincide in time).
#
# Every extra argument is one more option set, run with each model and
# precision ('--checkpoint-activations', '--param-dtype bf16 --optim-state
# bf16'). In an option set, PREC stands for the run's precision
# ('--param-dtype PREC': 16-bit parameters in bf16 and fp16 runs, f32 in
# fp32 ones). An option set this ampc does not take (or that does not
# apply to a model) gives a row that says so, and the script goes on.
#
# usage: scripts/memory-table.sh [--ampc PATH] [--steps N] [--threads N] [OPTIONS-SET ...]
#   --ampc      the program (default: build/ampc)
#   --steps     training steps per run (default 10)
#   --threads   kernel threads (default 2)
set -euo pipefail

cd "$(dirname "$0")/.."
ampc=build/ampc
steps=10
threads=2
sets=("")
while [ $# -gt 0 ]; do
  case "$1" in
    --ampc) ampc="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) sets+=("$1") ;;
  esac
  shift
done
[ -x "$ampc" ] || { echo "memory-table.sh: $ampc is not built (make build, or --ampc PATH)" >&2; exit 1; }

cats=("parameters" "gradients" "optimizer state" "activations" "cast cache" "temporaries" "workspace" "data")
models=(mlp cnn gpt)
precisions=(fp32 bf16 fp16)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
peak_rows=()
own_rows=()
for s in "${sets[@]}"; do
  for m in "${models[@]}"; do
    for p in "${precisions[@]}"; do
      extra=""
      [ "$m" = gpt ] && extra="--val-batches 2"
      # shellcheck disable=SC2086 # the option set is words
      opts=${s//PREC/$p}
      args="train --model $m --precision $p --seed 1 --steps $steps --threads $threads $extra $opts --memory"
      echo "== ampc $args" >&2
      log="$tmp/run.txt"
      label="$m | $p | ${opts:-(defaults)}"
      rc=0
      # shellcheck disable=SC2086
      "$ampc" $args > "$log" 2>&1 || rc=$?
      if [ "$rc" -ne 0 ]; then
        why=$(grep -m1 -i "unknown option\|error\|ampc:\|only" "$log" | cut -c1-100 || true)
        peak_rows+=("| $label | not run: ${why:-exit status $rc} |")
        own_rows+=("| $label | not run |")
        continue
      fi
      # "peak memory X MiB (model Y + data Z)" and the report's lines.
      model=$(sed -n 's/^peak memory [0-9.]* MiB (model \([0-9.]*\) + data.*/\1/p' "$log")
      at=$(grep -m1 "^  at the peak" "$log" | sed 's/^[^:]*: //')
      row="| $label | $model |"
      for c in "${cats[@]}"; do
        v=$(printf '%s\n' "$at" | tr ',' '\n' | sed -n "s/^ *$c \([0-9.]*\)$/\1/p")
        row+=" ${v:--} |"
      done
      peak_rows+=("$row")
      row="| $label |"
      for c in "${cats[@]}"; do
        v=$(sed -n "/^memory on cpu/,/^  total/s/^  $c  *[0-9.]*  *\([0-9.]*\)$/\1/p" "$log" | head -1)
        row+=" ${v:--} |"
      done
      own_rows+=("$row")
    done
  done
done

header="| model | precision | options |"
rule="|---|---|---|"
echo "Peak host memory and its makeup at that moment (MiB; \`ampc train --memory\`, $steps steps, seed 1,"
echo "$threads threads; the model's peak is the peak without the data set):"
echo
echo "$header model peak | $(printf '%s | ' "${cats[@]}")"
echo "$rule---|$(printf -- '---|%.0s' "${cats[@]}")"
printf '%s\n' "${peak_rows[@]}"
echo
echo "Each category's own peak (MiB; not all at the same moment):"
echo
echo "$header $(printf '%s | ' "${cats[@]}")"
echo "$rule$(printf -- '---|%.0s' "${cats[@]}")"
printf '%s\n' "${own_rows[@]}"
