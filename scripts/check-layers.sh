#!/usr/bin/env bash
# check-layers.sh - fails when a file under src/ includes a header of a
# layer above its own (docs/ARCHITECTURE.md, "Layers, bottom to top").
#
# A file's layer is the first folder of its path under src/ (src/backend/cuda/
# gemm.cu is in "backend"); so is a header's, from its #include "x/y.h". A
# file may include headers of its own layer and of the layers below; "ampc.h"
# (the public API, no folder) is open to every layer. Every #include "..."
# of every .c, .h, .cu and .cuh file is read, headers' included.
#
# Given the library's object files too (CMake's $<TARGET_OBJECTS:ampc_obj>,
# one ;-separated argument), it also fails when an object calls or reads a
# symbol that an object of a higher layer defines: the calls through
# ampc.h that no include shows (tensor calling amp_module_* of nn).
#
# Usage: scripts/check-layers.sh [source dir] [object files]
# scripts/layers-allow.txt names known violations, one "file include" or
# "file symbol" per line, # comments; they are reported but pass.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
objects=${2:-}
allow=$root/scripts/layers-allow.txt
nm=${NM:-nm}

# Bottom to top. Keep in step with docs/ARCHITECTURE.md's layer table.
layers=(base dtype backend comm tensor autograd ops optim dist amp nn io)

declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

declare -A allowed used
if [ -f "$allow" ]; then
  while read -r f h _; do
    case $f in ''|'#'*) continue ;; esac
    allowed["$f $h"]=1
  done < "$allow"
fi

cd "$root"
bad=0 known=0 files=0 unknown=0
while IFS= read -r file; do
  files=$((files + 1))
  from=${file#src/}; from=${from%%/*}
  if [ -z "${rank[$from]+x}" ]; then
    echo "check-layers: $file: folder src/$from is in no layer (add it to scripts/check-layers.sh)"
    unknown=$((unknown + 1))
    continue
  fi
  while IFS= read -r inc; do
    case $inc in */*) ;; *) continue ;; esac  # "ampc.h", system-like names
    to=${inc%%/*}
    if [ -z "${rank[$to]+x}" ]; then
      echo "check-layers: $file includes \"$inc\": src/$to is in no layer"
      unknown=$((unknown + 1))
      continue
    fi
    if [ "${rank[$to]}" -gt "${rank[$from]}" ]; then
      if [ -n "${allowed["$file $inc"]+x}" ]; then
        echo "check-layers: allowed for now: $file ($from) includes \"$inc\" ($to)"
        known=$((known + 1)); used["$file $inc"]=1
      else
        echo "check-layers: $file ($from) includes \"$inc\" ($to), a layer above its own"
        bad=$((bad + 1))
      fi
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort)

# Symbols: who defines what, then who uses what. An object's source is
# its path below CMake's <target>.dir/, less the .o.
nobj=0
if [ -n "$objects" ]; then
  IFS=';' read -ra objs <<< "$objects"
  declare -A def_in
  uses=()
  for o in "${objs[@]}"; do
    src=$(sed -E 's|.*/CMakeFiles/[^/]*\.dir/||; s|\.o(bj)?$||' <<< "$o")
    layer=${src#src/}; layer=${layer%%/*}
    [ -n "${rank[$layer]+x}" ] || continue   # not under src/ (generated)
    nobj=$((nobj + 1))
    while read -r kind sym; do
      if [ "$kind" = U ]; then
        uses+=("$src $sym")
      else
        def_in[$sym]=$src
      fi
    done < <("$nm" "$o" | awk '$1 == "U" { print "U", $2 } NF == 3 && $2 ~ /^[TDBRVWCG]$/ { print "D", $3 }')
  done
  for u in "${uses[@]}"; do
    src=${u% *}; sym=${u#* }
    [ -n "${def_in[$sym]+x}" ] || continue    # libc, oneDNN, ...
    from=${src#src/}; from=${from%%/*}
    to=${def_in[$sym]#src/}; to=${to%%/*}
    if [ "${rank[$to]}" -gt "${rank[$from]}" ]; then
      if [ -n "${allowed["$src $sym"]+x}" ]; then
        echo "check-layers: allowed for now: $src ($from) uses $sym of ${def_in[$sym]} ($to)"
        known=$((known + 1)); used["$src $sym"]=1
      else
        echo "check-layers: $src ($from) uses $sym of ${def_in[$sym]} ($to), a layer above its own"
        bad=$((bad + 1))
      fi
    fi
  done
fi

# Entries no longer needed (of the kinds checked in this run).
for e in "${!allowed[@]}"; do
  [ -z "${used[$e]+x}" ] || continue
  case ${e#* } in */*.h) ;; *) [ "$nobj" -gt 0 ] || continue ;; esac
  echo "check-layers: $(basename "$allow") lists \"$e\", which no longer occurs: remove it"
done

echo "check-layers: $files files, $nobj objects, layers ${layers[*]}: $bad violations, $known allowed, $unknown unplaced"
[ "$bad" -eq 0 ] && [ "$unknown" -eq 0 ]
