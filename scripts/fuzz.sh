#!/usr/bin/env bash
# scripts/fuzz.sh - builds the libFuzzer targets (fuzz/, clang with
# ASan + UBSan, in build-fuzz) and runs each for FUZZ_SECONDS (default 600)
# from a copy of its seed corpus (fuzz/corpus/<name>; the copy, with what
# the fuzzer adds, is build-fuzz/run/<name>/corpus, so the repository's
# corpus is never touched). `make fuzz` runs it; CI with FUZZ_SECONDS=60.
#
#   FUZZ_SECONDS=N     seconds per target
#   FUZZ_TARGETS="a b" only these (names without fuzz_: checkpoint settings
#                      idx text plot args env tokens hf policy)
#   FUZZ_BUILD=DIR     build directory (default build-fuzz)
#   JOBS=N             build jobs (default: nproc)
#
# Prints one line per target: executions, exec/s, coverage (cov: edges,
# ft: features, from libFuzzer's last status line) and the result. A crash,
# leak, timeout (-timeout=10: one input running 10 s) or out-of-memory
# fails the run: the target's line names the reproducer file under
# build-fuzz/run/<name>/, and the exit status is 1. Reproduce with
#   build-fuzz/fuzz_<name> build-fuzz/run/<name>/crash-...   (fuzz/README.md)
set -uo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${FUZZ_SECONDS:-600}
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
ALL="checkpoint settings idx text plot args env tokens hf policy"
TARGETS=${FUZZ_TARGETS:-$ALL}

# Longest input per target (bytes): a few times the largest seed.
max_len() {
  case $1 in
    checkpoint | hf) echo 16384 ;;
    args) echo 2048 ;;
    tokens) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/deps.sh installs it)" >&2; exit 1; }
set -e
mkdir -p "$BUILD"
CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DAMPC_FUZZ=ON -DAMPC_CUDA=OFF -DAMPC_DNNL=OFF \
  -DAMPC_OPENMP=OFF >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target fuzzers
set +e

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_WAIT_POLICY=PASSIVE

failed=0
summary=()
for t in $TARGETS; do
  exe=$BUILD/fuzz_$t
  seeds=fuzz/corpus/$t
  if [ ! -x "$exe" ] || [ ! -d "$seeds" ]; then
    echo "fuzz: no target $t ($exe, $seeds)" >&2
    exit 2
  fi
  run=$BUILD/run/$t
  rm -rf "$run"
  mkdir -p "$run/corpus" "$run/tmp"
  cp "$seeds"/* "$run/corpus/"
  log=$run/fuzz.log
  echo "fuzz: $t for ${SECONDS_EACH}s (log $log)"
  start=$(date +%s)
  TMPDIR=$run/tmp "$exe" "$run/corpus" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$(max_len "$t")" -print_final_stats=1 -close_fd_mask=3 -artifact_prefix="$run/" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(find "$run/corpus" -type f | wc -l)
  repro=$(find "$run" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | sort)
  nrepro=$(printf '%s' "$repro" | grep -c . || true)
  line=$(printf '%-11s %9s execs in %4ss  %6s exec/s  cov %5s  ft %6s  corpus %5s  crashes %s' \
    "$t" "${execs:-?}" "$took" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$corp" "$nrepro")
  if [ "$rc" -ne 0 ] || [ "$nrepro" -ne 0 ]; then
    failed=1
    line="$line  FAILED (exit $rc)"
    [ -n "$repro" ] && line="$line; reproducer: $(echo $repro)"
    line="$line; log $log"
    grep -m1 -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|ALARM|==[0-9]+== ERROR)' "$log" | sed 's/^/    /'
  fi
  echo "$line"
  summary+=("$line")
done

echo
echo "fuzz: ${SECONDS_EACH}s per target"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED (reproduce: $BUILD/fuzz_<name> <reproducer>; see fuzz/README.md)"
  exit 1
fi
echo "fuzz: no crashes, leaks, timeouts or out-of-memory"
