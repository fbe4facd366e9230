#!/usr/bin/env bash
# Installs PyTorch for CPU use into .bench-venv (the virtual environment
# the interop tests and bench/run.sh look in), with the clients ampc's
# files are checked against (transformers, tokenizers, gguf, tensorboard),
# without the CUDA stack PyPI's
# torch wheel depends on: torch itself (--no-deps), its pure-Python
# dependencies, safetensors and numpy, and the few NVIDIA libraries the
# wheel's import loads that the CUDA toolkit on this kind of machine does
# not provide (cuFile, cuSPARSELt, NVSHMEM, and the NCCL it was built
# against). About 2 GB and 20-60 s from PyPI, instead of ~5 GB for the
# whole stack (scripts/bench-deps.sh). CI runs it so that the PyTorch
# interop tests run there; ampc itself needs none of this.
#
#   scripts/torch-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.bench-venv
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch, safetensors, transformers, tokenizers, gguf, tensorboard' 2>/dev/null; then
  echo "torch-deps: $venv already has torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  exit 0
fi
command -v python3 >/dev/null || { echo "torch-deps: needs python3 (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ] && ! python3 -m venv "$venv"; then
  echo "torch-deps: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
echo "torch-deps: installing torch 2.15 for CPU use into $venv"
"${pip[@]}" --no-deps "torch==2.15.*"
# (the versions torch 2.15's metadata pins)
"${pip[@]}" --no-deps nvidia-cufile "nvidia-cusparselt-cu13==0.8.1" "nvidia-nvshmem-cu13==3.7.2" \
  "nvidia-nccl-cu13==2.30.7"
"${pip[@]}" filelock typing-extensions sympy networkx jinja2 fsspec numpy safetensors
"${pip[@]}" transformers tokenizers gguf tensorboard
"$venv/bin/python" -c 'import torch, safetensors, transformers, tokenizers, gguf, tensorboard; torch.ones(2) @ torch.ones(2); print("torch-deps: torch", torch.__version__, "in '"$venv"'")'
