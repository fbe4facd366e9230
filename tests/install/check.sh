#!/usr/bin/env bash
# Installs the build in $1 into a temporary prefix, then builds and runs a
# user's program against it three ways: with pkg-config (shared library),
# statically with `pkg-config --static` (libampc.a plus the pc file's
# Libs.private, in a copy of the prefix without the shared library, so
# that -lampc can only mean the archive), and with find_package (the
# shared and the static target). The program reaches the CUDA backend and
# the communication layer, so a build with CUDA or MPI must list them.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib* | head -n 1)

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$src/consumer.c" -o "$tmp/by_pkgconfig" $(pkg-config --cflags --libs ampc) -Wl,-rpath,"$libdir"
"$tmp/by_pkgconfig"

# Static: the pc file is relocatable, so the copy finds itself.
cp -a "$tmp/prefix" "$tmp/static"
rm -f "$tmp"/static/lib*/libampc.so*
export PKG_CONFIG_PATH="$(ls -d "$tmp"/static/lib* | head -n 1)/pkgconfig"
libs=$(pkg-config --static --libs ampc)
echo "pkg-config --static --libs ampc: $libs"
cc "$src/consumer.c" -o "$tmp/by_pkgconfig_static" $(pkg-config --cflags ampc) $libs
if readelf -d "$tmp/by_pkgconfig_static" | grep -q 'NEEDED.*libampc'; then
  echo "check.sh: the static link still needs libampc.so" >&2
  exit 1
fi
"$tmp/by_pkgconfig_static"
export PKG_CONFIG_PATH="$libdir/pkgconfig"

cmake -S "$src" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/consumer/consumer"
"$tmp/consumer/consumer_static"
echo "1 passed, 0 failed"
