#!/usr/bin/env bash
# Installs PyTorch for `make bench`'s PyTorch columns: a virtual environment
# .bench-venv in the repository root with torch from PyPI (the wheel the
# benchmarks in docs/benchmarks.md were taken against; with its CUDA
# libraries it is about 5 GB on disk; bench/run.sh uses only its CPU side).
# ampc itself needs none of this, and bench/run.sh finds a torch of its own
# first ($AMPC_TORCH_PYTHON, then python3) before looking in .bench-venv.
# It also installs safetensors, which python/ampc_torch.py and test_interop
# need (AMPC_TORCH_PYTHON=.bench-venv/bin/python ctest -R test_interop), and,
# as root with apt, libjemalloc2 for the PyTorch tuned columns of
# bench/run.sh's step table and bench/gpt2.sh.
#
#   scripts/bench-deps.sh
#
# AMPC_TORCH_SPEC: what to ask pip for (default "torch==2.15.*", the version
# of the recorded runs; "torch" for the newest). AMPC_TORCH_INDEX: another
# package index, e.g. https://download.pytorch.org/whl/cpu for the CPU-only
# wheel (about 1 GB; its CPU kernels are the same).
set -euo pipefail
cd "$(dirname "$0")/.."
# jemalloc, which bench/run.sh and bench/gpt2.sh preload for PyTorch's tuned
# column (Debian's libjemalloc2); without it run.sh leaves that column out
# and gpt2.sh runs it on glibc's malloc.
if ! ldconfig -p 2>/dev/null | grep -q 'libjemalloc\.so\.2'; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y libjemalloc2 || echo "bench-deps: apt-get install libjemalloc2 failed; no PyTorch tuned column in bench/run.sh's step table (bench/gpt2.sh's uses glibc's malloc)" >&2
  else
    echo "bench-deps: no libjemalloc.so.2 (Debian: sudo apt-get install libjemalloc2); no PyTorch tuned column in bench/run.sh's step table (bench/gpt2.sh's uses glibc's malloc)" >&2
  fi
fi
venv=.bench-venv
spec=${AMPC_TORCH_SPEC:-torch==2.15.*}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch, safetensors' 2>/dev/null; then
  echo "bench-deps: $venv already has torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  exit 0
fi
command -v python3 >/dev/null || { echo "bench-deps: needs python3 (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ] && ! python3 -m venv "$venv"; then
  echo "bench-deps: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
index=()
[ -n "${AMPC_TORCH_INDEX:-}" ] && index=(--index-url "$AMPC_TORCH_INDEX")
echo "bench-deps: installing $spec into $venv${AMPC_TORCH_INDEX:+ from $AMPC_TORCH_INDEX} (several GB from PyPI)"
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install "${index[@]}" "$spec" numpy safetensors
"$venv/bin/python" -c 'import torch; print("bench-deps: torch", torch.__version__, "in '"$venv"'; make bench will find it")'
