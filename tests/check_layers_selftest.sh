#!/usr/bin/env bash
# check_layers_selftest.sh SCRIPT - scripts/check-layers.sh on small made-up
# trees: it passes a tree that keeps the rules, and fails, naming the
# files, on an include of a layer above, on a folder in no layer, and on
# modules that include each other (directly, around a longer circle,
# between the CPU GEMM module and the rest of the backend).
set -uo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# A tree of a few files: "path:include path ..." per line.
make_tree() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/src"
  local line file inc
  while read -r line; do
    [ -n "$line" ] || continue
    file=${line%%:*}
    mkdir -p "$tmp/t/src/$(dirname "$file")"
    : > "$tmp/t/src/$file"
    for inc in ${line#*:}; do echo "#include \"$inc\"" >> "$tmp/t/src/$file"; done
    echo "#include \"ampc.h\"" >> "$tmp/t/src/$file"
  done
}

# expect NAME PASS|FAIL [text the output must hold]
expect() {
  local name=$1 want=$2 text=${3:-} out rc
  out=$(bash "$script" "$tmp/t" 2>&1); rc=$?
  if { [ "$want" = PASS ] && [ $rc -ne 0 ]; } || { [ "$want" = FAIL ] && [ $rc -eq 0 ]; }; then
    echo "check_layers_selftest: $name: expected $want, got rc=$rc:"; echo "$out" | sed 's/^/  /'; fail=1
  elif [ -n "$text" ] && ! grep -qF -- "$text" <<< "$out"; then
    echo "check_layers_selftest: $name: output lacks \"$text\":"; echo "$out" | sed 's/^/  /'; fail=1
  else
    echo "check_layers_selftest: $name: ok"
  fi
}

make_tree <<'T'
base/base.h:
base/memory.c:base/base.h
backend/backend.h:base/base.h
backend/cpu/gemm/gemm.h:base/base.h backend/cpu/onednn/onednn.h
backend/cpu/gemm/dispatch.c:backend/cpu/gemm/gemm.h
backend/cpu/onednn/onednn.h:base/base.h
backend/cpu/linalg.c:backend/backend.h backend/cpu/gemm/gemm.h
ops/api.c:backend/backend.h base/base.h
T
expect "a tree that keeps the rules" PASS "0 circles"

make_tree <<'T'
base/base.h:ops/ops.h
ops/ops.h:base/base.h
T
expect "an include of a layer above" FAIL 'src/base/base.h (base) includes "ops/ops.h" (ops), a layer above its own'

make_tree <<'T'
base/base.h:
gadgets/g.c:base/base.h
T
expect "a folder in no layer" FAIL "folder src/gadgets is in no layer"

make_tree <<'T'
backend/backend.h:backend/cpu/gemm/gemm.h
backend/cpu/gemm/gemm.h:
backend/cpu/gemm/dispatch.c:backend/cpu/gemm/gemm.h backend/cpu/pointwise.h
backend/cpu/pointwise.h:
backend/cpu/linalg.c:backend/cpu/gemm/gemm.h
T
expect "the GEMM module and the rest of the backend include each other" FAIL \
  "backend/cpu/gemm -> backend: src/backend/cpu/gemm/dispatch.c includes \"backend/cpu/pointwise.h\""

make_tree <<'T'
backend/cpu/gemm/gemm.h:backend/cpu/onednn/onednn.h
backend/cpu/onednn/onednn.h:backend/cpu/x/x.h
backend/cpu/x/x.h:backend/cpu/gemm/gemm.h
T
expect "three modules around a circle" FAIL \
  "around a circle: backend/cpu/gemm -> backend/cpu/onednn -> backend/cpu/x -> backend/cpu/gemm"

make_tree <<'T'
backend/cpu/gemm/a.c:backend/cpu/gemm/b.h
backend/cpu/gemm/b.h:backend/cpu/gemm/a.h
backend/cpu/gemm/a.h:backend/cpu/gemm/b.h
T
expect "files of one module including each other" PASS

exit $fail
