#!/usr/bin/env bash
# The benchmark suite (`make bench`), ampc beside PyTorch on this machine in
# one run:
#   1. GEMM: bench_gemm (ampc's kernels and oneDNN against this CPU's
#      measured peaks; square n = 256 .. 4096 and the three models' own
#      products) and bench/torch_gemm.py (PyTorch's matmul on the same
#      sizes and shapes, timed the same way), joined into one table, 1 and
#      2 threads, bf16 and f32;
#   2. the grad scaler's overhead against memcpy (bench_scaler);
#   3. the training step of mlp, cnn and gpt in fp32 / bf16 / fp16 + grad
#      scaler, ampc (bench_ampc_step) and PyTorch (bench/torch_step.py)
#      default and tuned alternating, one process each per model: ampc
#      mlp, torch mlp, torch tuned mlp, ampc cnn, ..., for --rounds rounds
#      (3); PyTorch tuned is PyTorch's CPU performance tuning guide's
#      setting: jemalloc preloaded with MALLOC_CONF (below; else tcmalloc),
#      and without either allocator that side is left out and the run says
#      how to get jemalloc; each process warms up then times --steps steps
#      per precision, and the table gives the median of every timed step of
#      all rounds, the range of the rounds' medians, PyTorch's over ampc's,
#      the step's GFLOP (the op table's cost model) and its % of this
#      machine's peak (bench_gemm's peak loops, measured first), the
#      targets met or not, and, from the first round's ampc processes
#      (bench_ampc_step --breakdown), where ampc's step time goes by kind
#      of work (bench/step_report.py); slow cells (PyTorch's fp16 on a
#      CPU without AVX512-FP16 takes seconds a step) are time-boxed to
#      --cell-seconds per process (at least 1 warm-up and 1 timed step
#      still run), and a cell that has cost more than rounds x that is
#      left out of the later rounds; the table says how many steps ran;
#   4. the profiler's overhead on those steps (bench_ampc_step
#      --profile-overhead), and the anomaly check's on gpt's
#      (--anomaly-overhead: off and on against the plain step);
#   5. the under-load table: bench/under_load.sh (a busy loop pinned on
#      one core; ampc and PyTorch at 1 and 2 threads), when it is there;
#   6. data parallelism: bench/dist.sh (2 ranks x 1 thread against 1 rank
#      x 2 threads, bf16; bytes and the wait after backward per step).
#   7. generation: bench/generate.sh (`ampc generate`'s decode tokens/s
#      against the memory-bandwidth bound, both gpt sizes, fp32 / bf16, 1
#      and 2 threads; then the KV cache against a full forward per token).
# Prints the machine first (CPU, cores, the bf16 / AMX / fp16 flags,
# threads, PyTorch's version, the load average before and, at the end,
# after). Writes JSON lines to bench/results.jsonl and the tables to
# bench/results.md (copy a table into docs/benchmarks.md in place of the
# one it updates, with the machine it ran on), the GEMM JSON to
# bench/gemm.json and bench/torch_gemm.json.
#
#   bench/run.sh [BUILD_DIR] [--threads N] [--steps N] [--rounds N]
#                [--cell-seconds S] [--models mlp,cnn,gpt]
#                [--only gemm,scaler,step,profile,anomaly,load,dist,generate] [--quick]
#
# --threads: the step table's threads (default 2; the GEMM tables run 1 and
# 2). --steps: timed steps per process and cell (default 10, after 3
# warm-up steps). --cell-seconds: the time box per process and cell
# (default 10). --models: the step and profiler tables' models. --only:
# just the named sections. --quick: a smoke check of every section (one
# round, 1 warm-up + 2 steps, a 2 s time box, GEMMs up to n = 512 at one
# sample, the profiler on cnn only): a few minutes on an idle machine
# (PyTorch's fp16 steps dominate), figures not for the docs.
#
# PyTorch: the first of $AMPC_TORCH_PYTHON, python3 and .bench-venv/bin/python
# that imports torch; with none, the tables have ampc's columns only and
# this says how to get one (scripts/bench-deps.sh). OPENBLAS_CORETYPE and
# OMP_* in the environment are reported, not changed. PyTorch tuned's
# allocator: $AMPC_TUNED_MALLOC when set (a library to preload), else
# Debian's libjemalloc.so.2, else tcmalloc (libtcmalloc_minimal.so.4 /
# libtcmalloc.so.4); jemalloc runs with MALLOC_CONF=$tuned_conf (below).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build=build
threads=2
steps=10
rounds=3
cell_s=10
quick=0
warmup=3
models=mlp,cnn,gpt
only=gemm,scaler,step,profile,anomaly,load,dist,generate
usage() { sed -n '/^#   bench\/run.sh/,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
need() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then
    echo "bench/run.sh: $1 needs a value" >&2
    exit 2
  fi
}
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) need "$@"; threads=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --rounds) need "$@"; rounds=$2; shift 2 ;;
    --cell-seconds) need "$@"; cell_s=$2; shift 2 ;;
    --models) need "$@"; models=$2; shift 2 ;;
    --only) need "$@"; only=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) usage ;;
    -*) echo "bench/run.sh: unknown option $1" >&2; usage ;;
    *) build=$1; shift ;;
  esac
