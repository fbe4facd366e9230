#!/usr/bin/env bash
# Installs the build in $1 into a temporary prefix, then builds and runs a
# user's program against it twice: with pkg-config and with find_package.
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

cmake -S "$src" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/consumer/consumer"
echo "1 passed, 0 failed"
