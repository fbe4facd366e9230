#!/usr/bin/env bash
# check-layers.sh - fails when a file under src/ includes a header of a
# layer above its own (docs/ARCHITECTURE.md, "Layers, bottom to top"), or
# when modules include each other, directly or around a circle.
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
# Modules: each layer's folder is a module, except that every folder under
# a folder named in `split` is a module of its own (src/backend/cpu/gemm,
# the CPU GEMM; src/backend/cpu/onednn, oneDNN's primitives), beside the
# rest of its layer. An include (and, with the objects, a symbol used)
# from one module's file of another module's is an edge; the check fails
# on every circle of edges (a -> b -> a, or longer), within a layer as
# much as across layers, naming a file behind each edge. Files within one
# module may include each other freely.
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
layers=(record base dtype backend prof comm tensor autograd ops optim dist amp nn io)
# Folders whose sub-folders are modules of their own (see above).
split=(backend/cpu)

declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

# The module of a path below src/ ("backend/cpu/gemm/gemm.h" ->
# "backend/cpu/gemm", "ops/api.c" -> "ops"), in $mod.
module_of() {
  local s rest
  for s in "${split[@]}"; do
    case $1 in
      "$s"/*/*) rest=${1#"$s"/}; mod=$s/${rest%%/*}; return ;;
    esac
  done
  mod=${1%%/*}
}

# Module edges: "from to" -> the first file (and header or symbol) seen
# making it.
declare -A edge_why succ
add_edge() {
  [ "$1" != "$2" ] || return 0
  if [ -z "${edge_why["$1 $2"]+x}" ]; then
    edge_why["$1 $2"]=$3
    succ[$1]+=" $2"
  fi
}

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
  module_of "${file#src/}"; from_mod=$mod
  while IFS= read -r inc; do
    case $inc in */*) ;; *) continue ;; esac  # "ampc.h", system-like names
    to=${inc%%/*}
    if [ -z "${rank[$to]+x}" ]; then
      echo "check-layers: $file includes \"$inc\": src/$to is in no layer"
      unknown=$((unknown + 1))
      continue
    fi
    module_of "$inc"
    add_edge "$from_mod" "$mod" "$file includes \"$inc\""
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
    module_of "${src#src/}"; from_mod=$mod
    module_of "${def_in[$sym]#src/}"
    add_edge "$from_mod" "$mod" "$src uses $sym of ${def_in[$sym]}"
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

# Circles of modules. reach["a b"]: b can be reached from a. Each circle
# is reported once, as a path through its strongly connected modules.
declare -A reach
modules=$(printf '%s\n' ${succ[@]+"${!succ[@]}"} | LC_ALL=C sort)
for m in $modules; do
  stack=($m)
  while [ ${#stack[@]} -gt 0 ]; do
    n=${stack[-1]}; unset 'stack[-1]'
    for t in ${succ[$n]:-}; do
      [ -z "${reach["$m $t"]+x}" ] || continue
      reach["$m $t"]=1; stack+=("$t")
    done
  done
done
declare -A in_circle
cycles=0
for m in $modules; do
  [ -n "${reach["$m $m"]+x}" ] && [ -z "${in_circle[$m]+x}" ] || continue
  # m's strongly connected modules, then a shortest way from m back to m
  # through them (breadth first).
  declare -A member=() parent=()
  for n in $modules; do
    if [ -n "${reach["$m $n"]+x}" ] && [ -n "${reach["$n $m"]+x}" ]; then member[$n]=1; in_circle[$n]=1; fi
  done
  queue=($m); parent[$m]=; last=
  while [ ${#queue[@]} -gt 0 ] && [ -z "$last" ]; do
    n=${queue[0]}; queue=("${queue[@]:1}")
    for t in ${succ[$n]:-}; do
      [ -n "${member[$t]+x}" ] || continue
      if [ "$t" = "$m" ]; then last=$n; break; fi
      [ -z "${parent[$t]+x}" ] || continue
      parent[$t]=$n; queue+=("$t")
    done
  done
  chain=(); n=$last
  while [ "$n" != "$m" ]; do chain=("$n" ${chain[@]+"${chain[@]}"}); n=${parent[$n]}; done
  path=("$m" "${chain[@]}" "$m")
  echo "check-layers: modules include each other around a circle: $(IFS=' '; echo "${path[*]}" | sed 's/ / -> /g') (modules in it: $(printf '%s\n' "${!member[@]}" | LC_ALL=C sort | tr '\n' ' '| sed 's/ $//'))"
  for ((i = 0; i + 1 < ${#path[@]}; i++)); do
    echo "check-layers:   ${path[$i]} -> ${path[$((i + 1))]}: ${edge_why["${path[$i]} ${path[$((i + 1))]}"]}"
  done
  cycles=$((cycles + 1))
done

# Entries no longer needed (of the kinds checked in this run).
for e in "${!allowed[@]}"; do
  [ -z "${used[$e]+x}" ] || continue
  case ${e#* } in */*.h) ;; *) [ "$nobj" -gt 0 ] || continue ;; esac
  echo "check-layers: $(basename "$allow") lists \"$e\", which no longer occurs: remove it"
done

nedges=0; [ -z "${edge_why[*]+x}" ] || nedges=${#edge_why[@]}
echo "check-layers: $files files, $nobj objects, layers ${layers[*]}: $bad violations, $known allowed, $unknown unplaced; $nedges module edges, $cycles circles"
[ "$bad" -eq 0 ] && [ "$unknown" -eq 0 ] && [ "$cycles" -eq 0 ]