done
for v in "$threads" "$steps" "$rounds" "$cell_s"; do
  case "$v" in ''|*[!0-9]*|0) echo "bench/run.sh: --threads, --steps, --rounds and --cell-seconds take a positive integer (got '$v')" >&2; exit 2 ;; esac
done
case ",$models," in
  *[!a-z,]*|*,,*) echo "bench/run.sh: --models takes a list of mlp, cnn, gpt (got '$models')" >&2; exit 2 ;;
esac
for m in ${models//,/ }; do
  case "$m" in mlp|cnn|gpt) ;; *) echo "bench/run.sh: unknown model '$m' (mlp, cnn, gpt)" >&2; exit 2 ;; esac
done
if [ $quick = 1 ]; then
  steps=2 warmup=1 rounds=1 cell_s=2
fi
for b in bench_ampc_step bench_gemm bench_scaler; do
  if [ ! -x "$build/$b" ]; then
    echo "bench/run.sh: $build/$b is missing: build first (make build, or cmake --build $build)" >&2
    exit 1
  fi
done
section() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# Python for the tables (any python3), and one with torch for PyTorch's side.
torch_py=""
for cand in "${AMPC_TORCH_PYTHON:-}" python3 .bench-venv/bin/python; do
  [ -n "$cand" ] || continue
  if "$cand" -c 'import torch' >/dev/null 2>&1; then
    torch_py=$cand
    break
  fi
  [ "$cand" = "${AMPC_TORCH_PYTHON:-}" ] && echo "bench/run.sh: AMPC_TORCH_PYTHON=$cand cannot import torch; trying the others" >&2
done
py=python3
command -v python3 >/dev/null 2>&1 || py=$torch_py
if [ -z "$py" ]; then
  echo "bench/run.sh: needs python3 for its tables" >&2
  exit 1
fi

# PyTorch tuned (the PyTorch CPU performance tuning guide): an allocator
# preloaded, jemalloc with its decay off (freed pages stay with the process
# instead of going back to the OS and faulting in again next step)
tuned_conf=oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1
tuned_lib=${AMPC_TUNED_MALLOC:-}
if [ -z "$tuned_lib" ]; then
  for f in $(ldconfig -p 2>/dev/null | awk '/lib(jemalloc\.so\.2|tcmalloc_minimal\.so\.4|tcmalloc\.so\.4) / {print $NF}') \
           /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4; do
    [ -f "$f" ] && { tuned_lib=$f; break; }
  done
fi
if [ -n "$tuned_lib" ] && [ ! -f "$tuned_lib" ]; then
  echo "bench/run.sh: AMPC_TUNED_MALLOC=$tuned_lib is not a file" >&2
  exit 2
fi
tuned_env=()
if [ -n "$tuned_lib" ]; then
  tuned_env=(env "LD_PRELOAD=$tuned_lib")
  case "$tuned_lib" in *jemalloc*) tuned_env+=("MALLOC_CONF=$tuned_conf") ;; esac
fi

out=bench/results.jsonl
md=bench/results.md
steps_js=bench/steps.jsonl
: > "$out"
: > "$md"
say() { printf '%s\n' "$*" | tee -a "$md"; }
t_start=$(date +%s)

