#!/usr/bin/env bash
# Prepares .gpu-deps/ (ignored by git): what scripts/gpu-check.sh needs on
# the GPU machine that its image may lack and cannot fetch (nothing can be
# fetched there): zlib's headers, unpacked from Debian's zlib1g-dev (the
# library itself, libz.so.1, is on every such machine; Debian's libz.a is
# not position-independent, so it could not go into libampc.so). Run it
# where packages can be fetched, then take .gpu-deps along with the tree to
# the GPU machine (docs/cuda.md, "The GPU check").
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-deps
mkdir -p .gpu-deps/tmp .gpu-deps/zlib/include
(cd .gpu-deps/tmp && apt-get download zlib1g-dev >/dev/null 2>&1)
dpkg -x .gpu-deps/tmp/zlib1g-dev_*.deb .gpu-deps/tmp/root
cp .gpu-deps/tmp/root/usr/include/zlib.h .gpu-deps/tmp/root/usr/include/zconf.h .gpu-deps/zlib/include/
rm -rf .gpu-deps/tmp
echo "gpu-deps: $(du -sh .gpu-deps | cut -f1) in .gpu-deps (zlib $(grep -m1 'define ZLIB_VERSION' .gpu-deps/zlib/include/zlib.h | cut -d'"' -f2))"
