#!/usr/bin/env bash
# check_exports.sh LIB HEADER - the shared library exports the public API
# and nothing else: every symbol defined in LIB's dynamic symbol table
# starts with amp_, and every function HEADER (include/ampc.h) declares
# with AMP_API is among them. Names the offenders.
set -euo pipefail
lib=$1
header=$2
nm=${NM:-nm}

exported=$("$nm" -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | LC_ALL=C sort -u)
declared=$(grep -o '^AMP_API [^;(]*(' "$header" | sed 's/($//; s/.*[ *]//' | LC_ALL=C sort -u)

fail=0
stray=$(grep -v '^amp_' <<< "$exported" || true)
if [ -n "$stray" ]; then
  echo "check_exports: $lib exports $(wc -l <<< "$stray") symbols without the amp_ prefix:"
  sed 's/^/  /' <<< "$stray"
  fail=1
fi
extra=$(LC_ALL=C comm -23 <(grep '^amp_' <<< "$exported" || true) <(echo "$declared"))
if [ -n "$extra" ]; then
  echo "check_exports: $lib exports amp_ symbols that ampc.h does not declare (internal: drop AMP_API / keep them hidden):"
  sed 's/^/  /' <<< "$extra"
  fail=1
fi
missing=$(LC_ALL=C comm -13 <(echo "$exported") <(echo "$declared"))
if [ -n "$missing" ]; then
  echo "check_exports: functions ampc.h declares that $lib does not export (AMP_API missing, or not built):"
  sed 's/^/  /' <<< "$missing"
  fail=1
fi
echo "check_exports: $(wc -l <<< "$exported") symbols exported, $(wc -l <<< "$declared") declared in $(basename "$header")"
[ "$fail" -eq 0 ] && echo "1 passed, 0 failed"
exit "$fail"