# ------------------------------------------------------------- machine
flag() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1" && echo yes || echo no; }
torch_v="none"
[ -n "$torch_py" ] && torch_v=$("$torch_py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
say "# ampc benchmarks"
say ""
say "$(date -u '+%Y-%m-%d %H:%M UTC'), ampc $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)'), gcc $(gcc -dumpfullversion 2>/dev/null || echo '?')."
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
    "avx512f $(flag avx512f), avx512_bf16 $(flag avx512_bf16), amx_bf16 $(flag amx_bf16)," \
    "avx512_fp16 $(flag avx512_fp16)."
say "Threads: $threads for the step table; the GEMM tables run 1 and 2."
if [ -n "$torch_py" ]; then
  say "PyTorch $torch_v ($torch_py)."
  if [ -n "$tuned_lib" ]; then
    say "PyTorch tuned: LD_PRELOAD=$tuned_lib${tuned_env[2]:+ ${tuned_env[2]}}; PyTorch default: glibc's malloc."
  else
    say "PyTorch tuned: no jemalloc or tcmalloc found (Debian: apt-get install libjemalloc2, or scripts/bench-deps.sh as root): the default column only."
  fi
else
  say "PyTorch: not found (AMPC_TORCH_PYTHON, python3, .bench-venv/bin/python): ampc's columns only."
  say "To get it: scripts/bench-deps.sh (a venv .bench-venv with torch from PyPI, about 5 GB), then make bench again."
fi
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  say "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is set (it can halve OpenBLAS's fp32 speed; PyTorch's wheel runs its GEMMs on MKL / oneDNN, not OpenBLAS); left as it is."
else
  say "OPENBLAS_CORETYPE is not set."
fi
omp_env=$(env | grep '^OMP_' | sort | tr '\n' ' ')
say "OpenMP environment: ${omp_env:-none set}."
say "Load average before: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine's other work slows either side; the step table interleaves them)."
[ $quick = 1 ] && say "--quick: a smoke check (1 round, 1 warm-up + 2 steps, small GEMMs, 1 sample), not figures for the docs."
say ""

# ---------------------------------------------------------------- GEMM
if section gemm; then
  echo "== GEMM: ampc (bench_gemm)"
  t0=$(date +%s)
  gemm_args=(--max-n 4096)
  # --quick: one sample per figure, squares up to 512; the model shapes stay
  [ $quick = 1 ] && gemm_args=(--reps 1 --max-n 512)
  "$build/bench_gemm" "${gemm_args[@]}" --json bench/gemm.json | tee bench/gemm.txt
  rc=${PIPESTATUS[0]}
  if [ "$rc" != 0 ]; then
    echo "bench/run.sh: bench_gemm failed ($rc)" >&2
  fi
  tg_args=(--json bench/torch_gemm.json)
  [ -s bench/gemm.json ] && tg_args+=(--shapes-json bench/gemm.json)
  [ $quick = 1 ] && tg_args+=(--sizes 512 --reps 1)
  rm -f bench/torch_gemm.json
  if [ -n "$torch_py" ]; then
    echo "== GEMM: PyTorch's matmul (bench/torch_gemm.py)"
    "$torch_py" bench/torch_gemm.py "${tg_args[@]}" || echo "bench/run.sh: bench/torch_gemm.py failed" >&2
  fi
  for f in bench/gemm.json bench/torch_gemm.json; do
    [ -s "$f" ] && "$py" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$f" >> "$out"
  done
  "$py" bench/report.py gemm bench/gemm.json bench/torch_gemm.json | tee -a "$md"
  say ""
  echo "   (GEMM: $(($(date +%s) - t0)) s)"
fi

# --------------------------------------------------------- grad scaler
if section scaler; then
  echo "== grad scaler"
  say "### Grad scaler (unscale + check + update against memcpy)"
  say ""
  say '```'
  "$build/bench_scaler" 64 --json bench/scaler.json | tee -a "$md"
  say '```'
  cat bench/scaler.json >> "$out"
  say ""
fi

# ------------------------------------------------------- training step
if section step; then
  echo "== training step: ampc and PyTorch alternating, $rounds round(s), $threads threads"
  t0=$(date +%s)
  : > "$steps_js"
  # the peaks the step is measured against, on the step's threads (1.6 s),
  # before and after the steps: each peak is the higher (other work on a
  # shared machine takes a core from the loops now and then)
  measure_peaks() {
    rm -f "$1"
    "$build/bench_gemm" --reps 1 --max-n 256 --no-shapes --json "$1" > /dev/null ||
      echo "bench/run.sh: bench_gemm (peaks) failed" >&2
    [ -s "$1" ] &&
      "$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({"bench": "peaks", "peak_gflops": d.get("peak_gflops"), "bf16_default": d.get("bf16_default")}))' "$1" >> "$out"
  }
  measure_peaks bench/step_peaks.json
  step_args=(--threads "$threads" --steps "$steps" --warmup "$warmup" --max-seconds "$cell_s")
  bd_steps=3
  [ $quick = 1 ] && bd_steps=1
  for r in $(seq 1 "$rounds"); do
    for m in ${models//,/ }; do
      sides=(ampc)
      [ -n "$torch_py" ] && sides+=(torch)
      [ -n "$torch_py" ] && [ -n "$tuned_lib" ] && sides+=(torch_tuned)
      for side in "${sides[@]}"; do
        # a cell whose rounds so far cost more than rounds x the time box
        # (a step of many seconds) is left out of the later rounds
        precs=$("$py" bench/report.py remaining "$steps_js" "$side" "$m" fp32,bf16,fp16 "$((rounds * cell_s))")
        if [ -z "$precs" ]; then
          echo "  round $r: $side $m: every precision has spent its time; skipped"
          continue
        fi
        case "$side" in
          ampc)
            bd=()
            [ "$r" = 1 ] && bd=(--breakdown "$bd_steps") # where the step goes: the first round's processes
            lines=$("$build/bench_ampc_step" "${step_args[@]}" "${bd[@]}" --models "$m" --precisions "$precs") ;;
          torch)
            lines=$("$torch_py" bench/torch_step.py "${step_args[@]}" --models "$m" --precisions "$precs") ;;
          torch_tuned)
            lines=$("${tuned_env[@]}" "$torch_py" bench/torch_step.py --setting tuned "${step_args[@]}" \
                      --models "$m" --precisions "$precs") ;;
        esac
        rc=$?
        [ $rc = 0 ] || echo "bench/run.sh: round $r, $side $m failed ($rc)" >&2
        printf '%s\n' "$lines" | grep '^{' | sed "s/^{/{\"round\": $r, /" >> "$steps_js"
        printf '%s\n' "$lines" | grep '^{' | "$py" bench/report.py progress "$r"
      done
    done
  done
  measure_peaks bench/step_peaks_after.json
  cat "$steps_js" >> "$out"
  "$py" bench/report.py steps "$steps_js" "$threads" bench/step_peaks.json bench/step_peaks_after.json | tee -a "$md"
  say ""
  echo "   (training step: $(($(date +%s) - t0)) s)"
