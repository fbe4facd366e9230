#!/usr/bin/env bash
# Installs the Debian packages ampc needs, if any are missing, and says which.
#   build: gcc, make, cmake, zlib, pkg-config (for the install test),
#          g++ and sed (cudaemu: the CUDA backend's tests without a GPU),
#          oneDNN (libdnnl-dev: the CPU GEMMs and convolutions; ampc builds
#          without it too, on its own kernels only), Open MPI
#          (libopenmpi-dev, openmpi-bin: data-parallel training over
#          processes, mpirun; ampc builds without it, one process only)
#   fuzz:  clang and libclang-rt-14-dev (libFuzzer and the sanitizer
#          runtimes for clang 14, Debian 12; make fuzz)
#   data:  dataset-fashion-mnist (images), fortunes (the default text corpus)
set -euo pipefail

need=(gcc g++ sed make cmake zlib1g-dev pkg-config libdnnl-dev libopenmpi-dev openmpi-bin clang libclang-rt-14-dev dataset-fashion-mnist fortunes)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all present (${need[*]})"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
