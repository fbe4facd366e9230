#!/bin/sh
# bench/generate.sh - `ampc generate` with and without its KV cache:
# decode tokens/s (the median of ROUNDS runs each, alternating) on the
# default gpt (2 layers, width 128, context 64: 63 tokens after a newline)
# and on nanoGPT's shakespeare-char size (6 layers, width 384, 6 heads,
# context 256: 255 tokens), 1 thread. The models are trained for a step
# or three only: the speed does not depend on the weights.
# Usage: bench/generate.sh [BUILD_DIR] (default build); ROUNDS=5.
set -eu
B=${1:-build}
A="$B/ampc"
R=${ROUNDS:-5}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_WAIT_POLICY=PASSIVE
"$A" train --model gpt --steps 3 --threads 1 --save "$T/default" >/dev/null
"$A" train --model gpt --layers 6 --width 384 --heads 6 --context 256 --batch 2 --steps 1 --threads 1 \
    --save "$T/baby" >/dev/null
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| model | precision | tokens | with cache (tokens/s) | full forward per token (tokens/s) | ratio |"
echo "|---|---|---|---|---|---|"
for m in default:63 baby:255; do
    name=${m%%:*} n=${m#*:}
    for p in fp32 bf16; do
        : >"$T/c" && : >"$T/f"
        i=0
        while [ $i -lt "$R" ]; do
            "$A" generate "$T/$name" --tokens "$n" --threads 1 --precision $p 2>&1 >/dev/null |
                sed -n 's/^decode: .*(\([0-9.]*\) tokens\/s).*/\1/p' >>"$T/c"
            "$A" generate "$T/$name" --tokens "$n" --threads 1 --precision $p --no-cache 2>&1 >/dev/null |
                sed -n 's/^decode: .*(\([0-9.]*\) tokens\/s).*/\1/p' >>"$T/f"
            i=$((i + 1))
        done
        c=$(median <"$T/c") f=$(median <"$T/f")
        echo "| $name | $p | $n | $c | $f | $(awk -v c="$c" -v f="$f" 'BEGIN {printf "%.1fx", c / f}') |"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