fi

# ---------------------------------------------------- profiler overhead
if section profile; then
  echo "== profiler overhead"
  prof_models=$models
  [ $quick = 1 ] && prof_models=cnn
  prof_lines=$("$build/bench_ampc_step" --profile-overhead --threads "$threads" --steps "$steps" --models "$prof_models")
  printf '%s\n' "$prof_lines" | grep '^{' >> "$out"
  printf '%s\n' "$prof_lines" | grep '^{' | "$py" bench/report.py profile | tee -a "$md"
  say ""
fi

# ------------------------------------------------- anomaly check overhead
if section anomaly; then
  echo "== anomaly check overhead"
  an_lines=$("$build/bench_ampc_step" --anomaly-overhead --threads "$threads" --steps "$steps" --models gpt)
  printf '%s\n' "$an_lines" | grep '^{' >> "$out"
  printf '%s\n' "$an_lines" | grep '^{' | "$py" bench/report.py anomaly | tee -a "$md"
  say ""
fi

# ----------------------------------------------------------- under load
if section load; then
  if [ -x bench/under_load.sh ]; then
    echo "== under load (bench/under_load.sh)"
    say "### Under load (bench/under_load.sh: a busy loop pinned on one core)"
    say ""
    rm -f bench/under_load.json
    load_args=("$build" --models "$models" --json bench/under_load.json)
    [ $quick = 1 ] && load_args+=(--steps 2 --rounds 1)
    AMPC_TORCH_PYTHON="$torch_py" bench/under_load.sh "${load_args[@]}" 2>&1 | tee -a "$md"
    [ -s bench/under_load.json ] && cat bench/under_load.json >> "$out"
    say ""
  else
    say "Under load: bench/under_load.sh is not in this tree yet; skipped."
    say ""
  fi
fi

# ------------------------------------------------------ data parallelism
if section dist; then
  echo "== data parallelism (bench/dist.sh)"
  say "### Data parallelism (bench/dist.sh: 2 ranks x 1 thread against 1 rank x 2 threads, bf16)"
  dist_args=("$build" --models "$models" --json "$out")
  [ $quick = 1 ] && dist_args+=(--steps 2 --warmup 1 --rounds 1)
  bench/dist.sh "${dist_args[@]}" 2>&1 | grep -v '^{' | tee -a "$md"
  say ""
fi

# ------------------------------------------------------------ generation
if section generate; then
  echo "== generation (bench/generate.sh)"
  say "### Generation: decode against the memory-bandwidth bound (bench/generate.sh)"
  say ""
  gen_args=("$build")
  [ $quick = 1 ] && gen_args+=(--quick)
  bench/generate.sh "${gen_args[@]}" 2>&1 | tee -a "$md"
  say ""
fi

say "Load average after: $(cut -d' ' -f1-3 /proc/loadavg); the whole run took $(($(date +%s) - t_start)) s."
echo
echo "wrote $out and $md"
