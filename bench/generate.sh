#!/bin/sh
# bench/generate.sh - `ampc generate`'s decode speed against the
# memory-bandwidth bound, then with and without its KV cache.
#
# Models: the default gpt (`ampc train --model gpt`: 2 layers, width 128,
# context 64: 63 tokens after a newline) and nanoGPT's shakespeare-char
# size (6 layers, 6 heads, width 384, context 256, a 65-character
# vocabulary: 255 tokens), trained for a step: the speed does not depend
# on the weights.
#
# 1. The bound: for each model, fp32 and bf16 (autocast, whose kept casts
#    are the bf16 weights the decode reads), 1 and 2 threads, ROUNDS
#    rounds of `ampc generate` alternating with bench_decode_bound
#    (bench/decode_bound.c): the bytes one token reads (every parameter in
#    the dtype it is read in, plus the KV cache at the run's mean length)
#    over the read bandwidth measured on the same threads for a buffer of
#    that size. Prints model, dtype, threads, MB per token, read GB/s,
#    tokens/s, the bound in tokens/s and the share of it reached (medians).
#    The memory's own bandwidth (a 1 GiB buffer) is printed beside it: the
#    weights sit in this Xeon's 480 MB L3, so they are read faster than that.
# 2. (not with --quick) the cache against a full forward per token
#    (--no-cache), 1 thread, decode tokens/s.
#
# Usage: bench/generate.sh [BUILD_DIR] [--quick]   (default build; ROUNDS=5,
# --quick: 1 round and table 1 only)
set -eu
B=build
quick=0
for a in "$@"; do
    case "$a" in
    --quick) quick=1 ;;
    -*) echo "bench/generate.sh: unknown option $a (usage: bench/generate.sh [BUILD_DIR] [--quick])" >&2; exit 2 ;;
    *) B=$a ;;
    esac
done
A="$B/ampc"
BOUND="$B/bench_decode_bound"
R=${ROUNDS:-5}
[ $quick = 1 ] && R=1
for f in "$A" "$BOUND"; do
    if [ ! -x "$f" ]; then
        echo "bench/generate.sh: $f is not built (cmake --build $B --target ampc bench_decode_bound)" >&2
        exit 2
    fi
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_WAIT_POLICY=PASSIVE
# 64 printable characters and a newline: shakespeare-char's 65.
awk 'BEGIN { srand(1); for (i = 0; i < 20000; i++) printf "%c", 32 + int(rand() * 64);
             for (c = 32; c < 96; c++) printf "%c", c; print "" }' >"$T/chars.txt"
"$A" train --model gpt --steps 1 --threads 2 --save "$T/default" >/dev/null
"$A" train --model gpt --data "$T/chars.txt" --layers 6 --width 384 --heads 6 --context 256 --batch 2 --steps 1 \
    --threads 2 --save "$T/shakespeare" >/dev/null
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
# The model's shape from generate's "checkpoint ...: step N, gpt L layers,
# H heads, width W, mlp M, context C, vocab V, ..." line.
shape() {
    sed -n 's/.*gpt \([0-9]*\) layers, [0-9]* heads, width \([0-9]*\), mlp \([0-9]*\), context \([0-9]*\), vocab \([0-9]*\).*/--layers \1 --width \2 --mlp \3 --context \4 --vocab \5/p' "$1"
}
decode_rate() { sed -n 's/^decode: .*(\([0-9.]*\) tokens\/s).*/\1/p' "$1"; }
field() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p"; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for th in 1 2; do
    "$BOUND" --layers 1 --width 1 --vocab 1 --context 2 --threads $th --dram-mb 1024 >"$T/dram"
    echo "memory read bandwidth (a 1 GiB buffer), $th thread(s): $(field "$T/dram" dram_gbs) GB/s"
done
echo
echo "| model | dtype | threads | MB / token | read GB/s | tokens/s | bound (tokens/s) | % of bound |"
echo "|---|---|---|---|---|---|---|---|"
for m in default:63 shakespeare:255; do
    name=${m%%:*} n=${m#*:}
    for p in fp32 bf16; do
        for th in 1 2; do
            : >"$T/rate" && : >"$T/gbs" && : >"$T/bound"
            i=0
            while [ $i -lt "$R" ]; do
                "$A" generate "$T/$name" --tokens "$n" --threads $th --precision $p 2>"$T/err" >/dev/null
                decode_rate "$T/err" >>"$T/rate"
                # shellcheck disable=SC2046 # the shape is several words
                "$BOUND" $(shape "$T/err") --tokens "$n" --dtype $p --threads $th >"$T/b"
                field "$T/b" read_gbs >>"$T/gbs"
                field "$T/b" bound_tokens_s >>"$T/bound"
                i=$((i + 1))
            done
            mb=$(field "$T/b" bytes_per_token | awk '{printf "%.2f", $1 / 1e6}')
            r=$(median <"$T/rate") g=$(median <"$T/gbs") b=$(median <"$T/bound")
            echo "| $name | $p | $th | $mb | $g | $r | $b | $(awk -v r="$r" -v b="$b" 'BEGIN {printf "%.0f%%", 100 * r / b}') |"
        done
    done
done
if [ $quick = 0 ]; then
    echo
    echo "| model | precision | tokens | with cache (tokens/s) | full forward per token (tokens/s) | ratio |"
    echo "|---|---|---|---|---|---|"
    for m in default:63 shakespeare:255; do
        name=${m%%:*} n=${m#*:}
        for p in fp32 bf16; do
            : >"$T/c" && : >"$T/f"
            i=0
            while [ $i -lt "$R" ]; do
                "$A" generate "$T/$name" --tokens "$n" --threads 1 --precision $p 2>"$T/err" >/dev/null
                decode_rate "$T/err" >>"$T/c"
                "$A" generate "$T/$name" --tokens "$n" --threads 1 --precision $p --no-cache 2>"$T/err" >/dev/null
                decode_rate "$T/err" >>"$T/f"
                i=$((i + 1))
            done
            c=$(median <"$T/c") f=$(median <"$T/f")
            echo "| $name | $p | $n | $c | $f | $(awk -v c="$c" -v f="$f" 'BEGIN {printf "%.1fx", c / f}') |"
        done
    done
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
