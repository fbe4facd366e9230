#!/usr/bin/env bash
# ampc's gpt in llama.cpp: trains a small character gpt with ampc, exports
# it as GGUF in f32, f16 and bf16, and for each prints llama.cpp's greedy
# tokens (llama-cpp-python's llama_cpp.Llama) next to `ampc generate
# --temperature 0`'s for the same prompt, and the largest difference of
# their logits (scripts/llama_cpp_check.py). Not part of CI: it needs
# llama-cpp-python (pip install llama-cpp-python, which compiles
# llama.cpp), torch and safetensors in PYTHON.
#
#   scripts/llama-cpp-check.sh [--bpe] [BUILD_DIR] [PYTHON]
#   (defaults: build, .bench-venv/bin/python)
#
# --bpe: a token-id gpt instead, without biases (--no-bias): a byte-level
# BPE of about 300 tokens trained on the corpus with `tokenizers` (also
# needed then), the model trained on its ids (--data-bin), exported with
# the tokenizer.json in its directory, and llama.cpp's greedy ids beside
# `ampc generate --prompt-ids ... --temperature 0 --ids`'s.
set -euo pipefail
cd "$(dirname "$0")/.."
bpe=0
if [ "${1:-}" = --bpe ]; then bpe=1; shift; fi
build=${1:-build}
py=${2:-.bench-venv/bin/python}
ampc=$build/ampc
[ -x "$ampc" ] || { echo "llama-cpp-check: no $ampc (build it first)" >&2; exit 1; }
"$py" -c 'import llama_cpp, torch, safetensors' 2>/dev/null ||
  { echo "llama-cpp-check: $py lacks llama_cpp, torch or safetensors (pip install llama-cpp-python torch safetensors)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The corpus: ampc's own documentation (ASCII text, a few hundred KB).
cat docs/*.md README.md > "$work/corpus.txt"
prompt="The checkpoint "
tokens=48
if [ "$bpe" = 1 ]; then
  prompt="The checkpoint" # a trailing space would be a token of its own
  mkdir "$work/bpe"
  "$py" tests/test_gguf.py bpe "$work/corpus.txt" "$work/bpe"
  "$ampc" train --model gpt --data-bin "$work/bpe/train.bin" --val-bin "$work/bpe/val.bin" --vocab 300 --no-bias \
    --layers 2 --heads 4 --width 64 --context 64 --batch 16 --steps 1000 --precision fp32 --val-batches 2 \
    --save "$work/run" | tail -n 2
  cp "$work/bpe/tokenizer.json" "$work/run/"
  ids=$("$py" -c 'import sys; from tokenizers import Tokenizer
print(",".join(map(str, Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2]).ids)))' "$work/run/tokenizer.json" "$prompt")
  "$ampc" generate "$work/run" --prompt-ids "$ids" --tokens "$tokens" --temperature 0 --precision fp32 --ids \
    --quiet > "$work/ampc-ids.txt"
  for dt in f32 f16; do
    "$ampc" export --format gguf --dtype "$dt" "$work/run" "$work/model-$dt.gguf"
    echo "== --bpe --dtype $dt: $(stat -c %s "$work/model-$dt.gguf") bytes"
    "$py" scripts/llama_cpp_check.py --ids "$work/model-$dt.gguf" "$work/run/checkpoint.safetensors" "$prompt" \
      "$work/ampc-ids.txt"
  done
  exit 0
fi
"$ampc" train --model gpt --data "$work/corpus.txt" --layers 2 --heads 4 --width 64 --context 64 \
  --batch 16 --steps 300 --precision fp32 --val-batches 2 --save "$work/run" | tail -n 2
"$ampc" generate "$work/run" --prompt "$prompt" --tokens "$tokens" --temperature 0 --precision fp32 --quiet \
  > "$work/ampc.txt"
# generate ends its output with a newline of its own
head -c -1 "$work/ampc.txt" > "$work/ampc-text.txt"
for dt in f32 f16 bf16; do
  "$ampc" export --format gguf --dtype "$dt" "$work/run" "$work/model-$dt.gguf"
  echo "== --dtype $dt: $(stat -c %s "$work/model-$dt.gguf") bytes"
  "$py" scripts/llama_cpp_check.py "$work/model-$dt.gguf" "$work/run/checkpoint.safetensors" "$prompt" \
    "$work/ampc-text.txt"
done
